"""The viewer benchmark on a small astronomy store: it answers every brush and tile through the
app, and its report states the targets and whether they were met."""

from __future__ import annotations

import json

from subzero_bench.viewer import TARGETS, run_viewer


def test_quick_viewer_bench_writes_results_and_report(tmp_path):
    doc = run_viewer(tmp_path / "out", brushes=2, tiles=2, quick=True, log=lambda line: None, clients=(1, 3),
                     load_brushes=1)
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert saved["bench"] == "viewer" and saved["quick"] and saved["cells"] == 400 * 4000
    assert set(saved["brush"]) == {"stars", "clean", "crmask_1", "exposure_1"}
    assert all(r["server_ms"]["n"] == 2 for r in saved["brush"].values())
    assert saved["tiles"]["uncached"]["n"] == saved["tiles"]["cached"]["n"] == 6
    assert saved["targets"] == TARGETS and set(doc["met"]) == {"brush", "brush_under_load", "tile_cached", "tile_uncached"}
    report = (tmp_path / "out" / "REPORT.md").read_text()
    assert "## Brush to highlights" in report and "target <= 150 ms" in report and "1e9-cell row" in report
    loaded = saved["under_load"]["400x4000"]["clients"]
    assert set(loaded) == {"1", "3"} and loaded["3"]["n"] == 3 and loaded["3"]["p95"] >= loaded["3"]["p50"] > 0
    assert "## Brushes under load" in report and "| 400x4000 (1.6e+06) | 3 | 3 |" in report
    assert not any(p.name.startswith("viewer-") for p in (tmp_path / "out").iterdir())  # its store is removed

"""The viewer benchmark on a small astronomy store: it answers every brush and tile through the
app, and its report states the targets and whether they were met."""

from __future__ import annotations

import json

from subzero_bench.viewer import TARGETS, parse_shape, run_viewer, star_boxes


def test_quick_viewer_bench_writes_results_and_report(tmp_path):
    doc = run_viewer(tmp_path / "out", brushes=2, tiles=2, quick=True, log=lambda line: None, clients=(1, 3),
                     load_brushes=1, workers=(2,))
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert saved["bench"] == "viewer" and saved["quick"] and saved["cells"] == 400 * 4000
    assert set(saved["brush"]) == {"stars", "clean", "crmask_1", "exposure_1"}
    assert all(r["server_ms"]["n"] == 2 for r in saved["brush"].values())
    assert saved["tiles"]["uncached"]["n"] == saved["tiles"]["cached"]["n"] == 6
    assert saved["targets"] == TARGETS and set(doc["met"]) == {"brush", "brush_under_load", "tile_cached", "tile_uncached"}
    report = (tmp_path / "out" / "REPORT.md").read_text()
    assert "## Brush to highlights" in report and "target <= 150 ms" in report and "## Store" in report
    store = saved["store"]
    assert store["bytes"] > 0 and {"exposure_1", "exposure_2", "flat", "stars"} <= set(store["stored"])
    assert store["recomputed"] and not set(store["stored"]) & set(store["recomputed"])  # the defaults keep only some
    assert len(store["stored"]) + len(store["recomputed"]) == 29 and saved["recompute_seconds"] >= 0
    assert saved["recomputed_overviews"] == ["crmask_1"]  # the tiled node the run did not store
    assert f"{len(store['stored'])} arrays stored" in report
    loaded = saved["under_load"]["400x4000 (2 workers)"]["clients"]
    assert set(loaded) == {"1", "3"} and loaded["3"]["n"] == 3 and loaded["3"]["p95"] >= loaded["3"]["p50"] > 0
    assert "## Brushes under load" in report and "| 400x4000 (2 workers) (1.6e+06) | 3 | 3 |" in report
    assert saved["under_load"]["400x4000 (2 workers)"]["idle_seconds"] >= 0 and "measured only once it is idle" in report
    assert not any(p.name.startswith("viewer-") for p in (tmp_path / "out").iterdir())  # its store is removed


def test_star_boxes_come_from_windows_of_the_labels(tmp_path):
    """Each box is centred on a labelled cell found in one small window of the label array
    (never the whole array in memory), inside the array."""
    import random

    import numpy as np
    import pytest

    from view_store import make_run

    run = make_run(tmp_path / "s")
    stars = np.asarray(run.output("stars"))
    boxes = star_boxes(run, 12, random.Random(5), side=4, window=8)
    h, w = stars.shape
    assert len(boxes) == 12
    for r0, r1, c0, c1 in boxes:
        assert 0 <= r0 < r1 == r0 + 4 <= h and 0 <= c0 < c1 == c0 + 4 <= w
        assert stars[r0:r1, c0:c1].any()
    assert parse_shape("800x125008") == (800, 125008)
    with pytest.raises(ValueError, match="HxW"):
        parse_shape("800x-3")

"""The viewer-at-scale benchmark on a small sky: it builds the store on Spark from Zarr inputs
once, measures brushes under load and tiles through ``subzero view``, and reports them."""

from __future__ import annotations

import json

import pytest

from subzero_bench.viewer_scale import build_sky_store, run_viewer_scale


@pytest.mark.slow  # two server starts and a Spark run: about 35 s
def test_viewer_scale_bench_builds_once_and_reports_brushes_and_tiles(tmp_path, spark):
    doc = run_viewer_scale(side=400, data=tmp_path / "data", out_dir=tmp_path / "out", clients=(1, 2), workers=(1,),
                           brushes=2, tiles=2, log=lambda line: None)
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert saved["bench"] == "viewer-scale" and saved["cells"] == 400 * 400 == doc["cells"]
    build = saved["build"]
    assert build["run_seconds"] > 0 and build["driver_python_rss"] > 0 and "raw" in saved["store"]["stored"]
    assert build_sky_store(400, tmp_path / "data", log=lambda line: None) == build  # kept: not built again
    loaded = saved["under_load"]["1"]["clients"]
    assert set(loaded) == {"1", "2"} and loaded["2"]["n"] == 4 and loaded["2"]["p95"] >= loaded["2"]["p50"] > 0
    tiles = saved["tiles"]
    assert tiles["uncached"]["all"]["n"] == tiles["cached"]["all"]["n"] == 6  # 2 per node: raw, stars, smooth
    report = (tmp_path / "out" / "REPORT.md").read_text()
    assert "## Brushes under load" in report and "| 1 |" in report and "## Tiles" in report
    assert f"{len(saved['store']['stored'])} arrays stored" in report

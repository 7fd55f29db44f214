"""The benchmark harness: the synthetic operator, the cell-pair baseline, checks and reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import subzero as sz
import subzero_bench as bench
from subzero.errors import WorkflowError
from subzero_bench import timing
from subzero_bench.cellpairs import CellPairs, expand_cell_pairs, write_cellpairs
from subzero_bench.configs import configuration, static_using
from subzero_bench.genomics import CONFIGS
from subzero_bench.harness import BenchError, check_same_cells
from subzero_bench.synthetic import SyntheticLineage
from subzero_bench.timing import best_of, dir_bytes
from subzero.pairs import FullPairs
from subzero.workflows import demo


@pytest.mark.parametrize("fanin,fanout", [(1, 1), (10, 1), (1, 10), (50, 100), (100, 50)])
def test_synthetic_pairs_have_the_requested_fanin_and_fanout(fanin, fanout):
    op = SyntheticLineage(fanin, fanout)
    out, ins = op.pairs((200, 200))
    n = op.n_pairs((200, 200))
    assert len(out) == n * fanout and len(ins) == n * fanin
    assert abs(len(out) - 0.1 * 200 * 200) <= fanout                 # 10% of the output cells
    assert len(np.unique(out, axis=0)) == len(out)                     # no out cell in two pairs
    per_pair = ins.reshape(n, fanin, 2)
    assert all(len(np.unique(p, axis=0)) == fanin for p in per_pair[:50])
    again = op.pairs((200, 200))
    assert np.array_equal(again[0], out) and np.array_equal(again[1], ins)


def test_synthetic_operator_rejects_bad_arguments():
    with pytest.raises(WorkflowError):
        SyntheticLineage(0, 1)
    with pytest.raises(WorkflowError, match="too small"):
        SyntheticLineage(100, 1, fraction=0.25).pairs((5, 5))


@pytest.mark.parametrize("fanin,fanout", [(1, 1), (20, 10)])
def test_synthetic_payload_reproduces_full_lineage(tmp_path, fanin, fanout):
    x = np.zeros((60, 60))
    op = SyntheticLineage(fanin, fanout)
    out, ins = op.pairs(x.shape)
    sample = np.arange(0, len(out), max(1, len(out) // 25))
    want = [np.unique(ins[(j // fanout) * fanin:(j // fanout + 1) * fanin], axis=0) for j in sample]
    for strategy in ("FullOne", "FullMany", "PayOne", "PayMany", "BlackBox"):
        wf = sz.Workflow("micro")
        wf.add(op, wf.input("x"), name="syn")
        run = wf.run({"x": x}, store=tmp_path / strategy, strategies={"syn": strategy}, executor="local")
        got = [run.backward("syn", [tuple(out[j])], to="x", using={"syn": strategy}) for j in sample]
        assert all(np.array_equal(a, b) for a, b in zip(got, want)), strategy
        stats = run.catalog.nodes["syn"].stats
        if strategy == "PayMany":                         # one region pair of fanout cells each
            assert stats.pairs["PayMany/backward"][:2] == (len(out) // fanout, len(out))
        if strategy == "PayOne":  # one entry per run of out cells sharing a payload (at most one per cell),
            # plus one per distinct payload of a tile (forward index) and a layout entry per tile
            keys, pairs = stats.keys["PayOne/backward"], stats.pairs["PayOne/backward"][0]
            assert pairs < keys <= len(out) + 2 * pairs
            if fanout > 1:  # a payload's cells lie in runs: fewer entries than cells
                assert keys < len(out)


@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=0, max_size=6))
def test_expand_cell_pairs_is_the_product_of_each_pair(sizes):
    out_ids, in_ids, out_ptr, in_ptr, want = [], [], [0], [0], set()
    for k, (a, b) in enumerate(sizes):
        outs, ins = [100 * k + j for j in range(a)], [1000 * k + j for j in range(b)]
        out_ids += outs
        in_ids += ins
        out_ptr.append(len(out_ids))
        in_ptr.append(len(in_ids))
        want |= {(o, i) for o in outs for i in ins}
    z = lambda v: np.asarray(v, np.int64)  # noqa: E731
    pairs = FullPairs(z(out_ids), z(out_ptr), (z(in_ids),), (z(in_ptr),))
    out, inn = expand_cell_pairs(pairs, 0)
    assert set(zip(out.tolist(), inn.tolist())) == want and len(out) == len(want)


def test_cellpairs_answer_like_the_run(tmp_path):
    wf, inputs = demo.build(quick=True)
    run = wf.run(inputs, store=tmp_path / "run", strategies={"crd_a": "CompOne", "crd_b": "FullOne"},
                 executor="local", tile_shape=16)
    rows = write_cellpairs(run, tmp_path / "cells")
    assert rows["merge.0"] == 48 * 64 and (tmp_path / "cells" / "blur.0.parquet").exists()
    cells = CellPairs(run, tmp_path / "cells")
    assert np.array_equal(cells.backward("column_total", [(5,)], "exposure_a"),
                          run.backward("column_total", [(5,)], to="exposure_a"))
    assert np.array_equal(cells.forward("exposure_b", [(3, 4), (40, 60)], "hits"),
                          run.forward("exposure_b", [(3, 4), (40, 60)], to="hits"))
    assert dir_bytes(tmp_path / "cells") > 0


def test_check_same_cells_names_the_difference():
    check_same_cells("q", {"a": np.array([[1, 2]]), "b": np.array([[1, 2]])})
    with pytest.raises(BenchError, match=r"query q: b returned 2 cells, a returned 1"):
        check_same_cells("q", {"a": np.array([[1, 2]]), "b": np.array([[1, 2], [3, 4]])})


def test_configurations_and_static_choice():
    wf, _ = demo.build(quick=True)
    pins = configuration(wf, {"crd_a": "FullOne", "crd_b": ["PayOne", "FullOne/forward"]})
    assert pins["merge"] == ["Map"] and pins["crd_b"] == ["PayOne", "FullOne/forward"]
    assert configuration(wf, {"crd_a": "BlackBox"}, builtin="BlackBox")["blur"] == ["BlackBox"]
    with pytest.raises(WorkflowError, match="lacks"):
        configuration(wf, {"nope": "FullOne"})
    stored = {"crd_b": ("PayOne/backward", "FullOne/forward"), "merge": ("Map",)}
    assert static_using(stored, "forward") == {"crd_b": "FullOne/forward", "merge": "Map"}
    assert static_using(stored, "backward")["crd_b"] == "PayOne/backward"


def test_best_of_returns_the_first_result_and_the_fastest_time():
    calls = []
    value, seconds = best_of(lambda: calls.append(1) or len(calls), repeat=3, budget=10.0)
    assert value == 1 and len(calls) == 3 and seconds >= 0


def test_micro_bench_writes_results_report_and_figures(tmp_path):
    assert bench.main("micro", quick=True, out_dir=str(tmp_path), size=60, executor="local",
                      log=lambda line: None) == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["bench"] == "micro" and doc["quick"] is True
    assert {"machine", "date", "command", "seconds", "setup", "figures", "raw"} <= set(doc)
    for key in ("runtime_overhead", "disk", "backward_query", "forward_query", "backward_speedup"):
        fig = doc["figures"][key]
        assert {"unit", "baseline", "values"} <= set(fig)
        assert "FullOne/forward" in fig["values"] or "FullOne" in fig["values"]
    assert doc["figures"]["backward_speedup"]["baseline"] == "BlackBox"
    assert doc["setup"]["fanin"] == [1, 100] and doc["setup"]["size"] == [60, 60]
    report = (tmp_path / "REPORT.md").read_text()
    assert "Microbenchmark" in report and "fig8_overhead.png" in report
    assert {p.name for p in tmp_path.glob("*.png")} >= {"fig8_overhead.png", "fig9_queries.png"}
    assert not list(tmp_path.glob("stores-*"))                       # the runs' stores are removed
    summary = bench.write_summary([tmp_path], tmp_path / "RESULTS.md")
    assert "Microbenchmark" in summary.read_text()


def test_genomics_bench_sweeps_disk_budgets_with_the_optimizer(tmp_path):
    doc = bench.run_bench("genomics", True, tmp_path, size=1, executor="local", use_optimizer=True,
                          log=lambda line: None)
    sweep = doc["figures"]["sweep"]["values"]
    assert list(sweep) == [f"{mb} MB" for mb in (1, 5, 10, 20, 50, 100)]
    assert all(set(v["query_seconds"]) == {"BQ0", "BQ1", "FQ0", "FQ1"} for v in sweep.values())
    assert all(v["disk_mb"] <= int(b.split()[0]) for b, v in sweep.items())
    assert {"static_seconds", "dynamic_seconds", "disk", "runtime"} <= set(doc["figures"])
    assert "fig7_sweep.png" in (tmp_path / "REPORT.md").read_text()
    # real data beside the synthetic inputs, and the perturbation oracle on both: no miss
    real = doc["real"]
    assert real["setup"]["inputs"]["train"] == [99, 81] and set(real["figures"]["disk"]["values"]) == set(CONFIGS)
    assert doc["oracle"]["misses"] == 0 and real["oracle"]["misses"] == 0 and real["oracle"]["cells"] > 0
    report = (tmp_path / "REPORT.md").read_text()
    assert "## Real data: GSE7390" in report and "## Perturbation oracle" in report


def test_unknown_bench_is_an_error(tmp_path):
    with pytest.raises(sz.SubZeroError, match="unknown benchmark"):
        bench.main("nope", out_dir=str(tmp_path))
    with pytest.raises(sz.SubZeroError, match="unknown benchmark"):
        bench.run_command("nope", out_dir=str(tmp_path))


def test_docstring_examples():
    import doctest

    attempted = 0
    for module in (bench, timing):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.failed == 0, module.__name__
        attempted += result.attempted
    assert attempted >= 4


def test_python_m_subzero_bench_offers_every_command_without_being_installed(tmp_path):
    """``python -m subzero_bench`` in a new process that finds the benchmarks only through the
    PYTHONPATH the benches give their children (the subzero tree, then benchmarks/)."""
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=timing.child_pythonpath(root))
    done = subprocess.run([sys.executable, "-m", "subzero_bench", "--help"], capture_output=True, text=True, env=env,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert timing.BENCH_HOME == root / "benchmarks"
    for name in bench.COMMANDS + ("report", "summary"):
        assert name in done.stdout, name
    bad = subprocess.run([sys.executable, "-m", "subzero_bench", "nope"], capture_output=True, text=True, env=env,
                         cwd=tmp_path)
    assert bad.returncode == 2 and "invalid choice: 'nope'" in bad.stderr


def test_scale_bench_measures_each_configuration_in_its_own_process(tmp_path):
    from subzero_bench.report import render
    from subzero_bench.scale import run_scale

    body = run_scale(False, tmp_path, sides=[64, 96], configs=("numpy", "local", "local+lineage"), log=lambda s: None)
    raw = body["raw"]
    for side in (64, 96):
        assert raw[f"numpy@{side}"]["wall"] > 0
        local, lineage = raw[f"local@{side}"], raw[f"local+lineage@{side}"]
        assert local["driver_rss"] > 0 and local["array_bytes"] > 0 and local["lineage_bytes"] == 0
        assert lineage["lineage_bytes"] > 0  # Label stored CompOne
        assert local["backward_cells"] == lineage["backward_cells"] > 0  # same answer with and without lineage
        assert local["forward_cells"] == lineage["forward_cells"] > 0
    assert set(raw["codecs"]) == {"auto", "none", "lz4", "zstd"} and all("wall" in r for r in raw["codecs"].values())
    doc = {"bench": "scale", "quick": False, "date": "now", "command": "test", "seconds": 1.0,
           "machine": {"cpu": "x", "nproc": 2, "memory_gb": 1, "os": "linux", "python": "3"}} | body
    text = render(doc, ["fig_scale.png"])
    assert "| 4.1e+03 | local+lineage |" in text and "Chunk compressors" in text


def test_scale_bench_optimizer_config_records_its_plan_rounds_and_load(tmp_path, monkeypatch):
    from subzero_bench.report import render
    from subzero_bench.scale import RUNTIME_BUDGET, query_cell, run_scale

    monkeypatch.setenv("SUBZERO_SCALE_CONFIGS", "local,local+optimizer")
    monkeypatch.setenv("SUBZERO_SCALE_SIDES", "96")
    monkeypatch.setenv("SUBZERO_SCALE_ROUNDS", "2")
    monkeypatch.setenv("SUBZERO_SCALE_DATA", str(tmp_path / "inputs"))
    body = run_scale(False, tmp_path, log=lambda s: None)
    raw = body["raw"]
    assert body["setup"]["configs"] == ["local", "local+optimizer"] and body["setup"]["sides"] == [96]
    assert "codecs" not in raw or body["setup"]["codec_cells"] == 96 * 96
    base, opt = raw["local@96"], raw["local+optimizer@96"]
    assert len(base["rounds"]) == len(opt["rounds"]) == 2 and len(raw["load_before"]) == 3
    assert opt["wall"] == min(r["wall"] for r in opt["rounds"]) and len(opt["load_before"]) == 3
    assert base["optimizer"] is None and base["plan"]["label"] == ["BlackBox"]
    assert opt["optimizer"]["calibration_seconds"] > 0 and opt["optimizer"]["one_pass"]
    assert 0 < opt["driver_rss_run"] <= opt["driver_rss"] and 0 < base["driver_python_rss_run"] <= base["driver_rss"]
    assert set(opt["plan"]) == {"sub", "blur", "mask", "label"}
    # the queried cell comes from the inputs, is labelled, and both runs answer alike
    cell = query_cell({"x": str(tmp_path / "inputs" / "x-96.zarr"), "dark": str(tmp_path / "inputs" / "dark-96.zarr")},
                      96)
    assert opt["query_cell"] == base["query_cell"] == list(cell) and opt["query_labelled"]
    assert opt["backward_cells"] == base["backward_cells"] > 0 and opt["forward_cells"] == base["forward_cells"] > 0
    ratio = body["figures"]["wall_vs_no_lineage"]["values"]["local+optimizer"][str(96 * 96)]
    assert ratio == opt["wall"] / base["wall"]
    doc = {"bench": "scale", "quick": False, "date": "now", "command": "test", "seconds": 1.0,
           "machine": {"cpu": "x", "nproc": 2, "memory_gb": 1, "os": "linux", "python": "3"}} | body
    text = render(doc, [])
    assert "The optimizer's runs" in text and "label: " in text and f"max_runtime={RUNTIME_BUDGET!r}" in text
    assert "Load average" in text


def test_stats_bench_checks_its_table_and_counts_against_single_queries(tmp_path):
    assert bench.main("stats", quick=True, out_dir=str(tmp_path), size=160, executor="local",
                      log=lambda line: None) == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    raw = doc["raw"]
    assert doc["bench"] == "stats" and raw["cells"] == 160 * 160 and raw["objects"] >= 10
    assert raw["table_mismatches"] == 0 and raw["count_mismatches"] == 0 and raw["count_mask_agrees"]
    assert set(doc["figures"]["count"]["values"]) == {"forward query", "count"}
    report = (tmp_path / "REPORT.md").read_text()
    assert "Lineage statistics" in report and "one backward query per object" in report
    assert not list(tmp_path.glob("stores-*"))


def test_stats_sky_is_the_same_sky_whole_in_tiles_and_in_zarr(tmp_path):
    import zarr
    from subzero_bench.stats import SPACING, sky, sky_tile, sky_zarr

    side = 2 * SPACING * 5 + 17  # a partial grid row and column at the far edges
    raw, hits = sky(side)
    assert raw.dtype == np.float32 and hits.any() and raw.max() > raw.mean() + 100  # stars and hits present
    part, part_hits = sky_tile(side, (13, 91), (7, side))  # edges off the grid
    assert np.array_equal(part, raw[13:91, 7:]) and np.array_equal(part_hits, hits[13:91, 7:])
    paths = sky_zarr(side, tmp_path, tile=60, log=lambda line: None)
    assert np.array_equal(zarr.open_array(paths["raw"], mode="r")[:], raw)
    assert np.array_equal(zarr.open_array(paths["hits"], mode="r")[:], hits)


def test_stats_bench_measures_a_built_store_in_a_fresh_process(tmp_path, monkeypatch):
    """``SUBZERO_STATS_STORE``: the table of a store built from Zarr inputs, read-only, in a fresh
    process (the local executor here; Spark at 1e9), with the driver's peak memory."""
    import zarr
    from subzero_bench.stats import run_workflow, sky_zarr

    paths = sky_zarr(208, tmp_path / "sky", tile=70, log=lambda line: None)
    run = run_workflow(zarr.open_array(paths["raw"], mode="r")[:], tmp_path / "store")
    expected = run.lineage_table("stars", over="raw", flags=zarr.open_array(paths["hits"], mode="r")[:], values="raw")
    monkeypatch.setenv("SUBZERO_STATS_STORE", str(tmp_path / "store"))
    monkeypatch.setenv("SUBZERO_STATS_FLAGS", paths["hits"])
    monkeypatch.setenv("SUBZERO_STATS_EXECUTOR", "local")
    assert bench.main("stats", quick=True, out_dir=str(tmp_path / "out"), log=lambda line: None) == 0
    got = json.loads((tmp_path / "out" / "results.json").read_text())["raw"]["store_table"]
    assert got["objects"] == len(expected) and got["cells"] == 208 * 208 and got["executor"] == "local"
    assert got["lineage_cells_total"] == int(np.sum(expected["n_lineage"]))
    assert got["objects_flagged"] == int(np.sum(expected["n_flagged"] > 0)) and got["driver_rss"] > 0
    assert got["sample"] > 0 and got["sample_mismatches"] == 0
    count = json.loads((tmp_path / "out" / "results.json").read_text())["raw"]["store_count"]
    expected_count = run.contamination_count("raw", zarr.open_array(paths["hits"], mode="r")[:], "stars")
    assert count["contaminated_cells"] == int(np.count_nonzero(expected_count))
    assert count["count_total"] == int(expected_count.sum()) and count["count_max"] == int(expected_count.max())
    assert count["sample"] > 0 and count["sample_mismatches"] == 0 and count["driver_rss"] > 0
    report = (tmp_path / "out" / "REPORT.md").read_text()
    assert "driver peak RSS (GB)" in report and "Contamination count of the hits" in report


@pytest.mark.slow  # a demo run and a round of queries, each in a new process: about 25 s
def test_coldquery_bench_times_new_processes_against_import_numpy(tmp_path, monkeypatch):
    monkeypatch.setenv("SUBZERO_COLDQUERY_BASELINE", str(Path(__file__).resolve().parents[1]))  # itself: same answer
    assert bench.main("coldquery", quick=True, out_dir=str(tmp_path), size=1, executor="local",
                      log=lambda line: None) == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    rows = doc["figures"]["cold_query"]["values"]
    assert doc["bench"] == "coldquery" and doc["raw"]["same_answer"] == {"shards": True, "auto": True}
    assert {"import numpy", "shards: before", "shards: after", "auto: after"} <= set(rows)
    assert rows["import numpy"]["x_numpy"] == 1.0 and rows["shards: after"]["median"] > 0
    assert rows["shards: after"]["after_over_before"] > 0 and doc["setup"]["cells"]["shards"] > 0
    assert "fsspec" not in doc["raw"]["heavy_modules_loaded"] and "rtree" in doc["raw"]["heavy_modules_loaded"]
    report = (tmp_path / "REPORT.md").read_text()
    assert "Cold query" in report and "| shards: after |" in report and "Load (uptime" in report


def test_dataplane_report_splits_each_run_by_stage():
    """The data-plane report's breakdown: inputs the driver stores, each stage's wall beside its
    tasks' work over 2 cores (a fused stage sums its nodes'), and the driver between stages."""
    from subzero_bench.dataplane import render_dataplane

    def run(wall, stages, nodes):
        return {"wall": wall, "load": 1.0, "stages": stages, "label_checksum": [1, 1],
                "nodes": {n: {"wall": 1.0, "op": op, "write": wr, "tiles": 4} for n, (op, wr) in nodes.items()}}

    after = run(5.0, [("x", 0.0, 0.5), ("dark", 0.5, 1.0), ("sub+blur+mask", 1.0, 3.0), ("label", 3.5, 4.5)],
                {"sub": (1.0, 0.5), "blur": (1.0, 0.5), "mask": (0.5, 0.5), "label": (1.0, 0.6)})
    doc = {"setup": {"cells": 16, "rounds": 1, "baseline": None, "ours": "here", "workflow": "w"},
           "figures": {"seconds": {"values": {"numpy": 1.0, "numpy+save": 3.0, "spark: after": 5.0}}},
           "raw": {"runs": {"numpy": [{"wall": 1.0, "load": 1.0}], "numpy+save": [{"wall": 3.0, "load": 1.0}],
                            "spark: after": [after]}}}
    text = "\n".join(render_dataplane(doc))
    assert "| spark: after | 1.00 | sub+blur+mask 2.00 (2.00); label 1.00 (0.80) | 1.00 |" in text
    assert "spark: after / numpy+save <= 1.0: 1.67, NOT met" in text

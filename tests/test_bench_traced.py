"""``subzero bench traced``: one tiny case, one round, local, the current tree as both the baseline and
the candidate; and the plain-numpy astronomy function is the traced workflow's pipeline."""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import numpy as np
import pytest

import subzero_bench as bench
from subzero_bench import traced
from subzero.workflows import astronomy_numpy
from subzero.workflows.astronomy import exposures

ROOT = Path(__file__).resolve().parents[1]


def test_traced_bench_measures_a_case_on_both_trees_in_fresh_processes(tmp_path, monkeypatch):
    monkeypatch.setenv("SUBZERO_TRACED_CASES", "ndvi")
    monkeypatch.setenv("SUBZERO_TRACED_BASELINE", str(ROOT))
    monkeypatch.setenv("SUBZERO_TRACED_TIMEOUT", "120")
    lines: list[str] = []
    bench.run_bench("traced", True, tmp_path / "out", size="tiny", executor="local", log=lines.append)
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert doc["setup"]["versions"] == ["after", "before"] and doc["setup"]["executors"] == ["local"]
    rows = doc["figures"]["traced"]["values"]
    assert [(r["case"], r["version"], r["failed"]) for r in rows] == [("ndvi", "after", 0), ("ndvi", "before", 0)]
    for row in rows:
        assert row["values_equal"] and row["nodes"] >= 1 and row["query_cells"] >= 1
        assert row["x_numpy"] == row["traced_seconds"] / row["numpy_seconds"] > 0
        assert row["store_x_input"] > 0 and row["query_seconds"] > 0 and len(row["load"]) == 1
    runs = doc["raw"]["runs"]["ndvi"]["tiny"]["local"]["after"]
    assert runs[0]["load_start"] and runs[0]["cells"] == sum(np.prod(s) for s in runs[0]["shapes"].values())
    summary = doc["figures"]["summary"]["values"]
    assert {s["version"] for s in summary} == {"after", "before"}
    report = (tmp_path / "out" / "REPORT.md").read_text()
    assert "| ndvi | tiny |" in report and "<= 1.5x" in report and "before = " in report
    assert any(line.startswith("traced round 1 ndvi tiny local before") for line in lines)


def test_plain_astronomy_is_the_traced_workflow_in_numpy(tmp_path):
    inputs = exposures(traced.ASTRONOMY_SHAPES["tiny"])
    wf = astronomy_numpy.astronomy.trace(inputs)
    run = wf.run(inputs, store=str(tmp_path / "s"), executor="local")
    expected = traced.astronomy_plain(**inputs)["stars"]
    assert expected.any() and np.array_equal(np.asarray(run.output("stars")), expected)


@pytest.mark.parametrize("var, value, named", [("SUBZERO_TRACED_CASES", "nope", "astronomy_numpy"),
                                                ("SUBZERO_TRACED_SIZES", "huge", "large"),
                                                ("SUBZERO_TRACED_EXECUTORS", "dask", "spark"),
                                                ("SUBZERO_TRACED_BASELINE", "/nonexistent", "git worktree")])
def test_a_bad_knob_is_refused_saying_what_it_takes(tmp_path, monkeypatch, var, value, named):
    from subzero.errors import WorkflowError

    monkeypatch.setenv(var, value)
    with pytest.raises(WorkflowError) as caught:
        traced.run_traced(True, tmp_path)
    assert value in str(caught.value) and named in str(caught.value)


def test_docstring_examples():
    result = doctest.testmod(traced)
    assert result.failed == 0 and result.attempted >= 1

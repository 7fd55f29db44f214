"""sz.udf: functions with declared, checked or inferred lineage inside traced workflows."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

import subzero as sz
from subzero.errors import WorkflowError
from subzero.oracle import check_workflow

RNG = np.random.default_rng(5)
X = np.round(RNG.normal(size=(10, 12)), 3)


def test_a_udf_is_the_plain_function_outside_a_trace():
    double = sz.udf(lambda x: x * 2, lineage="elementwise")
    np.testing.assert_array_equal(double(X), X * 2)


@pytest.mark.parametrize("lineage, fn, cells", [
    ("elementwise", np.tanh, 1),
    (sz.Window(radius=2), lambda x: ndimage.median_filter(x, 5, mode="nearest"), 25),
    (sz.Lines(axis=1), lambda x: np.cumsum(x, axis=1), 12),
    ("all", lambda x: x - np.median(x), 120),
])
def test_declared_lineage_is_stored_and_answers_queries(tmp_path, lineage, fn, cells):
    step = sz.udf(fn, lineage=lineage)

    @sz.workflow
    def f(x):
        return {"y": step(x) + 1}

    run = f.run({"x": X}, store=tmp_path / "r", executor="local")
    np.testing.assert_allclose(np.asarray(run.output("y")), fn(X) + 1)
    assert len(run.backward("y", [(5, 6)], to="x")) == cells
    report = check_workflow(run, f.trace({"x": X}), {"x": X}, cells=8, backward=4)
    assert report.ok, str(report)


def test_explicit_mapping_functions():
    shift = sz.udf(lambda x: np.roll(x, 1, axis=0), map_b=lambda c, i: (c + [-1, 0]) % [10, 12],
                   map_f=lambda c, i: (c + [1, 0]) % [10, 12])
    assert sz.check_lineage(shift, X).ok
    wrong = sz.udf(lambda x: np.roll(x, 1, axis=0), map_b=lambda c, i: c, map_f=lambda c, i: c)
    report = sz.check_lineage(wrong, X)
    assert not report.ok and report.misses


def test_check_lineage_reports_a_window_too_small():
    report = sz.check_lineage(sz.udf(lambda x: ndimage.median_filter(x, 5), lineage=sz.Window(1)), X)
    assert not report.ok and report.misses[0].direction in ("forward", "backward")
    assert sz.check_lineage(sz.udf(lambda x: ndimage.median_filter(x, 5), lineage=sz.Window(2)), X).ok


def test_infer_finds_the_smallest_pattern_and_labels_it(tmp_path):
    smooth = sz.udf(lambda x: ndimage.gaussian_filter(x, 1.0, mode="nearest"), lineage="infer")

    @sz.workflow
    def f(x):
        return {"s": smooth(x), "c": sz.udf(lambda v: np.cumsum(v, axis=0), lineage="infer")(x),
                "t": sz.udf(np.sin, lineage="infer")(x)}

    wf = f.trace({"x": X})
    params = {n.name: n.operator.params() for n in wf.nodes if not n.is_input}
    assert smooth.inferred == sz.Window(4)
    assert {p["lineage"] for p in params.values()} == {"window(radius=4)", "lines(axis=0)", "elementwise"}
    assert all(p["lineage_source"] == "inferred" for p in params.values())
    run = f.run({"x": X}, store=tmp_path / "r", executor="local")
    assert check_workflow(run, wf, {"x": X}, cells=8, backward=4).ok


def test_infer_refuses_when_no_pattern_fits():
    centred = sz.udf(lambda x: x - x.mean(), lineage="infer", sample=[X])
    with pytest.raises(WorkflowError, match="found no pattern"):
        centred.operator()


@pytest.mark.parametrize("kwargs, fragment", [
    ({}, "declare the lineage"),
    ({"lineage": "rows"}, "unknown lineage"),
    ({"map_b": lambda c, i: c}, "give both map_b and map_f"),
    ({"lineage": "all", "map_b": lambda c, i: c, "map_f": lambda c, i: c}, "not both"),
])
def test_bad_declarations_are_refused(kwargs, fragment):
    with pytest.raises(WorkflowError, match=fragment):
        sz.udf(np.sin, **kwargs)


def test_info_and_explain_say_the_lineage_was_inferred(tmp_path, capsys):
    from subzero.cli import main

    despike = sz.udf(lambda x: ndimage.median_filter(x, 3, mode="nearest"), lineage="infer", name="despike")

    @sz.workflow
    def f(x):
        return {"clean": despike(x) - 1.0}

    f.run({"x": X}, store=tmp_path / "r", executor="local")
    assert main(["info", str(tmp_path / "r")]) == 0
    assert "UdfWindow (lineage inferred: window(radius=1))" in capsys.readouterr().out
    assert main(["explain", str(tmp_path / "r")]) == 0
    assert "despike (UdfWindow, lineage inferred: window(radius=1)" in capsys.readouterr().out

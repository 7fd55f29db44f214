"""Coarse steps: calls without a rule, and arrays entering after a leak, run on values with labelled all-to-all lineage."""

from __future__ import annotations

import pickle
import types

import numpy as np
import pytest

import subzero as sz
from subzero.oracle import check_workflow, evaluate_workflow
from subzero.trace import UnsupportedCallError

RNG = np.random.default_rng(11)
X = np.round(RNG.normal(size=(8, 5)), 3)


def test_a_call_without_a_rule_is_one_node_per_array_it_returns(tmp_path):
    @sz.workflow
    def f(x):
        coef, residuals, rank, sv, rcond = np.polyfit(np.arange(x.shape[0]), x, 1, full=True)
        return {"coef": coef, "sv": sv}

    run = f.run({"x": X}, store=tmp_path / "run", executor="local")
    full = np.polyfit(np.arange(X.shape[0]), X, 1, full=True)
    np.testing.assert_allclose(np.asarray(run.output("coef")), full[0])
    np.testing.assert_allclose(np.asarray(run.output("sv")), full[3])
    assert run.backward("coef", [(0, 0)], to="x").shape == (X.size, 2)  # all-to-all over what it read
    report = f.report({"x": X})
    assert set(report.coarse) >= {"coef", "sv"} and "np.polyfit" in report.coarse["coef"]
    assert "test_coarse.py:" in report.coarse["coef"]  # the user's line
    assert check_workflow(run, f.trace({"x": X}), {"x": X}, cells=5, backward=3).ok


def test_from_shapes_alone_a_call_without_a_rule_is_refused_with_the_fix():
    @sz.workflow
    def f(x):
        return np.polyfit(np.arange(x.shape[0]), x, 1)

    with pytest.raises(UnsupportedCallError, match=r"np.polyfit.*sz.udf"):
        f.trace({"x": types.SimpleNamespace(shape=X.shape, dtype=X.dtype)})


def test_arrays_entering_after_a_leak_depend_on_what_leaked(tmp_path):
    from scipy import ndimage

    @sz.workflow
    def f(x, y):
        distance = ndimage.distance_transform_edt(x > 0)  # compiled code reads x's values
        return {"out": distance * 2 + y}

    inputs = {"x": X, "y": X * 0 + 1}
    run = f.run(inputs, store=tmp_path / "run", executor="local")
    np.testing.assert_allclose(np.asarray(run.output("out")), ndimage.distance_transform_edt(X > 0) * 2 + 1)
    assert len(run.backward("out", [(0, 0)], to="x")) == X.size  # coarse over the leaked array
    assert run.backward("out", [(0, 0)], to="y").tolist() == [[0, 0]]  # y never left: exact
    report = f.report(inputs)
    assert any(e.kind == "leak" for e in report.events) and not report.exact


def test_an_array_entering_after_a_leak_is_stored_once_when_its_output_is(tmp_path):
    # its step holds the values it had when traced; with its output array stored, the saved
    # operator does not hold them again: a reopened run's operator reads them from the array
    from scipy import ndimage

    @sz.workflow
    def f(x):
        return ndimage.distance_transform_edt(x > 0)  # compiled code reads x's values: what it returns entered after

    x = np.random.default_rng(5).normal(size=(256, 256))
    expected = ndimage.distance_transform_edt(x > 0)
    path = tmp_path / "run"
    f.run({"x": x}, store=path, executor="local").wait()
    saved = {p.stem: p.stat().st_size for p in (path / "operators").glob("*.pkl")}
    assert saved and max(saved.values()) < expected.nbytes // 20, saved
    opened = sz.open_run(path)
    name = "out"
    np.testing.assert_array_equal(np.asarray(opened.output(name)), expected)
    op = opened.workflow.node(name).operator
    np.testing.assert_array_equal(np.asarray(op.run(None, x)).reshape(expected.shape), expected)
    assert len(opened.backward(name, [(3, 4)], to="x")) == x.size  # still coarse over the leaked array
    shipped = pickle.loads(pickle.dumps(sz.open_run(path).workflow.node(name).operator))  # to a Spark task
    np.testing.assert_array_equal(np.asarray(shipped.run(None, x)).reshape(expected.shape), expected)


def test_counts_and_sets_are_all_to_all_and_not_coarse():
    @sz.workflow
    def f(x):
        labels = (x > 0).astype(np.int64) + (x > 1)
        values, counts = np.unique(labels, return_counts=True)
        return {"counts": counts, "bins": np.bincount(labels.ravel())}

    wf = f.trace({"x": X})
    expected = np.unique(((X > 0).astype(np.int64) + (X > 1)), return_counts=True)[1]
    np.testing.assert_array_equal(evaluate_workflow(wf, {"x": X})["counts"], expected)
    assert f.report({"x": X}).exact


def test_an_array_a_library_writes_into_after_it_entered_keeps_the_values_it_had(tmp_path):
    # a library makes `output = np.arange(...)` (a library's array: numpy values), holds it under a
    # second name and adds traced values into it in place: the array enters as a constant of the
    # values it has then, the first add leaks, and what it holds after each later write is not what
    # the steps read
    import os
    import sysconfig

    library = types.ModuleType("a_writing_library")
    exec(compile("import numpy as np\n"
                 "def edges(x):\n"
                 "    output = np.arange(x.size, dtype=float).reshape(x.shape)\n"
                 "    held = output\n"
                 "    output += x * x\n"
                 "    output += x\n"
                 "    return output, held\n",
                 os.path.join(sysconfig.get_paths()["purelib"], "a_writing_library.py"), "exec"), library.__dict__)

    @sz.workflow
    def f(image):
        out, held = library.edges(image)
        return {"out": out, "held": held + 0.0}

    image = np.random.default_rng(2).normal(size=(40, 30))
    run = f.run({"image": image}, store=tmp_path / "run", executor="local", keep="all")
    start = np.arange(image.size, dtype=float).reshape(image.shape)
    assert "constant" in {n.name for n in run.workflow.nodes}
    np.testing.assert_array_equal(np.asarray(run.output("constant")), start)  # as it entered
    np.testing.assert_allclose(np.asarray(run.output("add")), start + image * image)
    for key, value in zip(("out", "held"), library.edges(image)):
        np.testing.assert_allclose(np.asarray(run.output(key)), value, err_msg=key)

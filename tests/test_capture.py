"""numpy's array-creating and converting functions inside a trace."""

from __future__ import annotations

import numpy as np

import subzero as sz
from subzero.oracle import evaluate_workflow

X = np.arange(12.0).reshape(3, 4)


def test_arrays_the_code_writes_down_take_traced_rows_with_exact_lineage(tmp_path):
    @sz.workflow
    def f(x):
        out = np.zeros((x.shape[0], 2))
        for i in range(x.shape[0]):
            out[i, :] = x[i, 1:3] * 2
        return out

    run = f.run({"x": X}, store=tmp_path / "run", executor="local")
    np.testing.assert_allclose(np.asarray(run.output("out")), f(X))
    assert run.backward("out", [(2, 1)], to="x").tolist() == [[2, 2]]
    assert f.report({"x": X}).exact


def test_conversions_keep_tracing_and_lists_of_traced_arrays_stack():
    @sz.workflow
    def f(x):
        a = np.asarray(x)
        b = np.array([x[0], x[1] + 1, x[2] * 0])
        return {"a": a * 1, "b": b}

    wf = f.trace({"x": X})
    got = evaluate_workflow(wf, {"x": X})
    np.testing.assert_allclose(got["a"], X)
    np.testing.assert_allclose(got["b"], np.array([X[0], X[1] + 1, X[2] * 0]))
    assert f.report({"x": X}).exact


def test_numpy_is_itself_again_after_a_trace_and_outside_the_users_code():
    zeros, asarray = np.zeros, np.asarray

    @sz.workflow
    def f(x):
        return x + np.zeros(x.shape)

    f.trace({"x": X})
    assert np.zeros is zeros and np.asarray is asarray
    assert isinstance(np.zeros((2, 2)), np.ndarray)

"""Indexing by values and in-place updates in traced code: numpy's values, exact lineage, both executors."""

from __future__ import annotations

import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import subzero as sz
from subzero.oracle import check_workflow, evaluate_workflow

RNG = np.random.default_rng(3)
X = np.round(RNG.normal(size=(6, 7)), 3)
M = RNG.random((6, 7)) < 0.4
LABELS = RNG.integers(0, 4, size=(6, 7))


def _mask_assign(x):
    x[x < 0] = 0.0
    return x


def _mask_assign_array(x):
    y = x.copy()
    y[y > 0.5] = y[y > 0.5] * 10
    return y


def _row_assign_in_loop(x):
    out = np.zeros((x.shape[0], 3))
    for i in range(x.shape[0]):
        out[i, :] = x[i, :3] * i
    return out


def _augmented(x):
    total = np.zeros(x.shape[1])
    for row in x:
        total += row
    total -= 1
    total *= 2
    return total


def _view_writes_through(x):
    y = x.copy()
    v = y[1:3, 2:]
    v[:] = 7.0
    v[0, 0] = -1.0
    return y


def _reshape_view_writes_through(x):
    y = x.copy()
    flat = y.reshape(-1)
    flat[:5] = 3.0
    return y


def _fancy_gather(x, labels):
    sizes = np.array([10.0, 20.0, 30.0, 40.0])
    return sizes[labels] + x


def _columns_by_mask(x):
    keep = x.sum(axis=0) > 0
    return x[:, keep] - x.mean(axis=0)[keep]


def _nonzero_family(x):
    rows, cols = np.nonzero(x > 0.5)
    return {"rows": rows, "cols": cols, "arg": np.argwhere(x > 1.0), "flat": np.flatnonzero(x < -1)}


def _out_and_where(x):
    safe = np.zeros_like(x)
    np.divide(1.0, x, out=safe, where=np.abs(x) > 0.2)
    np.copyto(safe, 0.0, where=safe > 3)
    return safe


def _early_exit(x):
    y = x.copy()
    for _ in range(10):
        bad = np.abs(y) > 1.0
        if bad.sum() == 0:
            break
        y[bad] = y[bad] / 2
    return y


CASES = {
    "mask_assign": (_mask_assign, {"x": X}),
    "mask_assign_array": (_mask_assign_array, {"x": X}),
    "row_assign_in_loop": (_row_assign_in_loop, {"x": X}),
    "augmented": (_augmented, {"x": X}),
    "view_writes_through": (_view_writes_through, {"x": X}),
    "reshape_view_writes_through": (_reshape_view_writes_through, {"x": X}),
    "fancy_gather": (_fancy_gather, {"x": X, "labels": LABELS}),
    "columns_by_mask": (_columns_by_mask, {"x": X}),
    "nonzero_family": (_nonzero_family, {"x": X}),
    "out_and_where": (_out_and_where, {"x": X}),
    "early_exit": (_early_exit, {"x": X * 4}),
}


def _eager(fn, inputs):
    out = fn(**{k: np.array(v, copy=True) for k, v in inputs.items()})
    return out if isinstance(out, dict) else {"out": out}


@pytest.mark.parametrize("name", sorted(CASES))
def test_traced_values_equal_numpys_and_the_oracle_finds_no_miss(name, tmp_path):
    fn, inputs = CASES[name]
    traced = sz.workflow(fn)
    expected = _eager(fn, inputs)
    run = traced.run({k: v.copy() for k, v in inputs.items()}, store=tmp_path / "run", executor="local",
                     tile_shape=(4, 4))
    for key, value in expected.items():
        np.testing.assert_allclose(np.asarray(run.output(key)).reshape(np.shape(value)), value, err_msg=key)
    wf = traced.trace(inputs)
    assert traced.report(inputs).exact, str(traced.report(inputs))
    report = check_workflow(run, wf, {k: v.copy() for k, v in inputs.items()}, cells=10, backward=6)
    assert report.ok, str(report)


def test_a_written_cell_depends_on_the_value_and_the_mask_an_untouched_one_on_the_old_value(tmp_path):
    @sz.workflow
    def f(x, m):
        y = x.copy()
        y[m] = 0.0
        return y

    run = f.run({"x": X, "m": M}, store=tmp_path / "run", executor="local")
    written = tuple(int(c) for c in np.argwhere(M)[0])
    kept = tuple(int(c) for c in np.argwhere(~M)[0])
    assert run.backward("out", [written], to="x").tolist() == []
    assert run.backward("out", [written], to="m").tolist() == [list(written)]
    assert run.backward("out", [kept], to="x").tolist() == [list(kept)]
    assert run.backward("out", [kept], to="m").tolist() == [list(kept)]
    assert run.forward("x", [written], to="out").tolist() == []


@pytest.mark.parametrize("value", [2.0, np.array([2.0])])
def test_a_mask_and_its_coordinates_write_the_same_cells(value):
    """``y[m] = v`` (one value: the mask is taken as it is) and ``y[np.nonzero(m)] = v`` (the
    general path) make the same assignment, with numpy's values."""
    def by_mask(x, m):
        y = x.copy()
        y[m] = value
        return y

    def by_coordinates(x, m):
        y = x.copy()
        y[np.nonzero(m)] = value
        return y

    ops = []
    for fn in (by_mask, by_coordinates):
        wf = sz.workflow(fn).trace({"x": X, "m": M})
        (op,) = [n.operator for n in wf.nodes if type(n.operator).__name__ == "Scatter"]
        ops.append(op)
        assert np.array_equal(evaluate_workflow(wf, {"x": X, "m": M})[wf.nodes[-1].name], by_mask(X.copy(), M))
    assert ops[0].map_digest == ops[1].map_digest and ops[0].fill == ops[1].fill


def test_a_gathered_cell_is_the_cell_it_copies(tmp_path):
    @sz.workflow
    def f(x):
        return x[x > 0]

    run = f.run({"x": X}, store=tmp_path / "run", executor="local")
    sources = np.argwhere(X > 0)
    for k in (0, len(sources) - 1):
        assert run.backward("out", [(k,)], to="x").tolist() == [sources[k].tolist()]
        assert run.forward("x", [tuple(sources[k])], to="out").tolist() == [[k]]


def test_in_place_casting_follows_numpy():
    @sz.workflow
    def f(x):
        y = x.astype(np.int64)
        y += 0.5
        return y

    with pytest.raises(TypeError, match="same_kind"):
        f.trace({"x": X})
    with pytest.raises(TypeError):
        f(X)


def test_an_assignment_to_every_cell_is_its_value_and_no_scatter():
    """``y[:] = v`` (scipy's detrend: ``data[0:n] = data[0:n] - fit``) leaves ``v`` itself, cast and
    reshaped as numpy does; an assignment to some of the cells stays a Scatter."""
    def f(x):
        y = x.astype(np.int32)
        y[:] = x * 2.5  # numpy's unsafe cast
        z = x.reshape(1, -1) + 0.0
        z[0] = x.ravel() * 3  # every cell, through an index
        w = x + 0.0
        w[:, 1:] = x[:, 1:] * 4  # some cells
        return {"y": y, "z": z, "w": w}

    traced = sz.workflow(f)
    wf = traced.trace({"x": X})
    got, expected = evaluate_workflow(wf, {"x": X}), f(X.copy())
    for key in expected:
        np.testing.assert_array_equal(got[key], expected[key], err_msg=key)
        assert got[key].dtype == expected[key].dtype
    assert [type(n.operator).__name__ for n in wf.nodes if n.name in ("y", "z", "w")] == ["Apply", "Reshape", "Scatter"]
    assert traced.report({"x": X}).exact


def test_assigning_a_wrong_shape_fails_as_numpy_does():
    @sz.workflow
    def f(x):
        x[:2] = np.ones(5)
        return x

    with pytest.raises(ValueError, match="could not broadcast"):
        f.trace({"x": X})


def test_a_trace_that_used_values_is_kept_for_those_values_only():
    @sz.workflow
    def f(x):
        return x * 2 if x.sum() > 0 else x * 3

    a, b = f.trace({"x": np.abs(X)}), f.trace({"x": -np.abs(X)})
    assert a is not b
    assert f.trace({"x": np.abs(X)}) is a
    np.testing.assert_allclose(evaluate_workflow(b, {"x": -np.abs(X)})["out"], -np.abs(X) * 3)


def test_spark_runs_in_place_updates_masks_and_early_exits(spark, tmp_path):
    for name in ("mask_assign_array", "early_exit", "row_assign_in_loop"):
        fn, inputs = CASES[name]
        run = sz.workflow(fn).run({k: v.copy() for k, v in inputs.items()}, store=tmp_path / name, spark=spark,
                                  tile_shape=(3, 4))
        np.testing.assert_allclose(np.asarray(run.output("out")), _eager(fn, inputs)["out"])


# -- random programs: in-place updates, masks and value-dependent loops, traced vs eager ------------------------
STEP = st.sampled_from(["clip_mask", "scale_rows", "add_col", "halve_until", "gather_back", "slice_set"])


def _program(steps, x):
    for step in steps:
        if step == "clip_mask":
            x[x > 1.5] = 1.5
        elif step == "scale_rows":
            for i in range(0, x.shape[0], 2):
                x[i] *= 0.5
        elif step == "add_col":
            x[:, 0] += x[:, -1]
        elif step == "halve_until":
            while np.abs(x).max() > 2:
                x = x / 2
        elif step == "gather_back":
            pos = x > 0
            x[pos] = x[pos] + 1
        elif step == "slice_set":
            x[1:3, 1:3] = x[0, 0]
    return x


@settings(max_examples=15, deadline=None)
@given(steps=st.lists(STEP, min_size=1, max_size=5), seed=st.integers(0, 1000))
def test_random_programs_trace_to_numpys_values_with_sound_lineage(tmp_path_factory, steps, seed):
    x = np.round(np.random.default_rng(seed).normal(0, 2, size=(5, 4)), 3)

    def fn(x):
        return _program(steps, x)

    traced = sz.workflow(fn)
    run = traced.run({"x": x.copy()}, store=tmp_path_factory.mktemp("prog") / "run", executor="local",
                     tile_shape=(2, 3))
    np.testing.assert_allclose(np.asarray(run.output("out")), _program(steps, x.copy()))
    report = check_workflow(run, traced.trace({"x": x.copy()}), {"x": x.copy()}, cells=6, backward=4)
    assert report.ok, str(report)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_a_basic_assignment_writes_the_cells_and_sources_positions_give(data):
    """``x[key] = value`` with a basic key: the written cells and each one's source in the value
    (worked out from the selection, with no position listed per cell of ``x``) are those listing
    every position gives, reversed slices and broadcast values included; a bad shape fails alike."""
    from subzero.trace import numpy_indexing as ni

    shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    x = types.SimpleNamespace(shape=shape, size=int(np.prod(shape)))  # all it reads of the array

    def parts_for(lengths) -> list:  # a part per axis indexed, maybe a new axis before each
        out: list = []
        for n in lengths:
            if data.draw(st.booleans()):
                out.append(None)  # a new axis: the next part still indexes this axis
            kind = data.draw(st.sampled_from(["int", "slice", "all"]))
            out.append(data.draw(st.integers(-n, n - 1)) if kind == "int" else slice(None) if kind == "all" else
                       slice(data.draw(st.integers(-n, n)), data.draw(st.integers(-n, n)),
                             data.draw(st.sampled_from([None, 1, 2, -1, -2]))))
        return out

    indexed = data.draw(st.integers(0, len(shape)))
    if data.draw(st.booleans()):  # an Ellipsis: the parts before it index the first axes, those after the last
        before = data.draw(st.integers(0, indexed))
        parts = parts_for(shape[:before]) + [Ellipsis] + parts_for(shape[len(shape) - (indexed - before):])
    else:
        parts = parts_for(shape[:indexed])
    key = tuple(parts)
    selected = np.shape(np.empty(shape)[key])
    value_shape = data.draw(st.sampled_from([(), (1,), selected, selected[1:], (2,) + selected]))

    def listed():
        positions = np.arange(x.size, dtype=np.int64).reshape(shape)[key]
        sources = np.broadcast_to(np.arange(int(np.prod(value_shape)), dtype=np.int64).reshape(value_shape),
                                  np.shape(positions))
        full = np.full(x.size, -1, np.int64)
        full[np.ravel(positions)] = np.ravel(sources)
        return full >= 0, None if int(np.prod(value_shape)) == 1 else full[full >= 0]

    try:
        expected = listed()
    except ValueError:
        with pytest.raises(ValueError, match="could not broadcast"):
            ni._written_and_sources(x, key, value_shape)
        return
    written, source = ni._written_and_sources(x, key, value_shape)
    np.testing.assert_array_equal(written.reshape(-1), expected[0])
    assert (source is None) == (expected[1] is None)
    if source is not None:
        np.testing.assert_array_equal(source, expected[1])

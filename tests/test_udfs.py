"""sz.udf: functions with declared, checked or inferred lineage inside traced workflows."""

from __future__ import annotations

import types

import numpy as np
import pytest
from scipy import ndimage

import subzero as sz
from subzero.errors import WorkflowError
from subzero.oracle import check_operator, check_workflow, evaluate_operator
from subzero.trace import TraceError
from subzero.udfs import infer_lineage

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
    from subzero.tools.cli import main

    despike = sz.udf(lambda x: ndimage.median_filter(x, 3, mode="nearest"), lineage="infer", name="despike")

    @sz.workflow
    def f(x):
        return {"clean": despike(x) - 1.0}

    f.run({"x": X}, store=tmp_path / "r", executor="local")
    assert main(["info", str(tmp_path / "r")]) == 0
    assert "UdfWindow (lineage inferred: window(radius=1))" in capsys.readouterr().out
    assert main(["explain", str(tmp_path / "r")]) == 0
    assert "despike (UdfWindow, lineage inferred: window(radius=1)" in capsys.readouterr().out


# -- keyword arguments and constants ---------------------------------------------------------------
M = RNG.random((10, 12)) < 0.3


def test_keyword_constants_and_keyword_arrays(tmp_path):
    smooth = sz.udf(ndimage.gaussian_filter, lineage=sz.Window(radius=4))
    masked = sz.udf(lambda x, mask=None, fill=0.0: np.where(mask, fill, x), lineage="elementwise")
    clipped = sz.udf(np.clip, lineage="elementwise")

    @sz.workflow
    def f(x, m):
        return {"s": smooth(x, sigma=1.0, mode="nearest"), "k": masked(x, mask=m, fill=-1.0),
                "c": clipped(x, -0.5, 0.5)}

    run = f.run({"x": X, "m": M}, store=tmp_path / "r", executor="local", tile_shape=(4, 5))
    np.testing.assert_allclose(np.asarray(run.output("s")), ndimage.gaussian_filter(X, sigma=1.0, mode="nearest"))
    np.testing.assert_array_equal(np.asarray(run.output("k")), np.where(M, -1.0, X))
    np.testing.assert_array_equal(np.asarray(run.output("c")), np.clip(X, -0.5, 0.5))
    assert run.backward("k", [(3, 4)], to="m").tolist() == [[3, 4]]  # the keyword array is an input
    assert check_workflow(run, f.trace({"x": X, "m": M}), {"x": X, "m": M}, cells=8, backward=4).ok


def test_arrays_inside_a_list_are_refused_with_the_fix(tmp_path):
    stack = sz.udf(lambda arrays: np.stack(arrays).sum(axis=0), lineage="elementwise")

    @sz.workflow
    def f(x):
        return {"y": stack([x, x])}

    with pytest.raises(TraceError, match="pass each array as its own argument"):
        f.trace({"x": X})
    fixed = sz.udf(lambda a, b: np.stack([a, b]).sum(axis=0), lineage="elementwise")

    @sz.workflow
    def g(x):
        return {"y": fixed(x, x)}

    run = g.run({"x": X}, store=tmp_path / "r", executor="local")
    np.testing.assert_array_equal(np.asarray(run.output("y")), 2 * X)


# -- every pattern over several broadcast inputs ------------------------------------------------------
ROW = np.round(RNG.normal(size=(1, 12)), 3)
COL = np.round(RNG.normal(size=(10, 1)), 3)


@pytest.mark.parametrize("lineage, fn", [
    (sz.Window(radius=1), lambda a, b: ndimage.maximum_filter(a - b, 3, mode="nearest")),
    (sz.Lines(axis=1), lambda a, b: np.cumsum(a * b, axis=1)),
    (sz.Lines(axis=0), lambda a, b: np.sort(a + b, axis=0)),
    (sz.Reduce(axis=0), lambda a, b: (a * b).sum(axis=0)),
    (sz.Reduce(axis=1, keepdims=True), lambda a, b: (a - b).max(axis=1, keepdims=True)),
    (sz.Reduce(), lambda a, b: np.var(a + b)),
])
@pytest.mark.parametrize("other", [ROW, COL, X], ids=["row", "col", "same"])
def test_patterns_take_several_broadcast_inputs(lineage, fn, other):
    u = sz.udf(fn, lineage=lineage)
    op = u.operator(2, [X.shape, other.shape])
    report = check_operator(op, [X, other], tile_shape=(4, 5), cells=24, backward=8)
    assert report.ok, str(report)
    np.testing.assert_allclose(evaluate_operator(op, [X, other]).reshape(np.shape(fn(X, other)) or (1, 1)),
                               np.asarray(fn(X, other)).reshape(np.shape(fn(X, other)) or (1, 1)))


def test_multi_input_window_in_a_workflow_answers_per_input(tmp_path):
    diff = sz.udf(lambda a, b: ndimage.maximum_filter(a - b, 3, mode="nearest"), lineage=sz.Window(1))

    @sz.workflow
    def f(x, row):
        return {"d": diff(x, row)}

    run = f.run({"x": X, "row": ROW}, store=tmp_path / "r", executor="local", tile_shape=(4, 4))
    np.testing.assert_array_equal(np.asarray(run.output("d")), ndimage.maximum_filter(X - ROW, 3, mode="nearest"))
    assert run.backward("d", [(3, 4)], to="row").tolist() == [[0, 3], [0, 4], [0, 5]]
    assert len(run.backward("d", [(3, 4)], to="x")) == 9
    assert len(run.forward("row", [(0, 0)], to="d")) == 10 * 2  # the column below it and the next one
    assert check_workflow(run, f.trace({"x": X, "row": ROW}), {"x": X, "row": ROW}, cells=8, backward=4).ok


# -- reductions ------------------------------------------------------------------------------------------
def test_reduce_drops_the_axis_and_reads_whole_lines(tmp_path):
    var0 = sz.udf(lambda x: x.var(axis=0), lineage=sz.Reduce(axis=0))
    total = sz.udf(np.sum, lineage=sz.Reduce())

    @sz.workflow
    def f(x):
        return {"v": var0(x), "t": total(x) + 1.0}

    wf = f.trace({"x": X})
    run = f.run({"x": X}, store=tmp_path / "r", executor="local", tile_shape=(4, 4))
    np.testing.assert_allclose(np.asarray(run.output("v")), X.var(axis=0))
    np.testing.assert_allclose(np.asarray(run.output("t")).reshape(()), X.sum() + 1.0)
    assert run.backward("v", [(3,)], to="x").tolist() == [[r, 3] for r in range(10)]
    assert run.forward("x", [(2, 5)], to="v").tolist() == [[5]]
    assert check_workflow(run, wf, {"x": X}, cells=8, backward=4).ok


def test_a_reduction_declared_as_lines_names_reduce_and_the_fix_runs(tmp_path):
    wrong = sz.udf(lambda x: x.var(axis=0), lineage=sz.Lines(axis=0))

    @sz.workflow
    def f(x):
        return {"v": wrong(x)}

    big = RNG.normal(size=(30, 200))  # the trace probes a cut sample of a large input
    for inputs in ({"x": X}, {"x": big}):
        with pytest.raises(TraceError, match=r"returns shape \(\d+,\); declare sz.Reduce\(axis=0\)"):
            f.trace(inputs)
    fixed = sz.udf(lambda x: x.var(axis=0), lineage=sz.Reduce(axis=0))

    @sz.workflow
    def g(x):
        return {"v": fixed(x)}

    np.testing.assert_allclose(np.asarray(g.run({"x": big}, store=tmp_path / "r", executor="local").output("v")),
                               big.var(axis=0))


def test_a_shape_mismatch_found_only_when_running_names_the_pattern(tmp_path):
    def picky(x):  # refuses the trace's small probe, so only the run sees its shape
        if x.shape[0] < 10:
            raise ValueError("needs 10 rows")
        return x.mean(axis=1, keepdims=True)

    @sz.workflow
    def f(x):
        return {"m": sz.udf(picky, lineage="elementwise")(x)}

    big = RNG.normal(size=(100, 80))
    with pytest.raises(WorkflowError, match=r"declare sz.Reduce\(axis=1, keepdims=True\)"):
        f.run({"x": big}, store=tmp_path / "a", executor="local")

    @sz.workflow
    def g(x):
        return {"m": sz.udf(picky, lineage=sz.Reduce(axis=1, keepdims=True))(x)}

    run = g.run({"x": big}, store=tmp_path / "b", executor="local")
    np.testing.assert_allclose(np.asarray(run.output("m")), big.mean(axis=1, keepdims=True))


# -- mapping functions told the shapes ----------------------------------------------------------------
def test_map_functions_may_ask_for_the_shapes(tmp_path):
    seen = []

    def back(cells, i, shapes):
        seen.append(shapes)
        return (cells - [1, 0]) % shapes.inputs[0]

    shift = sz.udf(lambda x: np.roll(x, 1, axis=0), map_b=back,
                   map_f=lambda cells, i, shapes: (cells + [1, 0]) % shapes.output)
    assert sz.check_lineage(shift, X).ok
    assert seen and seen[0].inputs == (X.shape,) and seen[0].output == X.shape

    @sz.workflow
    def f(x):
        return {"y": shift(x)}

    run = f.run({"x": X}, store=tmp_path / "r", executor="local")
    assert run.backward("y", [(0, 3)], to="x").tolist() == [[9, 3]]


# -- 0-d values --------------------------------------------------------------------------------------------
def test_a_0d_value_reaches_the_function_as_numpy_gives_it(tmp_path):
    seen = []

    def sizes(labels, n):
        seen.append(type(n))
        out = np.zeros(n + 1)
        for k in range(1, n + 1):  # range() needs an integer, not a (1, 1) array
            out[k] = (labels == k).sum()
        return out[labels]

    scale = sz.udf(lambda x, s: x / s, lineage="elementwise")

    @sz.workflow
    def f(x):
        labels, n = sz.ndimage.label(x > 0)
        return {"sizes": sz.udf(sizes, lineage="all")(labels, n), "z": scale(x, np.std(x))}

    run = f.run({"x": X}, store=tmp_path / "r", executor="local")
    assert seen and all(issubclass(t, np.integer) for t in seen)
    labels, n = ndimage.label(X > 0)
    np.testing.assert_array_equal(np.asarray(run.output("sizes")), sizes(labels, n))
    np.testing.assert_allclose(np.asarray(run.output("z")), X / np.std(X))
    assert check_workflow(run, f.trace({"x": X}), {"x": X}, cells=8, backward=4).ok


def test_a_udf_of_0d_values_alone_gives_a_0d_value(tmp_path):
    ratio = sz.udf(lambda a, b: a / b, lineage="elementwise")

    @sz.workflow
    def f(x):
        r = ratio(np.max(x), np.min(x))
        assert r.shape == ()
        return {"y": x * r, "z": ratio(x, np.max(x[None]))}  # a 0-d value of a 3-D array meets a 2-D one

    run = f.run({"x": X}, store=tmp_path / "r", executor="local")
    np.testing.assert_allclose(np.asarray(run.output("y")), X * (X.max() / X.min()))
    np.testing.assert_allclose(np.asarray(run.output("z")), X / X.max())


# -- inference respects dtypes and explains failures -----------------------------------------------------
def test_infer_feeds_integers_to_integer_inputs(tmp_path):
    relabel = sz.udf(lambda labels, n: (n - np.arange(n + 1))[labels], lineage="infer")

    @sz.workflow
    def f(x):
        labels, n = sz.ndimage.label(x > 0)
        return {"r": relabel(labels, n)}

    wf = f.trace({"x": X})
    assert wf.node("r").operator.params()["lineage"] == "elementwise"
    run = f.run({"x": X}, store=tmp_path / "r", executor="local")
    labels, n = ndimage.label(X > 0)
    np.testing.assert_array_equal(np.asarray(run.output("r")), (n - np.arange(n + 1))[labels])
    assert check_workflow(run, wf, {"x": X}, cells=8, backward=4).ok


def test_infer_samples_booleans_for_boolean_inputs():
    kinds = []
    flip = sz.udf(lambda m: kinds.append(m.dtype) or ~m, lineage="infer")

    @sz.workflow
    def f(x):
        return {"y": flip(x > 0)}

    f.trace({"x": X})
    assert flip.inferred == "elementwise" and set(kinds) == {np.dtype(bool)}


def test_an_exception_during_inference_names_the_function_and_the_fix_runs(tmp_path):
    def lookup(codes):
        return np.array([10.0, 20.0, 30.0])[codes]

    @sz.workflow
    def f(x):
        return {"y": sz.udf(lookup, lineage="infer")(x)}

    with pytest.raises(TraceError, match=r"sz.udf lookup: lineage='infer' .*raised IndexError.*declare the lineage"):
        f.trace({"x": RNG.integers(0, 3, (10, 12))})
    with pytest.raises(TraceError, match=r"called lookup on sample inputs \(float64\[10, 12\]\).*IndexError"):
        f.trace({"x": X})
    codes = RNG.integers(0, 3, (10, 12))
    declared = sz.udf(lookup, lineage="elementwise")
    sampled = sz.udf(lookup, lineage="infer", sample=[RNG.integers(0, 3, (6, 7))])

    @sz.workflow
    def g(x):
        return {"a": declared(x), "b": sampled(x)}

    run = g.run({"x": codes}, store=tmp_path / "r", executor="local")
    np.testing.assert_array_equal(np.asarray(run.output("a")), lookup(codes))
    assert sampled.inferred == "elementwise"


def test_infer_finds_a_reduction_and_its_refusal_hint_runs(tmp_path):
    assert infer_lineage(sz.udf(lambda x: x.max(axis=1), lineage="infer"), X) == sz.Reduce(axis=1)
    centred = sz.udf(lambda x: x - x.mean(), lineage="infer", sample=[X])
    with pytest.raises(WorkflowError, match="declare it: lineage='all'"):
        centred.operator()
    assert sz.check_lineage(sz.udf(centred.fn, lineage="all"), X).ok


# -- several outputs --------------------------------------------------------------------------------------
def _stats(x):
    return x.mean(axis=1), x - x.mean(axis=1, keepdims=True)


def test_one_pattern_per_output(tmp_path):
    stats = sz.udf(_stats, lineage=(sz.Reduce(axis=1), sz.Lines(axis=1)))
    inferred = sz.udf(_stats, lineage="infer")

    @sz.workflow
    def f(x):
        m, c = stats(x)
        m2, c2 = inferred(x)
        return {"m": m, "c": c, "m2": m2, "c2": c2}

    wf = f.trace({"x": X})
    assert inferred.inferred == (sz.Reduce(axis=1), sz.Lines(axis=1))
    run = f.run({"x": X}, store=tmp_path / "r", executor="local", tile_shape=(4, 12))
    for name, want in zip(("m", "c", "m2", "c2"), _stats(X) * 2):
        np.testing.assert_allclose(np.asarray(run.output(name)), want)
    assert run.backward("m", [(2,)], to="x").tolist() == [[2, c] for c in range(12)]
    assert check_workflow(run, wf, {"x": X}, cells=8, backward=4).ok
    reports = sz.check_lineage(stats, X)
    assert len(reports) == 2 and all(r.ok for r in reports)


def test_a_tuple_result_with_one_pattern_is_refused_with_the_fix(tmp_path):
    @sz.workflow
    def f(x):
        return dict(zip("mc", sz.udf(_stats, lineage=sz.Lines(axis=1))(x)))

    with pytest.raises(TraceError, match=r"returns a tuple of 2 arrays; declare one pattern per output: "
                                         r"lineage=\(sz.Reduce\(axis=1\), sz.Lines\(axis=1\)\)"):
        f.trace({"x": X})

    @sz.workflow
    def g(x):
        return dict(zip("mc", sz.udf(_stats, lineage=(sz.Reduce(axis=1), sz.Lines(axis=1)))(x)))

    run = g.run({"x": X}, store=tmp_path / "r", executor="local")
    np.testing.assert_allclose(np.asarray(run.output("m")), X.mean(axis=1))


# -- both executors -------------------------------------------------------------------------------------
def test_keyword_and_multi_input_udfs_run_on_spark_as_locally(tmp_path, spark):
    masked = sz.udf(lambda x, mask=None, fill=0.0: np.where(mask, fill, x), lineage="elementwise")
    window = sz.udf(lambda a, b: ndimage.maximum_filter(a - b, 3, mode="nearest"), lineage=sz.Window(1))

    @sz.workflow
    def f(x, m, row):
        return {"k": masked(x, mask=m, fill=-1.0), "w": window(x, row),
                "v": sz.udf(lambda x: x.var(axis=0), lineage=sz.Reduce(axis=0))(x)}

    inputs = {"x": X, "m": M, "row": ROW}
    local = f.run(inputs, store=tmp_path / "local", executor="local", tile_shape=(4, 5))
    remote = f.run(inputs, store=tmp_path / "spark", executor="spark", spark=spark, tile_shape=(4, 5))
    for name in ("k", "w", "v"):
        np.testing.assert_array_equal(np.asarray(remote.output(name)), np.asarray(local.output(name)))
    assert remote.backward("w", [(3, 4)], to="row").tolist() == local.backward("w", [(3, 4)], to="row").tolist()


def test_a_result_of_another_shape_points_to_all_with_its_shape_and_that_runs(tmp_path):
    corner = sz.udf(lambda x: x[:7, :7] * 2, lineage="elementwise")

    @sz.workflow
    def f(x):
        return {"c": corner(x)}

    with pytest.raises(TraceError, match=r"declare lineage='all', shape=\(7, 7\)"):
        f.trace({"x": X})
    fixed = sz.udf(corner.fn, lineage="all", shape=(7, 7))

    @sz.workflow
    def g(x):
        return {"c": fixed(x)}

    np.testing.assert_array_equal(np.asarray(g.run({"x": X}, store=tmp_path / "r", executor="local").output("c")),
                                  X[:7, :7] * 2)


def test_infer_outside_a_trace_needs_a_sample_and_the_fix_runs():
    with pytest.raises(WorkflowError, match=r"needs sample arrays \(sample=\[...\]\)"):
        sz.udf(np.sin, lineage="infer").operator()
    assert type(sz.udf(np.sin, lineage="infer", sample=[X]).operator()).__name__ == "UdfElementwise"


def test_the_guide_examples_run(tmp_path, monkeypatch):
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "guide" / "udf.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 6
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "docs/guide/udf.md", "exec"), namespace)
    assert namespace["smooth"].inferred == sz.Window(4) and not namespace["report"].ok


def test_the_traces_hint_to_wrap_a_library_call_works(tmp_path):
    from scipy import signal

    @sz.workflow
    def f(x):
        return {"m": signal.medfilt2d(x, 3)}

    report = f.report({"x": X})  # traced as written: a coarse step, whose reason says how to make it exact
    assert not report.exact and "sz.udf(fn, lineage=...)" in str(report), str(report)
    medfilt = sz.udf(signal.medfilt2d, lineage=sz.Window(radius=1))

    @sz.workflow
    def g(x):
        return {"m": medfilt(x, 3)}  # a positional constant

    run = g.run({"x": X}, store=tmp_path / "r", executor="local", tile_shape=(4, 4))
    np.testing.assert_array_equal(np.asarray(run.output("m")), signal.medfilt2d(X, 3))
    assert check_workflow(run, g.trace({"x": X}), {"x": X}, cells=8, backward=4).ok


def test_inference_is_per_call_constants_included():
    correlate = sz.udf(lambda x, k: ndimage.correlate(x, k, mode="nearest"), lineage="infer")

    @sz.workflow
    def f(x):
        return {"a": correlate(x, np.ones((3, 3))), "b": correlate(x, np.ones((5, 5)))}

    wf = f.trace({"x": X})
    assert [wf.node(n).operator.params()["lineage"] for n in "ab"] == ["window(radius=1)", "window(radius=2)"]


def _suggested(message: str) -> str:
    """The code a trace error suggests: from ``sz.udf(`` to the end of its call."""
    import re

    return re.search(r"(sz\.udf\(.*?\)\([^()]*(?:\([^()]*\)[^()]*)*\))", message).group(1)


@pytest.mark.parametrize("body, reference", [
    ("sz.ndimage.zoom(x, 1.5, order=1)", lambda x: ndimage.zoom(x, 1.5, order=1)),
    ("np.histogram(x, 5, weights=x * x)[0]", lambda x: np.histogram(x, 5, weights=x * x)[0]),
])
def test_trace_errors_pointing_to_sz_udf_suggest_code_that_runs(tmp_path, body, reference):
    import scipy

    namespace = {"np": np, "sz": sz, "scipy": scipy}
    exec(f"def f(x):\n    return {{'y': {body}}}", namespace)
    with pytest.raises(TraceError) as failure:  # from shapes alone: refused, with the fix (on values: coarse)
        sz.workflow(namespace["f"]).trace({"x": types.SimpleNamespace(shape=X.shape, dtype=X.dtype)})
    code = _suggested(str(failure.value)).replace("(a, bins, range=..., density=..., weights=...)",
                                                  "(x, 5, weights=x * x)[0]")
    exec(f"def g(x):\n    return {{'y': {code}}}", namespace)
    run = sz.workflow(namespace["g"]).run({"x": X}, store=tmp_path / "r", executor="local")
    np.testing.assert_allclose(np.asarray(run.output("y")), reference(X))


def test_functions_from_scientific_libraries(tmp_path):
    filters = pytest.importorskip("skimage.filters")
    measure = pytest.importorskip("skimage.measure")
    from astropy.stats import sigma_clip

    gauss = sz.udf(filters.gaussian, lineage="infer")
    label = sz.udf(measure.label, lineage=("all", sz.Reduce()))  # (labels, count)
    clip = sz.udf(lambda x, sigma=3.0: sigma_clip(x, sigma=sigma, axis=0).filled(np.nan), lineage="infer")
    image = RNG.random((10, 12))

    @sz.workflow
    def f(x):
        labels, n = label(x > 0.7, return_num=True, connectivity=1)
        return {"g": gauss(x, sigma=1.0, mode="nearest"), "labels": labels, "n": n + 0,
                "clip": clip(x, sigma=2.0)}

    wf = f.trace({"x": image})
    assert gauss.inferred == sz.Window(4) and clip.inferred == sz.Lines(axis=0)
    run = f.run({"x": image}, store=tmp_path / "r", executor="local")
    labels, n = measure.label(image > 0.7, return_num=True, connectivity=1)
    np.testing.assert_array_equal(np.asarray(run.output("labels")), labels)
    assert np.asarray(run.output("n")).reshape(()) == n
    np.testing.assert_allclose(np.asarray(run.output("g")), filters.gaussian(image, sigma=1.0, mode="nearest"))
    np.testing.assert_array_equal(np.asarray(run.output("clip")), sigma_clip(image, sigma=2.0, axis=0).filled(np.nan))
    assert check_workflow(run, wf, {"x": image}, cells=6, backward=3).ok


def test_check_lineage_takes_keyword_arguments_arrays_among_them_inputs():
    masked = sz.udf(lambda x, mask=None, size=3: np.where(mask, ndimage.maximum_filter(x, size, mode="nearest"), x),
                    lineage=sz.Window(radius=1))
    assert sz.check_lineage(masked, X, kwargs={"mask": M, "size": 3}).ok
    report = sz.check_lineage(masked, X, kwargs={"mask": M, "size": 5})
    assert not report.ok and report.misses

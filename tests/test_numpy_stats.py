"""numpy's statistics, running reductions, differences, 1-D convolution, constant-index
gathers, einsum, look-ups, average, norm and shape queries on symbolic arrays
(`subzero.trace.numpy_stats`): numpy's values, shapes and dtypes, exact lineage (checked
by the perturbation oracle on a real run, and cell by cell where the docs state it), and
trace-time errors that say the fix."""

from __future__ import annotations

import types

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import subzero as sz
from subzero.errors import WorkflowError
from subzero.oracle import check_workflow, evaluate_workflow
from subzero.trace import TraceError, UnsupportedCallError

RNG = np.random.default_rng(11)
X = np.round(RNG.normal(size=(4, 5)), 3)            # 2-D
C = np.round(RNG.normal(size=(3, 4, 2)), 3)         # 3-D
V = np.round(RNG.normal(size=7), 3)                 # 1-D
W = np.round(RNG.uniform(0.5, 2.0, size=(4, 5)), 3)  # positive weights
I32 = RNG.integers(-4, 5, size=(4, 5)).astype(np.int32)
NANS = np.where(RNG.random((4, 5)) < 0.25, np.nan, X)
NANS[:, 0] = 1.0
NANS[0, :] = 1.0
SORTED = np.sort(np.round(RNG.normal(size=6), 3))
KERNEL = np.array([0.5, -1.0, 2.0])


def traced(name: str, fn) -> sz.workflow:
    """``fn`` (a lambda over named arrays) as a traced workflow called ``name``."""
    fn.__name__ = name.replace("-", "_").replace(".", "_")
    return sz.workflow(fn)


def assert_same_as_numpy(fn, inputs: dict) -> None:
    """The traced workflow's outputs are numpy's: values, shape and dtype."""
    wf = fn.trace(inputs)
    got = evaluate_workflow(wf, inputs)["out"]
    want = np.asarray(fn(**inputs))
    if want.ndim == 0:  # a 0-d result is stored as one cell
        assert got.size == 1
        got = got.reshape(())
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, equal_nan=True)


# -- every call, numpy's values ---------------------------------------------------------------------------
CALLS = {
    # order statistics and reductions over axes
    "median": (lambda x: np.median(x, axis=1), {"x": X}),
    "median-all": (lambda x: np.median(x), {"x": X}),
    "median-tuple-keepdims": (lambda c: np.median(c, axis=(0, 2), keepdims=True), {"c": C}),
    "nanmedian": (lambda n: np.nanmedian(n, axis=0), {"n": NANS}),
    "percentile-list": (lambda x: np.percentile(x, [10, 50, 90], axis=0), {"x": X}),
    "percentile-method": (lambda x: np.percentile(x, 30, axis=1, method="nearest"), {"x": X}),
    "nanpercentile": (lambda n: np.nanpercentile(n, [25.0, 75.0], axis=1, keepdims=True), {"n": NANS}),
    "quantile-all": (lambda c: np.quantile(c, 0.3), {"c": C}),
    "quantile-2d-q": (lambda c: np.quantile(c, [[0.1, 0.2], [0.8, 0.9]], axis=-1), {"c": C}),
    "nanquantile": (lambda n: np.nanquantile(n, 0.5, axis=None, keepdims=True), {"n": NANS}),
    "var-axis": (lambda x: np.var(x, axis=0, ddof=1), {"x": X}),
    "var-tuple": (lambda c: np.var(c, axis=(1, 2), keepdims=True), {"c": C}),
    "nanvar": (lambda n: np.nanvar(n, axis=1), {"n": NANS}),
    "prod-axis": (lambda x: np.prod(x, axis=1, keepdims=True), {"x": X}),
    "nanprod": (lambda n: np.nanprod(n, axis=0), {"n": NANS}),
    "ptp": (lambda c: np.ptp(c, axis=2), {"c": C}),
    "ptp-all": (lambda i: np.ptp(i), {"i": I32}),
    "sum-keepdims": (lambda c: np.sum(c, axis=1, keepdims=True), {"c": C}),
    "max-keepdims-all": (lambda x: np.max(x, keepdims=True), {"x": X}),
    "argmax": (lambda x: np.argmax(x, axis=1), {"x": X}),
    "argmin-all": (lambda c: np.argmin(c), {"c": C}),
    "argmax-keepdims": (lambda c: np.argmax(c, axis=0, keepdims=True), {"c": C}),
    "nanargmax": (lambda n: np.nanargmax(n, axis=1), {"n": NANS}),
    # running reductions and differences
    "cumsum": (lambda x: np.cumsum(x, axis=1), {"x": X}),
    "cumsum-flat": (lambda c: np.cumsum(c), {"c": C}),
    "cumsum-int": (lambda i: np.cumsum(i, axis=0), {"i": I32}),
    "cumprod": (lambda c: np.cumprod(c, axis=-2), {"c": C}),
    "nancumsum": (lambda n: np.nancumsum(n, axis=1), {"n": NANS}),
    "diff": (lambda x: np.diff(x), {"x": X}),
    "diff-n-axis": (lambda c: np.diff(c, n=2, axis=1), {"c": C}),
    "diff-prepend": (lambda v: np.diff(v, prepend=0.0), {"v": V}),
    "diff-append-int": (lambda i: np.diff(i, axis=0, append=2), {"i": I32}),
    "diff-symbolic-prepend": (lambda x: np.diff(x, axis=1, prepend=x[:, :1]), {"x": X}),
    # 1-D convolution
    "convolve-full": (lambda v: np.convolve(v, KERNEL), {"v": V}),
    "convolve-same": (lambda v: np.convolve(v, KERNEL, "same"), {"v": V}),
    "convolve-valid-kernel-first": (lambda v: np.convolve(KERNEL, v, mode="valid"), {"v": V}),
    "convolve-both": (lambda v: np.convolve(v, v[:4], "same"), {"v": V}),
    "correlate": (lambda v: np.correlate(v, KERNEL), {"v": V}),
    "correlate-same-short-first": (lambda v: np.correlate(v[:2], v, "same"), {"v": V}),
    "correlate-full": (lambda v: np.correlate(KERNEL, v, "full"), {"v": V}),
    # gathers by constant indices
    "take": (lambda x: np.take(x, [4, 0, -1, 4], axis=1), {"x": X}),
    "take-flat-2d-indices": (lambda x: np.take(x, [[1, 7], [0, 19]]), {"x": X}),
    "take-scalar": (lambda c: np.take(c, 2, axis=1), {"c": C}),
    "take-wrap": (lambda v: np.take(v, [9, -9], mode="wrap"), {"v": V}),
    "take_along_axis": (lambda x: np.take_along_axis(x, np.argsort(X, axis=1)[:, :3], axis=1), {"x": X}),
    "take_along_axis-broadcast": (lambda c: np.take_along_axis(c, np.array([[[1], [0], [1], [1]]]), axis=2),
                                  {"c": C}),
    # einsum
    "einsum-matmul": (lambda x, w: np.einsum("ij,kj->ik", x, w), {"x": X, "w": W}),
    "einsum-outer": (lambda v: np.einsum("i,j->ij", v, v[:3]), {"v": V}),
    "einsum-transpose": (lambda c: np.einsum("ijk->kij", c), {"c": C}),
    "einsum-sum-axis": (lambda c: np.einsum("ijk->j", c), {"c": C}),
    "einsum-rowdot": (lambda x, w: np.einsum("ij,ij->i", x, w), {"x": X, "w": W}),
    "einsum-scalar": (lambda x, w: np.einsum("ij,ij", x, w), {"x": X, "w": W}),
    "einsum-implicit": (lambda x, c: np.einsum("ij,kjl", x[:3, :4], c), {"x": X, "c": C}),
    # look-ups
    "searchsorted": (lambda x: np.searchsorted(SORTED, x), {"x": X}),
    "searchsorted-symbolic-a": (lambda v, x: np.searchsorted(np.sort(v), x, side="right"), {"v": V, "x": X}),
    "searchsorted-constant-v": (lambda v: np.searchsorted(np.sort(v), [0.0, 1.0, -2.0]), {"v": V}),
    "digitize": (lambda x: np.digitize(x, [-1.0, 0.0, 0.5]), {"x": X}),
    "isin": (lambda i: np.isin(i, [0, 2, 3]), {"i": I32}),
    "isin-symbolic-test": (lambda i: np.isin(i, i[0], invert=True), {"i": I32}),
    "interp": (lambda x: np.interp(x, SORTED, np.arange(6.0)), {"x": X}),
    "interp-symbolic-table": (lambda x, v: np.interp(x, SORTED, v[:6]), {"x": X, "v": V}),
    "interp-constant-x": (lambda v: np.interp([0.0, 0.3], SORTED, v[:6], left=-1.0), {"v": V}),
    # composites
    "average": (lambda x: np.average(x), {"x": X}),
    "average-constant-weights": (lambda x: np.average(x, axis=1, weights=np.arange(1.0, 6.0)), {"x": X}),
    "average-symbolic-weights": (lambda x, w: np.average(x, axis=0, weights=w, keepdims=True), {"x": X, "w": W}),
    "average-int": (lambda i, w: np.average(i, weights=w), {"i": I32, "w": W}),
    "norm": (lambda x: np.linalg.norm(x), {"x": X}),
    "norm-vector": (lambda v: np.linalg.norm(v, keepdims=True), {"v": V}),
    "norm-1-axis": (lambda x: np.linalg.norm(x, 1, axis=1), {"x": X}),
    "norm-inf-axis": (lambda x: np.linalg.norm(x, np.inf, axis=0, keepdims=True), {"x": X}),
    "norm-p": (lambda x: np.linalg.norm(x, 3, axis=1), {"x": X}),
    "norm-fro": (lambda c: np.linalg.norm(c, "fro", axis=(0, 2)), {"c": C}),
    "norm-matrix-1": (lambda x: np.linalg.norm(x, 1), {"x": X}),
    "norm-matrix-inf-keepdims": (lambda x: np.linalg.norm(x, np.inf, keepdims=True), {"x": X}),
    "norm-int": (lambda i: np.linalg.norm(i, axis=1), {"i": I32}),
    # shape queries
    "shape-queries": (lambda c: c * np.ndim(c) + np.size(c, 1) - np.shape(c)[0] + np.size(c), {"c": C}),
    "result_type": (lambda x, i: (x + i).astype(np.result_type(x, i, np.float32)), {"x": X, "i": I32}),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_traced_call_gives_numpys_values_shapes_and_dtypes(name):
    fn, inputs = CALLS[name]
    assert_same_as_numpy(traced(name, fn), inputs)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_traced_call_lineage_passes_the_oracle(name, tmp_path):
    """A real run (tiles of 2 cells along each axis) of each call: every changed output is in
    the forward lineage of its perturbed input cell, and the cell in its backward lineage."""
    fn, inputs = CALLS[name]
    f = traced(name, fn)
    run = f.run(inputs, store=tmp_path / "r", executor="local", tile_shape=2)
    wf = f.trace(inputs)
    report = check_workflow(run, wf, inputs, cells=10, backward=6, seed=3)
    assert report.ok, str(report)


# -- hypothesis: reductions over random shapes, axes and keepdims ------------------------------------------------
REDUCE = ["median", "nanmedian", "var", "nanvar", "prod", "ptp", "argmax", "argmin", "cumsum", "cumprod"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(how=st.sampled_from(REDUCE + ["percentile", "quantile"]), shape=st.lists(st.integers(1, 4), min_size=1,
       max_size=3), data=st.data())
def test_reductions_match_numpy_on_random_shapes_and_axes(how, shape, data):
    x = np.round(np.random.default_rng(len(shape)).normal(size=tuple(shape)), 3)
    ndim = len(shape)
    one_axis = how.startswith("arg") or how.startswith("cum")
    if one_axis:
        axis = data.draw(st.one_of(st.none(), st.integers(-ndim, ndim - 1)))
    else:
        axis = data.draw(st.one_of(st.none(), st.integers(-ndim, ndim - 1),
                                   st.lists(st.integers(0, ndim - 1), min_size=1, unique=True).map(tuple)))
    kw = {} if how.startswith("cum") else {"keepdims": data.draw(st.booleans())}
    if how == "percentile":
        args: tuple = (data.draw(st.sampled_from([0.0, 37.5, [5.0, 95.0]])),)
    elif how == "quantile":
        args = (data.draw(st.sampled_from([1.0, 0.25, [0.5]])),)
    else:
        args = ()
    fn = getattr(np, how)
    assert_same_as_numpy(traced(how, lambda x: fn(x, *args, axis=axis, **kw)), {"x": x})


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 9), m=st.integers(1, 9), mode=st.sampled_from(["full", "same", "valid"]),
       correlate=st.booleans(), constant=st.sampled_from([None, 0, 1]))
def test_convolutions_match_numpy_for_every_length_and_mode(n, m, mode, correlate, constant):
    rng = np.random.default_rng(n * 10 + m)
    a, v = np.round(rng.normal(size=n), 3), np.round(rng.normal(size=m), 3)
    np_fn = np.correlate if correlate else np.convolve
    if constant is None:
        assert_same_as_numpy(traced("conv", lambda a, v: np_fn(a, v, mode)), {"a": a, "v": v})
    elif constant == 0:
        assert_same_as_numpy(traced("conv", lambda v: np_fn(a, v, mode)), {"v": v})
    else:
        assert_same_as_numpy(traced("conv", lambda a: np_fn(a, v, mode)), {"a": a})


# -- exact lineage, cell by cell, as the guide states it ---------------------------------------------------------
def _run(name, fn, inputs, tmp_path):
    f = traced(name, fn)
    return f.run(inputs, store=tmp_path / name, executor="local", tile_shape=2)


def test_median_reads_its_whole_line(tmp_path):
    run = _run("median", lambda x: np.median(x, axis=1), {"x": X}, tmp_path)
    assert run.backward("out", [(2,)], to="x").tolist() == [[2, j] for j in range(5)]


def test_cumsum_reads_a_prefix_and_reaches_a_suffix(tmp_path):
    run = _run("cumsum", lambda x: np.cumsum(x, axis=1), {"x": X}, tmp_path)
    assert run.backward("out", [(1, 3)], to="x").tolist() == [[1, 0], [1, 1], [1, 2], [1, 3]]
    assert run.forward("x", [(1, 3)], to="out").tolist() == [[1, 3], [1, 4]]
    mask = np.zeros((4, 5), bool)
    mask[1, 2:4] = True
    expected = np.zeros((4, 5), bool)
    expected[1, :4] = True  # the union of the prefixes of (1, 2) and (1, 3)
    assert np.array_equal(run.backward_mask("out", mask, to="x"), expected)


def test_diff_reads_i_to_i_plus_n(tmp_path):
    run = _run("diff", lambda v: np.diff(v, n=2), {"v": V}, tmp_path)
    assert run.backward("out", [(3,)], to="v").tolist() == [[3], [4], [5]]


def test_diff_prepend_scalar_is_read_by_nothing(tmp_path):
    run = _run("diffp", lambda v: np.diff(v, prepend=0.0), {"v": V}, tmp_path)
    assert run.backward("out", [(0,)], to="v").tolist() == [[0]]
    assert run.backward("out", [(3,)], to="v").tolist() == [[2], [3]]


def test_convolve_same_reads_the_kernel_window_clipped_at_the_edges(tmp_path):
    run = _run("conv", lambda v: np.convolve(v, KERNEL, "same"), {"v": V}, tmp_path)
    assert run.backward("out", [(0,)], to="v").tolist() == [[0], [1]]
    assert run.backward("out", [(3,)], to="v").tolist() == [[2], [3], [4]]
    assert run.backward("out", [(6,)], to="v").tolist() == [[5], [6]]


def test_isin_reads_its_element_and_every_test_element(tmp_path):
    run = _run("isin", lambda i, v: np.isin(i, v), {"i": I32, "v": V}, tmp_path)
    assert run.backward("out", [(1, 2)], to="i").tolist() == [[1, 2]]
    assert run.backward("out", [(1, 2)], to="v").tolist() == [[k] for k in range(7)]


def test_searchsorted_reads_its_value_and_the_whole_table(tmp_path):
    run = _run("ss", lambda v, x: np.searchsorted(v, x), {"v": SORTED, "x": X}, tmp_path)
    assert run.backward("out", [(0, 4)], to="x").tolist() == [[0, 4]]
    assert run.backward("out", [(0, 4)], to="v").tolist() == [[k] for k in range(6)]


def test_take_reads_the_cell_its_index_names(tmp_path):
    run = _run("take", lambda x: np.take(x, [4, 0], axis=1), {"x": X}, tmp_path)
    assert run.backward("out", [(2, 0)], to="x").tolist() == [[2, 4]]


def test_einsum_matmul_reads_a_row_and_a_column(tmp_path):
    run = _run("einsum", lambda x, w: np.einsum("ij,jk->ik", x, w), {"x": X, "w": W.T}, tmp_path)
    assert run.backward("out", [(1, 2)], to="x").tolist() == [[1, j] for j in range(5)]
    assert run.backward("out", [(1, 2)], to="w").tolist() == [[j, 2] for j in range(5)]


# -- errors that say the fix ---------------------------------------------------------------------------------------
def _raises(fn, inputs, cls, *fragments):
    """Traced from shapes alone, the call is refused naming the user's line and the fix; traced
    on the arrays, it runs as a labelled coarse step (or fails as numpy itself fails)."""
    shapes = {k: types.SimpleNamespace(shape=np.shape(v), dtype=np.asarray(v).dtype) for k, v in inputs.items()}
    with pytest.raises(cls) as info:
        fn.trace(shapes)
    assert isinstance(info.value, WorkflowError) and isinstance(info.value, TraceError)
    message = str(info.value)
    assert "test_numpy_stats.py:" in message, message  # the user's line
    for fragment in fragments:
        assert fragment in message, message
    try:
        report = fn.report(inputs)
    except Exception:  # noqa: BLE001 - numpy refuses these arguments too
        pass
    else:
        assert not report.exact, str(report)
    return message


def test_r_and_c_with_symbolic_parts_name_the_line_and_the_rewrite():
    @sz.workflow
    def joined(v):
        return np.r_[v, v]

    _raises(joined, {"v": V}, UnsupportedCallError, "np.r_", "np.concatenate([...])")

    @sz.workflow
    def columns(v):
        return np.c_[v, v]

    _raises(columns, {"v": V}, UnsupportedCallError, "np.c_", "np.stack([...], axis=-1)")


def test_take_with_traced_indices_gathers_by_their_values():
    f = traced("t", lambda x, i: np.take(x, i))
    inputs = {"x": X, "i": np.abs(I32) % X.size}
    np.testing.assert_array_equal(evaluate_workflow(f.trace(inputs), inputs)["out"], np.take(X, inputs["i"]))
    assert f.report(inputs).exact


def test_unsupported_forms_say_what_to_do():
    _raises(traced("e", lambda x: np.einsum("ii->i", x[:4, :4])), {"x": X}, UnsupportedCallError,
            "repeats an index", "np.diagonal")
    _raises(traced("e2", lambda x: np.einsum("...j->j", x)), {"x": X}, UnsupportedCallError, "'...'")
    _raises(traced("q", lambda x, i: np.quantile(x, i)), {"x": X, "i": I32}, UnsupportedCallError,
            "q must be constant")
    _raises(traced("n", lambda x: np.linalg.norm(x, 2)), {"x": X}, UnsupportedCallError, "singular values")


def test_numpys_errors_stay_errors_at_trace_time():
    _raises(traced("d", lambda v: np.diff(v, n=7)), {"v": V}, TraceError, "n=7", "give n <")
    _raises(traced("p", lambda x: np.percentile(x, 120)), {"x": X}, TraceError, "[0, 100]")
    _raises(traced("k", lambda x: np.take(x, [20], axis=1)), {"x": X}, TraceError, "out of bounds")
    _raises(traced("c", lambda x: np.convolve(x, KERNEL)), {"x": X}, TraceError, "must be 1-D")
    _raises(traced("a", lambda x: np.average(x, weights=np.ones(5))), {"x": X}, TraceError, "Axis must be specified")


ALL_REDUCTIONS = ["sum", "mean", "std", "var", "min", "max", "prod", "any", "all", "count_nonzero", "nansum",
                  "nanmean", "nanstd", "nanvar", "nanmin", "nanmax", "nanprod", "ptp", "median", "nanmedian"]


@pytest.mark.parametrize("how", ALL_REDUCTIONS)
@pytest.mark.parametrize("axis", [None, 1, (0, 2), (0, 1, 2)])
def test_every_reduction_takes_keepdims_over_some_or_every_axis(how, axis):
    fn = getattr(np, how)
    assert_same_as_numpy(traced(how, lambda c: fn(c, axis=axis, keepdims=True)), {"c": C})
    assert_same_as_numpy(traced(how, lambda c: fn(c, axis=axis)), {"c": C})

"""The numpy front end: traced functions give numpy's values, shapes and dtypes, stable
names, parameters, and trace-time errors that name the user's line and the fix."""

from __future__ import annotations

import os
import sysconfig
import types

import numpy as np
import pytest

import subzero as sz
from subzero.errors import WorkflowError
from subzero.oracle import check_workflow, evaluate_workflow
from subzero.trace import ControlFlowError, TraceError

RNG = np.random.default_rng(7)
X = np.round(RNG.normal(size=(5, 6)), 3)
Y = np.round(RNG.uniform(0.5, 2.0, size=(5, 6)), 3)
V = np.round(RNG.normal(size=6), 3)
F32 = RNG.normal(size=(5, 6)).astype(np.float32)
I32 = RNG.integers(-5, 6, size=(5, 6)).astype(np.int32)
NANS = np.where(RNG.random((5, 6)) < 0.2, np.nan, X)


def outputs_of(fn, inputs, params=None):
    """(traced outputs by name, eager outputs by name) of a traced function."""
    wf = fn.trace(inputs, params)
    values = evaluate_workflow(wf, inputs)
    eager = fn(**inputs, **(params or {}))
    if isinstance(eager, dict):
        named = eager
    elif isinstance(eager, (tuple, list)):
        named = {f"out{k}": v for k, v in enumerate(eager)}
    else:
        named = {"out": eager}
    return {k: values[k] for k in named}, named


def assert_same(fn, inputs, params=None, exact=True):
    traced, eager = outputs_of(fn, inputs, params)
    for key, want in eager.items():
        want, got = np.asarray(want), traced[key]
        assert got.dtype == want.dtype, (key, got.dtype, want.dtype)
        if want.ndim == 0:  # a 0-d output is stored as one cell
            assert got.size == 1, key
            got = got.reshape(())
        assert got.shape == want.shape, (key, got.shape, want.shape)
        if exact:
            np.testing.assert_array_equal(got, want, err_msg=key)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=key)


# -- values, shapes, dtypes ---------------------------------------------------------------------------
@sz.workflow
def arithmetic(x, y, f, i):
    return {"a": x + y * 2 - 1 / y, "b": 2 ** (x / 4) - 3 % y, "c": -x // y, "d": abs(x) ** 0.5,
            "e": f * 3, "ff": f + x, "g": i / 2, "h": i * 3, "k": f - np.mean(f), "m": i - np.mean(i),
            "n": x - np.mean(x), "o": (x - np.mean(x)) / np.std(x), "p": i + np.float64(1.5), "q": f + 1}


@sz.workflow
def logic(x, y):
    big = x > 0.5
    return {"and": big & (y < 1), "or": (x <= y) | ~big, "eq": x == y, "ne": 0 != x, "rev": 1 < x,
            "land": np.logical_and(big, y >= 1.0), "xor": np.logical_xor(big, x < 0)}


@sz.workflow
def ufuncs(x, y, n):
    return {"sqrt": np.sqrt(y), "log": np.log(y), "exp": np.exp(x), "abs": np.abs(x), "isnan": np.isnan(n),
            "isfinite": np.isfinite(n / x), "max": np.maximum(x, y), "min": np.minimum(x, 0.0),
            "where": np.where(np.isfinite(n), n, 0.0), "where3": np.where(x > 0, x, y),
            "clip": np.clip(x, -0.5, 0.5), "clip_lo": np.clip(x, 0, None), "nan_to_num": np.nan_to_num(n, nan=-1.0),
            "hypot": np.hypot(x, y), "round": np.round(x, 1), "list": np.maximum(x, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0])}


@sz.workflow
def reductions(x, n, i):
    return {"sum": np.sum(x), "sum0": np.sum(x, axis=0), "mean1": x.mean(axis=1), "std": np.std(x, axis=0, ddof=1),
            "min": np.min(x, axis=-1), "max": x.max(), "count": np.count_nonzero(x > 0, axis=1),
            "count_all": np.count_nonzero(i), "keep": np.sum(x, axis=1, keepdims=True),
            "keep_all": np.mean(x, keepdims=True),
            "nansum": np.nansum(n, axis=0), "nanmean": np.nanmean(n), "nanmax": np.nanmax(n, axis=1),
            "nanstd": np.nanstd(n, axis=0), "nanmin": np.nanmin(n), "isum": np.sum(i, axis=0), "imean": np.mean(i),
            "any": np.any(x > 2, axis=0), "all": np.all(x > -5), "var": np.var(x), "prod": np.prod(x)}


@sz.workflow
def shapes(x, y, v):
    return {"T": x.T, "tr": np.transpose(x[None], (1, 0, 2)), "reshape": x.reshape(3, -1), "ravel": np.ravel(x),
            "cat": np.concatenate([x, y], axis=1), "cat_none": np.concatenate([x, y], axis=None),
            "stack": np.stack([x, y], axis=-1), "flip": np.flip(x, 0), "fliplr": np.fliplr(x),
            "pad": np.pad(x, ((1, 2), (0, 3)), constant_values=9.0), "pad_edge": np.pad(x, 2, mode="edge"),
            "pad_reflect": np.pad(x, 1, mode="reflect"), "roll": np.roll(x, 2, axis=1), "roll_flat": np.roll(x, -3),
            "roll2": np.roll(x, (1, -2), axis=(0, 1)), "tile": np.tile(v, (2, 3)), "repeat": np.repeat(x, 2, axis=0),
            "squeeze": np.squeeze(x[:, :1]), "expand": np.expand_dims(v, 0), "swap": np.swapaxes(x, 0, 1),
            "moveaxis": np.moveaxis(x[None], 0, -1)}


@sz.workflow
def products(x, y, v):
    return {"matmul": x @ y.T, "np_matmul": np.matmul(x.T, y), "dot": np.dot(x, v), "vdot": np.dot(v, v),
            "mv": y @ v, "outer": np.outer(v, v[:4]), "mouter": np.multiply.outer(v, v), "vm": v[:5] @ x}


@sz.workflow
def ordering(x, i):
    counts, edges = np.histogram(x, bins=4)
    fixed, fixed_edges = np.histogram(x, bins=5, range=(-1.0, 1.0))
    assert np.array_equal(fixed_edges, np.linspace(-1.0, 1.0, 6))  # edges from the range are constants
    return {"sort": np.sort(x, axis=0), "sort_none": np.sort(x, axis=None), "argsort": np.argsort(x),
            "isort": np.sort(i), "counts": counts, "edges": edges, "fixed": fixed}


@sz.workflow
def casting(x, f, i):
    return {"f32": x.astype(np.float32), "as_int": x.astype(int), "back": f.astype(np.float64) + i,
            "bool": i.astype(bool) & (f > 0), "same": f.astype(np.float32) * 2}


@sz.workflow
def indexing(x):
    return {"row": x[1], "neg": x[-1, ::2], "steps": x[4:0:-2, 1::3], "ellipsis": x[..., 2], "none": x[None, 1:3],
            "cell": x[2, 3] * 2, "mixed": x[:, None, -2:], "full": x[...], "iter": sum(row for row in x[:2])}


@pytest.mark.parametrize("fn, inputs, exact", [
    (arithmetic, {"x": X, "y": Y, "f": F32, "i": I32}, True),
    (logic, {"x": X, "y": Y}, True),
    (ufuncs, {"x": X, "y": Y, "n": NANS}, True),
    (reductions, {"x": X, "n": NANS, "i": I32}, True),
    (shapes, {"x": X, "y": Y, "v": V}, True),
    (products, {"x": X, "y": Y, "v": V}, False),
    (ordering, {"x": X, "i": I32}, True),
    (casting, {"x": X, "f": F32, "i": I32}, True),
    (indexing, {"x": X}, True),
], ids=lambda v: getattr(v, "name", ""))
def test_traced_values_shapes_and_dtypes_are_numpys(fn, inputs, exact):
    assert_same(fn, inputs, exact=exact)


def test_a_run_stores_numpys_values_and_its_lineage_passes_the_oracle(tmp_path):
    @sz.workflow
    def centred(x, y, scale: float = 1.0):
        c = (x - np.mean(x)) * scale
        return {"c": c, "smooth": np.sort(c, axis=1)[:, 1:] + y[:, ::2].sum(axis=1, keepdims=True)}

    inputs = {"x": X, "y": Y}
    run = centred.run(inputs, store=tmp_path / "r", executor="local", params={"scale": 2.0})
    eager = centred(X, Y, scale=2.0)
    for key in eager:
        np.testing.assert_array_equal(np.asarray(run.output(key)), eager[key])
    wf = centred.trace(inputs, {"scale": 2.0})
    report = check_workflow(run, wf, inputs, cells=12, backward=8)
    assert report.ok, str(report)
    assert run.backward("smooth", [(1, 0)], to="y").tolist() == [[1, 0], [1, 2], [1, 4]]


# -- names, outputs, parameters ------------------------------------------------------------------------------
def test_automatic_names_are_stable_and_sz_name_names_a_node():
    @sz.workflow
    def f(x):
        a = np.sqrt(np.abs(x))
        b = np.sqrt(a + 1)
        return sz.name(b, "root") * 2

    names = [n.name for n in f.trace({"x": X}).nodes]
    assert names == ["x", "absolute", "sqrt", "add", "root", "out"]
    assert [n.name for n in f.trace({"x": X * 2}).nodes] == names


def test_outputs_are_dict_keys_or_out_k_and_unused_values_are_left_out():
    @sz.workflow
    def pair(x, y):
        np.exp(x)  # unused: not in the workflow
        return x + y, x

    wf = pair.trace({"x": X, "y": Y})
    assert [n.name for n in wf.nodes] == ["x", "y", "out0", "out1"]
    assert type(wf.node("out1").operator).__name__ == "Apply"  # an input returned is copied under its name


def test_parameters_retrace_and_command_line_strings_take_the_defaults_type():
    @sz.workflow
    def f(x, k: int = 2, scale=1.5, flag: bool = False):
        return {"y": np.roll(x, k, axis=1) * scale + (1 if flag else 0)}

    assert f.parameters({"k": "3", "flag": "true"}) == {"k": 3, "scale": 1.5, "flag": True}
    assert_same(f, {"x": X}, {"k": 3, "scale": 0.5})
    with pytest.raises(WorkflowError, match="no parameter 'size'"):
        f.trace({"x": X}, {"size": 3})
    with pytest.raises(WorkflowError, match="expected a int"):
        f.parameters({"k": "three"})
    with pytest.raises(WorkflowError, match=r"needs input\(s\) \['x'\]"):
        f.trace({}, {})


# -- trace-time errors ----------------------------------------------------------------------------------------------
def _raises(fn, inputs, cls, *fragments):
    with pytest.raises(cls) as info:
        fn.trace(inputs)
    assert isinstance(info.value, WorkflowError) and isinstance(info.value, TraceError)
    message = str(info.value)
    assert "test_trace.py:" in message, message  # the user's line
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_control_flow_on_values_takes_this_runs_path_and_is_reported():
    @sz.workflow
    def f(x):
        if x.max() > 3:
            return x * 2
        return -x

    big, small = X * 10, X / 100
    for data in (big, small):
        wf = f.trace({"x": data})
        assert [n.name for n in wf.nodes][-1] == "out"
        np.testing.assert_allclose(evaluate_workflow(wf, {"x": data})["out"], f(data))
    report = f.report({"x": big})
    assert any(e.kind == "value" and "if x.max() > 3" in e.line for e in report.events), str(report)
    assert report.exact and "0 coarse" in str(report)


def test_control_flow_without_values_names_the_line_and_the_fix():
    @sz.workflow
    def f(x):
        if x.max() > 3:
            return x
        return -x

    shape_only = types.SimpleNamespace(shape=X.shape, dtype=X.dtype)
    message = _raises(f, {"x": shape_only}, ControlFlowError, "input arrays", "np.where")
    assert "if x.max() > 3" in message
    assert isinstance(ControlFlowError("m", line=""), TypeError)


def test_a_library_converting_its_input_becomes_a_coarse_labelled_step():
    from scipy import ndimage

    @sz.workflow
    def f(x):
        return ndimage.distance_transform_edt(x > 0) + 1

    wf = f.trace({"x": X})
    np.testing.assert_allclose(evaluate_workflow(wf, {"x": X})["out"], f(X))
    report = f.report({"x": X})
    assert not report.exact and any(e.kind in ("leak", "coarse") for e in report.events), str(report)

    @sz.workflow
    def g(x):
        return np.asarray(x) + 1  # numpy's conversion of a traced array keeps tracing

    assert g.report({"x": X}).exact
    assert all("test_trace.py:" in e.line for e in report.events if e.kind in ("leak", "coarse")), str(report)


def test_in_place_updates_are_rebindings_with_numpys_values():
    @sz.workflow
    def setitem(x):
        x[0] = 1.0
        return x

    @sz.workflow
    def iadd(x):
        x += 1
        return x

    @sz.workflow
    def out(x):
        y = x * 1
        np.add(x, 1, out=y)
        return y

    for f in (setitem, iadd, out):
        wf = f.trace({"x": X.copy()})
        np.testing.assert_allclose(evaluate_workflow(wf, {"x": X})["out"], f(X.copy()))
        assert f.report({"x": X.copy()}).exact


def test_accumulating_into_a_numpy_array_stays_exact_and_its_other_names_see_numpys_values():
    """``acc = np.zeros(...); acc += f(x)`` in a library (skimage's edge filters): numpy's array gets
    the values and the name goes on as the traced result, so what follows is exact; another name
    for the numpy array still sees every later in-place update, as in numpy."""
    library = types.ModuleType("a_library")
    exec(compile("import numpy as np\n"
                 "def accumulate(x):\n"
                 "    acc = np.zeros(x.shape)\n"
                 "    for k in range(3):\n"
                 "        acc += x * k\n"
                 "    return np.sqrt(np.abs(acc))\n"
                 "def aliased(x):\n"
                 "    a = np.zeros(x.shape)\n"
                 "    b = a\n"
                 "    a += x\n"
                 "    a *= 2\n"
                 "    return a, b\n", os.path.join(sysconfig.get_paths()["purelib"], "a_library.py"), "exec"), library.__dict__)

    @sz.workflow
    def accumulate(x):
        return library.accumulate(x)

    @sz.workflow
    def aliased(x):
        a, b = library.aliased(x)
        return {"a": a, "b": b + 0}

    report = accumulate.report({"x": X.copy()})
    assert report.exact, str(report)
    assert not report.events, str(report)  # no name but acc held numpy's array: no values written into it
    assert [n.name for n in accumulate.trace({"x": X.copy()}).nodes if n.operator is None] == ["x"]  # zeros: 0.0
    np.testing.assert_array_equal(evaluate_workflow(accumulate.trace({"x": X.copy()}), {"x": X})["out"],
                                  accumulate(X.copy()))
    got = evaluate_workflow(aliased.trace({"x": X.copy()}), {"x": X})
    expected = aliased(X.copy())
    for key in ("a", "b"):
        np.testing.assert_array_equal(got[key], expected[key])
    assert "a" not in aliased.report({"x": X.copy()}).coarse


def test_a_numpy_array_of_one_value_is_a_scalar_bit_for_bit():
    """An array whose cells all hold one value enters an elementwise call as that scalar (no
    constant node); one that holds -0.0 and 0.0 is not uniform (1 / -0.0 is -inf)."""
    x = np.array([[-2.0, 3.0], [4.0, -5.0]])
    ones, zeros = np.ones(x.shape), np.zeros(x.shape)
    zeros[0, 0] = -0.0

    @sz.workflow
    def f(x):
        return {"plus": x + ones, "inverse": 1.0 / (x * 0.0 + zeros)}

    wf = f.trace({"x": x})
    got = evaluate_workflow(wf, {"x": x})
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(got["inverse"], 1.0 / (x * 0.0 + zeros))  # -inf where x < 0 at [0, 0]
    np.testing.assert_array_equal(got["plus"], x + 1)
    assert [n.name for n in wf.nodes if n.operator is None] == ["x", "constant"]  # the zeros only


def test_calls_without_a_rule_run_as_coarse_steps_naming_the_line():
    @sz.workflow
    def f(x):
        return np.polyfit(np.arange(x.shape[0]), x, 1)

    wf = f.trace({"x": X})
    np.testing.assert_allclose(evaluate_workflow(wf, {"x": X})["out"], f(X))
    report = f.report({"x": X})
    assert list(report.coarse) and "np.polyfit" in str(report) and "test_trace.py:" in str(report)

    @sz.workflow
    def g(x):
        return x[x > 0]

    np.testing.assert_allclose(evaluate_workflow(g.trace({"x": X}), {"x": X})["out"], X[X > 0])
    assert g.report({"x": X}).exact


def test_shape_errors_fail_at_trace_time_on_the_users_line():
    @sz.workflow
    def f(x, v):
        return x @ v[:4]

    _raises(f, {"x": X, "v": V}, TraceError, "not aligned")


# -- the command line ---------------------------------------------------------------------------------------------
PIPELINE = '''
import os
import sysconfig

import numpy as np
import subzero as sz
from subzero import ndimage as szi


@sz.workflow
def reduce(raw, dark, threshold: float = 5.0):
    x = raw - dark
    stars, n = szi.label(szi.gaussian_filter(x, 1.0) > threshold)
    return {"clean": x, "stars": stars}


@sz.workflow
def root(raw):
    return np.sqrt(np.abs(raw))
'''


def test_subzero_run_takes_a_file_of_workflow_functions(tmp_path, capsys):
    from subzero.tools.cli import main

    script = tmp_path / "pipeline.py"
    script.write_text(PIPELINE)
    raw, dark = np.round(RNG.normal(size=(12, 10)) * 3, 2), np.zeros((12, 10))
    np.save(tmp_path / "raw.npy", raw)
    np.save(tmp_path / "dark.npy", dark)
    files = ["--input", f"raw={tmp_path / 'raw.npy'}", "--input", f"dark={tmp_path / 'dark.npy'}"]
    assert main(["run", str(script), *files, "--store", str(tmp_path / "a"), "--executor", "local"]) == 2
    assert "several @sz.workflow functions (reduce, root); pick one with --workflow NAME" in capsys.readouterr().err
    assert main(["run", str(script), "--workflow", "reduce", *files, "--param", "threshold=1.5",
                 "--store", str(tmp_path / "a"), "--executor", "local", "-q"]) == 0
    from scipy import ndimage

    run = sz.open_run(tmp_path / "a")
    want = ndimage.label(ndimage.gaussian_filter(raw, 1.0) > 1.5)[0]
    np.testing.assert_array_equal(np.asarray(run.output("stars")), want)
    cell = tuple(np.argwhere(want)[0])
    assert len(run.backward("stars", [cell], to="raw")) > 9
    assert main(["run", str(script), "--workflow", "root", files[0], files[1], "--store", str(tmp_path / "b"),
                 "--executor", "local", "-q"]) == 0
    assert main(["run", str(script), "--workflow", "reduce", files[0], files[1], "--store", str(tmp_path / "c"),
                 "--executor", "local"]) == 2
    assert "needs input 'dark': give --input dark=PATH" in capsys.readouterr().err
    assert main(["run", str(script), "--workflow", "nope", *files, "--store", str(tmp_path / "d")]) == 2
    assert "no @sz.workflow function named 'nope'" in capsys.readouterr().err


# -- random programs (hypothesis) -------------------------------------------------------------------------------------
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from subzero import ndimage as szi  # noqa: E402

N = 5  # square arrays: transposes and products keep the shape, so any step can feed any other


def _pad_shift(a, b, k):
    return np.pad(a[1:, :], ((0, 1), (0, 0)), mode="edge") + b * 0.5


#: steps over two (N, N) float arrays to one (N, N) float array; work on numpy and symbolic arrays alike
STEPS = [
    ("add", lambda a, b, k: a + b),
    ("sub_scalar", lambda a, b, k: a - 0.25 * k),
    ("mul", lambda a, b, k: a * b),
    ("rdiv", lambda a, b, k: 1.0 / (np.abs(a) + 1.0)),
    ("maximum", lambda a, b, k: np.maximum(a, b)),
    ("sqrt_abs", lambda a, b, k: np.sqrt(np.abs(a))),
    ("exp_clip", lambda a, b, k: np.exp(np.clip(a, -3, 3))),
    ("where", lambda a, b, k: np.where(a > b, a, b - 1.0)),
    ("centre", lambda a, b, k: a - np.mean(b)),
    ("scale", lambda a, b, k: a / (np.std(a) + 1.0)),
    ("axis_mean", lambda a, b, k: np.mean(a, axis=k % 2, keepdims=True) + b),
    ("sum_max", lambda a, b, k: np.max(a, axis=1)[:, None] * 0.1 + np.sum(b, axis=0) * 0.1),
    ("T", lambda a, b, k: a.T),
    ("flip", lambda a, b, k: np.flip(a, k % 2)),
    ("roll", lambda a, b, k: np.roll(a, k, axis=1)),
    ("pad_shift", _pad_shift),
    ("sort", lambda a, b, k: np.sort(a, axis=k % 2)),
    ("matmul", lambda a, b, k: (a @ b) * 0.2),
    ("cat", lambda a, b, k: np.concatenate([a[:, :2], b[:, 2:]], axis=1)),
    ("reshape", lambda a, b, k: a.reshape(-1)[::-1].reshape(N, N)),
    ("step_slice", lambda a, b, k: np.tile(a[::2, ::2], (2, 2))[:N, :N]),
    ("gaussian", lambda a, b, k: szi.gaussian_filter(a, 0.7, truncate=2.0) if _symbolic(a) else _scipy_gauss(a)),
    ("median", lambda a, b, k: szi.median_filter(a, 3)),
    ("nan_to_num", lambda a, b, k: np.nan_to_num(np.where(a > 1.5, np.nan, a), nan=-1.0)),
]


def _symbolic(a) -> bool:
    return type(a).__name__ == "SymbolicArray"


def _scipy_gauss(a):
    from scipy import ndimage

    return ndimage.gaussian_filter(a, 0.7, truncate=2.0)


def program(steps):
    """A traced function of (x, y) applying ``steps`` ((step index, input a, input b, k) each)."""
    def fn(x, y):
        values = [x, y]
        for index, i, j, k in steps:
            values.append(STEPS[index][1](values[i % len(values)], values[j % len(values)], k))
        return {"out": values[-1], "mid": values[2 + len(steps) // 2]}
    return sz.workflow(fn, name="program")


PROGRAMS = st.lists(st.tuples(st.integers(0, len(STEPS) - 1), st.integers(0, 99), st.integers(0, 99),
                              st.integers(1, 3)), min_size=1, max_size=7)
INPUTS = st.integers(0, 2**31 - 1).map(lambda seed: {
    name: np.round(np.random.default_rng(seed + k).normal(size=(N, N)), 2) for k, name in enumerate("xy")})
QUICK = settings(max_examples=int(os.environ.get("SUBZERO_TRACE_EXAMPLES", 60)), deadline=None,
                 suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=15, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@QUICK
@given(steps=PROGRAMS, inputs=INPUTS)
def test_random_programs_trace_to_numpys_values(steps, inputs):
    fn = program(steps)
    eager = fn(**inputs)
    values = evaluate_workflow(fn.trace(inputs), inputs)
    for key in ("out", "mid"):
        assert values[key].dtype == eager[key].dtype and values[key].shape == eager[key].shape
        np.testing.assert_allclose(values[key], eager[key], rtol=1e-12, atol=1e-12, equal_nan=True)


@SLOW
@given(steps=PROGRAMS, inputs=INPUTS)
def test_random_programs_have_oracle_exact_lineage_under_every_strategy(tmp_path_factory, steps, inputs):
    from subzero_bench.configs import configuration

    fn = program(steps)
    wf = fn.trace(inputs)
    root = tmp_path_factory.mktemp("program")
    runs = {builtin: wf.run(inputs, store=root / builtin, executor="local", strategies=configuration(wf, {}, builtin))
            for builtin in ("Map", "FullOne", "BlackBox")}
    report = check_workflow(runs["Map"], wf, inputs, cells=6, backward=4)
    assert report.ok, str(report)
    rng = np.random.default_rng(len(steps))
    reaching = [n.name for n in wf.ancestors(wf.node("out")) if n.is_input]
    for cell in map(tuple, rng.integers(0, N, size=(3, 2))):
        for source in reaching:
            answers = [(run.backward("out", [cell], to=source), run.forward(source, [cell], to="out"))
                       for run in runs.values()]
            for back, forward in answers[1:]:
                np.testing.assert_array_equal(back, answers[0][0])
                np.testing.assert_array_equal(forward, answers[0][1])


def test_a_traced_workflow_runs_on_spark_as_locally(tmp_path, spark):
    @sz.workflow
    def pipeline(raw, dark, level: float = 0.3):
        x = (raw - dark) / np.std(raw)
        smooth = szi.gaussian_filter(np.where(np.isfinite(x), x, 0.0), 1.0, truncate=2.0)
        stars, _ = szi.label(szi.binary_dilation(smooth > level))
        squash = sz.udf(lambda v: np.tanh(v) * 2, lineage="elementwise")  # a udf travels to the workers too
        return {"smooth": smooth, "stars": stars, "rows": np.sort(squash(smooth), axis=1)[:, -2:]}

    raw = np.round(np.random.default_rng(1).normal(size=(24, 20)) * 2, 2)
    inputs = {"raw": raw, "dark": np.zeros_like(raw)}
    local = pipeline.run(inputs, store=tmp_path / "local", executor="local", tile_shape=8)
    remote = pipeline.run(inputs, store=tmp_path / "spark", executor="spark", spark=spark, tile_shape=8)
    for key in ("smooth", "stars", "rows"):
        np.testing.assert_array_equal(np.asarray(remote.output(key)), np.asarray(local.output(key)))
    star = tuple(np.argwhere(np.asarray(local.output("stars")) > 0)[0])
    for cell in (star, (3, 4)):
        for ask, node, to in (("backward", "stars", "raw"), ("forward", "dark", "rows")):
            want = getattr(local, ask)(node, [cell], to=to)
            np.testing.assert_array_equal(getattr(remote, ask)(node, [cell], to=to), want)


@pytest.mark.parametrize("where", ["docs/guide/quickstart.md", "docs/index.md", "README.md"])
def test_the_numpy_example_runs_and_says_true(tmp_path, where):
    """The `@sz.workflow` example of the quick start ("Your own numpy code"), and the copies the
    site's home page and the README show, run as written and answer what their comments say."""
    import subprocess
    import sys
    from pathlib import Path

    from doc_pages import fenced

    root = Path(__file__).resolve().parent.parent
    examples = [body for body in fenced((root / where).read_text(), "python")
                if body.startswith("import numpy as np\nimport subzero as sz\nfrom subzero import ndimage")]
    assert len(examples) == 1, f"{where} has {len(examples)} @sz.workflow examples; expected one"
    example = examples[0]
    assert 'params={"threshold": 2.0})' in example, example  # run in-process below, to keep the test fast
    example = example.replace('params={"threshold": 2.0})', 'params={"threshold": 2.0}, executor="local")')
    example += ("assert run.backward('clean', [(12, 31)], to='raw').tolist() == [[12, 31]]\n"
                "assert len(run.backward('gaussian_filter', [(12, 31)], to='raw')) == 13 * 13\n"
                "assert len(run.forward('dark', [(12, 31)], to='stars')) == 64 * 64\n"
                "assert (reduce(**frames, threshold=2.0)['stars'] == run.output('stars')[:]).all()\n")
    done = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True, cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=str(root)))
    assert done.returncode == 0, done.stderr


def test_the_tracing_guide_example_runs_as_written(tmp_path, monkeypatch):
    import re

    page = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "guide",
                        "tracing-real-code.md")
    with open(page) as f:
        block = re.search(r"```python\n(.*?)```", f.read(), re.S).group(1)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(block, page, "exec"), namespace)
    run = namespace["run"]
    # the outlier moved the median and the std every cell's mask decision read
    assert [10, 20] in run.backward("clean", [(0, 0)], to="image").tolist()
    report = namespace["clean"].report({"image": namespace["image"], "threshold": 5.0})
    assert any(e.kind == "value" for e in report.events) and "np.polyfit" in str(report)


# -- what a step's node is made from, found once --------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), max_size=4), max_size=4))
def test_a_steps_broadcast_shape_is_numpys(shapes):
    from subzero.trace.building import _broadcast
    try:
        expected = np.broadcast_shapes(*[tuple(s) for s in shapes])
    except ValueError:
        with pytest.raises(ValueError):
            _broadcast(shapes)
    else:
        assert _broadcast(shapes) == expected


def test_a_steps_dtype_is_numpys_each_time_it_is_asked():
    from subzero.trace.building import _DTYPES, _dtype_of
    from subzero.trace.symbolic import SymbolicArray
    from subzero.trace.tracer import Tracer

    tracer = Tracer("t")
    x, small = np.ones(3, np.float32), np.ones(3, np.uint8)
    sx, ssmall = (SymbolicArray(tracer, tracer.input(n, a.shape), a.shape, a.dtype) for n, a in (("x", x), ("s", small)))
    cases = [(sx, x, 1), (sx, x, 1.5), (sx, x, np.float64(2)), (ssmall, small, 1), (ssmall, small, 1.5),
             (ssmall, small, -0.0), (ssmall, small, True)]
    for _ in range(2):  # asked again: the same answers, found once
        for sym, a, b in cases:
            assert _dtype_of(np.add, (sym, b)) == np.add(a, b).dtype
            assert _dtype_of(np.add, (b, sym)) == np.add(b, a).dtype
    assert any(key[0] is np.add for key in _DTYPES)
    for _ in range(2):  # numpy refuses a Python int out of the array's range: every time
        with pytest.raises(OverflowError):
            _dtype_of(np.add, (ssmall, 300))


def test_an_applied_operator_is_copied_into_the_workflow():
    """``sz.apply(op, x)``: each node carries an operator of its own (the workflow is built from the
    trace's operators without another copy): the user's is neither written nor shared."""
    from subzero import operators as ops

    scale = ops.MultiplyScalar(2.0)

    @sz.workflow
    def f(x):
        with np.errstate(divide="ignore"):
            y = sz.apply(scale, x)
        return sz.apply(scale, y)

    wf = f.trace({"x": X})
    nodes = [n for n in wf.nodes if n.operator is not None]
    assert len({id(n.operator) for n in nodes}) == 2 and all(n.operator is not scale for n in nodes)
    assert nodes[0].operator.errstate is not None and scale.errstate is None
    scale.value = 5.0  # changing the user's operator afterwards changes no node
    np.testing.assert_allclose(evaluate_workflow(wf, {"x": X})["out"], X * 4.0)


def test_the_trace_lets_go_of_a_value_only_once_nothing_needs_it(monkeypatch):
    """A trace for a run that stores only its outputs lets go of a step's values once every reader
    recorded has its values and no traced array stands for it (numpy frees a temporary after its
    last reader); a value Python still holds, an output and a value a step not evaluated yet reads
    are kept.  What it let go of is handed to the run as its dtype."""
    from subzero.trace import tracer as tracer_module

    monkeypatch.setattr(tracer_module, "DEAD_BYTES", 0)
    held_by_python = []

    def f(x):
        held = x * 2.0
        held_by_python.append(held)  # still alive once the function returned
        t = np.mean(x)
        for _ in range(3):
            step = x * t  # rebound each round: the last round's dies with the function
            t = np.mean(step) / np.mean(held)
            if float(t) > 1e9:  # Python asks for a value: the trace computes what it needs
                break
        return {"out": x - t}

    x = np.arange(12.0).reshape(3, 4)
    wf, known = sz.workflow(f)._traced({"x": x}, None, eager_bytes=2**30, complete=True, reuse=True)
    let_go = {name for name, (value, _, _) in known.items() if isinstance(value, np.dtype)}
    assert {"multiply_1", "multiply_2", "multiply_3"} <= let_go and known["multiply_1"][0] == np.float64
    assert isinstance(known["multiply"][0], np.ndarray) and isinstance(known["out"][0], np.ndarray)
    assert set(known) == {n.name for n in wf.nodes if not n.is_input}
    np.testing.assert_array_equal(known["out"][0], f(x)["out"])
    # not for a run that stores more than its outputs (pinned lineage, keep=): every value is handed
    _, every = sz.workflow(f)._traced({"x": x}, None, eager_bytes=2**30, complete=True, reuse=False)
    assert all(isinstance(v, np.ndarray) for v, _, _ in every.values())

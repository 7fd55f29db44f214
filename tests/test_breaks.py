"""Graph breaks: a library call that fails on traced arrays runs on values; the trace goes on."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

import subzero as sz
from subzero.oracle import evaluate_workflow

RNG = np.random.default_rng(5)
IMAGE = RNG.normal(0, 1, (40, 40))
IMAGE[5:15, 5:15] += 6
IMAGE[30:32, 30:32] += 6


def test_a_compiled_library_call_is_broken_out_and_the_rest_stays_exact(tmp_path):
    morphology = pytest.importorskip("skimage.morphology")
    skeletonize = morphology.skeletonize  # a compiled loop that demands an ndarray

    @sz.workflow
    def f(image):
        mask = image > 3
        thin = morphology.skeletonize(mask)
        return {"thin": thin, "shifted": image + 1}

    run = f.run({"image": IMAGE}, store=tmp_path / "run", executor="local")
    np.testing.assert_array_equal(np.asarray(run.output("thin")), skeletonize(IMAGE > 3))
    assert morphology.skeletonize is skeletonize  # the library is restored after the trace
    report = f.report({"image": IMAGE})
    assert list(report.coarse) == ["thin"] and "skeletonize" in report.coarse["thin"]
    assert run.backward("shifted", [(1, 1)], to="image").tolist() == [[1, 1]]


def test_a_library_that_traces_through_stays_exact():
    morphology = pytest.importorskip("skimage.morphology")

    @sz.workflow
    def f(image):
        return {"kept": morphology.remove_small_objects(image > 3, max_size=10)}

    assert f.report({"image": IMAGE}).exact  # scipy.ndimage.label, np.bincount, a gather and a masked write


def test_a_function_that_cannot_be_traced_runs_whole_as_one_coarse_step():
    @sz.workflow
    def f(x):
        return {"s": x * x.strides[0]}  # strides: no meaning for a traced array

    wf = f.trace({"x": IMAGE})
    np.testing.assert_allclose(evaluate_workflow(wf, {"x": IMAGE})["s"], IMAGE * IMAGE.strides[0])
    report = f.report({"x": IMAGE})
    assert not report.exact and "could not be traced" in str(report)


def test_a_function_that_cannot_be_traced_runs_once_on_values_when_traced():
    calls = []

    @sz.workflow
    def f(x):
        calls.append(type(x).__name__)
        return {"s": x * x.strides[0]}

    wf = f.trace({"x": IMAGE})
    assert calls.count("ndarray") == 1  # numpy's run of it (does numpy fail too?) gives the coarse step its values
    np.testing.assert_allclose(evaluate_workflow(wf, {"x": IMAGE})["s"], IMAGE * IMAGE.strides[0])


_LIBRARY = """
import numpy as np

class Smoother:
    def __init__(self, image):
        self.image = image * 2

    @property
    def smoothed(self):
        return _compiled(self.image)

def _compiled(a):
    if type(a) is not np.ndarray:  # a compiled routine's type check: no __array__ asked for
        raise TypeError("Cannot convert SymbolicArray to numpy.ndarray")
    return a + 1
"""


def test_a_failing_library_method_is_not_traced_again_before_the_function_runs_whole(monkeypatch):
    """A break at a library function no module binds (a method, a property getter) cannot be
    replaced, so tracing again would fail alike: the function runs whole on values at once."""
    import sysconfig

    from subzero.trace import traced as traced_module

    monkeypatch.setattr(traced_module, "_RAN_WHOLE", {})  # no earlier trace of it remembered

    library = types.ModuleType("_sz_library")  # an installed package's module (its frames are the library's)
    exec(compile(_LIBRARY, sysconfig.get_paths()["purelib"] + "/_sz_library.py", "exec"), library.__dict__)
    calls = []

    @sz.workflow
    def f(image):
        calls.append(type(image).__name__)
        return {"smoothed": library.Smoother(image).smoothed}

    wf = f.trace({"image": IMAGE})
    assert calls == ["SymbolicArray", "ndarray"]  # one trace, then numpy's run
    np.testing.assert_allclose(evaluate_workflow(wf, {"image": IMAGE})["smoothed"], IMAGE * 2 + 1)
    assert "could not be traced" in str(f.report({"image": IMAGE}))


def test_a_function_that_could_not_be_traced_runs_whole_at_once_on_later_inputs(monkeypatch):
    """A new trace of a function that ran whole (another `sz.workflow` of it too) on inputs of the
    same ranks, dtypes and parameters runs it whole without tracing it to fail alike."""
    from subzero.trace import traced as traced_module

    monkeypatch.setattr(traced_module, "_RAN_WHOLE", {})  # no earlier trace of it remembered
    calls = []

    def f(x, scale: float = 2.0):
        calls.append(type(x).__name__)
        return {"s": x * x.strides[0] * scale}

    sz.workflow(f).trace({"x": IMAGE})
    other = IMAGE[:20, :30] + 1.0  # other values and shape
    calls.clear()
    traced = sz.workflow(f)
    wf = traced.trace({"x": other})
    assert calls == ["ndarray"]
    np.testing.assert_allclose(evaluate_workflow(wf, {"x": other})["s"], other * other.strides[0] * 2.0)
    assert "could not be traced on earlier inputs" in str(traced.report({"x": other}))
    calls.clear()
    sz.workflow(f).trace({"x": IMAGE}, params={"scale": 3.0})  # other parameters: traced again
    sz.workflow(f).trace({"x": IMAGE.astype(np.float32)})  # another dtype: traced again
    assert calls.count("SymbolicArray") == 2


def test_numpys_own_errors_are_not_hidden():
    @sz.workflow
    def f(x):
        return x @ np.ones((3, 3))  # shapes numpy refuses too

    with pytest.raises((ValueError, sz.WorkflowError)):
        f.trace({"x": IMAGE})


def test_a_new_trace_reuses_the_search_for_a_broken_function_and_finds_a_binding_made_since(monkeypatch):
    """Where a broken function is bound is searched for once (every module's namespace: slow),
    reused by a new trace of it; a binding made since in a loaded module is still replaced (the
    trace searches again when it reaches the function unreplaced), so the lineage stays as exact."""
    morphology = pytest.importorskip("skimage.morphology")
    from subzero.trace import breaks

    def f(image):
        return {"thin": morphology.skeletonize(image > 3)}

    sz.workflow(f).trace({"image": IMAGE})
    scans: list[int] = []  # how many modules each search looked at
    scan = breaks._scan
    monkeypatch.setattr(breaks, "_scan", lambda code, modules: scans.append(len(modules)) or scan(code, modules))
    assert not sz.workflow(f).report({"image": IMAGE}).exact and scans == []  # the search reused
    loaded = types.ModuleType("_loaded_since")  # a module imported since: searched alone, its binding replaced
    loaded.thin = morphology.skeletonize  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "_loaded_since", loaded)

    def h(image):
        return {"thin": sys.modules["_loaded_since"].thin(image > 3)}

    assert list(sz.workflow(h).report({"image": IMAGE}).coarse) == ["thin"] and scans == [1]
    monkeypatch.setitem(globals(), "_late_skeletonize", morphology.skeletonize)  # bound since, in a loaded module

    def g(image):
        return {"thin": _late_skeletonize(image > 3)}  # noqa: F821 - bound just above

    report = sz.workflow(g).report({"image": IMAGE})
    assert list(report.coarse) == ["thin"] and "skeletonize" in report.coarse["thin"]
    assert len(scans) == 2 and scans[1] >= len(sys.modules) - 1  # then every module, once
    np.testing.assert_array_equal(evaluate_workflow(sz.workflow(g).trace({"image": IMAGE}), {"image": IMAGE})["thin"],
                                  morphology.skeletonize(IMAGE > 3))

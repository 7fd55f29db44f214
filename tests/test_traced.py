"""A traced function's local run does numpy's work once: the steps its trace computed (on the
very arrays the run stores) are stored from those values, not computed again tile by tile
(`TracedWorkflow.run`, `driver._Execution.reuse`), with the store and every query answer of a
run that computes them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import ndimage

import subzero as sz
from subzero import config, driver, stage
from subzero.executors.tasks import map_prepare
from subzero.trace.tracer import Tracer


def sigma_clip(x, k: float = 2.5):
    """An iterative sigma clip: how often the loop runs depends on the values."""
    data = x
    for _ in range(6):
        centre, spread = np.mean(data), np.std(data)
        keep = np.abs(x - centre) < k * spread
        if np.count_nonzero(keep) == data.size:
            break
        data = x[keep]
    return {"clipped_mean": np.mean(data).reshape(1), "scaled": (x - np.mean(data)) / np.std(data),
            "kept": keep}


def drop_small(image, min_size: int = 4):
    """Threshold, label (a two-pass operator), drop the small components."""
    mask = image > np.mean(image) + np.std(image)
    labels, _ = ndimage.label(mask)
    sizes = np.bincount(labels.ravel())
    small = sizes < min_size
    small[0] = False
    return {"labels": labels, "kept": mask & ~small[labels]}


def data(seed: int = 3, shape: tuple[int, int] = (48, 40)) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape)
    x[::7, ::5] += 9.0  # outliers, clipped over several rounds; small and large components
    x[10:16, 10:18] += 4.0
    return x


@pytest.fixture
def reused(monkeypatch):
    """The names of the nodes each run stored from its trace's values, per run (once the run
    finished: one whose trace computed every value continues behind its return)."""
    taken: list[list[str]] = []
    original = driver._Execution.reuse

    def counting(self, node, prepared=None):
        got = original(self, node, prepared)
        if got is not None:
            taken[-1].append(node.name)
        return got

    def execute(wf, inputs, options):
        taken.append([])
        return original_execute(wf, inputs, options).wait()

    original_execute = driver.execute
    monkeypatch.setattr(driver._Execution, "reuse", counting)
    monkeypatch.setattr(driver, "execute", execute)
    return taken


def _store_contents(run) -> dict:
    """What a run stored, apart from timings and a shard's attempt name and bytes (an LMDB file's
    pages differ run to run; queries compare what they hold): per node its array record,
    strategies, tile count and manifest, and the files of the store."""
    run.wait()
    root = Path(run.store.url.replace("file://", ""))
    nodes = {}
    for name, rec in run.catalog.nodes.items():
        manifest = root / "manifests" / f"{name}.json"
        shards = None
        if manifest.exists():
            shards = {s: [{k: v for k, v in r.items() if k not in ("name", "encode_seconds", "files")}
                          for r in records] for s, records in json.loads(manifest.read_text())["shards"].items()}
        nodes[name] = (rec.kind, rec.array, rec.strategies, rec.stats.tiles if rec.stats else None, shards)
    files = sorted(re.sub(r"-[0-9a-f]{12}\.", ".", str(p.relative_to(root)))
                   for p in root.rglob("*") if p.is_file() and p.name != ".writer")
    return {"nodes": nodes, "files": files}


def _same_run(a, b, queries: list[tuple[str, str, list]]) -> None:
    assert _store_contents(a) == _store_contents(b)
    for name in a.catalog.nodes:
        x, y = np.asarray(a.output(name)), np.asarray(b.output(name))
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True), name
    for direction, node, cells in queries:
        if direction == "backward":
            got, want = a.backward(node, cells, to="x" if "x" in a.catalog.nodes else "image"), \
                b.backward(node, cells, to="x" if "x" in b.catalog.nodes else "image")
        else:
            got, want = a.forward(node, cells, to="scaled" if "scaled" in a.catalog.nodes else "kept"), \
                b.forward(node, cells, to="scaled" if "scaled" in b.catalog.nodes else "kept")
        assert np.array_equal(got, want), (direction, node, cells)


def test_a_value_dependent_loop_is_stored_from_its_trace_values(tmp_path, reused):
    fn = sz.workflow(sigma_clip)
    x = data()
    run = fn.run({"x": x}, tmp_path / "reused", executor="local")
    assert fn.report({"x": x}).events, "the loop decided on values"
    computed = fn.trace({"x": x}).run({"x": x}, tmp_path / "computed", executor="local")
    steps = [n.name for n in run.workflow.nodes if not n.is_input]
    # the steps the loop's decisions needed were computed once, by the trace; none by the plain run
    assert "kept" in reused[0] and len(reused[0]) > len(steps) // 2 and reused[1] == []
    expected = sigma_clip(x)
    for name, value in expected.items():
        np.testing.assert_array_equal(np.asarray(run.output(name)).reshape(np.shape(value)), value)
    _same_run(run, computed, [("backward", "clipped_mean", [(0,)]), ("backward", "scaled", [(5, 5), (0, 0)]),
                              ("forward", "x", [(0, 0), (7, 5)])])


@pytest.mark.parametrize("pins", [None, {"label": "PayOne"}])
def test_labels_and_small_objects_match_a_run_that_computes_them(tmp_path, reused, pins, monkeypatch):
    fn = sz.workflow(drop_small)
    image = data(4)
    options = dict(executor="local", tile_shape=16, strategies=pins)  # components cross the tiles' seams
    passes = []
    monkeypatch.setattr(stage, "map_prepare", lambda *args: passes.append(args) or map_prepare(*args))
    run = fn.run({"image": image}, tmp_path / "reused", **options)
    assert passes == [], "no first pass over the tiles: the trace computed the labels"
    computed = fn.trace({"image": image}).run({"image": image}, tmp_path / "computed", **options)
    assert "label" in reused[0]  # its seams (its stored lineage and re-runs read them) made from its values
    seams = [r.workflow.node("label").operator._seams for r in (run, computed)]
    assert len(seams[1].global_ids) and all(np.array_equal(a, b) if isinstance(b, np.ndarray) else a == b
                                            for a, b in zip(vars(seams[0]).values(), vars(seams[1]).values()))
    expected = drop_small(image)
    np.testing.assert_array_equal(np.asarray(run.output("kept")), expected["kept"])
    np.testing.assert_array_equal(np.asarray(run.output("labels")), expected["labels"])
    component = tuple(int(v) for v in np.argwhere(expected["kept"])[0])
    _same_run(run, computed, [("backward", "kept", [component, (0, 0)]), ("backward", "labels", [component]),
                              ("forward", "image", [component, (1, 1)])])


def test_stored_lineage_is_captured_from_the_nodes_inputs(tmp_path, reused):
    x = data(5)
    wf = sz.workflow(sigma_clip).trace({"x": x})  # another traced function: its cache is its own
    pins = {"kept": "FullOne", "scaled": "FullOne"}
    run = sz.workflow(sigma_clip).run({"x": x}, tmp_path / "reused", executor="local", strategies=pins)
    computed = wf.run({"x": x}, tmp_path / "computed", executor="local", strategies=pins)
    assert "kept" in reused[0]
    _same_run(run, computed, [("backward", "kept", [(3, 4)]), ("backward", "scaled", [(3, 4)]),
                              ("forward", "x", [(3, 4)])])


def chain(x):
    """Steps no Python decision asks for: running sums are evaluated as traced (with the scaling
    each reads) while the budget allows; elementwise steps alone are left to the run."""
    y = x
    for k in range(8):
        y = np.cumsum(y * 0.5, axis=k % 2)
    return {"out": y, "alone": x * 3.0 - 1.0}


def tracers(monkeypatch) -> list[Tracer]:
    """The `Tracer` of every trace made from now on in the test, in order."""
    seen: list[Tracer] = []
    original = Tracer.__init__

    def recording(self, name, eager_bytes=None, **kwargs):
        original(self, name, eager_bytes, **kwargs)
        seen.append(self)

    monkeypatch.setattr(Tracer, "__init__", recording)
    return seen


def test_values_are_held_within_the_budget_and_the_run_computes_the_rest(tmp_path, reused, monkeypatch):
    x = data(6, (64, 64))
    budget = 5 * x.nbytes  # room for two rounds of the loop (a scaling and a running sum each)
    seen = tracers(monkeypatch)
    with config.set(trace_values_mb=budget / 2**20):
        run = sz.workflow(chain).run({"x": x}, tmp_path / "s", executor="local")
    assert 0 < seen[-1].value_bytes <= budget
    steps = [n.name for n in run.workflow.nodes if not n.is_input]
    assert len(reused[0]) == 4 and len(steps) == 18 and "alone" not in reused[0]
    for name, value in chain(x).items():
        np.testing.assert_array_equal(np.asarray(run.output(name)), value)


@pytest.mark.parametrize("behind", [False, True])
def test_a_stencil_is_left_to_the_run_unless_a_value_needs_it(tmp_path, reused, behind):
    """A stencil's tiles (a halo of its radius) are the run's, fused with the steps after it; a
    step that needs its values (a sum Python asks for) takes them from the trace.  A run that
    continues behind its return (written behind) has every value from its trace instead (the
    stencil's array is not lent to the step after it: with the sobel between them, a run in the
    caller's thread would compute it in a stage of its own and hold it)."""
    @sz.workflow
    def f(x):
        smooth = ndimage.gaussian_filter(x, 1.5)
        edges = ndimage.sobel(x, axis=0)
        return {"smooth": smooth * 2.0, "edges": edges / float(edges.max())}

    x = data(8)
    with config.set(write_behind=behind):
        run = f.run({"x": x}, tmp_path / "s", executor="local")
    assert ("gaussian_filter" in reused[0]) is behind and ("smooth" in reused[0]) is behind and "sobel" in reused[0]
    np.testing.assert_array_equal(np.asarray(run.output("smooth")), ndimage.gaussian_filter(x, 1.5) * 2.0)
    edges = ndimage.sobel(x, axis=0)
    np.testing.assert_array_equal(np.asarray(run.output("edges")), edges / float(edges.max()))


def test_an_operator_writing_into_its_input_does_not_change_the_values_kept(tmp_path, reused):
    def clip_in_place(a):
        np.clip(a, -1.0, 1.0, out=a)
        return a

    @sz.workflow
    def f(x):
        y = x * 2.0
        z = sz.udf(clip_in_place, lineage="elementwise")(y)
        return {"y": y + 0.0, "z": z}

    x = data(7)
    run = f.run({"x": x}, tmp_path / "s", executor="local")
    np.testing.assert_array_equal(np.asarray(run.output("y")), x * 2.0)
    np.testing.assert_array_equal(np.asarray(run.output("z")), np.clip(x * 2.0, -1.0, 1.0))


def test_values_a_library_converted_are_stored_from_the_trace_and_its_writes_stay_its_own(tmp_path, reused):
    from scipy import signal

    @sz.workflow
    def f(x):
        y = x[1:] * 2.0
        d = signal.detrend(y, overwrite_data=True)  # converts y and writes into the array it got
        return {"z": y + 1.0, "d": d}

    x = data(9)
    run = f.run({"x": x}, tmp_path / "s", executor="local")
    # the slice lstsq converted and the steps computed from it were computed once, by the trace
    assert {"subtract", "d"} <= set(reused[0])  # data[0:n] = data[0:n] - fit: the subtraction itself
    expected = f.fn(x)  # numpy's: detrend wrote into y through its view, as here
    np.testing.assert_allclose(np.asarray(run.output("z")), expected["z"])
    np.testing.assert_allclose(np.asarray(run.output("d")), expected["d"])


def test_a_cached_trace_computes_as_before(tmp_path, reused):
    fn = sz.workflow(sigma_clip)
    x = data(8)
    fn.trace({"x": x})  # cached: the run's trace computes nothing, so nothing is reused
    run = fn.run({"x": x}, tmp_path / "s", executor="local")
    assert reused[0] == []
    np.testing.assert_array_equal(np.asarray(run.output("kept")), sigma_clip(x)["kept"])



def test_outputs_written_by_their_tiles_are_computed_by_them(tmp_path, reused):
    x = data(10)
    with config.set(write_behind=False):  # a kept array is then written by its tiles, not held
        run = sz.workflow(sigma_clip).run({"x": x}, tmp_path / "s", executor="local")
    kept = {name for name, rec in run.catalog.nodes.items() if rec.array.stored}
    assert reused[0] and not kept & set(reused[0])
    for name, value in sigma_clip(x).items():
        np.testing.assert_array_equal(np.asarray(run.output(name)).reshape(np.shape(value)), value)


def test_a_zarr_input_is_not_read_whole_by_the_trace(tmp_path, reused):
    import zarr

    x = data(11)
    z = zarr.open_array(str(tmp_path / "x.zarr"), mode="w", shape=x.shape, chunks=(16, 16), dtype=x.dtype)
    z[:] = x
    run = sz.workflow(chain).run({"x": z}, tmp_path / "s", executor="local")
    assert reused[0] == []  # no value was asked for: the run reads it tile by tile
    for name, value in chain(x).items():
        np.testing.assert_array_equal(np.asarray(run.output(name)), value)


def evi(nir, red, blue):
    """Elementwise steps only: the trace leaves them to the run unless it continues behind it."""
    return {"evi": 2.5 * (nir - red) / (nir + 6.0 * red - 7.5 * blue + 1.0)}


def edges(x):
    """Stencils (a halo each) and the elementwise steps after them."""
    gx, gy = ndimage.sobel(x, axis=0), ndimage.sobel(x, axis=1)
    return {"magnitude": np.hypot(gx, gy) / 4.0, "smooth": ndimage.gaussian_filter(x, 1.0) * 2.0 - x}


def _stored_pins(wf) -> dict:
    """A stored strategy pinned on every node of ``wf`` that can store one (FullOne when it can)."""
    from subzero.strategies import supported_strategies

    pins = {}
    for node in wf.nodes:
        stored = [s for s in supported_strategies(node.operator) if s not in ("Map", "BlackBox")] if node.operator else []
        if stored:
            pins[node.name] = "FullOne" if "FullOne" in stored else stored[0]
    return pins


def _info(run) -> dict:
    """`subzero info`'s facts of a run's store, but where and when it was written (and the bytes of
    its catalog, which holds timings)."""
    from subzero.tools.info import info_data

    got = info_data(run.wait().path)
    got["totals"].pop("store_disk_bytes")
    return {k: v for k, v in got.items() if k not in ("store", "created", "wall_seconds")}


def centred_smooth(x):
    """A stencil, an elementwise step after it and a reduction of that (a black-box step a query
    re-runs): the trace leaves the first two to the run's fused stage unless it continues behind."""
    smooth = ndimage.gaussian_filter(x, 1.0) * 2.0 - 1.0
    return {"out": x - np.mean(smooth)}


BEHIND_CASES = {
    "centred_smooth": (centred_smooth, lambda: {"x": data(19)}, [("backward", "out", [(3, 4)])]),
    "sigma_clip": (sigma_clip, lambda: {"x": data(12)}, [("backward", "scaled", [(5, 5), (0, 0)])]),
    "drop_small": (drop_small, lambda: {"image": data(13)}, [("backward", "kept", [(12, 12), (0, 0)])]),
    "evi": (evi, lambda: {k: np.abs(data(14 + i)) for i, k in enumerate(("nir", "red", "blue"))}, []),
    "edges": (edges, lambda: {"x": data(17, (64, 52))}, [("backward", "magnitude", [(0, 0), (30, 20)]),
                                                        ("backward", "smooth", [(63, 51)])]),
}


@pytest.mark.parametrize("name", sorted(BEHIND_CASES))
@pytest.mark.parametrize("pins", [False, True])
def test_a_run_continuing_behind_its_return_stores_and_answers_as_one_in_the_callers_thread(tmp_path, name, pins):
    """The trace computed every value, so the run returns at once and the rest of it (storing,
    lineage, commits, the catalog) continues on a background thread: its store, catalog, `info`,
    values and answers are those of the same run written in the caller's thread, with the default
    strategies and with stored lineage pinned on every node (captured behind the return)."""
    fn, make, queries = BEHIND_CASES[name]
    inputs = make()
    strategies = _stored_pins(sz.workflow(fn).trace(inputs)) if pins else None
    ins = sorted(n for n in inputs)
    with config.set(write_behind=False):
        direct = sz.workflow(fn).run(inputs, tmp_path / "direct", executor="local", strategies=strategies)
    behind = sz.workflow(fn).run(inputs, tmp_path / "behind", executor="local", strategies=strategies)
    assert behind._finishing is not None and direct._finishing is None  # returned before its store was written
    expected = fn(**inputs)
    for out, value in expected.items():
        np.testing.assert_array_equal(np.asarray(behind.output(out)).reshape(np.shape(value)), value)
    _same_run(behind, direct, [(d, node, cells) for d, node, cells in queries])
    a, b = _info(behind), _info(direct)
    assert a == b
    for node in (n.name for n in direct.workflow.nodes if not n.is_input):  # every node's first and last cell
        cells = [(0,) * len(direct.shape(node)), tuple(n - 1 for n in direct.shape(node))]
        got, want = (r.backward_many(node, cells, to=ins, as_="coords") for r in (behind, direct))
        assert got.keys() == want.keys() and all(np.array_equal(got[k], want[k]) for k in got), node
    reopened = sz.open_run(tmp_path / "behind")
    assert reopened.catalog.status == "done"
    _same_run(reopened, direct, queries)


def test_a_run_continuing_behind_holds_copies_of_the_callers_arrays(tmp_path):
    """Once `run` returned, the caller may change its arrays: the run behind it holds their
    copies (made beside the trace), and a value of the trace that is a view of one (a slice, a
    transpose) is the same view of its copy before the return (copied when it cannot be)."""
    @sz.workflow
    def f(x):
        return {"t": x.T, "top": x[:10] * 1.0, "y": x + 1.0}

    x = data(18)
    kept = x.copy()
    run = f.run({"x": x}, tmp_path / "s", executor="local", keep="all")
    assert run._finishing is not None
    x[:] = -7.0
    for name, value in f.fn(kept).items():
        np.testing.assert_array_equal(np.asarray(run.output(name)), value)
    np.testing.assert_array_equal(np.asarray(sz.open_run(tmp_path / "s").output("x")), kept)


def li_like(image):
    """skimage.filters.threshold_li's loop (a fixed number of rounds): per round a mask, the
    selections it makes and their means, which Python asks for."""
    t = np.mean(image)
    for _ in range(4):
        low, high = image[image <= t], image[image > t]
        t = (np.mean(low) + np.mean(high)) / 2.0
        if float(t) != float(t):  # a value Python asks for, as the real loop's tolerance test does
            break
    return {"out": image > t, "scaled": (image - t) * 2.0}


def test_a_trace_that_lets_go_of_dead_values_stores_and_answers_as_one_that_keeps_them(tmp_path, monkeypatch):
    """The trace of a run continuing behind its return lets go of each step's values once nothing
    needs them (here the masks and selections of every round): the run takes their dtype, and its
    store, catalog, `info` and answers are those of a run whose trace kept every value and of a run in
    the caller's thread; a node let go of reads back as numpy's values (recomputed from the input)."""
    from subzero.trace import tracer as tracer_module

    image = data(21, (64, 48))
    seen = tracers(monkeypatch)
    unheld: list[set[str]] = []  # the nodes each run committed without computing them again to hold them
    # (also a step whose array the trace lent to the step after it, `Tracer.dropped`)
    let_go_of = driver._Execution.let_go_of
    monkeypatch.setattr(driver._Execution, "let_go_of",
                        lambda self, *args: (let_go_of(self, *args), unheld.append(self.let_go))[0])
    with config.set(write_behind=False):
        direct = sz.workflow(li_like).run({"image": image}, tmp_path / "direct", executor="local")
    kept = sz.workflow(li_like).run({"image": image}, tmp_path / "kept", executor="local")  # 256 KB: none let go
    kept.wait()
    holding = seen[-1]
    monkeypatch.setattr(tracer_module, "DEAD_BYTES", 0)
    dropped = sz.workflow(li_like).run({"image": image}, tmp_path / "dropped", executor="local")
    tracer = seen[-1]
    assert tracer.drop_dead and not holding.dead and dropped._finishing is not None
    let_go = {tracer._names[id(e)]: e for e in tracer.entries if id(e) in tracer.dead}
    assert {"getitem", "getitem_7", "less_equal_3"} <= set(let_go)
    dropped.wait()  # its run continued behind its return
    assert unheld[0] == set() and unheld[2] - unheld[1] and unheld[2] - unheld[1] <= set(let_go)
    numpy_values = {holding._names[id(e)]: e.value for e in holding.entries if id(e) in holding._names}
    for name in let_go:  # recomputed from the stored input when read, as numpy computed them
        value = np.asarray(dropped.output(name))
        want = np.asarray(numpy_values[name]).reshape(value.shape)
        assert value.dtype == want.dtype and np.array_equal(value, want), name
    expected = li_like(image)
    for out, value in expected.items():
        np.testing.assert_array_equal(np.asarray(dropped.output(out)), value)
    queries = [("backward", "out", [(3, 4), (0, 0)]), ("backward", "scaled", [(63, 47)])]
    for other in (kept, direct):
        _same_run(dropped, other, queries)
        assert _info(dropped) == _info(other)
    for node in (n.name for n in direct.workflow.nodes if not n.is_input):  # every node's first and last cell
        cells = [(0,) * len(direct.shape(node)), tuple(n - 1 for n in direct.shape(node))]
        got, want = (r.backward_many(node, cells, to=["image"], as_="coords") for r in (dropped, direct))
        assert got.keys() == want.keys() and all(np.array_equal(got[k], want[k]) for k in got), node

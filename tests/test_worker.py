"""The runtime inside a task: modes per call, derived FULL lineage, tracing, payload expansion."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

import subzero as sz

from subzero import operators as ops
from subzero.modes import Mode, Strategy
from subzero.pairs import PayloadPairs
from subzero.frontier import Frontier
from subzero.worker import NodeTask, derived_full, expand_payloads, modes_for, run_tile, trace_tile, with_envelopes
from subzero.store import ArrayRef, resolve
from subzero.store.arrays import write_array
from subzero.tiling import Tile


def bound(op, *shapes):
    return op.bound(shapes, op.infer_output_shape(tuple(shapes)))


def typed(*names):
    return tuple(Strategy.parse(n) for n in names)


def saved(tmp_path, name, array) -> ArrayRef:
    ref = ArrayRef(resolve(tmp_path), f"arrays/{name}")
    write_array(ref, array)
    return ref


def test_modes_for_splits_payload_modes_into_separate_calls():
    assert modes_for(typed("Map", "BlackBox")) == [frozenset()]
    assert modes_for(typed("FullOne", "CompOne")) == [frozenset({Mode.FULL, Mode.COMP})]
    assert modes_for(typed("PayOne", "CompMany", "FullMany/forward")) == [
        frozenset({Mode.PAY, Mode.FULL}), frozenset({Mode.COMP})]


def test_derived_full_pairs_match_the_mapping_function():
    op = bound(ops.Convolve(np.ones((3, 3)), mode="constant"), (5, 6))
    pairs = derived_full(op, ((1, 3), (0, 6)))
    assert pairs.n_pairs == 12
    for k, out in enumerate(pairs.out_ids.tolist()):
        cell = np.array([np.unravel_index(out, (5, 6))])
        expected = np.ravel_multi_index(tuple(op.map_b(cell, 0).T), (5, 6))
        got = pairs.in_ids[0][pairs.in_ptr[0][k]:pairs.in_ptr[0][k + 1]]
        assert sorted(got.tolist()) == sorted(expected.tolist())


def test_run_tile_trims_the_halo_and_encodes_each_strategy(tmp_path):
    x = np.arange(36.0).reshape(6, 6)
    op = bound(ops.Convolve(np.ones((3, 3)), mode="reflect"), (6, 6))
    location = resolve(tmp_path)
    out = ArrayRef(location, "arrays/blur")
    strategies = ("FullOne/backward", "FullMany/forward", "Map")
    task = NodeTask("blur", op, (saved(tmp_path, "x", x),), op.input_shapes, op.output_shape, typed(*strategies),
                    output=out, chunks=(3, 3),
                    location=location, shard_dirs=tuple((s, f"lineage/{s.replace('/', '-')}") for s in strategies))
    meta = run_tile(task, Tile(3, ((3, 6), (0, 3))))
    from scipy import ndimage

    out.commit((6, 6), meta.dtype, meta.chunks)
    np.testing.assert_allclose(out.read(((3, 6), (0, 3))),
                               ndimage.convolve(x, np.ones((3, 3)), mode="reflect")[3:6, 0:3])
    assert set(meta.shards) == {"FullOne/backward", "FullMany/forward"}  # Map stores nothing
    record = meta.shards["FullOne/backward"]
    assert (record.pairs, record.out_cells) == (9, 9) and record.tile == 3
    assert all((tmp_path / "lineage" / "FullOne-backward" / (record.name + f.suffix)).stat().st_size == f.size
               for f in record.files)
    assert meta.shards["FullMany/forward"].index_bytes > 0  # its R-tree on the input cells


def test_trace_tile_of_a_composite_operator_is_default_plus_overrides(tmp_path):
    x = np.zeros((7, 7))
    x[3, 3] = 500.0
    op = bound(ops.CosmicRayDetect(threshold=200.0, radius=1), (7, 7))  # 500 < 4 x 200: radius 1
    task = NodeTask("crd", op, (saved(tmp_path, "x", x),), op.input_shapes, op.output_shape)
    pairs = trace_tile(task, Tile(0, ((0, 7), (0, 7))))
    flagged = Frontier.of_coords(np.array([[3, 3]]), (7, 7))
    assert sorted(pairs.backward(flagged, 0).tolist()) == sorted(
        np.ravel_multi_index((r, c), (7, 7)) for r in (2, 3, 4) for c in (2, 3, 4))
    clean = Frontier.of_coords(np.array([[0, 0]]), (7, 7))  # a clean pixel: the default, its 3x3 detection window
    assert sorted(pairs.backward(clean, 0).tolist()) == [0, 1, 7, 8]  # (clipped)


def test_expand_payloads_calls_map_p_once_per_distinct_payload():
    op = bound(ops.CosmicRayDetect(radius=1), (5, 5))
    pay = PayloadPairs(np.array([0, 12, 24]), np.array([0, 1, 2, 3]), [b"\x01", b"\x00", b"\x01"])
    full = expand_payloads(op, pay)
    sizes = {int(o): int(n) for o, n in zip(full.out_ids, np.diff(full.in_ptr[0]))}
    assert sizes == {0: 4, 12: 9, 24: 4}  # payload 0: the default 3x3 window


class FarPayload(sz.Operator):
    """A composite whose payload points away from the cell: every cell copies itself (the
    identity default) except each multiple-of-four cell of the first row, which copies the
    cell four rows below it (a payload naming that row offset)."""

    def supported_modes(self):
        return {Mode.COMP}

    def infer_output_shape(self, input_shapes):
        return tuple(input_shapes[0])

    def run(self, ctx, x):
        out = np.array(x, dtype=np.float64)
        cols = np.arange(0, x.shape[1], 4)
        out[0, cols] = x[4, cols]
        ctx.lwrite(np.stack([np.zeros_like(cols), cols], axis=1), payload=np.full((len(cols), 1), 4, np.uint8))
        return out

    def map_b(self, cells, i):
        return np.asarray(cells, np.int64)

    def map_f(self, cells, i):
        return np.asarray(cells, np.int64)

    def map_p(self, cells, payload, i):
        return np.asarray(cells, np.int64) + np.array([int(payload[0]), 0])


class ReversedOwners(ops.CosmicRayDetect):
    """The same lineage, its pairs listed last owner first (the envelopes' unordered path)."""

    def map_p_pairs(self, cells, payload, i):
        owner, coords = super().map_p_pairs(cells, payload, i)
        return owner[::-1], coords[::-1]


@pytest.mark.parametrize("cls", [ops.CosmicRayDetect, ReversedOwners])
def test_envelopes_bound_each_pairs_expanded_cells(cls):
    op = bound(cls(radius=1), (6, 6))
    pay = PayloadPairs(np.array([0, 12, 24, 7, 8, 35]), np.array([0, 1, 2, 3, 5, 6]),
                       [b"\x01", b"\x00", b"\x02", b"\x01", b"\x02"])
    lo, hi = with_envelopes(op, pay).envelopes[0]
    for k in range(pay.n_pairs):
        cells = np.stack(np.unravel_index(pay.out_ids[pay.out_ptr[k]:pay.out_ptr[k + 1]], (6, 6)), axis=1)
        expanded = np.asarray(op.map_p(cells, pay.payloads[k], 0))
        assert lo[k].tolist() == expanded.min(axis=0).tolist() and hi[k].tolist() == (expanded.max(axis=0) + 1).tolist()


@pytest.mark.parametrize("make", [
    lambda: ops.Convolve(np.ones((3, 3)), mode="reflect"),
    lambda: ops.CosmicRayDetect(threshold=3.0, radius=1),
    lambda: ops.Filter(lambda x: x.sum(axis=1) > 0),
    lambda: ops.Transpose(),
    FarPayload,
], ids=["map", "comp", "pay", "permuted", "far-payload"])
@pytest.mark.parametrize("direction", ["backward", "forward"])
def test_tracing_for_a_frontier_answers_like_tracing_the_whole_tile(tmp_path, make, direction):
    """A black-box step asks only about its frontier's cells; the answer is the same, also from
    what an earlier step's re-run of the tile kept (``reruns``: each tile runs once)."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(9, 8))
    x[2, 3] = x[6, 6] = 40.0
    wf = sz.Workflow("t")
    wf.add(make(), wf.input("x"), name="n")
    run = wf.run({"x": x}, store=tmp_path / "s", executor="local", tile_shape=4)
    node = run.node("n")
    task = run.lineage.tile_task(node)
    side = node.operator.output_shape if direction == "backward" else node.operator.input_shapes[0]
    picks = [rng.choice(int(np.prod(side)), size=int(rng.integers(1, 6)), replace=False) for _ in range(4)]
    reruns: dict = {}
    for ids in [np.array([0, 4])] + picks:  # first: cells of the first row (FarPayload's overridden cells)
        frontier = Frontier.of_ids(ids, tuple(side))
        for tile in run.lineage.grid(node).tiles:
            whole, part = trace_tile(task, tile), trace_tile(task, tile, frontier, 0, direction)
            kept = trace_tile(task, tile, frontier, 0, direction, reruns)
            if direction == "backward":
                assert set(part.backward(frontier, 0).tolist()) == set(whole.backward(frontier, 0).tolist())
                assert set(kept.backward(frontier, 0).tolist()) == set(whole.backward(frontier, 0).tolist())
            else:
                assert set(part.forward(frontier, 0).tolist()) == set(whole.forward(frontier, 0).tolist())
                assert set(kept.forward(frontier, 0).tolist()) == set(whole.forward(frontier, 0).tolist())
    payloads = bool(node.operator.supported_modes() & {Mode.PAY, Mode.COMP})
    assert len(reruns) == (len(run.lineage.grid(node).tiles) if payloads else 0)  # one run per tile, reused


def test_envelopes_of_label_payloads_give_the_empty_payload_its_own_cells():
    """Label's vectorized envelopes get each pair's cells on demand (only the empty payload,
    "the cell itself", looks at them): the same boxes as the payloads' expanded cells."""
    from subzero.operators._kernels import encode_region

    op = bound(ops.Label(), (6, 6))
    comp = np.array([[1, 1], [1, 2], [2, 2]])
    pay = PayloadPairs(np.array([7, 8, 14, 0, 35, 20]), np.array([0, 3, 4, 6]),
                       [encode_region(comp, 2), b"", b""])
    lo, hi = with_envelopes(op, pay).envelopes[0]
    assert lo.tolist() == [[1, 1], [0, 0], [3, 2]] and hi.tolist() == [[3, 3], [1, 1], [6, 6]]


def test_a_fused_tile_grows_each_upstream_box_by_its_readers_halos(tmp_path):
    """subtract -> 3x3 convolve -> 5x5 (radius 2) convolve in one task: the subtract is computed
    over the tile grown by 3, the first convolve by 2, each writes only its own tile, and the
    values are those of the nodes computed one after another."""
    from scipy import ndimage

    from subzero.worker import FusedTask, Held, run_fused_tile

    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(12, 12)), rng.normal(size=(12, 12))
    location = resolve(tmp_path)
    sub = bound(ops.Subtract(), (12, 12), (12, 12))
    b1 = bound(ops.Convolve(np.ones((3, 3)), mode="reflect"), (12, 12))
    b2 = bound(ops.Convolve(np.ones((5, 5)), mode="nearest"), (12, 12))
    refs = {n: ArrayRef(location, f"arrays/{n}") for n in ("sub", "b1", "b2")}
    tasks = (NodeTask("sub", sub, (saved(tmp_path, "x", x), saved(tmp_path, "y", y)), sub.input_shapes,
                      (12, 12), output=refs["sub"], chunks=(4, 4)),
             NodeTask("b1", b1, (Held("sub"),), b1.input_shapes, (12, 12), output=refs["b1"], chunks=(4, 4)),
             NodeTask("b2", b2, (Held("b1"),), b2.input_shapes, (12, 12), output=refs["b2"], chunks=(4, 4)))
    fused = FusedTask(tasks)
    assert fused.node == "sub+b1+b2"
    tile = Tile(4, ((4, 8), (4, 8)))
    metas = run_fused_tile(fused, tile).metas
    assert [m.tile for m in metas] == [tile] * 3 and all(m.array_bytes >= 4 * 4 * 8 for m in metas)
    expected = {"sub": x - y}
    expected["b1"] = ndimage.convolve(expected["sub"], np.ones((3, 3)), mode="reflect")
    expected["b2"] = ndimage.convolve(expected["b1"], np.ones((5, 5)), mode="nearest")
    for name, ref in refs.items():
        ref.commit((12, 12), "float64", (4, 4))
        np.testing.assert_allclose(ref.read(tile.box), expected[name][4:8, 4:8])
        assert not (tmp_path / "arrays" / name / "c" / "0").exists()  # no other tile was written
    with pytest.raises(sz.WorkflowError, match="store no lineage"):  # a grown member cannot store its lineage
        run_fused_tile(FusedTask((tasks[0].__class__(**{**tasks[0].__dict__, "strategies": typed("FullOne")}),
                                  *tasks[1:])), tile)


def test_a_fused_chain_of_ufuncs_reuses_memory_and_computes_its_held_output_in_place(monkeypatch):
    """Members that compute into a given array (ufuncs) take the memory of outputs no later
    member reads (in place, as numpy's own temporaries are reused), the last one its tile's cells
    of the held output (no copy); a member whose output is a view of such memory keeps it from
    reuse; every value is numpy's, bit for bit."""
    from subzero.store.arrays import MemoryArray
    from subzero.worker import FusedTask, Held, _Scratch, run_fused_tile

    class Same(ops.Apply):  # a step whose output is a view of its input
        reads_only, fills_out = True, False

        def run(self, ctx, x):
            return x

    lent = []
    take = _Scratch.take
    monkeypatch.setattr(_Scratch, "take", lambda self, shape, dtype: (take(self, shape, dtype), lent.append(
        self.lent))[0])

    class Watched(MemoryArray):
        def write_block(self, box, block, *args, **kwargs):
            self.in_place.append(np.shares_memory(block, self.block))
            return super().write_block(box, block, *args, **kwargs)

    x = np.random.default_rng(3).normal(size=(8, 6)) + 20
    held = MemoryArray("x")
    held.write_block(((0, 8), (0, 6)), x, (8, 6), (4, 6))
    chain = [("m", ops.MultiplyScalar(17.27), ("x",)), ("a", ops.AddScalar(237.3), ("m",)),
             ("d", ops.Divide(), ("m", "a")), ("e", ops.Apply(np.exp), ("d",)), ("s", Same(np.positive), ("e",)),
             ("t", ops.MultiplyScalar(3.0), ("s",)), ("w", ops.Add(), ("t", "m")), ("out", ops.Add(), ("s", "w"))]
    out = Watched("out")
    out.in_place = []
    tasks = tuple(NodeTask(n, bound(op, *[(8, 6)] * len(ins)), tuple(held if i == "x" else Held(i) for i in ins),
                           ((8, 6),) * len(ins), (8, 6), output=out if n == "out" else None, chunks=(4, 6))
                  for n, op, ins in chain)
    for tile in (Tile(0, ((0, 4), (0, 6))), Tile(1, ((4, 8), (0, 6)))):
        lent.clear()
        run_fused_tile(FusedTask(tasks), tile)
        m, a, d, e, t, w = lent  # d and e take a's memory (in place), t not e's (s is a view of it), w m's
        assert (d is a and e is a and t is not e and w is m) and len({id(b) for b in lent}) == 3
    m = x * 17.27
    e = np.exp(m / (m + 237.3))
    np.testing.assert_array_equal(out.read(), e + (e * 3.0 + m))
    assert out.in_place == [True, True]


def test_a_subclass_that_overrides_run_is_run_as_it_says_not_into_a_given_array(tmp_path):
    """An inherited `run_into` never stands in for an overriding ``run`` (which may record its own
    lineage), nor does any `run_into` for a call that records lineage; the dtype probe records none:
    a held output gets exactly the lineage ``run`` writes."""
    from subzero.worker import computes_into

    class OwnFull(ops.Add):
        def supported_modes(self):
            return {Mode.MAP, Mode.FULL}

        def run(self, ctx, x, y):
            cells = np.argwhere(np.ones(np.broadcast_shapes(x.shape, y.shape), bool))
            if Mode.FULL in ctx.modes:
                n = np.arange(len(cells))
                ctx.lwrite_many(cells, cells, cells, out_pair=n, in_pair=[n, n])
            return np.add(x, y) * 2

    class OwnInto(OwnFull):
        def run_into(self, ctx, out, *inputs):
            return np.multiply(np.add(*inputs, out=out), 2, out=out)

    assert computes_into(ops.Add()) and not computes_into(OwnFull()) and computes_into(OwnInto())
    assert not computes_into(ops.Apply(lambda v: v + 1))
    x, y = np.arange(12.0).reshape(3, 4), np.ones((3, 4))
    for k, op in enumerate((OwnFull(), OwnInto())):
        wf = sz.Workflow(f"own{k}")
        a, b = wf.input("x"), wf.input("y")
        wf.add(op, a, b, name="s")
        run = wf.run({"x": x, "y": y}, store=tmp_path / f"r{k}", executor="local", tile_shape=2,
                     strategies={"s": ["FullOne"]}).wait()
        np.testing.assert_array_equal(run.output("s"), (x + y) * 2)
        assert run.catalog.nodes["s"].stats.pairs["FullOne/backward"][0] == 12  # one pair per cell, no probe's
        np.testing.assert_array_equal(run.backward("s", [(1, 2)], to="x"), [[1, 2]])


def test_recomputed_tiles_share_one_budget_in_a_process():
    """Recomputed tiles are kept in one cache per process (`RECOMPUTED_TILES`), every array's
    together within the budget a put gives, least recently used out first; clearing one array's
    key forgets its tiles only."""
    from subzero.worker import RECOMPUTED_TILES

    cache = type(RECOMPUTED_TILES)(0)
    block = np.zeros(100, np.uint8)  # 100 bytes
    for k in range(3):
        cache.put(("a", k), block.copy(), limit=400)
    cache.put(("b", 0), block, limit=400)
    assert cache.size == 400
    assert cache.get(("a", 0)) is not None  # now the most recently used
    cache.put(("b", 1), block.copy(), limit=400)  # over: ("a", 1), the least recently used, goes
    assert cache.get(("a", 1)) is None and cache.size == 400
    cache.put(("c", 0), np.zeros(101, np.uint8), limit=400)  # more than a quarter of the budget: not kept
    assert cache.get(("c", 0)) is None
    cache.clear("a")
    assert cache.get(("a", 0)) is None and cache.get(("a", 2)) is None
    assert cache.get(("b", 0)) is block and cache.size == 200


def test_an_operator_that_only_reads_gets_read_only_views_of_held_arrays():
    """Held in memory, a numpy step's inputs are views (no copy), read-only, so a step that did
    write would fail, not change another reader's values; any other operator gets copies."""
    from subzero.store.arrays import MemoryArray
    from subzero.tiling import Tile
    from subzero.worker import capture_tile

    held = MemoryArray("x")
    held.write_block(((0, 4), (0, 4)), np.arange(16.0).reshape(4, 4), (4, 4), (4, 4))
    seen = []

    class Keep(ops.Apply):
        def run(self, ctx, x):
            seen.append(x)
            return super().run(ctx, x)

    for op, views in [(Keep(np.negative), True), (Keep(lambda v: -v), False)]:
        assert op.reads_only is views
        bound = op.bound(((4, 4),), (4, 4))
        task = NodeTask("n", bound, (held,), ((4, 4),), (4, 4), (), chunks=(4, 4))
        got = capture_tile(task, Tile(0, ((1, 3), (0, 4))))
        np.testing.assert_array_equal(got.output, -np.arange(16.0).reshape(4, 4)[1:3])
        block = seen.pop()
        assert np.shares_memory(block, held.block) is views and block.flags.writeable is not views
    assert ops.Add().reads_only and ops.Threshold(0.5).reads_only and ops.MedianFilter(3).reads_only
    assert not ops.GenericFilter(np.max, size=3).reads_only  # the user's function is given the window's buffer
    from subzero.trace.calls import ARG, NumpyCall  # np.where as traced (xarray's where): it only reads
    assert ops.Apply(NumpyCall(np.where, (ARG, ARG, 0.0)), nin=2).reads_only
    assert not ops.Apply(NumpyCall(np.where, (ARG, ARG, 0.0), {"out": None}), nin=2).reads_only


@pytest.mark.parametrize("op, scipy_fn", [
    (ops.Convolve(np.arange(9.0).reshape(3, 3)), lambda x: ndimage.convolve(x, np.arange(9.0).reshape(3, 3))),
    (ops.Correlate(np.arange(9.0).reshape(3, 3)), lambda x: ndimage.correlate(x, np.arange(9.0).reshape(3, 3))),
    (ops.GaussianFilter(1.0), lambda x: ndimage.gaussian_filter(x, 1.0)),
    (ops.Prewitt(0), lambda x: ndimage.prewitt(x, 0)), (ops.Laplace(), ndimage.laplace)])
def test_scipys_filters_read_held_arrays_as_views(op, scipy_fn):
    """scipy's filters never write their input: a held input reaches them as a read-only view
    (no copy), and they give scipy's values over the tile's halo box."""
    from subzero.store.arrays import MemoryArray
    from subzero.tiling import Tile
    from subzero.worker import capture_tile

    x = np.random.default_rng(2).normal(size=(12, 10))
    held = MemoryArray("x")
    held.write_block(((0, 12), (0, 10)), x, (12, 10), (12, 10))
    assert op.reads_only
    task = NodeTask("n", op.bound(((12, 10),), (12, 10)), (held,), ((12, 10),), (12, 10), (), chunks=(6, 10))
    got = capture_tile(task, Tile(0, ((0, 12), (0, 10))))
    np.testing.assert_allclose(got.output, scipy_fn(x))
    np.testing.assert_array_equal(held.block, x)


def test_a_numpy_steps_whole_output_is_held_as_computed_and_a_tiles_is_copied_in():
    """A held node whose one tile is the whole array from numpy's own function keeps the array
    computed (no copy: a reshape stays a read-only view of its input); a tile of a larger array,
    or any other operator's output, is copied into the held array."""
    from subzero.store.arrays import MemoryArray

    held = MemoryArray("x")
    held.write_block(((0, 4), (0, 4)), np.arange(16.0).reshape(4, 4), (4, 4), (4, 4))
    out = MemoryArray("r")
    run_tile(NodeTask("r", ops.Reshape((2, 8)).bound(((4, 4),), (2, 8)), (held,), ((4, 4),), (2, 8), (), output=out,
                      chunks=(2, 8)), Tile(0, ((0, 2), (0, 8))))
    np.testing.assert_array_equal(out.read(), np.arange(16.0).reshape(2, 8))
    assert np.shares_memory(out.block, held.block) and not out.block.flags.writeable
    made = []

    class Keep(ops.Apply):
        fills_out = False  # its own run's array (a ufunc's tile is otherwise computed in the held array itself)

        def run(self, ctx, x):
            made.append(super().run(ctx, x))
            return made[-1]

    for fn, kept, boxes in [(np.negative, True, [((0, 4), (0, 4))]), (lambda v: -v, False, [((0, 4), (0, 4))]),
                            (np.negative, False, [((0, 2), (0, 4)), ((2, 4), (0, 4))])]:
        out = MemoryArray("n")
        task = NodeTask("n", Keep(fn).bound(((4, 4),), (4, 4)), (held,), ((4, 4),), (4, 4), (), output=out,
                        chunks=(2, 4))
        for k, box in enumerate(boxes):
            run_tile(task, Tile(k, box))
        np.testing.assert_array_equal(out.read(), -np.arange(16.0).reshape(4, 4))
        assert np.shares_memory(out.block, made[-1]) is kept


def _region_workflow():
    """x -> scaled (elementwise) -> smooth (Halo) -> median (Halo) -> bright -> stars (Label), and
    x -> mesh (a block mean): run locally, every node but x and the outputs is unstored; on Spark,
    the arrays a later stage reads are stored (bright, before Label's two passes)."""
    wf = sz.Workflow("regions")
    x = wf.input("x")
    scaled = wf.add(ops.MultiplyScalar(3.0), x, name="scaled")
    smooth = wf.add(ops.GaussianFilter(1.0, truncate=2.0), scaled, name="smooth")
    median = wf.add(ops.MedianFilter(3), smooth, name="median")
    bright = wf.add(ops.Threshold(0.5), median, name="bright")
    stars = wf.add(ops.Label(), bright, name="stars")
    wf.add(ops.AddScalar(1), stars, name="out")
    mesh = wf.add(ops.Downsample(3, how="mean"), x, name="mesh")
    wf.add(ops.AddScalar(1.0), mesh, name="out2")
    return wf


@pytest.mark.parametrize("executor", ["local", "spark"])
def test_region_reads_of_recomputed_arrays_match_whole_tile_reads(tmp_path, request, executor):
    """A small read of an unstored Elementwise or Halo node computes only its region (through the
    unstored nodes before it, no whole tile is cached), others (Label, a block mean) whole tiles,
    and every read gives the cells the whole tiles give and the run stored with keep='all'."""
    from subzero import worker
    from subzero.worker import RECOMPUTED_TILES, regional

    wf = _region_workflow()
    x = np.random.default_rng(7).normal(size=(29, 35))
    extra = {"spark": request.getfixturevalue("spark")} if executor == "spark" else {}
    lean = wf.run({"x": x}, store=tmp_path / "lean", executor=executor, tile_shape=8, **extra).wait()
    full = wf.run({"x": x}, store=tmp_path / "full", executor="local", tile_shape=8, keep="all").wait()
    recomputed = [n for n in ("scaled", "smooth", "median", "bright", "stars", "mesh")
                  if not lean.catalog.node(n).array.stored]
    assert recomputed == ["scaled", "smooth", "median"] + (["bright", "stars", "mesh"] if executor == "local" else [])
    arrays = {n: lean.array(n) for n in recomputed}
    assert {n for n, a in arrays.items() if regional(a.task.operator)} == {"scaled", "smooth", "median", "bright"} & \
        set(recomputed)
    expected = {n: np.asarray(full.output(n)) for n in recomputed}
    rng = np.random.default_rng(11)
    for k in range(24):
        name = recomputed[k % len(recomputed)]
        shape = expected[name].shape
        lo = [int(rng.integers(0, n)) for n in shape]
        box = tuple((a, int(rng.integers(a + 1, min(a + 6, n) + 1))) for a, n in zip(lo, shape))
        RECOMPUTED_TILES.clear()
        got = arrays[name].read(box)
        want = expected[name][tuple(slice(a, b) for a, b in box)]
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype
        cached = {key[0] for key in RECOMPUTED_TILES._items}
        # a small read of a regional node cached no tile of it nor of the regional nodes before it
        assert (arrays[name]._key in cached) == (name in ("stars", "mesh"))
    for name in recomputed:  # the whole array, and the whole tiles' path forced, agree
        RECOMPUTED_TILES.clear()
        np.testing.assert_array_equal(arrays[name].read(), expected[name])
    wide = ((3, 27), (5, 30))
    RECOMPUTED_TILES.clear()
    region = arrays["median"].read(wide)
    share, worker.REGION_SHARE = worker.REGION_SHARE, 0.0
    try:
        RECOMPUTED_TILES.clear()
        np.testing.assert_array_equal(region, arrays["median"].read(wide))
    finally:
        worker.REGION_SHARE = share
    RECOMPUTED_TILES.clear()


def test_a_region_read_mixes_cached_tiles_and_parts_computed_on_their_own(tmp_path, monkeypatch):
    """A read over a cached tile copies it; its other parts are computed on their own: one region
    for parts whose hull is not much larger than them, one each otherwise (a tile's halo ring);
    a small read through a chain of unstored nodes computes regions all the way, caching no tile."""
    from subzero import worker

    wf = _region_workflow()
    x = np.random.default_rng(5).normal(size=(48, 48))
    run = wf.run({"x": x}, store=tmp_path / "s", executor="local", tile_shape=16).wait()
    full = wf.run({"x": x}, store=tmp_path / "f", executor="local", tile_shape=16, keep="all").wait()
    worker.RECOMPUTED_TILES.clear()
    np.testing.assert_array_equal(run.array("bright").read(((20, 22), (20, 22))),
                                  np.asarray(full.output("bright"))[20:22, 20:22])
    assert not worker.RECOMPUTED_TILES._items  # bright, median, smooth and scaled: regions only
    smooth = run.array("smooth")
    want = np.asarray(full.output("smooth"))
    smooth.tile(4)  # the middle tile, (16, 32) x (16, 32)
    regions = []
    real = worker.RecomputedArray.region
    monkeypatch.setattr(worker.RecomputedArray, "region", lambda self, box: (self is smooth and regions.append(box)) or real(self, box))
    np.testing.assert_array_equal(smooth.read(((14, 34), (14, 34))), want[14:34, 14:34])  # the tile and a ring
    assert len(regions) == 8 and all(worker._cells(b) <= 32 for b in regions)
    regions.clear()
    np.testing.assert_array_equal(smooth.read(((14, 18), (14, 18))), want[14:18, 14:18])  # in four tiles, one cached
    assert regions == [((14, 18), (14, 18))]
    worker.RECOMPUTED_TILES.clear()


def test_regions_of_recomputed_arrays_are_computed_once_and_cut_from_kept_ones(tmp_path, monkeypatch):
    """A region computed on its own is kept: asked again (another reader of the array), or a box
    inside it (a tile's border inside the borders read for its neighbours too), it is not computed
    again, and gives the values the run stores with keep='all'."""
    from subzero import worker

    wf = _region_workflow()
    x = np.random.default_rng(8).normal(size=(48, 48))
    run = wf.run({"x": x}, store=tmp_path / "s", executor="local", tile_shape=16).wait()
    want = np.asarray(wf.run({"x": x}, store=tmp_path / "f", executor="local", tile_shape=16,
                             keep="all").wait().output("smooth"))
    worker.RECOMPUTED_TILES.clear()
    worker.RECOMPUTED_REGIONS.clear()
    smooth = run.array("smooth")
    calls = []
    real = worker._call
    monkeypatch.setattr(worker, "_call", lambda task, tile, modes: (task.node == "smooth" and calls.append(tile.box))
                        or real(task, tile, modes))
    np.testing.assert_array_equal(smooth.region(((10, 20), (3, 9))), want[10:20, 3:9])
    np.testing.assert_array_equal(smooth.region(((10, 20), (3, 9))), want[10:20, 3:9])  # kept
    np.testing.assert_array_equal(smooth.region(((12, 15), (4, 9))), want[12:15, 4:9])  # inside: cut from it
    assert calls == [((10, 20), (3, 9))]
    np.testing.assert_array_equal(smooth.region(((9, 12), (4, 6))), want[9:12, 4:6])  # not inside: computed
    assert len(calls) == 2
    smooth.forget()
    assert not any(key[0] == smooth._key for key in worker.RECOMPUTED_REGIONS._items)
    worker.RECOMPUTED_REGIONS.clear()

"""One query step: stored lookups, mapping, re-execution, the switch to re-execution."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import subzero as sz
from subzero import operators as ops
from subzero.optimizer import query_time
from subzero.optimizer.cost_model import NodeProfile, StrategyProfile
from subzero.modes import Direction, Strategy
from subzero.query import Carrier, QueryOptions, check_forced, step
from subzero.errors import LookupTimeout
from subzero.frontier import Frontier


@pytest.fixture
def run(tmp_path):
    wf = sz.Workflow("q")
    x = wf.input("x")
    wf.add(ops.Convolve(np.ones((3, 3)), mode="constant"), x, name="blur")
    return wf.run({"x": np.ones((20, 20))}, store=tmp_path / "q", executor="local", tile_shape=5,
                  strategies={"blur": ["FullOne/forward", "FullMany"]})


def test_every_way_of_stepping_gives_the_same_cells(run):
    node = run.node("blur")
    mask = np.zeros((20, 20), bool)
    mask[[0, 7, 19], [0, 12, 5]] = True
    expected = None
    for form in ("ids", "mask", "boxes"):
        frontier = Frontier.of_mask(mask)
        frontier = {"ids": frontier, "mask": Frontier((20, 20), mask=mask),
                    "boxes": Frontier.of_boxes(*frontier.boxes(), (20, 20))}[form]
        for strategy in ("Map", "FullOne/forward", "FullMany/backward", "BlackBox"):
            got = step(run.lineage, node, frontier, 0, Direction.BACKWARD, Strategy.parse(strategy)).ids()
            expected = got if expected is None else expected
            np.testing.assert_array_equal(got, expected, err_msg=f"{strategy} from {form}")
    assert len(expected) == 4 + 9 + 6


def test_a_step_past_its_deadline_raises_lookup_timeout(run):
    frontier = Frontier.of_coords(np.array([[3, 3]]), (20, 20))
    with pytest.raises(LookupTimeout):
        step(run.lineage, run.node("blur"), frontier, 0, Direction.BACKWARD, Strategy.parse("FullOne/forward"),
             deadline=time.perf_counter() - 1)


def test_stored_lookups_over_budget_switch_to_re_execution(run, monkeypatch):
    """The query-time optimizer picks the stored index; its budget is spent at once, so the step
    finishes by re-execution with the same answer (the paper's 2x bound, here forced)."""
    node = run.node("blur")
    run.lineage._profiles["blur"] = NodeProfile("blur", tiles=16, op_seconds=5.0, out_size=400, in_sizes=[400],
                                        strategies={"FullMany/backward": StrategyProfile(pairs=400, out_cells=400),
                                                    "FullOne/forward": StrategyProfile(pairs=1e7, keys=1e7)})
    monkeypatch.setattr(query_time.StepChoice, "budget", property(lambda self: -1.0))
    monkeypatch.setattr(node.operator, "supported_modes", lambda: set())  # hide Map from the chooser only
    monkeypatch.setattr(type(node.operator), "all_to_all", property(lambda self: False))
    got = run.backward("blur", [(5, 5)], to="x")
    steps = run.last_query
    assert steps[0]["strategy"] == "FullMany/backward" and steps[0]["switched_to_blackbox"]
    assert got.tolist() == [[r, c] for r in (4, 5, 6) for c in (4, 5, 6)]
    assert run.query_log()[-1]["steps"][0]["switched_to_blackbox"] is True


def test_forcing_a_strategy_the_node_did_not_store_is_an_error(run):
    node = run.node("blur")
    assert check_forced(node, run.strategies["blur"], "Map") == Strategy.parse("Map")
    assert check_forced(node, run.strategies["blur"], "BlackBox") == Strategy.parse("BlackBox")
    with pytest.raises(sz.LineageError, match="did not store 'PayOne/backward'"):
        check_forced(node, run.strategies["blur"], "PayOne")


def test_query_log_records_each_step(run):
    run.forward("x", [(0, 0)], to="blur")
    record = run.query_log()[-1]
    assert record["direction"] == "forward" and record["steps"][0]["cells_out"] == 4
    assert record["steps"][0]["strategy"] in ("Map", "FullOne/forward")
    logged = len(run.query_log())
    run.log_queries = False  # as the viewer's run: its brushes are not logged, last_query still is
    try:
        run.backward("blur", [(1, 1)], to="x")
    finally:
        run.log_queries = True
    assert len(run.query_log()) == logged and run.last_query[0]["direction"] == "backward"


def test_damaged_stored_lineage_falls_back_to_re_execution(run, monkeypatch):
    for path in (Path(run.path) / "lineage" / "blur" / "FullMany-backward").iterdir():
        if path.suffix in (".dat", ".idx"):
            path.unlink()  # lose the R-trees of FullMany
    node = run.node("blur")
    run.lineage._profiles["blur"] = NodeProfile("blur", tiles=16, op_seconds=5.0, out_size=400, in_sizes=[400],
                                        strategies={"FullMany/backward": StrategyProfile(pairs=400, out_cells=400),
                                                    "FullOne/forward": StrategyProfile(pairs=1e7, keys=1e7)})
    monkeypatch.setattr(node.operator, "supported_modes", lambda: set())  # hide Map from the chooser only
    monkeypatch.setattr(type(node.operator), "all_to_all", property(lambda self: False))
    got = run.backward("blur", [(0, 0)], to="x")
    assert got.tolist() == [[0, 0], [0, 1], [1, 0], [1, 1]]
    assert "missing" in run.last_query[0]["damaged_lineage"]
    with pytest.raises(sz.StoreError, match="missing"):
        run.backward("blur", [(0, 0)], to="x", using={"blur": "FullMany"})


class Counted:
    """A `subzero.query.Carrier` holding a frontier and recording each step it takes."""

    def __init__(self, frontier: Frontier, steps: list):
        self.frontier, self.steps = frontier, steps

    @property
    def is_empty(self) -> bool:
        return self.frontier.is_empty

    def estimate(self) -> int:
        return self.frontier.estimate()

    def union(self, other: "Counted") -> "Counted":
        return Counted(self.frontier.union(other.frontier), self.steps)

    def step(self, engine, node, i, direction, strategy) -> "Counted":
        self.steps.append((node.name, i, strategy))
        return Counted(step(engine, node, self.frontier, i, direction, strategy), self.steps)


@pytest.fixture
def diamond(tmp_path):
    """x -> blur -> mixed <- x: two paths from mixed back to x."""
    wf = sz.Workflow("d")
    x = wf.input("x")
    blur = wf.add(ops.Convolve(np.ones((3, 3)), mode="constant"), x, name="blur")
    wf.add(ops.Add(), blur, x, name="mixed")
    return wf.run({"x": np.ones((12, 12))}, store=tmp_path / "d", executor="local", tile_shape=4,
                  strategies={"blur": ["FullOne"], "mixed": ["FullMany"]})


def test_a_carrier_walks_like_a_frontier_each_node_stepping_once_per_input(diamond):
    """The engine's one walk carries any `Carrier`: the same cells as a frontier's walk, each
    (node, input) stepped once (what arrives by two paths is united first), by the strategy the
    engine chose (`choose_step`) and logged."""
    src, dst = diamond.node("mixed"), diamond.node("x")
    start = Frontier.of_coords(np.array([[0, 0], [6, 7]]), (12, 12))
    for direction, a, b, cells in ((Direction.BACKWARD, src, dst, start),
                                   (Direction.FORWARD, dst, src, Frontier.of_coords(np.array([[5, 5]]), (12, 12)))):
        expected = diamond.lineage.walk(a, b, cells, QueryOptions(direction))
        steps: list = []
        plan = QueryOptions(direction)
        got = diamond.lineage.walk(a, b, Counted(cells, steps), plan)
        assert isinstance(got, Counted) and isinstance(got, Carrier)
        np.testing.assert_array_equal(got.frontier.ids(), expected.ids())
        assert sorted((n, i) for n, i, _ in steps) == [("blur", 0), ("mixed", 0), ("mixed", 1)]
        assert [(e["node"], e["input"], e["strategy"]) for e in plan.log] == [(n, i, s.name) for n, i, s in steps]


def test_a_carrier_steps_by_the_strategy_the_plan_forces(diamond):
    steps: list = []
    plan = QueryOptions(Direction.BACKWARD, using={diamond.node("blur"): Strategy.parse("BlackBox")})
    start = Frontier.of_coords(np.array([[6, 7]]), (12, 12))
    got = diamond.lineage.walk(diamond.node("mixed"), diamond.node("x"), Counted(start, steps), plan)
    assert [s.name for n, _, s in steps if n == "blur"] == ["BlackBox"]
    expected = diamond.lineage.walk(diamond.node("mixed"), diamond.node("x"), start, QueryOptions(Direction.BACKWARD))
    np.testing.assert_array_equal(got.frontier.ids(), expected.ids())


SHIFT = np.array([[1.0, 0.0, 0.0]])  # each cell reads its neighbour along the last axis, not itself


def edges(image):
    g = sz.ndimage.convolve(image, SHIFT, mode="constant")  # not entire-array safe: one border is never read
    strong = g[g > 0.0]  # a Gather guided by a mask
    return strong.mean() + g.mean()  # global statistics: both reached by every cell of their input


def test_a_step_reached_by_a_whole_array_maps_it_whole_and_answers_the_same_cells(tmp_path):
    """A frontier holding every cell (after a global statistic) goes through the stencil and the
    Gather by their mask forms (Map, priced as a pass over the array, not re-execution), is
    kept for the next query, and is the same set as every cell's brute force and re-execution."""
    image = np.random.default_rng(3).random((24, 30))
    wf = sz.workflow(edges, name="edges").trace({"image": image})
    run = wf.run({"image": image}, store=tmp_path / "e", executor="local", tile_shape=8)
    out = wf.nodes[-1].name
    cell = [(0,) * len(run.shape(out))]
    got = run.backward(out, cell, to="image")
    assert {s["node"]: s["strategy"] for s in run.last_query if s["cells_in"] > 1}.get("convolve") == "Map"
    rerun = run.backward(out, cell, to="image", using={n.name: "BlackBox" for n in wf.nodes if n.inputs})
    np.testing.assert_array_equal(got, rerun)
    conv = run.node("convolve").operator
    brute = np.unique(conv.map_b(np.argwhere(np.ones(image.shape, bool)), 0), axis=0)
    assert len(brute) == 24 * 29
    np.testing.assert_array_equal(got, brute)
    mask = run.backward_mask(out, cell, to="image")
    mask[:] = False  # an answer is the caller's: the kept step is not written through it
    np.testing.assert_array_equal(run.backward(out, cell, to="image"), got)


# -- composed steps: a chain of mapped steps taken as arithmetic on boxes ---------------------------
CHAIN_STEPS = ("scale", "halo1", "halo2", "down", "up", "transpose", "broadcast", "slice", "flip", "blockmean")


def _chain(names: list[str], shape: tuple[int, int]):
    """A workflow x -> one operator per name (a composable mapping each), its inputs and node names."""
    wf = sz.Workflow("chain")
    node = wf.input("x")
    inputs = {"x": np.arange(shape[0] * shape[1], dtype=float).reshape(shape)}
    for k, name in enumerate(names):
        h, w = shape
        if name == "down" and (h % 2 or w % 2):
            name = "scale"
        if name == "up" and h * w > 400:
            name = "halo1"
        if name == "broadcast":  # a (1, w) row added to every row of the chain's array
            inputs[f"row{k}"] = np.ones((1, w))
            node = wf.add(ops.Add(), node, wf.input(f"row{k}"), name=f"s{k}")
            continue
        if name == "blockmean" and not (h % 2 or w % 2):  # a 2 x 2 block mean as numpy code writes it
            node = wf.add(ops.Reshape((h // 2, 2, w // 2, 2)), node, name=f"s{k}r")
            node = wf.add(ops.Mean(axis=(1, 3)), node, name=f"s{k}")
            shape = (h // 2, w // 2)
            continue
        if name == "slice" and min(h, w) < 3 or name == "blockmean":
            name = "scale"
        op = {"scale": lambda: ops.MultiplyScalar(2.0), "halo1": lambda: ops.UniformFilter(3, mode="constant"),
              "halo2": lambda: ops.UniformFilter(5, mode="reflect"), "down": lambda: ops.Downsample(2),
              "up": lambda: ops.Upsample(2), "transpose": lambda: ops.Transpose(),
              "slice": lambda: ops.Slice(start=(1, None), stop=(None, -1)), "flip": lambda: ops.Flip()}[name]()
        node = wf.add(op, node, name=f"s{k}")
        shape = {"down": (h // 2, w // 2), "up": (h * 2, w * 2), "transpose": (w, h),
                 "slice": (h - 1, w - 1)}.get(name, shape)
    return wf, inputs, node.name


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_composed_walk_answers_every_node_as_the_stepped_walk_does(data):
    """Random chains of composable mappings (same cells, halos, block reductions, repetition,
    broadcasts, transposes, slices, flips, a reshape and an axis mean), random cells or boxes: the walk that takes them as arithmetic on
    boxes gives, at every node, the cells re-execution gives (an independent tracing of the
    tiles), both directions."""
    names = data.draw(st.lists(st.sampled_from(CHAIN_STEPS), min_size=1, max_size=5), label="chain")
    shape = (data.draw(st.sampled_from([8, 12, 16]), label="rows"), data.draw(st.sampled_from([8, 10, 16]), label="cols"))
    wf, inputs, out = _chain(names, shape)
    with tempfile.TemporaryDirectory() as tmp:
        run = wf.run(inputs, store=Path(tmp) / "c", executor="local", tile_shape=4)
        stepped = {n.name: "BlackBox" for n in wf.nodes if n.inputs}
        for src, walk, targets in (
                (out, run.backward_many, [n.name for n in wf.nodes if n.name != out]),
                ("x", run.forward_many, [n.name for n in wf.nodes if n.inputs])):
            h, w = run.shape(src)
            if data.draw(st.booleans(), label="box"):
                r0, c0 = data.draw(st.integers(0, h - 1)), data.draw(st.integers(0, w - 1))
                query = {"box": [(r0, data.draw(st.integers(r0 + 1, h))), (c0, data.draw(st.integers(c0 + 1, w)))]}
            else:
                cells = data.draw(st.lists(st.tuples(st.integers(0, h - 1), st.integers(0, w - 1)), min_size=1,
                                           max_size=12))
                query = {"cells": cells}
            composed = walk(src, to=targets, as_="coords", **query)
            if "box" in query:  # a box is compact: its first step at least is arithmetic
                assert run.last_query[0]["predicted_seconds"] is None, run.last_query[0]
            reference = walk(src, to=targets, as_="coords", using=stepped, **query)
            for name in targets:
                np.testing.assert_array_equal(composed[name], reference[name], err_msg=f"{names}: node {name}")
        run.wait()  # the store is written behind the run: done before it is removed


def test_a_brush_through_a_chain_stays_boxes_and_chooses_no_strategy(tmp_path, monkeypatch):
    """A box through elementwise steps and halos: each node's answer is boxes (never expanded to
    cells), each step is its resolved rule (no strategy chosen), and a node whose lineage is no
    such mapping (a Label) has no rule."""
    wf = sz.Workflow("b")
    x = wf.input("x")
    a = wf.add(ops.UniformFilter(3, mode="constant"), x, name="a")
    b = wf.add(ops.MultiplyScalar(3.0), a, name="b")
    c = wf.add(ops.GaussianFilter(1.0, truncate=2.0), b, name="c")
    wf.add(ops.Label(), wf.add(ops.Threshold(0.5), c, name="t"), name="lab")
    run = wf.run({"x": np.random.default_rng(0).random((40, 40))}, store=tmp_path / "b", executor="local",
                 tile_shape=10)
    engine = run.lineage
    chosen: list = []
    choose = type(engine).choose
    monkeypatch.setattr(type(engine), "choose", lambda self, node, *a, **k: chosen.append(node.name) or choose(
        self, node, *a, **k))
    got = run.backward_many("c", box=[(10, 14), (20, 30)], to=["b", "a", "x"], as_="frontier")
    assert chosen == []
    assert {n: (f.kind, f.count) for n, f in got.items()} == {"b": ("boxes", 8 * 14), "a": ("boxes", 8 * 14),
                                                               "x": ("boxes", 10 * 16)}
    assert engine.rule(run.node("b"), 0, Direction.BACKWARD).identity
    assert engine.rule(run.node("lab"), 0, Direction.BACKWARD) is None


@pytest.mark.parametrize("strategy", ["PayOne", "CompOne"])
def test_a_payload_step_backward_maps_each_payload_once_as_a_union(tmp_path, monkeypatch, strategy):
    """Backward, a payload strategy's step needs only the union of its cells' lineage: each
    distinct payload goes through the operator's ``map_p`` once (never expanded into one pair
    per cell), and the answer is re-execution's."""
    rng = np.random.default_rng(4)
    image = rng.normal(0.0, 1.0, (48, 64))
    image[10:16, 20:27] += 40.0
    image[30:33, 5:12] += 30.0
    wf = sz.Workflow("p")
    x = wf.input("x")
    wf.add(ops.DetectStars(threshold=5.0, minarea=3), x, name="stars")
    run = wf.run({"x": image}, store=tmp_path / "p", executor="local", tile_shape=16,
                 strategies={"stars": [strategy]})
    cells = [(12, 22), (31, 6), (0, 0), (40, 50)]
    rerun = run.backward("stars", cells, to="x", using={"stars": "BlackBox"})
    import subzero.query as query_mod

    monkeypatch.setattr(query_mod, "expand_payloads", lambda *a, **k: pytest.fail("payloads expanded per cell"))
    got = run.backward("stars", cells, to="x", using={"stars": strategy})
    np.testing.assert_array_equal(got, rerun)
    assert len(got) > 6 * 7 + 3 * 7


def labelled_statistic_run(store):
    """A two-input node storing payloads (``LabeledStatistic``: values and labels) with PayOne,
    three labelled regions over a 12 x 12 grid, run locally into ``store``."""
    wf = sz.Workflow("two")
    x, labels = wf.input("x"), wf.input("labels")
    wf.add(ops.LabeledStatistic("sum_labels", index=[1, 2, 3]), x, labels, name="stat")
    grid = np.zeros((12, 12), np.int64)
    grid[1:4, 2:6], grid[7:11, 0:3], grid[5, 5:12] = 1, 2, 3
    return wf.run({"x": np.arange(144.0).reshape(12, 12), "labels": grid}, store=store, executor="local",
                  strategies={"stat": ["PayOne"]})


def test_a_backward_walk_looks_each_payload_up_once_for_every_input(tmp_path, monkeypatch):
    """A two-input node storing payloads (``LabeledStatistic``: values and labels): the walk to
    both inputs reads each tile's payloads once, and answers as re-execution does."""
    from subzero.encoders import pay_one

    run = labelled_statistic_run(tmp_path / "s")
    calls = []
    real, real_decoded = pay_one.PayOne.lookup, pay_one.PayOne.lookup_decoded

    def counted(self, reader, frontier, shapes):
        calls.append(1)
        return real(self, reader, frontier, shapes)

    def counted_decoded(self, tile, frontier):
        calls.append(1)
        return real_decoded(self, tile, frontier)

    monkeypatch.setattr(pay_one.PayOne, "lookup", counted)  # from the shard, or from the tile decoded whole
    monkeypatch.setattr(pay_one.PayOne, "lookup_decoded", counted_decoded)
    got = run.backward_many("stat", [(0,), (2,)], to=["x", "labels"], as_="frontier")
    assert len(calls) == len(run.lineage.grid(run.node("stat")).split(run.frontier("stat", [(0,), (2,)]), None))
    for name in ("x", "labels"):
        want = run.backward("stat", [(0,), (2,)], to=name, using={"stat": "BlackBox"}, as_="frontier")
        np.testing.assert_array_equal(got[name].ids(), want.ids())
    assert len(got["x"].ids()) and len(got["labels"].ids())


def test_payload_tiles_read_whole_once_answer_as_their_shards(tmp_path):
    """A walk keeps each payload tile it reads decoded whole (within ``query_memo_mb``) and
    answers the next brushes from it: the same cells as reading the shards (setting 0) and as
    re-execution, for boxes over several tiles."""
    from subzero import config

    run = labelled_statistic_run(tmp_path / "s")
    cells = [[(0,)], [(1,), (2,)], [(0,), (1,), (2,)]]
    kept = [run.backward_many("stat", c, to=["x", "labels"], as_="frontier") for c in cells]
    assert any(v for v in run.lineage._decoded.values())  # decoded and kept
    with config.set(query_memo_mb=0):
        shards = sz.open_run(tmp_path / "s")
        read = [shards.backward_many("stat", c, to=["x", "labels"], as_="frontier") for c in cells]
        assert not any(v for v in shards.lineage._decoded.values())  # over the budget: read from the shard
    for c, a, b in zip(cells, kept, read):
        for name in ("x", "labels"):
            want = run.backward("stat", c, to=name, using={"stat": "BlackBox"}, as_="frontier")
            np.testing.assert_array_equal(a[name].ids(), want.ids())
            np.testing.assert_array_equal(b[name].ids(), want.ids())


def _cosmics_run(store):
    """A two-input payload operator with a halo (``RepairCosmics``: COMP, image and coverage) over
    tiles of 8, so a few cells' frontier straddles tiles; nothing stored."""
    rng = np.random.default_rng(7)
    image = rng.normal(0.0, 1.0, (24, 24))
    image[rng.integers(0, 24, 12), rng.integers(0, 24, 12)] += 60.0  # residual cosmic rays
    cover = np.ones((24, 24))
    cover[3:6, 10:14] = 0  # uncovered: flagged
    wf = sz.Workflow("c")
    wf.add(ops.RepairCosmics(1.0), wf.input("x"), wf.input("cover"), name="clean")
    return wf.run({"x": image, "cover": cover}, store=store, executor="local", tile_shape=8,
                  strategies={"clean": ["BlackBox"]})


@pytest.mark.parametrize("make", ["cosmics", "statistic"])
def test_a_black_box_step_backward_unites_the_rerun_payloads_as_region_pairs_do(tmp_path, monkeypatch, make):
    """Backward, a black-box step through a payload operator unites each distinct payload's
    ``map_p`` and the default's map step over the re-run tiles' payload pairs, read once per tile
    for every input: the cells the re-run's region pairs (one per cell) give."""
    import subzero.query as query_mod

    run = _cosmics_run(tmp_path / "c") if make == "cosmics" else labelled_statistic_run(tmp_path / "s")
    node = run.lineage.workflow.nodes[-1]
    inputs = [n.name for n in node.inputs]
    rng = np.random.default_rng(3)
    shape = run.shape(node.name)
    queries = [[tuple(int(rng.integers(0, n)) for n in shape) for _ in range(k)] for k in (1, 3, 9)]
    queries.append([tuple(n // 2 for n in shape)])
    if make == "cosmics":
        queries.append([(4, 11), (7, 7), (8, 8)])  # an uncovered (repaired) cell, and a tile corner
    reads = []
    real = query_mod.QueryEngine.rerun_payloads
    monkeypatch.setattr(query_mod.QueryEngine, "rerun_payloads",
                        lambda self, *a: reads.append(a[1]) or real(self, *a))
    monkeypatch.setattr(query_mod, "expand_payloads", lambda *a, **k: pytest.fail("payloads expanded per cell"))
    got = [run.backward_many(node.name, cells, to=inputs, using={node.name: "BlackBox"}, as_="frontier")
           for cells in queries]
    assert reads and len(reads) == sum(  # once per tile, or per region of a halo operator
        len(run.lineage.regions(node, run.lineage.grid(node).split(run.frontier(node.name, cells), None)))
        for cells in queries)
    monkeypatch.undo()
    monkeypatch.setattr(query_mod, "_rerun_union", lambda *a: None)  # the region pairs' way
    for cells, answer in zip(queries, got):
        want = run.backward_many(node.name, cells, to=inputs, using={node.name: "BlackBox"}, as_="frontier")
        for name in inputs:
            np.testing.assert_array_equal(answer[name].ids(), want[name].ids(), err_msg=f"{cells} -> {name}")
    assert any(len(a[inputs[0]].ids()) > len(c) for a, c in zip(got, queries))


def _split_means(x):
    """Two global statistics over selections of ``y``: a 1-cell query reaches both selections'
    masks whole, and unites them at ``y``."""
    y = x * 2.0
    return x - (y[y > 1.0].mean() + y[y < 0.6].mean())


def test_unions_of_kept_answers_are_kept_and_stay_exact(tmp_path):
    """Steps reached whole are kept per engine, read-only; their union (the same parts every
    query) is kept too: the next query gets the very same frontier, its answer is the caller's
    to write, and it is the cells re-execution gives."""
    image = np.random.default_rng(5).random((24, 32))
    wf = sz.workflow(_split_means, name="split").trace({"x": image})
    run = wf.run({"x": image}, store=tmp_path / "s", executor="local", tile_shape=8)
    out = wf.nodes[-1].name
    first = run.backward_mask(out, [(3, 4)], to="x")  # keeps the whole steps (its own parts are fresh)
    got = run.backward_mask(out, [(3, 4)], to="x")  # unites the kept steps: kept too
    np.testing.assert_array_equal(got, first)
    assert got.sum() > image.size // 2  # the queried cell and the cells the two selections hold
    engine = run.lineage
    kept = dict(engine._unions)
    assert kept and all(not any(a.flags.writeable for a in f.arrays()) for _, f in kept.values())
    got[:] = False  # the caller's copy: nothing kept is written through it
    again = run.backward_many(out, [(3, 4)], to=["x"] + [n.name for n in wf.nodes if n.inputs][:-1])
    assert engine._unions.keys() == kept.keys() and all(engine._unions[k][1] is kept[k][1] for k in kept)
    reference = run.backward_many(out, [(3, 4)], to=list(again), using={n.name: "BlackBox" for n in wf.nodes
                                                                        if n.inputs})
    for name, f in again.items():
        np.testing.assert_array_equal(f.ids(), reference[name].ids(), err_msg=name)
    parts = [Frontier.of_ids(np.array([1, 2]), (4, 4)), Frontier.of_ids(np.array([2, 9]), (4, 4))]
    assert engine.united(parts).ids().tolist() == [1, 2, 9]  # writable parts: united, not kept
    assert len(engine._unions) == len(kept)


def _regional_cosmics(a, b):
    """L.A.Cosmic (one iteration: a halo of 8) feeding a repair (a halo of 3) through an unstored
    coverage; the repaired image has NaN and inf cells."""
    from subzero.workflows.astronomy import cosmic_rays_udf

    crmask = sz.apply(cosmic_rays_udf(), a, name="crmask")
    cover = sz.name(2.0 - crmask, "cover")
    return {"clean": sz.apply(ops.RepairCosmics(2.0), b * 1.5, cover, name="clean")}


def test_a_black_box_step_reruns_a_regional_operators_frontier_box_as_its_tiles_give(tmp_path, monkeypatch):
    """Backward, a black-box step through a one-pass halo operator re-runs the frontier's bounding
    box (the boxes of several tiles' parts together), its unstored inputs read over that box and its
    halos, not over whole tiles: for random frontiers (tile corners, array edges and corners, NaN and
    inf cells) it answers the cells the run's stored lineage and the whole tiles' re-run give."""
    import subzero.query as query_mod
    from subzero.worker import RECOMPUTED_REGIONS, RECOMPUTED_TILES

    rng = np.random.default_rng(5)
    shape = (48, 48)
    a = rng.normal(100.0, 5.0, shape)
    a[rng.integers(0, 48, 12), rng.integers(0, 48, 12)] += 400.0  # cosmic rays
    b = rng.normal(0.0, 1.0, shape)
    b[rng.integers(0, 48, 14), rng.integers(0, 48, 14)] += 60.0  # residual ones the repair flags
    b[0, 5], b[17, 23], b[47, 47], b[12, 0] = np.nan, np.inf, -np.inf, np.nan
    f = sz.workflow(_regional_cosmics, name="regional")
    with np.errstate(all="ignore"):
        run = f.run({"a": a, "b": b}, store=tmp_path / "s", executor="local", tile_shape=16,
                    strategies={"clean": ["FullOne"]}).wait()
    assert not run.catalog.node("cover").array.stored and not run.catalog.node("crmask").array.stored
    corners = [(0, 0), (0, 47), (47, 0), (47, 47), (15, 15), (16, 16), (31, 32), (32, 31), (17, 23), (0, 5)]
    queries = [[c] for c in corners] + [[(int(rng.integers(0, 48)), int(rng.integers(0, 48)))] for _ in range(6)]
    for _ in range(6):  # clusters of a few cells, some across tiles' seams
        r, c = int(rng.integers(0, 46)), int(rng.integers(0, 46))
        queries.append([(r + dr, c + dc) for dr in range(3) for dc in range(3) if rng.random() < 0.7] or [(r, c)])
    queries.append([(0, 0), (47, 47)])  # far apart: the two tiles' parts, not their hull
    ran: list = []
    real = query_mod.QueryEngine._tile
    monkeypatch.setattr(query_mod.QueryEngine, "_tile", lambda self, node, t: ran.append(t) or real(self, node, t))
    inputs = ["a", "b"]
    for cells in queries:
        RECOMPUTED_TILES.clear()
        RECOMPUTED_REGIONS.clear()
        fresh = sz.open_run(tmp_path / "s")
        got = fresh.backward_many("clean", cells, to=inputs, using={"clean": "BlackBox"}, as_="frontier")
        assert not RECOMPUTED_TILES._items, (cells, [(k, v.shape) for k, v in RECOMPUTED_TILES._items.items()], {a._key: n for n, a in fresh.lineage._recomputed.items()})  # no whole tile of an unstored array was computed
        stored = fresh.backward_many("clean", cells, to=inputs, as_="frontier")
        for name in inputs:
            np.testing.assert_array_equal(got[name].ids(), stored[name].ids(), err_msg=f"{cells} -> {name}")
    assert ran and all(isinstance(t, tuple) for t in ran)  # every re-run was a region
    assert any(len(t) == 2 and (t[0][1] - t[0][0]) * (t[1][1] - t[1][0]) > 1 for t in ran)
    monkeypatch.setattr(query_mod.QueryEngine, "regions", lambda self, node, split, frontier=None: split)  # whole tiles
    whole = sz.open_run(tmp_path / "s")
    for cells in queries[::3]:
        got = sz.open_run(tmp_path / "s").backward_many("clean", cells, to=inputs, using={"clean": "BlackBox"},
                                                         as_="frontier")
        want = whole.backward_many("clean", cells, to=inputs, using={"clean": "BlackBox"}, as_="frontier")
        for name in inputs:
            np.testing.assert_array_equal(got[name].ids(), want[name].ids(), err_msg=f"{cells} -> {name}")


def test_a_black_box_step_forward_reruns_the_box_a_regional_operators_frontier_reaches(tmp_path, monkeypatch):
    """Forward, a black-box step through a one-pass halo operator re-runs only the output cells
    within its halo of the frontier's bounding box: the cells the stored lineage gives, from cells
    at tile corners, array edges and NaN/inf cells, and from small brushes."""
    import subzero.query as query_mod

    rng = np.random.default_rng(9)
    shape = (48, 48)
    a = rng.normal(100.0, 5.0, shape)
    b = rng.normal(0.0, 1.0, shape)
    b[rng.integers(0, 48, 14), rng.integers(0, 48, 14)] += 60.0
    b[0, 5], b[17, 23], b[47, 47] = np.nan, np.inf, -np.inf
    f = sz.workflow(_regional_cosmics, name="regional")
    with np.errstate(all="ignore"):
        f.run({"a": a, "b": b}, store=tmp_path / "s", executor="local", tile_shape=16,
              strategies={"clean": ["FullOne"]}).wait()
    starts = [[(0, 0)], [(47, 47)], [(15, 16)], [(16, 15)], [(17, 23)], [(0, 5)], [(31, 32), (32, 31)]]
    starts += [[(int(rng.integers(0, 48)), int(rng.integers(0, 48)))] for _ in range(5)]
    ran: list = []
    real = query_mod.QueryEngine._tile
    monkeypatch.setattr(query_mod.QueryEngine, "_tile", lambda self, node, t: ran.append(t) or real(self, node, t))
    for cells in starts:
        run = sz.open_run(tmp_path / "s")
        got = run.forward("multiply", cells, to="clean", using={"clean": "BlackBox"}, as_="frontier")
        want = run.forward("multiply", cells, to="clean", as_="frontier")
        np.testing.assert_array_equal(got.ids(), want.ids(), err_msg=f"{cells}")
        assert got.count
        got = run.forward("cover", cells, to="clean", using={"clean": "BlackBox"}, as_="frontier")  # unstored
        np.testing.assert_array_equal(got.ids(), run.forward("cover", cells, to="clean", as_="frontier").ids())
    assert ran and all(isinstance(t, tuple) for t in ran)

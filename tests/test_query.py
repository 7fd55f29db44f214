"""One query step: stored lookups, mapping, re-execution, the switch to re-execution."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

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

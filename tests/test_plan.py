"""From profiles and a workload to SubZero's integer program: the shape of the paper's Fig. 7."""

from __future__ import annotations

import pytest


import subzero as sz
from subzero import operators as ops
from subzero.optimizer.cost_model import NodeProfile, StrategyProfile
from subzero.catalog import ArrayRecord
from subzero.modes import Direction, Strategy
from subzero.optimizer.plan import build_problem, node_choice, optimize, pending_nodes
from subzero.optimizer.workload import parse_workload


def udf_profile(name: str, payload: bool = True) -> NodeProfile:
    """A UDF with fan 20; ``payload`` False for one that only writes region pairs (FULL), whose
    backward-keyed lineage answers forward queries by scanning (payload lineage has an envelope
    index for them)."""
    strategies = {
        "FullOne/backward": StrategyProfile(bytes=8e6, encode_seconds=1.0, pairs=2e5, out_cells=2e5, in_cells=4e6, keys=4e5),
        "FullOne/forward": StrategyProfile(bytes=3e7, encode_seconds=1.5, pairs=2e5, out_cells=2e5, in_cells=4e6, keys=4.2e6),
        "FullMany/backward": StrategyProfile(bytes=6e6, encode_seconds=1.2, pairs=2e5, out_cells=2e5, in_cells=4e6, keys=2e5),
    }
    if payload:
        strategies["PayOne/backward"] = StrategyProfile(bytes=2e6, encode_seconds=0.3, pairs=2e5, out_cells=2e5, keys=2e5)
    return NodeProfile(name, tiles=8, op_seconds=4.0, trace_seconds=2.0, out_size=2 * 10**5, in_sizes=[2 * 10**5],
                       fan_backward=20.0, fan_forward=20.0, strategies=strategies)


def workflow():
    wf = sz.Workflow("g")
    x = wf.input("x")
    e = wf.add(ops.CosmicRayDetect(), x, name="e")
    f = wf.add(ops.CosmicRayDetect(), e, name="f")
    wf.add(ops.Transpose(), f, name="t")
    return wf


PROFILES = {"e": udf_profile("e", payload=False), "f": udf_profile("f"),
            "t": NodeProfile("t", mapping=True, out_size=2 * 10**5, in_sizes=[2 * 10**5])}
WORKLOAD = [{"direction": "backward", "node": "t", "to": "x", "cells": [[0, 0]]},
            {"direction": "forward", "node": "x", "to": "t", "cells": [[1, 1]]}]


def test_disk_budget_sweep_has_the_shape_of_fig_7():
    wf = workflow()
    queries = parse_workload(wf, WORKLOAD)
    rows = []
    for budget in [1e3, 3e6, 1e7, 4e7, 1e8, None]:
        plan, _ = optimize(wf, PROFILES, queries, budget, None, {})
        rows.append((budget, plan))
        assert plan.solve_seconds > 0
        assert budget is None or plan.disk <= budget
    tiny = rows[0][1]
    assert tiny.names()["e"] == ("BlackBox",) and tiny.names()["f"] == ("BlackBox",)
    assert rows[-1][1].names()["t"] == ("Map",)
    objectives = [plan.objective for _, plan in rows]
    assert all(b <= a + 1e-12 for a, b in zip(objectives, objectives[1:]))  # never worse as the budget grows
    assert objectives[-1] < objectives[0] / 2
    unbounded = rows[-1][1].names()["e"]
    assert any(s.endswith("/forward") for s in unbounded) and any(s.endswith("/backward") for s in unbounded)


def test_problem_weights_come_from_the_workload():
    wf = workflow()
    problem, entering = build_problem(wf, PROFILES, parse_workload(wf, WORKLOAD), None, None, {})
    assert problem.weight("e", "backward") == 1 and problem.weight("f", "forward") == 1
    assert entering[("e", "backward")] == 20.0  # one cell through f (fan 20) reaches e
    assert {c.strategy.name for c in problem.candidates if c.node == "t"} == {"Map", "BlackBox"}


def test_the_pending_plan_holds_the_pins_or_the_plans_choice_with_its_reasons():
    wf = workflow()
    queries = parse_workload(wf, WORKLOAD)
    pinned = {"e": ("FullOne/backward",)}
    plan, problem = optimize(wf, PROFILES, queries, None, None, pinned)
    measured = {n: {"wall": 1.0} for n in ("e", "f", "t")}
    arrays = {n: ArrayRecord((4, 4), "float64", (2, 4)) for n in measured}
    pending = pending_nodes(plan, problem, pinned, PROFILES, measured, arrays)
    assert pending["e"].strategies == (Strategy.parse("FullOne/backward"),)
    assert pending["e"].extra["reason"] == "pinned"
    for node in ("f", "t"):
        assert pending[node].strategies == plan.chosen[node]
        assert pending[node].extra["reason"] == plan.reasons[node]
    assert all(isinstance(s, Strategy) for s in plan.chosen["f"]) and problem.queried("t") == [Direction.BACKWARD, Direction.FORWARD]
    predicted = pending["f"].extra["predicted"]
    assert set(predicted) == {c.strategy.name for c in problem.candidates if c.node == "f"}
    assert all(set(p["query"]) <= {"backward", "forward"} for p in predicted.values())
    assert pending["t"].extra["profile"] == PROFILES["t"].to_dict() and pending["t"].array == arrays["t"]


def test_one_node_at_a_time_plans_that_node_alike_and_charges_no_rerun_in_one_pass():
    """A one-pass run solves per node (`optimize(..., nodes=...)`): only that node's candidates
    and access, the same choice as the whole program for it when budgets do not bind (the
    objective splits per node), enumerated instead of solved; its runtime has no re-run."""
    from dataclasses import replace

    wf = workflow()
    queries = parse_workload(wf, WORKLOAD)
    whole, _ = optimize(wf, PROFILES, queries, None, None, {})
    for node in ("e", "f", "t"):
        plan, problem = optimize(wf, PROFILES, queries, None, None, {"t": ["Map"]}, nodes={node})
        assert {c.node for c in problem.candidates} == {node} and {k[0] for k in problem.access} <= {node}
        assert plan.names()[node] == whole.names()[node]
    two_pass, _ = build_problem(wf, PROFILES, queries, None, None, {}, nodes={"f"})
    one = {**PROFILES, "f": replace(PROFILES["f"], one_pass=True)}
    one_pass, _ = build_problem(wf, one, queries, None, None, {}, nodes={"f"})
    rerun = {c.strategy: c.runtime for c in two_pass.candidates}
    for c in one_pass.candidates:
        if c.strategy.stored:
            assert c.runtime == pytest.approx(rerun[c.strategy] - PROFILES["f"].op_seconds)
    chosen, extra = node_choice(whole, two_pass, {}, PROFILES["f"], "f")
    assert chosen == whole.chosen["f"] and extra["profile"] == PROFILES["f"].to_dict()
    assert set(extra["predicted"]) == {c.strategy.name for c in two_pass.candidates}


def test_a_mapping_with_a_box_or_mask_form_is_priced_as_taking_the_frontier_whole():
    from subzero.optimizer.plan import maps_whole

    for direction in Direction:
        assert maps_whole(ops.Convolve([[1.0, 1.0]]), direction)  # a stencil maps boxes
        assert maps_whole(ops.RepairCosmics(sigma=1.0), direction)  # a composite's window default too
        assert not maps_whole(ops.Histogram(bins=4), direction)  # no box or mask form


def test_counted_candidates_matter_only_when_the_program_would_choose_one_at_their_lowest_costs():
    """`bounds_matter`: a candidate held at its lowest possible costs (``bounds``) must be encoded
    when the program over the node would choose it at those; when it does not, the plan over the
    measured candidates alone is the plan with it encoded at any costs no lower."""
    from dataclasses import replace

    from subzero.optimizer.plan import BOUND_REASON, bounds_matter

    wf = workflow()
    queries = parse_workload(wf, WORKLOAD)
    full = udf_profile("f")
    measured = {k: v for k, v in full.strategies.items() if k != "PayOne/backward"}
    pay = full.strategies["PayOne/backward"]
    for least, matters in ((replace(pay, bytes=0.0, keys=0.0), True), (replace(pay, encode_seconds=1e3), False)):
        counted = replace(full, strategies=measured, bounds={"PayOne/backward": least})
        profiles = {**PROFILES, "f": counted}
        assert bounds_matter(wf, profiles, queries, None, None, {}, "f") is matters
        if not matters:  # any true costs no lower than the bound: the same plan as over the measured ones
            plan, problem = optimize(wf, profiles, queries, None, None, {}, {"f"})
            for extra in (0.0, 1e6):
                real = replace(least, bytes=least.bytes + extra)
                encoded, _ = optimize(wf, {**PROFILES, "f": replace(full, strategies={**measured, "PayOne/backward": real})},
                                      queries, None, None, {}, {"f"})
                assert encoded.names()["f"] == plan.names()["f"] and encoded.objective == pytest.approx(plan.objective)
            assert node_choice(plan, problem, {}, counted, "f")[1]["pruned"]["PayOne/backward"] == BOUND_REASON
    assert not bounds_matter(wf, PROFILES, queries, None, None, {}, "f")  # nothing counted: nothing to encode
    pinned = replace(full, strategies=measured, bounds={"PayOne/backward": replace(pay, bytes=0.0, keys=0.0)})
    # a node pinned to other strategies stores its pins only: the counted candidate never matters
    assert not bounds_matter(wf, {**PROFILES, "f": pinned}, queries, None, None, {"f": ["FullOne/backward"]}, "f")

"""Tests of the strategy optimizer's integer program (SubZero section VII)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from subzero.errors import WorkflowError
from subzero.modes import Strategy

S = Strategy.parse
from subzero.optimizer.ilp import (
    FALLBACK_REASON,
    ArrayChoice,
    Candidate,
    Problem,
    brute_force,
    objective_of,
    optimal,
    solve,
)
from subzero.optimizer import ilp

BOTH = ("backward", "forward")
STRATEGIES = (
    "Map",
    "BlackBox",
    "FullOne/backward",
    "FullOne/forward",
    "FullMany/backward",
    "FullMany/forward",
    "PayOne/backward",
    "CompMany/backward",
)
BLACKBOX_ONLY = "only BlackBox fits the budget"


def cand(node, strategy, disk=0.0, runtime=0.0, backward=50.0, forward=50.0):
    costs = {"backward": backward, "forward": forward}
    return Candidate(node, strategy, disk, runtime, costs, mapping=strategy == "Map")


def udf(node, scale=1.0):
    """A UDF node shaped like the genomics benchmark: stored lineage is fast
    when its index matches the query direction, slower than re-running otherwise."""
    return [
        cand(node, "FullOne/backward", 3e6 * scale, 2.0, backward=1.0, forward=400.0),
        cand(node, "FullOne/forward", 4e6 * scale, 3.0, backward=400.0, forward=0.5),
        cand(node, "PayOne/backward", 1e6 * scale, 0.5, backward=4.0, forward=200.0),
        cand(node, "BlackBox", backward=200.0, forward=200.0),
    ]


def everywhere(nodes, weight=1.0):
    return {(n, d): weight for n in nodes for d in BOTH}


# -- property: the ILP agrees with enumeration ----------------------------------


def rounded(low, high):
    return st.floats(low, high).map(lambda v: round(v, 3))


@st.composite
def problems(draw):
    candidates, access = [], {}
    for i in range(draw(st.integers(2, 4))):
        node = f"n{i}"
        names = draw(st.lists(st.sampled_from(STRATEGIES), min_size=1, max_size=4, unique=True))
        for strategy in names:
            free = strategy in ("Map", "BlackBox")
            disk = 0.0 if free else draw(rounded(0, 1000))
            runtime = 0.0 if free else draw(rounded(0, 10))
            backward, forward = draw(rounded(0, 100)), draw(rounded(0, 100))
            candidates.append(cand(node, strategy, disk, runtime, backward, forward))
        for direction in BOTH:
            access[(node, direction)] = draw(st.sampled_from([0.0, 0.0, 0.5, 1.0, 3.0]))

    def budget(largest):  # None, nothing but BlackBox/Map, or (mostly) binding across nodes
        share = draw(st.sampled_from([None, 0.0, 0.5, 1.0, 1.0, 1.5, 2.0]))
        return None if share is None else round(share * largest, 3)

    arrays = []
    for k in range(draw(st.sampled_from([0, 0, 1, 2, 3]))):  # unstored arrays, each reading earlier ones
        inputs = draw(st.lists(st.sampled_from([f"a{j}" for j in range(k)] or ["a0"]), max_size=2, unique=True))
        arrays.append(ArrayChoice(f"a{k}", disk=draw(rounded(0, 1000)), runtime=draw(rounded(0, 1)),
                                  seconds=draw(rounded(0, 100)), inputs=tuple(i for i in inputs if i != f"a{k}"),
                                  storable=draw(st.sampled_from([True, True, False]))))
    if arrays:  # the BlackBox candidates re-read some of them
        names = [a.node for a in arrays]
        candidates = [c if c.strategy != S("BlackBox") else Candidate(
            c.node, c.strategy, c.disk, c.runtime, c.query_cost,
            reads=tuple(draw(st.lists(st.sampled_from(names), max_size=2, unique=True))),
            reread={"backward": draw(st.sampled_from([1.0, 0.25])), "forward": 1.0}) for c in candidates]
    pinned = {}
    if draw(st.booleans()):
        pin = draw(st.sampled_from(candidates))
        pinned[pin.node] = (pin.strategy,)
    return Problem(
        tuple(candidates),
        access,
        arrays=tuple(arrays),
        max_disk=budget(max(c.disk for c in [*candidates, *arrays])),
        max_runtime=budget(max(c.runtime for c in candidates)),
        epsilon=draw(st.sampled_from([1e-6, 1e-3, 0.05])),
        beta=draw(st.sampled_from([1.0, 100.0])),
        pinned=pinned,
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_solve_matches_brute_force(problem):
    try:
        expected = brute_force(problem)
    except WorkflowError as error:  # the pins alone break a budget
        assert "pinned" in str(error)
        with pytest.raises(WorkflowError, match="pinned"):
            solve(problem)
        return
    plan = solve(problem)
    assert plan.status == expected.status == "optimal"
    assert plan.objective == pytest.approx(expected.objective, rel=1e-9, abs=1e-12)
    assert plan.objective == pytest.approx(objective_of(problem, plan.chosen, plan.stored), rel=1e-12)
    assert set(plan.stored) <= {a.node for a in problem.arrays if a.storable}
    if problem.max_disk is not None:
        assert plan.disk <= problem.max_disk * (1 + 1e-9)
    if problem.max_runtime is not None:
        assert plan.runtime <= problem.max_runtime * (1 + 1e-9)
    for node, strategies in problem.pinned.items():
        assert set(strategies) <= set(plan.chosen[node])
    assert set(plan.chosen) == set(plan.reasons) == {c.node for c in problem.candidates}
    assert all(chosen == tuple(sorted(chosen)) for chosen in plan.names().values())
    assert not {(n, s) for n, chosen in plan.chosen.items() for s in chosen} & set(plan.pruned)


def test_optimal_enumerates_few_choices_and_solves_the_program_for_many(monkeypatch):
    """One node's few surviving candidates are enumerated (no CBC process), many go to CBC;
    both give the integer program's objective."""
    few = Problem(tuple(Candidate("a", s, disk=10.0 * k, runtime=0.1 * k, query_cost={"backward": 5.0 / (k + 1)})
                        for k, s in enumerate(("FullOne/backward", "FullMany/backward", "CompOne/backward"))),
                  {("a", "backward"): 1.0}, max_disk=15.0)
    many = Problem(tuple(Candidate(n, s, disk=10.0 * k, runtime=0.1 * k, query_cost={"backward": 5.0 / (k + 1)})
                         for n in "abc" for k, s in enumerate(("FullOne/backward", "FullMany/backward"))),
                   {(n, "backward"): 1.0 for n in "abc"}, max_disk=25.0)
    expected = {id(p): solve(p).objective for p in (few, many)}
    called = []
    real = ilp._solve_ilp
    monkeypatch.setattr(ilp, "_solve_ilp", lambda *a: called.append(1) or real(*a))
    assert optimal(few).objective == pytest.approx(expected[id(few)]) and not called
    assert optimal(many).objective == pytest.approx(expected[id(many)]) and called  # 7**3 choices


# -- explicit cases ---------------------------------------------------------------


def test_objective_of_hand_computed():
    problem = Problem(
        (
            cand("a", "FullOne/backward", 100, 2, backward=1, forward=9),
            cand("a", "BlackBox", backward=7, forward=3),
        ),
        {("a", "backward"): 2.0, ("a", "forward"): 1.0},
        epsilon=0.01,
        beta=10.0,
    )
    # backward served by FullOne (2 * 1), forward by BlackBox (1 * 3), penalty 0.01 * (100 + 10 * 2)
    assert objective_of(problem, {"a": ["FullOne/backward", "BlackBox"]}) == pytest.approx(6.2)
    assert objective_of(problem, {"a": ["BlackBox"]}) == pytest.approx(17.0)
    with pytest.raises(WorkflowError, match="non-empty subset"):
        objective_of(problem, {"a": []})


def test_mapping_preferred():
    candidates = (
        cand("m", "Map", backward=2.0),
        cand("m", "FullOne/backward", 10, 1, backward=1.0),
        cand("m", "BlackBox"),
    )
    plan = solve(Problem(candidates, {("m", "backward"): 1.0}))
    assert plan.names() == {"m": ("Map",)}
    assert plan.reasons["m"] == "mapping"
    assert "mapping" in plan.pruned[("m", S("FullOne/backward"))]
    assert plan.disk == plan.runtime == 0.0


def test_budget_too_small_gives_blackbox():
    problem = Problem(tuple(udf("u1") + udf("u2")), everywhere(("u1", "u2")), max_disk=0.5e6)
    plan = solve(problem)
    assert plan.status == "optimal"
    assert plan.names() == {"u1": ("BlackBox",), "u2": ("BlackBox",)}
    assert plan.reasons == {"u1": BLACKBOX_ONLY, "u2": BLACKBOX_ONLY}
    assert "exceeds max_disk" in plan.pruned[("u1", S("PayOne/backward"))]


def test_budget_binding_between_nodes():
    nodes = ("a", "b")
    candidates = [
        c
        for n in nodes
        for c in (
            cand(n, "FullOne/backward", 100, backward=1),
            cand(n, "PayOne/backward", 40, backward=5),
            cand(n, "BlackBox", backward=50),
        )
    ]
    plan = solve(Problem(tuple(candidates), {(n, "backward"): 1.0 for n in nodes}, max_disk=150))
    assert sorted(plan.names().values()) == [("FullOne/backward",), ("PayOne/backward",)]
    assert sorted(plan.reasons.values()) == ["budget binding", "cheapest expected query cost"]
    assert plan.disk == 140


def test_both_directions_when_workload_and_budget_allow():
    plan = solve(Problem(tuple(udf("u")), everywhere("u")))
    assert plan.names() == {"u": ("FullOne/backward", "FullOne/forward")}
    assert plan.reasons["u"] == "cheapest expected query cost"
    tight = solve(Problem(tuple(udf("u")), everywhere("u"), max_disk=4.5e6))  # one FullOne fits
    assert tight.names() == {"u": ("BlackBox", "FullOne/backward")}  # BlackBox serves forward
    assert tight.reasons["u"] == "budget binding"


def test_unused_strategies_are_not_chosen():
    # A zero-cost BlackBox that serves no query must not ride along with FullOne.
    candidates = (cand("u", "FullOne/backward", 1, backward=1.0), cand("u", "BlackBox"))
    plan = solve(Problem(candidates, {("u", "backward"): 1.0}))
    assert plan.names() == {"u": ("FullOne/backward",)}


def test_pinned_over_budget_raises():
    problem = Problem(
        tuple(udf("u1") + udf("u2")),
        {("u1", "backward"): 1.0},
        max_disk=5e6,
        pinned={"u1": ("FullOne/forward",), "u2": ("FullOne/backward",)},
    )
    with pytest.raises(WorkflowError) as info:
        solve(problem)
    message = str(info.value)
    assert "'u1'" in message and "'u2'" in message
    assert "max_disk=5e+06" in message and "7e+06" in message


def test_pins_are_kept_even_if_pruning_would_drop_them():
    problem = Problem(
        tuple(udf("u")) + (cand("idle", "FullOne/backward", 10),),
        {("u", "backward"): 1.0},
        pinned={"u": "FullOne/forward", "idle": ("FullOne/backward",)},
    )
    plan = solve(problem)
    assert plan.names() == {
        "u": ("FullOne/backward", "FullOne/forward"),
        "idle": ("FullOne/backward",),
    }
    assert plan.reasons == {"u": "pinned", "idle": "pinned"}
    assert ("u", "FullOne/forward") not in plan.pruned


def test_pruning_reasons():
    extra = (
        cand("idle", "PayOne/backward", 10),
        cand("idle", "Map"),
        cand("quiet", "PayOne/backward", 10),
    )
    plan = solve(Problem(tuple(udf("u")) + extra, {("u", "backward"): 1.0}, max_runtime=1.0))
    assert "forward-optimized" in plan.pruned[("u", S("FullOne/forward"))]
    assert "exceeds max_runtime" in plan.pruned[("u", S("FullOne/backward"))]
    assert "mapping" in plan.pruned[("idle", S("PayOne/backward"))]
    assert "not queried" in plan.pruned[("quiet", S("PayOne/backward"))]
    assert plan.names() == {"u": ("PayOne/backward",), "idle": ("Map",), "quiet": ("BlackBox",)}
    assert plan.reasons == {
        "u": "budget binding",
        "idle": "mapping",
        "quiet": "not queried by the workload",
    }


def test_epsilon_penalty_reason():
    candidates = (cand("u", "FullOne/backward", 1e6, backward=1.0), cand("u", "BlackBox"))
    plan = solve(Problem(candidates, {("u", "backward"): 1.0}, epsilon=1.0))
    assert plan.names() == {"u": ("BlackBox",)}
    assert "epsilon" in plan.reasons["u"]


def test_fallback_when_nothing_fits():
    # A caller-given BlackBox that costs disk: alone it is pruned ...
    alone = Problem(
        (cand("u", "BlackBox", disk=10), cand("u", "PayOne/backward", 20)),
        {("u", "backward"): 1.0},
        max_disk=5,
    )
    # ... and here each fits alone but not together, so CBC itself reports infeasible.
    together = Problem((cand("u", "BlackBox", 3), cand("v", "BlackBox", 3)), {}, max_disk=5)
    for plan in (solve(alone), brute_force(alone), solve(together), brute_force(together)):
        assert plan.status == "fallback"
        assert set(plan.names().values()) == {("BlackBox",)}
        assert set(plan.reasons.values()) == {FALLBACK_REASON}


def test_growing_disk_budget_never_hurts():
    """The shape of the paper's Fig. 7: BlackBox when storage is tight, both
    directions when it is loose, and never worse with more storage."""
    nodes = [f"u{i}" for i in range(4)]
    candidates = tuple(c for i, n in enumerate(nodes) for c in udf(n, scale=1 + i / 10))
    budgets_mb = (0.5, 1, 3, 5, 10, 20, 40)
    plans = [solve(Problem(candidates, everywhere(nodes), max_disk=mb * 1e6)) for mb in budgets_mb]
    objectives = [p.objective for p in plans]
    assert objectives == sorted(objectives, reverse=True)
    assert objectives[0] > objectives[-1]
    assert all(plans[0].names()[n] == ("BlackBox",) for n in nodes)
    assert all(plans[-1].names()[n] == ("FullOne/backward", "FullOne/forward") for n in nodes)
    assert all(p.solve_seconds > 0 for p in plans)


def test_auto_blackbox_takes_worst_query_cost():
    candidates = (
        cand("u", "FullOne/backward", 5, backward=2, forward=30),
        cand("u", "PayOne/backward", 1, backward=4, forward=10),
    )
    [blackbox] = [c for c in Problem(candidates, {}).candidates if c.strategy.name == "BlackBox"]
    assert (blackbox.disk, blackbox.runtime) == (0.0, 0.0)
    assert dict(blackbox.query_cost) == {"backward": 4, "forward": 30}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"access": {("ghost", "backward"): 1.0}}, "ghost"),
        ({"access": {("u", "sideways"): 1.0}}, "sideways"),
        ({"access": {("u", "backward"): -1.0}}, "finite number >= 0"),
        ({"pinned": {"u": ("FullMany/backward",)}}, "FullMany/backward"),
        ({"max_disk": float("nan")}, "max_disk"),
    ],
)
def test_problem_validation(kwargs, match):
    kwargs = {"access": {}, **kwargs}
    with pytest.raises(WorkflowError, match=match):
        Problem((cand("u", "FullOne/backward", 5),), **kwargs)


def test_candidate_validation():
    with pytest.raises(WorkflowError, match="disk"):
        Candidate("u", "FullOne/backward", -1, 0, {"backward": 1})
    backward_only = Candidate("u", "FullOne/backward", 1, 0, {"backward": 1})
    with pytest.raises(WorkflowError, match="lack a forward query cost"):
        Problem((backward_only,), {("u", "forward"): 1.0})
    with pytest.raises(WorkflowError, match="duplicate"):
        Problem((cand("u", "BlackBox"), cand("u", "BlackBox")), {})


# -- storing an intermediate array or recomputing it ---------------------------------


def _reread_problem(max_disk):
    """A whole-array node ``g`` whose queries re-run it (BlackBox) over an unstored mask (1 MB),
    computed from an unstored scalar threshold (8 bytes), computed by a long chain (2 s) that
    can no longer be stored: store the mask, or the threshold, or recompute everything."""
    arrays = (ArrayChoice("mask", disk=1e6, runtime=0.005, seconds=0.003, inputs=("t",)),
              ArrayChoice("t", disk=8, runtime=0.0, seconds=0.001, inputs=("chain",)),
              ArrayChoice("chain", disk=8e6, runtime=0.04, seconds=2.0, storable=False))
    candidates = (Candidate("g", "BlackBox", 0, 0, {"backward": 0.1}, reads=("mask",)),)
    return Problem(candidates, {("g", "backward"): 1.0}, max_disk=max_disk, arrays=arrays, epsilon=1e-9)


@pytest.mark.parametrize("max_disk, stored, query", [
    (None, ("mask",), 0.1),          # storing the mask makes a step cost only its own re-run
    (1e7, ("mask",), 0.1),
    (100, ("t",), 0.1 + 0.003),      # the mask does not fit; the threshold cuts the 2 s chain
    (0, (), 0.1 + 0.003 + 0.001 + 2.0),  # nothing fits: the step recomputes all three
])
def test_the_program_stores_or_recomputes_an_array_as_the_disk_budget_tightens(max_disk, stored, query):
    problem = _reread_problem(max_disk)
    for plan in (solve(problem), brute_force(problem)):
        assert plan.stored == stored and plan.status == "optimal"
        disk = sum(problem.array(a).disk for a in stored)
        runtime = sum(problem.array(a).runtime for a in stored)
        assert plan.disk == disk and plan.runtime == runtime
        assert plan.objective == pytest.approx(query + 1e-9 * (disk + runtime))
        assert problem.reread_cost(problem.candidates[0], problem.queried("g")[0], stored) == \
            pytest.approx(query - 0.1)
        for name in ("mask", "t"):  # every storable array says why
            assert plan.array_reasons[name].startswith("stored" if name in stored else "not stored")
        assert "chain" not in plan.array_reasons
    if max_disk == 0:
        assert "do not fit in the disk budget" in plan.array_reasons["mask"]


def test_arrays_are_checked():
    with pytest.raises(WorkflowError, match="not in arrays"):
        Problem((Candidate("g", "BlackBox", 0, 0, {"backward": 1.0}, reads=("m",)),), {("g", "backward"): 1.0})
    with pytest.raises(WorkflowError, match="seconds of array 'm'"):
        ArrayChoice("m", disk=1.0, runtime=0.0, seconds=-1.0)
    with pytest.raises(WorkflowError, match="duplicate arrays"):
        Problem((cand("g", "BlackBox"),), {}, arrays=(ArrayChoice("m", 1, 0, 1), ArrayChoice("m", 1, 0, 1)))

"""From profiles, a workload and budgets to the integer program and back to a plan."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Collection, Mapping, Sequence

from subzero.catalog import ArrayRecord, PendingNode
from subzero.dag import Workflow
from subzero.errors import WorkflowError
from subzero.modes import Direction, Mode, Strategy
from subzero.optimizer.cost_model import NodeProfile, disk_cost, runtime_cost, step_cost, touched_share
from subzero.optimizer.ilp import BLACKBOX, ArrayChoice, Candidate, Plan, Problem, optimal
from subzero.optimizer.storage import recomputed
from subzero.optimizer.workload import Query, step_sizes

__all__ = ["build_problem", "optimize", "bounds_matter", "pending_nodes", "node_choice", "maps_whole", "EPSILON",
           "BETA", "BOUND_REASON"]

EPSILON = 1e-9   # seconds of expected query time per byte: a tie-breaker (1 MB ~ 1 ms)
BETA = 1e6       # bytes per second of runtime overhead in the tie-breaker
MAP = Strategy.parse("Map")
#: why a candidate counted but not encoded by calibration is not in the plan (`bounds_matter`)
BOUND_REASON = "not chosen by the integer program even at its lowest possible costs: not calibrated"

Pins = Mapping[str, Sequence[str | Strategy]]


def build_problem(wf: Workflow, profiles: dict[str, NodeProfile], queries: list[Query],
                  max_disk: float | None, max_runtime: float | None, pinned: Pins,
                  nodes: Collection[str] | None = None,
                  arrays: Mapping[str, ArrayChoice] | None = None) -> tuple[Problem, dict]:
    """The ILP instance: candidates with predicted costs, workload access weights, budgets.

    ``nodes`` limits the instance to those nodes (a one-pass run plans one node at a time,
    with the fans of the nodes profiled so far); every node by default.  ``arrays``: the run's
    unstored arrays (`subzero.optimizer.storage.array_choices`): a BlackBox candidate re-reads
    a node's inputs among them (`Candidate.reads`, the share its touched tiles read), and the
    program chooses which to store."""
    def fan(node: str, direction: Direction, cells: float) -> float:
        return profiles[node].fan(direction, cells) if node in profiles else cells

    access, entering = step_sizes(wf, queries, fan)
    arrays = arrays or {}
    candidates, reads = [], set[str]()
    for node in wf.nodes:
        if node.is_input or (nodes is not None and node.name not in nodes):
            continue
        profile = profiles[node.name]
        strategies = [BLACKBOX] + ([MAP] if profile.mapping else []) + [Strategy.parse(n) for n in profile.strategies]
        if pinned.get(node.name):  # a pinned node stores its pins only (`node_choice`): the plan prices those
            pins_of = {Strategy.parse(p) for p in pinned[node.name]}
            strategies = [s for s in strategies if s in pins_of or s == BLACKBOX]
        unstored = tuple(dict.fromkeys(i.name for i in node.inputs if i.name in arrays))
        reads.update(unstored)
        whole = {d: maps_whole(node.operator, d) for d in Direction}
        for s in strategies:
            costs = {d: step_cost(profile, s, d, entering.get((node.name, d), 1.0), whole=whole[d]) for d in Direction}
            rerun = s == BLACKBOX and not profile.all_to_all
            share = {d: touched_share(profile, entering.get((node.name, d), 1.0)) for d in Direction}
            candidates.append(Candidate(node.name, s, disk=disk_cost(profile, s), runtime=runtime_cost(profile, s),
                                        query_cost=costs, mapping=s.mode is Mode.MAP,
                                        reads=unstored if rerun else (), reread=share if rerun else {}))
    pins = {n: tuple(Strategy.parse(s) for s in ss) for n, ss in pinned.items() if nodes is None or n in nodes}
    if nodes is not None:
        access = {k: w for k, w in access.items() if k[0] in nodes}
    problem = Problem(tuple(candidates), access, max_disk=max_disk, max_runtime=max_runtime,
                      epsilon=EPSILON, beta=BETA, pinned=pins,
                      arrays=tuple(arrays[a] for a in recomputed(arrays, sorted(reads))))
    return problem, entering


def maps_whole(op: Any, direction: Direction) -> bool:
    """Whether a step through ``op``'s mapping functions (a Map step, a composite's default) is
    priced as taking the frontier whole: the operator has a box or mask form in ``direction``.
    The workload's regions are compact and a frontier grown by earlier steps is held as boxes or
    a mask, which such a form maps in one pass (`subzero.query.maps_whole` decides it for the
    frontier a query holds)."""
    from subzero.operator import Operator

    suffix = "b" if direction is Direction.BACKWARD else "f"
    return any(getattr(type(op), name, None) is not getattr(Operator, name)
               for name in (f"map_{suffix}_mask", f"map_{suffix}_boxes"))


def optimize(wf: Workflow, profiles: dict[str, NodeProfile], queries: list[Query],
             max_disk: float | None, max_runtime: float | None, pinned: Pins,
             nodes: Collection[str] | None = None,
             arrays: Mapping[str, ArrayChoice] | None = None) -> tuple[Plan, Problem]:
    """Solve SubZero's integer program for ``wf`` (or its ``nodes``, see `build_problem`), with
    the store-or-recompute choice of the unstored ``arrays`` its candidates read; returns the
    plan and the instance."""
    problem, _ = build_problem(wf, profiles, queries, max_disk, max_runtime, pinned, nodes, arrays)
    return optimal(problem), problem  # one node's few choices are enumerated: no CBC process to start


def bounds_matter(wf: Workflow, profiles: dict[str, NodeProfile], queries: list[Query],
                  max_disk: float | None, max_runtime: float | None, pinned: Pins, node: str,
                  arrays: Mapping[str, ArrayChoice] | None = None) -> bool:
    """Whether ``node``'s candidates calibration only counted (``profiles[node].bounds``, their
    lowest possible costs) must be encoded: True when the integer program over the node, with
    those candidates at their lowest costs beside the ones measured, chooses one of them (or
    finds no plan within the budgets).

    False is a proof that encoding them cannot change the plan: the program's optimum then uses
    measured candidates only, and their true costs (no lower) can make no plan holding one of
    them cheaper than that optimum, nor the optimum break a budget; so the node is planned over
    its measured candidates alone.
    """
    profile = profiles[node]
    if not profile.bounds:
        return False
    hopeful = {**profiles, node: replace(profile, strategies={**profile.strategies, **profile.bounds})}
    try:
        plan, _ = optimize(wf, hopeful, queries, max_disk, max_runtime, pinned, {node}, arrays)
    except WorkflowError:  # the pins alone break a budget: the caller plans without them; measure all
        return True
    return plan.status != "optimal" or any(s.name in profile.bounds for s in plan.chosen.get(node, ()))


def pending_nodes(plan: Plan, problem: Problem, pinned: Pins, profiles: dict[str, NodeProfile],
                  measured: dict[str, dict[str, Any]], arrays: Mapping[str, ArrayRecord]) -> dict[str, PendingNode]:
    """Per node of ``measured`` (phase 1's measurements), its share of the plan as the catalog keeps
    it until phase 2 commits the node: the pins or the plan's choice (BlackBox for a node the
    plan does not name), and the predictions and reasons behind it."""
    out = {}
    for node, seen in measured.items():
        chosen, extra = node_choice(plan, problem, pinned, profiles[node], node)
        out[node] = PendingNode(chosen, seen, arrays[node], extra | {"compute_seconds": seen["wall"]})
    return out


def node_choice(plan: Plan, problem: Problem, pinned: Pins, profile: NodeProfile,
                node: str) -> tuple[tuple[Strategy, ...], dict[str, Any]]:
    """The strategies ``node`` stores (its pins, or the plan's choice: BlackBox for a node the
    plan does not name) and the explanation its catalog record keeps (``extra``: reason,
    predicted costs per candidate, profile, pruned candidates: those calibration did not encode
    as well, `subzero.optimizer.calibrate.CaptureLimit`)."""
    chosen = tuple(Strategy.parse(s) for s in pinned.get(node, ())) or tuple(plan.chosen.get(node, (BLACKBOX,)))
    predicted = {c.strategy.name: {"disk": c.disk, "runtime": c.runtime,
                                   "query": {d.value: q for d, q in c.query_cost.items()}}
                 for c in problem.candidates if c.node == node}
    extra = {"reason": "pinned" if node in pinned else plan.reasons.get(node, ""), "predicted": predicted,
             "profile": profile.to_dict(),
             "pruned": {**profile.skipped, **dict.fromkeys(profile.bounds, BOUND_REASON),
                        **{s.name: why for (n, s), why in plan.pruned.items() if n == node}}}
    return chosen, extra

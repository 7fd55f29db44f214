"""From profiles, a workload and budgets to the integer program and back to a plan."""

from __future__ import annotations

from subzero.optimizer.cost_model import NodeProfile, disk_cost, runtime_cost, step_cost
from subzero.optimizer.ilp import Candidate, Plan, Problem, solve
from subzero.optimizer.workload import Query, step_sizes
from subzero.dag import Workflow

__all__ = ["build_problem", "optimize", "EPSILON", "BETA"]

EPSILON = 1e-9   # seconds of expected query time per byte: a tie-breaker (1 MB ~ 1 ms)
BETA = 1e6       # bytes per second of runtime overhead in the tie-breaker


def build_problem(wf: Workflow, profiles: dict[str, NodeProfile], queries: list[Query],
                  max_disk: float | None, max_runtime: float | None,
                  pinned: dict[str, tuple[str, ...]]) -> tuple[Problem, dict]:
    """The ILP instance: candidates with predicted costs, workload access weights, budgets."""
    def fan(node: str, direction: str, cells: float) -> float:
        return profiles[node].fan(direction, cells) if node in profiles else cells

    access, entering = step_sizes(wf, queries, fan)
    candidates = []
    for node in wf.nodes:
        if node.is_input:
            continue
        profile = profiles[node.name]
        names = ["BlackBox"] + (["Map"] if profile.mapping else []) + list(profile.strategies)
        for name in names:
            costs = {d: step_cost(profile, name, d, entering.get((node.name, d), 1.0))
                     for d in ("backward", "forward")}
            candidates.append(Candidate(node.name, name, disk=disk_cost(profile, name),
                                        runtime=runtime_cost(profile, name), query_cost=costs,
                                        mapping=name == "Map"))
    problem = Problem(tuple(candidates), access, max_disk=max_disk, max_runtime=max_runtime,
                      epsilon=EPSILON, beta=BETA, pinned=pinned)
    return problem, entering


def optimize(wf: Workflow, profiles: dict[str, NodeProfile], queries: list[Query],
             max_disk: float | None, max_runtime: float | None,
             pinned: dict[str, tuple[str, ...]]) -> tuple[Plan, Problem]:
    """Solve SubZero's integer program for ``wf``; returns the plan and the instance."""
    problem, _ = build_problem(wf, profiles, queries, max_disk, max_runtime, pinned)
    return solve(problem), problem

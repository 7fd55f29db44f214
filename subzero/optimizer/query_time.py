"""The query-time optimizer (SubZero VII-A): per step, the cheapest way to get lineage.

Given the frontier size reaching a node, compare the predicted cost of every strategy
the node stored, of its mapping functions, and of re-running it; pick the cheapest.
The re-run estimate is also the time budget of stored lookups: past it the executor
abandons them and re-runs instead, which bounds a step at about twice re-execution.
"""

from __future__ import annotations

from dataclasses import dataclass

from subzero.optimizer.cost_model import NodeProfile, step_cost

__all__ = ["StepChoice", "choose_step"]

MIN_BUDGET = 0.02  # seconds: lookups are never abandoned sooner than this


@dataclass(frozen=True)
class StepChoice:
    strategy: str
    predicted: float
    rerun: float

    @property
    def budget(self) -> float:
        """Seconds the chosen stored lookups may take before switching to re-execution."""
        return max(self.rerun, MIN_BUDGET)


def choose_step(profile: NodeProfile, stored: tuple[str, ...], mapping: bool, direction: str,
                cells: int) -> StepChoice:
    """The cheapest of ``stored`` (plus Map when supported, plus BlackBox) for this step."""
    options = list(dict.fromkeys([*(["Map"] if mapping else []), *stored, "BlackBox"]))
    costs = {name: step_cost(profile, name, direction, cells) for name in options}
    best = min(options, key=lambda name: (costs[name], options.index(name)))
    return StepChoice(best, costs[best], costs["BlackBox"])

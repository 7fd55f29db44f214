"""The query-time optimizer (SubZero VII-A): per step, the cheapest way to get lineage.

Given the frontier size reaching a node, compare the predicted cost of every strategy
the node stored, of its mapping functions, and of re-running it; pick the cheapest.
The re-run estimate is also the time budget of stored lookups: past it the executor
abandons them and re-runs instead, which bounds a step at about twice re-execution.
"""

from __future__ import annotations

from dataclasses import dataclass

from subzero.modes import Direction, Strategy
from subzero.optimizer.cost_model import NodeProfile, step_cost

__all__ = ["StepChoice", "choose_step"]

MIN_BUDGET = 0.02  # seconds: lookups are never abandoned sooner than this
_MAP, _BLACKBOX = Strategy.parse("Map"), Strategy.parse("BlackBox")


@dataclass(frozen=True)
class StepChoice:
    """The strategy chosen for one step, its predicted seconds, and those of re-running."""

    strategy: Strategy
    predicted: float
    rerun: float

    @property
    def budget(self) -> float:
        """Seconds the chosen stored lookups may take before switching to re-execution."""
        return max(self.rerun, MIN_BUDGET)


def choose_step(profile: NodeProfile, stored: tuple[Strategy, ...], mapping: bool, direction: Direction,
                cells: int, reread: float = 0.0, whole: bool = False) -> StepChoice:
    """The cheapest of ``stored`` (plus Map when ``mapping``, plus BlackBox) for this step.

    Ties go to the earlier option: Map, then ``stored`` in order, then BlackBox.  ``reread``:
    seconds recomputing the node's unstored inputs takes (a re-run pays its touched share).
    ``whole``: the mapping functions take the frontier whole (its boxes or mask, or the same
    cells through an elementwise step), not cell by cell (`subzero.optimizer.cost_model.step_cost`).

    Examples
    --------
    >>> choose_step(NodeProfile("n"), (), True, Direction.BACKWARD, 10).strategy
    Strategy('Map')
    """
    options = list(dict.fromkeys([*([_MAP] if mapping else []), *stored, _BLACKBOX]))
    costs = [step_cost(profile, s, direction, cells, reread, whole) for s in options]
    k = min(range(len(options)), key=lambda j: (costs[j], j))  # ties: the earlier option
    return StepChoice(options[k], costs[k], costs[options.index(_BLACKBOX)])

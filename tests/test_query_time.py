"""The query-time optimizer's choice per step."""

from __future__ import annotations

from subzero.optimizer.cost_model import NodeProfile, StrategyProfile
from subzero.optimizer.query_time import MIN_BUDGET, choose_step


def test_picks_the_matched_index_then_re_execution_over_a_mismatched_one():
    p = NodeProfile("n", tiles=4, op_seconds=0.5, out_size=10**6, in_sizes=[10**6],
                    strategies={"FullOne/forward": StrategyProfile(bytes=1e7, pairs=1e6, out_cells=1e6,
                                                                   in_cells=1e6, keys=1e6)})
    assert choose_step(p, ("FullOne/forward",), False, "forward", 10).strategy == "FullOne/forward"
    back = choose_step(p, ("FullOne/forward",), False, "backward", 10)
    assert back.strategy == "BlackBox" and back.predicted == back.rerun
    assert choose_step(p, ("FullOne/forward",), True, "backward", 10).strategy == "Map"


def test_the_lookup_budget_is_the_re_execution_estimate():
    p = NodeProfile("n", tiles=1, op_seconds=3.0)
    choice = choose_step(p, (), False, "backward", 1)
    assert choice.budget == choice.rerun >= 3.0
    assert choose_step(NodeProfile("m"), (), False, "backward", 1).budget == MIN_BUDGET

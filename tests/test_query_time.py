"""The query-time optimizer's choice per step."""

from __future__ import annotations

from subzero.modes import Direction, Strategy
from subzero.optimizer.cost_model import NodeProfile, StrategyProfile
from subzero.optimizer.query_time import MIN_BUDGET, choose_step


def test_picks_the_matched_index_then_re_execution_over_a_mismatched_one():
    p = NodeProfile("n", tiles=4, op_seconds=0.5, out_size=10**6, in_sizes=[10**6],
                    strategies={"FullOne/forward": StrategyProfile(bytes=1e7, pairs=1e6, out_cells=1e6,
                                                                   in_cells=1e6, keys=1e6)})
    stored = (Strategy.parse("FullOne/forward"),)
    assert choose_step(p, stored, False, Direction.FORWARD, 10).strategy == Strategy.parse("FullOne/forward")
    back = choose_step(p, stored, False, Direction.BACKWARD, 10)
    assert back.strategy == Strategy.parse("BlackBox") and back.predicted == back.rerun
    assert choose_step(p, stored, True, Direction.BACKWARD, 10).strategy == Strategy.parse("Map")


def test_the_lookup_budget_is_the_re_execution_estimate():
    p = NodeProfile("n", tiles=1, op_seconds=3.0)
    choice = choose_step(p, (), False, Direction.BACKWARD, 1)
    assert choice.budget == choice.rerun >= 3.0
    assert choose_step(NodeProfile("m"), (), False, Direction.BACKWARD, 1).budget == MIN_BUDGET


def test_re_execution_over_unstored_inputs_pays_their_recomputation():
    """A re-run step reads the node's inputs: unstored, they are recomputed, which can make a
    mapped step (reading no values) the cheaper choice even over many cells."""
    p = NodeProfile("n", tiles=1, op_seconds=0.01, out_size=10**6, in_sizes=[10**6])
    cheap = choose_step(p, (), True, Direction.BACKWARD, 10**6)
    assert cheap.strategy == Strategy.parse("BlackBox")
    costly = choose_step(p, (), True, Direction.BACKWARD, 10**6, reread=2.0)
    assert costly.strategy == Strategy.parse("Map") and costly.rerun == cheap.rerun + 2.0


def test_a_frontier_mapped_whole_is_priced_as_a_pass_not_per_cell():
    """Boxes or a mask through an operator's box or mask form (or an elementwise step keeping the
    cells) cost a pass over the arrays: a million-cell step maps rather than re-runs the node."""
    p = NodeProfile("n", tiles=1, op_seconds=0.01, out_size=10**6, in_sizes=[10**6])
    per_cell = choose_step(p, (), True, Direction.BACKWARD, 10**6)
    whole = choose_step(p, (), True, Direction.BACKWARD, 10**6, whole=True)
    assert per_cell.strategy == Strategy.parse("BlackBox")
    assert whole.strategy == Strategy.parse("Map") and whole.predicted < per_cell.predicted / 2

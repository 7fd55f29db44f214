"""The cost model: orderings the optimizer relies on, and profiles round-tripping the catalog."""

from __future__ import annotations

import pytest

from subzero.optimizer.cost_model import NodeProfile, StrategyProfile, disk_cost, runtime_cost, step_cost


def profile(**kw) -> NodeProfile:
    base = dict(node="n", tiles=16, op_seconds=2.0, trace_seconds=1.0, out_size=10**6, in_sizes=[10**6],
                fan_backward=9.0, fan_forward=9.0,
                strategies={
                    "FullOne/backward": StrategyProfile(bytes=4e7, encode_seconds=3.0, pairs=1e6, out_cells=1e6,
                                                        in_cells=9e6, keys=2e6),
                    "FullMany/backward": StrategyProfile(bytes=6e7, encode_seconds=4.0, pairs=1e6, out_cells=1e6,
                                                         in_cells=9e6, keys=1e6),
                    "FullOne/forward": StrategyProfile(bytes=5e7, encode_seconds=3.0, pairs=1e6, out_cells=1e6,
                                                       in_cells=9e6, keys=2e6),
                    "CompOne/backward": StrategyProfile(bytes=1e3, encode_seconds=0.01, pairs=50, out_cells=50, keys=50),
                })
    base.update(kw)
    return NodeProfile(**base)


def test_matched_index_beats_re_execution_and_mismatched_index_does_not():
    p = profile()
    rerun = step_cost(p, "BlackBox", "backward", 10)
    assert step_cost(p, "FullOne/backward", "backward", 10) < rerun
    assert step_cost(p, "FullOne/forward", "backward", 10) > rerun  # scans 1e6 pairs
    assert step_cost(p, "FullOne/forward", "forward", 10) < step_cost(p, "FullOne/backward", "forward", 10)


def test_one_beats_many_for_few_cells_and_costs_grow_with_the_frontier():
    p = profile()
    assert step_cost(p, "FullOne/backward", "backward", 5) <= step_cost(p, "FullMany/backward", "backward", 5)
    for name in ("Map", "FullOne/backward", "FullMany/backward", "BlackBox", "CompOne/backward"):
        assert step_cost(p, name, "backward", 10) <= step_cost(p, name, "backward", 100_000)


def test_re_execution_touches_only_some_tiles_for_small_frontiers():
    p = profile()
    assert step_cost(p, "BlackBox", "backward", 1) < step_cost(p, "BlackBox", "backward", 10**5)
    assert step_cost(p, "BlackBox", "backward", 10**5) == pytest.approx(3.0, rel=0.1)


def test_disk_and_runtime_of_stored_strategies_only():
    p = profile()
    assert disk_cost(p, "Map") == disk_cost(p, "BlackBox") == 0
    assert runtime_cost(p, "Map") == 0
    assert disk_cost(p, "FullOne") == 4e7
    assert runtime_cost(p, "FullOne/backward") > p.op_seconds


def test_profile_round_trips_through_a_dict():
    p = profile()
    assert NodeProfile.from_dict(p.to_dict()) == p


def test_fan_is_capped_by_the_array():
    p = profile(out_size=100, in_sizes=[50])
    assert p.fan("backward", 1000) == 50 and p.fan("forward", 3) == 27
    assert profile(all_to_all=True).fan("forward", 1) == 10**6


def test_a_re_run_step_pays_the_share_of_its_unstored_inputs_its_tiles_read():
    p = profile()
    for cells, share in ((1, 1 / 16), (4, 4 / 16), (10**6, 1.0)):
        plain = step_cost(p, "BlackBox", "backward", cells)
        assert step_cost(p, "BlackBox", "backward", cells, reread=8.0) == pytest.approx(plain + 8.0 * share)
        assert step_cost(p, "FullOne/backward", "backward", cells, reread=8.0) == \
            step_cost(p, "FullOne/backward", "backward", cells)  # stored lineage reads no input


def test_a_composite_step_decodes_only_the_overrides_its_frontier_meets():
    """A composite stores overrides for some cells (its mapping answers the rest): a step over a
    frontier meets as many as the overrides cover of the output, not one per frontier cell."""
    few = profile(strategies={"CompOne/backward": StrategyProfile(bytes=1e3, pairs=500, out_cells=500, keys=500)})
    every = profile(strategies={"CompOne/backward": StrategyProfile(bytes=1e6, pairs=10**6, out_cells=10**6,
                                                                    keys=10**6)})
    for direction in ("backward", "forward"):
        assert step_cost(few, "CompOne/backward", direction, 1000) < step_cost(every, "CompOne/backward", direction, 1000)
        paying = profile(strategies={"PayOne/backward": few.strategies["CompOne/backward"]})
        assert step_cost(paying, "PayOne/backward", direction, 1000) > step_cost(few, "CompOne/backward", direction,
                                                                               1000)  # a payload's pairs are all met


def test_a_range_table_kept_in_chunks_costs_the_chunks_a_step_reads():
    """A node's range rules kept inline are read once per process; kept in chunks, a step reads
    and decodes the chunks its frontier touches: the larger each chunk, the dearer the step."""
    def ranged(nbytes, keys):
        return profile(strategies={"FullRange": StrategyProfile(bytes=nbytes, pairs=1e6, out_cells=1e6, keys=keys)})

    inline, small, large = ranged(5e3, 0), ranged(5e3, 5), ranged(2.5e5, 5)
    for direction in ("backward", "forward"):
        costs = [step_cost(p, "FullRange", direction, 1000) for p in (inline, small, large)]
        assert costs[0] < costs[1] < costs[2]
        assert costs[2] - costs[1] > 4e-3  # about 50 KB more per chunk read and decoded


def test_a_composite_default_takes_a_whole_frontier_as_boxes():
    """A composite whose mapping default has a box or mask form maps a large frontier in one pass
    and answers boxes: its step no longer costs a mapping call and an id per output cell."""
    p = profile(strategies={"CompOne/backward": StrategyProfile(bytes=1e3, pairs=500, out_cells=500, keys=500)})
    for direction in ("backward", "forward"):
        per_cell = step_cost(p, "CompOne/backward", direction, 50_000)
        whole = step_cost(p, "CompOne/backward", direction, 50_000, whole=True)
        assert per_cell - whole > 0.02  # 450,000 output cells at 80 ns each
        assert step_cost(p, "PayOne/backward", direction, 50_000, whole=True) == \
            step_cost(p, "PayOne/backward", direction, 50_000)  # a payload strategy has no default to map

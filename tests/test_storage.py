"""Whether an intermediate array is stored (`subzero.optimizer.storage`): what recomputing the
unstored arrays a re-run step reads costs, and the rule of runs without budgets."""

from __future__ import annotations

import pytest

from subzero.errors import WorkflowError
from subzero.optimizer.storage import ArrayChoice, array_choices, default_stores, recompute_seconds, recomputed

#: an iterative threshold: a long unstored chain -> a scalar t -> a mask a whole-array step reads
INPUTS = {"chain": ["x"], "t": ["chain"], "mask": ["x", "t"], "other": ["x"]}
SECONDS = {"chain": 2.0, "t": 0.001, "mask": 0.003, "other": 5.0}


def test_the_arrays_a_read_recomputes_stop_at_stored_ones():
    arrays = array_choices(INPUTS, SECONDS, {"t": 8, "mask": 10**6})
    assert set(arrays) == set(SECONDS)  # every unstored array; "x" is stored
    assert arrays["mask"].inputs == ("t",) and arrays["chain"].inputs == ()
    assert [a.node for a in arrays.values() if a.storable] == ["t", "mask"]
    assert set(array_choices(INPUTS, SECONDS, {}, reads=["mask"])) == {"mask", "t", "chain"}  # not "other"
    assert set(recomputed(arrays, ["mask"])) == {"mask", "t", "chain"}
    assert recomputed(arrays, ["mask"], stored={"t"}) == ["mask"]
    assert recompute_seconds(arrays, ["mask", "x"]) == pytest.approx(2.004)
    assert recompute_seconds(arrays, ["mask"], stored={"mask"}) == 0.0


@pytest.mark.parametrize("threshold, share, stored", [
    (0.05, 1.0, ["t"]),            # the 8-byte scalar cuts the 2 s chain; the 3 ms mask is left
    (0.001, 1.0, ["t", "mask"]),   # under 1 ms only storing the mask too will do
    (5.0, 1.0, []),                # recomputing 2 s is under the threshold
    (0.05, 0.01, []),              # a step touching 1% of the tiles recomputes 20 ms
])
def test_a_run_without_budgets_stores_the_fewest_bytes_that_bring_a_step_under_the_threshold(threshold, share,
                                                                                               stored):
    arrays = array_choices(INPUTS, SECONDS, {"t": 8, "mask": 10**6})
    got = default_stores(arrays, "gather", ["mask"], share, threshold)
    assert list(got) == stored
    assert all("re-running gather" in why and f"{threshold:g} s" in why for why in got.values())
    left = share * recompute_seconds(arrays, ["mask"], stored=set(got))
    assert left <= threshold or not [a for a in recomputed(arrays, ["mask"], set(got)) if arrays[a].storable]


def test_an_array_that_can_no_longer_be_stored_is_not_chosen():
    arrays = array_choices(INPUTS, SECONDS, {})
    assert default_stores(arrays, "gather", ["mask"], 1.0, 0.0) == {}
    with pytest.raises(WorkflowError, match="seconds of array 'm'"):
        ArrayChoice("m", disk=1.0, runtime=0.0, seconds=float("nan"))

"""Region pairs in memory: concat, select, and backward/forward agree with plain Python sets."""

from __future__ import annotations

import numpy as np

from subzero.frontier import Frontier
from hypothesis import given, settings
from hypothesis import strategies as st

from subzero.pairs import FullPairs, PayloadPairs, gather_groups, owners, ptr_from_counts

N_OUT, N_IN = 30, (25, 12)


def csr(groups: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    ids = np.array([c for g in groups for c in g], dtype=np.int64)
    return ids, ptr_from_counts(np.array([len(g) for g in groups], np.int64))


def full_pairs(pairs: list[tuple[list[int], ...]], n_inputs: int) -> FullPairs:
    """FullPairs from Python pairs ``(out, in_0, ..., in_{n-1})``."""
    out = csr([p[0] for p in pairs])
    ins = [csr([p[1 + i] for p in pairs]) for i in range(n_inputs)]
    return FullPairs(out[0], out[1], tuple(a for a, _ in ins), tuple(b for _, b in ins))


def as_python(fp: FullPairs) -> list[tuple[list[int], ...]]:
    def groups(ids, ptr):
        return [ids[ptr[k]:ptr[k + 1]].tolist() for k in range(len(ptr) - 1)]
    sides = [groups(fp.out_ids, fp.out_ptr)] + [groups(a, b) for a, b in zip(fp.in_ids, fp.in_ptr)]
    return [tuple(s[k] for s in sides) for k in range(fp.n_pairs)]


def cell_lists(n: int, max_size: int = 6):
    return st.lists(st.integers(0, n - 1), max_size=max_size)


@st.composite
def random_pairs(draw, n_inputs: int | None = None):
    n_inputs = draw(st.integers(1, 2)) if n_inputs is None else n_inputs
    pairs = draw(st.lists(st.tuples(cell_lists(N_OUT), *[cell_lists(N_IN[i]) for i in range(n_inputs)]),
                          max_size=12))
    return [tuple(map(list, p)) for p in pairs], n_inputs


def mask_of(n: int, cells) -> Frontier:
    """The frontier of ``cells`` over a flat array of ``n`` cells."""
    mask = np.zeros(n, bool)
    mask[list(cells)] = True
    return Frontier.of_mask(mask)


# -- structure ------------------------------------------------------------------------------------

def test_owners_and_gather_groups():
    ptr = np.array([0, 2, 2, 5])
    assert owners(ptr).tolist() == [0, 0, 2, 2, 2]
    ids = np.array([10, 11, 20, 21, 22])
    assert gather_groups(ids, ptr, np.array([False, True, True])).tolist() == [20, 21, 22]


def test_empty_pairs():
    fp = FullPairs.empty(2)
    assert fp.n_pairs == 0 and fp.n_inputs == 2
    assert fp.backward(Frontier.full((N_OUT,)), 1).size == 0
    assert fp.forward(Frontier.full((N_IN[0],)), 0).size == 0
    assert PayloadPairs.empty().n_pairs == 0 and PayloadPairs.empty().by_payload() == []


@settings(max_examples=60, deadline=None)
@given(data=st.data(), n_inputs=st.integers(1, 2))
def test_concat_is_list_concatenation(data, n_inputs):
    parts = [data.draw(random_pairs(n_inputs))[0] for _ in range(data.draw(st.integers(0, 4)))]
    got = FullPairs.concat([full_pairs(p, n_inputs) for p in parts], n_inputs)
    assert got.n_inputs == n_inputs
    assert as_python(got) == [pair for p in parts for pair in p]


@settings(max_examples=60, deadline=None)
@given(data=st.data(), case=random_pairs())
def test_select_keeps_the_chosen_pairs_in_order(data, case):
    pairs, n_inputs = case
    keep = np.array(data.draw(st.lists(st.booleans(), min_size=len(pairs), max_size=len(pairs))), bool)
    got = full_pairs(pairs, n_inputs).select(keep)
    assert as_python(got) == [p for p, k in zip(pairs, keep) if k]


# -- queries against brute force ---------------------------------------------------------------------

@settings(max_examples=100, deadline=None)
@given(data=st.data(), case=random_pairs())
def test_backward_is_the_union_of_inputs_of_pairs_meeting_the_mask(data, case):
    pairs, n_inputs = case
    frontier = set(data.draw(cell_lists(N_OUT, 10)))
    fp = full_pairs(pairs, n_inputs)
    for i in range(n_inputs):
        expected = {c for p in pairs if frontier & set(p[0]) for c in p[1 + i]}
        got = fp.backward(mask_of(N_OUT, frontier), i)
        assert got.dtype == np.int64
        assert set(got.tolist()) == expected


@settings(max_examples=100, deadline=None)
@given(data=st.data(), case=random_pairs())
def test_forward_is_the_union_of_outputs_of_pairs_meeting_the_mask(data, case):
    pairs, n_inputs = case
    fp = full_pairs(pairs, n_inputs)
    for i in range(n_inputs):
        frontier = set(data.draw(cell_lists(N_IN[i], 10)))
        expected = {c for p in pairs if frontier & set(p[1 + i]) for c in p[0]}
        assert set(fp.forward(mask_of(N_IN[i], frontier), i).tolist()) == expected


@settings(max_examples=50, deadline=None)
@given(case=random_pairs(n_inputs=1))
def test_forward_and_backward_are_inverse_on_single_cells(case):
    pairs, _ = case
    fp = full_pairs(pairs, 1)
    for o in range(0, N_OUT, 7):
        back = set(fp.backward(mask_of(N_OUT, [o]), 0).tolist())
        for i in range(N_IN[0]):
            assert (o in fp.forward(mask_of(N_IN[0], [i]), 0).tolist()) == (i in back)


def test_a_pair_with_no_input_cells_contributes_nothing_backward():
    fp = full_pairs([([1, 2], []), ([2], [5])], 1)
    assert fp.backward(mask_of(N_OUT, [1]), 0).tolist() == []
    assert sorted(fp.backward(mask_of(N_OUT, [2]), 0).tolist()) == [5]


# -- payload pairs --------------------------------------------------------------------------------------

payload_pairs = st.lists(st.tuples(cell_lists(N_OUT), st.sampled_from([b"", b"a", b"b", b"\x00\xff", b"abc"])),
                         max_size=10)


def make_payload_pairs(pairs) -> PayloadPairs:
    ids, ptr = csr([p[0] for p in pairs])
    return PayloadPairs(ids, ptr, [p[1] for p in pairs])


@settings(max_examples=80, deadline=None)
@given(pairs=payload_pairs)
def test_by_payload_groups_out_cells_of_equal_payloads(pairs):
    groups = make_payload_pairs(pairs).by_payload()
    payloads = [b for b, _ in groups]
    assert payloads == sorted({b for _, b in pairs})  # each distinct payload once, in byte order
    for payload, ids in groups:
        assert isinstance(payload, bytes) and ids.dtype == np.int64
        assert sorted(ids.tolist()) == sorted(c for cells, b in pairs if b == payload for c in cells)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), pairs=payload_pairs)
def test_payload_concat_and_select(data, pairs):
    split = data.draw(st.integers(0, len(pairs)))
    got = PayloadPairs.concat([make_payload_pairs(pairs[:split]), make_payload_pairs(pairs[split:])])
    assert got.n_pairs == len(pairs) and got.payloads == [b for _, b in pairs]
    assert got.out_ids.tolist() == [c for cells, _ in pairs for c in cells]
    keep = np.array(data.draw(st.lists(st.booleans(), min_size=len(pairs), max_size=len(pairs))), bool)
    sel = got.select(keep)
    kept = [p for p, k in zip(pairs, keep) if k]
    assert sel.payloads == [b for _, b in kept]
    assert [sel.out_ids[sel.out_ptr[k]:sel.out_ptr[k + 1]].tolist() for k in range(sel.n_pairs)] == \
        [cells for cells, _ in kept]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, N_OUT - 1), min_size=1, max_size=6, unique=True),
                          st.sampled_from([b"a", b"b", b"c"])), max_size=8),
       st.lists(st.integers(0, N_OUT - 1), max_size=10, unique=True))
def test_payload_pairs_kept_to_some_out_cells_match_plain_python(pairs, cells):
    """`PayloadPairs.with_out_cells` (a search in the sorted out cells): the pairs meeting the
    cells, in order, each with those of its cells (a cell may lie in several pairs)."""
    ids, ptr = csr([p[0] for p in pairs])
    pay = PayloadPairs(ids, ptr, [p[1] for p in pairs])
    wanted = set(cells)
    expected = [([c for c in out if c in wanted], payload) for out, payload in pairs if wanted & set(out)]
    for _ in range(2):  # the second search reads the index the first one made
        got = pay.with_out_cells(np.array(sorted(cells), np.int64))
        groups = [got.out_ids[got.out_ptr[k]:got.out_ptr[k + 1]].tolist() for k in range(got.n_pairs)]
        assert list(zip(groups, got.payloads)) == expected

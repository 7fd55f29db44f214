"""Encoders: the byte layout round-trips, tiles merge into sorted batches, and every encoding,
written through the real store, gives back its pairs and answers queries like the in-memory pairs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import subzero as sz
from subzero.cells import to_ids
from subzero.encoders import EncodedTile, FullOne, PayMany, PayOne, encoder_for, merge_tiles
from subzero.encoders.base import frontier_boxes
from subzero.encoders.codec import (CELL, OUT, PAIR, bytes_to_keys, keys_to_bytes, make_keys, pack_groups,
                                    pack_sets, pair_id_base, split_keys, unpack_groups, unpack_sets)
from subzero.modes import Strategy
from subzero.pairs import FullPairs, PayloadPairs, ptr_from_counts
from subzero.frontier import Frontier
from subzero.store import resolve
from subzero.store.shards import ShardReader, write_shard
from subzero.catalog import ShardRecord

# -- codec -----------------------------------------------------------------------------------------------

ID_MAX = (1 << 52) - 1


@settings(max_examples=100, deadline=None)
@given(kind=st.integers(0, 15), slot=st.integers(0, 255), ids=st.lists(st.integers(0, ID_MAX), max_size=20))
def test_keys_make_split_round_trip(kind, slot, ids):
    keys = make_keys(kind, slot, np.array(ids, np.int64))
    assert keys.dtype == np.uint64
    k, s, i = split_keys(keys)
    assert k.tolist() == [kind] * len(ids) and s.tolist() == [slot] * len(ids) and i.tolist() == ids
    raw = keys_to_bytes(keys)
    assert all(len(b) == 8 for b in raw)
    np.testing.assert_array_equal(bytes_to_keys(raw), keys)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([CELL, PAIR]), st.sampled_from([0, 1, 7, OUT]), st.integers(0, ID_MAX)),
                min_size=1, max_size=20))
def test_key_bytes_sort_like_kind_slot_id(triples):
    raw = [keys_to_bytes(make_keys(k, s, np.array([i], np.int64)))[0] for k, s, i in triples]
    by_bytes = [triples[j] for j in sorted(range(len(raw)), key=raw.__getitem__)]
    assert by_bytes == sorted(triples)


def test_pair_id_base_puts_the_tile_above_32_bits():
    assert pair_id_base(0) == 0 and pair_id_base(3) == 3 << 32
    assert split_keys(make_keys(PAIR, 0, np.array([pair_id_base(5) + 9])))[2].tolist() == [(5 << 32) + 9]


id_lists = st.one_of(st.lists(st.integers(0, (1 << 32) - 1), max_size=15),
                     st.lists(st.integers(0, ID_MAX), max_size=15))


@settings(max_examples=150, deadline=None)
@given(sets=st.lists(id_lists, max_size=5), tail=st.binary(max_size=20))
def test_pack_unpack_round_trip(sets, tail):
    arrays = [np.array(s, np.int64) for s in sets]
    buf = pack_sets(arrays, tail)
    got, got_tail = unpack_sets(buf)
    assert got_tail == tail and len(got) == len(sets)
    for g, s in zip(got, sets):
        assert g.dtype == np.int64 and g.tolist() == s
    widths = [8 if s and max(s) >= 1 << 32 else 4 for s in sets]
    assert len(buf) == 1 + len(sets) + sum(4 + w * len(s) for w, s in zip(widths, sets)) + len(tail)


@settings(max_examples=100, deadline=None)
@given(data=st.data(), n_pairs=st.integers(0, 8), n_sides=st.integers(1, 3), with_tails=st.booleans())
def test_pack_groups_is_pack_sets_per_pair(data, n_pairs, n_sides, with_tails):
    groups = [[data.draw(id_lists) for _ in range(n_pairs)] for _ in range(n_sides)]
    sides = []
    for side in groups:
        ids = np.array([c for g in side for c in g], np.int64)
        sides.append((ids, ptr_from_counts(np.array([len(g) for g in side], np.int64))))
    tails = [data.draw(st.binary(max_size=6)) for _ in range(n_pairs)] if with_tails else None
    values = pack_groups(sides, tails)
    assert len(values) == n_pairs
    for k, value in enumerate(values):
        sets, tail = unpack_sets(value)
        assert [s.tolist() for s in sets] == [side[k] for side in groups]
        assert tail == (tails[k] if with_tails else b"")


def test_pack_uses_uint32_up_to_its_limit():
    small, big = np.array([0, (1 << 32) - 1]), np.array([1 << 32])
    assert len(pack_sets([small])) == 1 + 1 + 4 + 8
    assert len(pack_sets([big])) == 1 + 1 + 4 + 8
    (a, b), tail = unpack_sets(pack_sets([small, big], b"payload"))
    assert a.tolist() == small.tolist() and b.tolist() == big.tolist() and tail == b"payload"


def test_unpack_accepts_memoryview_and_empty():
    sets, tail = unpack_sets(memoryview(pack_sets([np.array([], np.int64)], b"")))
    assert len(sets) == 1 and sets[0].size == 0 and tail == b""
    assert unpack_sets(pack_sets([], b"xyz")) == ([], b"xyz")


# -- merge_tiles ------------------------------------------------------------------------------------------

def test_merge_tiles_merges_colliding_cell_keys_and_sorts_keys():
    k = lambda kind, slot, i: make_keys(kind, slot, np.array(i, np.int64))  # noqa: E731
    a = EncodedTile(keys=k(PAIR, 0, [pair_id_base(0) + 1, pair_id_base(0)]), values=[b"a1", b"a0"],
                    cell_keys=k(CELL, OUT, [5, 3, 5]), cell_pairs=np.array([1, 0, 0]),
                    boxes={OUT: (np.array([0]), np.zeros((1, 2)), np.ones((1, 2)))}, n_pairs=2)
    b = EncodedTile(keys=k(PAIR, 0, [pair_id_base(2)]), values=[b"b0"],
                    cell_keys=k(CELL, OUT, [3, 9]), cell_pairs=np.array([pair_id_base(2)] * 2),
                    boxes={OUT: (np.array([pair_id_base(2)]), np.full((1, 2), 2.0), np.full((1, 2), 4.0)),
                           1: (np.array([7]), np.zeros((1, 1)), np.zeros((1, 1)))}, n_pairs=1)
    batch = merge_tiles([b, a])
    keys = bytes_to_keys(batch.keys)
    assert keys.tolist() == sorted(keys.tolist()) and len(set(batch.keys)) == len(batch.keys)
    entries = dict(zip(zip(*[x.tolist() for x in split_keys(keys)]), batch.values))
    assert entries[(PAIR, 0, 0)] == b"a0" and entries[(PAIR, 0, 1)] == b"a1"
    assert entries[(PAIR, 0, pair_id_base(2))] == b"b0"
    pair_ids = lambda v: np.frombuffer(v, "<i8").tolist()  # noqa: E731
    assert pair_ids(entries[(CELL, OUT, 3)]) == [0, pair_id_base(2)]  # one key, both tiles' pairs, sorted
    assert pair_ids(entries[(CELL, OUT, 5)]) == [0, 1]
    assert pair_ids(entries[(CELL, OUT, 9)]) == [pair_id_base(2)]
    assert len(batch.keys) == 6 and batch.n_pairs == 3
    assert sorted(batch.boxes[OUT][0].tolist()) == [0, pair_id_base(2)] and batch.boxes[1][0].tolist() == [7]
    assert batch.nbytes == 8 * 6 + sum(map(len, batch.values))


def test_merge_tiles_refuses_duplicate_plain_keys():
    key = make_keys(PAIR, 0, np.array([5]))
    with pytest.raises(sz.StoreError, match="same LMDB key twice"):
        merge_tiles([EncodedTile(keys=key, values=[b"a"], n_pairs=1), EncodedTile(keys=key, values=[b"b"], n_pairs=1)])


def test_merge_of_nothing_is_an_empty_batch():
    batch = merge_tiles([])
    assert batch.keys == [] and batch.values == [] and batch.boxes == {} and batch.n_pairs == 0
    assert merge_tiles([EncodedTile()]).keys == []


def test_merge_tiles_is_deterministic_whatever_the_tile_order():
    enc = FullOne("backward")
    shapes = ((4, 4), ((4, 4),))
    tiles = [enc.encode(full_pairs([([t, 5], [t + 1]), ([5], [t])], 1), t, shapes) for t in range(3)]
    forward = merge_tiles(tiles)
    backward = merge_tiles(tiles[::-1])
    assert forward.keys == backward.keys and forward.values == backward.values


@settings(max_examples=40, deadline=None)
@given(data=st.data(), shape=st.lists(st.integers(1, 40), min_size=1, max_size=3).map(tuple),
       max_boxes=st.integers(1, 50))
def test_frontier_boxes_cover_every_frontier_cell(data, shape, max_boxes):
    ids = np.unique(np.array(data.draw(st.lists(st.integers(0, size(shape) - 1), min_size=1, max_size=200))))
    kind = data.draw(st.sampled_from(["ids", "mask", "boxes"]))
    frontier = Frontier.of_ids(ids, shape)
    if kind == "mask":
        frontier = Frontier(shape, mask=frontier.mask())
    elif kind == "boxes":
        frontier = Frontier.of_boxes(*frontier.boxes(), shape)
    mins, maxs = frontier_boxes(frontier, max_boxes=max_boxes)
    assert len(mins) <= max(max_boxes, 1) or len(mins) == 1
    assert np.all(mins <= maxs) and np.all(mins >= 0) and np.all(maxs < np.array(shape))
    coords = np.stack(np.unravel_index(ids, shape), axis=1)
    inside = np.all((coords[:, None, :] >= mins[None]) & (coords[:, None, :] <= maxs[None]), axis=2)
    assert inside.any(axis=1).all()


def test_encoder_for_every_stored_strategy():
    assert isinstance(encoder_for(Strategy.parse("FullOne/forward")), FullOne)
    assert encoder_for(Strategy.parse("FullMany")).direction == "backward"
    assert isinstance(encoder_for(Strategy.parse("PayOne")), PayOne)
    assert isinstance(encoder_for(Strategy.parse("CompMany")), PayMany)  # Comp stores its overrides as Pay


# -- helpers for the conformance suite -------------------------------------------------------------------

OUT_SHAPE = (5, 6)
IN_SHAPES = ((30,), (4, 3, 2))  # a 1-D and a 3-D input: R-trees pad 1-D boxes
SHAPES = (OUT_SHAPE, IN_SHAPES)
NDIMS = {OUT: len(OUT_SHAPE), 0: 1, 1: 3}
PAYLOADS = [b"", b"p", b"q", b"\x00\x01\x02\x03", b"a longer payload" * 3]


def csr(groups):
    ids = np.array([c for g in groups for c in g], dtype=np.int64)
    return ids, ptr_from_counts(np.array([len(g) for g in groups], np.int64))


def full_pairs(pairs, n_inputs=2) -> FullPairs:
    out = csr([p[0] for p in pairs])
    ins = [csr([p[1 + i] for p in pairs]) for i in range(n_inputs)]
    return FullPairs(out[0], out[1], tuple(a for a, _ in ins), tuple(b for _, b in ins))


def full_sets(fp: FullPairs) -> list:
    """The pairs as a sorted list of per-side cell sets (order of pairs and cells ignored)."""
    sides = [(fp.out_ids, fp.out_ptr)] + list(zip(fp.in_ids, fp.in_ptr))
    rows = [tuple(tuple(sorted(set(a[p[k]:p[k + 1]].tolist()))) for a, p in sides) for k in range(fp.n_pairs)]
    return sorted(rows)


def payload_pairs(pairs) -> PayloadPairs:
    ids, ptr = csr([p[0] for p in pairs])
    return PayloadPairs(ids, ptr, [p[1] for p in pairs])


def with_envelopes_of(pp: PayloadPairs) -> PayloadPairs:
    """``pp`` with an input envelope per pair and input (pair ``k``: from ``k % n`` on each axis, two
    cells wide, clipped), as `subzero.worker.with_envelopes` gives the encoders."""
    k = np.arange(pp.n_pairs)[:, None]
    envelopes = tuple((np.broadcast_to(k % np.asarray(s), (pp.n_pairs, len(s))).astype(np.int64),
                       np.minimum(k % np.asarray(s) + 2, s).astype(np.int64)) for s in IN_SHAPES)
    return PayloadPairs(pp.out_ids, pp.out_ptr, pp.payloads, envelopes)


def payload_sets(pp: PayloadPairs) -> list:
    return sorted((tuple(sorted(pp.out_ids[pp.out_ptr[k]:pp.out_ptr[k + 1]].tolist())), pp.payloads[k])
                  for k in range(pp.n_pairs))


def per_cell(pp: PayloadPairs) -> set:
    """The (out cell, payload) lineage facts, whatever the grouping into pairs."""
    return {(c, pp.payloads[k]) for k in range(pp.n_pairs)
            for c in pp.out_ids[pp.out_ptr[k]:pp.out_ptr[k + 1]].tolist()}


def size(shape) -> int:
    return int(np.prod(shape))


def cells_of(shape, max_size=8):
    return st.lists(st.integers(0, size(shape) - 1), max_size=max_size)


@st.composite
def random_full_pairs(draw):
    return draw(st.lists(st.tuples(cells_of(OUT_SHAPE), *[cells_of(s) for s in IN_SHAPES]), max_size=12))


@st.composite
def random_payload_pairs(draw):
    """Pairs with disjoint out cells (the common case: a cell has one payload)."""
    cells = draw(st.lists(st.integers(0, size(OUT_SHAPE) - 1), unique=True, max_size=25))
    n = draw(st.integers(1, 8))
    groups = [draw(st.integers(0, n - 1)) for _ in cells]
    payloads = [draw(st.sampled_from(PAYLOADS)) for _ in range(n)]
    return [([c for c, g in zip(cells, groups) if g == k], payloads[k]) for k in range(n)]


@st.composite
def tilings(draw, n_pairs: int):
    """Split points of the pairs over 1-3 tiles, and increasing (not contiguous) tile indices."""
    n_tiles = draw(st.integers(1, 3))
    cuts = sorted(draw(st.lists(st.integers(0, n_pairs), min_size=n_tiles - 1, max_size=n_tiles - 1)))
    bounds = [0] + cuts + [n_pairs]
    indices = sorted(draw(st.lists(st.integers(0, 40), min_size=n_tiles, max_size=n_tiles, unique=True)))
    return list(zip(indices, bounds[:-1], bounds[1:]))


def mask(shape, ids) -> Frontier:
    """The frontier of the flat cell ``ids`` of ``shape`` (a mask-shaped helper kept for the tests' words)."""
    return Frontier.of_ids(np.array(sorted(set(ids)), np.int64), shape)


def everything(shape) -> Frontier:
    return Frontier.full(shape)


def nothing(shape) -> Frontier:
    return Frontier.empty(shape)


_nodes = itertools.count()

# Each subclass runs the inherited property tests on its own encoder; hypothesis sees one method
# called from several classes.  Replaying one class's saved example on another is harmless.
conformance = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.differing_executors])


@pytest.fixture(scope="class")
def store(tmp_path_factory):
    """One directory per conformance class; each example writes its own shard."""
    return resolve(tmp_path_factory.mktemp("enc"))


# -- the conformance suite every encoding passes -------------------------------------------------------------

class StrategyTests:
    """Shared conformance tests: subclasses set ``strategy``."""

    strategy: str = ""

    @property
    def encoder(self):
        return encoder_for(Strategy.parse(self.strategy))

    def write(self, store, pairs, split, select):
        """Encode ``pairs`` tile by tile, merge, write, and return a reader on them."""
        tiles = [self.encoder.encode(select(pairs, a, b), index, SHAPES) for index, a, b in split]
        batch = merge_tiles(tiles)
        assert batch.n_pairs == len(pairs)
        assert batch.keys == sorted(set(batch.keys)), "batch keys must be unique and sorted"
        stem = f"n{next(_nodes)}"
        files, _ = write_shard(store, "shards", stem, batch)
        return ShardReader(store, "shards", ShardRecord(0, stem, files), NDIMS)


class FullStrategyTests(StrategyTests):

    def write_full(self, store, pairs, split):
        return self.write(store, pairs, split, lambda p, a, b: full_pairs(p[a:b]))

    @conformance
    @given(data=st.data(), pairs=random_full_pairs())
    def test_load_gives_back_the_pairs(self, store, data, pairs):
        reader = self.write_full(store, pairs, data.draw(tilings(len(pairs))))
        got = self.encoder.load(reader, SHAPES)
        assert isinstance(got, FullPairs) and got.n_inputs == 2
        assert full_sets(got) == full_sets(full_pairs(pairs))

    @conformance
    @given(data=st.data(), pairs=random_full_pairs())
    def test_queries_agree_with_in_memory_pairs(self, store, data, pairs):
        reader = self.write_full(store, pairs, data.draw(tilings(len(pairs))))
        memory = full_pairs(pairs)
        for _ in range(3):
            out_mask = mask(OUT_SHAPE, data.draw(cells_of(OUT_SHAPE, 10)))
            for i, shape in enumerate(IN_SHAPES):
                expected = set(memory.backward(out_mask, i).tolist())
                assert set(self.encoder.backward(reader, out_mask, i, SHAPES).tolist()) == expected
                in_mask = mask(shape, data.draw(cells_of(shape, 10)))
                expected = set(memory.forward(in_mask, i).tolist())
                assert set(self.encoder.forward(reader, in_mask, i, SHAPES).tolist()) == expected

    def test_whole_frontier_and_empty_frontier(self, store):
        pairs = [([0, 29], [0, 1], [23]), ([29], [], [0, 5]), ([], [7], [1])]
        reader = self.write_full(store, pairs, [(0, 0, 2), (1, 2, 3)])
        memory = full_pairs(pairs)
        for i, shape in enumerate(IN_SHAPES):
            assert set(self.encoder.backward(reader, everything(OUT_SHAPE), i, SHAPES).tolist()) == \
                set(memory.backward(everything(OUT_SHAPE), i).tolist())
            assert self.encoder.backward(reader, nothing(OUT_SHAPE), i, SHAPES).size == 0
            assert set(self.encoder.forward(reader, everything(shape), i, SHAPES).tolist()) == \
                set(memory.forward(everything(shape), i).tolist())
            assert self.encoder.forward(reader, nothing(shape), i, SHAPES).size == 0

    def test_no_pairs(self, store):
        reader = self.write_full(store, [], [(0, 0, 0)])
        assert self.encoder.load(reader, SHAPES).n_pairs == 0
        assert self.encoder.backward(reader, everything(OUT_SHAPE), 1, SHAPES).size == 0
        assert self.encoder.forward(reader, everything(IN_SHAPES[0]), 0, SHAPES).size == 0


class PayloadStrategyTests(StrategyTests):

    def write_pay(self, store, pairs, split):
        return self.write(store, pairs, split, lambda p, a, b: payload_pairs(p[a:b]))

    @conformance
    @given(data=st.data(), pairs=random_payload_pairs())
    def test_load_gives_back_every_cell_payload(self, store, data, pairs):
        reader = self.write_pay(store, pairs, data.draw(tilings(len(pairs))))
        got = self.encoder.load(reader, SHAPES)
        assert isinstance(got, PayloadPairs)
        assert per_cell(got) == per_cell(payload_pairs(pairs))
        assert all(isinstance(b, bytes) for b in got.payloads)

    @conformance
    @given(data=st.data(), pairs=random_payload_pairs())
    def test_lookup_agrees_with_in_memory_pairs(self, store, data, pairs):
        reader = self.write_pay(store, pairs, data.draw(tilings(len(pairs))))
        memory = payload_pairs(pairs)
        for _ in range(3):
            query = np.unique(np.array(data.draw(cells_of(OUT_SHAPE, 12)), np.int64))
            got = self.encoder.lookup(reader, mask(OUT_SHAPE, query), SHAPES)
            expected = {(c, b) for c, b in per_cell(memory) if c in set(query.tolist())}
            assert per_cell(got) == expected

    def test_lookup_of_everything_and_nothing(self, store):
        pairs = [([0, 29, 7], b"x"), ([3], b""), ([], b"never")]
        reader = self.write_pay(store, pairs, [(0, 0, 1), (4, 1, 3)])
        assert per_cell(self.encoder.lookup(reader, everything(OUT_SHAPE), SHAPES)) == \
            {(0, b"x"), (29, b"x"), (7, b"x"), (3, b"")}
        assert self.encoder.lookup(reader, nothing(OUT_SHAPE), SHAPES).n_pairs == 0

    @conformance
    @given(data=st.data(), pairs=st.lists(st.tuples(cells_of(OUT_SHAPE), st.sampled_from(PAYLOADS)), max_size=8))
    def test_out_cells_in_several_pairs_keep_every_payload(self, store, data, pairs):
        """A cell written with two payloads (or twice with one) has the lineage of both."""
        reader = self.write_pay(store, pairs, [(0, 0, len(pairs))])
        memory = payload_pairs(pairs)
        assert per_cell(self.encoder.load(reader, SHAPES)) == per_cell(memory)
        query = np.unique(np.array(data.draw(cells_of(OUT_SHAPE, 12)), np.int64))
        expected = {(c, b) for c, b in per_cell(memory) if c in set(query.tolist())}
        assert per_cell(self.encoder.lookup(reader, mask(OUT_SHAPE, query), SHAPES)) == expected

    @conformance
    @given(data=st.data(), pairs=random_payload_pairs())
    def test_forward_candidates_are_the_pairs_whose_envelope_meets_the_frontier(self, store, data, pairs):
        """Forward steps read only the payloads whose input envelope meets the frontier."""
        memory = payload_pairs(pairs)
        shape = IN_SHAPES[0]
        envelopes = []
        for s in IN_SHAPES:
            lo = np.array([[data.draw(st.integers(0, n - 1)) for n in s] for _ in range(memory.n_pairs)],
                          np.int64).reshape(-1, len(s))
            hi = lo + np.array([[data.draw(st.integers(0, 2)) for _ in s] for _ in range(memory.n_pairs)],
                               np.int64).reshape(-1, len(s))
            envelopes.append((lo, np.minimum(hi, s)))
        with_env = PayloadPairs(memory.out_ids, memory.out_ptr, memory.payloads, tuple(envelopes))
        stem = f"n{next(_nodes)}"
        files, _ = write_shard(store, "shards", stem, merge_tiles([self.encoder.encode(with_env, 0, SHAPES)]))
        reader = ShardReader(store, "shards", ShardRecord(0, stem, files), NDIMS)
        query = np.unique(np.array(data.draw(cells_of(shape, 6)), np.int64))
        frontier = mask(shape, query)
        got = self.encoder.forward_candidates(reader, frontier, 0, SHAPES)
        coords = np.stack(np.unravel_index(query, shape), axis=1) if len(query) else np.zeros((0, 1), np.int64)
        lo, hi = envelopes[0]
        meets = [bool(np.any(np.all((coords >= lo[k]) & (coords < hi[k]), axis=1))) for k in range(memory.n_pairs)]
        expected = {(c, memory.payloads[k]) for k in range(memory.n_pairs) if meets[k]
                    for c in memory.out_ids[memory.out_ptr[k]:memory.out_ptr[k + 1]].tolist()}
        # never miss a pair that may reach the frontier; PayOne indexes distinct payloads, a coarser unit
        assert expected <= per_cell(got) <= per_cell(memory)
        if self.strategy == "PayMany/backward":
            assert per_cell(got) == expected

    def test_two_payloads_of_one_cell(self, store):
        reader = self.write_pay(store, [([3, 4], b"a"), ([4], b"b"), ([4], b"")], [(0, 0, 3)])
        got = self.encoder.lookup(reader, mask(OUT_SHAPE, [4]), SHAPES)
        assert per_cell(got) == {(4, b"a"), (4, b"b"), (4, b"")}


class TestFullOneBackward(FullStrategyTests):
    strategy = "FullOne/backward"


class TestFullOneForward(FullStrategyTests):
    strategy = "FullOne/forward"


class TestFullManyBackward(FullStrategyTests):
    strategy = "FullMany/backward"


class TestFullManyForward(FullStrategyTests):
    strategy = "FullMany/forward"


class TestPayOne(PayloadStrategyTests):
    strategy = "PayOne/backward"

    @staticmethod
    def layout_one(pairs: PayloadPairs, tile_index: int) -> EncodedTile:
        """A tile as PayOne wrote it before runs (layout 1, as stores written by 5378c07 hold
        it): one ``CELL`` entry per out cell (``0`` + payload, or ``1`` + length-prefixed
        payloads) and the same payload-group entries; no layout key."""
        from subzero.encoders import pay_one
        from subzero.pairs import owners

        order = np.argsort(pairs.out_ids, kind="stable")
        ids, pair_of = pairs.out_ids[order], owners(pairs.out_ptr)[order]
        cells, first = np.unique(ids, return_index=True)
        ends = np.r_[first[1:], len(ids)]
        values = [b"\x00" + pairs.payloads[pair_of[a]] if b - a == 1 else
                  pay_one._pack([pairs.payloads[k] for k in pair_of[a:b]]) for a, b in zip(first, ends)]
        distinct, code = pairs.groups()
        group_keys, group_values, boxes = pay_one._payload_groups(pairs, tile_index, OUT_SHAPE, distinct, code)
        return EncodedTile(keys=np.concatenate([make_keys(CELL, OUT, cells), group_keys]),
                           values=values + group_values, boxes=boxes, n_pairs=pairs.n_pairs)

    @conformance
    @given(data=st.data(), pairs=random_payload_pairs())
    def test_a_layout_one_shard_answers_like_a_run_shard(self, store, data, pairs):
        """Stores written before runs keep answering, exactly as the run layout does."""
        split = data.draw(tilings(len(pairs)))
        runs = self.write_pay(store, pairs, split)
        stem = f"n{next(_nodes)}"
        files, _ = write_shard(store, "shards", stem,
                               merge_tiles([self.layout_one(payload_pairs(pairs[a:b]), t) for t, a, b in split]))
        old = ShardReader(store, "shards", ShardRecord(0, stem, files), NDIMS)
        assert not bytes_to_keys(runs.scan_ranges(make_keys(CELL, OUT, np.zeros(1, np.int64)),
                                                  make_keys(PAIR, 0, np.zeros(1, np.int64)))[0]).size
        assert per_cell(self.encoder.load(old, SHAPES)) == per_cell(self.encoder.load(runs, SHAPES))
        query = mask(OUT_SHAPE, data.draw(cells_of(OUT_SHAPE, 12)))
        assert per_cell(self.encoder.lookup(old, query, SHAPES)) == per_cell(self.encoder.lookup(runs, query, SHAPES))

    @staticmethod
    def layout_two(pairs: PayloadPairs, tile_index: int) -> EncodedTile:
        """A tile as PayOne wrote it before run entries and envelope tables (layout 2, as stores
        written by e47cab4 hold it): one ``RUN`` entry per run (``<u8``: its length, then its
        payload groups), the layout key ``[2, longest run]`` and the envelopes in R-trees."""
        from subzero.encoders import pay_one
        from subzero.encoders.codec import ENVELOPE, LAYOUT, RUN, split_keys

        pairs = with_envelopes_of(pairs)
        new = PayOne().encode(pairs, tile_index, SHAPES)
        kind = split_keys(new.keys)[0]
        runs = pay_one._Runs.decode(new.keys[kind == RUN], [v for v, c in zip(new.values, kind) if c == RUN], 3)
        values = [np.concatenate([[runs.length[r]], runs.pids[runs.ptr[r]:runs.ptr[r + 1]]]).astype("<u8").tobytes()
                  for r in range(len(runs.first))]
        distinct, code = pairs.groups()
        group_keys, group_values, boxes = pay_one._payload_groups(pairs, tile_index, OUT_SHAPE, distinct, code)
        longest = int(runs.length.max()) if len(runs.length) else 1
        keep = (kind != RUN) & (kind != ENVELOPE) & (kind != LAYOUT) & (kind != PAIR)
        assert not keep.any()
        return EncodedTile(keys=np.concatenate([make_keys(RUN, OUT, runs.first), group_keys,
                                                make_keys(LAYOUT, 0, np.array([tile_index]))]),
                           values=values + group_values + [np.array([2, longest], "<u4").tobytes()], boxes=boxes,
                           n_pairs=pairs.n_pairs)

    @conformance
    @given(data=st.data(), pairs=random_payload_pairs())
    def test_a_layout_two_shard_answers_like_a_layout_three_shard(self, store, data, pairs):
        """Stores written before run entries and envelope tables (one entry per run, R-trees) keep
        answering lookups, loads and forward steps exactly as layout 3 does."""
        split = data.draw(tilings(len(pairs)))
        readers = []
        for encode in (lambda p, t: self.encoder.encode(with_envelopes_of(p), t, SHAPES), self.layout_two):
            stem = f"n{next(_nodes)}"
            files, _ = write_shard(store, "shards", stem,
                                   merge_tiles([encode(payload_pairs(pairs[a:b]), t) for t, a, b in split]))
            readers.append(ShardReader(store, "shards", ShardRecord(0, stem, files), NDIMS))
            suffixes = {f.suffix for f in files}
        new, old = readers
        assert suffixes > {".mdb"}  # layout 2 has its R-trees
        assert per_cell(self.encoder.load(old, SHAPES)) == per_cell(self.encoder.load(new, SHAPES))
        query = mask(OUT_SHAPE, data.draw(cells_of(OUT_SHAPE, 12)))
        assert per_cell(self.encoder.lookup(old, query, SHAPES)) == per_cell(self.encoder.lookup(new, query, SHAPES))
        for i, shape in enumerate(IN_SHAPES):
            frontier = mask(shape, data.draw(cells_of(shape, 6)))
            assert per_cell(self.encoder.forward_candidates(old, frontier, i, SHAPES)) == \
                per_cell(self.encoder.forward_candidates(new, frontier, i, SHAPES))

    @conformance
    @given(data=st.data(), pairs=random_payload_pairs())
    def test_a_tile_decoded_whole_answers_like_its_shard(self, store, data, pairs):
        """`decode_tile` + `lookup_decoded` (what a walk keeps across brushes) give the pairs the
        shard lookup gives, in layouts 3 and 2, for any frontier; layout 1 is not decoded."""
        split = data.draw(tilings(len(pairs)))
        for encode in (lambda p, t: self.encoder.encode(p, t, SHAPES), self.layout_two, self.layout_one):
            stem = f"n{next(_nodes)}"
            files, _ = write_shard(store, "shards", stem,
                                   merge_tiles([encode(payload_pairs(pairs[a:b]), t) for t, a, b in split]))
            reader = ShardReader(store, "shards", ShardRecord(0, stem, files), NDIMS)
            tile = self.encoder.decode_tile(reader, SHAPES)
            if encode == self.layout_one:
                assert tile is None
                continue
            assert tile.nbytes > 0
            for query in (mask(OUT_SHAPE, data.draw(cells_of(OUT_SHAPE, 12))), everything(OUT_SHAPE),
                          nothing(OUT_SHAPE)):
                got, want = self.encoder.lookup_decoded(tile, query), self.encoder.lookup(reader, query, SHAPES)
                assert per_cell(got) == per_cell(want)

    def test_runs_store_one_entry_per_row_run(self, store):
        """Rows of 6 cells: 0-5 (one row), 6 (the next row) and 8-9 with one payload, 7 another:
        four runs, not ten cells, in one entry per row (layout 3)."""
        reader = self.write_pay(store, [([0, 1, 2, 3, 4, 5, 6, 9, 8], b"x"), ([7], b"y")], [(0, 0, 2)])
        from subzero.encoders import pay_one
        from subzero.encoders.codec import RUN

        keys, values = reader.scan_ranges(make_keys(RUN, 0, np.zeros(1, np.int64)),
                                          make_keys(RUN + 1, 0, np.zeros(1, np.int64)))
        assert (np.asarray(keys) & np.uint64((1 << 52) - 1)).tolist() == [0, 6]
        runs = pay_one._Runs.decode(keys, values, 3)
        assert runs.first.tolist() == [0, 6, 7, 8] and runs.length.tolist() == [6, 1, 1, 2]
        got = self.encoder.lookup(reader, mask(OUT_SHAPE, [5, 6, 7, 9, 10]), SHAPES)
        assert per_cell(got) == {(5, b"x"), (6, b"x"), (7, b"y"), (9, b"x")}

    def test_a_row_of_many_runs_takes_several_entries(self, store, monkeypatch):
        """An entry holds at most RUNS_PER_ENTRY runs; lookups across entries stay exact."""
        from subzero.encoders import pay_one

        monkeypatch.setattr(pay_one, "RUNS_PER_ENTRY", 2)
        pairs = [([c], bytes([c])) for c in range(6)] + [([7, 8], b"z")]
        reader = self.write_pay(store, pairs, [(0, 0, len(pairs))])
        assert per_cell(self.encoder.load(reader, SHAPES)) == per_cell(payload_pairs(pairs))
        got = self.encoder.lookup(reader, mask(OUT_SHAPE, [1, 4, 5, 6, 8]), SHAPES)
        assert per_cell(got) == {(1, b"\x01"), (4, b"\x04"), (5, b"\x05"), (8, b"z")}

    def test_a_shard_of_a_future_layout_is_refused_clearly(self, store):
        from subzero.encoders.codec import LAYOUT
        from subzero.errors import StoreError

        tile = self.encoder.encode(payload_pairs([([0, 1], b"x")]), 0, SHAPES)
        tile.values = [np.array([99, 2], "<u4").tobytes() if k >> np.uint64(60) == LAYOUT else v
                       for k, v in zip(tile.keys, tile.values)]
        stem = f"n{next(_nodes)}"
        files, _ = write_shard(store, "shards", stem, merge_tiles([tile]))
        reader = ShardReader(store, "shards", ShardRecord(0, stem, files), NDIMS)
        with pytest.raises(StoreError, match="layout version 99.*newer subzero"):
            self.encoder.lookup(reader, mask(OUT_SHAPE, [0]), SHAPES)
        with pytest.raises(StoreError, match="layout version 99"):
            self.encoder.load(reader, SHAPES)


    def test_a_covered_tile_stores_its_payload_and_record_boxes_not_its_cells(self, store):
        """Layout 4 (Label's covered tiles): one payload over every cell of each tile; a lookup pairs
        the frontier's cells with their tile's payload, a forward step takes the cells of the record
        boxes its frontier meets and its own cells."""
        from subzero.encoders.codec import RUN

        shape = (6, 8)
        shapes, ndims = (shape, (shape,)), {OUT: 2, 0: 2}
        tiles = [(((0, 3), (0, 8)), b"A", np.array([[0, 0], [1, 5]]), np.array([[2, 3], [3, 8]])),
                 (((3, 6), (0, 8)), b"B", np.zeros((0, 2), np.int64), np.zeros((0, 2), np.int64))]
        encoded = []
        for index, (box, payload, lo, hi) in enumerate(tiles):
            ids = to_ids(np.argwhere(np.ones((3, 8), bool)) + [box[0][0], 0], shape)
            pairs = PayloadPairs(ids, np.array([0, len(ids)]), [payload], ((np.array([[0, 0]]), np.array([[3, 8]])),),
                                 box, ((lo, hi),))
            encoded.append(self.encoder.encode(pairs, index, shapes))
        batch = merge_tiles(encoded)
        assert batch.n_pairs == 2 and len(batch.keys) == 6  # per tile: the payload, its record table, the layout
        stem = f"n{next(_nodes)}"
        files, _ = write_shard(store, "shards", stem, batch)
        reader = ShardReader(store, "shards", ShardRecord(0, stem, files), ndims)
        assert not reader.scan_ranges(make_keys(RUN, 0, np.zeros(1, np.int64)),
                                      make_keys(RUN + 1, 0, np.zeros(1, np.int64)))[1]  # no cells stored
        got = self.encoder.lookup(reader, mask(shape, [0, 9, 30, 47]), shapes)
        assert per_cell(got) == {(0, b"A"), (9, b"A"), (30, b"B"), (47, b"B")}
        assert per_cell(self.encoder.load(reader, shapes)) == {(c, b"A" if c < 24 else b"B") for c in range(48)}
        near = self.encoder.forward_candidates(reader, mask(shape, to_ids(np.array([[1, 1]]), shape)), 0, shapes)
        assert per_cell(near) == {(c, b"A") for c in to_ids(np.argwhere(np.ones((2, 3), bool)), shape).tolist()}
        own = self.encoder.forward_candidates(reader, mask(shape, to_ids(np.array([[4, 4]]), shape)), 0, shapes)
        assert per_cell(own) == {(36, b"B")}
        lone = self.encoder.forward_candidates(reader, mask(shape, to_ids(np.array([[0, 4]]), shape)), 0, shapes)
        assert per_cell(lone) == {(4, b"A")}  # in no record box: only the cell itself


class TestPayMany(PayloadStrategyTests):
    strategy = "PayMany/backward"

    @conformance
    @given(data=st.data(), pairs=random_payload_pairs())
    def test_load_gives_back_the_pairs_themselves(self, store, data, pairs):
        reader = self.write_pay(store, pairs, data.draw(tilings(len(pairs))))
        assert payload_sets(self.encoder.load(reader, SHAPES)) == payload_sets(payload_pairs(pairs))

    @conformance
    @given(data=st.data(), pairs=random_payload_pairs())
    def test_lookup_restricts_pairs_to_the_query_cells(self, store, data, pairs):
        reader = self.write_pay(store, pairs, data.draw(tilings(len(pairs))))
        query = set(data.draw(cells_of(OUT_SHAPE, 12)))
        got = self.encoder.lookup(reader, mask(OUT_SHAPE, query), SHAPES)
        expected = sorted((tuple(sorted(set(cells) & query)), b) for cells, b in pairs if set(cells) & query)
        assert payload_sets(got) == expected



@settings(max_examples=60, deadline=None)
@given(st.data())
def test_unpack_groups_inverts_pack_groups(data):
    """Many values decoded at once, in the uniform fast path and the general one."""
    n = data.draw(st.integers(1, 12))
    uniform = data.draw(st.booleans())
    sides = []
    for _ in range(data.draw(st.integers(1, 3))):
        counts = [data.draw(st.integers(0, 4))] * n if uniform else data.draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
        top = data.draw(st.sampled_from([1000, 2**40]))
        ids = np.array(data.draw(st.lists(st.integers(0, top), min_size=sum(counts), max_size=sum(counts))), np.int64)
        sides.append((ids, np.r_[0, np.cumsum(counts)].astype(np.int64)))
    tails = [bytes([k % 7] * (2 if uniform else k % 3)) for k in range(n)]
    values = pack_groups(sides, tails)
    if data.draw(st.booleans()):  # per-set widths, as pack_sets writes one value at a time
        values = [pack_sets([ids[ptr[k]:ptr[k + 1]] for ids, ptr in sides], tails[k]) for k in range(n)]
    got, got_tails = unpack_groups(values, with_tails=True)
    assert got_tails == tails
    for (ids, ptr), (got_ids, got_ptr) in zip(sides, got):
        assert got_ptr.tolist() == ptr.tolist() and got_ids.tolist() == ids.tolist()

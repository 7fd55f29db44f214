"""FullRange: Full lineage stored as range rules (`subzero.encoders.ranges`), both directions.

A tile's region pairs are compressed into rules of output boxes and input ranges that
are absolute or relative to the output coordinate (after ProvRC); a stencil, transpose,
crop or matrix product is a handful of rules for any array size.  Queries map boxes to
boxes without expanding cells, backward or forward: one structure answers both, so the
strategy has no direction.

Stored per tile as chunks of at most `CHUNK_RULES` rules (one LMDB entry each), with an
R-tree over the rules' output envelopes and one per input over their input envelopes,
keyed by chunk.  When every tile's table is small, the driver merges them into one table
for the node (`merge_inline`), kept inline in the node's manifest: then no shard is
read at all.
"""

from __future__ import annotations

import functools

import numpy as np

from subzero.encoders.base import EncodedTile, Shapes, FullEncoder, Reader, scan
from subzero.encoders.codec import OUT, PAIR, make_keys, pair_id_base
from subzero.encoders.ranges import RangeRules, compress, deserialize, merge_tables, serialize
from subzero.frontier import Frontier
from subzero.modes import Direction
from subzero.pairs import FullPairs


__all__ = ["FullRange", "CHUNK_RULES", "INLINE_BYTES"]

CHUNK_RULES = 256           # rules per stored entry: a query reads the chunks the R-tree names
INLINE_BYTES = 1 << 16      # a tile table this small is also reported to the driver for merging


class FullRange(FullEncoder):
    base = "FullRange"

    def encode(self, pairs: FullPairs, tile_index: int, shapes: Shapes) -> EncodedTile:
        out_shape, in_shapes = shapes
        rules = compress(pairs, tuple(out_shape), [tuple(s) for s in in_shapes])
        tile = self.encode_rules(rules, tile_index)
        tile.n_pairs = pairs.n_pairs
        data = serialize(rules)
        if len(data) <= INLINE_BYTES:
            tile.inline = data
        return tile

    @staticmethod
    def encode_rules(rules: RangeRules, tile_index: int) -> EncodedTile:
        """Entries (chunks of rules) and R-tree boxes (per rule, keyed by its chunk) of a table."""
        n = rules.n_rules
        if n == 0:
            return EncodedTile()
        chunk_of = np.arange(n, dtype=np.int64) // CHUNK_RULES
        ids = pair_id_base(tile_index) + np.arange(int(chunk_of[-1]) + 1, dtype=np.int64)
        values = [serialize(rules.select(np.arange(a, min(a + CHUNK_RULES, n)))) for a in range(0, n, CHUNK_RULES)]
        boxes = {}
        for slot, (rule, lo, hi) in [(OUT, rules.out_envelopes())] + \
                [(i, rules.in_envelopes(i)) for i in range(rules.n_inputs)]:
            keep = np.all(hi > lo, axis=1) if lo.shape[1] else np.ones(len(lo), bool)
            boxes[slot] = (ids[chunk_of[rule[keep]]], lo[keep].astype(np.float64), (hi[keep] - 1).astype(np.float64))
        return EncodedTile(keys=make_keys(PAIR, 0, ids), values=values, boxes=boxes)

    # -- queries: boxes in, boxes out ----------------------------------------------------------
    def backward(self, reader: Reader, frontier: Frontier, i: int, shapes: Shapes) -> Frontier:
        return self._step(self._tables(reader, frontier, OUT), frontier, i, Direction.BACKWARD, shapes)

    def forward(self, reader: Reader, frontier: Frontier, i: int, shapes: Shapes) -> Frontier:
        return self._step(self._tables(reader, frontier, i), frontier, i, Direction.FORWARD, shapes)

    def load(self, reader: Reader, shapes: Shapes) -> FullPairs:
        _, values = scan(reader, PAIR)
        if not values:
            return FullPairs.empty(len(shapes[1]))
        return FullPairs.concat([deserialize(v).to_pairs() for v in values], len(shapes[1]))

    @staticmethod
    def _tables(reader: Reader, frontier: Frontier, slot: int) -> list[RangeRules]:
        from subzero.encoders.base import frontier_boxes

        if frontier.is_empty:
            return []
        mins, maxs = frontier_boxes(frontier)
        ids = np.unique(reader.intersect(slot, mins, maxs))
        _, values = reader.get_many(make_keys(PAIR, 0, ids))
        return [deserialize(v) for v in values]

    @staticmethod
    def _step(tables: list[RangeRules], frontier: Frontier, i: int, direction: Direction, shapes) -> Frontier:
        out_shape, in_shapes = shapes
        target = tuple(in_shapes[i]) if direction is Direction.BACKWARD else tuple(out_shape)
        if not tables or frontier.is_empty:
            return Frontier.empty(target)
        q_lo, q_hi = frontier.boxes()
        los, his = [], []
        for table in tables:
            lo, hi = table.backward(q_lo, q_hi, i) if direction is Direction.BACKWARD else table.forward(q_lo, q_hi, i)
            los.append(lo)
            his.append(hi)
        return Frontier.of_boxes(np.concatenate(los), np.concatenate(his), target)

    # -- one table per node -----------------------------------------------------------------
    @staticmethod
    def merge_inline(parts: list[bytes], shapes: Shapes, limit: int = INLINE_BYTES) -> bytes | None:
        """The tiles' tables merged into one (bytes), or None when it would exceed ``limit``."""
        out_shape, in_shapes = shapes
        tables = [deserialize(p) for p in parts if p]
        merged = merge_tables(tables) if tables else \
            RangeRules.empty(tuple(out_shape), [tuple(s) for s in in_shapes])
        data = serialize(merged)
        return data if len(data) <= limit else None

    def query_inline(self, data: bytes, frontier: Frontier, i: int, direction: Direction, shapes: Shapes) -> Frontier:
        """A step answered from a node's merged table (see `merge_inline`), decoded once per
        process (its box indexes are built on first use and kept with it)."""
        return self._step([_inline_table(data)], frontier, i, direction, shapes)


@functools.lru_cache(maxsize=64)
def _inline_table(data: bytes) -> RangeRules:
    """A merged table from its bytes, kept: a node's table is read by every query through it
    (stores never change, so equal bytes are the same table)."""
    return deserialize(data)

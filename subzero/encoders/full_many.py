"""FullMany (paper Fig. 4.1): one entry per region pair holding all of its cells, with an
R-tree on the bounding boxes of the key cells (output cells when backward-optimized,
each input's cells when forward-optimized).  Best for high fanout."""

from __future__ import annotations

import numpy as np

from subzero.encoders.base import EncodedTile, Shapes, FullEncoder, Reader, scan, bounding_boxes, frontier_boxes
from subzero.encoders.codec import OUT, PAIR, make_keys, pack_groups, pair_id_base, unpack_groups
from subzero.frontier import Frontier
from subzero.modes import Direction
from subzero.pairs import FullPairs


__all__ = ["FullMany", "decode_full"]


class FullMany(FullEncoder):
    base = "FullMany"

    def encode(self, pairs: FullPairs, tile_index: int, shapes: Shapes) -> EncodedTile:
        out_shape, in_shapes = shapes
        ids = pair_id_base(tile_index) + np.arange(pairs.n_pairs, dtype=np.int64)
        sides = [(pairs.out_ids, pairs.out_ptr)] + list(zip(pairs.in_ids, pairs.in_ptr))
        if self.direction is Direction.BACKWARD:
            keyed = {OUT: (pairs.out_ids, pairs.out_ptr, out_shape)}
        else:
            keyed = {i: (a, p, in_shapes[i]) for i, (a, p) in enumerate(zip(pairs.in_ids, pairs.in_ptr))}
        boxes = {}
        for slot, (a, p, shape) in keyed.items():
            which, mins, maxs = bounding_boxes(a, p, shape)
            boxes[slot] = (ids[which], mins, maxs)
        return EncodedTile(keys=make_keys(PAIR, 0, ids), values=pack_groups(sides),
                           boxes=boxes, n_pairs=pairs.n_pairs)

    def backward(self, reader: Reader, frontier: Frontier, i: int, shapes: Shapes) -> np.ndarray:
        pairs = (self.candidates(reader, frontier, OUT, shapes)
                 if self.direction is Direction.BACKWARD else self.load(reader, shapes))
        return pairs.backward(frontier, i)

    def forward(self, reader: Reader, frontier: Frontier, i: int, shapes: Shapes) -> np.ndarray:
        pairs = (self.candidates(reader, frontier, i, shapes)
                 if self.direction is Direction.FORWARD else self.load(reader, shapes))
        return pairs.forward(frontier, i)

    def candidates(self, reader: Reader, frontier: Frontier, slot: int, shapes: Shapes) -> FullPairs:
        """Pairs that may hold cells of ``frontier`` in ``slot`` (the keyed side): those whose
        bounding box meets one of its boxes in the R-tree."""
        in_shapes = shapes[1]
        if frontier.is_empty:
            return FullPairs.empty(len(in_shapes))
        mins, maxs = frontier_boxes(frontier)
        pair_ids = np.unique(reader.intersect(slot, mins, maxs))
        _, values = reader.get_many(make_keys(PAIR, 0, pair_ids))
        return decode_full(values, len(in_shapes))

    def load(self, reader: Reader, shapes: Shapes) -> FullPairs:
        _, values = scan(reader, PAIR)
        return decode_full(values, len(shapes[1]))


def decode_full(values: list[bytes], n_inputs: int) -> FullPairs:
    """FullPairs from FullMany values (out set, then one set per input)."""
    if not values:
        return FullPairs.empty(n_inputs)
    out, *ins = unpack_groups(values)
    return FullPairs(out[0], out[1], tuple(a for a, _ in ins), tuple(b for _, b in ins))

"""PayMany (paper Fig. 4.3): one entry per region pair holding its output cells and its
payload, with an R-tree on the output cells' bounding boxes."""

from __future__ import annotations

import numpy as np

from subzero.encoders.base import EncodedTile, PayloadEncoder, Reader, bounding_boxes, frontier_boxes
from subzero.encoders.codec import OUT, PAIR, make_keys, pack_groups, pair_id_base, unpack_groups
from subzero.pairs import PayloadPairs, owners, ptr_from_counts

__all__ = ["PayMany"]


class PayMany(PayloadEncoder):
    base = "PayMany"

    def encode(self, pairs: PayloadPairs, tile_index: int, shapes) -> EncodedTile:
        ids = pair_id_base(tile_index) + np.arange(pairs.n_pairs, dtype=np.int64)
        which, mins, maxs = bounding_boxes(pairs.out_ids, pairs.out_ptr, shapes[0])
        values = pack_groups([(pairs.out_ids, pairs.out_ptr)], tails=pairs.payloads)
        return EncodedTile(keys=make_keys(PAIR, 0, ids), values=values,
                           boxes={OUT: (ids[which], mins, maxs)}, n_pairs=pairs.n_pairs)

    def lookup(self, reader: Reader, frontier, shapes) -> PayloadPairs:
        if frontier.is_empty:
            return PayloadPairs.empty()
        mins, maxs = frontier_boxes(frontier)
        pair_ids = np.unique(reader.intersect(OUT, mins, maxs))
        _, values = reader.get_many(make_keys(PAIR, 0, pair_ids))
        pairs = _decode(values)
        wanted = frontier.contains(pairs.out_ids)
        counts = np.bincount(owners(pairs.out_ptr)[wanted], minlength=pairs.n_pairs)
        trimmed = PayloadPairs(pairs.out_ids[wanted], ptr_from_counts(counts), pairs.payloads)
        return trimmed.select(counts > 0)

    def load(self, reader: Reader, shapes) -> PayloadPairs:
        return _decode(reader.scan(PAIR)[1])


def _decode(values: list[bytes]) -> PayloadPairs:
    if not values:
        return PayloadPairs.empty()
    ((ids, ptr),), tails = unpack_groups(values, with_tails=True)
    return PayloadPairs(ids, ptr, tails)

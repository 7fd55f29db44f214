"""PayMany (paper Fig. 4.3): one entry per region pair holding its output cells and its
payload, with an R-tree on the output cells' bounding boxes (backward) and one per input
on the bounding boxes of what the payloads compute (forward: only the pairs whose
envelope meets the frontier are expanded)."""

from __future__ import annotations

import numpy as np

from subzero.encoders.base import (EncodedTile, Shapes, PayloadEncoder, Reader, scan, bounding_boxes,
                                   decode_payload_pairs, envelope_boxes, frontier_boxes)
from subzero.encoders.codec import OUT, PAIR, make_keys, pack_groups, pair_id_base
from subzero.frontier import Frontier
from subzero.pairs import PayloadPairs, owners, ptr_from_counts


__all__ = ["PayMany"]


class PayMany(PayloadEncoder):
    base = "PayMany"

    def encode(self, pairs: PayloadPairs, tile_index: int, shapes: Shapes) -> EncodedTile:
        ids = pair_id_base(tile_index) + np.arange(pairs.n_pairs, dtype=np.int64)
        which, mins, maxs = bounding_boxes(pairs.out_ids, pairs.out_ptr, shapes[0])
        values = pack_groups([(pairs.out_ids, pairs.out_ptr)], tails=pairs.payloads)
        boxes = {OUT: (ids[which], mins, maxs)} | envelope_boxes(ids, pairs.envelopes)
        return EncodedTile(keys=make_keys(PAIR, 0, ids), values=values, boxes=boxes, n_pairs=pairs.n_pairs)

    def lookup(self, reader: Reader, frontier: Frontier, shapes: Shapes) -> PayloadPairs:
        if frontier.is_empty:
            return PayloadPairs.empty()
        mins, maxs = frontier_boxes(frontier)
        pair_ids = np.unique(reader.intersect(OUT, mins, maxs))
        _, values = reader.get_many(make_keys(PAIR, 0, pair_ids))
        pairs = decode_payload_pairs(values)
        wanted = frontier.contains(pairs.out_ids)
        counts = np.bincount(owners(pairs.out_ptr)[wanted], minlength=pairs.n_pairs)
        trimmed = PayloadPairs(pairs.out_ids[wanted], ptr_from_counts(counts), pairs.payloads)
        return trimmed.select(counts > 0)

    def load(self, reader: Reader, shapes: Shapes) -> PayloadPairs:
        return decode_payload_pairs(scan(reader, PAIR)[1])

"""PayOne (paper Fig. 4.4): one entry per output cell holding a copy of its pair's payload."""

from __future__ import annotations

import numpy as np

from subzero.encoders.base import EncodedTile, PayloadEncoder, Reader
from subzero.encoders.codec import CELL, OUT, make_keys, split_keys
from subzero.pairs import PayloadPairs, owners

__all__ = ["PayOne"]


class PayOne(PayloadEncoder):
    base = "PayOne"

    def encode(self, pairs: PayloadPairs, tile_index: int, shapes) -> EncodedTile:
        per_cell = owners(pairs.out_ptr).tolist()
        return EncodedTile(keys=make_keys(CELL, OUT, pairs.out_ids),
                           values=[pairs.payloads[k] for k in per_cell], n_pairs=pairs.n_pairs)

    def lookup(self, reader: Reader, out_ids: np.ndarray, shapes) -> PayloadPairs:
        keys, values = reader.get_many(make_keys(CELL, OUT, out_ids))
        return _one_cell_pairs(keys, values)

    def load(self, reader: Reader, shapes) -> PayloadPairs:
        return _one_cell_pairs(*reader.scan(CELL))


def _one_cell_pairs(keys: np.ndarray, values: list[bytes]) -> PayloadPairs:
    ids = split_keys(keys)[2]
    return PayloadPairs(ids, np.arange(len(ids) + 1, dtype=np.int64), list(values))

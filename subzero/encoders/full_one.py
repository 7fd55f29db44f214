"""FullOne (paper Fig. 4.2): one entry per key cell, pointing at one entry per pair.

Backward-optimized: keys are output cells, each pair entry holds the input cells.
Forward-optimized: keys are input cells, each pair entry holds the output cells.
Queries in the keyed direction are direct hash lookups, with no index.
"""

from __future__ import annotations

import numpy as np

from subzero.encoders.base import (EncodedTile, Shapes, FullEncoder, Reader, scan, cells_to_pairs,
                                   scan_cell_keys)
from subzero.encoders.codec import CELL, OUT, PAIR, make_keys, pack_groups, pair_id_base, split_keys, unpack_groups
from subzero.frontier import Frontier
from subzero.modes import Direction
from subzero.pairs import FullPairs, owners, ptr_from_counts


__all__ = ["FullOne"]


class FullOne(FullEncoder):
    base = "FullOne"

    def encode(self, pairs: FullPairs, tile_index: int, shapes: Shapes) -> EncodedTile:
        ids = pair_id_base(tile_index) + np.arange(pairs.n_pairs, dtype=np.int64)
        if self.direction is Direction.BACKWARD:
            cell_keys = make_keys(CELL, OUT, pairs.out_ids)
            cell_pairs = ids[owners(pairs.out_ptr)]
            values = pack_groups(list(zip(pairs.in_ids, pairs.in_ptr)))
        else:
            cell_keys = np.concatenate([make_keys(CELL, i, a) for i, a in enumerate(pairs.in_ids)])
            cell_pairs = np.concatenate([ids[owners(p)] for p in pairs.in_ptr])
            values = pack_groups([(pairs.out_ids, pairs.out_ptr)])
        return EncodedTile(keys=make_keys(PAIR, 0, ids), values=values, cell_keys=cell_keys,
                           cell_pairs=cell_pairs, n_pairs=pairs.n_pairs)

    def backward(self, reader: Reader, frontier: Frontier, i: int, shapes: Shapes) -> np.ndarray:
        if self.direction is not Direction.BACKWARD:
            return self.load(reader, shapes).backward(frontier, i)
        return self._other_side(reader, OUT, frontier.ids(), i)

    def forward(self, reader: Reader, frontier: Frontier, i: int, shapes: Shapes) -> np.ndarray:
        if self.direction is not Direction.FORWARD:
            return self.load(reader, shapes).forward(frontier, i)
        return self._other_side(reader, i, frontier.ids(), 0)

    def _other_side(self, reader: Reader, slot: int, ids: np.ndarray, which: int) -> np.ndarray:
        pair_ids = cells_to_pairs(reader, slot, ids)
        _, values = reader.get_many(make_keys(PAIR, 0, pair_ids))
        return unpack_groups(values)[which][0] if values else np.empty(0, np.int64)

    def load(self, reader: Reader, shapes: Shapes) -> FullPairs:
        keys, values = scan(reader, PAIR)
        pair_ids = split_keys(keys)[2]
        n_in = len(shapes[1])
        empty = (np.empty(0, np.int64), np.zeros(len(values) + 1, np.int64))
        stored = unpack_groups(values) if values else [empty] * (n_in if self.direction is Direction.BACKWARD else 1)
        slot, cell, pair = scan_cell_keys(reader)
        index = np.searchsorted(pair_ids, pair)
        n = len(pair_ids)

        def keyed(s: int):
            sel = slot == s
            order = np.lexsort((cell[sel], index[sel]))
            return cell[sel][order], ptr_from_counts(np.bincount(index[sel], minlength=n))

        if self.direction is Direction.BACKWARD:
            out, ins = keyed(OUT), stored
        else:
            out, ins = stored[0], [keyed(i) for i in range(n_in)]
        return FullPairs(out[0], out[1], tuple(a for a, _ in ins), tuple(b for _, b in ins))


"""PayOne (paper Fig. 4.4): one entry per output cell holding a copy of its pair's payload.

An out cell that several payload pairs name keeps every payload: the value is the
payload itself after a ``0`` byte, or ``1`` followed by length-prefixed payloads.
"""

from __future__ import annotations

import numpy as np

from subzero.encoders.base import EncodedTile, PayloadEncoder, Reader
from subzero.encoders.codec import CELL, OUT, make_keys, split_keys
from subzero.pairs import PayloadPairs, owners

__all__ = ["PayOne"]

_ONE, _MANY = b"\x00", b"\x01"


class PayOne(PayloadEncoder):
    base = "PayOne"

    def encode(self, pairs: PayloadPairs, tile_index: int, shapes) -> EncodedTile:
        pair_of = owners(pairs.out_ptr)
        order = np.argsort(pairs.out_ids, kind="stable")
        ids, pair_of = pairs.out_ids[order], pair_of[order]
        starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]]) if len(ids) else np.zeros(0, np.int64)
        ends = np.r_[starts[1:], len(ids)]
        payloads = pairs.payloads
        values = [_ONE + payloads[pair_of[a]] if b - a == 1 else _pack([payloads[k] for k in pair_of[a:b]])
                  for a, b in zip(starts.tolist(), ends.tolist())]
        return EncodedTile(keys=make_keys(CELL, OUT, ids[starts]), values=values, n_pairs=pairs.n_pairs)

    def lookup(self, reader: Reader, frontier, shapes) -> PayloadPairs:
        keys, values = reader.get_many(make_keys(CELL, OUT, frontier.ids()))
        return _one_cell_pairs(keys, values)

    def load(self, reader: Reader, shapes) -> PayloadPairs:
        return _one_cell_pairs(*reader.scan(CELL))


def _pack(payloads: list[bytes]) -> bytes:
    lengths = np.array([len(p) for p in payloads], "<u4")
    return _MANY + np.uint32(len(payloads)).tobytes() + lengths.tobytes() + b"".join(payloads)


def _unpack(value: bytes) -> list[bytes]:
    if value[:1] == _ONE:
        return [value[1:]]
    n = int(np.frombuffer(value, "<u4", 1, 1)[0])
    lengths = np.frombuffer(value, "<u4", n, 5).tolist()
    out, pos = [], 5 + 4 * n
    for length in lengths:
        out.append(value[pos : pos + length])
        pos += length
    return out


def _one_cell_pairs(keys: np.ndarray, values: list[bytes]) -> PayloadPairs:
    """One pair per (cell, payload)."""
    ids = split_keys(keys)[2]
    payloads = [_unpack(v) for v in values]
    counts = np.array([len(p) for p in payloads], np.int64)
    flat = [p for group in payloads for p in group]
    return PayloadPairs(np.repeat(ids, counts), np.arange(len(flat) + 1, dtype=np.int64), flat)

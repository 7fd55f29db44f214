"""PayOne (paper Fig. 4.4): one entry per output cell holding a copy of its pair's payload.

An out cell that several payload pairs name keeps every payload: the value is the
payload itself after a ``0`` byte, or ``1`` followed by length-prefixed payloads.

For forward queries, each distinct payload of a tile also gets one entry (the bounding
box of the out cells carrying it, then the payload) and an R-tree per input over the
bounding box of what it computes: a forward step finds the payloads whose envelope meets
its frontier, reads the out cells in their boxes (key ranges, as keys sort by cell) and
expands only those payloads.
"""

from __future__ import annotations

import numpy as np

from subzero.cells import to_coords, to_ids
from subzero.encoders.base import EncodedTile, PayloadEncoder, Reader, scan, envelope_boxes, frontier_boxes
from subzero.encoders.codec import CELL, OUT, PAIR, make_keys, pair_id_base, split_keys
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
        values = _cell_values(pairs.payloads, pair_of, starts, ends)
        group_keys, group_values, boxes = _payload_groups(pairs, tile_index, shapes[0])
        return EncodedTile(keys=np.concatenate([make_keys(CELL, OUT, ids[starts]), group_keys]),
                           values=values + group_values, boxes=boxes, n_pairs=pairs.n_pairs)

    def lookup(self, reader: Reader, frontier, shapes) -> PayloadPairs:
        keys, values = reader.get_many(make_keys(CELL, OUT, frontier.ids()))
        return _one_cell_pairs(keys, values)

    def load(self, reader: Reader, shapes) -> PayloadPairs:
        return _one_cell_pairs(*scan(reader, CELL))

    def forward_candidates(self, reader: Reader, frontier, i: int, shapes) -> PayloadPairs:
        """The cells carrying a payload whose envelope meets ``frontier``: the payload groups from
        the R-tree, their out cells from key ranges over each group's out box."""
        if frontier.is_empty:
            return PayloadPairs.empty()
        out_shape = shapes[0]
        mins, maxs = frontier_boxes(frontier)
        ids = np.unique(reader.intersect(i, mins, maxs))
        _, values = reader.get_many(make_keys(PAIR, 0, ids))
        if not values:
            return PayloadPairs.empty()
        ndim, width = len(out_shape), 16 * len(out_shape)
        wanted = {v[width:] for v in values}
        boxes = np.frombuffer(b"".join(v[:width] for v in values), "<i8").reshape(len(values), 2, ndim) \
            if ndim else np.zeros((len(values), 2, 0), np.int64)
        starts, stops = _row_ranges(boxes[:, 0], boxes[:, 1], out_shape)
        keys, cell_values = reader.scan_ranges(make_keys(CELL, OUT, starts), make_keys(CELL, OUT, stops))
        found = _one_cell_pairs(keys, cell_values)
        keep = np.fromiter((p in wanted for p in found.payloads), bool, found.n_pairs)
        return found.select(keep)


def _cell_values(payloads: list[bytes], pair_of: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> list[bytes]:
    """The value of every out cell (``pair_of[starts[c]:ends[c]]`` are its pairs): each pair's
    ``_ONE + payload`` is built once and shared by its cells, so a cell in one pair (all of
    them, usually) costs a list lookup, not a bytes copy."""
    single = (ends - starts) == 1
    if not len(starts):
        return []
    if single.all():
        prefixed = [_ONE + p for p in payloads]
        return [prefixed[k] for k in pair_of[starts].tolist()]
    return [_ONE + payloads[pair_of[a]] if b - a == 1 else _pack([payloads[k] for k in pair_of[a:b]])
            for a, b in zip(starts.tolist(), ends.tolist())]


def _payload_groups(pairs: PayloadPairs, tile_index: int, out_shape):
    """One entry per distinct payload (the bounding box of its out cells, then the payload) and
    the R-tree boxes of each group's input envelope (the union of its pairs' envelopes)."""
    distinct, code = pairs.groups()
    if not distinct:
        return np.empty(0, np.uint64), [], {}
    ndim = len(out_shape)
    cell_code = code[owners(pairs.out_ptr)]
    coords = to_coords(pairs.out_ids, out_shape)
    olo = np.full((len(distinct), ndim), np.iinfo(np.int64).max, np.int64)
    ohi = np.full((len(distinct), ndim), np.iinfo(np.int64).min, np.int64)
    np.minimum.at(olo, cell_code, coords)
    np.maximum.at(ohi, cell_code, coords + 1)
    none = (ohi[:, 0] < olo[:, 0]) if ndim else np.zeros(len(distinct), bool)
    olo[none], ohi[none] = 0, 0
    heads = np.concatenate([olo, ohi], axis=1).astype("<i8").tobytes()
    width = 16 * ndim
    values = [heads[k * width:(k + 1) * width] + p for k, p in enumerate(distinct)]
    group_ids = pair_id_base(tile_index) + np.arange(len(distinct), dtype=np.int64)
    envelopes = None
    if pairs.envelopes is not None:
        envelopes = []
        for lo, hi in pairs.envelopes:
            d = lo.shape[1]
            glo = np.full((len(distinct), d), np.iinfo(np.int64).max, np.int64)
            ghi = np.full((len(distinct), d), np.iinfo(np.int64).min, np.int64)
            full = np.all(hi > lo, axis=1) if d else np.ones(len(lo), bool)
            np.minimum.at(glo, code[full], lo[full])
            np.maximum.at(ghi, code[full], hi[full])
            empty = ghi[:, 0] < glo[:, 0] if d else np.zeros(len(distinct), bool)
            glo[empty], ghi[empty] = 0, 0
            envelopes.append((glo, ghi))
    return make_keys(PAIR, 0, group_ids), values, envelope_boxes(group_ids, envelopes)


def _row_ranges(lo: np.ndarray, hi: np.ndarray, shape) -> tuple[np.ndarray, np.ndarray]:
    """Flat id ranges ``[start, stop)`` of the last-axis rows of boxes (keys sort by flat id)."""
    if not len(shape):
        return np.zeros(len(lo), np.int64), np.ones(len(lo), np.int64)
    keep = np.all(hi > lo, axis=1)
    lo, hi = lo[keep], hi[keep]
    starts = []
    for a, b in zip(lo, hi):
        rows = [np.arange(x, y) for x, y in zip(a[:-1], b[:-1])]
        grid = np.stack(np.meshgrid(*rows, indexing="ij"), -1).reshape(-1, len(shape) - 1) if rows else \
            np.zeros((1, 0), np.int64)
        first = np.concatenate([grid, np.full((len(grid), 1), a[-1])], axis=1)
        starts.append((to_ids(first, shape), b[-1] - a[-1]))
    if not starts:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    begin = np.concatenate([s for s, _ in starts])
    length = np.concatenate([np.full(len(s), n) for s, n in starts])
    return begin, begin + length


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

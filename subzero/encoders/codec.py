"""Byte layout shared by the encoders: LMDB keys and serialized cell sets.

Keys are 8 bytes, big-endian, so LMDB sorts them numerically:
``kind (4 bits) | slot (8 bits) | id (52 bits)``.  ``kind`` tells cell keys from pair
keys, run keys (a run of consecutive cells sharing one value, keyed by its first cell),
envelope keys (``ENVELOPE``: one table of boxes per tile and input, in place of an R-tree) and
layout keys (``LAYOUT``: an entry per tile naming its layout version, in shards whose
layout changed since the first); ``slot`` is the input index for input cells (``OUT`` for
output cells); ``id`` is a flat cell id or a pair id (``tile << 32 | pair within tile``).

A cell set is its sorted flat ids, stored as uint32 when they fit, else uint64.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

__all__ = ["CELL", "PAIR", "RUN", "ENVELOPE", "LAYOUT", "OUT", "slot_ndims", "make_keys", "split_keys", "keys_to_bytes",
           "pack_sets", "pack_groups", "unpack_sets", "unpack_groups", "pair_id_base"]

CELL, PAIR, RUN = 1, 2, 3
ENVELOPE = 4  # ``make_keys(ENVELOPE, i, [tile])``: a tile's table of payload-group envelopes over input ``i``
LAYOUT = 0xE  # ``make_keys(LAYOUT, 0, [tile])``: the layout version of a tile's entries (uint32 first)
OUT = 0xFF
_ID_BITS = 52
_ID_MASK = (1 << _ID_BITS) - 1


def slot_ndims(output_shape: tuple[int, ...], input_shapes: Sequence[tuple[int, ...]]) -> dict[int, int]:
    """Axes per key slot (and R-tree slot): ``OUT`` for the output, the input index for each input."""
    return {OUT: len(output_shape)} | {i: len(s) for i, s in enumerate(input_shapes)}


def make_keys(kind: int, slot: int, ids: np.ndarray) -> np.ndarray:
    """uint64 keys for ``ids`` of one kind and slot."""
    head = np.uint64((kind << 60) | (slot << _ID_BITS))
    return np.asarray(ids, dtype=np.uint64) | head


def split_keys(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(kind, slot, id) of uint64 keys."""
    keys = np.asarray(keys, dtype=np.uint64)
    return (
        (keys >> np.uint64(60)).astype(np.int64),
        ((keys >> np.uint64(_ID_BITS)) & np.uint64(0xFF)).astype(np.int64),
        (keys & np.uint64(_ID_MASK)).astype(np.int64),
    )


def keys_to_bytes(keys: np.ndarray) -> list[bytes]:
    """Big-endian 8-byte strings of uint64 keys (one slice per key)."""
    buf = np.asarray(keys, dtype=">u8").tobytes()
    return [buf[k : k + 8] for k in range(0, len(buf), 8)]


def bytes_to_keys(raw: list[bytes]) -> np.ndarray:
    """Big-endian 8-byte keys as a uint64 array."""
    return np.frombuffer(b"".join(raw), dtype=">u8").astype(np.uint64)


def pair_id_base(tile_index: int) -> int:
    """The first pair id of tile ``tile_index`` (ids of different tiles never collide)."""
    return tile_index << 32


def pack_sets(sets: list[np.ndarray], tail: bytes = b"") -> bytes:
    """Serialize cell-id sets (and an optional opaque tail, e.g. a payload)."""
    head = [np.uint8(len(sets))]
    parts = []
    for ids in sets:
        wide = len(ids) and int(ids.max()) >= (1 << 32)
        data = np.asarray(ids, dtype="<u8" if wide else "<u4")
        head.append(np.uint8(8 if wide else 4))
        parts.append(np.uint32(len(ids)).tobytes() + data.tobytes())
    return np.array(head, np.uint8).tobytes() + b"".join(parts) + tail


def unpack_sets(buf: bytes) -> tuple[list[np.ndarray], bytes]:
    """Inverse of `pack_sets`: the cell-id sets and the tail."""
    mv = memoryview(buf)
    n = mv[0]
    widths = mv[1 : 1 + n]
    pos = 1 + n
    sets = []
    for w in widths:
        count = int(np.frombuffer(mv[pos : pos + 4], "<u4")[0])
        pos += 4
        sets.append(np.frombuffer(mv[pos : pos + count * w], "<u8" if w == 8 else "<u4").astype(np.int64))
        pos += count * w
    return sets, bytes(mv[pos:])


def pack_groups(sides: list[tuple[np.ndarray, np.ndarray]], tails: list[bytes] | None = None) -> list[bytes]:
    """`pack_sets` for every pair at once: pair ``k``'s value holds group ``k`` of every
    CSR side ``(ids, ptr)`` (then ``tails[k]``), decodable by `unpack_sets`.

    Built with numpy as one gather from a buffer of headers, counts and cell data (a
    side is uint64 for every pair when any of its ids needs it), then cut per pair.
    """
    n_pairs = len(sides[0][1]) - 1 if sides else 0
    if n_pairs <= 0:
        return []
    head = 1 + len(sides)
    widths = [8 if len(ids) and int(ids.max()) >= (1 << 32) else 4 for ids, _ in sides]
    header = np.empty((n_pairs, head), np.uint8)
    header[:, 0] = len(sides)
    header[:, 1:] = widths
    pieces, seg_starts, seg_lens, offset = [header.reshape(-1)], [np.arange(n_pairs) * head], [np.full(n_pairs, head)], header.size
    for (ids, ptr), w in zip(sides, widths):
        counts = np.diff(ptr)
        pieces.append(counts.astype("<u4").view(np.uint8))
        seg_starts.append(offset + 4 * np.arange(n_pairs))
        seg_lens.append(np.full(n_pairs, 4))
        offset += 4 * n_pairs
        pieces.append(np.asarray(ids).astype("<u8" if w == 8 else "<u4").view(np.uint8))
        seg_starts.append(offset + w * ptr[:-1])
        seg_lens.append(counts * w)
        offset += w * len(ids)
    source = np.concatenate(pieces)
    starts = np.stack(seg_starts, axis=1)  # pair-major: pair k's segments in order
    lens = np.stack(seg_lens, axis=1).astype(np.int64)
    pair_lens = lens.sum(axis=1)
    values: list[bytes] = []
    for lo in range(0, n_pairs, _PAIRS_PER_CHUNK):  # chunks keep the gather index small
        hi = min(lo + _PAIRS_PER_CHUNK, n_pairs)
        seg_len = lens[lo:hi].reshape(-1)
        out_start = np.cumsum(seg_len) - seg_len
        gather = np.repeat(starts[lo:hi].reshape(-1) - out_start, seg_len)
        gather += np.arange(len(gather), dtype=np.int64)
        raw = source[gather].tobytes()
        edges = np.zeros(hi - lo + 1, np.int64)
        np.cumsum(pair_lens[lo:hi], out=edges[1:])
        e = edges.tolist()
        if tails is None:
            values += [raw[a:b] for a, b in zip(e, e[1:])]
        else:
            values += [raw[a:b] + t for a, b, t in zip(e, e[1:], tails[lo:hi])]
    return values


_PAIRS_PER_CHUNK = 1 << 14


def unpack_groups(values: list[bytes], with_tails: bool = False) -> Any:
    """`unpack_sets` for many values at once: one CSR ``(ids, ptr)`` per set position
    (pair ``k``'s set ``s`` is ``ids_s[ptr_s[k]:ptr_s[k+1]]``), plus the tails if asked.

    Vectorized over many small values sharing a layout (same number of sets, same width per
    set, as `pack_groups` writes them); few or large values are decoded one by one, which
    is cheaper for them.
    """
    n = len(values)
    if n == 0:
        return ([], []) if with_tails else []
    buf = np.frombuffer(b"".join(values), np.uint8)
    lengths = np.fromiter(map(len, values), np.int64, n)
    if lengths.min() == lengths.max():
        uniform = _unpack_uniform(buf.reshape(n, int(lengths[0])), with_tails)
        if uniform is not None:
            return uniform
    if n < 64 or lengths.mean() > 256:  # few or large values: zero-copy views per value are cheaper
        return _unpack_each(values, with_tails)
    starts = np.zeros(n, np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    n_sets = int(buf[0])
    head = buf[starts[:, None] + np.arange(1 + n_sets)] if n_sets else buf[starts[:, None]]
    if np.any(head[:, 0] != n_sets) or np.any(head[:, 1:] != head[0, 1:]):
        return _unpack_each(values, with_tails)
    pos = starts + 1 + n_sets
    sides = []
    for w in head[0, 1:].tolist():
        counts = buf[pos[:, None] + np.arange(4)].copy().view("<u4").reshape(-1).astype(np.int64)
        data_start = pos + 4
        total = int(counts.sum())
        offsets = np.repeat(data_start - (np.cumsum(counts) - counts) * w, counts) + w * np.arange(total)
        raw = buf[offsets[:, None] + np.arange(w)].reshape(-1) if total else np.empty(0, np.uint8)
        ids = raw.view("<u8" if w == 8 else "<u4").astype(np.int64)
        ptr = np.zeros(n + 1, np.int64)
        np.cumsum(counts, out=ptr[1:])
        sides.append((ids, ptr))
        pos = data_start + counts * w
    if not with_tails:
        return sides
    ends = (starts + lengths).tolist()
    blob = buf.tobytes()
    return sides, [blob[a:b] for a, b in zip(pos.tolist(), ends)]


def _unpack_uniform(rows: np.ndarray, with_tails: bool):
    """Values of one length whose sets all have the same sizes: read them as matrix columns
    (the common case of fixed fan-in and fan-out).  None if the sizes differ."""
    n_sets = int(rows[0, 0])
    if np.any(rows[:, : 1 + n_sets] != rows[0, : 1 + n_sets]):
        return None
    pos, sides = 1 + n_sets, []
    n = len(rows)
    for w in rows[0, 1 : 1 + n_sets].tolist():
        counts = np.ascontiguousarray(rows[:, pos : pos + 4]).view("<u4").reshape(-1)
        if np.any(counts != counts[0]):
            return None
        c = int(counts[0])
        data = np.ascontiguousarray(rows[:, pos + 4 : pos + 4 + c * w])
        sides.append((data.view("<u8" if w == 8 else "<u4").reshape(-1).astype(np.int64),
                      np.arange(n + 1, dtype=np.int64) * c))
        pos += 4 + c * w
    if not with_tails:
        return sides
    return sides, [bytes(r) for r in rows[:, pos:]]


def _unpack_each(values: list[bytes], with_tails: bool):
    decoded = [unpack_sets(v) for v in values]
    n_sets = max(len(sets) for sets, _ in decoded)
    sides = []
    for s in range(n_sets):
        groups = [sets[s] if s < len(sets) else np.empty(0, np.int64) for sets, _ in decoded]
        ptr = np.zeros(len(groups) + 1, np.int64)
        np.cumsum([len(g) for g in groups], out=ptr[1:])
        sides.append((np.concatenate(groups), ptr))
    return (sides, [tail for _, tail in decoded]) if with_tails else sides

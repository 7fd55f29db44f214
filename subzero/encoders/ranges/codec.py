"""The byte format of range rules: a compact, self-describing string.

Two header bytes (magic, version with a zlib flag), then varints (shapes, rule count) and
integer columns, each a constant, or frame-of-reference or delta coded at the fewest
bytes per value.  Unit boxes and unit absolute terms are flat cell ids; per input, flags
drop the reference columns when every term is absolute or unscaled.  The whole body is
zlib-compressed when that is smaller.
"""

from __future__ import annotations

import zlib

import numpy as np

from subzero.cells import to_coords
from subzero.cells import to_ids as flat_ids
from subzero.encoders.ranges.lists import EMPTY
from subzero.encoders.ranges.table import RangeRules
from subzero.encoders.ranges.terms import ABS, TERM, Shape, abs_terms, unit_boxes, unit_abs
from subzero.errors import LineageError
from subzero.pairs import ptr_from_counts

__all__ = ["serialize", "deserialize"]


#: first byte of every table; the second is the version, with ``_ZLIB`` set when compressed
_MAGIC, _VERSION, _ZLIB = 0xA7, 1, 0x80


def serialize(table: RangeRules) -> bytes:
    """The bytes of ``table`` (see the module docstring for the layout), computed once per table.

    Examples
    --------
    >>> from subzero.encoders.ranges import compress, demo_pairs
    >>> r = compress(demo_pairs(), (8,), [(8,)])
    >>> deserialize(serialize(r)).equals(r)
    True
    """
    data = table.memo.get("bytes")
    if not isinstance(data, bytes):
        data = table.memo["bytes"] = _serialize(table)
    return data


def _serialize(table: RangeRules) -> bytes:
    w = _Writer()
    w.shape(table.out_shape)
    w.varint(table.n_inputs)
    for s in table.in_shapes:
        w.shape(s)
    w.varint(table.n_rules)
    unit = unit_boxes(table.out_lo, table.out_hi)
    w.column(np.bincount(table.box_rule[unit], minlength=table.n_rules))
    w.column(np.bincount(table.box_rule[~unit], minlength=table.n_rules))
    w.column(flat_ids(table.out_lo[unit], table.out_shape) if unit.any() else EMPTY)
    for j in range(len(table.out_shape)):
        w.column(table.out_lo[~unit, j])
    for j in range(len(table.out_shape)):
        w.column(table.out_hi[~unit, j] - table.out_lo[~unit, j])
    for i, (t, shape) in enumerate(zip(table.terms, table.in_shapes)):
        rule = table.term_rule(i)
        unit = unit_abs(t) if t.size else np.zeros(len(t), bool)
        gen = t[~unit]
        flags = (1 if np.all(gen["ref"] == ABS) else 0) | (2 if np.all((gen["mul"] == 1) & (gen["div"] == 1)) else 0)
        w.varint(flags)
        w.column(np.bincount(rule[unit], minlength=table.n_rules))
        w.column(np.bincount(rule[~unit], minlength=table.n_rules))
        w.column(flat_ids(t["a"][unit], shape) if unit.any() else EMPTY)
        for j in range(len(shape)):
            if not flags & 1:
                w.column(gen["ref"][:, j].astype(np.int64))
            if not flags & 2:
                w.column(gen["mul"][:, j])
                w.column(gen["div"][:, j])
            w.column(gen["a"][:, j])
            w.column(gen["b"][:, j] - gen["a"][:, j])
    body = w.getvalue()
    head = bytes([_MAGIC, _VERSION])
    if len(body) > 64:
        packed = zlib.compress(body, 6)
        if len(packed) < len(body):
            return bytes([_MAGIC, _VERSION | _ZLIB]) + packed
    return head + body


def deserialize(buf: bytes) -> RangeRules:
    """The table `serialize` wrote; a `subzero.LineageError` for anything else."""
    if len(buf) < 2 or buf[0] != _MAGIC or (buf[1] & ~_ZLIB) != _VERSION:
        raise LineageError("not a range-rules byte string (bad magic or version)")
    try:
        body = zlib.decompress(bytes(buf[2:])) if buf[1] & _ZLIB else bytes(buf[2:])
        return _read(_Reader(body))
    except (zlib.error, IndexError) as exc:
        raise LineageError(f"range-rules byte string is corrupt ({exc})") from None


def _read(r: "_Reader") -> RangeRules:
    out_shape = r.shape()
    in_shapes = tuple(r.shape() for _ in range(r.varint()))
    n = r.varint()
    d_out = len(out_shape)
    n_unit, n_gen = r.column(n), r.column(n)
    unit_ids = r.column(int(n_unit.sum()))
    m = int(n_gen.sum())
    g_lo = np.stack([r.column(m) for _ in range(d_out)], axis=1).reshape(m, d_out)
    g_ext = np.stack([r.column(m) for _ in range(d_out)], axis=1).reshape(m, d_out)
    u_lo = to_coords(unit_ids, out_shape)
    rule = np.concatenate([np.repeat(np.arange(n), n_unit), np.repeat(np.arange(n), n_gen)])
    order = np.argsort(rule, kind="stable")
    lo = np.concatenate([u_lo, g_lo])[order]
    hi = np.concatenate([u_lo + 1, g_lo + g_ext])[order]
    ptrs, terms = [], []
    for shape in in_shapes:
        d = len(shape)
        flags = r.varint()
        t_unit, t_gen = r.column(n), r.column(n)
        ids = r.column(int(t_unit.sum()))
        k = int(t_gen.sum())
        gen = np.zeros((k, d), TERM)
        for j in range(d):
            gen["ref"][:, j] = ABS if flags & 1 else r.column(k)
            if not flags & 2:
                gen["mul"][:, j], gen["div"][:, j] = r.column(k), r.column(k)
            else:
                gen["mul"][:, j], gen["div"][:, j] = 1, 1
            gen["a"][:, j] = r.column(k)
            gen["b"][:, j] = gen["a"][:, j] + r.column(k)
        unit = abs_terms(to_coords(ids, shape), to_coords(ids, shape) + 1)
        trule = np.concatenate([np.repeat(np.arange(n), t_unit), np.repeat(np.arange(n), t_gen)])
        order = np.argsort(trule, kind="stable")
        terms.append(np.concatenate([unit, gen])[order])
        ptrs.append(ptr_from_counts(t_unit + t_gen))
    if not r.done():
        raise LineageError("range-rules byte string has trailing bytes (corrupt?)")
    return RangeRules(out_shape, in_shapes, ptr_from_counts(n_unit + n_gen), lo, hi, tuple(ptrs), tuple(terms))


class _Writer:
    """Varints and integer columns (length known to the reader)."""

    def __init__(self):
        self.parts: list[bytes] = []

    def getvalue(self) -> bytes:
        return b"".join(self.parts)

    def varint(self, v: int) -> None:
        self.parts.append(_varint(v))

    def shape(self, shape: Shape) -> None:
        self.varint(len(shape))
        for n in shape:
            self.varint(n)

    def column(self, v: np.ndarray) -> None:
        """Mode byte ``mode << 4 | width``: 0 constant, 1 frame of reference, 2 deltas."""
        v = np.asarray(v, np.int64)
        if len(v) == 0:
            return
        lo, hi = int(v.min()), int(v.max())
        if lo == hi:
            self.parts.append(bytes([0]) + _varint(_zigzag(lo)))
            return
        width = _width(hi - lo)
        best = (width * len(v), 1, lo, width, v)
        if len(v) > 2:
            d = np.diff(v)
            dlo, dhi = int(d.min()), int(d.max())
            dw = _width(dhi - dlo) if dhi > dlo else 0
            if dw * (len(v) - 1) + 4 < best[0]:
                best = (dw * (len(v) - 1), 2, dlo, dw, d)
        _, mode, base, width, data = best
        head = bytes([mode << 4 | width])
        if mode == 1:
            self.parts.append(head + _varint(_zigzag(base)) + _pack(data - base, width))
        else:
            self.parts.append(head + _varint(_zigzag(int(v[0]))) + _varint(_zigzag(base)) + _pack(data - base, width))


class _Reader:
    def __init__(self, buf: bytes):
        self.buf = buf
        self.pos = 0

    def done(self) -> bool:
        return self.pos == len(self.buf)

    def varint(self) -> int:
        shift, value = 0, 0
        while True:
            if self.pos >= len(self.buf):
                raise LineageError("range-rules byte string is truncated")
            byte = self.buf[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value

    def shape(self) -> Shape:
        return tuple(self.varint() for _ in range(self.varint()))

    def column(self, n: int) -> np.ndarray:
        if n == 0:
            return np.empty(0, np.int64)
        head = self.buf[self.pos]
        self.pos += 1
        mode, width = head >> 4, head & 0x0F
        if mode == 0:
            return np.full(n, _unzigzag(self.varint()), np.int64)
        if mode == 1:
            base = _unzigzag(self.varint())
            return self._unpack(n, width) + base
        first, base = _unzigzag(self.varint()), _unzigzag(self.varint())
        d = self._unpack(n - 1, width) + base if width else np.full(n - 1, base, np.int64)
        out = np.empty(n, np.int64)
        out[0] = first
        np.cumsum(d, out=out[1:])
        out[1:] += first
        return out

    def _unpack(self, n: int, width: int) -> np.ndarray:
        end = self.pos + n * width
        if end > len(self.buf):
            raise LineageError("range-rules byte string is truncated")
        raw = np.frombuffer(self.buf, np.uint8, n * width, self.pos).reshape(n, width)
        self.pos = end
        full = np.zeros((n, 8), np.uint8)
        full[:, :width] = raw
        return full.view("<u8").reshape(n).astype(np.int64)


def _pack(v: np.ndarray, width: int) -> bytes:
    if width == 0:
        return b""
    return np.ascontiguousarray(v.astype("<u8").view(np.uint8).reshape(-1, 8)[:, :width]).tobytes()


def _width(span: int) -> int:
    return max(1, (int(span).bit_length() + 7) // 8)


def _zigzag(v: int) -> int:
    return (v << 1) if v >= 0 else ((-v << 1) - 1)


def _unzigzag(v: int) -> int:
    return (v >> 1) if not v & 1 else -((v + 1) >> 1)


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        byte = v & 0x7F
        v >>= 7
        if v:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)

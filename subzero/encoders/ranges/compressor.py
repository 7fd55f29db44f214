"""Compression: region pairs -> range rules.

Pairs with one out cell are grouped by their relative pattern: per input axis a
reference (absolute, or relative to one output axis, possibly negated, strided or
repeated) is chosen on a sample of out cells as the one giving the fewest distinct
patterns; each pattern's out cells are covered by boxes and the pattern by terms.
Pairs of many out cells become rules of absolute terms.  Everything is vectorized: loops
run over inputs, axes and candidate references, never over cells or pairs.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from subzero.boxes import cover_coords, cover_ids
from subzero.cells import to_coords
from subzero.encoders.ranges.codec import serialize
from subzero.encoders.ranges.lists import box_cells, csr_gather, group_lists, mix, segment_sums
from subzero.encoders.ranges.table import RangeRules
from subzero.encoders.ranges.terms import ABS, TERM, Shape, abs_terms, check_shapes
from subzero.errors import LineageError
from subzero.pairs import FullPairs, owners, ptr_from_counts

__all__ = ["compress", "explicit", "fullmany_nbytes", "demo_pairs"]

#: offsets of one input cell are coded as one int64 key when their ranges multiply below
#: this; beyond (arrays of ~2**60 cells) the distinct offset rows are numbered instead
KEY_SPAN = 1 << 62


def compress(pairs: FullPairs, out_shape: Shape, in_shapes: Sequence[tuple[int, ...]], *,
             sample: int = 256) -> RangeRules:
    """Compress region pairs into range rules (exact: same lineage as ``pairs``).

    Pairs with one out cell (the usual explicit or mapping-derived lineage) are grouped
    by their relative pattern: per input axis the reference (absolute, or relative to
    one output axis, possibly negated, strided or repeated) is chosen on a sample of out
    cells as the one giving the fewest distinct patterns; the out cells of each pattern
    are covered by boxes and the pattern by terms.  Pairs of many out cells become
    rules of absolute terms.  When the result would be larger than explicit cell sets,
    `explicit` is returned instead.

    Parameters
    ----------
    pairs
        One tile's (or node's) region pairs, flat cell ids.
    out_shape, in_shapes
        The array shapes the ids refer to.
    sample
        How many out cells choose the references.

    Examples
    --------
    >>> r = compress(demo_pairs(), (8,), [(8,)])   # a 3-wide stencil, clipped at the edges
    >>> r.n_rules, len(serialize(r)) < 60
    (3, True)
    """
    out_shape, in_shapes = check_shapes(out_shape, in_shapes)
    _check_pairs(pairs, out_shape, in_shapes)
    n_out = np.diff(pairs.out_ptr)
    single = n_out == 1
    parts = [RangeRules.empty(out_shape, in_shapes)]
    if single.any():
        parts.append(_compress_cellwise(pairs if single.all() else pairs.select(single), out_shape, in_shapes, sample))
    multi = n_out > 1
    if multi.any():
        parts.append(_absolute_rules(pairs.select(multi), out_shape, in_shapes))
    table = RangeRules.concat([p for p in parts if p.n_rules] or parts[:1])
    if len(serialize(table)) > fullmany_nbytes(pairs) // 2:
        plain = explicit(pairs, out_shape, in_shapes)
        if len(serialize(plain)) < len(serialize(table)):
            return plain
    return table


def explicit(pairs: FullPairs, out_shape: Shape, in_shapes: Sequence[tuple[int, ...]]) -> RangeRules:
    """Region pairs as rules of absolute cell sets, one rule per pair (no relative
    ranges): the fallback for irregular lineage.  Never larger than the FullMany
    encoding of the same pairs, but for a header of a few dozen bytes.

    Examples
    --------
    >>> explicit(demo_pairs(), (8,), [(8,)]).n_rules
    8
    """
    out_shape, in_shapes = check_shapes(out_shape, in_shapes)
    _check_pairs(pairs, out_shape, in_shapes)
    return _absolute_rules(pairs, out_shape, in_shapes)


def fullmany_nbytes(pairs: FullPairs) -> int:
    """Bytes of the FullMany encoding of ``pairs`` (8-byte key and `pack_groups` value
    per pair), computed from the counts: what range rules must never exceed."""
    sides = [(pairs.out_ids, pairs.out_ptr)] + list(zip(pairs.in_ids, pairs.in_ptr))
    total = pairs.n_pairs * (8 + 1 + len(sides))
    for ids, ptr in sides:
        width = 8 if len(ids) and int(ids.max()) >= (1 << 32) else 4
        total += 4 * pairs.n_pairs + width * len(ids)
    return total


def _absolute_rules(pairs: FullPairs, out_shape: Shape, in_shapes) -> RangeRules:
    n = pairs.n_pairs
    g, lo, hi = cover_ids(pairs.out_ids, out_shape, groups=owners(pairs.out_ptr))
    g, lo, hi = _split_small(g, lo, hi)
    term_rule, terms = [], []
    for ids, ptr, shape in zip(pairs.in_ids, pairs.in_ptr, in_shapes):
        tg, tlo, thi = cover_ids(ids, shape, groups=owners(ptr))
        tg, tlo, thi = _split_small(tg, tlo, thi)
        term_rule.append(tg)
        terms.append(abs_terms(tlo, thi))
    return RangeRules.build(out_shape, in_shapes, n, g, lo, hi, term_rule, terms)


def _compress_cellwise(pairs: FullPairs, out_shape: Shape, in_shapes, sample: int) -> RangeRules:
    """Pairs of one out cell each: group out cells by relative pattern."""
    out = pairs.out_ids
    if len(out) > 1 and not np.all(out[1:] > out[:-1]):
        cells, owner_of_pair = np.unique(out, return_inverse=True)
        owner_of_pair = owner_of_pair.reshape(-1)
        regroup = True
    else:
        cells, owner_of_pair, regroup = out, None, False
    n_cells = len(cells)
    out_cols = _columns(cells, out_shape)
    slots = []
    for ids, ptr, shape in zip(pairs.in_ids, pairs.in_ptr, in_shapes):
        if regroup:
            own = owner_of_pair[owners(ptr)]
            order = np.argsort(own, kind="stable")
            ids = ids[order]
            ptr = ptr_from_counts(np.bincount(own, minlength=n_cells))
        slots.append(_Slot(ptr, ids, shape, out_cols, out_shape, sample))
    label = group_lists([(s.keys[:, None], s.ptr) for s in slots], n_cells)
    n_groups = int(label.max()) + 1 if n_cells else 0
    rep = np.zeros(n_groups, np.int64)
    rep[label[::-1]] = np.arange(n_cells)[::-1]  # first cell of each group
    size = np.bincount(label, minlength=n_groups)
    g, lo, hi = cover_ids(cells, out_shape, groups=label)
    g, lo, hi = _split_small(g, lo, hi)
    shared, alone = np.flatnonzero(size > 1), np.flatnonzero(size == 1)
    term_rule, terms = [], []
    for s in slots:
        r, t = s.pattern_terms(rep[shared])
        # a pattern of one out cell is stored absolute (flat cell ids, mergeable across tiles)
        ar, alo, ahi = _split_small(*s.absolute_boxes(rep[alone]))
        term_rule.append(np.concatenate([shared[r], alone[ar]]))
        terms.append(np.concatenate([t, abs_terms(alo, ahi)]))
    return RangeRules.build(out_shape, in_shapes, n_groups, g, lo, hi, term_rule, terms)


def _columns(ids: np.ndarray, shape: Shape) -> list[np.ndarray]:
    """Per-axis coordinate columns of flat ids (1-D arrays: faster than an (N, d) array)."""
    cols, rest = [], np.asarray(ids, np.int64)
    for n in reversed(shape[1:]):
        q = rest // int(n)  # a scalar divisor: much faster than np.divmod
        cols.append(rest - q * int(n))
        rest = q
    cols.append(rest)
    return cols[::-1]


class _Slot:
    """One input's lineage rows of cellwise pairs (CSR ``ptr`` over out cells): the
    chosen references and, per out cell, the sorted unique keys of its input cells
    transformed by the references (mixed-radix codes of the offsets)."""

    def __init__(self, ptr: np.ndarray, ids: np.ndarray, shape: Shape, out_cols: list[np.ndarray],
                 out_shape: Shape, sample: int):
        n_cells = len(ptr) - 1
        counts = np.diff(ptr)
        self.ids, self.ids_ptr, self.shape = ids, ptr, shape
        cols = _columns(ids, shape)
        self.refs = _choose_refs(ptr, cols, out_cols, out_shape, shape, sample)
        v = []
        for j, c in enumerate(cols):
            ref, mul, div = int(self.refs[0][j]), int(self.refs[1][j]), int(self.refs[2][j])
            v.append(c if ref == ABS else c - np.repeat((mul * out_cols[ref]) // div, counts))
        if len(ids):
            self.vmin = np.array([x.min() for x in v], np.int64)
            radix = np.array([x.max() for x in v], np.int64) - self.vmin + 1
        else:
            self.vmin, radix = np.zeros(len(shape), np.int64), np.ones(len(shape), np.int64)
        self.radix = tuple(int(r) for r in radix)
        if int(np.prod(self.radix, dtype=object)) < KEY_SPAN:
            self.table = None
            keys = np.zeros(len(ids), np.int64)
            for x, lo, r in zip(v, self.vmin, self.radix):
                keys *= r
                keys += x - lo
        else:  # huge ranges: number the distinct rows instead
            self.table, keys = np.unique(np.stack(v, axis=1), axis=0, return_inverse=True)
            keys = keys.reshape(-1).astype(np.int64)
        own = None
        if len(keys) > 1:
            starts = np.zeros(len(keys), bool)
            starts[ptr[:-1][counts > 0]] = True
            down = keys[1:] <= keys[:-1]
            down &= ~starts[1:]
            if down.any():  # unsorted or repeated within a cell
                own = owners(ptr)
                if np.any(down & (keys[1:] < keys[:-1])):
                    order = np.lexsort((keys, own))
                    keys = keys[order]
                keep = np.r_[True, (keys[1:] != keys[:-1]) | starts[1:]]
                keys, own = keys[keep], own[keep]
        self.keys = keys
        self.ptr = ptr if own is None else ptr_from_counts(np.bincount(own, minlength=n_cells))

    def decode(self, keys: np.ndarray) -> np.ndarray:
        if self.table is not None:
            return self.table[keys]
        return to_coords(keys, self.radix) + self.vmin

    def absolute_boxes(self, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(index into cells, lo, hi)``: a cover of each out cell's input cells."""
        pos, ptr = csr_gather(self.ids_ptr, cells)
        return cover_ids(self.ids[pos], self.shape, groups=owners(ptr))

    def pattern_terms(self, rep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Terms of each group's pattern (that of its representative cell)."""
        pos, ptr = csr_gather(self.ptr, rep)
        group = owners(ptr)
        v = self.decode(self.keys[pos])
        if self.table is None:  # keys sorted per cell: rows already in lexicographic order
            lo, hi = cover_coords(np.concatenate([group[:, None], v - self.vmin], axis=1), fixed=1)
            g, lo, hi = lo[:, 0].copy(), lo[:, 1:] + self.vmin, hi[:, 1:] + self.vmin
        else:
            shift = v.min(axis=0) if len(v) else 0
            rows = np.unique(np.concatenate([group[:, None], v - shift], axis=1), axis=0)
            lo, hi = cover_coords(rows, fixed=1)
            g, lo, hi = lo[:, 0].copy(), lo[:, 1:] + shift, hi[:, 1:] + shift
        terms = np.zeros(lo.shape, TERM)
        terms["ref"], terms["mul"], terms["div"] = self.refs[0], self.refs[1], self.refs[2]
        terms["a"], terms["b"] = lo, hi
        return g, terms


def _choose_refs(ptr: np.ndarray, cols: list[np.ndarray], out_cols: list[np.ndarray],
                 out_shape: Shape, shape: Shape, sample: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per input axis ``(ref, mul, div)``: the reference under which a sample of out
    cells shows the fewest distinct patterns along that axis (ties: the earlier candidate)."""
    n_cells = len(ptr) - 1
    d_in = len(shape)
    refs = (np.full(d_in, ABS, np.int8), np.ones(d_in, np.int64), np.ones(d_in, np.int64))
    if n_cells == 0 or ptr[-1] == 0:
        return refs
    # a seeded random sample: evenly spaced picks alias with the tile's width (a 256-wide tile
    # sampled every 257 cells is its diagonal, where every output axis looks alike)
    picks = np.sort(np.random.default_rng(n_cells).choice(n_cells, min(sample, n_cells), replace=False))
    pos, sptr = csr_gather(ptr, picks)
    row_owner = picks[owners(sptr)]
    o = [col[row_owner] for col in out_cols]
    for j in range(d_in):
        c = cols[j][pos]
        best = None
        for ref, mul, div in _candidates(j, out_shape, shape):
            base = (mul * o[ref]) // div if ref != ABS else 0
            h = mix((c - base).astype(np.uint64))
            n_distinct = len(np.unique(segment_sums(h, sptr)))
            if best is None or n_distinct < best[0]:
                best = (n_distinct, ref, mul, div)
                if n_distinct == 1:
                    break
        refs[0][j], refs[1][j], refs[2][j] = best[1:]
    return refs


def _candidates(j: int, out_shape: Shape, shape: Shape) -> list[tuple[int, int, int]]:
    """References to try for input axis ``j``, most natural first."""
    d_out = len(out_shape)
    cands = [(j, 1, 1)] if j < d_out else []
    cands.append((ABS, 1, 1))
    cands += [(k, 1, 1) for k in range(d_out) if k != j]
    cands += [(k, -1, 1) for k in range(d_out)]
    for k in range(d_out):
        n_in, n_out = shape[j], max(out_shape[k], 1)
        for f in sorted({n_in // n_out, -(-n_in // n_out)}):
            if f >= 2:
                cands += [(k, f, 1), (k, -f, 1)]
        for f in sorted({n_out // max(n_in, 1), -(-n_out // max(n_in, 1))}):
            if f >= 2:
                cands += [(k, 1, f), (k, -1, f)]
    return cands


def _split_small(g: np.ndarray, lo: np.ndarray, hi: np.ndarray, max_cells: int = 2):
    """Boxes of at most ``max_cells`` cells as unit boxes (stored as flat ids, which is
    never more bytes than a box's corner and extents)."""
    size = np.prod(hi - lo, axis=1) if lo.shape[1] else np.ones(len(lo), np.int64)
    small = (size > 1) & (size <= max_cells)
    if not small.any():
        return g, lo, hi
    b, cells = box_cells(lo[small], hi[small])
    return (np.concatenate([g[~small], g[small][b]]), np.concatenate([lo[~small], cells]),
            np.concatenate([hi[~small], cells + 1]))


def _check_pairs(pairs: FullPairs, out_shape: Shape, in_shapes) -> None:
    if pairs.n_inputs != len(in_shapes):
        raise LineageError(f"pairs have {pairs.n_inputs} input(s) but {len(in_shapes)} input shape(s) were given")
    sides = [("output", pairs.out_ids, out_shape)] + [(f"input {i}", a, s) for i, (a, s) in
                                                      enumerate(zip(pairs.in_ids, in_shapes))]
    for what, ids, shape in sides:
        if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= int(np.prod(shape))):
            bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
            raise LineageError(f"pairs name {what} cell id {bad}, outside the array of shape {shape} "
                               f"(ids are flat C-order indices in [0, {int(np.prod(shape))}))")


def demo_pairs(n: int = 8) -> FullPairs:
    """``n`` out cells of a 1-D array, each reading itself and its neighbours (a 3-wide
    stencil clipped at the edges): the docstring examples' lineage."""
    cells = np.arange(n)
    ins = cells[:, None] + np.array([-1, 0, 1])
    keep = (ins >= 0) & (ins < n)
    return FullPairs(cells, np.arange(n + 1), (ins[keep],), (ptr_from_counts(keep.sum(axis=1)),))

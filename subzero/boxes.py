"""Box sets: cell sets held as unions of half-open boxes, handled with numpy only.

A box set is ``(lo, hi)``, two ``(N, ndim)`` int64 arrays: box ``k`` holds the cells
``c`` with ``lo[k] <= c < hi[k]`` on every axis.  Boxes may overlap unless a function
says it returns a disjoint cover.  A cell is a flat int64 id (``np.ravel_multi_index``,
C order) or a coordinate row, as everywhere in subzero.

Every function is vectorized over boxes and cells: loops run over axes or over a
handful of size classes, never over cells.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from subzero.cells import to_coords, to_ids, unique_ids
from subzero.errors import LineageError

__all__ = [
    "check_boxes", "cover_ids", "cover_coords", "ids_in_boxes", "count_cells", "boxes_intersect",
    "coalesce", "normalize", "BoxIndex", "lexsort", "unique_boxes",
]

Shape = tuple[int, ...]


def check_boxes(lo: ArrayLike, hi: ArrayLike, shape: Shape | None = None,
                where: str = "boxes") -> tuple[np.ndarray, np.ndarray]:
    """Validate a box set and return it as two ``(N, ndim)`` int64 arrays.

    A single box may be given as two 1-D coordinate rows.  Raises
    `subzero.LineageError` when the two arrays disagree in shape, the rank is not the
    array's, a box has ``lo > hi`` on some axis, or a box leaves ``[0, shape)``.

    Examples
    --------
    >>> lo, hi = check_boxes([0, 1], [2, 3], (4, 4))
    >>> lo.tolist(), hi.tolist()
    ([[0, 1]], [[2, 3]])
    """
    try:
        lo, hi = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
    except (TypeError, ValueError):
        raise LineageError(f"{where}: lo and hi must be integer coordinate arrays") from None
    if lo.ndim == 1 and hi.ndim == 1:
        lo, hi = lo.reshape(1, -1), hi.reshape(1, -1)
    ndim = len(shape) if shape is not None else (lo.shape[1] if lo.ndim == 2 else -1)
    if lo.ndim != 2 or lo.shape != hi.shape:
        raise LineageError(f"{where}: lo and hi must both be (N, ndim) arrays of one shape, "
                           f"got {lo.shape} and {hi.shape}")
    if lo.shape[1] != ndim and not (len(lo) == 0 and lo.shape[1] == 0):
        raise LineageError(f"{where}: boxes of rank {lo.shape[1]} for an array of rank {ndim} "
                           f"(shape {tuple(shape) if shape is not None else '?'}); pass one lo/hi column per axis")
    if len(lo) == 0:
        return lo.reshape(0, ndim), hi.reshape(0, ndim)
    bad = np.any(lo > hi, axis=1)
    if bad.any():
        k = int(np.argmax(bad))
        raise LineageError(f"{where}: box {k} has lo {lo[k].tolist()} > hi {hi[k].tolist()} on some axis; "
                           "boxes are half-open [lo, hi) with lo <= hi")
    if shape is not None:
        n = np.asarray(shape, np.int64)
        out = np.any((lo < 0) | (hi > n), axis=1)
        if out.any():
            k = int(np.argmax(out))
            raise LineageError(f"{where}: box {k} [{lo[k].tolist()}, {hi[k].tolist()}) leaves the array of "
                               f"shape {tuple(shape)}; valid boxes have 0 <= lo <= hi <= shape")
    return lo, hi


def count_cells(lo: np.ndarray, hi: np.ndarray) -> int:
    """Cells in a set of *disjoint* boxes.

    Examples
    --------
    >>> count_cells(np.array([[0, 0], [2, 0]]), np.array([[2, 3], [3, 1]]))
    7
    """
    lo, hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
    if len(lo) == 0:
        return 0
    return int(np.prod(np.maximum(hi - lo, 0), axis=1).sum())


# -- covers: cell sets -> few disjoint boxes ------------------------------------------
def cover_coords(coords: np.ndarray, fixed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A disjoint box cover of sorted, unique coordinate rows (lexicographic order).

    Runs along the last axis, then runs of identical boxes along each earlier axis in
    turn.  Axes before ``fixed`` are never merged: give a group label as leading
    column(s) and ``fixed=1`` to cover many groups at once without mixing them.

    Examples
    --------
    >>> lo, hi = cover_coords(np.array([[0, 0], [0, 1], [1, 0], [1, 1], [2, 5]]))
    >>> lo.tolist(), hi.tolist()
    ([[0, 0], [2, 5]], [[2, 2], [3, 6]])
    """
    coords = np.asarray(coords, np.int64)
    n, ndim = coords.shape
    if n == 0 or ndim == 0:
        return coords.reshape(0, ndim).copy(), coords.reshape(0, ndim).copy()
    if ndim == 2 and fixed == 0:
        return _cover_rows(coords[:, 0], coords[:, 1])
    step = coords[1:, -1] != coords[:-1, -1] + 1
    if ndim > 1:
        step |= np.any(coords[1:, :-1] != coords[:-1, :-1], axis=1)
    starts = np.flatnonzero(np.r_[True, step])
    ends = np.r_[starts[1:], n] - 1
    lo = coords[starts]
    hi = lo + 1
    hi[:, -1] = coords[ends, -1] + 1
    for axis in range(ndim - 2, fixed - 1, -1):
        lo, hi = _merge_along(lo, hi, axis)
    return lo, hi


def _cover_rows(r: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`cover_coords` of sorted unique 2-D cells ``(r, c)``, the same boxes in the same order:
    the runs along each row, then those of equal columns on consecutive rows merged (one
    `numpy.lexsort` by columns, then row, instead of the general axis-by-axis merge)."""
    n = len(r)
    step = np.empty(n, bool)  # a run starts here (`np.r_` costs more than the rest on small inputs)
    step[0] = True
    np.not_equal(c[1:], c[:-1] + 1, out=step[1:])
    step[1:] |= r[1:] != r[:-1]
    starts = np.flatnonzero(step)
    ends = np.empty_like(starts)
    ends[:-1], ends[-1] = starts[1:] - 1, n - 1
    row, c0, c1 = r[starts], c[starts], c[ends] + 1
    order = np.lexsort((row, c1, c0))  # as `_merge_along` orders them: first column, last column, row
    row, c0, c1 = row[order], c0[order], c1[order]
    new = np.empty(len(row), bool)
    new[0] = True
    new[1:] = (c0[1:] != c0[:-1]) | (c1[1:] != c1[:-1]) | (row[1:] != row[:-1] + 1)
    first = np.flatnonzero(new)
    last = np.empty_like(first)
    last[:-1], last[-1] = first[1:] - 1, len(row) - 1
    lo = np.empty((len(first), 2), np.int64)
    hi = np.empty((len(first), 2), np.int64)
    lo[:, 0], lo[:, 1] = row[first], c0[first]
    hi[:, 0], hi[:, 1] = row[last] + 1, c1[first]
    return lo, hi


def lexsort(keys: list[np.ndarray]) -> np.ndarray:
    """``np.lexsort(keys)`` (last key primary), faster: constant keys are dropped and
    the others packed, mixed-radix, into as few int64 keys as their ranges allow.

    Examples
    --------
    >>> lexsort([np.array([3, 1, 2]), np.array([1, 0, 1])]).tolist()
    [1, 2, 0]
    """
    keys = [np.asarray(k, np.int64) for k in keys]
    n = len(keys[0]) if keys else 0
    if n < 2:
        return np.arange(n)
    packed, current, span = [], None, 1
    for k in reversed(keys):  # primary first
        lo, hi = int(k.min()), int(k.max())
        if lo == hi:
            continue
        r = hi - lo + 1
        if current is not None and span * r < (1 << 62):
            current = current * r + (k - lo)
            span *= r
        else:
            if current is not None:
                packed.append(current)
            current, span = k - lo, r
    if current is None:
        return np.arange(n)
    packed.append(current)
    if len(packed) == 1:
        return np.argsort(packed[0], kind="stable")
    return np.lexsort(packed[::-1])


def _merge_along(lo: np.ndarray, hi: np.ndarray, axis: int, groups: np.ndarray | None = None):
    """Merge boxes that touch along ``axis`` and agree on every other axis (and group)."""
    ndim = lo.shape[1]
    others = [k for k in range(ndim) if k != axis]
    keys = [lo[:, axis]] + [hi[:, k] for k in reversed(others)] + [lo[:, k] for k in reversed(others)]
    if groups is not None:
        keys.append(groups)
    order = lexsort(keys)
    lo, hi = lo[order], hi[order]
    g = groups[order] if groups is not None else None
    same = np.all(lo[1:, others] == lo[:-1, others], axis=1) & np.all(hi[1:, others] == hi[:-1, others], axis=1)
    same &= lo[1:, axis] == hi[:-1, axis]
    if g is not None:
        same &= g[1:] == g[:-1]
    starts = np.flatnonzero(np.r_[True, ~same])
    ends = np.r_[starts[1:], len(lo)] - 1
    new_lo, new_hi = lo[starts], hi[starts].copy()
    new_hi[:, axis] = hi[ends, axis]
    if groups is None:
        return new_lo, new_hi
    return new_lo, new_hi, g[starts]


def cover_ids(ids: np.ndarray, shape: Shape, groups: np.ndarray | None = None) -> Any:
    """An exact, disjoint cover of a set of flat cell ids by few boxes.

    Without ``groups``: returns ``(lo, hi)``.  With ``groups`` (one int label per id):
    covers each group separately and returns ``(group, lo, hi)``, one label per box.
    Ids need not be sorted; duplicates are fine.

    Examples
    --------
    >>> lo, hi = cover_ids(np.array([0, 1, 2, 4, 5, 6, 7]), (2, 4))
    >>> lo.tolist(), hi.tolist()
    ([[0, 0], [1, 0]], [[1, 3], [2, 4]])
    >>> g, lo, hi = cover_ids(np.array([0, 1, 4, 5]), (2, 4), groups=np.array([0, 0, 1, 1]))
    >>> g.tolist(), lo.tolist()
    ([0, 1], [[0, 0], [1, 0]])
    """
    ids = np.asarray(ids, np.int64)
    if not len(shape):  # a 0-d array: its one cell is the empty box
        n = 1 if len(ids) else 0
        z = np.zeros((n, 0), np.int64)
        return (z, z.copy()) if groups is None else (np.asarray(groups, np.int64)[:n], z, z.copy())
    if groups is None:
        if len(ids) > 1 and not np.all(ids[1:] > ids[:-1]):
            ids = np.unique(ids)
        return cover_coords(to_coords(ids, shape))
    groups = np.asarray(groups, np.int64)
    if len(ids) > 1 and not np.all((groups[1:] > groups[:-1]) | ((groups[1:] == groups[:-1]) & (ids[1:] > ids[:-1]))):
        order = lexsort([ids, groups])
        groups, ids = groups[order], ids[order]
        keep = np.r_[True, (groups[1:] != groups[:-1]) | (ids[1:] != ids[:-1])]
        groups, ids = groups[keep], ids[keep]
    coords = np.concatenate([groups[:, None], to_coords(ids, shape)], axis=1)
    lo, hi = cover_coords(coords, fixed=1)
    return lo[:, 0].copy(), lo[:, 1:], hi[:, 1:]


# -- boxes -> cells -------------------------------------------------------------------
def ids_in_boxes(lo: np.ndarray, hi: np.ndarray, shape: Shape) -> np.ndarray:
    """Sorted unique flat ids of the cells of a box set (boxes may overlap).

    Examples
    --------
    >>> ids_in_boxes(np.array([[0, 0], [0, 1]]), np.array([[1, 2], [2, 3]]), (2, 3)).tolist()
    [0, 1, 2, 4, 5]
    """
    if not len(shape):
        return np.zeros(1 if len(np.asarray(lo)) else 0, np.int64)
    lo, hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
    ext = np.maximum(hi - lo, 0)
    keep = np.all(ext > 0, axis=1)
    lo, ext = lo[keep], ext[keep]
    if len(lo) == 0:
        return np.empty(0, np.int64)
    if len(lo) == 1:  # one box (a brush, a stencil around one): an outer sum of each axis's offsets, in C order
        strides = np.cumprod((1,) + tuple(shape[:0:-1]))[::-1]
        cells = np.zeros((), np.int64)
        for a in range(len(shape)):
            cells = np.add.outer(cells, (np.arange(ext[0, a], dtype=np.int64) + lo[0, a]) * int(strides[a]))
        return cells.reshape(-1)
    run = ext[:, -1]
    rows = np.prod(ext[:, :-1], axis=1)
    # one run along the last axis per row of each box
    box_of_row = np.repeat(np.arange(len(lo)), rows)
    local = np.arange(len(box_of_row), dtype=np.int64) - np.repeat(np.cumsum(rows) - rows, rows)
    starts = np.empty((len(box_of_row), lo.shape[1]), np.int64)
    starts[:, -1] = lo[box_of_row, -1]
    for axis in range(lo.shape[1] - 2, -1, -1):
        e = ext[box_of_row, axis]
        starts[:, axis] = lo[box_of_row, axis] + local % e
        local //= e
    first = to_ids(starts, shape)
    lens = run[box_of_row]
    total = int(lens.sum())
    cells = np.repeat(first - np.cumsum(lens) + lens, lens) + np.arange(total, dtype=np.int64)
    if len(lo) == 1:
        return cells
    return unique_ids(cells, int(np.prod(shape)))


def normalize(lo: np.ndarray, hi: np.ndarray, shape: Shape) -> tuple[np.ndarray, np.ndarray]:
    """A disjoint cover of the union of possibly overlapping boxes (costs its cells).

    Examples
    --------
    >>> lo, hi = normalize(np.array([[0, 0], [0, 1]]), np.array([[2, 2], [2, 3]]), (2, 3))
    >>> lo.tolist(), hi.tolist()
    ([[0, 0]], [[2, 3]])
    """
    return cover_ids(ids_in_boxes(lo, hi, shape), shape)


def coalesce(lo: np.ndarray, hi: np.ndarray, groups: np.ndarray | None = None, rounds: int = 8) -> Any:
    """Merge boxes that touch along one axis and agree on all others, until nothing
    merges (at most ``rounds`` sweeps over the axes); drops empty and repeated boxes.
    The union (per group) is unchanged; it costs the boxes, not their cells.

    Returns ``(lo, hi)``, or ``(lo, hi, groups)`` when ``groups`` is given.

    Examples
    --------
    >>> lo, hi = coalesce(np.array([[0, 0], [0, 2], [1, 0]]), np.array([[1, 2], [1, 4], [2, 4]]))
    >>> lo.tolist(), hi.tolist()
    ([[0, 0]], [[2, 4]])
    """
    lo, hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
    keep = np.all(hi > lo, axis=1)
    lo, hi = lo[keep], hi[keep]
    g = np.zeros(len(lo), np.int64) if groups is None else np.asarray(groups, np.int64)[keep]
    ndim = lo.shape[1]
    if len(lo) and ndim:
        rows = np.unique(np.concatenate([g[:, None], lo, hi], axis=1), axis=0)
        g, lo, hi = rows[:, 0], rows[:, 1:1 + ndim], rows[:, 1 + ndim:]
        for _ in range(rounds):
            before = len(lo)
            for axis in range(ndim - 1, -1, -1):
                lo, hi, g = _merge_along(lo, hi, axis, g)
            if len(lo) == before:
                break
    return (lo, hi) if groups is None else (lo, hi, g)


def unique_boxes(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct non-empty boxes, sorted (rows packed into one int64 key when their
    ranges allow: much faster than ``np.unique(axis=0)``).

    Examples
    --------
    >>> lo, hi = unique_boxes(np.array([[2], [0], [2]]), np.array([[3], [1], [3]]))
    >>> lo.tolist(), hi.tolist()
    ([[0], [2]], [[1], [3]])
    """
    lo, hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
    live = np.all(hi > lo, axis=1)
    lo, hi = lo[live], hi[live]
    if len(lo) < 2:
        return lo, hi
    d = lo.shape[1]
    rows = np.concatenate([lo, hi], axis=1)
    order = lexsort(list(rows.T[::-1]))
    rows = rows[order]
    keep = np.r_[True, np.any(rows[1:] != rows[:-1], axis=1)]
    rows = rows[keep]
    return rows[:, :d], rows[:, d:]


# -- intersections --------------------------------------------------------------------
class BoxIndex:
    """A static index of boxes answering "which boxes meet these boxes?" in time of the
    boxes found (numpy only).

    Boxes are bucketed by their extents along the first two axes (powers of two); a
    bucket is sorted by ``lo`` along axis 0, then axis 1.  A query scans, per bucket, the
    window of boxes whose ``lo[0]`` can reach it, or, when that window is wide (many
    rows of small boxes), one window of ``lo[1]`` per row it spans.

    Examples
    --------
    >>> index = BoxIndex(np.array([[0, 0], [5, 5]]), np.array([[2, 2], [9, 9]]))
    >>> q, b = index.query(np.array([[1, 1]]), np.array([[6, 6]]))
    >>> q.tolist(), b.tolist()
    ([0, 0], [0, 1])
    """

    def __init__(self, lo: np.ndarray, hi: np.ndarray):
        self.lo, self.hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
        self.ndim = self.lo.shape[1] if self.lo.ndim == 2 else 0
        live = np.flatnonzero(np.all(self.hi > self.lo, axis=1)) if len(self.lo) else np.empty(0, np.int64)
        self.live = live
        self.buckets: list[_Bucket] = []
        if len(live) == 0 or self.ndim == 0:
            return
        ext = self.hi[live] - self.lo[live]
        size_class = np.ceil(np.log2(ext[:, : min(self.ndim, 2)])).astype(np.int64)
        key = size_class[:, 0] * 64 + (size_class[:, 1] if self.ndim > 1 else 0)
        for c in np.unique(key).tolist():
            self.buckets.append(_Bucket(self.lo, self.hi, live[key == c]))

    def __len__(self) -> int:
        return len(self.lo)

    def query(self, q_lo: np.ndarray, q_hi: np.ndarray, max_candidates: int | None = None) -> Any:
        """Pairs ``(query index, box index)`` of non-empty intersections, sorted by query.

        ``max_candidates`` bounds the work: when the boxes to test exceed it (heavily
        overlapping boxes), None is returned instead.
        """
        q_lo, q_hi = np.asarray(q_lo, np.int64), np.asarray(q_hi, np.int64)
        empty = (np.empty(0, np.int64), np.empty(0, np.int64))
        if len(q_lo) == 0 or len(self.live) == 0:
            return empty
        if self.ndim == 0:
            return np.repeat(np.arange(len(q_lo)), len(self.live)), np.tile(self.live, len(q_lo))
        q_live = np.flatnonzero(np.all(q_hi > q_lo, axis=1))
        windows = [b.windows(q_live, q_lo, q_hi) for b in self.buckets]
        if max_candidates is not None and sum(int(w[2].sum()) for w in windows) > max_candidates:
            return None
        qs, bs = [], []
        for bucket, (q, first, counts) in zip(self.buckets, windows):
            total = int(counts.sum())
            if total == 0:
                continue
            q = np.repeat(q, counts)
            pos = np.repeat(first - np.cumsum(counts) + counts, counts) + np.arange(total, dtype=np.int64)
            box = bucket.members[pos]
            hit = np.all((self.lo[box] < q_hi[q]) & (self.hi[box] > q_lo[q]), axis=1)
            qs.append(q[hit])
            bs.append(box[hit])
        if not qs:
            return empty
        q, box = np.concatenate(qs), np.concatenate(bs)
        order = lexsort([box, q])
        return q[order], box[order]


class _Bucket:
    """Boxes of similar extents, sorted by ``(lo[0], lo[1])``: see `BoxIndex`."""

    def __init__(self, lo: np.ndarray, hi: np.ndarray, members: np.ndarray):
        self.members = members[lexsort([lo[members, k] for k in range(min(lo.shape[1], 2) - 1, -1, -1)])]
        mlo, mhi = lo[self.members], hi[self.members]
        self.lo0 = mlo[:, 0]
        self.ext0 = int((mhi[:, 0] - mlo[:, 0]).max())
        self.rows = None
        if lo.shape[1] > 1:
            self.base0, self.base1 = int(mlo[:, 0].min()), int(mlo[:, 1].min())
            self.width = int(mlo[:, 1].max()) - self.base1 + 1
            self.top0 = int(mlo[:, 0].max())
            self.ext1 = int((mhi[:, 1] - mlo[:, 1]).max())
            if (self.top0 - self.base0 + 1) * self.width < (1 << 62):
                self.rows = (mlo[:, 0] - self.base0) * self.width + (mlo[:, 1] - self.base1)

    def windows(self, q: np.ndarray, q_lo: np.ndarray, q_hi: np.ndarray):
        """``(query index, first position, count)`` of the windows to scan."""
        a = np.searchsorted(self.lo0, q_lo[q, 0] - self.ext0 + 1, side="left")
        b = np.searchsorted(self.lo0, q_hi[q, 0], side="left")
        if self.rows is None:
            return q, a, b - a
        r_lo = np.maximum(q_lo[q, 0] - self.ext0 + 1, self.base0)
        r_hi = np.minimum(q_hi[q, 0], self.top0 + 1)
        n_rows = np.maximum(r_hi - r_lo, 0)
        if 4 * int(n_rows.sum()) >= int((b - a).sum()):  # few rows per query: one window each
            return q, a, b - a
        rq = np.repeat(q, n_rows)
        row = np.repeat(r_lo - np.cumsum(n_rows) + n_rows, n_rows) + np.arange(int(n_rows.sum()), dtype=np.int64)
        c_lo = np.clip(q_lo[rq, 1] - self.ext1 + 1 - self.base1, 0, self.width)
        c_hi = np.clip(q_hi[rq, 1] - self.base1, 0, self.width)
        key = (row - self.base0) * self.width
        first = np.searchsorted(self.rows, key + c_lo, side="left")
        last = np.searchsorted(self.rows, key + c_hi, side="left")
        return rq, first, np.maximum(last - first, 0)


def boxes_intersect(a_lo: np.ndarray, a_hi: np.ndarray, b_lo: np.ndarray, b_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs ``(ia, ib)`` of boxes of ``a`` and ``b`` that share a cell.

    Examples
    --------
    >>> ia, ib = boxes_intersect(np.array([[0], [4]]), np.array([[3], [6]]), np.array([[2]]), np.array([[5]]))
    >>> ia.tolist(), ib.tolist()
    ([0, 1], [0, 0])
    """
    a_lo, a_hi = np.asarray(a_lo, np.int64), np.asarray(a_hi, np.int64)
    b_lo, b_hi = np.asarray(b_lo, np.int64), np.asarray(b_hi, np.int64)
    if len(a_lo) * len(b_lo) <= 4096:
        hit = np.all((a_lo[:, None, :] < b_hi[None, :, :]) & (a_hi[:, None, :] > b_lo[None, :, :])
                     & (a_hi[:, None, :] > a_lo[:, None, :]) & (b_hi[None, :, :] > b_lo[None, :, :]), axis=2)
        ia, ib = np.nonzero(hit)
        return ia.astype(np.int64), ib.astype(np.int64)
    if len(b_lo) >= len(a_lo):
        ia, ib = BoxIndex(b_lo, b_hi).query(a_lo, a_hi)
    else:
        ib, ia = BoxIndex(a_lo, a_hi).query(b_lo, b_hi)
    order = np.lexsort((ib, ia))
    return ia[order], ib[order]



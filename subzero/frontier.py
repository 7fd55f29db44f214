"""Frontiers: the set of cells a lineage query holds between steps, in the form its size calls for.

A query costs its answer only if the frontier does: a few cells of a billion-cell array
must not become a billion-byte mask.  A `Frontier` holds the cells of an array of
``shape`` as one of

- ``ids``: sorted unique flat int64 cell ids (small or scattered sets);
- ``boxes``: half-open boxes ``(lo, hi)``, two ``(N, ndim)`` int64 arrays (a user's box
  query, a stencil's halo around one, range-compressed lineage), possibly overlapping;
- ``mask``: a dense boolean array, only once the set holds more than an eighth of the
  array (then a bit per cell is cheaper than 8 bytes per cell).

Every step reads the form that suits it (`ids`, `coords`, `boxes`, `mask`) and builds
its result with `Frontier.of_ids` / `of_boxes`, which pick the form again.  The
entire-array optimization asks `is_full`.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from subzero.boxes import cover_ids, ids_in_boxes
from subzero.cells import sorted_unique, to_coords, to_ids, unique_ids

__all__ = ["Frontier", "ids_in_boxes", "cover_ids", "drop_contained", "DENSE_FRACTION", "MAX_BOX_EXPANSION"]

Shape = tuple[int, ...]
_EMPTY_IDS = np.empty(0, np.int64)

#: above this fraction of the array, a frontier is a dense mask
DENSE_FRACTION = 1 / 8
#: boxes holding more cells than this are never expanded into ids (a mask is built instead)
MAX_BOX_EXPANSION = 1 << 24
#: a union with boxes keeps ids as boxes when their cover has at most one box per this many cells
UNION_PER_BOX = 4


def _size(shape: Shape) -> int:
    return math.prod(shape)  # Python ints: asked at every step, and never overflows


#: `_box_coords` lays a large box out this many cells at a time (a slab that stays in cache)
COORDS_SLAB_CELLS = 1 << 15


def _box_coords(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The ``(N, ndim)`` coordinates of the half-open box ``[lo, hi)`` in C order (sorted ids).

    Written slab by slab of the first axis (`COORDS_SLAB_CELLS` cells): each slab's coordinates,
    axis by axis, while it is in cache, so the answer's memory is written in one pass (a query
    reaching a whole input returns millions of coordinates).

    Examples
    --------
    >>> _box_coords(np.array([1, 0]), np.array([3, 2])).tolist()
    [[1, 0], [1, 1], [2, 0], [2, 1]]
    """
    ext = tuple(max(int(b) - int(a), 0) for a, b in zip(lo, hi))
    out = np.empty(ext + (len(ext),), np.int64)
    if not out.size:
        return out.reshape(-1, len(ext))
    ranges = []
    for axis, (a, n) in enumerate(zip(lo, ext)):
        along = [1] * len(ext)
        along[axis] = n
        ranges.append(np.arange(int(a), int(a) + n, dtype=np.int64).reshape(along))
    rows = max(COORDS_SLAB_CELLS // max(math.prod(ext[1:]), 1), 1)
    for r in range(0, ext[0], rows):
        slab = out[r:r + rows]
        slab[..., 0] = ranges[0][r:r + rows]
        for axis in range(1, len(ext)):
            slab[..., axis] = ranges[axis]
    return out.reshape(-1, len(ext))


def drop_contained(lo: np.ndarray, hi: np.ndarray, limit: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """The boxes ``[lo, hi)`` without those another of them contains (of equal boxes, the
    first is kept): a walk's unions are mostly one neighbourhood inside a larger one, which
    then stay one box, and a block reduction maps neighbouring boxes to the same block.  Up to
    ``limit`` boxes (a pairwise test); more are returned as they are.

    Examples
    --------
    >>> lo, hi = drop_contained(np.array([[0, 0], [1, 1], [0, 0]]), np.array([[4, 4], [2, 2], [4, 4]]))
    >>> lo.tolist(), hi.tolist()
    ([[0, 0]], [[4, 4]])
    """
    n = len(lo)
    if n < 2 or n > limit:
        return lo, hi
    inside = np.ones((n, n), bool)  # [k, j]: box k lies in box j (axis by axis: no reduction over a short axis)
    for a in range(lo.shape[1]):
        la, ha = lo[:, a], hi[:, a]
        inside &= la[:, None] >= la[None, :]
        inside &= ha[:, None] <= ha[None, :]
    np.fill_diagonal(inside, False)
    if not inside.any():  # none inside another (most unions and steps): nothing to drop
        return lo, hi
    equal = inside & inside.T
    inside &= ~equal | (np.arange(n)[None, :] < np.arange(n)[:, None])  # of equal boxes, only later ones drop
    np.fill_diagonal(inside, False)
    keep = ~inside.any(axis=1)
    return (lo, hi) if keep.all() else (lo[keep], hi[keep])


class Frontier:
    """A set of cells of an array, held as ids, boxes or a dense mask (see the module docs).

    Build one with `empty`, `full`, `of_ids`, `of_coords`, `of_mask` or `of_boxes`.

    Examples
    --------
    >>> f = Frontier.of_coords(np.array([[1, 2], [0, 0]]), (3, 4))
    >>> f.count, f.kind, f.coords().tolist()
    (2, 'ids', [[0, 0], [1, 2]])
    """

    __slots__ = ("shape", "_ids", "_mask", "_boxes", "_count", "_cover", "_volume", "_full")

    def __init__(self, shape: Shape, ids=None, mask=None, boxes=None, count: int | None = None):
        self.shape = tuple(int(n) for n in shape)
        self._ids, self._mask, self._boxes, self._count = ids, mask, boxes, count
        self._cover: tuple[np.ndarray, np.ndarray] | None = None  # `boxes` of ids or a mask, made once
        self._volume: int | None = None  # the boxes' summed volume (`estimate`, asked at every step), made once
        self._full: bool | None = None  # `is_full` of uncounted boxes, worked out once

    # -- constructors -------------------------------------------------------------------------
    @classmethod
    def empty(cls, shape: Shape) -> "Frontier":
        """No cells of an array of ``shape``."""
        return cls(shape, ids=_EMPTY_IDS, count=0)

    @classmethod
    def full(cls, shape: Shape) -> "Frontier":
        """Every cell of an array of ``shape`` (one box)."""
        shape = tuple(shape)
        lo = np.zeros((1, len(shape)), np.int64)
        hi = np.asarray(shape, np.int64).reshape(1, len(shape))
        return cls(shape, boxes=(lo, hi), count=_size(shape))

    @classmethod
    def of_ids(cls, ids: np.ndarray, shape: Shape, unique: bool = False) -> "Frontier":
        """The cells of flat ``ids`` (duplicates allowed unless ``unique``)."""
        ids = np.asarray(ids, np.int64).reshape(-1)
        size = _size(tuple(shape))
        if not unique and len(ids) > 1:
            ids = unique_ids(ids, size)
        if len(ids) > DENSE_FRACTION * size and len(ids) > 64:
            mask = np.zeros(size, bool)
            mask[ids] = True
            return cls(shape, mask=mask.reshape(shape), count=len(ids))
        return cls(shape, ids=ids, count=len(ids))

    @classmethod
    def of_coords(cls, coords: np.ndarray, shape: Shape) -> "Frontier":
        """The cells of ``(N, ndim)`` coordinates (unchecked: validate user cells first)."""
        return cls.of_ids(to_ids(coords, tuple(shape)), shape)

    @classmethod
    def of_mask(cls, mask: np.ndarray) -> "Frontier":
        """The cells set in ``mask``: kept as ids when few, as the mask otherwise."""
        mask = np.asarray(mask, bool)
        count = int(np.count_nonzero(mask))
        if count <= DENSE_FRACTION * mask.size or count <= 64:
            return cls(mask.shape, ids=np.flatnonzero(mask.reshape(-1)).astype(np.int64), count=count)
        return cls(mask.shape, mask=mask, count=count)

    @classmethod
    def of_boxes(cls, lo: np.ndarray, hi: np.ndarray, shape: Shape, disjoint: bool = False) -> "Frontier":
        """The cells of half-open boxes (clipped to the array; empty boxes dropped)."""
        shape = tuple(shape)
        if not shape:
            return cls(shape, ids=np.zeros(1, np.int64), count=1) if len(np.asarray(lo)) else cls.empty(shape)
        lo = np.maximum(np.asarray(lo, np.int64).reshape(-1, len(shape)), 0)
        hi = np.minimum(np.asarray(hi, np.int64).reshape(-1, len(shape)), np.asarray(shape, np.int64))
        keep = np.all(hi > lo, axis=1)
        if not keep.all():
            lo, hi = lo[keep], hi[keep]
        if not len(lo):
            return cls.empty(shape)
        if disjoint or len(lo) == 1:
            return cls(shape, boxes=(lo, hi), count=int(np.prod(hi - lo, axis=1).sum()))
        return cls(shape, boxes=(lo, hi))

    # -- what it holds --------------------------------------------------------------------------
    @property
    def kind(self) -> str:
        """``"ids"``, ``"boxes"`` or ``"mask"``: how the cells are held."""
        return "boxes" if self._boxes is not None else ("mask" if self._mask is not None else "ids")

    @property
    def size(self) -> int:
        """Cells of the whole array."""
        return _size(self.shape)

    @property
    def count(self) -> int:
        """Cells in the frontier (exact)."""
        if self._count is None:
            if self._boxes is not None and self._box_volume() > MAX_BOX_EXPANSION:
                self._count = int(np.count_nonzero(self.mask()))
            else:
                self._count = len(self.ids())
        return self._count

    def estimate(self) -> int:
        """Cells in the frontier, or an upper bound when counting would cost (overlapping boxes)."""
        if self._count is not None:
            return self._count
        return min(self._box_volume(), self.size)

    @property
    def is_empty(self) -> bool:
        """True when the frontier holds no cell."""
        if self._boxes is not None:
            return not len(self._boxes[0])
        return self.count == 0

    @property
    def is_full(self) -> bool:
        """True when the frontier holds every cell of its array."""
        if self._count is not None:  # counted (exactly): asked at every step of a walk
            return self._count == self.size
        if self._boxes is not None:
            if self._full is None:  # overlapping boxes: full only if they span the array, then counted (once)
                lo, hi = self._boxes
                self._full = bool(np.all(lo.min(axis=0) == 0) and np.all(hi.max(axis=0) == np.asarray(self.shape))) \
                    and self.count == self.size
            return self._full
        return self.count == self.size

    def _box_volume(self) -> int:
        if self._volume is None:
            lo, hi = self._boxes
            self._volume = int(np.prod(hi - lo, axis=1).sum())
        return self._volume

    # -- forms ------------------------------------------------------------------------------
    def ids(self) -> np.ndarray:
        """Sorted unique flat cell ids."""
        if self._ids is None:
            if self._mask is not None:
                self._ids = np.flatnonzero(self._mask.reshape(-1)).astype(np.int64)
            else:
                lo, hi = self._boxes
                if self._box_volume() > MAX_BOX_EXPANSION:
                    self._ids = np.flatnonzero(self.mask().reshape(-1)).astype(np.int64)
                else:
                    self._ids = ids_in_boxes(lo, hi, self.shape)
        return self._ids

    def coords(self) -> np.ndarray:
        """Sorted unique ``(N, ndim)`` coordinates."""
        if self._ids is None and self._boxes is not None and len(self._boxes[0]) == 1 and self.shape:
            return _box_coords(self._boxes[0][0], self._boxes[1][0])  # one box: laid out, not unravelled
        if self._ids is None and self._count is not None and self._count == self.size and self.shape:
            return _box_coords(np.zeros(len(self.shape), np.int64), np.asarray(self.shape, np.int64))  # every cell
        return to_coords(self.ids(), self.shape)

    def mask(self) -> np.ndarray:
        """A dense boolean mask of the array (allocates the array's size: for dense frontiers)."""
        if self._mask is None:
            mask = np.zeros(self.shape, bool)
            if self._boxes is not None:
                for lo, hi in zip(*self._boxes):
                    mask[tuple(slice(a, b) for a, b in zip(lo, hi))] = True
            else:
                mask.reshape(-1)[self._ids] = True
            return mask
        return self._mask

    def boxes(self) -> tuple[np.ndarray, np.ndarray]:
        """Half-open boxes covering exactly the frontier (disjoint unless built from overlapping boxes).

        The cover of ids or a mask is made once and kept: a walk asks it of the same frontier
        at every box-form step it reaches and again for the answer."""
        if self._boxes is not None:
            return self._boxes
        if self._cover is None:
            self._cover = cover_ids(self.ids(), self.shape)
        return self._cover

    def compact_boxes(self, per_box: int = 16) -> tuple[np.ndarray, np.ndarray] | None:
        """The frontier as boxes when that form is compact: held as boxes, or ids whose cover
        (`boxes`) has at most one box per ``per_box`` cells (or is one box); else None (a
        scattered set, or a mask).

        A walk takes such a frontier through the box forms of the operators that have them
        (`subzero.Operator.map_b_boxes`): arithmetic over a few boxes instead of every cell.

        Examples
        --------
        >>> f = Frontier.of_boxes(np.array([[0, 0]]), np.array([[4, 8]]), (10, 10))
        >>> lo, hi = Frontier.of_ids(f.ids(), (10, 10)).compact_boxes()
        >>> lo.tolist(), hi.tolist()
        ([[0, 0]], [[4, 8]])
        >>> Frontier.of_ids(np.array([0, 2, 4]), (10, 10)).compact_boxes() is None
        True
        >>> Frontier.of_ids(np.array([5]), (10, 10)).compact_boxes()[1].tolist()
        [[1, 6]]
        """
        if self._boxes is not None:
            return self._boxes
        if self._mask is not None:
            return None
        lo, hi = self.boxes()
        return (lo, hi) if len(lo) <= max(1, self.count // per_box) else None

    def bbox(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The frontier's bounding box ``(lo, hi)`` (half-open), or None when empty."""
        if self._boxes is not None:
            lo, hi = self._boxes
            return (lo.min(axis=0), hi.max(axis=0)) if len(lo) else None
        if self._mask is not None:
            if not self.count:
                return None
            lo, hi = [], []
            for axis in range(len(self.shape)):
                other = tuple(a for a in range(len(self.shape)) if a != axis)
                hit = np.flatnonzero(self._mask.any(axis=other) if other else self._mask)
                lo.append(hit[0])
                hi.append(hit[-1] + 1)
            return np.array(lo, np.int64), np.array(hi, np.int64)
        if not len(self._ids):
            return None
        c = self.coords()
        return c.min(axis=0), c.max(axis=0) + 1

    # -- set operations ---------------------------------------------------------------------
    def union(self, other: "Frontier") -> "Frontier":
        """The cells of either frontier (same shape)."""
        if other is self:
            return self
        if self.is_empty:
            return other
        if other.is_empty:
            return self
        if self.is_full:  # e.g. a whole input reached through a global statistic: no cells expanded
            return self
        if other.is_full:
            return other
        if self._mask is not None or other._mask is not None:
            return Frontier.of_mask(self.mask() | other.mask())
        if self._boxes is not None or other._boxes is not None:  # boxes, and boxes or ids a few boxes cover
            mine, theirs = self.compact_boxes(UNION_PER_BOX), other.compact_boxes(UNION_PER_BOX)
            if mine is not None and theirs is not None:  # stay boxes: never expanded into ids and covered again
                if len(mine[0]) == len(theirs[0]) and np.array_equal(mine[0], theirs[0]) and \
                        np.array_equal(mine[1], theirs[1]):  # two paths brought the same boxes
                    return self if self._boxes is not None else other
                lo, hi = drop_contained(np.concatenate([mine[0], theirs[0]]), np.concatenate([mine[1], theirs[1]]))
                return Frontier.of_boxes(lo, hi, self.shape)
        return Frontier.of_ids(sorted_unique(np.concatenate([self.ids(), other.ids()]), runs=True), self.shape,
                               unique=True)

    @classmethod
    def union_all(cls, parts: "Sequence[Frontier]") -> "Frontier":
        """The cells of any of ``parts`` (frontiers over one array, at least one).

        What reaches a node by many paths is united once: when one of them is a mask, every
        part is painted into one copy of it and counted once (not a new mask and a count per
        pair); else the parts are united pairwise (`union`: boxes stay boxes).

        Examples
        --------
        >>> a = Frontier.of_ids(np.array([0, 1]), (2, 2))
        >>> b = Frontier.of_boxes(np.array([[1, 1]]), np.array([[2, 2]]), (2, 2))
        >>> Frontier.union_all([a, b]).ids().tolist()
        [0, 1, 3]
        """
        if not parts:
            raise ValueError("Frontier.union_all needs at least one frontier")
        live = [p for p in parts if not p.is_empty]
        if len(live) <= 1:
            return live[0] if live else parts[0]
        for p in live:
            if p.is_full:
                return p
        masks = [p for p in live if p._mask is not None]
        if not masks:
            out = live[0]
            for p in live[1:]:
                out = out.union(p)
            return out
        # the first two masks make the new one (one pass, as a pair's union does); the rest go into it
        mask = np.logical_or(masks[0]._mask, masks[1]._mask) if len(masks) > 1 else masks[0]._mask.copy()
        flat = mask.reshape(-1)
        for p in live:
            if p is masks[0] or (len(masks) > 1 and p is masks[1]):
                continue
            if p._mask is not None:
                np.logical_or(mask, p._mask, out=mask)
            elif p._boxes is not None:
                for lo, hi in zip(*p._boxes):
                    mask[tuple(slice(a, b) for a, b in zip(lo, hi))] = True
            else:
                flat[p._ids] = True
        return cls.of_mask(mask)

    def contains(self, ids: np.ndarray) -> np.ndarray:
        """For flat ``ids``, whether each is in the frontier."""
        ids = np.asarray(ids, np.int64)
        if self._mask is not None:
            return self._mask.reshape(-1)[ids]
        if self._boxes is not None and len(self._boxes[0]) <= 16:
            c = to_coords(ids, self.shape)
            hit = np.zeros(len(ids), bool)
            for lo, hi in zip(*self._boxes):
                hit |= np.all((c >= lo) & (c < hi), axis=1)
            return hit
        own = self.ids()
        pos = np.searchsorted(own, ids)
        pos[pos == len(own)] = 0
        return own[pos] == ids if len(own) else np.zeros(len(ids), bool)

    def within(self, lo: Sequence[int] | np.ndarray, hi: Sequence[int] | np.ndarray) -> "Frontier":
        """The frontier's cells inside the half-open box ``[lo, hi)`` (same array)."""
        lo, hi = (np.maximum(np.asarray(b, np.int64), 0) for b in (lo, hi))  # negative bounds would wrap slices
        if self._boxes is not None:
            blo, bhi = self._boxes
            return Frontier.of_boxes(np.maximum(blo, lo), np.minimum(bhi, hi), self.shape)
        if self._mask is not None:
            sel = tuple(slice(a, b) for a, b in zip(lo, hi))
            part = self._mask[sel]
            count = int(np.count_nonzero(part))
            if not self.shape or (count > DENSE_FRACTION * self._mask.size and count > 64):
                sub = np.zeros(self.shape, bool)
                sub[sel] = part
                return Frontier.of_mask(sub)
            # the box's cells as sorted ids: the cost of the box, not of the array
            local = np.nonzero(part)
            ids = np.ravel_multi_index(tuple(k + a for k, a in zip(local, lo)), self.shape)
            return Frontier(self.shape, ids=np.asarray(ids, np.int64), count=count)
        c = self.coords()
        inside = np.all((c >= lo) & (c < hi), axis=1)
        return Frontier(self.shape, ids=self._ids[inside], count=int(inside.sum()))

    def meets(self, lo: Sequence[int] | np.ndarray, hi: Sequence[int] | np.ndarray) -> bool:
        """True when some cell of the frontier lies in the half-open box ``[lo, hi)``."""
        lo, hi = (np.maximum(np.asarray(b, np.int64), 0) for b in (lo, hi))
        if np.any(hi <= lo):
            return False
        if self._boxes is not None:
            blo, bhi = self._boxes
            return bool(np.any(np.all((blo < hi) & (bhi > lo), axis=1)))
        if self._mask is not None:
            return bool(self._mask[tuple(slice(a, b) for a, b in zip(lo, hi))].any())
        c = self.coords()
        return bool(np.any(np.all((c >= lo) & (c < hi), axis=1)))

    def arrays(self) -> list[np.ndarray]:
        """The arrays the frontier holds (its ids, mask and boxes, as far as made)."""
        return [a for a in (self._ids, self._mask, *(self._boxes or ()), *(self._cover or ())) if a is not None]

    @property
    def nbytes(self) -> int:
        """Bytes its arrays hold."""
        return sum(int(a.nbytes) for a in self.arrays())

    def copy(self) -> "Frontier":
        """A frontier holding copies of this one's arrays (one its holder may write into)."""
        boxes = None if self._boxes is None else (self._boxes[0].copy(), self._boxes[1].copy())
        got = Frontier(self.shape, ids=None if self._ids is None else self._ids.copy(),
                       mask=None if self._mask is None else self._mask.copy(), boxes=boxes, count=self._count)
        if self._cover is not None:
            got._cover = (self._cover[0].copy(), self._cover[1].copy())
        return got

    def __len__(self) -> int:
        return self.count

    def __repr__(self) -> str:
        return f"Frontier({self.kind}, {self.estimate()} of {self.size} cells, shape {self.shape})"

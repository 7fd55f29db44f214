"""Cells: coordinate validation and the conversions between coordinates, flat ids and masks.

Inside subzero a cell is a flat ``int64`` id, ``np.ravel_multi_index`` over the array
shape (a mixed-radix bit packing of its coordinates).  Users speak coordinates; the
query frontier is a boolean mask.  Every conversion is vectorized.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from subzero.errors import LineageError

__all__ = ["as_coords", "as_boxes", "to_ids", "to_coords", "mask_from_coords", "coords_from_mask", "box_cells",
           "unique_ids"]

Shape = tuple[int, ...]


def as_coords(cells: Any, shape: Shape, where: str) -> np.ndarray:
    """Validate user cells against an array shape and return ``(N, ndim)`` int64 coordinates.

    Parameters
    ----------
    cells
        A list of coordinate tuples, an ``(N, ndim)`` integer array, a single coordinate
        tuple (for arrays of rank > 1), or a boolean mask of the array's shape.
    shape
        The shape of the array the cells belong to.
    where
        What the array is (e.g. ``"node 'blur' output"``): named in error messages.

    Examples
    --------
    >>> as_coords([(1, 2)], (3, 4), "x").tolist()
    [[1, 2]]
    """
    ndim = len(shape)
    try:
        arr = np.asarray(cells)
    except ValueError:
        raise LineageError(f"cells for {where} (shape {tuple(shape)}) must all have {ndim} coordinates; "
                           "got cells of different lengths") from None
    if arr.dtype == bool:
        if arr.shape != tuple(shape):
            raise LineageError(
                f"boolean cell mask for {where} has shape {arr.shape}, expected {tuple(shape)}"
            )
        return np.argwhere(arr).astype(np.int64)
    if arr.size == 0:
        if arr.ndim == 2 and len(arr) and arr.shape[1] != ndim:
            raise LineageError(f"cells for {where} (shape {tuple(shape)}) must have {ndim} coordinates each, "
                               f"got {len(arr)} cell(s) with {arr.shape[1]}")
        return np.zeros((len(arr) if arr.ndim == 2 else 0, ndim), dtype=np.int64)
    if arr.dtype == object and arr.size and all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in arr.reshape(-1)):
        # Python ints numpy could not fit in int64 (an object array arises only on this error path)
        raise LineageError(f"cell coordinate {max(arr.reshape(-1).tolist(), key=abs)} is out of bounds for {where} "
                           f"of shape {tuple(shape)}; valid coordinates are 0 <= c < shape")
    if arr.dtype.kind == "u" and int(arr.max()) >= 2**63:
        raise LineageError(f"cell coordinate {int(arr.max())} is out of bounds for {where} of shape {tuple(shape)}; "
                           "valid coordinates are 0 <= c < shape")
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            huge = np.abs(arr) >= 2.0**62
            if huge.any():
                raise LineageError(
                    f"cell {np.asarray(cells).reshape(-1)[np.argmax(huge.reshape(-1))]!r} is out of bounds "
                    f"for {where} of shape {tuple(shape)}; valid coordinates are 0 <= c < shape")
            arr = arr.astype(np.int64)
        else:
            raise LineageError(
                f"cells for {where} (shape {tuple(shape)}) must be integer coordinates, "
                f"got {np.asarray(cells).tolist()!r:.200}"
            )
    if arr.ndim == 1:
        arr = arr.reshape(-1, 1) if ndim == 1 else arr.reshape(1, -1)
    if arr.ndim != 2 or arr.shape[1] != ndim:
        first = arr.reshape(-1)[: max(ndim + 1, 1)].tolist() if arr.ndim else arr.tolist()
        raise LineageError(
            f"cells for {where} (shape {tuple(shape)}) must have {ndim} coordinates each, "
            f"got rank-{arr.shape[-1] if arr.ndim else 0} cells starting {first}; "
            f"pass a list of {ndim}-tuples"
        )
    arr = arr.astype(np.int64, copy=False)
    bad = np.any((arr < 0) | (arr >= np.asarray(shape, dtype=np.int64)), axis=1)
    if bad.any():
        cell = tuple(int(v) for v in arr[np.argmax(bad)])
        raise LineageError(
            f"cell {cell} is out of bounds for {where} of shape {tuple(shape)} "
            f"({int(bad.sum())} bad cell(s)); valid coordinates are 0 <= c < shape"
        )
    return arr


def unique_ids(ids: np.ndarray, size: int) -> np.ndarray:
    """The sorted distinct values of flat cell ``ids`` below ``size``: through a bitmap of the
    array when the ids are dense in it (no sort), else a sort and a comparison of neighbours
    (numpy 2.4's hash-based `numpy.unique` is 30-170x slower on 1e4-1e6 int64 ids).

    Examples
    --------
    >>> unique_ids(np.array([3, 1, 3, 0]), 4).tolist()
    [0, 1, 3]
    """
    ids = np.asarray(ids, np.int64)
    if len(ids) * 16 > size:
        seen = np.zeros(size, bool)
        seen[ids] = True
        return np.flatnonzero(seen)
    if len(ids) < 2:
        return ids.copy()
    ids = np.sort(ids)
    keep = np.empty(len(ids), bool)
    keep[0] = True
    np.not_equal(ids[1:], ids[:-1], out=keep[1:])
    return ids[keep]


def to_ids(coords: np.ndarray, shape: Shape) -> np.ndarray:
    """Flat int64 cell ids of ``(N, ndim)`` coordinates (no validation)."""
    coords = np.asarray(coords, dtype=np.int64)
    if len(shape) == 0:
        return np.zeros(len(coords), dtype=np.int64)
    coords = coords.reshape(-1, len(shape))
    return np.ravel_multi_index(tuple(coords.T), shape).astype(np.int64, copy=False)


def to_coords(ids: np.ndarray, shape: Shape) -> np.ndarray:
    """``(N, ndim)`` int64 coordinates of flat cell ids."""
    ids = np.asarray(ids, dtype=np.int64)
    if len(shape) == 0:
        return np.empty((len(ids), 0), dtype=np.int64)
    return np.stack(np.unravel_index(ids, shape), axis=1).astype(np.int64, copy=False)


def mask_from_coords(coords: np.ndarray, shape: Shape) -> np.ndarray:
    """A boolean mask of ``shape`` with the given cells set."""
    mask = np.zeros(shape, dtype=bool)
    mask.reshape(-1)[to_ids(coords, shape)] = True
    return mask


def coords_from_mask(mask: np.ndarray) -> np.ndarray:
    """Sorted unique ``(N, ndim)`` coordinates of the set cells of a mask."""
    return np.argwhere(mask).astype(np.int64)


def box_cells(lo: tuple[int, ...], hi: tuple[int, ...]) -> np.ndarray:
    """All cells of the half-open box ``[lo, hi)`` as ``(N, ndim)`` coordinates."""
    axes = [np.arange(a, b, dtype=np.int64) for a, b in zip(lo, hi)]
    if not axes:
        return np.zeros((1, 0), dtype=np.int64)
    grid = np.meshgrid(*axes, indexing="ij")
    return np.stack([g.reshape(-1) for g in grid], axis=1)


def as_boxes(box: Any, shape: Shape, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Validate a user's box (``[(lo, hi), ...]``, one half-open pair per axis) or list of
    boxes against an array shape; return ``(lo, hi)`` as two ``(N, ndim)`` int64 arrays.

    Examples
    --------
    >>> lo, hi = as_boxes([(0, 2), (1, 3)], (3, 4), "x")
    >>> lo.tolist(), hi.tolist()
    ([[0, 1]], [[2, 3]])
    """
    ndim = len(shape)
    try:
        arr = np.asarray(box, dtype=object)
    except ValueError:
        arr = None
    if arr is None or arr.ndim not in (2, 3) or arr.shape[-1] != 2 or arr.size == 0:
        raise LineageError(f"box for {where} (shape {tuple(shape)}) must be [(lo, hi), ...] with one half-open "
                           f"(lo, hi) pair per axis ({ndim} pairs), or a list of such boxes; got {box!r:.200}")
    boxes = arr.reshape(-1, arr.shape[-2], 2) if arr.ndim == 3 else arr.reshape(1, -1, 2)
    if boxes.shape[1] != ndim:
        raise LineageError(f"box {box!r:.200} for {where} has {boxes.shape[1]} (lo, hi) pair(s); the array has "
                           f"shape {tuple(shape)}: give {ndim}")
    try:
        values = [[int(v) for v in pair] if all(_is_int(v) for v in pair) else None
                  for b in boxes for pair in b]
    except (TypeError, ValueError, OverflowError):
        values = [None]
    if any(v is None for v in values):
        raise LineageError(f"box {box!r:.200} for {where} must hold integer (lo, hi) pairs")
    pairs = np.array(values, dtype=object).reshape(len(boxes), ndim, 2)
    for b in pairs:
        for axis, (lo, hi) in enumerate(b):
            if lo > hi:
                raise LineageError(f"box {_fmt_box(b)} for {where} (shape {tuple(shape)}) has lo > hi on axis {axis}; "
                                   "boxes are half-open [lo, hi)")
            if lo == hi:
                raise LineageError(f"box {_fmt_box(b)} for {where} (shape {tuple(shape)}) is empty on axis {axis}; "
                                   "boxes are half-open [lo, hi), so hi must exceed lo")
            if lo < 0 or hi > shape[axis]:
                raise LineageError(f"box {_fmt_box(b)} for {where} is out of bounds on axis {axis} for shape "
                                   f"{tuple(shape)}; valid boxes have 0 <= lo < hi <= shape")
    return pairs[:, :, 0].astype(np.int64), pairs[:, :, 1].astype(np.int64)


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool) or \
        (isinstance(v, (float, np.floating)) and float(v).is_integer())


def _fmt_box(b) -> str:
    return "[" + ", ".join(f"({int(lo)}, {int(hi)})" for lo, hi in b) + "]"

"""Cells: coordinate validation and the conversions between coordinates, flat ids and masks.

Inside subzero a cell is a flat ``int64`` id, ``np.ravel_multi_index`` over the array
shape (a mixed-radix bit packing of its coordinates).  Users speak coordinates; the
query frontier is a boolean mask.  Every conversion is vectorized.
"""

from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Any

import numpy as np

from subzero.errors import LineageError

if TYPE_CHECKING:
    from subzero.tiling import Box

__all__ = ["ArrayShape", "as_coords", "as_boxes", "to_ids", "to_coords", "mask_from_coords", "coords_from_mask", "box_cells",
           "unique_ids"]

Shape = tuple[int, ...]


def as_coords(cells: Any, shape: Shape, where: str) -> np.ndarray:
    """Validate user cells against an array shape and return ``(N, ndim)`` int64 coordinates.

    The one place user coordinates are normalised.  Accepted: a list of coordinate tuples
    (or nested lists), an ``(N, ndim)`` array or pandas DataFrame (one column per axis) of
    integers, of floats with integral values (``3.0`` is cell 3; ``3.5`` is refused), or
    of Python objects that are such numbers (what pandas and JSON readers give); a single
    coordinate tuple (a single integer for a 1-d array); a boolean mask of the array's
    shape.  Anything else (bools among numbers of an object array, strings, ``None``/NaN, complex or
    date values, ragged or too deeply nested lists) is a `LineageError` naming what came.

    Parameters
    ----------
    cells
        The cells, in one of the forms above.
    shape
        The shape of the array the cells belong to.
    where
        What the array is (e.g. ``"node 'blur' output"``): named in error messages.

    Examples
    --------
    >>> as_coords([(1, 2)], (3, 4), "x").tolist()
    [[1, 2]]
    >>> as_coords(np.array([[1, 2.0]], dtype=object), (3, 4), "x").tolist()
    [[1, 2]]
    """
    ndim = len(shape)
    arr = _as_array(cells, shape, where)
    if arr.dtype == bool:
        if arr.shape != tuple(shape):
            raise LineageError(f"boolean cell mask for {where} has shape {arr.shape}, expected {tuple(shape)}; pass "
                               f"a mask of the array's shape, or integer coordinates")
        return np.argwhere(arr).astype(np.int64)
    if arr.size == 0:
        if arr.ndim == 2 and len(arr) and arr.shape[1] != ndim:
            raise LineageError(f"cells for {where} (shape {tuple(shape)}) must have {ndim} coordinates each, "
                               f"got {len(arr)} cell(s) with {arr.shape[1]}")
        return np.zeros((len(arr) if arr.ndim == 2 else 0, ndim), dtype=np.int64)
    arr = _integers(arr, shape, where)
    if arr.ndim == 0 and ndim == 1:
        arr = arr.reshape(1, 1)
    elif arr.ndim == 1:
        arr = arr.reshape(-1, 1) if ndim == 1 else arr.reshape(1, -1)
    if arr.ndim != 2 or arr.shape[1] != ndim:
        if arr.ndim > 2:
            raise LineageError(f"cells for {where} (shape {tuple(shape)}) must have {ndim} coordinates each, as a "
                               f"list of {ndim}-tuples or an (N, {ndim}) array; got nesting of shape {arr.shape}")
        first = arr.reshape(-1)[: max(ndim + 1, 1)].tolist() if arr.ndim else arr.tolist()
        raise LineageError(
            f"cells for {where} (shape {tuple(shape)}) must have {ndim} coordinates each, "
            f"got {'a single number' if arr.ndim == 0 else f'cells of {arr.shape[-1]} starting {first}'}; "
            f"pass a list of {ndim}-tuples"
        )
    bad = np.any((arr < 0) | (arr >= np.asarray(shape, dtype=np.int64)), axis=1)
    if bad.any():
        cell = tuple(int(v) for v in arr[np.argmax(bad)])
        raise LineageError(
            f"cell {cell} is out of bounds for {where} of shape {tuple(shape)} "
            f"({int(bad.sum())} bad cell(s)); valid coordinates are 0 <= c < shape"
        )
    return arr


_HUGE = 2**62  # beyond any array's extent: reported as out of bounds before it could overflow int64


def _as_array(cells: Any, shape: Shape, where: str) -> np.ndarray:
    """``cells`` as a numpy array (pandas frames and series through their values); a Python
    object array of sequences (a pandas Series of tuples) is unpacked into its numbers."""
    ndim = len(shape)
    try:
        arr = np.asarray(cells)
        if arr.dtype == object and arr.size and all(isinstance(v, (list, tuple, np.ndarray))
                                                    for v in arr.reshape(-1)[:1]):
            arr = np.asarray(arr.tolist())
    except (ValueError, TypeError):
        raise LineageError(f"cells for {where} (shape {tuple(shape)}) must all have {ndim} coordinates; "
                           "got cells of different lengths") from None
    return arr


def _integers(arr: np.ndarray, shape: Shape, where: str) -> np.ndarray:
    """A numeric ``arr`` as int64, or the `LineageError` saying which value is not a coordinate."""
    kind = arr.dtype.kind
    if kind == "i":
        return arr.astype(np.int64, copy=False)
    if kind == "u":
        if int(arr.max()) >= 2**63:
            _out_of_bounds(int(arr.max()), shape, where)
        return arr.astype(np.int64, copy=False)
    if kind == "f":
        flat = arr.reshape(-1)
        bad = ~np.isfinite(flat)
        bad[~bad] = flat[~bad] != np.round(flat[~bad])
        if bad.any():
            _not_integer(flat[np.argmax(bad)].item(), shape, where)
        huge = np.abs(flat) >= _HUGE
        if huge.any():
            _out_of_bounds(flat[np.argmax(huge)].item(), shape, where)
        return arr.astype(np.int64)
    if kind == "O":
        values = [_object_coordinate(v, shape, where) for v in arr.reshape(-1).tolist()]
        big = [v for v in values if abs(v) >= _HUGE]
        if big:  # Python ints numpy could not fit in int64, or beyond any array
            _out_of_bounds(max(big, key=abs), shape, where)
        return np.array(values, dtype=np.int64).reshape(arr.shape)
    what = {"U": "strings", "S": "bytes", "c": "complex numbers", "M": "dates", "m": "time spans"}.get(kind, "values")
    raise LineageError(f"cells for {where} (shape {tuple(shape)}) must be integer coordinates, got {what} (dtype "
                       f"{arr.dtype}) starting {arr.reshape(-1)[:3].tolist()!r:.100}; convert them to integers first")


def _object_coordinate(v: Any, shape: Shape, where: str) -> int:
    """One element of an object array as an integer coordinate: integers and integral floats
    are; bools, strings, None, NaN and the rest are refused, naming the value."""
    if isinstance(v, (bool, np.bool_)):
        raise LineageError(f"cells for {where} (shape {tuple(shape)}) hold the bool {v!r} among coordinates; pass "
                           "integer coordinates, or a boolean mask of the array's shape")
    if isinstance(v, numbers.Integral):
        return int(v)
    if isinstance(v, numbers.Real):
        f = float(v)
        if math.isfinite(f) and f.is_integer():
            return int(f)
        _not_integer(v, shape, where)
    raise LineageError(f"cells for {where} (shape {tuple(shape)}) must be integer coordinates, got {v!r:.60} "
                       f"({type(v).__name__}); convert them to integers first")


def _not_integer(v: Any, shape: Shape, where: str) -> None:
    raise LineageError(f"cells for {where} (shape {tuple(shape)}) must be integer coordinates, got {v!r} (floats are "
                       "accepted only with integral values, such as 3.0)")


def _out_of_bounds(v: Any, shape: Shape, where: str) -> None:
    raise LineageError(f"cell coordinate {v!r} is out of bounds for {where} of shape {tuple(shape)}; valid "
                       "coordinates are 0 <= c < shape")


def sorted_unique(values: np.ndarray, runs: bool = False) -> np.ndarray:
    """The sorted distinct values of int64 ``values``: a sort and a neighbour comparison
    (numpy 2's `numpy.unique` hashes integers first, many times slower on millions of ids);
    ``runs``: the values are a few sorted runs one after another (a stable sort merges them
    in linear time).

    Examples
    --------
    >>> sorted_unique(np.array([5, 1, 5, 3])).tolist()
    [1, 3, 5]
    """
    values = np.sort(np.asarray(values, np.int64).reshape(-1), kind="stable" if runs else None)
    if len(values) < 2:
        return values
    keep = np.empty(len(values), bool)
    keep[0] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


def unique_ids(ids: np.ndarray, size: int) -> np.ndarray:
    """The sorted distinct values of flat cell ``ids`` below ``size``: through a bitmap of the
    array when the ids are dense in it (no sort), else `sorted_unique`.

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
    return sorted_unique(ids)


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


def box_ids(box: Box, shape: Shape) -> np.ndarray:
    """The flat ids (C order, sorted) of every cell of the half-open ``box`` (``((lo, hi), ...)``)
    in an array of ``shape``: one broadcast sum, no coordinates.

    Examples
    --------
    >>> box_ids(((1, 3), (2, 4)), (4, 5)).tolist()
    [7, 8, 12, 13]
    """
    strides = np.cumprod((1,) + tuple(int(n) for n in shape[:0:-1]))[::-1].astype(np.int64)
    total = np.zeros((), np.int64)
    for a, ((lo, hi), stride) in enumerate(zip(box, strides)):
        axis = np.arange(int(lo), int(hi), dtype=np.int64) * stride
        total = np.add.outer(total, axis) if a else axis
    return np.asarray(total, np.int64).reshape(-1)


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


class ArrayShape:
    """numpy's ``ndim`` and ``size`` for an array-like that has a ``shape`` (a mixin, slot-free)."""

    __slots__ = ()
    shape: tuple[int, ...]

    @property
    def ndim(self) -> int:
        """Number of axes."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of cells."""
        return int(np.prod(self.shape, dtype=np.int64))

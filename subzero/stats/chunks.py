"""Reading a label, flag or value array a chunk at a time: its nonzero cells, or its values at
given cells, without holding the whole array (a stored node's array, a Zarr array or anything
with ``shape``, ``dtype`` and slicing is read chunk by chunk; an in-memory array is indexed
directly)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

__all__ = ["nonzero_cells", "gather", "is_lazy", "chunks_of", "READ_CELLS"]

#: cells of one read of an array-like without chunks of its own (an h5py dataset, a memory map)
READ_CELLS = 1 << 22


def is_lazy(arr: Any) -> bool:
    """True for an array read by slicing (a stored node's, a Zarr array, anything with
    ``shape``, ``dtype`` and ``__getitem__`` that is not an in-memory numpy array)."""
    return not isinstance(arr, np.ndarray) and all(hasattr(arr, a) for a in ("shape", "dtype", "__getitem__"))


def _is_stored(arr) -> bool:
    return is_lazy(arr)


def chunks_of(arr: Any) -> tuple[int, ...]:
    """The chunk shape ``arr`` is read in: its own (``.chunks``), else blocks of whole trailing
    axes of about `READ_CELLS` cells.

    Examples
    --------
    >>> chunks_of(np.zeros((10, 4)))
    (10, 4)
    """
    shape = tuple(int(n) for n in arr.shape)
    own = getattr(arr, "chunks", None)
    if own is not None and len(tuple(own)) == len(shape) and all(isinstance(c, (int, np.integer)) for c in own):
        return tuple(max(1, int(c)) for c in own)
    if not shape:
        return ()
    inner = int(np.prod(shape[1:], dtype=np.int64))
    return (max(1, min(shape[0], READ_CELLS // max(inner, 1))),) + shape[1:]


def _chunk_boxes(shape, chunks):
    """Every chunk of the grid as ``(lo, slices)``, in row-major order."""
    ranges = [range(0, n, c) for n, c in zip(shape, chunks)]
    for lo in itertools.product(*ranges):
        yield np.asarray(lo, np.int64), tuple(slice(a, min(a + c, n)) for a, c, n in zip(lo, chunks, shape))


def nonzero_cells(arr: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(values, flat cell ids)`` of the nonzero cells of ``arr``, in flat order.

    Examples
    --------
    >>> nonzero_cells(np.array([[0, 3], [5, 0]]))
    (array([3, 5]), array([1, 2]))
    """
    shape = tuple(arr.shape)
    if not _is_stored(arr):
        flat = np.asarray(arr).reshape(-1)
        cells = np.flatnonzero(flat).astype(np.int64)
        return flat[cells], cells
    value_parts: list[np.ndarray] = []
    cell_parts: list[np.ndarray] = []
    for lo, box in _chunk_boxes(shape, chunks_of(arr)):
        block = np.asarray(arr[box])
        local = np.nonzero(block)
        if not len(local[0]):
            continue
        value_parts.append(block[local])
        cell_parts.append(np.ravel_multi_index(tuple(k + a for k, a in zip(local, lo)), shape).astype(np.int64))
    if not cell_parts:
        return np.empty(0, arr.dtype), np.empty(0, np.int64)
    values, cells = np.concatenate(value_parts), np.concatenate(cell_parts)
    order = np.argsort(cells, kind="stable")
    return values[order], cells[order]


def gather(arr: Any, cells: np.ndarray) -> np.ndarray:
    """The values of ``arr`` at flat ``cells`` (any order), reading only the chunks that hold them.

    Examples
    --------
    >>> gather(np.arange(6).reshape(2, 3), np.array([5, 0])).tolist()
    [5, 0]
    """
    cells = np.asarray(cells, np.int64)
    if not _is_stored(arr):
        return np.asarray(arr).reshape(-1)[cells]
    shape, chunks = tuple(arr.shape), chunks_of(arr)
    out = np.empty(len(cells), np.dtype(arr.dtype))
    if not len(cells):
        return out
    coords = np.stack(np.unravel_index(cells, shape), axis=1)
    grid = tuple(-(-n // c) for n, c in zip(shape, chunks))
    chunk = np.ravel_multi_index(tuple((coords // np.asarray(chunks)).T), grid)
    order = np.argsort(chunk, kind="stable")
    bounds = np.flatnonzero(np.r_[True, chunk[order][1:] != chunk[order][:-1], True])
    for a, b in zip(bounds[:-1], bounds[1:]):
        rows = order[a:b]
        lo = (coords[rows[0]] // np.asarray(chunks)) * np.asarray(chunks)
        box = tuple(slice(int(x), int(min(x + c, n))) for x, c, n in zip(lo, chunks, shape))
        block = np.asarray(arr[box])
        out[rows] = block[tuple((coords[rows] - lo).T)]
    return out

"""Reading a label, flag or value array a chunk at a time: its nonzero cells, or its values at
given cells, without holding the whole array (a stored node's array is read chunk by chunk;
an in-memory array is indexed directly)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

__all__ = ["nonzero_cells", "gather"]


def _is_stored(arr) -> bool:
    return not isinstance(arr, np.ndarray) and hasattr(arr, "chunks")


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
    for lo, box in _chunk_boxes(shape, tuple(arr.chunks)):
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
    shape, chunks = tuple(arr.shape), tuple(arr.chunks)
    out = np.empty(len(cells), arr.dtype)
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

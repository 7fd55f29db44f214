"""Objects of a label array read chunk by chunk: their geometry and the batches that carry them.

Nothing here holds a label array's labelled cells all at once:

- `block_geometry` reads a block of the label array's chunks and returns each label's partial
  geometry there (area, bounding box, coordinate sums, first cell); `Geometry.merge` adds the
  parts up by label (an object crossing chunk edges has one part per chunk), so the caller
  holds a few numbers per object;
- `plan_batches` groups neighbouring objects (ranked by their first cell, chunk by chunk) into
  `Batch`es described by their labels and the chunks their bounding boxes touch;
- `batch_cells` reads those chunks and keeps the batch's objects' cells: each batch's task
  finds its own cells, exactly, wherever it runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from subzero.encoders.ranges.lists import box_cells
from subzero.stats.chunks import chunks_of

__all__ = ["Geometry", "Batch", "chunk_blocks", "block_geometry", "plan_batches", "batch_cells"]

_MAX = np.iinfo(np.int64).max


@dataclass(frozen=True)
class Geometry:
    """Per object, in label order: ``labels`` (int64), ``area``, half-open bounding box
    ``lo``/``hi`` and coordinate ``sums`` (``(n, ndim)`` int64), and ``first``, the key of its
    first cell (chunk by chunk in row-major order of the chunk grid, then flat order inside).
    ``fractional``/``negative`` say whether any label read was not a whole number / below 0."""

    labels: np.ndarray
    area: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    sums: np.ndarray
    first: np.ndarray
    fractional: bool = False
    negative: bool = False

    @classmethod
    def empty(cls, ndim: int) -> "Geometry":
        """No objects."""
        z = np.zeros(0, np.int64)
        zz = np.zeros((0, ndim), np.int64)
        return cls(z, z, zz, zz, zz, z)

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def centroid(self) -> np.ndarray:
        """``(n, ndim)`` mean coordinates."""
        return self.sums.astype(np.float64) / np.maximum(self.area, 1)[:, None]

    @classmethod
    def of_cells(cls, values: np.ndarray, coords: np.ndarray, first: np.ndarray) -> "Geometry":
        """The geometry of labelled cells: int64 ``values``, ``(N, ndim)`` ``coords``, each
        cell's rank key ``first``."""
        order = np.argsort(values, kind="stable")
        ranked = values[order]
        starts = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]]) if len(ranked) else np.zeros(0, np.int64)
        if not len(starts):
            return cls.empty(coords.shape[1])
        at = coords[order]
        return cls(ranked[starts], np.diff(np.r_[starts, len(ranked)]).astype(np.int64),
                   np.minimum.reduceat(at, starts, axis=0), np.maximum.reduceat(at, starts, axis=0) + 1,
                   np.add.reduceat(at, starts, axis=0), np.minimum.reduceat(first[order], starts))

    @classmethod
    def merge(cls, parts: "list[Geometry]", ndim: int) -> "Geometry":
        """The parts added up by label (areas and sums added, boxes joined, first cells the least)."""
        parts = [p for p in parts if len(p)] or [cls.empty(ndim)]
        fractional = any(p.fractional for p in parts)
        negative = any(p.negative for p in parts)
        if len(parts) == 1:
            p = parts[0]
            return cls(p.labels, p.area, p.lo, p.hi, p.sums, p.first, fractional, negative)
        labels = np.concatenate([p.labels for p in parts])
        order = np.argsort(labels, kind="stable")
        ranked = labels[order]
        starts = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]])

        def joined(name: str, ufunc) -> np.ndarray:
            return ufunc.reduceat(np.concatenate([getattr(p, name) for p in parts])[order], starts, axis=0)

        return cls(ranked[starts], joined("area", np.add), joined("lo", np.minimum), joined("hi", np.maximum),
                   joined("sums", np.add), joined("first", np.minimum), fractional, negative)


@dataclass(frozen=True)
class Batch:
    """Neighbouring objects carried together: their positions in the table (``objects``, sorted,
    so label order), their ``labels``, the chunks of the label array holding their cells
    (``chunks``: indices into the row-major chunk grid) and the union of their bounding boxes
    (``lo``, ``hi``).  ``cells``/``local``: their cells (flat ids) and each cell's object
    (0..len(objects)-1), filled in when the label array cannot travel to the task (in memory)."""

    objects: np.ndarray
    labels: np.ndarray
    chunks: np.ndarray
    lo: tuple[int, ...]
    hi: tuple[int, ...]
    cells: np.ndarray | None = None
    local: np.ndarray | None = None


def _grid(shape: tuple[int, ...], chunks: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(-(-n // c) for n, c in zip(shape, chunks))


def chunk_blocks(shape: tuple[int, ...], chunks: tuple[int, ...], blocks: int) -> list[np.ndarray]:
    """The chunk grid's chunks (row-major indices) split into at most ``blocks`` runs of
    neighbouring chunks, one per geometry task.

    Examples
    --------
    >>> [b.tolist() for b in chunk_blocks((10, 10), (4, 4), 2)]
    [[0, 1, 2, 3, 4], [5, 6, 7, 8]]
    """
    n = int(np.prod(_grid(shape, chunks), dtype=np.int64))
    return [b for b in np.array_split(np.arange(n, dtype=np.int64), max(1, min(blocks, n))) if len(b)]


def _chunk_box(index: int, shape, chunks) -> tuple[np.ndarray, np.ndarray]:
    at = np.asarray(np.unravel_index(int(index), _grid(shape, chunks)), np.int64) * np.asarray(chunks, np.int64)
    return at, np.minimum(at + np.asarray(chunks, np.int64), np.asarray(shape, np.int64))


def _labelled(arr: Any, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool, bool]:
    """The labelled cells of ``arr[lo:hi]``: int64 labels, ``(N, ndim)`` coordinates, and whether
    some label was not a whole number / was negative."""
    block = np.asarray(arr[tuple(slice(int(a), int(b)) for a, b in zip(lo, hi))])
    local = np.nonzero(block)
    values = block[local]
    fractional = False
    if np.issubdtype(values.dtype, np.floating):  # labels stored as floats (e.g. from FITS): whole numbers only
        fractional = not (np.all(np.isfinite(values)) and np.array_equal(values, np.round(values)))
        if fractional:
            values = np.nan_to_num(values)
    values = values.astype(np.int64)
    coords = np.stack(local, axis=1).astype(np.int64) + lo if len(lo) else np.zeros((len(values), 0), np.int64)
    return values, coords, fractional, bool(len(values) and values.min() < 0)


def block_geometry(arr: Any, block: np.ndarray) -> Geometry:
    """The partial geometry of the labels in the chunks ``block`` of ``arr`` (read one chunk at a
    time, each chunk's cells reduced by label before the next is read)."""
    shape, chunks = tuple(int(n) for n in arr.shape), chunks_of(arr)
    size = int(np.prod(shape, dtype=np.int64))
    n_chunks = int(np.prod(_grid(shape, chunks), dtype=np.int64))
    chunk_major = n_chunks * max(size, 1) < 2**62  # else the first cell in flat order
    parts = []
    for index in np.asarray(block, np.int64).tolist():
        lo, hi = _chunk_box(index, shape, chunks)
        values, coords, fractional, negative = _labelled(arr, lo, hi)
        flat = np.ravel_multi_index(tuple(coords.T), shape).astype(np.int64) if shape else np.zeros(len(values), np.int64)
        key = index * size + flat if chunk_major else flat
        part = Geometry.of_cells(values, coords, key)
        parts.append(Geometry(part.labels, part.area, part.lo, part.hi, part.sums, part.first, fractional, negative))
    return Geometry.merge(parts, len(shape))


def plan_batches(geometry: Geometry, shape: tuple[int, ...], chunks: tuple[int, ...],
                 batch_objects: int | None) -> list[Batch]:
    """The objects in batches of at most ``batch_objects`` (None: one batch), neighbours together:
    ranked by their first cell (chunk by chunk), each batch with the chunks its objects'
    bounding boxes touch."""
    n = len(geometry)
    if not n:
        return []
    rank = np.argsort(geometry.first, kind="stable")
    step = n if batch_objects is None else batch_objects
    grid = _grid(shape, chunks)
    ext = np.asarray(chunks, np.int64)
    out = []
    for a in range(0, n, step):
        objects = np.sort(rank[a:a + step])
        lo, hi = geometry.lo[objects], geometry.hi[objects]
        c_lo, c_hi = lo // ext, (hi - 1) // ext + 1
        _, touched = box_cells(c_lo, c_hi)
        ids = np.unique(np.ravel_multi_index(tuple(touched.T), grid)) if len(grid) else np.zeros(1, np.int64)
        out.append(Batch(objects, geometry.labels[objects], ids.astype(np.int64),
                         tuple(int(v) for v in lo.min(axis=0)), tuple(int(v) for v in hi.max(axis=0))))
    return out


def batch_cells(arr: Any, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
    """``(object, flat cell)`` of every cell of the batch's objects (object: 0..len(objects)-1),
    read from the chunks of ``arr`` the batch names, each clipped to the batch's bounding box."""
    if batch.cells is not None and batch.local is not None:
        return batch.local, batch.cells
    shape, chunks = tuple(int(n) for n in arr.shape), chunks_of(arr)
    b_lo, b_hi = np.asarray(batch.lo, np.int64), np.asarray(batch.hi, np.int64)
    local_parts, cell_parts = [], []
    for index in batch.chunks.tolist():
        lo, hi = _chunk_box(index, shape, chunks)
        lo, hi = np.maximum(lo, b_lo), np.minimum(hi, b_hi)
        if np.any(hi <= lo):
            continue
        values, coords, _, _ = _labelled(arr, lo, hi)
        pos = np.minimum(np.searchsorted(batch.labels, values), len(batch.labels) - 1)
        keep = batch.labels[pos] == values
        local_parts.append(pos[keep].astype(np.int64))
        cell_parts.append(np.ravel_multi_index(tuple(coords[keep].T), shape).astype(np.int64) if shape
                          else np.zeros(int(keep.sum()), np.int64))
    if not cell_parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(local_parts), np.concatenate(cell_parts)

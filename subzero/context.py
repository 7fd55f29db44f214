"""The per-task context an operator's ``run`` receives: modes to produce and ``lwrite``.

``lwrite`` only appends numpy arrays to in-memory buffers; nothing touches storage
until the runtime encodes the finished task's lineage in one batch.  Coordinates given
to ``lwrite`` are in the frame of the arrays ``run`` sees (the array it returns, and
each input it was handed); the context adds the tile offsets, so stored lineage is
always in global array coordinates.  For an operator that runs on whole arrays the
two frames are the same.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from subzero.cells import box_ids, to_ids
from subzero.errors import LineageError
from subzero.modes import Mode
from subzero.pairs import FullPairs, PayloadPairs, ptr_from_counts
from subzero.tiling import Box

__all__ = ["Context", "CoveredPairs"]


class Context:
    """What ``Operator.run`` gets as ``ctx``.

    Attributes
    ----------
    modes : frozenset of Mode
        The lineage modes to produce in this call (empty or ``{BLACKBOX}``: none).
    tile_box : tuple of (lo, hi)
        The output box this task computes, in global coordinates.
    input_boxes : tuple of boxes
        The box of each input handed to ``run``, in global coordinates.
    """

    def __init__(self, op_name: str, modes: Iterable[Mode], tile_box: Box, input_boxes: tuple[Box, ...],
                 input_shapes: tuple[tuple[int, ...], ...], output_shape: tuple[int, ...] | None,
                 reader: Callable[[int, Box], np.ndarray] | None = None):
        self.op_name = op_name
        self._reader = reader
        self.modes = frozenset(modes)
        self.tile_box = tile_box
        self.input_boxes = input_boxes
        self._input_shapes = input_shapes
        self._output_shape = output_shape
        self._full: list[tuple[np.ndarray, np.ndarray, list[np.ndarray], list[np.ndarray]]] = []
        self._pay: list[tuple[np.ndarray, np.ndarray, list[bytes]]] = []
        self._result_shape: tuple[int, ...] | None = None
        self._tile: tuple[bytes, np.ndarray, np.ndarray] | None = None

    # -- the API operators call ----------------------------------------------------
    def read_input(self, i: int, box: Box) -> np.ndarray:
        """Cells of input ``i`` in ``box`` (global coordinates), beyond what ``run`` was handed:
        for operators that must look outside their tile (declare how far with
        `subzero.Operator.lineage_box`)."""
        shape = self._input_shapes[i]
        if len(box) != len(shape) or any(not 0 <= lo <= hi <= n for (lo, hi), n in zip(box, shape)):
            raise LineageError(f"{self.op_name}: read_input({i}, {box}) is outside input {i} of shape {shape}")
        if self._reader is None:
            raise LineageError(f"{self.op_name}: read_input is not available here (no stored inputs)")
        return self._reader(i, tuple((int(lo), int(hi)) for lo, hi in box))

    def lwrite(self, outcells: ArrayLike, *incells: ArrayLike, payload: Any = None, in_global: bool = False) -> None:
        """Record one region pair: every cell of ``outcells`` depends on every cell of each
        ``incells[i]`` (or on what ``map_p`` computes from ``payload``).

        ``payload`` may also be a sequence (or array) with one payload per out cell, which
        records one pair per cell in a single call.  ``in_global`` takes the input cells in
        global coordinates (cells read with `read_input`) instead of the frame ``run`` saw.
        """
        out = self._coords(outcells, None, "outcells")
        if payload is not None:
            if incells:
                raise LineageError(f"{self.op_name}: lwrite takes input cells or a payload, not both")
            if isinstance(payload, (bytes, bytearray, memoryview)):
                self._pay.append((out, np.zeros(len(out), np.int64), [bytes(payload)]))
            else:
                payloads = _per_cell_payloads(payload, len(out), self.op_name)
                self._pay.append((out, np.arange(len(out), dtype=np.int64), payloads))
            return
        if len(incells) != len(self._input_shapes):
            raise LineageError(
                f"{self.op_name}: lwrite got {len(incells)} input cell arrays, the operator has "
                f"{len(self._input_shapes)} inputs; pass one (possibly empty) array per input"
            )
        ins = [self._coords(c, i, f"incells[{i}]", in_global) for i, c in enumerate(incells)]
        self._full.append((out, np.zeros(len(out), np.int64), ins, [np.zeros(len(c), np.int64) for c in ins]))

    def lwrite_many(self, outcells: ArrayLike, *incells: ArrayLike, out_pair: ArrayLike,
                    in_pair: Sequence[ArrayLike] | None = None, payload: Any = None, in_global: bool = False) -> None:
        """Record many region pairs at once: pair ``p`` is the out cells with
        ``out_pair == p`` and, per input ``i``, the cells with ``in_pair[i] == p``.

        For payload lineage give ``payload`` instead of input cells: one payload per pair
        label (a sequence of bytes, or an array whose row ``p`` is pair ``p``'s payload).
        ``in_global`` is as for `lwrite`.
        """
        out = self._coords(outcells, None, "outcells")
        out_labels = self._labels(out_pair, len(out))
        if payload is not None:
            if incells or in_pair is not None:
                raise LineageError(f"{self.op_name}: lwrite_many takes input cells or payloads, not both")
            n_pairs = len(payload)
            if len(out_labels) and out_labels.max() >= n_pairs:
                raise LineageError(f"{self.op_name}: lwrite_many out_pair label {int(out_labels.max())} "
                                   f"has no payload (got {n_pairs} payloads)")
            self._pay.append((out, out_labels, _per_cell_payloads(payload, n_pairs, self.op_name)))
            return
        ins = [self._coords(c, i, f"incells[{i}]", in_global) for i, c in enumerate(incells)]
        if len(ins) != len(self._input_shapes) or in_pair is None or len(in_pair) != len(ins):
            raise LineageError(f"{self.op_name}: lwrite_many needs one cell array and one in_pair per input")
        self._full.append((out, out_labels, ins, [self._labels(p, len(c)) for p, c in zip(in_pair, ins)]))

    def lwrite_tile(self, payload: bytes, record_lo: np.ndarray, record_hi: np.ndarray) -> None:
        """Record one payload pair over every cell of the tile: the operator's ``map_p``
        resolves the payload cell by cell (Label reads each cell's component back from
        its stored output).  ``record_lo``/``record_hi`` (``(m, ndim)``, half-open, global
        coordinates of input 0) are the boxes of the ``m`` records the payload names: every
        out cell in none of them must read only itself.  Encoders of one payload per cell
        store the payload and the boxes, not the cells (a *covered tile*).  Nothing else
        may be written with payloads in the same call.
        """
        ndim = len(self._input_shapes[0]) if self._input_shapes else 0
        lo, hi = np.asarray(record_lo, np.int64), np.asarray(record_hi, np.int64)
        if lo.shape != hi.shape or lo.ndim != 2 or lo.shape[1] != ndim:
            raise LineageError(f"{self.op_name}: lwrite_tile record boxes must be two (m, ndim) arrays of input 0's "
                               f"axes, got shapes {lo.shape} and {hi.shape}")
        self._tile = (bytes(payload), lo, hi)

    def _labels(self, labels, n: int) -> np.ndarray:
        lab = np.asarray(labels, np.int64).reshape(-1)
        if len(lab) and lab.min() < 0:
            raise LineageError(f"{self.op_name}: lwrite_many pair labels must be >= 0, got {int(lab.min())}")
        if len(lab) != n:
            raise LineageError(f"{self.op_name}: lwrite_many got {len(lab)} pair labels for {n} cells")
        return lab

    # -- what the runtime reads back -----------------------------------------------
    @property
    def wrote_full(self) -> bool:
        """True once ``run`` recorded full pairs."""
        return bool(self._full)

    @property
    def wrote_payload(self) -> bool:
        """True once ``run`` recorded payload pairs."""
        return bool(self._pay)

    def full_pairs(self, result_box: Box) -> FullPairs:
        """All full pairs in global cell ids, trimmed to the tile's output box."""
        n_in = len(self._input_shapes)
        if not self._full:
            return FullPairs.empty(n_in)
        offs, n_labels = _offsets([[o] + list(ins) for _, o, _, ins in self._full])
        out_ids, out_lab, keep = self._out_ids(
            result_box, [c[0] for c in self._full], [c[1] + off for c, off in zip(self._full, offs)], n_labels)
        ins = []
        for i in range(n_in):
            origin = np.array([lo for lo, _ in self.input_boxes[i]], np.int64)
            cells = np.concatenate([c[2][i] for c in self._full]) + origin
            labs = np.concatenate([c[3][i] + off for c, off in zip(self._full, offs)])
            ins.append(_group(to_ids(cells, self._input_shapes[i]), labs, keep))
        out = _group(out_ids, out_lab, keep)
        return FullPairs(out[0], out[1], tuple(a for a, _ in ins), tuple(b for _, b in ins))

    def payload_pairs(self, result_box: Box) -> PayloadPairs:
        """All payload pairs in global cell ids, trimmed to the tile's output box."""
        if self._tile is not None:
            return self._tile_pairs(*self._tile)
        if not self._pay:
            return PayloadPairs.empty()
        offs, n_labels = _offsets([[lab] for _, lab, _ in self._pay], [len(p) for _, _, p in self._pay])
        out_ids, out_lab, keep = self._out_ids(
            result_box, [c[0] for c in self._pay], [c[1] + off for c, off in zip(self._pay, offs)], n_labels)
        ids, ptr = _group(out_ids, out_lab, keep)
        payloads = [b for _, _, bs in self._pay for b in bs]
        return PayloadPairs(ids, ptr, [b for b, k in zip(payloads, keep) if k])

    def _tile_pairs(self, payload: bytes, lo: np.ndarray, hi: np.ndarray) -> PayloadPairs:
        """The covered tile of `lwrite_tile`: one pair over every cell of the tile box, its
        envelope (the tile and every record's box) and the record boxes."""
        if self._pay:
            raise LineageError(f"{self.op_name}: lwrite_tile covers the whole tile; it cannot be mixed with "
                               "other payload pairs in one call")
        box = tuple((int(a), int(b)) for a, b in self.tile_box)
        if self._output_shape is None or len(self._output_shape) != len(self._input_shapes[0]):
            raise LineageError(f"{self.op_name}: lwrite_tile needs an output of the input's axes")
        tlo = np.array([a for a, _ in box], np.int64)
        thi = np.array([b for _, b in box], np.int64)
        elo = np.minimum(tlo, lo.min(axis=0)) if len(lo) else tlo
        ehi = np.maximum(thi, hi.max(axis=0)) if len(hi) else thi
        envelopes = ((elo.reshape(1, -1), ehi.reshape(1, -1)),)
        return CoveredPairs(self._output_shape, payload, envelopes, box, ((lo, hi),))


    # -- helpers -----------------------------------------------------------------------
    def _coords(self, cells, i: int | None, what: str, in_global: bool = False) -> np.ndarray:
        """``cells`` as checked (N, ndim) int64 coordinates in the frame ``run`` saw (input
        ``i``'s, or the output's when ``i`` is None); ``in_global`` cells are checked against
        the whole input and moved into that frame."""
        arr = np.asarray(cells)
        if in_global and i is not None:
            shape: tuple[int, ...] | None = self._input_shapes[i]
            where = f"input {i} of shape {shape}"
        else:
            shape = self._frame_shape(i)
            where = f"the array of shape {shape} that run() sees"
        if arr.size == 0:
            return np.empty((0, len(shape) if shape is not None else 0), np.int64)
        if arr.dtype.kind not in "iu" or arr.ndim != 2 or (shape is not None and arr.shape[1] != len(shape)):
            raise LineageError(f"{self.op_name}: lwrite {what} must be an (N, {len(shape) if shape is not None else 'ndim'}) "
                               f"integer coordinate array, got {arr.dtype} array of shape {arr.shape}")
        arr = arr.astype(np.int64, copy=False)
        if shape is None:  # output frame not known until run() returns: checked in _out_ids
            return arr
        if len(arr) and (arr.min() < 0 or np.any(arr.max(axis=0) >= np.asarray(shape))):  # reductions, no (N, ndim) mask
            bad = np.any((arr < 0) | (arr >= np.asarray(shape)), axis=1)
            raise LineageError(f"{self.op_name}: lwrite {what} has cell {tuple(arr[np.argmax(bad)].tolist())} "
                               f"outside {where}")
        return arr - np.array([lo for lo, _ in self.input_boxes[i]], np.int64) if in_global and i is not None else arr

    def _frame_shape(self, i: int | None) -> tuple[int, ...] | None:
        if i is None:
            return self._result_shape
        return tuple(hi - lo for lo, hi in self.input_boxes[i])

    def bind_output(self, box: Box, shape: tuple[int, ...]) -> None:
        """Fix the tile box and output shape once run() has returned (whole arrays whose
        output shape only running tells)."""
        self.tile_box, self._output_shape = box, tuple(shape)

    def set_result_box(self, box: Box | None) -> None:
        """Fix the frame of out cells (the array run() returns), when known before run()."""
        self._result_shape = None if box is None else tuple(hi - lo for lo, hi in box)

    def _out_ids(self, result_box: Box, cells: list[np.ndarray], labels: list[np.ndarray], n_labels: int):
        """Global out ids trimmed to the tile, their pair labels, and which pairs survive."""
        origin = np.array([lo for lo, _ in result_box], np.int64)
        cells = [c for c in cells if len(c)]
        if any(c.shape[1] != len(origin) for c in cells):
            bad = next(c for c in cells if c.shape[1] != len(origin))
            raise LineageError(f"{self.op_name}: lwrite outcells have {bad.shape[1]} coordinates, the output "
                               f"run() returned has {len(origin)} axes")
        every = np.concatenate(cells) if cells else np.empty((0, len(origin)), np.int64)
        frame = np.array([hi - lo for lo, hi in result_box], np.int64)
        low = every.min(axis=0) if len(every) else np.zeros(len(origin), np.int64)
        high = every.max(axis=0) if len(every) else np.full(len(origin), -1, np.int64)
        if np.any(low < 0) or np.any(high >= frame):
            bad = every[np.argmax(np.any((every < 0) | (every >= frame), axis=1))]
            raise LineageError(
                f"{self.op_name}: lwrite outcells has cell {tuple(bad.tolist())} outside the "
                f"output of shape {tuple(frame.tolist())} that run() returned")
        every = every + origin
        labels = np.concatenate(labels)
        lo = np.array([a for a, _ in self.tile_box], np.int64)
        hi = np.array([b for _, b in self.tile_box], np.int64)
        if np.all(low + origin >= lo) and np.all(high + origin < hi):  # every cell in the tile (the usual case)
            inside = np.ones(len(every), bool)
        else:
            inside = np.all((every >= lo) & (every < hi), axis=1)
        keep = np.zeros(n_labels, dtype=bool)
        keep[labels[inside]] = True
        return to_ids(every[inside], self._output_shape), labels[inside], keep


def _offsets(label_sets: list[list[np.ndarray]], minimum: list[int] | None = None) -> tuple[list[int], int]:
    """Offsets that make the pair labels of successive lwrite calls distinct, and the total."""
    offs, total = [], 0
    for k, labels in enumerate(label_sets):
        offs.append(total)
        top = max((int(lab.max()) + 1 for lab in labels if len(lab)), default=0)
        total += max(top, minimum[k] if minimum else 0)
    return offs, total


def _group(ids: np.ndarray, labels: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR arrays grouping ``ids`` by label, over the labels where ``keep`` is set (renumbered)."""
    n = len(keep)
    sel = keep[labels] if len(labels) else np.zeros(0, bool)
    ids, labels = ids[sel], labels[sel]
    if len(ids) > 1 and np.all(ids[1:] >= ids[:-1]):  # ids in order (cells written in raster order): sort labels
        order = np.argsort(labels.astype(np.uint16) if n <= 1 << 16 else labels, kind="stable")  # 16 bits: radix
    else:
        order = np.lexsort((ids, labels))
    ids, labels = ids[order], labels[order]
    counts = np.bincount(labels, minlength=n)[keep]
    return ids, ptr_from_counts(counts)


def _per_cell_payloads(payload, n: int, op_name: str) -> list[bytes]:
    if isinstance(payload, np.ndarray):
        rows = np.ascontiguousarray(payload.reshape(len(payload), int(np.prod(payload.shape[1:]))) if payload.ndim else payload.reshape(1, 1))
        buf, width = rows.tobytes(), rows.shape[1] * rows.itemsize
        items = [buf[k : k + width] for k in range(0, len(buf), width)] if width else [b""] * len(rows)
    elif isinstance(payload, Sequence) and not isinstance(payload, str):
        items = [bytes(p) for p in payload]
    else:
        raise LineageError(f"{op_name}: lwrite payload must be bytes or one payload per out cell, got {type(payload).__name__}")
    if len(items) != n:
        raise LineageError(f"{op_name}: lwrite got {len(items)} payloads for {n} out cells")
    return items


class CoveredPairs(PayloadPairs):
    """The `PayloadPairs` of a covered tile (`Context.lwrite_tile`), whose out cells (every cell
    of the box ``cover`` of an array of ``shape``) are made only when read: storing the tile
    (PayOne, CompOne) needs only their count, ``out_ptr[-1]``."""

    def __init__(self, shape: tuple[int, ...], payload: bytes, envelopes: Any, cover: Box, records: Any):
        self._shape = tuple(shape)
        self._ids: np.ndarray | None = None
        count = int(np.prod([b - a for a, b in cover], dtype=np.int64))
        super().__init__(None, np.array([0, count], np.int64), [payload], envelopes, tuple(cover), records)

    @property
    def out_ids(self) -> np.ndarray:
        """The tile's cell ids, in C order (made on first read)."""
        ids = self._ids
        if ids is None:
            ids = self._ids = box_ids(self.cover, self._shape)
        return ids

    @out_ids.setter
    def out_ids(self, ids: np.ndarray | None) -> None:
        self._ids = ids

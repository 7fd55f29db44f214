"""Reductions: along axes (mapping: an output cell reads the whole line or sub-box it
reduces), and whole-array statistics (all-to-all)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from subzero.cells import mask_from_coords
from subzero.context import Context
from subzero.errors import WorkflowError
from subzero.operator import Operator
from subzero.operators._args import normalize_axes
from subzero.operators._kernels import corner_offsets, unique_rows
from subzero.operators.tilings import MapTiled, ReducedAxes
from subzero.tiling import Shape, Tiling

__all__ = ["AxisReduction", "DdofReduction", "Sum", "Mean", "Std", "Min", "Max", "Count", "GlobalMean", "GlobalStd"]


class AxisReduction(MapTiled):
    """Base of ``np.<reduce>(x, axis)`` over one axis or a tuple of axes; subclasses set
    ``fn`` (or override ``reduce``).  Tiles split the kept axes."""

    entire_array_safe = True
    fn = staticmethod(np.sum)

    def __init__(self, axis: int | Sequence[int] = 0):
        self.axis = tuple(axis) if isinstance(axis, Sequence) else axis

    def _axes(self, ndim: int | None = None) -> tuple[int, ...]:
        ndim = len(self.input_shapes[0]) if ndim is None else ndim
        return normalize_axes(self.axis, ndim, type(self).__name__)

    def tiling_for(self) -> Tiling:
        return ReducedAxes(self._axes())

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        shape = tuple(input_shapes[0])
        axes = self._axes(len(shape))
        return tuple(n for a, n in enumerate(shape) if a not in axes)

    def reduce(self, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        """``x`` reduced over ``axes``."""
        return type(self).fn(x, axis=axes)

    def run(self, ctx: Context, x: np.ndarray) -> np.ndarray:
        return np.asarray(self.reduce(x, self._axes()))

    # -- lineage ------------------------------------------------------------------------
    def map_b_pairs(self, cells: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        cells = np.asarray(cells, np.int64)
        shape, axes = self.input_shapes[0], self._axes()
        sub = corner_offsets(tuple(shape[a] for a in axes))
        kept = [a for a in range(len(shape)) if a not in axes]
        coords = np.empty((len(cells), len(sub), len(shape)), np.int64)
        coords[:, :, kept] = cells[:, None, :]
        coords[:, :, list(axes)] = sub[None, :, :]
        return np.repeat(np.arange(len(cells), dtype=np.int64), len(sub)), coords.reshape(-1, len(shape))

    def map_b(self, cells: np.ndarray, i: int) -> np.ndarray:
        cells = np.asarray(cells, np.int64).reshape(-1, len(self.output_shape))
        shape = self.input_shapes[0]
        reduced = int(np.prod([shape[a] for a in self._axes()]))
        if len(cells) * reduced * 8 < int(np.prod(shape)):  # a few cells: their own pairs, not a mask of the input
            return unique_rows(self.map_b_pairs(cells, i)[1])
        return np.argwhere(self.map_b_mask(mask_from_coords(cells, self.output_shape), i))

    def map_f(self, cells: np.ndarray, i: int) -> np.ndarray:
        return np.unique(np.delete(np.asarray(cells, np.int64), self._axes(), axis=1), axis=0)

    def map_b_boxes(self, lo: np.ndarray, hi: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Output boxes to the input boxes they reduce: the same extent on the kept axes, the
        whole of each reduced axis (arithmetic over the boxes, whatever the reduced lines' length)."""
        lo, hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
        shape, axes = self.input_shapes[0], self._axes()
        kept = [a for a in range(len(shape)) if a not in axes]
        in_lo = np.zeros((len(lo), len(shape)), np.int64)
        in_hi = np.broadcast_to(np.asarray(shape, np.int64), (len(lo), len(shape))).copy()
        in_lo[:, kept], in_hi[:, kept] = lo, hi
        empty = np.any(hi <= lo, axis=1)  # an empty box stays empty
        in_hi[empty] = in_lo[empty]
        return in_lo, in_hi

    def map_f_boxes(self, lo: np.ndarray, hi: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Input boxes to the output cells reducing them: the box without its reduced axes."""
        axes = self._axes()
        return (np.delete(np.asarray(lo, np.int64), axes, axis=1), np.delete(np.asarray(hi, np.int64), axes, axis=1))

    def map_b_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        return np.broadcast_to(np.expand_dims(mask, self._axes()), self.input_shapes[0]).copy()

    def map_f_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        return np.asarray(mask.any(axis=self._axes()))


class Sum(AxisReduction):
    """``np.sum(x, axis)``."""

    fn = staticmethod(np.sum)


class Mean(AxisReduction):
    """``np.mean(x, axis)``."""

    fn = staticmethod(np.mean)


class DdofReduction(AxisReduction):
    """Base of the reductions that take ``ddof`` too: ``fn(x, axis, ddof=ddof)``."""

    fn: Callable[..., Any] = staticmethod(np.std)  # numpy's std and nanstd differ in their overloads

    def __init__(self, axis: int | Sequence[int] = 0, ddof: int = 0):
        super().__init__(axis)
        self.ddof = int(ddof)

    def reduce(self, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        return type(self).fn(x, axis=axes, ddof=self.ddof)


class Std(DdofReduction):
    """``np.std(x, axis, ddof=ddof)``."""


class Min(AxisReduction):
    """``np.min(x, axis)``."""

    fn = staticmethod(np.min)


class Max(AxisReduction):
    """``np.max(x, axis)``."""

    fn = staticmethod(np.max)


class Count(AxisReduction):
    """``np.count_nonzero(x, axis)``: the number of non-zero (True) cells along the axes."""

    fn = staticmethod(np.count_nonzero)


class _GlobalStatistic(Operator):
    """A statistic of the whole array: all-to-all, so its only mode is ``BLACKBOX``.

    The output keeps the input's axes with length 1 (``keepdims=True``), so it broadcasts
    against the input (``Subtract()(x, GlobalMean()(x))`` centres ``x``).
    """

    entire_array_safe = True

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        if len(input_shapes[0]) == 0:
            raise WorkflowError(f"{type(self).__name__}: expected an array of at least 1 axis, got a 0-d array")
        return (1,) * len(input_shapes[0])


class GlobalMean(_GlobalStatistic):
    """``np.mean(x, keepdims=True)``."""

    def run(self, ctx: Context, x: np.ndarray) -> np.ndarray:
        return np.mean(x, keepdims=True)


class GlobalStd(_GlobalStatistic):
    """``np.std(x, ddof=ddof, keepdims=True)``."""

    def __init__(self, ddof: int = 0):
        self.ddof = int(ddof)

    def run(self, ctx: Context, x: np.ndarray) -> np.ndarray:
        return np.std(x, ddof=self.ddof, keepdims=True)

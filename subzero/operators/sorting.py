"""Sorting along an axis: each output cell depends on its whole input line.

Why the whole line and not the one input cell a sorted value was copied from: the value
at position ``k`` of a sorted line is the line's ``k``-th smallest, which every cell of
the line decides (raise any smaller cell above it and position ``k`` changes).  With
whole-line lineage, re-running the operator on only the backward lineage of a cell (any
other cell replaced) reproduces that cell's value; with single-source lineage it would
not.  The same holds for ArgSort's ranks.  Whole-line lineage depends on coordinates
only, so both operators are mapping operators, tiled into whole lines.
"""

from __future__ import annotations

import numpy as np

from subzero.cells import mask_from_coords
from subzero.context import Context
from subzero.operators._args import normalize_axis
from subzero.operators.tilings import Lines, MapTiled
from subzero.tiling import Shape, Tiling

__all__ = ["LineOperator", "Sort", "ArgSort"]


class LineOperator(MapTiled):
    """Base of operators whose output line along ``axis`` is a function of the input line."""

    entire_array_safe = True

    def __init__(self, axis: int = -1):
        self.axis = axis

    def _axis(self, ndim: int | None = None) -> int:
        ndim = len(self.input_shapes[0]) if ndim is None else ndim
        return normalize_axis(self.axis, ndim, type(self).__name__)

    def tiling_for(self) -> Tiling:
        return Lines(self._axis())

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        self._axis(len(input_shapes[0]))
        return tuple(input_shapes[0])

    def map_b_pairs(self, cells: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        cells = np.asarray(cells, np.int64)
        a, n = self._axis(), self.input_shapes[0][self._axis()]
        coords = np.repeat(cells, n, axis=0)
        coords[:, a] = np.tile(np.arange(n, dtype=np.int64), len(cells))
        return np.repeat(np.arange(len(cells), dtype=np.int64), n), coords

    def map_b(self, cells: np.ndarray, i: int) -> np.ndarray:
        return np.argwhere(self.map_b_mask(mask_from_coords(cells, self.output_shape), i))

    def map_f(self, cells: np.ndarray, i: int) -> np.ndarray:
        return np.argwhere(self.map_f_mask(mask_from_coords(cells, self.input_shapes[0]), i))

    def map_b_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        return np.broadcast_to(mask.any(axis=self._axis(), keepdims=True), mask.shape).copy()

    def map_f_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        return self.map_b_mask(mask, i)


class Sort(LineOperator):
    """``np.sort(x, axis)``."""

    def run(self, ctx: Context, x: np.ndarray) -> np.ndarray:
        return np.sort(x, axis=self._axis(), kind="stable")


class ArgSort(LineOperator):
    """``np.argsort(x, axis, kind="stable")``: positions within the line (ties keep order)."""

    def run(self, ctx: Context, x: np.ndarray) -> np.ndarray:
        return np.argsort(x, axis=self._axis(), kind="stable")

"""Stencil operators (scipy.ndimage): each output cell reads a fixed neighbourhood.

Lineage honours the boundary mode: with ``mode="reflect"`` a cell at the edge reads
reflected cells, and its lineage names those cells; with ``mode="constant"`` the
padding is not input, so it has no lineage.
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

from subzero.errors import WorkflowError
from subzero.modes import Mode
from subzero.operator import Operator
from subzero.operators._kernels import box_offsets, invert_pairs, shift_or, stencil_pairs, unique_rows
from subzero.tiling import Halo

__all__ = ["StencilOperator", "Convolve"]

MODES = ("reflect", "constant", "nearest", "mirror", "wrap", "grid-mirror", "grid-constant", "grid-wrap")


class StencilOperator(Operator):
    """Base of stencils: subclasses give ``offsets()`` (cells read, relative to the output
    cell) and ``run``.  Tiles carry a halo of the stencil's radius; ``wrap`` modes need
    the far edge, so they run on whole arrays."""

    entire_array_safe = True
    mode = "reflect"

    def supported_modes(self):
        return {Mode.MAP}

    def offsets(self) -> np.ndarray:
        raise NotImplementedError

    def radius(self) -> tuple[int, ...]:
        off = self.offsets()
        return tuple(int(r) for r in np.abs(off).max(axis=0)) if len(off) else (0,) * off.shape[1]

    @property
    def tiling(self):
        if "wrap" in self.mode or not self.input_shapes:
            return None
        return Halo(self.radius())

    def infer_output_shape(self, input_shapes):
        if len(input_shapes[0]) != self.offsets().shape[1]:
            raise WorkflowError(f"{type(self).__name__} has a {self.offsets().shape[1]}-D footprint, "
                                f"the input has shape {input_shapes[0]}")
        return tuple(input_shapes[0])

    def map_b_pairs(self, cells, i):
        return stencil_pairs(np.asarray(cells, np.int64), self.offsets(), self.input_shapes[0], self.mode)

    def map_b(self, cells, i):
        return unique_rows(self.map_b_pairs(cells, i)[1])

    def map_f(self, cells, i):
        cells = np.asarray(cells, np.int64)
        reach = box_offsets(self.radius())
        owner, near = stencil_pairs(cells, reach, self.output_shape,
                                    "wrap" if "wrap" in self.mode else "constant")
        candidates = unique_rows(near)
        return invert_pairs(cells, candidates, lambda c: self.map_b_pairs(c, i), self.input_shapes[0])

    def map_b_mask(self, mask, i):
        if self.mode not in ("constant", "grid-constant"):
            return None
        return shift_or(mask, self.offsets())

    def map_f_mask(self, mask, i):
        if self.mode not in ("constant", "grid-constant"):
            return None
        return shift_or(mask, -self.offsets())


class Convolve(StencilOperator):
    """``scipy.ndimage.convolve(x, kernel, mode, cval)``; lineage is the kernel's non-zero footprint."""

    def __init__(self, kernel, mode: str = "reflect", cval: float = 0.0):
        self.kernel = np.asarray(kernel, dtype=np.float64)
        if mode not in MODES:
            raise WorkflowError(f"mode {mode!r} is not a scipy.ndimage boundary mode; use one of {MODES}")
        self.mode, self.cval = mode, float(cval)

    def offsets(self) -> np.ndarray:
        center = np.array(self.kernel.shape) // 2
        return (center - np.argwhere(self.kernel != 0)).astype(np.int64)

    def run(self, ctx, x):
        return ndimage.convolve(np.asarray(x, dtype=np.float64), self.kernel, mode=self.mode, cval=self.cval)

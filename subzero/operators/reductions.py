"""Reductions along an axis: each output cell reads the whole line it reduces."""

from __future__ import annotations

import numpy as np

from subzero.cells import mask_from_coords
from subzero.errors import WorkflowError
from subzero.modes import Mode
from subzero.operator import Operator
from subzero.tiling import Reduced

__all__ = ["AxisReduction", "Sum"]


class AxisReduction(Operator):
    """Base of ``np.<reduce>(x, axis)``; subclasses set ``fn``."""

    entire_array_safe = True
    fn = staticmethod(np.sum)

    def __init__(self, axis: int = 0):
        self.axis = int(axis)

    @property
    def tiling(self):
        return Reduced(self._axis()) if self.input_shapes else None

    def _axis(self, shape=None) -> int:
        shape = shape if shape is not None else self.input_shapes[0]
        return self.axis % len(shape) if shape else 0

    def supported_modes(self):
        return {Mode.MAP}

    def infer_output_shape(self, input_shapes):
        shape = input_shapes[0]
        if not -len(shape) <= self.axis < len(shape):
            raise WorkflowError(f"axis {self.axis} is out of range for an input of shape {shape}")
        a = self._axis(shape)
        return tuple(shape[:a]) + tuple(shape[a + 1:])

    def run(self, ctx, x):
        return np.asarray(type(self).fn(x, axis=self._axis()))

    def map_b_pairs(self, cells, i):
        n = self.input_shapes[0][self._axis()]
        owner = np.repeat(np.arange(len(cells), dtype=np.int64), n)
        along = np.tile(np.arange(n, dtype=np.int64), len(cells))
        coords = np.insert(np.repeat(cells, n, axis=0), self._axis(), along, axis=1)
        return owner, coords

    def map_b(self, cells, i):
        return np.argwhere(self.map_b_mask(mask_from_coords(cells, self.output_shape), i))

    def map_f(self, cells, i):
        return np.unique(np.delete(np.asarray(cells, np.int64), self._axis(), axis=1), axis=0)

    def map_b_mask(self, mask, i):
        a = self._axis()
        return np.broadcast_to(np.expand_dims(mask, a), self.input_shapes[0]).copy()

    def map_f_mask(self, mask, i):
        return mask.any(axis=self._axis())


class Sum(AxisReduction):
    """``np.sum(x, axis)``."""

    fn = staticmethod(np.sum)


"""Operators that move cells without looking at values."""

from __future__ import annotations

import numpy as np

from subzero.errors import WorkflowError
from subzero.modes import Mode
from subzero.operator import Operator
from subzero.tiling import Permuted

__all__ = ["Transpose"]


class Transpose(Operator):
    """Permute axes (``np.transpose``); default reverses them."""

    entire_array_safe = True

    def __init__(self, axes: tuple[int, ...] | None = None):
        self.axes = None if axes is None else tuple(int(a) for a in axes)

    def _axes(self) -> tuple[int, ...]:
        return self.axes if self.axes is not None else tuple(reversed(range(len(self.input_shapes[0]))))

    @property
    def tiling(self):
        return Permuted(self._axes()) if self.input_shapes else None

    def supported_modes(self):
        return {Mode.MAP}

    def infer_output_shape(self, input_shapes):
        shape = input_shapes[0]
        axes = self.axes if self.axes is not None else tuple(reversed(range(len(shape))))
        if sorted(axes) != list(range(len(shape))):
            raise WorkflowError(f"axes {axes} is not a permutation of the {len(shape)} axes of shape {shape}")
        return tuple(shape[a] for a in axes)

    def run(self, ctx, x):
        return np.transpose(x, self._axes())

    def map_b(self, cells, i):
        out = np.empty_like(cells)
        out[:, list(self._axes())] = cells
        return out

    def map_f(self, cells, i):
        return cells[:, list(self._axes())]

    def map_b_pairs(self, cells, i):
        return np.arange(len(cells), dtype=np.int64), self.map_b(cells, i)

    def map_b_mask(self, mask, i):
        return np.transpose(mask, np.argsort(self._axes()))

    def map_f_mask(self, mask, i):
        return np.transpose(mask, self._axes())

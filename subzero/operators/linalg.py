"""Linear algebra operators."""

from __future__ import annotations

import numpy as np

from subzero.cells import mask_from_coords
from subzero.errors import WorkflowError
from subzero.modes import Mode
from subzero.operator import Operator
from subzero.tiling import RowBlocks

__all__ = ["MatMul"]


class MatMul(Operator):
    """``a @ b`` for 2-D arrays: out[r, c] reads row r of ``a`` and column c of ``b``."""

    tiling = RowBlocks()
    entire_array_safe = True

    def supported_modes(self):
        return {Mode.MAP}

    def infer_output_shape(self, input_shapes):
        (n, k), (k2, m) = input_shapes[0], input_shapes[1]
        if len(input_shapes[0]) != 2 or len(input_shapes[1]) != 2 or k != k2:
            raise WorkflowError(f"cannot multiply matrices of shapes {input_shapes[0]} and {input_shapes[1]}")
        return (n, m)

    def run(self, ctx, a, b):
        return np.asarray(a) @ np.asarray(b)

    def _k(self) -> int:
        return self.input_shapes[0][1]

    def map_b_pairs(self, cells, i):
        k = self._k()
        owner = np.repeat(np.arange(len(cells), dtype=np.int64), k)
        inner = np.tile(np.arange(k, dtype=np.int64), len(cells))
        fixed = np.repeat(cells[:, i if i == 0 else 1], k)
        coords = np.stack([fixed, inner] if i == 0 else [inner, fixed], axis=1)
        return owner, coords

    def map_b(self, cells, i):
        return np.argwhere(self.map_b_mask(mask_from_coords(cells, self.output_shape), i))

    def map_f(self, cells, i):
        return np.argwhere(self.map_f_mask(mask_from_coords(cells, self.input_shapes[i]), i))

    def map_b_mask(self, mask, i):
        out = np.zeros(self.input_shapes[i], bool)
        if i == 0:
            out[mask.any(axis=1), :] = True
        else:
            out[:, mask.any(axis=0)] = True
        return out

    def map_f_mask(self, mask, i):
        out = np.zeros(self.output_shape, bool)
        if i == 0:
            out[mask.any(axis=1), :] = True
        else:
            out[:, mask.any(axis=0)] = True
        return out


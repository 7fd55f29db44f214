"""Elementwise operators with numpy broadcasting: each output cell reads the same cell of
every input (size-1 axes read cell 0; missing leading axes are broadcast)."""

from __future__ import annotations

import numpy as np

from subzero.errors import WorkflowError
from subzero.modes import Mode
from subzero.operator import Operator
from subzero.operators._kernels import unique_rows
from subzero.tiling import Elementwise

__all__ = ["ElementwiseOperator", "Add", "Multiply"]


class ElementwiseOperator(Operator):
    """Base of elementwise operators: subclasses set ``fn`` (a numpy ufunc or function)."""

    tiling = Elementwise()
    entire_array_safe = True
    fn = None

    def supported_modes(self) -> set[Mode]:
        return {Mode.MAP}

    def infer_output_shape(self, input_shapes):
        try:
            return tuple(np.broadcast_shapes(*input_shapes))
        except ValueError:
            raise WorkflowError(f"input shapes {list(input_shapes)} do not broadcast together") from None

    def run(self, ctx, *inputs):
        return np.asarray(type(self).fn(*inputs))

    # -- lineage ------------------------------------------------------------------------
    def _to_input(self, cells: np.ndarray, i: int) -> np.ndarray:
        shape = self.input_shapes[i]
        mapped = cells[:, cells.shape[1] - len(shape):].copy()
        mapped[:, [k for k, n in enumerate(shape) if n == 1]] = 0
        return mapped

    def map_b(self, cells, i):
        return unique_rows(self._to_input(cells, i))

    def map_b_pairs(self, cells, i):
        return np.arange(len(cells), dtype=np.int64), self._to_input(cells, i)

    def map_f(self, cells, i):
        mask = np.zeros(self.input_shapes[i], bool)
        mask[tuple(np.asarray(cells, np.int64).T)] = True
        return np.argwhere(self.map_f_mask(mask, i))

    def map_b_mask(self, mask, i):
        shape = self.input_shapes[i]
        lead = mask.ndim - len(shape)
        reduced = mask.any(axis=tuple(range(lead))) if lead else mask
        axes = tuple(k for k, n in enumerate(shape) if n == 1 and reduced.shape[k] != 1)
        return reduced.any(axis=axes, keepdims=True) if axes else reduced.copy()

    def map_f_mask(self, mask, i):
        return np.broadcast_to(mask, self.output_shape).copy()


class Add(ElementwiseOperator):
    """``x + y``."""

    def run(self, ctx, x, y):
        return np.add(x, y)


class Multiply(ElementwiseOperator):
    """``x * y``."""

    def run(self, ctx, x, y):
        return np.multiply(x, y)

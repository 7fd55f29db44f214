"""Linear algebra: products are mapping operators (a cell reads whole rows and columns);
``Inverse`` is all-to-all."""

from __future__ import annotations

import numpy as np

from subzero.cells import mask_from_coords
from subzero.context import Context
from subzero.errors import WorkflowError
from subzero.operator import Operator
from subzero.operators._kernels import unique_rows
from subzero.operators.tilings import Contracted, MapTiled, OuterSplit
from subzero.tiling import Shape, Tiling

__all__ = ["Dot", "MatMul", "Outer", "Inverse"]


def _keep(mask: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """``mask`` reduced (any) over every axis outside ``[lo, hi)``."""
    return mask.any(axis=tuple(a for a in range(mask.ndim) if not lo <= a < hi))


def _place(part: np.ndarray, lo: int, shape: tuple[int, ...]) -> np.ndarray:
    """``part`` laid on axes ``[lo, lo + part.ndim)`` of an array of ``shape``, broadcast over the rest."""
    lead = (1,) * lo
    tail = (1,) * (len(shape) - lo - part.ndim)
    return np.broadcast_to(part.reshape(lead + part.shape + tail), shape).copy()


class Dot(MapTiled):
    """``np.dot(a, b)``: contracts the last axis of ``a`` with the second-to-last of ``b``
    (the only one of a 1-D ``b``).

    Output cell ``(ia..., ib...)`` reads ``a[ia..., :]`` and ``b[ib_pre..., :, ib_last]``.
    The product of two vectors has shape ``(1,)`` rather than numpy's 0-d scalar, so that
    its one cell can be named in lineage queries.
    """

    entire_array_safe = True

    # output axes [0, na) index a, [na, na + nb) index b (b without its contracted axis)
    def _layout(self, shapes=None) -> tuple[int, int, int]:
        a, b = shapes if shapes is not None else self.input_shapes
        return len(a) - 1, len(b) - 1, max(len(b) - 2, 0)

    def tiling_for(self) -> Tiling:
        return Contracted(self._layout()[0])

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        if len(input_shapes) != 2 or 0 in (len(input_shapes[0]), len(input_shapes[1])):
            raise WorkflowError(f"{type(self).__name__}: needs two arrays of at least 1 axis, got shapes "
                                f"{[tuple(s) for s in input_shapes]}")
        a, b = (tuple(s) for s in input_shapes)
        na, nb, cb = self._layout((a, b))
        if a[-1] != b[cb]:
            raise WorkflowError(f"{type(self).__name__}: shapes {a} and {b} are not aligned: axis {len(a) - 1} "
                                f"of a has {a[-1]} cells, axis {cb} of b has {b[cb]}")
        return (a[:-1] + b[:cb] + b[cb + 1:]) or (1,)

    def run(self, ctx: Context, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = np.dot(a, b)
        return out.reshape(1) if out.ndim == 0 else out

    # -- lineage ------------------------------------------------------------------------
    def map_b_pairs(self, cells: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        cells = np.asarray(cells, np.int64)
        na, nb, cb = self._layout()
        k = self.input_shapes[0][-1]
        fixed = cells[:, :na] if i == 0 else cells[:, na : na + nb]
        at = na if i == 0 else cb
        inner = np.tile(np.arange(k, dtype=np.int64), len(cells))
        coords = np.insert(np.repeat(fixed, k, axis=0), at, inner, axis=1)
        return np.repeat(np.arange(len(cells), dtype=np.int64), k), coords

    def map_b(self, cells: np.ndarray, i: int) -> np.ndarray:
        return np.argwhere(self.map_b_mask(mask_from_coords(cells, self.output_shape), i))

    def map_f(self, cells: np.ndarray, i: int) -> np.ndarray:
        return np.argwhere(self.map_f_mask(mask_from_coords(cells, self.input_shapes[i]), i))

    def map_b_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        na, nb, cb = self._layout()
        part = _keep(mask, 0, na) if i == 0 else _keep(mask, na, na + nb)
        return _place(np.expand_dims(part, na if i == 0 else cb), 0, self.input_shapes[i])

    def map_f_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        na, nb, cb = self._layout()
        part = mask.any(axis=na if i == 0 else cb)
        return _place(part, 0 if i == 0 else na, self.output_shape)

    def map_b_boxes(self, lo: np.ndarray, hi: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        """An output box reads its rows of ``a`` (``i=0``) or its columns of ``b`` (``i=1``), whole
        along the contracted axis: a few columns of arithmetic, not a mask of the output."""
        na, nb, cb = self._layout()
        k = self.input_shapes[0][-1]
        lo, hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
        inner_lo, inner_hi = np.zeros((len(lo), 1), np.int64), np.full((len(lo), 1), k, np.int64)
        if i == 0:
            return np.hstack([lo[:, :na], inner_lo]), np.hstack([hi[:, :na], inner_hi])
        return (np.hstack([lo[:, na:na + cb], inner_lo, lo[:, na + cb:na + nb]]),
                np.hstack([hi[:, na:na + cb], inner_hi, hi[:, na + cb:na + nb]]))

    def map_f_boxes(self, lo: np.ndarray, hi: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        """A box of ``a`` reaches its rows of the output across every column of ``b`` (and one of
        ``b`` its columns across every row of ``a``); the contracted axis drops out."""
        na, nb, cb = self._layout()
        lo, hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
        n, out = len(lo), np.asarray(self.output_shape, np.int64)
        if na + nb == 0:  # two vectors: the one output cell
            return np.zeros((n, 1), np.int64), np.ones((n, 1), np.int64)
        if i == 0:
            return (np.hstack([lo[:, :na], np.zeros((n, nb), np.int64)]),
                    np.hstack([hi[:, :na], np.broadcast_to(out[na:], (n, nb))]))
        rest = slice(cb + 1, None)  # b's axes after the contracted one (its last, when b has two or more)
        return (np.hstack([np.zeros((n, na), np.int64), lo[:, :cb], lo[:, rest]]),
                np.hstack([np.broadcast_to(out[:na], (n, na)), hi[:, :cb], hi[:, rest]]))


class MatMul(Dot):
    """``a @ b`` for 2-D arrays: ``out[r, c]`` reads row ``r`` of ``a`` and column ``c`` of ``b``.

    Tiles are row blocks: a tile reads its rows of ``a`` and all of ``b``.
    """

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        a, b = (tuple(s) for s in input_shapes)
        if len(a) != 2 or len(b) != 2 or a[1] != b[0]:
            raise WorkflowError(f"MatMul: cannot multiply matrices of shapes {a} and {b}; "
                                "expected (n, k) and (k, m)")
        return (a[0], b[1])

    def run(self, ctx: Context, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.asarray(a) @ np.asarray(b)


class Outer(MapTiled):
    """``np.multiply.outer(a, b)`` (``np.outer`` for vectors): output shape ``a.shape + b.shape``;
    cell ``(ia..., ib...)`` reads ``a[ia]`` and ``b[ib]``."""

    entire_array_safe = True

    def tiling_for(self) -> Tiling:
        return OuterSplit(len(self.input_shapes[0]))

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        return tuple(input_shapes[0]) + tuple(input_shapes[1])

    def run(self, ctx: Context, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.multiply.outer(a, b)

    def _span(self, i: int) -> tuple[int, int]:
        na = len(self.input_shapes[0])
        return (0, na) if i == 0 else (na, na + len(self.input_shapes[1]))

    def map_b_pairs(self, cells: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = self._span(i)
        return np.arange(len(cells), dtype=np.int64), np.asarray(cells, np.int64)[:, lo:hi]

    def map_b(self, cells: np.ndarray, i: int) -> np.ndarray:
        return unique_rows(self.map_b_pairs(cells, i)[1])

    def map_f(self, cells: np.ndarray, i: int) -> np.ndarray:
        return np.argwhere(self.map_f_mask(mask_from_coords(cells, self.input_shapes[i]), i))

    def map_b_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        return _keep(mask, *self._span(i))

    def map_f_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        return _place(mask, self._span(i)[0], self.output_shape)


class Inverse(Operator):
    """``np.linalg.inv(x)`` of a square matrix: all-to-all (every output cell depends on
    every input cell), so its only mode is ``BLACKBOX``; entire-array safe."""

    entire_array_safe = True

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        shape = tuple(input_shapes[0])
        if len(shape) != 2 or shape[0] != shape[1]:
            raise WorkflowError(f"Inverse: expected a square matrix (n, n), got shape {shape}")
        return shape

    def run(self, ctx: Context, x: np.ndarray) -> np.ndarray:
        return np.linalg.inv(x)

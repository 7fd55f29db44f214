"""Statistics along axes and look-ups against whole arrays, for numpy's names.

`Statistic` is ``np.<how>(x, axis=...)`` for the order statistics and the reductions the
other axis reductions lack (median, percentiles, quantiles, var, prod, ptp, argmax...):
an output cell reads every cell of the line (or sub-box) it reduces, as `Sum` does.

`Lookup` is a call whose output cell reads its own (broadcast) cell of some inputs and
every cell of the others: ``np.searchsorted(a, v)`` (each result reads its ``v`` and all
of ``a``), ``np.interp(x, xp, fp)`` (its ``x`` and all of ``xp`` and ``fp``),
``np.isin(element, test_elements)`` (its element and all of ``test_elements``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from subzero.cells import mask_from_coords
from subzero.context import Context
from subzero.errors import WorkflowError
from subzero.modes import Mode
from subzero.operator import Operator
from subzero.operators._args import check_choice
from subzero.operators._kernels import unique_rows
from subzero.operators.reductions import AxisReduction
from subzero.tiling import Box, Shape, Tiling, full_box

__all__ = ["STATISTICS", "Statistic", "Lookup", "LookupTiling"]

#: the reductions `Statistic` computes: name -> numpy function
STATISTICS: dict[str, Callable[..., Any]] = {
    "median": np.median, "nanmedian": np.nanmedian, "percentile": np.percentile,
    "nanpercentile": np.nanpercentile, "quantile": np.quantile, "nanquantile": np.nanquantile,
    "var": np.var, "nanvar": np.nanvar, "prod": np.prod, "nanprod": np.nanprod, "ptp": np.ptp,
    "argmax": np.argmax, "argmin": np.argmin, "nanargmax": np.nanargmax, "nanargmin": np.nanargmin,
}
_WITH_Q = ("percentile", "nanpercentile", "quantile", "nanquantile")
_WITH_DDOF = ("var", "nanvar")
_ONE_AXIS = ("argmax", "argmin", "nanargmax", "nanargmin")


class Statistic(AxisReduction):
    """``np.<how>(x, axis=axis, ...)`` over one axis or a tuple of axes: ``how`` is one of
    `STATISTICS`; ``q`` (a scalar) and ``method`` for the percentiles and quantiles,
    ``ddof`` for var.  An output cell depends on the whole line (sub-box) it reduces.

    Examples
    --------
    >>> op = Statistic("median", axis=1)
    >>> op.reduce(np.array([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]]), (1,))
    array([2., 4.])
    """

    def __init__(self, how: str = "median", axis: int | Sequence[int] = 0, q: float | None = None,
                 ddof: float = 0, method: str = "linear"):
        super().__init__(axis)
        self.how = check_choice(how, tuple(STATISTICS), "Statistic", "how")
        if how in _WITH_Q and (q is None or np.ndim(q) != 0):
            raise WorkflowError(f"Statistic: how={how!r} needs one scalar q, got {q!r}; give one node per q")
        if how in _ONE_AXIS and not isinstance(self.axis, int) and len(self.axis) != 1:
            raise WorkflowError(f"Statistic: how={how!r} reduces one axis, got axis={axis!r}")
        self.q = None if q is None else float(q)
        self.ddof = ddof
        self.method = str(method)

    def reduce(self, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        fn = STATISTICS[self.how]
        if self.how in _WITH_Q:
            return np.asarray(fn(x, self.q, axis=axes, method=self.method))
        if self.how in _WITH_DDOF:
            return np.asarray(fn(x, axis=axes, ddof=self.ddof))
        if self.how in _ONE_AXIS:
            return np.asarray(fn(x, axis=axes[0]))
        return np.asarray(fn(x, axis=axes))

    def map_b(self, cells: np.ndarray, i: int) -> np.ndarray:
        """Few cells: their lines (cost follows the answer); many: through the mask form."""
        line = int(np.prod([self.input_shapes[0][a] for a in self._axes()]))
        if len(cells) * line <= int(np.prod(self.input_shapes[0])):
            return unique_rows(self.map_b_pairs(np.asarray(cells, np.int64), i)[1])
        return super().map_b(cells, i)


# -- look-ups ---------------------------------------------------------------------------------------
class LookupTiling(Tiling):
    """Tiles split the output; a cell input is read on the tile's box (broadcast), a whole
    input whole.  Without any cell input the call gives its whole output at once: one tile."""

    def split_axes(self, op: Any) -> tuple[int, ...]:
        if all(op.whole) or not op.split:
            return ()
        return tuple(range(len(op.output_shape)))

    def input_box(self, op: Any, out_box: Box, i: int) -> Box:
        shape = op.input_shapes[i]
        if op.whole[i]:
            return full_box(shape)
        tail = out_box[len(out_box) - len(shape):] if shape else ()
        return tuple((0, 1) if n == 1 else rng for n, rng in zip(shape, tail))


class Lookup(Operator):
    """``fn(*inputs)`` where output cell ``o`` reads cell ``o`` (numpy broadcasting) of each
    input with ``whole[i]`` False, and every cell of each input with ``whole[i]`` True.

    ``shape`` is the output's shape (the broadcast of the cell inputs and of any constant
    inside ``fn``); ``fn`` must give that shape from whole inputs, and, when some input is a
    cell input and ``split`` is True, the broadcast shape of the cell inputs' tiles from a
    tile (``split=False``: one tile, e.g. when ``fn`` holds a constant array read per cell).

    Examples
    --------
    >>> op = Lookup(np.searchsorted, whole=(True, False), shape=(3,))
    >>> op.run(None, np.array([1.0, 2.0, 3.0]), np.array([0.5, 2.5, 9.0]))
    array([0, 2, 3])
    """

    tiling = LookupTiling()
    entire_array_safe = True

    def __init__(self, fn: Callable[..., Any], whole: Sequence[bool], shape: Sequence[int], split: bool = True):
        if not callable(fn):
            raise WorkflowError(f"Lookup: fn must be a callable, got {fn!r}")
        self.fn = fn
        self.whole = tuple(bool(w) for w in whole)
        self.shape = tuple(int(n) for n in shape)
        self.split = bool(split)

    def supported_modes(self) -> set[Mode]:
        return {Mode.MAP}

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        if len(input_shapes) != len(self.whole):
            raise WorkflowError(f"Lookup: whole= names {len(self.whole)} input(s), the node has {len(input_shapes)}")
        for s, w in zip(input_shapes, self.whole):
            if not w and (len(s) > len(self.shape) or
                          any(n not in (1, m) for n, m in zip(s[::-1], self.shape[::-1]))):
                raise WorkflowError(f"Lookup: a cell input of shape {tuple(s)} does not broadcast to the output "
                                    f"shape {self.shape}")
        return self.shape

    def run(self, ctx: Context, *inputs: np.ndarray) -> np.ndarray:
        return np.asarray(self.fn(*inputs))

    # -- lineage ------------------------------------------------------------------------
    def _cell_coords(self, cells: np.ndarray, i: int) -> np.ndarray:
        """The input-``i`` cell each output cell reads (a cell input)."""
        shape = self.input_shapes[i]
        tail = np.asarray(cells, np.int64)[:, len(self.shape) - len(shape):]
        return np.where(np.array(shape, np.int64) == 1, 0, tail) if shape else tail

    def map_b_pairs(self, cells: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        cells = np.asarray(cells, np.int64).reshape(-1, len(self.shape))
        if not self.whole[i]:
            return np.arange(len(cells), dtype=np.int64), self._cell_coords(cells, i)
        every = np.argwhere(np.ones(self.input_shapes[i], bool)).astype(np.int64)
        return np.repeat(np.arange(len(cells), dtype=np.int64), len(every)), np.tile(every, (len(cells), 1))

    def map_b_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        shape = self.input_shapes[i]
        if self.whole[i]:
            return np.full(shape, bool(np.any(mask)))
        lead = len(self.shape) - len(shape)
        out = np.any(mask, axis=tuple(range(lead))) if lead else np.asarray(mask)
        ones = tuple(k for k, n in enumerate(shape) if n == 1)
        return np.any(out, axis=ones, keepdims=True) if ones else out.copy()

    def map_f_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        if self.whole[i]:
            return np.full(self.shape, bool(np.any(mask)))
        return np.broadcast_to(mask, self.shape).copy()

    def map_b(self, cells: np.ndarray, i: int) -> np.ndarray:
        if not self.whole[i]:  # one cell each: cost follows the answer
            return unique_rows(self._cell_coords(np.asarray(cells, np.int64).reshape(-1, len(self.shape)), i))
        return np.argwhere(np.asarray(self.map_b_mask(mask_from_coords(cells, self.shape), i)))

    def map_f(self, cells: np.ndarray, i: int) -> np.ndarray:
        if not self.whole[i] and tuple(self.input_shapes[i]) == self.shape:
            return unique_rows(np.asarray(cells, np.int64).reshape(-1, len(self.shape)))
        return np.argwhere(np.asarray(self.map_f_mask(mask_from_coords(cells, self.input_shapes[i]), i)))

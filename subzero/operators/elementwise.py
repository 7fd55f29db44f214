"""Elementwise operators with numpy broadcasting.

Each output cell reads the same cell of every input: size-1 axes read cell 0, missing
leading axes are broadcast.  Lineage is a mapping (``MAP``), tiles are elementwise, and
the entire-array optimization is safe.

Scalar forms (``AddScalar(2.0)`` is ``x + 2``) are one class per arithmetic operator;
``reverse=True`` puts the scalar first (``SubtractScalar(1.0, reverse=True)`` is ``1 - x``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from subzero.context import Context
from subzero.errors import WorkflowError
from subzero.modes import Mode
from subzero.operator import Operator
from subzero.operators._args import check_choice
from subzero.operators._kernels import unique_rows
from subzero.tiling import Elementwise, Shape

__all__ = [
    "broadcast", "ElementwiseOperator", "BinaryOperator", "Add", "Subtract", "Multiply", "Divide", "Power", "Maximum",
    "Minimum", "Where", "Clip", "Threshold", "Apply", "ScalarOperator", "AddScalar", "SubtractScalar",
    "MultiplyScalar", "DivideScalar", "PowerScalar",
]


def broadcast(shapes: "Sequence[Sequence[int]]") -> tuple[int, ...]:
    """``np.broadcast_shapes(*shapes)`` (numpy's rules and its ValueError) from the shapes alone:
    numpy's makes an array of each shape to find it, which a trace pays at every step.

    Examples
    --------
    >>> broadcast([(3, 1), (4,), ()])
    (3, 4)
    """
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for shape in shapes:
        at = ndim - len(shape)
        for i, n in enumerate(shape):
            n, was = int(n), out[at + i]
            if n != was:
                if was == 1:
                    out[at + i] = n
                elif n != 1:
                    raise ValueError(f"shape mismatch: objects cannot be broadcast to a single shape: {tuple(shapes)}")
    return tuple(out)


class ElementwiseOperator(Operator):
    """Base of elementwise operators: lineage, tiling and shape checks for any arity.

    A subclass sets ``fn`` (a numpy ufunc or elementwise function of its inputs), or
    overrides ``run``; a ``run`` with one named argument per input lets workflows check
    the arity.
    """

    tiling = Elementwise()
    entire_array_safe = True
    fn: Callable[..., Any] | None = None

    def supported_modes(self) -> set[Mode]:
        return {Mode.MAP}

    def run(self, ctx: Context, *inputs: np.ndarray) -> np.ndarray:
        return np.asarray(type(self).fn(*inputs))

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        try:
            return broadcast(input_shapes)
        except ValueError:
            raise WorkflowError(f"{type(self).__name__}: input shapes {list(input_shapes)} do not broadcast "
                                "together (numpy broadcasting: trailing axes must match or be 1)") from None

    # -- lineage ------------------------------------------------------------------------
    def _to_input(self, cells: np.ndarray, i: int) -> np.ndarray:
        shape = self.input_shapes[i]
        cells = np.asarray(cells, np.int64)
        mapped = cells[:, cells.shape[1] - len(shape):].copy()
        mapped[:, [k for k, n in enumerate(shape) if n == 1]] = 0
        return mapped

    def map_b(self, cells: np.ndarray, i: int) -> np.ndarray:
        return unique_rows(self._to_input(cells, i))

    def same_cells(self, i: int) -> bool:
        """Whether input ``i`` has the output's shape, so a step either way keeps the cells
        as they are (no broadcasting): the query engine then skips the mapping functions."""
        return tuple(self.input_shapes[i]) == tuple(self.output_shape)

    def map_b_pairs(self, cells: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        return np.arange(len(cells), dtype=np.int64), self._to_input(cells, i)

    def _broadcast_axes(self, i: int) -> tuple[int, list[int]]:
        """(leading output axes input ``i`` lacks, output axes it broadcasts along)."""
        shape, out = self.input_shapes[i], self.output_shape
        lead = len(out) - len(shape)
        return lead, [a for a in range(len(out)) if a < lead or (shape[a - lead] == 1 and out[a] != 1)]

    def map_f(self, cells: np.ndarray, i: int) -> np.ndarray:
        cells = np.asarray(cells, np.int64)
        lead, free = self._broadcast_axes(i)
        out = np.zeros((len(cells), len(self.output_shape)), np.int64)
        out[:, lead:] = cells
        if not free:
            return unique_rows(out)
        grid = np.stack(np.meshgrid(*[np.arange(self.output_shape[a]) for a in free], indexing="ij"),
                        axis=-1).reshape(-1, len(free))
        out = np.repeat(out, len(grid), axis=0)
        out[:, free] = np.tile(grid, (len(cells), 1))
        return unique_rows(out)

    def map_b_boxes(self, lo: np.ndarray, hi: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray] | None:
        shape = self.input_shapes[i]
        lead = len(self.output_shape) - len(shape)
        lo, hi = np.array(lo[:, lead:], np.int64), np.array(hi[:, lead:], np.int64)
        ones = [k for k, n in enumerate(shape) if n == 1]
        lo[:, ones], hi[:, ones] = 0, 1
        return lo, hi

    def map_f_boxes(self, lo: np.ndarray, hi: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray] | None:
        lead, free = self._broadcast_axes(i)
        out_lo = np.zeros((len(lo), len(self.output_shape)), np.int64)
        out_hi = np.tile(np.asarray(self.output_shape, np.int64), (len(lo), 1))
        out_lo[:, lead:], out_hi[:, lead:] = lo, hi
        out_lo[:, free] = 0
        out_hi[:, free] = np.asarray(self.output_shape, np.int64)[free]
        return out_lo, out_hi

    def map_b_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        shape = self.input_shapes[i]
        lead = mask.ndim - len(shape)
        reduced = np.asarray(mask.any(axis=tuple(range(lead)))) if lead else mask
        axes = tuple(k for k, n in enumerate(shape) if n == 1 and reduced.shape[k] != 1)
        return np.asarray(reduced.any(axis=axes, keepdims=True)) if axes else reduced.copy()

    def map_f_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        return np.broadcast_to(mask, self.output_shape).copy()


class BinaryOperator(ElementwiseOperator):
    """``fn(x, y)`` for a binary numpy ufunc ``fn`` (a class attribute)."""

    reads_only = True  # numpy's own function: never writes its inputs
    fills_out = True  # a ufunc: takes out=

    def run(self, ctx: Context, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.asarray(type(self).fn(x, y))

    def run_into(self, ctx: Context, out: np.ndarray, *inputs: np.ndarray) -> np.ndarray:
        x, y = inputs
        return type(self).fn(x, y, out=out)


class Add(BinaryOperator):
    """``x + y``."""

    fn = staticmethod(np.add)


class Subtract(BinaryOperator):
    """``x - y``."""

    fn = staticmethod(np.subtract)


class Multiply(BinaryOperator):
    """``x * y``."""

    fn = staticmethod(np.multiply)


class Divide(BinaryOperator):
    """``x / y`` (true division)."""

    fn = staticmethod(np.true_divide)


class Power(BinaryOperator):
    """``x ** y``."""

    fn = staticmethod(np.power)


class Maximum(BinaryOperator):
    """``np.maximum(x, y)``."""

    fn = staticmethod(np.maximum)


class Minimum(BinaryOperator):
    """``np.minimum(x, y)``."""

    fn = staticmethod(np.minimum)


class Where(ElementwiseOperator):
    """``np.where(condition, x, y)``: each output cell reads the three inputs' cells.

    The lineage names both branches (a mapping cannot know which one was taken).
    """

    reads_only = True  # numpy's own function: never writes its inputs

    def run(self, ctx: Context, condition: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.where(condition, x, y)


class Clip(ElementwiseOperator):
    """``np.clip(x, lo, hi)`` with scalar bounds; either bound may be None."""

    reads_only = True  # numpy's own function: never writes its inputs

    def __init__(self, lo: float | None = None, hi: float | None = None):
        if lo is None and hi is None:
            raise WorkflowError("Clip: give lo, hi or both; got lo=None and hi=None")
        self.lo, self.hi = lo, hi

    fills_out = True  # np.clip takes out=

    def run(self, ctx: Context, x: np.ndarray) -> np.ndarray:
        return np.clip(x, self.lo, self.hi)

    def run_into(self, ctx: Context, out: np.ndarray, *inputs: np.ndarray) -> np.ndarray:
        return np.clip(inputs[0], self.lo, self.hi, out=out)


_COMPARE = {">": np.greater, ">=": np.greater_equal, "<": np.less, "<=": np.less_equal,
            "==": np.equal, "!=": np.not_equal}


class Threshold(ElementwiseOperator):
    """Compare with a scalar: ``x > value`` (or the ``compare`` given); a boolean output.

    Examples
    --------
    >>> Threshold(0.5, compare="<=").run(None, np.array([0.2, 0.9]))
    array([ True, False])
    """

    reads_only = True  # numpy's own function: never writes its inputs

    def __init__(self, value: float, compare: str = ">"):
        self.value = value
        self.compare = check_choice(compare, tuple(_COMPARE), "Threshold", "compare")

    fills_out = True  # a ufunc: takes out=

    def run(self, ctx: Context, x: np.ndarray) -> np.ndarray:
        return _COMPARE[self.compare](x, self.value)

    def run_into(self, ctx: Context, out: np.ndarray, *inputs: np.ndarray) -> np.ndarray:
        return _COMPARE[self.compare](inputs[0], self.value, out=out)


class Apply(ElementwiseOperator):
    """Any elementwise function of ``nin`` inputs, e.g. ``Apply(np.sqrt)`` or
    ``Apply(lambda x, y: np.hypot(x, y) + 1, nin=2)``.

    ``fn`` must compute each output cell from the same (broadcast) cell of its inputs;
    the lineage assumes it.  ``nin`` defaults to ``fn.nin`` for ufuncs, else 1.
    """

    def __init__(self, fn: Callable[..., Any], nin: int | None = None):
        if not callable(fn):
            raise WorkflowError(f"Apply: fn must be a callable (a numpy ufunc or function), got {fn!r}")
        self.fn = fn
        self.nin = int(nin if nin is not None else getattr(fn, "nin", 1))

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        if len(input_shapes) != self.nin:
            raise WorkflowError(f"Apply: fn takes nin={self.nin} input(s), the node has {len(input_shapes)}; "
                                "pass nin= to Apply")
        return super().infer_output_shape(input_shapes)

    @property
    def reads_only(self) -> bool:
        """Whether ``fn`` is a numpy ufunc or one of numpy's functions that only read their arrays
        (`_READING`: ``np.where``...), or a call of one as tracing makes, with no ``out=``: it never
        writes its inputs (any other function may)."""
        kwargs = getattr(self.fn, "kwargs", None)
        fn = getattr(self.fn, "fn", self.fn)
        return (isinstance(fn, np.ufunc) or any(fn is f for f in _READING)) and "out" not in (kwargs or {})

    @property
    def fills_out(self) -> bool:
        """Whether ``fn`` is a one-output numpy ufunc (or a call of one that can take ``out=``,
        as tracing makes) with no ``out=`` of its own: `run_into` computes into a given array."""
        ufunc = getattr(self.fn, "fn", self.fn)
        return self.reads_only and isinstance(ufunc, np.ufunc) and ufunc.nout == 1 and \
            (ufunc is self.fn or hasattr(self.fn, "into"))

    def run_into(self, ctx: Context, out: np.ndarray, *inputs: np.ndarray) -> np.ndarray:
        into = getattr(self.fn, "into", None)
        return into(out, *inputs) if into is not None else self.fn(*inputs, out=out)

    def run(self, ctx: Context, *inputs: np.ndarray) -> np.ndarray:
        out = np.asarray(self.fn(*inputs))
        expected = broadcast([np.shape(x) for x in inputs])
        if out.shape != expected:
            raise WorkflowError(f"Apply: fn returned shape {out.shape} for inputs broadcasting to {expected}; "
                                "fn must be elementwise")
        return out


#: numpy's elementwise functions that are not ufuncs and never write their arrays (without ``out=``)
_READING = (np.where, np.round, np.around, np.isclose)


class ScalarOperator(ElementwiseOperator):
    """``fn(x, value)``, or ``fn(value, x)`` with ``reverse=True``, for a scalar ``value``."""

    reads_only = True  # numpy's own function: never writes its inputs

    def __init__(self, value: float, reverse: bool = False):
        if not np.isscalar(value):
            raise WorkflowError(f"{type(self).__name__}: value must be a scalar, got {value!r}; "
                                f"use {type(self).__name__.removesuffix('Scalar')} for arrays")
        self.value, self.reverse = value, bool(reverse)

    fills_out = True  # a ufunc: takes out=

    def run(self, ctx: Context, x: np.ndarray) -> np.ndarray:
        fn = type(self).fn
        return np.asarray(fn(self.value, x) if self.reverse else fn(x, self.value))

    def run_into(self, ctx: Context, out: np.ndarray, *inputs: np.ndarray) -> np.ndarray:
        fn = type(self).fn
        return fn(self.value, inputs[0], out=out) if self.reverse else fn(inputs[0], self.value, out=out)


class AddScalar(ScalarOperator):
    """``x + value``."""

    fn = staticmethod(np.add)


class SubtractScalar(ScalarOperator):
    """``x - value`` (``value - x`` with ``reverse=True``)."""

    fn = staticmethod(np.subtract)


class MultiplyScalar(ScalarOperator):
    """``x * value``."""

    fn = staticmethod(np.multiply)


class DivideScalar(ScalarOperator):
    """``x / value`` (``value / x`` with ``reverse=True``)."""

    fn = staticmethod(np.true_divide)


class PowerScalar(ScalarOperator):
    """``x ** value`` (``value ** x`` with ``reverse=True``)."""

    fn = staticmethod(np.power)

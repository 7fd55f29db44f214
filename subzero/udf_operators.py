"""The operators an ``sz.udf`` becomes: the user's function, run tile by tile, with the
lineage of the pattern it declared (`subzero.udfs` builds them).

Every pattern takes several inputs that broadcast together (numpy's rules).  The pattern is
laid on the inputs' broadcast shape ``B``; a cell of ``B`` reads the cell of input ``i``
broadcasting gives it (its trailing coordinates, 0 along the input's length-1 axes):

- `UdfElementwise`: the output is ``B``; a cell reads its own cell;
- `UdfWindow`: the output is ``B``; a cell reads the box of ``radius`` around it (clipped);
- `UdfLines`: the output is ``B``; a cell reads its whole line along ``axis``;
- `UdfReduce`: the output is ``B`` without ``axes`` (length 1 with ``keepdims``); a cell
  reads the whole sub-array along ``axes``;
- `UdfBlackBox`: every output cell reads every input cell;
- `UdfMapped`: the user's own ``map_b`` / ``map_f``.

A traced 0-d value (``np.mean(x)``, the count ``ndimage.label`` returns) is a node of one
cell with length-1 axes; ``scalars`` marks those inputs and `UdfOperator.call` hands them to
the function as numpy scalars, as numpy would.  ``pick`` selects one array of a function that
returns several (one node per output).
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from subzero.errors import WorkflowError
from subzero.modes import Mode
from subzero.operator import Operator
from subzero.operators._args import normalize_axes, normalize_axis, per_axis
from subzero.operators._kernels import box_offsets, corner_offsets, unique_rows
from subzero.operators.elementwise import ElementwiseOperator
from subzero.tiling import Box, Shape, Tiling

if TYPE_CHECKING:  # pragma: no cover
    from subzero.context import Context

__all__ = ["MapShapes", "UdfOperator", "UdfElementwise", "UdfPattern", "UdfWindow", "UdfLines", "UdfReduce",
           "UdfBlackBox", "UdfMapped", "suggest_pattern"]


class MapShapes(NamedTuple):
    """What a udf's ``map_b`` / ``map_f`` may ask for (a parameter named ``shapes``): the
    node's input shapes, in input order, and its output shape."""

    inputs: tuple[Shape, ...]
    output: Shape


def _broadcast(shapes: Sequence[Sequence[int]], where: str) -> Shape:
    try:
        return tuple(int(n) for n in np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise WorkflowError(f"{where}: input shapes {[tuple(s) for s in shapes]} do not broadcast together (numpy "
                            "broadcasting: trailing axes must match or be 1); give inputs that broadcast") from None


def suggest_pattern(input_shapes: Sequence[Sequence[int]], out_shape: Sequence[int]) -> str:
    """The ``lineage=`` that fits a function mapping inputs of ``input_shapes`` to an output
    of ``out_shape``, as code (for error messages).

    Examples
    --------
    >>> suggest_pattern([(30, 20)], (20,))
    'sz.Reduce(axis=0)'
    >>> suggest_pattern([(30, 20)], (30, 1))
    'sz.Reduce(axis=1, keepdims=True)'
    """
    out = tuple(int(n) for n in out_shape)
    try:
        b = tuple(int(n) for n in np.broadcast_shapes(*[tuple(s) for s in input_shapes]))
    except ValueError:
        return "lineage='all' (with shape= the output's shape)"
    if out == b:
        return "lineage='elementwise', sz.Window(radius=r) or sz.Lines(axis=a)"
    if out == () and b:
        return "sz.Reduce()"
    for k in range(1, len(b) + 1):
        for axes in itertools.combinations(range(len(b)), k):
            dropped = tuple(n for a, n in enumerate(b) if a not in axes)
            kept = tuple(1 if a in axes else n for a, n in enumerate(b))
            axis = axes[0] if len(axes) == 1 else axes
            if out == dropped:
                return f"sz.Reduce(axis={axis})"
            if out == kept:
                return f"sz.Reduce(axis={axis}, keepdims=True)"
    return f"lineage='all', shape={out}"


class UdfOperator(Operator):
    """What every udf operator shares: the user's function and how its lineage was chosen.

    ``fn`` is called with the node's inputs in order (a `subzero.trace.calls.NumpyCall` when
    the call had constants or keyword arguments).
    """

    fn: Callable[..., Any]

    def _set(self, fn: Callable, name: str, lineage: str, source: str, scalars: Sequence[bool] = (),
             pick: int | None = None) -> None:
        self.fn, self.udf_name = fn, str(name)
        self.lineage, self.lineage_source = lineage, source
        self.scalars = tuple(bool(s) for s in scalars)
        self.pick = None if pick is None else int(pick)

    def call(self, inputs: Sequence[np.ndarray]) -> np.ndarray:
        """``fn`` on ``inputs`` (0-d values as numpy scalars), the output ``pick`` of several."""
        args = [np.asarray(x).reshape(())[()] if k < len(self.scalars) and self.scalars[k] else x
                for k, x in enumerate(inputs)]
        out = self.fn(*args)
        if isinstance(out, tuple):
            if self.pick is None:
                raise WorkflowError(f"sz.udf {self.udf_name}: the function returned {len(out)} arrays; declare one "
                                    f"pattern per output: lineage=({', '.join(['...'] * len(out))})")
            if self.pick >= len(out):
                raise WorkflowError(f"sz.udf {self.udf_name}: the function returned {len(out)} arrays, the lineage "
                                    f"declares more; give one pattern per output")
            out = out[self.pick]
        elif self.pick is not None and self.pick > 0:
            raise WorkflowError(f"sz.udf {self.udf_name}: the lineage declares several outputs but the function "
                                "returned one array; declare one pattern")
        return np.asarray(out)

    def result_shape(self, shapes: Sequence[Shape]) -> Shape | None:
        """The shape ``run`` must return for input blocks of ``shapes`` (None: any)."""
        return self.output_shape

    def run(self, ctx: Context, *inputs: np.ndarray) -> np.ndarray:
        """The user's function on the tile's inputs, checked against the declared pattern."""
        out = self.call(inputs)
        expected = self.result_shape([np.shape(x) for x in inputs])
        if expected is None or out.shape == expected:
            return out
        if out.ndim == 0 and int(np.prod(expected)) == 1:  # a 0-d result: the node's one cell
            return out.reshape(expected)
        raise WorkflowError(
            f"sz.udf {self.udf_name}: declared lineage {self.lineage} expects an output of shape {expected} for inputs "
            f"of shapes {[tuple(np.shape(x)) for x in inputs]}, the function returned shape {out.shape}; declare "
            f"{suggest_pattern([np.shape(x) for x in inputs], out.shape)}")


class UdfElementwise(UdfOperator, ElementwiseOperator):
    """A udf computing each output cell from the same (broadcast) cell of its inputs."""

    fn: Callable[..., Any]  # always set, where ElementwiseOperator's may be None

    def __init__(self, fn: Callable, name: str, source: str = "declared", scalars: Sequence[bool] = (),
                 pick: int | None = None):
        self._set(fn, name, "elementwise", source, scalars, pick)

    def result_shape(self, shapes: Sequence[Shape]) -> Shape | None:
        return _broadcast(shapes, f"sz.udf {self.udf_name}")


class _PatternTiling(Tiling):
    """A tile reads, of each input, what broadcasting gives the cells its pattern reads."""

    def split_axes(self, op) -> tuple[int, ...]:
        return op.split_axes()

    def input_box(self, op, out_box: Box, i: int) -> Box:
        lo, hi = (np.array([[b[k] for b in out_box]], np.int64) for k in (0, 1))
        got = op.map_b_boxes(lo, hi, i)
        return tuple((int(a), int(b)) for a, b in zip(got[0][0], got[1][0]))

    def result_box(self, op, out_box: Box, in_boxes: tuple[Box, ...]) -> Box:
        return op.result_box(out_box)


class UdfPattern(UdfOperator):
    """Base of the patterns laid on the broadcast shape ``B`` (see the module docstring):
    subclasses map output cells to ``B`` cells and back, and output boxes to ``B`` boxes."""

    tiling = _PatternTiling()
    entire_array_safe = True

    def supported_modes(self) -> set[Mode]:
        return {Mode.MAP}

    @property
    def b_shape(self) -> Shape:
        """The inputs' broadcast shape."""
        return _broadcast(self.input_shapes, f"sz.udf {self.udf_name}")

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        return self.out_shape(_broadcast(input_shapes, f"sz.udf {self.udf_name}"))

    def result_shape(self, shapes: Sequence[Shape]) -> Shape | None:
        return self.out_shape(_broadcast(shapes, f"sz.udf {self.udf_name}"))

    # -- what a pattern gives ---------------------------------------------------------------------
    def out_shape(self, b: Shape) -> Shape:
        """The output shape for broadcast shape ``b`` (raise `WorkflowError` if it cannot take it)."""
        return b

    def split_axes(self) -> tuple[int, ...]:
        """The output axes tiles may split."""
        return tuple(range(len(self.output_shape or ())))

    def result_box(self, out_box: Box) -> Box:
        """The output box ``run`` covers for tile ``out_box``."""
        return out_box

    def b_pairs(self, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(owner, B cells)`` each output cell reads."""
        raise NotImplementedError

    def out_of_b(self, cells: np.ndarray) -> np.ndarray:
        """The output cells that read these ``B`` cells (with repeats)."""
        raise NotImplementedError

    def b_boxes(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ``B`` boxes output boxes read."""
        raise NotImplementedError

    def out_boxes(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The output boxes that read ``B`` boxes."""
        raise NotImplementedError

    def b_mask(self, mask: np.ndarray) -> np.ndarray:
        """The ``B`` cells an output mask reads, as a mask."""
        raise NotImplementedError

    def out_mask(self, mask: np.ndarray) -> np.ndarray:
        """The output cells that read a ``B`` mask, as a mask."""
        raise NotImplementedError

    # -- broadcasting between B and input i ---------------------------------------------------------
    def _lead_free(self, i: int) -> tuple[int, list[int]]:
        shape, b = self.input_shapes[i], self.b_shape
        lead = len(b) - len(shape)
        return lead, [a for a in range(len(b)) if a < lead or (shape[a - lead] == 1 and b[a] != 1)]

    def _to_input(self, cells: np.ndarray, i: int) -> np.ndarray:
        shape = self.input_shapes[i]
        out = np.asarray(cells, np.int64)[:, len(self.b_shape) - len(shape):].copy()
        out[:, [k for k, n in enumerate(shape) if n == 1]] = 0
        return out

    def _from_input(self, cells: np.ndarray, i: int) -> np.ndarray:
        lead, free = self._lead_free(i)
        b = self.b_shape
        out = np.zeros((len(cells), len(b)), np.int64)
        out[:, lead:] = np.asarray(cells, np.int64)
        if not free:
            return out
        grid = corner_offsets(tuple(b[a] for a in free))
        out = np.repeat(out, len(grid), axis=0)
        out[:, free] = np.tile(grid, (len(cells), 1))
        return out

    # -- lineage ----------------------------------------------------------------------------------
    def map_b_pairs(self, cells: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        owner, b = self.b_pairs(np.asarray(cells, np.int64).reshape(len(cells), len(self.output_shape or ())))
        both = unique_rows(np.column_stack([owner, self._to_input(b, i)]))
        return both[:, 0].copy(), both[:, 1:].copy()

    def map_b(self, cells: np.ndarray, i: int) -> np.ndarray:
        return unique_rows(self.map_b_pairs(cells, i)[1])

    def map_f(self, cells: np.ndarray, i: int) -> np.ndarray:
        cells = np.asarray(cells, np.int64).reshape(len(cells), len(self.input_shapes[i]))
        return unique_rows(self.out_of_b(self._from_input(cells, i)))

    def map_b_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        bm = self.b_mask(np.asarray(mask, bool))
        lead, free = self._lead_free(i)
        kept = tuple(a - lead for a in free if a >= lead)
        if lead:
            bm = np.asarray(bm.any(axis=tuple(range(lead))))
        return np.asarray(bm.any(axis=kept, keepdims=True) if kept else bm)

    def map_f_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        return self.out_mask(np.broadcast_to(np.asarray(mask, bool), self.b_shape))

    def map_b_boxes(self, lo: np.ndarray, hi: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray] | None:
        blo, bhi = self.b_boxes(np.asarray(lo, np.int64), np.asarray(hi, np.int64))
        shape = self.input_shapes[i]
        cut = len(self.b_shape) - len(shape)
        blo, bhi = blo[:, cut:].copy(), bhi[:, cut:].copy()
        ones = [k for k, n in enumerate(shape) if n == 1]
        blo[:, ones], bhi[:, ones] = 0, 1
        return blo, bhi

    def map_f_boxes(self, lo: np.ndarray, hi: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray] | None:
        lead, free = self._lead_free(i)
        b = np.asarray(self.b_shape, np.int64)
        blo, bhi = np.zeros((len(lo), len(b)), np.int64), np.tile(b, (len(lo), 1))
        blo[:, lead:], bhi[:, lead:] = lo, hi
        blo[:, free], bhi[:, free] = 0, b[free]
        return self.out_boxes(blo, bhi)


class UdfWindow(UdfPattern):
    """A udf whose output cell reads the box of ``radius`` around it (clipped to the array);
    tiles carry that halo."""

    def __init__(self, fn: Callable, radius: int | Sequence[int], name: str = "udf", source: str = "declared",
                 scalars: Sequence[bool] = (), pick: int | None = None):
        self.radius_: int | tuple[int, ...] = (tuple(int(r) for r in radius) if isinstance(radius, Sequence)
                                               else int(radius))
        self._set(fn, name, f"window(radius={self.radius_})", source, scalars, pick)

    def radius(self, ndim: int | None = None) -> tuple[int, ...]:
        """The radius per axis of ``B``."""
        ndim = len(self.b_shape) if ndim is None else ndim
        return per_axis(self.radius_, ndim, "sz.Window", "radius", minimum=0)

    def out_shape(self, b: Shape) -> Shape:
        self.radius(len(b))
        return b

    def result_box(self, out_box: Box) -> Box:
        return tuple((max(lo - r, 0), min(hi + r, n)) for (lo, hi), r, n in zip(out_box, self.radius(), self.b_shape))

    def _grown(self, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        off = box_offsets(self.radius())
        grown = (cells[:, None, :] + off[None, :, :]).reshape(-1, cells.shape[1])
        grown = np.clip(grown, 0, np.asarray(self.b_shape, np.int64) - 1)
        return np.repeat(np.arange(len(cells), dtype=np.int64), len(off)), grown

    def b_pairs(self, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._grown(cells)

    def out_of_b(self, cells: np.ndarray) -> np.ndarray:
        return self._grown(cells)[1]

    def b_boxes(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        r = np.asarray(self.radius(), np.int64)
        return np.maximum(lo - r, 0), np.minimum(hi + r, np.asarray(self.b_shape, np.int64))

    out_boxes = b_boxes

    def b_mask(self, mask: np.ndarray) -> np.ndarray:
        return _dilate(mask, self.radius())

    out_mask = b_mask


def _dilate(mask: np.ndarray, radius: Sequence[int]) -> np.ndarray:
    """``mask`` grown by ``radius`` cells per axis (a box, clipped): separable running sums."""
    out = np.asarray(mask, bool)
    for a, r in enumerate(radius):
        n = out.shape[a]
        if r == 0 or n == 0:
            continue
        sums = np.cumsum(out, axis=a, dtype=np.int64)
        idx = np.arange(n)
        upper = np.take(sums, np.minimum(idx + r, n - 1), axis=a)
        lower = np.take(sums, np.maximum(idx - r - 1, 0), axis=a)
        below = (idx - r - 1 >= 0).reshape([n if k == a else 1 for k in range(out.ndim)])
        out = (upper - np.where(below, lower, 0)) > 0
    return out


class UdfLines(UdfPattern):
    """A udf whose output cell reads its whole line along ``axis``."""

    def __init__(self, fn: Callable, axis: int = -1, name: str = "udf", source: str = "declared",
                 scalars: Sequence[bool] = (), pick: int | None = None):
        self.axis = int(axis)
        self._set(fn, name, f"lines(axis={self.axis})", source, scalars, pick)

    def _axis(self, ndim: int | None = None) -> int:
        return normalize_axis(self.axis, len(self.b_shape) if ndim is None else ndim, "sz.Lines")

    def out_shape(self, b: Shape) -> Shape:
        self._axis(len(b))
        return b

    def split_axes(self) -> tuple[int, ...]:
        return tuple(a for a in range(len(self.b_shape)) if a != self._axis())

    def _lines(self, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        a, n = self._axis(), self.b_shape[self._axis()]
        coords = np.repeat(cells, n, axis=0)
        coords[:, a] = np.tile(np.arange(n, dtype=np.int64), len(cells))
        return np.repeat(np.arange(len(cells), dtype=np.int64), n), coords

    def b_pairs(self, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._lines(cells)

    def out_of_b(self, cells: np.ndarray) -> np.ndarray:
        heads = np.asarray(cells, np.int64).copy()
        heads[:, self._axis()] = 0  # one cell per line first: a broadcast input's cell reaches many
        return self._lines(unique_rows(heads))[1]

    def b_boxes(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = lo.copy(), hi.copy()
        lo[:, self._axis()], hi[:, self._axis()] = 0, self.b_shape[self._axis()]
        return lo, hi

    out_boxes = b_boxes

    def b_mask(self, mask: np.ndarray) -> np.ndarray:
        return np.broadcast_to(mask.any(axis=self._axis(), keepdims=True), mask.shape).copy()

    out_mask = b_mask


class UdfReduce(UdfPattern):
    """A udf reducing ``axes`` (None: all): an output cell reads the whole sub-array along
    them.  The output drops those axes (keeps them with length 1 with ``keepdims``); a
    reduction to a 0-d value is a node of one cell with length-1 axes."""

    def __init__(self, fn: Callable, axis: int | Sequence[int] | None = None, keepdims: bool = False,
                 name: str = "udf", source: str = "declared", scalars: Sequence[bool] = (), pick: int | None = None):
        self.axis = None if axis is None else (int(axis) if isinstance(axis, (int, np.integer)) else
                                               tuple(int(a) for a in axis))
        self.keepdims = bool(keepdims)
        self._set(fn, name, f"reduce(axis={self.axis}, keepdims={self.keepdims})", source, scalars, pick)

    def axes(self, ndim: int | None = None) -> tuple[int, ...]:
        """The reduced axes of ``B``, sorted."""
        ndim = len(self.b_shape) if ndim is None else ndim
        if self.axis is None:
            return tuple(range(ndim))
        return normalize_axes(self.axis, ndim, "sz.Reduce")

    def _keeps_axes(self, ndim: int) -> bool:
        """True when the output has ``B``'s axes (keepdims, or everything reduced: one cell)."""
        return self.keepdims or len(self.axes(ndim)) == ndim

    def out_shape(self, b: Shape) -> Shape:
        axes = self.axes(len(b))
        if self._keeps_axes(len(b)):
            return tuple(1 if a in axes else n for a, n in enumerate(b))
        return tuple(n for a, n in enumerate(b) if a not in axes)

    def logical_shape(self, b: Shape) -> Shape:
        """The output shape numpy gives (``()`` for a reduction of every axis)."""
        if not self.keepdims and len(self.axes(len(b))) == len(b):
            return ()
        return self.out_shape(b)

    def _to_b(self, cells: np.ndarray) -> np.ndarray:
        """Output cells as ``B`` cells with 0 along the reduced axes."""
        ndim = len(self.b_shape)
        axes = self.axes()
        if self._keeps_axes(ndim):
            out = np.asarray(cells, np.int64).copy()
        else:
            out = np.zeros((len(cells), ndim), np.int64)
            out[:, [a for a in range(ndim) if a not in axes]] = cells
        out[:, list(axes)] = 0
        return out

    def b_pairs(self, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        axes, b = self.axes(), self.b_shape
        sub = corner_offsets(tuple(b[a] for a in axes))
        base = np.repeat(self._to_b(cells), len(sub), axis=0)
        base[:, list(axes)] = np.tile(sub, (len(cells), 1))
        return np.repeat(np.arange(len(cells), dtype=np.int64), len(sub)), base

    def out_of_b(self, cells: np.ndarray) -> np.ndarray:
        cells = np.asarray(cells, np.int64).copy()
        axes = self.axes()
        if self._keeps_axes(cells.shape[1]):
            cells[:, list(axes)] = 0
            return cells
        return np.delete(cells, list(axes), axis=1)

    def b_boxes(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        blo, bhi = self._to_b(lo), self._to_b(hi)
        axes = list(self.axes())
        bhi[:, axes] = np.asarray(self.b_shape, np.int64)[axes]
        return blo, bhi

    def b_mask(self, mask: np.ndarray) -> np.ndarray:
        b = self.b_shape
        if not self._keeps_axes(len(b)):
            mask = np.expand_dims(mask, self.axes())
        return np.broadcast_to(mask, b).copy()

    def out_mask(self, mask: np.ndarray) -> np.ndarray:
        return np.asarray(mask.any(axis=self.axes(), keepdims=self._keeps_axes(mask.ndim)))

    def out_boxes(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        olo, ohi = self.out_of_b(lo), self.out_of_b(hi)
        if self._keeps_axes(lo.shape[1]):
            ohi[:, list(self.axes())] = 1
        return olo, ohi


class UdfBlackBox(UdfOperator):
    """A udf whose every output cell reads every input cell; ``shape`` is its output shape
    (default: input 0's)."""

    entire_array_safe = True

    def __init__(self, fn: Callable, shape: Sequence[int] | None = None, name: str = "udf",
                 source: str = "declared", scalars: Sequence[bool] = (), pick: int | None = None):
        self.shape = None if shape is None else tuple(int(n) for n in shape)
        self._set(fn, name, "all", source, scalars, pick)

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        return self.shape if self.shape is not None else tuple(input_shapes[0])


def _takes_shapes(fn: Callable) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: the old form
        return False
    return any(p.name == "shapes" or p.kind is p.VAR_KEYWORD for p in params)


class UdfMapped(UdfOperator):
    """A udf with the user's mapping functions ``map_b(cells, i)`` / ``map_f(cells, i)``;
    a function with a parameter named ``shapes`` also gets the node's `MapShapes`."""

    def __init__(self, fn: Callable, map_b: Callable, map_f: Callable, shape: Sequence[int] | None = None,
                 name: str = "udf", scalars: Sequence[bool] = (), pick: int | None = None):
        if not callable(map_b) or not callable(map_f):
            raise WorkflowError("sz.udf: map_b and map_f must both be given, as functions (cells, i) -> cells "
                                "or (cells, i, shapes) -> cells")
        self.user_map_b, self.user_map_f = map_b, map_f
        self.shape = None if shape is None else tuple(int(n) for n in shape)
        self._set(fn, name, "map_b/map_f", "declared", scalars, pick)

    def supported_modes(self) -> set[Mode]:
        return {Mode.MAP}

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        return self.shape if self.shape is not None else tuple(input_shapes[0])

    def _user(self, fn: Callable, cells: np.ndarray, i: int, ndim: int) -> np.ndarray:
        cells = np.asarray(cells, np.int64)
        if _takes_shapes(fn):
            got = fn(cells, i, shapes=MapShapes(self.input_shapes, tuple(self.output_shape or ())))
        else:
            got = fn(cells, i)
        return np.asarray(got, np.int64).reshape(-1, ndim)

    def map_b(self, cells: np.ndarray, i: int) -> np.ndarray:
        return self._user(self.user_map_b, cells, i, len(self.input_shapes[i]))

    def map_f(self, cells: np.ndarray, i: int) -> np.ndarray:
        return self._user(self.user_map_f, cells, i, len(self.output_shape or ()))

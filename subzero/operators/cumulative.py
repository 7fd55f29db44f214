"""Operators along one axis whose output cells read a run of their line: prefixes
(``np.cumsum``), differences (``np.diff``), 1-D convolution (``np.convolve``,
``np.correlate``), and gathers by constant indices (``np.take``, ``np.take_along_axis``).

Each lineage is a function of coordinates (a mapping operator) and exact:

- `Cumulative`: output cell ``i`` reads input cells ``0..i`` of its line (a prefix; its box
  forms keep a box a box);
- `Diff`: output cell ``i`` reads input cells ``i..i+n`` of its line;
- `SequenceConvolve`: output cell ``k`` reads the window of each operand that meets it, clipped
  at the ends (numpy's ``full``, ``same`` and ``valid`` modes);
- `Take`: each output cell copies one input cell (a separable index map);
- `TakeAlong`: each output cell copies the cell of its line its index names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

import numpy as np

from subzero.cells import mask_from_coords
from subzero.context import Context
from subzero.errors import WorkflowError
from subzero.modes import Mode
from subzero.operator import Operator
from subzero.operators._args import check_choice, normalize_axis
from subzero.operators._kernels import unique_rows
from subzero.operators.indexmap import IndexMapOperator
from subzero.operators.sorting import LineOperator
from subzero.tiling import Shape, Tiling

__all__ = ["CUMULATIVE", "Cumulative", "Diff", "SequenceConvolve", "Take", "TakeAlong"]

#: the running reductions `Cumulative` computes: name -> numpy function
CUMULATIVE: dict[str, Callable[..., Any]] = {"cumsum": np.cumsum, "cumprod": np.cumprod,
                                             "nancumsum": np.nancumsum, "nancumprod": np.nancumprod}


def _interval_mask(lo: np.ndarray, hi: np.ndarray, n: int) -> np.ndarray:
    """A boolean line of length ``n`` set on the union of the closed intervals ``[lo, hi]``
    (empty where ``lo > hi``), by one difference array."""
    ok = lo <= hi
    marks = np.zeros(n + 1, np.int64)
    np.add.at(marks, lo[ok], 1)
    np.add.at(marks, hi[ok] + 1, -1)
    return np.cumsum(marks[:n]) > 0


def _interval_pairs(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(owner, index)``: every index of each closed interval ``[lo[k], hi[k]]``."""
    count = np.maximum(hi - lo + 1, 0)
    owner = np.repeat(np.arange(len(lo), dtype=np.int64), count)
    start = np.cumsum(count) - count
    return owner, np.arange(int(count.sum()), dtype=np.int64) - np.repeat(start, count) + np.repeat(lo, count)


class _AlongAxis(LineOperator):
    """Base of the operators of one ``axis`` tiled into whole lines (`LineOperator`'s axis and
    tiling); the lineage of output cell ``i`` of a line is input ``[lo(i), hi(i)]`` of the same
    line (`_window`), and of input cell ``j`` output ``[first(j), last(j)]`` (`_reach`)."""

    def _window(self, i: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _reach(self, j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _pairs(self, cells: np.ndarray, fn, n: int) -> tuple[np.ndarray, np.ndarray]:
        """``(owner, coords)``: each cell's interval ``fn`` along the axis (clipped to ``n``)."""
        cells = np.asarray(cells, np.int64)
        a = self._axis()
        lo, hi = fn(cells[:, a])
        owner, index = _interval_pairs(np.maximum(lo, 0), np.minimum(hi, n - 1))
        coords = cells[owner]
        coords[:, a] = index
        return owner, coords

    def _count(self, cells: np.ndarray, fn, n: int) -> int:
        """How many pairs `_pairs` would give."""
        lo, hi = fn(np.asarray(cells, np.int64).reshape(len(cells), len(self.input_shapes[0]))[:, self._axis()])
        return int(np.maximum(np.minimum(hi, n - 1) - np.maximum(lo, 0) + 1, 0).sum())

    def map_b_pairs(self, cells: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        return self._pairs(cells, self._window, self.input_shapes[0][self._axis()])

    def _lines(self, mask: np.ndarray, n: int, fn) -> np.ndarray:
        """Per line of ``mask`` along the axis: the union of the intervals ``fn`` gives for
        its set cells, on a line of length ``n``; vectorized over all lines at once."""
        a = self._axis()
        moved = np.moveaxis(np.asarray(mask, bool), a, -1)
        rows = moved.reshape(-1, moved.shape[-1])
        line, pos = np.nonzero(rows)
        lo, hi = fn(pos)
        lo, hi = np.maximum(lo, 0), np.minimum(hi, n - 1)
        ok = lo <= hi
        marks = np.zeros((rows.shape[0], n + 1), np.int64)
        np.add.at(marks, (line[ok], lo[ok]), 1)
        np.add.at(marks, (line[ok], hi[ok] + 1), -1)
        out = np.cumsum(marks[:, :n], axis=1) > 0
        return np.moveaxis(out.reshape(moved.shape[:-1] + (n,)), -1, a)

    def map_b_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        return self._lines(mask, self.input_shapes[0][self._axis()], self._window)

    def map_f_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        assert self.output_shape is not None
        return self._lines(mask, self.output_shape[self._axis()], self._reach)

    def map_b(self, cells: np.ndarray, i: int) -> np.ndarray:
        """Few cells: their intervals (cost follows the answer); many: through the mask form."""
        assert self.output_shape is not None
        n = self.input_shapes[0][self._axis()]
        if self._count(cells, self._window, n) <= int(np.prod(self.input_shapes[0])):
            return unique_rows(self._pairs(cells, self._window, n)[1])
        return np.argwhere(np.asarray(self.map_b_mask(mask_from_coords(cells, self.output_shape), i)))

    def map_f(self, cells: np.ndarray, i: int) -> np.ndarray:
        assert self.output_shape is not None
        n = self.output_shape[self._axis()]
        if self._count(cells, self._reach, n) <= int(np.prod(self.output_shape)):
            return unique_rows(self._pairs(cells, self._reach, n)[1])
        return np.argwhere(np.asarray(self.map_f_mask(mask_from_coords(cells, self.input_shapes[0]), i)))

    def map_b_boxes(self, lo: np.ndarray, hi: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray] | None:
        return self._boxes(lo, hi, self._window, self.input_shapes[0][self._axis()])

    def map_f_boxes(self, lo: np.ndarray, hi: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray] | None:
        assert self.output_shape is not None
        return self._boxes(lo, hi, self._reach, self.output_shape[self._axis()])

    def _boxes(self, lo, hi, fn, n):
        """Boxes to boxes: the windows are monotone in the index, so a run of indices maps to
        the run from its first cell's window start to its last cell's window end."""
        lo, hi = np.array(lo, np.int64), np.array(hi, np.int64)
        a = self._axis()
        first, _ = fn(lo[:, a])
        _, last = fn(hi[:, a] - 1)
        lo[:, a], hi[:, a] = np.maximum(first, 0), np.minimum(last, n - 1) + 1
        keep = np.all(hi > lo, axis=1)
        return lo[keep], hi[keep]


class Cumulative(_AlongAxis):
    """``np.<how>(x, axis)``, ``how`` one of `CUMULATIVE`: output cell ``i`` reads input cells
    ``0..i`` of its line.

    Examples
    --------
    >>> Cumulative("cumsum", axis=0).run(None, np.array([1, 2, 3]))
    array([1, 3, 6])
    """

    def __init__(self, how: str = "cumsum", axis: int = -1):
        super().__init__(axis)
        self.how = check_choice(how, tuple(CUMULATIVE), "Cumulative", "how")

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        self._axis(len(input_shapes[0]))
        return tuple(input_shapes[0])

    def run(self, ctx: Context, *inputs: np.ndarray) -> np.ndarray:
        (x,) = inputs
        return np.asarray(CUMULATIVE[self.how](x, axis=self._axis()))

    def _window(self, i):
        return np.zeros_like(i), i

    def _reach(self, j):
        return j, np.full_like(j, self.input_shapes[0][self._axis()] - 1)


class Diff(_AlongAxis):
    """``np.diff(x, n, axis)`` (``n >= 1``): output cell ``i`` reads input cells ``i..i+n``
    of its line.

    Examples
    --------
    >>> Diff(1, axis=0).run(None, np.array([1, 4, 9]))
    array([3, 5])
    """

    def __init__(self, n: int = 1, axis: int = -1):
        super().__init__(axis)
        if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
            raise WorkflowError(f"Diff: n must be an int >= 1, got {n!r}")
        self.n = int(n)

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        shape = list(input_shapes[0])
        a = self._axis(len(shape))
        if shape[a] <= self.n:
            raise WorkflowError(f"Diff: n={self.n} leaves no cell of axis {a} (length {shape[a]}); give n < "
                                f"{shape[a]}")
        shape[a] -= self.n
        return tuple(shape)

    def run(self, ctx: Context, *inputs: np.ndarray) -> np.ndarray:
        (x,) = inputs
        return np.diff(x, self.n, axis=self._axis())

    def _window(self, i):
        return i, i + self.n

    def _reach(self, j):
        return j - self.n, j


class _ConvolveTiling(Tiling):
    """A constant kernel: tiles split the output; a tile reads the window of the symbolic
    operand its cells meet.  Two symbolic operands: one tile."""

    def split_axes(self, op) -> tuple[int, ...]:
        return (0,) if op._splits() else ()

    def input_box(self, op, out_box, i: int):
        n = op.input_shapes[i][0]
        if not op._splits():
            return ((0, n),)
        (lo, hi) = out_box[0]
        first, last = op._window(np.array([lo, hi - 1], np.int64), i)
        start, stop = max(int(min(first.min(), last.min())), 0), min(int(max(first.max(), last.max())) + 1, n)
        # longer than the kernel, as the whole is, so numpy convolves the part as it does the whole (it orders
        # its operands by length): the same sums in the same order, numpy's values to the bit
        need = len(op.constant) + 1
        start = max(start - max(need - (stop - start), 0), 0)
        stop = min(max(stop, start + need), n)
        return ((start, stop),)


class SequenceConvolve(Operator):
    """``np.convolve(a, v, mode)`` or (``correlate=True``) ``np.correlate(a, v, mode)`` of
    1-D operands.  Both operands are inputs, or one is the constant ``constant`` and the
    other the one input (``constant_at``: 0 for ``a``, 1 for ``v``).

    Output cell ``k`` is cell ``t = k + offset`` of the full result, which reads ``a[j]``
    for ``max(0, t-m+1) <= j <= min(t, n-1)`` and the matching cells of ``v`` (``n``, ``m``
    the lengths of ``a`` and ``v``).

    Examples
    --------
    >>> SequenceConvolve("same", constant=np.array([1.0, 1.0])).run(None, np.array([1.0, 2.0, 3.0]))
    array([1., 3., 5.])
    """

    entire_array_safe = True
    tiling = _ConvolveTiling()

    def __init__(self, mode: str = "full", correlate: bool = False, constant: Any = None, constant_at: int = 1):
        self.mode = check_choice(mode, ("full", "same", "valid"), "SequenceConvolve", "mode")
        self.correlate = bool(correlate)
        self.constant = None if constant is None else np.asarray(constant)
        if self.constant is not None and (self.constant.ndim != 1 or not len(self.constant)):
            raise WorkflowError(f"SequenceConvolve: the constant operand must be a non-empty 1-D array, got shape "
                                f"{self.constant.shape}")
        if constant_at not in (0, 1):
            raise WorkflowError(f"SequenceConvolve: constant_at must be 0 (a) or 1 (v), got {constant_at!r}")
        self.constant_at = int(constant_at)

    def supported_modes(self) -> set[Mode]:
        return {Mode.MAP}

    def _splits(self) -> bool:
        """Tiles split the output: a constant kernel shorter than the symbolic operand."""
        return self.constant is not None and len(self.constant) < self.input_shapes[0][0]

    def _lengths(self, input_shapes) -> tuple[int, int]:
        shapes = [tuple(s) for s in input_shapes]
        if self.constant is not None:
            shapes.insert(self.constant_at, self.constant.shape)
        if len(shapes) != 2 or any(len(s) != 1 or s[0] < 1 for s in shapes):
            raise WorkflowError(f"SequenceConvolve: expected two non-empty 1-D operands, got shapes {shapes}")
        return shapes[0][0], shapes[1][0]

    def _layout(self) -> tuple[int, int, int, int]:
        """``(n, m, offset, length)``: the operands' lengths, where the output starts in the
        full result, and its length."""
        n, m = self._lengths(self.input_shapes)
        lo, hi = min(n, m), max(n, m)
        if self.mode == "full":
            return n, m, 0, n + m - 1
        if self.mode == "valid":
            return n, m, lo - 1, hi - lo + 1
        offset = n // 2 if self.correlate and n < m else (lo - 1) // 2
        return n, m, offset, hi

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        n, m = self._lengths(input_shapes)
        return (n + m - 1,) if self.mode == "full" else (abs(n - m) + 1,) if self.mode == "valid" else (max(n, m),)

    def run(self, ctx: Context, *inputs: np.ndarray) -> np.ndarray:
        operands = list(inputs)
        fn: Callable[..., Any] = np.correlate if self.correlate else np.convolve
        if self.constant is None:
            return np.asarray(fn(operands[0], operands[1], self.mode))
        operands.insert(self.constant_at, self.constant)
        tile = None if ctx is None else ctx.tile_box
        if tile is None or not self.input_shapes:
            return np.asarray(fn(operands[0], operands[1], self.mode))
        # a tile: the full result of the part read, shifted to where that part sits
        (lo, hi), (start, stop) = tile[0], ctx.input_boxes[0][0]
        n, m, offset, _ = self._layout()
        shift = (m - stop) if (self.correlate and self.constant_at == 0) else start
        part = np.asarray(fn(operands[0], operands[1], "full"))
        return part[lo + offset - shift: hi + offset - shift]

    def _operand(self, i: int) -> int:
        """Which operand (0: ``a``, 1: ``v``) input ``i`` is."""
        return (1 - self.constant_at) if self.constant is not None else i

    def _window(self, k: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        """The closed range of operand cells output cells ``k`` read."""
        n, m, offset, _ = self._layout()
        t = np.asarray(k, np.int64) + offset
        if self._operand(i) == 0:
            return np.maximum(0, t - m + 1), np.minimum(t, n - 1)
        lo, hi = np.maximum(0, t - n + 1), np.minimum(t, m - 1)
        return (m - 1 - hi, m - 1 - lo) if self.correlate else (lo, hi)

    def _reach(self, j: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        """The closed range of output cells operand cells ``j`` reach."""
        n, m, offset, length = self._layout()
        j = np.asarray(j, np.int64)
        if self._operand(i) == 0:
            first, span = j, m
        else:
            first, span = (m - 1 - j if self.correlate else j), n
        return np.maximum(first - offset, 0), np.minimum(first + span - 1 - offset, length - 1)

    def map_b_pairs(self, cells: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = self._window(np.asarray(cells, np.int64)[:, 0], i)
        owner, index = _interval_pairs(lo, hi)
        return owner, index[:, None]

    def map_b_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        lo, hi = self._window(np.flatnonzero(mask), i)
        return _interval_mask(lo, hi, self.input_shapes[i][0])

    def map_f_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        lo, hi = self._reach(np.flatnonzero(mask), i)
        return _interval_mask(lo, hi, self._layout()[3])

    def map_b(self, cells: np.ndarray, i: int) -> np.ndarray:
        """Few cells: their windows (cost follows the answer); many: one difference array."""
        return self._union(self._window(np.asarray(cells, np.int64).reshape(-1, 1)[:, 0], i),
                           self.input_shapes[i][0])

    def map_f(self, cells: np.ndarray, i: int) -> np.ndarray:
        return self._union(self._reach(np.asarray(cells, np.int64).reshape(-1, 1)[:, 0], i), self._layout()[3])

    @staticmethod
    def _union(window: tuple[np.ndarray, np.ndarray], n: int) -> np.ndarray:
        lo, hi = window
        if int(np.maximum(hi - lo + 1, 0).sum()) <= n:
            return np.unique(_interval_pairs(lo, hi)[1])[:, None]
        return np.flatnonzero(_interval_mask(lo, hi, n))[:, None].astype(np.int64)


class Take(IndexMapOperator):
    """``np.take(x, indices, axis)`` for constant 1-D ``indices`` (negative count from the
    end): output index ``j`` along ``axis`` copies input index ``indices[j]``.

    Examples
    --------
    >>> op = Take([2, 0], axis=0)
    >>> op.input_shapes, op.output_shape = ((3,),), (2,)
    >>> op.maps_for((3,))[0]
    array([2, 0])
    """

    def __init__(self, indices: Sequence[int] | np.ndarray, axis: int = 0):
        self.indices = np.asarray(indices)
        if self.indices.ndim != 1 or self.indices.dtype.kind not in "iu":
            raise WorkflowError(f"Take: indices must be a 1-D array of ints, got {self.indices!r}")
        self.indices = self.indices.astype(np.int64)
        self.axis = int(axis)

    def maps_for(self, shape: Shape) -> list[np.ndarray]:
        a = normalize_axis(self.axis, len(shape), "Take")
        n = shape[a]
        if len(self.indices) and (self.indices.min() < -n or self.indices.max() >= n):
            raise WorkflowError(f"Take: an index is out of bounds for axis {a} with size {n}")
        return [np.arange(k, dtype=np.int64) if d != a else self.indices % n for d, k in enumerate(shape)]

    def map_f(self, cells: np.ndarray, i: int) -> np.ndarray:
        """Through the mask form: an index may be taken many times or never."""
        mask = self.map_f_mask(mask_from_coords(cells, self.input_shapes[0]), i)
        return np.argwhere(np.asarray(mask)).astype(np.int64)


class _AlongTiling(Tiling):
    """`TakeAlong`: tiles split every axis but ``axis``; a tile reads its own range of them
    (the first cell of an axis of length 1 that broadcasts) and the whole ``axis``."""

    def split_axes(self, op) -> tuple[int, ...]:
        return tuple(d for d in range(len(op.output_shape)) if d != op._axis())

    def input_box(self, op, out_box, i: int):
        a = op._axis()
        return tuple((0, n) if d == a else (0, 1) if n == 1 else out_box[d]
                     for d, n in enumerate(op.input_shapes[0]))


class TakeAlong(Operator):
    """``np.take_along_axis(x, indices, axis)`` for a constant ``indices`` array of the same
    number of axes (numpy's broadcasting of the other axes): output cell ``o`` copies the
    input cell with ``o``'s coordinates, ``indices[o]`` along ``axis`` (0 on axes of length
    1 that broadcast).

    Examples
    --------
    >>> TakeAlong(np.array([[1], [0]]), axis=1).run(None, np.array([[1, 2], [3, 4]]))
    array([[2],
           [3]])
    """

    entire_array_safe = False
    tiling = _AlongTiling()

    def __init__(self, indices: np.ndarray, axis: int = -1):
        self.indices = np.asarray(indices)
        if self.indices.dtype.kind not in "iu":
            raise WorkflowError(f"TakeAlong: indices must be ints, got dtype {self.indices.dtype}")
        self.indices = self.indices.astype(np.int64)
        self.axis = int(axis)

    def supported_modes(self) -> set[Mode]:
        return {Mode.MAP}

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        shape = tuple(input_shapes[0])
        if self.indices.ndim != len(shape):
            raise WorkflowError(f"TakeAlong: indices has {self.indices.ndim} axes, the array {len(shape)}; "
                                "give indices of the same number of axes")
        a = normalize_axis(self.axis, len(shape), "TakeAlong")
        rest = [n for d, n in enumerate(shape) if d != a]
        rest_i = [n for d, n in enumerate(self.indices.shape) if d != a]
        try:
            both = list(np.broadcast_shapes(tuple(rest), tuple(rest_i)))
        except ValueError:
            raise WorkflowError(f"TakeAlong: indices of shape {self.indices.shape} do not broadcast against the "
                                f"array of shape {shape} off axis {a}") from None
        n = shape[a]
        if self.indices.size and (self.indices.min() < -n or self.indices.max() >= n):
            raise WorkflowError(f"TakeAlong: an index is out of bounds for axis {a} with size {n}")
        both.insert(a, self.indices.shape[a])
        return tuple(both)

    def _sources(self) -> np.ndarray:
        """For every output cell (C order), the input cell it copies: ``(size, ndim)``."""
        assert self.output_shape is not None
        shape = self.input_shapes[0]
        a = normalize_axis(self.axis, len(shape), "TakeAlong")
        out = np.argwhere(np.ones(self.output_shape, bool)).astype(np.int64)
        index = np.broadcast_to(self.indices, self.output_shape).reshape(-1) % shape[a]
        out[:, a] = index
        return np.where(np.array(shape) == 1, 0, out)

    def _axis(self) -> int:
        return normalize_axis(self.axis, len(self.input_shapes[0]), "TakeAlong")

    def run(self, ctx: Context, *inputs: np.ndarray) -> np.ndarray:
        (x,) = inputs
        shape = np.shape(x)
        a = normalize_axis(self.axis, len(shape), "TakeAlong")
        indices = self.indices
        if ctx is not None and ctx.tile_box is not None and self.output_shape is not None:
            full = np.broadcast_to(indices, self.output_shape)
            indices = full[tuple(slice(None) if d == a else slice(lo, hi) for d, (lo, hi) in enumerate(ctx.tile_box))]
        return np.take_along_axis(x, indices % shape[a], axis=a)

    def map_b_pairs(self, cells: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        assert self.output_shape is not None
        cells = np.asarray(cells, np.int64).reshape(-1, len(self.output_shape))
        shape = self.input_shapes[0]
        a = normalize_axis(self.axis, len(shape), "TakeAlong")
        coords = cells.copy()
        coords[:, a] = np.broadcast_to(self.indices, self.output_shape)[tuple(cells.T)] % shape[a]
        return np.arange(len(cells), dtype=np.int64), np.where(np.array(shape) == 1, 0, coords)

    def map_b_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        out = np.zeros(self.input_shapes[0], bool)
        src = self._sources()[np.asarray(mask, bool).reshape(-1)]
        out[tuple(src.T)] = True
        return out

    def map_f_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        assert self.output_shape is not None
        src = self._sources()
        return np.asarray(mask, bool)[tuple(src.T)].reshape(self.output_shape)

    def map_b(self, cells: np.ndarray, i: int) -> np.ndarray:
        return unique_rows(self.map_b_pairs(cells, i)[1])

    def map_f(self, cells: np.ndarray, i: int) -> np.ndarray:
        return np.argwhere(np.asarray(self.map_f_mask(mask_from_coords(cells, self.input_shapes[0]), i)))

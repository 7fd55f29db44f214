"""Operators that move cells without looking at values: every one is a mapping operator
whose output cell reads at most one input cell."""

from __future__ import annotations

from collections.abc import Sequence
import numpy as np

from subzero.cells import to_coords, to_ids
from subzero.context import Context
from subzero.errors import WorkflowError
from subzero.modes import Mode
from subzero.operator import Operator
from subzero.operators._args import check_choice, normalize_axes, normalize_axis, per_axis
from subzero.operators._kernels import BOUNDARY_MODES, boundary_index
from subzero.operators.indexmap import IndexMapOperator
from subzero.operators.tilings import Concatenated, MapTiled, Stacked
from subzero.tiling import Permuted, Shape, Tiling

__all__ = ["Transpose", "Reshape", "Concatenate", "Stack", "Slice", "Flip", "Pad", "Shift", "Tile"]


class Transpose(MapTiled):
    """Permute axes (``np.transpose``); the default reverses them."""

    entire_array_safe = True
    reads_only = True  # numpy's own function: a view of its input, never written

    def __init__(self, axes: Sequence[int] | None = None):
        self.axes = None if axes is None else tuple(int(a) for a in axes)

    def _axes(self, ndim: int | None = None) -> tuple[int, ...]:
        ndim = len(self.input_shapes[0]) if ndim is None else ndim
        if self.axes is None:
            return tuple(reversed(range(ndim)))
        return tuple(a % ndim if -ndim <= a < ndim else a for a in self.axes)

    def tiling_for(self) -> Tiling:
        return Permuted(self._axes())

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        shape = input_shapes[0]
        axes = self._axes(len(shape))
        if sorted(axes) != list(range(len(shape))):
            raise WorkflowError(f"Transpose: axes {self.axes} is not a permutation of the {len(shape)} axes "
                                f"of the input of shape {shape}")
        return tuple(shape[a] for a in axes)

    def run(self, ctx: Context, x: np.ndarray) -> np.ndarray:
        return np.transpose(x, self._axes())

    def map_b(self, cells: np.ndarray, i: int) -> np.ndarray:
        out = np.empty_like(cells)
        out[:, list(self._axes())] = cells
        return out

    def map_f(self, cells: np.ndarray, i: int) -> np.ndarray:
        return cells[:, list(self._axes())]

    def map_b_boxes(self, lo: np.ndarray, hi: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray] | None:
        axes = list(self._axes())
        out_lo, out_hi = np.empty_like(lo), np.empty_like(hi)
        out_lo[:, axes], out_hi[:, axes] = lo, hi
        return out_lo, out_hi

    def map_f_boxes(self, lo: np.ndarray, hi: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray] | None:
        axes = list(self._axes())
        return lo[:, axes], hi[:, axes]

    def map_b_pairs(self, cells: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        return np.arange(len(cells), dtype=np.int64), self.map_b(cells, i)

    def map_b_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        return np.transpose(mask, np.argsort(self._axes()))

    def map_f_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        return np.transpose(mask, self._axes())


class Reshape(Operator):
    """``x.reshape(shape)`` in C order; one entry of ``shape`` may be -1.

    Cells keep their flat index, so a tile would not read a box: it runs whole.
    """

    entire_array_safe = True
    reads_only = True  # numpy's own method: a view of its input (or a copy), never written
    #: output cell k (flat, C order) reads input cell k: a query keeps a frontier's flat ids (`subzero.query.Rule`)
    same_ids = True

    def __init__(self, shape: Sequence[int]):
        self.shape = tuple(int(n) for n in shape)

    def supported_modes(self) -> set[Mode]:
        return {Mode.MAP}

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        size = int(np.prod(input_shapes[0]))
        if self.shape.count(-1) > 1 or any(n < -1 for n in self.shape):
            raise WorkflowError(f"Reshape: shape must be non-negative sizes with at most one -1, got {self.shape}")
        known = int(np.prod([n for n in self.shape if n != -1]))
        if -1 in self.shape and known and size % known == 0:
            return tuple(size // known if n == -1 else n for n in self.shape)
        if -1 not in self.shape and known == size:
            return self.shape
        raise WorkflowError(f"Reshape: cannot reshape an input of shape {tuple(input_shapes[0])} "
                            f"({size} cells) to shape {self.shape}")

    def run(self, ctx: Context, x: np.ndarray) -> np.ndarray:
        return x.reshape(self.output_shape)

    def map_b_pairs(self, cells: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        return np.arange(len(cells), dtype=np.int64), to_coords(to_ids(cells, self.output_shape), self.input_shapes[0])

    def map_b(self, cells: np.ndarray, i: int) -> np.ndarray:
        return self.map_b_pairs(cells, i)[1]

    def map_f(self, cells: np.ndarray, i: int) -> np.ndarray:
        return to_coords(to_ids(cells, self.input_shapes[0]), self.output_shape)

    def map_b_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        return mask.reshape(self.input_shapes[0])

    def map_f_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        return mask.reshape(self.output_shape)


class Concatenate(MapTiled):
    """``np.concatenate(inputs, axis)``.

    Not entire-array safe (SubZero's own example): the forward lineage of an entire
    input is only its part of the output.
    """

    def __init__(self, axis: int = 0):
        self.axis = axis

    def _axis(self) -> int:
        return normalize_axis(self.axis, len(self.input_shapes[0]), "Concatenate")

    def _starts(self) -> np.ndarray:
        a = self._axis()
        return np.concatenate([[0], np.cumsum([s[a] for s in self.input_shapes])]).astype(np.int64)

    def tiling_for(self) -> Tiling:
        return Concatenated(self._axis(), tuple(self._starts()[:-1].tolist()))

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        first = tuple(input_shapes[0])
        a = normalize_axis(self.axis, len(first), "Concatenate")
        for k, shape in enumerate(input_shapes):
            if len(shape) != len(first) or any(m != n for d, (m, n) in enumerate(zip(shape, first)) if d != a):
                raise WorkflowError(f"Concatenate: input {k} has shape {tuple(shape)}, input 0 has {first}; "
                                    f"they must match on every axis except axis={self.axis}")
        return first[:a] + (sum(s[a] for s in input_shapes),) + first[a + 1:]

    def run(self, ctx: Context, *inputs: np.ndarray) -> np.ndarray:
        return np.concatenate(inputs, axis=self._axis())

    def map_b_pairs(self, cells: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        cells = np.asarray(cells, np.int64)
        a, starts = self._axis(), self._starts()
        owner = np.flatnonzero((cells[:, a] >= starts[i]) & (cells[:, a] < starts[i + 1]))
        coords = cells[owner].copy()
        coords[:, a] -= starts[i]
        return owner, coords

    def map_b(self, cells: np.ndarray, i: int) -> np.ndarray:
        return self.map_b_pairs(cells, i)[1]

    def map_f(self, cells: np.ndarray, i: int) -> np.ndarray:
        coords = np.array(cells, np.int64)
        coords[:, self._axis()] += self._starts()[i]
        return coords

    def _slot(self, i: int) -> tuple[slice, ...]:
        a, starts = self._axis(), self._starts()
        return (slice(None),) * a + (slice(int(starts[i]), int(starts[i + 1])),)

    def map_b_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        return mask[self._slot(i)].copy()

    def map_f_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        out: np.ndarray = np.zeros(self.output_shape, bool)
        out[self._slot(i)] = mask
        return out


class Stack(MapTiled):
    """``np.stack(inputs, axis)``: input ``i`` becomes slice ``i`` along a new axis.

    Not entire-array safe, like `Concatenate`.
    """

    def __init__(self, axis: int = 0):
        self.axis = axis

    def _axis(self) -> int:
        return normalize_axis(self.axis, len(self.input_shapes[0]) + 1, "Stack")

    def tiling_for(self) -> Tiling:
        return Stacked(self._axis())

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        first = tuple(input_shapes[0])
        a = normalize_axis(self.axis, len(first) + 1, "Stack")
        for k, shape in enumerate(input_shapes):
            if tuple(shape) != first:
                raise WorkflowError(f"Stack: input {k} has shape {tuple(shape)}, input 0 has {first}; "
                                    "stacked inputs must have the same shape")
        return first[:a] + (len(input_shapes),) + first[a:]

    def run(self, ctx: Context, *inputs: np.ndarray) -> np.ndarray:
        a = self._axis()
        lo, hi = ctx.tile_box[a]
        return np.stack(inputs[lo:hi], axis=a)

    def map_b_pairs(self, cells: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        cells = np.asarray(cells, np.int64)
        a = self._axis()
        owner = np.flatnonzero(cells[:, a] == i)
        return owner, np.delete(cells[owner], a, axis=1)

    def map_b(self, cells: np.ndarray, i: int) -> np.ndarray:
        return self.map_b_pairs(cells, i)[1]

    def map_f(self, cells: np.ndarray, i: int) -> np.ndarray:
        cells = np.asarray(cells, np.int64)
        return np.insert(cells, self._axis(), i, axis=1)

    def map_b_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        return np.take(mask, i, axis=self._axis())

    def map_f_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        out: np.ndarray = np.zeros(self.output_shape, bool)
        out[(slice(None),) * self._axis() + (i,)] = mask
        return out


class Slice(IndexMapOperator):
    """``x[start:stop:step]`` per axis (numpy slice semantics, negative steps included).

    ``start``, ``stop`` and ``step`` are each None, one value for every axis, or a
    sequence with one entry (possibly None) per axis.

    Examples
    --------
    >>> Slice(start=(1, None), step=(2, -1))          # x[1::2, ::-1]
    Slice(start=(1, None), stop=None, step=(2, -1))
    """

    def __init__(self, start: int | Sequence[int | None] | None = None, stop: int | Sequence[int | None] | None = None,
                 step: int | Sequence[int | None] | None = None):
        self.start, self.stop, self.step = (tuple(v) if isinstance(v, Sequence) else v for v in (start, stop, step))

    def maps_for(self, shape: Shape) -> list[np.ndarray]:
        bounds = [self._per_axis(v, len(shape), name) for v, name in
                  ((self.start, "start"), (self.stop, "stop"), (self.step, "step"))]
        if any(s == 0 for s in bounds[2]):
            raise WorkflowError(f"Slice: step must be non-zero on every axis, got {self.step!r}")
        return [np.arange(*slice(a, b, c).indices(n), dtype=np.int64) for n, a, b, c in zip(shape, *bounds)]

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        """The sliced lengths, from the slices alone (no index map is built)."""
        shape = tuple(input_shapes[0])
        bounds = [self._per_axis(v, len(shape), name) for v, name in
                  ((self.start, "start"), (self.stop, "stop"), (self.step, "step"))]
        if any(s == 0 for s in bounds[2]):
            raise WorkflowError(f"Slice: step must be non-zero on every axis, got {self.step!r}")
        return tuple(len(range(*slice(a, b, c).indices(n))) for n, a, b, c in zip(shape, *bounds))

    @staticmethod
    def _per_axis(value, ndim: int, name: str) -> tuple:
        items = list(value) if isinstance(value, tuple) else [value] * ndim
        if len(items) != ndim or any(v is not None and not isinstance(v, (int, np.integer)) for v in items):
            raise WorkflowError(f"Slice: {name} must be None, an int, or one int/None per axis of the "
                                f"{ndim}-D input, got {value!r}")
        return tuple(items)


class Flip(IndexMapOperator):
    """``np.flip(x, axis)``; ``axis=None`` flips every axis."""

    def __init__(self, axis: int | Sequence[int] | None = None):
        self.axis = tuple(axis) if isinstance(axis, Sequence) else axis

    def maps_for(self, shape: Shape) -> list[np.ndarray]:
        axes = range(len(shape)) if self.axis is None else normalize_axes(self.axis, len(shape), "Flip")
        return [np.arange(n, dtype=np.int64)[::-1] if k in axes else np.arange(n, dtype=np.int64)
                for k, n in enumerate(shape)]


#: np.pad mode -> the scipy.ndimage boundary mode that reads the same cells
_PAD_MODES = {"constant": "constant", "edge": "nearest", "reflect": "mirror", "symmetric": "reflect", "wrap": "wrap"}


class Pad(IndexMapOperator):
    """``np.pad(x, pad_width, mode, constant_values=...)`` for the modes that copy cells:
    ``constant``, ``edge``, ``reflect``, ``symmetric`` and ``wrap``.

    A padded cell reads the cell the mode copies (``constant`` padding reads nothing).
    ``pad_width`` is as in numpy: an int, ``(before, after)``, or one pair per axis.
    """

    def __init__(self, pad_width: int | Sequence[int] | Sequence[Sequence[int]], mode: str = "constant",
                 constant_values: float = 0):
        self.pad_width = np.asarray(pad_width).tolist()
        self.mode = check_choice(mode, tuple(_PAD_MODES), "Pad", "mode")
        self.fill = constant_values

    def maps_for(self, shape: Shape) -> list[np.ndarray]:
        widths = np.asarray(self.pad_width)
        if widths.dtype.kind not in "iu" or np.any(widths < 0):
            raise WorkflowError(f"Pad: pad_width must be non-negative integers, got {self.pad_width!r}")
        try:
            widths = np.broadcast_to(widths, (len(shape), 2))
        except ValueError:
            raise WorkflowError(f"Pad: pad_width must be an int, a (before, after) pair or one pair per axis "
                                f"of the {len(shape)}-D input, got {self.pad_width!r}") from None
        if self.mode != "constant" and 0 in shape and widths.any():
            raise WorkflowError(f"Pad: mode {self.mode!r} cannot pad the empty axis of shape {tuple(shape)}")
        return [boundary_index(np.arange(-lo, n + hi), n, _PAD_MODES[self.mode]) for n, (lo, hi) in zip(shape, widths)]


class Shift(IndexMapOperator):
    """Shift by whole cells: ``out[j] = x[j - shift]``, reading outside the array through a
    scipy.ndimage boundary ``mode`` (``constant`` fills with ``cval``, ``wrap`` is
    ``np.roll``).  ``shift`` is an int or one int per axis."""

    def __init__(self, shift: int | Sequence[int], mode: str = "constant", cval: float = 0.0):
        self.shift = tuple(shift) if isinstance(shift, Sequence) else shift
        self.mode = check_choice(mode, BOUNDARY_MODES, "Shift", "mode")
        self.fill = cval

    def maps_for(self, shape: Shape) -> list[np.ndarray]:
        shifts = per_axis(self.shift, len(shape), "Shift", "shift")
        return [boundary_index(np.arange(n) - s, n, self.mode) for n, s in zip(shape, shifts)]


class Tile(IndexMapOperator):
    """``np.tile(x, reps)`` with ``len(reps) <= x.ndim`` (missing leading reps are 1)."""

    def __init__(self, reps: int | Sequence[int]):
        self.reps = tuple(reps) if isinstance(reps, Sequence) else (reps,)

    def maps_for(self, shape: Shape) -> list[np.ndarray]:
        if len(self.reps) > len(shape):
            raise WorkflowError(f"Tile: reps {self.reps} has more entries than the input has axes {tuple(shape)}; "
                                "add axes with Reshape first")
        reps = per_axis((1,) * (len(shape) - len(self.reps)) + self.reps, len(shape), "Tile", "reps", minimum=0)
        return [np.arange(n * r, dtype=np.int64) % max(n, 1) for n, r in zip(shape, reps)]

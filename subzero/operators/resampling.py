"""Resampling by whole factors: block reduction (Downsample) and repetition (Upsample)."""

from __future__ import annotations

from collections.abc import Sequence
import numpy as np

from subzero.context import Context
from subzero.operators._args import check_choice, per_axis
from subzero.operators._kernels import corner_offsets, unique_rows
from subzero.operators.indexmap import IndexMapOperator
from subzero.operators.tilings import Blocks, MapTiled
from subzero.tiling import Shape, Tiling

__all__ = ["Downsample", "Upsample"]

_REDUCE = {"mean": np.add, "sum": np.add, "max": np.maximum, "min": np.minimum}


class Downsample(MapTiled):
    """Block reduction: output cell ``j`` is the mean (sum, max, min) of the input block
    ``[j * factor, (j + 1) * factor)`` per axis.

    The output has ``ceil(n / factor)`` cells per axis: a trailing partial block reduces
    over the cells it has, so every input cell has lineage (entire-array safe).
    """

    entire_array_safe = True

    def __init__(self, factor: int | Sequence[int] = 2, how: str = "mean"):
        self.factor = tuple(factor) if isinstance(factor, Sequence) else factor
        self.how = check_choice(how, tuple(_REDUCE), "Downsample", "how")

    def _factors(self, ndim: int | None = None) -> tuple[int, ...]:
        ndim = len(self.input_shapes[0]) if ndim is None else ndim
        return per_axis(self.factor, ndim, "Downsample", "factor", minimum=1)

    def tiling_for(self) -> Tiling:
        return Blocks(self._factors())

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        shape = tuple(input_shapes[0])
        return tuple(-(-n // f) for n, f in zip(shape, self._factors(len(shape))))

    def run(self, ctx: Context, x: np.ndarray) -> np.ndarray:
        out = np.asarray(x, dtype=np.float64) if self.how == "mean" else np.asarray(x)
        for axis, f in enumerate(self._factors()):
            if out.shape[axis]:
                starts = np.arange(0, out.shape[axis], f)
                out = _REDUCE[self.how].reduceat(out, starts, axis=axis)
                if self.how == "mean":
                    sizes = np.diff(np.append(starts, x.shape[axis]))
                    out = out / sizes.reshape((-1,) + (1,) * (out.ndim - axis - 1))
        return out

    # -- lineage ------------------------------------------------------------------------
    def map_b_pairs(self, cells: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        cells = np.asarray(cells, np.int64)
        factors = np.array(self._factors(), np.int64)
        block = corner_offsets(self._factors())
        coords = (cells[:, None, :] * factors + block[None, :, :]).reshape(-1, len(factors))
        owner = np.repeat(np.arange(len(cells), dtype=np.int64), len(block))
        inside = np.all(coords < np.array(self.input_shapes[0]), axis=1)
        return owner[inside], coords[inside]

    def map_b(self, cells: np.ndarray, i: int) -> np.ndarray:
        return unique_rows(self.map_b_pairs(cells, i)[1])

    def map_f(self, cells: np.ndarray, i: int) -> np.ndarray:
        return unique_rows(np.asarray(cells, np.int64) // np.array(self._factors(), np.int64))

    def map_b_boxes(self, lo: np.ndarray, hi: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray] | None:
        factors = np.array(self._factors(), np.int64)
        lo, hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
        return lo * factors, np.minimum(hi * factors, np.array(self.input_shapes[0], np.int64))

    def map_f_boxes(self, lo: np.ndarray, hi: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray] | None:
        factors = np.array(self._factors(), np.int64)
        lo, hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
        return lo // factors, np.where(hi > lo, (hi - 1) // factors + 1, lo // factors)  # an empty box stays empty

    def map_b_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        for axis, (f, n) in enumerate(zip(self._factors(), self.input_shapes[0])):
            mask = np.repeat(mask, f, axis=axis)[(slice(None),) * axis + (slice(0, n),)]
        return mask

    def map_f_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        for axis, f in enumerate(self._factors()):
            starts = np.arange(0, mask.shape[axis], f)
            mask = np.logical_or.reduceat(mask, starts, axis=axis) if len(starts) else mask
        return mask


class Upsample(IndexMapOperator):
    """Nearest-neighbour upsampling: repeat each cell ``factor`` times per axis
    (``np.repeat`` along every axis); output index ``j`` reads input ``j // factor``."""

    def __init__(self, factor: int | Sequence[int] = 2):
        self.factor = tuple(factor) if isinstance(factor, Sequence) else factor

    def maps_for(self, shape: Shape) -> list[np.ndarray]:
        factors = per_axis(self.factor, len(shape), "Upsample", "factor", minimum=1)
        return [np.arange(n * f, dtype=np.int64) // f for n, f in zip(shape, factors)]

    def _factors(self) -> np.ndarray:
        return np.array(per_axis(self.factor, len(self.input_shapes[0]), "Upsample", "factor", minimum=1), np.int64)

    def map_b_boxes(self, lo: np.ndarray, hi: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Output boxes to the input cells they repeat: ``[lo // f, ceil(hi / f))`` per axis,
        arithmetic over the boxes (the index maps' general form walks each box)."""
        f = self._factors()
        lo, hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
        return lo // f, np.where(hi > lo, (hi - 1) // f + 1, lo // f)  # an empty box stays empty

    def map_f_boxes(self, lo: np.ndarray, hi: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Input boxes to every output cell repeating them: ``[lo * f, hi * f)`` per axis."""
        f = self._factors()
        return np.asarray(lo, np.int64) * f, np.asarray(hi, np.int64) * f

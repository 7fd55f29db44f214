"""Tilings of the built-in operators that `subzero.tiling` does not provide.

Each maps an output tile box to the box of each input the tile's task reads (see
`subzero.tiling.Tiling`).  An input a tile does not need gets an empty box.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from subzero.modes import Mode
from subzero.operator import Operator
from subzero.tiling import BoundShapes, Box, Tiling

__all__ = ["IndexMapped", "Concatenated", "Stacked", "Blocks", "ReducedAxes", "Lines", "Contracted", "OuterSplit"]


class IndexMapped(Tiling):
    """Output axis ``k`` reads input axis ``k`` through ``op.axis_maps()[k]`` (an index per
    output position, -1 for none): the tile reads the bounding range of the indices."""

    def input_box(self, op: Any, out_box: Box, i: int) -> Box:
        box = []
        for index, (lo, hi) in zip(op.axis_maps(), out_box):
            part = index[lo:hi]
            part = part[part >= 0]
            box.append((int(part.min()), int(part.max()) + 1) if len(part) else (0, 0))
        return tuple(box)


@dataclass(frozen=True)
class Concatenated(Tiling):
    """Inputs laid end to end along ``axis``; input ``i`` starts at ``starts[i]``."""

    axis: int
    starts: tuple[int, ...]

    def input_box(self, op: BoundShapes, out_box: Box, i: int) -> Box:
        n = op.input_shapes[i][self.axis]
        lo, hi = (min(max(b - self.starts[i], 0), n) for b in out_box[self.axis])
        box = list(out_box)
        box[self.axis] = (lo, hi)
        return tuple(box)


@dataclass(frozen=True)
class Stacked(Tiling):
    """Input ``i`` is slice ``i`` of the output along the new ``axis``."""

    axis: int

    def input_box(self, op: BoundShapes, out_box: Box, i: int) -> Box:
        rest = out_box[: self.axis] + out_box[self.axis + 1:]
        lo, hi = out_box[self.axis]
        return rest if lo <= i < hi else tuple((0, 0) for _ in rest)


@dataclass(frozen=True)
class Blocks(Tiling):
    """Block reduction: output index ``j`` reads input indices ``[j*f, (j+1)*f)`` per axis."""

    factors: tuple[int, ...]

    def input_box(self, op: BoundShapes, out_box: Box, i: int) -> Box:
        return tuple((lo * f, min(hi * f, n)) for (lo, hi), f, n in zip(out_box, self.factors, op.input_shapes[i]))


@dataclass(frozen=True)
class ReducedAxes(Tiling):
    """A reduction over input ``axes`` (sorted): tiles split the kept axes, read the others whole."""

    axes: tuple[int, ...]

    def input_box(self, op: BoundShapes, out_box: Box, i: int) -> Box:
        kept = iter(out_box)
        return tuple((0, n) if a in self.axes else next(kept) for a, n in enumerate(op.input_shapes[i]))


@dataclass(frozen=True)
class Lines(Tiling):
    """Whole lines along ``axis``: tiles split every other axis (output shape = input shape)."""

    axis: int

    def split_axes(self, op: BoundShapes) -> tuple[int, ...]:
        return tuple(a for a in range(len(op.output_shape)) if a != self.axis)

    def input_box(self, op: BoundShapes, out_box: Box, i: int) -> Box:
        box = list(out_box)
        box[self.axis] = (0, op.input_shapes[i][self.axis])
        return tuple(box)


@dataclass(frozen=True)
class Contracted(Tiling):
    """``np.dot(a, b)``: tiles split the output axes that come from ``a``; a tile reads those
    rows of ``a`` whole along the contracted axis, and all of ``b``."""

    a_axes: int  # number of output axes taken from ``a`` (a.ndim - 1)

    def split_axes(self, op: BoundShapes) -> tuple[int, ...]:
        return tuple(range(self.a_axes))

    def input_box(self, op: BoundShapes, out_box: Box, i: int) -> Box:
        if i == 0:
            return tuple(out_box[: self.a_axes]) + ((0, op.input_shapes[0][-1]),)
        return tuple((0, n) for n in op.input_shapes[1])


@dataclass(frozen=True)
class OuterSplit(Tiling):
    """Outer product: the first ``a_ndim`` output axes index ``a``, the rest index ``b``."""

    a_ndim: int

    def input_box(self, op: BoundShapes, out_box: Box, i: int) -> Box:
        return tuple(out_box[: self.a_ndim]) if i == 0 else tuple(out_box[self.a_ndim:])


class MapTiled(Operator):
    """Base of the operators answered by their mapping functions (`Mode.MAP`) whose tiling
    follows from their parameters once the input shapes are bound (`tiling_for`)."""

    def tiling_for(self) -> Tiling:
        """The tiling for the bound input shapes."""
        raise NotImplementedError(f"{type(self).__name__} must implement tiling_for()")

    @property
    def tiling(self) -> Tiling | None:  # type: ignore[override]  # Operator.tiling: a plain attribute elsewhere
        """`tiling_for`, once the input shapes are bound (None before)."""
        return self.tiling_for() if self.input_shapes else None

    def supported_modes(self) -> set[Mode]:
        """Mapping functions: `Mode.MAP`."""
        return {Mode.MAP}

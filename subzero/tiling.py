"""Tiles and tilings: how an operator's work splits into independent tasks.

A *box* is a tuple of half-open ``(lo, hi)`` ranges, one per axis.  An operator that
declares a `Tiling` runs as one task per tile of its output; one that declares none
runs as a single task on whole arrays (`Whole`).  A tiling answers two questions for an
output tile: which box of input ``i`` the task reads (`input_box`), and which box of
the output the array returned by ``run`` covers (`result_box`, e.g. a stencil returns
its halo too and the runtime trims it).
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

__all__ = [
    "Box", "BoundShapes", "Tile", "Tiling", "Whole", "Elementwise", "Halo", "Permuted", "Reduced",
    "RowBlocks", "tile_grid", "tile_lens", "default_chunks", "target_tile_cells", "box_shape",
    "box_slices", "intersects", "full_box",
]

Box = tuple[tuple[int, int], ...]
Shape = tuple[int, ...]


class BoundShapes(Protocol):
    """What a tiling reads of the operator it tiles: the shapes the operator is bound to
    (`subzero.Operator` is one)."""

    @property
    def output_shape(self) -> Any:
        """The output's shape (None while only running tells it)."""

    @property
    def input_shapes(self) -> Any:
        """Each input's shape."""


def full_box(shape: Shape) -> Box:
    """The box of a whole array of ``shape``."""
    return tuple((0, int(n)) for n in shape)


def box_shape(box: Box) -> Shape:
    """The shape of ``box``."""
    return tuple(hi - lo for lo, hi in box)


def box_slices(box: Box, origin: Box | None = None) -> tuple[slice, ...]:
    """Slices selecting ``box`` from an array covering ``origin`` (default: the whole array)."""
    if origin is None:
        return tuple(slice(lo, hi) for lo, hi in box)
    return tuple(slice(lo - o, hi - o) for (lo, hi), (o, _) in zip(box, origin))


def intersects(box: Box, lo: "list[int]", hi: "list[int]") -> bool:
    """True when ``box`` meets the closed coordinate box ``[lo, hi]``."""
    return all(b_lo <= h and l < b_hi for (b_lo, b_hi), l, h in zip(box, lo, hi))


@dataclass(frozen=True)
class Tile:
    """One task's share of a node: its index and the output box it computes."""

    index: int
    box: Box


class Tiling:
    """How an operator splits into tasks.  Subclasses override the two box maps."""

    #: output axes that may be split across tiles (None: every axis)
    def split_axes(self, op: BoundShapes) -> tuple[int, ...]:
        """The output axes that may be split across tiles."""
        return tuple(range(len(op.output_shape)))

    def input_box(self, op: BoundShapes, out_box: Box, i: int) -> Box:
        """The box of input ``i`` that computing output box ``out_box`` of ``op`` reads."""
        raise NotImplementedError

    def result_box(self, op: BoundShapes, out_box: Box, in_boxes: tuple[Box, ...]) -> Box:
        """The output box the array returned by ``run`` covers (default: the tile)."""
        return out_box


class Whole(Tiling):
    """One task on whole arrays: the default for operators that declare no tiling."""

    def split_axes(self, op: BoundShapes) -> tuple[int, ...]:
        return ()

    def input_box(self, op: BoundShapes, out_box: Box, i: int) -> Box:
        return full_box(op.input_shapes[i])


class Elementwise(Tiling):
    """Output tile reads the same box of each input, with numpy broadcasting."""

    def input_box(self, op: BoundShapes, out_box: Box, i: int) -> Box:
        shape = op.input_shapes[i]
        tail = out_box[len(out_box) - len(shape):] if shape else ()
        return tuple((0, 1) if n == 1 else rng for n, rng in zip(shape, tail))


@dataclass(frozen=True)
class Halo(Tiling):
    """A stencil: the tile reads its box grown by ``width`` cells on every side.

    ``run`` returns an array covering the grown box (as ``dask.map_overlap`` does);
    the runtime trims it to the tile.  Inputs share the output's shape.
    """

    width: int | tuple[int, ...]

    def _widths(self, ndim: int) -> tuple[int, ...]:
        return (self.width,) * ndim if isinstance(self.width, int) else tuple(self.width)

    def input_box(self, op: BoundShapes, out_box: Box, i: int) -> Box:
        shape = op.input_shapes[i]
        return tuple(
            (max(lo - w, 0), min(hi + w, n))
            for (lo, hi), w, n in zip(out_box, self._widths(len(shape)), shape)
        )

    def result_box(self, op: BoundShapes, out_box: Box, in_boxes: tuple[Box, ...]) -> Box:
        return in_boxes[0]


@dataclass(frozen=True)
class Permuted(Tiling):
    """Output axis ``k`` is input axis ``axes[k]`` (transpose)."""

    axes: tuple[int, ...]

    def input_box(self, op: BoundShapes, out_box: Box, i: int) -> Box:
        box = [None] * len(self.axes)
        for k, a in enumerate(self.axes):
            box[a] = out_box[k]
        return tuple(box)


@dataclass(frozen=True)
class Reduced(Tiling):
    """A reduction over input ``axis``: tiles split the kept axes, read the axis whole."""

    axis: int

    def input_box(self, op: BoundShapes, out_box: Box, i: int) -> Box:
        box = list(out_box)
        box.insert(self.axis, (0, op.input_shapes[i][self.axis]))
        return tuple(box)


class RowBlocks(Tiling):
    """Matrix product: an output row block reads the same rows of input 0, all of input 1."""

    def split_axes(self, op: BoundShapes) -> tuple[int, ...]:
        return (0,)

    def input_box(self, op: BoundShapes, out_box: Box, i: int) -> Box:
        if i == 0:
            return (out_box[0], (0, op.input_shapes[0][1]))
        return full_box(op.input_shapes[1])


#: default tile size: about 1/64 of the array, between 2**16 and 2**22 cells
MIN_TILE_CELLS, MAX_TILE_CELLS = 1 << 16, 1 << 22


def target_tile_cells(size: int) -> int:
    """Cells per tile when the user gives no tile shape: tiles grow with the array (fewer,
    larger Spark tasks) between 65,536 and about 4 million cells."""
    return int(min(max(size // 64, MIN_TILE_CELLS), MAX_TILE_CELLS))


def tile_lens(shape: Shape, split_axes: tuple[int, ...], tile_shape: "int | tuple[int, ...] | None") -> tuple[int, ...]:
    """The length of a tile along each axis (the whole extent along axes not split).

    ``tile_shape`` is a length per axis (an int applies to every split axis); None
    picks `target_tile_cells` cells per tile.
    """
    ndim = len(shape)
    if tile_shape is None:
        lens = list(_target_lens(tuple(int(n) for n in shape), tuple(int(a) for a in split_axes)))
    elif isinstance(tile_shape, (int, np.integer)):
        lens = [int(tile_shape)] * ndim
    else:
        lens = [int(t) for t in tile_shape] + [max(shape, default=1)] * (ndim - len(tile_shape))
    return tuple(max(1, min(int(lens[a]), max(int(n), 1))) if a in split_axes else max(int(n), 1)
                 for a, n in enumerate(shape))


@functools.lru_cache(maxsize=1024)  # every stage of a node asks again
def _target_lens(shape: Shape, split_axes: tuple[int, ...]) -> tuple[int, ...]:
    """Lengths holding about `target_tile_cells` cells per tile whatever the array's shape: the
    split axes take equal shares (the per-axis root of the cells), except that an axis shorter
    than its share is taken whole and the cells it leaves go to the others (a (1048576, 1)
    array gets tiles of 65,536 x 1, not 256 x 1).  Each axis is cut into as many tiles as its
    share asks for, of even lengths, so that no chunk is mostly padding: Zarr stores every
    chunk at its full size (365 days in tiles of 37, not ten of 40 with a last one of 5)."""
    ndim = len(shape)
    whole = math.prod(int(shape[a]) for a in range(ndim) if a not in split_axes)
    per = max(target_tile_cells(math.prod(int(n) for n in shape)) / max(whole, 1), 1.0)
    lens = [max(int(n), 1) for n in shape]
    split = [a for a in range(ndim) if a in split_axes]
    short = [a for a in split if lens[a] < per ** (1.0 / len(split))]
    while short:  # taken whole: their unused share goes to the other split axes
        split = [a for a in split if a not in short]
        per = max(per / math.prod(lens[a] for a in short), 1.0)
        short = [a for a in split if lens[a] < per ** (1.0 / len(split))] if split else []
    for a in split:  # as many tiles as the share asks for (1% over it: one tile), of even lengths
        share = max(1, int(round(per ** (1.0 / len(split)))))
        count = max(1, math.ceil(lens[a] / share - 0.01))
        lens[a] = -(-lens[a] // count)
    return tuple(lens)


def default_chunks(shape: Shape) -> tuple[int, ...]:
    """Chunks of an array no tiled operator wrote (inputs, whole-array outputs): the default
    tiles over every axis."""
    return tile_lens(tuple(shape), tuple(range(len(shape))), None)


def tile_grid(shape: Shape, split_axes: tuple[int, ...], tile_shape: "int | tuple[int, ...] | None") -> list[Tile]:
    """Split ``shape`` into tiles along ``split_axes`` (see `tile_lens`).  The same grid gives
    the same `Tile` objects (a run binds each node's stage more than once, and compares grids)."""
    lens = None if tile_shape is None else int(tile_shape) if isinstance(tile_shape, (int, np.integer)) else \
        tuple(int(n) for n in tile_shape)
    key = (tuple(int(n) for n in shape), tuple(int(a) for a in split_axes), lens)
    split = tile_lens(*key)
    if math.prod(-(-max(n, 1) // step) for n, step in zip(key[0], split)) > CACHED_GRID_TILES:
        return list(_grid.__wrapped__(*key))  # a large grid is not kept after its run
    return list(_grid(*key))


#: grids of at most this many tiles are kept (`tile_grid`): a run binds each node's stage more than once
CACHED_GRID_TILES = 4096


@functools.lru_cache(maxsize=256)
def _grid(shape: Shape, split_axes: tuple[int, ...], tile_shape: "int | tuple[int, ...] | None") -> tuple[Tile, ...]:
    lens = tile_lens(tuple(shape), tuple(split_axes), tile_shape)
    ranges = []
    for axis, n in enumerate(shape):
        if axis in split_axes and n > 0:
            step = lens[axis]
            ranges.append([(lo, min(lo + step, n)) for lo in range(0, n, step)])
        else:
            ranges.append([(0, n)])
    return tuple(Tile(k, tuple(box)) for k, box in enumerate(itertools.product(*ranges)))



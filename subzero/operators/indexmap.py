"""Separable index maps: the base of Slice, Flip, Pad, Shift, Tile and Upsample.

Along output axis ``k``, output index ``j`` reads input index ``axis_maps()[k][j]``, or
nothing where that is -1 (the output holds ``fill`` there, e.g. constant padding).  So
each output cell reads at most one input cell, chosen by coordinates alone: a mapping
operator whose run, tiling, mapping functions and mask forms all derive from the maps.
"""

from __future__ import annotations

import functools

import numpy as np

from subzero.context import Context
from subzero.modes import Mode
from subzero.operator import Operator
from subzero.operators._kernels import gather_axis, scatter_or, unique_rows
from subzero.operators.tilings import IndexMapped

__all__ = ["IndexMapOperator"]

Shape = tuple[int, ...]


def _runs(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Half-open intervals ``[starts, stops)`` covering the distinct ``values``."""
    v = np.unique(np.asarray(values, np.int64))
    if not len(v):
        return v, v
    brk = np.flatnonzero(np.diff(v) != 1) + 1
    return v[np.r_[0, brk]], v[np.r_[brk, len(v)] - 1] + 1


def _strided(maps: list[np.ndarray], box: tuple, base_box: tuple) -> tuple[slice, ...] | None:
    """Slices of the input block (covering ``base_box``) that read output box ``box`` when every
    axis's map is a constant-step run there with no -1, else None."""
    out = []
    for m, (lo, hi), (base, _) in zip(maps, box, base_box):
        part = m[lo:hi]
        if not len(part) or part.min() < 0:
            return None
        step = int(part[1] - part[0]) if len(part) > 1 else 1
        if step == 0 or (len(part) > 2 and not bool((np.diff(part) == step).all())):
            return None
        start, last = int(part[0]) - base, int(part[-1]) - base
        out.append(slice(start, last + 1, step) if step > 0 else slice(start, last - 1 if last > 0 else None, step))
    return tuple(out)


class IndexMapOperator(Operator):
    """Base of operators whose output cell reads at most one input cell, axis by axis.

    Subclasses implement ``maps_for(shape)``: one int64 array per axis giving, for each
    output index, the input index it reads (-1: none).  It raises `subzero.WorkflowError`
    on arguments the input shape cannot take.
    """

    tiling = IndexMapped()
    #: the value of output cells that read no input (where a map is -1)
    fill: float = 0

    def maps_for(self, shape: Shape) -> list[np.ndarray]:
        """Per axis, the input index each output index reads (-1: none) for an input of ``shape``."""
        raise NotImplementedError

    def axis_maps(self) -> list[np.ndarray]:
        """The maps for the bound input shape (read-only), made once per bound operator: every
        tile asks for them, and each is as long as its axis."""
        shape = tuple(self.input_shapes[0])
        cached = self.__dict__.get("_maps_cache")
        if cached is None or cached[0] != shape:
            maps = self.maps_for(shape)
            for m in maps:
                m.flags.writeable = False
            cached = self._maps_cache = (shape, maps)
        return cached[1]

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_maps_cache", None)
        state.pop("_safe_cache", None)  # rebuilt where it is needed, never shipped or stored
        state.pop("_affine_cache", None)
        return state

    def supported_modes(self) -> set[Mode]:
        return {Mode.MAP}

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        return tuple(len(m) for m in self.maps_for(tuple(input_shapes[0])))

    @property
    def entire_array_safe(self) -> bool:
        """Safe when every output index reads an input and every input index is read."""
        if not self.input_shapes:
            return False
        cached = self.__dict__.get("_safe_cache")  # asked per query step: counted once per bound shape
        shape = tuple(self.input_shapes[0])
        if cached is None or cached[0] != shape:
            safe = all(bool(np.all(m >= 0)) and int(np.count_nonzero(np.bincount(m, minlength=n))) == n
                       for m, n in zip(self.axis_maps(), shape))
            cached = self._safe_cache = (shape, safe)
        return cached[1]

    def run(self, ctx: Context, x: np.ndarray) -> np.ndarray:
        strided = _strided(self.axis_maps(), ctx.tile_box, ctx.input_boxes[0])
        if strided is not None:  # every axis reads a constant-step run (a slice, a flip): no index arrays
            return np.array(x[strided], copy=True)
        index, valid = [], []
        for m, (lo, hi), (base, _) in zip(self.axis_maps(), ctx.tile_box, ctx.input_boxes[0]):
            part = m[lo:hi]
            valid.append(part >= 0)
            index.append(np.where(part >= 0, part - base, 0))
        out = np.full(tuple(len(i) for i in index), self.fill, dtype=x.dtype)
        if all(v.any() for v in valid):
            # np.ix_ would read boolean arrays as masks: lay each axis's flags out by hand
            flags = [v.reshape((1,) * k + (-1,) + (1,) * (len(valid) - k - 1)) for k, v in enumerate(valid)]
            np.copyto(out, x[np.ix_(*index)], where=functools.reduce(np.logical_and, flags, np.ones((), bool)))
        return out

    # -- lineage ------------------------------------------------------------------------
    def map_b_pairs(self, cells: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        cells = np.asarray(cells, np.int64)
        maps = self.axis_maps()
        coords = np.stack([m[cells[:, k]] for k, m in enumerate(maps)], axis=1).reshape(len(cells), len(maps))
        ok = np.all(coords >= 0, axis=1)
        return np.flatnonzero(ok), coords[ok]

    def map_b(self, cells: np.ndarray, i: int) -> np.ndarray:
        return unique_rows(self.map_b_pairs(cells, i)[1])

    def map_f(self, cells: np.ndarray, i: int) -> np.ndarray:
        # per axis, the output indices reading each input index (a sorted inverse of the map)
        cells = np.asarray(cells, np.int64)
        out = np.zeros((len(cells), 0), np.int64)
        owner = np.arange(len(cells))
        for k, m in enumerate(self.axis_maps()):
            order = np.argsort(m, kind="stable")
            values = m[order]
            v = cells[owner, k]
            a, b = np.searchsorted(values, v, "left"), np.searchsorted(values, v, "right")
            count = b - a
            rows = np.repeat(np.arange(len(owner)), count)
            pos = np.repeat(a - (np.cumsum(count) - count), count) + np.arange(int(count.sum()))
            out = np.concatenate([out[rows], order[pos][:, None]], axis=1)
            owner = owner[rows]
        return unique_rows(out)

    def _affine(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Per axis ``(first, step)`` when every axis's map is ``first + step * j`` with ``step``
        1 or -1 and no -1 entry (a slice of unit step, a flip), else None; made once per bound shape."""
        shape = tuple(self.input_shapes[0])
        cached = self.__dict__.get("_affine_cache")
        if cached is None or cached[0] != shape:
            first: list[int] = []
            step: list[int] = []
            for m in self.axis_maps():
                d = int(m[1] - m[0]) if len(m) > 1 else 1
                if not len(m) or m.min() < 0 or d not in (1, -1) or not bool(np.all(np.diff(m) == d)):
                    first = []
                    break
                first.append(int(m[0]))
                step.append(d)
            got = (np.array(first, np.int64), np.array(step, np.int64)) if len(first) == len(shape) else None
            cached = self._affine_cache = (shape, got)
        return cached[1]

    def map_b_boxes(self, lo: np.ndarray, hi: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray] | None:
        affine = self._affine()
        if affine is not None:  # unit steps: each box's image is a box, by arithmetic over all boxes at once
            first, step = affine
            lo, hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
            a, b = first + step * lo, first + step * (hi - 1)  # the images of the first and last indices
            in_lo, in_hi = np.minimum(a, b), np.maximum(a, b) + 1
            keep = np.all(hi > lo, axis=1)
            return in_lo[keep], in_hi[keep]
        return self._boxes(lo, hi, [lambda lo_k, hi_k, m=m: _runs(m[lo_k:hi_k][m[lo_k:hi_k] >= 0])
                                    for m in self.axis_maps()])

    def map_f_boxes(self, lo: np.ndarray, hi: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray] | None:
        affine = self._affine()
        if affine is not None:  # the output indices j with first + step * j in [lo, hi), clipped to the axis
            first, step = affine
            lo, hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
            a, b = step * (lo - first), step * (hi - 1 - first)
            n = np.asarray(self.output_shape, np.int64)
            out_lo, out_hi = np.maximum(np.minimum(a, b), 0), np.minimum(np.maximum(a, b) + 1, n)
            keep = np.all((out_hi > out_lo) & (hi > lo), axis=1)
            return out_lo[keep], out_hi[keep]
        return self._boxes(lo, hi, [lambda lo_k, hi_k, m=m: _runs(np.flatnonzero((m >= lo_k) & (m < hi_k)))
                                    for m in self.axis_maps()])

    @staticmethod
    def _boxes(lo, hi, per_axis, limit: int = 4096):
        """Boxes from per-axis interval lists, box by box (None when they would be too many:
        strided maps make one interval per index)."""
        out_lo, out_hi = [], []
        for b_lo, b_hi in zip(np.asarray(lo, np.int64), np.asarray(hi, np.int64)):
            runs = [f(int(a), int(z)) for f, a, z in zip(per_axis, b_lo, b_hi)]
            if any(len(r[0]) == 0 for r in runs):
                continue
            if int(np.prod([len(r[0]) for r in runs])) > limit:
                return None
            grid = np.meshgrid(*[np.arange(len(r[0])) for r in runs], indexing="ij")
            pick = [g.reshape(-1) for g in grid]
            out_lo.append(np.stack([r[0][p] for r, p in zip(runs, pick)], axis=1))
            out_hi.append(np.stack([r[1][p] for r, p in zip(runs, pick)], axis=1))
            if sum(len(x) for x in out_lo) > limit:
                return None
        ndim = len(per_axis)
        if not out_lo:
            return np.empty((0, ndim), np.int64), np.empty((0, ndim), np.int64)
        return np.concatenate(out_lo), np.concatenate(out_hi)

    def map_b_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        for k, (m, n) in enumerate(zip(self.axis_maps(), self.input_shapes[0])):
            mask = scatter_or(mask, k, m, n)
        return mask

    def map_f_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        for k, m in enumerate(self.axis_maps()):
            mask = gather_axis(mask, k, m)
        return mask

"""Window lineage: the composite lineage of detectors that read a square neighbourhood.

A detector (a cosmic-ray flagger, a repair) decides every output cell from a window of
the input around it, so the *mapping default* of a cell is that window: a stencil,
``window(i)`` cells (Chebyshev distance) around the cell in input ``i``, clipped at the
border.  Cells the detector flags may read further (a repair reads the window it
interpolates from); they carry a one-byte *payload*, a radius, that overrides the
default with a larger window (``payload_window(r, i)``), or `WHOLE` for every cell of the
input (a global statistic entered the value).  The payload 0 means "the default window".
"""

from __future__ import annotations

import numpy as np

from subzero.context import Context
from subzero.lazy import LazyModule
from subzero.modes import Mode
from subzero.operators._kernels import box_offsets, repeat_pairs, stencil_pairs, unique_rows

ndimage = LazyModule("scipy.ndimage")  # imported on first use

__all__ = ["WindowLineage", "WHOLE", "dilate"]

#: the payload byte meaning "every cell of the input"
WHOLE = 255

#: window cells a mapping step enumerates (at most an eighth of the array's cells) before it
#: dilates a mask of the array instead
MAX_WINDOW_CELLS = 1 << 21


def dilate(mask: np.ndarray, radius: int) -> np.ndarray:
    """Cells within ``radius`` (Chebyshev) of a set cell, inside the array."""
    if radius <= 0 or not mask.any():
        return mask.copy()
    grown = ndimage.maximum_filter(mask.astype(np.uint8), size=2 * radius + 1, mode="constant", cval=0)
    return grown.astype(bool)


class WindowLineage:
    """Mixin: square-window composite lineage for operators whose inputs and output share
    one shape.  Subclasses give ``window(i)`` (the default radius for input ``i``) and may
    override ``payload_window(r, i)`` (the radius a payload ``r`` stands for)."""

    entire_array_safe = True

    def window(self, i: int) -> int:
        """The default window radius of input ``i`` (every output cell reads it)."""
        raise NotImplementedError

    def payload_window(self, r: int, i: int) -> int | None:
        """The radius payload ``r`` stands for in input ``i`` (None: the whole input)."""
        if r == WHOLE:
            return None
        return self.window(i) if r == 0 else int(r)

    # -- writing lineage from run -------------------------------------------------------
    def write_window_lineage(self, ctx: Context, payload: np.ndarray) -> None:
        """``lwrite`` the lineage of an output whose per-cell payload radii are ``payload``
        (uint8, the output's shape, 0 = the default window) for ``ctx.modes``."""
        payload = np.asarray(payload, np.uint8)
        shape = payload.shape
        if Mode.FULL in ctx.modes:
            cells = np.argwhere(np.ones(shape, bool)).astype(np.int64)
            flat = payload.reshape(-1)
            ins, pairs = [], []
            for i in range(len(self.input_shapes)):
                owner_parts, coord_parts = [], []
                for r in np.unique(flat):
                    which = np.flatnonzero(flat == r)
                    owner, coords = self._window_pairs(cells[which], self.payload_window(int(r), i), shape)
                    owner_parts.append(which[owner])
                    coord_parts.append(coords)
                pairs.append(np.concatenate(owner_parts))
                ins.append(np.concatenate(coord_parts))
            ctx.lwrite_many(cells, *ins, out_pair=np.arange(len(cells), dtype=np.int64), in_pair=pairs)
        if Mode.COMP in ctx.modes:
            flagged = np.argwhere(payload > 0)
            ctx.lwrite(flagged, payload=payload[payload > 0].reshape(-1, 1))
        if Mode.PAY in ctx.modes:
            ctx.lwrite(np.argwhere(np.ones(shape, bool)), payload=payload.reshape(-1, 1))

    @staticmethod
    def _window_pairs(cells: np.ndarray, radius: int | None, shape) -> tuple[np.ndarray, np.ndarray]:
        cells = np.asarray(cells, np.int64).reshape(-1, len(shape))
        if radius is None:
            return repeat_pairs(len(cells), np.argwhere(np.ones(shape, bool)).astype(np.int64))
        return stencil_pairs(cells, box_offsets((int(radius),) * len(shape)), tuple(shape), "constant")

    # -- the mapping default: a window ------------------------------------------------
    def map_b_pairs(self, cells: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Per cell, the input-``i`` cells of its default window."""
        return self._window_pairs(cells, self.window(i), self.input_shapes[i])

    def map_b(self, cells: np.ndarray, i: int) -> np.ndarray:
        """The input-``i`` cells within the default window of ``cells``."""
        return self._window_cells(cells, self.input_shapes[i], self.window(i))

    def map_f(self, cells: np.ndarray, i: int) -> np.ndarray:
        """The output cells within the default window of input-``i`` ``cells``."""
        return self._window_cells(cells, self.output_shape, self.window(i))

    def map_b_boxes(self, lo: np.ndarray, hi: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Output boxes grown by the window and clipped to input ``i``."""
        r = self.window(i)  # a window around every cell of a box: the box grown by r, clipped
        return np.maximum(lo - r, 0), np.minimum(hi + r, np.asarray(self.input_shapes[i], np.int64))

    def map_f_boxes(self, lo: np.ndarray, hi: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Input-``i`` boxes grown by the window and clipped to the output."""
        r = self.window(i)
        return np.maximum(lo - r, 0), np.minimum(hi + r, np.asarray(self.output_shape, np.int64))

    def map_b_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        """The mask dilated by input ``i``'s window."""
        return dilate(np.asarray(mask, bool), self.window(i))

    def map_f_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        """The mask dilated by input ``i``'s window."""
        return dilate(np.asarray(mask, bool), self.window(i))

    @classmethod
    def _window_cells(cls, cells, shape, radius: int) -> np.ndarray:
        """The distinct cells within ``radius`` of ``cells``, sorted: from the windows' cells
        when there are few (the cost of the answer), by dilating a mask when there are many."""
        cells = np.asarray(cells, np.int64).reshape(-1, len(shape))
        size = int(np.prod(shape, dtype=np.int64))
        enumerated = len(cells) * (2 * radius + 1) ** len(shape)
        if len(shape) and len(cells):
            # a mask of the cells' bounding box grown by the window (clipped to the array),
            # dilated: exactly the windows' cells, at the cost of the box, not of the array
            lo = np.maximum(cells.min(axis=0) - radius, 0)
            hi = np.minimum(cells.max(axis=0) + radius + 1, np.asarray(shape, np.int64))
            if int(np.prod(hi - lo)) <= min(enumerated, size // 2):
                mask = np.zeros(tuple((hi - lo).tolist()), bool)
                mask[tuple((cells - lo).T)] = True
                return (np.argwhere(dilate(mask, radius)) + lo).astype(np.int64)
        if not len(shape) or enumerated <= min(MAX_WINDOW_CELLS, size // 8):
            coords = cls._window_pairs(cells, radius, shape)[1]
            if not len(shape) or not len(coords):
                return unique_rows(coords)
            ids = np.unique(np.ravel_multi_index(tuple(coords.T), shape))  # flat ids sort fast; rows do not
            return np.stack(np.unravel_index(ids, shape), axis=1).astype(np.int64)
        mask = np.zeros(shape, bool)
        mask[tuple(cells.T)] = True
        return np.argwhere(dilate(mask, radius)).astype(np.int64)

    # -- payload overrides ----------------------------------------------------------------
    def map_p_pairs(self, cells: np.ndarray, payload: bytes, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Per cell, the input-``i`` cells of the window its payload names."""
        return self._window_pairs(cells, self.payload_window(int(payload[0]), i), self.input_shapes[i])

    def map_p(self, cells: np.ndarray, payload: bytes, i: int) -> np.ndarray:
        """The input-``i`` cells within the window the payload names (all of them for `WHOLE`)."""
        radius = self.payload_window(int(payload[0]), i)
        if radius is None:
            return np.argwhere(np.ones(self.input_shapes[i], bool)).astype(np.int64)
        return self._window_cells(cells, self.input_shapes[i], radius)

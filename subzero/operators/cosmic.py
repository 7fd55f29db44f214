"""The paper's CRD example (SubZero section V): cosmic-ray detection as a composite operator.

A pixel is a cosmic ray when it exceeds the median of its 3x3 neighbourhood by more than
``threshold``.  The output flags it (1) or not (0).  A flagged pixel's lineage is the
square of ``radius`` cells around it (one more for very bright hits: the payload is the
radius); any other pixel depends only on itself, which the mapping functions say.
"""

from __future__ import annotations

import numpy as np

from subzero.lazy import LazyModule
from subzero.modes import Mode
from subzero.operator import Operator
from subzero.operators._kernels import box_offsets, stencil_pairs, unique_rows
from subzero.operators.identity import IdentityMapping
from subzero.tiling import Halo

ndimage = LazyModule("scipy.ndimage")  # imported on first use

__all__ = ["CosmicRayDetect"]


class CosmicRayDetect(IdentityMapping, Operator):
    """Flag cosmic-ray pixels; composite lineage (identity default, radius payload)."""

    def __init__(self, threshold: float = 50.0, radius: int = 3):
        self.threshold, self.radius = float(threshold), int(radius)

    @property
    def tiling(self):
        return Halo(self.radius + 1)

    def supported_modes(self):
        return {Mode.COMP, Mode.PAY, Mode.FULL}

    def infer_output_shape(self, input_shapes):
        return tuple(input_shapes[0])

    def radii(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(flags, payload radius per pixel: 0 for clean pixels)."""
        x = np.asarray(x, dtype=np.float64)
        excess = x - ndimage.median_filter(x, size=3, mode="reflect")
        flags = excess > self.threshold
        radius = np.where(flags, self.radius + (excess > 4 * self.threshold), 0).astype(np.uint8)
        return flags, radius

    def run(self, ctx, x):
        flags, radius = self.radii(x)
        if Mode.FULL in ctx.modes:
            cells = np.argwhere(np.ones(x.shape, bool))
            r = radius.reshape(-1)
            owner, ins = self._pairs(cells, r, x.shape)
            ctx.lwrite_many(cells, ins, out_pair=np.arange(len(cells)), in_pair=[owner])
        if Mode.COMP in ctx.modes:
            ctx.lwrite(np.argwhere(flags), payload=radius[flags].reshape(-1, 1))
        if Mode.PAY in ctx.modes:
            ctx.lwrite(np.argwhere(np.ones(x.shape, bool)), payload=radius.reshape(-1, 1))
        return flags.astype(np.uint8)

    def _pairs(self, cells: np.ndarray, radius: np.ndarray, shape) -> tuple[np.ndarray, np.ndarray]:
        owners, coords = [], []
        for r in np.unique(radius):
            which = np.flatnonzero(radius == r)
            o, c = stencil_pairs(cells[which], box_offsets((int(r),) * cells.shape[1]), shape, "constant")
            owners.append(which[o])
            coords.append(c)
        return np.concatenate(owners), np.concatenate(coords)

    # -- mapping default (clean pixels) and payload overrides (cosmic rays) -------------
    def map_p_pairs(self, cells, payload, i):
        r = int(payload[0])
        return stencil_pairs(np.asarray(cells, np.int64), box_offsets((r,) * cells.shape[1]),
                             self.input_shapes[0], "constant")

    def map_p(self, cells, payload, i):
        return unique_rows(self.map_p_pairs(cells, payload, i)[1])

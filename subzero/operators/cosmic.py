"""The paper's CRD example (SubZero section V): cosmic-ray detection as a composite operator.

A pixel is a cosmic ray when it exceeds the median of its 3x3 neighbourhood by more than
``threshold``.  The output flags it (1) or not (0).

Lineage (dependence: the input cells whose change can change the flag):

- every pixel's flag reads the 3x3 neighbourhood of the median (``reflect`` border: the
  reflected cells lie inside the clipped window), so the mapping default, for clean and
  flagged pixels alike, is that window, a stencil of radius 1;
- a flagged pixel carries the paper's payload: the radius ``radius`` of the square around
  it (one more for very bright hits, at least 1 so that it holds the detection window).

The paper's reading, in which a clean pixel depends only on itself, is unsound: its
flag read its neighbours (``x[1:3, 1:3] = 1000`` leaves the centre of a 3x3 block clean,
and zeroing ``x[1, 1]`` flags it), so it is not offered.
"""

from __future__ import annotations

import numpy as np

from subzero.context import Context
from subzero.errors import WorkflowError
from subzero.lazy import LazyModule
from subzero.modes import Mode
from subzero.operator import Operator
from subzero.operators.composite import WindowLineage
from subzero.tiling import Halo, Shape, Tiling

ndimage = LazyModule("scipy.ndimage")  # imported on first use

__all__ = ["CosmicRayDetect"]


class CosmicRayDetect(WindowLineage, Operator):
    """Flag cosmic-ray pixels; composite lineage (3x3 detection window by default, a radius
    payload for flagged pixels).

    Parameters
    ----------
    threshold : float
        A pixel is flagged when it exceeds its 3x3 median by more than this.
    radius : int
        The payload radius of a flagged pixel (``radius + 1`` when it exceeds the median
        by more than ``4 * threshold``; never less than 1).
    """

    #: the radius of the window every flag reads (the 3x3 median)
    DETECT = 1

    def __init__(self, threshold: float = 50.0, radius: int = 3):
        if not 0 <= int(radius) < 254:
            raise WorkflowError(f"CosmicRayDetect: radius must be an int in 0..253, got {radius!r}")
        self.threshold, self.radius = float(threshold), int(radius)

    @property
    def tiling(self) -> Tiling | None:
        """Tiles with a halo wide enough for detection and growth."""
        return Halo(max(self.radius + 1, self.DETECT))

    def supported_modes(self) -> set[Mode]:
        return {Mode.COMP, Mode.PAY, Mode.FULL}

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        return tuple(input_shapes[0])

    def window(self, i: int) -> int:
        return self.DETECT

    def radii(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(flags, payload radius per pixel: 0 for clean pixels, whose window is the default)."""
        x = np.asarray(x, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            excess = x - ndimage.median_filter(x, size=3, mode="reflect")
            flags = excess > self.threshold
            bright = excess > 4 * self.threshold
        radius = np.where(flags, np.maximum(self.radius + bright, self.DETECT), 0).astype(np.uint8)
        return flags, radius

    def run(self, ctx: Context, x: np.ndarray) -> np.ndarray:
        flags, radius = self.radii(x)
        self.write_window_lineage(ctx, radius)
        return flags.astype(np.uint8)

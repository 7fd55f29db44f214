"""One-axis stencils (scipy.ndimage's ``*1d`` filters): each output cell reads a window
along ``axis`` only.

Lineage is `subzero.operators.neighbourhood.StencilOperator`'s: the window's offsets along
the axis, folded back by the boundary ``mode`` (``constant`` padding is no input); tiles
carry a halo along that axis alone.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from typing import TYPE_CHECKING

from subzero.errors import WorkflowError
from subzero.lazy import LazyModule
from subzero.operators._args import normalize_axis
from subzero.operators.neighbourhood import StencilOperator, _floating, extreme_over_nan, has_nan

if TYPE_CHECKING:  # pragma: no cover
    from subzero.context import Context

ndimage = LazyModule("scipy.ndimage")  # imported on first use

__all__ = ["Filter1D", "Correlate1D", "Convolve1D", "UniformFilter1D", "GaussianFilter1D", "MinimumFilter1D",
           "MaximumFilter1D"]


class Filter1D(StencilOperator):
    """Base of the one-axis stencils: subclasses give ``line_offsets()`` (the offsets along
    ``axis`` a cell reads) and ``run``."""

    def __init__(self, axis: int = -1, mode: str = "reflect", cval: float = 0.0):
        super().__init__(mode, cval)
        if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
            raise WorkflowError(f"{type(self).__name__}: axis must be an int, got {axis!r}")
        self.axis = int(axis)

    def line_offsets(self) -> np.ndarray:
        """The ``(K,)`` int64 offsets along the axis."""
        raise NotImplementedError

    def _axis(self, ndim: int) -> int:
        return normalize_axis(self.axis, ndim, type(self).__name__)

    def stencil(self, ndim: int) -> np.ndarray:
        line = self.line_offsets()
        offsets = np.zeros((len(line), ndim), np.int64)
        offsets[:, self._axis(ndim)] = line
        return offsets


def _window(size: int, op: str) -> np.ndarray:
    """Element ``j`` of a window of ``size`` cells reads offset ``j - size // 2`` (origin 0)."""
    if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or size < 1:
        raise WorkflowError(f"{op}: size must be an int >= 1, got {size!r}")
    return np.arange(int(size), dtype=np.int64) - int(size) // 2


class Correlate1D(Filter1D):
    """``scipy.ndimage.correlate1d(x, weights, axis, mode, cval)``: lineage is the whole window
    of the weights (scipy multiplies a zero weight too, so a NaN under it reaches the cell)."""

    keeps_float = True
    flip = False

    def __init__(self, weights: ArrayLike, axis: int = -1, mode: str = "reflect", cval: float = 0.0):
        super().__init__(axis, mode, cval)
        self.weights = np.asarray(weights, dtype=np.float64)
        if self.weights.ndim != 1 or not len(self.weights):
            raise WorkflowError(f"{type(self).__name__}: weights must be a non-empty 1-D sequence, got shape "
                                f"{self.weights.shape}")

    def line_offsets(self) -> np.ndarray:
        offsets = _window(len(self.weights), type(self).__name__)
        return -offsets if self.flip else offsets

    def run(self, ctx: Context, *inputs: np.ndarray) -> np.ndarray:
        (x,) = inputs
        fn = ndimage.convolve1d if self.flip else ndimage.correlate1d
        x = _floating(x)
        return fn(x, self.weights, axis=self._axis(x.ndim), mode=self.mode, cval=self.cval)


class Convolve1D(Correlate1D):
    """``scipy.ndimage.convolve1d(x, weights, axis, mode, cval)``: the weights mirrored."""

    flip = True


class UniformFilter1D(Filter1D):
    """``scipy.ndimage.uniform_filter1d(x, size, axis, mode, cval)``, computed as one explicit
    sum per cell (``correlate1d`` with ``1 / size`` weights) so that a NaN stays inside the
    windows that hold it (scipy's running sum carries it along the rest of the line)."""

    keeps_float = True

    def __init__(self, size: int, axis: int = -1, mode: str = "reflect", cval: float = 0.0):
        super().__init__(axis, mode, cval)
        self.size = size
        _window(size, "UniformFilter1D")

    def line_offsets(self) -> np.ndarray:
        return _window(self.size, "UniformFilter1D")

    def run(self, ctx: Context, *inputs: np.ndarray) -> np.ndarray:
        (x,) = inputs
        x = _floating(x)
        n = int(self.size)
        return ndimage.correlate1d(x, np.full(n, 1.0 / n), axis=self._axis(x.ndim), mode=self.mode, cval=self.cval)


class GaussianFilter1D(Filter1D):
    """``scipy.ndimage.gaussian_filter1d(x, sigma, axis, order, mode, cval, truncate)``: the
    window is the truncated kernel, radius ``int(truncate * sigma + 0.5)``."""

    keeps_float = True

    def __init__(self, sigma: float, axis: int = -1, order: int = 0, mode: str = "reflect", cval: float = 0.0,
                 truncate: float = 4.0):
        super().__init__(axis, mode, cval)
        self.sigma, self.order, self.truncate = float(sigma), int(order), float(truncate)
        if self.sigma < 0 or self.order < 0:
            raise WorkflowError(f"GaussianFilter1D: sigma and order must be >= 0, got sigma={sigma!r}, "
                                f"order={order!r}")

    def line_offsets(self) -> np.ndarray:
        r = int(self.truncate * self.sigma + 0.5)
        return np.arange(-r, r + 1, dtype=np.int64)

    def run(self, ctx: Context, *inputs: np.ndarray) -> np.ndarray:
        (x,) = inputs
        x = _floating(x)
        return ndimage.gaussian_filter1d(x, self.sigma, axis=self._axis(x.ndim), order=self.order, mode=self.mode,
                                         cval=self.cval, truncate=self.truncate)


class _RankFilter1D(Filter1D):
    """A minimum or maximum over ``size`` cells along the axis, in the input's dtype."""

    fn = "minimum_filter1d"  # the scipy.ndimage function, by name

    def __init__(self, size: int, axis: int = -1, mode: str = "reflect", cval: float = 0.0):
        super().__init__(axis, mode, cval)
        self.size = size
        _window(size, type(self).__name__)

    def line_offsets(self) -> np.ndarray:
        return _window(self.size, type(self).__name__)

    def run(self, ctx: Context, *inputs: np.ndarray) -> np.ndarray:
        (x,) = inputs
        x = np.asarray(x)
        fn = getattr(ndimage, type(self).fn)
        axis = self._axis(x.ndim)
        if has_nan(x):  # scipy's running window carries a NaN along the line past the window
            return extreme_over_nan(lambda y, c: fn(y, int(self.size), axis=axis, mode=self.mode, cval=c), x,
                                    self.cval, largest=type(self).fn == "maximum_filter1d")
        return fn(x, int(self.size), axis=axis, mode=self.mode, cval=self.cval)


class MinimumFilter1D(_RankFilter1D):
    """``scipy.ndimage.minimum_filter1d(x, size, axis, mode, cval)``."""

    fn = "minimum_filter1d"


class MaximumFilter1D(_RankFilter1D):
    """``scipy.ndimage.maximum_filter1d(x, size, axis, mode, cval)``."""

    fn = "maximum_filter1d"

"""Stencil operators (scipy.ndimage filters): each output cell reads a fixed neighbourhood.

Lineage honours the boundary mode: with ``mode="reflect"`` a cell at the edge reads
reflected cells, and its lineage names those cells; with ``mode="constant"`` the
padding is not input, so it has no lineage.  Tiles carry a halo of the stencil's
radius; the ``wrap`` modes need the far edge, so they run on whole arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from subzero.context import Context
from subzero.errors import WorkflowError
from subzero.lazy import LazyModule
from subzero.modes import Mode
from subzero.operator import Operator
from subzero.operators._args import check_choice, normalize_axis, per_axis
from subzero.operators._kernels import (
    BOUNDARY_MODES, boundary_index, boundary_preimages, box_offsets, gather_axis, scatter_or, shift_or,
    stencil_pairs, unique_rows,
)
from subzero.tiling import Halo, Shape, Tiling

ndimage = LazyModule("scipy.ndimage")  # imported on first use

__all__ = [
    "StencilOperator", "Convolve", "Correlate", "GaussianFilter", "UniformFilter", "MedianFilter",
    "MaximumFilter", "MinimumFilter", "RankFilter", "PercentileFilter", "GaussianLaplace",
    "GaussianGradientMagnitude", "Prewitt", "Laplace", "Sobel", "GenericFilter", "MODES", "kernel_offsets",
]

#: the boundary modes stencils take (scipy.ndimage's)
MODES = BOUNDARY_MODES


def kernel_offsets(footprint: np.ndarray, flip: bool = False) -> np.ndarray:
    """Offsets (relative to the output cell) a scipy.ndimage footprint reads: element ``j``
    of a footprint of shape ``s`` reads ``j - s // 2`` (correlation), or ``s // 2 - j``
    when ``flip`` (convolution, dilation)."""
    footprint = np.asarray(footprint)
    offsets = np.argwhere(footprint).astype(np.int64) - np.array(footprint.shape, np.int64) // 2
    return -offsets if flip else offsets


class StencilOperator(Operator):
    """Base of stencils: subclasses give ``stencil(ndim)`` (the offsets each output cell
    reads, relative to itself, for an ``ndim``-D input) and ``run``."""

    #: True when ``run`` filters float32 in float32 as scipy does (`_floating`); otherwise the
    #: result is float64 (the numpy front end casts it back to the input's dtype)
    keeps_float: bool = False

    def __init__(self, mode: str = "reflect", cval: float = 0.0):
        self.mode = check_choice(mode, MODES, type(self).__name__, "mode")
        self.cval = float(cval)

    def stencil(self, ndim: int) -> np.ndarray:
        """``(K, ndim)`` int64 offsets; raise `subzero.WorkflowError` if ``ndim`` does not fit."""
        raise NotImplementedError

    def offsets(self) -> np.ndarray:
        """The offsets for the bound input."""
        return self.stencil(len(self.input_shapes[0]))

    def radius(self) -> tuple[int, ...]:
        """The stencil's radius per axis."""
        off = self.offsets()
        return tuple(int(r) for r in np.abs(off).max(axis=0)) if len(off) else (0,) * off.shape[1]

    def supported_modes(self) -> set[Mode]:
        return {Mode.MAP}

    @property
    def tiling(self) -> Tiling | None:
        """Tiles with a halo of the stencil's radius (None for wrap-around modes)."""
        if "wrap" in self.mode or not self.input_shapes:
            return None
        return Halo(self.radius())

    @property
    def entire_array_safe(self) -> bool:
        """Safe when the stencil reads the cell itself (then every cell has lineage both ways)."""
        return bool(self.input_shapes) and bool(np.any(np.all(self.offsets() == 0, axis=1)))

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        self.stencil(len(input_shapes[0]))
        return tuple(input_shapes[0])

    # -- lineage ------------------------------------------------------------------------
    def map_b_pairs(self, cells: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        return stencil_pairs(np.asarray(cells, np.int64), self.offsets(), self.input_shapes[0], self.mode)

    def map_b(self, cells: np.ndarray, i: int) -> np.ndarray:
        return unique_rows(self.map_b_pairs(cells, i)[1])

    def map_f(self, cells: np.ndarray, i: int) -> np.ndarray:
        # o reads c iff o + d, for some offset d, is a position of the grown grid that
        # reads c through the boundary mode: o = v - d over those positions v
        cells = np.asarray(cells, np.int64)
        n, ndim = len(cells), cells.shape[1]
        virtual = np.zeros((n, 1, ndim), np.int64)
        for k, (size, r) in enumerate(zip(self.input_shapes[0], self.radius())):
            options = boundary_preimages(size, r, self.mode)[cells[:, k]]           # (n, m_k)
            virtual = np.repeat(virtual, options.shape[1], axis=1)
            virtual[:, :, k] = np.tile(options, (1, virtual.shape[1] // options.shape[1]))
        out = (virtual.reshape(-1, 1, ndim) - self.offsets()[None, :, :]).reshape(-1, ndim)
        return unique_rows(out[np.all((out >= 0) & (out < np.array(self.output_shape)), axis=1)])

    def _box_radius(self) -> np.ndarray | None:
        """Per-axis radius when the stencil reads a full box centred on the cell and the mode
        does not wrap: then every cell within the radius is read directly and a reflected,
        mirrored or clamped read stays within it, so the lineage of a box, either way, is the
        box grown by the radius and clipped to the array.  None otherwise.  Worked out once per
        bound shape: a query asks it at every box step."""
        key = (tuple(self.input_shapes[0]), self.mode)
        cached = self.__dict__.get("_box_radius_cache")
        if cached is not None and cached[0] == key:
            return cached[1]
        got = None
        off = self.offsets() if "wrap" not in self.mode else np.zeros((0, 0), np.int64)
        if len(off):
            lo, hi = off.min(axis=0), off.max(axis=0)
            if not np.any(lo != -hi) and len(unique_rows(off)) == int(np.prod(hi - lo + 1)):
                got = hi
                got.flags.writeable = False
        self._box_radius_cache = (key, got)
        return got

    def map_b_boxes(self, lo: np.ndarray, hi: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray] | None:
        r = self._box_radius()
        if r is None:
            return None
        return np.maximum(lo - r, 0), np.minimum(hi + r, np.asarray(self.input_shapes[0], np.int64))

    def map_f_boxes(self, lo: np.ndarray, hi: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray] | None:
        r = self._box_radius()
        if r is None:
            return None
        return np.maximum(lo - r, 0), np.minimum(hi + r, np.asarray(self.output_shape, np.int64))

    def _virtual_index(self) -> list[np.ndarray]:
        """Per axis, the input index each position of the grid grown by the radius reads."""
        return [boundary_index(np.arange(-r, n + r), n, self.mode) for n, r in zip(self.input_shapes[0], self.radius())]

    def map_b_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        # a binary dilation on the grown grid, folded back onto the array by the boundary mode
        grown = shift_or(np.pad(mask, [(r, r) for r in self.radius()]), self.offsets())
        for k, index in enumerate(self._virtual_index()):
            grown = scatter_or(grown, k, index, self.input_shapes[0][k])
        return grown

    def map_f_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        grown = mask
        for k, index in enumerate(self._virtual_index()):
            grown = gather_axis(grown, k, index)
        hit = shift_or(grown, -self.offsets())
        return hit[tuple(slice(r, r + n) for r, n in zip(self.radius(), self.output_shape))]


def has_nan(x: np.ndarray) -> bool:
    """True for a float or complex array holding a NaN (a float array's minimum is NaN then:
    one pass and no mask)."""
    if x.dtype.kind == "f":
        return x.size > 0 and bool(np.isnan(x.min()))
    return x.dtype.kind == "c" and bool(np.isnan(x).any())


def extreme_over_nan(filter_: Callable[[np.ndarray, float], np.ndarray], x: np.ndarray, cval: float,
                     largest: bool) -> np.ndarray:
    """A maximum (``largest``) or minimum filter of ``x``, which holds NaNs, that reads only each
    cell's window: NaN where the window holds a NaN (as ``np.max`` of the window), else the
    filter of the other values.  scipy's separable passes carry a NaN along a line past the
    window, so ``filter_(array, cval)`` (the same filter, another array and padding value) runs
    on ``x`` with its NaNs replaced by the value that never wins, and on the NaN mask."""
    loses = -np.inf if largest else np.inf
    values = filter_(np.where(np.isnan(x), loses, x), loses if np.isnan(cval) else cval)
    in_window = filter_(np.isnan(x).astype(np.float64), float(np.isnan(cval))) > 0
    return np.where(in_window, np.nan, values).astype(values.dtype, copy=False)


def _floating(x) -> np.ndarray:
    """``x`` as scipy.ndimage filters it: float32 and float64 stay as they are (scipy keeps
    the input's dtype, so a float32 image is filtered, stored and read in float32, half the
    bytes of float64); any other dtype becomes float64, so integer and boolean inputs are
    not truncated to their own dtype."""
    x = np.asarray(x)
    return x if x.dtype in (np.float32, np.float64) else x.astype(np.float64)


class _KernelStencil(StencilOperator):
    """A stencil given by an explicit kernel: its non-zero footprint is what a cell reads."""

    keeps_float = True
    flip = False

    def __init__(self, kernel, mode: str = "reflect", cval: float = 0.0):
        super().__init__(mode, cval)
        self.kernel = np.asarray(kernel, dtype=np.float64)

    def stencil(self, ndim: int) -> np.ndarray:
        if self.kernel.ndim != ndim:
            raise WorkflowError(f"{type(self).__name__}: kernel is {self.kernel.ndim}-D "
                                f"(shape {self.kernel.shape}), the input is {ndim}-D; they must match")
        return kernel_offsets(self.kernel != 0, flip=self.flip)


class Convolve(_KernelStencil):
    """``scipy.ndimage.convolve(x, kernel, mode, cval)``; lineage is the kernel's non-zero footprint."""

    flip = True
    reads_only = True  # scipy's own filter: never writes its input

    def run(self, ctx: Context, x: np.ndarray) -> np.ndarray:
        return ndimage.convolve(_floating(x), self.kernel, mode=self.mode, cval=self.cval)


class Correlate(_KernelStencil):
    """``scipy.ndimage.correlate(x, kernel, mode, cval)``; lineage is the kernel's non-zero footprint."""

    reads_only = True  # scipy's own filter: never writes its input

    def run(self, ctx: Context, x: np.ndarray) -> np.ndarray:
        return ndimage.correlate(_floating(x), self.kernel, mode=self.mode, cval=self.cval)


class GaussianFilter(StencilOperator):
    """``scipy.ndimage.gaussian_filter(x, sigma, order, mode, cval, truncate)``.

    The footprint is the truncated kernel: a box of radius ``int(truncate * sigma + 0.5)``
    per axis (``sigma`` is a float or one per axis).
    """

    keeps_float = True
    reads_only = True  # scipy's own filter: never writes its input

    def __init__(self, sigma: float | tuple[float, ...], order: int | tuple[int, ...] = 0, mode: str = "reflect",
                 cval: float = 0.0, truncate: float = 4.0):
        super().__init__(mode, cval)
        self.sigma = tuple(sigma) if isinstance(sigma, (tuple, list)) else float(sigma)
        self.order = tuple(order) if isinstance(order, (tuple, list)) else int(order)
        self.truncate = float(truncate)

    def stencil(self, ndim: int) -> np.ndarray:
        sigmas = per_axis(self.sigma, ndim, "GaussianFilter", "sigma", float, minimum=0.0)
        per_axis(self.order, ndim, "GaussianFilter", "order", int, minimum=0)
        return box_offsets(tuple(int(self.truncate * s + 0.5) for s in sigmas))

    def run(self, ctx: Context, x: np.ndarray) -> np.ndarray:
        return ndimage.gaussian_filter(_floating(x), self.sigma, order=self.order,
                                       mode=self.mode, cval=self.cval, truncate=self.truncate)


class UniformFilter(StencilOperator):
    """``scipy.ndimage.uniform_filter(x, size, mode, cval)``: the mean over a box of ``size``
    cells per axis (element ``j`` of the box reads offset ``j - size // 2``), computed as one
    explicit sum per cell so that a NaN stays inside the boxes that hold it."""

    keeps_float = True

    def __init__(self, size: int | tuple[int, ...] = 3, mode: str = "reflect", cval: float = 0.0):
        super().__init__(mode, cval)
        self.size = tuple(size) if isinstance(size, (tuple, list)) else int(size)

    def stencil(self, ndim: int) -> np.ndarray:
        return kernel_offsets(np.ones(per_axis(self.size, ndim, "UniformFilter", "size", minimum=1), bool))

    def run(self, ctx: Context, x: np.ndarray) -> np.ndarray:
        # one explicit sum per cell and axis (correlate1d), not uniform_filter's running sum:
        # a running sum carries a NaN or an infinity to every later cell of the line
        out = _floating(x)
        for axis, n in enumerate(per_axis(self.size, out.ndim, "UniformFilter", "size", minimum=1)):
            if n > 1:
                out = ndimage.correlate1d(out, np.full(n, 1.0 / n), axis=axis, mode=self.mode, cval=self.cval)
        return out


class _RankFilter(StencilOperator):
    """A rank filter over a box of ``size`` cells per axis, or over a boolean ``footprint``."""

    fn = "median_filter"  # the scipy.ndimage function, by name (scipy is imported on first use)
    reads_only = True  # scipy's own filter: never writes its input

    def __init__(self, size: int | tuple[int, ...] | None = 3, footprint=None, mode: str = "reflect",
                 cval: float = 0.0):
        super().__init__(mode, cval)
        if footprint is not None:
            self.footprint, self.size = np.asarray(footprint, dtype=bool), None
            if not self.footprint.any():
                raise WorkflowError(f"{type(self).__name__}: footprint has no set cell")
        elif size is not None:
            self.footprint, self.size = None, tuple(size) if isinstance(size, (tuple, list)) else int(size)
        else:
            raise WorkflowError(f"{type(self).__name__}: give size or footprint, got neither")

    def stencil(self, ndim: int) -> np.ndarray:
        if self.footprint is None:
            return kernel_offsets(np.ones(per_axis(self.size, ndim, type(self).__name__, "size", minimum=1), bool))
        if self.footprint.ndim != ndim:
            raise WorkflowError(f"{type(self).__name__}: footprint is {self.footprint.ndim}-D, the input is {ndim}-D")
        return kernel_offsets(self.footprint)

    def leading(self) -> tuple:
        """scipy's arguments between the input and ``size`` (``rank``, ``percentile``)."""
        return ()

    def run(self, ctx, x) -> np.ndarray:
        x = np.asarray(x)
        fn = getattr(ndimage, type(self).fn)
        lead = self.leading()
        nan = has_nan(x)
        if type(self).fn in ("maximum_filter", "minimum_filter") and nan:
            return extreme_over_nan(lambda y, c: self._call(fn, lead, y, c), x, self.cval,
                                    largest=type(self).fn == "maximum_filter")
        return self._call(fn, lead, x, self.cval, through_2d=nan)

    def _call(self, fn: Callable[..., np.ndarray], lead: tuple, x: np.ndarray, cval: float,
              through_2d: bool = False) -> np.ndarray:
        """scipy's filter over ``x``.  A 1-D input goes through 2-D when it has a footprint (scipy's
        1-D fast path ignores its holes) or a NaN (that path's running window carries a NaN to
        cells past its window: median, rank and percentile over 2-D read only their window)."""
        if self.footprint is None:
            if x.ndim == 1 and through_2d:
                return fn(x[None], *lead, (1, self.size if isinstance(self.size, int) else self.size[0]),
                          mode=self.mode, cval=cval)[0]
            return fn(x, *lead, self.size, mode=self.mode, cval=cval)
        if x.ndim == 1:
            return fn(x[None], *lead, footprint=self.footprint[None], mode=self.mode, cval=cval)[0]
        return fn(x, *lead, footprint=self.footprint, mode=self.mode, cval=cval)


class MedianFilter(_RankFilter):
    """``scipy.ndimage.median_filter(x, size | footprint, mode, cval)``."""

    fn = "median_filter"


class MaximumFilter(_RankFilter):
    """``scipy.ndimage.maximum_filter(x, size | footprint, mode, cval)``."""

    fn = "maximum_filter"


class MinimumFilter(_RankFilter):
    """``scipy.ndimage.minimum_filter(x, size | footprint, mode, cval)``."""

    fn = "minimum_filter"


class RankFilter(_RankFilter):
    """``scipy.ndimage.rank_filter(x, rank, size | footprint, mode, cval)``."""

    fn = "rank_filter"

    def __init__(self, rank: int, size: int | tuple[int, ...] | None = 3, footprint: ArrayLike | None = None,
                 mode: str = "reflect",
                 cval: float = 0.0):
        super().__init__(size, footprint, mode, cval)
        if not isinstance(rank, (int, np.integer)) or isinstance(rank, bool):
            raise WorkflowError(f"RankFilter: rank must be an int, got {rank!r}")
        self.rank = int(rank)

    def leading(self) -> tuple:
        return (self.rank,)


class PercentileFilter(_RankFilter):
    """``scipy.ndimage.percentile_filter(x, percentile, size | footprint, mode, cval)``."""

    fn = "percentile_filter"

    def __init__(self, percentile: float, size: int | tuple[int, ...] | None = 3, footprint: ArrayLike | None = None,
                 mode: str = "reflect", cval: float = 0.0):
        super().__init__(size, footprint, mode, cval)
        self.percentile = float(percentile)
        if not -100.0 <= self.percentile <= 100.0:
            raise WorkflowError(f"PercentileFilter: percentile must be within [-100, 100], got {percentile!r}")

    def leading(self) -> tuple:
        return (self.percentile,)


class _GaussianDerivatives(StencilOperator):
    """A sum over axes of Gaussian derivatives (``fn``: ``gaussian_laplace`` or
    ``gaussian_gradient_magnitude``): each term reads the truncated kernel's box, radius
    ``int(truncate * sigma + 0.5)`` per axis, so the whole is that box."""

    keeps_float = True
    fn = "gaussian_laplace"  # the scipy.ndimage function, by name

    def __init__(self, sigma: float | tuple[float, ...], mode: str = "reflect", cval: float = 0.0,
                 truncate: float = 4.0):
        super().__init__(mode, cval)
        self.sigma = tuple(sigma) if isinstance(sigma, (tuple, list)) else float(sigma)
        self.truncate = float(truncate)

    def stencil(self, ndim: int) -> np.ndarray:
        sigmas = per_axis(self.sigma, ndim, type(self).__name__, "sigma", float, minimum=0.0)
        return box_offsets(tuple(int(self.truncate * s + 0.5) for s in sigmas))

    def run(self, ctx, x) -> np.ndarray:
        return getattr(ndimage, type(self).fn)(_floating(x), self.sigma, mode=self.mode, cval=self.cval,
                                               truncate=self.truncate)


class GaussianLaplace(_GaussianDerivatives):
    """``scipy.ndimage.gaussian_laplace(x, sigma, mode, cval, truncate=...)``."""

    fn = "gaussian_laplace"


class GaussianGradientMagnitude(_GaussianDerivatives):
    """``scipy.ndimage.gaussian_gradient_magnitude(x, sigma, mode, cval, truncate=...)``."""

    fn = "gaussian_gradient_magnitude"


class Prewitt(StencilOperator):
    """``scipy.ndimage.prewitt(x, axis, mode, cval)``: a cell reads its whole 3**ndim box
    (scipy multiplies the zero weights of the plane normal to ``axis`` too, so a NaN there
    reaches the cell)."""

    keeps_float = True
    reads_only = True  # scipy's own filter: never writes its input

    def __init__(self, axis: int = -1, mode: str = "reflect", cval: float = 0.0):
        super().__init__(mode, cval)
        self.axis = axis

    def stencil(self, ndim: int) -> np.ndarray:
        normalize_axis(self.axis, ndim, "Prewitt")
        return box_offsets((1,) * ndim)

    def run(self, ctx: Context, x: np.ndarray) -> np.ndarray:
        return ndimage.prewitt(_floating(x), self.axis, mode=self.mode, cval=self.cval)


class Laplace(StencilOperator):
    """``scipy.ndimage.laplace(x, mode, cval)``: a cell reads itself and its 2 * ndim axis neighbours."""

    keeps_float = True
    reads_only = True  # scipy's own filter: never writes its input

    def stencil(self, ndim: int) -> np.ndarray:
        eye = np.eye(ndim, dtype=np.int64)
        return np.concatenate([np.zeros((1, ndim), np.int64), eye, -eye])

    def run(self, ctx: Context, x: np.ndarray) -> np.ndarray:
        return ndimage.laplace(_floating(x), mode=self.mode, cval=self.cval)


class Sobel(StencilOperator):
    """``scipy.ndimage.sobel(x, axis, mode, cval)``: a cell reads its 3**ndim box except the
    plane through itself normal to ``axis`` (where the derivative weight is zero; the
    difference is taken without touching that plane, so a NaN there does not leak in)."""

    def __init__(self, axis: int = -1, mode: str = "reflect", cval: float = 0.0):
        super().__init__(mode, cval)
        self.axis = axis

    def stencil(self, ndim: int) -> np.ndarray:
        box = box_offsets((1,) * ndim)
        return box[box[:, normalize_axis(self.axis, ndim, "Sobel")] != 0]

    def run(self, ctx: Context, x: np.ndarray) -> np.ndarray:
        # the derivative as a difference of the two neighbours (scipy multiplies the centre
        # by its zero weight, so a NaN or an infinity there would leak into the result)
        x = np.asarray(x, dtype=np.float64)
        axis = normalize_axis(self.axis, x.ndim, "Sobel")
        n = x.shape[axis]
        positions = np.arange(n, dtype=np.int64)
        after, before = (boundary_index(positions + d, n, self.mode) for d in (1, -1))
        out = self._side(x, axis, after) - self._side(x, axis, before)
        for other in range(x.ndim):
            if other != axis:
                out = ndimage.correlate1d(out, [1.0, 2.0, 1.0], axis=other, mode=self.mode, cval=self.cval)
        return out

    def _side(self, x: np.ndarray, axis: int, index: np.ndarray) -> np.ndarray:
        """``x`` re-indexed along ``axis`` (``cval`` where the boundary supplies the value)."""
        got = np.take(x, np.maximum(index, 0), axis=axis)
        shape = [1] * x.ndim
        shape[axis] = len(index)
        return np.where((index >= 0).reshape(shape), got, self.cval)


class GenericFilter(_RankFilter):
    """``scipy.ndimage.generic_filter(x, function, size | footprint, mode, cval)``: ``function``
    runs on each window's values (a float64 1-D array, the footprint's cells in C order) as
    scipy runs it, so a cell reads its footprint and nothing else.  ``function`` must be
    picklable by cloudpickle to run on Spark."""

    reads_only = False  # the user's function: given scipy's window buffer, but not promised to leave it alone

    def __init__(self, function: Callable[..., Any], size: int | tuple[int, ...] | None = None,
                 footprint: ArrayLike | None = None, mode: str = "reflect",
                 cval: float = 0.0, extra_arguments: tuple = (), extra_keywords: dict | None = None):
        if not callable(function):
            raise WorkflowError(f"GenericFilter: function must be callable, got {function!r}")
        super().__init__(size, footprint, mode, cval)
        self.function = function
        self.extra_arguments, self.extra_keywords = tuple(extra_arguments), dict(extra_keywords or {})

    def run(self, ctx: Context, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        shape = {"footprint": self.footprint} if self.footprint is not None else {"size": self.size}
        return ndimage.generic_filter(x, self.function, mode=self.mode, cval=self.cval,
                                      extra_arguments=self.extra_arguments, extra_keywords=self.extra_keywords, **shape)

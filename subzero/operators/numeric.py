"""Small operators the numpy front end (`subzero.trace`) needs where no other operator fits:
reductions over every axis and their nan-forms, histogram edges, and scipy's 1..n label
numbering.

Whole-array statistics keep every axis with length 1 (``keepdims=True``): the front end
stands them for numpy's 0-d results (``np.sum(x)``), and broadcasting against them gives
numpy's shapes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from subzero.errors import WorkflowError
from subzero.modes import Mode
from subzero.operator import Operator
from subzero.operators._args import check_choice
from subzero.operators.identity import IdentityMapping
from subzero.operators.indexmap import IndexMapOperator
from subzero.operators.reductions import AxisReduction, DdofReduction
from subzero.tiling import Shape

if TYPE_CHECKING:  # pragma: no cover
    from subzero.context import Context

__all__ = ["GlobalReduction", "REDUCTIONS", "NanSum", "NanMean", "NanStd", "NanMin", "NanMax", "AnyOf", "AllOf",
           "HistogramEdges", "Relabel", "RELABEL_LINEAGES", "NearestZoom"]

#: the reductions `GlobalReduction` computes: name -> numpy function
REDUCTIONS: dict[str, Callable[..., Any]] = {
    "sum": np.sum, "mean": np.mean, "std": np.std, "var": np.var, "min": np.min, "max": np.max,
    "prod": np.prod, "any": np.any, "all": np.all, "count_nonzero": np.count_nonzero,
    "nansum": np.nansum, "nanmean": np.nanmean, "nanstd": np.nanstd, "nanmin": np.nanmin,
    "nanmax": np.nanmax,
}


class GlobalReduction(Operator):
    """``np.<how>(x, keepdims=True)`` over the whole array (``ddof`` for std and var): every
    output cell depends on every input cell, so its only mode is ``BLACKBOX``.

    Examples
    --------
    >>> GlobalReduction("max").run(None, np.arange(6).reshape(2, 3))
    array([[5]])
    """

    entire_array_safe = True

    def __init__(self, how: str = "sum", ddof: int = 0):
        self.how = check_choice(how, tuple(REDUCTIONS), "GlobalReduction", "how")
        self.ddof = int(ddof)

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        if len(input_shapes[0]) == 0:
            raise WorkflowError("GlobalReduction: expected an array of at least 1 axis, got a 0-d array")
        return (1,) * len(input_shapes[0])

    def run(self, ctx: Context, *inputs: np.ndarray) -> np.ndarray:
        (x,) = inputs
        fn = REDUCTIONS[self.how]
        if self.how in ("std", "var", "nanstd"):
            return np.asarray(fn(x, ddof=self.ddof, keepdims=True))
        if self.how == "count_nonzero":
            return np.asarray(fn(x, axis=tuple(range(np.ndim(x))), keepdims=True))
        return np.asarray(fn(x, keepdims=True))


class _NumpyReduction(AxisReduction):
    """An `AxisReduction` whose ``fn`` is any numpy reduction ``fn(x, axis=...)`` (numpy's
    reductions have distinct overloaded signatures, so ``fn`` is typed loosely)."""

    fn: Callable[..., Any] = staticmethod(np.sum)


class NanSum(_NumpyReduction):
    """``np.nansum(x, axis)``."""

    fn = staticmethod(np.nansum)


class NanMean(_NumpyReduction):
    """``np.nanmean(x, axis)``."""

    fn = staticmethod(np.nanmean)


class NanStd(DdofReduction):
    """``np.nanstd(x, axis, ddof=ddof)``."""

    fn = staticmethod(np.nanstd)


class NanMin(_NumpyReduction):
    """``np.nanmin(x, axis)``."""

    fn = staticmethod(np.nanmin)


class NanMax(_NumpyReduction):
    """``np.nanmax(x, axis)``."""

    fn = staticmethod(np.nanmax)


class AnyOf(_NumpyReduction):
    """``np.any(x, axis)``."""

    fn = staticmethod(np.any)


class AllOf(_NumpyReduction):
    """``np.all(x, axis)``."""

    fn = staticmethod(np.all)


class HistogramEdges(Operator):
    """The edges ``np.histogram(x, bins, range)`` returns: ``(bins + 1,)`` float64.

    With ``range=None`` they come from the data's minimum and maximum, so every edge
    depends on every cell: all-to-all (``BLACKBOX``), entire-array safe.
    """

    entire_array_safe = True

    def __init__(self, bins: int = 10, range: tuple[float, float] | None = None):
        if not isinstance(bins, (int, np.integer)) or bins < 1:
            raise WorkflowError(f"HistogramEdges: bins must be a positive int, got {bins!r}")
        self.bins = int(bins)
        self.range = None if range is None else (float(range[0]), float(range[1]))

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        return (self.bins + 1,)

    def run(self, ctx: Context, *inputs: np.ndarray) -> np.ndarray:
        (x,) = inputs
        return np.histogram_bin_edges(np.asarray(x), bins=self.bins, range=self.range)


#: the readings of `Relabel`'s lineage
RELABEL_LINEAGES = ("component", "dependence")


class Relabel(IdentityMapping, Operator):
    """Renumber labels ``1..n`` in the order of their first values (0 stays 0): the canonical
    ids of `subzero.operators.Label` become ``scipy.ndimage.label``'s numbers (int32).

    Lineage (``lineage``):

    - ``"component"`` (default): a label cell depends on the same cell of its input (the
      number names the component the input cell already names; with `Label` before it, a
      cell depends on its component and ring).  This is an identity reading, like a
      selection's ``"source"``: the perturbation oracle, which compares values, sees a
      component appear before another as a change of the later one's number, and does
      not hold ``"component"`` to that.
    - ``"dependence"``: a number is the count of components before it, which every cell
      decides: all-to-all (``BLACKBOX``).

    Examples
    --------
    >>> Relabel().run(None, np.array([0, 7, 7, 0, 3]))
    array([0, 2, 2, 0, 1], dtype=int32)
    """

    entire_array_safe = True

    def __init__(self, lineage: str = "component"):
        self.lineage = check_choice(lineage, RELABEL_LINEAGES, "Relabel", "lineage")

    def supported_modes(self) -> set[Mode]:
        return {Mode.MAP} if self.lineage == "component" else {Mode.BLACKBOX}

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        return tuple(input_shapes[0])

    def run(self, ctx: Context, *inputs: np.ndarray) -> np.ndarray:
        (x,) = inputs
        x = np.asarray(x)
        ranked = _ranks_by_table(x)
        if ranked is not None:
            return ranked
        ids = np.unique(x[x != 0])
        out = np.searchsorted(ids, x) + 1
        return np.where(x != 0, out, 0).astype(np.int32)


def _ranks_by_table(x: np.ndarray) -> np.ndarray | None:
    """`Relabel.run`'s numbers (each nonzero value's rank among the distinct nonzero values,
    from 1; 0 stays 0) from a table over the values' range, in O(cells) rather than a sort:
    for non-negative integers at most a few times the number of cells (`Label`'s canonical ids
    are 1 + a flat index); None otherwise."""
    if x.dtype.kind not in "iu" or not x.size:
        return None
    lo, hi = int(x.min()), int(x.max())
    if lo < 0 or hi > 4 * x.size + 1024:
        return None
    present = np.zeros(hi + 1, bool)
    present[x.reshape(-1)] = True
    present[0] = False
    rank = np.cumsum(present, dtype=np.int32 if hi < 2**31 - 1 else np.int64)  # distinct nonzero values <= v
    return rank[x].astype(np.int32, copy=False)


class NearestZoom(IndexMapOperator):
    """``scipy.ndimage.zoom(x, zoom, order=0, mode, cval, grid_mode)``: nearest-neighbour
    resampling, so each output cell copies one input cell (or ``cval``); the per-axis maps
    are scipy's own, read from zooming an index line."""

    def __init__(self, zoom: float | Sequence[float], mode: str = "constant", cval: float = 0.0,
                 grid_mode: bool = False):
        self.zoom = tuple(float(z) for z in zoom) if isinstance(zoom, Sequence) else float(zoom)
        self.mode, self.fill, self.grid_mode = str(mode), cval, bool(grid_mode)

    def maps_for(self, shape: Shape) -> list[np.ndarray]:
        from scipy import ndimage

        zooms = self.zoom if isinstance(self.zoom, tuple) else (self.zoom,) * len(shape)
        if len(zooms) != len(shape) or any(z <= 0 for z in zooms):
            raise WorkflowError(f"NearestZoom: zoom must be one positive factor or one per axis of the "
                                f"{len(shape)}-D input, got {self.zoom!r}")
        maps = []
        for n, z in zip(shape, zooms):
            line = np.arange(1, n + 1, dtype=np.float64)
            with np.errstate(all="ignore"):
                probe = ndimage.zoom(line, z, order=0, mode=self.mode, cval=0.0, grid_mode=self.grid_mode)
            maps.append(np.rint(probe).astype(np.int64) - 1)
        return maps

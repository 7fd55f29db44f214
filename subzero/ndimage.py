"""scipy.ndimage's names and signatures over symbolic arrays (``from subzero import ndimage``),
as dask-image mirrors them: change the import, keep the code.

Each function adds the built-in operator with the same values and exact lineage (the
stencil of a filter, honouring the boundary ``mode``; a component and its ring for
`label` and, on the background, for `binary_fill_holes`; a label's cells for the
measurements).  Outside a traced function, on numpy arrays, each one calls scipy itself,
so a function written with ``subzero.ndimage`` still runs eagerly.

Values and dtypes are scipy's: the output has the input's dtype.  A float64 input gives
scipy's values (to rounding; `uniform_filter`, `uniform_filter1d` and `sobel` sum each
cell's window apart, so a NaN stays inside the windows that hold it); separable filters on
float32 input match scipy within float32 rounding.  Not supported (a
`subzero.trace.errors.UnsupportedCallError` says so): ``output=`` other than a symbolic
array of the result's shape (which is rebound to the result, as a library's ``out =
np.empty_like(image)`` expects), ``origin`` other than 0,
``axes=``, ``radius=``, ``mask=``, `zoom` with ``order`` > 0 (spline interpolation reads
whole lines after prefiltering), non-flat grey morphology (``structure=``), a symbolic
``index`` of a measurement.  A scipy.ndimage function with no operator here raises
`MissingFunctionError` (an ``AttributeError`` too) naming the ``sz.udf`` that wraps it.

`scipy_dispatch` makes scipy.ndimage's own functions, as other packages call them, reach
these operators while it is active.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from subzero import operators as ops
from subzero.errors import WorkflowError
from subzero.operators import filters1d, measurements, morphology, numeric
from subzero.trace.errors import UnsupportedCallError
from subzero.trace.building import add_node, astype
from subzero.trace.coarse import coarse_call, leaves
from subzero.trace.tracer import add_trace_context, current_tracer, outside_trace
from subzero.trace.symbolic import SymbolicArray

__all__ = ["convolve", "correlate", "gaussian_filter", "uniform_filter", "median_filter", "maximum_filter",
           "minimum_filter", "rank_filter", "percentile_filter", "gaussian_laplace", "gaussian_gradient_magnitude",
           "prewitt", "laplace", "sobel", "generic_filter", "convolve1d", "correlate1d", "uniform_filter1d",
           "gaussian_filter1d", "minimum_filter1d", "maximum_filter1d", "binary_dilation", "binary_erosion",
           "binary_opening", "binary_closing", "binary_fill_holes", "grey_erosion", "grey_dilation", "grey_opening",
           "grey_closing", "label", "zoom", "sum", "sum_labels", "mean", "maximum", "minimum", "variance",
           "standard_deviation", "median", "center_of_mass", "maximum_position", "minimum_position",
           "labeled_comprehension", "scipy_dispatch", "MissingFunctionError"]

#: an array argument: a numpy array (scipy.ndimage runs on it) or, inside a trace, a
#: `subzero.trace.SymbolicArray` (subzero builds the operator)
Array = Any


def _scipy(name: str, *args, **kwargs):
    """scipy.ndimage's own ``name`` (not a `scipy_dispatch` dispatcher) on plain arrays."""
    from scipy import ndimage

    fn = getattr(ndimage, name)
    return getattr(fn, "__subzero_original__", fn)(*args, **kwargs)


def _check(name: str, **given: Any) -> None:
    bad = [f"{k}={v!r}" for k, v in given.items()
           if v is not None and not (k == "origin" and np.all(np.asarray(v) == 0))]
    if bad:
        raise UnsupportedCallError(f"subzero.ndimage.{name}({', '.join(bad)}) is not supported; drop the argument, "
                                   f"or wrap scipy.ndimage.{name} with sz.udf(fn, lineage=sz.Window(radius=...))")


def _stencil(name: str, op, x, same_dtype: bool = True) -> SymbolicArray:
    """``op`` over ``x`` with scipy's output dtype: ``x``'s own (``same_dtype``), computed in
    float32/float64 when the operator keeps them (``keeps_float``) or else in float64 and
    cast back, as scipy returns it."""
    if not same_dtype:
        return add_node(op, [x], name, dtype=x.dtype)
    kept = getattr(op, "keeps_float", False) and x.dtype in (np.float32, np.float64)
    node = add_node(op, [x], name, dtype=x.dtype if kept else np.dtype(np.float64))
    return node if node.dtype == x.dtype else astype(node, x.dtype)


def gaussian_filter(input: Array, sigma: float | tuple[float, ...], order: int = 0, output: Array | None = None,
                    mode: str = "reflect", cval: float = 0.0, truncate: float = 4.0, *,
                    radius: int | Sequence[int] | None = None, axes: Sequence[int] | None = None) -> Any:
    """``scipy.ndimage.gaussian_filter``: lineage is the truncated kernel's box."""
    if not isinstance(input, SymbolicArray):
        return _scipy("gaussian_filter", input, sigma, order, output, mode, cval, truncate, radius=radius, axes=axes)
    _check("gaussian_filter", output=output, radius=radius, axes=axes)
    return _stencil("gaussian_filter", ops.GaussianFilter(sigma, order, mode, cval, truncate), input)


def uniform_filter(input: Array, size: int | tuple[int, ...] = 3, output: Array | None = None,
                   mode: str = "reflect", cval: float = 0.0, origin: int | Sequence[int] = 0, *,
                   axes: Sequence[int] | None = None) -> Any:
    """``scipy.ndimage.uniform_filter``: lineage is the ``size`` box."""
    if not isinstance(input, SymbolicArray):
        return _scipy("uniform_filter", input, size, output, mode, cval, origin, axes=axes)
    _check("uniform_filter", output=output, origin=origin, axes=axes)
    return _stencil("uniform_filter", ops.UniformFilter(size, mode, cval), input)


def _named(fn: Callable[..., Any], name: str, doc: str) -> Callable[..., Any]:
    """``fn`` under scipy.ndimage's ``name``, with ``doc`` as its docstring (what a factory makes)."""
    fn.__name__ = name
    fn.__doc__ = doc
    return fn


def _weights_nd(name: str, cls: type) -> Callable[..., Any]:
    def fn(input: Array, weights: Array, output: Array | None = None, mode: str = "reflect", cval: float = 0.0,
           origin: int | Sequence[int] = 0, *, axes: Sequence[int] | None = None) -> Any:
        if not isinstance(input, SymbolicArray):
            return _scipy(name, input, weights, output, mode, cval, origin, axes=axes)
        _check(name, output=output, origin=origin, axes=axes)
        return _stencil(name, cls(np.asarray(weights), mode, cval), input)
    return _named(fn, name, f"``scipy.ndimage.{name}``: lineage is the weights' non-zero footprint.")


convolve = _weights_nd("convolve", ops.Convolve)
correlate = _weights_nd("correlate", ops.Correlate)


def _rank(name: str, cls):
    def fn(input: Array, size: int | tuple[int, ...] | None = None, footprint: Array | None = None,
           output: Array | None = None, mode: str = "reflect", cval: float = 0.0, origin: int | Sequence[int] = 0, *,
           axes: Sequence[int] | None = None) -> Any:
        if not isinstance(input, SymbolicArray):
            return _scipy(name, input, size, footprint, output, mode, cval, origin, axes=axes)
        _check(name, output=output, origin=origin, axes=axes)
        return _stencil(name, cls(size, footprint, mode, cval), input, same_dtype=False)
    return _named(fn, name, f"``scipy.ndimage.{name}``: lineage is the ``size`` box or the footprint.")


median_filter = _rank("median_filter", ops.MedianFilter)
maximum_filter = _rank("maximum_filter", ops.MaximumFilter)
minimum_filter = _rank("minimum_filter", ops.MinimumFilter)


def rank_filter(input: Array, rank: int, size: int | tuple[int, ...] | None = None, footprint: Array | None = None,
                output: Array | None = None, mode: str = "reflect", cval: float = 0.0,
                origin: int | Sequence[int] = 0, *, axes: Sequence[int] | None = None) -> Any:
    """``scipy.ndimage.rank_filter``: lineage is the ``size`` box or the footprint."""
    if not isinstance(input, SymbolicArray):
        return _scipy("rank_filter", input, rank, size, footprint, output, mode, cval, origin, axes=axes)
    _check("rank_filter", output=output, origin=origin, axes=axes)
    op = ops.neighbourhood.RankFilter(rank, size, footprint, mode, cval)
    return _stencil("rank_filter", op, input, same_dtype=False)


def percentile_filter(input: Array, percentile: float, size: int | tuple[int, ...] | None = None,
                      footprint: Array | None = None, output: Array | None = None, mode: str = "reflect",
                      cval: float = 0.0, origin: int | Sequence[int] = 0, *, axes: Sequence[int] | None = None) -> Any:
    """``scipy.ndimage.percentile_filter``: lineage is the ``size`` box or the footprint."""
    if not isinstance(input, SymbolicArray):
        return _scipy("percentile_filter", input, percentile, size, footprint, output, mode, cval, origin, axes=axes)
    _check("percentile_filter", output=output, origin=origin, axes=axes)
    op = ops.neighbourhood.PercentileFilter(percentile, size, footprint, mode, cval)
    return _stencil("percentile_filter", op, input, same_dtype=False)


def _gaussian_derivatives(name: str, cls):
    def fn(input: Array, sigma: float | tuple[float, ...], output: Array | None = None, mode: str = "reflect",
           cval: float = 0.0, *, axes: Sequence[int] | None = None, **kwargs: Any) -> Any:
        if not isinstance(input, SymbolicArray):
            return _scipy(name, input, sigma, output, mode, cval, axes=axes, **kwargs)
        truncate = kwargs.pop("truncate", 4.0)
        _check(name, output=output, axes=axes, **kwargs)
        return _stencil(name, cls(sigma, mode, cval, truncate), input)
    fn.__name__ = name
    fn.__doc__ = (f"``scipy.ndimage.{name}`` (``truncate=`` the one keyword passed on to gaussian_filter): lineage "
                  "is the truncated kernel's box.")
    return fn


gaussian_laplace = _gaussian_derivatives("gaussian_laplace", ops.neighbourhood.GaussianLaplace)
gaussian_gradient_magnitude = _gaussian_derivatives("gaussian_gradient_magnitude",
                                                    ops.neighbourhood.GaussianGradientMagnitude)


def prewitt(input: Array, axis: int = -1, output: Array | None = None, mode: str = "reflect", cval: float = 0.0) -> Any:
    """``scipy.ndimage.prewitt``: a cell reads its whole 3**ndim box."""
    if not isinstance(input, SymbolicArray):
        return _scipy("prewitt", input, axis, output, mode, cval)
    _check("prewitt", output=output)
    return _stencil("prewitt", ops.neighbourhood.Prewitt(axis, mode, cval), input)


def laplace(input: Array, output: Array | None = None, mode: str = "reflect", cval: float = 0.0, *,
            axes: Sequence[int] | None = None) -> Any:
    """``scipy.ndimage.laplace``: a cell reads itself and its axis neighbours."""
    if not isinstance(input, SymbolicArray):
        return _scipy("laplace", input, output, mode, cval, axes=axes)
    _check("laplace", output=output, axes=axes)
    return _stencil("laplace", ops.Laplace(mode, cval), input)


def sobel(input: Array, axis: int = -1, output: Array | None = None, mode: str = "reflect", cval: float = 0.0) -> Any:
    """``scipy.ndimage.sobel``: a cell reads its 3**ndim box but the plane normal to ``axis``."""
    if not isinstance(input, SymbolicArray):
        return _scipy("sobel", input, axis, output, mode, cval)
    _check("sobel", output=output)
    return _stencil("sobel", ops.Sobel(axis, mode, cval), input)


def _binary(name: str, input: Array, structure: Array | None, iterations: int, mask: Array | None,
            output: Array | None, border_value: int, origin: int | Sequence[int], brute_force: bool,
            axes: Sequence[int] | None, build: Callable[[SymbolicArray, Array | None], Any]) -> Any:
    """A binary morphology call: scipy's own on plain arrays; on a symbolic array, its arguments
    checked, the node(s) ``build(input, structure)`` adds."""
    if not isinstance(input, SymbolicArray):
        return _scipy(name, input, structure=structure, iterations=iterations, mask=mask, output=output,
                      border_value=border_value, origin=origin, brute_force=brute_force, axes=axes)
    _check(name, mask=mask, output=output, origin=origin, axes=axes)
    if isinstance(iterations, (int, np.integer)) and not isinstance(iterations, bool) and iterations < 1:
        raise UnsupportedCallError(f"subzero.ndimage.{name}(iterations={iterations}) repeats until nothing changes, "
                                   "which has no fixed footprint; give iterations >= 1, or wrap "
                                   f"scipy.ndimage.{name} with sz.udf(fn, lineage='all')")
    return build(input, structure)


def _morphology(name: str, cls):
    def fn(input: Array, structure: Array | None = None, iterations: int = 1, mask: Array | None = None,
           output: Array | None = None, border_value: int = 0, origin: int | Sequence[int] = 0,
           brute_force: bool = False, *, axes: Sequence[int] | None = None) -> Any:
        return _binary(name, input, structure, iterations, mask, output, border_value, origin, brute_force, axes,
                       lambda x, s: add_node(cls(s, iterations, border_value), [x], name, dtype=np.dtype(bool)))
    return _named(fn, name, f"``scipy.ndimage.{name}`` (``iterations`` >= 1): lineage is the structure grown by "
                            "the iterations.")


binary_dilation = _morphology("binary_dilation", ops.BinaryDilation)
binary_erosion = _morphology("binary_erosion", ops.BinaryErosion)


def _opening(name: str, first: str, second: str):
    def fn(input: Array, structure: Array | None = None, iterations: int = 1, output: Array | None = None,
           origin: int | Sequence[int] = 0, mask: Array | None = None, border_value: int = 0,
           brute_force: bool = False, *, axes: Sequence[int] | None = None) -> Any:
        def build(x: SymbolicArray, s: Array | None) -> Any:
            if s is None:  # scipy's default for both steps
                s = np.asarray(_scipy("generate_binary_structure", x.ndim, 1))
            inner = globals()[first](x, s, iterations, border_value=border_value)
            return globals()[second](inner, s, iterations, border_value=border_value)
        return _binary(name, input, structure, iterations, mask, output, border_value, origin, brute_force, axes,
                       build)
    return _named(fn, name, f"``scipy.ndimage.{name}``: {first} then {second} with the same structure and "
                            "iterations (two nodes; lineage composes the two footprints).")


binary_opening = _opening("binary_opening", "binary_erosion", "binary_dilation")
binary_closing = _opening("binary_closing", "binary_dilation", "binary_erosion")


def binary_fill_holes(input: Array, structure: Array | None = None, output: Array | None = None,
                      origin: int | Sequence[int] = 0, *, axes: Sequence[int] | None = None) -> Any:
    """``scipy.ndimage.binary_fill_holes``: a background cell depends on its background
    component and the foreground ring around it (`subzero.operators.BinaryFillHoles`); a
    foreground cell on itself."""
    if not isinstance(input, SymbolicArray):
        return _scipy("binary_fill_holes", input, structure, output, origin, axes=axes)
    _check("binary_fill_holes", output=output, origin=origin, axes=axes)
    if structure is not None:
        s = np.asarray(structure, bool)
        if s.shape != (3,) * input.ndim or not np.array_equal(s, s[(slice(None, None, -1),) * s.ndim]):
            raise UnsupportedCallError(f"subzero.ndimage.binary_fill_holes: structure of shape {s.shape} is not "
                                       f"supported; give a symmetric {(3,) * input.ndim} structure, or wrap "
                                       "scipy.ndimage.binary_fill_holes with sz.udf(fn, lineage='all')")
    return add_node(morphology.BinaryFillHoles(structure), [input], "binary_fill_holes", dtype=np.dtype(bool))


def _flat_footprint(name: str, size, footprint, structure, ndim: int, flip: bool):
    """The rank filter's ``(size, footprint)`` for scipy's flat grey morphology: erosion reads
    the footprint (or ``size`` box) as it is, dilation mirrored (scipy shifts even sizes by one)."""
    if structure is not None:
        raise UnsupportedCallError(f"subzero.ndimage.{name}(structure=...) (non-flat morphology) is not supported; "
                                   f"use size= or footprint=, or wrap scipy.ndimage.{name} with "
                                   "sz.udf(fn, lineage=sz.Window(radius=...))")
    if footprint is None and size is None:
        raise UnsupportedCallError(f"subzero.ndimage.{name}: give size= or footprint= (scipy needs one)")
    if footprint is None:
        sizes = [int(size)] * ndim if isinstance(size, (int, np.integer)) else [int(n) for n in size]
        if not flip or all(n % 2 for n in sizes):
            return size, None
        footprint = np.ones(sizes, bool)
    offsets = ops.neighbourhood.kernel_offsets(np.asarray(footprint, bool), flip=flip)
    radius = np.abs(offsets).max(axis=0) if len(offsets) else np.zeros(ndim, np.int64)
    grid = np.zeros(tuple(2 * radius + 1), bool)
    grid[tuple((offsets + radius).T)] = True
    return None, grid


def _grey(name: str, doc: str, build: Callable[..., Any]) -> Callable[..., Any]:
    """A flat grey morphology call: scipy's own on plain arrays; on a symbolic array, its
    arguments checked, the node(s) ``build(input, size, footprint, structure, mode, cval)`` adds."""
    def fn(input: Array, size: int | tuple[int, ...] | None = None, footprint: Array | None = None,
           structure: Array | None = None, output: Array | None = None, mode: str = "reflect", cval: float = 0.0,
           origin: int | Sequence[int] = 0, *, axes: Sequence[int] | None = None) -> Any:
        if not isinstance(input, SymbolicArray):
            return _scipy(name, input, size, footprint, structure, output, mode, cval, origin, axes=axes)
        _check(name, output=output, origin=origin, axes=axes)
        return build(input, size, footprint, structure, mode, cval)
    return _named(fn, name, doc)


def _flat(name: str, flip: bool, cls):
    def build(x: SymbolicArray, size, footprint, structure, mode: str, cval: float) -> Any:
        size, footprint = _flat_footprint(name, size, footprint, structure, x.ndim, flip)
        return _stencil(name, cls(size, footprint, mode, cval), x, same_dtype=False)
    return _grey(name, f"``scipy.ndimage.{name}`` with a flat ``size`` or ``footprint``: lineage is the footprint"
                       f"{' mirrored' if flip else ''}.", build)


grey_erosion = _flat("grey_erosion", False, ops.MinimumFilter)
grey_dilation = _flat("grey_dilation", True, ops.MaximumFilter)


def _grey_pair(name: str, first, second):
    def build(x: SymbolicArray, size, footprint, structure, mode: str, cval: float) -> Any:
        inner = first(x, size, footprint, structure, mode=mode, cval=cval)
        return second(inner, size, footprint, structure, mode=mode, cval=cval)
    return _grey(name, f"``scipy.ndimage.{name}`` (flat): {first.__name__} then {second.__name__}.", build)


grey_opening = _grey_pair("grey_opening", grey_erosion, grey_dilation)
grey_closing = _grey_pair("grey_closing", grey_dilation, grey_erosion)


def label(input: Array, structure: Array | None = None, output: Array | None = None, *, lineage: str = "component"
         ) -> Any:
    """``scipy.ndimage.label``: ``(labels, n)`` numbered 1..n in raster order, as scipy does.

    Two nodes: ``label`` (`subzero.operators.Label`: canonical ids, a cell depends on its
    component and the ring around it) and ``label_numbers`` (`subzero.operators.Relabel`:
    scipy's numbers, int32).  ``lineage`` is Relabel's reading: ``"component"`` (a number
    names its component: lineage through the component) or ``"dependence"`` (a number
    counts the components before it: every cell).  ``n`` is a 0-d node (the largest
    number); it is in the workflow only if the function uses it.
    """
    if not isinstance(input, SymbolicArray):
        return _scipy("label", input, structure, output)
    _check("label", output=output)
    ids = add_node(ops.Label(structure), [input], "label", dtype=np.dtype(np.int64))
    labelled = _labelled(input, ids)  # the trace's values of the three nodes: one labelling
    numbers = add_node(numeric.Relabel(lineage), [ids], "label_numbers", dtype=np.dtype(np.int32))
    if labelled is not None:  # given before the next step evaluates it (ranking the ids again would take about as
        numbers.entry.value, numbers.entry.seconds = labelled[0], ids.entry.seconds  # long as labelling)
    count = add_node(numeric.GlobalReduction("max"), [numbers], "label_count", dtype=np.dtype(np.int32))
    if labelled is not None:
        count.entry.value = labelled[1]
    return numbers, SymbolicArray(count.tracer, count.entry, (), count.dtype)


def _labelled(input: SymbolicArray, ids: SymbolicArray) -> tuple[np.ndarray, np.ndarray] | None:
    """When the trace evaluates as it records and ``input``'s values fit its budget: ``ids``'s
    values set (`Label.whole`), and the values of ``label_numbers`` and ``label_count``, from one
    scipy labelling (evaluated node by node, the ids would be labelled and then ranked again);
    else None (the trace evaluates them as any node, or the run computes them)."""
    tracer = input.tracer
    if tracer.eager_bytes is None or not tracer.evaluate_within_budget(input.entry):
        return None
    cells = int(np.prod(ids.entry.shape, dtype=np.int64))
    if not cells or tracer.eager_bytes is None or tracer.value_bytes + 12 * cells > tracer.eager_bytes:
        return None
    started = time.perf_counter()
    try:
        with outside_trace():
            values, numbers, n = ids.entry.bound_op().whole(tracer.value(input.entry))  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - the run computes it (and fails there, naming the node)
        return None
    ids.entry.value, ids.entry.seconds = values, time.perf_counter() - started
    return numbers, np.full((1,) * numbers.ndim, n, np.int32)


def zoom(input: Array, zoom: float | Sequence[float], output: Array | None = None, order: int = 3,
         mode: str = "constant", cval: float = 0.0, prefilter: bool = True, *, grid_mode: bool = False) -> Any:
    """``scipy.ndimage.zoom`` with ``order=0`` (nearest): each output cell copies one input cell."""
    if not isinstance(input, SymbolicArray):
        return _scipy("zoom", input, zoom, output, order, mode, cval, prefilter, grid_mode=grid_mode)
    _check("zoom", output=output)
    if order != 0:
        factors = zoom if isinstance(zoom, (tuple, list)) else [zoom] * len(input.shape)
        shape = tuple(int(round(n * z)) for n, z in zip(input.shape, factors))
        raise UnsupportedCallError(f"subzero.ndimage.zoom(order={order}) is not supported: spline interpolation "
                                   "prefilters whole lines; use order=0 (nearest), or wrap scipy.ndimage.zoom: "
                                   f"sz.udf(scipy.ndimage.zoom, lineage='all', shape={shape})(x, {zoom!r}, "
                                   f"order={order})")
    zooms = tuple(zoom) if isinstance(zoom, (tuple, list)) else zoom
    return add_node(numeric.NearestZoom(zooms, mode, cval, grid_mode), [input], "zoom", dtype=input.dtype)


# -- one-axis filters and generic_filter ---------------------------------------------------------------
def _weights_filter(name: str, cls):
    def fn(input: Array, weights: Array, axis: int = -1, output: Array | None = None, mode: str = "reflect",
           cval: float = 0.0, origin: int | Sequence[int] = 0) -> Any:
        if not isinstance(input, SymbolicArray):
            return _scipy(name, input, weights, axis, output, mode, cval, origin)
        _check(name, output=output, origin=origin)
        return _stencil(name, cls(weights, axis, mode, cval), input)
    return _named(fn, name, f"``scipy.ndimage.{name}``: lineage is the weights' window along ``axis``.")


def _size_filter(name: str, cls, same_dtype: bool = True):
    def fn(input: Array, size: int | tuple[int, ...] | None, axis: int = -1, output: Array | None = None,
           mode: str = "reflect", cval: float = 0.0, origin: int | Sequence[int] = 0) -> Any:
        if not isinstance(input, SymbolicArray):
            return _scipy(name, input, size, axis, output, mode, cval, origin)
        _check(name, output=output, origin=origin)
        return _stencil(name, cls(size, axis, mode, cval), input, same_dtype=same_dtype)
    return _named(fn, name, f"``scipy.ndimage.{name}``: lineage is ``size`` cells along ``axis``.")


convolve1d = _weights_filter("convolve1d", filters1d.Convolve1D)
correlate1d = _weights_filter("correlate1d", filters1d.Correlate1D)
uniform_filter1d = _size_filter("uniform_filter1d", filters1d.UniformFilter1D)
minimum_filter1d = _size_filter("minimum_filter1d", filters1d.MinimumFilter1D, same_dtype=False)
maximum_filter1d = _size_filter("maximum_filter1d", filters1d.MaximumFilter1D, same_dtype=False)


def gaussian_filter1d(input: Array, sigma: float, axis: int = -1, order: int = 0,
                      output: Array | None = None, mode: str = "reflect", cval: float = 0.0, truncate: float = 4.0, *,
                      radius: int | Sequence[int] | None = None) -> Any:
    """``scipy.ndimage.gaussian_filter1d``: lineage is the truncated kernel along ``axis``."""
    if not isinstance(input, SymbolicArray):
        return _scipy("gaussian_filter1d", input, sigma, axis, order, output, mode, cval, truncate, radius=radius)
    _check("gaussian_filter1d", output=output, radius=radius)
    return _stencil("gaussian_filter1d", filters1d.GaussianFilter1D(sigma, axis, order, mode, cval, truncate), input)


def generic_filter(input: Array, function: Callable[..., Any], size: int | tuple[int, ...] | None = None,
                   footprint: Array | None = None, output: Array | None = None, mode: str = "reflect",
                   cval: float = 0.0, origin: int | Sequence[int] = 0, extra_arguments: tuple = (),
                   extra_keywords: dict | None = None, *, axes: Sequence[int] | None = None) -> Any:
    """``scipy.ndimage.generic_filter``: ``function`` runs on each window as scipy runs it;
    lineage is the ``size`` box or the footprint.  The output has the input's dtype."""
    if not isinstance(input, SymbolicArray):
        return _scipy("generic_filter", input, function, size, footprint, output, mode, cval, origin,
                      extra_arguments, extra_keywords, axes=axes)
    _check("generic_filter", output=output, origin=origin, axes=axes)
    op = ops.neighbourhood.GenericFilter(function, size, footprint, mode, cval, extra_arguments, extra_keywords)
    return add_node(op, [input], "generic_filter", dtype=input.dtype)


# -- labelled measurements ---------------------------------------------------------------------------
def _measure(how: str, input, labels, index, lineage: str, **extra: Any) -> Any:
    """``how`` per label as a node: ``(n,)`` (``(n, ndim)`` for positions) for a sequence
    ``index``, a 0-d value (``(ndim,)``) for an int or None."""
    name = "sum" if how == "sum_labels" else how
    if isinstance(index, SymbolicArray):
        raise UnsupportedCallError(f"subzero.ndimage.{name}: a symbolic index is not supported; give None, an int or "
                                   "a constant list of labels (e.g. range(1, max_label + 1))")
    if not isinstance(input, SymbolicArray):
        raise UnsupportedCallError(f"subzero.ndimage.{name}: the input is a constant and only the labels are "
                                   "symbolic; make the input part of the traced function (e.g. np.ones_like(labels))")
    if labels is not None and not isinstance(labels, SymbolicArray):
        raise UnsupportedCallError(f"subzero.ndimage.{name}: constant labels with a symbolic input are not "
                                   "supported; pass the labels as an input of the traced function")
    if labels is not None and labels.shape != input.shape:
        raise UnsupportedCallError(f"subzero.ndimage.{name}: labels of shape {labels.shape} broadcast to the input "
                                   f"{input.shape}; give labels of the input's shape")
    try:
        op = measurements.LabeledStatistic(how, index, labels is not None, lineage, **extra)
    except WorkflowError as exc:  # the operator's argument errors, said with the function's name
        raise UnsupportedCallError(f"subzero.ndimage.{name}: {exc}") from None
    # the dtype scipy gives: measure a tiny array holding every label asked for
    present = np.atleast_1d(np.asarray(op.index if op.index is not None else 1, np.int64))
    present = present if len(present) else np.ones(1, np.int64)
    dummy = np.ones((1,) * (input.ndim - 1) + (len(present),), input.dtype)
    with np.errstate(all="ignore"):
        probe = op.measure(dummy, None if labels is None else present.reshape(dummy.shape).astype(labels.dtype))
    inputs = [input] if labels is None else [input, labels]
    node = add_node(op, inputs, name, dtype=probe.dtype)
    if isinstance(op.index, np.ndarray) or measurements.STATISTICS[how]:
        return node  # one value per label, or the coordinates of one position
    return SymbolicArray(node.tracer, node.entry, (), node.dtype)  # one value: 0-d


def _measurement(how: str):
    name = "sum" if how == "sum_labels" else how

    def fn(input: Array, labels: Array | None = None, index: Array | None = None, *, lineage: str = "dependence"
          ) -> Any:
        if not any(isinstance(v, SymbolicArray) for v in (input, labels, index)):
            return _scipy(how, input, labels, index)
        return _measure(how, input, labels, index, lineage)
    fn.__name__ = name
    fn.__doc__ = (f"``scipy.ndimage.{how}(input, labels, index)``: the value of label ``k`` depends on the input "
                  "cells where ``labels == k`` and (``lineage='dependence'``) on every label cell, or "
                  "(``lineage='members'``) on the label's own cells.")
    return fn


sum_labels = _measurement("sum_labels")
sum = _measurement("sum_labels")  # noqa: A001 - scipy.ndimage's name
sum.__name__ = "sum"
mean = _measurement("mean")
maximum = _measurement("maximum")
minimum = _measurement("minimum")
variance = _measurement("variance")
standard_deviation = _measurement("standard_deviation")
median = _measurement("median")
center_of_mass = _measurement("center_of_mass")
maximum_position = _measurement("maximum_position")
minimum_position = _measurement("minimum_position")


def labeled_comprehension(input: Array, labels: Array | None, index: Array | None, func: Callable[..., Any],
                          out_dtype: Any, default: Any, pass_positions: bool = False, *, lineage: str = "dependence"
                         ) -> Any:
    """``scipy.ndimage.labeled_comprehension``: ``func`` runs on each label's values as scipy
    runs it; lineage as `sum_labels`."""
    if not any(isinstance(v, SymbolicArray) for v in (input, labels, index)):
        return _scipy("labeled_comprehension", input, labels, index, func, out_dtype, default, pass_positions)
    return _measure("labeled_comprehension", input, labels, index, lineage, func=func, out_dtype=out_dtype,
                    default=default, pass_positions=pass_positions)


# -- output= into a symbolic array ------------------------------------------------------------------------
def _rebind(output: SymbolicArray, values: SymbolicArray) -> None:
    """``output`` now stands for ``values`` (a whole-array write is a rebinding: every name
    bound to that array object sees the new node, as it would see numpy's written values)."""
    output.rebind(values)


def _writes_output(fn: Callable) -> Callable:
    """``fn`` that also takes ``output=`` a symbolic array of the result's shape (the array a
    library allocated with ``np.empty_like`` to receive the result): the result, cast to its
    dtype, is rebound to it, and the call returns what scipy returns then (the array; the
    count for `label`; None for `binary_fill_holes`)."""
    params = list(inspect.signature(fn).parameters)
    at = params.index("output")
    name = fn.__name__

    @functools.wraps(fn)
    def call(*args, **kwargs: Any) -> Any:
        output = kwargs.get("output") if "output" in kwargs else (args[at] if len(args) > at else None)
        if not isinstance(output, SymbolicArray):
            return fn(*args, **kwargs)
        if "output" in kwargs:
            kwargs = {**kwargs, "output": None}
        else:
            args = args[:at] + (None,) + args[at + 1:]
        result = fn(*args, **kwargs)
        values = result[0] if isinstance(result, tuple) else result
        if not isinstance(values, SymbolicArray) or values.shape != output.shape:
            raise UnsupportedCallError(f"subzero.ndimage.{name}(output={output!r}): the result "
                                       f"{getattr(values, 'shape', '')} cannot be written into that array; use the "
                                       "returned array")
        _rebind(output, astype(values, output.dtype))
        if name == "label":
            return result[1]
        return None if name == "binary_fill_holes" else output
    return call


# -- arguments without an exact rule: scipy's own function, on this run's values ---------------------------
def _coarse_on_values(fn: Callable) -> Callable:
    """``fn``, or, when its arguments have no exact rule (an `UnsupportedCallError`) and the trace
    has values, scipy.ndimage's own function on them as a labelled coarse step."""
    @functools.wraps(fn)
    def call(*args, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except UnsupportedCallError as exc:
            found = leaves((args, kwargs))
            if not found or not found[0].tracer.has_values():
                raise
            return coarse_call(functools.partial(_scipy, fn.__name__), args, kwargs,
                               f"no exact rule for these arguments ({exc.reason})", base=fn.__name__)
    return call


# -- what is missing says what to do -------------------------------------------------------------------
class MissingFunctionError(UnsupportedCallError, AttributeError):
    """``subzero.ndimage.NAME`` for a scipy.ndimage function subzero has no operator for."""


def __getattr__(name: str) -> Any:
    if name.startswith("__") and name.endswith("__"):  # the interpreter's probes (__path__, __wrapped__, ...)
        raise MissingFunctionError(f"module {__name__!r} has no attribute {name!r}", line="")
    import scipy.ndimage

    if hasattr(scipy.ndimage, name):
        fix = (f"wrap scipy's function with its lineage declared, e.g. "
               f"sz.udf(scipy.ndimage.{name}, lineage=sz.Window(radius=...)) for a stencil or lineage='all' "
               "for anything else")
        raise MissingFunctionError(f"subzero.ndimage.{name} is not implemented: scipy.ndimage.{name} has no subzero "
                                   f"operator with exact lineage yet; {fix}")
    raise MissingFunctionError(f"subzero.ndimage has no {name!r}, and neither has scipy.ndimage; see "
                               "docs/guide/ndimage.md for the functions subzero.ndimage provides")


# -- scipy.ndimage calls made inside other packages ------------------------------------------------------
# The dispatchers are bound once, by the first trace (or `scipy_dispatch`), and stay bound for the process's
# life: outside a trace in the calling context (any call of another thread, of code a trace runs on values, of
# code after the trace) a dispatcher calls scipy's own function at once, so binding and putting back scipy's
# functions around every trace (a look through the holders' namespaces each time) is not paid per trace.
_DISPATCH_LOCK = threading.RLock()
_dispatch_patched: list[tuple[dict, str, Any]] = []  # (namespace, name, original) to put back (`_restore`)
_dispatch_seen: set[str] = set()  # the modules imported when the dispatchers were bound
_dispatch_bound: dict[int, Callable] = {}  # id(dispatcher) -> original, while bound
_dispatch_live: dict[int, Callable] = {}  # the dispatchers bound, by id: alive, so their ids stay theirs
_dispatch_scanned: set[str] = set()  # modules whose namespaces were scanned once
_dispatch_holders: dict[int, Any] = {}  # the modules found holding one of scipy.ndimage's functions
#: id(original) -> (original, its dispatcher): made once per scipy function, bound once per process
_dispatchers: dict[int, tuple[Callable, Callable]] = {}
#: `_imported()` when the dispatchers were last bound (None: not bound)
_dispatch_modules: tuple[int, str] | None = None


def _imported() -> tuple[int, str]:
    """How many modules are imported and the last one's name (``sys.modules`` keeps import order):
    a different pair means modules were imported since it was taken."""
    return len(sys.modules), next(reversed(sys.modules), "")


def _dispatcher(original: Callable, ours: Callable) -> Callable:
    """``original`` for plain arguments or outside a trace, ``ours`` when a trace is in force in the
    calling context and an argument is a `SymbolicArray`."""
    def dispatch(*args, **kwargs: Any) -> Any:
        if current_tracer() is not None:
            for value in itertools.chain(args, kwargs.values()):
                if isinstance(value, SymbolicArray):
                    return ours(*args, **kwargs)
        return original(*args, **kwargs)
    functools.update_wrapper(dispatch, original)
    dispatch.__subzero_original__ = original  # type: ignore[attr-defined]
    return dispatch


def _swap(namespaces: Iterable[Any], table: dict[int, Callable], record: bool) -> list[Any]:
    """In every module namespace, bind ``table[id(value)]`` where a value's id is a key
    (a live object's id names it alone); ``record`` keeps what to put back.  Returns the
    modules where it bound one."""
    bound = []
    for module in namespaces:
        namespace = getattr(module, "__dict__", None)
        if type(namespace) is not dict or namespace is globals():
            continue
        try:
            if table.keys().isdisjoint(map(id, namespace.values())):  # most modules: one pass in C
                continue
            hits = [(key, value) for key, value in namespace.items() if id(value) in table]
        except RuntimeError:  # the namespace changed under us (an import in another thread): copy it
            hits = [(key, value) for key, value in namespace.copy().items() if id(value) in table]
        for key, value in hits:
            namespace[key] = table[id(value)]
            if record:
                _dispatch_patched.append((namespace, key, value))
        if hits:
            bound.append(module)
    return bound


def _patch() -> None:
    """Bind a dispatcher wherever a module namespace holds one of scipy.ndimage's functions
    that subzero implements (scipy.ndimage, its private submodules, ``from scipy.ndimage
    import x`` in any imported module): every module the first time, then only the modules
    imported since and those known to hold one."""
    global _dispatch_modules
    import scipy.ndimage

    targets: dict[int, Callable] = {}
    for name in __all__:
        current = getattr(scipy.ndimage, name, None)
        original = getattr(current, "__subzero_original__", current)  # bound already: scipy's own behind it
        if callable(original) and id(original) not in targets:
            made = _dispatchers.get(id(original))
            if made is None or made[0] is not original:  # made once per function (kept alive: ids stay theirs)
                made = _dispatchers[id(original)] = (original, _dispatcher(original, globals()[name]))
            targets[id(original)] = made[1]
    _dispatch_seen.update(sys.modules)
    _dispatch_live.update({id(d): d for d in targets.values()})
    _dispatch_bound.update({i: d.__subzero_original__ for i, d in _dispatch_live.items()})  # type: ignore[attr-defined]
    # a module binds scipy.ndimage's functions when it is imported: one scan of each module in
    # the process's life, then only the modules that held one
    fresh = [(name, sys.modules.get(name)) for name in sys.modules.keys() - _dispatch_scanned]
    _dispatch_scanned.update(name for name, _ in fresh)
    known = [module for module in _dispatch_holders.values()]
    for module in _swap([module for _, module in fresh if module is not None] + known, targets, record=True):
        _dispatch_holders[id(module)] = module
    _dispatch_modules = _imported()


def _restore() -> None:
    """Put every original back (only where the dispatcher is still bound), also in modules
    imported while the dispatchers were bound (they may have bound one by name): scipy as it
    was before the first trace (the next trace binds the dispatchers again)."""
    global _dispatch_modules
    with _DISPATCH_LOCK:
        while _dispatch_patched:
            namespace, key, original = _dispatch_patched.pop()
            if getattr(namespace.get(key), "__subzero_original__", None) is original:
                namespace[key] = original
        new = [sys.modules.get(name) for name in sys.modules.keys() - _dispatch_seen]
        _swap([module for module in new if module is not None], _dispatch_bound, record=False)
        _dispatch_seen.clear()
        _dispatch_bound.clear()
        _dispatch_live.clear()
        _dispatch_modules = None


@contextlib.contextmanager
def scipy_dispatch() -> Iterator[None]:
    """Within, scipy.ndimage's functions that `subzero.ndimage` implements dispatch on their
    arguments: a call with a `SymbolicArray` among them, made while a trace is in force in the
    calling context, runs subzero's function (an operator with exact lineage); any other call
    scipy's own, unchanged (a plain call, another thread's, code run outside the trace).

    This reaches scipy.ndimage calls made inside installed packages (``ndi.label`` inside
    ``skimage.morphology``) without editing them: the dispatchers are bound in
    ``scipy.ndimage``, its private submodules (``_filters``, ``_morphology``,
    ``_measurements``, ...) and every imported module that bound a function by ``from
    scipy.ndimage import name``.  They are bound on the first entry and stay bound (outside a
    trace each is scipy's function behind one test): a later entry binds them only in the
    modules imported since.

    Examples
    --------
    >>> import numpy as np, scipy.ndimage
    >>> with scipy_dispatch():
    ...     hasattr(scipy.ndimage.gaussian_filter, "__subzero_original__")
    True
    >>> x = np.arange(9.0).reshape(3, 3)
    >>> bool((scipy.ndimage.gaussian_filter(x, 1.0) == scipy.ndimage.gaussian_filter.__wrapped__(x, 1.0)).all())
    True
    """
    if _dispatch_modules != _imported():  # first use, or modules imported since the last binding
        with _DISPATCH_LOCK:
            if _dispatch_modules != _imported():
                try:
                    _patch()
                except BaseException:
                    _restore()
                    raise
    yield


# every function with scipy's output= also takes a symbolic array there (a library's np.empty_like)
for _name in __all__:
    _fn = globals()[_name]
    if inspect.isfunction(_fn) and "output" in inspect.signature(_fn).parameters:
        globals()[_name] = _writes_output(_fn)
del _name, _fn


for _name in [n for n in __all__ if n not in ("scipy_dispatch", "MissingFunctionError")]:
    globals()[_name] = _coarse_on_values(globals()[_name])

# every trace routes scipy.ndimage calls made inside libraries to these functions
add_trace_context(scipy_dispatch)

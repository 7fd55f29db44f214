"""scipy.ndimage's names and signatures over symbolic arrays (``from subzero import ndimage``),
as dask-image mirrors them: change the import, keep the code.

Each function adds the built-in operator with the same values and exact lineage (the
stencil of a filter, honouring the boundary ``mode``; a component and its ring for
`label`).  Outside a traced function, on numpy arrays, each one calls scipy itself, so a
function written with ``subzero.ndimage`` still runs eagerly.

Values and dtypes are scipy's: the output has the input's dtype.  A float64 input gives
scipy's values (to rounding; `uniform_filter` and `sobel` sum each cell's window apart, so
a NaN stays inside the windows that hold it); separable filters on float32 input match
scipy within float32 rounding.  Not supported (a `subzero.trace.errors.UnsupportedCallError`
says so): ``output=``, ``origin`` other than 0, ``axes=``, ``radius=``, ``mask=``,
`zoom` with ``order`` > 0 (spline interpolation reads whole lines after prefiltering).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from subzero import operators as ops
from subzero.operators import numeric
from subzero.trace.errors import UnsupportedCallError
from subzero.trace.building import add_node, astype
from subzero.trace.symbolic import SymbolicArray

__all__ = ["convolve", "correlate", "gaussian_filter", "uniform_filter", "median_filter", "maximum_filter",
           "minimum_filter", "laplace", "sobel", "binary_dilation", "binary_erosion", "label", "zoom"]


def _scipy(name: str, *args, **kwargs):
    from scipy import ndimage

    return getattr(ndimage, name)(*args, **kwargs)


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


def convolve(input, weights, output=None, mode="reflect", cval=0.0, origin=0):
    """``scipy.ndimage.convolve``: lineage is the weights' non-zero footprint."""
    if not isinstance(input, SymbolicArray):
        return _scipy("convolve", input, weights, output, mode, cval, origin)
    _check("convolve", output=output, origin=origin)
    return _stencil("convolve", ops.Convolve(np.asarray(weights), mode, cval), input)


def correlate(input, weights, output=None, mode="reflect", cval=0.0, origin=0):
    """``scipy.ndimage.correlate``: lineage is the weights' non-zero footprint."""
    if not isinstance(input, SymbolicArray):
        return _scipy("correlate", input, weights, output, mode, cval, origin)
    _check("correlate", output=output, origin=origin)
    return _stencil("correlate", ops.Correlate(np.asarray(weights), mode, cval), input)


def gaussian_filter(input, sigma, order=0, output=None, mode="reflect", cval=0.0, truncate=4.0, *, radius=None,
                    axes=None):
    """``scipy.ndimage.gaussian_filter``: lineage is the truncated kernel's box."""
    if not isinstance(input, SymbolicArray):
        return _scipy("gaussian_filter", input, sigma, order, output, mode, cval, truncate, radius=radius, axes=axes)
    _check("gaussian_filter", output=output, radius=radius, axes=axes)
    return _stencil("gaussian_filter", ops.GaussianFilter(sigma, order, mode, cval, truncate), input)


def uniform_filter(input, size=3, output=None, mode="reflect", cval=0.0, origin=0, *, axes=None):
    """``scipy.ndimage.uniform_filter``: lineage is the ``size`` box."""
    if not isinstance(input, SymbolicArray):
        return _scipy("uniform_filter", input, size, output, mode, cval, origin, axes=axes)
    _check("uniform_filter", output=output, origin=origin, axes=axes)
    return _stencil("uniform_filter", ops.UniformFilter(size, mode, cval), input)


def _rank(name: str, cls):
    def fn(input, size=None, footprint=None, output=None, mode="reflect", cval=0.0, origin=0, *, axes=None):
        if not isinstance(input, SymbolicArray):
            return _scipy(name, input, size, footprint, output, mode, cval, origin, axes=axes)
        _check(name, output=output, origin=origin, axes=axes)
        return _stencil(name, cls(size, footprint, mode, cval), input, same_dtype=False)
    fn.__name__ = name
    fn.__doc__ = f"``scipy.ndimage.{name}``: lineage is the ``size`` box or the footprint."
    return fn


median_filter = _rank("median_filter", ops.MedianFilter)
maximum_filter = _rank("maximum_filter", ops.MaximumFilter)
minimum_filter = _rank("minimum_filter", ops.MinimumFilter)


def laplace(input, output=None, mode="reflect", cval=0.0):
    """``scipy.ndimage.laplace``: a cell reads itself and its axis neighbours."""
    if not isinstance(input, SymbolicArray):
        return _scipy("laplace", input, output, mode, cval)
    _check("laplace", output=output)
    return _stencil("laplace", ops.Laplace(mode, cval), input)


def sobel(input, axis=-1, output=None, mode="reflect", cval=0.0):
    """``scipy.ndimage.sobel``: a cell reads its 3**ndim box but the plane normal to ``axis``."""
    if not isinstance(input, SymbolicArray):
        return _scipy("sobel", input, axis, output, mode, cval)
    _check("sobel", output=output)
    return _stencil("sobel", ops.Sobel(axis, mode, cval), input)


def _morphology(name: str, cls):
    def fn(input, structure=None, iterations=1, mask=None, output=None, border_value=0, origin=0,
           brute_force=False, *, axes=None):
        if not isinstance(input, SymbolicArray):
            return _scipy(name, input, structure, iterations, mask, output, border_value, origin, brute_force,
                          axes=axes)
        _check(name, mask=mask, output=output, origin=origin, axes=axes)
        node = add_node(cls(structure, iterations, border_value), [input], name, dtype=np.dtype(bool))
        return node
    fn.__name__ = name
    fn.__doc__ = f"``scipy.ndimage.{name}`` (``iterations`` >= 1): lineage is the structure grown by the iterations."
    return fn


binary_dilation = _morphology("binary_dilation", ops.BinaryDilation)
binary_erosion = _morphology("binary_erosion", ops.BinaryErosion)


def label(input, structure=None, output=None, *, lineage="component"):
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
    numbers = add_node(numeric.Relabel(lineage), [ids], "label_numbers", dtype=np.dtype(np.int32))
    count = add_node(numeric.GlobalReduction("max"), [numbers], "label_count", dtype=np.dtype(np.int32))
    return numbers, SymbolicArray(count.tracer, count.entry, (), count.dtype)


def zoom(input, zoom, output=None, order=3, mode="constant", cval=0.0, prefilter=True, *, grid_mode=False):
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

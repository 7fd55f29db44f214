"""numpy reductions, products, sorting and histograms on symbolic arrays (registered in
`subzero.trace.numpy_api.HANDLED`)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from subzero import operators as ops
from subzero.operator import Operator
from subzero.operators import numeric
from subzero.trace.errors import TraceError, UnsupportedCallError
from subzero.trace.building import HANDLED, _as_logical, _axes_of, _no_out, _plain, _reshaped, add_node, implements
from subzero.trace import numpy_shapes, numpy_stats
from subzero.trace.symbolic import SymbolicArray

__all__ = ["matmul", "outer"]


# -- reductions ----------------------------------------------------------------------------------------
#: the operator of a reduction over some axes: name -> ``cls(axes)``, or ``cls(axes, ddof)`` for `_DDOF`
_AXIS_OPS: dict[str, Callable[..., Operator]] = {
    "sum": ops.Sum, "mean": ops.Mean, "std": ops.Std, "min": ops.Min, "max": ops.Max, "count_nonzero": ops.Count,
    "nansum": numeric.NanSum, "nanmean": numeric.NanMean, "nanstd": numeric.NanStd, "nanmin": numeric.NanMin,
    "nanmax": numeric.NanMax, "any": numeric.AnyOf, "all": numeric.AllOf,
}
_DDOF = ("std", "nanstd", "var", "nanvar")
#: reductions a `subzero.operators.Statistic` computes over some axes (and, for the ones
#: `numeric.GlobalReduction` lacks, over every axis)
_STATISTICS = ("var", "nanvar", "prod", "nanprod", "ptp")


def _reduction(how: str, fn: Callable):
    def handler(a, axis=None, dtype=None, out=None, keepdims=False, ddof=0, **kwargs):
        _no_out(out, how)
        if dtype is not None or kwargs:
            extra = ", ".join(["dtype="] * (dtype is not None) + [f"{k}=" for k in kwargs])
            raise UnsupportedCallError(f"np.{how}(..., {extra}) is not supported on symbolic arrays; cast with "
                                       f".astype() first, or wrap the code with sz.udf")
        if not isinstance(a, SymbolicArray):
            raise UnsupportedCallError(f"np.{how}: the array must be symbolic here")
        ndim = a.ndim
        axes = tuple(range(ndim)) if axis is None else _axes_of(axis, ndim, how)
        probe = {"axis": axis, "keepdims": keepdims} | ({"ddof": ddof} if how in _DDOF else {})
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dtype_out = np.asarray(fn(np.ones((1,) * ndim, a.dtype), **probe)).dtype
        if how == "count_nonzero" and axis is None:
            dtype_out = np.dtype(np.intp)
        if how in _STATISTICS and (how not in numeric.REDUCTIONS or set(axes) != set(range(ndim))):
            params = {"ddof": ddof} if how in _DDOF else {}
            return numpy_stats.statistic(_plain(a), how, axis, keepdims, dtype=dtype_out, **params)
        if set(axes) == set(range(ndim)):
            op: Operator = (ops.GlobalMean() if how == "mean" else ops.GlobalStd(ddof) if how == "std"
                            else numeric.GlobalReduction(how, ddof))
            out_node = add_node(op, [a], how, dtype=dtype_out)
            shape = (1,) * ndim if keepdims else ()
            return SymbolicArray(a.tracer, out_node.entry, shape, dtype_out)
        if how not in _AXIS_OPS:
            keep = ", keepdims=True" if keepdims else ""
            extra = keep + (f", ddof={ddof!r}" if ddof and how in _DDOF else "")
            raise UnsupportedCallError(f"np.{how}(x, axis={axis!r}) over some axes has no subzero operator (over "
                                       f"every axis it has); wrap it: sz.udf(np.{how}, lineage=sz.Reduce(axis="
                                       f"{axis!r}{keep}))(x, axis={axis!r}{extra})")
        cls = _AXIS_OPS[how]
        op = cls(axes, ddof) if how in _DDOF else cls(axes)
        node = add_node(op, [_plain(a)], how, dtype=dtype_out)
        if keepdims:
            kept = tuple(1 if k in axes else n for k, n in enumerate(a.shape))
            return _as_logical(node, kept, "reshape")
        return node
    handler.__name__ = f"_{how}"
    return handler


#: the numpy functions of each reduction
_REDUCTION_FUNCTIONS: dict[str, list[Callable[..., Any]]] = {
    "sum": [np.sum], "mean": [np.mean], "std": [np.std], "var": [np.var], "min": [np.min, np.amin],
    "max": [np.max, np.amax], "prod": [np.prod], "any": [np.any], "all": [np.all],
    "count_nonzero": [np.count_nonzero], "nansum": [np.nansum], "nanmean": [np.nanmean], "nanstd": [np.nanstd],
    "nanmin": [np.nanmin], "nanmax": [np.nanmax], "nanvar": [np.nanvar], "nanprod": [np.nanprod], "ptp": [np.ptp],
}
for _how, _fns in _REDUCTION_FUNCTIONS.items():
    HANDLED.update({f: _reduction(_how, _fns[0]) for f in _fns})


# -- products ---------------------------------------------------------------------------------------------
@implements(np.matmul)
def matmul(a: Any, b: Any, out: Any = None, **kwargs: Any) -> SymbolicArray:
    """``np.matmul`` of two symbolic arrays, traced as a `MatMul` node."""
    _no_out(out, "matmul")
    a, b = _both_symbolic(a, b, "matmul")
    if a.ndim == 0 or b.ndim == 0:
        raise TraceError("matmul: input operand does not have enough dimensions (a 0-d array)")
    if a.ndim > 2 or b.ndim > 2:
        raise UnsupportedCallError("np.matmul of stacks of matrices (more than 2 axes) is not supported; use "
                                   "np.dot for 1-D and 2-D operands, or wrap the code with sz.udf")
    return _dot(a, b, base="matmul")


@implements(np.dot)
def _dot(a, b, out=None, base="dot"):
    _no_out(out, "dot")
    if a.ndim == 0 if isinstance(a, SymbolicArray) else np.ndim(a) == 0:
        return np.multiply(a, b)
    if b.ndim == 0 if isinstance(b, SymbolicArray) else np.ndim(b) == 0:
        return np.multiply(a, b)
    a, b = _both_symbolic(a, b, base)
    dtype = np.result_type(a.dtype, b.dtype)
    op = ops.MatMul() if a.ndim == 2 and b.ndim == 2 else ops.Dot()
    node = add_node(op, [_plain(a), _plain(b)], base, dtype=dtype)
    if a.ndim == 1 and b.ndim == 1:  # numpy's scalar: the (1,) node
        return SymbolicArray(node.tracer, node.entry, (), dtype)
    return node


@implements(np.outer)
def _np_outer(a, b, out=None):
    _no_out(out, "outer")
    a, b = _both_symbolic(a, b, "outer")
    return outer(numpy_shapes.ravel(a), numpy_shapes.ravel(b))


def outer(a: Any, b: Any) -> SymbolicArray:
    """``np.multiply.outer`` of two symbolic arrays, traced as an `Outer` node."""
    a, b = _both_symbolic(a, b, "multiply.outer")
    return add_node(ops.Outer(), [_plain(a), _plain(b)], "outer", dtype=np.result_type(a.dtype, b.dtype))


def _both_symbolic(a, b, name):
    if not (isinstance(a, SymbolicArray) and isinstance(b, SymbolicArray)):
        raise UnsupportedCallError(f"np.{name} of a symbolic array and a constant array is not supported; make "
                                   "the constant an input of the workflow, or wrap the code with sz.udf")
    return a, b


# -- sorting, histograms ---------------------------------------------------------------------------------
@implements(np.sort)
def _sort(a, axis=-1, kind=None, order=None, *, stable=None):
    return _along_lines(ops.Sort, "sort", a, axis, order, None)


@implements(np.argsort)
def _argsort(a, axis=-1, kind=None, order=None, *, stable=None):
    return _along_lines(ops.ArgSort, "argsort", a, axis, order, np.dtype(np.intp))


def _along_lines(op_class, name, a, axis, order, dtype):
    """np.sort / np.argsort: the operator along ``axis`` (the flattened array for None)."""
    if order is not None:
        raise UnsupportedCallError(f"np.{name}(..., order=) (structured arrays) is not supported")
    if axis is None:
        a, axis = numpy_shapes.ravel(a), 0
    return add_node(op_class(int(axis)), [_plain(a)], name, dtype=a.dtype if dtype is None else dtype)


@implements(np.histogram)
def _histogram(a, bins=10, range=None, density=None, weights=None):
    if density or weights is not None:
        n = int(bins) if isinstance(bins, (int, np.integer)) else len(np.asarray(bins)) - 1
        raise UnsupportedCallError(f"np.histogram(..., density=/weights=) is not supported; wrap it: sz.udf("
                                   f"np.histogram, lineage=('all', 'all'), shape=[({n},), ({n + 1},)])(a, bins, "
                                   "range=..., density=..., weights=...) (each output reads every cell)")
    if isinstance(bins, str):
        raise UnsupportedCallError(f"np.histogram(bins={bins!r}): give a number of bins or the edges")
    x = a if a.lead == 0 else _reshaped(a, (1,))
    counts = add_node(ops.Histogram(bins, range), [x], "histogram", dtype=np.dtype(np.intp))
    if not isinstance(bins, (int, np.integer)):
        return counts, np.asarray(bins)
    if range is not None:
        return counts, np.histogram_bin_edges(np.empty(0, a.dtype), bins, range)
    edge_dtype = np.histogram_bin_edges(np.ones(1, a.dtype), 1).dtype
    edges = add_node(numeric.HistogramEdges(int(bins)), [x], "histogram_edges", dtype=edge_dtype)
    return counts, edges

"""numpy on symbolic arrays: one small function per numpy function, each adding the built-in
operator with the same values and exact lineage (dask.array's ``@implements`` registry).

`apply_ufunc` handles every numpy ufunc called with ``__call__`` (``+``, ``np.sqrt``,
``np.isfinite``, comparisons...): the named elementwise operators where one fits (``Add``,
``SubtractScalar``, ``Threshold``...), else ``Apply`` of the ufunc with its constants.
`HANDLED` maps the other numpy functions to their handlers (`subzero.trace.numpy_math`:
reductions, products, sorting, histograms; `subzero.trace.numpy_shapes`: reshapes, joins,
indexing); a function missing from it raises `UnsupportedCallError` naming it and saying
how to wrap it with ``sz.udf``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import numpy as np

from subzero.trace import numpy_shapes  # noqa: F401  (its handlers register in HANDLED)
from subzero.trace import numpy_stats  # noqa: F401  (its handlers register in HANDLED)
from subzero.trace import symbolic
from subzero.trace.building import (HANDLED, _no_out, _plain, add_node, astype, elementwise, implements,
                                    supported)
from subzero.trace.errors import InPlaceError, TraceError, UnsupportedCallError
from subzero.trace.numpy_math import matmul, outer  # numpy_math's handlers register in HANDLED too
from subzero.trace.numpy_shapes import getitem
from subzero.trace.symbolic import SymbolicArray

__all__ = ["HANDLED", "apply_ufunc", "apply_function", "astype", "getitem", "add_node", "implements", "supported",
           "elementwise", "call_operator"]


def apply_ufunc(ufunc: np.ufunc, method: str, inputs: tuple, kwargs: dict):
    """``ufunc.method(*inputs, **kwargs)`` on symbolic arrays."""
    if kwargs.get("out") is not None:
        raise InPlaceError(f"np.{ufunc.__name__}(..., out=...) writes into an existing array, which a workflow "
                           "cannot record; use the returned array")
    kwargs = {k: v for k, v in kwargs.items() if k != "out"}
    if method == "__call__" and ufunc is np.matmul:
        return matmul(*inputs, **kwargs)
    if method == "__call__" and ufunc.signature is not None:
        raise UnsupportedCallError(f"np.{ufunc.__name__} (a generalized ufunc, {ufunc.signature}) is not supported "
                                   "on symbolic arrays; wrap it with sz.udf(fn, lineage=...)")
    if method == "__call__":
        if ufunc.nout != 1:
            raise UnsupportedCallError(f"np.{ufunc.__name__} returns {ufunc.nout} arrays; wrap it with "
                                       "sz.udf(fn, lineage='elementwise') per output")
        return elementwise(ufunc, inputs, kwargs, ufunc.__name__)
    if method == "outer" and ufunc is np.multiply and not kwargs:
        return outer(*inputs)
    if method == "at":
        raise InPlaceError(f"np.{ufunc.__name__}.at updates an array in place; build a new array instead")
    raise UnsupportedCallError(f"np.{ufunc.__name__}.{method} is not supported on symbolic arrays; use the "
                               f"numpy function (np.sum, np.max, np.cumsum...) or wrap it with sz.udf(fn, lineage=...)")


def apply_function(func: Callable, args: tuple, kwargs: dict):
    """``func(*args, **kwargs)`` on symbolic arrays through its handler (an `UnsupportedCallError` without one)."""
    handler = HANDLED.get(func)
    if handler is None:
        module = getattr(func, "__module__", "numpy") or "numpy"
        name = f"np.{func.__name__}" if module.startswith("numpy") else f"{module}.{func.__name__}"
        raise UnsupportedCallError(
            f"{name} is not supported on symbolic arrays (no subzero operator stands for it); wrap the code that "
            f"calls it: f = sz.udf(fn, lineage='elementwise' | sz.Window(radius=r) | sz.Lines(axis=a) | 'all' | "
            f"'infer') and call f(x) in the workflow")
    return handler(*args, **kwargs)


@implements(np.where)
def _where(condition, x=None, y=None):
    if x is None and y is None:
        raise UnsupportedCallError("np.where(condition) with one argument returns indices, whose number depends on "
                                   "values; use np.where(condition, x, y), or wrap the code with sz.udf")
    return elementwise(np.where, (condition, x, y), base="where")


@implements(np.clip)
def _clip(a, a_min=None, a_max=None, out=None, **kwargs):
    _no_out(out, "clip")
    lo = kwargs.pop("min", a_min)
    hi = kwargs.pop("max", a_max)
    return elementwise(np.clip, (a, lo, hi), kwargs, base="clip")


@implements(np.nan_to_num)
def _nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    return elementwise(np.nan_to_num, (x,), {"nan": nan, "posinf": posinf, "neginf": neginf}, base="nan_to_num")


@implements(np.round, np.around)
def _round(a, decimals=0, out=None):
    _no_out(out, "round")
    return elementwise(np.round, (a, decimals), base="round")


for _name in ("zeros_like", "ones_like", "empty_like"):
    def _bound(a, dtype=None, order="K", subok=True, shape=None, *, _fn=getattr(np, _name), device=None):
        kw = {} if dtype is None else {"dtype": dtype}
        if shape is not None:
            raise UnsupportedCallError(f"np.{_fn.__name__}(..., shape=) is not supported on symbolic arrays")
        return elementwise(_fn if _fn is not np.empty_like else np.zeros_like, (a,), kw, base=_fn.__name__)
    HANDLED[getattr(np, _name)] = _bound


@implements(np.full_like)
def _full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None, device=None):
    kw = {} if dtype is None else {"dtype": dtype}
    return elementwise(np.full_like, (a, fill_value), kw, base="full_like")


# -- an operator called on symbolic arrays ----------------------------------------------------------------------
def call_operator(op, arrays: Sequence[SymbolicArray], name: str | None = None, dtype=None) -> SymbolicArray:
    """``op`` applied to symbolic arrays as one node (``sz.apply``)."""
    if not arrays or not all(isinstance(a, SymbolicArray) for a in arrays):
        raise TraceError(f"sz.apply({type(op).__name__}, ...) needs symbolic arrays of the traced function")
    dtype = np.dtype(dtype) if dtype is not None else np.result_type(*[a.dtype for a in arrays])
    node = add_node(op, [_plain(a) for a in arrays], type(op).__name__.lower(), dtype=dtype)
    if name is not None:
        from subzero.trace.naming import name as _name
        _name(node, name)
    return node


# symbolic arrays answer numpy's protocols through this module's functions
symbolic.use_handlers(sys.modules[__name__])

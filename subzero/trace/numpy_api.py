"""numpy on symbolic arrays: one small function per numpy function, each adding the built-in
operator with the same values and exact lineage (dask.array's ``@implements`` registry).

`apply_ufunc` handles every numpy ufunc called with ``__call__`` (``+``, ``np.sqrt``,
``np.isfinite``, comparisons...): the named elementwise operators where one fits (``Add``,
``SubtractScalar``, ``Threshold``...), else ``Apply`` of the ufunc with its constants.
`HANDLED` maps the other numpy functions to their handlers (`subzero.trace.numpy_math`:
reductions, products, sorting, histograms; `subzero.trace.numpy_shapes`: reshapes, joins,
basic indexing; `subzero.trace.numpy_indexing`: indexing by values and in-place updates).
A function missing from it runs on this run's values as a coarse step
(`subzero.trace.coarse`), labelled with the reason and the user's line.
"""

from __future__ import annotations

import copy
import dis
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from subzero.operator import Operator
from subzero.trace import numpy_shapes  # noqa: F401  (its handlers register in HANDLED)
from subzero.trace import numpy_stats  # noqa: F401  (its handlers register in HANDLED)
from subzero.trace import symbolic
from subzero.trace.building import (HANDLED, _no_out, _plain, add_node, astype, elementwise, implements,
                                    supported)
from subzero.trace.coarse import coarse_call, leaves
from subzero.trace.errors import TraceError, UnsupportedCallError
from subzero.trace.numpy_indexing import getitem, setitem, write_out
from subzero.trace.numpy_math import matmul, outer  # numpy_math's handlers register in HANDLED too
from subzero.trace.symbolic import SymbolicArray

__all__ = ["HANDLED", "apply_ufunc", "apply_function", "astype", "getitem", "setitem", "add_node",
           "implements", "supported", "elementwise", "call_operator"]

#: ``ufunc.reduce`` as the numpy reduction it is
_REDUCE: dict[np.ufunc, Callable[..., Any]] = {np.add: np.sum, np.multiply: np.prod, np.maximum: np.max, np.minimum: np.min, np.logical_or: np.any,
           np.logical_and: np.all, np.fmax: np.nanmax, np.fmin: np.nanmin}


def apply_ufunc(ufunc: np.ufunc, method: str, inputs: tuple, kwargs: dict) -> Any:
    """``ufunc.method(*inputs, **kwargs)`` on symbolic arrays; ``out=`` (and ``where=`` with
    it) writes into the output array as numpy does."""
    out = kwargs.pop("out", None)
    if out is not None:
        outs = out if isinstance(out, tuple) else (out,)
        holders = sys.getrefcount(outs[0])  # compared with a lone name's (`_rebinding`): keep this line first
        where = kwargs.pop("where", True)
        result = apply_ufunc(ufunc, method, inputs, kwargs)
        results = result if isinstance(result, tuple) else (result,)
        first = results[0]
        if _rebinding(method, inputs, outs, where, first, holders):
            # ``a op= x`` on a numpy ``a`` no other name holds: Python binds ``a`` to what this returns and
            # the array is gone, so nothing can see values written into it (none computed, none leaked)
            return first if first.dtype == outs[0].dtype else astype(first, outs[0].dtype)
        for o, r in zip(outs, results):
            if o is None:
                continue
            if not (isinstance(where, bool) and where):
                r = np.where(where, r, o)
            write_out(ufunc, r, o)
        if method == "__call__" and len(outs) == 1 and isinstance(outs[0], np.ndarray) and inputs and \
                inputs[0] is outs[0] and isinstance(first, SymbolicArray) and first.shape == outs[0].shape:
            # ``a op= x`` on a numpy array ``a`` (numpy calls ``ufunc(a, x, out=(a,))``): ``a`` received the values,
            # and Python binds the name to what this returns: the traced result, so the code stays exact
            return (first if first.dtype == outs[0].dtype else astype(first, outs[0].dtype)).backed_by(outs[0])
        return outs if isinstance(out, tuple) and len(outs) > 1 else outs[0]
    if method == "__call__" and ufunc is np.matmul:
        return matmul(*inputs, **kwargs)
    if method == "__call__" and (ufunc.signature is not None or ufunc.nout != 1 or "where" in kwargs):
        return coarse_call(ufunc, inputs, kwargs, "a generalized or multi-output ufunc (or one with where=) has no "
                           "exact rule here: a coarse step", base=ufunc.__name__)
    if method == "__call__":
        return elementwise(ufunc, inputs, kwargs, ufunc.__name__)
    if method == "outer" and ufunc is np.multiply and not kwargs:
        return outer(*inputs)
    if method == "reduce" and ufunc in _REDUCE and len(inputs) == 1:
        axis = kwargs.pop("axis", 0)
        return _REDUCE[ufunc](inputs[0], axis=axis, **kwargs)
    if method == "at":
        target = inputs[0]
        result = coarse_call(_ufunc_at(ufunc), inputs, kwargs, f"np.{ufunc.__name__}.at: a coarse step",
                             base=f"{ufunc.__name__}_at")
        if isinstance(target, SymbolicArray):
            target.rebind(result)
            return None
        write_out(ufunc, result, target)
        return None
    return coarse_call(getattr(ufunc, method), inputs, kwargs, f"np.{ufunc.__name__}.{method} has no exact rule here: "
                       "a coarse step", base=f"{ufunc.__name__}_{method}")


#: the in-place binary operators (``+=``...): ``BINARY_OP``'s arguments from ``NB_INPLACE_ADD`` on (Python 3.11+)
_BINARY_OP = dis.opmap.get("BINARY_OP")
_INPLACE_ARGS = frozenset(k for k, (name, _) in enumerate(getattr(dis, "_nb_ops", ())) if name.startswith("NB_INPLACE"))
#: `apply_ufunc`'s count of the references to ``a`` in ``a += x`` when one name alone holds ``a`` (measured once)
_lone: list[int] = []
#: while that is measured: (the measuring thread, the counts seen)
_measuring: tuple[int, list[int]] | None = None
_measure_lock = threading.Lock()


def _rebinding(method: str, inputs: tuple, outs: tuple, where: Any, result: Any, holders: int) -> bool:
    """Whether ``ufunc(a, x, out=(a,))`` is Python's ``a op= x`` on a numpy array ``a`` that one name
    alone holds (no other name, no view of it, no container): the name is bound to the returned
    array next, so values written into ``a`` could never be read.  Told by the caller's instruction
    (an in-place ``BINARY_OP``) and ``a``'s reference count (``holders``, against a lone name's,
    measured once through this same path); anything else is not (numpy's own writes then)."""
    a = outs[0]
    if not (method == "__call__" and len(outs) == 1 and type(a) is np.ndarray and inputs and inputs[0] is a
            and a.base is None and isinstance(where, bool) and where and isinstance(result, SymbolicArray)
            and result.shape == a.shape and np.can_cast(result.dtype, a.dtype, "same_kind")
            and _BINARY_OP is not None and _INPLACE_ARGS):
        return False
    frame = sys._getframe(3)  # _rebinding <- apply_ufunc <- SymbolicArray.__array_ufunc__ <- the caller
    code, at = frame.f_code.co_code, frame.f_lasti
    if not (0 <= at < len(code) - 1 and code[at] == _BINARY_OP and code[at + 1] in _INPLACE_ARGS):
        return False
    measuring = _measuring
    if measuring is not None and measuring[0] == threading.get_ident():
        measuring[1].append(holders)
        return False
    if not _lone:
        _measure_lone()
    return bool(_lone) and holders <= _lone[0]


def _measure_lone() -> None:
    """Measure `apply_ufunc`'s ``holders`` for ``a += x`` on an array a local name alone holds
    (on a tracer of its own) into `_lone`."""
    global _measuring
    from subzero.trace.tracer import Tracer

    with _measure_lock:
        if _lone:
            return
        tracer = Tracer("refcount")
        x = SymbolicArray(tracer, tracer.input("x", (2,), np.zeros(2)), (2,), np.float64)
        _measuring = (threading.get_ident(), [])
        try:
            a = np.arange(2.0)
            a += x
            seen = _measuring[1]
        finally:
            _measuring = None
        if len(seen) == 1:
            _lone.append(seen[0])


class _UfuncAt:
    """``ufunc.at`` as a function returning the updated copy (picklable)."""

    def __init__(self, ufunc: np.ufunc):
        self.ufunc = ufunc

    def __call__(self, a, *args, **kwargs):
        a = np.array(a, copy=True)
        self.ufunc.at(a, *args, **kwargs)
        return a

    @property
    def __name__(self) -> str:
        return f"{self.ufunc.__name__}.at"


def _ufunc_at(ufunc: np.ufunc) -> _UfuncAt:
    return _UfuncAt(ufunc)


def apply_function(func: Callable, args: tuple, kwargs: dict) -> Any:
    """``func(*args, **kwargs)`` on symbolic arrays through its handler (a coarse step without one)."""
    handler = HANDLED.get(func)
    if handler is None:
        return coarse_call(func, args, kwargs, "no exact lineage rule for this call: a coarse step (every output cell "
                           "depends on every cell it read); wrap it with sz.udf(fn, lineage=...) to declare one")
    try:
        return handler(*args, **kwargs)
    except UnsupportedCallError as exc:  # arguments the operator cannot take: the call runs on values instead
        tracer = next(x.tracer for x in leaves((args, kwargs)))
        if not tracer.has_values():
            raise
        return coarse_call(func, args, kwargs, f"no exact rule for these arguments ({exc.reason})")


@implements(np.where)
def _where(condition, x=None, y=None):
    if x is None and y is None:
        return np.nonzero(condition)
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


@implements(np.real)
def _real(val):
    return val if val.dtype.kind != "c" else elementwise(np.real, (val,), base="real")


@implements(np.imag)
def _imag(val):
    return elementwise(np.imag, (val,), base="imag")


# -- an operator called on symbolic arrays ----------------------------------------------------------------------
def call_operator(op: Operator, arrays: Sequence[SymbolicArray], name: str | None = None,
                  dtype: DTypeLike | None = None) -> SymbolicArray:
    """``op`` applied to symbolic arrays as one node (``sz.apply``)."""
    if not arrays or not all(isinstance(a, SymbolicArray) for a in arrays):
        raise TraceError(f"sz.apply({type(op).__name__}, ...) needs symbolic arrays of the traced function")
    dtype = np.dtype(dtype) if dtype is not None else np.result_type(*[a.dtype for a in arrays])
    # a copy: the trace's nodes carry operators of their own (the user's is neither shared nor written)
    node = add_node(copy.copy(op), [_plain(a) for a in arrays], type(op).__name__.lower(), dtype=dtype)
    if name is not None:
        from subzero.trace.naming import name as _name
        _name(node, name)
    return node


# symbolic arrays answer numpy's protocols through this module's functions
symbolic.use_handlers(sys.modules[__name__])

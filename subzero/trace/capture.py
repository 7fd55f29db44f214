"""numpy calls that take no array, seen from inside a trace.

``np.zeros``/``ones``/``empty``/``full`` and ``np.array([...])`` of a list in the user's code
(`subzero.trace.errors.is_user_frame`) give a captured constant as a symbolic array, so that writing traced values into it
(``out = np.zeros((n, 12)); out[i, :] = row``) records exact lineage rather than turning the
row into numpy values.  ``np.asarray``/``np.array``/``np.asanyarray`` of a symbolic array (in the
user's code or in a library's, e.g. astropy's ``np.asanyarray(data)``) give a symbolic array, and
of a list of them a stacked one, so a library that converts its input keeps tracing.

numpy dispatches none of these through ``__array_function__``, so while a trace runs
(`numpy_calls`) the ``numpy`` module's functions are replaced by wrappers that fall through
to numpy's own whenever no trace is under way in the calling context or no symbolic array is
involved; numpy's functions are restored when the trace ends.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, cast

import numpy as np

from subzero.trace.errors import is_user_frame, user_line
from subzero.trace.symbolic import SymbolicArray
from subzero.trace.tracer import current_tracer

__all__ = ["numpy_calls"]

_CREATE = ("zeros", "ones", "empty", "full")
_CONVERT = {"asarray": False, "asanyarray": False, "array": True, "ascontiguousarray": False}
#: libraries that keep the arrays they convert in containers of their own (a DataFrame): they get
#: values, and what they compute enters the trace as a coarse step over them
_CONTAINERS = ("pandas.",)
_lock = threading.Lock()
_depth = 0
_originals: dict[str, Callable[..., Any]] = {}


def _creator(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def create(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        if not isinstance(out, np.ndarray) or out.size <= 1:  # first the tests that cost nothing
            return out
        tracer = current_tracer()
        if tracer is None or not is_user_frame(sys._getframe(1)):
            return out
        if name == "empty":  # numpy's values are undefined: the trace's are zeros, the same in every run
            out = np.zeros_like(out)
        return SymbolicArray(tracer, tracer.constant(out, user_line(), owned=True), out.shape, out.dtype)

    return create


def _has_symbolic(value: Any) -> bool:
    if isinstance(value, SymbolicArray):
        return True
    return isinstance(value, (list, tuple)) and any(_has_symbolic(v) for v in value)


def _converter(original: Callable[..., Any], copies: bool) -> Callable[..., Any]:
    @functools.wraps(original)
    def convert(a: Any, dtype: Any = None, *args: Any, **kwargs: Any) -> Any:
        if type(a) is np.ndarray:  # numpy's own array (most calls, subzero's among them): numpy's answer
            return original(a, dtype, *args, **kwargs)
        tracer = current_tracer()
        if tracer is None:
            return original(a, dtype, *args, **kwargs)
        if not _has_symbolic(a):
            out = original(a, dtype, *args, **kwargs)
            if copies and isinstance(a, (list, tuple)) and isinstance(out, np.ndarray) and out.size > 1 \
                    and out.dtype != object and is_user_frame(sys._getframe(1)):
                # an array the user writes down (np.array([...])): a captured constant, so indexing it
                # with traced values (sizes[labels]) or writing into it keeps exact lineage
                return SymbolicArray(tracer, tracer.constant(out, user_line(), owned=True), out.shape, out.dtype)
            return out
        if sys._getframe(1).f_globals.get("__name__", "").startswith(_CONTAINERS):
            return original(a, dtype, *args, **kwargs)  # values: the array's __array__ records the leak
        out = _stacked(a) if not isinstance(a, SymbolicArray) else (a.copy() if copies else a)
        if dtype is not None and np.dtype(dtype) != out.dtype:
            out = out.astype(dtype)
        return out

    return convert


def _stacked(items: Any) -> SymbolicArray:
    """``np.array([...])`` of nested lists holding symbolic arrays: one stacked array."""
    if isinstance(items, SymbolicArray):
        return items
    parts = [_stacked(v) if _has_symbolic(v) else v for v in items]
    tracer = next(p for p in parts if isinstance(p, SymbolicArray)).tracer
    like = next(p for p in parts if isinstance(p, SymbolicArray))
    dtype = np.result_type(*[p.dtype if isinstance(p, SymbolicArray) else np.asarray(p).dtype for p in parts])
    nodes = []
    for p in parts:
        if not isinstance(p, SymbolicArray):
            value = np.broadcast_to(np.asarray(p, dtype), like.shape).copy()
            entry = tracer.constant(value.reshape(value.shape or (1,)), user_line(), owned=True)
            p = SymbolicArray(tracer, entry, value.shape, value.dtype)
        nodes.append(p.astype(dtype))
    return cast(SymbolicArray, np.stack(nodes))


@contextlib.contextmanager
def numpy_calls() -> Iterator[None]:
    """While active, numpy's array-creating and converting functions see symbolic arrays
    (module docstring); re-entrant, restored on exit."""
    global _depth
    with _lock:
        if _depth == 0:
            for name in _CREATE:
                _originals[name] = getattr(np, name)
                setattr(np, name, _creator(name, _originals[name]))
            for name, copies in _CONVERT.items():
                _originals[name] = getattr(np, name)
                setattr(np, name, _converter(_originals[name], copies))
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                for name, fn in _originals.items():
                    setattr(np, name, fn)
                _originals.clear()

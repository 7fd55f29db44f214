"""Picklable numpy calls with constants, for `subzero.operators.Apply` nodes.

A traced ``np.where(m, x, 0.0)`` becomes ``Apply(NumpyCall(np.where, (ARG, ARG, 0.0)), nin=2)``:
the call's symbolic arguments are the node's inputs, in order; everything else is kept
as given (Python scalars stay Python scalars, so numpy's dtype rules are the eager ones).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["ARG", "NumpyCall", "astype", "shared_call"]


class _Arg:
    """Placeholder for the next input array of a `NumpyCall`."""

    def __repr__(self) -> str:
        return "ARG"

    def __reduce__(self):
        return "ARG"


ARG = _Arg()


def astype(x: np.ndarray, dtype: str) -> np.ndarray:
    """``x.astype(dtype)`` as a function (for `NumpyCall`)."""
    return np.asarray(x).astype(dtype)


def _count(template: Any) -> int:
    """The number of `ARG` placeholders in ``template`` (nested in lists, tuples and dicts)."""
    if template is ARG:
        return 1
    if isinstance(template, (list, tuple)):
        return sum(_count(t) for t in template)
    if isinstance(template, dict):
        return sum(_count(t) for t in template.values())
    return 0


def _fill(template: Any, arrays: Any) -> Any:
    """``template`` with each `ARG` replaced by the next of ``arrays`` (an iterator)."""
    if template is ARG:
        return next(arrays)
    if isinstance(template, tuple):
        return tuple(_fill(t, arrays) for t in template)
    if isinstance(template, list):
        return [_fill(t, arrays) for t in template]
    if isinstance(template, dict):
        return {k: _fill(v, arrays) for k, v in template.items()}
    return template


class NumpyCall:
    """``fn(*args, **kwargs)`` with each `ARG` in ``args`` (or ``kwargs`` values, nested in
    lists, tuples and dicts) replaced by the next array given.

    Examples
    --------
    >>> NumpyCall(np.clip, (ARG, 0.0, None))(np.array([-1.0, 2.0]))
    array([0., 2.])
    """

    def __init__(self, fn: Callable[..., Any], args: tuple = (), kwargs: dict | None = None):
        self.fn, self.args, self.kwargs = fn, tuple(args), dict(kwargs or {})
        self.nin = _count(self.args) + _count(list(self.kwargs.values()))

    def __call__(self, *arrays: np.ndarray) -> Any:
        it = iter(arrays)
        args = _fill(self.args, it)
        kwargs = {k: _fill(v, it) for k, v in self.kwargs.items()}
        return self.fn(*args, **kwargs)

    def into(self, out: np.ndarray, *arrays: np.ndarray) -> Any:
        """The call with ``out=out`` added (for a ufunc, which then computes into ``out``)."""
        it = iter(arrays)
        args = _fill(self.args, it)
        kwargs = {k: _fill(v, it) for k, v in self.kwargs.items()}
        return self.fn(*args, **kwargs, out=out)

    @property
    def __name__(self) -> str:  # Apply's repr and error messages
        return getattr(self.fn, "__name__", type(self.fn).__name__)

    def __repr__(self) -> str:
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.__name__}({', '.join(parts)})"


#: calls made by `shared_call`, by what they compute (bounded: cleared when full)
_SHARED: dict[tuple, NumpyCall] = {}
_SHARED_MAX = 512


def _constant_key(value: Any) -> tuple | None:
    """A key telling ``value`` apart from every other constant (its type, and its repr for a
    float, so that ``-0.0`` is not ``0.0``), or None when it is not a plain constant."""
    kind = type(value)
    if value is ARG or kind in (bool, int, str, type(None)):
        return (kind, value)
    if kind in (float, complex):
        return (kind, repr(value))
    return None


def shared_call(fn: Callable[..., Any], args: tuple, kwargs: dict) -> NumpyCall:
    """``NumpyCall(fn, args, kwargs)``, the same object for every call of the same numpy
    function with the same constants (`ARG`, Python numbers, strings, None): a traced
    workflow's hundreds of ``np.log(ARG)`` share one call, whose digest a run's fingerprint
    then makes once.  A call is never changed once made, so sharing it changes no result.

    Examples
    --------
    >>> shared_call(np.log, (ARG,), {}) is shared_call(np.log, (ARG,), {})
    True
    >>> shared_call(np.maximum, (ARG, 0.0), {}) is shared_call(np.maximum, (ARG, -0.0), {})
    False
    """
    parts = [_constant_key(a) for a in args] + [_constant_key(v) for v in kwargs.values()]
    try:
        key: tuple | None = None if None in parts else (fn, tuple(parts), tuple(kwargs))
        got = None if key is None else _SHARED.get(key)
    except TypeError:  # an unhashable function
        key = got = None
    if got is None:
        got = NumpyCall(fn, args, kwargs)
        if key is not None:
            if len(_SHARED) >= _SHARED_MAX:
                _SHARED.clear()
            _SHARED[key] = got
    return got


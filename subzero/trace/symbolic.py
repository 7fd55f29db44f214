"""The symbolic array: what a traced function's parameters and numpy calls return.

It is tiny (JAX's tracer, dask's array without chunks): the entry of the node it stands
for, its shape and its dtype, which are numpy's for the same call on real arrays.  numpy
calls reach `subzero.trace.numpy_api` through ``__array_ufunc__`` and
``__array_function__``; whatever a symbolic array cannot do (Python control flow on its
values, ``np.asarray``, in-place updates) raises a `subzero.trace.errors.TraceError`
naming the user's line and the fix.

A 0-d value (``np.mean(x)``) is stored as a node of one cell with every axis of length 1
(``keepdims``), since lineage needs cells with coordinates: ``entry.shape`` may have
leading 1-axes that ``shape`` lacks; numpy's broadcasting makes them invisible.
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any, Callable, Protocol

import numpy as np

from subzero.cells import ArrayShape
from subzero.trace.errors import ControlFlowError, ConversionError, InPlaceError, UnsupportedCallError
from subzero.trace.tracer import Entry, Tracer

__all__ = ["SymbolicArray", "NumpyHandlers", "use_handlers"]


class NumpyHandlers(Protocol):
    """What answers numpy's protocols on symbolic arrays (`subzero.trace.numpy_api`, which
    installs itself with `use_handlers` when the trace package is imported): passed in, so
    this module, which the handlers build on, imports none of them."""

    def apply_ufunc(self, ufunc: np.ufunc, method: str, inputs: tuple, kwargs: dict) -> Any:
        """Answer ``ufunc.method(*inputs, **kwargs)``."""

    def apply_function(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """Answer ``func(*args, **kwargs)`` (``__array_function__``)."""

    def getitem(self, x: "SymbolicArray", key: Any) -> Any:
        """Answer ``x[key]``."""

    def astype(self, x: "SymbolicArray", dtype: Any) -> Any:
        """Answer ``x.astype(dtype)``."""


_handlers: NumpyHandlers | None = None


def use_handlers(handlers: NumpyHandlers) -> None:
    """Make ``handlers`` answer numpy calls on every symbolic array."""
    global _handlers
    _handlers = handlers


def _numpy() -> NumpyHandlers:
    if _handlers is None:  # pragma: no cover - importing subzero.trace installs them
        raise RuntimeError("numpy's handlers for symbolic arrays are not installed: import subzero.trace")
    return _handlers


def _numpy_method(name: str) -> Callable[..., Any]:
    """The ndarray method ``name`` of a symbolic array: numpy's function of that name on it,
    with the same arguments after the array (traced through ``__array_function__``)."""
    fn = getattr(np, name)

    def method(self, *args: Any, **kwargs: Any) -> Any:
        return fn(self, *args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"``np.{name}(x, ...)``, traced: the arguments of ``ndarray.{name}``."
    return method


class SymbolicArray(ArrayShape):
    """An array of a traced function: its node, shape and dtype, no values."""

    __slots__ = ("tracer", "entry", "shape", "dtype")
    __array_priority__ = 1000

    def __init__(self, tracer: Tracer, entry: Entry, shape: tuple[int, ...], dtype):
        self.tracer, self.entry = tracer, entry
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)

    # -- what numpy arrays say about themselves --------------------------------------------------
    @property
    def lead(self) -> int:
        """Leading 1-axes of the node that the array lacks (0-d values)."""
        return len(self.entry.shape) - len(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of unsized object (a 0-d symbolic array)")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"<symbolic {self.entry.name or self.entry.base} shape={self.shape} dtype={self.dtype}>"

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d symbolic array")
        return (self[k] for k in range(self.shape[0]))

    # -- numpy's protocols -------------------------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return _numpy().apply_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return _numpy().apply_function(func, args, kwargs)

    def __array__(self, dtype=None, copy=None):
        caller = _library_caller()
        hint = "; compute with numpy calls on it, or wrap the code that needs values with sz.udf(fn, lineage=...)"
        if caller.startswith("scipy.ndimage."):
            hint = f"; use subzero.ndimage.{caller.rsplit('.', 1)[1]} (same name and signature)"
        elif caller:
            hint = f" (inside {caller}); wrap the call with sz.udf(fn, lineage=...)"
        raise ConversionError(
            f"{self!r} has no values at trace time: np.asarray() / np.array() / a library that converts its "
            f"input cannot turn it into a numpy array{hint}")

    # -- Python control flow and conversions: values are unknown while tracing -------------------
    def _no_value(self, what: str):
        raise ControlFlowError(
            f"{what} needs the value of {self!r}, which is not known while the workflow is traced; "
            "compute both branches and pick with np.where(cond, a, b), or move the code into a "
            "function wrapped with sz.udf(fn, lineage=...)")

    def __bool__(self):
        self._no_value("Python control flow on an array (if/while/and/or/not, bool())")

    def __int__(self):
        self._no_value("int()")

    def __float__(self):
        self._no_value("float()")

    def __complex__(self):
        self._no_value("complex()")

    def __index__(self):
        self._no_value("using an array as an index or a count (range(), list index)")

    def item(self, *args: Any) -> Any:
        """Refused: a symbolic array has no values."""
        self._no_value(".item()")

    def tolist(self) -> Any:
        """Refused: a symbolic array has no values."""
        self._no_value(".tolist()")

    # -- in-place updates ----------------------------------------------------------------------------
    def __setitem__(self, key, value):
        raise InPlaceError("x[...] = value updates an array in place, which a workflow cannot record; "
                           "build a new array: x = np.where(mask, value, x), or np.pad/np.concatenate for parts")

    def _in_place(self, op: str):
        raise InPlaceError(f"x {op}= y updates an array in place, which a workflow cannot record; "
                           f"write x = x {op} y")

    def __iadd__(self, o): self._in_place("+")
    def __isub__(self, o): self._in_place("-")
    def __imul__(self, o): self._in_place("*")
    def __itruediv__(self, o): self._in_place("/")
    def __ifloordiv__(self, o): self._in_place("//")
    def __imod__(self, o): self._in_place("%")
    def __ipow__(self, o): self._in_place("**")
    def __imatmul__(self, o): self._in_place("@")
    def __iand__(self, o): self._in_place("&")
    def __ior__(self, o): self._in_place("|")
    def __ixor__(self, o): self._in_place("^")

    def fill(self, value: Any) -> None:
        """Refused: an in-place update (`InPlaceError`)."""
        raise InPlaceError("x.fill(v) updates an array in place; write x = np.full_like(x, v) outside the workflow, "
                           "or x * 0 + v")

    def sort(self, *args: Any, **kwargs: Any) -> None:
        """Refused: an in-place sort (`InPlaceError`); use ``np.sort``."""
        raise InPlaceError("x.sort() sorts in place; write x = np.sort(x, axis)")

    # -- operators ---------------------------------------------------------------------------------
    def __add__(self, o): return np.add(self, o)
    def __radd__(self, o): return np.add(o, self)
    def __sub__(self, o): return np.subtract(self, o)
    def __rsub__(self, o): return np.subtract(o, self)
    def __mul__(self, o): return np.multiply(self, o)
    def __rmul__(self, o): return np.multiply(o, self)
    def __truediv__(self, o): return np.true_divide(self, o)
    def __rtruediv__(self, o): return np.true_divide(o, self)
    def __floordiv__(self, o): return np.floor_divide(self, o)
    def __rfloordiv__(self, o): return np.floor_divide(o, self)
    def __mod__(self, o): return np.remainder(self, o)
    def __rmod__(self, o): return np.remainder(o, self)
    def __pow__(self, o): return np.power(self, o)
    def __rpow__(self, o): return np.power(o, self)
    def __matmul__(self, o): return np.matmul(self, o)
    def __rmatmul__(self, o): return np.matmul(o, self)
    def __and__(self, o): return np.bitwise_and(self, o)
    def __rand__(self, o): return np.bitwise_and(o, self)
    def __or__(self, o): return np.bitwise_or(self, o)
    def __ror__(self, o): return np.bitwise_or(o, self)
    def __xor__(self, o): return np.bitwise_xor(self, o)
    def __rxor__(self, o): return np.bitwise_xor(o, self)
    def __invert__(self): return np.invert(self)
    def __neg__(self): return np.negative(self)
    def __pos__(self): return np.positive(self)
    def __abs__(self): return np.absolute(self)
    def __lt__(self, o): return np.less(self, o)
    def __le__(self, o): return np.less_equal(self, o)
    def __gt__(self, o): return np.greater(self, o)
    def __ge__(self, o): return np.greater_equal(self, o)
    def __eq__(self, o): return np.equal(self, o)
    def __ne__(self, o): return np.not_equal(self, o)
    __hash__ = object.__hash__

    # -- methods -----------------------------------------------------------------------------------
    def __getitem__(self, key):
        return _numpy().getitem(self, key)

    @property
    def T(self) -> Any:
        """``np.transpose(x)``, traced."""
        return np.transpose(self)

    def transpose(self, *axes: Any) -> Any:
        """``np.transpose(x, axes)``, traced."""
        return np.transpose(self, axes[0] if len(axes) == 1 and not isinstance(axes[0], int) else (axes or None))

    def reshape(self, *shape, order="C") -> Any:
        """``np.reshape(x, shape)``, traced."""
        return np.reshape(self, shape[0] if len(shape) == 1 else shape, order=order)

    ravel, flatten, squeeze, swapaxes = (_numpy_method(n) for n in ("ravel", "ravel", "squeeze", "swapaxes"))
    sum, mean, std, var, prod = (_numpy_method(n) for n in ("sum", "mean", "std", "var", "prod"))
    min, max, any, all = (_numpy_method(n) for n in ("min", "max", "any", "all"))
    argsort, dot, round = (_numpy_method(n) for n in ("argsort", "dot", "round"))

    def astype(self, dtype: Any, copy: bool = True) -> Any:
        """The array as ``dtype`` (a traced cast)."""
        return _numpy().astype(self, dtype)

    def copy(self) -> "SymbolicArray":
        """The array itself: symbolic arrays are never updated in place."""
        return self

    def clip(self, min: Any = None, max: Any = None) -> Any:
        """``np.clip(x, min, max)``, traced."""
        return np.clip(self, min, max)

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("__") and hasattr(np.ndarray, name):
            raise UnsupportedCallError(f"ndarray.{name} is not supported on a symbolic array; wrap the code that "
                                       "needs it with sz.udf(fn, lineage=...)")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


def _library_caller() -> str:
    """``module.function`` of the innermost numpy/scipy frame calling ``__array__``, or ''."""
    frame: FrameType | None = sys._getframe(2)
    found = ""
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith(("scipy.", "numpy.")) or module in ("scipy", "numpy"):
            name = frame.f_code.co_name
            found = f"{module.split('._')[0]}.{name}" if not name.startswith("_") else found or f"{module}.{name}"
        elif found:
            break
        frame = frame.f_back
    return found

"""The symbolic array: what a traced function's parameters and numpy calls return.

It is tiny (JAX's tracer, dask's array without chunks): the entry of the node it stands
for, its shape and its dtype, which are numpy's for the same call on real arrays.  numpy
calls reach `subzero.trace.numpy_api` through ``__array_ufunc__`` and
``__array_function__``.

When Python asks for a value (``if``, ``int()``, ``len`` of a data-dependent result, a
library converting its input), a trace over real inputs computes it (`Tracer.value`) and
goes on: the workflow is the path this run took.  In-place updates (``x[mask] = v``,
``x += y``, ``out=``) rebind the array to a new node, and writes through a view (a basic
slice, a reshape, a transpose) reach the array it views, as in numpy (functionalization:
each view keeps how to read itself from its parent and how to write itself back).

A 0-d value (``np.mean(x)``) is stored as a node of one cell with every axis of length 1
(``keepdims``), since lineage needs cells with coordinates: ``entry.shape`` may have
leading 1-axes that ``shape`` lacks; numpy's broadcasting makes them invisible.
"""

from __future__ import annotations

import operator
import sys
import weakref
from types import FrameType
from typing import Any, Callable, Protocol, cast

import numpy as np

from subzero.cells import ArrayShape
from subzero.trace.errors import ControlFlowError, ConversionError, InPlaceError, UnsupportedCallError, user_line
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

    def setitem(self, x: "SymbolicArray", key: Any, value: Any) -> None:
        """Answer ``x[key] = value`` (rebinding ``x``)."""


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


class View:
    """How a view reads itself from its parent (``forward``) and writes a new value of itself
    back into the parent (``backward(parent, new) -> new parent``)."""

    __slots__ = ("parent", "forward", "backward", "derived_from", "depth")

    #: views of views deeper than this are copies (a loop of ``x = x[1:]`` must not build a chain
    #: every read walks); writing through such a view is refused
    MAX_DEPTH = 16

    def __init__(self, parent: "SymbolicArray", forward: Callable[["SymbolicArray"], "SymbolicArray"],
                 backward: Callable[["SymbolicArray", "SymbolicArray"], "SymbolicArray"]):
        self.parent, self.forward, self.backward = parent, forward, backward
        self.derived_from = parent.entry
        self.depth: int = 1 + (parent._view.depth if parent._view is not None else 0)


class SymbolicArray(np.lib.mixins.NDArrayOperatorsMixin, ArrayShape):
    """An array of a traced function: its node, shape and dtype; values on demand."""

    __slots__ = ("tracer", "_entry", "shape", "dtype", "_view", "_deep", "_backing", "__weakref__")
    __array_priority__ = 1000

    def __init__(self, tracer: Tracer, entry: Entry, shape: tuple[int, ...], dtype, view: View | None = None):
        self.tracer, self._entry = tracer, entry
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)
        self._view = view
        self._deep = False
        #: the numpy array this one was made from by an in-place update (``a += x`` on a numpy ``a``),
        #: while anything else holds it: later in-place updates write their values into it too
        self._backing: "weakref.ref[np.ndarray] | None" = None
        tracer.hold(self)

    @property
    def entry(self) -> Entry:
        """The node this array stands for now (a view re-reads its parent after the parent was written)."""
        view = self._view
        if view is not None and view.parent.entry is not view.derived_from:
            fresh = view.forward(view.parent)
            self._entry, view.derived_from = fresh.entry, view.parent.entry
        return self._entry

    def as_view_of(self, parent: "SymbolicArray", forward: Callable[["SymbolicArray"], "SymbolicArray"],
                   backward: Callable[["SymbolicArray", "SymbolicArray"], "SymbolicArray"]) -> "SymbolicArray":
        """This array, marked as a view of ``parent`` (writes to it reach ``parent``)."""
        view = View(parent, forward, backward)
        if view.depth <= View.MAX_DEPTH:
            self._view = view
        else:
            self._view, self._deep = None, True
        return self

    def rebind(self, new: "SymbolicArray") -> None:
        """Make this array stand for ``new`` (same shape, cast to this dtype): an in-place update.
        A view writes the new value back into its parent, as numpy's views do."""
        if tuple(new.shape) != self.shape:
            raise InPlaceError(f"could not broadcast the value of shape {new.shape} into an array of shape "
                               f"{self.shape}")
        if new.dtype != self.dtype:
            new = _numpy().astype(new, self.dtype)
        if self._deep:
            raise InPlaceError(f"writing through a view of a view more than {View.MAX_DEPTH} levels deep is not "
                               "supported; take the view from the array you mean to update (or .copy() it)")
        view = self._view
        if view is not None:
            view.parent.rebind(view.backward(view.parent, new))
            view.derived_from = view.parent.entry
        self._entry = new.entry
        backing = self._backing() if self._backing is not None else None
        if backing is not None:  # another name for the numpy array it was made from sees the update, as in numpy
            np.copyto(backing, self.values(f"an in-place update of a numpy array at {user_line()}"),
                      casting="same_kind")
            self.tracer.leak(self.entry, user_line(), "an in-place update of a numpy array")

    def backed_by(self, array: np.ndarray) -> "SymbolicArray":
        """This array in place of the numpy ``array`` an in-place update (``a += x``, numpy's
        ``ufunc(a, x, out=(a,))``) wrote its values into: Python binds ``a`` to what the update
        returns, so the code goes on with this array (exact lineage), while any other name for
        ``array`` (which holds the values) sees its later in-place updates too."""
        out = SymbolicArray(self.tracer, self.entry, self.shape, self.dtype)
        out._backing = weakref.ref(array)
        return out

    # -- what numpy arrays say about themselves --------------------------------------------------
    @property
    def lead(self) -> int:
        """Leading 1-axes of the node that the array lacks (0-d values)."""
        return len(self.entry.shape) - len(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __repr__(self) -> str:
        entry = self._entry
        if entry.value is not None:
            return repr(self.values())
        return f"<symbolic {entry.name or entry.base} shape={self.shape} dtype={self.dtype}>"

    def __str__(self) -> str:
        return str(self.values()) if self._entry.value is not None or self._can_compute() else repr(self)

    def __format__(self, spec: str) -> str:
        if self._can_compute():
            value = self.values()
            return format(value.item() if value.ndim == 0 else value, spec)
        return format(repr(self), spec)

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d array")
        return (self[k] for k in range(self.shape[0]))

    # -- numpy's protocols -------------------------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return _numpy().apply_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return _numpy().apply_function(func, args, kwargs)

    def __array__(self, dtype=None, copy=None):
        caller = _library_caller()
        if self._can_compute():
            # (the reason names the array only when it still needs computing: the repr of one with
            # values prints them, a millisecond per million cells for a message nobody reads)
            value = self.values(f"{caller or 'np.asarray'}() of {self!r}" if self._entry.value is None else "")
            # numpy code gets its own copy of a computed step's values (it may write into it), so the
            # run may still store them; an input's are the caller's own array, handed back as numpy
            # does, and ``copy=False`` (numpy's "never copy") hands over the trace's own array
            same = dtype is None or np.dtype(dtype) == value.dtype
            shared = copy is False and same
            self.tracer.leak(self.entry, user_line(), caller or "np.asarray", shared=shared)
            if shared or (self.entry.op is None and same and copy is not True):
                return value
            return value.copy() if dtype is None else value.astype(dtype)
        hint = "; compute with numpy calls on it, or wrap the code that needs values with sz.udf(fn, lineage=...)"
        if caller.startswith("scipy.ndimage."):
            hint = f"; use subzero.ndimage.{caller.rsplit('.', 1)[1]} (same name and signature)"
        elif caller:
            hint = f" (inside {caller}); wrap the call with sz.udf(fn, lineage=...)"
        raise ConversionError(
            f"{self!r} has no values at trace time: np.asarray() / np.array() / a library that converts its "
            f"input cannot turn it into a numpy array{hint}")

    # -- values: computed when Python asks (the trace becomes this run's path) ---------------------
    def _can_compute(self) -> bool:
        return self._entry.value is not None or self.tracer.has_values()

    def values(self, why: str = "this") -> np.ndarray:
        """This array's values in this run (computed from the inputs on first use)."""
        value = self.tracer.value(self.entry, why)
        return np.asarray(value).reshape(self.shape)

    def _decide(self, what: str) -> np.ndarray:
        """The values behind ``what`` (``bool()``, ``int()``...), recorded as a decision of this run."""
        if not self._can_compute():
            raise ControlFlowError(
                f"{what} needs the value of {self!r}, which is not known: the function was traced from shapes "
                "alone; trace it with the input arrays (f.run(inputs, store) or f.trace(inputs) with arrays), or "
                "compute both branches and pick with np.where(cond, a, b)")
        value = self.values(what)
        self.tracer.note("value", user_line(), f"{what} of {self.entry.name or self.entry.base} -> "
                         f"{_short(value)}")
        return value

    def __bool__(self):
        return bool(self._decide("Python control flow on an array (if/while/and/or/not, bool())"))

    def __int__(self):
        return int(self._decide("int()"))

    def __float__(self):
        return float(self._decide("float()"))

    def __complex__(self):
        return complex(self._decide("complex()"))

    def __index__(self):
        value = self._decide("an array used as an index or a count (range(), list index)")
        return operator.index(value.item() if value.ndim == 0 else value)

    def item(self, *args: Any) -> Any:
        """The Python scalar at ``args`` (numpy's ``ndarray.item``), computed for this run."""
        return self._decide(".item()").item(*args)

    def tolist(self) -> Any:
        """The values as nested Python lists, computed for this run."""
        return self._decide(".tolist()").tolist()

    # -- in-place updates: rebinding (a new node; views write through) ---------------------------
    # ``x op= y`` is numpy's mixin's ``op(x, y, out=(x,))``: `apply_ufunc`'s ``out=`` rebinds ``x``
    def __setitem__(self, key, value):
        _numpy().setitem(self, key, value)

    def fill(self, value: Any) -> None:
        """Set every cell to ``value`` (a rebinding to a constant array)."""
        _numpy().setitem(self, Ellipsis, value)

    def sort(self, axis: int = -1, kind: Any = None, order: Any = None) -> None:
        """Sort in place along ``axis`` (a rebinding to ``np.sort(x, axis)``)."""
        self.rebind(cast("SymbolicArray", np.sort(self, axis=axis, kind=kind, order=order)))

    # -- operators: numpy's mixin (every binary, reflected, in-place and unary operator as its ufunc)
    __hash__ = object.__hash__

    # -- methods -----------------------------------------------------------------------------------
    def __getitem__(self, key):
        return _numpy().getitem(self, key)

    @property
    def flat(self) -> Any:
        """``x.flat``: the flattened view (reading and writing ``x.flat[k]`` work as in numpy)."""
        return np.ravel(self)

    @property
    def real(self) -> Any:
        """``np.real(x)``, traced."""
        return np.real(self)

    @property
    def imag(self) -> Any:
        """``np.imag(x)``, traced."""
        return np.imag(self)

    @property
    def nbytes(self) -> int:
        """Bytes the values take (numpy's ``nbytes``)."""
        return self.size * self.dtype.itemsize

    @property
    def itemsize(self) -> int:
        """Bytes per cell."""
        return self.dtype.itemsize

    def conj(self) -> Any:
        """``np.conj(x)``, traced."""
        return np.conj(self)

    @property
    def T(self) -> Any:
        """``np.transpose(x)``, traced."""
        return np.transpose(self)

    def transpose(self, *axes: Any) -> Any:
        """``np.transpose(x, axes)``, traced."""
        return np.transpose(self, axes[0] if len(axes) == 1 and not isinstance(axes[0], int) else (axes or None))

    def reshape(self, *shape: Any, order: Any = "C") -> Any:
        """``np.reshape(x, shape)``, traced."""
        return np.reshape(self, shape[0] if len(shape) == 1 else shape, order=order)

    ravel, squeeze, swapaxes = (_numpy_method(n) for n in ("ravel", "squeeze", "swapaxes"))
    cumsum, cumprod, argmax, argmin, nonzero = (_numpy_method(n) for n in ("cumsum", "cumprod", "argmax", "argmin",
                                                                           "nonzero"))
    ptp, repeat, take, searchsorted, diagonal = (_numpy_method(n) for n in ("ptp", "repeat", "take", "searchsorted",
                                                                            "diagonal"))

    def flatten(self, order: str = "C") -> "SymbolicArray":
        """A flattened copy (``np.ravel(x).copy()``)."""
        return cast("SymbolicArray", np.ravel(self)).copy()

    sum, mean, std, var, prod = (_numpy_method(n) for n in ("sum", "mean", "std", "var", "prod"))
    min, max, any, all = (_numpy_method(n) for n in ("min", "max", "any", "all"))
    argsort, dot, round = (_numpy_method(n) for n in ("argsort", "dot", "round"))

    def astype(self, dtype: Any, order: str = "K", casting: Any = "unsafe", subok: bool = True,
               copy: bool = True) -> Any:
        """The array as ``dtype`` (a traced cast; the layout arguments change nothing here)."""
        if not np.can_cast(self.dtype, dtype, casting):
            raise TypeError(f"Cannot cast array data from {self.dtype!r} to {np.dtype(dtype)!r} according to the "
                            f"rule {casting!r}")
        return _numpy().astype(self, dtype)

    def copy(self, order: str = "C") -> "SymbolicArray":
        """A copy: the same node, updated apart from this array from now on."""
        return SymbolicArray(self.tracer, self.entry, self.shape, self.dtype)

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


def _short(value: np.ndarray) -> str:
    """A value for a trace report line (a scalar, or a shape)."""
    value = np.asarray(value)
    return repr(value.item()) if value.size == 1 else f"array of shape {value.shape}"

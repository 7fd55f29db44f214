"""What every numpy handler builds with: the registry of handlers (`HANDLED`, `implements`),
nodes added to the trace (`add_node`), elementwise calls mapped to the named elementwise
operators (`elementwise`), and the small checks the handlers share.

`subzero.trace.numpy_api` (ufuncs, the registry's dispatch and the elementwise functions),
`subzero.trace.numpy_math` and `subzero.trace.numpy_shapes` register their handlers here; this
module imports none of them, so the trace package has no import cycle.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from subzero import operators as ops
from subzero.operators.elementwise import broadcast
from subzero.operator import Operator
from subzero.trace.calls import ARG, shared_call, astype as _astype_fn
from subzero.trace.coarse import lift
from subzero.trace.errors import InPlaceError, TraceError, UnsupportedCallError, user_line
from subzero.trace.symbolic import SymbolicArray
from subzero.trace.tracer import Tracer

__all__ = ["HANDLED", "implements", "supported", "add_node", "elementwise", "astype"]

HANDLED: dict[Callable, Callable] = {}


def implements(*functions: Callable) -> Callable[[Callable], Callable]:
    """Register the decorated handler for these numpy functions."""
    def register(handler):
        for fn in functions:
            HANDLED[fn] = handler
        return handler
    return register


def supported() -> list[str]:
    """The numpy functions (``np.name``) symbolic arrays support, besides every ufunc."""
    return sorted({f"np.{fn.__name__}" for fn in HANDLED})


# -- building nodes ------------------------------------------------------------------------------
def _tracer_of(values) -> Tracer:
    for v in values:
        if isinstance(v, SymbolicArray):
            return v.tracer
    raise TraceError("no symbolic array among the arguments")  # pragma: no cover - dispatch guarantees one


def add_node(op: Operator, inputs: Sequence[SymbolicArray], base: str, shape: tuple[int, ...] | None = None,
             dtype: DTypeLike | None = None) -> SymbolicArray:
    """Add ``op`` on ``inputs`` (whole nodes); ``shape`` is the logical shape when the node's
    has extra leading 1-axes (0-d results), else the node's own."""
    tracer = inputs[0].tracer
    entry = tracer.add(op, tuple(i.entry for i in inputs), base, user_line())
    if shape is None:
        shape = entry.shape
    return SymbolicArray(tracer, entry, shape, dtype if dtype is not None else inputs[0].dtype)


def _plain(x: SymbolicArray) -> SymbolicArray:
    """``x``, refused when it is a 0-d value (a call that needs the node's exact shape)."""
    if x.lead:
        raise TraceError(f"this call on the 0-d value {x!r} is not supported; reshape it first "
                         "(x.reshape(1)) or keep it in elementwise arithmetic")
    return x


def _reshaped(x: SymbolicArray, shape: tuple[int, ...], base: str = "reshape") -> SymbolicArray:
    """``x`` with the node shape ``shape`` (same cells); no node when it has it already."""
    shape = tuple(int(n) for n in shape)
    if x.entry.shape == shape:
        return SymbolicArray(x.tracer, x.entry, x.shape if len(shape) >= len(x.shape) else shape, x.dtype)
    return add_node(ops.Reshape(shape), [x], base, dtype=x.dtype)


def _as_logical(x: SymbolicArray, shape: tuple[int, ...], base: str) -> SymbolicArray:
    """A node for logical ``shape`` from ``x`` (same cells): 0-d results stay 1-cell nodes."""
    shape = tuple(int(n) for n in shape)
    if shape == ():
        out = x if int(np.prod(x.entry.shape)) == 1 and x.entry.shape else _reshaped(x, (1,), base)
        return SymbolicArray(out.tracer, out.entry, (), out.dtype)
    out = _reshaped(x, shape, base)
    return SymbolicArray(out.tracer, out.entry, shape, out.dtype)


def _dummy(v):
    return np.ones((1,), v.dtype) if isinstance(v, SymbolicArray) else v


#: (function, what decides its result's dtype) -> that dtype, for `_dtype_of` (bounded: cleared when full)
_DTYPES: dict[tuple, np.dtype] = {}
_DTYPES_MAX = 1024


def _dtype_key(v: Any) -> Any:
    """What of an argument decides a numpy function's result dtype: a symbolic array's dtype,
    a constant's type and value (its repr: ``-0.0`` is not ``0.0``); None for anything else."""
    if isinstance(v, SymbolicArray):
        return ("array", v.dtype)  # a tuple, as a constant's: keys compare item by item
    if type(v) in (bool, int, float, complex, str, type(None)) or isinstance(v, np.generic):
        return (type(v), repr(v))
    return None


def _dtype_of(fn: Callable, args: Sequence, kwargs: dict | None = None) -> np.dtype:
    """The dtype ``fn`` gives on these arguments, from a call on one-cell stand-ins; found once
    per numpy function, argument dtypes and constants (a trace makes the same few calls
    hundreds of times)."""
    kwargs = kwargs or {}
    key: tuple | None = None
    if isinstance(fn, np.ufunc) or fn is _astype_fn or getattr(fn, "__module__", None) == "numpy":
        parts = tuple(_dtype_key(a) for a in args) + tuple((k, _dtype_key(v)) for k, v in kwargs.items())
        if not any(p is None for p in parts[:len(args)]) and all(p[1] is not None for p in parts[len(args):]):
            key = (fn, parts)
            got = _DTYPES.get(key)
            if got is not None:
                return got
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dtype = np.asarray(fn(*[_dummy(a) for a in args], **{k: _dummy(v) for k, v in kwargs.items()})).dtype
    if key is not None:
        if len(_DTYPES) >= _DTYPES_MAX:
            _DTYPES.clear()
        _DTYPES[key] = dtype
    return dtype


_broadcast = broadcast  # numpy's rules from the shapes alone (`subzero.operators.elementwise.broadcast`)


# -- elementwise -----------------------------------------------------------------------------------
_BINARY = {np.add: ops.Add, np.subtract: ops.Subtract, np.multiply: ops.Multiply, np.true_divide: ops.Divide,
           np.power: ops.Power, np.maximum: ops.Maximum, np.minimum: ops.Minimum}
_SCALAR = {np.add: ops.AddScalar, np.subtract: ops.SubtractScalar, np.multiply: ops.MultiplyScalar,
           np.true_divide: ops.DivideScalar, np.power: ops.PowerScalar}
_COMMUTES = {np.add, np.multiply}
_COMPARE = {np.greater: (">", "<"), np.greater_equal: (">=", "<="), np.less: ("<", ">"),
            np.less_equal: ("<=", ">="), np.equal: ("==", "=="), np.not_equal: ("!=", "!=")}


def _is_scalar(v) -> bool:
    return isinstance(v, (int, float, bool, np.generic)) and not isinstance(v, np.ndarray)


def elementwise(fn: Callable, args: Sequence, kwargs: dict | None = None, base: str | None = None) -> SymbolicArray:
    """``fn(*args, **kwargs)`` for an elementwise ``fn`` (broadcasting), as one node."""
    kwargs = dict(kwargs or {})
    base = base or str(getattr(fn, "__name__", "apply"))
    args = [np.asarray(a) if isinstance(a, (list, tuple)) else a for a in args]  # constants given as lists
    tracer = _tracer_of(list(args) + list(kwargs.values()))
    if not tracer.leaked:  # after a leak, an array entering may derive from the leaked values: a node over them
        args = _uniform_as_scalars(args)
    # arrays of more than one cell become nodes (tiled like inputs), never constants inside a tile's call
    args = [lift(tracer, a) if isinstance(a, (np.ndarray, np.generic)) else a for a in args]
    kwargs = {k: lift(tracer, v) if isinstance(v, (np.ndarray, np.generic)) else v for k, v in kwargs.items()}
    values = list(args) + list(kwargs.values())
    for v in values:
        if not isinstance(v, SymbolicArray) and not _is_scalar(v) and v is not None \
                and not isinstance(v, (np.ndarray, str, np.dtype, type, list, tuple)):
            raise UnsupportedCallError(f"np.{base}: argument {v!r} ({type(v).__name__}) is neither an array nor a "
                                       "scalar")
    syms = [v for v in values if isinstance(v, SymbolicArray)]
    shapes = [np.shape(v) if not isinstance(v, SymbolicArray) else v.shape
              for v in values if isinstance(v, (SymbolicArray, np.ndarray)) or _is_scalar(v)]
    try:
        logical = _broadcast(shapes)
    except ValueError:
        raise TraceError(f"np.{base}: shapes {shapes} do not broadcast together (numpy broadcasting: trailing "
                         "axes must match or be 1)") from None
    dtype = _dtype_of(fn, args, kwargs)
    depth = len(logical)
    if depth:  # 0-d values with more leading 1-axes than the result: drop them first
        fixed = {}
        for s in syms:
            if len(s.entry.shape) > depth:
                fixed[id(s)] = _reshaped(s, (1,) * depth, "reshape")
        if fixed:
            args = [fixed.get(id(a), a) if isinstance(a, SymbolicArray) else a for a in args]
            kwargs = {k: fixed.get(id(v), v) if isinstance(v, SymbolicArray) else v for k, v in kwargs.items()}
            syms = [fixed.get(id(s), s) for s in syms]
    phys = _broadcast([s.entry.shape for s in syms])
    if depth and phys != logical:
        constants = [np.shape(v) for v in values if isinstance(v, np.ndarray)]
        raise TraceError(f"np.{base}: a constant array of shape {constants} "
                         f"broadcasts the result beyond the symbolic arrays (shape {phys}); give constants that "
                         "broadcast to the arrays' shape")
    op, inputs = _elementwise_op(fn, args, kwargs, syms)
    out = add_node(op, inputs, base, dtype=dtype)
    return SymbolicArray(tracer, out.entry, logical, dtype)


#: numpy promotes a scalar of a dtype as it does an array of it (NEP 50, numpy 2): a uniform array may be a scalar
_SCALARS_PROMOTE_AS_ARRAYS = int(np.__version__.split(".")[0]) >= 2


def _one_value(a: np.ndarray) -> np.generic | None:
    """The value every cell of ``a`` holds, bit for bit (``-0.0`` is not ``0.0``, NaNs of one
    payload are one value), or None."""
    if a.size <= 1 or a.dtype.kind not in "biuf" or a.dtype.itemsize not in (1, 2, 4, 8):
        return None
    bits = a.view(np.dtype(f"u{a.dtype.itemsize}"))
    first = bits.flat[0]
    if bits.flat[-1] != first or not bool((bits == first).all()):
        return None
    return a.flat[0]


def _uniform_as_scalars(args: list) -> list:
    """``args`` with each numpy array whose cells all hold one value replaced by that value (a
    numpy scalar of its dtype) when the result's shape does not come from it: a scalar operator
    instead of a captured constant node (``out = np.zeros(shape); out += x`` inside a library
    computes ``x + 0.0``: no array copied, stored with the run or read by every tile)."""
    if not _SCALARS_PROMOTE_AS_ARRAYS or not any(isinstance(a, np.ndarray) and a.size > 1 for a in args):
        return args
    shapes = [np.shape(a) for a in args if isinstance(a, (SymbolicArray, np.ndarray)) or _is_scalar(a)]
    try:
        full = np.broadcast_shapes(*shapes)
    except ValueError:
        return args  # refused below, naming the shapes
    out = list(args)
    for k, a in enumerate(args):
        if not isinstance(a, np.ndarray) or a.size <= 1:
            continue
        others = [np.shape(b) for j, b in enumerate(out)
                  if j != k and (isinstance(b, (SymbolicArray, np.ndarray)) or _is_scalar(b))]
        if np.broadcast_shapes(*others) != full:
            continue
        value = _one_value(a)
        if value is not None:
            out[k] = value
    return out


def _elementwise_op(fn, args, kwargs, syms):
    if not kwargs and len(args) == 2:
        a, b = args
        if isinstance(a, SymbolicArray) and isinstance(b, SymbolicArray) and fn in _BINARY:
            return _BINARY[fn](), [a, b]
        if isinstance(a, SymbolicArray) and _is_scalar(b):
            if fn in _SCALAR:
                return _SCALAR[fn](b), [a]
            if fn in _COMPARE:
                return ops.Threshold(b, _COMPARE[fn][0]), [a]
        if isinstance(b, SymbolicArray) and _is_scalar(a):
            if fn in _SCALAR:
                return _SCALAR[fn](a, reverse=fn not in _COMMUTES), [b]
            if fn in _COMPARE:
                return ops.Threshold(a, _COMPARE[fn][1]), [b]
    if fn is np.where and not kwargs and len(args) == 3 and all(isinstance(a, SymbolicArray) for a in args):
        return ops.Where(), list(args)
    if fn is np.clip and not kwargs and isinstance(args[0], SymbolicArray) and all(
            a is None or _is_scalar(a) for a in args[1:]) and any(a is not None for a in args[1:]):
        return ops.Clip(*args[1:]), [args[0]]
    template = tuple(ARG if isinstance(a, SymbolicArray) else a for a in args)
    kw = {k: ARG if isinstance(v, SymbolicArray) else v for k, v in kwargs.items()}
    call = shared_call(fn, template, kw)  # one object per numpy function and constants
    ordered = [a for a in args if isinstance(a, SymbolicArray)] + [v for v in kwargs.values()
                                                                     if isinstance(v, SymbolicArray)]
    return ops.Apply(call, nin=len(ordered)), ordered


def astype(x: SymbolicArray, dtype: DTypeLike) -> SymbolicArray:
    """``x.astype(dtype)``."""
    dtype = np.dtype(dtype)
    if dtype == x.dtype:
        return x
    return elementwise(_astype_fn, (x, dtype.str), base="astype")


def _no_out(out, name: str) -> None:
    if out is not None:
        raise InPlaceError(f"np.{name}(..., out=...) writes into an existing array, which a workflow cannot "
                           "record; use the returned array")


def _axes_of(axis, ndim: int, how: str) -> tuple[int, ...]:
    items = [axis] if isinstance(axis, (int, np.integer)) else list(axis)
    out = []
    for a in items:
        if not -ndim <= int(a) < ndim:
            raise TraceError(f"np.{how}: axis {a} is out of bounds for an array of dimension {ndim}")
        out.append(int(a) % ndim)
    return tuple(sorted(set(out)))

"""numpy on symbolic arrays: one small function per numpy function, each adding the built-in
operator with the same values and exact lineage (dask.array's ``@implements`` registry).

`apply_ufunc` handles every numpy ufunc called with ``__call__`` (``+``, ``np.sqrt``,
``np.isfinite``, comparisons...): the named elementwise operators where one fits (``Add``,
``SubtractScalar``, ``Threshold``...), else ``Apply`` of the ufunc with its constants.
`HANDLED` maps the other numpy functions to their handlers; a function missing from it
raises `UnsupportedCallError` naming it and saying how to wrap it with ``sz.udf``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import numpy as np

from subzero import operators as ops
from subzero.operators import numeric
from subzero.trace.calls import ARG, NumpyCall, astype as _astype_fn
from subzero.trace.errors import InPlaceError, TraceError, UnsupportedCallError, user_line
from subzero.trace.symbolic import SymbolicArray
from subzero.trace.tracer import Tracer

__all__ = ["HANDLED", "apply_ufunc", "apply_function", "getitem", "astype", "add_node", "implements", "supported"]

HANDLED: dict[Callable, Callable] = {}


def implements(*functions: Callable):
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


def add_node(op, inputs: Sequence[SymbolicArray], base: str, shape: tuple[int, ...] | None = None,
             dtype=None) -> SymbolicArray:
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


def _dtype_of(fn: Callable, args: Sequence, kwargs: dict | None = None) -> np.dtype:
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(fn(*[_dummy(a) for a in args], **{k: _dummy(v) for k, v in (kwargs or {}).items()})).dtype


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
    base = base or getattr(fn, "__name__", "apply")
    args = [np.asarray(a) if isinstance(a, (list, tuple)) else a for a in args]  # constants given as lists
    values = list(args) + list(kwargs.values())
    tracer = _tracer_of(values)
    for v in values:
        if not isinstance(v, SymbolicArray) and not _is_scalar(v) and v is not None \
                and not isinstance(v, (np.ndarray, str, np.dtype, type, list, tuple)):
            raise UnsupportedCallError(f"np.{base}: argument {v!r} ({type(v).__name__}) is neither an array nor a "
                                       "scalar")
    syms = [v for v in values if isinstance(v, SymbolicArray)]
    shapes = [np.shape(v) if not isinstance(v, SymbolicArray) else v.shape
              for v in values if isinstance(v, (SymbolicArray, np.ndarray)) or _is_scalar(v)]
    try:
        logical = tuple(np.broadcast_shapes(*shapes))
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
    phys = tuple(np.broadcast_shapes(*[s.entry.shape for s in syms]))
    if depth and phys != logical:
        constants = [np.shape(v) for v in values if isinstance(v, np.ndarray)]
        raise TraceError(f"np.{base}: a constant array of shape {constants} "
                         f"broadcasts the result beyond the symbolic arrays (shape {phys}); give constants that "
                         "broadcast to the arrays' shape")
    op, inputs = _elementwise_op(fn, args, kwargs, syms)
    out = add_node(op, inputs, base, dtype=dtype)
    return SymbolicArray(tracer, out.entry, logical, dtype)


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
    call = NumpyCall(fn, template, kw)
    ordered = [a for a in args if isinstance(a, SymbolicArray)] + [v for v in kwargs.values()
                                                                     if isinstance(v, SymbolicArray)]
    return ops.Apply(call, nin=len(ordered)), ordered


def apply_ufunc(ufunc: np.ufunc, method: str, inputs: tuple, kwargs: dict):
    """``ufunc.method(*inputs, **kwargs)`` on symbolic arrays."""
    if kwargs.get("out") is not None:
        raise InPlaceError(f"np.{ufunc.__name__}(..., out=...) writes into an existing array, which a workflow "
                           "cannot record; use the returned array")
    kwargs = {k: v for k, v in kwargs.items() if k != "out"}
    if method == "__call__" and ufunc is np.matmul:
        return _matmul(*inputs, **kwargs)
    if method == "__call__" and ufunc.signature is not None:
        raise UnsupportedCallError(f"np.{ufunc.__name__} (a generalized ufunc, {ufunc.signature}) is not supported "
                                   "on symbolic arrays; wrap it with sz.udf(fn, lineage=...)")
    if method == "__call__":
        if ufunc.nout != 1:
            raise UnsupportedCallError(f"np.{ufunc.__name__} returns {ufunc.nout} arrays; wrap it with "
                                       "sz.udf(fn, lineage='elementwise') per output")
        return elementwise(ufunc, inputs, kwargs, ufunc.__name__)
    if method == "outer" and ufunc is np.multiply and not kwargs:
        return _outer(*inputs)
    if method == "at":
        raise InPlaceError(f"np.{ufunc.__name__}.at updates an array in place; build a new array instead")
    raise UnsupportedCallError(f"np.{ufunc.__name__}.{method} is not supported on symbolic arrays; use the "
                               f"numpy function (np.sum, np.max, np.cumsum...) or wrap it with sz.udf(fn, lineage=...)")


def apply_function(func: Callable, args: tuple, kwargs: dict):
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


def astype(x: SymbolicArray, dtype) -> SymbolicArray:
    """``x.astype(dtype)``."""
    dtype = np.dtype(dtype)
    if dtype == x.dtype:
        return x
    return elementwise(_astype_fn, (x, dtype.str), base="astype")


def _no_out(out, name: str) -> None:
    if out is not None:
        raise InPlaceError(f"np.{name}(..., out=...) writes into an existing array, which a workflow cannot "
                           "record; use the returned array")


# -- reductions ----------------------------------------------------------------------------------------
_AXIS_OPS = {"sum": ops.Sum, "mean": ops.Mean, "std": ops.Std, "min": ops.Min, "max": ops.Max,
             "count_nonzero": ops.Count, "nansum": numeric.NanSum, "nanmean": numeric.NanMean,
             "nanstd": numeric.NanStd, "nanmin": numeric.NanMin, "nanmax": numeric.NanMax, "any": numeric.AnyOf,
             "all": numeric.AllOf}
_DDOF = ("std", "nanstd", "var")


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
        if set(axes) == set(range(ndim)):
            op = (ops.GlobalMean() if how == "mean" else ops.GlobalStd(ddof) if how == "std"
                  else numeric.GlobalReduction(how, ddof))
            out_node = add_node(op, [a], how, dtype=dtype_out)
            shape = (1,) * ndim if keepdims else ()
            return SymbolicArray(a.tracer, out_node.entry, shape, dtype_out)
        if how not in _AXIS_OPS:
            raise UnsupportedCallError(f"np.{how}(x, axis=...) over some axes has no subzero operator (over every "
                                       f"axis it has); wrap it with sz.udf(fn, lineage=sz.Lines(axis=...))")
        cls = _AXIS_OPS[how]
        op = cls(axes, ddof) if how in _DDOF else cls(axes)
        node = add_node(op, [_plain(a)], how, dtype=dtype_out)
        if keepdims:
            kept = tuple(1 if k in axes else n for k, n in enumerate(a.shape))
            return _as_logical(node, kept, "reshape")
        return node
    handler.__name__ = f"_{how}"
    return handler


def _axes_of(axis, ndim: int, how: str) -> tuple[int, ...]:
    items = [axis] if isinstance(axis, (int, np.integer)) else list(axis)
    out = []
    for a in items:
        if not -ndim <= int(a) < ndim:
            raise TraceError(f"np.{how}: axis {a} is out of bounds for an array of dimension {ndim}")
        out.append(int(a) % ndim)
    return tuple(sorted(set(out)))


for _how, _fns in {"sum": [np.sum], "mean": [np.mean], "std": [np.std], "var": [np.var],
                   "min": [np.min, np.amin], "max": [np.max, np.amax], "prod": [np.prod], "any": [np.any],
                   "all": [np.all], "count_nonzero": [np.count_nonzero], "nansum": [np.nansum],
                   "nanmean": [np.nanmean], "nanstd": [np.nanstd], "nanmin": [np.nanmin],
                   "nanmax": [np.nanmax]}.items():
    HANDLED.update({f: _reduction(_how, _fns[0]) for f in _fns})


# -- shapes ----------------------------------------------------------------------------------------------
@implements(np.transpose)
def _transpose(a, axes=None):
    if a.ndim < 2 and axes is None:
        return a
    axes = None if axes is None else tuple(int(x) for x in axes)
    return add_node(ops.Transpose(axes), [_plain(a)], "transpose", dtype=a.dtype)


@implements(np.swapaxes)
def _swapaxes(a, axis1, axis2):
    perm = list(range(a.ndim))
    i, j = (_axes_of(x, a.ndim, "swapaxes")[0] for x in (axis1, axis2))
    perm[i], perm[j] = perm[j], perm[i]
    return _transpose(a, perm)


@implements(np.moveaxis)
def _moveaxis(a, source, destination):
    src = [_axes_of(s, a.ndim, "moveaxis")[0] for s in np.atleast_1d(source)]
    dst = [_axes_of(d, a.ndim, "moveaxis")[0] for d in np.atleast_1d(destination)]
    order = [n for n in range(a.ndim) if n not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return _transpose(a, order)


@implements(np.reshape)
def _reshape(a, shape=None, order="C", *, newshape=None, copy=None):
    shape = newshape if shape is None else shape
    if order != "C":
        raise UnsupportedCallError(f"np.reshape(..., order={order!r}): only C order is supported")
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(n) for n in shape)
    if shape.count(-1) == 1:
        known = int(np.prod([n for n in shape if n != -1]))
        if known == 0 or a.size % known:
            raise TraceError(f"cannot reshape an array of size {a.size} into shape {shape}")
        shape = tuple(a.size // known if n == -1 else n for n in shape)
    if int(np.prod(shape)) != a.size:
        raise TraceError(f"cannot reshape an array of size {a.size} into shape {shape}")
    if shape == a.shape:
        return a
    return _as_logical(a, shape, "reshape")


@implements(np.ravel)
def _ravel(a, order="C"):
    return _reshape(a, (-1,), order)


@implements(np.squeeze)
def _squeeze(a, axis=None):
    axes = [k for k, n in enumerate(a.shape) if n == 1] if axis is None else _axes_of(axis, a.ndim, "squeeze")
    if any(a.shape[k] != 1 for k in axes):
        raise TraceError("np.squeeze: cannot select an axis to squeeze out which has size not equal to one")
    return _reshape(a, tuple(n for k, n in enumerate(a.shape) if k not in axes))


@implements(np.expand_dims)
def _expand_dims(a, axis):
    items = [axis] if isinstance(axis, (int, np.integer)) else list(axis)
    ndim = a.ndim + len(items)
    where = {int(x) % ndim for x in items}
    it = iter(a.shape)
    return _reshape(a, tuple(1 if k in where else next(it) for k in range(ndim)))


@implements(np.atleast_1d)
def _atleast_1d(*arys):
    out = [_reshape(x, (1,)) if x.ndim == 0 else x for x in arys]
    return out[0] if len(out) == 1 else out


@implements(np.concatenate)
def _concatenate(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    _no_out(out, "concatenate")
    arrays = _symbolic_list(arrays, "concatenate")
    if axis is None:
        arrays, axis = [_ravel(x) for x in arrays], 0
    dtype_out = np.result_type(*[x.dtype for x in arrays]) if dtype is None else np.dtype(dtype)
    arrays = [astype(x, dtype_out) for x in arrays]
    return add_node(ops.Concatenate(int(axis)), [_plain(x) for x in arrays], "concatenate", dtype=dtype_out)


@implements(np.stack)
def _stack(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    _no_out(out, "stack")
    arrays = _symbolic_list(arrays, "stack")
    dtype_out = np.result_type(*[x.dtype for x in arrays]) if dtype is None else np.dtype(dtype)
    arrays = [astype(x, dtype_out) for x in arrays]
    return add_node(ops.Stack(int(axis)), [_plain(x) for x in arrays], "stack", dtype=dtype_out)


@implements(np.vstack)
def _vstack(tup, dtype=None, casting="same_kind"):
    return _concatenate([x if x.ndim >= 2 else _reshape(x, (1, -1)) for x in _symbolic_list(tup, "vstack")], 0,
                        dtype=dtype)


@implements(np.hstack)
def _hstack(tup, dtype=None, casting="same_kind"):
    arrays = _symbolic_list(tup, "hstack")
    return _concatenate(arrays, 0 if arrays[0].ndim == 1 else 1, dtype=dtype)


def _symbolic_list(arrays, name: str) -> list[SymbolicArray]:
    arrays = list(arrays)
    if not arrays or not all(isinstance(x, SymbolicArray) for x in arrays):
        raise UnsupportedCallError(f"np.{name}: every array must be a symbolic array of the workflow (constants "
                                   "cannot join it); compute them from an input, or wrap the code with sz.udf")
    return arrays


@implements(np.flip)
def _flip(m, axis=None):
    return add_node(ops.Flip(axis if axis is None or isinstance(axis, (int, np.integer)) else tuple(axis)),
                    [_plain(m)], "flip", dtype=m.dtype)


@implements(np.fliplr)
def _fliplr(m):
    return _flip(m, 1)


@implements(np.flipud)
def _flipud(m):
    return _flip(m, 0)


@implements(np.pad)
def _pad(array, pad_width, mode="constant", **kwargs):
    value = kwargs.pop("constant_values", 0)
    if kwargs or not isinstance(mode, str) or not _is_scalar(value):
        raise UnsupportedCallError(f"np.pad: only modes constant (one scalar constant_values), edge, reflect, "
                                   f"symmetric and wrap are supported, got mode={mode!r} {kwargs or ''}")
    width = np.asarray(pad_width)
    if width.dtype.kind not in "iu":
        raise TraceError(f"np.pad: pad_width must be integers, got {pad_width!r}")
    return add_node(ops.Pad(width.tolist(), mode, value), [_plain(array)], "pad", dtype=array.dtype)


@implements(np.roll)
def _roll(a, shift, axis=None):
    if axis is None:
        return _reshape(_roll(_ravel(a), shift, 0), a.shape)
    axes = np.atleast_1d(axis).astype(int)
    shifts = np.broadcast_to(np.atleast_1d(shift).astype(int), axes.shape)
    per = [0] * a.ndim
    for ax, s in zip(axes, shifts):
        per[_axes_of(int(ax), a.ndim, "roll")[0]] += int(s)
    return add_node(ops.Shift(tuple(per), mode="wrap"), [_plain(a)], "roll", dtype=a.dtype)


@implements(np.tile)
def _tile(A, reps):
    reps = (int(reps),) if isinstance(reps, (int, np.integer)) else tuple(int(r) for r in reps)
    if len(reps) > A.ndim:
        A = _reshape(A, (1,) * (len(reps) - A.ndim) + A.shape)
    return add_node(ops.Tile(reps), [_plain(A)], "tile", dtype=A.dtype)


@implements(np.repeat)
def _repeat(a, repeats, axis=None):
    if not isinstance(repeats, (int, np.integer)):
        raise UnsupportedCallError("np.repeat with one count per element is not supported; give one int")
    if axis is None:
        a, axis = _ravel(a), 0
    factors = [1] * a.ndim
    factors[_axes_of(axis, a.ndim, "repeat")[0]] = int(repeats)
    return add_node(ops.Upsample(tuple(factors)), [_plain(a)], "repeat", dtype=a.dtype)


# -- products ---------------------------------------------------------------------------------------------
@implements(np.matmul)
def _matmul(a, b, out=None, **kwargs):
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
    return _outer(_ravel(a), _ravel(b))


def _outer(a, b):
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
    if order is not None:
        raise UnsupportedCallError("np.sort(..., order=) (structured arrays) is not supported")
    if axis is None:
        a, axis = _ravel(a), 0
    return add_node(ops.Sort(int(axis)), [_plain(a)], "sort", dtype=a.dtype)


@implements(np.argsort)
def _argsort(a, axis=-1, kind=None, order=None, *, stable=None):
    if order is not None:
        raise UnsupportedCallError("np.argsort(..., order=) (structured arrays) is not supported")
    if axis is None:
        a, axis = _ravel(a), 0
    return add_node(ops.ArgSort(int(axis)), [_plain(a)], "argsort", dtype=np.dtype(np.intp))


@implements(np.histogram)
def _histogram(a, bins=10, range=None, density=None, weights=None):
    if density or weights is not None:
        raise UnsupportedCallError("np.histogram(..., density=/weights=) is not supported; wrap it with sz.udf")
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


# -- indexing --------------------------------------------------------------------------------------------------
def getitem(x: SymbolicArray, key) -> SymbolicArray:
    """``x[key]`` for basic indexing: ints, slices (any step), ``...`` and ``None``."""
    key = key if isinstance(key, tuple) else (key,)
    for k in key:
        if isinstance(k, SymbolicArray) or isinstance(k, (list, np.ndarray)) or isinstance(k, bool):
            raise UnsupportedCallError(
                "indexing with arrays (boolean masks, index lists) is not supported: the result's shape would "
                "depend on values; use np.where(mask, x, fill) to keep the shape, or wrap the code with sz.udf")
        if not (k is None or k is Ellipsis or isinstance(k, (int, np.integer, slice))):
            raise UnsupportedCallError(f"index {k!r} is not supported (ints, slices, ... and None are)")
    if sum(k is Ellipsis for k in key) > 1:
        raise TraceError("an index can only have a single ellipsis ('...')")
    used = sum(k is not None and k is not Ellipsis for k in key)
    if used > x.ndim:
        raise TraceError(f"too many indices for array: array is {x.ndim}-dimensional, but {used} were indexed")
    if Ellipsis in key:
        at = key.index(Ellipsis)
        key = key[:at] + (slice(None),) * (x.ndim - used) + key[at + 1:]
    else:
        key = key + (slice(None),) * (x.ndim - used)
    starts, stops, steps, shape = [], [], [], []
    axis = 0
    for k in key:
        if k is None:
            shape.append(1)
            continue
        n = x.shape[axis]
        if isinstance(k, slice):
            start, stop, step = k.indices(n)
            starts.append(k.start if k.start is None else start)
            stops.append(k.stop if k.stop is None else stop)
            steps.append(k.step)
            shape.append(len(range(start, stop, step)))
        else:
            i = int(k)
            if not -n <= i < n:
                raise TraceError(f"index {i} is out of bounds for axis {axis} with size {n}")
            i %= n
            starts.append(i)
            stops.append(i + 1)
            steps.append(None)
        axis += 1
    node = x
    if any(v is not None for v in starts + stops + steps):
        if x.lead:
            raise TraceError("indexing a 0-d value is not supported")
        node = add_node(ops.Slice(tuple(starts), tuple(stops), tuple(steps)), [x], "getitem", dtype=x.dtype)
    return _as_logical(node, tuple(shape), "getitem") if tuple(shape) != node.shape else node


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


"""numpy's statistics, running reductions, differences, 1-D convolution, gathers by
constant indices, ``np.einsum``, look-ups (``np.searchsorted``, ``np.interp``, ``np.isin``,
``np.digitize``), ``np.average``, ``np.linalg.norm`` and the shape queries (``np.ndim``,
``np.shape``, ``np.size``, ``np.result_type``) on symbolic arrays (registered in
`subzero.trace.numpy_api.HANDLED`).

Each handler takes numpy's signature and gives numpy's values, shapes and dtypes; the
operators it adds (`subzero.operators.Statistic`, `Cumulative`, `Diff`, `SequenceConvolve`,
`Take`, `TakeAlong`, `Einsum`, `Lookup`) have exact lineage.  ``np.average`` and
``np.linalg.norm`` are numpy's own formulas over the traced calls they are made of.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from subzero import operators as ops
from subzero.errors import WorkflowError
from subzero.trace import numpy_shapes
from subzero.trace.building import _as_logical, _axes_of, _no_out, _plain, _reshaped, add_node, astype, implements
from subzero.trace.calls import ARG, NumpyCall
from subzero.trace.errors import TraceError, UnsupportedCallError
from subzero.trace.symbolic import SymbolicArray

__all__ = ["statistic", "take"]

_NOVALUE: Any = getattr(np, "_NoValue", None)


def _symbolic(a, name: str) -> SymbolicArray:
    if not isinstance(a, SymbolicArray):
        raise UnsupportedCallError(f"np.{name}: the array must be a symbolic array of the workflow here")
    if a.ndim == 0:
        raise TraceError(f"np.{name} of the 0-d value {a!r}: reshape it first (x.reshape(1))")
    return a


def _constant(value, name: str, what: str) -> np.ndarray:
    if isinstance(value, SymbolicArray):
        raise UnsupportedCallError(f"np.{name}: {what} must be constant here (a number, a list or a numpy array); "
                                   "values computed in the workflow cannot choose cells")
    return np.asarray(value)


# -- reductions along axes -------------------------------------------------------------------------------
def statistic(a: SymbolicArray, how: str, axis: Any, keepdims: bool = False, dtype: DTypeLike | None = None,
              **params: Any) -> SymbolicArray:
    """``np.<how>(a, axis=axis, keepdims=keepdims, **params)`` as one `subzero.operators.Statistic`
    node (``how`` one of `subzero.operators.statistics.STATISTICS`, one scalar ``q`` at most).

    Over every axis the array is first laid out as one row, so the node keeps one axis.
    """
    a = _symbolic(a, how)
    ndim = a.ndim
    axes = tuple(range(ndim)) if axis is None else _axes_of(axis, ndim, how)
    if dtype is None:
        probe = np.ones((2,) * ndim, a.dtype)
        with np.errstate(all="ignore"):
            dtype = np.asarray(ops.Statistic(how, axes, **params).reduce(probe, axes)).dtype
    try:
        if set(axes) == set(range(ndim)):
            row = numpy_shapes.reshape(a, (1, a.size))
            node = add_node(ops.Statistic(how, (1,), **params), [_plain(row)], how, dtype=dtype)
            return _as_logical(node, (1,) * ndim if keepdims else (), "reshape")
        node = add_node(ops.Statistic(how, axes, **params), [_plain(a)], how, dtype=dtype)
    except WorkflowError as e:
        raise TraceError(f"np.{how}: {e}") from None
    if keepdims:
        return _as_logical(node, tuple(1 if k in axes else n for k, n in enumerate(a.shape)), "reshape")
    return node


def _quantiles(how: str, scale: float):
    def handler(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
                weights=None, interpolation=None):
        _no_out(out, how)
        if weights is not None or interpolation is not None:
            raise UnsupportedCallError(f"np.{how}(..., weights=/interpolation=) is not supported on symbolic "
                                       "arrays; give method=, or wrap the code with sz.udf")
        qs = _constant(q, how, "q").astype(np.float64)
        if np.any(qs < 0) or np.any(qs > scale):
            raise TraceError(f"np.{how}: q must be in the range [0, {scale:g}], got {q!r}")
        parts = [statistic(a, how, axis, keepdims, q=float(v), method=method) for v in qs.reshape(-1)]
        if qs.ndim == 0:
            return parts[0]
        rows = [numpy_shapes.reshape(p, (1,) + p.shape) for p in parts]
        joined = np.concatenate(rows, axis=0)
        return numpy_shapes.reshape(joined, qs.shape + parts[0].shape)
    handler.__name__ = f"_{how}"
    return handler


for _how, _scale in (("percentile", 100.0), ("nanpercentile", 100.0), ("quantile", 1.0), ("nanquantile", 1.0)):
    implements(getattr(np, _how))(_quantiles(_how, _scale))


def _medians(how: str):
    def handler(a, axis=None, out=None, overwrite_input=False, keepdims=False):
        _no_out(out, how)
        return statistic(a, how, axis, keepdims)
    handler.__name__ = f"_{how}"
    return handler


implements(np.median)(_medians("median"))
implements(np.nanmedian)(_medians("nanmedian"))


def _arg_reduction(how: str):
    def handler(a, axis=None, out=None, *, keepdims=False):
        _no_out(out, how)
        a = _symbolic(a, how)
        if keepdims is _NOVALUE:
            keepdims = False
        if axis is None:
            flat = statistic(numpy_shapes.ravel(a), how, 0, dtype=np.dtype(np.intp))
            return _as_logical(flat, (1,) * a.ndim, "reshape") if keepdims else flat
        return statistic(a, how, int(_axes_of(axis, a.ndim, how)[0]), keepdims, dtype=np.dtype(np.intp))
    handler.__name__ = f"_{how}"
    return handler


for _how in ("argmax", "argmin", "nanargmax", "nanargmin"):
    implements(getattr(np, _how))(_arg_reduction(_how))


# -- running reductions and differences -----------------------------------------------------------------------
def _running(how: str):
    def handler(a, axis=None, dtype=None, out=None):
        _no_out(out, how)
        a = _symbolic(a, how)
        if dtype is not None:
            a = astype(a, dtype)
        if axis is None:
            a, axis = numpy_shapes.ravel(a), 0
        axis = _axes_of(axis, a.ndim, how)[0]
        dtype_out = np.asarray(getattr(np, how)(np.ones((1,) * a.ndim, a.dtype), axis=axis)).dtype
        return add_node(ops.Cumulative(how, axis), [_plain(a)], how, dtype=dtype_out)
    handler.__name__ = f"_{how}"
    return handler


for _how in ("cumsum", "cumprod", "nancumsum", "nancumprod"):
    implements(getattr(np, _how))(_running(_how))


@implements(np.diff)
def _diff(a, n=1, axis=-1, prepend=_NOVALUE, append=_NOVALUE):
    a = _symbolic(a, "diff")
    if not isinstance(n, (int, np.integer)) or n < 0:
        raise TraceError(f"np.diff: order must be non-negative but got {n!r}")
    if n == 0:
        return a
    axis = _axes_of(axis, a.ndim, "diff")[0]
    for value, before in ((prepend, True), (append, False)):
        if value is _NOVALUE:
            continue
        if isinstance(value, SymbolicArray):
            if value.ndim != a.ndim:
                raise UnsupportedCallError(f"np.diff: a symbolic prepend=/append= must have the array's {a.ndim} "
                                           f"axes, got shape {value.shape}; reshape it (x.reshape(...))")
            parts = [value, a] if before else [a, value]
            a = np.concatenate(parts, axis=axis)
        elif np.ndim(value) == 0:
            dtype = np.result_type(a.dtype, np.asanyarray(value).dtype)
            a = astype(a, dtype)
            width = [[0, 0] for _ in range(a.ndim)]
            width[axis] = [1, 0] if before else [0, 1]
            a = add_node(ops.Pad(width, "constant", np.asarray(value).item()), [_plain(a)], "pad", dtype=dtype)
        else:
            raise UnsupportedCallError("np.diff(..., prepend=/append=) with a constant array is not supported; give "
                                       "a scalar, or a symbolic array")
    if a.shape[axis] <= n:
        raise TraceError(f"np.diff: n={n} leaves no cell of axis {axis} (length {a.shape[axis]}): numpy returns an "
                         "empty array, which a workflow cannot store; give n < the axis' length")
    n = int(n)
    dtype_out = np.diff(np.ones((1,) * (a.ndim - 1) + (n + 1,), a.dtype), n, axis=-1).dtype
    return add_node(ops.Diff(int(n), axis), [_plain(a)], "diff", dtype=dtype_out)


# -- 1-D convolution --------------------------------------------------------------------------------------------
def _convolution(name: str, correlate: bool, default_mode: str):
    def handler(a, v, mode=default_mode):
        fn = np.correlate if correlate else np.convolve
        if not isinstance(mode, str) or mode not in ("full", "same", "valid"):
            raise TraceError(f"np.{name}: mode must be 'full', 'same' or 'valid', got {mode!r}")
        for x, label in ((a, "a"), (v, "v")):
            if np.ndim(x) != 1 if not isinstance(x, SymbolicArray) else x.ndim != 1:
                raise TraceError(f"np.{name}: {label} must be 1-D, got {np.shape(x) if not isinstance(x, SymbolicArray) else x.shape}")
            if (len(x) if isinstance(x, SymbolicArray) else np.size(x)) == 0:
                raise TraceError(f"np.{name}: {label} cannot be empty")
        sym = [x for x in (a, v) if isinstance(x, SymbolicArray)]
        dtype = np.asarray(fn(np.ones(1, a.dtype if isinstance(a, SymbolicArray) else np.asarray(a).dtype),
                              np.ones(1, v.dtype if isinstance(v, SymbolicArray) else np.asarray(v).dtype))).dtype
        if len(sym) == 2:
            op = ops.SequenceConvolve(mode, correlate)
        else:
            at = 0 if not isinstance(a, SymbolicArray) else 1
            op = ops.SequenceConvolve(mode, correlate, constant=np.asarray(a if at == 0 else v), constant_at=at)
        return add_node(op, [_plain(x) for x in sym], name, dtype=dtype)
    handler.__name__ = f"_{name}"
    return handler


implements(np.convolve)(_convolution("convolve", False, "full"))
implements(np.correlate)(_convolution("correlate", True, "valid"))


# -- gathers by constant indices ----------------------------------------------------------------------------------
def take(a: Any, indices: Any, axis: Any = None, out: Any = None, mode: str = "raise") -> Any:
    """``np.take`` with constant indices: a `Take` node (symbolic indices gather by values:
    `subzero.trace.numpy_indexing`)."""
    _no_out(out, "take")
    a = _symbolic(a, "take")
    idx = _constant(indices, "take", "indices")
    if idx.dtype.kind not in "iu":
        raise TraceError(f"np.take: indices must be integers, got dtype {idx.dtype}")
    if axis is None:
        a, axis = numpy_shapes.ravel(a), 0
    axis = _axes_of(axis, a.ndim, "take")[0]
    n = a.shape[axis]
    if mode == "wrap":
        idx = idx % n
    elif mode == "clip":
        idx = np.clip(idx, 0, n - 1)
    elif np.any(idx < -n) or np.any(idx >= n):
        raise TraceError(f"np.take: an index is out of bounds for axis {axis} with size {n}")
    if idx.size == 0:
        raise TraceError("np.take: no indices: numpy returns an empty array, which a workflow cannot store")
    node = add_node(ops.Take(idx.reshape(-1).astype(np.int64), axis), [_plain(a)], "take", dtype=a.dtype)
    shape = a.shape[:axis] + idx.shape + a.shape[axis + 1:]
    return numpy_shapes.reshape(node, shape) if shape != node.shape else node


@implements(np.take_along_axis)
def _take_along_axis(arr, indices, axis=-1):
    arr = _symbolic(arr, "take_along_axis")
    idx = _constant(indices, "take_along_axis", "indices")
    if idx.dtype.kind not in "iu":
        raise TraceError(f"np.take_along_axis: indices must be integers, got dtype {idx.dtype}")
    if axis is None:
        if idx.ndim != 1:
            raise TraceError("np.take_along_axis: when axis=None, indices must have a single dimension")
        arr, axis = numpy_shapes.ravel(arr), 0
    if idx.ndim != arr.ndim:
        raise TraceError(f"np.take_along_axis: indices and arr must have the same number of dimensions "
                         f"({idx.ndim} and {arr.ndim})")
    axis = _axes_of(axis, arr.ndim, "take_along_axis")[0]
    n = arr.shape[axis]
    if np.any(idx < -n) or np.any(idx >= n):
        raise TraceError(f"np.take_along_axis: an index is out of bounds for axis {axis} with size {n}")
    if idx.size == 0:
        raise TraceError("np.take_along_axis: no indices: numpy returns an empty array, which a workflow cannot "
                         "store")
    try:
        return add_node(ops.TakeAlong(idx, axis), [_plain(arr)], "take_along_axis", dtype=arr.dtype)
    except WorkflowError as e:
        raise TraceError(f"np.take_along_axis: {e}") from None


# -- einsum -----------------------------------------------------------------------------------------------------
@implements(np.einsum)
def _einsum(*operands, out=None, optimize=False, **kwargs):
    _no_out(out, "einsum")
    if not operands or not isinstance(operands[0], str):
        raise UnsupportedCallError("np.einsum(op0, sublist0, ...) (the sublist form) is not supported; give the "
                                   "subscripts string: np.einsum('ij,jk->ik', a, b)")
    if kwargs:
        raise UnsupportedCallError(f"np.einsum(..., {', '.join(f'{k}=' for k in kwargs)}) is not supported on "
                                   "symbolic arrays; cast with .astype() first")
    subscripts, arrays = operands[0], list(operands[1:])
    if not all(isinstance(x, SymbolicArray) for x in arrays):
        raise UnsupportedCallError("np.einsum of a constant array is not supported; make the constant an input of "
                                   "the workflow, or use np.dot / np.multiply with the constant")
    try:
        parts, _ = ops.einsum.parse_subscripts(subscripts, len(arrays))
    except WorkflowError as e:
        raise UnsupportedCallError(f"np.einsum: {e}; write the call with np.diagonal/np.trace first, or wrap it "
                                   "with sz.udf(fn, lineage=...)") from None
    if any(x.ndim == 0 for x in arrays):
        raise UnsupportedCallError("np.einsum of a 0-d value is not supported; multiply by it instead")
    dtype = np.einsum(subscripts, *[np.ones((1,) * len(p), x.dtype) for p, x in zip(parts, arrays)]).dtype
    try:
        node = add_node(ops.Einsum(subscripts), [_plain(x) for x in arrays], "einsum", dtype=dtype)
    except WorkflowError as e:
        raise TraceError(f"np.einsum: {e}") from None
    if not ops.einsum.parse_subscripts(subscripts, len(arrays))[1]:
        return SymbolicArray(node.tracer, node.entry, (), dtype)
    return node


# -- look-ups: each result on its own cell and on a whole table --------------------------------------------------
def _lookup(name: str, fn: Callable, args: Sequence, whole: Sequence[bool], kwargs: dict, dtype) -> SymbolicArray:
    """``fn(*args, **kwargs)``: ``whole[k]`` says whether argument ``k`` is read whole (a table)
    or per output cell (numpy broadcasting); constants stay in the call."""
    for k, v in kwargs.items():
        if isinstance(v, SymbolicArray):
            raise UnsupportedCallError(f"np.{name}: {k}= must be constant here")
    syms, template, kinds = [], [], []
    cell_shapes = []
    tiled = True
    for value, is_whole in zip(args, whole):
        if isinstance(value, SymbolicArray):
            if not is_whole and value.ndim == 0:
                value = _reshaped(value, (1,))
            syms.append(value)
            kinds.append(bool(is_whole))
            template.append(ARG)
            if not is_whole:
                cell_shapes.append(value.shape if value.ndim else (1,))
        else:
            const = np.asarray(value)
            template.append(value)
            if not is_whole:
                if const.ndim:
                    tiled = False
                cell_shapes.append(const.shape if const.ndim else (1,))
    logical = np.broadcast_shapes(*[np.shape(a) if not isinstance(a, SymbolicArray) else a.shape
                                    for a, w in zip(args, whole) if not w])
    phys = tuple(np.broadcast_shapes(*cell_shapes))
    if len(phys) > len(logical) and int(np.prod(phys)) != int(np.prod(logical)):  # pragma: no cover - guarded
        raise TraceError(f"np.{name}: shapes do not broadcast")
    call = NumpyCall(fn, tuple(template), kwargs)
    wrapped = call if phys == tuple(logical) else _Reshaped(call, phys)
    op = ops.Lookup(wrapped, kinds, phys, split=tiled)
    try:
        node = add_node(op, [_plain(s) for s in syms], name, dtype=np.dtype(dtype))
    except WorkflowError as e:
        raise TraceError(f"np.{name}: {e}") from None
    return SymbolicArray(node.tracer, node.entry, tuple(logical), np.dtype(dtype))


class _Reshaped:
    """``call`` with its result laid out as ``shape`` (a 0-d result as one cell)."""

    def __init__(self, call: NumpyCall, shape: tuple[int, ...]):
        self.call, self.shape = call, tuple(shape)

    def __call__(self, *arrays: np.ndarray) -> np.ndarray:
        return np.asarray(self.call(*arrays)).reshape(self.shape)

    def __repr__(self) -> str:
        return repr(self.call)


@implements(np.searchsorted)
def _searchsorted(a, v, side="left", sorter=None):
    if sorter is not None:
        _constant(sorter, "searchsorted", "sorter")
    if (a.ndim if isinstance(a, SymbolicArray) else np.ndim(a)) != 1:
        raise TraceError("np.searchsorted: a must be 1-D")
    return _lookup("searchsorted", np.searchsorted, (a, v), (True, False), {"side": side, "sorter": sorter},
                   np.intp)


@implements(np.digitize)
def _digitize(x, bins, right=False):
    return _lookup("digitize", np.digitize, (x, bins), (False, True), {"right": right}, np.intp)


@implements(np.isin)
def _isin(element, test_elements, assume_unique=False, invert=False, *, kind=None):
    return _lookup("isin", np.isin, (element, test_elements), (False, True),
                   {"assume_unique": assume_unique, "invert": invert, "kind": kind}, np.bool_)


@implements(np.interp)
def _interp(x, xp, fp, left=None, right=None, period=None):
    fp_dtype = fp.dtype if isinstance(fp, SymbolicArray) else np.asarray(fp).dtype
    dtype = np.complex128 if fp_dtype.kind == "c" else np.float64
    return _lookup("interp", np.interp, (x, xp, fp), (False, True, True),
                   {"left": left, "right": right, "period": period}, dtype)


# -- composites: numpy's own formulas over traced calls ------------------------------------------------------------
@implements(np.average)
def _average(a, axis=None, weights=None, returned=False, *, keepdims=_NOVALUE):
    a = _symbolic(a, "average")
    if returned:
        raise UnsupportedCallError("np.average(..., returned=True) is not supported on symbolic arrays; compute "
                                   "the sum of the weights beside it")
    kw = {} if keepdims is _NOVALUE else {"keepdims": keepdims}
    axes = None if axis is None else _axes_of(axis, a.ndim, "average")
    if isinstance(axis, (int, np.integer)) or axis is None:
        axes_arg = axes
    else:
        axes_arg = tuple(int(x) % a.ndim for x in axis)
    if weights is None:
        return np.mean(a, axis=axes_arg, **kw)
    w_shape = weights.shape if isinstance(weights, SymbolicArray) else np.shape(weights)
    w_dtype = weights.dtype if isinstance(weights, SymbolicArray) else np.asarray(weights).dtype
    if tuple(w_shape) != a.shape:
        if axes_arg is None:
            raise TraceError("np.average: Axis must be specified when shapes of a and weights differ.")
        order = axes_arg if isinstance(axes_arg, tuple) else (axes_arg,)
        if tuple(w_shape) != tuple(a.shape[x] for x in order):
            raise TraceError("np.average: Shape of weights must be consistent with shape of a along specified axis.")
        target = tuple(s if k in order else 1 for k, s in enumerate(a.shape))
        weights = np.transpose(weights, np.argsort(order))
        weights = np.reshape(weights, target)
    if issubclass(a.dtype.type, (np.integer, np.bool_)):
        result_dtype = np.result_type(a.dtype, w_dtype, "f8")
    else:
        result_dtype = np.result_type(a.dtype, w_dtype)
    if isinstance(weights, SymbolicArray):
        weights = astype(weights, result_dtype)
        scl = np.sum(weights, axis=axes_arg, **kw)
    else:
        weights = np.asarray(weights, result_dtype)
        scl = weights.sum(axis=axes_arg, dtype=result_dtype, **kw)
        if np.any(scl == 0.0):
            raise TraceError("np.average: Weights sum to zero, can't be normalized")
    a = astype(a, result_dtype)
    if isinstance(weights, SymbolicArray):
        product = np.multiply(a, weights)
    else:  # each cell times its constant weight: one tile, since the constant is not split into tiles
        product = _lookup("multiply", np.multiply, (a, weights), (False, False), {}, result_dtype)
    total = np.sum(product, axis=axes_arg, **kw)
    return np.true_divide(total, scl)


@implements(np.linalg.norm)
def _norm(x, ord=None, axis=None, keepdims=False):
    x = _symbolic(x, "linalg.norm")
    if x.dtype.kind == "c":
        raise UnsupportedCallError("np.linalg.norm of a complex array is not supported; take np.abs first")
    if x.dtype.kind not in "f":
        x = astype(x, float)
    nd = x.ndim
    if axis is None and (ord is None or (ord in ("f", "fro") and nd == 2) or (ord == 2 and nd == 1)):
        flat = numpy_shapes.ravel(x)
        ret = np.sqrt(np.dot(flat, flat))
        return numpy_shapes.reshape(ret, (1,) * nd) if keepdims else ret
    axes = tuple(range(nd)) if axis is None else (axis if isinstance(axis, tuple) else (int(axis),))
    if len(axes) == 1:
        if ord == np.inf:
            return np.max(np.abs(x), axis=axes, keepdims=keepdims)
        if ord == -np.inf:
            return np.min(np.abs(x), axis=axes, keepdims=keepdims)
        if ord == 1:
            return np.sum(np.abs(x), axis=axes, keepdims=keepdims)
        if ord is None or ord == 2:
            return np.sqrt(np.sum(np.multiply(x, x), axis=axes, keepdims=keepdims))
        if isinstance(ord, str):
            raise TraceError(f"np.linalg.norm: Invalid norm order '{ord}' for vectors")
        ret = np.sum(np.power(np.abs(x), ord), axis=axes, keepdims=keepdims)
        return np.power(ret, np.reciprocal(np.float64(ord)).astype(ret.dtype))
    if len(axes) == 2:
        row, col = (_axes_of(a, nd, "linalg.norm")[0] for a in axes)
        if row == col:
            raise TraceError("np.linalg.norm: Duplicate axes given.")
        if ord is None or ord in ("f", "fro"):
            ret = np.sqrt(np.sum(np.multiply(x, x), axis=(row, col)))
        elif ord in (1, -1, np.inf, -np.inf):
            pick = np.max if ord in (1, np.inf) else np.min
            if ord in (1, -1):
                first, second = row, col
            else:
                first, second = col, row
            if second > first:
                second -= 1
            ret = pick(np.sum(np.abs(x), axis=first), axis=second)
        else:
            raise UnsupportedCallError(f"np.linalg.norm(..., ord={ord!r}) of matrices (singular values) is not "
                                       "supported; wrap it with sz.udf(fn, lineage=...)")
        if keepdims:
            shape = tuple(1 if k in (row, col) else n for k, n in enumerate(x.shape))
            ret = numpy_shapes.reshape(ret, shape)
        return ret
    raise TraceError("np.linalg.norm: Improper number of dimensions to norm.")


# -- shape queries: no values needed ---------------------------------------------------------------------------
@implements(np.ndim)
def _ndim(a):
    if isinstance(a, SymbolicArray) and _inside_concatenator():
        raise UnsupportedCallError(
            "np.r_[...] / np.c_[...] with a symbolic part converts it to a numpy array, which has no values at trace "
            "time; write np.concatenate([...]) for np.r_ (np.atleast_1d on scalars) and np.stack([...], axis=-1) "
            "for np.c_ of 1-D parts (np.concatenate([...], axis=-1) of 2-D ones)")
    return a.ndim if isinstance(a, SymbolicArray) else np.ndim(a)


def _inside_concatenator() -> bool:
    """True when numpy's ``np.r_``/``np.c_`` (``AxisConcatenator.__getitem__``) asked."""
    frame = sys._getframe(1)
    for _ in range(8):
        frame = frame.f_back  # type: ignore[assignment]
        if frame is None:
            return False
        owner = type(frame.f_locals.get("self"))
        if frame.f_code.co_name == "__getitem__" and any(c.__name__ == "AxisConcatenator" for c in owner.__mro__):
            return True
    return False


@implements(np.shape)
def _shape(a):
    return a.shape if isinstance(a, SymbolicArray) else np.shape(a)


@implements(np.size)
def _size(a, axis=None):
    if not isinstance(a, SymbolicArray):
        return np.size(a, axis)
    if axis is None:
        return a.size
    return a.shape[_axes_of(axis, a.ndim, "size")[0]]


@implements(np.result_type)
def _result_type(*arrays_and_dtypes):
    return np.result_type(*[x.dtype if isinstance(x, SymbolicArray) else x for x in arrays_and_dtypes])


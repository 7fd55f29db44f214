"""numpy reshapes, joins, flips, pads, rolls, tiles and basic indexing on symbolic arrays
(registered in `subzero.trace.numpy_api.HANDLED`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from subzero import operators as ops
from subzero.trace.errors import TraceError, UnsupportedCallError
from subzero.trace.building import _as_logical, _axes_of, _is_scalar, _no_out, _plain, add_node, astype, implements
from subzero.trace.symbolic import SymbolicArray

__all__ = ["getitem", "ravel", "reshape"]


# -- shapes ----------------------------------------------------------------------------------------------
@implements(np.transpose)
def _transpose(a, axes=None):
    if a.ndim < 2 and axes is None:
        return a
    axes = None if axes is None else tuple(int(x) for x in axes)
    out = add_node(ops.Transpose(axes), [_plain(a)], "transpose", dtype=a.dtype)
    order = tuple(range(a.ndim))[::-1] if axes is None else axes
    inverse = tuple(int(k) for k in np.argsort(order))
    return out.as_view_of(a, lambda p: _transpose(p, axes), lambda p, new: _transpose(new, inverse))


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
def reshape(a: Any, shape: Any = None, order: str = "C", *, newshape: Any = None, copy: bool | None = None) -> Any:
    """``np.reshape`` of a symbolic array (C order), traced as a `Reshape` node."""
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
    out = _as_logical(a, shape, "reshape")
    if out is a:
        out = SymbolicArray(a.tracer, a.entry, a.shape, a.dtype)
    return out.as_view_of(a, lambda p: reshape(p, shape), lambda p, new: reshape(new, p.shape))


@implements(np.ravel)
def ravel(a: Any, order: str = "C") -> Any:
    """``np.ravel``: `reshape` to one axis."""
    return reshape(a, (-1,), order)


@implements(np.squeeze)
def _squeeze(a, axis=None):
    axes = [k for k, n in enumerate(a.shape) if n == 1] if axis is None else _axes_of(axis, a.ndim, "squeeze")
    if any(a.shape[k] != 1 for k in axes):
        raise TraceError("np.squeeze: cannot select an axis to squeeze out which has size not equal to one")
    return reshape(a, tuple(n for k, n in enumerate(a.shape) if k not in axes))


@implements(np.expand_dims)
def _expand_dims(a, axis):
    items = [axis] if isinstance(axis, (int, np.integer)) else list(axis)
    ndim = a.ndim + len(items)
    where = {int(x) % ndim for x in items}
    it = iter(a.shape)
    return reshape(a, tuple(1 if k in where else next(it) for k in range(ndim)))


@implements(np.atleast_1d)
def _atleast_1d(*arys):
    out = [reshape(x, (1,)) if x.ndim == 0 else x for x in arys]
    return out[0] if len(out) == 1 else out


@implements(np.concatenate)
def _concatenate(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    _no_out(out, "concatenate")
    arrays = _symbolic_list(arrays, "concatenate")
    if axis is None:
        arrays, axis = [ravel(x) for x in arrays], 0
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
    return _concatenate([x if x.ndim >= 2 else reshape(x, (1, -1)) for x in _symbolic_list(tup, "vstack")], 0,
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
    axes = None if axis is None else int(axis) if isinstance(axis, (int, np.integer)) else tuple(axis)
    return add_node(ops.Flip(axes), [_plain(m)], "flip", dtype=m.dtype)


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
        return reshape(_roll(ravel(a), shift, 0), a.shape)
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
        A = reshape(A, (1,) * (len(reps) - A.ndim) + A.shape)
    return add_node(ops.Tile(reps), [_plain(A)], "tile", dtype=A.dtype)


@implements(np.repeat)
def _repeat(a, repeats, axis=None):
    if not isinstance(repeats, (int, np.integer)):
        raise UnsupportedCallError("np.repeat with one count per element is not supported; give one int")
    if axis is None:
        a, axis = ravel(a), 0
    factors = [1] * a.ndim
    factors[_axes_of(axis, a.ndim, "repeat")[0]] = int(repeats)
    return add_node(ops.Upsample(tuple(factors)), [_plain(a)], "repeat", dtype=a.dtype)


# -- indexing --------------------------------------------------------------------------------------------------
def getitem(x: SymbolicArray, key: Any) -> SymbolicArray:
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

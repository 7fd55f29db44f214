"""Indexing by values and in-place updates on symbolic arrays, with numpy's semantics.

- ``x[key]``: basic keys (ints, slices, ``...``, ``None``) are `subzero.operators.Slice` nodes and
  views of ``x``; keys with arrays (boolean masks, index arrays, symbolic or constant) select
  cells by this run's values: numpy itself computes which cells
  (``np.arange(x.size).reshape(x.shape)[key]``), and a `subzero.operators.Gather` node copies them.
- ``x[key] = v``, ``x += y``, ``ufunc(..., out=x)``, ``np.copyto``: a `subzero.operators.Scatter`
  (or the ufunc's own node) becomes ``x``'s new node (`SymbolicArray.rebind`); a view writes
  itself back into the array it views.
- ``np.nonzero``, ``np.argwhere``, ``np.flatnonzero``, ``np.where(cond)``: coordinates of this
  run's selected cells (`subzero.operators.Coordinates`), each depending on the cell it locates.

A key's symbolic parts decide cells by their values, so they are inputs of the node (guides):
a boolean mask decides each cell it covers; an integer index array decides the output cells
at its own positions when it is the key's only array, else every cell (through a one-cell
summary of it).
"""

from __future__ import annotations

import time

from typing import Any, cast

import numpy as np

from subzero import operators as ops
from subzero.trace.building import add_node, astype, implements
from subzero.trace.coarse import coarse_call, lift, node_shape
from subzero.trace.errors import InPlaceError, TraceError, user_line
from subzero.trace import numpy_stats
from subzero.trace.numpy_shapes import getitem as basic_getitem
from subzero.trace.numpy_shapes import reshape
from subzero.trace.symbolic import SymbolicArray

__all__ = ["getitem", "setitem", "scatter"]


def _normalize(key: Any) -> tuple:
    return key if isinstance(key, tuple) else (key,)


def _is_basic(key: tuple) -> bool:
    return all(k is None or k is Ellipsis or isinstance(k, (slice, int, np.integer)) and not isinstance(k, bool)
               for k in key)


# -- reading -----------------------------------------------------------------------------------------------
def getitem(x: SymbolicArray, key: Any) -> SymbolicArray:
    """``x[key]`` with numpy's rules: a view for basic keys, a gather for keys with arrays."""
    parts = _normalize(key)
    if _is_basic(parts):
        out = basic_getitem(x, key)
        if not out.shape:  # a scalar: numpy copies it
            return out
        if out is x:
            out = SymbolicArray(x.tracer, x.entry, x.shape, x.dtype)
        return out.as_view_of(x, lambda p: basic_getitem(p, key), lambda p, new: scatter(p, key, new))
    return gather(x, parts)


def _axes_of_parts(x: SymbolicArray, parts: tuple) -> list[int]:
    """The axis of ``x`` each key part starts at (``None`` consumes none; a boolean array its ndim)."""
    used = sum(0 if k is None or k is Ellipsis else (_ndim(k) if _is_bool(k) else 1) for k in parts)
    out, axis = [], 0
    for k in parts:
        out.append(axis)
        if k is Ellipsis:
            axis += x.ndim - used
        elif k is not None:
            axis += _ndim(k) if _is_bool(k) else 1
    return out


def _ndim(k: Any) -> int:
    return len(k.shape) if isinstance(k, (SymbolicArray, np.ndarray)) else int(np.ndim(k))


def _is_bool(k: Any) -> bool:
    return isinstance(k, (SymbolicArray, np.ndarray)) and np.dtype(k.dtype) == np.bool_


def _guides(x: SymbolicArray, parts: tuple) -> tuple[list[str], list]:
    """The guide of each symbolic part of a key (see the module docstring)."""
    arrays = [k for k in parts if isinstance(k, (SymbolicArray, np.ndarray, list))]
    guides: list[str] = []
    inputs: list[SymbolicArray] = []
    starts = _axes_of_parts(x, parts)
    for k, start in zip(parts, starts):
        if not isinstance(k, SymbolicArray):
            continue
        if k.dtype == np.bool_:
            guides.append(f"src:{start}:{k.ndim}")
            inputs.append(k)
        elif len(arrays) == 1 and k.ndim and _advanced_at(parts) is not None:
            guides.append(f"out:{_advanced_at(parts)}:{k.ndim}")
            inputs.append(k)
        else:
            guides.append("one")
            inputs.append(np.max(k) if k.size else k)
    return guides, inputs


def _advanced_at(parts: tuple) -> int | None:
    """The output axis where a lone index array's axes go (numpy: where it stands, when the
    key's advanced parts are adjacent), or None when integers join it (they broadcast with it)."""
    if any(isinstance(k, (int, np.integer)) and not isinstance(k, bool) for k in parts):
        return None
    out_axis = 0
    for k in parts:
        if isinstance(k, (SymbolicArray, np.ndarray, list)):
            return out_axis
        if k is Ellipsis:
            return None
        out_axis += 1  # a slice or None adds one output axis
    return None


def _concrete_key(parts: tuple, what: str) -> tuple:
    out = []
    for k in parts:
        if isinstance(k, SymbolicArray):
            value = k._decide(what)
            out.append(value)
        else:
            out.append(k)
    return tuple(out)


def gather(x: SymbolicArray, parts: tuple) -> SymbolicArray:
    """``x[key]`` for a key with arrays: the cells this run's key selects."""
    key = _concrete_key(parts, f"indexing {x.entry.name or x.entry.base} with an array")
    value, seconds = None, 0.0
    if x.tracer.eager_bytes is not None and x.tracer.evaluate_within_budget(x.entry):  # as numpy's indexing gives them
        started = time.perf_counter()
        value = np.asarray(np.asarray(x.entry.value).reshape(x.shape)[key])
        seconds = time.perf_counter() - started
    if len(key) == 1 and isinstance(key[0], np.ndarray) and key[0].dtype == np.bool_ and key[0].shape == x.shape:
        # x[mask]: the mask's cells in C order; the operator keeps the mask's bits, not their positions
        guides, guide_inputs = _guides(x, parts)
        op = ops.Gather(guides=guides, mask=key[0], count=None if value is None else value.shape[0])
        shape: tuple[int, ...] = (op.output_cells,)
    else:
        positions = np.arange(x.size, dtype=np.int64).reshape(x.shape)[key]
        shape = positions.shape
        guides, guide_inputs = _guides(x, parts)
        op = ops.Gather(positions.reshape(node_shape(shape)), guides)
    out = add_node(op, [x] + guide_inputs, "getitem", shape=shape, dtype=x.dtype)
    if value is not None:
        out.entry.value, out.entry.seconds = value.reshape(out.entry.shape), seconds
        x.tracer.computed(out.entry)  # its operator computes them again when they are let go of
    return out


# -- writing -----------------------------------------------------------------------------------------------
def _written_and_sources(x: SymbolicArray, key: tuple,
                         value_shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray | None]:
    """(which cells of ``x`` ``x[key] = value`` writes, the flat position in the value each
    written cell receives in C order, or None when the value has one cell), numpy's rules."""
    if _is_basic(key) and not any(isinstance(k, slice) and k.step is not None and k.step < 0 for k in key):
        # a basic key with no reversed slice: each cell selected once, in x's C order, so the cells
        # and sources are the selection's own (no position listed for every cell of x)
        written = np.zeros(x.shape, bool)
        shape = np.shape(written[key])
        written[key] = True
        count = int(np.prod(value_shape))
        try:
            sources = np.broadcast_to(np.arange(count, dtype=np.int64).reshape(value_shape), shape)
        except ValueError:
            raise ValueError(f"could not broadcast input array from shape {tuple(value_shape)} into shape "
                             f"{tuple(shape)}") from None
        return written.reshape(-1), None if count == 1 else np.ravel(sources)
    positions = np.arange(x.size, dtype=np.int64).reshape(x.shape)[key]
    try:
        sources = np.broadcast_to(np.arange(int(np.prod(value_shape)), dtype=np.int64).reshape(value_shape),
                                  np.shape(positions))
    except ValueError:
        raise ValueError(f"could not broadcast input array from shape {tuple(value_shape)} into shape "
                         f"{tuple(np.shape(positions))}") from None
    full = np.full(x.size, -1, np.int64)
    full[np.ravel(positions)] = np.ravel(sources)  # numpy's order: the last write wins
    written = full >= 0
    return written, None if int(np.prod(value_shape)) == 1 else full[written]


def _overwritten(x: SymbolicArray, key: tuple, value: SymbolicArray) -> SymbolicArray | None:
    """The array ``x[key] = value`` leaves when the basic ``key`` selects every cell of ``x`` once,
    in ``x``'s C order, and ``value`` has the selection's shape: ``value`` itself (cast to ``x``'s
    dtype, reshaped to its shape), no `Scatter` (``x[0:n] = x[0:n] - fit`` in scipy's detrend).
    None for any other assignment."""
    if any(isinstance(k, slice) and k.step is not None and k.step < 0 for k in key) or not x.size:
        return None
    try:
        selected = np.broadcast_to(np.zeros((), bool), x.shape)[key]  # a view: no cell allocated
    except IndexError:
        return None  # numpy's error, from the Scatter's path
    if selected.size != x.size or tuple(value.shape) != tuple(selected.shape) or value.lead:
        return None
    out = value if tuple(value.shape) == x.shape else cast(SymbolicArray, reshape(value, x.shape))
    return astype(out, x.dtype)


def scatter(x: SymbolicArray, key: Any, value: Any) -> SymbolicArray:
    """The array ``x`` would be after ``x[key] = value`` (numpy's rules), as a new node."""
    parts = _normalize(key)
    tracer = x.tracer
    value = lift(tracer, value)
    if isinstance(value, (list, tuple)):
        value = np.asarray(value)
    key_values = _concrete_key(parts, f"assigning into {x.entry.name or x.entry.base} through an array") \
        if not _is_basic(parts) else parts
    symbolic_value = isinstance(value, SymbolicArray)
    value_shape = tuple(value.shape if symbolic_value else np.shape(value))
    if symbolic_value and _is_basic(parts):
        whole = _overwritten(x, parts, cast(SymbolicArray, value))
        if whole is not None:
            return whole
    mask = key_values[0] if len(key_values) == 1 else None
    if isinstance(mask, np.ndarray) and mask.dtype == np.bool_ and mask.shape == x.shape and value_shape in ((), (1,)):
        written, source = mask, None  # x[mask] = one value: the mask is what is written
    else:
        written, source = _written_and_sources(x, key_values, value_shape)
    guides, guide_inputs = _guides(x, parts) if not _is_basic(parts) else ([], [])
    if symbolic_value:
        op = ops.Scatter(written.reshape(x.shape), source, guides)
        inputs = [x, value] + guide_inputs
    else:
        fill = np.asarray(value).reshape(-1)[0] if np.size(value) else 0
        op = ops.Scatter(written.reshape(x.shape), None, guides, fill=np.asarray(fill).astype(x.dtype).item())
        inputs = [x] + guide_inputs
    return add_node(op, inputs, "setitem", shape=x.shape, dtype=x.dtype)


def setitem(x: SymbolicArray, key: Any, value: Any) -> None:
    """``x[key] = value``: ``x`` (and what it views) rebound to the updated array."""
    if not x.shape:
        raise InPlaceError("assigning into a 0-d traced value is not supported; build the value you need instead")
    x.rebind(scatter(x, key, value))


def _check_out(ufunc: Any, result: SymbolicArray, out: SymbolicArray) -> None:
    if tuple(result.shape) != tuple(out.shape):
        raise ValueError(f"non-broadcastable output operand with shape {out.shape} doesn't match the broadcast "
                         f"shape {result.shape}")
    if not np.can_cast(result.dtype, out.dtype, "same_kind"):
        raise TypeError(f"Cannot cast ufunc '{getattr(ufunc, '__name__', ufunc)}' output from {result.dtype!r} to "
                        f"{out.dtype!r} with casting rule 'same_kind'")


def write_out(ufunc: Any, result: Any, out: Any) -> Any:
    """Write ``result`` into ``out=`` (a symbolic array is rebound; a numpy array receives this
    run's values, and what it holds from then on derives from them); returns ``out``."""
    if isinstance(out, SymbolicArray):
        if not isinstance(result, SymbolicArray):
            result = lift(out.tracer, np.broadcast_to(result, out.shape).copy())
        _check_out(ufunc, result, out)
        out.rebind(result)
        return out
    if isinstance(result, SymbolicArray):
        values = result.values(f"writing into a numpy array with out= at {user_line()}")
        result.tracer.leak(result.entry, user_line(), f"{getattr(ufunc, '__name__', 'ufunc')}(..., out=ndarray)")
        np.copyto(out, values, casting="same_kind")
        return out
    np.copyto(out, result, casting="same_kind")
    return out


@implements(np.copyto)
def _copyto(dst, src, casting="same_kind", where=True):
    if isinstance(where, bool) and where:
        new = src
    else:
        new = np.where(where, src, dst)
    if isinstance(dst, SymbolicArray):
        new = new if isinstance(new, SymbolicArray) else lift(dst.tracer, np.asarray(new))
        if not isinstance(new, SymbolicArray) or tuple(new.shape) != dst.shape:
            new = np.broadcast_to(new, dst.shape) if isinstance(new, SymbolicArray) else \
                np.zeros_like(dst) + new
        if not np.can_cast(new.dtype, dst.dtype, casting):
            raise TypeError(f"Cannot cast array data from {new.dtype!r} to {dst.dtype!r} according to the rule "
                            f"{casting!r}")
        dst.rebind(astype(new, dst.dtype))
        return None
    write_out(np.copyto, new, dst)
    return None


# -- where the selected cells are ----------------------------------------------------------------------------
def _selected(a: SymbolicArray, what: str) -> np.ndarray:
    return np.flatnonzero(a._decide(what))


def _coordinates(a: SymbolicArray, src: np.ndarray, axis: int | str, base: str) -> SymbolicArray:
    op = ops.Coordinates(src, a.shape, axis)
    shape = (len(src), max(a.ndim, 1)) if axis == "all" else (len(src),)
    return add_node(op, [a], base, shape=shape, dtype=np.dtype(np.intp))


@implements(np.nonzero)
def _nonzero(a):
    src = _selected(a, "np.nonzero")
    return tuple(_coordinates(a, src, k, "nonzero") for k in range(max(a.ndim, 1)))


@implements(np.argwhere)
def _argwhere(a):
    return _coordinates(a, _selected(a, "np.argwhere"), "all", "argwhere")


@implements(np.flatnonzero)
def _flatnonzero(a):
    return _coordinates(a, _selected(a, "np.flatnonzero"), "flat", "flatnonzero")


@implements(np.extract)
def _extract(condition, arr):
    tracer = (condition if isinstance(condition, SymbolicArray) else arr).tracer
    flat = lift(tracer, np.ravel(arr)) if not isinstance(arr, SymbolicArray) else np.ravel(arr)
    if not isinstance(flat, SymbolicArray):  # one cell
        flat = lift(tracer, np.ravel(arr).repeat(2))[:1]
    return gather(flat, (np.ravel(condition) != 0,))


@implements(np.compress)
def _compress(condition, a, axis=None, out=None):
    if axis is None:
        a, axis = np.ravel(a), 0
    parts = (slice(None),) * (int(axis) % a.ndim) + (np.asarray(condition, bool) if not isinstance(
        condition, SymbolicArray) else condition != 0,)
    return gather(a, parts)


@implements(np.take)
def _take_values(a, indices, axis=None, out=None, mode="raise"):
    if not isinstance(indices, SymbolicArray):  # constant indices: a Take node (numpy_stats)
        return numpy_stats.take(a, indices, axis, out, mode)
    if out is not None or mode != "raise":
        raise TraceError("np.take(..., out=/mode=) is not supported on symbolic arrays; index with a[indices]")
    if axis is None:
        return gather(cast(SymbolicArray, np.ravel(a)), (indices,))
    parts = (slice(None),) * (int(axis) % a.ndim) + (indices,)
    return gather(a, parts)


# -- counts and sets: any cell can change any output, so all-to-all is their exact lineage ----------------------
_EXACT_ALL = "any input cell can change any output cell (a count, a set or a rank): all-to-all is exact here"


@implements(np.unique)
def _unique(ar, return_index=False, return_inverse=False, return_counts=False, axis=None, *, equal_nan=True,
            sorted=True):
    kwargs = {"return_index": return_index, "return_inverse": return_inverse, "return_counts": return_counts,
              "axis": axis, "equal_nan": equal_nan}
    return coarse_call(np.unique, (ar,), kwargs, _EXACT_ALL, base="unique", coarse=False)


@implements(np.bincount)
def _bincount(x, weights=None, minlength=0):
    return coarse_call(np.bincount, (x,), {"weights": weights, "minlength": minlength}, _EXACT_ALL, base="bincount",
                       coarse=False)

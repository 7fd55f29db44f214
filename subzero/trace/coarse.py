"""Coarse steps: code with no exact operator runs on this run's values instead of being refused.

TorchDynamo breaks the graph where it cannot capture code and runs that piece eagerly; the
numpy front end does the same for a numpy function without a handler (``np.polyfit``,
``np.unique``...): `coarse_call` runs it on the values of its symbolic arguments and adds one
`subzero.operators.Opaque` node per array it returns, every output cell depending on every
cell of the arrays it read (sound by construction), labelled with the reason and the user's
line (`subzero.trace.tracer.Event`, shown by the trace report, ``info`` and ``explain``).

A library that turns a traced array into numpy values (``np.asarray`` inside it) is a leak:
arrays that enter the trace afterwards may derive from those values, so `lift` makes each of
them a coarse step over the leaked arrays rather than a constant.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from subzero.errors import WorkflowError
from subzero.operators.indexing import Opaque
from subzero.trace.calls import ARG, NumpyCall
from subzero.trace.errors import UnsupportedCallError, user_line
from subzero.trace.symbolic import SymbolicArray
from subzero.trace.tracer import Entry, Tracer, outside_trace

__all__ = ["coarse_call", "leaves", "lift", "node_shape"]


def leaves(tree: Any) -> list[SymbolicArray]:
    """The symbolic arrays in ``tree`` (nested lists, tuples and dict values), in order."""
    if isinstance(tree, SymbolicArray):
        return [tree]
    if isinstance(tree, (list, tuple)):
        return [leaf for t in tree for leaf in leaves(t)]
    if isinstance(tree, dict):
        return [leaf for t in tree.values() for leaf in leaves(t)]
    return []


def _map_leaves(tree: Any, fn: Callable[[SymbolicArray], Any]) -> Any:
    """``tree`` (nested lists, tuples and dicts) with each symbolic array replaced by ``fn(it)``."""
    if isinstance(tree, SymbolicArray):
        return fn(tree)
    if isinstance(tree, (list, tuple)):
        mapped = [_map_leaves(t, fn) for t in tree]
        return tuple(mapped) if isinstance(tree, tuple) else mapped
    if isinstance(tree, dict):
        return {k: _map_leaves(v, fn) for k, v in tree.items()}
    return tree


def _template(tree: Any) -> Any:
    return _map_leaves(tree, lambda x: ARG)


def _concrete(tree: Any, copy: bool = False) -> Any:
    """``tree`` with each symbolic array replaced by its values: a read-only view (or a copy)."""
    def values(x: SymbolicArray) -> np.ndarray:
        value = x.values()
        if copy:
            return np.array(value, copy=True)
        view = value.view()
        view.flags.writeable = False
        return view

    return _map_leaves(tree, values)


def node_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The node shape of a logical shape: 0-d values are one-cell nodes."""
    return tuple(shape) if shape else (1,)


class _Logical:
    """``fn`` called with each input reshaped to its logical shape (0-d values are 0-d again)."""

    def __init__(self, call: NumpyCall, shapes: tuple[tuple[int, ...], ...]):
        self.call, self.shapes = call, shapes

    def __call__(self, *arrays: np.ndarray) -> Any:
        return self.call(*[np.asarray(a).reshape(s) for a, s in zip(arrays, self.shapes)])

    def __repr__(self) -> str:
        return repr(self.call)


def coarse_call(func: Callable[..., Any], args: tuple, kwargs: dict, reason: str, base: str | None = None,
                coarse: bool = True) -> Any:
    """``func(*args, **kwargs)`` computed on this run's values, as coarse steps.

    Each array in the result becomes a symbolic array whose node reads every symbolic array in
    the arguments (all-to-all); anything else in the result (a number, a string) is returned as
    it is, a value of this run.  Without values (a trace from shapes alone) the call is refused
    with `UnsupportedCallError` saying how to make it traceable.
    """
    found = leaves((args, kwargs))
    tracer: Tracer = found[0].tracer
    name = str(base or getattr(func, "__name__", "call"))
    if not tracer.has_values():
        raise UnsupportedCallError(
            f"{_qualified(func)} has no exact subzero operator, and the function was traced from shapes alone, so it "
            "cannot run as a coarse step; trace with the input arrays (f.run(inputs, store)), or wrap the code: "
            "f = sz.udf(fn, lineage=...) and call f(x)")
    concrete_args, concrete_kwargs = _concrete(args), _concrete(kwargs)
    started = time.perf_counter()
    with outside_trace():
        try:  # the values are this run's, kept for the run: a call that writes into them is given copies
            result = func(*concrete_args, **concrete_kwargs)
        except ValueError as exc:
            if "read-only" not in str(exc):
                raise
            result = func(*_concrete(args, copy=True), **_concrete(kwargs, copy=True))
    given = getattr(func, "seconds", None)  # a call made before (the whole-function fallback's), timed then
    seconds = given if isinstance(given, float) and given > 0 else time.perf_counter() - started
    call = _Logical(NumpyCall(func, _template(args), _template(kwargs)), tuple(x.shape for x in found))
    line = user_line()
    items = list(result.values()) if isinstance(result, dict) else \
        list(result) if isinstance(result, (tuple, list)) else [result]
    arrays = [r for r in items if isinstance(r, (np.ndarray, np.generic))]
    if arrays:
        tracer.note("coarse" if coarse else "value", line, f"{_qualified(func)}: {reason}")
    else:
        tracer.note("value", line, f"{_qualified(func)} returned {type(result).__name__} {result!r:.60}: a value of "
                    "this run")
    entries = tuple(x.entry for x in found)
    reason = f"{_qualified(func)} at {line.split(': ', 1)[0] or 'an unknown line'}: {reason}"
    if isinstance(result, dict):
        return {k: _node(tracer, call, entries, r, reason, f"{name}_{k}", line, k, coarse, seconds)
                for k, r in result.items()}
    if isinstance(result, (tuple, list)) and any(isinstance(r, (np.ndarray, np.generic)) for r in result):
        out = [_node(tracer, call, entries, r, reason, name, line, k, coarse, seconds) for k, r in enumerate(result)]
        return tuple(out) if isinstance(result, tuple) else out
    return _node(tracer, call, entries, result, reason, name, line, None, coarse, seconds)


def _node(tracer: Tracer, call: Callable[..., Any], entries: tuple[Entry, ...], value: Any, reason: str, base: str,
          line: str, pick: Any, coarse: bool, seconds: float = 0.0) -> Any:
    if not isinstance(value, (np.ndarray, np.generic)):
        return value
    value = np.asarray(value)
    if value.dtype == object:
        raise UnsupportedCallError(f"{base} returned an object array, which a workflow cannot store; wrap the code "
                                   "with sz.udf(fn, lineage=...) returning numbers")
    shape = node_shape(value.shape)
    entry = tracer.add(Opaque(call, shape, reason, pick=pick, nin=len(entries), coarse=coarse), entries, base, line)
    entry.value, entry.seconds = _shaped(value, shape), seconds
    return SymbolicArray(tracer, entry, value.shape, value.dtype)


def lift(tracer: Tracer, value: Any) -> Any:
    """``value`` as it enters the trace: an array of more than one cell becomes a node (a
    captured constant, tiled like an input; or, after a leak, a coarse step over the leaked
    arrays); anything else is returned as it is."""
    if isinstance(value, (list, tuple)) and value and not any(isinstance(v, SymbolicArray) for v in value):
        try:
            value = np.asarray(value)
        except (ValueError, TypeError):
            return value
    if tracer.leaked and isinstance(value, (np.ndarray, np.generic)) and value.dtype != object:
        return _leaked_constant(tracer, np.asarray(value))
    if isinstance(value, np.ndarray) and value.size > 1 and value.dtype != object:
        return SymbolicArray(tracer, tracer.constant(value, user_line()), value.shape, value.dtype)
    return value


class _Captured:
    """The values an array had when traced (a step after a leak: it re-reads nothing).

    Saved with a stored output, it holds no values (`without_value`): a store that loads it
    gives it a reader of that output (`reading`), called on first use."""

    #: it reads none of its inputs (they are there for the lineage): an `Opaque` of it gets views of them
    reads_only = True

    def __init__(self, value: np.ndarray | None, shape: tuple[int, ...] | None = None,
                 read: Callable[[], np.ndarray] | None = None):
        self.value, self.read = value, read
        self.shape = tuple(value.shape) if value is not None else tuple(shape or ())

    def without_value(self) -> "_Captured":
        """This call without its values (its node's stored output holds them)."""
        return _Captured(None, self.shape)

    def reading(self, read: Callable[[], np.ndarray]) -> "_Captured":
        """This call, its values read by ``read`` when first needed."""
        return self if self.value is not None else _Captured(None, self.shape, read)

    def __call__(self, *arrays: np.ndarray) -> np.ndarray:
        if self.value is None:
            if self.read is None:
                raise WorkflowError(f"{self!r} was saved without its values and loaded outside its store: "
                                    "open the run with sz.open_run to read them")
            self.value = np.asarray(self.read()).reshape(self.shape)
        return self.value

    def __getstate__(self) -> dict[str, Any]:
        # a reader belongs to the store that loaded it: a copy sent elsewhere (a Spark task) carries the values
        value = self.value if self.value is not None or self.read is None else self()
        return {"value": value, "shape": self.shape}

    def __setstate__(self, state: dict[str, Any]) -> None:  # also a store's from before readers: its values only
        value = state.get("value")
        self.value, self.read = value, None
        self.shape = tuple(state["shape"]) if "shape" in state else tuple(np.asarray(value).shape)

    def __repr__(self) -> str:
        return f"captured array of shape {self.shape}"


def _leaked_constant(tracer: Tracer, value: np.ndarray) -> SymbolicArray:
    sources = tuple({id(e): e for e in tracer.leaked}.values())
    reason = ("an array that entered the trace after numpy values of traced arrays left it (a library converted "
              "its input): it may derive from them, so it depends on all of them; wrap the library call with "
              "sz.udf(fn, lineage=...) for exact lineage")
    line = user_line()
    tracer.note("coarse", line, reason)
    shape = node_shape(value.shape)
    value = np.array(value, copy=True)  # the values it has now: the code may write into the array afterwards
    held = _shaped(value, shape)
    entry = tracer.add(Opaque(_Captured(held), shape, reason, nin=len(sources)), sources, "from_values", line)
    entry.value = held
    return SymbolicArray(tracer, entry, value.shape, value.dtype)


def _shaped(value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``value`` in ``shape``: itself when it has it (a fresh array stays one, not a view a run
    holding it would copy), else a reshaped view."""
    return value if value.shape == tuple(shape) else value.reshape(shape)


def _qualified(func: Callable[..., Any]) -> str:
    module = getattr(func, "__module__", "") or ""
    name = getattr(func, "__name__", repr(func))
    if module.startswith("numpy"):
        return f"np.{'linalg.' if 'linalg' in module else ''}{name}"
    return f"{module}.{name}" if module else name

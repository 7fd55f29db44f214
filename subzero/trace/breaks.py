"""Graph breaks: where a library cannot take traced arrays, its call runs on values instead.

A library function called from the user's code may fail on a symbolic array where it would
not fail on numpy's (a compiled routine demanding an ``ndarray``, an ``isinstance`` check, a
call we have no rule for deep inside it).  TorchDynamo's answer is a graph break: run that
piece eagerly and go on capturing.  `library_break` finds, in the failure's traceback, the
library function the user's code called; the trace is then run again with that function
replaced (`coarse_calls`), wherever a module binds it, by one that computes it on this run's
values as a coarse step (`subzero.trace.coarse.coarse_call`), labelled with the failure.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from types import CodeType, FunctionType, TracebackType
from typing import Any

from subzero.trace.coarse import coarse_call, leaves
from subzero.trace.errors import _HERE, is_user_frame

__all__ = ["Break", "library_break", "coarse_calls", "bound_since", "replaceable"]


class Break:
    """A library function to run on values: its code, its name, and why."""

    __slots__ = ("code", "name", "reason", "cached")

    def __init__(self, code: CodeType, name: str, reason: str):
        self.code, self.name, self.reason = code, name, reason
        self.cached = False  # its bindings were the last search's (`coarse_calls`), not searched for now


def library_break(exc: BaseException) -> Break | None:
    """The library function the user's code called on the way to ``exc`` (None when the
    failure is not inside a library called from the user's code)."""
    frames = []
    tb: TracebackType | None = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for here, callee in reversed(list(zip(frames, frames[1:]))):
        if is_user_frame(here) and not is_user_frame(callee) and not _is_subzero(callee.f_code.co_filename):
            module = callee.f_globals.get("__name__", "")
            name = f"{module}.{callee.f_code.co_qualname}" if module else callee.f_code.co_qualname
            first = str(exc).splitlines()[0] if str(exc) else ""
            reason = (f"{name} failed on traced arrays ({type(exc).__name__}: {first[:160]}), so it ran on this "
                      "run's values as a coarse step; wrap it with sz.udf(fn, lineage=...) for exact lineage")
            return Break(callee.f_code, name, reason)
    return None


def _is_subzero(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_HERE + os.sep)


#: code -> (the names of the modules searched, the bindings found in them): scanning every module's
#: namespace takes tens of milliseconds once scipy or pandas is loaded, and each new trace of a
#: function finds its breaks again (searching only the modules loaded since)
_BINDINGS: dict[CodeType, tuple[set[str], list[tuple[Any, str, Callable[..., Any]]]]] = {}
_BINDINGS_KEPT = 64


def _functions_with(code: CodeType, fresh: bool = False
                    ) -> tuple[list[tuple[Any, str, Callable[..., Any]]], bool]:
    """Every (namespace, attribute, function) binding a function whose code is ``code``, and
    whether they are the bindings found by an earlier search: reused while each still holds,
    with those in the modules loaded since added (a binding made since in a module searched
    before is missed; ``fresh`` searches every module again, as `coarse_calls` is told when the
    trace still reaches the function unreplaced)."""
    known = None if fresh else _BINDINGS.get(code)
    if known is not None and all(getattr(m, "__dict__", {}).get(k) is fn for m, k, fn in known[1]):
        searched, found = known
        loaded = sys.modules.keys() - searched
        if loaded:  # a module imported since (an import a function makes on its first call): searched now
            found = found + _scan(code, [sys.modules[name] for name in loaded if name in sys.modules])
            searched = searched | loaded
            _BINDINGS[code] = (searched, found)
        return list(found), True
    names = set(sys.modules)
    found = _scan(code, [sys.modules[name] for name in names if name in sys.modules])
    _BINDINGS.pop(code, None)
    _BINDINGS[code] = (names, found)
    while len(_BINDINGS) > _BINDINGS_KEPT:
        del _BINDINGS[next(iter(_BINDINGS))]
    return list(found), False


def _scan(code: CodeType, modules: list[Any]) -> list[tuple[Any, str, Callable[..., Any]]]:
    found: list[tuple[Any, str, Callable[..., Any]]] = []
    for module in modules:
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        # a broken function is a Python function (its code came from a traceback's frame): a type test in C
        # skips every other value, with no attribute read (a lazy proxy's may fail or import)
        found.extend((module, key, value) for key, value in list(namespace.items())
                     if type(value) is FunctionType and value.__code__ is code)
    return found


def _coarse(fn: Callable[..., Any], reason: str) -> Callable[..., Any]:
    def on_values(*args: Any, **kwargs: Any) -> Any:
        if not leaves((args, kwargs)):
            return fn(*args, **kwargs)
        return coarse_call(fn, args, kwargs, reason, base=getattr(fn, "__name__", "call"))

    on_values.__wrapped__ = fn  # type: ignore[attr-defined]
    on_values.__name__ = getattr(fn, "__name__", "call")
    return on_values


def replaceable(b: Break) -> bool:
    """Whether a module binds ``b``'s function, so a trace can run it on values there (a method or a
    property getter, bound in a class, it cannot: tracing again with the break would fail the same way)."""
    found, b.cached = _functions_with(b.code)
    return bool(found)


def bound_since(code: CodeType) -> bool:
    """Search every module again for the bindings of ``code``'s function: whether the search
    finds one the last search did not (a binding made since, in a module loaded before)."""
    known = _BINDINGS.get(code)
    before = {(id(m), k) for m, k, _ in known[1]} if known is not None else set()
    found, _ = _functions_with(code, fresh=True)
    return any((id(m), k) not in before for m, k, _ in found)


@contextlib.contextmanager
def coarse_calls(breaks: list[Break]) -> Iterator[list[Break]]:
    """While active, each broken library function runs on values (module docstring);
    yields the breaks whose function was found (the others cannot be replaced).  The bindings
    of a function are the last search's while no module was loaded since (such a break is
    marked ``cached``: `bound_since` tells whether a search now would find more)."""
    replaced: list[tuple[Any, str, Callable[..., Any]]] = []
    applied: list[Break] = []
    try:
        for b in breaks:
            bindings, b.cached = _functions_with(b.code)
            if bindings:
                applied.append(b)
            for module, key, fn in bindings:
                setattr(module, key, _coarse(fn, b.reason))
                replaced.append((module, key, fn))
        yield applied
    finally:
        for module, key, fn in reversed(replaced):
            setattr(module, key, fn)

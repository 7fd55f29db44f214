"""``sz.name(x, "clean")``: give a traced node the name queries and ``subzero info`` use."""

from __future__ import annotations

import re

from subzero.trace.errors import TraceError
from subzero.trace.symbolic import SymbolicArray

__all__ = ["name"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


def name(x: SymbolicArray, label: str) -> SymbolicArray:
    """Name the node ``x`` stands for; returns ``x``.

    Examples
    --------
    >>> import numpy as np, subzero as sz
    >>> @sz.workflow
    ... def f(x):
    ...     return sz.name(np.sqrt(x), "root") + 1
    >>> [n.name for n in f.trace({"x": np.ones(3)}).nodes]
    ['x', 'root', 'out']
    """
    if not isinstance(x, SymbolicArray):
        raise TraceError(f"sz.name() names a symbolic array of a traced function, got {type(x).__name__}")
    if not isinstance(label, str) or not _NAME.match(label):
        raise TraceError(f"node name {label!r} is invalid; use letters, digits, '_', '.', '-' starting with a "
                         "letter or '_'")
    entry = x.entry
    if entry.op is None:
        raise TraceError(f"{label!r}: {x!r} is the input {entry.name!r}, named after its parameter")
    if entry.name is not None and entry.name != label:
        raise TraceError(f"this node is already named {entry.name!r}; name it once")
    if any(e.name == label and e is not entry for e in x.tracer.entries):
        raise TraceError(f"two nodes are named {label!r}; node names must be unique")
    entry.name = label
    return x

"""The tracer: records the operators a traced function applies, then builds the workflow.

Nodes are named when the trace ends: first the names the user gave (`subzero.name`, the
returned dict's keys, the function's parameters), then automatic names from the numpy or
scipy call (``gaussian_filter``, ``gaussian_filter_1``, ...) in call order, so the same
function always gives the same names.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass



from subzero.errors import WorkflowError
from subzero.operator import Operator
from subzero.trace.errors import TraceError
from subzero.dag import Workflow

__all__ = ["Entry", "Tracer", "current_tracer"]

_CURRENT: contextvars.ContextVar["Tracer | None"] = contextvars.ContextVar("subzero_tracer", default=None)


@dataclass(eq=False)
class Entry:
    """One node to be: an input (``op is None``) or an operator applied to entries."""

    base: str
    op: Operator | None
    inputs: tuple["Entry", ...] = ()
    shape: tuple[int, ...] = ()
    name: str | None = None          # fixed by the user (or an input's parameter name)
    line: str = ""                   # the user's line that made it


class Tracer:
    """Collects entries while a function is traced; `build` turns them into a `Workflow`."""

    def __init__(self, name: str):
        self.name = name
        self.entries: list[Entry] = []

    def input(self, name: str, shape: tuple[int, ...]) -> Entry:
        """Record an input of ``shape`` named ``name``; its entry."""
        entry = Entry(name, None, (), tuple(shape), name=name)
        self.entries.append(entry)
        return entry

    def add(self, op: Operator, inputs: tuple[Entry, ...], base: str, line: str = "") -> Entry:
        """Record ``op`` on ``inputs``; its output shape comes from the operator (it checks
        the shapes and arguments now, so a bad call fails on the user's line)."""
        shapes = tuple(e.shape for e in inputs)
        try:
            shape = op.infer_output_shape(shapes)
        except WorkflowError as exc:
            raise TraceError(str(exc), line or None) from None
        if shape is None:
            raise TraceError(f"{type(op).__name__} has an output shape only running tells; the numpy front end "
                             "needs shapes at trace time", line or None)
        entry = Entry(base, op, tuple(inputs), tuple(int(n) for n in shape), line=line)
        self.entries.append(entry)
        return entry

    def build(self) -> Workflow:
        """The workflow of the entries the named ones need (the outputs, `subzero.name`d
        nodes, the inputs), in call order, named (see the module docstring): a value the
        function computed but did not use is left out."""
        self.entries = _needed(self.entries)
        taken = {e.name for e in self.entries if e.name is not None}
        counts: dict[str, int] = {}
        names: dict[int, str] = {}
        for e in self.entries:
            if e.name is not None:
                names[id(e)] = e.name
                continue
            base = _clean(e.base)
            k = counts.get(base, 0)
            candidate = base if k == 0 else f"{base}_{k}"
            while candidate in taken:
                k += 1
                candidate = f"{base}_{k}"
            counts[base] = k + 1
            taken.add(candidate)
            names[id(e)] = candidate
        wf = Workflow(self.name)
        nodes = {}
        for e in self.entries:
            if e.op is None:
                nodes[id(e)] = wf.input(names[id(e)])
            else:
                nodes[id(e)] = wf.add(e.op, *[nodes[id(i)] for i in e.inputs], name=names[id(e)])
        return wf

    # -- the tracer in force ----------------------------------------------------------------------
    def __enter__(self) -> "Tracer":
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, *exc) -> None:
        _CURRENT.reset(self._token)


def _needed(entries: list[Entry]) -> list[Entry]:
    keep = {id(e) for e in entries if e.name is not None}
    for e in reversed(entries):  # call order is topological: consumers come after their inputs
        if id(e) in keep:
            keep.update(id(i) for i in e.inputs)
    return [e for e in entries if id(e) in keep]


def current_tracer() -> Tracer | None:
    """The tracer of the trace under way in this context, or None."""
    return _CURRENT.get()


def _clean(base: str) -> str:
    out = "".join(c if c.isalnum() or c in "_.-" else "_" for c in base) or "node"
    return out if (out[0].isalpha() or out[0] == "_") else f"_{out}"



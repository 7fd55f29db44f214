"""Linked brushing (Smoke): cells brushed in one view, traced back to an input and forward
again to every output of the workflow, in one call.

A scientist selects a region of an output (a star in the detection map), and sees which
input pixels produced it and, from those pixels, everything else they reach: every
output that shares them.  Both walks keep the frontier in the form its size calls for
(boxes stay boxes through mapping operators with box forms), and the forward walk visits
each node once for all outputs (`subzero.query.QueryEngine.walk_many`).

>>> result = brush(run, "stars", box=[(10, 20), (30, 40)], to="raw")   # doctest: +SKIP
>>> result.traced.count, {k: f.count for k, f in result.linked.items()}  # doctest: +SKIP
(120, {'stars': 85})
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from subzero.errors import LineageError

if TYPE_CHECKING:
    from subzero.frontier import Frontier
    from subzero.run import Run
    from subzero.dag import Node

__all__ = ["BrushResult", "brush", "brush_data", "default_source"]


@dataclass(frozen=True)
class BrushResult:
    """The answer of `brush`: what was brushed, what it came from, what that reaches.

    Attributes
    ----------
    node, to
        The brushed node and the node traced back to (an input of the workflow).
    brushed
        The brushed cells of ``node``.
    traced
        Their backward lineage in ``to``.
    linked
        Output name -> the forward lineage of ``traced`` in that output.
    backward_seconds, forward_seconds
        Time of the two walks.
    """

    node: str
    to: str
    brushed: "Frontier"
    traced: "Frontier"
    linked: dict[str, "Frontier"]
    backward_seconds: float
    forward_seconds: float

    @property
    def seconds(self) -> float:
        """Both walks."""
        return self.backward_seconds + self.forward_seconds


def default_source(run: "Run", node: str) -> str:
    """The input of the workflow that ``node`` is computed from, when there is one only.

    Raises
    ------
    LineageError
        ``node`` depends on several inputs (naming them: give ``to``), or on none.
    """
    start = run.node(node)
    inputs = [n.name for n in run.workflow.nodes if n.is_input and n in run.workflow.ancestors(start)]
    if len(inputs) == 1:
        return inputs[0]
    if not inputs:
        raise LineageError(f"node {start.name!r} depends on no input of the workflow; nothing to trace back to")
    raise LineageError(f"node {start.name!r} is computed from inputs {', '.join(inputs)}; say which to trace back "
                       f"to with --to (to=)")


def brush(run: "Run", node: Node | str, cells: Any = None, box: Any = None, to: Node | str | None = None,
          outputs: Sequence[Node | str] | None = None, using: dict | None = None) -> BrushResult:
    """Trace ``cells`` (or ``box``) of ``node`` back to ``to``, then forward to every output.

    Parameters
    ----------
    run
        A finished run (`subzero.open_run`).
    node
        The brushed node (any node: an output, an intermediate, the input itself).
    cells, box
        The brush: coordinates (or a mask, or a `Frontier`) of ``node``, or half-open
        boxes ``[(lo, hi), ...]`` (a list of them for several).
    to
        The ancestor to trace back to; default: ``node``'s only input.
    outputs
        The nodes to trace forward to; default: the workflow's outputs (`Workflow.outputs`).
    using
        Node -> strategy to force for its steps (both walks).

    Returns
    -------
    BrushResult
        Every answer a `Frontier` (``.count``, ``.boxes()``, ``.coords()``, ``.mask()``).
    """
    start = run.node(node)
    source = run.node(to if to is not None else default_source(run, start.name))
    if source not in run.workflow.ancestors(start):
        raise LineageError(f"node {source.name!r} is not an ancestor of {start.name!r}: nothing to trace back to")
    names = [run.node(o).name for o in (outputs if outputs is not None else run.workflow.outputs)]
    if not names:
        raise LineageError("brush: no output node to trace forward to")
    t0 = time.perf_counter()
    brushed = run.frontier(start, cells, box)  # checked once, carried on as a frontier
    traced = run.backward(start, brushed, to=source, using=using, as_="frontier")
    t1 = time.perf_counter()
    linked = run.forward_many(source, traced, to=names, using=using, as_="frontier")
    t2 = time.perf_counter()
    return BrushResult(start.name, source.name, brushed, traced, linked, t1 - t0, t2 - t1)


def brush_data(result: BrushResult, fits: bool = False) -> dict[str, Any]:
    """A `BrushResult` as JSON-able data: per answer its node, shape, count and disjoint boxes
    (`subzero.tools.describe.frontier_data`; with ``fits``, FITS sections)."""
    from subzero.tools.describe import frontier_data

    return {"brushed": {"node": result.node} | frontier_data(result.brushed, fits),
            "traced": {"node": result.to} | frontier_data(result.traced, fits),
            "outputs": {name: {"node": name} | frontier_data(f, fits) for name, f in result.linked.items()},
            "coords": "fits" if fits else "numpy",
            "milliseconds": {"backward": round(1000 * result.backward_seconds, 3),
                             "forward": round(1000 * result.forward_seconds, 3),
                             "total": round(1000 * result.seconds, 3)}}

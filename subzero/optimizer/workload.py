"""A sample lineage workload: which nodes queries step through, in which direction, how wide.

A workload is a list of queries, each ``{"direction": "backward" | "forward",
"node": NAME, "to": NAME, "cells": [[...], ...]}`` (``cells`` optional: one cell).
The optimizer needs, per (node, direction), how often a query steps through it
(``p`` in SubZero section VII) and how many cells enter that step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from subzero.errors import WorkflowError
from subzero.dag import Workflow
from subzero.modes import DIRECTIONS, Direction

__all__ = ["Query", "parse_workload", "workload_record", "step_sizes"]


@dataclass(frozen=True)
class Query:
    """One checked workload query: a walk from ``node`` to ``to`` starting with ``n_cells`` cells."""

    direction: Direction
    node: str
    to: str
    n_cells: int


def parse_workload(wf: Workflow, workload: Any, shapes: dict[str, tuple[int, ...]] | None = None) -> list[Query]:
    """Validate a workload against ``wf``; raises `WorkflowError` naming the bad query.

    ``cells`` must be a list of integer coordinate lists of one rank; with ``shapes``
    (node name -> shape, for the nodes whose shape is known before the run) they are
    also checked against the shape of the query's node.
    """
    if workload is None:
        return []
    if not isinstance(workload, (list, tuple)):
        raise WorkflowError(f"workload must be a list of queries, got {type(workload).__name__}")
    queries = []
    for k, item in enumerate(workload):
        if not isinstance(item, dict) or not {"direction", "node", "to"} <= set(item):
            raise WorkflowError(f"workload query {k} must be a dict with 'direction', 'node', 'to' "
                                f"(and optionally 'cells'), got {item!r:.200}")
        if item["direction"] not in DIRECTIONS:
            raise WorkflowError(f"workload query {k}: direction must be 'backward' or 'forward', "
                                f"got {item['direction']!r}")
        try:
            node, to = wf.node(item["node"]), wf.node(item["to"])
        except WorkflowError as exc:
            raise WorkflowError(f"workload query {k}: {exc}") from None
        cells = item.get("cells")
        n = 1 if cells is None else _check_cells(cells, k, node.name, (shapes or {}).get(node.name))
        queries.append(Query(Direction.parse(item["direction"]), node.name, to.name, max(n, 1)))
    return queries


def workload_record(wf: Workflow, workload: Any) -> list[dict] | None:
    """A checked workload (see `parse_workload`) as plain JSON: node names for nodes given as
    `Node` objects, cells as lists of ints; for the catalog and the run's fingerprint."""
    if workload is None:
        return None
    out = []
    for item in workload:
        entry = {"direction": item["direction"], "node": wf.node(item["node"]).name, "to": wf.node(item["to"]).name}
        if item.get("cells") is not None:
            entry["cells"] = [[int(v) for v in row] for row in item["cells"]]
        out.append(entry)
    return out


def _check_cells(cells, k: int, node: str, shape: tuple[int, ...] | None) -> int:
    """The number of cells of a workload query, once they are checked."""
    import numpy as np

    from subzero.cells import as_coords
    from subzero.errors import LineageError

    ok = isinstance(cells, (list, tuple)) and all(
        isinstance(c, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in c) for c in cells)
    if not ok or len({len(c) for c in cells}) > 1:
        raise WorkflowError(f"workload query {k}: cells must be a list of integer coordinates of node {node!r}, "
                            f"e.g. [[3, 4], [5, 6]], got {cells!r:.200}")
    bad = next((c for c in cells for v in c if v < 0 or v >= 2**62), None)
    if bad is not None:
        raise WorkflowError(f"workload query {k}: cell {tuple(bad)} of node {node!r} is out of bounds; "
                            f"coordinates count from 0{f' and stay below {tuple(shape)}' if shape else ''}")
    if shape is None or not cells:
        return len(cells)
    try:
        return len(as_coords(np.array(cells, dtype=np.int64), shape, f"node {node!r}"))
    except LineageError as exc:
        raise WorkflowError(f"workload query {k}: {exc}") from None


def step_sizes(wf: Workflow, queries: list[Query], fan: Callable[[str, Direction, float], float]
               ) -> tuple[dict[tuple[str, Direction], float], dict[tuple[str, Direction], float]]:
    """Per (node, direction): (number of queries stepping through it, mean cells entering).

    ``fan(node, direction, cells_in)`` predicts how many cells leave a step (from the
    calibration statistics); frontier sizes are propagated along each query's paths.
    """
    access: dict[tuple[str, Direction], float] = {}
    entering: dict[tuple[str, Direction], list[float]] = {}
    for q in queries:
        src, dst = wf.node(q.node), wf.node(q.to)
        backward = q.direction is Direction.BACKWARD
        low, high = (dst, src) if backward else (src, dst)
        nodes = [n for n in wf.between(low, high) if n is not low]
        if not nodes and src is not dst:
            raise WorkflowError(f"workload query {q.node!r} -> {q.to!r} ({q.direction}): no path")
        sizes = {src.name: float(q.n_cells)}
        order = reversed(nodes) if backward else nodes
        for node in order:
            if backward:
                size = sizes.get(node.name, 0.0)
                targets = [p for p in node.inputs if p in nodes or p is low]
                for p in targets:
                    sizes[p.name] = sizes.get(p.name, 0.0) + fan(node.name, Direction.BACKWARD, size)
            else:
                size = sum(sizes.get(p.name, 0.0) for p in node.inputs if p.name in sizes)
                sizes[node.name] = fan(node.name, Direction.FORWARD, size)
            key = (node.name, q.direction)
            access[key] = access.get(key, 0.0) + 1.0
            entering.setdefault(key, []).append(size)
    return access, {k: sum(v) / len(v) for k, v in entering.items()}

"""A sample lineage workload: which nodes queries step through, in which direction, how wide.

A workload is a list of queries, each ``{"direction": "backward" | "forward",
"node": NAME, "to": NAME, "cells": [[...], ...]}`` (``cells`` optional: one cell).
The optimizer needs, per (node, direction), how often a query steps through it
(``p`` in SubZero section VII) and how many cells enter that step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from subzero.errors import WorkflowError
from subzero.workflow import Workflow

__all__ = ["Query", "parse_workload", "step_sizes"]

DIRECTIONS = ("backward", "forward")


@dataclass(frozen=True)
class Query:
    direction: str
    node: str
    to: str
    n_cells: int


def parse_workload(wf: Workflow, workload) -> list[Query]:
    """Validate a workload against ``wf``; raises `WorkflowError` naming the bad query."""
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
        node, to = wf.node(item["node"]), wf.node(item["to"])
        cells = item.get("cells") or [None]
        queries.append(Query(item["direction"], node.name, to.name, max(len(cells), 1)))
    return queries


def step_sizes(wf: Workflow, queries: list[Query], fan: Callable[[str, str, float], float]):
    """Per (node, direction): (number of queries stepping through it, mean cells entering).

    ``fan(node, direction, cells_in)`` predicts how many cells leave a step (from the
    calibration statistics); frontier sizes are propagated along each query's paths.
    """
    access: dict[tuple[str, str], float] = {}
    entering: dict[tuple[str, str], list[float]] = {}
    for q in queries:
        src, dst = wf.node(q.node), wf.node(q.to)
        low, high = (dst, src) if q.direction == "backward" else (src, dst)
        nodes = [n for n in wf.between(low, high) if n is not low]
        if not nodes and src is not dst:
            raise WorkflowError(f"workload query {q.node!r} -> {q.to!r} ({q.direction}): no path")
        sizes = {src.name: float(q.n_cells)}
        order = reversed(nodes) if q.direction == "backward" else nodes
        for node in order:
            if q.direction == "backward":
                size = sizes.get(node.name, 0.0)
                targets = [p for p in node.inputs if p in nodes or p is low]
                for p in targets:
                    sizes[p.name] = sizes.get(p.name, 0.0) + fan(node.name, "backward", size)
            else:
                size = sum(sizes.get(p.name, 0.0) for p in node.inputs if p.name in sizes)
                sizes[node.name] = fan(node.name, "forward", size)
            key = (node.name, q.direction)
            access[key] = access.get(key, 0.0) + 1.0
            entering.setdefault(key, []).append(size)
    return access, {k: sum(v) / len(v) for k, v in entering.items()}

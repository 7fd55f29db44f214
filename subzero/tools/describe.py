"""Machine-readable descriptions of a stored run, for ``--json`` (``subzero explain --json``).

Built from the public `Run` API (its workflow and path) and the run's typed catalog
(`subzero.catalog.RunRecord`): a node that is not committed is listed as such.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from subzero.run import Run
    from subzero.dag import Node
    from subzero.frontier import Frontier

__all__ = ["explain_data", "jsonable", "operator_name", "committed_summary", "frontier_data", "human_bytes"]


def jsonable(value: Any) -> Any:
    """``value`` with numpy scalars/arrays and tuples turned into JSON types (recursively).

    Examples
    --------
    >>> import numpy as np
    >>> jsonable({"n": np.int64(3), "shape": (2, 3)})
    {'n': 3, 'shape': [2, 3]}
    """
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return value.tolist()
    return value


def frontier_data(frontier: Frontier, fits: bool = False) -> dict[str, Any]:
    """A set of cells (a `subzero.frontier.Frontier`) as JSON-able data: its shape, count and
    disjoint boxes, numpy's half-open ``[[lo, hi], ...]`` per axis or, with ``fits``,
    inclusive 1-based FITS sections ``"X0:X1,Y0:Y1"``.

    Examples
    --------
    >>> import numpy as np
    >>> from subzero.frontier import Frontier
    >>> f = Frontier.of_boxes(np.array([[2, 5]]), np.array([[4, 8]]), (10, 10))
    >>> frontier_data(f)["boxes"], frontier_data(f, fits=True)["boxes"]
    ([[[2, 4], [5, 8]]], ['6:8,3:4'])
    """
    bounds: tuple[Any, Any] = frontier.boxes() if not frontier.is_empty else ([], [])
    lo, hi = bounds
    if fits:
        boxes: list = [",".join(f"{int(a) + 1}:{int(b)}" for a, b in zip(l[::-1], h[::-1])) for l, h in zip(lo, hi)]
    else:
        boxes = [[[int(a), int(b)] for a, b in zip(l, h)] for l, h in zip(lo, hi)]
    return {"shape": list(frontier.shape), "count": int(frontier.count), "boxes": boxes}


def human_bytes(n: float | None) -> str:
    """``1.5 MB``-style text for a byte count (decimal units); ``-`` for None."""
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB"):
        if abs(n) < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def operator_name(node: Node) -> str:
    """The class name of a node's operator (of the stand-in's declared operator for a node a
    partial store did not commit), ``"-"`` for an input."""
    from subzero.run import Uncommitted

    if node.is_input:
        return "-"
    if isinstance(node.operator, Uncommitted):
        return node.operator.name
    name = type(node.operator).__name__
    if getattr(node.operator, "lineage_source", None) == "inferred":  # sz.udf(lineage="infer")
        return f"{name}, lineage inferred: {getattr(node.operator, 'lineage')}"
    return name


def committed_summary(status: str, committed: list[str], nodes: list[str]) -> str:
    """``"status done"``, or for a run that did not finish which of its nodes are committed.

    Examples
    --------
    >>> committed_summary("failed", ["x", "a"], ["x", "a", "b", "c"])
    'status failed: 2 of 4 nodes committed (x, a); not committed: b, c'
    """
    if status == "done" and len(committed) == len(nodes):
        return f"status {status}"
    missing = [n for n in nodes if n not in committed]
    return (f"status {status}: {len(committed)} of {len(nodes)} nodes committed ({', '.join(committed) or 'none'})"
            + (f"; not committed: {', '.join(missing)}" if missing else ""))


def explain_data(run: "Run") -> dict[str, Any]:
    """What ``subzero explain`` prints, as a dict: per node, the strategies it stored and
    why, measured statistics next to the optimizer's predictions.

    Returns
    -------
    dict
        ``{"store", "workflow", "status", "executor", "created", "wall_seconds",
        "input_bytes", "optimizer", "nodes": [...], "total_lineage_bytes"}``; each node is
        ``{"name", "kind", "inputs", "committed", "shape", "dtype"}`` plus, for an operator,
        ``{"operator", "strategies", "reason", "measured", "predicted", "pruned",
        "dropped"}``; ``optimizer`` is ``None`` when strategies were pinned or defaulted.
    """
    cat = run.catalog
    nodes = []
    total = 0
    for node in run.workflow.nodes:
        record = cat.nodes.get(node.name)
        item: dict[str, Any] = {"name": node.name, "kind": "input" if node.is_input else "operator",
                                "inputs": [i.name for i in node.inputs], "committed": record is not None,
                                "shape": list(record.shape) if record is not None else None,
                                "dtype": record.dtype if record is not None else None}
        if not node.is_input:
            item["operator"] = operator_name(node)
        if record is not None and not node.is_input:
            stats = record.stats
            disk = sum(stats.bytes.values()) if stats is not None else 0
            total += disk
            item.update({
                "strategies": list(record.strategies),
                "reason": record.reason,
                "measured": {"disk_bytes": disk, "bytes": dict(stats.bytes) if stats else {},
                             "op_seconds": stats.op_seconds if stats else None,
                             "lineage_seconds": stats.lineage_seconds if stats else None,
                             "write_seconds": stats.write_seconds if stats else None,
                             "tiles": stats.tiles if stats else None},
                "predicted": record.predicted, "pruned": record.pruned, "dropped": record.dropped,
            })
        nodes.append(item)
    return jsonable({
        "store": run.path, "workflow": run.workflow.name, "status": cat.status, "executor": cat.executor,
        "created": cat.created, "wall_seconds": cat.wall_seconds, "input_bytes": cat.input_bytes,
        "optimizer": cat.optimizer or None, "committed": run.committed, "nodes": nodes,
        "total_lineage_bytes": total,
    })

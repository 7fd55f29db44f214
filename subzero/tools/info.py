"""``subzero info STORE``: what a store holds, from its catalog alone.

Nodes, inputs, shapes, dtypes, chunks, strategies, sizes and the run's status, read
from the typed catalog (`subzero.catalog.RunRecord`) and the store's file sizes:
no operator is unpickled and no lineage is opened, so it answers for any store,
finished, failed or still being written, and for workflows whose modules this
process cannot import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from subzero.catalog import NodeRecord, RunRecord
from subzero.tools.describe import committed_summary, human_bytes, jsonable

if TYPE_CHECKING:
    from subzero.store import LineageReader

__all__ = ["info_data", "info_text"]


def _node(spec: dict[str, Any], record: NodeRecord | None, store: LineageReader) -> dict[str, Any]:
    item: dict[str, Any] = {
        "name": spec["name"], "kind": "operator" if spec.get("inputs") else "input",
        "inputs": list(spec.get("inputs", [])), "operator": str(spec.get("operator", "")).rsplit(".", 1)[-1] or None,
        "committed": record is not None,
    }
    params = spec.get("params") or {}
    if params.get("lineage_source") == "inferred":  # sz.udf(lineage="infer"): say it was inferred
        item["operator"] = f"{item['operator']} (lineage inferred: {params.get('lineage')})"
    if params.get("coarse"):  # a traced call without an exact rule: all-to-all over what it read
        item["operator"] = f"{item['operator']} (coarse)"
        item["coarse"] = str(params.get("reason", ""))
    if record is None:
        return item
    stats = record.stats
    item.update({
        "shape": list(record.shape), "dtype": record.dtype, "chunks": list(record.array.chunks),
        "tiles": stats.tiles if stats is not None else None,
        "array_bytes": record.array.nbytes, "array_disk_bytes": store.disk_bytes(record.name),
        "array_stored": record.array.stored, "array_why": record.array.why or None,
        "strategies": list(record.strategies), "reason": record.reason or None,
        "lineage_bytes": sum(stats.bytes.values()) if stats is not None else 0,
        "lineage_file_bytes": sum(stats.file_bytes.values()) if stats is not None else 0,
        "dropped": dict(record.dropped), "metadata": sorted(record.metadata),
    })
    return item


def info_data(path: Any) -> dict[str, Any]:
    """A store's contents as a dict (what ``subzero info --json`` prints).

    Returns
    -------
    dict
        ``{"store", "workflow", "status", "writer", "committed", "executor", "master",
        "created", "wall_seconds", "tile_shape", "budgets", "optimized", "replayed_from",
        "inputs", "outputs", "nodes", "totals"}``.  Each node: ``name``, ``kind``,
        ``inputs``, ``operator``, ``committed`` and, once committed, ``shape``, ``dtype``,
        ``chunks``, ``tiles``, ``array_bytes`` (in memory), ``array_disk_bytes`` (stored,
        compressed), ``array_stored`` (False: not stored, recomputed when read), ``array_why``
        (why it was stored or not), ``strategies``, ``reason``, ``lineage_bytes``, ``lineage_file_bytes``,
        ``dropped``, ``metadata`` (the keys kept with it, e.g. ``fits_header``).
        ``writer`` describes the process writing the store, if one holds it.
    """
    from subzero.store import open_store

    store = open_store(path)
    cat: RunRecord = store.read_catalog()
    specs = list(cat.workflow.get("nodes", []))
    nodes = [_node(spec, cat.nodes.get(spec["name"]), store) for spec in specs]
    read = {i for spec in specs for i in spec.get("inputs", [])}
    current = store.writer()
    writer = None
    if current is not None:
        writer = {"pid": current.pid, "host": current.host, "started": current.started, "alive": current.alive}
    committed = [n for n in nodes if n["committed"]]
    totals = {
        "array_bytes": sum(n["array_bytes"] for n in committed),
        "array_disk_bytes": sum(n["array_disk_bytes"] or 0 for n in committed),
        "lineage_bytes": sum(n["lineage_bytes"] for n in committed),
        "lineage_file_bytes": sum(n["lineage_file_bytes"] for n in committed),
        "input_bytes": cat.input_bytes,
        "store_disk_bytes": store.disk_bytes(),
    }
    return jsonable({
        "store": store.url, "workflow": cat.workflow.get("name"), "status": cat.status, "writer": writer,
        "committed": [n["name"] for n in committed], "executor": cat.executor, "master": cat.master,
        "created": cat.created, "wall_seconds": cat.wall_seconds, "tile_shape": cat.tile_shape,
        "budgets": {k: v for k, v in cat.budgets.items() if v is not None}, "optimized": cat.optimizer is not None,
        "replayed_from": cat.replayed_from,
        "inputs": [s["name"] for s in specs if not s.get("inputs")],
        "outputs": [s["name"] for s in specs if s.get("inputs") and s["name"] not in read],
        "nodes": nodes, "totals": totals,
    })




def info_text(data: dict[str, Any]) -> str:
    """The text ``subzero info`` prints for `info_data`'s dict: a header, then one row per node."""
    names = [n["name"] for n in data["nodes"]]
    status = committed_summary(data["status"], data["committed"], names)
    writer = data.get("writer")
    if writer and data["status"] == "running":
        state = {True: "writing now", False: "its writer is gone", None: "writer unknown"}[writer["alive"]]
        status += f" ({state}: pid {writer['pid']} on {writer['host']}, since {writer['started']})"
    wall = data.get("wall_seconds")
    where = data["executor"] + (f" ({data['master']})" if data.get("master") else "")
    lines = [f"store {data['store']}: workflow {data['workflow']!r}, {status}",
             f"  made {data['created']} on {where}" + (f" in {wall:.1f} s" if wall is not None else "")
             + ("; strategies chosen by the optimizer" if data["optimized"] else ""),
             f"  inputs: {', '.join(data['inputs'])}; outputs: {', '.join(data['outputs']) or '-'}"]
    if data.get("replayed_from"):
        origin = data["replayed_from"]
        lines.append(f"  replayed from {origin.get('store')}: changed cells "
                     + ", ".join(f"{k} {v}" for k, v in (origin.get("changed") or {}).items()))
    rows = [("node", "operator", "shape", "dtype", "tiles", "strategies", "array", "on disk", "lineage")]
    for n in data["nodes"]:
        if not n["committed"]:
            rows.append((n["name"], n["operator"] or "input", "not committed", "", "", "", "", "", ""))
            continue
        extra = " +FITS header" if "fits_header" in n["metadata"] else ""
        rows.append((n["name"], n["operator"] or "input", "x".join(map(str, n["shape"])) or "()", n["dtype"] + extra,
                     str(n["tiles"] or "-"), ", ".join(n["strategies"]) or "-", human_bytes(n["array_bytes"]),
                     human_bytes(n["array_disk_bytes"]) if n.get("array_stored", True) else "not stored", human_bytes(n["lineage_bytes"]) if n["kind"] == "operator" else "-"))
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    lines.append("")
    lines.extend("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)
    t = data["totals"]
    ratio = t["lineage_bytes"] / t["input_bytes"] if t["input_bytes"] else 0.0
    lines.append(f"\ntotal: arrays {human_bytes(t['array_bytes'])} ({human_bytes(t['array_disk_bytes'])} on disk), lineage "
                 f"{human_bytes(t['lineage_bytes'])} ({ratio:.2f}x the input), store {human_bytes(t['store_disk_bytes'])}")
    unstored = [n["name"] for n in data["nodes"] if n["committed"] and not n.get("array_stored", True)]
    if unstored:
        lines.append(f"\nnot stored ({len(unstored)}): intermediates no query needs stored, recomputed from their "
                     f"stored ancestors when read (keep='all' stores every array): {', '.join(unstored)}")
    coarse = [n for n in data["nodes"] if n.get("coarse")]
    if coarse:
        lines.append(f"\ncoarse steps ({len(coarse)}): every output cell depends on every cell they read")
        lines.extend(f"  {n['name']}: {n['coarse']}" for n in coarse)
    return "\n".join(lines)

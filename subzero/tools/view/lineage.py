"""The viewer's questions over a stored run: the nodes it shows, and the lineage of a brush.

`node_list` describes every node for ``GET /api/nodes``; `parse_lineage_request` checks the
body of ``POST /api/lineage`` (every mistake a `LineageError` naming it, which the app turns
into HTTP 400); `lineage_answers` answers it with `Run.backward_many`/`Run.forward_many` in
the box form (``as_="frontier"``, then disjoint boxes), so a brush is never expanded into
cells where the steps can work on boxes.

A box is flat, numpy's half-open bounds per axis: ``[r0, r1, c0, c1]`` for a 2-D node
(``[lo0, hi0, lo1, hi1, ...]`` for any rank).

>>> req = parse_lineage_request(run, {"node": "stars", "direction": "backward",   # doctest: +SKIP
...                                   "boxes": [[10, 26, 30, 46]], "to": None})
>>> lineage_answers(run, req)["answers"]["raw"]["cells"]                          # doctest: +SKIP
484
"""

from __future__ import annotations

import reprlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from subzero import config
from subzero.boxes import cover_coords, normalize
from subzero.errors import LineageError, QueryCancelled
from subzero.modes import Direction

if TYPE_CHECKING:
    from subzero.frontier import Frontier
    from subzero.run import Run

__all__ = ["LineageRequest", "node_list", "display_kind", "parse_lineage_request", "lineage_answers",
           "answer_frontiers", "disjoint_boxes", "grid_disjoint", "reachable", "shown", "DIRECTIONS"]

DIRECTIONS = ("backward", "forward")
#: boxes checked pairwise for overlap up to this many; beyond, the cover is rebuilt from the cells
_PAIRWISE_LIMIT = 2048
#: overlapping boxes up to this many are made disjoint on the grid of their bounds (`grid_disjoint`)
_GRID_LIMIT = 64

_repr = reprlib.Repr()
_repr.maxlevel, _repr.maxlist, _repr.maxdict, _repr.maxstring, _repr.maxother, _repr.maxlong = 3, 8, 6, 60, 60, 40


def shown(value: Any) -> str:
    """``repr(value)`` cut short (nesting, long lists and strings elided with ``...``), for
    error messages that quote what a request sent.

    >>> shown(list(range(100)))
    '[0, 1, 2, 3, 4, 5, 6, 7, ...]'
    """
    return _repr.repr(value)


@dataclass(frozen=True)
class LineageRequest:
    """A checked ``POST /api/lineage`` body: the brushed node, the direction, the brush as
    ``(lo, hi)`` arrays of shape ``(N, ndim)``, and the nodes to answer for."""

    node: str
    direction: Direction
    lo: np.ndarray
    hi: np.ndarray
    to: tuple[str, ...]


def display_kind(run: "Run", name: str) -> str:
    """How a node is drawn: ``"mask"`` (booleans: flags), ``"labels"`` (a categorical
    colormap) or ``"image"`` (zscale + asinh).

    Integers are labels when their operator says so (its class name holds ``label``,
    ``detect`` or ``segment``), or when a 256 x 256 sample from the middle of a 2-D array is
    non-negative and mostly background (a quarter or more zeros) or holds few distinct values:
    a segmentation map, not counts.
    """
    record = run.catalog.node(name)
    dtype = np.dtype(record.dtype)
    if dtype.kind == "b":
        return "mask"
    if dtype.kind not in "iu":
        return "image"
    node = run.workflow.node(name)
    if not node.is_input and any(w in type(node.operator).__name__.lower() for w in ("label", "detect", "segment")):
        return "labels"
    shape = record.shape
    if len(shape) != 2:
        return "image"
    r0, c0 = max(0, shape[0] // 2 - 128), max(0, shape[1] // 2 - 128)
    sample = np.asarray(run.output(name)[r0:r0 + 256, c0:c0 + 256])
    if sample.size and sample.min() >= 0 and (np.mean(sample == 0) >= 0.25 or np.unique(sample).size <= 64):
        return "labels"
    return "image"


def reachable(run: "Run", name: str, direction: "Direction | str") -> list[str]:
    """The committed nodes ``direction`` reaches from ``name`` (its ancestors backward, its
    descendants forward), in workflow order."""
    node = run.node(name)
    backward = Direction.parse(direction) is Direction.BACKWARD
    reach = run.workflow.ancestors(node) if backward else run.workflow.descendants(node)
    return [n.name for n in run.workflow.nodes if n in reach and n is not node and n.name in run.catalog.nodes]


def node_list(run: "Run", sky: dict[str, bool] | None = None,
              display: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Every committed node, as ``GET /api/nodes`` lists it: ``name, operator, shape, dtype,
    strategies, inputs`` (the contract) plus ``kind`` (input/operator), ``display`` (see
    `display_kind`; those of ``display`` where it names the node) and ``wcs`` (whether pixel
    positions have sky coordinates)."""
    from subzero.tools.describe import operator_name

    out = []
    for node in run.workflow.nodes:
        if node.name not in run.catalog.nodes:
            continue
        record = run.catalog.node(node.name)
        out.append({"name": node.name, "operator": operator_name(node), "shape": list(record.shape),
                    "dtype": str(record.dtype), "strategies": list(record.strategies),
                    "inputs": [i.name for i in node.inputs], "kind": record.kind,
                    "display": (display or {}).get(node.name) or display_kind(run, node.name), "wcs": bool((sky or {}).get(node.name, False))})
    return out


def _int(value: Any, box: Any) -> int:
    """A bound of ``box`` as an int (the message, which quotes the box, made only when it is not one)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float)
                                                                          and not value.is_integer()):
        raise LineageError(f"box {shown(box)}: bound must be an integer, got {shown(value)}")
    return int(value)


def parse_lineage_request(run: "Run", body: Any, max_boxes: int | None = None) -> LineageRequest:
    """Check a ``POST /api/lineage`` body against the run.

    ``max_boxes`` is the most boxes a brush may have (default: the ``view_max_boxes`` setting).

    Raises
    ------
    LineageError
        Not an object, an unknown field, a missing or unknown node, a bad direction, boxes
        that are not ``[[lo0, hi0, lo1, hi1, ...], ...]`` inside the array with ``lo < hi`` or
        more than ``max_boxes`` of them, or a ``to`` that is empty or names a node the
        direction does not reach; the message says which and what to send.
    """
    if not isinstance(body, dict):
        raise LineageError('the body must be a JSON object: {"node": NAME, "direction": "backward"|"forward", '
                           '"boxes": [[r0, r1, c0, c1], ...], "to": [NAME, ...] | null}')
    unknown = set(body) - {"node", "direction", "boxes", "to"}
    if unknown:
        raise LineageError(f"unknown field(s) {', '.join(shown(u) for u in sorted(unknown))}; the fields are node, "
                           "direction, boxes, to")
    name = body.get("node")
    if not isinstance(name, str):
        raise LineageError(f'"node" must be a node name (a string), got {shown(name)}')
    if name not in run.catalog.nodes:
        raise LineageError(f"unknown node {shown(name)}; the nodes are {', '.join(run.committed)}")
    if not isinstance(body.get("direction"), str) or body["direction"] not in DIRECTIONS:
        raise LineageError(f'"direction" must be "backward" or "forward", got {shown(body.get("direction"))}')
    direction = Direction(body["direction"])
    shape = run.shape(name)
    boxes = body.get("boxes")
    if not isinstance(boxes, list) or not boxes:
        raise LineageError(f'"boxes" must be a non-empty list of half-open boxes [[r0, r1, c0, c1], ...], got '
                           f'{shown(boxes)}')
    limit = config.get("view_max_boxes") if max_boxes is None else max_boxes
    if len(boxes) > limit:
        raise LineageError(f'"boxes" has {len(boxes)} boxes, over {limit}, the limit of the view_max_boxes setting '
                           '(SUBZERO_VIEW_MAX_BOXES); brush fewer, larger boxes, or raise the setting')
    lo = np.empty((len(boxes), len(shape)), np.int64)
    hi = np.empty_like(lo)
    for k, box in enumerate(boxes):
        if not isinstance(box, list) or len(box) != 2 * len(shape):
            raise LineageError(f"box {shown(box)}: node {name!r} has shape {tuple(shape)}, so a box is "
                               f"{2 * len(shape)} integers [lo, hi) per axis, e.g. {[0, 1] * len(shape)}")
        for axis, n in enumerate(shape):
            a, b = _int(box[2 * axis], box), _int(box[2 * axis + 1], box)
            if not 0 <= a < b <= n:
                raise LineageError(f"box {shown(box)} is outside node {name!r} of shape {tuple(shape)} or empty: axis "
                                   f"{axis} needs 0 <= lo < hi <= {n}, got [{a}, {b})")
            lo[k, axis], hi[k, axis] = a, b
    reach = reachable(run, name, direction)
    to = body.get("to")
    if to is None:
        targets = tuple(reach)
    else:
        where = "upstream" if direction is Direction.BACKWARD else "downstream"
        if not isinstance(to, list) or not all(isinstance(t, str) for t in to):
            raise LineageError(f'"to" must be a list of node names or null (every node reached), got {shown(to)}')
        if not to:
            raise LineageError(f'"to" is an empty list, which asks for nothing; name one or more {where} nodes of '
                               f'{name!r} ({", ".join(reach) or "none"}), or give null for all of them')
        for t in to:
            if t not in run.catalog.nodes:
                raise LineageError(f"unknown node {shown(t)} in \"to\"; the nodes are {', '.join(run.committed)}")
            if t not in reach:
                raise LineageError(f"node {t!r} is not {where} of {name!r}, so it has no {direction} lineage from it; "
                                   f"{where} nodes: {', '.join(reach) or 'none'}")
        targets = tuple(dict.fromkeys(to))
    return LineageRequest(name, direction, lo, hi, targets)


def disjoint_boxes(frontier: "Frontier") -> tuple[np.ndarray, np.ndarray]:
    """A frontier as disjoint half-open boxes ``(lo, hi)`` whose union is exactly its cells.

    A frontier built from boxes keeps them as given, and the union of two walks concatenates
    them, so boxes may overlap: they are checked pairwise (vectorized) and, where any
    overlap, cut on the grid of their bounds (`grid_disjoint`, up to 64 boxes) or rebuilt from
    the cells (`subzero.boxes.normalize`).
    """
    nd = len(frontier.shape)
    if frontier.is_empty or nd == 0:
        n = 0 if frontier.is_empty else 1
        return np.zeros((n, nd), np.int64), np.zeros((n, nd), np.int64)
    lo, hi = (np.asarray(b, np.int64) for b in frontier.boxes())
    if frontier.kind != "boxes" or len(lo) < 2:
        return lo, hi
    if len(lo) <= _PAIRWISE_LIMIT:
        meet = np.all((lo[:, None, :] < hi[None, :, :]) & (lo[None, :, :] < hi[:, None, :]), axis=2)
        np.fill_diagonal(meet, False)
        if not meet.any():
            return lo, hi
    if len(lo) <= _GRID_LIMIT:
        return grid_disjoint(lo, hi)
    return normalize(lo, hi, frontier.shape)


def grid_disjoint(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint boxes whose union is exactly that of a few (overlapping) boxes ``[lo, hi)``.

    The boxes' own bounds cut each axis into intervals; the grid of those intervals (at most
    ``(2N)^ndim`` elements for ``N`` boxes, however many cells the boxes hold) is marked box by
    box and covered (`subzero.boxes.cover_coords`), and its boxes are read back in cells.

    >>> lo, hi = grid_disjoint(np.array([[0, 0], [2, 2]]), np.array([[4, 4], [6, 6]]))
    >>> int(np.prod(hi - lo, axis=1).sum())  # 16 + 16 - 4 shared
    28
    """
    lo, hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
    keep = np.all(hi > lo, axis=1)
    lo, hi = lo[keep], hi[keep]
    nd = lo.shape[1]
    if not len(lo):
        return lo, hi
    edges = [np.unique(np.concatenate([lo[:, a], hi[:, a]])) for a in range(nd)]
    at_lo = np.stack([np.searchsorted(e, lo[:, a]) for a, e in enumerate(edges)], axis=1)
    at_hi = np.stack([np.searchsorted(e, hi[:, a]) for a, e in enumerate(edges)], axis=1)
    grid = np.zeros([len(e) - 1 for e in edges], bool)
    for a_lo, a_hi in zip(at_lo.tolist(), at_hi.tolist()):  # per box (a few), never per cell
        grid[tuple(slice(a, b) for a, b in zip(a_lo, a_hi))] = True
    g_lo, g_hi = cover_coords(np.argwhere(grid))
    out_lo = np.stack([e[g_lo[:, a]] for a, e in enumerate(edges)], axis=1)
    out_hi = np.stack([e[g_hi[:, a]] for a, e in enumerate(edges)], axis=1)
    return out_lo, out_hi


def _check_cancel(cancel: Any, what: str) -> None:
    if cancel is not None and cancel.is_set():
        raise QueryCancelled(f"the brush was cancelled {what}: a newer brush of the same client superseded it")


def answer_frontiers(run: "Run", request: LineageRequest, cancel: Any = None) -> tuple[dict[str, "Frontier"], float]:
    """The answer of each node of ``request.to`` as a `Frontier`, and the seconds the walk took.

    Walks run concurrently from any number of threads (a `Run`'s query engine and shard
    readers are shared and thread-safe). ``cancel`` (a ``threading.Event``) stops the walk
    at its next step once set: `subzero.errors.QueryCancelled`.
    """
    if not request.to:
        return {}, 0.0
    box = [list(zip(lo.tolist(), hi.tolist())) for lo, hi in zip(request.lo, request.hi)]
    walk = run.backward_many if request.direction is Direction.BACKWARD else run.forward_many
    _check_cancel(cancel, "before its walk began")
    t0 = time.perf_counter()
    got = walk(request.node, box=box, to=list(request.to), as_="frontier", cancel=cancel)
    return got, time.perf_counter() - t0


def lineage_answers(run: "Run", request: LineageRequest, cancel: Any = None) -> dict[str, Any]:
    """``{"answers": {NAME: {"boxes": [[r0, r1, c0, c1], ...], "cells": N, "bbox": [...] | null}},
    "ms": M}``: per node disjoint flat boxes whose union is exactly the answer of
    `Run.backward`/`Run.forward`, its cell count and bounding box; ``ms`` is the server time
    of the walk and of making the boxes. ``cancel``: see `answer_frontiers` (also checked
    between the answers' boxes)."""
    t0 = time.perf_counter()
    frontiers, _ = answer_frontiers(run, request, cancel)
    answers = {}
    made: dict[tuple, dict[str, Any]] = {}  # nodes a chain of elementwise steps reaches share their cells
    for name, frontier in frontiers.items():
        _check_cancel(cancel, "while its answers were made")
        key: tuple = ("frontier", id(frontier))  # a walk hands the same frontier to the nodes of an elementwise chain
        if frontier.kind == "boxes":  # and unions of the same boxes reach several nodes (two exposures' chains)
            lo, hi = frontier.boxes()
            key = (frontier.shape, lo.tobytes(), hi.tobytes())
        elif frontier.kind == "ids":
            ids = frontier.ids()
            key = (frontier.shape, ids.__array_interface__["data"][0], len(ids), ids.strides)
        if key in made:
            answers[name] = made[key]
            continue
        lo, hi = disjoint_boxes(frontier)
        flat = np.empty((len(lo), 2 * lo.shape[1]), np.int64)
        flat[:, 0::2], flat[:, 1::2] = lo, hi
        cells = int(np.prod(hi - lo, axis=1).sum()) if len(lo) else 0
        bbox = None
        if len(lo):
            bbox = np.empty(2 * lo.shape[1], np.int64)
            bbox[0::2], bbox[1::2] = lo.min(axis=0), hi.max(axis=0)
            bbox = bbox.tolist()
        answers[name] = {"boxes": flat.tolist(), "cells": cells, "bbox": bbox}
        made[key] = answers[name]
    return {"answers": answers, "ms": round(1000 * (time.perf_counter() - t0), 3)}

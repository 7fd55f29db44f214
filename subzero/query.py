"""The query executor: one lineage step through one node, from stored lineage or re-execution.

The frontier (`subzero.frontier.Frontier`) is a set of cells over the array a step
starts from; each step returns one over the array it reaches.  A step costs its
frontier, not the array: stored lineage is read only from the shards of the tiles the
frontier touches (the tiles of its cells for lookups keyed by them, the tiles whose
input box it meets otherwise), mapping functions see only the frontier's cells (or
boxes), and black-box steps re-run only the touched tiles.  Everything runs in the
calling process: no Spark job, no JVM.

The executor reads a run through the small `LineageSource` interface (shapes, stored
strategies, the tile grid, shard readers, tile tasks), not through `subzero.run.Run`.
"""

from __future__ import annotations

from typing import Iterator, Protocol

import numpy as np

from subzero.encoders import encoder_for
from subzero.encoders.base import FullEncoder
from subzero.errors import LineageError, StoreError
from subzero.frontier import MAX_BOX_EXPANSION, Frontier
from subzero.modes import Mode, Strategy
from subzero.runtime import NodeTask, expand_payloads, trace_tile
from subzero.tiling import Tile

__all__ = ["LineageSource", "TileGrid", "step", "walk", "walk_many", "check_forced"]


class TileGrid:
    """A node's tiles as arrays: output boxes and, per input, the box holding each tile's
    lineage (`subzero.Operator.lineage_box`: by default the box the tile reads)."""

    def __init__(self, tiles: list[Tile], op):
        self.tiles = tiles
        ndim = len(op.output_shape)
        self.out_lo = np.array([[lo for lo, _ in t.box] for t in tiles], np.int64).reshape(len(tiles), ndim)
        self.out_hi = np.array([[hi for _, hi in t.box] for t in tiles], np.int64).reshape(len(tiles), ndim)
        self.in_lo, self.in_hi = [], []
        for i, shape in enumerate(op.input_shapes):
            boxes = [op.lineage_box(t.box, i) for t in tiles]
            self.in_lo.append(np.array([[lo for lo, _ in b] for b in boxes], np.int64).reshape(len(tiles), len(shape)))
            self.in_hi.append(np.array([[hi for _, hi in b] for b in boxes], np.int64).reshape(len(tiles), len(shape)))

    def key_boxes(self, side: int | None) -> tuple[np.ndarray, np.ndarray]:
        """The tiles' output boxes (``side`` None) or the boxes they read of input ``side``."""
        return (self.out_lo, self.out_hi) if side is None else (self.in_lo[side], self.in_hi[side])

    def split(self, frontier: Frontier, side: int | None) -> list[tuple[int, Frontier]]:
        """The tiles whose box (output, or input ``side``) holds frontier cells, each with those cells."""
        lo, hi = self.key_boxes(side)
        box = frontier.bbox()
        if box is None:
            return []
        near = np.flatnonzero(np.all((lo < box[1]) & (hi > box[0]), axis=1))
        if frontier.kind != "ids":
            out = []
            for t in near.tolist():
                if frontier.meets(lo[t], hi[t]):
                    out.append((t, frontier.within(lo[t], hi[t])))
            return out
        coords = frontier.coords()  # sorted by flat id, so by axis 0
        ids = frontier.ids()
        out = []
        for t in near.tolist():
            a, b = np.searchsorted(coords[:, 0], [lo[t, 0], hi[t, 0]]) if coords.shape[1] else (0, len(coords))
            inside = np.all((coords[a:b] >= lo[t]) & (coords[a:b] < hi[t]), axis=1)
            if inside.any():
                sub = ids[a:b][inside]
                out.append((t, Frontier(frontier.shape, ids=sub, count=len(sub))))
        return out


class LineageSource(Protocol):
    """What the query executor needs from a run (implemented by `subzero.run.Run`)."""

    def grid(self, node) -> TileGrid:
        """The node's tiles."""

    def shard_reader(self, node, strategy: str, tile: int, deadline: float | None):
        """A reader of the lineage ``tile`` stored under ``strategy``, or None when the tile
        stored none; raises `subzero.errors.StoreError` when the shard cannot be read."""

    def inline(self, node, strategy: str) -> bytes | None:
        """The node's lineage under ``strategy`` kept whole in its manifest, if any."""

    def tile_task(self, node) -> NodeTask:
        """The task that re-runs the node's tiles from its stored inputs (tracing mode)."""


def walk(wf, src, dst, direction: str, start: Frontier, step_fn) -> Frontier:
    """Carry the frontier ``start`` (over ``src``) to ``dst`` along every path of ``wf``.

    ``step_fn(node, frontier, i)`` is one step through ``node`` w.r.t. its input ``i``;
    frontiers arriving at a node by several paths are united before it steps, so each
    node steps once per input (lineage of a union is the union of lineages).
    """
    if src is dst:
        return start
    up, down = (dst, src) if direction == "backward" else (src, dst)
    if up not in wf.ancestors(down):
        raise LineageError(f"no path from {src.name!r} {direction} to {dst.name!r}: "
                           f"{dst.name!r} is not {'an ancestor' if direction == 'backward' else 'a descendant'} "
                           f"of {src.name!r}")
    return walk_many(wf, src, [dst], direction, start, step_fn)[dst]


def walk_many(wf, src, dsts, direction: str, start: Frontier, step_fn) -> dict:
    """`walk` to several nodes at once: every node on a path from ``src`` to one of ``dsts``
    steps once (Smoke's linked brushing: one pass, however many views).

    Returns node -> frontier for every node of ``dsts``; a node no path reaches maps to
    None (its answer is empty).
    """
    reach = wf.descendants(src) if direction == "forward" else wf.ancestors(src)
    wanted: set = set()
    for dst in dsts:
        if dst in reach:
            wanted |= wf.ancestors(dst) if direction == "forward" else wf.descendants(dst)
    on_path = reach & wanted
    order = [n for n in wf.nodes if n in on_path]
    frontiers: dict = {src: start}
    if direction == "backward":
        for node in reversed(order):
            if node not in frontiers:
                continue
            for i, parent in enumerate(node.inputs):
                if parent in on_path:
                    got = step_fn(node, frontiers[node], i)
                    frontiers[parent] = frontiers[parent].union(got) if parent in frontiers else got
    else:
        for node in order:
            if node is src:
                continue
            for i, parent in enumerate(node.inputs):
                if parent in frontiers:
                    got = step_fn(node, frontiers[parent], i)
                    frontiers[node] = frontiers[node].union(got) if node in frontiers else got
    return {dst: frontiers.get(dst) for dst in dsts}


def check_forced(node, stored: tuple[str, ...], using) -> str:
    """The canonical name of a strategy the caller forced for ``node``, if it can answer."""
    op = node.operator
    if not isinstance(using, str):
        raise LineageError(f"using= for node {node.name!r} must be a strategy name such as 'FullOne', "
                           f"got {using!r}")
    name = Strategy.parse(using).name
    available = set(stored) | {"BlackBox"} | ({"Map"} if Mode.MAP in op.supported_modes() else set())
    if name not in available:
        raise LineageError(f"node {node.name!r} did not store {name!r}; it stored {', '.join(stored)} "
                           "(BlackBox re-execution is always available)")
    return name


def step(source: LineageSource, node, frontier: Frontier, i: int, direction: str, strategy: str,
         entire_array: bool = True, deadline: float | None = None, forced: bool = False,
         damaged: list | None = None) -> Frontier:
    """One lineage step through ``node`` with respect to its input ``i``.

    Backward: ``frontier`` is over the node's output, the result over input ``i``.
    Forward: ``frontier`` is over input ``i``, the result over the output.  Stored lookups
    raise `subzero.errors.LookupTimeout` past ``deadline`` (perf_counter).  A shard that
    cannot be read is answered by re-running its tile (its message appended to
    ``damaged``), unless the strategy was ``forced``: then the `StoreError` propagates.
    """
    op = node.operator
    out_shape, in_shape = tuple(op.output_shape), tuple(op.input_shapes[i])
    target = in_shape if direction == "backward" else out_shape
    if frontier.is_empty:
        return Frontier.empty(target)
    if op.all_to_all or (entire_array and op.entire_array_safe and frontier.is_full):
        return Frontier.full(target)
    s = Strategy.parse(strategy)
    if s.mode is Mode.MAP:
        return map_step(op, frontier, i, direction, target)
    if s.mode is Mode.BLACKBOX:
        return _reexecute(source, node, frontier, i, direction, target)
    return _stored(source, node, frontier, i, direction, s, target, deadline, forced, damaged)


def _stored(source, node, frontier, i, direction, s: Strategy, target, deadline, forced, damaged) -> Frontier:
    """A step from stored lineage: only the shards of the tiles the frontier touches.

    A tile's lineage lies within what the tile reads, so backward steps open the tiles
    whose output box holds frontier cells and forward steps the tiles whose input box
    does, keyed by those cells or not; each shard answers for the frontier's cells in
    its tile.
    """
    op = node.operator
    grid = source.grid(node)
    enc = encoder_for(s)
    shapes = (tuple(op.output_shape), tuple(op.input_shapes))
    try:
        whole = source.inline(node, s.name)
    except StoreError:
        if forced:
            raise
        whole = None
    if whole is not None:  # the node's lineage is one small table: no shard to open
        return enc.query_inline(whole, frontier, i, direction, shapes)
    results: list[np.ndarray] = []
    frontiers: list[Frontier] = []
    failed: list[int] = []
    overrides: list[np.ndarray] = []
    for tile, sub in grid.split(frontier, None if direction == "backward" else i):
        try:
            reader = source.shard_reader(node, s.name, tile, deadline)
        except StoreError as exc:
            if forced:
                raise
            failed.append(tile)
            if damaged is not None:
                damaged.append(str(exc))
            continue
        if reader is None:  # the tile stored no lineage under this strategy
            continue
        if isinstance(enc, FullEncoder):
            got = enc.backward(reader, sub, i, shapes) if direction == "backward" else \
                enc.forward(reader, sub, i, shapes)
        elif direction == "backward":
            pay = enc.lookup(reader, sub, shapes)
            got = expand_payloads(op, pay, deadline).backward(sub, i)
            overrides.append(pay.out_ids)
        else:  # only the payloads whose envelope meets the frontier can reach it
            got = expand_payloads(op, enc.forward_candidates(reader, sub, i, shapes), deadline).forward(sub, i)
        if isinstance(got, Frontier):
            frontiers.append(got)
        else:
            results.append(got)
    result = Frontier.of_ids(np.concatenate(results) if results else np.empty(0, np.int64), target)
    for got in frontiers:
        result = result.union(got)
    if failed:
        result = result.union(_trace(source, node, [grid.tiles[t] for t in failed], frontier, i, direction, target))
    if s.mode is Mode.COMP:
        if direction == "backward":
            covered = np.concatenate(overrides) if overrides else np.empty(0, np.int64)
            rest = Frontier.of_ids(frontier.ids()[~np.isin(frontier.ids(), covered)], frontier.shape, unique=True)
            default = map_step(op, _outside(rest, grid.out_lo[failed], grid.out_hi[failed]), i, direction, target)
        else:
            default = _not_overridden(source, node, enc, s, map_step(op, frontier, i, direction, target), deadline,
                                      failed, damaged, forced)
        result = result.union(default)
    return result


def _outside(f: Frontier, lo: np.ndarray, hi: np.ndarray) -> Frontier:
    """The cells of ``f`` outside every box ``[lo[k], hi[k])``."""
    if not len(lo) or f.is_empty:
        return f
    c = f.coords()
    inside = np.zeros(len(c), bool)
    for a, b in zip(lo, hi):
        inside |= np.all((c >= a) & (c < b), axis=1)
    return Frontier.of_ids(f.ids()[~inside], f.shape, unique=True)


def _not_overridden(source, node, enc, s: Strategy, default: Frontier, deadline, failed: list[int], damaged,
                    forced) -> Frontier:
    """The out cells of a composite's mapping default that carry no payload override (those
    answered by their payload instead), looked up in the shards of their own tiles."""
    grid = source.grid(node)
    shapes = (tuple(node.operator.output_shape), tuple(node.operator.input_shapes))
    covered = []
    for tile, sub in grid.split(default, None):
        if tile in failed:
            continue
        try:
            reader = source.shard_reader(node, s.name, tile, deadline)
        except StoreError as exc:
            if forced:
                raise
            if damaged is not None:
                damaged.append(str(exc))
            failed.append(tile)  # its cells come from the re-run of the tile
            continue
        if reader is not None:
            covered.append(enc.lookup(reader, sub, shapes).out_ids)
    ids = default.ids()
    if covered:
        ids = ids[~np.isin(ids, np.concatenate(covered))]
    kept = Frontier.of_ids(ids, default.shape, unique=True)
    return _outside(kept, grid.out_lo[failed], grid.out_hi[failed])


def map_step(op, frontier: Frontier, i: int, direction: str, target) -> Frontier:
    """One step through an operator's mapping functions, on the frontier's own form."""
    target = tuple(target)
    if frontier.is_empty:
        return Frontier.empty(target)
    if frontier.kind == "boxes":
        lo, hi = frontier.boxes()
        fn = getattr(op, "map_b_boxes" if direction == "backward" else "map_f_boxes", None)
        got = fn(lo, hi, i) if fn is not None else None
        if got is not None:
            return Frontier.of_boxes(got[0], got[1], target)
        if frontier.estimate() > MAX_BOX_EXPANSION:
            got = _mask_step(op, frontier.mask(), i, direction, target)
            if got is not None:
                return got
    if frontier.kind == "mask":
        got = _mask_step(op, frontier.mask(), i, direction, target)
        if got is not None:
            return got
    cells = frontier.coords()
    got = op.map_b(cells, i) if direction == "backward" else op.map_f(cells, i)
    got = np.asarray(got, np.int64).reshape(-1, len(target))
    if len(got) and (got.min() < 0 or np.any(got.max(axis=0) >= np.asarray(target))):
        raise LineageError(f"{type(op).__name__}.map_{direction[0]} returned cells outside the array of "
                           f"shape {target}; mapping functions must clip to the array")
    return Frontier.of_coords(got, target)


def _mask_step(op, mask: np.ndarray, i: int, direction: str, target) -> Frontier | None:
    masked = op.map_b_mask(mask, i) if direction == "backward" else op.map_f_mask(mask, i)
    if masked is None:
        return None
    masked = np.asarray(masked, bool)
    if masked.shape != tuple(target):
        raise LineageError(f"{type(op).__name__}.map_{direction[0]}_mask returned shape {masked.shape}, "
                           f"expected {tuple(target)}")
    return Frontier.of_mask(masked)


def _reexecute(source, node, frontier: Frontier, i: int, direction: str, target) -> Frontier:
    """Black-box step: re-run, in tracing mode, only the tiles the frontier touches."""
    grid = source.grid(node)
    tiles = [grid.tiles[t] for t, _ in grid.split(frontier, None if direction == "backward" else i)]
    return _trace(source, node, tiles, frontier, i, direction, target)


def _trace(source, node, tiles: list[Tile], frontier: Frontier, i: int, direction: str, target) -> Frontier:
    task = source.tile_task(node)
    parts = []
    for tile in tiles:
        pairs = trace_tile(task, tile, frontier, i, direction)
        parts.append(pairs.backward(frontier, i) if direction == "backward" else pairs.forward(frontier, i))
    return Frontier.of_ids(np.concatenate(parts) if parts else np.empty(0, np.int64), target)

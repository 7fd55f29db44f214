"""The query executor: one lineage step through one node, from stored lineage or re-execution.

The frontier (`subzero.frontier.Frontier`) is a set of cells over the array a step
starts from; each step returns one over the array it reaches.  A step costs its
frontier, not the array: stored lineage is read only from the shards of the tiles the
frontier touches (the tiles of its cells for lookups keyed by them, the tiles whose
input box it meets otherwise), mapping functions see only the frontier's cells (or
boxes), and black-box steps re-run only the touched tiles.  Everything runs in the
calling process: no Spark job, no JVM.

`QueryEngine` plans and walks whole queries: it reads a run through a
`subzero.store.roles.LineageReader` (manifests, one shard reader per tile, inline tables,
arrays), picks each step's strategy with `subzero.optimizer.query_time.choose_step` (or
the one the caller forced), and walks the workflow's DAG.  It is the source the steps
(and `subzero.stats`) read; `subzero.run.Run` is a thin facade over it.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Protocol, Sequence, TypeVar, runtime_checkable

import numpy as np

from subzero import config
from subzero.catalog import Manifest, RunRecord
from subzero.dag import Node
from subzero.cells import to_coords, to_ids
from subzero.encoders import encoder_for
from subzero.encoders.base import FullEncoder
from subzero.encoders.codec import slot_ndims
from subzero.errors import LineageError, LookupTimeout, QueryCancelled, StoreError
from subzero.frontier import DENSE_FRACTION, MAX_BOX_EXPANSION, Frontier, drop_contained
from subzero.modes import Direction, Mode, Strategy
from subzero.operator import Operator
from subzero.optimizer.cost_model import NodeProfile
from subzero.optimizer.query_time import choose_step
from subzero.pairs import FullPairs
from subzero.worker import (REGION_SHARE, NodeTask, RecomputedArray, expand_payloads, regional, rerun_payloads,
                            trace_tile)
from subzero.store.roles import LineageReader
from subzero.tiling import Box, Tile, tile_grid

__all__ = ["TileGrid", "QueryEngine", "QueryOptions", "Carrier", "Rule", "rule_of", "box_form", "step", "check_forced",
           "map_step"]

logger = logging.getLogger(__name__)

BLACKBOX = Strategy.parse("BlackBox")
#: each direction's name in the per-step log
_DIRECTION_NAMES = {d: d.value for d in Direction}
#: step choices an engine keeps (`QueryEngine.choose`), of every node and frontier size together
MAX_KEPT_CHOICES = 65536


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
        self.edges = self._grid_edges()

    def _grid_edges(self) -> list[np.ndarray] | None:
        """Per axis, the sorted starts of the tiles' output boxes when those boxes are the
        product of one split per axis in C order (`subzero.tiling.tile_grid`'s), else None."""
        lo, hi = self.out_lo, self.out_hi
        if not len(lo) or not lo.shape[1]:
            return None
        edges = [np.unique(lo[:, a]) for a in range(lo.shape[1])]
        counts = tuple(len(e) for e in edges)
        if int(np.prod(counts)) != len(lo):
            return None
        at = np.stack([np.searchsorted(e, lo[:, a]) for a, e in enumerate(edges)])
        ends = [np.r_[e[1:], hi[:, a].max()] for a, e in enumerate(edges)]
        ok = np.array_equal(np.ravel_multi_index(tuple(at), counts), np.arange(len(lo))) and all(
            np.array_equal(hi[:, a], ends[a][at[a]]) for a in range(lo.shape[1]))
        return edges if ok else None

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
        if side is None and self.edges is not None:  # output boxes on a grid: each cell's tile at once
            counts = tuple(len(e) for e in self.edges)
            tile = np.ravel_multi_index(tuple(np.searchsorted(e, coords[:, a], "right") - 1
                                              for a, e in enumerate(self.edges)), counts)
            order = np.argsort(tile, kind="stable")  # ids stay sorted within a tile
            tile, sorted_ids = tile[order], ids[order]
            starts = np.flatnonzero(np.r_[True, tile[1:] != tile[:-1]])
            ends = np.r_[starts[1:], len(tile)]
            return [(int(tile[a]), Frontier(frontier.shape, ids=sorted_ids[a:b], count=int(b - a)))
                    for a, b in zip(starts.tolist(), ends.tolist())]
        out = []
        for t in near.tolist():
            a, b = np.searchsorted(coords[:, 0], [lo[t, 0], hi[t, 0]]) if coords.shape[1] else (0, len(coords))
            inside = np.all((coords[a:b] >= lo[t]) & (coords[a:b] < hi[t]), axis=1)
            if inside.any():
                sub = ids[a:b][inside]
                out.append((t, Frontier(frontier.shape, ids=sub, count=len(sub))))
        return out


def operator_of(node: Node) -> Operator:
    """``node``'s operator: a query steps through operator nodes only (an input has none)."""
    if node.operator is None:
        raise LineageError(f"node {node.name!r} is an input of the workflow: no lineage step goes through it")
    return node.operator


def check_forced(node: Node, stored: tuple[str, ...], using: Any) -> Strategy:
    """The strategy the caller forced (``using=``) for ``node``, parsed, if it can answer.

    Raises
    ------
    LineageError
        When ``using`` is no strategy name, or names one the node did not store (Map when
        the operator has no mapping functions).
    """
    if not isinstance(using, (str, Strategy)):
        raise LineageError(f"using= for node {node.name!r} must be a strategy name such as 'FullOne', "
                           f"got {using!r}")
    forced = Strategy.parse(using)
    if forced.mode is not Mode.BLACKBOX and forced.name not in stored and \
            not (forced.mode is Mode.MAP and Mode.MAP in operator_of(node).supported_modes()):
        raise LineageError(f"node {node.name!r} did not store {forced.name!r}; it stored {', '.join(stored)} "
                           "(BlackBox re-execution is always available)")
    return forced


def step(source: "QueryEngine", node: Node, frontier: Frontier, i: int, direction: Direction, strategy: Strategy,
         entire_array: bool = True, deadline: float | None = None, forced: bool = False,
         damaged: list | None = None, lookups: dict | None = None) -> Frontier:
    """One lineage step through ``node`` with respect to its input ``i``.

    Backward: ``frontier`` is over the node's output, the result over input ``i``.
    Forward: ``frontier`` is over input ``i``, the result over the output.  Stored lookups
    raise `subzero.errors.LookupTimeout` past ``deadline`` (perf_counter).  A shard that
    cannot be read is answered by re-running its tile (its message appended to
    ``damaged``), unless the strategy was ``forced``: then the `StoreError` propagates.
    """
    op = operator_of(node)
    out_shape, in_shape = tuple(op.output_shape), tuple(op.input_shapes[i])
    target = in_shape if direction is Direction.BACKWARD else out_shape
    if frontier.is_empty:
        return Frontier.empty(target)
    if op.all_to_all or (entire_array and frontier.is_full and op.entire_array_safe):  # is_full first: cheap
        return Frontier.full(target)
    if strategy.mode is Mode.MAP:
        return map_step(op, frontier, i, direction, target)
    if strategy.mode is Mode.BLACKBOX:
        return _reexecute(source, node, frontier, i, direction, target, lookups)
    return _stored(source, node, frontier, i, direction, strategy, target, deadline, forced, damaged, lookups)


def _stored(source, node, frontier, i, direction, s: Strategy, target, deadline, forced, damaged,
            lookups: dict | None = None) -> Frontier:
    """A step from stored lineage: only the shards of the tiles the frontier touches.

    A tile's lineage lies within what the tile reads, so backward steps open the tiles
    whose output box holds frontier cells and forward steps the tiles whose input box
    does, keyed by those cells or not; each shard answers for the frontier's cells in
    its tile. ``lookups`` (one walk's: `QueryOptions.lookups`) keeps each tile's payload
    lookup for the frontier of a backward step, which every input of the node makes alike.
    """
    op = operator_of(node)
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
    side = None if direction is Direction.BACKWARD else i
    kept = direction is Direction.BACKWARD and not isinstance(enc, FullEncoder)  # payloads: tiles decoded whole
    for tile, sub, reader in source.tile_readers(node, s.name, frontier, side, deadline, failed, damaged, forced,
                                                 decoded=kept):
        if reader is None:  # the tile stored no lineage under this strategy
            continue
        if isinstance(enc, FullEncoder):
            got = enc.backward(reader, sub, i, shapes) if direction is Direction.BACKWARD else \
                enc.forward(reader, sub, i, shapes)
        elif direction is Direction.BACKWARD:
            key = (id(frontier), node.name, s.name, tile)  # the frontier is held by the walk until every input stepped
            last = i == len(op.input_shapes) - 1  # the node's last input: nothing left to share it with
            pay = (lookups.pop(key, None) if last else lookups.get(key)) if lookups is not None else None
            if pay is None:
                pay = source.payload_lookup(node, s.name, enc, tile, reader, sub, shapes)
                if lookups is not None and not last:
                    lookups[key] = pay
            united = _payload_union(op, pay, i, deadline, target)
            got = expand_payloads(op, pay, deadline).backward(sub, i) if united is None else united
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
        result = result.union(_trace(source, node, failed, frontier, i, direction, target))
    if s.mode is Mode.COMP:
        if direction is Direction.BACKWARD:
            covered = np.concatenate(overrides) if overrides else np.empty(0, np.int64)
            # no override among the frontier's cells (the common case): the default takes it in its own form
            rest = frontier if not len(covered) else \
                Frontier.of_ids(frontier.ids()[~np.isin(frontier.ids(), covered)], frontier.shape, unique=True)
            default = map_step(op, _outside(rest, grid.out_lo[failed], grid.out_hi[failed]), i, direction, target)
        else:
            default = _not_overridden(source, node, enc, s, map_step(op, frontier, i, direction, target), deadline,
                                      failed, damaged, forced)
        result = result.union(default)
    return result


def _payload_union(op, pay, i: int, deadline: float | None, target) -> np.ndarray | None:
    """The input-``i`` ids the out cells of payload pairs ``pay`` depend on, together: a backward
    step needs only that union, so each distinct payload is mapped once by the operator's union
    form (`subzero.Operator.map_p`), not cell by cell into pairs (a star's region repeated for each
    of its pixels).  None when the operator has no ``map_p`` of its own (then its pairs are expanded).
    Past ``deadline`` (perf_counter): `subzero.errors.LookupTimeout`."""
    if getattr(type(op), "map_p", None) is Operator.map_p:
        return None
    parts = [np.empty(0, np.int64)]
    for payload, ids in pay.by_payload():
        if deadline is not None and time.perf_counter() > deadline:
            raise LookupTimeout()
        got = np.asarray(op.map_p(to_coords(ids, tuple(op.output_shape)), payload, i), np.int64)
        parts.append(to_ids(got.reshape(-1, len(target)), target))
    return np.concatenate(parts)


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
    covered = []  # a tile whose shard cannot be read joins ``failed``: its cells come from its re-run
    for _, sub, reader in source.tile_readers(node, s.name, default, None, deadline, failed, damaged, forced):
        if reader is not None:
            covered.append(enc.lookup(reader, sub, shapes).out_ids)
    ids = default.ids()
    if covered:
        ids = ids[~np.isin(ids, np.concatenate(covered))]
    kept = Frontier.of_ids(ids, default.shape, unique=True)
    return _outside(kept, grid.out_lo[failed], grid.out_hi[failed])


def map_step(op: Operator, frontier: Frontier, i: int, direction: "Direction | str",
             target: Sequence[int]) -> Frontier:
    """One step through an operator's mapping functions, on the frontier's own form."""
    direction, target = Direction.parse(direction), tuple(target)
    if frontier.is_empty:
        return Frontier.empty(target)
    if frontier.shape == target and getattr(op, "same_cells", None) is not None and op.same_cells(i):
        return frontier  # elementwise over one shape: the same cells, in the form they came (never written)
    fn = box_form(op, direction)
    boxes = frontier.compact_boxes() if fn is not None else None
    if boxes is not None:  # held as boxes, or ids a few boxes cover: the box form, not every cell
        got = fn(boxes[0], boxes[1], i)
        if got is not None:
            return Frontier.of_boxes(*drop_contained(*got), target)
    if frontier.kind == "boxes":
        held = frontier.estimate()
        if held > MAX_BOX_EXPANSION or held > max(DENSE_FRACTION * frontier.size, 64):  # dense: a mask, not cells
            got = _mask_step(op, frontier.mask(), i, direction, target)
            if got is not None:
                return got
    if frontier.kind == "mask":
        got = _mask_step(op, frontier.mask(), i, direction, target)
        if got is not None:
            return got
    cells = frontier.coords()
    got = op.map_b(cells, i) if direction is Direction.BACKWARD else op.map_f(cells, i)
    got = np.asarray(got, np.int64).reshape(-1, len(target))
    if len(got) and (got.min() < 0 or np.any(got.max(axis=0) >= np.asarray(target))):
        raise LineageError(f"{type(op).__name__}.map_{direction[0]} returned cells outside the array of "
                           f"shape {target}; mapping functions must clip to the array")
    return Frontier.of_coords(got, target)


def box_form(op: Operator, direction: Direction) -> Any:
    """The operator's box form in ``direction`` (`subzero.Operator.map_b_boxes` or
    ``map_f_boxes``, bound), or None when its class does not override the base's (which has none)."""
    name = "map_b_boxes" if direction is Direction.BACKWARD else "map_f_boxes"
    if getattr(type(op), name, None) is getattr(Operator, name):
        return None
    return getattr(op, name, None)


def _mask_step(op, mask: np.ndarray, i: int, direction: Direction, target) -> Frontier | None:
    masked = op.map_b_mask(mask, i) if direction is Direction.BACKWARD else op.map_f_mask(mask, i)
    if masked is None:
        return None
    masked = np.asarray(masked, bool)
    if masked.shape != tuple(target):
        raise LineageError(f"{type(op).__name__}.map_{direction[0]}_mask returned shape {masked.shape}, "
                           f"expected {tuple(target)}")
    return Frontier.of_mask(masked)


def _reexecute(source, node, frontier: Frontier, i: int, direction: Direction, target,
               lookups: dict | None = None) -> Frontier:
    """Black-box step: re-run, in tracing mode, only the tiles the frontier touches (through a
    `subzero.worker.regional` operator: only the frontier's boxes, `QueryEngine.regions`, or forward
    the box its cells reach, `QueryEngine.reach_region`).
    Backward through an operator whose re-run gives payloads with a union form (`_rerun_union`): the
    payloads' union and the default's box form, as a stored CompOne step; else region pairs."""
    split: list = source.grid(node).split(frontier, None if direction is Direction.BACKWARD else i)
    if direction is Direction.BACKWARD and hasattr(source, "regions"):
        split = source.regions(node, split, frontier)
    elif hasattr(source, "reach_region"):
        split = source.reach_region(node, split, frontier, i)
    tiles = [t for t, _ in split if not isinstance(t, tuple)]
    if len(tiles) > 1 and hasattr(source, "prefetch"):
        source.prefetch(node, tiles)
    if direction is Direction.BACKWARD:
        got = _rerun_union(source, node, split, frontier, i, target, lookups)
        if got is not None:
            return got
    return _trace(source, node, [t for t, _ in split], frontier, i, direction, target)


def _rerun_union(source, node, split: list[tuple[int, Frontier]], frontier: Frontier, i: int, target,
                 lookups: dict | None) -> Frontier | None:
    """A backward black-box step from the payload pairs of the re-run tiles (`QueryEngine.rerun_payloads`,
    each tile re-run once per engine): each distinct payload of the frontier's cells through the
    operator's ``map_p`` once, and in ``COMP`` mode the mapping default of the frontier's other cells in
    the frontier's own form (a halo's box grows as a box), the same answer as `_trace`'s region pairs
    (one per cell) without building them.  ``lookups`` (the walk's) keeps each tile's pairs for the
    node's next input.  None when the operator has no union form or its re-run gives no payloads."""
    op = operator_of(node)
    if getattr(type(op), "map_p", None) is Operator.map_p:
        return None
    parts, overridden, mode = [np.empty(0, np.int64)], [np.empty(0, np.int64)], Mode.PAY
    last = i == len(op.input_shapes) - 1  # the node's last input: nothing left to share the pairs with
    for tile, sub in split:
        key = (id(frontier), node.name, "rerun", tile)  # the walk holds the frontier until every input stepped
        got = (lookups.pop(key, None) if last else lookups.get(key)) if lookups is not None else None
        if got is None:
            got = source.rerun_payloads(node, tile, sub)
            if got is None:
                return None
            if lookups is not None and not last:
                lookups[key] = got
        mode, pay = got
        parts.append(_payload_union(op, pay, i, None, target))
        overridden.append(pay.out_ids)
    result = Frontier.of_ids(np.concatenate(parts), target)
    if mode is Mode.COMP:
        covered = np.concatenate(overridden)
        rest = frontier if not len(covered) else \
            Frontier.of_ids(frontier.ids()[~np.isin(frontier.ids(), covered)], frontier.shape, unique=True)
        result = result.union(map_step(op, rest, i, Direction.BACKWARD, target))
    return result


def _trace(source, node, tiles: list[int], frontier: Frontier, i: int, direction: Direction, target) -> Frontier:
    parts = [pairs.backward(frontier, i) if direction is Direction.BACKWARD else pairs.forward(frontier, i)
             for pairs in source.trace(node, tiles, frontier, i, direction)]
    return Frontier.of_ids(np.concatenate(parts) if parts else np.empty(0, np.int64), target)


def _box_cells(box: Box) -> int:
    """The number of cells of ``box``."""
    return math.prod(max(hi - lo, 0) for lo, hi in box)


def _memo_bytes() -> int:
    """Bytes one engine keeps of each of its two memos (the ``query_memo_mb`` setting): the
    answers of whole-array steps (a step reached by every cell of its array depends on the run
    alone, so it is computed once) and re-run tiles' lineage (full or payload pairs: a tile a
    black-box step re-ran answers the next steps and queries reaching it without running again)."""
    return int(config.get("query_memo_mb") * 2**20)


class _Kept(dict):
    """What re-running a node's tiles produced (`subzero.worker.trace_tile`'s ``reruns``),
    kept while a budget shared by the engine's nodes (a one-item list of bytes left) lasts."""

    def __init__(self, budget: list[int], lock: threading.Lock):
        super().__init__()
        self.budget, self.lock = budget, lock

    def __setitem__(self, key, value) -> None:
        pairs = value[0]
        arrays = [getattr(pairs, name, None) for name in ("out_ids", "out_ptr")]
        arrays += [*getattr(pairs, "in_ids", ()), *getattr(pairs, "in_ptr", ())]
        size = sum(int(a.nbytes) for a in arrays if a is not None) + sum(len(p) for p in getattr(pairs, "payloads", ()))
        with self.lock:
            if size <= self.budget[0]:
                self.budget[0] -= size
                super().__setitem__(key, value)


def _shared(f: Frontier) -> bool:
    """True when ``f``'s arrays may not be written: a kept answer (the forms made from it later,
    its ids or cover, may be new arrays; what it holds never changes)."""
    return not all(a.flags.writeable for a in f.arrays())


def _private(carried: Any) -> Any:
    """What a walk hands out: a frontier sharing a kept step's read-only arrays is copied
    (the caller may write into its answer); anything else as it is."""
    if isinstance(carried, Frontier) and not all(a.flags.writeable for a in carried.arrays()):
        return carried.copy()
    return carried


def _united(held: dict, node: Any, engine: "QueryEngine | None" = None) -> Any:
    """What reached ``node`` (``held[node]``: one part per path) as one: frontiers united at once
    (`Frontier.union_all`: masks painted into one; through ``engine``'s `QueryEngine.united`, which
    keeps the unions of kept answers), carriers pairwise; kept united in ``held``."""
    parts = held[node]
    if len(parts) > 1:
        if all(isinstance(p, Frontier) for p in parts):
            one = engine.united(parts) if engine is not None else Frontier.union_all(parts)
        else:
            one = parts[0]
            for p in parts[1:]:
                one = one.union(p)
        held[node] = parts = [one]
    return parts[0]


def maps_whole(op: Operator, frontier: Frontier, i: int, direction: Direction) -> bool:
    """True when `map_step` takes ``frontier`` through ``op`` without walking its cells one by
    one: an elementwise step over one shape keeps the cells, and a frontier held as boxes or a
    mask goes through the operator's box or mask form (a pass over the arrays, not per cell)."""
    same = getattr(op, "same_cells", None)
    if same is not None and same(i):
        return True
    if frontier.kind == "ids":  # ids a few boxes cover go through the box form (`map_step`)
        return box_form(op, direction) is not None and frontier.compact_boxes() is not None
    suffix = "b" if direction is Direction.BACKWARD else "f"
    forms = [f"map_{suffix}_mask"] + ([f"map_{suffix}_boxes"] if frontier.kind == "boxes" else [])
    return any(getattr(type(op), name, None) is not getattr(Operator, name) for name in forms)


@dataclass(frozen=True)
class Rule:
    """A mapped step that is arithmetic on a frontier's boxes: the same cells (an elementwise
    step over one shape), or the operator's box form (a neighbourhood grows a box by its halo,
    a block reduction divides it, a broadcast spans an axis).  `QueryEngine.rule` resolves it
    once per (run, node, input, direction); `apply` then takes a frontier through the step
    without choosing a strategy or walking cells, so a chain of such steps costs a few
    operations on a few boxes per node and still yields every node's cells.

    ``identity``: the cells stay as they are; ``flat``: their flat ids stay as they are, over
    ``target``'s shape (a reshape: the operator's ``same_ids``); else ``form`` is the bound box form.
    ``target``: the shape reached; ``all_to_all``/``safe``: the operator's, as `step` reads them.
    """

    identity: bool
    form: Any
    i: int
    target: tuple[int, ...]
    all_to_all: bool
    safe: bool
    flat: bool = False
    #: every cell of ``target``, read-only and shared by the rule's answers (`_private` copies it out)
    full: Frontier = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        full = Frontier.full(self.target)
        for a in full.arrays():
            a.flags.writeable = False
        object.__setattr__(self, "full", full)

    def apply(self, frontier: Frontier, entire_array: bool = True) -> Frontier | None:
        """The step's answer for ``frontier`` (exactly `step`'s), or None when the frontier is
        not compact as boxes (scattered ids, a mask) or the box form declines: step it then."""
        if frontier.is_empty:
            return Frontier.empty(self.target)
        if self.all_to_all or (entire_array and self.safe and frontier.is_full):
            return self.full
        if self.identity:
            return frontier
        if self.flat:  # the same flat ids over another shape: a mask is reshaped, anything else keeps its ids
            if frontier.kind == "mask" or frontier.estimate() > MAX_BOX_EXPANSION:
                return Frontier(self.target, mask=frontier.mask().reshape(self.target), count=frontier.count)
            return Frontier(self.target, ids=frontier.ids(), count=frontier.count)
        boxes = frontier.compact_boxes()
        if boxes is None:
            return None
        got = self.form(boxes[0], boxes[1], self.i)
        return None if got is None else Frontier.of_boxes(*drop_contained(*got), self.target)


def rule_of(op: Operator, i: int, direction: Direction) -> Rule | None:
    """The `Rule` of a step through ``op`` w.r.t. input ``i``, or None when its lineage is not
    such a mapping (no Map mode, or neither the same cells nor a box form)."""
    if Mode.MAP not in op.supported_modes():
        return None
    same = getattr(op, "same_cells", None)
    identity = same is not None and bool(same(i))
    flat = not identity and bool(getattr(op, "same_ids", False))
    form = None if identity or flat else box_form(op, direction)
    if not identity and not flat and form is None:
        return None
    target = tuple(op.input_shapes[i]) if direction is Direction.BACKWARD else tuple(op.output_shape)
    return Rule(identity, form, i, target, bool(op.all_to_all), bool(op.entire_array_safe), flat)


@runtime_checkable
class Carrier(Protocol):
    """What a walk carries other than a `Frontier`: a set of cells with something attached
    to each (e.g. `subzero.stats.labelled.LabelledCells`, the objects whose lineage holds a
    cell).  The engine's walk chooses each step's strategy and unites what arrives by
    several paths; the carrier only knows how to take one step.
    """

    @property
    def is_empty(self) -> bool:
        """True when nothing is carried."""

    def estimate(self) -> int:
        """The size of the carried set, the ``cells`` `choose_step` predicts a step's cost from."""

    def union(self, other: Any) -> Any:
        """What either carries (over the same array)."""

    def step(self, engine: "QueryEngine", node: Node, i: int, direction: Direction, strategy: Strategy) -> Any:
        """One step through ``node`` w.r.t. its input ``i`` by ``strategy`` (read through ``engine``)."""


#: what a walk carries: a frontier of cells, or a `Carrier`
C = TypeVar("C", Frontier, Carrier)


@dataclass
class QueryOptions:
    """How one query steps: its direction, the strategies forced per node (``using=``),
    whether full frontiers may skip entire-array-safe steps, the per-step log it fills, and
    ``cancel``: an event (``is_set()``) that stops the walk at its next step with
    `subzero.errors.QueryCancelled` once set (None: the walk runs to its end)."""

    direction: Direction
    using: dict = field(default_factory=dict)
    entire_array: bool = True
    log: list[dict] = field(default_factory=list)
    cancel: Any = None
    #: a backward walk's payload lookups per (frontier, node, strategy, tile), shared by a node's inputs (`_stored`)
    lookups: dict = field(default_factory=dict)


class QueryEngine:
    """Plans and walks lineage queries over one committed run, in this process.

    Parameters
    ----------
    reader : LineageReader
        The run's store (`subzero.store.open_store`).
    workflow : Workflow
        The run's workflow, its operators bound to their shapes.
    catalog : RunRecord
        The run's catalog (what each node stored, its statistics and profile).
    """

    def __init__(self, reader: LineageReader, workflow, catalog: RunRecord):
        self.reader, self.workflow, self.catalog = reader, workflow, catalog
        self._grids: dict[str, TileGrid] = {}
        self._manifests: dict[str, Manifest] = {}
        self._profiles: dict[str, NodeProfile] = {}
        self._stored: dict[str, tuple[Strategy, ...]] = {}
        self._lock = threading.Lock()
        self._warned: set[str] = set()  # damaged lineage already reported
        self._recomputed: dict[str, RecomputedArray] = {}  # the unstored arrays read so far
        self._reread: dict[str, float] = {}  # node -> seconds re-running it recomputes its unstored inputs
        self._unstored: dict[str, Any] | None = None  # the unstored arrays (optimizer.storage.ArrayChoice)
        self._whole: dict[tuple[str, int, str], tuple[Strategy, Frontier]] = {}  # whole arrays' steps
        self._whole_bytes, self._whole_limit = 0, _memo_bytes()
        self._unions: dict[tuple[int, ...], tuple[tuple[Frontier, ...], Frontier]] = {}  # kept answers united
        self._reruns: dict[str, _Kept] = {}  # node -> what re-running its tiles produced
        self._rules: dict[tuple[str, int, Direction], Rule | None] = {}  # arithmetic steps (`rule`)
        self._choices: dict[tuple, Any] = {}  # (node, direction, cells, whole) -> `choose_step`'s choice
        self._plans: dict[tuple, list] = {}  # walks: (src, dsts, direction) -> their steps (`_schedule`)
        self._rerun_budget = [_memo_bytes()]  # bytes the engine may still keep of those, all nodes together
        self._decoded: dict[tuple[str, str, int], Any] = {}  # payload tiles decoded whole (None: looked up instead)
        self._decoded_budget = [_memo_bytes()]  # bytes the engine may still keep of those

    # -- the lineage source the steps read ------------------------------------------------------
    def array(self, name: str) -> Any:
        """The array of a committed node: its `subzero.store.ArrayRef`, checked against the
        catalog, or, when the run did not store it, a `subzero.worker.RecomputedArray` that
        re-runs the tiles a read covers from the node's inputs (kept per engine, with its cache)."""
        record = self.catalog.node(name).array
        if record.stored:
            return self.reader.array(name, record.meta_xxh3)
        with self._lock:
            got = self._recomputed.get(name)
        if got is None:
            node = self.workflow.node(name)
            got = RecomputedArray(self.tile_task(node), self.grid(node).tiles, record.chunks, record.dtype,
                                  int(config.get("recompute_cache_mb") * 2**20))
            with self._lock:
                got = self._recomputed.setdefault(name, got)
        return got

    def grid(self, node: Node) -> TileGrid:
        """The node's tiles, with their output and input boxes."""
        with self._lock:
            if node.name not in self._grids:
                op = operator_of(node)
                tiles = tile_grid(op.output_shape, op.effective_tiling().split_axes(op),
                                  self.catalog.node(node.name).tile_shape)
                self._grids[node.name] = TileGrid(tiles, op)
            return self._grids[node.name]

    def manifest(self, node: Node) -> Manifest:
        """The node's committed shards (read once)."""
        with self._lock:
            if node.name not in self._manifests:
                self._manifests[node.name] = self.reader.read_manifest(node.name)
            return self._manifests[node.name]

    def shard_reader(self, node: Node, strategy: str, tile: int, deadline: float | None) -> Any:
        """The reader of the lineage ``tile`` stored under ``strategy`` (None: it stored none).

        Raises
        ------
        StoreError
            When the manifest lists no such shard or the shard cannot be read.
        """
        shards = self.manifest(node).shards.get(strategy)
        if shards is None:
            raise StoreError(f"the manifest of node {node.name!r} lists no {strategy} shards; the store is damaged")
        if tile >= len(shards) or shards[tile].tile != tile:
            raise StoreError(f"the manifest of node {node.name!r} has no {strategy} shard for tile {tile}; the "
                             "store is damaged")
        record = shards[tile]
        if record.name is None:
            return None
        op = operator_of(node)
        return self.reader.shard_reader(node.name, strategy, record, slot_ndims(op.output_shape, op.input_shapes),
                                        deadline)

    def tile_readers(self, node: Node, strategy: str, frontier: Frontier, side: int | None, deadline: float | None = None,
                     failed: list[int] | None = None, damaged: list[str] | None = None,
                     forced: bool = False, decoded: bool = False) -> Iterator[tuple[int, Frontier, Any]]:
        """Each tile whose box (output, or input ``side``) holds cells of ``frontier`` and that is
        not in ``failed``: its index, its part of the frontier and its shard reader (None: it
        stored no lineage under ``strategy``).  A tile whose shard cannot be read is appended
        to ``failed`` (its message to ``damaged``) to be re-run, unless ``forced``: then the
        `StoreError` propagates.  ``decoded``: a tile `payload_lookup` keeps decoded is not
        opened again (its reader is then the string ``"decoded"``: the lookup does not read it)."""
        failed = [] if failed is None else failed
        for tile, sub in self.grid(node).split(frontier, side):
            if tile in failed:
                continue
            if decoded and self._decoded.get((node.name, strategy, tile)):
                yield tile, sub, "decoded"
                continue
            try:
                reader = self.shard_reader(node, strategy, tile, deadline)
            except StoreError as exc:
                if forced:
                    raise
                failed.append(tile)
                if damaged is not None:
                    damaged.append(str(exc))
                continue
            yield tile, sub, reader

    def payload_lookup(self, node: Node, strategy: str, enc: Any, tile: int, reader: Any, frontier: Frontier,
                       shapes: tuple) -> Any:
        """``enc.lookup(reader, frontier, shapes)`` of ``node``'s ``tile``: from the tile decoded
        whole (`subzero.encoders.pay_one.PayOne.decode_tile`) and kept, when its shard's entries fit
        what the ``query_memo_mb`` setting leaves (a shard never changes, and brushes read the same
        tiles over and over: one floor search in memory instead of a shard scan per brush); else
        from the shard."""
        key = (node.name, strategy, tile)
        decoded = self._decoded.get(key, False)
        if decoded is False and hasattr(enc, "decode_tile"):
            decoded = None
            record = self.manifest(node).shards[strategy][tile]
            if record.nbytes <= self._decoded_budget[0]:  # never more than the setting allows, all tiles together
                decoded = enc.decode_tile(self.shard_reader(node, strategy, tile, None), shapes)  # no deadline: once
            with self._lock:
                if key not in self._decoded:
                    size = 0 if decoded is None else decoded.nbytes
                    if size > self._decoded_budget[0]:
                        decoded = None
                    self._decoded_budget[0] -= 0 if decoded is None else size
                    self._decoded[key] = decoded
                decoded = self._decoded[key]
        if decoded:
            return enc.lookup_decoded(decoded, frontier)
        return enc.lookup(reader, frontier, shapes)

    def inline(self, node: Node, strategy: str) -> bytes | None:
        """A node's lineage kept in its manifest (a merged FullRange table), if any."""
        return self.manifest(node).inline.get(strategy)

    def tile_task(self, node: Node) -> NodeTask:
        """The task that re-runs the node's tiles from its stored inputs (tracing mode)."""
        op = operator_of(node)
        return NodeTask(node.name, op, tuple(self.array(n.name) for n in node.inputs), op.input_shapes, op.output_shape)

    def trace(self, node: Node, tiles: "list[int | Box]", frontier: Frontier, i: int,
              direction: Direction) -> list[FullPairs]:
        """The region pairs of ``node``'s ``tiles`` (indices into its grid, or boxes: `regions`) for the cells of
        ``frontier``, by re-running them in tracing mode from the stored inputs."""
        task = self.tile_task(node)
        with self._lock:
            kept = self._reruns.setdefault(node.name, _Kept(self._rerun_budget, self._lock))
        return [trace_tile(task, self._tile(node, t), frontier, i, direction, kept) for t in tiles]

    def regions(self, node: Node, split: list[tuple[int, Frontier]],
                frontier: Frontier | None = None) -> list[tuple[int | Box, Frontier]]:
        """Where a backward black-box step re-runs ``node`` for the frontier ``split`` gives by tile
        (`TileGrid.split`): a `subzero.worker.regional` operator computes any box of its output as its
        tiles do, lineage included (a tile reads its box and its tiling's halo, and keeps the pairs of
        its own box), so a tile's part of the frontier whose bounding box is at most
        `subzero.worker.REGION_SHARE` of the tile re-runs over that box alone (the parts of several
        tiles over their hull, when it is not much larger than they are), its unstored inputs read
        over that box and its halo (`subzero.worker.RecomputedArray.region`), not over whole tiles and
        their neighbours.  A tile re-run before (kept by the engine) and a larger part stay whole
        tiles.  Items are ``(tile index, cells)`` or ``(box, cells)``; any other operator's ``split``
        is returned as it is.  ``frontier``: the cells ``split`` cut (their union, when every part joins
        the hull: not united again)."""
        op = operator_of(node)
        if not split or not regional(op):
            return [(t, sub) for t, sub in split]
        grid = self.grid(node)
        with self._lock:
            ran = {key[0] for key in self._reruns.get(node.name, {})}
        out: list[tuple[int | Box, Frontier]] = []
        parts: list[tuple[Box, Frontier]] = []
        for t, sub in split:
            bbox = sub.bbox()
            tile = grid.tiles[t]
            if bbox is None or tile.index in ran:
                out.append((t, sub))
                continue
            part = tuple((int(lo), int(hi)) for lo, hi in zip(*bbox))
            if _box_cells(part) <= REGION_SHARE * _box_cells(tile.box):
                parts.append((part, sub))
            else:
                out.append((t, sub))
        if len(parts) > 1:
            hull = tuple((min(p[a][0] for p, _ in parts), max(p[a][1] for p, _ in parts))
                         for a in range(len(parts[0][0])))
            if _box_cells(hull) <= 2 * sum(_box_cells(p) for p, _ in parts):
                # every part of the frontier joins the hull: their union is the frontier
                cells = frontier if frontier is not None and not out else \
                    Frontier.union_all([sub for _, sub in parts])
                parts = [(hull, cells)]
        return out + [(p, sub) for p, sub in parts]

    def reach_region(self, node: Node, split: list[tuple[int, Frontier]], frontier: Frontier,
                     i: int) -> list[tuple[int | Box, Frontier]]:
        """Where a forward black-box step from ``frontier`` (over input ``i``) re-runs ``node``: the
        tiles ``split`` gives (`TileGrid.split` over the input), or, for a `subzero.worker.regional`
        operator whose inputs have its output's shape, the box of the output cells that can read the
        frontier alone (its bounding box grown by the tiling's halo, `subzero.Operator.lineage_box`: no
        cell farther away reads it),
        re-run as a region (`regions`) when it is at most `subzero.worker.REGION_SHARE` of those tiles
        and none of them was re-run before."""
        op = operator_of(node)
        bbox = frontier.bbox()
        if not split or bbox is None or not regional(op) or \
                any(tuple(s) != tuple(op.output_shape) for s in op.input_shapes):
            return [(t, sub) for t, sub in split]
        grid = self.grid(node)
        with self._lock:
            ran = {key[0] for key in self._reruns.get(node.name, {})}
        if any(grid.tiles[t].index in ran for t, _ in split):
            return [(t, sub) for t, sub in split]
        box = tuple((int(lo), int(hi)) for lo, hi in zip(*bbox))
        reach = op.lineage_box(box, i)  # a halo is symmetric: the output cells within it of the frontier's box
        if _box_cells(reach) > REGION_SHARE * sum(_box_cells(grid.tiles[t].box) for t, _ in split):
            return [(t, sub) for t, sub in split]
        return [(reach, frontier)]

    def _tile(self, node: Node, tile: int | Box) -> Tile:
        """The node's tile ``tile`` (an index into its grid), or a region of its output (a box) re-run
        as a tile is (`regions`)."""
        if isinstance(tile, tuple):
            return Tile(-1, tile)
        return self.grid(node).tiles[tile]

    def prefetch(self, node: Node, tiles: list[int]) -> None:
        """Before ``node``'s ``tiles`` (indices into its grid) re-run: of each input the run did not
        store, read at once the box those of them not re-run yet read together (when it is not
        much larger than their boxes).  Neighbouring tiles then find their inputs' tiles computed
        and their borders in one region (`subzero.worker.RecomputedArray.region`), instead of each
        computing its own borders of its neighbours' tiles through every unstored step before."""
        grid = self.grid(node)
        with self._lock:
            ran = {key[0] for key in self._reruns.get(node.name, {})}
        tiles = [t for t in tiles if grid.tiles[t].index not in ran]
        if len(tiles) < 2:
            return
        op = operator_of(node)
        tiling = op.effective_tiling()
        for i, parent in enumerate(node.inputs):
            if self.catalog.node(parent.name).array.stored:
                continue
            boxes = [tiling.input_box(op, grid.tiles[t].box, i) for t in tiles]
            hull = tuple((min(b[a][0] for b in boxes), max(b[a][1] for b in boxes)) for a in range(len(boxes[0])))
            if math.prod(hi - lo for lo, hi in hull) <= 2 * sum(math.prod(hi - lo for lo, hi in b) for b in boxes):
                self.array(parent.name).read(hull)

    def rerun_payloads(self, node: Node, tile: int | Box, frontier: Frontier) -> Any:
        """The mode and payload pairs of re-running ``node``'s ``tile`` (an index into its grid, or a box: `regions`) for
        the cells of ``frontier`` (`subzero.worker.rerun_payloads`: the tile runs once per engine
        while the memo lasts); None when its tracing gives no payloads."""
        task = self.tile_task(node)
        with self._lock:
            kept = self._reruns.setdefault(node.name, _Kept(self._rerun_budget, self._lock))
        return rerun_payloads(task, self._tile(node, tile), frontier, kept)

    def report_damaged(self, node: Node, damaged: list[str]) -> None:
        """Warn, once per shard, that the shards of ``damaged`` could not be read and their
        tiles were re-run instead."""
        for problem in damaged:
            if problem not in self._warned:  # once per damaged shard, not once per query
                self._warned.add(problem)
                logger.warning("%s; answering by re-running %s instead", problem, node.name)

    # -- the step policy ----------------------------------------------------------------------
    def stored(self, node: Node) -> tuple[Strategy, ...]:
        """The strategies the node stored, parsed."""
        if node.name not in self._stored:
            self._stored[node.name] = tuple(Strategy.parse(s) for s in self.catalog.node(node.name).strategies)
        return self._stored[node.name]

    def profile(self, node: Node) -> NodeProfile:
        """The cost-model profile of a node: calibrated, or derived from its run statistics."""
        if node.name not in self._profiles:
            from subzero.optimizer.calibrate import profile_from_run

            entry = self.catalog.node(node.name)
            self._profiles[node.name] = NodeProfile.from_dict(entry.profile) if entry.profile else \
                profile_from_run(node.name, node.operator, entry.stats)
        return self._profiles[node.name]

    def reread_seconds(self, node: Node) -> float:
        """Seconds re-running ``node`` spends recomputing its inputs the run did not store, and
        their unstored inputs, whole (`subzero.optimizer.storage.recompute_seconds`, from the
        operators' measured times): a re-run step pays it, a stored or mapped one does not."""
        got = self._reread.get(node.name)
        if got is None:
            from subzero.optimizer.storage import array_choices, recompute_seconds

            reads = [i.name for i in node.inputs]
            records = self.catalog.nodes
            if all(records[r].array.stored for r in reads if r in records):
                got = 0.0
            else:
                if self._unstored is None:  # the run's unstored arrays: worked out once, not per node
                    unstored = {name: float(getattr(r.stats, "op_seconds", 0.0) or 0.0)
                                for name, r in records.items() if not r.array.stored}
                    inputs = {n.name: [i.name for i in n.inputs] for n in self.workflow.nodes}
                    self._unstored = array_choices(inputs, unstored, {})
                got = recompute_seconds(self._unstored, reads)
            self._reread[node.name] = got
        return got

    def choose(self, node: Node, plan: QueryOptions, cells: int, whole: bool = False) -> tuple[Strategy, float | None,
                                                                                      float | None]:
        """The strategy of one step through ``node`` reaching it with ``cells`` cells: the one
        ``plan`` forces, else the cheapest `choose_step` predicts (``whole``: its mapping
        functions take the frontier whole, see `maps_whole`).  Returns it, the deadline
        (perf_counter) of its stored lookups (None: none) and its predicted seconds (None: forced)."""
        forced = plan.using.get(node)
        if forced is not None:
            return Strategy.parse(forced), None, None
        key = (node.name, plan.direction, cells, whole)
        choice = self._choices.get(key)
        if choice is None:  # a function of the run's profile and the frontier's size: the same for the next query
            choice = choose_step(self.profile(node), self.stored(node), Mode.MAP in operator_of(node).supported_modes(),
                                 plan.direction, cells, self.reread_seconds(node), whole)
            if len(self._choices) < MAX_KEPT_CHOICES:
                self._choices[key] = choice
        deadline = time.perf_counter() + choice.budget if choice.strategy.stored else None
        return choice.strategy, deadline, choice.predicted

    def rule(self, node: Node, i: int, direction: Direction) -> Rule | None:
        """The `Rule` of the step through ``node`` w.r.t. input ``i`` in ``direction`` (None: not
        arithmetic on boxes), resolved once per engine."""
        key = (node.name, i, direction)
        if key not in self._rules:
            self._rules[key] = rule_of(node.operator, i, direction)
        return self._rules[key]

    def advance(self, node: Node, carried: C, i: int, plan: QueryOptions) -> C:
        """One step through ``node`` (w.r.t. input ``i``), by the strategy ``plan`` forces or
        the cheapest one `choose_step` predicts; stored lookups of a frontier past the
        predicted re-run time switch to re-execution.  Appends the step's statistics to
        ``plan.log``.  ``carried`` is a `Frontier` or another `Carrier` (which steps itself)."""
        if plan.cancel is not None and plan.cancel.is_set():
            raise QueryCancelled(f"the {plan.direction} walk was cancelled before it stepped through {node.name!r}")
        cells = carried.estimate()
        start = time.perf_counter()
        way = _DIRECTION_NAMES[plan.direction]  # the log's name of it (an enum's value is a slow property)
        frontier = isinstance(carried, Frontier)
        forced = plan.using.get(node) is not None
        rule = self.rule(node, i, plan.direction) if frontier and not forced else None
        got: Any = rule.apply(carried, plan.entire_array) if rule is not None else None
        if got is not None:  # arithmetic on boxes: no strategy to choose (nothing stored is cheaper)
            plan.log.append({"node": node.name, "input": i, "direction": way, "strategy": "Map",
                             "switched_to_blackbox": False, "damaged_lineage": None, "cells_in": cells,
                             "cells_out": got.estimate(), "seconds": time.perf_counter() - start,
                             "predicted_seconds": None})
            return got
        key = (node.name, i, way)
        whole = frontier and not forced and carried.is_full  # every cell: the same answer each time
        kept = self._whole.get(key) if whole else None
        if kept is not None:  # shared, read-only: the walk hands out a copy at its end (`_private`)
            plan.log.append({"node": node.name, "input": i, "direction": way,
                             "strategy": kept[0].name, "switched_to_blackbox": False, "damaged_lineage": None,
                             "cells_in": cells, "cells_out": kept[1].estimate(),
                             "seconds": time.perf_counter() - start, "predicted_seconds": None})
            shared: Any = kept[1]
            return shared
        strategy, deadline, predicted = self.choose(node, plan, cells,
                                                    frontier and maps_whole(node.operator, carried, i, plan.direction))
        switched, damaged = False, list[str]()
        result: Any
        if not isinstance(carried, Frontier):
            result = carried.step(self, node, i, plan.direction, strategy)
        else:
            try:
                result = step(self, node, carried, i, plan.direction, strategy, plan.entire_array, deadline,
                              forced=forced, damaged=damaged, lookups=plan.lookups)
            except LookupTimeout:
                switched = True
                result = step(self, node, carried, i, plan.direction, BLACKBOX, plan.entire_array)
            if whole:
                self._keep_whole(key, strategy, result)
        self.report_damaged(node, damaged)
        plan.log.append({"node": node.name, "input": i, "direction": way, "strategy": strategy.name,
                         "switched_to_blackbox": switched, "damaged_lineage": "; ".join(damaged) or None,
                         "cells_in": cells, "cells_out": result.estimate(), "seconds": time.perf_counter() - start,
                         "predicted_seconds": predicted})
        return result

    def united(self, parts: list[Frontier]) -> Frontier:
        """`Frontier.union_all` of ``parts``.  When every part is a kept answer (read-only and
        shared: a whole array's step, `_keep_whole`, or a union kept here), the union depends on
        the run alone, so it is made once and kept (read-only, within the ``query_memo_mb``
        setting) for the next walk bringing the same parts: a walk below a global statistic
        unites the same masks at every query."""
        if not all(_shared(p) for p in parts):
            return Frontier.union_all(parts)
        key = tuple(sorted(id(p) for p in parts))  # the kept entry holds its parts: their ids are theirs alone
        kept = self._unions.get(key)
        if kept is not None:
            return kept[1]
        one = Frontier.union_all(parts)
        if not _shared(one):
            size = one.nbytes
            with self._lock:
                if self._whole_bytes + size > self._whole_limit:
                    return one
                self._whole_bytes += size
            for a in one.arrays():
                a.flags.writeable = False
        with self._lock:
            self._unions[key] = (tuple(parts), one)  # the parts held: their ids stay theirs
        return one

    def _keep_whole(self, key: tuple[str, int, str], strategy: Strategy, result: Frontier) -> None:
        """Keep the step of a whole array (``key``: node, input, direction; the ``strategy`` that
        answered it) for the next step reaching it whole: a read-only copy, within the
        ``query_memo_mb`` setting for all kept together."""
        size = result.nbytes
        with self._lock:
            if key not in self._whole and self._whole_bytes + size <= self._whole_limit:
                kept = result.copy()
                for a in kept.arrays():
                    a.flags.writeable = False
                self._whole[key] = (strategy, kept)
                self._whole_bytes += size

    # -- walks -------------------------------------------------------------------------------
    def walk(self, src: Node, dst: Node, start: C, plan: QueryOptions) -> C:
        """Carry ``start`` (a `Frontier` or another `Carrier` over ``src``) to ``dst`` along
        every path: what arrives at a node by several paths is united before it steps, so
        each node steps once per input (lineage of a union is the union of lineages)."""
        if src is dst:
            return start
        backward = plan.direction is Direction.BACKWARD
        up, down = (dst, src) if backward else (src, dst)
        if up not in self.workflow.ancestors(down):
            raise LineageError(f"no path from {src.name!r} {plan.direction} to {dst.name!r}: {dst.name!r} is not "
                               f"{'an ancestor' if backward else 'a descendant'} of {src.name!r}")
        got = self.walk_many(src, [dst], start, plan)[dst]
        assert got is not None  # dst is reachable
        return got

    def walk_many(self, src: Node, dsts: Sequence[Node], start: C,
                  plan: QueryOptions) -> dict[Node, C | None]:
        """`walk` to several nodes at once, each node on a path stepping once (Smoke's linked
        brushing).  Returns node -> what reached it for each of ``dsts`` (None: no path reaches it).

        What a node holds is dropped once it has stepped, unless it is one of ``dsts``.
        """
        forward = plan.direction is Direction.FORWARD
        # node -> what reached it by each path, united when it is read (`_united`); keyed by id(node):
        # the schedule's ints hash in C, a Node by a Python method
        held: dict = {id(src): [start]}
        for node, me, edges, drop in self._schedule(src, dsts, plan.direction):
            if forward:
                for i, parent in edges:
                    if parent in held:
                        held.setdefault(me, []).append(self.advance(node, _united(held, parent, self), i, plan))
                continue
            if me not in held:
                continue
            for i, parent in edges:
                held.setdefault(parent, []).append(self.advance(node, _united(held, me, self), i, plan))
            if drop:
                del held[me]  # each node steps once: what it held is done
        return {dst: _private(_united(held, id(dst), self) if id(dst) in held else None) for dst in dsts}

    def _schedule(self, src, dsts, direction: Direction) -> list[tuple[Node, int, list[tuple[int, int]], bool]]:
        """`walk_many`'s steps, worked out once per (source, targets, direction) from `_walk_plan`:
        per node in the order it steps, ``(node, id(node), edges, drop)``: ``edges`` the ``(input
        index, id(node reached from))`` of forward steps (taken when that node was reached) or the
        ``(input index, id(parent on a path))`` of backward ones; ``drop``: a backward walk lets go
        of what the node held once it stepped (it is none of ``dsts``)."""
        key = (src.name, tuple(d.name for d in dsts), direction)
        got = self._plans.get(key)
        if got is None:
            order, on_path = self._walk_plan(src, dsts, direction)
            keep = {id(d) for d in dsts}
            if direction is Direction.FORWARD:
                got = [(n, id(n), [(i, id(p)) for i, p in enumerate(n.inputs)], False) for n in order if n is not src]
            else:
                got = [(n, id(n), [(i, id(p)) for i, p in enumerate(n.inputs) if p in on_path], id(n) not in keep)
                       for n in reversed(order)]
            with self._lock:
                self._plans[key] = got
        return got

    def _walk_plan(self, src, dsts, direction: Direction) -> tuple[list, set]:
        """The nodes on a path from ``src`` to any of ``dsts`` (in workflow order, and as a set)."""
        wf, forward = self.workflow, direction is Direction.FORWARD
        reach = wf.descendants(src) if forward else wf.ancestors(src)
        wanted: set = set()
        for dst in dsts:
            if dst in reach:
                wanted |= wf.ancestors(dst) if forward else wf.descendants(dst)
        on_path = reach & wanted
        return [n for n in wf.nodes if n in on_path], on_path

    def follow(self, steps: list, start: C, plan: QueryOptions) -> C:
        """Carry ``start`` along an explicit path of ``(node, input index)`` steps."""
        carried = start
        for node, i in steps:
            carried = self.advance(node, carried, i, plan)
        return _private(carried)

"""The runtime inside one task: run an operator on one tile, collect its lineage, encode it.

`run_tile` is the single mechanism every executor (in-process or Spark) calls, so both
record byte-identical lineage.  `trace_tile` is the same call at query time in tracing
mode (black-box re-execution): it returns the tile's lineage as in-memory pairs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from subzero.cells import box_cells, to_coords, to_ids
from subzero.context import Context
from subzero.encoders import EncodedTile, encoder_for
from subzero.errors import LookupTimeout, WorkflowError
from subzero.modes import Mode, Strategy
from subzero.operator import Operator
from subzero.pairs import FullPairs, PayloadPairs, ptr_from_counts
from subzero.tiling import Box, Tile, box_slices, full_box

__all__ = ["NodeTask", "TileResult", "TileCapture", "capture_tile", "run_tile", "trace_tile", "modes_for", "derived_full", "expand_payloads"]


@dataclass(frozen=True)
class NodeTask:
    """Everything a task needs to compute one node's tiles (picklable, shipped to Spark)."""

    node: str
    operator: Operator
    input_paths: tuple[str, ...]
    strategies: tuple[str, ...]

    @property
    def shapes(self):
        return self.operator.output_shape, tuple(self.operator.input_shapes)


@dataclass
class TileResult:
    """What a task sends back: its output block, encoded lineage and measurements."""

    tile: Tile
    output: np.ndarray
    encoded: dict[str, EncodedTile] = field(default_factory=dict)
    op_seconds: float = 0.0
    encode_seconds: dict[str, float] = field(default_factory=dict)
    lineage_seconds: float = 0.0
    cells: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # strategy -> (pairs, out cells, in cells)


def modes_for(strategies) -> list[frozenset[Mode]]:
    """The ``ctx.modes`` of each operator call needed to produce ``strategies`` (PAY and COMP
    both write payloads, so asking for both takes two calls)."""
    modes = {Strategy.parse(s).mode for s in strategies} & {Mode.FULL, Mode.PAY, Mode.COMP}
    if {Mode.PAY, Mode.COMP} <= modes:
        return [frozenset(modes - {Mode.COMP}), frozenset({Mode.COMP})]
    return [frozenset(modes)]


def _load_inputs(task: NodeTask, boxes: tuple[Box, ...]) -> list[np.ndarray]:
    arrays = []
    for path, box in zip(task.input_paths, boxes):
        arrays.append(np.asarray(np.load(path, mmap_mode="r")[box_slices(box)]))
    return arrays


def _call(task: NodeTask, tile: Tile, modes: frozenset[Mode]):
    """Run the operator on one tile with ``modes``; return (context, trimmed output, result box)."""
    op = task.operator
    tiling = op.effective_tiling()
    known = op.output_shape is not None
    in_boxes = tuple(tiling.input_box(op, tile.box, i) for i in range(len(op.input_shapes))) if known \
        else tuple(full_box(s) for s in op.input_shapes)
    result_box = tiling.result_box(op, tile.box, in_boxes) if known else None
    native = modes & op.supported_modes()
    ctx = Context(task.node, native, tile.box, in_boxes, tuple(op.input_shapes), op.output_shape)
    ctx.set_result_box(result_box)
    out = op.run(ctx, *_load_inputs(task, in_boxes))
    if not isinstance(out, np.ndarray):
        out = np.asarray(out)
    if not known:  # a whole-array operator whose output shape only running tells
        op.output_shape = tuple(out.shape)
        result_box = full_box(out.shape)
        ctx.bind_output(result_box, out.shape)
        tile = Tile(tile.index, result_box)
    elif out.shape != tuple(hi - lo for lo, hi in result_box):
        raise WorkflowError(
            f"node {task.node!r} ({type(op).__name__}): run() returned an array of shape "
            f"{out.shape}, expected {tuple(hi - lo for lo, hi in result_box)} for tile {tile.box}")
    trimmed = out[box_slices(tile.box, result_box)]
    return ctx, trimmed, result_box, tile


def one_pair_per_cell(out_ids: np.ndarray, cells: np.ndarray, in_shapes, pairs_fn) -> FullPairs:
    """Full pairs with one out cell each, from a per-cell lineage function
    ``pairs_fn(cells, i) -> (owner, coords)`` such as ``map_b_pairs``."""
    ins, ptrs = [], []
    for i, shape in enumerate(in_shapes):
        owner, coords = pairs_fn(cells, i)
        owner = np.asarray(owner, np.int64)
        ids = to_ids(np.asarray(coords, np.int64).reshape(len(owner), len(shape)), shape)
        order = np.lexsort((ids, owner))
        ins.append(ids[order])
        ptrs.append(ptr_from_counts(np.bincount(owner, minlength=len(cells))))
    return FullPairs(out_ids, np.arange(len(out_ids) + 1, dtype=np.int64), tuple(ins), tuple(ptrs))


def derived_full(op: Operator, tile_box: Box) -> FullPairs:
    """FULL lineage of a mapping operator's tile from ``map_b_pairs``: one pair per out cell."""
    cells = box_cells(tuple(lo for lo, _ in tile_box), tuple(hi for _, hi in tile_box))
    return one_pair_per_cell(to_ids(cells, op.output_shape), cells, op.input_shapes, op.map_b_pairs)


@dataclass
class TileCapture:
    """One tile computed with its lineage in memory: full pairs and payload pairs per mode."""

    tile: Tile
    output: np.ndarray
    op_seconds: float
    full: FullPairs | None = None
    payloads: dict[Mode, PayloadPairs] = field(default_factory=dict)

    def pairs_for(self, strategy: Strategy):
        return self.full if strategy.mode is Mode.FULL else self.payloads[strategy.mode]


def capture_tile(task: NodeTask, tile: Tile) -> TileCapture:
    """Run one tile with the modes ``task.strategies`` need; lineage of each mode once."""
    op = task.operator
    calls = modes_for(task.strategies)
    start = time.perf_counter()
    ctx, output, result_box, tile = _call(task, tile, calls[0])
    capture = TileCapture(tile, output, time.perf_counter() - start)
    contexts = [ctx] + [_call(task, tile, m)[0] for m in calls[1:]]
    for c, modes in zip(contexts, calls):
        if Mode.FULL in modes:
            capture.full = c.full_pairs(result_box) if Mode.FULL in op.supported_modes() \
                else derived_full(op, tile.box)
        for mode in modes & {Mode.PAY, Mode.COMP}:
            capture.payloads[mode] = c.payload_pairs(result_box)
    return capture


def run_tile(task: NodeTask, tile: Tile) -> TileResult:
    """Compute one tile of a node and encode its lineage for every strategy of the node."""
    lineage_start = time.perf_counter()
    capture = capture_tile(task, tile)
    result = TileResult(capture.tile, capture.output, op_seconds=capture.op_seconds)
    for name in task.strategies:
        strategy = Strategy.parse(name)
        if not strategy.stored:
            continue
        t0 = time.perf_counter()
        pairs = capture.pairs_for(strategy)
        result.encoded[name] = encoder_for(strategy).encode(pairs, capture.tile.index, task.shapes)
        result.encode_seconds[name] = time.perf_counter() - t0
        n_in = sum(len(a) for a in pairs.in_ids) if strategy.mode is Mode.FULL else 0
        result.cells[name] = (pairs.n_pairs, len(pairs.out_ids), n_in)
    result.lineage_seconds = time.perf_counter() - lineage_start - capture.op_seconds
    return result


def trace_tile(task: NodeTask, tile: Tile) -> FullPairs:
    """Re-run one tile in tracing mode and return its lineage as full region pairs.

    The operator produces the richest lineage it supports (FULL, else mapping, else
    payloads expanded by ``map_p``); an all-to-all operator's lineage needs no re-run.
    """
    op = task.operator
    supported = op.supported_modes()
    if op.all_to_all:  # every output cell of the tile reads every input cell: no re-run needed
        return all_to_all_pairs(op, tile.box)
    if Mode.FULL in supported:
        ctx, _, result_box, tile = _call(task, tile, frozenset({Mode.FULL}))
        return ctx.full_pairs(result_box)
    if Mode.MAP in supported:
        _call(task, tile, frozenset())
        return derived_full(op, tile.box)
    mode = Mode.PAY if Mode.PAY in supported else Mode.COMP
    ctx, _, result_box, tile = _call(task, tile, frozenset({mode}))
    pay = ctx.payload_pairs(result_box)
    expanded = expand_payloads(op, pay)
    if mode is Mode.PAY:
        return expanded
    default = derived_full(op, tile.box)
    return FullPairs.concat([default.select(~np.isin(default.out_ids, pay.out_ids)), expanded], len(op.input_shapes))


def all_to_all_pairs(op: Operator, tile_box: Box) -> FullPairs:
    """One region pair: every out cell of the tile depends on every input cell."""
    out = to_ids(box_cells(tuple(lo for lo, _ in tile_box), tuple(hi for _, hi in tile_box)), op.output_shape)
    ins = [np.arange(int(np.prod(s)), dtype=np.int64) for s in op.input_shapes]
    return FullPairs(out, np.array([0, len(out)]), tuple(ins), tuple(np.array([0, len(a)]) for a in ins))


def expand_payloads(op: Operator, pay: PayloadPairs, deadline: float | None = None) -> FullPairs:
    """Full pairs (one per out cell) computed from payload pairs with ``map_p_pairs``,
    one call per distinct payload; past ``deadline`` (perf_counter) raise `LookupTimeout`."""
    parts = []
    for payload, ids in pay.by_payload():
        if deadline is not None and time.perf_counter() > deadline:
            raise LookupTimeout()
        parts.append(one_pair_per_cell(ids, to_coords(ids, op.output_shape), op.input_shapes,
                                       lambda cells, i, payload=payload: op.map_p_pairs(cells, payload, i)))
    return FullPairs.concat(parts, len(op.input_shapes))

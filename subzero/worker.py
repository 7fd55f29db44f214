"""The runtime inside one task: run an operator on one tile, write its chunk and lineage shards.

`run_tile` is the single mechanism every executor (in-process or Spark) calls, so both
record byte-identical lineage.  A task reads only its tile (plus halo) of its inputs,
writes only its own output chunk and, per stored strategy, its own lineage shard under
a name unique to the attempt, and returns small metadata (`TileMeta`): nothing
array-sized goes back to the driver.  `capture_tile` is the same computation kept in
memory (calibration); `trace_tile` runs it in tracing mode at query time (black-box
re-execution) and returns the tile's lineage as in-memory pairs.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Callable, MutableMapping, NoReturn, Sequence

import numpy as np

from subzero.catalog import FileRecord, ShardRecord
from subzero.cells import box_cells, to_coords, to_ids
from subzero.context import Context
from subzero.encoders import encoder_for, merge_tiles
from subzero.errors import LookupTimeout, StoreError, WorkflowError
from subzero.modes import Direction, Mode, Strategy
from subzero.operator import Operator
from subzero.pairs import FullPairs, PayloadPairs, owners, ptr_from_counts
from subzero.store.arrays import ArrayRef, BlockCache, HeldArray, MemoryArray, output_compressor, resolve_compressor
from subzero.store.location import Location
from subzero.store.shards import ShardSink, write_tiles_shard
from subzero.tiling import Box, Elementwise, Halo, Tile, box_slices, default_chunks, full_box

__all__ = ["NodeTask", "TileMeta", "PENDING_BYTES", "SHARED_SHARD_BYTES", "TileCapture", "capture_tile", "run_tile",
           "prepare_tile", "Held", "FusedTask",
           "FusedTile", "run_fused_tile", "trace_tile", "rerun_payloads", "modes_for",
           "derived_full", "expand_payloads", "merge_inline", "write_pending", "release_pending",
           "RecomputedArray", "computes_into", "regional", "REGION_SHARE"]


@dataclass(frozen=True)
class NodeTask:
    """Everything a task needs to compute one node's tiles (picklable, shipped to Spark).

    ``operator`` is bound to ``input_shapes``/``output_shape`` (`Operator.bound`; the
    output shape is None while only running tells it); ``inputs`` are the arrays the
    operator reads; ``strategies`` the stored strategies each tile encodes; ``output`` is
    where tiles are written (None when the output is already stored, or at query time);
    ``chunks`` is the output's chunk shape (None: derived from the shape once running
    tells it); ``shard_dirs`` maps each stored strategy's name to its shard directory in
    ``location``; ``digest`` asks each tile for the digest of its values (an input's
    fingerprint).
    """

    node: str
    operator: Operator
    inputs: tuple[ArrayRef, ...]
    input_shapes: tuple[tuple[int, ...], ...]
    output_shape: tuple[int, ...] | None
    strategies: tuple[Strategy, ...] = ()
    output: ArrayRef | None = None
    chunks: tuple[int, ...] | None = None
    location: Location | None = None
    shard_dirs: tuple[tuple[str, str], ...] = ()
    digest: bool = False
    #: when set, each tile keeps its encoded lineage in its `TileMeta` (``pending``), unwritten, counted
    #: under this key (unique to the stage's run): the caller writes the node's tiles as one shared
    #: shard per strategy afterwards (`write_pending`; in-process only)
    pending_key: str | None = None

    @property
    def shapes(self) -> tuple[tuple[int, ...] | None, tuple[tuple[int, ...], ...]]:
        """``(output_shape, input_shapes)``, as the encoders take them."""
        return self.output_shape, self.input_shapes

    @property
    def stored(self) -> tuple[Strategy, ...]:
        """The strategies that write lineage (``strategies`` without Map and BlackBox)."""
        return tuple(s for s in self.strategies if s.stored)


@dataclass
class TileMeta:
    """What a task sends back to the driver: small metadata, never cells.

    ``shape``/``dtype``/``chunks`` describe the output as this tile saw it (the driver
    checks that every tile agrees); ``shards`` holds one record per stored strategy;
    ``digest`` the `subzero.fingerprint.block_digest` of the tile's values when asked.
    """

    tile: Tile
    shape: tuple[int, ...]
    dtype: str
    chunks: tuple[int, ...]
    op_seconds: float = 0.0
    lineage_seconds: float = 0.0
    write_seconds: float = 0.0
    array_bytes: int = 0
    shards: dict[str, ShardRecord] = field(default_factory=dict)
    inline: dict[str, bytes] = field(default_factory=dict)
    digest: str | None = None
    #: the codec pipeline the output's chunks were written with (its metadata must say the same)
    pipeline: str | None = None
    #: how many of the node's tiles this task's box covers (more than 1: a band of them, `stage.bands`)
    covers: int = 1
    #: per strategy, the tile's encoded lineage not written yet (`NodeTask.pending_key`)
    pending: dict[str, Any] = field(default_factory=dict, repr=False)


def modes_for(strategies: "tuple[Strategy, ...] | list[Strategy]") -> list[frozenset[Mode]]:
    """The ``ctx.modes`` of each operator call needed to produce ``strategies`` (PAY and COMP
    both write payloads, so asking for both takes two calls)."""
    modes = {s.mode for s in strategies} & {Mode.FULL, Mode.PAY, Mode.COMP}
    if {Mode.PAY, Mode.COMP} <= modes:
        return [frozenset(modes - {Mode.COMP}), frozenset({Mode.COMP})]
    return [frozenset(modes)]


def _context(task: NodeTask, tile: Tile, modes: frozenset[Mode]) -> tuple[Context, tuple[Box, ...], list[np.ndarray]]:
    """One operator call's context on ``tile``, the input boxes it reads (whole inputs while
    the output shape is unknown) and those blocks of the inputs."""
    op = task.operator
    known = task.output_shape is not None
    in_boxes = tuple(op.effective_tiling().input_box(op, tile.box, i) if known else full_box(s)
                     for i, s in enumerate(task.input_shapes))
    ctx = Context(task.node, modes & op.supported_modes(), tile.box, in_boxes, task.input_shapes, task.output_shape,
                  reader=lambda i, box: task.inputs[i].read(box))
    if op.reads_only:  # never written: views of what is held in memory, not copies
        return ctx, in_boxes, [ref.view(box) if isinstance(ref, (HeldArray, MemoryArray)) else ref.read(box)
                               for ref, box in zip(task.inputs, in_boxes)]
    return ctx, in_boxes, [ref.read(box) for ref, box in zip(task.inputs, in_boxes)]


#: where a tile's values may be computed (`Operator.run_into`): ``into(shape, dtype)`` gives a writable
#: array of that shape and dtype, or None (the operator then returns a new array, as ``run`` does)
Into = Callable[[tuple[int, ...], np.dtype], "np.ndarray | None"]


def _call(task: NodeTask, tile: Tile, modes: frozenset[Mode], into: Into | None = None):
    """Run the operator on one tile with ``modes``; return (context, trimmed output, result
    box, tile, operator): a whole-array operator whose output shape only running tells comes
    back bound to that shape, and its tile to the whole output.  ``into``: where an operator
    that `Operator.fills_out` computes its tile (its result box is its tile: elementwise)."""
    op = task.operator
    ctx, in_boxes, blocks = _context(task, tile, modes)
    known = task.output_shape is not None
    result_box = op.effective_tiling().result_box(op, tile.box, in_boxes) if known else None
    ctx.set_result_box(result_box)
    errstate = getattr(op, "errstate", None)  # the floating-point error handling the traced code was under
    computed_into = into is not None and result_box == tile.box and not ctx.modes  # run records no lineage here
    target = _target(task, ctx, blocks, result_box, into) if computed_into else None
    with np.errstate(**errstate) if errstate else contextlib.nullcontext():
        out = op.run(ctx, *blocks) if target is None else op.run_into(ctx, target, *blocks)
    if out is None:
        raise WorkflowError(f"node {task.node!r} ({type(op).__name__}): run() returned None; it must return "
                            "the output array")
    if not isinstance(out, np.ndarray):
        out = np.asarray(out)
    if out.dtype == object:
        raise WorkflowError(f"node {task.node!r} ({type(op).__name__}): run() returned an array of Python "
                            "objects; return a numeric numpy array")
    if not known:  # a whole-array operator whose output shape only running tells: a copy bound to it
        op = op.bound(op.input_shapes, out.shape)
        result_box = full_box(out.shape)
        ctx.bind_output(result_box, out.shape)
        tile = Tile(tile.index, result_box)
    elif out.shape != tuple(hi - lo for lo, hi in result_box):
        raise WorkflowError(
            f"node {task.node!r} ({type(op).__name__}): run() returned an array of shape "
            f"{out.shape}, expected {tuple(hi - lo for lo, hi in result_box)} for tile {tile.box}")
    trimmed = out[box_slices(tile.box, result_box)]
    return ctx, trimmed, result_box, tile, op


def _target(task: NodeTask, ctx: Context, blocks: Sequence[np.ndarray], box: Box | None, into: Into
            ) -> np.ndarray | None:
    """Where the task's operator computes the cells of ``box`` (`Operator.run_into`), or None: it
    does not compute into a given array (`computes_into`), or ``into`` has no place.  The dtype is
    the one ``run`` gives: ``run`` on the first cell of each block (the same dtypes and axes, so
    numpy's rules agree), under a context of its own that records no lineage."""
    op = task.operator
    if box is None or not computes_into(op):
        return None
    firsts = [b[(slice(0, 1),) * b.ndim] if b.ndim else b for b in blocks]
    probe = Context(task.node, (), ctx.tile_box, ctx.input_boxes, task.input_shapes, task.output_shape)  # no lineage
    with np.errstate(all="ignore"):
        dtype = np.asarray(op.run(probe, *firsts)).dtype
    if dtype.hasobject:  # refused as run's output is (`_call`), not computed into bytes
        return None
    return into(tuple(hi - lo for lo, hi in box), dtype)


def computes_into(op: Operator) -> bool:
    """Whether ``op``'s values may be computed into a given array: it `Operator.fills_out` and its
    `Operator.run_into` is defined where its ``run`` is, or below (a subclass that overrides ``run``,
    e.g. to record its own lineage, is run as it says, not through an inherited ``run_into``)."""
    if not op.fills_out:
        return False
    mro = type(op).__mro__
    run_owner = next(k for k, c in enumerate(mro) if "run" in c.__dict__)
    into_owner = next((k for k, c in enumerate(mro) if "run_into" in c.__dict__), len(mro))
    return into_owner <= run_owner


def prepare_tile(task: NodeTask, tile: Tile) -> Any:
    """The first pass of a two-pass operator over one tile: its `Operator.prepare` summary."""
    ctx, _, blocks = _context(task, tile, frozenset())
    return task.operator.prepare(ctx, *blocks)


def one_pair_per_cell(out_ids: np.ndarray, cells: np.ndarray, in_shapes: Sequence[tuple[int, ...]],
                      pairs_fn: Callable[..., Any]) -> FullPairs:
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


def derived_full(op: Operator, tile_box: Box, cells: np.ndarray | None = None) -> FullPairs:
    """FULL lineage of a mapping operator's tile (or of its ``cells`` only) from
    ``map_b_pairs``: one pair per out cell."""
    if cells is None:
        cells = box_cells(tuple(lo for lo, _ in tile_box), tuple(hi for _, hi in tile_box))
    return one_pair_per_cell(to_ids(cells, op.output_shape), cells, op.input_shapes, op.map_b_pairs)


@dataclass
class TileCapture:
    """One tile computed with its lineage in memory: full pairs and payload pairs per mode;
    ``operator`` is the task's, bound to the output shape the tile ran with."""

    tile: Tile
    output: np.ndarray
    op_seconds: float
    operator: Operator
    full: FullPairs | None = None
    payloads: dict[Mode, PayloadPairs] = field(default_factory=dict)

    @property
    def shapes(self) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
        """``(output_shape, input_shapes)`` as this tile ran (the encoders' ``shapes``)."""
        return tuple(self.operator.output_shape or ()), tuple(self.operator.input_shapes)

    def pairs_for(self, strategy: Strategy) -> Any:
        """The pairs ``strategy`` encodes: the full pairs, or the payload pairs of its mode."""
        return self.full if strategy.mode is Mode.FULL else self.payloads[strategy.mode]


def capture_tile(task: NodeTask, tile: Tile, into: Into | None = None) -> TileCapture:
    """Run one tile with the modes ``task.strategies`` need; lineage of each mode once.
    ``into``: where its values may be computed (`Into`)."""
    calls = modes_for(task.strategies)
    start = time.perf_counter()
    ctx, output, result_box, tile, op = _call(task, tile, calls[0], into)
    capture = TileCapture(tile, output, time.perf_counter() - start, op)
    contexts = [ctx] + [_call(task, tile, m)[0] for m in calls[1:]]
    for c, modes in zip(contexts, calls):
        if Mode.FULL in modes:
            capture.full = c.full_pairs(result_box) if Mode.FULL in op.supported_modes() \
                else derived_full(op, tile.box)
        for mode in modes & {Mode.PAY, Mode.COMP}:
            capture.payloads[mode] = c.payload_pairs(result_box)
    return capture


def run_tile(task: NodeTask, tile: Tile) -> TileMeta:
    """Compute one tile of a node: write its output chunk (when ``task.output`` is set) and,
    for every stored strategy, encode its lineage into a new shard; return the metadata."""
    lineage_start = time.perf_counter()
    return _finish_tile(task, capture_tile(task, tile, _held_target(task, tile)), lineage_start)


def _held_target(task: NodeTask, tile: Tile) -> Into | None:
    """A tile of an output held in this process (`MemoryArray`) is computed in its own cells
    there (`MemoryArray.target`), not into a new array copied in after."""
    output, shape = task.output, task.output_shape
    if not isinstance(output, MemoryArray) or shape is None or tile.box is None:
        return None
    chunks = task.chunks if task.chunks is not None else default_chunks(shape)
    return lambda _, dtype: output.target(tile.box, shape, chunks, dtype)


@dataclass(frozen=True)
class Held:
    """An input of a fused task's member that an earlier member (node ``node``) computes in
    the same task (`run_fused_tile`), in place of its stored array."""

    node: str


@dataclass(frozen=True)
class FusedTask:
    """The tasks of consecutive nodes run tile by tile in one task (`run_fused_tile`): each
    writes its own output and returns its own `TileMeta`, as `run_tile` would; an input
    that is an earlier member's output is `Held`.  ``prepare``: the next node's first pass
    (a two-pass operator's `prepare_tile`), run on each tile over the members' outputs."""

    tasks: tuple[NodeTask, ...]
    prepare: NodeTask | None = None

    @property
    def node(self) -> str:
        """The members' names joined by ``+`` (progress, errors)."""
        return "+".join(t.node for t in self.tasks)

    @property
    def operators(self) -> tuple[Operator, ...]:
        """Every member's operator (pickled by value when defined outside subzero)."""
        return tuple(t.operator for t in self.tasks + ((self.prepare,) if self.prepare is not None else ()))


@dataclass
class FusedTile:
    """What a fused task sends back per tile: each member's `TileMeta` (in member order) and
    the first-pass summary of `FusedTask.prepare` (None without one)."""

    metas: list[TileMeta]
    summary: Any = None


def run_fused_tile(fused: FusedTask, tile: Tile) -> FusedTile:
    """`run_tile` of every member of ``fused`` on ``tile``, in order, each member computed once
    over the box its later members read (its tile grown by their halos) and handed to them
    in memory (`HeldArray`) instead of through the store; each still writes its own tile's
    chunk.  Members computed over more than their tile store no lineage (the driver fuses
    only such nodes).  Then ``fused.prepare``'s first pass on the tile, over the held
    outputs.  Returns the members' metadata, in member order, and that summary."""
    tasks = fused.tasks + ((fused.prepare,) if fused.prepare is not None else ())
    need: dict[str, Box] = {}
    for t in reversed(tasks):  # a member's readers come after it: its box is final here
        box = _hull(need.get(t.node), tile.box)
        need[t.node] = box
        op = t.operator
        for i, ref in enumerate(t.inputs):
            if isinstance(ref, Held):
                need[ref.node] = _hull(need.get(ref.node), op.effective_tiling().input_box(op, box, i))
    # the last task reading each member's output: past it, the output is dropped, so the next
    # member's output takes memory just freed (as numpy's own temporaries do), not fresh pages
    last_read = {r.node: k for k, t in enumerate(tasks) for r in t.inputs if isinstance(r, Held)}
    held: dict[str, HeldArray] = {}
    # members that `Operator.fills_out` compute into memory of this task's that no held output uses any more
    # (numpy's `out=`), their own output's cells when it is held here whole, so a chain of elementwise steps
    # takes two buffers, not one new array per step and a copy of the last
    scratch = _Scratch()
    owned: dict[str, np.ndarray] = {}  # member -> the scratch buffer its held output is in
    metas = []
    for k, t in enumerate(fused.tasks):
        started = time.perf_counter()
        box = need[t.node]
        if t.output_shape is None or (box != tile.box and t.stored):
            raise WorkflowError(f"node {t.node!r}: only nodes that know their shape and store no lineage can be "
                                "fused")
        inputs = tuple(held[r.node] if isinstance(r, Held) else r for r in t.inputs)
        output = t.output
        if output is not None and any(isinstance(r, Held) for r in t.inputs):
            # the choice the driver makes once they are committed
            if isinstance(output, ArrayRef):
                output = replace(output, compressor=output_compressor(inputs, output.compressor))
            else:  # a MemoryArray: this process's own, told once (every tile finds the same)
                output.compressor = output_compressor(inputs, output.compressor)
        member = replace(t, inputs=inputs, output=output)
        dropped = [name for name, at in last_read.items() if at == k]
        if computes_into(t.operator):  # the inputs it reads last may take its values (ufuncs: as if they were copied)
            for name in dropped:
                if name in owned:
                    scratch.give(owned.pop(name))
        into = _held_target(member, tile) if isinstance(output, MemoryArray) and box == tile.box else scratch.take
        scratch.lent = None
        capture = capture_tile(member, Tile(tile.index, box), into)
        lent, scratch.lent = scratch.lent, None
        chunks = t.chunks if t.chunks is not None else default_chunks(t.output_shape)
        if t.node in last_read:
            held[t.node] = HeldArray(t.output_shape, tuple(chunks), box, capture.output,
                                     resolve_compressor(output.compressor if output is not None else
                                                        output_compressor(inputs), capture.output.dtype))
            if lent is not None:
                owned[t.node] = lent
        if box != tile.box:  # its own tile of what it computed
            capture = replace(capture, tile=tile, output=capture.output[box_slices(tile.box, box)])
        metas.append(_finish_tile(member, capture, started))
        for name in dropped:
            held.pop(name, None)
        in_use = [h.block for h in held.values()]
        for buffer in [owned.pop(name) for name in dropped if name in owned] + \
                ([lent] if lent is not None and t.node not in last_read else []):
            if not any(np.may_share_memory(buffer, b) for b in in_use):  # (an output that is a view of it)
                scratch.give(buffer)
        del capture, member, inputs
    summary = None
    if fused.prepare is not None:
        first: tuple[Any, ...] = tuple(held[r.node] if isinstance(r, Held) else r for r in fused.prepare.inputs)
        summary = prepare_tile(replace(fused.prepare, inputs=first), tile)
    return FusedTile(metas, summary)


class _Scratch:
    """A fused task's buffers for the values of members that `Operator.fills_out`: `take` lends
    the smallest free one that fits (else a new one), `give` takes one back once nothing held
    reads it; ``lent``: the last buffer lent."""

    def __init__(self) -> None:
        self.free: list[np.ndarray] = []  # flat bytes
        self.lent: np.ndarray | None = None

    def take(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """A writable array of ``shape`` and ``dtype`` in a free buffer (or a new one)."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        fits = [b for b in self.free if b.nbytes >= nbytes]
        if fits:
            buffer = min(fits, key=lambda b: b.nbytes)
            self.free = [b for b in self.free if b is not buffer]
        else:
            buffer = np.empty(max(nbytes, 1), np.uint8)
        self.lent = buffer
        return buffer[:nbytes].view(dtype).reshape(shape)

    def give(self, buffer: np.ndarray) -> None:
        """``buffer`` is free again."""
        self.free.append(buffer)


#: recomputed tiles of every unstored array this process reads, by (array key, tile)
RECOMPUTED_TILES = BlockCache(0)
#: regions of unstored arrays computed on their own (`RecomputedArray.region`), by (array key, box):
#: the readers of one array (a sum and a product of it) ask the same region, computed once
RECOMPUTED_REGIONS = BlockCache(0)


class RecomputedArray:
    """A node's output that the run did not store, read as its stored array would be: the tiles
    a read covers are re-run from the node's inputs (stored arrays, or recomputed the same way
    from theirs) with no lineage, and the last ones kept in memory (`RECOMPUTED_TILES`, shared
    by every recomputed array of the process, within ``cache_bytes``).

    Parameters
    ----------
    task : NodeTask
        The node's task at query time (its bound operator and its inputs' arrays).
    tiles : sequence of Tile
        The node's tiles as the run computed them.
    chunks : tuple of int
        Its chunk shape (the catalog's).
    dtype : str
        Its dtype (the catalog's).
    cache_bytes : int
        How many bytes of computed tiles the process keeps, of every recomputed array together
        (least recently used go first).
    """

    def __init__(self, task: NodeTask, tiles: Sequence[Tile], chunks: tuple[int, ...], dtype: str,
                 cache_bytes: int = 256 << 20):
        self.task, self.tiles, self.chunks = task, list(tiles), tuple(chunks)
        self.shape = tuple(task.output_shape or ())
        self.dtype = np.dtype(dtype)
        self.cache_bytes = cache_bytes
        self._key = uuid.uuid4().hex  # its tiles' key in the process's cache (`RECOMPUTED_TILES`)
        self._lo = np.array([[lo for lo, _ in t.box] for t in self.tiles], np.int64).reshape(len(self.tiles), -1)
        self._hi = np.array([[hi for _, hi in t.box] for t in self.tiles], np.int64).reshape(len(self.tiles), -1)
        self._regional = regional(task.operator)  # a read may compute a part of a tile on its own
        self._regions: list[Box] = []  # the boxes of its regions put in `RECOMPUTED_REGIONS`, newest last

    @property
    def url(self) -> str:
        """Where it comes from (for messages)."""
        return f"recomputed:{self.task.node}"

    def layout(self) -> tuple[tuple[int, ...], tuple[int, ...], np.dtype, str | None]:
        """(shape, chunks, dtype, pipeline): no pipeline, nothing is stored."""
        return self.shape, self.chunks, self.dtype, "none"

    def open(self) -> NoReturn:
        """There is no Zarr array to open."""
        raise StoreError(f"node {self.task.node!r} was not stored (its array is recomputed when read): index it or "
                         "np.asarray it; run with keep='all' to store every array")

    def forget(self) -> None:
        """Drop its computed tiles and regions."""
        RECOMPUTED_TILES.clear(self._key)
        RECOMPUTED_REGIONS.clear(self._key)

    def tile(self, index: int) -> np.ndarray:
        """The values of tile ``index`` (computed once, then cached while there is room)."""
        got = RECOMPUTED_TILES.get((self._key, index))
        if got is not None:
            return got
        block = _call(self.task, self.tiles[index], frozenset())[1]
        block.setflags(write=False)
        RECOMPUTED_TILES.put((self._key, index), block, self.cache_bytes)
        return block

    def region(self, box: Box) -> np.ndarray:
        """The cells of ``box`` computed on their own: the operator run over ``box`` (reading its
        tiling's input boxes of ``box``, its inputs' regions in turn), not over the tiles that hold
        it.  Only for an operator that computes any box as its tiles do (`regional`).  Kept, read-only,
        in `RECOMPUTED_REGIONS` (within ``cache_bytes``): every reader of the array asks the same
        regions of it (each unstored node over the box its readers' halos grow), and a region inside
        a kept one (of the `MAX_KEPT_REGIONS` newest) is cut from it."""
        box = tuple((int(lo), int(hi)) for lo, hi in box)
        got = RECOMPUTED_REGIONS.get((self._key, box))
        if got is not None:
            return got
        for kept in reversed(self._regions):  # a region holding this one (a read over several tiles' boxes)
            if all(a <= lo and hi <= b for (lo, hi), (a, b) in zip(box, kept)):
                whole = RECOMPUTED_REGIONS.get((self._key, kept))
                if whole is not None:
                    return whole[box_slices(box, kept)]
        got = _call(self.task, Tile(-1, box), frozenset())[1]
        got.setflags(write=False)
        RECOMPUTED_REGIONS.put((self._key, box), got, self.cache_bytes)
        self._regions = self._regions[-(MAX_KEPT_REGIONS - 1):] + [box]
        return got

    def read(self, box: Box | None = None) -> np.ndarray:
        """The cells of ``box`` (the whole array when None), from the tiles that hold them.

        A tile's part is copied from the tile, computed whole (and cached), unless the operator is
        `regional`, the tile is not cached and the part is at most `REGION_SHARE` of it: then only
        the part is computed (its parts in several tiles together, when their hull is not much
        larger), through the unstored inputs' own regions down to the stored chunks under it."""
        box = tuple((0, n) for n in self.shape) if box is None else tuple(box)
        if len(box) != len(self.shape) or any(lo < 0 or hi > n for (lo, hi), n in zip(box, self.shape)):
            raise StoreError(f"box {box} is outside node {self.task.node!r} of shape {self.shape}")
        out = np.empty(tuple(hi - lo for lo, hi in box), dtype=self.dtype)
        if not out.size:
            return out
        lo = np.array([a for a, _ in box], np.int64)
        hi = np.array([b for _, b in box], np.int64)
        touched = np.flatnonzero(np.all((self._lo < hi) & (self._hi > lo), axis=1)) if self.shape else [0]
        parts: list[Box] = []  # uncached parts computed on their own
        for index in touched:
            t = self.tiles[int(index)]
            part = tuple((max(a, c), min(b, d)) for (a, b), (c, d) in zip(box, t.box))
            if self._regional and RECOMPUTED_TILES.get((self._key, int(index))) is None and \
                    _cells(part) <= REGION_SHARE * _cells(t.box):
                parts.append(part)
                continue
            block = self.tile(int(index))
            out[box_slices(part, box)] = block[box_slices(part, t.box)]
        if parts:
            hull = parts[0]
            for part in parts[1:]:
                hull = _hull(hull, part)
            for part in [hull] if _cells(hull) <= 2 * sum(_cells(p) for p in parts) else parts:
                out[box_slices(part, box)] = self.region(part)
        return out


#: the regions of one recomputed array searched for one holding a region asked (the newest)
MAX_KEPT_REGIONS = 64

#: the largest share of a tile's cells that a read of an uncached tile of a `regional` operator
#: computes on its own (more: the whole tile is computed and cached, as a later read may want the rest)
REGION_SHARE = 0.5


def regional(op: Operator) -> bool:
    """Whether computing any box of ``op``'s output (from its tiling's input boxes of that box)
    gives the cells its tiles give: a one-pass operator of known shape whose tiles read their own
    box (`Elementwise`) or their box and a halo (`Halo`), as a fused stage computes its members
    over their readers' grown boxes.  Not one that needs its tiles whole: a two-pass operator
    (`Label`), a reduction, a user function over blocks, an operator run on whole arrays."""
    if op.output_shape is None or op.two_pass:
        return False
    try:
        return type(op.effective_tiling()) in (Elementwise, Halo)
    except Exception:  # noqa: BLE001 - a tiling that cannot be asked: the whole tiles, as before
        return False


def _cells(box: Box) -> int:
    """The number of cells of ``box``."""
    n = 1
    for lo, hi in box:
        n *= max(hi - lo, 0)
    return n


def _hull(box: Box | None, other: Box) -> Box:
    """The smallest box holding ``box`` (None: nothing) and ``other``."""
    if box is None:
        return tuple(other)
    return tuple((min(a, c), max(b, d)) for (a, b), (c, d) in zip(box, other))


def _finish_tile(task: NodeTask, capture: TileCapture, lineage_start: float) -> TileMeta:
    """Write a computed tile's output chunk (when ``task.output`` is set) and, per stored
    strategy, its lineage shard; its metadata (times counted from ``lineage_start``)."""
    op = capture.operator
    shape = capture.shapes[0]
    chunks = task.chunks if task.chunks is not None else default_chunks(shape)
    meta = TileMeta(capture.tile, shape, str(capture.output.dtype), tuple(chunks), op_seconds=capture.op_seconds)
    if task.digest:
        from subzero.fingerprint import block_digest

        meta.digest = block_digest(capture.output)
    write_start = time.perf_counter()
    if isinstance(task.output, MemoryArray) and op.reads_only and capture.output.shape == tuple(shape) and \
            all(lo == 0 and hi == n for (lo, hi), n in zip(capture.tile.box, shape)):
        # the whole array from numpy's own function: kept as computed (its cells never change), not copied
        meta.array_bytes = task.output.write_whole(capture.output, tuple(meta.chunks))
        meta.pipeline = resolve_compressor(task.output.compressor, capture.output.dtype)
    elif task.output is not None:
        meta.array_bytes = task.output.write_block(capture.tile.box, capture.output, shape, meta.chunks)
        meta.pipeline = resolve_compressor(task.output.compressor, capture.output.dtype)
    write_seconds = time.perf_counter() - write_start
    dirs = dict(task.shard_dirs)
    attempt = uuid.uuid4().hex[:12]
    for strategy in task.stored:
        name = strategy.name
        t0 = time.perf_counter()
        pairs = capture.pairs_for(strategy)
        if strategy.mode is not Mode.FULL:
            pairs = with_envelopes(op, pairs)
        encoded = encoder_for(strategy).encode(pairs, capture.tile.index, capture.shapes)
        if encoded.inline is not None:
            meta.inline[name] = encoded.inline
        batch = merge_tiles([encoded])
        encode_seconds = time.perf_counter() - t0
        n_in = sum(len(a) for a in pairs.in_ids) if strategy.mode is Mode.FULL else 0
        counts = dict(keys=len(batch.keys), nbytes=batch.nbytes, pairs=pairs.n_pairs,
                      out_cells=int(pairs.out_ptr[-1]),  # a covered tile's cells are not made to be counted
                      in_cells=n_in, encode_seconds=encode_seconds)
        if not batch.keys:
            meta.shards[name] = ShardRecord(capture.tile.index, None, **counts)
            continue
        if task.pending_key and _hold(task.pending_key, batch.nbytes):  # written with the node's other tiles
            meta.pending[name] = batch
            meta.shards[name] = ShardRecord(capture.tile.index, None, **counts)
            continue
        t0 = time.perf_counter()
        stem = f"t{capture.tile.index:06d}-{attempt}"
        files, index_bytes = ShardSink(task.location, dirs[name]).write(stem, batch)
        write_seconds += time.perf_counter() - t0
        meta.shards[name] = ShardRecord(capture.tile.index, stem, files, index_bytes=index_bytes, **counts)
    meta.write_seconds = write_seconds
    meta.lineage_seconds = time.perf_counter() - lineage_start - capture.op_seconds - write_seconds
    return meta


#: the most bytes of encoded lineage this process holds unwritten for shared shards (`write_pending`);
#: a tile whose lineage would pass it writes its own shard at once, as a Spark task does
PENDING_BYTES = 256 << 20
#: about the most bytes (entries and R-tree boxes) of one shared shard: a node's tiles are written as runs
#: of consecutive tiles this large, so a query opening (or fetching, from an object store) the shard of a
#: tile it touches reads at most about this much more than that tile's own
SHARED_SHARD_BYTES = 16 << 20
_pending: dict[str, int] = {}  # bytes held, per stage run (`NodeTask.pending_key`)
_pending_lock = threading.Lock()


def _hold(key: str, nbytes: int) -> bool:
    """Whether ``nbytes`` more of lineage may be held unwritten (then they are counted under ``key``)."""
    with _pending_lock:
        if sum(_pending.values()) + nbytes > PENDING_BYTES:
            return False
        _pending[key] = _pending.get(key, 0) + nbytes
        return True


def release_pending(task: NodeTask) -> None:
    """Forget the lineage ``task``'s tiles held unwritten (written, or their stage failed)."""
    if task.pending_key:
        with _pending_lock:
            _pending.pop(task.pending_key, None)


def write_pending(task: NodeTask, metas: list[TileMeta], threads: int = 1) -> None:
    """Write the lineage ``metas``' tiles kept unwritten (``task.pending_key``) as shared shards,
    per strategy one for each run of consecutive tiles up to `SHARED_SHARD_BYTES`
    (`subzero.store.shards.write_tiles_shard`: one LMDB file, and one R-tree per slot, for the
    run's tiles, in place of one per tile), and name it in their records: each tile's record
    then reads only its own entries.  The write's time is shared out over the
    tiles' ``write_seconds``, the files' bytes over their records (``file_share``), by entry bytes.
    ``threads``: how many shards are written at once (the executor's threads, idle by now: LMDB
    and the R-tree bulk load release the GIL)."""
    try:
        _write_pending(task, metas, threads)
    finally:  # written, or the write failed: no longer held either way
        for m in metas:
            m.pending.clear()
        release_pending(task)


def _groups(metas: list[TileMeta], name: str) -> list[list[TileMeta]]:
    """``metas`` holding lineage of strategy ``name`` unwritten, in tile order, cut into runs of about
    `SHARED_SHARD_BYTES` of entries and R-tree boxes each (one shared shard per run)."""
    held = sorted((m for m in metas if name in m.pending), key=lambda m: m.tile.index)
    groups: list[list[TileMeta]] = []
    size = 0
    for m in held:
        batch = m.pending[name]
        nbytes = batch.nbytes + batch.index_bytes_bound
        if not groups or (size and size + nbytes > SHARED_SHARD_BYTES):
            groups.append([])
            size = 0
        groups[-1].append(m)
        size += nbytes
    return groups


def _write_pending(task: NodeTask, metas: list[TileMeta], threads: int = 1) -> None:
    dirs = dict(task.shard_dirs)
    jobs = [(dirs[strategy.name], strategy.name, held) for strategy in task.stored
            for held in _groups(metas, strategy.name)]
    if threads > 1 and len(jobs) > 1:
        with ThreadPoolExecutor(min(threads, len(jobs)), thread_name_prefix="subzero-shards") as pool:
            written = list(pool.map(lambda job: _write_group(task.location, *job), jobs))
    else:
        written = [_write_group(task.location, *job) for job in jobs]
    for (_, name, held), done in zip(jobs, written):  # named here, in one thread: a tile is in a group per strategy
        _name_group(name, held, *done)


def _write_group(location: Location | None, directory: str, name: str,
                 held: list[TileMeta]) -> tuple[str, tuple[FileRecord, ...], int, float]:
    """Write ``held``'s lineage of strategy ``name`` as one shared shard: its stem, files, R-tree
    bytes and seconds (`_name_group` names it in their records)."""
    t0 = time.perf_counter()
    stem = f"t{held[0].tile.index:06d}-{uuid.uuid4().hex[:12]}"  # named as its first tile's would be
    files, index_bytes = write_tiles_shard(location, directory, stem, [(m.tile.index, m.pending[name])
                                                                       for m in held])
    return stem, files, index_bytes, time.perf_counter() - t0


def _name_group(name: str, held: list[TileMeta], stem: str, files: tuple[FileRecord, ...], index_bytes: int,
                seconds: float) -> None:
    """Name the shared shard ``stem`` of strategy ``name`` in ``held``'s records, its bytes and
    seconds shared out by their entry bytes."""
    weights = np.array([m.pending[name].nbytes + 1 for m in held], np.float64)
    total = sum(f.size for f in files)
    cut = weights.cumsum() / weights.sum()
    file_shares = np.diff(np.r_[0, np.floor(cut * total).astype(np.int64)])
    file_shares[-1] += total - int(file_shares.sum())
    index_shares = np.diff(np.r_[0, np.floor(cut * index_bytes).astype(np.int64)])
    index_shares[-1] += index_bytes - int(index_shares.sum())
    for m, share, index_share in zip(held, file_shares.tolist(), index_shares.tolist()):
        m.shards[name] = replace(m.shards[name], name=stem, files=files, index_bytes=index_share,
                                 file_share=share)
        m.write_seconds += seconds / len(held)


def merge_inline(strategy: Strategy, tables: "list[bytes | None]", shapes: tuple[Any, Any]) -> bytes | None:
    """The node-level merge of its tiles' inline tables under ``strategy`` (a FullRange
    table small enough for the manifest), or None: the encoding merges nothing, a tile
    sent no table (None), or the merge is too large to keep inline."""
    merge = getattr(encoder_for(strategy), "merge_inline", None)
    if merge is None or any(t is None for t in tables):
        return None
    return merge(tables, shapes)


def trace_tile(task: NodeTask, tile: Tile, frontier: Any = None, i: int = 0,
               direction: "Direction | str" = Direction.BACKWARD, reruns: "MutableMapping | None" = None) -> FullPairs:
    """Re-run one tile in tracing mode and return its lineage as full region pairs.

    Without ``frontier``, the lineage of every cell of the tile: the operator produces
    the richest lineage it supports (FULL, else mapping, else payloads expanded by
    ``map_p``).  With the frontier of a query step (a `subzero.frontier.Frontier` over the
    output for ``direction="backward"``, over input ``i`` for ``"forward"``), only the
    lineage that step can use: mapping functions and a composite's default are asked
    about the frontier's cells alone (backward: its cells in the tile; forward: the tile's
    cells they map to), and payloads are expanded only for those cells (backward) or for
    the pairs whose envelope meets the frontier (forward), so a step costs its frontier,
    not the tile.  Every mode gives the same lineage, so the cheapest is used.  An
    all-to-all operator's lineage needs no re-run.  ``reruns``: a mapping the caller keeps
    (e.g. one per query engine and node) of what re-running a tile produced (its full or
    payload pairs, by tile index and mode): a tile is re-run once for all the steps and
    queries that need it.
    """
    direction = Direction.parse(direction)
    op = task.operator
    supported = op.supported_modes()
    if op.all_to_all:  # every output cell of the tile reads every input cell: no re-run needed
        return all_to_all_pairs(op, tile.box)
    if frontier is None or not (supported & {Mode.MAP, Mode.COMP, Mode.PAY}):
        if Mode.FULL in supported:
            return _rerun(task, tile, Mode.FULL, reruns)[0]
        if Mode.MAP in supported:
            _call(task, tile, frozenset())
            return derived_full(op, tile.box)
    mode = Mode.MAP if Mode.MAP in supported else (
        Mode.PAY if Mode.PAY in supported and Mode.COMP not in supported else Mode.COMP)
    # the cells whose mapping lineage (MAP, or COMP's default) the step needs
    wanted = None if frontier is None or mode is Mode.PAY else _wanted(op, tile.box, frontier, i, direction)
    if mode is Mode.MAP:
        _call(task, tile, frozenset())
        return derived_full(op, tile.box, wanted)
    pay, tile = _rerun(task, tile, mode, reruns)
    overridden = pay.out_ids  # every cell with a payload: its default lineage does not hold
    if frontier is not None:
        pay = _payloads_for(op, pay, frontier, i, direction)
    expanded = expand_payloads(op, pay)
    if mode is Mode.PAY:
        return expanded
    default = derived_full(op, tile.box, wanted)
    kept = ~np.isin(default.out_ids, overridden, kind="table") if len(default.out_ids) else np.ones(0, bool)
    return FullPairs.concat([default.select(kept), expanded], len(op.input_shapes))


def rerun_payloads(task: NodeTask, tile: Tile, frontier: Any,
                   reruns: "MutableMapping | None" = None) -> tuple[Mode, PayloadPairs] | None:
    """The payload pairs `trace_tile` reads for a backward step from ``frontier`` (over the
    output): re-running ``tile`` in ``COMP`` mode (``PAY`` when the operator has no ``COMP``),
    from ``reruns`` when it ran before, kept to the pairs' cells in the frontier; with that mode.
    None when `trace_tile` takes no payloads for the operator (mapping functions, all-to-all, or
    ``FULL`` alone).  A step then unites the payloads' ``map_p`` and, in ``COMP`` mode, the mapping
    default of the frontier's other cells, as a stored CompOne step does, with no pair per cell."""
    op = task.operator
    supported = op.supported_modes()
    if op.all_to_all or Mode.MAP in supported or not supported & {Mode.COMP, Mode.PAY}:
        return None
    mode = Mode.PAY if Mode.PAY in supported and Mode.COMP not in supported else Mode.COMP
    pay, _ = _rerun(task, tile, mode, reruns)
    return mode, _payloads_for(op, pay, frontier, 0, Direction.BACKWARD)


def _rerun(task: NodeTask, tile: Tile, mode: Mode, reruns: "MutableMapping | None") -> tuple[Any, Tile]:
    """The full (``Mode.FULL``) or payload pairs of re-running ``tile`` with ``mode``, and the
    tile as it ran (a whole-array operator's, bound to its output): from ``reruns`` when the
    tile was re-run before, else re-run and kept there."""
    key = (tile.index if tile.index >= 0 else tile.box, mode)  # a region (index -1) by its box
    got = None if reruns is None else reruns.get(key)
    if got is None:
        ctx, _, result_box, ran, _ = _call(task, tile, frozenset({mode}))
        got = (ctx.full_pairs(result_box) if mode is Mode.FULL else ctx.payload_pairs(result_box), ran)
        if reruns is not None:
            reruns[key] = got
    return got


def _wanted(op: Operator, box: Box, frontier, i: int, direction: Direction) -> np.ndarray:
    """The out cells of the tile ``box`` whose mapping lineage a step from ``frontier`` needs."""
    lo = np.array([a for a, _ in box], np.int64)
    hi = np.array([b for _, b in box], np.int64)
    if direction is Direction.BACKWARD:
        return frontier.within(lo, hi).coords()
    reach = op.lineage_box(box, i)
    cells = frontier.within([a for a, _ in reach], [b for _, b in reach]).coords()
    if not len(cells):
        return np.zeros((0, len(box)), np.int64)
    out = np.asarray(op.map_f(cells, i), np.int64).reshape(-1, len(box))
    out = out[np.all((out >= lo) & (out < hi), axis=1)]
    return np.unique(out, axis=0) if len(out) else out  # one pair per out cell


def _payloads_for(op: Operator, pay: PayloadPairs, frontier, i: int, direction: Direction) -> PayloadPairs:
    """The payload pairs a step from ``frontier`` needs: backward, the pairs' cells in the
    frontier; forward, the pairs whose input envelope meets it."""
    if direction is Direction.BACKWARD:
        if frontier.kind != "mask" and frontier.estimate() * 16 < len(pay.out_ids):  # a few cells: searched
            return pay.with_out_cells(frontier.ids())
        wanted = frontier.contains(pay.out_ids)
        counts = np.bincount(owners(pay.out_ptr)[wanted], minlength=pay.n_pairs)
        kept = PayloadPairs(pay.out_ids[wanted], ptr_from_counts(counts), pay.payloads)
        return kept.select(counts > 0)
    lo, hi = with_envelopes(op, pay).envelopes[i]
    box = frontier.bbox()
    if box is None:
        return pay.select(np.zeros(pay.n_pairs, bool))
    near = np.all((lo < box[1]) & (hi > box[0]), axis=1) if lo.shape[1] else np.ones(pay.n_pairs, bool)
    near &= np.all(hi > lo, axis=1) if lo.shape[1] else True
    return pay.select(near)


def with_envelopes(op: Operator, pay: PayloadPairs) -> PayloadPairs:
    """``pay`` with the input envelope of every pair (see `PayloadPairs`): from the operator's
    own ``map_p_envelope`` when it overrides it, else one ``map_p_pairs`` call per distinct
    payload (not per pair, as `Operator.map_p_envelope` would), reduced per pair with numpy."""
    if pay.envelopes is not None:
        return pay
    n = pay.n_pairs
    envelopes = []
    for i, shape in enumerate(op.input_shapes):
        ndim = len(shape)
        if n == 0:
            envelopes.append((np.zeros((0, ndim), np.int64), np.zeros((0, ndim), np.int64)))
            continue
        if type(op).map_p_envelope is not Operator.map_p_envelope:  # the operator's own, vectorized
            lo, hi = op.map_p_envelope(pay.payloads, i, _PairCells(pay, op.output_shape))
            envelopes.append((np.asarray(lo, np.int64).reshape(n, ndim), np.asarray(hi, np.int64).reshape(n, ndim)))
            continue
        lo = np.full((n, ndim), np.iinfo(np.int64).max, np.int64)
        hi = np.full((n, ndim), np.iinfo(np.int64).min, np.int64)
        distinct, code = pay.groups()
        pair_of_cell = owners(pay.out_ptr)
        cell_code = code[pair_of_cell]
        order = np.argsort(cell_code, kind="stable")
        bounds = np.searchsorted(cell_code[order], np.arange(len(distinct) + 1))
        for k, payload in enumerate(distinct):
            rows = order[bounds[k]:bounds[k + 1]]
            if not len(rows):
                continue
            owner, got = op.map_p_pairs(to_coords(pay.out_ids[rows], op.output_shape), payload, i)
            got = np.asarray(got, np.int64).reshape(-1, ndim)
            if not len(got) or not ndim:
                continue
            pair = pair_of_cell[rows][np.asarray(owner, np.int64)]
            if np.all(pair[1:] >= pair[:-1]):  # owners in order (as map_p_pairs gives them): segment reductions
                starts = np.flatnonzero(np.r_[True, pair[1:] != pair[:-1]])
                lo[pair[starts]] = np.minimum(lo[pair[starts]], np.minimum.reduceat(got, starts, axis=0))
                hi[pair[starts]] = np.maximum(hi[pair[starts]], np.maximum.reduceat(got, starts, axis=0) + 1)
            else:
                np.minimum.at(lo, pair, got)
                np.maximum.at(hi, pair, got + 1)
        empty = hi[:, 0] < lo[:, 0] if ndim else np.zeros(n, bool)
        lo[empty], hi[empty] = 0, 0
        envelopes.append((lo, hi))
    return PayloadPairs(pay.out_ids, pay.out_ptr, pay.payloads, tuple(envelopes))


class _PairCells(Sequence):
    """The out cells of each pair of ``pay``, as `Operator.map_p_envelope` takes them, converted
    to coordinates only for the pairs it looks at (Label's and DetectStars' need the cells of
    their empty payloads only: one conversion per pair would cost a Python call per component)."""

    def __init__(self, pay: PayloadPairs, shape):
        self._ids, self._ptr, self._shape = pay.out_ids, pay.out_ptr, shape

    def __len__(self) -> int:
        return len(self._ptr) - 1

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[j] for j in range(*k.indices(len(self)))]
        k = int(k)
        if k < 0:
            k += len(self)
        if not 0 <= k < len(self):
            raise IndexError(k)
        return to_coords(self._ids[self._ptr[k]:self._ptr[k + 1]], self._shape)


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

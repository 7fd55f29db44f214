"""One node's execution, the same for a run, a resumed run, a replay and calibration.

A `NodeStage` is an immutable record of a node ready to run: its operator bound to its
shapes (`Operator.bound`), tiles, chunks, inputs and store.  It makes the node's task, runs
it on an `Executor`, agrees the output's shape and dtype from the `TileMeta`s (a shape only
running told gives a new stage), commits the array and operator, and builds the manifest
(merging inline tables) and lineage statistics.  Callers (`execution`, `replay`,
calibration) decide only which tiles run and what the node's record says.
"""

from __future__ import annotations

import copy
import functools
import math
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np

from subzero.catalog import ArrayRecord, Manifest, ShardRecord
from subzero.errors import StoreError, SubZeroError, WorkflowError
from subzero.executors import Executor
from subzero.executors.tasks import map_fused, map_prepare, map_tiles
from subzero.modes import Strategy
from subzero.operator import Operator
from subzero.pickling import dump_operator
from subzero.progress import Reporter
from subzero.worker import FusedTask, Held, NodeTask, TileMeta, merge_inline, release_pending, write_pending
from subzero.store import RunWriter
from subzero.store.arrays import ArrayRef, output_compressor
from subzero.tiling import Elementwise, Halo, Tile, Whole, default_chunks, tile_grid, tile_lens

__all__ = ["NodeStage", "FusedStage", "StageRun", "DISCARD", "array_record", "dtype_name", "lineage_metrics",
           "bands", "BAND_CELLS"]

Shape = tuple[int, ...]
_UNKNOWN_BOX: Any = None  # the box of the one tile of an output whose shape only running tells
#: at most this many cells per task of a stage held in memory (`bands`), and at least one task per thread
BAND_CELLS = 1 << 22


@dataclass(frozen=True)
class NodeStage:
    """One node ready to execute (build it with `NodeStage.bind`).

    ``tile_shape`` is the run's requested tile shape (an int, a tuple or None); ``digest``
    asks each tile for the digest of its values (an input's fingerprint).
    """

    name: str
    operator: Operator
    input_shapes: tuple[Shape, ...]
    output_shape: Shape | None
    tiles: tuple[Tile, ...]
    chunks: Shape | None
    inputs: tuple[ArrayRef, ...]
    store: RunWriter
    tile_shape: Any = None
    digest: bool = False
    #: where the output goes when the run does not store it: a `subzero.store.arrays.MemoryArray`
    #: (held in this process for later nodes), or `DISCARD` (a fused member only its own stage reads)
    destination: Any = None

    @classmethod
    def bind(cls, name: str, operator: Operator, input_shapes: Sequence[Sequence[int]],
             inputs: Sequence[ArrayRef], store: RunWriter, tile_shape: Any = None,
             output_shape: Shape | None = None, destination: Any = None) -> "NodeStage":
        """The stage of node ``name``: a copy of ``operator`` bound to ``input_shapes`` and its
        inferred output shape (else ``output_shape``, a computed node's), and its tiles.

        Raises
        ------
        WorkflowError
            The operator refuses its input shapes, or declares a tiling but infers no shape.
        """
        shapes = tuple(tuple(int(n) for n in s) for s in input_shapes)
        try:
            inferred = operator.infer_output_shape(shapes)
        except WorkflowError as exc:
            raise WorkflowError(f"node {name!r} ({type(operator).__name__}): {exc}") from exc
        if inferred is None and not isinstance(operator.effective_tiling(), Whole):
            raise WorkflowError(f"node {name!r}: {type(operator).__name__} declares a tiling, so it must "
                                "implement infer_output_shape(input_shapes)")
        shape = inferred if inferred is not None else output_shape
        return cls._of(name, operator.bound(shapes, shape), tuple(inputs), store, tile_shape, destination)

    @classmethod
    def _of(cls, name: str, op: Operator, inputs: tuple[ArrayRef, ...], store: RunWriter,
            tile_shape: Any, destination: Any = None) -> "NodeStage":
        """The stage of a bound operator: its tiles (one of unknown box while only running tells
        the shape) and chunks (its tiles', or the default chunks of a whole-array operator)."""
        shape = op.output_shape
        if shape is None:
            return cls(name, op, op.input_shapes, None, (Tile(0, _UNKNOWN_BOX),), None, inputs, store, tile_shape,
                       destination=destination)
        tiles, chunks = _grid(shape, op.effective_tiling().split_axes(op), tile_shape)
        return cls(name, op, op.input_shapes, shape, tiles, chunks, inputs, store, tile_shape, destination=destination)

    @property
    def stores_output(self) -> bool:
        """Whether the output is written to the store (else held in memory, or discarded)."""
        return self.destination is None

    @property
    def in_memory(self) -> bool:
        """Whether its tiles may run as fewer, larger boxes (`bands`): its output is held in memory
        or discarded (no chunk written by a tile), its shape known, and its tiling computes any box
        from its input boxes (`Elementwise`, `Halo`), in one pass, with no digest asked."""
        op = self.operator
        return (self.destination is not None and self.output_shape is not None and not op.two_pass
                and not self.digest and type(op.effective_tiling()) in (Elementwise, Halo))

    @property
    def record_tile_shape(self) -> Shape:
        """The cells per tile along each axis, as the node's catalog record keeps them."""
        op = self.operator
        return _lens(tuple(op.output_shape or ()), op.effective_tiling().split_axes(op), self.tile_shape)

    def task(self, strategies: Sequence[Strategy] = (), write_output: bool = False) -> NodeTask:
        """The node's task: its tiles encode the stored ``strategies``, and write the output
        array when ``write_output``."""
        stored = tuple(s for s in strategies if s.stored)
        return NodeTask(self.name, self.operator, self.inputs, self.input_shapes, self.output_shape, stored,
                        output=self.output_ref() if write_output else None, chunks=self.chunks,
                        location=self.store.location,
                        shard_dirs=tuple((s.name, self.store.shard_directory(self.name, s.name)) for s in stored),
                        digest=self.digest)

    def output_ref(self) -> Any:
        """The handle the tiles write and the driver commits the output through (the
        `destination` when the output is not stored: None when it is discarded).  Its compressor
        is the committed array's (a replay re-running some of its tiles), else the one the
        inputs suggest (`subzero.store.arrays.output_compressor`): chunks and metadata agree.
        A fused member's task makes that choice (an input is `Held`: not stored yet)."""
        if self.destination is not None:
            return None if self.destination is DISCARD else self.destination
        ref = self.store.array(self.name)
        try:
            pipeline = ref.layout()[3]
        except StoreError:  # not committed yet: the usual case
            pipeline = None
        if pipeline is None and any(isinstance(i, Held) for i in self.inputs):
            return ref  # a fused member: its task chooses over the outputs it holds (`worker.run_fused_tile`)
        return replace(ref, compressor=pipeline or output_compressor(self.inputs, ref.compressor))

    def run(self, executor: Executor, strategies: Sequence[Strategy] = (), write_output: bool = True,
            tiles: Sequence[Tile] | None = None, progress: Reporter | None = None,
            prepared: list[Any] | None = None, done: Sequence[TileMeta] = ()) -> "StageRun":
        """Run the node's tiles (all, or ``tiles``) on ``executor``; a pass that writes the
        output first combines a two-pass operator's `Operator.prepare` summaries (a capture
        re-runs an operator that already did; ``prepared``: every tile's summary, made by the
        `FusedStage` before it).  ``done``: tiles computed already, in this process, by the
        same task over ``strategies`` (a one-pass node's first tiles, run by its calibration:
        `subzero.optimizer.calibrate.profile_first`): not run again, their lineage held
        unwritten is written with the others' and their metadata returned with theirs.
        Returns the tiles' metadata, the wall time and the agreed dtype and chunks, with the
        stage bound to the agreed shape."""
        progress = progress if progress is not None else Reporter()
        tiles = list(self.tiles if tiles is None else tiles)
        if done:
            ran = {m.tile.index for m in done}
            tiles = [t for t in tiles if t.index not in ran]
        start = time.perf_counter()
        op = self.operator
        if write_output and op.two_pass:  # the first pass: every tile's summary, combined here
            self.first_pass(executor, prepared)
        banded = not done and tiles == list(self.tiles) and write_output and \
            not any(s.stored for s in strategies) and self.in_memory
        if banded:
            tiles = bands(tiles, self.output_shape or (), executor)
        progress.node_started(self.name, len(tiles))
        task = self.task(strategies, write_output)
        # in this process: the tiles' lineage is written after them, one shard per strategy for the node
        # (a file per tile slows the threads computing the others down); a Spark task writes its own
        if task.stored and getattr(executor, "master", None) is None:
            task = replace(task, pending_key=uuid.uuid4().hex)
        try:
            metas = map_tiles(executor, task, tiles, progress) if tiles else []
            if done:
                metas = sorted(metas + list(done), key=lambda m: m.tile.index)
            if task.pending_key or any(m.pending for m in done):
                write_pending(task, metas, getattr(executor, "threads", 1))
        except BaseException:
            release_pending(task)
            progress.node_finished(self.name, ok=False)
            raise
        progress.node_finished(self.name)
        if banded:
            for meta, count in zip(metas, _covered(metas, self.tiles)):
                meta.covers = count
        wall = time.perf_counter() - start
        shape, dtype, chunks = self._agreed(metas)
        stage = self if shape == self.output_shape else \
            self._of(self.name, self.operator.bound(self.input_shapes, shape), self.inputs, self.store,
                     self.tile_shape, self.destination)
        return StageRun(stage, metas, wall, shape, dtype, chunks)

    def first_pass(self, executor: Executor, prepared: list[Any] | None = None,
                   output: np.ndarray | None = None) -> None:
        """A two-pass operator's first pass: every tile's `Operator.prepare` summary (``prepared``:
        made by the `FusedStage` before it), combined into the bound operator's run state.
        ``output``: the node's whole output, known already (a traced run's values): an operator
        that makes its run state from it (``combine_output(output, boxes) -> bool``, as
        `subzero.operators.label.Label` does) runs no pass over its tiles."""
        op = self.operator
        from_output = getattr(op, "combine_output", None)
        try:
            if prepared is None and output is not None and from_output is not None and \
                    all(t.box is not None for t in self.tiles) and from_output(output, [t.box for t in self.tiles]):
                return
            op.combine(prepared if prepared is not None else map_prepare(executor, self.task(), list(self.tiles)))
        except SubZeroError:
            raise
        except Exception as exc:
            raise WorkflowError(f"node {self.name!r} ({type(op).__name__}) failed to combine its tiles' "
                                f"summaries: {type(exc).__name__}: {exc}") from exc

    def _agreed(self, metas: list[TileMeta]) -> tuple[Shape, str, Shape]:
        """The output shape, dtype and chunks every tile reported (they must agree)."""
        first = metas[0]
        for m in metas[1:]:
            if m.dtype != first.dtype:
                raise WorkflowError(f"node {self.name!r} ({type(self.operator).__name__}): run() returned dtype "
                                    f"{first.dtype} for tile {first.tile.box} but {m.dtype} for tile {m.tile.box}; "
                                    "an operator must return one dtype for every tile (cast with astype)")
        return tuple(first.shape), first.dtype, tuple(first.chunks)

    def manifest(self, strategies: Sequence[Strategy], metas: list[TileMeta],
                 previous: Manifest | None = None) -> Manifest:
        """The node's manifest after ``metas``' tiles ran: per stored strategy, one shard
        record per tile (``previous``'s for the tiles that did not run), and, when every tile
        ran, the node-level merge of their inline tables in place of their shards."""
        shards: dict[str, tuple[ShardRecord, ...]] = {}
        inline: dict[str, bytes] = {}
        ordered = sorted(metas, key=lambda m: m.tile.index)
        every = previous is None or len(metas) == len(self.tiles)
        for s in strategies:
            if not s.stored:
                continue
            records = {r.tile: r for r in previous.shards.get(s.name, ())} if not every and previous else {}
            records.update((m.tile.index, m.shards[s.name]) for m in ordered)
            shards[s.name] = tuple(records[t] for t in sorted(records))
            merged = merge_inline(s, [m.inline.get(s.name) for m in ordered],
                                  (self.output_shape, self.input_shapes)) if every else None
            if merged is not None:  # the node's merged table replaces its tiles' shards
                inline[s.name] = merged
                shards[s.name] = tuple(replace(r, name=None, files=(), index_bytes=0, file_share=None)
                                       for r in shards[s.name])
        return Manifest(self.name, shards, inline)


class _Discard:
    """The `NodeStage.destination` of an output nothing outside its stage reads: not written."""

    def __repr__(self) -> str:
        return "DISCARD"


DISCARD = _Discard()


@dataclass(frozen=True)
class FusedStage:
    """Consecutive nodes computed tile by tile in one stage (`worker.run_fused_tile`): one job
    for all of them, each tile's upstream outputs handed on in memory (grown by the halos
    their readers need) instead of written and read back, each node's output still written
    chunk by chunk and committed by the driver as its own.  Build it from `NodeStage` stages that
    are `fusable`, share their tiles, and read each other through `subzero.worker.Held`
    inputs."""

    stages: tuple[NodeStage, ...]
    #: the next node, two-pass (Label): its first pass runs in the same stage, over the members' outputs
    prepare: NodeStage | None = None

    @staticmethod
    def fusable(stage: NodeStage, strategies: Sequence[Strategy]) -> bool:
        """Whether ``stage`` can be a member: its shape known, one pass, no stored lineage (its
        tiles may be computed over a grown box), a tiling whose tiles are any box computed from
        their input boxes (`Elementwise`, `Halo`), and no digest asked."""
        op = stage.operator
        return (stage.output_shape is not None and not op.two_pass and not stage.digest
                and type(op.effective_tiling()) in (Elementwise, Halo) and not any(s.stored for s in strategies))

    @staticmethod
    def prepares(stage: NodeStage) -> bool:
        """Whether ``stage``'s first pass can run in a fused stage before it: a two-pass
        operator of known shape whose tiles read only their own box (`Elementwise`)."""
        op = stage.operator
        return stage.output_shape is not None and op.two_pass and type(op.effective_tiling()) is Elementwise

    def run(self, executor: Executor, progress: Reporter | None = None) -> "tuple[list[StageRun], list[Any] | None]":
        """Run every member's tiles as one stage on ``executor``, writing their outputs; one
        `StageRun` per member, its wall the stage's apportioned by the members' own
        operator and write seconds; and `prepare`'s first-pass summaries, in tile order
        (None without it), for its `NodeStage.run`."""
        progress = progress if progress is not None else Reporter()
        task = FusedTask(tuple(s.task((), write_output=True) for s in self.stages),
                         self.prepare.task() if self.prepare is not None else None)
        tiles = list(self.stages[0].tiles)
        banded = self.prepare is None and all(s.in_memory for s in self.stages)
        if banded:  # held in memory: a few large boxes, not a task per tile
            tiles = bands(tiles, self.stages[0].output_shape or (), executor)
        start = time.perf_counter()
        progress.node_started(task.node, len(tiles))
        try:
            per_tile = map_fused(executor, task, tiles, progress)
        except BaseException:
            progress.node_finished(task.node, ok=False)
            raise
        progress.node_finished(task.node)
        wall = time.perf_counter() - start
        metas = [[got.metas[k] for got in per_tile] for k in range(len(self.stages))]
        if banded:  # every member has the same bands: counted once
            covers = _covered([got.metas[0] for got in per_tile], self.stages[0].tiles)
            for ms in metas:
                for meta, count in zip(ms, covers):
                    meta.covers = count
        own = [sum(m.op_seconds + m.write_seconds for m in ms) for ms in metas]
        runs = []
        for stage, ms, mine in zip(self.stages, metas, own):
            shape, dtype, chunks = stage._agreed(ms)
            runs.append(StageRun(stage, ms, wall * mine / sum(own) if sum(own) > 0 else wall / len(own), shape,
                                 dtype, chunks))
        return runs, ([got.summary for got in per_tile] if self.prepare is not None else None)


@dataclass(frozen=True)
class StageRun:
    """What running a stage's tiles gave (``stage`` is bound to the agreed output shape)."""

    stage: NodeStage
    metas: list[TileMeta]
    wall: float
    shape: Shape
    dtype: str
    chunks: Shape

    def commit_array(self, metadata: bool = True, written_behind: bool = False, why: str = "") -> ArrayRecord:
        """Commit the output array (its ``zarr.json`` unless not ``metadata``: a replay that
        re-ran some tiles keeps the old one) and the bound operator; returns its record (an
        output not stored: ``stored=False``, no metadata), saying ``why``.  ``written_behind``:
        the output, held in memory, is written by the run behind it (it will be stored all the same)."""
        stage = self.stage
        if not stage.stores_output:
            self._save_operator(written_behind)
            return array_record(self.shape, self.dtype, self.chunks, stored=False, why=why)
        ref = stage.output_ref()
        pipeline = next((m.pipeline for m in self.metas if m.pipeline is not None), None)  # as the tiles wrote
        meta_xxh3 = ref.commit(self.shape, self.dtype, self.chunks, pipeline) if metadata else None
        ref.forget()
        self._save_operator(True)
        return array_record(self.shape, self.dtype, self.chunks, meta_xxh3, why=why)

    def _save_operator(self, output_stored: bool) -> None:
        """Save the bound operator; one that holds its output (a traced array's values) is saved
        without it when the output array is stored (`subzero.operators.indexing.Opaque.stored_form`)."""
        op = self.stage.operator
        form = getattr(op, "stored_form", None) if output_stored else None
        saved = form() if form else op
        later = getattr(self.stage.store, "save_operator_later", None)
        if later is not None and type(saved).__module__.startswith("subzero."):
            # written behind: pickled there too (a gather's positions: milliseconds per megabyte), from a
            # snapshot of its attributes; a user's operator is pickled here, so one that cannot be is said at once
            snapshot = copy.copy(saved)
            later(self.stage.name, functools.partial(dump_operator, snapshot, self.stage.name),
                  sum(int(v.nbytes) for v in vars(snapshot).values() if isinstance(v, np.ndarray)))
            return
        self.stage.store.save_operator(self.stage.name, dump_operator(saved, self.stage.name))


def bands(tiles: Sequence[Tile], shape: Shape, executor: Any) -> list[Tile]:
    """``tiles`` (a node's grid) merged into a few bands of whole tiles, for a stage whose output
    is held in memory (`NodeStage.in_memory`): one task per band instead of one per tile, so a
    small array costs a few calls, not a pool round trip, slicing and bookkeeping per tile.

    The bands split the axis with the most tiles into runs of whole tiles (each band spans the
    others), as many as the executor has threads (``executor.threads``, else 1) or more when a band
    would exceed `BAND_CELLS`.  Every band is a union of whole tiles (chunk-aligned), so what is
    written and recorded per chunk is unchanged; the grid itself (the catalog's tile shape, the
    tiles queries re-run) stays the node's.  ``tiles`` itself when it is not a full grid, or
    already as few.

    Examples
    --------
    >>> from subzero.tiling import tile_grid
    >>> [t.box for t in bands(tile_grid((4, 4), (0, 1), 2), (4, 4), None)]
    [((0, 4), (0, 4))]
    """
    tiles = list(tiles)
    cells = int(np.prod(shape, dtype=np.int64)) if shape else 1
    count = max(int(getattr(executor, "threads", 1) or 1), -(-cells // BAND_CELLS))
    if len(tiles) <= count or not shape or any(t.box is None for t in tiles):
        return tiles
    spans = [sorted({t.box[axis] for t in tiles}) for axis in range(len(shape))]
    if int(np.prod([len(s) for s in spans])) != len(tiles):  # not a full grid: left as it is
        return tiles
    axis = max(range(len(shape)), key=lambda a: len(spans[a]))
    whole = [(s[0][0], s[-1][1]) for s in spans]
    out = []
    for k, part in enumerate(np.array_split(np.arange(len(spans[axis])), min(count, len(spans[axis])))):
        box = list(whole)
        box[axis] = (spans[axis][part[0]][0], spans[axis][part[-1]][1])
        out.append(Tile(k, tuple(box)))
    return out


def _covered(metas: Sequence[TileMeta], tiles: Sequence[Tile]) -> list[int]:
    """Each band's `TileMeta.covers`: how many of the node's ``tiles`` it holds (a node's
    statistics count its tiles, not its tasks)."""
    lo = np.array([[a for a, _ in t.box] for t in tiles], np.int64)
    hi = np.array([[b for _, b in t.box] for t in tiles], np.int64)
    blo = np.array([[a for a, _ in m.tile.box] for m in metas], np.int64)
    bhi = np.array([[b for _, b in m.tile.box] for m in metas], np.int64)
    inside = np.all((lo[None] >= blo[:, None]) & (hi[None] <= bhi[:, None]), axis=2)
    return [int(n) for n in np.count_nonzero(inside, axis=1)]


def array_record(shape: Shape, dtype: str, chunks: Shape, meta_xxh3: str | None = None, stored: bool = True,
                 why: str = "") -> ArrayRecord:
    """The catalog's record of an array of ``shape``, ``dtype`` and ``chunks``."""
    nbytes = math.prod(int(n) for n in shape) * _itemsize(dtype)
    return ArrayRecord(tuple(shape), dtype, tuple(chunks), nbytes, meta_xxh3, stored, why)


@functools.lru_cache(maxsize=256)
def _itemsize(dtype: str) -> int:
    return np.dtype(dtype).itemsize


@functools.lru_cache(maxsize=256)
def dtype_name(dtype: np.dtype) -> str:
    """``str(dtype)``, once per dtype (numpy makes the name anew on every call: per node, it counts)."""
    return str(dtype)


def _grid(shape: Shape, split: tuple[int, ...], tile_shape: Any) -> tuple[tuple[Tile, ...], Shape]:
    """A node's tiles and chunks (`NodeStage._of`): its tiles' lengths, or the default chunks of
    a whole-array operator.  Made once per shape, split axes and tile shape: a traced workflow
    binds hundreds of nodes of a few shapes (tiles are immutable, shared by the stages)."""
    shape, split = tuple(int(n) for n in shape), tuple(int(a) for a in split)
    try:
        return _grid_of(shape, split, tile_shape)
    except TypeError:  # a tile shape that is no key (a list): made each time
        return _grid_of.__wrapped__(shape, split, tile_shape)


@functools.lru_cache(maxsize=512)
def _grid_of(shape: Shape, split: tuple[int, ...], tile_shape: Any) -> tuple[tuple[Tile, ...], Shape]:
    return tuple(tile_grid(shape, split, tile_shape)), tile_lens(shape, split, tile_shape) if split \
        else default_chunks(shape)


def _lens(shape: Shape, split: tuple[int, ...], tile_shape: Any) -> Shape:
    """`tile_lens`, once per shape, split axes and tile shape (`NodeStage.record_tile_shape`)."""
    try:
        return _lens_of(tuple(int(n) for n in shape), tuple(int(a) for a in split), tile_shape)
    except TypeError:  # a tile shape that is no key (a list)
        return tile_lens(shape, split, tile_shape)


@functools.lru_cache(maxsize=512)
def _lens_of(shape: Shape, split: tuple[int, ...], tile_shape: Any) -> Shape:
    return tile_lens(shape, split, tile_shape)


def lineage_metrics(manifest: Manifest) -> dict[str, dict[str, Any]]:
    """Per stored strategy of ``manifest``, its bytes (the merged table's or the shards'),
    keys, encode seconds, (pairs, out cells, in cells) and shard file bytes, as
    `subzero.catalog.NodeMetrics` keeps them."""
    recs = manifest.shards
    return {
        "bytes": {s: (len(manifest.inline[s]) if s in manifest.inline else
                      sum(r.nbytes + r.index_bytes for r in recs[s])) for s in recs},
        "keys": {s: sum(r.keys for r in recs[s]) for s in recs},
        "encode_seconds": {s: sum(r.encode_seconds for r in recs[s]) for s in recs},
        "pairs": {s: (sum(r.pairs for r in recs[s]), sum(r.out_cells for r in recs[s]),
                      sum(r.in_cells for r in recs[s])) for s in recs},
        "file_bytes": {s: sum(r.disk_bytes for r in recs[s]) for s in recs},
    }

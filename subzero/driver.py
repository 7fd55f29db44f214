"""The workflow executor (the driver): runs nodes in order, tile by tile, and commits each node.

Per node, a `subzero.stage.NodeStage` binds the operator to its shapes and runs its tiles
on the chosen executor (each task writes its own output chunk and lineage shards and
returns small metadata); the driver then commits the array's metadata, the node's
manifest and last its catalog entry.  It holds metadata only, O(tiles) per node.

When the optimizer chooses strategies (a workload or a budget is given and not every
node is pinned), the run has two phases: first every node is computed without lineage
and profiled on sample tiles; the integer program then picks strategies (the plan is
written to the catalog); second, only the nodes that store lineage re-run their tiles
to capture it.  The first phase is the workflow's own cost, the base of relative
runtime budgets.

A run killed or failed part way is continued with ``resume=True``: once the workflow,
its operators, settings and inputs are checked to be the same (`subzero.fingerprint`),
the committed nodes are kept (arrays, lineage, catalog entries) and everything else the
run left is removed; then the remaining nodes run.  A two-phase run killed before its
plan was written computes its operators again; one killed after keeps the plan and the
first phase's arrays and captures the lineage of the nodes not committed yet.
"""

from __future__ import annotations

import datetime as _dt
import functools
import itertools
import logging
import os
import time
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence, cast

import numpy as np

from subzero import config
from subzero.catalog import ArrayRecord, Manifest, NodeMetrics, NodeRecord, PendingNode, RunRecord
from subzero.errors import StorageUnavailable, StoreError, WorkflowError
from subzero.executors import Executor, check_executor, make_executor
from subzero.fingerprint import CopyBeside, array_digest, combine_digests, differences, run_fingerprint
from subzero.inputs_check import check_input_array
from subzero.modes import Mode, Strategy
from subzero.operator import Operator
from subzero.strategies import default_strategies, resolve_pinned
from subzero.progress import Reporter
from subzero.worker import Held, NodeTask, RecomputedArray, TileMeta, release_pending
from subzero.stage import DISCARD, FusedStage, NodeStage, StageRun, array_record, dtype_name, lineage_metrics
from subzero.store import RunWriter, create_run, open_store, resume_run
from subzero.store import retry as storage_retry
from subzero.store.arrays import (ExternalArray, MemoryArray, output_compressor, resolve_compressor,
                                   sampled_compressor, write_array)
from subzero.store.behind import AfterWrites, BehindStore, wait_for_writes
from subzero.tiling import Elementwise, Tile, default_chunks, tile_grid
from subzero.dag import Node, Workflow

log = logging.getLogger(__name__)

#: the ``why`` of an intermediate array stored because ``keep=`` says so
KEPT_ALL, KEPT_NAMED = "stored: keep='all'", "stored: named in keep"
#: unstored arrays up to this many bytes stay held after their last reader (they may still be stored)
KEEP_HELD_BYTES = 1 << 16
#: the ``why`` of an array the run did not store
UNSTORED = "not stored: an intermediate no query needs stored; recomputed from its stored ancestors when read"

__all__ = ["execute", "RunOptions", "kept_arrays", "UNSTORED", "Policy", "FixedPolicy", "OnlinePolicy",
           "PendingPolicy", "OptimizerState", "static_shapes"]


class _Source(Operator):
    """Copies an external array (e.g. a Zarr array given as an input) into the store, tile by tile."""

    tiling = Elementwise()

    def infer_output_shape(self, input_shapes):
        return tuple(input_shapes[0])

    def run(self, ctx, x):
        return x


def _check_inputs(wf: Workflow, inputs: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(inputs, dict):
        raise WorkflowError(f"inputs must be a dict of input name -> array, got {type(inputs).__name__}")
    names = {n.name for n in wf.inputs}
    missing, extra = names - set(inputs), set(inputs) - names
    if missing:
        raise WorkflowError(f"workflow {wf.name!r} needs input(s) {sorted(missing)}; pass them in inputs=")
    if extra:
        raise WorkflowError(f"workflow {wf.name!r} has no input(s) {sorted(extra)}; its inputs are {sorted(names)}")
    arrays = {}
    for name, value in inputs.items():
        if ExternalArray.accepts(value):
            arrays[name] = ExternalArray(value, name)
            continue
        arrays[name] = check_input_array(name, value)
    return arrays


class _Execution:
    """One run in progress: the store, the executor, the catalog so far, the disk budget left."""

    def __init__(self, wf: Workflow, store: RunWriter, catalog: RunRecord, runner, tile_shape,
                 max_disk: float | None, progress: Reporter, kept: dict[str, str] | None = None,
                 in_memory: bool = False, known: dict[str, tuple[np.ndarray | np.dtype, float, bool]] | None = None,
                 copies: dict[str, CopyBeside] | None = None):
        self.wf, self.store, self.catalog = wf, store, catalog
        #: node name -> why its array is stored (`kept_arrays`); the others are not, unless they must be
        self.kept: dict[str, str] = dict(kept) if kept is not None else {n.name: "kept: every array" for n in wf.nodes}
        #: whether unstored outputs are held in this process for their readers (the local executor)
        self.in_memory = in_memory
        self.held: dict[str, MemoryArray] = {}
        #: the bytes of the held outputs the run does not keep, as last seen (`_unkept_held_bytes`): per
        #: name (0: not written yet, the names in ``_held_unwritten``) and in all
        self._held_seen: dict[str, int] = {}
        self._held_unwritten: set[str] = set()
        self._held_bytes = 0
        self._destinations: dict[str, Any] = {}
        self._why: dict[str, str] = {}
        #: node name -> the nodes that read it (one pass over the graph)
        self.readers: dict[str, set[str]] = {n.name: set() for n in wf.nodes}
        for n in wf.nodes:
            for i in n.inputs:
                self.readers[i.name].add(n.name)
        self._readers_left = {name: len(readers) for name, readers in self.readers.items()}
        #: node name -> (values, seconds) its trace computed on this run's inputs (`reuse`), until taken
        #: (a dtype instead of values: the trace computed them, then computed a reader into their array)
        self.known: dict[str, tuple[np.ndarray | np.dtype, float]] = {
            name: got[:2] for name, got in (known or {}).items() if in_memory and name in self.readers}
        #: the nodes of `known` its trace would have left to the run, had the run not continued behind its
        #: return (`subzero.trace.tracer.Tracer.evaluate_rest`): `_run_nodes` places them in the fused stages
        #: such a run makes (held, or not written at all), so that the store is the one such a run makes
        self.left: set[str] = {name for name, got in self.known.items() if (known or {})[name][2:3] == (True,)}
        #: nodes of `known` whose values the trace let go of (a dtype) that the run commits without holding
        #: them (`_let_go`), though a run in the caller's thread would hold them (`let_go_of`)
        self.let_go: set[str] = set()
        self._let_go_bytes: dict[str, int] = {}  # ... counted as held until their last reader committed
        self._stages: dict[str, tuple[tuple, NodeStage]] = {}  # the last stage made per node, and its key
        #: a node's stage `fused_group` bound (no destination yet) when it led no fused stage: `stage` takes it
        self._unplaced: dict[str, tuple[tuple, NodeStage]] = {}
        self._hold_limit = int(config.get("hold_mb") * 2**20)
        #: the store is written behind the run (`subzero.store.behind`): the arrays it keeps are held
        #: in memory for their readers and queued for writing, up to this many bytes each
        self.behind = isinstance(store, BehindStore)
        self._behind_limit = int(config.get("write_behind_mb") * 2**20)
        self._commit_every = config.get("commit_seconds")
        self._compressor = config.get("compressor")  # read once: a node's held output asks (`_hold`)
        self._fuse = config.get("fuse")  # read once: every `fused_group` asks
        self._written_at = time.perf_counter()
        self._recomputed: dict[str, RecomputedArray] = {}
        self._runner: Executor | Callable[[], Executor] = runner  # or a function making one when first needed
        self._runner_is_factory = not isinstance(runner, Executor)
        self.tile_shape, self.progress = tile_shape, progress
        self.disk_left = max_disk
        self._kept_bytes = 0  # the intermediates keep= stored, counted against max_disk
        #: input name -> the digest of its held copy, computed beside the run (`save_input`, `digested`)
        self._digests: dict[str, Future[str]] = {}
        #: input name -> its copy being made beside the run, when started before it (`save_input`)
        self.copies: dict[str, CopyBeside] = dict(copies or {})
        #: the caller's input arrays the run reads while their copies are made (`save_input`): no array
        #: written behind the run may be a view of one (`_persist` copies it)
        self._given: list[np.ndarray] = []
        #: the run continues behind its return (`detach`): it holds its inputs' copies, never the caller's arrays
        self.detached = False
        self.arrays: dict[str, ArrayRecord] = {}
        #: the run's own graph: node name -> its operator as this run bound it (with its run state:
        #: a two-pass operator's combined summaries); the workflow's nodes keep the user's operators
        self.operators: dict[str, Operator] = {}

    @property
    def runner(self):
        """The executor (a Spark session starts only when a task has to run; the catalog then
        records its master, as the session has it)."""
        if self._runner_is_factory:  # make the executor now (a flag: isinstance on a Protocol is slow)
            started = time.perf_counter()
            made = cast(Callable[[], Executor], self._runner)()
            self._runner, self._runner_is_factory = made, False
            master = made.master
            self.catalog = replace(self.catalog, master=master)
            if master is not None:  # reported on its own, not charged to the first node
                self.progress.note(f"Spark session {master} ready in {time.perf_counter() - started:.1f} s")
        return self._runner

    def ref(self, name: str):
        """The array of a committed (or computed) node: the stored one, checked against its
        metadata checksum; held in memory (`MemoryArray`); or, not stored and not held (a
        resumed run), recomputed from its ancestors when read (`RecomputedArray`)."""
        if name in self.held:
            return self.held[name]
        if self._destinations.get(name) is DISCARD:  # only its fused stage read it, in that stage's memory
            return Held(name)
        record = self.arrays.get(name)
        if record is not None and not record.stored:
            return self._recompute(name)
        return self.store.array(name, record.meta_xxh3 if record is not None else None)

    def _recompute(self, name: str) -> RecomputedArray:
        """The `RecomputedArray` of a committed node this run did not store or hold."""
        if name not in self._recomputed:
            node, record = self.wf.node(name), self.arrays[name]
            op = self.operators[name]
            task = NodeTask(name, op, tuple(self.ref(i.name) for i in node.inputs), op.input_shapes, op.output_shape)
            tiles = tile_grid(record.shape, op.effective_tiling().split_axes(op), self.catalog.nodes[name].tile_shape)
            self._recomputed[name] = RecomputedArray(task, tiles, record.chunks, record.dtype,
                                                     int(config.get("recompute_cache_mb") * 2**20))
        return self._recomputed[name]

    # -- which arrays are stored ----------------------------------------------------------
    def destination(self, node: Node, inputs: Sequence[Any] = ()) -> Any:
        """Where ``node``'s output goes: None (the store: it is kept, or a later stage on another
        process reads it), or a `MemoryArray` this process holds for its readers (the local
        executor).  Decided once per node; `why` tells the reason."""
        name = node.name
        if name not in self._destinations:
            if name in self.kept and not (self.behind and self._fits_behind(node)):
                self._destinations[name], self._why[name] = None, self.kept[name]
            elif name in self.kept:  # held for its readers; written behind the run once committed
                self._hold(name, inputs)
                self._why[name] = self.kept[name]
            elif not self.in_memory:
                self._destinations[name], self._why[name] = None, "stored: read by a later stage on the executor"
            elif self._unkept_held_bytes() > self._hold_limit:
                self._destinations[name], self._why[name] = None, "stored: over the in-memory limit (hold_mb)"
            else:
                self._hold(name, inputs)
                self._why[name] = UNSTORED
        return self._destinations[name]

    def _hold(self, name: str, inputs: Sequence[Any]) -> None:
        """``name``'s output goes to a `MemoryArray` of this process."""
        held_inputs = any(isinstance(i, Held) for i in inputs)  # a fused member: its task chooses
        compressor = self._compressor if held_inputs else output_compressor(inputs, self._compressor)
        self.held[name] = MemoryArray(name, compressor)
        self._destinations[name] = self.held[name]
        if name not in self.kept:
            self._held_seen[name] = 0
            self._held_unwritten.add(name)

    def _unkept_held_bytes(self) -> int:
        """The bytes of the held outputs the run does not keep, summed as they are written (a held
        array's size is set once its node's tiles wrote it, until it is dropped): O(the arrays not
        written when last asked), not O(every array held) per node."""
        for name in [n for n in self._held_unwritten if n in self.held and self.held[n].nbytes]:
            self._held_unwritten.discard(name)
            self._held_seen[name] = self.held[name].nbytes
            self._held_bytes += self._held_seen[name]
        return self._held_bytes

    def _drop_held(self, name: str) -> MemoryArray | None:
        """``name``'s held output, no longer held (None: it was not)."""
        self._held_bytes -= self._held_seen.pop(name, 0)
        self._held_unwritten.discard(name)
        return self.held.pop(name, None)

    def _fits_behind(self, node: Node) -> bool:
        """Whether a kept array is small enough to hold and write behind the run (its largest
        input's bytes stand for its own; larger ones are written by its tiles, as on Spark)."""
        sizes = [self.arrays[i.name].nbytes for i in node.inputs if i.name in self.arrays]
        return max(sizes, default=0) <= self._behind_limit

    def _written_behind(self, name: str) -> bool:
        """Whether ``name``'s output is a kept array held in memory (`_persist` writes it)."""
        held = self.held.get(name)
        return name in self.kept and held is not None and self._destinations.get(name) is held

    def _persist(self, name: str, record: ArrayRecord, metas: Sequence[TileMeta]) -> ArrayRecord:
        """A kept array held in memory is queued for writing behind the run (its chunks as its
        tiles would have written them); its record says it is stored."""
        held = self.held.get(name)
        if not self._written_behind(name) or held is None:
            return record
        block = held.block if held.block is not None else np.empty(record.shape, record.dtype)
        if any(np.may_share_memory(block, given) for given in self._given):  # a view of the caller's input
            block = np.array(block, copy=True, order="C")
        pipeline = next((m.pipeline for m in metas if m.pipeline is not None), None) or \
            resolve_compressor(held.compressor, block.dtype)
        assert isinstance(self.store, BehindStore)
        meta_xxh3 = self.store.write_array(name, block, record.chunks, pipeline)
        return replace(record, meta_xxh3=meta_xxh3, stored=True)

    def discard(self, name: str) -> None:
        """``name`` is a fused member only its own stage reads: its output is not written at all."""
        self._destinations[name], self._why[name] = DISCARD, UNSTORED
        self._drop_held(name)

    def why(self, name: str) -> str:
        """Why ``name``'s array is stored or not (its catalog record's ``why``)."""
        return self._why.get(name, self.kept.get(name, ""))

    def _release(self, node: Node) -> None:
        """``node`` is committed: drop the held outputs it was the last reader of (but small ones,
        up to `KEEP_HELD_BYTES`: a later node's plan may still store them, e.g. a scalar that cuts
        a long chain of recomputation)."""
        for i in {i.name for i in node.inputs}:
            self._readers_left[i] -= 1
            if self._readers_left[i] <= 0 and i in self.held and self.held[i].nbytes > KEEP_HELD_BYTES:
                cast(MemoryArray, self._drop_held(i)).release()
            elif self._readers_left[i] <= 0 and i in self._let_go_bytes:  # as it would have been dropped
                self._held_bytes -= self._let_go_bytes.pop(i)

    # -- inputs ---------------------------------------------------------------------------
    def save_input(self, node: Node, value, metadata: dict | None = None) -> None:
        """Store an input, tile by tile, digesting its tiles as they are written; commit it."""
        shape = tuple(int(n) for n in value.shape)
        chunks = default_chunks(shape)
        ref = self.store.array(node.name)
        if isinstance(value, ExternalArray):  # the executor's tasks copy it, tile by tile
            metas = self._copy(node, value, chunks, True)
            ordered = sorted(metas, key=lambda m: m.tile.index)
            digest = combine_digests(shape, value.dtype, [str(m.digest) for m in ordered])
            meta_xxh3 = ref.commit(shape, str(value.dtype), chunks)
        elif self.behind and value.nbytes <= self._behind_limit:  # held for the readers, written behind
            self.progress.node_started(node.name, 1)
            # the caller may change its array once run returns: the store gets a copy, made (and digested)
            # beside the run while the run reads the caller's array (read-only; one not in C order: its
            # copy); the run waits for it before it returns (`digested`), the write behind waits for it too
            copied = self.copies.get(node.name)
            if copied is None or not copied.of(value, chunks):  # (a traced run starts them before its trace)
                copied = CopyBeside(value, chunks)
            # (a run continuing behind its return holds the copy: the caller's array may change meanwhile)
            given = value.flags.c_contiguous and not self.detached
            block = value.view() if given else copied.block.result()
            block.flags.writeable = False  # nothing of the run writes the caller's array
            digest = None  # the copy's digest, computed beside the run: no catalog is written without it
            self._digests[node.name] = copied.digest
            if given:
                self._given.append(value)
            compressor = ref.compressor if ref.compressor != "auto" else sampled_compressor(block, chunks)
            assert isinstance(self.store, BehindStore)
            meta_xxh3 = self.store.write_array(node.name, value, chunks, compressor, copy=copied.block)
            held = MemoryArray(node.name, compressor)
            held.block, held.chunks = block, chunks
            self.held[node.name] = self._destinations[node.name] = held
            self.progress.node_finished(node.name)
        else:
            self.progress.node_started(node.name, 1)
            digests: list[str] = []
            write_array(ref, value, chunks, digests=digests)
            digest = combine_digests(shape, value.dtype, digests)
            meta_xxh3 = self.store.array_meta_checksum(node.name)
            self.progress.node_finished(node.name)
        dtype = str(value.dtype)
        self.arrays[node.name] = replace(array_record(shape, dtype, chunks, meta_xxh3), why="stored: an input")
        if digest is not None:
            fingerprint = {**self.catalog.fingerprint, f"input:{node.name}": digest}
            self.catalog = replace(self.catalog, fingerprint=fingerprint)
        self._commit_record(NodeRecord(node.name, "input", self.arrays[node.name], metadata=dict(metadata or {})))

    def detach(self, arrays: dict[str, Any]) -> None:
        """The run continues behind its return (`_return_before`): the caller may change its input
        arrays from now on.  Their copies, made beside the trace (`copies`), are waited for and are
        what the run holds (`save_input`); a value the trace computed that is a view of one (a
        reshape, a slice, a transpose) becomes the same view of its copy (`_same_view`; copied
        when it is not one)."""
        self.detached = True
        given = {name: a for name, a in arrays.items()
                 if isinstance(a, np.ndarray) and a is not self.wf.constants.get(name)}
        copied = {name: self.copies[name].block.result() for name in arrays if name in self.copies}
        for name, (value, seconds) in list(self.known.items()):
            if isinstance(value, np.ndarray) and value.base is not None:
                for source_name, source in given.items():
                    if np.may_share_memory(value, source):
                        same = _same_view(value, source, copied.get(source_name))
                        self.known[name] = (same if same is not None else np.array(value, copy=True, order="C"),
                                            seconds)
                        break

    def digested(self, catalog: RunRecord | None = None) -> RunRecord:
        """``catalog`` (default: the run's, which is updated too) with the digests of the inputs
        `save_input` digests beside the run, waited for, in the fingerprint."""
        if self._digests:
            done = {f"input:{name}": got.result() for name, got in self._digests.items()}
            self._digests.clear()
            self.catalog = replace(self.catalog, fingerprint={**self.catalog.fingerprint, **done})
        if catalog is None:
            return self.catalog
        missing = {k: v for k, v in self.catalog.fingerprint.items() if k not in catalog.fingerprint}
        return replace(catalog, fingerprint={**catalog.fingerprint, **missing}) if missing else catalog

    def _copy(self, node: Node, value: ExternalArray, chunks, write: bool) -> list[TileMeta]:
        """The tiles of an external input copied into the store (when ``write``) and digested."""
        shape = tuple(int(n) for n in value.shape)
        stage = NodeStage(node.name, _Source().bound((shape,), shape), (shape,), shape,
                          tuple(_input_tiles(shape, chunks)), chunks, (value,), self.store, digest=True)
        return stage.run(self.runner, (), write, progress=self.progress if write else None).metas

    def input_digest(self, node: Node, value, chunks: tuple[int, ...] | None = None) -> str:
        """The digest of an input as `save_input` computes it (over ``chunks``, default: the
        default chunks), without storing anything."""
        shape = tuple(int(n) for n in value.shape)
        chunks = tuple(chunks) if chunks is not None else default_chunks(shape)
        if not isinstance(value, ExternalArray):
            return array_digest(value, chunks)
        metas = self._copy(node, value, chunks, False)
        return combine_digests(shape, value.dtype, [str(m.digest) for m in sorted(metas, key=lambda m: m.tile.index)])

    # -- resuming -----------------------------------------------------------------------------
    def prepare_resume(self, arrays: dict[str, Any], clean: bool = True) -> None:
        """Continue the stored run: check its inputs are the ones given, remove what it did not
        commit (unless not ``clean``: a finished run is left as it is), and take its committed
        nodes (arrays, stored operators) as this run's."""
        catalog = self.catalog
        differ = []
        for node in self.wf.inputs:
            record = catalog.nodes.get(node.name)
            if record is None:
                continue
            value = arrays[node.name]
            same_layout = tuple(int(n) for n in value.shape) == record.shape and str(value.dtype) == record.dtype
            # digested over the stored chunks: a store made when the default chunks differed resumes
            if not same_layout or self.input_digest(node, value, record.array.chunks) != \
                    catalog.fingerprint.get(f"input:{node.name}"):
                differ.append(f"input {node.name!r} (its values, shape or dtype)")
        if differ:
            raise StoreError(_not_the_same(self.store, differ))
        pending = (catalog.optimizer or {}).get("pending") or {}
        if clean:
            removed = self.store.remove_uncommitted_nodes(set(catalog.nodes), set(pending))
            log.info("resuming %s: %d committed node(s) kept, %d leftover(s) removed", self.store.url,
                     len(catalog.nodes), removed)
        for node in self.wf.nodes:
            record = catalog.nodes.get(node.name)
            if record is not None:
                self.arrays[node.name] = record.array
            elif node.name in pending:
                self.arrays[node.name] = ArrayRecord.from_dict(pending[node.name]["array"])
            else:
                continue
            if not node.is_input:  # the operator that made the stored array (bound, with its run state)
                self.operators[node.name] = self.store.load_operator(node.name)
        if self.disk_left is not None:
            self.disk_left -= sum(sum(r.stats.bytes.values()) for r in catalog.nodes.values() if r.stats)

    # -- operators ----------------------------------------------------------------------------
    def operator(self, node: Node) -> Operator:
        """The node's operator in this run: the one it computed with (bound, with its run state)
        once computed, else the workflow's."""
        op = self.operators.get(node.name, node.operator)
        assert op is not None, f"{node!r} is an input"
        return op

    def stage(self, node: Node) -> NodeStage:
        """The node's stage: its operator bound to its inputs' shapes (and to its own, once computed)."""
        computed = self.arrays.get(node.name)
        op = self.operator(node)
        key = self._stage_key(node, op)
        kept = self._stages.get(node.name)
        got = kept[1] if kept is not None and kept[0] == key else None
        unplaced = self._unplaced.pop(node.name, None)
        if got is None and unplaced is not None and unplaced[0] == key:  # bound by `fused_group` just before
            got = replace(unplaced[1], destination=self.destination(node, unplaced[1].inputs))
            self._stages[node.name] = (key, got)
        if got is None:
            inputs = tuple(self.ref(i.name) for i in node.inputs)
            got = NodeStage.bind(node.name, op, tuple(self.arrays[i.name].shape for i in node.inputs),
                                 inputs, self.store, self.tile_shape, computed.shape if computed is not None else None,
                                 destination=self.destination(node, inputs))
            self._stages[node.name] = (key, got)
        return got

    def _stage_key(self, node: Node, op: Operator) -> tuple:
        """What a node's stage is bound to: its operator, its shape once computed, its inputs' arrays."""
        computed = self.arrays.get(node.name)
        return (node.name, id(op), computed.shape if computed is not None else None,
                tuple(id(self.arrays.get(i.name)) for i in node.inputs),
                tuple(id(self.held.get(i.name)) for i in node.inputs))

    def compute(self, node: Node, strategies: tuple[Strategy, ...],
                prepared: list[Any] | None = None, first: Any = None) -> tuple[list[TileMeta], float]:
        """Bind, run every tile (encoding ``strategies``), commit the output array and the operator
        (``prepared``: a two-pass operator's first-pass summaries, made by a fused stage).
        ``first``: the node's first tiles, computed by its calibration
        (`subzero.optimizer.calibrate.FirstTiles`): not run again when they hold the lineage of
        ``strategies`` (else every tile runs), their time counted in the node's."""
        kept = first.keep(strategies) if first is not None else []
        try:
            done = self.stage(node).run(self.runner, strategies, write_output=True, progress=self.progress,
                                        prepared=prepared, done=kept)
        finally:
            if first is not None:  # their lineage written with the others' tiles, or not kept
                release_pending(first.task)
        if first is not None and first.wrote() and not any(s.stored for s in strategies):
            self.store.remove_uncommitted(node.name, None)  # a first tile's own shard of a candidate not chosen
        if kept:
            done = replace(done, wall=done.wall + first.wall)
        self.operators[node.name] = done.stage.operator  # bound, with its run state: the run's queries use it
        committed = done.commit_array(written_behind=self._written_behind(node.name), why=self.why(node.name))
        self.arrays[node.name] = self._persist(node.name, committed, done.metas)
        if done.stage.output_shape == committed.shape:  # the stage that ran is the one its commit binds
            self._stages[node.name] = (self._stage_key(node, done.stage.operator), done.stage)
        return done.metas, done.wall

    def reuse(self, node: Node, prepared: list[Any] | None = None) -> tuple[list[TileMeta], float] | None:
        """Commit ``node``'s output from the values its trace computed on this run's inputs
        (`known`) instead of computing it: held in memory as its tiles would have left it (written
        behind the run when kept, as a held array is), the operator and array committed as
        `compute` does; one `TileMeta` covering every tile, timed by the trace.  A two-pass
        operator's run state comes from those values when it can make it from them (Label's seams,
        `NodeStage.first_pass`'s ``output``), else from its first pass (or ``prepared``: the
        summaries a fused stage made); its values, computed whole, are those its tiles give
        (Label's canonical ids do not depend on the tiling).  None (the node is computed
        as usual): no values, or a node they cannot stand for here: its output not held in this
        process (stored by its tiles), a shape other than the stage's, or an operator run under
        ``np.errstate(...="raise")``."""
        got = self.known.pop(node.name, None)
        if got is None:
            return None
        value, seconds = got
        stage = self.stage(node)
        if stage.destination is DISCARD:  # a fused stage's member only its own stage reads (`_run_nodes`)
            return self._computed_unheld(node, stage, value if isinstance(value, np.dtype) else value.dtype, seconds)
        if isinstance(value, np.dtype):  # its values lent to a reader or let go of: it is computed (it is
            return self._let_go(node, stage, value, seconds) if node.name in self.let_go else None  # held)
        op, held, shape = stage.operator, stage.destination, stage.output_shape
        errstate = getattr(op, "errstate", None) or {}
        if not isinstance(held, MemoryArray) or held.block is not None or shape is None or \
                tuple(value.shape) != tuple(shape) or value.dtype == object or "raise" in errstate.values():
            return None
        started = time.perf_counter()
        self.progress.node_started(node.name, 1)
        if op.two_pass:  # its run state from its values when it can (Label's seams), else its first pass
            stage.first_pass(self.runner, prepared, value)
        written_behind = self._written_behind(node.name)
        if written_behind and value.base is not None:  # a view (of an input the caller may change once run returns)
            value = np.array(value, copy=True, order="C")
        chunks = tuple(stage.chunks or default_chunks(shape))
        held.write_whole(value, chunks)
        dtype = dtype_name(value.dtype)
        meta = TileMeta(Tile(0, tuple((0, int(n)) for n in shape)), tuple(shape), dtype, chunks, op_seconds=seconds,
                        pipeline=resolve_compressor(held.compressor, value.dtype), covers=len(stage.tiles))
        done = StageRun(stage, [meta], seconds + time.perf_counter() - started, tuple(shape), dtype, chunks)
        self.operators[node.name] = stage.operator
        committed = done.commit_array(written_behind=written_behind, why=self.why(node.name))
        self.arrays[node.name] = self._persist(node.name, committed, done.metas)
        self._stages[node.name] = (self._stage_key(node, stage.operator), stage)  # bound to the shape it has
        self.progress.node_finished(node.name)
        return done.metas, done.wall

    def _computed_unheld(self, node: Node, stage: NodeStage, dtype: np.dtype,
                         seconds: float) -> tuple[list[TileMeta], float] | None:
        """`reuse` of a member of a fused stage that only its own stage reads (`stage.DISCARD`: never
        written) whose values the trace computed (perhaps then computing a reader into them,
        `subzero.trace.tracer.Tracer.evaluate_rest`, as numpy reuses a temporary): committed as the
        stage commits it, unstored and not held (its readers take their own values from the trace; a
        read recomputes it from its inputs).  None (computed as usual): a kept node, or a two-pass one."""
        op, shape, name = stage.operator, stage.output_shape, node.name
        if name in self.kept or op.two_pass or shape is None or dtype.hasobject:
            return None
        started = time.perf_counter()
        self.progress.node_started(name, 1)
        chunks = tuple(stage.chunks or default_chunks(shape))
        meta = TileMeta(Tile(0, tuple((0, int(n)) for n in shape)), tuple(shape), dtype_name(dtype), chunks,
                        op_seconds=seconds, covers=len(stage.tiles))
        done = StageRun(stage, [meta], seconds + time.perf_counter() - started, tuple(shape), dtype_name(dtype),
                        chunks)
        self.operators[name] = stage.operator
        self.arrays[name] = done.commit_array(written_behind=False, why=self.why(name))
        self._stages[name] = (self._stage_key(node, stage.operator), stage)
        self.progress.node_finished(name)
        return done.metas, done.wall

    def let_go_of(self, operators: Sequence[Node], policy: "Policy") -> None:
        """Find the nodes whose values the trace let go of (`subzero.trace.tracer.Tracer.dead`) that this
        run commits unheld and unstored (`let_go`) instead of computing them again to hold them: with
        the default strategies (`FixedPolicy`), not kept, one pass, no stored lineage, every reader let
        go of too or taken from its trace's values (an array, one pass, no stored lineage to capture
        from its inputs, no ``np.errstate(...="raise")``; a reader the run computes after all, a large
        kept one its tiles write, recomputes it) and no node's default stores (`_default_stores`: a node
        neither all-to-all nor with Map or stored lineage) pricing it among its unstored ancestors.
        Such a run stores, catalogs and answers what the run holding them does; a read recomputes it
        from its stored ancestors."""
        known = self.known
        dead = [n for n in operators if isinstance(known.get(n.name, (None,))[0], np.dtype)]
        if not dead or not isinstance(policy, FixedPolicy):
            return
        chosen = policy.chosen
        by_name = {n.name: n for n in self.wf.nodes}
        priced: set[str] = set()  # the unstored ancestors some node's default stores may price
        for node in operators:
            op = node.operator
            if op is None or op.all_to_all or any(s.stored or s.mode is Mode.MAP for s in chosen.get(node.name, ())):
                continue
            stack = [i.name for i in node.inputs]
            while stack:
                name = stack.pop()
                if name in self.kept or name in priced:
                    continue
                priced.add(name)
                stack.extend(i.name for i in by_name[name].inputs)

        def taken(name: str) -> bool:  # from the trace, capturing no lineage that reads its inputs
            op = by_name[name].operator
            return not any(s.stored for s in chosen.get(name, ())) and \
                isinstance(known.get(name, (None,))[0], np.ndarray) and \
                op is not None and not op.two_pass and "raise" not in (getattr(op, "errstate", None) or {}).values()

        for node in reversed(dead):  # a reader let go of reads nothing either: readers first
            op = node.operator
            if node.name not in self.kept and node.name not in priced and op is not None and not op.two_pass and \
                    not any(s.stored for s in chosen.get(node.name, ())) and \
                    all(r in self.let_go or taken(r) for r in self.readers[node.name]):
                self.let_go.add(node.name)

    def _let_go(self, node: Node, stage: NodeStage, dtype: np.dtype,
                seconds: float) -> tuple[list[TileMeta], float] | None:
        """`reuse` of a node of `let_go`: committed unstored and not held (its readers take their values
        from the trace; a read recomputes it), its bytes counted as held until its last reader committed,
        as the held array a run computing it would have been (the ``hold_mb`` limit decides alike)."""
        name = node.name
        held = self.held.get(name)
        if not isinstance(held, MemoryArray) or stage.destination is not held or stage.output_shape is None:
            return None
        got = self._computed_unheld(node, stage, dtype, seconds)
        if got is not None:
            self._drop_held(name)
            self._destinations[name] = None  # read: recomputed from its stored ancestors (`ref`)
            nbytes = int(np.prod(stage.output_shape, dtype=np.int64)) * dtype.itemsize
            if nbytes > KEEP_HELD_BYTES:
                self._let_go_bytes[name] = nbytes
                self._held_bytes += nbytes
        return got

    def fused_members(self, nodes: Sequence[Node], chosen: dict[str, tuple[Strategy, ...]]
                      ) -> tuple[list[NodeStage], NodeStage | None, bool]:
        """`fused_group`'s members (bound, no destination yet) and prepare, and whether every
        one of ``nodes`` was taken (then a longer ``nodes`` may give a longer run).  Decides
        nothing about the run (no destination): it may be asked again over more nodes."""
        stages: list[NodeStage] = []
        shapes: dict[str, tuple[int, ...]] = {}
        if not (nodes and self._fuse):
            return stages, None, False
        for node in nodes:
            names = [i.name for i in node.inputs]
            if any(n not in shapes and n not in self.arrays for n in names):
                break
            if any(s.stored for s in chosen[node.name]) and not self.operator(node).two_pass:
                break  # neither a member (it stores lineage) nor a `FusedStage.prepare`: told without binding it
            inputs: tuple[Any, ...] = tuple(Held(n) if n in shapes else self.ref(n) for n in names)
            try:
                stage = NodeStage.bind(node.name, self.operator(node),
                                       tuple(shapes[n] if n in shapes else self.arrays[n].shape for n in names),
                                       inputs, self.store, self.tile_shape)
            except WorkflowError:  # reported when the node runs on its own
                break
            if stages and stage.tiles != stages[0].tiles:
                break
            if stages and FusedStage.prepares(stage):
                return stages, stage, False
            if not FusedStage.fusable(stage, chosen[node.name]):
                break
            stages.append(stage)
            shapes[node.name] = tuple(stage.output_shape or ())
        else:
            return stages, None, True
        return stages, None, False

    def fused_group(self, nodes: Sequence[Node], chosen: dict[str, tuple[Strategy, ...]],
                    bound: "tuple[list[NodeStage], NodeStage | None, bool] | None" = None) -> FusedStage | None:
        """The longest run of ``nodes`` (from the first, all not committed yet) that one
        `FusedStage` computes: members `FusedStage.fusable`, with the first one's tiles, each
        after the first reading an earlier member (a `Held` input), otherwise committed arrays
        only; and the node after them as its `FusedStage.prepare` when it `FusedStage.prepares`
        over them.  None: no fusion (the ``fuse`` setting off, or fewer than two nodes to run together).
        ``bound``: `fused_members` of the same arguments, when the caller has it."""
        stages, prepare, _ = bound if bound is not None else self.fused_members(nodes, chosen)
        if len(stages) < (1 if prepare is not None else 2):
            if stages and not self.operators.get(stages[0].name):  # its own stage, when it runs alone
                self._unplaced[stages[0].name] = (self._stage_key(nodes[0], self.operator(nodes[0])), stages[0])
            return None
        stages = list(stages)
        members = {s.name for s in stages}
        for k, stage in enumerate(stages):  # where each member's output goes
            node = self.wf.node(stage.name)
            readers = self.readers[node.name]
            if node.name not in self.kept and readers and readers <= members:
                self.discard(node.name)  # only its own stage reads it: not written, not held
            stages[k] = replace(stage, destination=self.destination(node, stage.inputs))
        return FusedStage(tuple(stages), prepare)

    def compute_fused(self, nodes: Sequence[Node], fused: FusedStage) -> tuple[list[tuple[list[TileMeta], float]],
                                                                               list[Any] | None]:
        """Run ``fused`` (`fused_group`'s, of ``nodes``) as one stage; commit each output array
        and operator in order (each bound to the arrays it read, committed by then).  Returns
        each node's tiles' metadata and wall, and the first-pass summaries of the node after
        them (None: no `FusedStage.prepare`)."""
        done, summaries = fused.run(self.runner, self.progress)
        out = []
        for node, member in zip(nodes, done):
            self.operators[node.name] = member.stage.operator
            # committed through the stage that ran (its chunks' codec is in the tiles' metadata)
            committed = member.commit_array(written_behind=self._written_behind(node.name), why=self.why(node.name))
            self.arrays[node.name] = self._persist(node.name, committed, member.metas)
            if member.stage.output_shape == committed.shape:  # its commit's stage: the one that ran, reading refs
                stage = replace(member.stage, inputs=tuple(self.ref(i.name) for i in node.inputs))
                self._stages[node.name] = (self._stage_key(node, member.stage.operator), stage)
            out.append((member.metas, member.wall))
        return out, summaries

    def capture(self, node: Node, strategies: tuple[Strategy, ...]) -> tuple[list[TileMeta], float]:
        """Re-run a computed node's tiles to capture lineage (its output is already stored)."""
        done = self.stage(node).run(self.runner, strategies, write_output=False, progress=self.progress)
        return done.metas, done.wall

    def commit(self, node: Node, strategies: tuple[Strategy, ...], metas: list[TileMeta], wall: float,
               extra: dict | None = None, measured: dict | None = None,
               arrays: dict[str, str] | None = None) -> NodeRecord:
        """Commit the node: the manifest of its shards (within the disk budget), then its catalog entry.

        ``measured`` (`_measured` of the tiles that computed the node) stands in for ``metas``
        in the statistics of a node whose lineage was not captured in this pass.  ``arrays``:
        the policy's choice for unstored arrays (`settle_arrays`), settled before the node's
        inputs are released.
        """
        stage = self.stage(node)
        manifest = stage.manifest(strategies, metas)
        lineage = lineage_metrics(manifest)
        dropped = self._fit_budget(lineage["bytes"])
        kept = tuple(s.name for s in strategies if s.name not in dropped) or ("BlackBox",)
        start = time.perf_counter()
        if any(s.mode in (Mode.PAY, Mode.COMP) for s in strategies if s.name in kept):
            self._store_read_back(node)
        if dropped:  # the manifest and its statistics without them
            manifest = Manifest(node.name, {s: recs for s, recs in manifest.shards.items() if s not in dropped},
                                {s: b for s, b in manifest.inline.items() if s not in dropped})
            lineage = lineage_metrics(manifest)
        if any(s.stored for s in strategies):  # a node storing no lineage has no manifest to read
            self.store.write_manifest(manifest)
        if self.disk_left is not None:
            self.disk_left -= sum(lineage["bytes"].values())
            self._charge_kept(node.name)
        measured = measured or _measured(metas, wall)
        stats = NodeMetrics(tiles=measured["tiles"], wall_seconds=wall, op_seconds=measured["op_seconds"],
                            lineage_seconds=measured["lineage_seconds"],
                            write_seconds=measured["write_seconds"] + time.perf_counter() - start, **lineage)
        extra = dict(extra or {})
        record = NodeRecord(
            node.name, "operator", self.arrays[node.name], strategies=kept,
            reason=extra.pop("reason", ""), stats=stats,
            dropped={s: "over the disk budget at run time" for s in dropped},
            tile_shape=stage.record_tile_shape, **extra)
        self._commit_record(record)
        if any(s.stored for s in strategies):  # its shards not in the manifest (dropped, retried) go
            self.store.remove_uncommitted(node.name, manifest)
        self.settle_arrays(arrays or {})
        self._release(node)
        return record

    def _store_read_back(self, node: Node) -> None:
        """A node whose stored payloads name cells of its own output (`Label`'s components, read
        back at query time through ``attach_output``) has that output stored: held in memory,
        it is written now, so a query reads it instead of recomputing it."""
        if hasattr(self.operator(node), "attach_output"):
            self._store_held(node.name, "stored: its stored lineage reads it back (its components)")

    def _charge_kept(self, name: str) -> None:
        """An intermediate ``keep=`` stores counts against the disk budget (uncompressed, as the
        optimizer's stored arrays do); past it, the run stops with what to change."""
        record = self.arrays[name]
        if not record.stored or self.kept.get(name) not in (KEPT_ALL, KEPT_NAMED) or self.disk_left is None:
            return
        self.disk_left -= record.nbytes
        self._kept_bytes += record.nbytes
        if self.disk_left < 0:
            raise WorkflowError(
                f"the intermediate arrays keep= stores need {self._kept_bytes} bytes so far (uncompressed; "
                f"{name!r} the last), over the disk budget max_disk, which lineage and stored intermediates share; "
                "raise max_disk, keep fewer arrays, or leave keep= out and let the optimizer choose")

    def _store_held(self, name: str, why: str) -> None:
        """Write the unstored array ``name`` from memory, if it is still held (its catalog entry
        too, when committed); its bytes count against the disk budget."""
        held, record = self.held.get(name), self.arrays.get(name)
        if held is None or held.block is None or record is None or record.stored:
            return
        if isinstance(self.store, BehindStore):  # queued, as the compressor "auto" would choose
            compressor = held.compressor if held.compressor != "auto" else sampled_compressor(held.block, record.chunks)
            meta_xxh3 = self.store.write_array(name, held.block, record.chunks, compressor)
        else:
            write_array(self.store.array(name), held.block, record.chunks, held.compressor)
            meta_xxh3 = self.store.array_meta_checksum(name)
        self._set_array(name, replace(record, meta_xxh3=meta_xxh3, stored=True, why=why))
        if self.disk_left is not None:
            self.disk_left -= held.nbytes

    def _set_array(self, name: str, record: ArrayRecord) -> None:
        self.arrays[name], self._why[name] = record, record.why
        entry = self.catalog.nodes.get(name)
        if entry is not None:
            self._commit_record(replace(entry, array=record))

    def unstored_arrays(self, node: Node) -> dict[str, Any]:
        """The committed arrays this run did not store that re-running ``node`` recomputes (its
        unstored inputs and theirs), as the optimizer prices them (`subzero.optimizer.storage.
        array_choices`: measured operator time; those still held in memory may be stored)."""
        from subzero.optimizer.storage import array_choices

        unstored = {name: float(getattr(self.catalog.nodes[name].stats, "op_seconds", 0.0) or 0.0)
                    for name, record in self.arrays.items() if not record.stored and name in self.catalog.nodes}
        held = {name: h.nbytes for name, h in self.held.items() if name in unstored and h.block is not None}
        return array_choices({n.name: [i.name for i in n.inputs] for n in self.wf.nodes}, unstored, held,
                             [i.name for i in node.inputs])

    def settle_arrays(self, arrays: dict[str, str]) -> None:
        """A policy's choice for unstored arrays (name -> why): those whose why says "stored"
        are written from memory (`_store_held`), the others keep its reason."""
        for name, why in arrays.items():
            record = self.arrays.get(name)
            if record is None or record.stored:
                continue
            if why.startswith("stored"):
                self._store_held(name, why)
            elif name not in self._destinations or self._destinations[name] is not DISCARD:
                self._set_array(name, replace(record, why=why))

    def _commit_record(self, record: NodeRecord) -> None:
        """The node is committed: the catalog gains its record (written at once, or with the next
        nodes' when less than ``commit_seconds`` passed since the last write: a resume then re-runs
        at most that much work; the run's end writes it in any case)."""
        self.catalog = self.catalog.with_node(record)
        if time.perf_counter() - self._written_at >= self._commit_every:
            self.write_catalog()

    def write_catalog(self, catalog: RunRecord | None = None) -> None:
        """Write the catalog as it stands (or ``catalog``) to the store (with every input's digest)."""
        self.store.write_catalog(self.digested(catalog))
        self._written_at = time.perf_counter()

    def _fit_budget(self, sizes: dict[str, int]) -> list[str]:
        """Drop the largest strategies until the node fits in what is left of the budget."""
        if self.disk_left is None:
            return []
        left = dict(sizes)
        dropped = []
        while left and sum(left.values()) > self.disk_left:
            worst = max(left, key=lambda s: left[s])
            dropped.append(worst)
            del left[worst]
        return dropped




def _input_tiles(shape: tuple[int, ...], chunks: tuple[int, ...]) -> list[Tile]:
    return tile_grid(shape, tuple(range(len(shape))), chunks)


def _measured(metas: list[TileMeta], wall: float) -> dict[str, float]:
    """What a node's tiles measured, summed (kept in the plan for the nodes phase 2 does not re-run)."""
    return {"tiles": sum(m.covers for m in metas), "wall": wall, "op_seconds": sum(m.op_seconds for m in metas),
            "lineage_seconds": sum(m.lineage_seconds for m in metas),
            "write_seconds": sum(m.write_seconds for m in metas)}


def _not_the_same(store: RunWriter, differ: list[str]) -> str:
    return (f"cannot resume the run in {store.url!r}: this run differs from the stored one in {'; '.join(differ)}. "
            "Run it into a new store, or replace the old one with overwrite=True (--overwrite)")


def _strategies(names: Sequence[str]) -> tuple[Strategy, ...]:
    """Strategy names (pinned, defaults, or the catalog's plan, on read) parsed once, for a node's stage."""
    return tuple(Strategy.parse(n) for n in names)


@dataclass(frozen=True)
class RunOptions:
    """How to run a workflow: `execute`'s options, one typed record (`Workflow.run` builds it
    from its keywords, which it documents and which are its fields; the command line from its
    flags).  ``made_by`` alone is not a keyword of `Workflow.run`: kept in the store's marker
    (``subzero demo`` rebuilds only the stores it made)."""

    store: Any
    strategies: Any = None
    max_disk: Any = None
    max_runtime: Any = None
    workload: Any = None
    executor: str = "spark"
    spark: Any = None
    tile_shape: Any = None
    overwrite: bool = False
    resume: bool = False
    progress: Reporter | None = None
    input_metadata: dict | None = None
    made_by: str | None = None
    storage_options: dict | None = None
    keep: Any = "needed"
    #: node name -> (its values, the seconds computing them took), computed by the trace that made the
    #: workflow over these very inputs (`subzero.trace.traced.TracedWorkflow.run`): a local run with a
    #: fixed choice of strategies stores them instead of computing those nodes again (`_Execution.reuse`);
    #: private, as ``Workflow.run``'s ``_known``
    _known: Any = field(default=None, repr=False, compare=False)
    #: input name -> a `subzero.fingerprint.CopyBeside` of the very array given, started early (a traced
    #: function's run starts them before its trace): a run written behind stores those; private
    _copies: Any = field(default=None, repr=False, compare=False)


def kept_arrays(wf: Workflow, keep: Any = "needed", queries: Sequence[Any] = ()) -> dict[str, str]:
    """The nodes whose arrays a run stores, each with why: the inputs, the workflow's outputs
    (the nodes no other node reads), the nodes the workload's queries start or end at, and
    ``keep``'s; the other intermediates are not stored (their reads recompute them).

    Parameters
    ----------
    wf : Workflow
        The workflow.
    keep : "needed", "all", or node names
        ``"all"`` stores every array; a list of nodes (or names) stores those as well.
    queries : sequence
        The parsed workload (`subzero.optimizer.workload.parse_workload`).

    Raises
    ------
    WorkflowError
        ``keep`` is neither of the two words nor nodes of ``wf``.
    """
    kept = {n.name: "stored: an input" for n in wf.inputs}
    kept.update((n.name, "stored: an output of the workflow") for n in wf.outputs)
    for q in queries:
        for name in _query_nodes(q):
            kept.setdefault(name, "stored: the workload queries it")
    if isinstance(keep, str) and keep in ("needed", "all"):
        if keep == "all":
            for n in wf.nodes:
                kept.setdefault(n.name, KEPT_ALL)
        return kept
    if isinstance(keep, (str, Node)) or not hasattr(keep, "__iter__"):
        keep = [keep]
    for ref in keep:
        if not isinstance(ref, (str, Node)):
            raise WorkflowError(f"keep={keep!r}: give 'needed' (the default), 'all', or a list of nodes or node names")
        kept.setdefault(wf.node(ref).name, KEPT_NAMED)
    return kept


def _query_nodes(query: Any) -> list[str]:
    """The node names a parsed workload query names (its start and its ends)."""
    names = []
    for attr in ("node", "start", "source", "target", "to"):
        value = getattr(query, attr, None)
        for v in value if isinstance(value, (list, tuple)) else [value]:
            name = getattr(v, "name", v)
            if isinstance(name, str):
                names.append(name)
    return names


def _same_view(value: np.ndarray, source: np.ndarray, copy: np.ndarray | None) -> np.ndarray | None:
    """``value``, a view of the caller's ``source`` (a reshape, a slice, a transpose), as the same
    view of ``copy`` (the C-ordered copy of ``source`` a run behind its return holds), read-only;
    None when it is not one (another dtype, cells outside ``source``): the caller then copies it.

    Examples
    --------
    >>> x = np.arange(12.0).reshape(3, 4); c = x.copy()
    >>> v = _same_view(x[::-1, 1:3].T, x, c)
    >>> np.shares_memory(v, c) and np.array_equal(v, x[::-1, 1:3].T)
    True
    """
    if copy is None or value.dtype != source.dtype or not source.flags.c_contiguous or \
            copy.shape != source.shape or not copy.flags.c_contiguous:
        return None
    from numpy.lib.array_utils import byte_bounds

    low, high = byte_bounds(value)
    start, end = byte_bounds(source)
    offset = value.__array_interface__["data"][0] - start
    if low < start or high > end or offset % source.itemsize:
        return None
    flat = copy.reshape(-1)[offset // source.itemsize:]
    return np.lib.stride_tricks.as_strided(flat, shape=value.shape, strides=value.strides, writeable=False)


def execute(wf: Workflow, inputs: dict[str, Any], options: RunOptions) -> Any:
    """Run ``wf`` on ``inputs`` as ``options`` say, into a new store (or continue the run in
    it: ``options.resume``); see `Workflow.run`.

    Returns
    -------
    subzero.run.Run
        The finished run, holding its own bound graph (``wf`` is not changed).
    """
    with config.once():  # the settings it reads per node and per tile: resolved once
        return _execute(wf, inputs, options)


def _execute(wf: Workflow, inputs: dict[str, Any], options: RunOptions) -> Any:
    from subzero.optimizer.budgets import parse_disk_budget, parse_runtime_budget
    from subzero.optimizer.workload import parse_workload, workload_record
    from subzero.run import Run
    from subzero.store.location import resolve

    store, strategies, max_disk, max_runtime = options.store, options.strategies, options.max_disk, options.max_runtime
    workload, executor, spark, tile_shape = options.workload, options.executor, options.spark, options.tile_shape
    overwrite, resume, made_by = options.overwrite, options.resume, options.made_by
    progress = options.progress or Reporter()
    if overwrite and resume:
        raise WorkflowError("give resume=True (continue the run in the store) or overwrite=True (replace it), "
                            "not both")
    arrays = _check_inputs(wf, inputs)
    input_metadata = _check_metadata(wf, options.input_metadata)
    pinned = resolve_pinned(wf, strategies)
    _check_tile_shape(tile_shape)
    queries = parse_workload(wf, workload, static_shapes(wf, arrays, strict=True))  # before the store exists
    workload = workload_record(wf, workload)  # names and ints: JSON for the catalog and the fingerprint
    input_bytes = int(sum(int(np.prod(a.shape, dtype=np.int64)) * a.dtype.itemsize for a in arrays.values()))
    disk_budget = parse_disk_budget(max_disk, input_bytes)
    parse_runtime_budget(max_runtime, 1.0)  # reject a malformed budget before anything runs
    location = resolve(store, options.storage_options)
    check_executor(executor, location.url)
    executor = _in_process_if_tiny(executor, spark, input_bytes, progress)
    operators = [n for n in wf.nodes if not n.is_input]
    kept = kept_arrays(wf, options.keep, queries)
    optimized = bool(queries or max_disk is not None or max_runtime is not None) and \
        any(n.name not in pinned for n in operators)
    settings = {"tile_shape": list(tile_shape) if isinstance(tile_shape, tuple) else tile_shape,
                "pinned": {k: list(v) for k, v in sorted(pinned.items())}, "workload": workload,
                "max_disk": max_disk, "max_runtime": max_runtime}
    if options.keep != "needed":  # the default leaves the fingerprint of older stores' runs as it was
        settings["keep"] = sorted(kept)
    spec = wf.to_dict()
    fingerprint = run_fingerprint(wf, settings, spec)
    catalog = RunRecord(
        workflow=spec, created=_now(),
        executor=executor, tile_shape=list(tile_shape) if isinstance(tile_shape, tuple) else tile_shape,
        pinned={k: list(v) for k, v in pinned.items()}, input_bytes=input_bytes,
        workload=workload if isinstance(workload, list) else None,
        budgets={"max_disk": max_disk, "max_runtime": max_runtime}, fingerprint=fingerprint)
    # exclusive, before Spark starts: a second writer is refused at once
    storage_retry.begin()  # the run's storage failure budget starts now
    wait_for_writes(location.url)  # an earlier run of this process may still be writing this store behind it
    fs: RunWriter
    behind = int(config.get("write_behind_mb") * 2**20) if executor == "local" and location.is_local and \
        config.get("write_behind") else None  # written by a thread of its own
    hold = config.get("commit_seconds")  # ... which leaves the cores to the run as long as its catalog may lag
    if resume:
        fs, stored = resume_run(location, catalog, made_by)
        fs = BehindStore(fs, behind, hold) if behind is not None else fs
    else:  # written behind: the first catalog too
        fs, stored = create_run(location, catalog, overwrite=overwrite, made_by=made_by, behind=behind,
                                hold=hold), None
    failed: BaseException | None = None
    handed = False  # the rest of the run continues behind its return (`_finish_behind`), which closes the store
    try:
        if stored is not None:
            if not stored.fingerprint:
                raise StoreError(f"cannot resume the run in {fs.url!r}: its catalog has no fingerprint (it was "
                                 "made by an older subzero); replace it with overwrite=True (--overwrite)")
            differ = differences(stored.fingerprint, fingerprint)
            if differ:
                raise StoreError(_not_the_same(fs, differ))
        run = _Execution(wf, fs, stored or catalog, lambda: make_executor(executor, spark), tile_shape, disk_budget,
                         progress, kept, in_memory=executor == "local", known=None if resume else options._known,
                         copies=options._copies)
        started = time.perf_counter()
        if stored is not None:
            run.prepare_resume(arrays, clean=stored.status != "done")
            if stored.status == "done":  # nothing left to do
                return Run(open_store(location), wf, operators=run.operators)
            run.catalog = replace(run.catalog, status="running", resumed=[*run.catalog.resumed, _now()])
            run.write_catalog()
        if executor == "spark" and operators and (spark is not None or not _starts_spark()):
            run.runner.warm_up()  # a session is there: its workers start while the driver stores the inputs
        finish = functools.partial(_finish, run, arrays, input_metadata, operators, pinned, queries, max_runtime,
                                   optimized, started)
        if stored is None and isinstance(fs, BehindStore) and not optimized and _finishes_behind(run, operators, arrays):
            returned = _return_before(run, fs, location, wf, arrays, finish)
            handed = True
            return returned
        final = finish()
        if isinstance(fs, BehindStore):  # its queries wait for the writes; the catalog as it will be read back;
            # made before the writes are let go (close), so they do not take the interpreter from it
            returned = Run(cast(Any, AfterWrites(open_store(location, wait=False), fs.behind)), wf,
                           catalog=final.as_read(),
                           operators=run.operators)
    except BaseException as exc:
        failed = exc
        raise
    finally:
        if not handed:
            _close(fs, failed)
    if isinstance(fs, BehindStore):
        return returned
    return Run(open_store(location), wf, operators=run.operators)


def _finish(run: _Execution, arrays: dict[str, Any], input_metadata: dict[str, dict], operators: list[Node],
            pinned: dict[str, tuple[str, ...]], queries: Any, max_runtime: Any, optimized: bool,
            started: float) -> RunRecord:
    """The run from its inputs on: store the inputs, run the loop, write the final catalog (status
    "done") and return it; a failure marks the catalog "failed" first (as far as the store lets it)."""
    try:
        for node in run.wf.inputs:
            if node.name not in run.catalog.nodes:
                run.save_input(node, arrays[node.name], input_metadata.get(node.name))
        pending = run.catalog.pending() if optimized else None
        policy: Policy = PendingPolicy(pending) if pending is not None else \
            OnlinePolicy(run, pinned, queries, max_runtime) if optimized else FixedPolicy(operators, pinned)
        _run_nodes(run, operators, policy)
    except BaseException as exc:
        if isinstance(exc, (KeyboardInterrupt, StorageUnavailable)):  # tiles still waiting on the store stop
            storage_retry.abandon("the run was interrupted" if isinstance(exc, KeyboardInterrupt) else str(exc))
        with storage_retry.cleanup_window():  # after an outage: bounded by lock_release_timeout
            try:
                run.write_catalog(replace(run.catalog, status="failed"))
            except OSError:  # the store itself failed (disk full, gone): the error that did it is the one to show
                pass
        raise
    final = replace(run.digested(), status="done", wall_seconds=time.perf_counter() - started)
    run.write_catalog(final)
    return final


def _close(fs: RunWriter, failed: BaseException | None) -> None:
    """Give up the store's writer lock at the run's end (``failed``: what stopped it, if anything; a
    failed run written behind leaves its store settled)."""
    with storage_retry.cleanup_window():
        try:
            fs.close()
        except OSError as exc:  # the store failing (an outage): the error that stopped the run is the one to show
            if failed is None:
                raise
            if isinstance(failed, StorageUnavailable):
                failed.cleanup = _one_line(exc)
        else:
            if isinstance(failed, StorageUnavailable):
                failed.cleanup = "the writer lock was released"
    if failed is not None and isinstance(fs, BehindStore):
        fs.behind.settle()


def _finishes_behind(run: _Execution, operators: Sequence[Node], arrays: dict[str, Any]) -> bool:
    """Whether a new run written behind (`BehindStore`, planned by no optimizer) may continue behind
    its return: its trace computed every operator's values (`_Execution.known`), each one the run
    takes as it is (`_Execution.reuse`: not an object array, no ``np.errstate(...="raise")``), so
    nothing is left to compute that could fail on values; every input is a numpy array whose copy
    is being made beside the run (`RunOptions._copies`) and that is held, not written by tiles (or
    a constant the trace captured, `Workflow.constants`: a copy the trace owns);
    every operator is subzero's own (pickled behind the run in any case: a user's operator class is
    pickled in the caller's thread, so one that cannot be is said at once)."""
    known = run.known
    if not operators or any(n.name not in known for n in operators):
        return False
    for node in operators:
        op = node.operator
        value = known[node.name][0]
        if not type(op).__module__.startswith("subzero.") or \
                (value if isinstance(value, np.dtype) else value.dtype).hasobject or \
                "raise" in (getattr(op, "errstate", None) or {}).values():
            return False
    for name, value in arrays.items():
        if value is run.wf.constants.get(name):  # an array the trace captured: a copy of its own already
            continue
        copied = run.copies.get(name)
        if not isinstance(value, np.ndarray) or copied is None or value.nbytes > run._behind_limit or \
                not copied.of(value, default_chunks(tuple(int(n) for n in value.shape))):
            return False
    return True


def _return_before(run: _Execution, fs: BehindStore, location: Any, wf: Workflow, arrays: dict[str, Any],
                   finish: Callable[[], RunRecord]) -> Any:
    """Hand the rest of the run (``finish``: storing the inputs, the run loop taking the trace's
    values, lineage capture, commits, the final catalog, then giving up the store) to a thread of its
    own, and return its `subzero.run.Run` at once: its record, graph and queries wait for that thread
    on first use, `Run.wait` until the store is durable.  The caller may change its arrays once this
    returns: their copies are waited for here, the run holds those (`_Execution.detach`)."""
    from subzero.run import Run

    run.detach(arrays)
    finishing: Future[tuple[RunRecord, dict[str, Operator]]] = Future()
    returned = Run(cast(Any, AfterWrites(open_store(location, wait=False), fs.behind)), wf, finishing=finishing)
    fs.behind.produce(functools.partial(_finish_behind, run, fs, finish, finishing), f"subzero-run-behind {fs.url}")
    return returned


def _finish_behind(run: _Execution, fs: BehindStore, finish: Callable[[], RunRecord],
                   finishing: "Future[tuple[RunRecord, dict[str, Operator]]]") -> None:
    """The rest of a run that returned before it (`_return_before`), on its own thread: its catalog
    and operators go to the returned `Run` (``finishing``); a failure too, and to the writer's
    `WriteBehind.wait` (`Run.wait`, every query), which says how to resume the store it left."""
    failed: BaseException | None = None
    try:
        final = finish()
        finishing.set_result((final.as_read(), run.operators))
    except BaseException as exc:
        failed = exc
        finishing.set_exception(exc)
        raise
    finally:
        _close(fs, failed)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


# Settings (`subzero.config`) read here: ``fuse``: consecutive per-tile nodes that store no
# lineage run as one stage (`_Execution.fused_group`): a job, not one per node, and no intermediate
# written and read back in between (SUBZERO_FUSE=0 runs every node as its own stage);
# ``in_process_bytes``: inputs of at most this many bytes in all run in-process (the local
# executor) when Spark would have to start for them: its JVM costs seconds, the run milliseconds;
# the answers are the same (one runtime runs the tiles either way); 0 turns it off.


def _in_process_if_tiny(executor: str, spark, input_bytes: int, progress: Reporter) -> str:
    """``"local"`` for a Spark run on tiny inputs that would start its own embedded session
    (the run's catalog, `subzero info` and the progress report say so); else ``executor``."""
    limit = config.get("in_process_bytes")
    if executor != "spark" or spark is not None or input_bytes > limit:
        return executor
    from subzero.executors.spark import would_start_embedded

    if not would_start_embedded():
        return executor
    progress.note(f"inputs are tiny ({input_bytes} bytes <= {limit}, SUBZERO_IN_PROCESS_BYTES): "
                  "running in-process on the local executor instead of starting Spark")
    return "local"


def _starts_spark() -> bool:
    """Whether making the Spark executor now would start a new embedded session."""
    from subzero.executors.spark import would_start_embedded

    return would_start_embedded()


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def static_shapes(wf: Workflow, arrays: dict[str, Any], strict: bool = False) -> dict[str, tuple[int, ...]]:
    """The shapes known before anything runs: the inputs', and those operators infer from them.

    With ``strict``, an operator that refuses its input shapes (a `WorkflowError` from
    ``infer_output_shape``: shapes that do not broadcast, a wrong axis) is an error naming the
    node, raised before any store exists; otherwise the mismatch is left for when the node is
    bound.
    """
    shapes = {name: tuple(int(n) for n in a.shape) for name, a in arrays.items()}
    for node in wf.nodes:
        if node.is_input or any(i.name not in shapes for i in node.inputs):
            continue
        try:
            shape = node.operator.infer_output_shape(tuple(shapes[i.name] for i in node.inputs))
        except WorkflowError as exc:
            if strict:
                raise WorkflowError(f"node {node.name!r} ({type(node.operator).__name__}): {exc}; nothing was "
                                    "stored") from exc
            continue
        except Exception:  # a mismatch is reported, with its node, when the node is bound
            continue
        if shape is not None:
            shapes[node.name] = tuple(int(n) for n in shape)
    return shapes


def _check_metadata(wf: Workflow, metadata) -> dict[str, dict]:
    """``input_metadata``: input name -> a JSON-able dict kept in the input's catalog record
    (e.g. the FITS header of an image read from a file)."""
    if metadata is None:
        return {}
    import json

    names = {n.name for n in wf.inputs}
    if not isinstance(metadata, dict) or not all(isinstance(v, dict) for v in metadata.values()):
        raise WorkflowError("input_metadata must be a dict of input name -> dict")
    unknown = sorted(set(metadata) - names)
    if unknown:
        raise WorkflowError(f"input_metadata names {unknown}, which are not inputs of workflow {wf.name!r} "
                            f"(its inputs: {sorted(names)})")
    try:
        json.dumps(metadata)
    except (TypeError, ValueError) as exc:
        raise WorkflowError(f"input_metadata must be JSON-serializable ({exc})") from None
    return metadata


def _check_tile_shape(tile_shape) -> None:
    if tile_shape is None:
        return
    values = [tile_shape] if isinstance(tile_shape, (int, np.integer)) else tile_shape
    try:
        ok = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1 for v in values)
    except TypeError:
        ok = False
    if not ok:
        raise WorkflowError(f"tile_shape must be a positive int or a tuple of positive ints (cells per tile along "
                            f"each axis), got {tile_shape!r}")


@dataclass(frozen=True)
class _Computed:
    """A node's output computed in this run (its tiles' metadata and wall), or by an older
    two-phase run's first phase (no metadata: ``measured`` stands in for it)."""

    metas: list[TileMeta]
    wall: float
    measured: dict | None = None


@dataclass(frozen=True)
class _Choice:
    """What a policy chose for a node: the strategies it stores, and its catalog entry's extras
    (``reason``, predictions, ...)."""

    strategies: tuple[Strategy, ...]
    extra: dict[str, Any] = field(default_factory=dict)
    #: unstored arrays -> why they are stored now ("stored: ...") or stay unstored (`_Execution.settle_arrays`)
    arrays: dict[str, str] = field(default_factory=dict)
    #: the node's first tiles, computed by its calibration (`subzero.optimizer.calibrate.FirstTiles`):
    #: `_Execution.compute` runs only the others
    first: Any = None


class Policy:
    """Chooses each node's strategies for `_run_nodes`, the one run loop: a fixed choice (pins
    and defaults: `FixedPolicy`), the online optimizer (`OnlinePolicy`), or an older store's
    two-phase plan (`PendingPolicy`).  A policy says what it fuses and chooses; the other
    steps do nothing unless it overrides them."""

    #: whether a node whose values the trace computed is stored from them (`_Execution.reuse`)
    #: instead of computed: a policy whose choice does not depend on running the node
    reuses_values = False

    def fusable(self, nodes: Sequence[Node]) -> list[tuple[Node, tuple[Strategy, ...]]]:
        """The leading ``nodes`` a fused stage may compute, each with the strategies it stores
        whatever the policy chooses later (`_Execution.fused_group` fuses a prefix of them)."""
        raise NotImplementedError

    def computed_before(self, run: _Execution, node: Node) -> _Computed | None:
        """The node's output as an earlier run computed it (None: this run computes it)."""
        return None

    def computes_first(self, stage: NodeStage) -> bool:
        """Whether the node is computed without lineage before `choose` (only running tells
        its shape, or its tiles need its first pass); its lineage is captured after."""
        return False

    def committed(self, name: str, record: NodeRecord) -> None:
        """A node committed before this run was resumed."""

    def choose(self, run: _Execution, node: Node, stage: NodeStage, computed: _Computed | None) -> _Choice:
        """The node's strategies (``computed``: its output, when computed already)."""
        raise NotImplementedError

    def ran(self, run: _Execution, node: Node, choice: _Choice, computed: _Computed) -> dict[str, Any]:
        """The node ran as ``choice`` says: account for it; the catalog entry's further extras."""
        return {}

    def finish(self, run: _Execution) -> None:
        """Every node is committed."""


class FixedPolicy(Policy):
    """The strategies the user pinned, else each node's default (`subzero.strategies`)."""

    reuses_values = True

    def __init__(self, operators: Sequence[Node], pinned: dict[str, tuple[str, ...]]):
        self.pinned = pinned
        self.chosen = {n.name: _strategies(pinned.get(n.name) or default_strategies(n)) for n in operators}

    def fusable(self, nodes: Sequence[Node]) -> list[tuple[Node, tuple[Strategy, ...]]]:
        return [(n, self.chosen[n.name]) for n in nodes]

    def choose(self, run: _Execution, node: Node, stage: NodeStage, computed: _Computed | None) -> _Choice:
        chosen = self.chosen[node.name]
        return _Choice(chosen, {"reason": "pinned" if node.name in self.pinned else "default"},
                       _default_stores(run, node, stage, chosen))


class PendingPolicy(Policy):
    """Phase 2 of an older subzero's two-phase run, resumed from its catalog (its plan:
    `catalog.PendingNode` records): every node phase 1 computed captures the lineage its plan
    stores."""

    def __init__(self, pending: dict[str, PendingNode]):
        self.pending = pending

    def fusable(self, nodes: Sequence[Node]) -> list[tuple[Node, tuple[Strategy, ...]]]:
        return []  # every node's output is stored already

    def computed_before(self, run: _Execution, node: Node) -> _Computed | None:
        item = self.pending[node.name]
        return _Computed([], item.measured["wall"], item.measured)

    def choose(self, run: _Execution, node: Node, stage: NodeStage, computed: _Computed | None) -> _Choice:
        item = self.pending[node.name]
        return _Choice(tuple(item.strategies), dict(item.extra))

    def finish(self, run: _Execution) -> None:
        optimizer = {k: v for k, v in (run.catalog.optimizer or {}).items() if k != "pending"}
        run.catalog = replace(run.catalog, optimizer=optimizer)


@dataclass
class OptimizerState:
    """The online optimizer's running sums over the nodes planned so far (kept in the catalog's
    ``optimizer`` record, so a resumed run goes on from them)."""

    base_seconds: float = 0.0  #: the operators' measured time: the base of relative runtime budgets
    calibration_seconds: float = 0.0
    solve_seconds: float = 0.0
    objective: float = 0.0
    predicted_disk: float = 0.0
    predicted_runtime: float = 0.0
    status: str = "optimal"
    pins_over_budget: str = ""
    max_disk: Any = None  #: the disk budget in bytes, as the run began

    SUMS = ("base_seconds", "calibration_seconds", "solve_seconds", "objective", "predicted_disk",
            "predicted_runtime")

    @classmethod
    def from_record(cls, record: dict[str, Any], max_disk: Any) -> "OptimizerState":
        """The state a catalog's ``optimizer`` record holds (empty: a new run's)."""
        sums = {k: float(record.get(k) or 0.0) for k in cls.SUMS}
        return cls(**sums, status=record.get("status", "optimal"),
                   pins_over_budget=record.get("pins_over_budget", ""),
                   max_disk=record.get("max_disk_bytes", max_disk))

    def to_record(self, max_runtime_seconds: float | None) -> dict[str, Any]:
        """The catalog's ``optimizer`` record (the same keys, in the same order, as ever)."""
        return {**{k: getattr(self, k) for k in self.SUMS}, "status": self.status, "max_disk_bytes": self.max_disk,
                "max_runtime_seconds": max_runtime_seconds, "pins_over_budget": self.pins_over_budget,
                "one_pass": True}


class OnlinePolicy(Policy):
    """The optimizer, planning each node in one pass once its inputs are committed.

    In topological order: the node is calibrated on sample windows of its stored inputs
    (`subzero.optimizer.calibrate.profile_node`, its operator time estimated from them) or, run
    in this process with nothing pinned, from its own first tiles, which the run then keeps
    (`subzero.optimizer.calibrate.profile_first`, `_from_first_tiles`), its
    strategies chosen by the integer program over its own candidates, with the fans of the
    nodes profiled so far, the disk left and the runtime budget left (a ``"2x"`` budget is
    relative to the operators' time measured on the nodes computed so far plus this node's
    estimate; what earlier nodes did not spend carries over); the node then runs once, storing
    what was chosen, and commits with its explanation (reason, predictions, profile).  The
    budgets and sums are an `OptimizerState`, kept in the catalog's ``optimizer`` record, so a
    resumed run goes on from the first node not committed.
    """

    def __init__(self, run: _Execution, pinned: dict[str, tuple[str, ...]], queries, max_runtime):
        from subzero.optimizer.workload import step_sizes

        self.pinned, self.queries, self.max_runtime = pinned, queries, max_runtime
        self.access, _ = step_sizes(run.wf, queries, lambda node, direction, cells: cells)  # who is queried, which way
        self.state = OptimizerState.from_record(dict(run.catalog.optimizer or {}), run.disk_left)
        self.profiles: dict[str, Any] = {}  # node name -> its NodeProfile: the fans the integer program plans with
        self._planned: dict[str, Any] = {}  # node name -> (profile, budget) until it commits
        self._fans: dict[tuple, tuple[float, float]] = {}  # mapping fans per operator and shapes (calibrate)
        self._first: Any = None  # the tiles the node being chosen for had computed by its calibration

    def fusable(self, nodes: Sequence[Node]) -> list[tuple[Node, tuple[Strategy, ...]]]:
        """The leading nodes whose every candidate stores nothing (Map or BlackBox: whatever the
        integer program picks, the run is the same), and a two-pass node after them (its first
        pass); they are planned after, from their measured time."""
        lead: list[tuple[Node, tuple[Strategy, ...]]] = []
        for node in nodes:
            strategies = _strategies(_candidates(node, self.pinned, self.access))
            if any(s.stored for s in strategies):
                if node.operator is not None and node.operator.two_pass:
                    lead.append((node, ()))
                break
            lead.append((node, strategies))
        return lead

    def computes_first(self, stage: NodeStage) -> bool:
        return stage.output_shape is None or stage.operator.two_pass

    def committed(self, name: str, record: NodeRecord) -> None:
        from subzero.optimizer.cost_model import NodeProfile

        if record.profile:  # its profile, for the fans
            self.profiles[name] = NodeProfile.from_dict(record.profile)

    def choose(self, run: _Execution, node: Node, stage: NodeStage, computed: _Computed | None) -> _Choice:
        self._first = None
        try:
            return self._choose(run, node, stage, computed)
        except BaseException:
            if self._first is not None:  # the tiles its calibration computed hold lineage never to be written
                release_pending(self._first.task)
            raise

    def _choose(self, run: _Execution, node: Node, stage: NodeStage, computed: _Computed | None) -> _Choice:
        from subzero.optimizer.budgets import parse_runtime_budget
        from subzero.optimizer.calibrate import profile_first, profile_node, recall, remember
        from subzero.optimizer.cost_model import NodeProfile
        from subzero.optimizer.plan import node_choice, optimize

        state = self.state
        start = time.perf_counter()
        op = stage.operator
        first = None  # the node's first tiles, when its calibration computed them (`profile_first`)
        candidates = _candidates(node, self.pinned, self.access, op)
        op_seconds = None if computed is None else sum(m.op_seconds for m in computed.metas)
        if any(Strategy.parse(c).stored for c in candidates) or Mode.MAP in op.supported_modes():
            pins = self.pinned.get(node.name, ())
            limit = _capture_limit(self.max_runtime, state, pins)
            key = self._reuse_key(run, node, candidates, computed is None)
            measured = recall(key, limit, op_seconds) if key is not None else None
            fresh = measured is None

            def calibrate(bound: Sequence[str]) -> Any:
                sampled, scale = _calibration_stage(run, node, stage) if computed is None else (stage, 1.0)
                return profile_node(sampled.task(), list(sampled.tiles), candidates, op_seconds, runner=run.runner,
                                    scale=scale, limit=limit, bound=bound, fans=self._fans)

            def sized(p: Any) -> Any:
                return replace(p, tiles=len(stage.tiles), out_size=int(np.prod(op.output_shape)),
                               in_sizes=[int(np.prod(sh)) for sh in op.input_shapes])

            if measured is None and self._from_first_tiles(run, stage, candidates, pins, computed):
                sampled, scale = _calibration_stage(run, node, stage)  # where the FULL and PAY candidates are counted
                measured, first = profile_first(stage.task(_strategies(candidates), write_output=True),
                                                list(stage.tiles), sampled.task(), list(sampled.tiles), candidates,
                                                run.runner, scale=scale, limit=limit)
                self._first = first
            elif measured is None:  # FULL and PAY candidates counted first, encoded only if they could be chosen
                measured = calibrate([c for c in candidates if c not in pins])
            profile = sized(measured)
            if profile.bounds and self._bounds_matter(run, node, profile):
                measured, fresh = calibrate(()), True
                profile = sized(measured)
            if fresh and key is not None:
                remember(key, measured)
        else:  # queried by no query and nothing pinned: BlackBox whatever it measures
            profile = NodeProfile(node=node.name, tiles=len(stage.tiles), out_size=int(np.prod(op.output_shape)),
                                  in_sizes=[int(np.prod(sh)) for sh in op.input_shapes], all_to_all=op.all_to_all,
                                  op_seconds=op_seconds or 0.0, one_pass=computed is None)
        self.profiles[node.name] = profile
        # the first tiles' own computing is the node's, not calibration's
        state.calibration_seconds += time.perf_counter() - start - (first.wall if first is not None else 0.0)
        budget = parse_runtime_budget(self.max_runtime, state.base_seconds + profile.op_seconds)
        left = None if budget is None else max(budget - state.predicted_runtime, 0.0)
        mine = {node.name}
        arrays = run.unstored_arrays(node) if run.held else {}  # whether to store them is the program's too
        try:
            plan, problem = optimize(run.wf, self.profiles, self.queries, run.disk_left, left, self.pinned, mine,
                                     arrays)
        except WorkflowError as exc:  # pins alone break a budget: plan the rest, pins fall back at commit
            plan, problem = optimize(run.wf, self.profiles, self.queries, run.disk_left, left, {}, mine, arrays)
            state.pins_over_budget = str(exc)
        chosen, extra = node_choice(plan, problem, self.pinned, profile, node.name)
        picked = [c for c in problem.candidates if c.node == node.name and c.strategy in chosen]
        stored = [a for a in problem.arrays if a.node in plan.stored]
        state.predicted_disk += sum(c.disk for c in picked) + sum(a.disk for a in stored)
        state.predicted_runtime += sum(c.runtime for c in picked) + sum(a.runtime for a in stored)
        state.solve_seconds += plan.solve_seconds
        state.objective += plan.objective
        state.status = state.status if plan.status == "optimal" else plan.status
        self._planned[node.name] = (profile, budget)
        return _Choice(chosen, extra, dict(plan.array_reasons), first)

    @staticmethod
    def _from_first_tiles(run: _Execution, stage: NodeStage, candidates: Sequence[str], pins: Sequence[str],
                          computed: _Computed | None) -> bool:
        """Whether the node is calibrated from its own first tiles (`subzero.optimizer.calibrate.profile_first`:
        they run for real, the run computes only the others) instead of sample windows: a node planned
        before it runs (one pass, of known shape and tiles), with a stored candidate and none pinned,
        in this process (a local executor: its tiles' lineage can be held unwritten until the choice)."""
        op = stage.operator
        return (computed is None and not pins and not op.all_to_all and not op.two_pass
                and stage.output_shape is not None and all(t.box is not None for t in stage.tiles)
                and any(Strategy.parse(c).stored for c in candidates)
                and getattr(run.runner, "master", None) is None)

    def _bounds_matter(self, run: _Execution, node: Node, profile: Any) -> bool:
        """Whether the candidates ``profile`` holds at their lowest costs only (``bounds``) could be
        chosen under the budgets left (`subzero.optimizer.plan.bounds_matter`): then they are encoded."""
        from subzero.optimizer.budgets import parse_runtime_budget
        from subzero.optimizer.plan import bounds_matter

        budget = parse_runtime_budget(self.max_runtime, self.state.base_seconds + profile.op_seconds)
        left = None if budget is None else max(budget - self.state.predicted_runtime, 0.0)
        arrays = run.unstored_arrays(node) if run.held else {}
        return bounds_matter(run.wf, {**self.profiles, node.name: profile}, self.queries, run.disk_left, left,
                             self.pinned, node.name, arrays)

    def _reuse_key(self, run: _Execution, node: Node, candidates: Sequence[str], one_pass: bool) -> str | None:
        """The key of ``node``'s calibration (`subzero.optimizer.calibrate.reuse_key`): the digests of
        the workflow, of the node's operator and of every operator and input upstream of it, the
        executor, the tile shape, the candidates, the pins and whether it was computed first.  None:
        not reused (the ``reuse_calibration`` setting off, or a digest not known)."""
        from subzero.optimizer.calibrate import reuse_key

        if not config.get("reuse_calibration"):
            return None
        fingerprint = run.digested().fingerprint  # the inputs' digests, computed beside the run
        upstream, todo = set(), [node]
        while todo:
            n = todo.pop()
            if n.name not in upstream:
                upstream.add(n.name)
                todo.extend(n.inputs)
        parts: list[Any] = [fingerprint.get("workflow"), run.catalog.executor, run.catalog.tile_shape, node.name,
                            sorted(candidates), sorted(self.pinned.get(node.name, ())), one_pass]
        for name in sorted(upstream):
            kind = "input" if run.wf.node(name).is_input else "operator"
            digest = fingerprint.get(f"{kind}:{name}")
            if digest is None:
                return None
            parts.append(f"{kind}:{name}:{digest}")
        return reuse_key(parts)

    def ran(self, run: _Execution, node: Node, choice: _Choice, computed: _Computed) -> dict[str, Any]:
        profile, budget = self._planned.pop(node.name)
        op_measured = sum(m.op_seconds for m in computed.metas)
        # the workflow alone as measured so far (the operators' time, lineage apart): the next budget's base
        self.state.base_seconds += _plain_op_seconds(profile, choice.strategies, op_measured)
        run.catalog = replace(run.catalog, optimizer=self.state.to_record(budget))
        return {"compute_seconds": computed.wall, "profile": _as_run(profile, op_measured).to_dict()}

    def finish(self, run: _Execution) -> None:
        from subzero.optimizer.budgets import parse_runtime_budget

        if run.catalog.optimizer is not None:  # the budget over the whole workflow's measured time, as recorded
            run.catalog = replace(run.catalog, optimizer={
                **run.catalog.optimizer,
                "max_runtime_seconds": parse_runtime_budget(self.max_runtime, self.state.base_seconds)})


def _run_nodes(run: _Execution, operators: Sequence[Node], policy: Policy) -> None:
    """The run loop: per node, in topological order, ``policy.choose`` -> the stage runs -> commit.

    Nodes committed before a resume are skipped (told to the policy).  A node not computed yet
    first tries to lead a fused stage (`_Execution.fused_group` over the prefix the policy
    calls `Policy.fusable`): its members are computed together and then chosen and committed
    one by one.  A node the policy `Policy.computes_first` is computed without lineage, then
    chosen; a node computed before it is chosen re-runs its tiles only to capture the lineage
    chosen (`_Execution.capture`), if any.
    """
    computed: dict[str, _Computed] = {}  # computed by a fused stage, to choose for and commit
    prepared = None  # the first-pass summaries of the next node, made by the fused stage before it
    known = run.known if policy.reuses_values else {}  # a fused stage ends before a node whose values are known
    left = run.left if policy.reuses_values else set()  # ... unless its trace would have left it to the run
    placed = 0  # the nodes before this one were placed by a fused stage whose values the trace computed
    if policy.reuses_values:
        run.let_go_of(operators, policy)
    for k, node in enumerate(operators):
        record = run.catalog.nodes.get(node.name)
        if record is not None:  # committed before the run was resumed
            policy.committed(node.name, record)
            continue
        if node.name not in computed and prepared is None and k >= placed:
            window = _FUSE_AHEAD  # the nodes looked at: more only when a fused stage could take them all
            while True:
                ahead = list(itertools.takewhile(lambda n: n.name not in run.catalog.nodes and
                                                 (n.name not in known or n.name in left), operators[k:k + window]))
                lead = policy.fusable(ahead)
                lead_nodes, lead_chosen = [n for n, _ in lead], dict((n.name, s) for n, s in lead)
                bound = run.fused_members(lead_nodes, lead_chosen) if lead else None
                if bound is None or not bound[2] or len(lead) < len(ahead) or len(ahead) < window:
                    break
                window *= 4
            group = run.fused_group(lead_nodes, lead_chosen, bound) if lead else None
            if group is not None:
                members = operators[k:k + len(group.stages)]
                if all(n.name in known and (s.destination is DISCARD or isinstance(known[n.name][0], np.ndarray) or
                                            n.name in run.let_go)
                       for n, s in zip(members, group.stages)):  # the trace computed them: each is taken from
                    placed = k + len(members)  # its values below, held or not written as this stage placed it
                    # (a member it held whose values the trace lent a reader: the stage computes them all)
                else:
                    done, prepared = run.compute_fused(members, group)
                    computed.update((n.name, _Computed(*d)) for n, d in zip(members, done))
        stage, now = run.stage(node), computed.pop(node.name, None) or policy.computed_before(run, node)
        if now is None and node.name in known:
            reused = run.reuse(node, prepared)
            if reused is not None:  # stored from its trace's values; its lineage is captured below if stored
                now, stage, prepared = _Computed(*reused), run.stage(node), None
        if now is None and policy.computes_first(stage):
            now, prepared = _Computed(*run.compute(node, (), prepared)), None
            stage = run.stage(node)
        choice = policy.choose(run, node, stage, now)
        stored = tuple(s for s in choice.strategies if s.stored)
        measured = None
        if now is None:
            now, prepared = _Computed(*run.compute(node, choice.strategies, prepared, choice.first)), None
            metas, wall = now.metas, now.wall
        elif stored:
            metas, wall = run.capture(node, stored)
        else:
            metas, wall, measured = [], now.wall, now.measured or _measured(now.metas, now.wall)
        extra = choice.extra | policy.ran(run, node, choice, now)
        run.commit(node, choice.strategies, metas, wall, extra, measured=measured, arrays=choice.arrays)
    policy.finish(run)
    for name in list(run.held):  # the small arrays kept for later plans
        run.held.pop(name).release()


#: the nodes ahead `_run_nodes` offers a fused stage at first (four times more while it takes them all):
#: looking at every node left, per node, made the run loop quadratic in the nodes
_FUSE_AHEAD = 16


def _default_stores(run: _Execution, node: Node, stage: NodeStage, chosen: tuple[Strategy, ...]) -> dict[str, str]:
    """A run without budgets stores an unstored input of a node its queries re-run (neither Map
    nor stored lineage) when one step's recomputation of it and its unstored inputs (a 1-cell
    query: the tiles it touches) costs more than the ``recompute_seconds`` setting
    (`subzero.optimizer.storage.default_stores`)."""
    op = stage.operator
    if not run.held or run.disk_left is not None or any(s.stored or s.mode is Mode.MAP for s in chosen) or \
            op.all_to_all or all(run.arrays[i.name].stored for i in node.inputs):
        return {}
    from subzero.optimizer.storage import default_stores

    arrays = run.unstored_arrays(node)
    reads = [i.name for i in node.inputs if i.name in arrays]
    return default_stores(arrays, node.name, reads, 1.0 / max(len(stage.tiles), 1), config.get("recompute_seconds"))


def _capture_limit(max_runtime, state: OptimizerState, pins: Sequence[str]):
    """The runtime budget left to one node's candidates as a function of its operator time (the
    integer program's, `parse_runtime_budget` over the time measured so far plus the node's, less
    what earlier nodes' plans predicted): calibration does not encode a candidate over it.  None
    without a runtime budget."""
    from subzero.optimizer.budgets import parse_runtime_budget
    from subzero.optimizer.calibrate import CaptureLimit

    if parse_runtime_budget(max_runtime, 0.0) is None:
        return None

    def left(op_seconds: float) -> float:
        return float(parse_runtime_budget(max_runtime, state.base_seconds + op_seconds) or 0.0) - \
            state.predicted_runtime

    return CaptureLimit(left(0.0), left(1.0) - left(0.0), 0.0, tuple(pins))


def _plain_op_seconds(profile, strategies: Sequence[Strategy], op_measured: float) -> float:
    """The node's operator time without lineage, as a relative runtime budget's base counts it.

    A node planned before it ran (a one-pass profile) and run once with stored lineage
    measured its operator making that lineage too (a FULL strategy's pairs cost many times
    the operator): its base is calibration's estimate of the operator alone, measured on a
    sample without lineage.  Counting the capture would let each capture raise the budget of
    every node after it."""
    if profile.one_pass and profile.op_seconds > 0 and any(s.stored for s in strategies):
        return min(op_measured, float(profile.op_seconds))
    return op_measured


def _as_run(profile, op_seconds: float):
    """The node's profile as queries plan with it: its operator time the run's measured one,
    not the estimate it was planned with (a sample's, or 0 for a mapping node profiled from its
    mapping functions alone, which made re-executing it look free and queries re-run it rather
    than map); such a node's re-execution traces as long as it runs, as calibration assumes."""
    traced = op_seconds if profile.mapping and not profile.strategies and \
        profile.trace_seconds == profile.op_seconds else profile.trace_seconds
    return replace(profile, op_seconds=op_seconds, trace_seconds=traced)


def _calibration_stage(run: _Execution, node: Node, stage: NodeStage) -> tuple[NodeStage, float]:
    """The stage calibration measures for ``stage`` and the factor its measurements scale by:
    a whole-array operator whose inputs and output share their shape runs on a centred crop of
    its inputs (`subzero.optimizer.calibrate.crop_box`), not on the whole array; any other on
    its own tiles (`subzero.optimizer.calibrate.sample_windows` picks among them)."""
    from subzero.optimizer.calibrate import CroppedInput, crop_box
    from subzero.tiling import Whole

    op, shape = stage.operator, stage.output_shape
    if shape is None or op.all_to_all or op.two_pass or not isinstance(op.effective_tiling(), Whole) or \
            any(tuple(s) != tuple(shape) for s in op.input_shapes):
        return stage, 1.0
    box = crop_box(tuple(shape))
    if box is None:
        return stage, 1.0
    lens = tuple(hi - lo for lo, hi in box)
    offset = tuple(lo for lo, _ in box)
    crops: tuple[Any, ...] = tuple(CroppedInput(ref, offset) for ref in stage.inputs)  # read as ArrayRefs are
    try:
        cropped = NodeStage.bind(node.name, run.operator(node), [lens] * len(op.input_shapes), crops, run.store,
                                 run.tile_shape)
    except WorkflowError:  # the operator refuses the crop's shapes: measured whole
        return stage, 1.0
    if cropped.output_shape != lens:
        return stage, 1.0
    return cropped, float(np.prod(shape)) / float(np.prod(lens))


def _candidates(node: Node, pinned: dict[str, tuple[str, ...]], access: dict | None = None,
                op: Operator | None = None) -> list[str]:
    """Strategies worth calibrating: mapping nodes keep mapping (SubZero VII) unless pinned;
    with the workload's ``access`` (`subzero.optimizer.workload.step_sizes`), the candidates
    the integer program would prune anyway are not measured either: every stored one of a
    node no query steps through, and those indexed for a direction no query takes there.
    ``op``: the node's operator as the run bound it (default: the workflow's)."""
    from subzero.strategies import supported_strategies

    op = op if op is not None else node.operator
    assert op is not None, f"{node!r} is an input"
    own = list(pinned.get(node.name, ()))
    if Mode.MAP in op.supported_modes():
        return list(dict.fromkeys(["Map", "BlackBox", *own]))
    every = supported_strategies(op)
    if access is None:
        return every
    ways = {d for d in ("backward", "forward") if access.get((node.name, d), 0.0) > 0}
    if not ways:
        return list(dict.fromkeys(["BlackBox", *own]))
    keep = [c for c in every if c in own or _indexed_for(Strategy.parse(c), ways)]
    return list(dict.fromkeys(keep + own))


def _indexed_for(s: Strategy, ways: set[str]) -> bool:
    """Whether a queried direction can use ``s`` (nothing stored, both directions, a composite's
    mapping default, or keyed the way a query goes)."""
    return not s.stored or s.both_directions or s.mode is Mode.COMP or s.direction in ways

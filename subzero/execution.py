"""The workflow executor (the driver): runs nodes in order, tile by tile, and commits each node.

Per node: bind the operator to its shapes, run its tiles on the chosen executor (each
task reads its tile of the inputs, writes its own output chunk and lineage shards, and
returns small metadata), then commit: the array's metadata, the node's manifest (one
successful attempt per tile), and last its catalog entry.  The driver holds metadata
only, O(tiles) per node, never cells.

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
import logging
import os
from dataclasses import replace
import pickle
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

import numpy as np

from subzero.catalog import ArrayRecord, Manifest, NodeRecord, NodeStats, RunRecord
from subzero.errors import StoreError, SubZeroError, WorkflowError
from subzero.executor import Executor
from subzero.fingerprint import array_digest, combine_digests, differences, run_fingerprint
from subzero.inputs_check import check_input_array
from subzero.modes import Strategy
from subzero.operator import Operator
from subzero.pickling import dump_operator, dumps_with_operator
from subzero.planning import default_strategies, resolve_pinned
from subzero.progress import Reporter
from subzero.runtime import NodeTask, TileMeta, prepare_tile, run_tile
from subzero.store import FileStore
from subzero.store.arrays import ExternalArray, write_array
from subzero.tiling import Elementwise, Tile, Whole, default_chunks, tile_grid, tile_lens
from subzero.dag import Node, Workflow

log = logging.getLogger(__name__)

__all__ = ["execute", "LocalExecutor", "make_executor", "bind_shapes", "node_tiles", "node_chunks"]


_Item = TypeVar("_Item")
_Out = TypeVar("_Out")


class LocalExecutor(Executor):
    """Runs a node's tiles in this process, on a few threads (numpy and scipy release the GIL).

    Each thread works on its own copy of the task, as each Spark worker does, so an
    operator never sees two tiles at once.
    """

    name = "local"
    master = None  # in this process

    def __init__(self, threads: int | None = None):
        env = os.environ.get("SUBZERO_LOCAL_THREADS")
        self.threads = threads or (int(env) if env else min(os.cpu_count() or 1, 4))

    def map_tiles(self, task: NodeTask, tiles: list[Tile], progress: Reporter | None = None) -> list[TileMeta]:
        metas = self._map(run_tile, task, tiles, progress if progress is not None else Reporter())
        if metas and task.operator.output_shape is None:
            task.operator.output_shape = metas[0].shape
        return metas

    def map_prepare(self, task: NodeTask, tiles: list[Tile]) -> list:
        """The first pass of a two-pass operator: every tile's summary, in tile order."""
        return self._map(prepare_tile, task, tiles, Reporter())

    def map_calls(self, fn: Callable[[NodeTask, _Item], _Out], task: NodeTask, tiles: list[_Item]) -> list[_Out]:
        """``fn(task, tile)`` for every tile, in tile order (e.g. calibration's `profile_tile`)."""
        return self._map(fn, task, tiles, Reporter())

    def _map(self, fn, task: NodeTask, tiles: list[Tile], progress: Reporter) -> list:
        try:
            if len(tiles) == 1 or self.threads == 1:
                out = []
                for tile in tiles:
                    out.append(fn(task, tile))
                    progress.tiles_done(task.node, 1)
                return out
            payload = dumps_with_operator(task, task.operator, task.node)
            local = threading.local()

            def one(tile: Tile):
                if not hasattr(local, "task"):
                    local.task = pickle.loads(payload)
                got = fn(local.task, tile)
                progress.tiles_done(task.node, 1)
                return got

            with ThreadPoolExecutor(self.threads, thread_name_prefix="subzero-tile") as pool:
                return list(pool.map(one, tiles))
        except SubZeroError:
            raise
        except Exception as exc:
            raise WorkflowError(f"node {task.node!r} failed: {type(exc).__name__}: {exc}") from exc


def make_executor(executor: str, spark=None) -> Executor:
    if executor == "local":
        return LocalExecutor()
    if executor == "spark":
        from subzero.spark import SparkExecutor

        return SparkExecutor(spark)
    raise WorkflowError(f"unknown executor {executor!r}; use 'spark' (default) or 'local'")


def check_executor(executor: str, store_url: str) -> None:
    """Refuse what cannot work before anything starts."""
    if executor not in ("spark", "local"):
        raise WorkflowError(f"unknown executor {executor!r}; use 'spark' (default) or 'local'")
    if executor == "spark" and store_url.startswith("memory://"):
        raise StoreError(f"store {store_url!r} lives in this process's memory, which Spark's workers cannot see; "
                         "use executor='local' or a store on a file system the workers share")


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


def bind_shapes(node: Node, input_shapes: tuple[tuple[int, ...], ...]) -> None:
    """Bind ``node.operator`` to its input shapes and (when it can tell) its output shape."""
    op = node.operator
    op.input_shapes = tuple(tuple(int(n) for n in s) for s in input_shapes)
    try:
        shape = op.infer_output_shape(op.input_shapes)
    except WorkflowError as exc:
        raise WorkflowError(f"node {node.name!r} ({type(op).__name__}): {exc}") from exc
    op.output_shape = None if shape is None else tuple(int(n) for n in shape)
    if op.output_shape is None and not isinstance(op.effective_tiling(), Whole):
        raise WorkflowError(f"node {node.name!r}: {type(op).__name__} declares a tiling, so it must "
                            "implement infer_output_shape(input_shapes)")


def node_tiles(op: Operator, tile_shape) -> list[Tile]:
    """The tiles of a bound operator's output (one unknown tile when only running tells the shape)."""
    if op.output_shape is None:
        return [Tile(0, None)]
    return tile_grid(op.output_shape, op.effective_tiling().split_axes(op), tile_shape)


def node_chunks(op: Operator, tile_shape) -> tuple[int, ...] | None:
    """Chunks of a node's array: its tiles, or the default chunks for a whole-array operator."""
    if op.output_shape is None:
        return None
    split = op.effective_tiling().split_axes(op)
    if not split:
        return default_chunks(op.output_shape)
    return tile_lens(op.output_shape, split, tile_shape)


class _Execution:
    """One run in progress: the store, the executor, the catalog so far, the disk budget left."""

    def __init__(self, wf: Workflow, store: FileStore, catalog: RunRecord, runner, tile_shape,
                 max_disk: float | None, progress: Reporter):
        self.wf, self.store, self.catalog = wf, store, catalog
        self._runner: Executor | Callable[[], Executor] = runner  # or a function making one when first needed
        self.tile_shape, self.progress = tile_shape, progress
        self.disk_left = max_disk
        self.arrays: dict[str, ArrayRecord] = {}

    @property
    def runner(self):
        """The executor (a Spark session starts only when a task has to run; the catalog then
        records its master, as the session has it)."""
        if not isinstance(self._runner, Executor):  # the factory: make the executor now
            started = time.perf_counter()
            self._runner = self._runner()
            master = self._runner.master
            self.catalog = _replace(self.catalog, master=master)
            if master is not None:  # reported on its own, not charged to the first node
                self.progress.note(f"Spark session {master} ready in {time.perf_counter() - started:.1f} s")
        return self._runner

    def ref(self, name: str):
        """The stored array of a committed (or computed) node, checked against its metadata checksum."""
        record = self.arrays.get(name)
        return self.store.array(name, record.meta_xxh3 if record is not None else None)

    # -- inputs ---------------------------------------------------------------------------
    def save_input(self, node: Node, value, metadata: dict | None = None) -> None:
        """Store an input, tile by tile, digesting its tiles as they are written; commit it."""
        shape = tuple(int(n) for n in value.shape)
        chunks = default_chunks(shape)
        ref = self.store.array(node.name)
        if isinstance(value, ExternalArray):  # the executor's tasks copy it, tile by tile
            metas, _ = self._run(self._source_task(node, value, chunks, ref), _input_tiles(shape, chunks))
            digests = [m.digest for m in sorted(metas, key=lambda m: m.tile.index)]
            meta_xxh3 = ref.commit(shape, str(value.dtype), chunks)
        else:
            self.progress.node_started(node.name, 1)
            digests = []
            write_array(ref, value, chunks, digests=digests)
            meta_xxh3 = _meta_checksum(ref)
            self.progress.node_finished(node.name)
        dtype = str(value.dtype)
        self.arrays[node.name] = _array_record(shape, dtype, chunks, meta_xxh3)
        fingerprint = {**self.catalog.fingerprint, f"input:{node.name}": combine_digests(shape, dtype, digests)}
        self.catalog = _replace(self.catalog, fingerprint=fingerprint)
        self._commit_record(NodeRecord(node.name, "input", self.arrays[node.name], metadata=dict(metadata or {})))

    def _source_task(self, node: Node, value: ExternalArray, chunks, output) -> NodeTask:
        op = _Source()
        shape = tuple(int(n) for n in value.shape)
        op.input_shapes, op.output_shape = (shape,), shape
        return NodeTask(node.name, op, (value,), output=output, chunks=chunks, digest=True)

    def input_digest(self, node: Node, value) -> str:
        """The digest of an input as `save_input` computes it, without storing anything."""
        shape = tuple(int(n) for n in value.shape)
        chunks = default_chunks(shape)
        if not isinstance(value, ExternalArray):
            return array_digest(value, chunks)
        metas = self.runner.map_tiles(self._source_task(node, value, chunks, None), _input_tiles(shape, chunks))
        return combine_digests(shape, value.dtype, [m.digest for m in sorted(metas, key=lambda m: m.tile.index)])

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
            if not same_layout or self.input_digest(node, value) != catalog.fingerprint.get(f"input:{node.name}"):
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
                node.operator = self.store.load_operator(node.name)
        if self.disk_left is not None:
            self.disk_left -= sum(sum(r.stats.bytes.values()) for r in catalog.nodes.values() if r.stats)

    # -- operators ----------------------------------------------------------------------------
    def task(self, node: Node, strategies: tuple[str, ...], write_output: bool) -> NodeTask:
        op = node.operator
        stored = tuple(s for s in strategies if Strategy.parse(s).stored)
        return NodeTask(node.name, op, tuple(self.ref(i.name) for i in node.inputs), stored,
                        output=self.store.array(node.name) if write_output else None,
                        chunks=node_chunks(op, self.tile_shape), location=self.store.location,
                        shard_dirs=tuple((s, self.store.shard_directory(node.name, s)) for s in stored))

    def _run(self, task: NodeTask, tiles: list[Tile]) -> tuple[list[TileMeta], float]:
        runner = self.runner  # a session starting is not the node's time
        self.progress.node_started(task.node, len(tiles))
        start = time.perf_counter()
        try:
            metas = runner.map_tiles(task, tiles, self.progress)
        except BaseException:
            self.progress.node_finished(task.node, ok=False)
            raise
        self.progress.node_finished(task.node)
        return metas, time.perf_counter() - start

    def compute(self, node: Node, strategies: tuple[str, ...]) -> tuple[list[TileMeta], float]:
        """Bind, run every tile (encoding ``strategies``), commit the output array."""
        bind_shapes(node, tuple(self.arrays[i.name].shape for i in node.inputs))
        op = node.operator
        tiles = node_tiles(op, self.tile_shape)
        runner = self.runner
        start = time.perf_counter()
        if op.two_pass:  # a first pass over the tiles, combined in the driver, before the tiles run
            try:
                op.combine(runner.map_prepare(self.task(node, (), write_output=False), tiles))
            except SubZeroError:
                raise
            except Exception as exc:
                raise WorkflowError(f"node {node.name!r} ({type(op).__name__}) failed to combine its tiles' "
                                    f"summaries: {type(exc).__name__}: {exc}") from exc
        metas, wall = self._run(self.task(node, strategies, write_output=True), tiles)
        wall = time.perf_counter() - start
        shape, dtype, chunks = _agreed(node, metas)
        op.output_shape = shape
        meta_xxh3 = self.store.array(node.name).commit(shape, dtype, chunks)
        self.store.save_operator(node.name, dump_operator(op, node.name))
        self.arrays[node.name] = _array_record(shape, dtype, chunks, meta_xxh3)
        return metas, wall

    def capture(self, node: Node, strategies: tuple[str, ...]) -> tuple[list[TileMeta], float]:
        """Re-run a computed node's tiles to capture lineage (its output is already stored)."""
        return self._run(self.task(node, strategies, write_output=False), node_tiles(node.operator, self.tile_shape))

    def commit(self, node: Node, strategies: tuple[str, ...], metas: list[TileMeta], wall: float,
               extra: dict | None = None, measured: dict | None = None) -> NodeRecord:
        """Commit the node: the manifest of its shards (within the disk budget), then its catalog entry.

        ``measured`` (`_measured` of the tiles that computed the node) stands in for ``metas``
        in the statistics of a node whose lineage was not captured in this pass.
        """
        op = node.operator
        stored = [s for s in strategies if Strategy.parse(s).stored]
        shards = {s: tuple(sorted((m.shards[s] for m in metas), key=lambda r: r.tile)) for s in stored}
        inline = self._merge_inline(node, stored, metas)
        for s in inline:  # the node's merged table replaces its tiles' shards
            shards[s] = tuple(replace(r, name=None, files=(), index_bytes=0) for r in shards[s])
        sizes = {s: (len(inline[s]) if s in inline else sum(r.nbytes + r.index_bytes for r in recs))
                 for s, recs in shards.items()}
        dropped = self._fit_budget(sizes)
        kept = tuple(s for s in strategies if s not in dropped) or ("BlackBox",)
        start = time.perf_counter()
        manifest = Manifest(node.name, {s: recs for s, recs in shards.items() if s not in dropped},
                            {s: b for s, b in inline.items() if s not in dropped})
        self.store.write_manifest(manifest)
        kept_sizes = {s: v for s, v in sizes.items() if s not in dropped}
        if self.disk_left is not None:
            self.disk_left -= sum(kept_sizes.values())
        measured = measured or _measured(metas, wall)
        stats = NodeStats(
            tiles=measured["tiles"], wall_seconds=wall, op_seconds=measured["op_seconds"],
            lineage_seconds=measured["lineage_seconds"],
            write_seconds=measured["write_seconds"] + time.perf_counter() - start,
            bytes=kept_sizes, keys={s: sum(r.keys for r in shards[s]) for s in kept_sizes},
            encode_seconds={s: sum(r.encode_seconds for r in shards[s]) for s in kept_sizes},
            pairs={s: (sum(r.pairs for r in shards[s]), sum(r.out_cells for r in shards[s]),
                       sum(r.in_cells for r in shards[s])) for s in kept_sizes},
            file_bytes={s: sum(r.disk_bytes for r in shards[s]) for s in kept_sizes})
        extra = dict(extra or {})
        record = NodeRecord(
            node.name, "operator", self.arrays[node.name], strategies=kept,
            reason=extra.pop("reason", ""), stats=stats,
            dropped={s: "over the disk budget at run time" for s in dropped},
            tile_shape=tile_lens(op.output_shape, op.effective_tiling().split_axes(op), self.tile_shape),
            **extra)
        self._commit_record(record)
        self.store.remove_uncommitted(node.name, manifest)
        return record

    def _merge_inline(self, node: Node, stored: list[str], metas: list[TileMeta]) -> dict[str, bytes]:
        """Per strategy whose tiles all reported a small summary, the node-level merge of them."""
        from subzero.encoders import encoder_for

        out = {}
        op = node.operator
        shapes = (tuple(op.output_shape), tuple(op.input_shapes))
        for s in stored:
            merge = getattr(encoder_for(Strategy.parse(s)), "merge_inline", None)
            if merge is None or not all(s in m.inline for m in metas):
                continue
            merged = merge([m.inline[s] for m in metas], shapes)
            if merged is not None:
                out[s] = merged
        return out

    def _commit_record(self, record: NodeRecord) -> None:
        self.catalog = self.catalog.with_node(record)
        self.store.write_catalog(self.catalog)

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


def _array_record(shape, dtype: str, chunks, meta_xxh3: str | None = None) -> ArrayRecord:
    return ArrayRecord(tuple(shape), dtype, tuple(chunks), int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize,
                       meta_xxh3)


def _meta_checksum(ref) -> str:
    import xxhash

    return xxhash.xxh3_64_hexdigest(ref.location.read_bytes(ref.path, "zarr.json"))


def _input_tiles(shape: tuple[int, ...], chunks: tuple[int, ...]) -> list[Tile]:
    return tile_grid(shape, tuple(range(len(shape))), chunks)


def _measured(metas: list[TileMeta], wall: float) -> dict[str, float]:
    """What a node's tiles measured, summed (kept in the plan for the nodes phase 2 does not re-run)."""
    return {"tiles": len(metas), "wall": wall, "op_seconds": sum(m.op_seconds for m in metas),
            "lineage_seconds": sum(m.lineage_seconds for m in metas),
            "write_seconds": sum(m.write_seconds for m in metas)}


def _not_the_same(store: FileStore, differ: list[str]) -> str:
    return (f"cannot resume the run in {store.url!r}: this run differs from the stored one in {'; '.join(differ)}. "
            "Run it into a new store, or replace the old one with overwrite=True (--overwrite)")


def _agreed(node: Node, metas: list[TileMeta]) -> tuple[tuple[int, ...], str, tuple[int, ...]]:
    """The output shape, dtype and chunks every tile reported (they must agree)."""
    first = metas[0]
    for m in metas[1:]:
        if m.dtype != first.dtype:
            raise WorkflowError(f"node {node.name!r} ({type(node.operator).__name__}): run() returned dtype "
                                f"{first.dtype} for tile {first.tile.box} but {m.dtype} for tile {m.tile.box}; "
                                "an operator must return one dtype for every tile (cast with astype)")
    return first.shape, first.dtype, first.chunks


def execute(wf: Workflow, inputs, store, strategies=None, max_disk=None, max_runtime=None,
            workload=None, executor="spark", spark=None, tile_shape=None, overwrite: bool = False,
            resume: bool = False, progress: Reporter | None = None, input_metadata: dict | None = None,
            made_by: str | None = None, storage_options: dict | None = None):
    """Run ``wf`` on ``inputs`` into a new ``store`` (or continue the run in it: ``resume``);
    see `Workflow.run`.  ``made_by`` is kept in the store's marker (``subzero demo``)."""
    from subzero.optimizer.budgets import parse_disk_budget, parse_runtime_budget
    from subzero.optimizer.workload import parse_workload, workload_record
    from subzero.run import Run
    from subzero.store.location import resolve

    progress = progress or Reporter()
    if overwrite and resume:
        raise WorkflowError("give resume=True (continue the run in the store) or overwrite=True (replace it), "
                            "not both")
    arrays = _check_inputs(wf, inputs)
    input_metadata = _check_metadata(wf, input_metadata)
    pinned = resolve_pinned(wf, strategies)
    _check_tile_shape(tile_shape)
    queries = parse_workload(wf, workload, static_shapes(wf, arrays, strict=True))  # before the store exists
    workload = workload_record(wf, workload)  # names and ints: JSON for the catalog and the fingerprint
    input_bytes = int(sum(int(np.prod(a.shape, dtype=np.int64)) * a.dtype.itemsize for a in arrays.values()))
    disk_budget = parse_disk_budget(max_disk, input_bytes)
    parse_runtime_budget(max_runtime, 1.0)  # reject a malformed budget before anything runs
    location = resolve(store, storage_options)
    check_executor(executor, location.url)
    executor = _in_process_if_tiny(executor, spark, input_bytes, progress)
    operators = [n for n in wf.nodes if not n.is_input]
    optimized = bool(queries or max_disk is not None or max_runtime is not None) and \
        any(n.name not in pinned for n in operators)
    settings = {"tile_shape": list(tile_shape) if isinstance(tile_shape, tuple) else tile_shape,
                "pinned": {k: list(v) for k, v in sorted(pinned.items())}, "workload": workload,
                "max_disk": max_disk, "max_runtime": max_runtime}
    fingerprint = run_fingerprint(wf, settings)
    catalog = RunRecord(
        workflow=wf.to_dict(), created=_now(),
        executor=executor, tile_shape=list(tile_shape) if isinstance(tile_shape, tuple) else tile_shape,
        pinned={k: list(v) for k, v in pinned.items()}, input_bytes=input_bytes,
        workload=workload if isinstance(workload, list) else None,
        budgets={"max_disk": max_disk, "max_runtime": max_runtime}, fingerprint=fingerprint)
    # exclusive, before Spark starts: a second writer is refused at once
    if resume:
        fs, stored = FileStore.resume(location, catalog, made_by)
    else:
        fs, stored = FileStore.create(location, catalog, overwrite=overwrite, made_by=made_by), None
    failed = False
    try:
        if stored is not None:
            if not stored.fingerprint:
                raise StoreError(f"cannot resume the run in {fs.url!r}: its catalog has no fingerprint (it was "
                                 "made by an older subzero); replace it with overwrite=True (--overwrite)")
            differ = differences(stored.fingerprint, fingerprint)
            if differ:
                raise StoreError(_not_the_same(fs, differ))
        run = _Execution(wf, fs, stored or catalog, lambda: make_executor(executor, spark), tile_shape, disk_budget,
                         progress)
        started = time.perf_counter()
        if stored is not None:
            run.prepare_resume(arrays, clean=stored.status != "done")
            if stored.status == "done":  # nothing left to do
                return Run(FileStore.open(location), wf)
            run.catalog = _replace(run.catalog, status="running", resumed=[*run.catalog.resumed, _now()])
            fs.write_catalog(run.catalog)
        try:
            for node in wf.inputs:
                if node.name not in run.catalog.nodes:
                    run.save_input(node, arrays[node.name], input_metadata.get(node.name))
            if optimized:
                _two_phase(run, operators, pinned, queries, max_runtime)
            else:
                for node in operators:
                    if node.name in run.catalog.nodes:
                        continue  # committed before the run was resumed
                    chosen = pinned.get(node.name) or default_strategies(node)
                    metas, wall = run.compute(node, chosen)
                    run.commit(node, chosen, metas, wall, {"reason": "pinned" if node.name in pinned else "default"})
        except BaseException:
            try:
                fs.write_catalog(_replace(run.catalog, status="failed"))
            except OSError:  # the store itself failed (disk full, gone): the error that did it is the one to show
                pass
            raise
        fs.write_catalog(_replace(run.catalog, status="done", wall_seconds=time.perf_counter() - started))
    except BaseException:
        failed = True
        raise
    finally:
        try:
            fs.close()
        except OSError:  # the store itself failing (an outage): the error that stopped the run is the one to show
            if not failed:
                raise
    return Run(FileStore.open(location), wf)


#: inputs of at most this many bytes in all run in-process (the local executor) when Spark
#: would have to start for them: its JVM costs seconds, the run milliseconds; the answers are
#: the same (one runtime runs the tiles either way).  SUBZERO_IN_PROCESS_BYTES=0 turns it off.
IN_PROCESS_BYTES = int(os.environ.get("SUBZERO_IN_PROCESS_BYTES", 16 * 2**20))


def _in_process_if_tiny(executor: str, spark, input_bytes: int, progress: Reporter) -> str:
    """``"local"`` for a Spark run on tiny inputs that would start its own embedded session
    (the run's catalog, `subzero info` and the progress report say so); else ``executor``."""
    if executor != "spark" or spark is not None or input_bytes > IN_PROCESS_BYTES:
        return executor
    from subzero.spark import would_start_embedded

    if not would_start_embedded():
        return executor
    progress.note(f"inputs are tiny ({input_bytes} bytes <= {IN_PROCESS_BYTES}, SUBZERO_IN_PROCESS_BYTES): "
                  "running in-process on the local executor instead of starting Spark")
    return "local"


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


def _replace(record: RunRecord, **changes) -> RunRecord:
    from dataclasses import replace

    return replace(record, **changes)


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


def _two_phase(run: _Execution, operators: list[Node], pinned, queries, max_runtime) -> None:
    """Phase 1 and the plan (unless a resumed run's catalog holds them), then phase 2 for
    every node not committed yet."""
    pending = (run.catalog.optimizer or {}).get("pending")
    if pending is None:
        pending = _plan(run, operators, pinned, queries, max_runtime)
    for node in operators:
        if node.name in run.catalog.nodes:
            continue  # committed before the run was resumed
        item = pending[node.name]
        chosen = tuple(item["strategies"])
        stored = tuple(s for s in chosen if Strategy.parse(s).stored)
        if stored:
            metas, wall = run.capture(node, stored)
            measured = None
        else:
            metas, wall, measured = [], item["measured"]["wall"], item["measured"]
        run.commit(node, chosen, metas, wall, dict(item["extra"]), measured=measured)
    optimizer = {k: v for k, v in (run.catalog.optimizer or {}).items() if k != "pending"}
    run.catalog = _replace(run.catalog, optimizer=optimizer)


def _plan(run: _Execution, operators: list[Node], pinned, queries, max_runtime) -> dict[str, dict]:
    """Phase 1 (every node computed without lineage and profiled), then the integer program;
    the plan goes to the catalog before phase 2 starts, so a resumed run keeps it."""
    from subzero.optimizer.budgets import parse_runtime_budget
    from subzero.optimizer.calibrate import profile_node
    from subzero.optimizer.plan import optimize

    profiles, computed, base, calibration = {}, {}, 0.0, 0.0
    for node in operators:
        metas, wall = run.compute(node, ())
        base += wall
        computed[node.name] = _measured(metas, wall)
        start = time.perf_counter()
        profiles[node.name] = profile_node(run.task(node, (), write_output=False),
                                           node_tiles(node.operator, run.tile_shape),
                                           _candidates(node, pinned), sum(m.op_seconds for m in metas),
                                           runner=run.runner)
        calibration += time.perf_counter() - start
    runtime_budget = parse_runtime_budget(max_runtime, base)
    try:
        plan, problem = optimize(run.wf, profiles, queries, run.disk_left, runtime_budget, pinned)
        over_budget = ""
    except WorkflowError as exc:  # pins alone break a budget: plan the rest, pins fall back at commit
        plan, problem = optimize(run.wf, profiles, queries, run.disk_left, runtime_budget, {})
        over_budget = str(exc)
    pending = {}
    for node in operators:
        chosen = pinned.get(node.name) or tuple(plan.chosen.get(node.name, ("BlackBox",)))
        predicted = {c.strategy: {"disk": c.disk, "runtime": c.runtime, "query": dict(c.query_cost)}
                     for c in problem.candidates if c.node == node.name}
        pending[node.name] = {
            "strategies": list(chosen), "measured": computed[node.name],
            "array": run.arrays[node.name].to_dict(),
            "extra": {"reason": "pinned" if node.name in pinned else plan.reasons.get(node.name, ""),
                      "predicted": predicted, "profile": profiles[node.name].to_dict(),
                      "pruned": {s: why for (n, s), why in plan.pruned.items() if n == node.name},
                      "compute_seconds": computed[node.name]["wall"]}}
    run.catalog = _replace(run.catalog, optimizer={
        "base_seconds": base, "calibration_seconds": calibration, "solve_seconds": plan.solve_seconds,
        "objective": plan.objective, "status": plan.status, "max_disk_bytes": run.disk_left,
        "max_runtime_seconds": runtime_budget, "predicted_disk": plan.disk, "predicted_runtime": plan.runtime,
        "pins_over_budget": over_budget, "pending": pending,
    })
    run.store.write_catalog(run.catalog)
    return pending


def _candidates(node: Node, pinned: dict[str, tuple[str, ...]]) -> list[str]:
    """Strategies worth calibrating: mapping nodes keep mapping (SubZero VII) unless pinned."""
    from subzero.modes import Mode
    from subzero.planning import supported_strategies

    if Mode.MAP in node.operator.supported_modes():
        return list(dict.fromkeys(["Map", "BlackBox", *pinned.get(node.name, ())]))
    return supported_strategies(node.operator)

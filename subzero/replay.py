"""Selective replay (Titian): re-run a workflow downstream of changed input cells only.

A what-if: "these pixels were bad; had they been fixed, what would the outputs be?"
`replay` writes a new store in which the given cells of an input take new values (one
value for all, `Patch.value`, or values from another array, `Patch.source`) and every
node is brought up to date at the cost of the change, not of the workflow:

- a node none of whose inputs changed is linked from the old store (hard links on a
  local disk, copies elsewhere: stores are immutable, so sharing files is safe): its
  array, operator, manifest and lineage shards;
- a node some of whose inputs changed re-runs, through the executor (in-process or
  Spark, `subzero.executors.make_executor`), only the tiles whose input boxes meet the
  changed cells; its other tiles' chunks and lineage shards are linked, and its manifest
  lists old shards for them and new ones for the re-run tiles.  Operators whose tiles
  depend on each other (two-pass operators such as `Label`), whose lineage is merged
  across tiles (FullRange tables kept in the manifest) or that run whole re-run every
  tile;
- what changed is measured, not guessed: a re-run tile's new chunk is compared with the
  old one, and only the cells whose value differs propagate to the next nodes.  An input
  patch that changes nothing re-runs nothing.

The result names, per node, the tiles re-run and the cells changed, and per output the
changed cells, checked against the forward lineage of the changed input cells (in the
old run, and in the new one for value-dependent lineage): every changed output cell
must lie within it, or the lineage the operators declare is wrong.

>>> result = replay(run, Patch("raw", run.frontier("raw", box=[(10, 12), (5, 9)]), value=0.0),
...                 "runs/fixed")                                          # doctest: +SKIP
>>> result.outputs["stars"].changed.count, result.outputs["stars"].within_lineage  # doctest: +SKIP
(31, True)
"""

from __future__ import annotations

import datetime as _dt
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from subzero.catalog import ArrayRecord, Manifest, NodeRecord
from subzero.cells import to_ids
from subzero.errors import LineageError, StoreError, WorkflowError
from subzero.executors import Executor, check_executor, make_executor
from subzero.frontier import Frontier
from subzero.modes import Strategy
from subzero.progress import Reporter
from subzero.worker import NodeTask, RecomputedArray
from subzero.stage import DISCARD, NodeStage, lineage_metrics
from subzero.store import LineageReader, RunWriter, create_run
from subzero.tiling import Tile, box_slices, tile_grid

if TYPE_CHECKING:
    from subzero.run import Run
    from subzero.dag import Node

__all__ = ["Patch", "NodeReplay", "OutputChange", "ReplayResult", "replay"]


@dataclass(frozen=True)
class Patch:
    """New values for some cells of one input of a run.

    Parameters
    ----------
    input
        The input node's name.
    cells
        The cells to replace: a `Frontier` over the input (``run.frontier(input, cells=...,
        box=...)``, or the answer of a backward query with ``as_="frontier"``); None: every
        cell, which with ``source`` replaces the input by ``source`` wherever they differ.
    value
        One value for every replaced cell (cast to the input's dtype; it must fit).
    source
        Or an array of the input's shape (numpy, memory-mapped, Zarr) to take the replaced
        cells' values from.
    """

    input: str
    cells: Frontier | None = None
    value: Any = None
    source: Any = None


@dataclass(frozen=True)
class NodeReplay:
    """What replaying did to one node: ``how`` is ``"linked"``, ``"patched"`` (an input:
    ``rerun`` of its ``tiles`` chunks written), ``"tiles"`` (some tiles re-ran) or ``"whole"``
    (every tile re-ran, and ``why``); ``changed`` counts the cells whose value changed."""

    name: str
    how: str
    tiles: int
    rerun: int
    changed: int
    seconds: float
    why: str = ""


@dataclass(frozen=True)
class OutputChange:
    """An output's changed cells, and whether they lie within the forward lineage of the
    changed input cells (None: not checked)."""

    name: str
    changed: Frontier
    within_lineage: bool | None


@dataclass
class ReplayResult:
    """What `replay` did: the new run, per input the cells replaced and changed, per node
    a `NodeReplay`, per output an `OutputChange`."""

    source: str
    run: "Run"
    inputs: dict[str, tuple[int, int]]
    nodes: list[NodeReplay]
    outputs: dict[str, OutputChange]
    seconds: float
    check_seconds: float = 0.0
    executor: str = "local"
    changed_inputs: dict[str, Frontier] = field(default_factory=dict, repr=False)


# -- changed cells ------------------------------------------------------------------------------

def _differs(old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """Where two blocks differ (NaN equals NaN)."""
    diff = old != new
    if old.dtype.kind in "fc" and diff.any():
        diff &= ~(np.isnan(old) & np.isnan(new))
    return diff


def _local_mask(cells: Frontier | None, box, grouped: dict | None) -> np.ndarray:
    """The cells of ``cells`` inside ``box`` as a mask of the box's shape (None: all)."""
    shape = tuple(hi - lo for lo, hi in box)
    if cells is None:
        return np.ones(shape, bool)
    lo = np.array([a for a, _ in box], np.int64)
    hi = np.array([b for _, b in box], np.int64)
    if cells.kind == "mask":
        return np.array(cells.mask()[box_slices(box)], dtype=bool)
    local = np.zeros(shape, bool)
    if cells.kind == "boxes":
        blo, bhi = cells.boxes()
        a, b = np.maximum(blo, lo), np.minimum(bhi, hi)
        for x, y in zip(a[np.all(b > a, axis=1)], b[np.all(b > a, axis=1)]):  # one slice per box, not per cell
            local[tuple(slice(int(p) - int(o), int(q) - int(o)) for p, q, o in zip(x, y, lo))] = True
        return local
    coords = grouped.get(tuple(int(v) for v in lo)) if grouped is not None else None
    if coords is not None and len(coords):
        local[tuple((coords - lo).T)] = True
    return local


def _group_by_chunk(cells: Frontier | None, chunks: tuple[int, ...]) -> dict | None:
    """Coordinates of an ids frontier grouped by the origin of the chunk holding them."""
    if cells is None or cells.kind != "ids" or cells.is_empty:
        return None
    coords = cells.coords()
    origin = coords - coords % np.asarray(chunks, np.int64)
    keys, inverse = np.unique(origin, axis=0, return_inverse=True)
    order = np.argsort(inverse.reshape(-1), kind="stable")
    bounds = np.searchsorted(inverse.reshape(-1)[order], np.arange(len(keys) + 1))
    return {tuple(int(v) for v in k): coords[order[bounds[j]:bounds[j + 1]]] for j, k in enumerate(keys)}


def _check_value(value, dtype: np.dtype, name: str):
    """``value`` cast to ``dtype``, if it survives the cast (a `WorkflowError` if not)."""
    cast = None
    try:
        with np.errstate(invalid="ignore", over="ignore"):
            cast = np.asarray(value).astype(dtype)
            same = bool(cast.astype(np.float64) == np.float64(value)) or \
                bool(np.isnan(np.float64(value)) and dtype.kind in "fc")
    except (TypeError, ValueError, OverflowError):
        same = False
    if not same:
        raise WorkflowError(f"the value {value!r} does not fit input {name!r}, which holds {dtype}; give a value "
                            f"of that type")
    return cast


def _patch_input(old: LineageReader, new: RunWriter, patch: Patch, shape, dtype: np.dtype
                 ) -> tuple[int, Frontier, int, int]:
    """Write the patched input into the new store, chunk by chunk (untouched chunks linked);
    returns (cells replaced, the cells whose value changed, chunks written, chunks)."""
    src_ref, dst_ref = old.array(patch.input), new.array(patch.input)
    _, chunks, _, _ = src_ref.layout()
    new.adopt_node(old, patch.input, "input")
    value = None if patch.value is None else _check_value(patch.value, dtype, patch.input)
    grid = tile_grid(tuple(shape), tuple(range(len(shape))), chunks)
    lo = np.array([[a for a, _ in t.box] for t in grid], np.int64).reshape(len(grid), len(shape))
    hi = np.array([[b for _, b in t.box] for t in grid], np.int64).reshape(len(grid), len(shape))
    cells = patch.cells
    grouped = _group_by_chunk(cells, chunks)
    changed: list[np.ndarray] = []
    replaced = written = 0
    for t, tile in enumerate(grid):
        if cells is not None and not cells.meets(lo[t], hi[t]):
            continue
        where = _local_mask(cells, tile.box, grouped)
        if not where.any():
            continue
        replaced += int(where.sum())
        block = src_ref.read(tile.box)
        fresh = np.array(block)
        if value is not None:
            fresh[where] = value
        else:
            fresh[where] = np.asarray(patch.source[box_slices(tile.box)]).astype(dtype, copy=False)[where]
        diff = _differs(block, fresh)
        if diff.any():
            dst_ref.write_block(tile.box, fresh, tuple(shape), chunks)
            written += 1
            changed.append(to_ids(np.argwhere(diff) + lo[t], tuple(shape)))
    dst_ref.forget()
    ids = np.concatenate(changed) if changed else np.empty(0, np.int64)
    return replaced, Frontier.of_ids(ids, tuple(shape)), written, len(grid)


def _changed_cells(a: Any, b: Any, tiles: list[Tile], shape) -> Frontier:
    """Cells of the re-run ``tiles`` whose value differs between the old array ``a`` and the new
    ``b`` (stored, or recomputed when read)."""
    parts = []
    for tile in tiles:
        diff = _differs(a.read(tile.box), b.read(tile.box))
        if diff.any():
            parts.append(to_ids(np.argwhere(diff) + np.array([lo for lo, _ in tile.box], np.int64), tuple(shape)))
    return Frontier.of_ids(np.concatenate(parts) if parts else np.empty(0, np.int64), tuple(shape))


# -- re-running a node ------------------------------------------------------------------------

class _Replayer:
    """One replay in progress: the old run, the new store, the executor, changed cells so far."""

    def __init__(self, run: "Run", fs: RunWriter, runner: Executor, progress: Reporter):
        self.run, self.old, self.fs, self.runner, self.progress = run, run.store, fs, runner, progress
        tile_shape = run.catalog.tile_shape
        self.tile_shape = tuple(tile_shape) if isinstance(tile_shape, list) else tile_shape
        self.catalog = fs.read_catalog()
        self.changed: dict[str, Frontier] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.report: list[NodeReplay] = []
        self._recomputed: dict[str, RecomputedArray] = {}

    def ref(self, name: str) -> Any:
        """The new store's array of a replayed node: stored, or (the run did not store it)
        recomputed from its replayed ancestors when read."""
        record = self.catalog.nodes[name]
        if record.array.stored:
            return self.fs.array(name, record.array.meta_xxh3)
        if name not in self._recomputed:
            node = self.run.workflow.node(name)
            op = self.fs.load_operator(name)
            task = NodeTask(name, op, tuple(self.ref(i.name) for i in node.inputs), op.input_shapes,
                            op.output_shape)
            tiles = tile_grid(record.shape, op.effective_tiling().split_axes(op), record.tile_shape)
            self._recomputed[name] = RecomputedArray(task, tiles, record.array.chunks, record.array.dtype)
        return self._recomputed[name]

    def commit(self, record: NodeRecord) -> None:
        """Add ``record`` to the new store's catalog."""
        self.catalog = self.catalog.with_node(record)
        self.fs.write_catalog(self.catalog)
        self.shapes[record.name] = record.shape

    def link(self, node: "Node", start: float) -> None:
        """Share the old run's files of ``node`` and commit its old record."""
        record = self.run.catalog.nodes[node.name]
        self.progress.node_started(node.name, 1)
        self.fs.adopt_node(self.old, node.name, record.kind)
        self.commit(record)
        self.progress.tiles_done(node.name, 1)
        self.progress.node_finished(node.name)
        tiles = record.stats.tiles if record.stats is not None else 1
        self.report.append(NodeReplay(node.name, "linked", tiles, 0, 0, time.perf_counter() - start))

    def patch(self, node: "Node", patch: Patch, start: float) -> tuple[int, Frontier]:
        """Write the patched input ``node``; returns the cells replaced and those changed."""
        record = self.run.catalog.nodes[node.name]
        self.progress.node_started(node.name, 1)
        replaced, changed, written, chunks = _patch_input(self.old, self.fs, patch, record.shape,
                                                          np.dtype(record.dtype))
        self.commit(record)
        self.progress.tiles_done(node.name, 1)
        self.progress.node_finished(node.name)
        self.changed[node.name] = changed
        self.report.append(NodeReplay(node.name, "patched", chunks, written, changed.count,
                                      time.perf_counter() - start))
        return replaced, changed

    def rerun(self, node: "Node", start: float) -> None:
        """Re-run the tiles of ``node`` that read changed cells; link the rest."""
        from subzero.query import TileGrid

        old_record = self.run.catalog.nodes[node.name]
        # the node's own tiles when the run chose none (a store made when the default tiles differed)
        tile_shape = self.tile_shape if self.tile_shape is not None or not old_record.tile_shape \
            else tuple(old_record.tile_shape)
        # a fresh copy of the operator: the old run's keeps its state
        stage = NodeStage.bind(node.name, self.old.load_operator(node.name),
                               tuple(self.shapes[i.name] for i in node.inputs),
                               tuple(self.ref(i.name) for i in node.inputs), self.fs, tile_shape,
                               destination=None if old_record.array.stored else DISCARD)
        stores_lineage = any(Strategy.parse(s).stored for s in old_record.strategies)
        manifest = self.old.read_manifest(node.name) if stores_lineage else Manifest(node.name, {}, {})
        tiles = list(stage.tiles)
        why = ""
        if stage.output_shape is None or len(tiles) == 1:
            why = "runs as one task"
        elif stage.operator.two_pass:
            why = "two-pass: its tiles depend on each other"
        elif manifest.inline:
            why = "its lineage is one table for the whole node"
        elif stage.output_shape != tuple(old_record.shape) or \
                tuple(stage.chunks or ()) != tuple(old_record.array.chunks):
            why = "its shape changed"
        if why:
            chosen = tiles
        else:
            grid = TileGrid(tiles, stage.operator)
            hit: set[int] = set()
            for i, parent in enumerate(node.inputs):
                changed = self.changed.get(parent.name)
                if changed is not None and not changed.is_empty:
                    hit.update(t for t, _ in grid.split(changed, i))
            chosen = [tiles[t] for t in sorted(hit)]
        if not chosen:  # the changed cells reach no tile of this node
            self.link(node, start)
            return
        strategies = tuple(Strategy.parse(s) for s in old_record.strategies)  # the catalog's names, on read
        whole = len(chosen) == len(tiles)
        if not whole:  # the other tiles' chunks and shards: the old ones (re-run tiles' replaced below)
            self.fs.adopt_node(self.old, node.name, "operator")
        done = stage.run(self.runner, strategies, write_output=True, tiles=chosen, progress=self.progress)
        if not whole and done.dtype != old_record.dtype:
            raise WorkflowError(f"node {node.name!r} ({type(stage.operator).__name__}): run() returned dtype "
                                f"{done.dtype} on replay, {old_record.dtype} in the run; an operator must return "
                                "one dtype for every tile")
        array = done.commit_array(metadata=whole)
        new_manifest = done.stage.manifest(strategies, done.metas, previous=manifest)
        if any(s.stored for s in strategies):  # a node storing no lineage has no manifest
            self.fs.write_manifest(new_manifest)
            self.fs.remove_uncommitted(node.name, new_manifest)
        self.commit(self._record(old_record, new_manifest, array, len(chosen), len(tiles),
                                 time.perf_counter() - start))
        if done.shape != tuple(old_record.shape):
            changed = Frontier.full(done.shape)
        else:
            changed = _changed_cells(self.run.array(node.name), self.ref(node.name), [m.tile for m in done.metas],
                                     done.shape)
        self.changed[node.name] = changed
        self.report.append(NodeReplay(node.name, "whole" if whole else "tiles", len(tiles), len(chosen),
                                      changed.count, time.perf_counter() - start, why))

    @staticmethod
    def _record(old: NodeRecord, manifest: Manifest, array: ArrayRecord, rerun: int, tiles: int,
                seconds: float) -> NodeRecord:
        """The old node record with the replayed array (the old record of it when the layout
        is the same), lineage statistics and what was re-run."""
        if (array.shape, array.dtype, array.chunks) == (tuple(old.array.shape), str(old.array.dtype),
                                                        tuple(old.array.chunks)):
            fresh = array.meta_xxh3 is not None and array.meta_xxh3 != old.array.meta_xxh3
            array = replace(old.array, meta_xxh3=array.meta_xxh3) if fresh else old.array
        stats = old.stats
        if stats is not None:
            got = lineage_metrics(manifest)  # encode seconds: the run's, as measured
            stats = replace(stats, bytes=got["bytes"], keys=got["keys"], pairs=got["pairs"], file_bytes=got["file_bytes"])
        return replace(old, array=array, stats=stats,
                       metadata={**old.metadata, "replayed": {"tiles": rerun, "of": tiles, "seconds": seconds}})


# -- the replay ---------------------------------------------------------------------------------

def _check_patches(run: "Run", patches: list[Patch]) -> dict[str, Patch]:
    out: dict[str, Patch] = {}
    for patch in patches:
        if not isinstance(patch, Patch):
            raise WorkflowError(f"replay takes Patch objects, got {type(patch).__name__}")
        node = run.node(patch.input)
        if not node.is_input:
            raise WorkflowError(f"replay patches inputs; {node.name!r} is an operator's output (trace its cells back "
                                f"to an input first: run.backward(..., as_='frontier'))")
        if node.name in out:
            raise WorkflowError(f"input {node.name!r} is patched twice; give one patch per input")
        if (patch.value is None) == (patch.source is None):
            raise WorkflowError(f"patch of {node.name!r}: give either value= (one value for every cell) or source= "
                                "(an array to take the values from)")
        shape = run.shape(node)
        if patch.cells is not None and (not isinstance(patch.cells, Frontier) or patch.cells.shape != tuple(shape)):
            raise LineageError(f"patch of {node.name!r}: cells must be a Frontier over its shape {tuple(shape)} "
                               "(run.frontier(name, cells=..., box=...))")
        if patch.source is not None:
            got = tuple(np.shape(patch.source))
            if got != tuple(shape):
                raise WorkflowError(f"patch of {node.name!r}: the replacement array has shape {got}, the input has "
                                    f"{tuple(shape)}")
            kind = np.dtype(getattr(patch.source, "dtype", np.float64))
            want = np.dtype(run.node_record(node).dtype)
            if not np.can_cast(kind, want, "same_kind"):
                raise WorkflowError(f"patch of {node.name!r}: the replacement array holds {kind}, which does not "
                                    f"convert safely to the input's {want}")
        if patch.value is not None:
            _check_value(patch.value, np.dtype(run.node_record(node).dtype), node.name)
        out[node.name] = patch
    if not out:
        raise WorkflowError("replay needs at least one Patch")
    return out


def replay(run: "Run", patches: "Patch | list[Patch]", store: Any, executor: str = "local", spark: Any = None,
           progress: Reporter | None = None, outputs: Sequence[str] | None = None, check: bool = True,
           overwrite: bool = False) -> ReplayResult:
    """Re-run ``run``'s workflow with some input cells replaced, into the new ``store``,
    re-running only what the change reaches (see the module docs).

    Parameters
    ----------
    run
        A finished run (`subzero.open_run`).
    patches
        One `Patch` per changed input.
    store
        A new store for the replayed run (refused if it holds anything).
    executor, spark
        Where re-run tiles run: in this process (default: a replay usually re-runs a few
        tiles) or on Spark (``"spark"``, with an optional session).
    progress
        A `subzero.progress.Reporter`.
    outputs
        The nodes to report changes of (default: the workflow's outputs).
    check
        Check that every changed output cell lies within the forward lineage of the
        changed input cells (a forward query per changed input, old run and new).
    overwrite
        Replace ``store`` if it is a store subzero made (a failed replay's, say) that no
        live run is writing.

    Returns
    -------
    ReplayResult
        ``run`` is the new `Run` (a complete store: query it as any other).
    """
    from subzero.run import open_run
    from subzero.store.location import resolve

    started = time.perf_counter()
    progress = progress or Reporter()
    by_input = _check_patches(run, [patches] if isinstance(patches, Patch) else list(patches))
    if run.catalog.status != "done":
        raise StoreError(f"store {run.path!r} did not finish (status {run.catalog.status!r}); replay needs a "
                         "finished run")
    wanted = [run.node(o) for o in (outputs if outputs is not None else run.workflow.outputs)]
    location = resolve(store)
    check_executor(executor, location.url)
    if location.url == run.store.url:
        raise StoreError(f"replay writes a new store; {location.url!r} is the run it replays")
    record = replace(run.catalog, created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                     status="running", nodes={}, wall_seconds=None, executor=executor, master=None,
                     fingerprint={},  # not the old run's: a replayed store is not resumed as that run
                     replayed_from={"store": run.path, "created": run.catalog.created})
    fs = create_run(location, record, overwrite=overwrite)
    inputs: dict[str, tuple[int, int]] = {}
    work: _Replayer | None = None
    try:
        try:
            runner = make_executor(executor, spark)
            work = _Replayer(run, fs, runner, progress)
            work.catalog = replace(work.catalog, master=runner.master)
            for node in run.workflow.nodes:
                t0 = time.perf_counter()
                if node.is_input:
                    if node.name in by_input:
                        replaced, changed = work.patch(node, by_input[node.name], t0)
                        inputs[node.name] = (replaced, changed.count)
                    else:
                        work.link(node, t0)
                elif any(not work.changed.get(i.name, Frontier.empty((0,))).is_empty for i in node.inputs):
                    work.rerun(node, t0)
                else:
                    work.link(node, t0)
        except BaseException:
            fs.write_catalog(replace(work.catalog if work is not None else record, status="failed"))
            raise
        origin = {"store": run.path, "created": run.catalog.created,
                  "replaced": {k: v[0] for k, v in inputs.items()}, "changed": {k: v[1] for k, v in inputs.items()},
                  "nodes": {r.name: r.how if r.how not in ("tiles", "whole") else f"{r.rerun}/{r.tiles} tiles"
                            for r in work.report}}
        fs.write_catalog(replace(work.catalog, status="done", wall_seconds=time.perf_counter() - started,
                                 replayed_from=origin))
    finally:
        fs.close()
    seconds = time.perf_counter() - started
    new_run = open_run(location.url)
    changed_inputs = {name: work.changed[name] for name in by_input}
    t0 = time.perf_counter()
    results = {}
    lineage = _forward_lineage(run, new_run, changed_inputs, [n.name for n in wanted], work.changed) if check else {}
    for node in wanted:
        changed = work.changed.get(node.name, Frontier.empty(new_run.shape(node.name)))
        results[node.name] = OutputChange(node.name, changed, lineage.get(node.name) if check else None)
    return ReplayResult(run.path, new_run, inputs, work.report, results, seconds, time.perf_counter() - t0, executor,
                        changed_inputs)


def _forward_lineage(old: "Run", new: "Run", changed_inputs: dict[str, Frontier], outputs: list[str],
                     changed: dict[str, Frontier]) -> dict[str, bool]:
    """Per output, whether its changed cells lie within the forward lineage of the changed
    input cells in the old run or, failing that, in the union with the new run's (lineage
    that depends on values may differ between the two)."""
    ok: dict[str, bool] = {}
    pending = {o for o in outputs if o in changed and not changed[o].is_empty}
    for o in outputs:
        if o not in pending:
            ok[o] = True
    reach: dict[str, Frontier] = {}
    for run in (old, new):
        if not pending:
            break
        for name, cells in changed_inputs.items():
            if cells.is_empty:
                continue
            got = run.forward_many(name, cells, to=sorted(pending), as_="frontier")
            for o, f in got.items():
                if f.shape != changed[o].shape:  # the output's shape changed: only the new run's lineage fits
                    continue
                reach[o] = reach[o].union(f) if o in reach else f
        for o in sorted(pending):
            if o in reach and bool(np.all(reach[o].contains(changed[o].ids()))):
                ok[o] = True
                pending.discard(o)
    for o in pending:
        ok[o] = False
    return ok

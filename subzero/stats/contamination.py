"""Contamination maps: where flagged input cells end up (`contamination_mask`) and, for every
cell of a descendant, how many distinct flagged cells its lineage holds (`contamination_count`)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from subzero.errors import LineageError
from subzero.executors.tasks import map_items
from subzero.modes import Direction, Strategy
from subzero.stats.chunks import chunks_of, nonzero_cells
from subzero.stats.geometry import chunk_blocks
from subzero.stats.labelled import LabelledCells, propagate
from subzero.stats.table import array_over
from subzero.stats.tasks import executor_for, opened_run, travels

log = logging.getLogger(__name__)

__all__ = ["contamination_mask", "contamination_count", "merge_counts", "CountQuestion"]


def _flag_ids(run, src, flags) -> np.ndarray:
    """Flat ids of the flagged (nonzero) cells, read chunk by chunk from a stored node."""
    return nonzero_cells(array_over(run, src, flags, "flags"))[1]


def _check_path(run, src, to):
    src, to = run.node(src), run.node(to)
    if to not in run.workflow.descendants(src):
        raise LineageError(f"to={to.name!r} is not computed from {src.name!r}: flags of {src.name!r} cannot reach it; "
                           "give a descendant")
    return src, to


def contamination_mask(run: Any, src: str, flags: np.ndarray | str, to: str, using: dict | None = None) -> np.ndarray:
    """Boolean mask of ``to``: the cells whose lineage holds a flagged cell of ``src``
    (the forward query of every flagged cell at once).

    ``flags``: an array of ``src``'s shape (nonzero = flagged) or a stored node's name.
    """
    src, to = _check_path(run, src, to)
    ids = _flag_ids(run, src, flags)
    shape = tuple(run.shape(src))
    if not len(ids):
        return np.zeros(run.shape(to), bool)
    return run.forward_mask(src, np.stack(np.unravel_index(ids, shape), axis=1), to=to, using=using)


#: flagged cells carried together by default (each is its own label)
BATCH_CELLS = 1 << 16
#: flagged cells per task of a count on Spark's executors (neighbours: each task touches few tiles)
TASK_CELLS = 4096
#: the most tasks reading the flags (each a run of neighbouring chunks)
FLAG_TASKS = 64


@dataclass(frozen=True)
class CountQuestion:
    """What every task of a contamination count asks (picklable: it travels to Spark's
    executors): the run's ``store``, the nodes ``src`` and ``to``, ``flags`` (a node's name or a
    chunked array-like read where it lies; None once the flagged cells are known), the forced
    strategies ``using``, the run's ``opener`` and, for a count written to an array, its
    handle ``out`` (a `subzero.store.arrays.ArrayRef`) with its ``chunks``."""

    store: str
    src: str
    to: str
    src_shape: tuple[int, ...]
    to_shape: tuple[int, ...]
    flags: Any = None
    using: tuple[tuple[str, str], ...] = ()
    opener: Callable[[str], Any] | None = None
    out: Any = None
    chunks: tuple[int, ...] = ()


def _opened(question: CountQuestion) -> Any:
    return opened_run(question.store, question.opener)


def flag_block(question: CountQuestion, block: np.ndarray, run: Any = None) -> np.ndarray:
    """Flat ids (sorted) of the flagged (nonzero) cells in the flag array's chunks ``block``
    (row-major chunk indices): one task of the flags pass."""
    if run is None and isinstance(question.flags, str):
        run = _opened(question)
    arr = run.output(question.flags) if isinstance(question.flags, str) else question.flags
    shape, chunks = tuple(int(n) for n in arr.shape), chunks_of(arr)
    grid = tuple(-(-n // c) for n, c in zip(shape, chunks))
    parts = []
    for index in np.asarray(block, np.int64).tolist():
        lo = np.asarray(np.unravel_index(int(index), grid), np.int64) * np.asarray(chunks, np.int64)
        hi = np.minimum(lo + np.asarray(chunks, np.int64), np.asarray(shape, np.int64))
        local = np.nonzero(np.asarray(arr[tuple(slice(int(a), int(b)) for a, b in zip(lo, hi))]))
        if len(local[0]):
            parts.append(np.ravel_multi_index(tuple(k + a for k, a in zip(local, lo)), shape).astype(np.int64))
    return np.sort(np.concatenate(parts)) if parts else np.empty(0, np.int64)


def batch_counts(question: CountQuestion, cells: np.ndarray, run: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """The counts one batch of flagged cells (flat ids of ``src``) adds: ``(to's flat cell ids,
    counts)``, sparse pairs sorted by cell id (only the cells the batch reaches)."""
    run = run if run is not None else _opened(question)
    cells = np.asarray(cells, np.int64)
    size_src = int(np.prod(question.src_shape, dtype=np.int64))
    start = LabelledCells(question.src_shape, np.arange(len(cells), dtype=np.int64) * size_src + cells)
    reached = propagate(run, run.node(question.src), run.node(question.to), start, Direction.FORWARD,
                        {run.node(n): Strategy.parse(st) for n, st in question.using})
    ids, counts = np.unique(reached.cells, return_counts=True)
    return ids.astype(np.int64), counts.astype(np.int64)


def merge_counts(parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Sparse ``(ids, counts)`` pairs added up by cell id: sorted unique ids and their sums.

    Examples
    --------
    >>> ids, counts = merge_counts([(np.array([1, 4]), np.array([2, 1])), (np.array([4]), np.array([3]))])
    >>> ids.tolist(), counts.tolist()
    ([1, 4], [2, 4])
    """
    if not parts:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    ids = np.concatenate([np.asarray(p[0], np.int64) for p in parts])
    counts = np.concatenate([np.asarray(p[1], np.int64) for p in parts])
    unique, inverse = np.unique(ids, return_inverse=True)
    return unique, np.bincount(inverse.reshape(-1), weights=counts, minlength=len(unique)).astype(np.int64)


def _chunk_of(ids: np.ndarray, shape: tuple[int, ...], chunks: tuple[int, ...]) -> np.ndarray:
    """The row-major chunk index of each flat cell id."""
    coords = np.unravel_index(ids, shape)
    grid = tuple(-(-n // c) for n, c in zip(shape, chunks))
    return np.ravel_multi_index(tuple(k // c for k, c in zip(coords, chunks)), grid).astype(np.int64)


_PARTS = ".subzero-parts"


def spill_counts(question: CountQuestion, batch: tuple[int, np.ndarray], run: Any = None) -> np.ndarray:
    """One batch's counts (`batch_counts`) split by the output array's chunks and written beside
    it (one small file per chunk touched, merged later by `write_chunk`); returns the chunk
    indices it touched."""
    number, cells = batch
    ids, counts = batch_counts(question, cells, run)
    chunk = _chunk_of(ids, question.to_shape, question.chunks)
    order = np.argsort(chunk, kind="stable")
    chunk, ids, counts = chunk[order], ids[order], counts[order]
    bounds = np.flatnonzero(np.r_[True, chunk[1:] != chunk[:-1], True]) if len(chunk) else np.zeros(1, np.int64)
    location, path = question.out.location, question.out.path
    touched = chunk[bounds[:-1]]
    for a, b, c in zip(bounds[:-1].tolist(), bounds[1:].tolist(), touched.tolist()):
        location.makedirs(path, _PARTS, str(c))
        location.write_bytes(np.stack([ids[a:b], counts[a:b]]).tobytes(), path, _PARTS, str(c), f"{number}.bin",
                             durable=False)
    return touched


def write_chunk(question: CountQuestion, item: tuple[int, list[int]]) -> tuple[int, int, int]:
    """Merge the spilled counts of output chunk ``item[0]`` from the batches ``item[1]`` and write
    the chunk; returns (chunk, cells counted, largest count)."""
    chunk, batches = item
    location, path = question.out.location, question.out.path
    parts = []
    for number in batches:
        pair = np.frombuffer(location.read_bytes(path, _PARTS, str(chunk), f"{number}.bin"), np.int64).reshape(2, -1)
        parts.append((pair[0], pair[1]))
    ids, counts = merge_counts(parts)
    grid = tuple(-(-n // c) for n, c in zip(question.to_shape, question.chunks))
    lo = np.asarray(np.unravel_index(int(chunk), grid), np.int64) * np.asarray(question.chunks, np.int64)
    hi = np.minimum(lo + np.asarray(question.chunks, np.int64), np.asarray(question.to_shape, np.int64))
    block = np.zeros(tuple((hi - lo).tolist()), np.int64)
    coords = np.unravel_index(ids, question.to_shape)
    block[tuple(k - a for k, a in zip(coords, lo.tolist()))] = counts
    question.out.write_block(tuple(zip(lo.tolist(), hi.tolist())), block, question.to_shape, question.chunks)
    return int(chunk), len(ids), int(counts.max()) if len(counts) else 0


def _spark_flags(question: CountQuestion, block: np.ndarray) -> np.ndarray:
    return flag_block(question, block)


def _spark_counts(question: CountQuestion, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return batch_counts(question, cells)


def _spark_spill(question: CountQuestion, batch: tuple[int, np.ndarray]) -> np.ndarray:
    return spill_counts(question, batch)


def _spark_chunk(question: CountQuestion, item: tuple[int, list[int]]) -> tuple[int, int, int]:
    return write_chunk(question, item)


def _out_ref(out: Any, shape: tuple[int, ...]) -> Any:
    """The `ArrayRef` of the array the count is written to: a new path (local or a URL)."""
    from subzero.store.arrays import ArrayRef
    from subzero.store.location import resolve

    text = os.fspath(out) if isinstance(out, (str, os.PathLike)) else None
    if text is None:
        raise LineageError(f"out= must be the path (or URL) of a new Zarr array, got {type(out).__name__}")
    text = text.rstrip("/")
    parent, _, name = text.rpartition("/")
    if not name:
        raise LineageError(f"out={text!r} names no array; give a path such as 'counts.zarr'")
    location = resolve(parent or ".")
    if location.exists(name):
        raise LineageError(f"out={text!r} exists already; give a new path (or remove the old array first)")
    return ArrayRef(location, name, compressor="zstd")


def contamination_count(run: Any, src: Any, flags: Any, to: Any, using: dict | None = None,
                        batch_cells: int | None = None, out: Any = None, sparse: bool = False,
                        executor: str | None = None, spark: Any = None,
                        opener: Callable[[str], Any] | None = None) -> Any:
    """For each cell of ``to``, the number of distinct flagged cells of ``src`` in its backward
    lineage (set semantics: a flagged cell reached through two paths counts once).

    Every flagged cell is its own label, carried forward through each step with the
    labelled join (`subzero.stats.labelled`): the cost is the total size of the flagged
    cells' forward lineages, never a query per cell.  Flagged cells travel in batches of
    ``batch_cells`` neighbouring cells (None: `BATCH_CELLS` here, `TASK_CELLS` per Spark
    task); each batch's counts come back as sparse ``(cell ids, counts)`` pairs, and a cell is
    in one batch, so the pairs add up by cell id.  No array of ``to``'s size is made unless
    the dense answer is asked for.

    Parameters
    ----------
    flags : array or str
        An array of ``src``'s shape (nonzero = flagged; numpy, or a Zarr array read chunk by
        chunk, where only its nonzero cells are kept) or a stored node's name.
    out : str, optional
        The path (or URL) of a new Zarr array of ``to``'s shape and chunks: the counts are
        written chunk by chunk (each chunk merged by its own task from the batches' pairs,
        chunks no flagged cell reaches left as the fill value 0) and the array is returned.
    sparse : bool
        Return ``(ids, counts)``: the flat ids of ``to``'s cells with a nonzero count (sorted)
        and their counts, instead of the dense array.
    executor : {"local", "spark"}, optional
        Where the batches run: this process, or Spark tasks (default: Spark when the run used
        Spark, ``to`` has at least 1e8 cells and ``opener`` is given).
    opener : callable, optional
        Opens the run from its store in a Spark task (`subzero.run.open_run`).

    Returns
    -------
    numpy.ndarray or tuple or zarr.Array
        The dense int64 counts of ``to``'s shape (default), the sparse pairs (``sparse``) or the
        written array (``out``).
    """
    src, to = _check_path(run, src, to)  # Node objects from here on
    if batch_cells is not None and batch_cells < 1:
        raise LineageError(f"batch_cells must be a positive number of flagged cells, got {batch_cells}")
    if out is not None and sparse:
        raise LineageError("give out= (counts written to a Zarr array) or sparse=True (pairs returned), not both")
    src_shape, to_shape = tuple(int(n) for n in run.shape(src)), tuple(int(n) for n in run.shape(to))
    size_to = int(np.prod(to_shape, dtype=np.int64))
    flag_arr = array_over(run, src, flags, "flags")
    mode = executor_for(run, executor, size_to) if opener is not None else "local"
    checked = run._check_using(using)
    chunks = tuple(int(c) for c in run.output(to).chunks) if out is not None else ()
    ref = _out_ref(out, to_shape) if out is not None else None
    question = CountQuestion(str(run.path), src.name, to.name, src_shape, to_shape,
                             flags if isinstance(flags, str) else flag_arr,
                             tuple((nd.name, st) for nd, st in checked.items()), opener, ref, chunks)
    executor_obj: Any = None
    if mode == "spark":
        from subzero.executors.spark import SparkExecutor

        executor_obj = SparkExecutor(spark)
    t0 = time.perf_counter()
    if mode == "spark" and travels(question.flags):
        blocks = chunk_blocks(src_shape, chunks_of(flag_arr), FLAG_TASKS)
        found = map_items(executor_obj, _spark_flags, question, blocks, f"subzero contamination count: flags of "
                          f"{src.name}")
        ids = np.concatenate(found) if found else np.empty(0, np.int64)
    else:
        ids = nonzero_cells(flag_arr)[1]
    log.info("contamination count: %d flagged cells of %s found in %.3f s", len(ids), src.name,
             time.perf_counter() - t0)
    step = batch_cells if batch_cells is not None else (TASK_CELLS if mode == "spark" else BATCH_CELLS)
    biggest = max(*(int(np.prod(run.shape(n), dtype=np.int64)) for n in run.workflow.nodes), 1)
    if min(step, len(ids)) * biggest >= 2**63:
        raise LineageError(f"{min(step, len(ids))} flagged cells over arrays of {biggest} cells overflow the labelled "
                           "keys; give a smaller batch_cells")
    batches = [ids[a:a + step] for a in range(0, len(ids), step)]
    question = replace(question, flags=None)
    if ref is not None:
        return _written(run, question, batches, executor_obj, ref)
    if executor_obj is not None:
        parts = map_items(executor_obj, _spark_counts, question, batches,
                          f"subzero contamination count of {to.name} from {src.name}")
    else:
        parts = [batch_counts(question, b, run) for b in batches]
    cells, counts = merge_counts(parts)
    del parts
    if sparse:
        return cells, counts
    dense = np.zeros(size_to, np.int64)
    dense[cells] = counts
    return dense.reshape(to_shape)


def _written(run: Any, question: CountQuestion, batches: list[np.ndarray], executor_obj: Any, ref: Any) -> Any:
    """The count written into ``ref``: batches spill their pairs by chunk, then one task per
    chunk touched merges and writes it; the metadata last, the spilled pairs removed."""
    items = list(enumerate(batches))
    try:
        if executor_obj is not None:
            touched = map_items(executor_obj, _spark_spill, question, items,
                                f"subzero contamination count of {question.to}: batches")
        else:
            touched = [spill_counts(question, item, run) for item in items]
        by_chunk: dict[int, list[int]] = {}
        for number, chunks in enumerate(touched):
            for c in np.asarray(chunks).tolist():
                by_chunk.setdefault(int(c), []).append(number)
        work = sorted(by_chunk.items())
        if executor_obj is not None:
            written = map_items(executor_obj, _spark_chunk, question, work,
                                f"subzero contamination count of {question.to}: chunks")
        else:
            written = [write_chunk(question, item) for item in work]
        ref.commit(question.to_shape, "int64", question.chunks)
    finally:
        ref.location.remove(ref.path, _PARTS)
    log.info("contamination count of %s: %d chunks written, %d cells counted", question.to, len(written),
             sum(w[1] for w in written))
    return ref.open()

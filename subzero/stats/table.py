"""Per-object lineage statistics: one row per object of a label array (`lineage_table`)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from subzero.errors import LineageError
from subzero.modes import Direction, Strategy
from subzero.stats.chunks import chunks_of, gather, is_lazy
from subzero.stats.geometry import Batch, Geometry, batch_cells, block_geometry, chunk_blocks, plan_batches
from subzero.stats.labelled import LabelledCells, propagate
from subzero.stats.tasks import executor_for, opened_run, travels

if TYPE_CHECKING:
    from astropy.table import Table
    from subzero.dag import Node

log = logging.getLogger(__name__)

__all__ = ["lineage_table", "object_labels", "array_over", "default_over"]


def object_labels(run: Any, node: Node, objects: Any = None) -> tuple[Any, ...]:
    """The label array of ``node``: ``objects`` when given (an array, or a Zarr array or anything
    with shape, dtype and slicing, read chunk by chunk; checked against the node's shape), else
    the node's stored array (read chunk by chunk), which must hold integers (0 = background)."""
    shape = tuple(run.shape(node))
    if objects is None:
        labels = run.output(node)
        where = f"node {node.name!r}"
        fix = f"give objects= (an int label array of shape {shape}) or a node that holds labels"
    else:
        labels = objects if is_lazy(objects) else np.asarray(objects)
        where = "objects="
        fix = f"give an int label array of node {node.name!r}'s shape {shape}"
        if tuple(labels.shape) != shape:
            raise LineageError(f"objects= has shape {tuple(labels.shape)}, node {node.name!r} has shape {shape}; {fix}")
    dtype = np.dtype(labels.dtype)
    if dtype == bool or not (np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.floating)):
        raise LineageError(f"{where} holds {dtype} values, not object labels (int, 0 = background); {fix}")
    return labels, where, fix


def _checked(geometry: Geometry, labels: Any, where: str, fix: str) -> None:
    """Labels must be whole numbers >= 0 (what every chunk's reading found)."""
    if geometry.fractional:
        raise LineageError(f"{where} holds {np.dtype(labels.dtype)} values, not object labels (int, 0 = background); "
                           f"{fix}")
    if geometry.negative:
        raise LineageError(f"{where} holds negative labels; labels are ints >= 1 for objects, 0 for background")


def array_over(run: Any, over: Node, arg: Any, what: str) -> Any:
    """``arg`` (an array of ``over``'s shape, a Zarr array or anything with shape, dtype and
    slicing, or a stored node's name) as an array of ``over``'s shape: a node's array and
    array-likes stay where they are (read chunk by chunk, where the lineage lies)."""
    shape = tuple(run.shape(over))
    if isinstance(arg, str):
        ref = run.node(arg)
        arr = run.output(ref)  # read chunk by chunk, where the lineage lies
        source = f"node {ref.name!r}"
    else:
        arr = arg if is_lazy(arg) else np.asarray(arg)
        source = f"{what}="
    if tuple(arr.shape) != shape:
        raise LineageError(f"{source} has shape {tuple(arr.shape)}, but {what} must cover node {over.name!r} of shape "
                           f"{shape}; give an array (or node) of that shape")
    try:
        np.dtype(arr.dtype)
    except TypeError:
        raise LineageError(f"{source} has dtype {arr.dtype!r}, not a numpy dtype; give a numeric or bool array "
                           "(a numpy or Zarr array, or a node's name)") from None
    return arr


def default_over(run: Any, node: Node) -> Node:
    """The one input array ``node`` is computed from (the default ``over``)."""
    inputs = [n for n in run.workflow.nodes if n.is_input and n in run.workflow.ancestors(node)]
    if len(inputs) != 1:
        raise LineageError(f"give over= (--over): node {node.name!r} is computed from the inputs "
                           f"{', '.join(n.name for n in inputs) or '(none)'}; name the one to measure lineage in")
    return inputs[0]


def _axis_names(ndim: int) -> list[str]:
    return ["r", "c"] if ndim == 2 else (["i"] if ndim == 1 else [f"a{k}" for k in range(ndim)])


#: objects carried together by default: neighbours, so a batch touches few tiles and its sorts stay in cache
BATCH_OBJECTS = 2048
#: the most tasks reading the label array's geometry (each a run of neighbouring chunks)
GEOMETRY_TASKS = 64


@dataclass(frozen=True)
class Question:
    """What every task of a table asks (picklable: it travels to Spark's executors): the label
    array ``labels`` (a node's name, or an array-like that travels, read chunk by chunk; None
    when each batch carries its cells), ``flags`` and ``values`` (a node's name, an array of
    ``over``'s shape, or None)."""

    store: str
    node: str
    over: str
    shape: tuple[int, ...]
    flags: Any = None
    values: Any = None
    using: tuple[tuple[str, str], ...] = ()
    #: opens the run from its store in a Spark task (`subzero.run.open_run`, pickled by reference:
    #: passed in, so the statistics, which sit above the run, import nothing of it)
    opener: Callable[[str], Any] | None = None
    labels: Any = None


def _opened(question: Question) -> Any:
    """The run of the question's store, opened once per process."""
    return opened_run(question.store, question.opener)


def _array(run: Any, arg: Any) -> Any:
    """A question's array: a node's name read from the run, else the array itself."""
    return run.output(arg) if isinstance(arg, str) else arg


def geometry_of(question: Question, block: np.ndarray, run: Any = None) -> Geometry:
    """The partial geometry of the label array's chunks ``block`` (`block_geometry`): one task
    of the geometry pass."""
    run = run if run is not None else _opened(question)
    return block_geometry(_array(run, question.labels), block)


def batch_statistics(question: Question, batch: Batch, run: Any = None) -> tuple[np.ndarray, ...]:
    """Lineage statistics of one batch of objects: its objects' cells (read from the label array's
    chunks the batch names, or carried by it), carried back to ``over``; returns the batch's
    object positions and, for each, n_lineage, n_flagged, values sum and max (arrays aligned
    with the positions)."""
    run = run if run is not None else _opened(question)
    local, cells = batch_cells(_array(run, question.labels), batch)
    k = len(batch.objects)
    node, over = run.node(question.node), run.node(question.over)
    flags, values = _array(run, question.flags), _array(run, question.values)
    reached = propagate(run, node, over, LabelledCells.of(local, cells, question.shape), Direction.BACKWARD,
                        {run.node(n): Strategy.parse(st) for n, st in question.using})
    lab, cell = reached.labels, reached.cells
    n_lineage = np.bincount(lab, minlength=k)
    n_flagged = np.zeros(k, np.int64)
    total, vmax = np.zeros(k), np.full(k, np.nan)
    if flags is not None:
        n_flagged = np.bincount(lab, weights=gather(flags, cell) != 0, minlength=k).astype(np.int64)
    if values is not None and len(cell):
        v = gather(values, cell).astype(np.float64)
        total = np.bincount(lab, weights=v, minlength=k).astype(np.float64)
        starts = np.flatnonzero(np.r_[True, lab[1:] != lab[:-1]])  # keys sorted by label: one run each
        vmax[lab[starts]] = np.maximum.reduceat(v, starts)
    return batch.objects, n_lineage, n_flagged, total, vmax


def _spark_geometry(question: Question, block: np.ndarray) -> Geometry:
    return geometry_of(question, block)


def _spark_batch(question: Question, batch: Batch):
    return batch_statistics(question, batch)


def lineage_table(run: Any, node: Any, over: Any = None, flags: Any = None, values: Any = None, objects: Any = None,
                  using: dict | None = None, batch_objects: int | None = BATCH_OBJECTS, executor: str | None = None,
                  spark: Any = None, opener: Callable[[str], Any] | None = None) -> "Table":
    """Per-object statistics of the objects' backward lineage in ``over`` (see `Run.lineage_table`).

    Two passes, neither holding the label array's cells in this process: the geometry pass reads
    the label array chunk by chunk (runs of neighbouring chunks per task) and returns each
    label's partial geometry, added up here by label (n objects x a few numbers); then objects
    are carried in batches of at most ``batch_objects`` neighbouring objects (None: all at
    once), each batch's task reading the chunks its objects' bounding boxes touch and keeping
    their cells, so memory follows one batch's lineage.  ``flags``/``values`` that are node
    names or Zarr arrays (anything with shape, dtype and slicing) are read by the tasks where
    the lineage lies.  Tasks run in this process (``executor="local"``) or as Spark tasks
    (``"spark"``; default: Spark when the run used Spark and the label array has at least
    `subzero.stats.tasks.SPARK_CELLS` cells).  An object lies in one batch, so batches need no merging.  Spark's
    tasks open the run with ``opener`` (`Run.lineage_table` passes `subzero.run.open_run`);
    without one, everything runs here.
    """
    from astropy.table import Table

    node = run.node(node)
    over = run.node(over) if over is not None else default_over(run, node)
    if over not in run.workflow.ancestors(node):
        raise LineageError(f"over={over.name!r} is not an ancestor of {node.name!r}: give a node that "
                           f"{node.name!r} is computed from")
    if batch_objects is not None and batch_objects < 1:
        raise LineageError(f"batch_objects must be a positive number of objects, got {batch_objects}")
    labels, where, fix = object_labels(run, node, objects)
    flag_arr = array_over(run, over, flags, "flags") if flags is not None else None
    value_arr = array_over(run, over, values, "values") if values is not None else None
    if value_arr is not None and not (np.issubdtype(np.dtype(value_arr.dtype), np.number)
                                      or np.dtype(value_arr.dtype) == bool):
        raise LineageError(f"values= holds {value_arr.dtype} data; give numbers")
    shape = tuple(int(n) for n in labels.shape)
    checked = run._check_using(using)
    mode = executor_for(run, executor, int(np.prod(shape, dtype=np.int64))) if opener is not None else "local"
    label_ref = node.name if objects is None else labels
    on_spark = mode == "spark"
    question = Question(str(run.path), node.name, over.name, shape,
                        flags if isinstance(flags, str) or flags is None else flag_arr,
                        values if isinstance(values, str) or values is None else value_arr,
                        tuple((nd.name, st) for nd, st in checked.items()), opener, label_ref)
    executor_obj: Any = None
    if on_spark:
        from subzero.executors.spark import SparkExecutor

        executor_obj = SparkExecutor(spark)
    t0 = time.perf_counter()
    chunks = chunks_of(labels)
    blocks = chunk_blocks(shape, chunks, GEOMETRY_TASKS)
    if on_spark and travels(label_ref):
        from subzero.executors.tasks import map_items

        parts = map_items(executor_obj, _spark_geometry, question, blocks,
                          f"subzero lineage table of {node.name}: geometry")
    else:  # the label array is here (in memory, or read here): each block read in turn
        parts = [geometry_of(question, b, run) for b in blocks]
    geometry = Geometry.merge(parts, len(shape))
    del parts
    _checked(geometry, labels, where, fix)
    n = len(geometry)
    log.info("lineage table of %s: geometry of %d objects from %d blocks of chunks in %.3f s", node.name, n,
             len(blocks), time.perf_counter() - t0)
    batches = plan_batches(geometry, shape, chunks, batch_objects)
    if on_spark:
        from subzero.executors.tasks import map_items

        if not travels(label_ref):  # an in-memory label array stays here: each batch carries its cells
            batches = [_carrying(labels, b) for b in batches]
            question = Question(question.store, question.node, question.over, question.shape, question.flags,
                                question.values, question.using, question.opener, None)
        results = map_items(executor_obj, _spark_batch, question, batches,
                            f"subzero lineage table of {node.name} over {over.name}")
    else:
        results = [batch_statistics(question, b, run) for b in batches]
    n_lineage, n_flagged = np.zeros(n, np.int64), np.zeros(n, np.int64)
    total, vmax = np.zeros(n), np.full(n, np.nan)
    for ids, part_lineage, part_flagged, part_total, part_max in results:
        n_lineage[ids], n_flagged[ids], total[ids], vmax[ids] = part_lineage, part_flagged, part_total, part_max
    del results
    columns: dict = {"label": geometry.labels, "area": geometry.area}
    names = _axis_names(len(shape))
    for axis, name in enumerate(names):
        columns[f"bbox_{name}0"] = geometry.lo[:, axis]
        columns[f"bbox_{name}1"] = geometry.hi[:, axis]
    centroid = geometry.centroid
    for axis, name in enumerate(names):
        columns[f"centroid_{name}"] = centroid[:, axis]
    columns["n_lineage"] = n_lineage
    if flag_arr is not None:
        columns["n_flagged"] = n_flagged
        columns["flagged_fraction"] = np.divide(n_flagged, n_lineage, out=np.zeros(n), where=n_lineage > 0)
    if value_arr is not None:
        columns["values_sum"] = total
        columns["values_mean"] = np.divide(total, n_lineage, out=np.full(n, np.nan), where=n_lineage > 0)
        columns["values_max"] = vmax
    table = Table(columns, copy=False)  # the columns are this call's own arrays: no second copy
    table.meta.update({"node": node.name, "over": over.name, "store": str(run.path), "batches": len(batches),
                       "executor": mode,
                       "flags": flags if isinstance(flags, str) else ("array" if flags is not None else None),
                       "values": values if isinstance(values, str) else ("array" if values is not None else None)})
    return table


def _carrying(labels: Any, batch: Batch) -> Batch:
    """``batch`` with its cells read here (for a label array that does not travel)."""
    local, cells = batch_cells(labels, batch)
    return Batch(batch.objects, batch.labels, batch.chunks, batch.lo, batch.hi, cells, local)

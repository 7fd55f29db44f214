"""Per-object lineage statistics: one row per object of a label array (`lineage_table`)."""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from subzero.errors import LineageError
from subzero.modes import Direction, Strategy
from subzero.stats.chunks import gather, nonzero_cells
from subzero.stats.labelled import LabelledCells, propagate

if TYPE_CHECKING:
    from astropy.table import Table
    from subzero.dag import Node

__all__ = ["lineage_table", "object_labels", "array_over", "default_over"]


def object_labels(run: Any, node: Node, objects: np.ndarray | None = None) -> tuple[Any, ...]:
    """The label array of ``node``: ``objects`` when given (checked against its shape), else the
    node's stored array (read chunk by chunk later), which must hold integers (0 = background)."""
    shape = tuple(run.shape(node))
    if objects is None:
        labels = run.output(node)
        where = f"node {node.name!r}"
        fix = f"give objects= (an int label array of shape {shape}) or a node that holds labels"
    else:
        labels = np.asarray(objects)
        where = "objects="
        fix = f"give an int label array of node {node.name!r}'s shape {shape}"
        if labels.shape != shape:
            raise LineageError(f"objects= has shape {labels.shape}, node {node.name!r} has shape {shape}; {fix}")
    dtype = np.dtype(labels.dtype)
    if dtype == bool or not (np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.floating)):
        raise LineageError(f"{where} holds {dtype} values, not object labels (int, 0 = background); {fix}")
    return labels, where, fix


def _label_cells(labels, where: str, fix: str) -> tuple[np.ndarray, np.ndarray]:
    """The labelled cells: (int64 labels, flat ids), checked: whole numbers >= 0."""
    values, cells = nonzero_cells(labels)
    if np.issubdtype(values.dtype, np.floating):  # labels stored as floats (e.g. from FITS): whole numbers only
        if not (np.all(np.isfinite(values)) and np.array_equal(values, np.round(values))):
            raise LineageError(f"{where} holds {values.dtype} values, not object labels (int, 0 = background); {fix}")
    values = values.astype(np.int64)
    if len(values) and values.min() < 0:
        raise LineageError(f"{where} holds negative labels; labels are ints >= 1 for objects, 0 for background")
    return values, cells


def array_over(run: Any, over: Node, arg: Any, what: str) -> np.ndarray:
    """``arg`` (an array of ``over``'s shape, or a stored node's name) as an array of ``over``'s shape."""
    shape = tuple(run.shape(over))
    if isinstance(arg, str):
        ref = run.node(arg)
        arr = run.output(ref)  # read chunk by chunk, where the lineage lies
        source = f"node {ref.name!r}"
    else:
        arr = np.asarray(arg)
        source = f"{what}="
    if tuple(arr.shape) != shape:
        raise LineageError(f"{source} has shape {tuple(arr.shape)}, but {what} must cover node {over.name!r} of shape "
                           f"{shape}; give an array (or node) of that shape")
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


def _geometry(values: np.ndarray, cells: np.ndarray, shape):
    """Per object (in label order): label, area, half-open bbox and centroid, and each labelled
    cell's object index."""
    ndim = len(shape)
    order = np.argsort(values, kind="stable")
    ranked = values[order]
    first = np.r_[True, ranked[1:] != ranked[:-1]] if len(ranked) else np.zeros(0, bool)
    label_ids = ranked[first]
    index = np.empty(len(cells), np.int64)
    index[order] = np.cumsum(first) - 1
    n = len(label_ids)
    coords = np.stack(np.unravel_index(cells, shape), axis=1).astype(np.int64) if ndim else \
        np.zeros((len(cells), 0), np.int64)
    area = np.bincount(index, minlength=n)
    lo = np.full((n, ndim), np.iinfo(np.int64).max, np.int64)
    hi = np.full((n, ndim), -1, np.int64)
    centroid = np.zeros((n, ndim))
    for axis in range(ndim):
        np.minimum.at(lo[:, axis], index, coords[:, axis])
        np.maximum.at(hi[:, axis], index, coords[:, axis] + 1)
        centroid[:, axis] = np.bincount(index, coords[:, axis], minlength=n) / np.maximum(area, 1)
    return label_ids, area, lo, hi, centroid, index


def _batches(index: np.ndarray, cells: np.ndarray, n: int, batch_objects: int | None) -> list[np.ndarray]:
    """Positions of the labelled cells, split into groups of at most ``batch_objects`` objects that
    lie near each other (objects ordered by their first cell, so a group touches few tiles)."""
    if batch_objects is None or n <= batch_objects:
        return [np.arange(len(cells))]
    if batch_objects < 1:
        raise LineageError(f"batch_objects must be a positive number of objects, got {batch_objects}")
    first = np.full(n, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first, index, cells)
    rank = np.empty(n, np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(n)
    group = rank[index] // batch_objects
    order = np.argsort(group, kind="stable")
    bounds = np.searchsorted(group[order], np.arange(int(group.max()) + 2))
    return [order[a:b] for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


#: objects carried together by default: neighbours, so a batch touches few tiles and its sorts stay in cache
BATCH_OBJECTS = 2048
#: label arrays at least this large are answered on Spark's executors when the run used Spark
SPARK_CELLS = 10**8


@dataclass(frozen=True)
class Question:
    """What every batch of objects asks (picklable: it travels to Spark's executors)."""

    store: str
    node: str
    over: str
    shape: tuple[int, ...]
    flags: Any = None       # a node's name, an array of ``over``'s shape, or None
    values: Any = None
    using: tuple[tuple[str, str], ...] = ()
    #: opens the run from its store in a Spark task (`subzero.run.open_run`, pickled by reference:
    #: passed in, so the statistics, which sit above the run, import nothing of it)
    opener: Callable[[str], Any] | None = None


_RUNS: dict[str, Any] = {}


def _opened(question: Question):
    """The run of the question's store, opened once per process (Spark's Python workers keep it)."""
    if question.store not in _RUNS:
        if question.opener is None:  # pragma: no cover - lineage_table sends Spark only questions with one
            raise LineageError("a lineage table batch outside the driver needs the run's opener")
        _RUNS[question.store] = question.opener(question.store)
    return _RUNS[question.store]


def batch_statistics(question: Question, batch: tuple[np.ndarray, np.ndarray],
                     run: Any = None) -> tuple[np.ndarray, ...]:
    """Lineage statistics of one batch of objects: ``batch`` is (object index, flat cell) of
    their cells; returns the batch's object indices and, for each, n_lineage, n_flagged,
    values sum and max (arrays aligned with the indices)."""
    run = run if run is not None else _opened(question)
    index, cells = batch
    ids, local = np.unique(index, return_inverse=True)
    local = local.astype(np.int64).reshape(-1)
    k = len(ids)
    node, over = run.node(question.node), run.node(question.over)
    flags = run.output(question.flags) if isinstance(question.flags, str) else question.flags
    values = run.output(question.values) if isinstance(question.values, str) else question.values
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
    return ids, n_lineage, n_flagged, total, vmax


def _spark_batch(question: Question, batch):
    return batch_statistics(question, batch)


def _executor_for(run, executor: str | None, size: int) -> str:
    if executor is None:
        return "spark" if run.catalog.executor == "spark" and size >= SPARK_CELLS else "local"
    if executor not in ("local", "spark"):
        raise LineageError(f"executor={executor!r}: use 'local' (this process), 'spark' (the executors) or None "
                           "(Spark for large arrays of runs made on Spark)")
    return executor


def lineage_table(run: Any, node: Any, over: Any = None, flags: np.ndarray | str | None = None,
                  values: np.ndarray | str | None = None, objects: np.ndarray | None = None,
                  using: dict | None = None, batch_objects: int | None = BATCH_OBJECTS, executor: str | None = None,
                  spark: Any = None, opener: Callable[[str], Any] | None = None) -> "Table":
    """Per-object statistics of the objects' backward lineage in ``over`` (see `Run.lineage_table`).

    Objects are carried in batches of at most ``batch_objects`` neighbouring objects (None:
    all at once), so memory follows one batch's lineage; each batch runs in this process
    (``executor="local"``) or as a Spark task (``"spark"``; default: Spark when the run used
    Spark and the label array has at least `SPARK_CELLS` cells).  An object lies in one
    batch, so batches need no merging.  Spark's tasks open the run with ``opener``
    (`Run.lineage_table` passes `subzero.run.open_run`); without one, batches run here.
    """
    from astropy.table import Table

    node = run.node(node)
    over = run.node(over) if over is not None else default_over(run, node)
    if over not in run.workflow.ancestors(node):
        raise LineageError(f"over={over.name!r} is not an ancestor of {node.name!r}: give a node that "
                           f"{node.name!r} is computed from")
    labels, where, fix = object_labels(run, node, objects)
    flag_arr = array_over(run, over, flags, "flags") if flags is not None else None
    value_arr = array_over(run, over, values, "values") if values is not None else None
    if value_arr is not None and not (np.issubdtype(value_arr.dtype, np.number) or value_arr.dtype == bool):
        raise LineageError(f"values= holds {value_arr.dtype} data; give numbers")
    shape = tuple(labels.shape)
    label_values, cells = _label_cells(labels, where, fix)
    label_ids, area, lo, hi, centroid, index = _geometry(label_values, cells, shape)
    n = len(label_ids)
    checked = run._check_using(using)
    mode = _executor_for(run, executor, int(np.prod(shape, dtype=np.int64))) if opener is not None else "local"
    question = Question(str(run.path), node.name, over.name, shape,
                        flags if isinstance(flags, str) or flags is None else np.asarray(flag_arr),
                        values if isinstance(values, str) or values is None else np.asarray(value_arr),
                        tuple((nd.name, st) for nd, st in checked.items()), opener)
    batches = [(index[b], cells[b]) for b in _batches(index, cells, n, batch_objects)]
    if mode == "spark":
        from subzero.executors.spark import SparkExecutor
        from subzero.executors.tasks import map_items

        parts = map_items(SparkExecutor(spark), _spark_batch, question, batches,
                          f"subzero lineage table of {node.name} over {over.name}")
    else:
        parts = [batch_statistics(question, b, run) for b in batches]
    n_lineage, n_flagged = np.zeros(n, np.int64), np.zeros(n, np.int64)
    total, vmax = np.zeros(n), np.full(n, np.nan)
    for ids, part_lineage, part_flagged, part_total, part_max in parts:
        n_lineage[ids], n_flagged[ids], total[ids], vmax[ids] = part_lineage, part_flagged, part_total, part_max
    columns: dict = {"label": label_ids, "area": area}
    names = _axis_names(len(shape))
    for axis, name in enumerate(names):
        columns[f"bbox_{name}0"] = lo[:, axis]
        columns[f"bbox_{name}1"] = hi[:, axis]
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
    table = Table(columns)
    table.meta.update({"node": node.name, "over": over.name, "store": str(run.path), "batches": len(batches),
                       "executor": mode,
                       "flags": flags if isinstance(flags, str) else ("array" if flags is not None else None),
                       "values": values if isinstance(values, str) else ("array" if values is not None else None)})
    return table

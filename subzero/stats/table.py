"""Per-object lineage statistics: one row per object of a label array (`lineage_table`)."""

from __future__ import annotations

import numpy as np

from subzero.errors import LineageError
from subzero.stats.chunks import gather, nonzero_cells
from subzero.stats.labelled import LabelledCells, propagate

__all__ = ["lineage_table", "object_labels", "array_over", "default_over"]


def object_labels(run, node, objects=None):
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


def array_over(run, over, arg, what: str) -> np.ndarray:
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


def default_over(run, node):
    """The one input array ``node`` is computed from (the default ``over``)."""
    inputs = [n for n in run.workflow.nodes if n.is_input and n in run.workflow.ancestors(node)]
    if len(inputs) != 1:
        raise LineageError(f"give over=: node {node.name!r} is computed from the inputs "
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


def lineage_table(run, node, over=None, flags=None, values=None, objects=None, using: dict | None = None,
                  batch_objects: int | None = None):
    """Per-object statistics of the objects' backward lineage in ``over`` (see `Run.lineage_table`);
    ``batch_objects`` carries at most that many objects at a time (neighbours together), so
    memory follows the lineage of one batch."""
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
    using = run._check_using(using)
    n_lineage = np.zeros(n, np.int64)
    n_flagged = np.zeros(n, np.int64)
    total = np.zeros(n)
    vmax = np.full(n, np.nan)
    for batch in _batches(index, cells, n, batch_objects):
        start = LabelledCells.of(index[batch], cells[batch], shape)
        reached = propagate(run, node, over, start, "backward", using)
        lab, cell = reached.labels, reached.cells
        n_lineage += np.bincount(lab, minlength=n)
        if flag_arr is not None:
            n_flagged += np.bincount(lab, weights=gather(flag_arr, cell) != 0, minlength=n).astype(np.int64)
        if value_arr is not None and len(cell):
            v = gather(value_arr, cell).astype(np.float64)
            total += np.bincount(lab, weights=v, minlength=n)
            starts = np.flatnonzero(np.r_[True, lab[1:] != lab[:-1]])  # keys sorted by label: one run each
            vmax[lab[starts]] = np.maximum.reduceat(v, starts)
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
    table.meta.update({"node": node.name, "over": over.name, "store": str(run.path),
                       "flags": flags if isinstance(flags, str) else ("array" if flags is not None else None),
                       "values": values if isinstance(values, str) else ("array" if values is not None else None)})
    return table

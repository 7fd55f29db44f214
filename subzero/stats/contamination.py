"""Contamination maps: where flagged input cells end up (`contamination_mask`) and, for every
cell of a descendant, how many distinct flagged cells its lineage holds (`contamination_count`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from subzero.errors import LineageError
from subzero.modes import Direction
from subzero.stats.chunks import nonzero_cells
from subzero.stats.labelled import LabelledCells, propagate
from subzero.stats.table import array_over

__all__ = ["contamination_mask", "contamination_count"]


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


def contamination_count(run: Any, src: str, flags: np.ndarray | str, to: str, using: dict | None = None,
                        batch_cells: int | None = BATCH_CELLS) -> np.ndarray:
    """For each cell of ``to``, the number of distinct flagged cells of ``src`` in its backward
    lineage (set semantics: a flagged cell reached through two paths counts once).

    Every flagged cell is its own label, carried forward through each step with the
    labelled join (`subzero.stats.labelled`): the cost is the total size of the flagged
    cells' forward lineages, never a query per cell.  Flagged cells travel in batches of
    ``batch_cells`` (None: all at once); a cell is in one batch, so the counts add up.
    """
    src, to = _check_path(run, src, to)
    ids = _flag_ids(run, src, flags)
    to_shape = tuple(run.shape(to))
    size_src = int(np.prod(run.shape(src), dtype=np.int64))
    size_to = int(np.prod(to_shape, dtype=np.int64))
    counts = np.zeros(size_to, np.int64)
    if not len(ids):
        return counts.reshape(to_shape)
    if batch_cells is not None and batch_cells < 1:
        raise LineageError(f"batch_cells must be a positive number of flagged cells, got {batch_cells}")
    step = len(ids) if batch_cells is None else batch_cells
    biggest = max(size_src, size_to, *(int(np.prod(run.shape(n), dtype=np.int64)) for n in run.workflow.nodes))
    if min(step, len(ids)) * biggest >= 2**63:
        raise LineageError(f"{min(step, len(ids))} flagged cells over arrays of {biggest} cells overflow the labelled "
                           "keys; give a smaller batch_cells")
    checked = run._check_using(using)
    for a in range(0, len(ids), step):
        part = ids[a:a + step]
        start = LabelledCells(tuple(run.shape(src)), np.arange(len(part), dtype=np.int64) * size_src + part)
        reached = propagate(run, src, to, start, Direction.FORWARD, checked)
        counts += np.bincount(reached.cells, minlength=size_to)
    return counts.reshape(to_shape)

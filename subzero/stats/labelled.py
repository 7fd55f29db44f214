"""Labelled lineage: many objects' lineages carried through a workflow in one pass.

A union query carries one frontier; here every cell carries the objects (labels) whose
lineage holds it, as sorted unique int64 keys ``label * size + cell`` (`LabelledCells`).
Each step takes the per-cell relation of the step (`subzero.stats.relation`) for the
union of the cells and joins it with the labelled cells: ``(label, out cell)`` ->
``(label, group)`` (deduplicated) -> ``(label, in cell)`` (deduplicated).  Cost follows
the total size of the objects' lineages, never one query per object.

Three steps avoid the per-cell expansion where it would multiply the work:

- mapping operators whose out cells read at most one cell each (elementwise, index maps)
  replace every labelled cell by the cell it reads, without a join;
- other mapping operators with a box form (stencils) step each label's cells as boxes
  (`subzero.boxes.cover_ids` per label, then ``map_b_boxes``/``map_f_boxes``), so a stencil
  grows a label's region by its halo once rather than once per cell;
- payload steps (Pay, Comp) expand every cell's lineage at once (one ``map_p_pairs`` call per
  payload) while a sample of cells predicts few pairs, else call ``map_p`` once per (payload,
  label) on that label's cells, not once per cell (a component read by each of its cells would
  cost its area squared).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from subzero.boxes import cover_ids
from subzero.cells import sorted_unique, to_coords, to_ids, unique_ids
from subzero.encoders.ranges.lists import box_cells, expand_csr
from subzero.errors import LineageError
from subzero.frontier import Frontier
from subzero.modes import Direction, Mode, Strategy
from subzero.operator import Operator
from subzero.pairs import owners
from subzero.stats.relation import Groups, backward_groups, forward_groups, payload_lookup
from subzero.worker import expand_payloads

if TYPE_CHECKING:
    from subzero.dag import Node
    from subzero.query import QueryEngine

__all__ = ["LabelledCells", "propagate"]

#: the most (object, cell) pairs one step may expand to (16 GB of int64 keys)
MAX_PAIRS = 2**31

@dataclass
class LabelledCells:
    """Cells of an array of ``shape``, each with the labels (0..n_labels-1) that hold it:
    sorted unique keys ``label * size + cell``."""

    shape: tuple[int, ...]
    keys: np.ndarray
    _union: Frontier | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def size(self) -> int:
        """Cells of the array."""
        return int(np.prod(self.shape, dtype=np.int64))

    @classmethod
    def of(cls, labels: np.ndarray, cells: np.ndarray, shape: tuple[int, ...]) -> "LabelledCells":
        """The (label, cell) pairs of ``labels`` and flat ``cells`` of an array of ``shape``."""
        shape = tuple(int(n) for n in shape)
        size = int(np.prod(shape, dtype=np.int64))
        return cls(shape, sorted_unique(np.asarray(labels, np.int64) * size + np.asarray(cells, np.int64)))

    @classmethod
    def empty(cls, shape: tuple[int, ...]) -> "LabelledCells":
        """No pairs over an array of ``shape``."""
        return cls(tuple(shape), np.empty(0, np.int64))

    @property
    def labels(self) -> np.ndarray:
        """The label of each pair."""
        return self.keys // self.size

    @property
    def cells(self) -> np.ndarray:
        """The flat cell id of each pair."""
        return self.keys % self.size

    def frontier(self) -> Frontier:
        """The union of every label's cells (computed once)."""
        if self._union is None:
            self._union = Frontier.of_ids(unique_ids(self.cells, self.size), self.shape, unique=True)
        return self._union

    def union(self, other: "LabelledCells") -> "LabelledCells":
        """The pairs of either set."""
        return LabelledCells(self.shape, sorted_unique(np.concatenate([self.keys, other.keys]), runs=True))

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def is_empty(self) -> bool:
        """True when no label holds a cell."""
        return not len(self.keys)

    def estimate(self) -> int:
        """The distinct cells held (the union frontier a step reads lineage for)."""
        return self.frontier().estimate()

    def step(self, engine: QueryEngine, node: Node, i: int, direction: Direction,
             strategy: Strategy) -> "LabelledCells":
        """The pairs carried one step through ``node`` w.r.t. its input ``i`` (a
        `subzero.query.Carrier` step: the engine's walk chose ``strategy``)."""
        if direction is Direction.BACKWARD:
            return step_backward(engine, node, self, i, strategy)
        return step_forward(engine, node, self, i, strategy)


# -- one step ----------------------------------------------------------------------------
def _join(labelled: LabelledCells, cells_side: tuple[np.ndarray, np.ndarray], other_side: tuple[np.ndarray, np.ndarray],
          n_groups: int, target: tuple[int, ...]) -> LabelledCells:
    """(label, cell) joined with groups' ``cells_side`` (ids, ptr), carried to ``other_side``."""
    ids, ptr = cells_side
    if not len(labelled) or not len(ids):
        return LabelledCells.empty(target)
    group = owners(ptr)
    lab, cell = labelled.labels, labelled.cells
    order = np.argsort(cell, kind="stable")
    cell, lab = cell[order], lab[order]
    a = np.searchsorted(cell, ids, "left")
    b = np.searchsorted(cell, ids, "right")
    n = b - a
    hit = n > 0
    a, n, group = a[hit], n[hit], group[hit]
    total = int(n.sum())
    pos = np.repeat(a - np.cumsum(n) + n, n) + np.arange(total, dtype=np.int64)
    lab_group = sorted_unique(lab[pos] * n_groups + np.repeat(group, n))
    lab_u, group_u = lab_group // n_groups, lab_group % n_groups
    out_ids, out_ptr = other_side
    total = int((out_ptr[group_u + 1] - out_ptr[group_u]).sum())
    if total > MAX_PAIRS:
        raise LineageError(f"this step would hold {total:,} (object, cell) pairs, more than {MAX_PAIRS:,}: the "
                           "objects' lineages are too large to carry together (an all-to-all step gives every "
                           "object the whole array); ask about fewer objects, or a nearer ancestor as over=")
    where, row = expand_csr(out_ptr, group_u)
    size = int(np.prod(target, dtype=np.int64))
    return LabelledCells(target, sorted_unique(lab_u[row] * size + out_ids[where]))


def step_backward(source: QueryEngine, node: Node, labelled: LabelledCells, i: int,
                  strategy: Strategy) -> LabelledCells:
    """The labelled cells of ``node``'s output carried to its input ``i``."""
    op = node.operator
    assert op is not None, f"{node!r} is an input"
    target = tuple(op.input_shapes[i])
    if not len(labelled):
        return LabelledCells.empty(target)
    frontier = labelled.frontier()
    if strategy.mode is Mode.MAP and not op.all_to_all:
        got = None
        if _reads_one_cell(op, frontier.ids()[:64], i):
            got = _function_step(op, labelled, frontier.ids(), i, target)
        if got is None:
            got = _box_step(op, labelled, i, target, Direction.BACKWARD)
        if got is not None:
            return got
    if strategy.mode in (Mode.PAY, Mode.COMP) and not op.all_to_all:
        return _payload_step(source, node, labelled, frontier, i, strategy, target)
    groups = backward_groups(source, node, frontier, i, strategy)
    return _join(labelled, (groups.out_ids, groups.out_ptr), (groups.in_ids, groups.in_ptr), groups.n_groups, target)


def _payload_step(source, node, labelled: LabelledCells, frontier: Frontier, i: int, strategy: Strategy,
                  target) -> LabelledCells:
    """A Pay/Comp backward step: one ``map_p`` call per (payload, label) on that label's cells
    holding the payload (the union of their lineage, exactly what the label needs), instead
    of expanding every cell's lineage (a component's payload read by each of its cells would
    cost the component's area squared); the other cells through the joined groups."""
    op = node.operator
    assert op is not None, f"{node!r} is an input"
    pay, rest = payload_lookup(source, node, frontier, i, strategy)
    size = int(np.prod(target, dtype=np.int64))
    parts = [_join(labelled, (rest.out_ids, rest.out_ptr), (rest.in_ids, rest.in_ptr), rest.n_groups, target).keys]
    if pay.n_pairs and _expanded_pairs(op, pay, i) <= PER_CELL_PAIRS:
        # cheap enough cell by cell: one map_p_pairs call per payload for every cell, then the join
        groups = Groups.of_pairs(expand_payloads(op, pay), i)
        parts.append(_join(labelled, (groups.out_ids, groups.out_ptr), (groups.in_ids, groups.in_ptr),
                           groups.n_groups, target).keys)
    elif pay.n_pairs:
        distinct, code = pay.groups()
        cell_code = code[owners(pay.out_ptr)]
        order = np.argsort(pay.out_ids, kind="stable")
        pay_cells, pay_code = pay.out_ids[order], cell_code[order]
        lab, cell = labelled.labels, labelled.cells
        pos = np.searchsorted(pay_cells, cell)
        pos = np.minimum(pos, max(len(pay_cells) - 1, 0))
        hit = pay_cells[pos] == cell
        # a cell keyed by two pairs with different payloads carries both: expand by every match
        lo = np.searchsorted(pay_cells, cell[hit], "left")
        hi = np.searchsorted(pay_cells, cell[hit], "right")
        n = hi - lo
        rows = np.repeat(np.arange(len(lo)), n)
        at = np.repeat(lo - np.cumsum(n) + n, n) + np.arange(int(n.sum()), dtype=np.int64)
        seg_lab, seg_cell, seg_code = lab[hit][rows], cell[hit][rows], pay_code[at]
        seg_order = np.lexsort((seg_cell, seg_lab, seg_code))
        seg_lab, seg_cell, seg_code = seg_lab[seg_order], seg_cell[seg_order], seg_code[seg_order]
        starts = np.flatnonzero(np.r_[True, (seg_code[1:] != seg_code[:-1]) | (seg_lab[1:] != seg_lab[:-1])])
        ends = np.r_[starts[1:], len(seg_code)]
        out_shape = tuple(op.output_shape)
        for a, b in zip(starts.tolist(), ends.tolist()):
            got = np.asarray(op.map_p(to_coords(seg_cell[a:b], out_shape), distinct[seg_code[a]], i), np.int64)
            got = got.reshape(-1, len(target))
            if len(got) and (got.min() < 0 or np.any(got.max(axis=0) >= np.asarray(target))):
                raise LineageError(f"{type(op).__name__}.map_p returned cells outside the array of shape {target}")
            parts.append(seg_lab[a] * size + to_ids(got, target))
    return LabelledCells(target, sorted_unique(np.concatenate(parts)))


#: a payload step expands every cell's lineage at once (one ``map_p_pairs`` call per payload)
#: while a sample predicts at most this many (cell, input cell) pairs, else one ``map_p`` call per
#: (payload, label): per cell, a component read by each of its cells costs its area squared
PER_CELL_PAIRS = 1 << 22
#: cells whose lineage is expanded to predict the per-cell expansion
SAMPLE_CELLS = 64


def _expanded_pairs(op, pay, i: int) -> float:
    """The (cell, input cell) pairs expanding every cell of ``pay`` would give, predicted from
    `SAMPLE_CELLS` cells spread over them."""
    n = len(pay.out_ids)
    if not n:
        return 0.0
    distinct, code = pay.groups()
    owner_code = code[owners(pay.out_ptr)]
    pick = np.unique(np.linspace(0, n - 1, min(SAMPLE_CELLS, n)).astype(np.int64))
    out_shape = tuple(op.output_shape)
    reads = 0
    for c in np.unique(owner_code[pick]).tolist():
        cells = pay.out_ids[pick[owner_code[pick] == c]]
        reads += len(np.asarray(op.map_p_pairs(to_coords(cells, out_shape), distinct[c], i)[0]))
    return reads / len(pick) * n


def step_forward(source: QueryEngine, node: Node, labelled: LabelledCells, i: int, strategy: Strategy) -> LabelledCells:
    """The labelled cells of ``node``'s input ``i`` carried to its output."""
    op = node.operator
    assert op is not None, f"{node!r} is an input"
    target = tuple(op.output_shape or ())
    if not len(labelled):
        return LabelledCells.empty(target)
    frontier = labelled.frontier()
    if strategy.mode is Mode.MAP and not op.all_to_all:
        corner = np.arange(min(64, int(np.prod(target, dtype=np.int64))), dtype=np.int64)
        if not _reads_one_cell(op, corner, i):
            got = _box_step(op, labelled, i, target, Direction.FORWARD)
            if got is not None:
                return got
            if frontier.kind == "ids" and type(op).map_f_boxes is not Operator.map_f_boxes:
                frontier = Frontier.of_boxes(*frontier.boxes(), frontier.shape, disjoint=True)  # box-wise union step
    groups = forward_groups(source, node, frontier, i, strategy)
    return _join(labelled, (groups.in_ids, groups.in_ptr), (groups.out_ids, groups.out_ptr), groups.n_groups, target)


def _reads_one_cell(op, sample: np.ndarray, i: int) -> bool:
    """True when each out cell of ``sample`` reads at most one input cell (elementwise, index maps)."""
    owner, _ = op.map_b_pairs(to_coords(sample, tuple(op.output_shape)), i)
    owner = np.asarray(owner, np.int64)
    return len(owner) <= len(sample) and bool(np.all(owner[1:] > owner[:-1]))


def _function_step(op, labelled: LabelledCells, cells: np.ndarray, i: int, target) -> LabelledCells | None:
    """A backward step where every out cell reads at most one input cell: each labelled cell is
    replaced by the cell it reads (or dropped when it reads none), no join needed; None when
    some cell reads several."""
    owner, coords = op.map_b_pairs(to_coords(cells, tuple(op.output_shape)), i)
    owner = np.asarray(owner, np.int64)
    if len(owner) > len(cells) or np.any(owner[1:] <= owner[:-1]):
        return None
    coords = np.asarray(coords, np.int64).reshape(len(owner), len(target))
    if len(coords) and (coords.min() < 0 or np.any(coords.max(axis=0) >= np.asarray(target))):
        raise LineageError(f"{type(op).__name__}.map_b_pairs returned cells outside the array of shape {target}")
    read = np.full(len(cells), -1, np.int64)
    read[owner] = to_ids(coords, target)
    if tuple(target) == labelled.shape and np.array_equal(read, cells):  # elementwise: the same cells
        return LabelledCells(target, labelled.keys)
    where = read[np.searchsorted(cells, labelled.cells)]
    keep = where >= 0
    size = int(np.prod(target, dtype=np.int64))
    return LabelledCells(target, sorted_unique(labelled.labels[keep] * size + where[keep]))


def _box_step(op, labelled: LabelledCells, i: int, target, direction: str) -> LabelledCells | None:
    """Each label's cells as boxes through ``map_b_boxes`` (``map_f_boxes`` forward), or None
    when the operator has no box form or does not map one box to one box."""
    name = "map_b_boxes" if direction is Direction.BACKWARD else "map_f_boxes"
    if getattr(type(op), name) is getattr(Operator, name):
        return None
    label, lo, hi = cover_ids(labelled.cells, labelled.shape, groups=labelled.labels)
    got = getattr(op, name)(lo, hi, i)
    if got is None:
        return None
    new_lo, new_hi = (np.asarray(b, np.int64).reshape(-1, len(target)) for b in got)
    if len(new_lo) != len(lo):
        return None  # not one box per box: the per-cell relation keeps labels apart
    box, coords = box_cells(new_lo, np.maximum(new_hi, new_lo))
    if len(coords) and (coords.min() < 0 or np.any(coords.max(axis=0) >= np.asarray(target))):
        raise LineageError(f"{type(op).__name__}.{name} returned boxes outside the array of shape {target}")
    size = int(np.prod(target, dtype=np.int64))
    return LabelledCells(target, sorted_unique(label[box] * size + to_ids(coords, target)))


# -- a walk --------------------------------------------------------------------------------
def propagate(run: Any, src: Node | str, dst: Node | str, start: LabelledCells, direction: Direction,
              using: dict | None = None) -> LabelledCells:
    """Carry labelled cells of ``src`` to ``dst`` along every path of the workflow, each node
    stepping once per input; labelled cells arriving by several paths are united (set
    semantics: a cell reached by one label through two paths is held once).  ``using`` maps
    a node to the `Strategy` forced there.

    The walk and each step's strategy are the query engine's (`subzero.query.QueryEngine.walk`,
    `subzero.optimizer.query_time.choose_step`); ``using`` forces a strategy per node.
    """
    from subzero.query import QueryOptions

    plan = QueryOptions(direction, using=dict(using or {}))
    return cast(LabelledCells, run.lineage.walk(src, dst, start, plan))

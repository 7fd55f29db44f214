"""Per-cell lineage of one step: which input cells each output cell of a frontier reads.

A union query (`subzero.query.step`) answers "the lineage of these cells"; lineage
statistics need "the lineage of *each* of these cells", so that every object keeps its
own.  `backward_groups` returns that relation for the frontier's cells as `Groups`
(region pairs restricted to one input: every out cell of a group reads every in cell of
it), read from whatever the step would read:

- ``Map``: the operator's ``map_b_pairs`` (one group per out cell);
- ``FullOne``/``FullMany`` keyed backward: the pairs the frontier's cells key, with their
  out cells (FullOne: the cell -> pair entries; FullMany: the R-tree candidates);
- ``FullOne``/``FullMany`` keyed forward: every pair of the touched tiles' shards;
- ``FullRange``: the rules whose out boxes hold the cells, applied per cell;
- ``PayOne``/``PayMany``: the payloads of the cells, expanded per cell by ``map_p_pairs``;
- ``CompOne``/``CompMany``: the same, and ``map_b_pairs`` for the cells without a payload;
- ``BlackBox`` (and any shard that cannot be read): the touched tiles re-run in tracing mode.

Every group may hold out cells beyond the frontier (a stored pair is kept whole): the
labelled join (`subzero.stats.labelled`) keeps only the cells it carries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from subzero.cells import to_coords, to_ids
from subzero.encoders import encoder_for
from subzero.encoders.base import PayloadEncoder
from subzero.encoders.codec import CELL, OUT, PAIR, make_keys, split_keys, unpack_groups
from subzero.encoders.ranges.lists import box_cells, expand_csr
from subzero.encoders.ranges.terms import images
from subzero.errors import LineageError, StoreError
from subzero.frontier import Frontier
from subzero.modes import Direction, Mode, Strategy
from subzero.pairs import FullPairs, PayloadPairs, concat_csr, ptr_from_counts
from subzero.worker import expand_payloads

if TYPE_CHECKING:
    from subzero.dag import Node
    from subzero.query import QueryEngine

__all__ = ["Groups", "backward_groups", "forward_groups", "payload_lookup"]

_EMPTY = np.empty(0, np.int64)


@dataclass
class Groups:
    """Region pairs of one input: group ``k``'s out cells ``out_ids[out_ptr[k]:out_ptr[k+1]]``
    each read every in cell ``in_ids[in_ptr[k]:in_ptr[k+1]]`` (flat ids)."""

    out_ids: np.ndarray
    out_ptr: np.ndarray
    in_ids: np.ndarray
    in_ptr: np.ndarray

    @classmethod
    def empty(cls) -> "Groups":
        """No groups."""
        z = np.zeros(1, np.int64)
        return cls(_EMPTY, z, _EMPTY, z)

    @classmethod
    def of_pairs(cls, pairs: FullPairs, i: int) -> "Groups":
        """The groups of region ``pairs`` over input ``i``."""
        return cls(pairs.out_ids, pairs.out_ptr, pairs.in_ids[i], pairs.in_ptr[i])

    @classmethod
    def per_cell(cls, out_ids: np.ndarray, owner: np.ndarray, in_ids: np.ndarray) -> "Groups":
        """One group per out cell ``out_ids[k]``, reading the ``in_ids`` whose ``owner`` is ``k``."""
        owner = np.asarray(owner, np.int64)
        order = np.argsort(owner, kind="stable")
        return cls(np.asarray(out_ids, np.int64), np.arange(len(out_ids) + 1, dtype=np.int64),
                   np.asarray(in_ids, np.int64)[order], ptr_from_counts(np.bincount(owner, minlength=len(out_ids))))

    @classmethod
    def concat(cls, parts: "list[Groups]") -> "Groups":
        """The groups of ``parts`` in one set, in order."""
        return cls(*concat_csr([(p.out_ids, p.out_ptr) for p in parts]),
                   *concat_csr([(p.in_ids, p.in_ptr) for p in parts]))

    @property
    def n_groups(self) -> int:
        """Number of groups."""
        return len(self.out_ptr) - 1


# -- backward: the lineage of each cell of a frontier over the output ---------------------------
def backward_groups(source: QueryEngine, node: Node, frontier: Frontier, i: int, strategy: Strategy) -> Groups:
    """For every cell of ``frontier`` (over ``node``'s output), the input-``i`` cells it reads.

    ``source`` is the run's `subzero.query.QueryEngine` (``run.lineage``); ``strategy`` one the node stored,
    Map (when the operator supports it) or BlackBox.
    """
    op = node.operator
    assert op is not None, f"{node!r} is an input"
    in_shape = tuple(op.input_shapes[i])
    if frontier.is_empty:
        return Groups.empty()
    if op.all_to_all:  # every out cell reads the whole input: one group
        ids = frontier.ids()
        size = int(np.prod(in_shape, dtype=np.int64))
        return Groups(ids, np.array([0, len(ids)]), np.arange(size, dtype=np.int64), np.array([0, size]))
    s = strategy
    if s.mode is Mode.MAP:
        return _map_groups(op, frontier.ids(), i)
    if s.mode is Mode.BLACKBOX:
        return _traced(source, node, [t for t, _ in source.grid(node).split(frontier, None)], frontier, i)
    return _stored(source, node, frontier, i, s)


def _map_groups(op, out_ids: np.ndarray, i: int) -> Groups:
    in_shape = tuple(op.input_shapes[i])
    cells = to_coords(out_ids, tuple(op.output_shape))
    owner, coords = op.map_b_pairs(cells, i)
    coords = np.asarray(coords, np.int64).reshape(-1, len(in_shape))
    if len(coords) and (coords.min() < 0 or np.any(coords.max(axis=0) >= np.asarray(in_shape))):
        raise LineageError(f"{type(op).__name__}.map_b_pairs returned cells outside the array of shape {in_shape}; "
                           "mapping functions must clip to the array")
    return Groups.per_cell(out_ids, owner, to_ids(coords, in_shape))


def _traced(source, node, tiles: list[int], frontier: Frontier, i: int) -> Groups:
    """The groups of ``tiles`` re-run in tracing mode (`subzero.query.QueryEngine.trace`)."""
    return Groups.concat([Groups.of_pairs(p, i) for p in source.trace(node, tiles, frontier, i, Direction.BACKWARD)])


def _stored(source, node, frontier: Frontier, i: int, s: Strategy) -> Groups:
    op = node.operator
    assert op is not None, f"{node!r} is an input"
    enc = encoder_for(s)
    shapes = (tuple(op.output_shape or ()), tuple(op.input_shapes))
    if s.base == "FullRange":
        try:
            whole = source.inline(node, s.name)
        except StoreError:
            whole = None
        if whole is not None:
            from subzero.encoders.full_range import _inline_table

            return _rule_groups(_inline_table(whole), frontier.ids(), i)
    parts: list[Groups] = []
    failed: list = []
    damaged: list[str] = []
    for _, sub, reader in source.tile_readers(node, s.name, frontier, None, failed=failed, damaged=damaged):
        if reader is None:  # the tile stored no lineage under this strategy
            if s.mode is Mode.COMP:
                parts.append(_map_groups(op, sub.ids(), i))
            continue
        parts.append(_shard_groups(op, enc, s, reader, sub, i, shapes))
    if failed:
        source.report_damaged(node, damaged)
        parts.append(_traced(source, node, failed, frontier, i))
    return Groups.concat(parts)


def payload_lookup(source: QueryEngine, node: Node, frontier: Frontier, i: int,
                   strategy: Strategy) -> tuple[PayloadPairs, Groups]:
    """For a Pay or Comp step: the payload pairs of the frontier's cells (restricted to them),
    and as `Groups` the lineage of its other cells (Comp's mapping default, and the cells of
    tiles whose shard cannot be read, re-run in tracing mode)."""
    op = node.operator
    assert op is not None, f"{node!r} is an input"
    s = strategy
    enc = encoder_for(s)
    if not isinstance(enc, PayloadEncoder):
        raise LineageError(f"{strategy.name} is not a payload strategy (PayOne, PayMany, CompOne, CompMany)")
    shapes = (tuple(op.output_shape or ()), tuple(op.input_shapes))
    pays: list[PayloadPairs] = []
    parts: list[Groups] = []
    failed: list = []
    damaged: list[str] = []
    default: list[np.ndarray] = []  # Comp: the cells without a payload, mapped once for every tile
    for _, sub, reader in source.tile_readers(node, s.name, frontier, None, failed=failed, damaged=damaged):
        pay = enc.lookup(reader, sub, shapes) if reader is not None else PayloadPairs.empty()
        pays.append(pay)
        if s.mode is Mode.COMP:
            ids = sub.ids()
            default.append(ids[~np.isin(ids, pay.out_ids)])
    if default:
        parts.append(_map_groups(op, np.sort(np.concatenate(default)), i))
    if failed:
        source.report_damaged(node, damaged)
        parts.append(_traced(source, node, failed, frontier, i))
    return PayloadPairs.concat(pays), Groups.concat(parts)


def _shard_groups(op, enc, s: Strategy, reader, sub: Frontier, i: int, shapes) -> Groups:
    """The groups of one shard for the frontier's cells ``sub`` in its tile."""
    if s.base == "FullRange":
        tables = enc._tables(reader, sub, OUT)
        if not tables:
            return Groups.empty()
        from subzero.encoders.ranges import RangeRules

        return _rule_groups(RangeRules.concat(tables), sub.ids(), i)
    if s.mode is Mode.FULL:
        if enc.direction is not Direction.BACKWARD:  # keyed by input cells: the tile's pairs, whole
            return Groups.of_pairs(enc.load(reader, shapes), i)
        if s.base == "FullOne":
            return _full_one_groups(reader, sub.ids(), i)
        return Groups.of_pairs(enc.candidates(reader, sub, OUT, shapes), i)
    pay = enc.lookup(reader, sub, shapes)
    got = Groups.of_pairs(expand_payloads(op, pay), i)
    if s.mode is Mode.COMP:
        ids = sub.ids()
        rest = ids[~np.isin(ids, pay.out_ids)]
        got = Groups.concat([got, _map_groups(op, rest, i)])
    return got


def _full_one_groups(reader, ids: np.ndarray, i: int) -> Groups:
    """FullOne keyed backward: cell -> pair entries, then the pairs' input cells."""
    keys, values = reader.get_many(make_keys(CELL, OUT, ids))
    if not values:
        return Groups.empty()
    cells = split_keys(keys)[2].astype(np.int64)
    counts = np.array([len(v) // 8 for v in values], np.int64)
    edge_cell = np.repeat(cells, counts)
    edge_pair = np.frombuffer(b"".join(values), "<i8").astype(np.int64)
    pair_ids = np.unique(edge_pair)
    found, stored = reader.get_many(make_keys(PAIR, 0, pair_ids))
    if not stored:
        return Groups.empty()
    found_ids = split_keys(found)[2].astype(np.int64)
    in_ids, in_ptr = unpack_groups(stored)[i]
    index = np.searchsorted(found_ids, edge_pair)
    ok = (index < len(found_ids)) & (found_ids[np.minimum(index, len(found_ids) - 1)] == edge_pair)
    index, edge_cell = index[ok], edge_cell[ok]
    order = np.argsort(index, kind="stable")
    out_ptr = ptr_from_counts(np.bincount(index, minlength=len(found_ids)))
    return Groups(edge_cell[order], out_ptr, np.asarray(in_ids, np.int64), np.asarray(in_ptr, np.int64))


def _rule_groups(table, out_ids: np.ndarray, i: int) -> Groups:
    """Range rules applied to each out cell alone: the rules whose boxes hold it, their
    (relative or absolute) input ranges placed at the cell, expanded to cells."""
    out_shape, in_shape = tuple(table.out_shape), tuple(table.in_shapes[i])
    if not len(out_ids) or table.n_rules == 0:
        return Groups.empty()
    q_lo = to_coords(out_ids, out_shape)
    qi, bi = table._out_index.query(q_lo, q_lo + 1)
    rule = table.box_rule[bi]
    t_pos, x_row = expand_csr(table.term_ptr[i], rule)
    cell = q_lo[qi][x_row]
    lo, hi = images(table.terms[i][t_pos], cell, cell + 1, exact=True)
    n = np.asarray(in_shape, np.int64)
    lo, hi = np.clip(lo, 0, n), np.clip(hi, 0, n)
    box, coords = box_cells(lo, hi)
    owner = qi[x_row][box]
    return Groups.per_cell(out_ids, owner, to_ids(coords, in_shape))


# -- forward: the cells of the output that read each cell of a frontier over input i ----------
def forward_groups(source: QueryEngine, node: Node, frontier: Frontier, i: int, strategy: Strategy) -> Groups:
    """Groups holding every out cell whose input-``i`` lineage meets ``frontier``, with its
    whole input-``i`` lineage: the union forward step finds the out cells, then their
    per-cell backward lineage (`backward_groups`) gives the exact relation."""
    from subzero.query import step

    if frontier.is_empty:
        return Groups.empty()
    reached = step(source, node, frontier, i, Direction.FORWARD, strategy, entire_array=False)
    return backward_groups(source, node, reached, i, strategy)

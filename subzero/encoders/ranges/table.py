"""`RangeRules`: the table of rules, its sub-tables, envelopes and box queries."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Sequence

import numpy as np

from subzero.boxes import BoxIndex, check_boxes, ids_in_boxes, lexsort, unique_boxes
from subzero.cells import to_coords
from subzero.cells import to_ids as flat_ids
from subzero.encoders.ranges.lists import box_cells, csr_gather, expand_csr
from subzero.encoders.ranges.terms import ABS, TERM, Shape, canonical_terms, check_shapes, images, preimages, unit_boxes
from subzero.errors import LineageError
from subzero.pairs import FullPairs, owners, ptr_from_counts

__all__ = ["RangeRules", "to_ids"]


@dataclass(frozen=True, eq=False)
class RangeRules:
    """Compressed lineage of one tile or node: rules of out boxes and (relative) terms.

    Build one with `compress` (from region pairs), `explicit` or `merge.merge_tables`;
    the constructor takes canonical columns as they are (see the module docstring).
    """

    out_shape: Shape
    in_shapes: tuple[Shape, ...]
    box_ptr: np.ndarray
    out_lo: np.ndarray
    out_hi: np.ndarray
    term_ptr: tuple[np.ndarray, ...]
    terms: tuple[np.ndarray, ...]

    # -- construction -----------------------------------------------------------------
    @classmethod
    def empty(cls, out_shape: Shape, in_shapes: Sequence[tuple[int, ...]]) -> "RangeRules":
        """A table with no rules.

        Examples
        --------
        >>> RangeRules.empty((3, 3), [(3, 3)]).n_rules
        0
        """
        out_shape, in_shapes = check_shapes(out_shape, in_shapes)
        z = np.zeros(1, np.int64)
        return cls(out_shape, in_shapes, z, np.empty((0, len(out_shape)), np.int64),
                   np.empty((0, len(out_shape)), np.int64), (z,) * len(in_shapes),
                   tuple(np.empty((0, len(s)), TERM) for s in in_shapes))

    @classmethod
    def build(cls, out_shape: Shape, in_shapes: Sequence[tuple[int, ...]], n_rules: int, box_rule: np.ndarray,
              lo: np.ndarray,
              hi: np.ndarray, term_rule: list[np.ndarray], terms: list[np.ndarray]) -> "RangeRules":
        """A canonical table from loose columns: ``box_rule[k]`` is the rule of box ``k``,
        ``term_rule[i][t]`` the rule of term ``t`` of input ``i``.  Sorts boxes and terms
        per rule, drops empty and repeated ones, and drops rules left without out boxes
        or without any term.

        Examples
        --------
        >>> t = np.zeros((1, 1), TERM); t["ref"], t["mul"], t["div"], t["a"], t["b"] = 0, 1, 1, -1, 2
        >>> r = RangeRules.build((5,), [(5,)], 1, np.array([0]), np.array([[1]]), np.array([[4]]), [np.array([0])], [t])
        >>> r.n_rules, r.backward([[2]], [[3]], 0)[0].tolist()
        (1, [[1]])
        """
        out_shape, in_shapes = check_shapes(out_shape, in_shapes)
        lo, hi = np.asarray(lo, np.int64).reshape(-1, len(out_shape)), np.asarray(hi, np.int64).reshape(-1, len(out_shape))
        box_rule = np.asarray(box_rule, np.int64)
        keep = np.all(hi > lo, axis=1)
        box_rule, lo, hi = box_rule[keep], lo[keep], hi[keep]
        order = lexsort(list(hi.T[::-1]) + list(lo.T[::-1]) + [~unit_boxes(lo, hi), box_rule])
        box_rule, lo, hi = box_rule[order], lo[order], hi[order]
        if len(lo) > 1:
            dup = np.r_[False, (box_rule[1:] == box_rule[:-1]) & np.all(lo[1:] == lo[:-1], axis=1)
                        & np.all(hi[1:] == hi[:-1], axis=1)]
            box_rule, lo, hi = box_rule[~dup], lo[~dup], hi[~dup]
        canon = [canonical_terms(np.asarray(r, np.int64), t) for r, t in zip(term_rule, terms)]
        live = np.zeros(n_rules, bool)
        for r, _ in canon:
            live[r] = True
        has_box = np.zeros(n_rules, bool)
        has_box[box_rule] = True
        live &= has_box
        renumber = np.cumsum(live) - 1
        n = int(live.sum())
        keep = live[box_rule]
        box_ptr = ptr_from_counts(np.bincount(renumber[box_rule[keep]], minlength=n))
        term_ptr, kept_terms = [], []
        for r, t in canon:
            k = live[r]
            term_ptr.append(ptr_from_counts(np.bincount(renumber[r[k]], minlength=n)))
            kept_terms.append(t[k])
        return cls(out_shape, in_shapes, box_ptr, lo[keep], hi[keep], tuple(term_ptr), tuple(kept_terms))

    # -- shape of the table -----------------------------------------------------------
    @property
    def n_rules(self) -> int:
        """Number of rules (each a set of out boxes and, per input, terms)."""
        return len(self.box_ptr) - 1

    @property
    def n_inputs(self) -> int:
        """Number of inputs (one term list per input)."""
        return len(self.in_shapes)

    @cached_property
    def box_rule(self) -> np.ndarray:
        """The rule of each out box."""
        return owners(self.box_ptr)

    def term_rule(self, i: int) -> np.ndarray:
        """The rule of each term of input ``i``."""
        return self._term_rules[i]

    @cached_property
    def _term_rules(self) -> tuple[np.ndarray, ...]:
        return tuple(owners(p) for p in self.term_ptr)

    def __repr__(self) -> str:
        terms = "+".join(str(len(t)) for t in self.terms)
        return (f"RangeRules(out {self.out_shape}, in {list(self.in_shapes)}, {self.n_rules} rules, "
                f"{len(self.out_lo)} out boxes, {terms} terms)")

    def equals(self, other: "RangeRules") -> bool:
        """Structural equality (same canonical columns)."""
        same = (self.out_shape == other.out_shape and self.in_shapes == other.in_shapes
                and np.array_equal(self.box_ptr, other.box_ptr) and np.array_equal(self.out_lo, other.out_lo)
                and np.array_equal(self.out_hi, other.out_hi))
        return same and all(np.array_equal(a, b) for a, b in zip(self.term_ptr, other.term_ptr)) \
            and all(np.array_equal(a, b) for a, b in zip(self.terms, other.terms))

    # -- sub-tables and merging -------------------------------------------------------
    def select(self, rule_ids: np.ndarray | None) -> "RangeRules":
        """The sub-table of the rules ``rule_ids`` (in that order).

        Examples
        --------
        >>> from subzero.encoders.ranges import compress, demo_pairs
        >>> r = compress(demo_pairs(), (8,), [(8,)])
        >>> r.select([0]).n_rules
        1
        """
        ids = np.asarray(rule_ids, np.int64).reshape(-1)
        if len(ids) and (ids.min() < 0 or ids.max() >= self.n_rules):
            raise LineageError(f"rule ids must lie in [0, {self.n_rules}), got {ids.min()}..{ids.max()}")
        box_pos, box_ptr = csr_gather(self.box_ptr, ids)
        ptrs, terms = [], []
        for p, t in zip(self.term_ptr, self.terms):
            pos, ptr = csr_gather(p, ids)
            ptrs.append(ptr)
            terms.append(t[pos])
        return RangeRules(self.out_shape, self.in_shapes, box_ptr, self.out_lo[box_pos], self.out_hi[box_pos],
                          tuple(ptrs), tuple(terms))

    @classmethod
    def concat(cls, parts: "list[RangeRules]") -> "RangeRules":
        """All rules of ``parts`` in one table, unmerged."""
        if not parts:
            raise LineageError("RangeRules.concat needs at least one table")
        first = parts[0]
        for p in parts[1:]:
            if p.out_shape != first.out_shape or p.in_shapes != first.in_shapes:
                raise LineageError(f"cannot combine range rules of shapes {p.out_shape} <- {list(p.in_shapes)} "
                                   f"and {first.out_shape} <- {list(first.in_shapes)}: they describe different nodes")
        if len(parts) == 1:
            return first
        box_ptr = ptr_from_counts(np.concatenate([np.diff(p.box_ptr) for p in parts]))
        ptrs = tuple(ptr_from_counts(np.concatenate([np.diff(p.term_ptr[i]) for p in parts]))
                     for i in range(first.n_inputs))
        terms = tuple(np.concatenate([p.terms[i] for p in parts]) for i in range(first.n_inputs))
        return cls(first.out_shape, first.in_shapes, box_ptr, np.concatenate([p.out_lo for p in parts]),
                   np.concatenate([p.out_hi for p in parts]), ptrs, terms)

    # -- envelopes (for an R-tree over rules, both directions) ------------------------
    def out_envelopes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(rule_ids, lo, hi)``: each rule's bounding box of out cells (half-open).

        Examples
        --------
        >>> from subzero.encoders.ranges import compress, demo_pairs
        >>> rules, lo, hi = compress(demo_pairs(), (8,), [(8,)]).out_envelopes()
        >>> lo.tolist(), hi.tolist()
        ([[1], [7], [0]], [[7], [8], [1]])
        """
        rules = np.flatnonzero(np.diff(self.box_ptr) > 0)
        lo, hi = self._rule_envelopes
        return rules, lo[rules], hi[rules]

    def in_envelopes(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(rule_ids, lo, hi)``: each rule's bounding box of input-``i`` cells (half-open),
        for the rules with lineage in input ``i``.

        Examples
        --------
        >>> from subzero.encoders.ranges import compress, demo_pairs
        >>> rules, lo, hi = compress(demo_pairs(), (8,), [(8,)]).in_envelopes(0)
        >>> lo.tolist(), hi.tolist()
        ([[0], [6], [0]], [[8], [8], [2]])
        """
        self._check_input(i)
        lo, hi = self._term_envelopes[i]
        counts = np.diff(self.term_ptr[i])
        rules = np.flatnonzero(counts > 0)
        if len(rules) == 0:
            z = np.empty((0, len(self.in_shapes[i])), np.int64)
            return rules, z, z
        starts = self.term_ptr[i][rules]
        return rules, np.minimum.reduceat(lo, starts, axis=0), np.maximum.reduceat(hi, starts, axis=0)

    @cached_property
    def _rule_envelopes(self) -> tuple[np.ndarray, np.ndarray]:
        lo = np.zeros((self.n_rules, len(self.out_shape)), np.int64)
        hi = np.zeros_like(lo)
        live = np.diff(self.box_ptr) > 0
        if live.any():
            starts = self.box_ptr[:-1][live]
            lo[live] = np.minimum.reduceat(self.out_lo, starts, axis=0)
            hi[live] = np.maximum.reduceat(self.out_hi, starts, axis=0)
        return lo, hi

    @cached_property
    def _term_envelopes(self) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
        env_lo, env_hi = self._rule_envelopes
        out = []
        for i, t in enumerate(self.terms):
            r = self.term_rule(i)
            lo, hi = images(t, env_lo[r], env_hi[r], exact=False)
            n = np.asarray(self.in_shapes[i], np.int64)
            out.append((np.clip(lo, 0, n), np.clip(hi, 0, n)))
        return tuple(out)

    @cached_property
    def _out_index(self) -> BoxIndex:
        return BoxIndex(self.out_lo, self.out_hi)

    @cached_property
    def _term_indexes(self) -> dict[int, BoxIndex]:
        return {}

    def _term_index(self, i: int) -> BoxIndex:
        if i not in self._term_indexes:
            self._term_indexes[i] = BoxIndex(*self._term_envelopes[i])
        return self._term_indexes[i]

    # -- queries ----------------------------------------------------------------------
    def backward(self, q_lo: np.ndarray, q_hi: np.ndarray, i: int,
                 rule_ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Boxes of the input-``i`` cells the out cells of the query boxes depend on.

        ``rule_ids`` (e.g. from an R-tree over `out_envelopes`) restricts the rules looked
        at; by default an internal index finds them.  The result boxes may overlap: see
        `to_ids` and `normalize`.  Costs the rules and boxes touched, not the cells.

        Examples
        --------
        >>> from subzero.encoders.ranges import compress, demo_pairs
        >>> r = compress(demo_pairs(), (8,), [(8,)])
        >>> [to_ids(*r.backward([[1]], [[3]], 0), (8,)).tolist(), to_ids(*r.forward([[0]], [[1]], 0), (8,)).tolist()]
        [[0, 1, 2, 3], [0, 1]]
        """
        self._check_input(i)
        q_lo, q_hi = check_boxes(q_lo, q_hi, self.out_shape, "backward query boxes (output cells)")
        if rule_ids is not None:
            return self.select(np.unique(np.asarray(rule_ids, np.int64))).backward(q_lo, q_hi, i)
        n_in = len(self.in_shapes[i])
        qi, bi = self._out_index.query(q_lo, q_hi)
        rule = self.box_rule[bi]
        has = self._term_counts[i][rule] > 0
        qi, bi, rule = qi[has], bi[has], rule[has]
        x_lo, x_hi = np.maximum(self.out_lo[bi], q_lo[qi]), np.minimum(self.out_hi[bi], q_hi[qi])
        fixed = self._fixed_rules(i)[rule]  # lineage of the rule is the same for every out cell
        if fixed.any():
            _, first = np.unique(rule[fixed], return_index=True)
            keep = ~fixed
            keep[np.flatnonzero(fixed)[first]] = True
            rule, x_lo, x_hi = rule[keep], x_lo[keep], x_hi[keep]
        if len(rule) == 0:
            z = np.empty((0, n_in), np.int64)
            return z, z
        t_pos, x_row = expand_csr(self.term_ptr[i], rule)
        lo, hi = images(self.terms[i][t_pos], x_lo[x_row], x_hi[x_row], exact=True)
        n = np.asarray(self.in_shapes[i], np.int64)
        lo, hi = np.clip(lo, 0, n), np.clip(hi, 0, n)
        return unique_boxes(lo, hi)

    def forward(self, q_lo: np.ndarray, q_hi: np.ndarray, i: int,
                rule_ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Boxes of the out cells whose input-``i`` lineage meets the query boxes.

        ``rule_ids`` (e.g. from an R-tree over `in_envelopes`) restricts the rules looked
        at.  The result boxes may overlap.  See `backward` for an example.
        """
        self._check_input(i)
        q_lo, q_hi = check_boxes(q_lo, q_hi, self.in_shapes[i], f"forward query boxes (input {i} cells)")
        if rule_ids is not None:
            return self.select(np.unique(np.asarray(rule_ids, np.int64))).forward(q_lo, q_hi, i)
        d_out = len(self.out_shape)
        qi, ti = self._term_index(i).query(q_lo, q_hi)
        rule = self.term_rule(i)[ti]
        env_lo, env_hi = self._rule_envelopes
        c_lo, c_hi = preimages(self.terms[i][ti], q_lo[qi], q_hi[qi], env_lo[rule], env_hi[rule])
        live = np.all(c_hi > c_lo, axis=1)
        rule, c_lo, c_hi = rule[live], c_lo[live], c_hi[live]
        if len(rule) > 1:
            rows = np.unique(np.concatenate([rule[:, None], c_lo, c_hi], axis=1), axis=0)
            rule, c_lo, c_hi = rows[:, 0], rows[:, 1:1 + d_out], rows[:, 1 + d_out:]
        if len(rule) == 0:
            z = np.empty((0, d_out), np.int64)
            return z, z
        b_pos, c_row = expand_csr(self.box_ptr, rule)
        lo = np.maximum(self.out_lo[b_pos], c_lo[c_row])
        hi = np.minimum(self.out_hi[b_pos], c_hi[c_row])
        live = np.all(hi > lo, axis=1)
        return unique_boxes(lo[live], hi[live])

    def _check_input(self, i: int) -> None:
        if not isinstance(i, (int, np.integer)) or not 0 <= i < self.n_inputs:
            raise LineageError(f"input index {i!r} is out of range: these range rules have {self.n_inputs} input(s)")

    def _fixed_rules(self, i: int) -> np.ndarray:
        """Per rule: all its input-``i`` terms are absolute (its lineage is the same for
        every out cell)."""
        return self._fixed[i]

    @cached_property
    def _fixed(self) -> tuple[np.ndarray, ...]:
        out = []
        for i, t in enumerate(self.terms):
            rel = np.any(t["ref"] != ABS, axis=1) if t.size else np.zeros(len(t), bool)
            any_rel = np.zeros(self.n_rules, bool)
            any_rel[self.term_rule(i)[rel]] = True
            out.append(~any_rel)
        return tuple(out)

    @cached_property
    def _term_counts(self) -> tuple[np.ndarray, ...]:
        return tuple(np.diff(p) for p in self.term_ptr)

    # -- decompression ----------------------------------------------------------------
    def to_pairs(self) -> FullPairs:
        """The lineage as explicit region pairs (costs the cells): one pair per rule whose
        terms are all absolute, one per out cell of the other rules.

        Examples
        --------
        >>> from subzero.encoders.ranges import compress, demo_pairs
        >>> p = compress(demo_pairs(), (8,), [(8,)]).to_pairs()
        >>> from subzero.frontier import Frontier
        >>> p.backward(Frontier.of_ids(np.array([0]), (8,)), 0).tolist()
        [0, 1]
        """
        fixed = np.ones(self.n_rules, bool)
        for i in range(self.n_inputs):
            fixed &= self._fixed_rules(i)
        box, coords = box_cells(self.out_lo, self.out_hi)
        rule = self.box_rule[box]
        out_ids = flat_ids(coords, self.out_shape)
        # pairs: fixed rules -> one per rule; others -> one per (rule, out cell)
        pair_key = np.where(fixed[rule], -1, out_ids)
        rows = np.unique(np.stack([rule, pair_key, out_ids], axis=1), axis=0)
        head = np.r_[True, np.any(rows[1:, :2] != rows[:-1, :2], axis=1)]
        pair_of_row = np.cumsum(head) - 1
        n_pairs = int(head.sum())
        pair_rule = rows[head, 0]
        pair_cell = rows[head, 2]  # for relative pairs: their single out cell
        ins, in_ptrs = [], []
        for i in range(self.n_inputs):
            t_pos, p = expand_csr(self.term_ptr[i], pair_rule)
            cell = to_coords(pair_cell[p], self.out_shape)
            lo, hi = images(self.terms[i][t_pos], cell, cell + 1, exact=True)
            n = np.asarray(self.in_shapes[i], np.int64)
            b, c = box_cells(np.clip(lo, 0, n), np.clip(hi, 0, n))
            ids = flat_ids(c, self.in_shapes[i])
            owner = p[b]
            pairs = np.unique(np.stack([owner, ids], axis=1), axis=0) if len(ids) else np.empty((0, 2), np.int64)
            ins.append(pairs[:, 1].copy())
            in_ptrs.append(ptr_from_counts(np.bincount(pairs[:, 0], minlength=n_pairs)))
        return FullPairs(rows[:, 2].copy(), ptr_from_counts(np.bincount(pair_of_row, minlength=n_pairs)),
                         tuple(ins), tuple(in_ptrs))

    @cached_property
    def memo(self) -> dict[str, object]:
        """Values other modules derive from this (immutable) table, kept with it (its bytes)."""
        return {}


def to_ids(lo: np.ndarray, hi: np.ndarray, shape: Shape) -> np.ndarray:
    """Sorted unique flat ids of a (possibly overlapping) box set, e.g. a query answer.

    Examples
    --------
    >>> to_ids(np.array([[0, 1]]), np.array([[2, 2]]), (2, 3)).tolist()
    [1, 4]
    """
    return ids_in_boxes(lo, hi, shape)

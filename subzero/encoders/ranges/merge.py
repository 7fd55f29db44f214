"""Merging tables (e.g. one per tile): rules with identical terms become one rule with
coalesced out boxes, then rules whose terms agree with a neighbour's on the cells they
cover (an edge row, a tile one cell wide) are rewritten in the neighbour's references."""

from __future__ import annotations

import numpy as np

from subzero.boxes import BoxIndex, coalesce
from subzero.encoders.ranges.lists import expand_csr, group_lists
from subzero.encoders.ranges.table import RangeRules
from subzero.encoders.ranges.terms import ABS, TERM, rewrites_to

__all__ = ["merge", "merge_tables"]

#: rounds of adoption (a chain of thin tiles needs one round per link)
ADOPT_ROUNDS = 8
#: candidate (rule, neighbour) pairs tested per rule before adoption gives up (irregular tables)
ADOPT_BUDGET = 16
#: above this many rules, a merge that joins under 5% of them is skipped (irregular lineage)
IRREGULAR_RULES = 4096


def merge_tables(parts: list[RangeRules]) -> RangeRules:
    """Combine tables (e.g. one per tile) into one: rules with identical terms become
    one rule whose out boxes are coalesced, so the tiles of a stencil give a handful
    of rules, not one set per tile.  Answers exactly like the parts together.

    Examples
    --------
    >>> import numpy as np
    >>> from subzero.encoders.ranges import compress, demo_pairs
    >>> pairs = demo_pairs()
    >>> halves = [compress(pairs.select(np.arange(8) < 4), (8,), [(8,)]),
    ...           compress(pairs.select(np.arange(8) >= 4), (8,), [(8,)])]
    >>> sum(h.n_rules for h in halves), merge_tables(halves).n_rules
    (4, 3)
    """
    return merge(RangeRules.concat(parts))


def merge(table: RangeRules) -> RangeRules:
    """The rules of ``table`` merged (see `merge_tables`): same lineage, fewer rules."""
    if table.n_rules < 2:
        return table
    label = group_lists([term_rows(table, i) for i in range(table.n_inputs)], table.n_rules)
    first = np.unique(label, return_index=True)[1]
    joined = table.n_rules - len(first)
    if table.n_rules > IRREGULAR_RULES and joined < table.n_rules // 20:
        return table  # (nearly) every rule distinct: irregular lineage, merging would not pay
    if joined:
        table = relabel(table, first[label])
    for _ in range(ADOPT_ROUNDS):
        target = adoptions(table)
        if target is None:
            break
        table = relabel(table, target)
    return table


def term_rows(table: RangeRules, i: int) -> tuple[np.ndarray, np.ndarray]:
    """Input ``i``'s terms as int64 rows (every field, every axis) in CSR per rule."""
    t = table.terms[i]
    rows = np.concatenate([t[f].astype(np.int64) for f in TERM.names], axis=1) if t.size \
        else np.zeros((len(t), 0), np.int64)
    return rows, table.term_ptr[i]


def relabel(table: RangeRules, target: np.ndarray) -> RangeRules:
    """Rules sharing a ``target`` rule become one rule with the target's terms and the
    union of their out boxes, coalesced (``target[target] == target``)."""
    roots = np.unique(target)
    new = np.searchsorted(roots, target)
    lo, hi, g = coalesce(table.out_lo, table.out_hi, groups=new[table.box_rule])
    term_rule, terms = [], []
    for i, t in enumerate(table.terms):
        r = table.term_rule(i)
        keep = target[r] == r
        term_rule.append(new[r[keep]])
        terms.append(t[keep])
    return RangeRules.build(table.out_shape, table.in_shapes, len(roots), g, lo, hi, term_rule, terms)


def adoptions(table: RangeRules) -> np.ndarray | None:
    """Rules that may take a neighbour's terms: where a rule's out cells share the value
    of ``base`` along a reference (an edge row, a tile one cell wide, a single cell), an
    absolute range equals a relative one, so a tile that could not tell them apart is
    rewritten in the references of an adjacent, larger rule with relative terms when the
    rewritten terms equal that rule's exactly.  Returns ``target`` (see `relabel`) or None.
    """
    n = table.n_rules
    rules, lo, hi = table.out_envelopes()
    env_lo, env_hi = np.zeros((n, lo.shape[1]), np.int64), np.zeros((n, lo.shape[1]), np.int64)
    env_lo[rules], env_hi[rules] = lo, hi
    relative = np.zeros(n, bool)
    for i, t in enumerate(table.terms):
        rel = np.any(t["ref"] != ABS, axis=1) if t.size else np.zeros(len(t), bool)
        relative[table.term_rule(i)[rel]] = True
    if n < 2 or not relative.any():
        return None
    found = BoxIndex(env_lo[relative] - 1, env_hi[relative] + 1).query(env_lo, env_hi, ADOPT_BUDGET * n + 1024)
    if found is None:  # envelopes overlap everywhere: irregular lineage, nothing to adopt
        return None
    t_idx, s = found
    s = np.flatnonzero(relative)[s]
    size = np.prod(env_hi - env_lo, axis=1)
    keep = (t_idx != s) & ((size[s] > size[t_idx]) | ((size[s] == size[t_idx]) & (s < t_idx)))
    for p in table.term_ptr:
        counts = np.diff(p)
        keep &= counts[t_idx] == counts[s]
    t_idx, s = t_idx[keep], s[keep]
    if len(t_idx) == 0:
        return None
    ok = np.ones(len(t_idx), bool)
    for i, terms in enumerate(table.terms):
        tp, pair = expand_csr(table.term_ptr[i], t_idx)
        sp, _ = expand_csr(table.term_ptr[i], s)
        match = rewrites_to(terms[tp], terms[sp], env_lo[t_idx][pair], env_hi[t_idx][pair])
        ok &= np.bincount(pair[~match], minlength=len(t_idx)) == 0
    t_idx, s = t_idx[ok], s[ok]
    adopters = np.unique(t_idx)
    valid = ~np.isin(s, adopters)  # one level per round: a target keeps its own terms
    t_idx, s = t_idx[valid], s[valid]
    if len(t_idx) == 0:
        return None
    target = np.arange(n)
    first = np.unique(t_idx, return_index=True)[1]
    target[t_idx[first]] = s[first]
    return target

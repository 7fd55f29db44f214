"""Terms: the ranges a rule's out cell reads along each input axis, and their arithmetic.

Along input axis ``j`` a term is ``[base + a, base + b)`` with ``base = 0`` when
``ref == ABS`` and ``base = (mul * o[ref]) // div`` otherwise (``o`` the out cell).  The
functions here map out boxes to the input boxes terms give (backward), input boxes to
the out boxes whose terms meet them (forward), and rewrite a term in other references.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from subzero.boxes import lexsort
from subzero.errors import LineageError

__all__ = ["TERM", "ABS", "Shape", "check_shapes", "abs_terms", "unit_boxes", "unit_abs", "images", "preimages",
           "rewrites_to", "canonical_terms"]

Shape = tuple[int, ...]


#: one term along one input axis: ``[base + a, base + b)``, ``base = (mul * o[ref]) // div``
TERM = np.dtype([("ref", "i1"), ("mul", "i8"), ("div", "i8"), ("a", "i8"), ("b", "i8")])


#: ``ref`` of an absolute range
ABS = -1


def check_shapes(out_shape: tuple[int, ...], in_shapes: Sequence[tuple[int, ...]]) -> tuple[Shape, tuple[Shape, ...]]:
    """Shapes as tuples of ints; a `subzero.LineageError` for rank 0 or negative sizes."""
    out_shape = tuple(int(n) for n in out_shape)
    in_shapes = tuple(tuple(int(n) for n in s) for s in in_shapes)
    for what, s in [("output", out_shape)] + [(f"input {i}", s) for i, s in enumerate(in_shapes)]:
        if len(s) == 0 or min(s) < 0:
            raise LineageError(f"range rules need arrays of rank >= 1 with sizes >= 0; the {what} has shape {s}")
    return out_shape, in_shapes


def abs_terms(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Absolute terms of the boxes ``[lo, hi)``."""
    t = np.zeros(lo.shape, TERM)
    t["ref"], t["mul"], t["div"], t["a"], t["b"] = ABS, 1, 1, lo, hi
    return t


def unit_boxes(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per box: it holds one cell (stored as a flat id)."""
    return np.all(hi - lo == 1, axis=1)


def unit_abs(terms: np.ndarray) -> np.ndarray:
    """Per term: absolute and one cell (stored as a flat id)."""
    return np.all((terms["ref"] == ABS) & (terms["b"] - terms["a"] == 1), axis=1)


def step(terms: np.ndarray) -> np.ndarray:
    """Largest move of ``base`` when the out coordinate moves by one."""
    return (np.abs(terms["mul"]) + terms["div"] - 1) // terms["div"]


def images(terms: np.ndarray, x_lo: np.ndarray, x_hi: np.ndarray, exact: bool) -> tuple[np.ndarray, np.ndarray]:
    """Row ``k``: the input box term ``k`` gives over the out box ``[x_lo[k], x_hi[k])``.

    With ``exact`` the result is the exact union (rows whose union is not one box, a
    strided or diagonal term, are split along the out axes involved first, so the rows
    of the result no longer match the input rows); otherwise a bounding box.

    Examples
    --------
    >>> t = np.zeros((1, 2), TERM); t["mul"], t["div"] = 1, 1
    >>> t["ref"], t["a"], t["b"] = [[1, 0]], [[0, -1]], [[1, 2]]   # transpose, 3 wide along axis 1
    >>> lo, hi = images(t, np.array([[2, 5]]), np.array([[4, 6]]), exact=True)
    >>> lo.tolist(), hi.tolist()
    ([[5, 1]], [[6, 5]])
    """
    ref = terms["ref"].astype(np.int64)
    rel = ref != ABS
    if not rel.any():  # absolute terms: the same box for every out cell
        return terms["a"].copy(), terms["b"].copy()
    if exact:
        x_lo, x_hi, row = _split_for_exact(terms, x_lo, x_hi)
        if len(row) != len(terms):
            terms = terms[row]
            ref = terms["ref"].astype(np.int64)
            rel = ref != ABS
    k = np.where(rel, ref, 0)
    ol = np.take_along_axis(x_lo, k, axis=1) if x_lo.shape[1] else np.zeros_like(k)
    oh = (np.take_along_axis(x_hi, k, axis=1) - 1) if x_hi.shape[1] else np.zeros_like(k)
    mul, div = terms["mul"], terms["div"]
    b1, b2 = (mul * ol) // div, (mul * oh) // div
    lo = np.where(rel, np.minimum(b1, b2), 0) + terms["a"]
    hi = np.where(rel, np.maximum(b1, b2), 0) + terms["b"]
    return lo, hi


def _split_for_exact(terms: np.ndarray, x_lo: np.ndarray, x_hi: np.ndarray):
    """Split out boxes into unit slabs along the out axes where a term's image is not a
    box: a stride larger than the range, or two input axes following one out axis."""
    n, d_in = terms.shape
    d_out = x_lo.shape[1]
    row = np.arange(n)
    if n == 0 or d_out == 0:
        return x_lo, x_hi, row
    ref = terms["ref"].astype(np.int64)
    rel = ref != ABS
    k = np.where(rel, ref, 0)
    ext = x_hi - x_lo
    wide = rel & (np.take_along_axis(ext, k, axis=1) > 1)
    need = np.zeros((n, d_out), bool)
    gap = wide & (step(terms) > terms["b"] - terms["a"])
    for j in range(d_in):
        need[row[gap[:, j]], k[gap[:, j], j]] = True
        for j2 in range(j + 1, d_in):
            shared = wide[:, j] & wide[:, j2] & (k[:, j] == k[:, j2])
            need[row[shared], k[shared, j]] = True
    if not need.any():
        return x_lo, x_hi, row
    reps = np.prod(np.where(need, ext, 1), axis=1)
    new_row = np.repeat(row, reps)
    local = np.arange(len(new_row), dtype=np.int64) - np.repeat(np.cumsum(reps) - reps, reps)
    lo, hi = x_lo[new_row].copy(), x_hi[new_row].copy()
    for axis in range(d_out - 1, -1, -1):
        split = need[new_row, axis]
        e = np.where(split, ext[new_row, axis], 1)
        digit = local % e
        local //= e
        lo[split, axis] += digit[split]
        hi[split, axis] = lo[split, axis] + 1
    return lo, hi, new_row


def preimages(terms: np.ndarray, q_lo: np.ndarray, q_hi: np.ndarray, env_lo: np.ndarray,
               env_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row ``k``: the out box (within ``env``) of the cells whose term-``k`` box meets the
    query box ``[q_lo[k], q_hi[k])``; empty rows have ``hi <= lo`` somewhere.

    Examples
    --------
    >>> t = np.zeros((1, 1), TERM); t["ref"], t["mul"], t["div"], t["a"], t["b"] = 0, -1, 1, 9, 10  # a flip
    >>> lo, hi = preimages(t, np.array([[3]]), np.array([[5]]), np.array([[0]]), np.array([[10]]))
    >>> lo.tolist(), hi.tolist()
    ([[5]], [[7]])
    """
    c_lo, c_hi = env_lo.copy(), env_hi.copy()
    n = len(terms)
    rows = np.arange(n)
    a, b = terms["a"], terms["b"]
    ref = terms["ref"].astype(np.int64)
    for j in range(terms.shape[1] if terms.ndim == 2 else 0):
        rel = ref[:, j] != ABS
        # abs: the range must meet the query; rel: base in [L, U]
        miss = ~rel & ((a[:, j] >= q_hi[:, j]) | (b[:, j] <= q_lo[:, j]))
        c_hi[miss] = c_lo[miss]
        if not rel.any():
            continue
        r = rows[rel]
        k = ref[r, j]
        mul, div = terms["mul"][r, j], terms["div"][r, j]
        low = q_lo[r, j] - b[r, j] + 1
        up = q_hi[r, j] - a[r, j] - 1
        pos = mul > 0
        m = np.abs(mul)
        olo = np.where(pos, -((-low * div) // m), -(((up + 1) * div - 1) // m))
        ohi = np.where(pos, ((up + 1) * div - 1) // m, (-low * div) // m) + 1
        c_lo[r, k] = np.maximum(c_lo[r, k], olo)
        c_hi[r, k] = np.minimum(c_hi[r, k], ohi)
    return c_lo, c_hi


def rewrites_to(t: np.ndarray, s: np.ndarray, o_lo: np.ndarray, o_hi: np.ndarray) -> np.ndarray:
    """Per row: term ``t``, on the out cells ``[o_lo, o_hi)`` of its rule, equals term ``s``
    (all axes; each reference's base evaluated at the range's ends).

    Examples
    --------
    >>> t, s = np.zeros((1, 1), TERM), np.zeros((1, 1), TERM)
    >>> t["ref"], t["mul"], t["div"], t["a"], t["b"] = ABS, 1, 1, 7, 8   # row 7 of a one-row rule
    >>> s["ref"], s["mul"], s["div"], s["a"], s["b"] = 0, 1, 1, 0, 1     # "my own row"
    >>> rewrites_to(t, s, np.array([[7, 0]]), np.array([[8, 5]])).tolist()
    [True]
    """
    def base(terms, k):
        lo = (terms["mul"] * np.take_along_axis(o_lo, k, axis=1)) // terms["div"]
        hi = (terms["mul"] * (np.take_along_axis(o_hi, k, axis=1) - 1)) // terms["div"]
        return lo, lo == hi

    t_rel, s_rel = t["ref"] != ABS, s["ref"] != ABS
    t_base, t_const = base(t, np.where(t_rel, t["ref"], 0).astype(np.int64))
    s_base, s_const = base(s, np.where(s_rel, s["ref"], 0).astype(np.int64))
    same_ref = (t["ref"] == s["ref"]) & (t["mul"] == s["mul"]) & (t["div"] == s["div"])
    fixed_t = ~t_rel | t_const  # t is an absolute range on these cells
    a_abs = np.where(t_rel, t["a"] + t_base, t["a"])
    b_abs = np.where(t_rel, t["b"] + t_base, t["b"])
    a = np.where(same_ref, t["a"], np.where(s_rel, a_abs - s_base, a_abs))
    b = np.where(same_ref, t["b"], np.where(s_rel, b_abs - s_base, b_abs))
    feasible = same_ref | (fixed_t & (~s_rel | s_const))
    return np.all(feasible & (a == s["a"]) & (b == s["b"]), axis=1)


def canonical_terms(rule: np.ndarray, terms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Terms sorted per rule (unit absolute terms first), without empty or repeated ones."""
    terms = terms.copy()
    absolute = terms["ref"] == ABS
    if absolute.any():
        terms["mul"][absolute] = 1
        terms["div"][absolute] = 1
    if terms.size:
        keep = np.all(terms["b"] > terms["a"], axis=1)
        if not keep.all():
            rule, terms = rule[keep], terms[keep]
    if len(terms) < 2:
        return rule, terms
    order = lexsort(_term_sort_keys(terms) + [~unit_abs(terms), rule])
    if np.any(order[1:] < order[:-1]):
        rule, terms = rule[order], terms[order]
    dup = rule[1:] == rule[:-1]
    for f in TERM.names:
        col = terms[f]
        for j in range(terms.shape[1]):
            dup &= col[1:, j] == col[:-1, j]
    if dup.any():
        keep = np.r_[True, ~dup]
        rule, terms = rule[keep], terms[keep]
    return rule, terms


def _term_sort_keys(terms: np.ndarray) -> list[np.ndarray]:
    """np.lexsort keys (last is primary) ordering terms by ref, mul, div, a, b per axis."""
    keys = []
    for f in ("b", "a", "div", "mul", "ref"):
        for j in range(terms.shape[1] - 1, -1, -1):
            keys.append(terms[f][:, j].astype(np.int64))
    return keys

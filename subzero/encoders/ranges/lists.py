"""CSR lists (groups of rows, as in `subzero.pairs`): gathering groups, and grouping
equal lists exactly (a 64-bit hash per list, then a verification that never trusts it)."""

from __future__ import annotations

import numpy as np

from subzero.pairs import owners, ptr_from_counts

__all__ = ["EMPTY", "csr_gather", "expand_csr", "mix", "segment_sums", "group_lists", "box_cells"]

EMPTY = np.empty(0, np.int64)


def csr_gather(ptr: np.ndarray, which: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Element positions of the CSR groups ``which`` (in that order) and their new ptr."""
    which = np.asarray(which, np.int64)
    counts = ptr[which + 1] - ptr[which]
    new_ptr = ptr_from_counts(counts)
    total = int(new_ptr[-1])
    pos = np.repeat(ptr[which] - new_ptr[:-1], counts) + np.arange(total, dtype=np.int64)
    return pos, new_ptr


def expand_csr(ptr: np.ndarray, which: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each entry of ``which`` (group ids, repeats allowed): positions of its group's
    elements, and the index into ``which`` each position came from."""
    pos, new_ptr = csr_gather(ptr, which)
    return pos, owners(new_ptr)


_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer, vectorized (uint64, wrapping)."""
    z = x + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def segment_sums(h: np.ndarray, ptr: np.ndarray) -> np.ndarray:
    """Per CSR segment, the wrapping uint64 sum of ``h`` (0 for empty segments)."""
    cs = np.zeros(len(h) + 1, np.uint64)
    np.cumsum(h, out=cs[1:])
    return cs[ptr[1:]] - cs[ptr[:-1]]


def group_lists(lists: list[tuple[np.ndarray, np.ndarray]], n: int) -> np.ndarray:
    """Labels ``0..G-1`` of ``n`` items such that two items share a label iff their rows
    are equal in every CSR list ``(rows (M, w) int64, ptr (n+1,))``, order included."""
    if n == 0:
        return EMPTY
    total = np.zeros(n, np.uint64)
    for s, (rows, ptr) in enumerate(lists):
        h = np.full(len(rows), np.uint64(s * 2 + 1), np.uint64)
        for col in range(rows.shape[1]):
            h = mix(h ^ rows[:, col].astype(np.uint64))
        per = segment_sums(h, ptr) + mix(np.diff(ptr).astype(np.uint64) + np.uint64(7919 * (s + 1)))
        total += mix(per + np.uint64(s))
    _, first, label = np.unique(total, return_index=True, return_inverse=True)
    label = label.reshape(-1).astype(np.int64)
    rep = first[label]
    bad = np.zeros(n, bool)
    for rows, ptr in lists:
        count = np.diff(ptr)
        bad |= count != count[rep]
        if not bad.any():  # every item as long as its representative: compare in place
            rep_pos = np.repeat(ptr[rep] - ptr[:-1], count) + np.arange(len(rows), dtype=np.int64)
            differs = np.any(rows != rows[rep_pos], axis=1)
            if differs.any():
                bad[owners(ptr)[differs]] = True
            continue
        ok = np.flatnonzero(~bad)
        pos, _ = csr_gather(ptr, ok)
        rep_pos, _ = csr_gather(ptr, rep[ok])
        differs = np.any(rows[pos] != rows[rep_pos], axis=1) if len(pos) else np.zeros(0, bool)
        if differs.any():
            bad[ok[owners(ptr_from_counts(count[ok]))[differs]]] = True
    if bad.any():  # hash collisions (never seen): such items get labels of their own
        label = label.copy()
        label[bad] = label.max() + 1 + np.arange(int(bad.sum()))
        label = np.unique(label, return_inverse=True)[1].reshape(-1).astype(np.int64)
    return label


def box_cells(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every cell of every box: ``(box index, coords)`` (no dedupe)."""
    ext = np.maximum(hi - lo, 0)
    size = np.prod(ext, axis=1) if lo.shape[1] else np.ones(len(lo), np.int64)
    box = np.repeat(np.arange(len(lo)), size)
    local = np.arange(len(box), dtype=np.int64) - np.repeat(np.cumsum(size) - size, size)
    coords = np.empty((len(box), lo.shape[1]), np.int64)
    for axis in range(lo.shape[1] - 1, -1, -1):
        e = ext[box, axis]
        coords[:, axis] = lo[box, axis] + local % e
        local //= e
    return box, coords

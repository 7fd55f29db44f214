"""Region pairs in memory: compressed sparse rows of flat cell ids, queried with numpy.

``FullPairs`` holds ``(outcells, incells_1..incells_n)`` region pairs; ``PayloadPairs``
holds ``(outcells, payload)`` pairs.  Pair ``k``'s out cells are
``out_ids[out_ptr[k]:out_ptr[k+1]]``; likewise for each input.  These are the unit the
runtime collects from ``lwrite``, the encoders serialize, and black-box re-execution
answers queries from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from subzero.frontier import Frontier

__all__ = ["FullPairs", "PayloadPairs", "owners", "gather_groups", "concat_csr"]

_EMPTY = np.empty(0, dtype=np.int64)


def owners(ptr: np.ndarray) -> np.ndarray:
    """For CSR offsets ``ptr``, the pair index of each element."""
    return np.repeat(np.arange(len(ptr) - 1, dtype=np.int64), np.diff(ptr))


def ptr_from_counts(counts: np.ndarray) -> np.ndarray:
    """The CSR pointer of ``counts`` (a leading 0, then the running sum)."""
    ptr = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr


def gather_groups(ids: np.ndarray, ptr: np.ndarray, selected: np.ndarray) -> np.ndarray:
    """Concatenate the groups ``selected`` (a boolean mask over pairs) of a CSR array."""
    return ids[selected[owners(ptr)]]


def concat_csr(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The CSR arrays ``(ids, ptr)`` of ``parts`` as one, their groups in order."""
    if not parts:
        return _EMPTY, np.zeros(1, dtype=np.int64)
    ids = np.concatenate([p[0] for p in parts]).astype(np.int64, copy=False)
    counts = np.concatenate([np.diff(p[1]) for p in parts])
    return ids, ptr_from_counts(counts)


@dataclass
class FullPairs:
    """Region pairs with explicit input cells."""

    out_ids: np.ndarray
    out_ptr: np.ndarray
    in_ids: tuple[np.ndarray, ...]
    in_ptr: tuple[np.ndarray, ...]

    @classmethod
    def empty(cls, n_inputs: int) -> "FullPairs":
        """No pairs, over ``n_inputs`` inputs."""
        z = np.zeros(1, dtype=np.int64)
        return cls(_EMPTY, z, (_EMPTY,) * n_inputs, (z,) * n_inputs)

    @property
    def n_pairs(self) -> int:
        """Number of region pairs."""
        return len(self.out_ptr) - 1

    @property
    def n_inputs(self) -> int:
        """Number of inputs (one in-id list per input)."""
        return len(self.in_ids)

    @classmethod
    def concat(cls, parts: "list[FullPairs]", n_inputs: int) -> "FullPairs":
        """The pairs of ``parts`` in one set, in order."""
        parts = [p for p in parts if p.n_pairs]
        out_ids, out_ptr = concat_csr([(p.out_ids, p.out_ptr) for p in parts])
        ins = [concat_csr([(p.in_ids[i], p.in_ptr[i]) for p in parts]) for i in range(n_inputs)]
        return cls(out_ids, out_ptr, tuple(a for a, _ in ins), tuple(b for _, b in ins))

    def select(self, keep: np.ndarray) -> "FullPairs":
        """The pairs where the boolean ``keep`` is set."""
        def sub(ids, ptr):
            return gather_groups(ids, ptr, keep), ptr_from_counts(np.diff(ptr)[keep])
        out = sub(self.out_ids, self.out_ptr)
        ins = [sub(a, b) for a, b in zip(self.in_ids, self.in_ptr)]
        return FullPairs(out[0], out[1], tuple(a for a, _ in ins), tuple(b for _, b in ins))

    def backward(self, frontier: Frontier, i: int) -> np.ndarray:
        """Input-``i`` cell ids of every pair whose out cells meet ``frontier`` (a
        `subzero.frontier.Frontier` over the output, or anything with ``contains(ids)``)."""
        hit = _hit_pairs(self.out_ids, self.out_ptr, frontier)
        return gather_groups(self.in_ids[i], self.in_ptr[i], hit)

    def forward(self, frontier: Frontier, i: int) -> np.ndarray:
        """Output cell ids of every pair whose input-``i`` cells meet ``frontier`` (over input ``i``)."""
        hit = _hit_pairs(self.in_ids[i], self.in_ptr[i], frontier)
        return gather_groups(self.out_ids, self.out_ptr, hit)


@dataclass
class PayloadPairs:
    """Region pairs carrying a payload instead of input cells.

    ``envelopes``, when known, holds per input ``i`` the half-open bounding box
    ``(lo, hi)`` (two ``(n_pairs, ndim_i)`` arrays; ``lo == hi`` for no cells) of what
    ``map_p`` computes for each pair: the encoders index it so that forward queries
    expand only the payloads that can reach their cells.

    ``cover``, when set, says these are a *covered tile* (`subzero.context.Context.lwrite_tile`):
    one pair over every cell of the box ``cover`` (its out cells, in C order), whose payload
    the operator's ``map_p`` resolves cell by cell; ``records`` then holds per input the
    boxes ``(lo, hi)`` of the records it names (every out cell in no record's box reads only
    itself), which PayOne and CompOne store in place of the cells.
    """

    out_ids: np.ndarray
    out_ptr: np.ndarray
    payloads: list[bytes]
    envelopes: tuple[tuple[np.ndarray, np.ndarray], ...] | None = None
    cover: tuple[tuple[int, int], ...] | None = None
    records: tuple[tuple[np.ndarray, np.ndarray], ...] | None = None
    #: ``(order, sorted out ids, pair of each out cell)``, made by `with_out_cells` once per pairs
    _index: tuple[np.ndarray, np.ndarray, np.ndarray] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def empty(cls) -> "PayloadPairs":
        """No pairs."""
        return cls(_EMPTY, np.zeros(1, dtype=np.int64), [])

    @classmethod
    def of_cells(cls, ids: np.ndarray, payload: bytes) -> "PayloadPairs":
        """One pair: the out cells ``ids`` carrying ``payload`` (no pair without cells)."""
        ids = np.asarray(ids, np.int64).reshape(-1)
        if not len(ids):
            return cls.empty()
        return cls(ids, np.array([0, len(ids)], np.int64), [payload])

    @property
    def n_pairs(self) -> int:
        """Number of pairs."""
        return len(self.payloads)

    @classmethod
    def concat(cls, parts: "list[PayloadPairs]") -> "PayloadPairs":
        """The pairs of ``parts`` in one set, in order."""
        parts = [p for p in parts if p.n_pairs]
        out_ids, out_ptr = concat_csr([(p.out_ids, p.out_ptr) for p in parts])
        envelopes = None
        if parts and all(p.envelopes is not None for p in parts):
            envelopes = tuple((np.concatenate([p.envelopes[i][0] for p in parts]),
                               np.concatenate([p.envelopes[i][1] for p in parts]))
                              for i in range(len(parts[0].envelopes)))
        return cls(out_ids, out_ptr, [b for p in parts for b in p.payloads], envelopes)

    def select(self, keep: np.ndarray) -> "PayloadPairs":
        """The pairs where ``keep`` is set."""
        envelopes = None if self.envelopes is None else tuple((lo[keep], hi[keep]) for lo, hi in self.envelopes)
        return PayloadPairs(
            gather_groups(self.out_ids, self.out_ptr, keep),
            ptr_from_counts(np.diff(self.out_ptr)[keep]),
            [b for b, k in zip(self.payloads, keep) if k],
            envelopes,
        )

    def with_out_cells(self, ids: np.ndarray) -> "PayloadPairs":
        """The pairs holding any of the out cells ``ids`` (sorted unique flat ids), in order, each
        kept to those of its cells: ``select`` of the pairs the cells meet, with no other cell.

        A search of ``ids`` in the pairs' out cells sorted once (kept with the pairs: re-run tiles'
        pairs answer many queries), so it costs ``ids``, not the pairs.

        Examples
        --------
        >>> p = PayloadPairs(np.array([5, 1, 7, 2]), np.array([0, 2, 4]), [b"a", b"b"])
        >>> got = p.with_out_cells(np.array([2, 5]))
        >>> got.out_ids.tolist(), got.out_ptr.tolist(), got.payloads
        ([5, 2], [0, 1, 2], [b'a', b'b'])
        """
        if self._index is None:
            order = np.argsort(self.out_ids, kind="stable")
            self._index = (order, self.out_ids[order], owners(self.out_ptr))
        order, sorted_ids, pair = self._index
        ids = np.asarray(ids, np.int64).reshape(-1)
        start, stop = np.searchsorted(sorted_ids, ids, "left"), np.searchsorted(sorted_ids, ids, "right")
        n = stop - start
        total = int(n.sum())
        if not total:
            return PayloadPairs.empty()
        # every position of every cell (a cell may lie in several pairs), back in the pairs' order
        before = np.cumsum(n) - n
        at = np.sort(order[np.arange(total, dtype=np.int64) + np.repeat(start - before, n)])
        kept, counts = np.unique(pair[at], return_counts=True)
        return PayloadPairs(self.out_ids[at], ptr_from_counts(counts), [self.payloads[k] for k in kept.tolist()])

    def groups(self) -> tuple[list[bytes], np.ndarray]:
        """The distinct payloads and, for each pair, the index of its payload among them."""
        if not self.payloads:
            return [], np.empty(0, np.int64)
        arr = np.empty(len(self.payloads), dtype=object)
        arr[:] = self.payloads
        distinct, code = np.unique(arr, return_inverse=True)
        return [bytes(d) for d in distinct], code.astype(np.int64).reshape(-1)

    def by_payload(self) -> list[tuple[bytes, np.ndarray]]:
        """Out cell ids grouped by distinct payload: one `map_p` call per group."""
        if not self.payloads:
            return []
        distinct, code = self.groups()
        cell_code = code[owners(self.out_ptr)]
        order = np.argsort(cell_code, kind="stable")
        bounds = np.searchsorted(cell_code[order], np.arange(len(distinct) + 1))
        ids = self.out_ids[order]
        return [(bytes(distinct[k]), ids[bounds[k] : bounds[k + 1]]) for k in range(len(distinct))]


def _hit_pairs(ids: np.ndarray, ptr: np.ndarray, frontier) -> np.ndarray:
    n = len(ptr) - 1
    hit = np.zeros(n, dtype=bool)
    if n and len(ids):
        hit[owners(ptr)[frontier.contains(ids)]] = True
    return hit

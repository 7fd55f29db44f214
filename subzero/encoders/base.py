"""The encoder interface and the sorted batch a shard is written from.

An encoder turns one task's region pairs into LMDB entries (`EncodedTile`), inside the
task; the task sorts its tile's entries into a `Batch` (`merge_tiles`, which also merges
several tiles' entries, as a test or a tool may) and writes them as its own shard in one
transaction.  At query time the encoder answers one step of a lineage query from a
`Reader` over a shard.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from subzero.encoders.codec import CELL, keys_to_bytes, make_keys, split_keys
from subzero.errors import StoreError
from subzero.frontier import Frontier
from subzero.pairs import PayloadPairs
from subzero.modes import Direction

#: what an encoder is told of a node's arrays: ``(output_shape, input_shapes)``
Shapes = tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]

__all__ = ["Shapes", "Reader", "EncodedTile", "Batch", "Encoder", "merge_tiles", "frontier_boxes"]


class Reader(Protocol):
    """Read access to one shard; implemented by the store, which knows no key layout (`scan`
    reads one key kind through `scan_ranges`)."""

    def get_many(self, keys: np.ndarray) -> tuple[np.ndarray, list[bytes]]:
        """The keys found (uint64) and their values."""

    def scan_ranges(self, starts: np.ndarray, stops: np.ndarray) -> tuple[np.ndarray, list[bytes]]:
        """Every entry whose key lies in one of the ranges ``[starts[k], stops[k])``."""

    def intersect(self, slot: int, mins: np.ndarray, maxs: np.ndarray) -> np.ndarray:
        """Pair ids whose bounding box in ``slot`` meets any of the boxes."""


@dataclass
class EncodedTile:
    """One task's encoded lineage for one strategy.

    ``keys``/``values`` are entries with unique keys; ``cell_keys``/``cell_pairs`` map
    key cells to pair ids and are merged across tiles (a cell read by two tiles' halos
    is one key whose value lists both pairs); ``boxes[slot]`` are R-tree entries.
    """

    keys: np.ndarray = field(default_factory=lambda: np.empty(0, np.uint64))
    values: list[bytes] = field(default_factory=list)
    cell_keys: np.ndarray = field(default_factory=lambda: np.empty(0, np.uint64))
    cell_pairs: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    boxes: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)
    n_pairs: int = 0
    inline: bytes | None = None  # a small summary the driver may merge over tiles (FullRange)


@dataclass
class Batch:
    """One shard's lineage for one strategy: sorted entries and R-tree boxes."""

    keys: list[bytes]
    values: list[bytes]
    boxes: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]
    n_pairs: int

    @property
    def nbytes(self) -> int:
        """Bytes of the LMDB entries (keys and values)."""
        return 8 * len(self.keys) + sum(map(len, self.values))

    @property
    def index_bytes_bound(self) -> int:
        """An upper bound of the bytes of this batch's R-tree files."""
        return sum(index_bytes_bound(len(ids)) for ids, _, _ in self.boxes.values())


def envelope_boxes(ids: np.ndarray, envelopes: Any) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """R-tree entries (closed boxes) of the non-empty input envelopes of payload pairs, per input."""
    boxes = {}
    for i, (lo, hi) in enumerate(envelopes or ()):
        keep = np.all(hi > lo, axis=1) if lo.shape[1] else np.ones(len(lo), bool)
        boxes[i] = (ids[keep], lo[keep].astype(np.float64), (hi[keep] - 1).astype(np.float64))
    return boxes


def decode_payload_pairs(values: list[bytes]) -> PayloadPairs:
    """PayloadPairs from values of the form ``pack_groups([(out cells)], tails=payloads)``."""
    from subzero.encoders.codec import unpack_groups

    if not values:
        return PayloadPairs.empty()
    ((ids, ptr),), tails = unpack_groups(values, with_tails=True)
    return PayloadPairs(ids, ptr, tails)


def index_bytes_bound(entries: float) -> int:
    """An upper bound of an R-tree's files: 4 KiB pages of at least 40 entries, plus headers."""
    return int(4096 * (int(entries) // 40 + 3))


def merge_tiles(parts: list[EncodedTile]) -> Batch:
    """Merge per-tile encodings into one batch sorted by key (deterministic bytes)."""
    keys = np.concatenate([p.keys for p in parts]) if parts else np.empty(0, np.uint64)
    values = [v for p in parts for v in p.values]
    ck = np.concatenate([p.cell_keys for p in parts]) if parts else np.empty(0, np.uint64)
    if len(ck):
        cp = np.concatenate([p.cell_pairs for p in parts])
        order = np.lexsort((cp, ck))
        ck, cp = ck[order], cp[order]
        starts = np.flatnonzero(np.r_[True, ck[1:] != ck[:-1]])
        ends = np.r_[starts[1:], len(ck)] * 8
        buf = cp.astype("<i8").tobytes()
        values += [buf[a:b] for a, b in zip((starts * 8).tolist(), ends.tolist())]
        keys = np.concatenate([keys, ck[starts]])
    order = np.argsort(keys, kind="stable")
    if len(keys) > 1 and np.any(keys[order][1:] == keys[order][:-1]):
        raise StoreError("an encoder produced the same LMDB key twice; refusing to write lineage "
                         "that would lose entries (this is a subzero bug: please report it)")
    boxes: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for slot in sorted({s for p in parts for s in p.boxes}):
        got = [p.boxes[slot] for p in parts if slot in p.boxes]
        boxes[slot] = tuple(np.concatenate(a) for a in zip(*got))
    return Batch(keys_to_bytes(keys[order]), [values[k] for k in order.tolist()], boxes,
                 sum(p.n_pairs for p in parts))


def pair_lists(values: list[bytes]) -> np.ndarray:
    """Unique pair ids from cell-key values."""
    if not values:
        return np.empty(0, np.int64)
    return np.unique(np.frombuffer(b"".join(values), "<i8"))


def cells_to_pairs(reader: Reader, slot: int, ids: np.ndarray) -> np.ndarray:
    """Pair ids of the cell keys ``ids`` in ``slot`` (One encodings)."""
    _, values = reader.get_many(make_keys(CELL, slot, ids))
    return pair_lists(values)


def scan(reader: Reader, kind: int) -> tuple[np.ndarray, list[bytes]]:
    """Every entry of one key kind (`subzero.encoders.codec`: ``CELL`` or ``PAIR``)."""
    return reader.scan_ranges(make_keys(kind, 0, np.zeros(1, np.int64)), make_keys(kind + 1, 0, np.zeros(1, np.int64)))


def scan_cell_keys(reader: Reader) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All (slot, cell id, pair id) rows of the cell keys."""
    keys, values = scan(reader, CELL)
    counts = np.array([len(v) // 8 for v in values], np.int64)
    _, slot, ids = split_keys(keys)
    pairs = np.frombuffer(b"".join(values), "<i8") if values else np.empty(0, np.int64)
    return np.repeat(slot, counts), np.repeat(ids, counts), pairs.astype(np.int64)


def frontier_boxes(frontier: Frontier, max_boxes: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """Closed boxes covering a `subzero.frontier.Frontier`: its own boxes when it has few,
    else one per cell when few, else one per touched block of a coarse grid (an R-tree
    query is a superset filter anyway)."""
    shape = frontier.shape
    if frontier.kind != "mask":
        lo, hi = frontier.boxes()
        if len(lo) <= max_boxes:
            return lo.astype(np.float64), (hi - 1).astype(np.float64)
    coords = frontier.coords()
    block = 1
    while True:
        blocks = np.unique(coords // block, axis=0) if block > 1 else coords
        if len(blocks) <= max_boxes or block >= max(shape, default=1):
            break
        block *= 4
    mins = (blocks * block).astype(np.float64)
    maxs = np.minimum(mins + block - 1, np.asarray(shape) - 1).astype(np.float64)
    return mins, maxs


def bounding_boxes(ids: np.ndarray, ptr: np.ndarray, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-group bounding boxes of CSR cell ids: (group index, mins, maxs), non-empty groups only."""
    from subzero.cells import to_coords

    counts = np.diff(ptr)
    nonempty = np.flatnonzero(counts)
    coords = to_coords(ids, shape)
    starts = ptr[:-1][nonempty]
    if len(coords) == 0:
        z = np.empty((0, len(shape)))
        return nonempty, z, z
    mins = np.minimum.reduceat(coords, starts, axis=0).astype(np.float64)
    maxs = np.maximum.reduceat(coords, starts, axis=0).astype(np.float64)
    return nonempty, mins, maxs


class Encoder(ABC):
    """One encoding (paper Fig. 4), backward- or forward-optimized."""

    base: str = ""

    def __init__(self, direction: "Direction | str" = Direction.BACKWARD):
        self.direction = Direction.parse(direction)

    @abstractmethod
    def encode(self, pairs: Any, tile_index: int, shapes: Shapes) -> EncodedTile:
        """Encode one tile's pairs.  ``shapes`` = (output shape, input shapes)."""

    @abstractmethod
    def load(self, reader: Reader, shapes: Shapes) -> Any:
        """Every stored pair, as `FullPairs` or `PayloadPairs`."""


class FullEncoder(Encoder):
    """Full lineage: answers both directions, fast in the one it is keyed by."""

    @abstractmethod
    def backward(self, reader: Reader, frontier: Frontier, i: int, shapes: Shapes) -> np.ndarray:
        """Input-``i`` ids of the lineage of ``frontier`` (a `Frontier` over the output)."""

    @abstractmethod
    def forward(self, reader: Reader, frontier: Frontier, i: int, shapes: Shapes) -> np.ndarray:
        """Output ids whose lineage meets ``frontier`` (a `Frontier` over input ``i``)."""


class PayloadEncoder(Encoder):
    """Payload lineage: the out cells and payloads; `map_p` computes the inputs."""

    @abstractmethod
    def lookup(self, reader: Reader, frontier: Frontier, shapes: Shapes) -> PayloadPairs:
        """Pairs holding out cells of ``frontier`` (over the output), restricted to those cells."""

    def forward_candidates(self, reader: Reader, frontier: Frontier, i: int, shapes: Shapes) -> PayloadPairs:
        """Pairs whose input-``i`` envelope meets ``frontier`` (over input ``i``): the only
        ones whose payload can reach it, found in the envelope R-tree without expanding any."""
        from subzero.encoders.codec import PAIR, make_keys

        if frontier.is_empty:
            return PayloadPairs.empty()
        mins, maxs = frontier_boxes(frontier)
        ids = np.unique(reader.intersect(i, mins, maxs))
        _, values = reader.get_many(make_keys(PAIR, 0, ids))
        return decode_payload_pairs(values)

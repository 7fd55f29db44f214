"""The catalog of a run: typed, versioned records (what the store knows about a run).

Every record is a frozen dataclass that round-trips through plain dicts
(``to_dict`` / ``from_dict``), so the catalog is JSON on disk and typed in memory.
`RunRecord` is the catalog itself (``STORE/catalog.json``): the workflow, the status,
budgets and one `NodeRecord` per committed node.  A node's shards are listed in its
`Manifest` (``STORE/manifests/NODE.json``): for every stored strategy, the one
committed shard of every tile (`ShardRecord`), with the byte size and checksum of each
of its files.  The driver writes a node's manifest after its stage succeeded, then its
catalog entry: a node is visible exactly when all of its lineage is.

A catalog of another format version is refused with a `StoreError` that says to
re-run the workflow.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from subzero.errors import StoreError
from subzero.modes import Strategy

__all__ = ["FORMAT", "READ_FORMATS", "FileRecord", "LineageSize", "ShardRecord", "Manifest", "ArrayRecord",
           "NodeMetrics", "NodeRecord", "PendingNode", "RunRecord"]

#: version of the store layout and of these records (1: .npy arrays and one LMDB environment;
#: 2: Zarr arrays and per-tile shards; 3: the catalog, manifests and operators checksummed, and
#: the run's fingerprint, so a killed run can be resumed; 4: PayOne/CompOne shards keep one entry
#: per run of cells, which format-3 code would read as no lineage, so it must refuse them)
FORMAT = 4
#: the formats this subzero reads: format 3 stores answer as before (their shards say their layout)
READ_FORMATS = (3, 4)

@dataclass(frozen=True)
class FileRecord:
    """One file of a shard: its name suffix (``.mdb``, ``.255.dat``...), size and xxh3-64 checksum."""

    suffix: str
    size: int
    xxh3: str

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "FileRecord":
        """The record `to_dict` wrote."""
        return cls(str(data["suffix"]), int(data["size"]), str(data["xxh3"]))


@dataclass(frozen=True, kw_only=True)
class LineageSize:
    """How much lineage one strategy holds: its region ``pairs``, their ``out_cells`` and
    ``in_cells``, its LMDB ``keys`` and the ``encode_seconds`` encoding took: one tile's
    (`ShardRecord`, measured) or a whole node's (the optimizer's `StrategyProfile`,
    predicted from a sample or summed from `NodeMetrics`).  Bytes are counted by each: a
    shard's per kind of file, a node's over all of its files.
    """

    pairs: float = 0
    out_cells: float = 0
    in_cells: float = 0
    keys: float = 0
    encode_seconds: float = 0.0


@dataclass(frozen=True)
class ShardRecord(LineageSize):
    """The committed lineage of one tile for one strategy, as its task reported it: its
    `LineageSize` (keyword-only) and its files.

    ``name`` is the attempt-unique file stem (None when the tile produced no lineage:
    nothing was written, and nothing is missing); ``nbytes`` the bytes of the LMDB
    entries, ``index_bytes`` those of the R-tree files (this tile's part of them, in a
    shared shard).  ``file_share``: None when the shard holds this tile alone; else the
    shard holds several tiles of the node (`subzero.store.shards.write_tiles_shard`: its keys
    start with the tile index, its R-trees have the tile as a last axis), each tile's record
    names its files, and this is the tile's part of their bytes (the parts add up to them).
    """

    tile: int
    name: str | None
    files: tuple[FileRecord, ...] = ()
    nbytes: int = 0
    index_bytes: int = 0
    file_share: int | None = None

    @property
    def disk_bytes(self) -> int:
        """Bytes of the shard's files on disk (this tile's part of them, in a shared shard)."""
        return sum(f.size for f in self.files) if self.file_share is None else self.file_share

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (its files as `FileRecord.to_dict`)."""
        data = asdict(self)
        data["files"] = [f.to_dict() for f in self.files]
        if self.file_share is None:  # a tile alone in its shard: written as before shared shards existed
            del data["file_share"]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ShardRecord":
        """The record `to_dict` wrote."""
        data = dict(data)
        data["files"] = tuple(FileRecord.from_dict(f) for f in data.get("files", ()))
        return cls(**data)


@dataclass(frozen=True)
class Manifest:
    """The committed shards of one node: strategy name -> one `ShardRecord` per tile.

    ``inline`` holds, per strategy, lineage small enough to live in the manifest itself
    (a node's merged FullRange table): its tiles then have no shard.
    """

    node: str
    shards: dict[str, tuple[ShardRecord, ...]] = field(default_factory=dict)
    inline: dict[str, bytes] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of ``manifests/NODE.json`` (inline tables base64-coded)."""
        import base64

        return {"format": FORMAT, "node": self.node,
                "shards": {s: [r.to_dict() for r in recs] for s, recs in self.shards.items()},
                "inline": {s: base64.b64encode(b).decode() for s, b in self.inline.items()}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Manifest":
        """The manifest `to_dict` wrote; a `StoreError` for another format."""
        import base64

        if data.get("format") not in READ_FORMATS:
            raise StoreError(f"manifest of node {data.get('node')!r} has format {data.get('format')!r}, "
                             f"this subzero reads format {FORMAT} (and the older 3); re-run the workflow into a new "
                             "store")
        return cls(str(data["node"]), {s: tuple(ShardRecord.from_dict(r) for r in recs)
                                       for s, recs in data.get("shards", {}).items()},
                   {s: base64.b64decode(b) for s, b in data.get("inline", {}).items()})


@dataclass(frozen=True)
class ArrayRecord:
    """A stored chunked array: shape, dtype and chunk shape (the tiles of its node), and the
    xxh3-64 checksum of its ``zarr.json`` (readers check the metadata against it; the chunks
    carry their own CRC32C)."""

    shape: tuple[int, ...]
    dtype: str
    chunks: tuple[int, ...]
    nbytes: int = 0
    meta_xxh3: str | None = None
    #: False: the run kept no chunks of it (an intermediate no query needs stored): reads re-run its
    #: tiles from its stored ancestors (`subzero.worker.RecomputedArray`)
    stored: bool = True
    #: why it was stored or not, as `subzero info` and `subzero explain` tell it
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``stored`` and ``why`` only when they say something: older stores' form)."""
        out: dict[str, Any] = {"shape": list(self.shape), "dtype": self.dtype, "chunks": list(self.chunks),
                               "nbytes": self.nbytes, "meta_xxh3": self.meta_xxh3}
        if not self.stored:
            out["stored"] = False
        if self.why:
            out["why"] = self.why
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ArrayRecord":
        """The record `to_dict` wrote."""
        meta = data.get("meta_xxh3")
        return cls(tuple(int(n) for n in data["shape"]), str(data["dtype"]),
                   tuple(int(n) for n in data["chunks"]), int(data.get("nbytes", 0)),
                   str(meta) if meta is not None else None, bool(data.get("stored", True)), str(data.get("why", "")))


@dataclass(frozen=True)
class PendingNode:
    """A node's share of a two-phase run's plan, kept in the catalog (``optimizer["pending"]``)
    between the phases so that a resumed run keeps it: the chosen strategies, what phase 1
    measured, the array it computed, and the optimizer's explanation for the node record
    (``extra``: reason, predicted costs, profile, pruned candidates)."""

    strategies: tuple[Strategy, ...]
    measured: dict[str, Any]
    array: ArrayRecord
    extra: dict[str, Any]

    def names(self) -> tuple[str, ...]:
        """The chosen strategies' names."""
        return tuple(s.name for s in self.strategies)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (strategy names, the array as `ArrayRecord.to_dict`)."""
        return {"strategies": list(self.names()), "measured": self.measured, "array": self.array.to_dict(),
                "extra": self.extra}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PendingNode":
        """The record `to_dict` wrote."""
        return cls(tuple(Strategy.parse(s) for s in data["strategies"]), dict(data["measured"]),
                   ArrayRecord.from_dict(data["array"]), dict(data["extra"]))


@dataclass(frozen=True)
class NodeMetrics:
    """What a node's run measured, summed over its tiles (from the tasks' metadata): times,
    bytes, keys and pair counts per strategy (``NodeRecord.stats`` in ``catalog.json``)."""

    tiles: int = 1
    wall_seconds: float = 0.0
    op_seconds: float = 0.0
    lineage_seconds: float = 0.0
    write_seconds: float = 0.0
    bytes: dict[str, int] = field(default_factory=dict)
    keys: dict[str, int] = field(default_factory=dict)
    encode_seconds: dict[str, float] = field(default_factory=dict)
    pairs: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    file_bytes: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (as `dataclasses.asdict` gives it, made directly: every catalog write
        makes it for every node committed so far)."""
        data = {name: getattr(self, name) for name in _METRICS}
        for name, value in data.items():
            if isinstance(value, dict):
                data[name] = copy.deepcopy(value) if any(not isinstance(v, (int, float)) for v in value.values()) \
                    else dict(value)
        data["pairs"] = {k: list(v) for k, v in self.pairs.items()}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "NodeMetrics":
        """The record `to_dict` wrote (unknown keys ignored)."""
        data = dict(data)
        data["pairs"] = {k: tuple(int(x) for x in v) for k, v in data.get("pairs", {}).items()}
        return cls(**{name: data[name] for name in _METRICS if name in data})


#: `NodeMetrics`' fields, in order
_METRICS = tuple(f.name for f in fields(NodeMetrics))


@dataclass(frozen=True)
class NodeRecord:
    """One committed node: its array and, for an operator, what it stored and why."""

    name: str
    kind: str  # "input" | "operator"
    array: ArrayRecord
    strategies: tuple[str, ...] = ()
    reason: str = ""
    stats: NodeMetrics | None = None
    dropped: dict[str, str] = field(default_factory=dict)
    predicted: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, Any] | None = None
    pruned: dict[str, str] = field(default_factory=dict)
    compute_seconds: float | None = None
    tile_shape: tuple[int, ...] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, ...]:
        """The node's array shape."""
        return self.array.shape

    @property
    def dtype(self) -> str:
        """The node's array dtype."""
        return self.array.dtype

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of the node's catalog entry."""
        data = {"name": self.name, "kind": self.kind, "array": self.array.to_dict(),
                "strategies": list(self.strategies), "reason": self.reason,
                "stats": self.stats.to_dict() if self.stats else None, "dropped": dict(self.dropped),
                "predicted": self.predicted, "profile": self.profile, "pruned": dict(self.pruned),
                "compute_seconds": self.compute_seconds,
                "tile_shape": list(self.tile_shape) if self.tile_shape is not None else None,
                "metadata": self.metadata}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "NodeRecord":
        """The record `to_dict` wrote."""
        return cls(
            name=str(data["name"]), kind=str(data["kind"]), array=ArrayRecord.from_dict(data["array"]),
            strategies=tuple(data.get("strategies", ())), reason=str(data.get("reason", "")),
            stats=NodeMetrics.from_dict(data["stats"]) if data.get("stats") else None,
            dropped=dict(data.get("dropped") or {}), predicted=dict(data.get("predicted") or {}),
            profile=data.get("profile"), pruned=dict(data.get("pruned") or {}),
            compute_seconds=data.get("compute_seconds"),
            tile_shape=tuple(data["tile_shape"]) if data.get("tile_shape") is not None else None,
            metadata=dict(data.get("metadata") or {}))


def _ints(values: Any) -> bool:
    return type(values) is tuple and all(type(v) is int for v in values)


def _numbers(values: Any) -> bool:
    return type(values) is dict and all(type(k) is str and type(v) in (int, float) for k, v in values.items())


def _reads_back_as_is(rec: NodeRecord) -> bool:
    """Whether ``rec`` is what `NodeRecord.from_dict` makes of the JSON of its `to_dict`: every
    field of the exact type JSON reads back (str, int, float, tuples where `from_dict` makes
    them), no predictions, profile or metadata (free-form: they go through JSON)."""
    a, m = rec.array, rec.stats
    return (type(rec.name) is str and type(rec.kind) is str and type(rec.reason) is str
            and _ints(a.shape) and _ints(a.chunks) and type(a.dtype) is str and type(a.nbytes) is int
            and (a.meta_xxh3 is None or type(a.meta_xxh3) is str) and type(a.stored) is bool and type(a.why) is str
            and type(rec.strategies) is tuple and all(type(v) is str for v in rec.strategies)
            and all(type(d) is dict and all(type(k) is str and type(v) is str for k, v in d.items())
                    for d in (rec.dropped, rec.pruned))
            and type(rec.predicted) is dict and not rec.predicted and rec.profile is None
            and type(rec.metadata) is dict and not rec.metadata
            and (rec.compute_seconds is None or type(rec.compute_seconds) in (int, float))
            and (rec.tile_shape is None or _ints(rec.tile_shape))
            and (m is None or (type(m) is NodeMetrics and type(m.tiles) is int
                               and all(type(getattr(m, f)) in (int, float)
                                       for f in ("wall_seconds", "op_seconds", "lineage_seconds", "write_seconds"))
                               and _numbers(m.bytes) and _numbers(m.keys) and _numbers(m.encode_seconds)
                               and _numbers(m.file_bytes) and type(m.pairs) is dict
                               and all(type(k) is str and type(v) is tuple and len(v) == 3 and _ints(v)
                                       for k, v in m.pairs.items()))))


@dataclass(frozen=True)
class RunRecord:
    """The catalog of one run (``STORE/catalog.json``).

    ``master`` is the Spark master the run's session used (``local[*, 4]``,
    ``spark://host:7077``...; None for the in-process executor); ``replayed_from``
    describes the run a selective replay (`subzero.replay`) started from: its store, the
    changed input cells, what each node did.

    ``status`` is ``"running"``, ``"failed"`` or ``"done"``; ``nodes`` holds the
    committed nodes only, in the order they were committed.  ``fingerprint`` holds the
    digests a resumed run is checked against (`subzero.fingerprint`); ``resumed`` the
    times the run was resumed.
    """

    workflow: dict[str, Any]
    created: str
    executor: str
    status: str = "running"
    tile_shape: Any = None
    pinned: dict[str, list[str]] = field(default_factory=dict)
    input_bytes: int = 0
    workload: list | None = None
    budgets: dict[str, Any] = field(default_factory=dict)
    optimizer: dict[str, Any] | None = None
    wall_seconds: float | None = None
    master: str | None = None
    replayed_from: dict[str, Any] | None = None
    fingerprint: dict[str, str] = field(default_factory=dict)
    resumed: list[str] = field(default_factory=list)
    nodes: dict[str, NodeRecord] = field(default_factory=dict)
    format: int = FORMAT

    def with_node(self, record: NodeRecord) -> "RunRecord":
        """This catalog with ``record`` committed (replacing an entry of the same name)."""
        out = object.__new__(type(self))  # every other field as it is: no `replace` (it re-runs __init__) nor
        out.__dict__.update(self.__dict__)  # `copy.copy` (a reduce per call), once per node
        out.__dict__["nodes"] = {**self.nodes, record.name: record}
        return out

    def as_read(self) -> "RunRecord":
        """This catalog as reading its ``catalog.json`` back gives it (`from_dict` of the JSON of
        `to_dict`), without that round trip for the node records whose every field is of JSON's
        own types (`_reads_back_as_is`: a traced run's hundreds of nodes), which are taken as they
        are; the run's own fields and the other records go through JSON."""
        plain = {name: rec for name, rec in self.nodes.items() if _reads_back_as_is(rec)}
        rest = object.__new__(type(self))
        rest.__dict__.update(self.__dict__)
        rest.__dict__["nodes"] = {name: rec for name, rec in self.nodes.items() if name not in plain}
        back = type(self).from_dict(json.loads(json.dumps(rest.to_dict())))
        back.__dict__["nodes"] = {name: plain[name] if name in plain else back.nodes[name] for name in self.nodes}
        return back

    def pending(self) -> dict[str, PendingNode] | None:
        """The plan a two-phase run keeps between its phases, per node (None when there is none)."""
        raw = (self.optimizer or {}).get("pending")
        return None if raw is None else {name: PendingNode.from_dict(d) for name, d in raw.items()}

    def node(self, name: str) -> NodeRecord:
        """The committed record of node ``name`` (a `StoreError` naming the committed ones if absent)."""
        try:
            return self.nodes[name]
        except KeyError:
            raise StoreError(f"node {name!r} is not committed in this store (committed: "
                             f"{', '.join(self.nodes) or 'none'}); the run did not finish or the catalog "
                             "was damaged: re-run the workflow") from None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of ``catalog.json``."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["nodes"] = {name: rec.to_dict() for name, rec in self.nodes.items()}
        data["format"] = FORMAT  # what this code writes: a resumed format-3 run becomes format 4
        return data

    @staticmethod
    def check_format(data: Any, where: str = "the store") -> None:
        """Refuse what is not a catalog of this format (a `StoreError` saying to re-run)."""
        if not isinstance(data, dict) or "workflow" not in data:
            raise StoreError(f"{where} has a catalog.json that is not a subzero catalog; re-run the workflow")
        if data.get("format") not in READ_FORMATS:
            raise StoreError(f"{where} was written in store format {data.get('format')!r}; this subzero reads "
                             f"format {FORMAT} (and the older 3: chunked Zarr arrays, per-tile lineage shards, "
                             "checksummed records). Re-run the workflow into a new store to query it")

    @classmethod
    def from_dict(cls, data: Any, where: str = "the store") -> "RunRecord":
        """Parse a catalog; an old or unknown format is a `StoreError` saying to re-run."""
        cls.check_format(data, where)
        try:
            known = {f.name for f in fields(cls)}
            values = {k: v for k, v in data.items() if k in known}
            values["nodes"] = {name: NodeRecord.from_dict(rec) for name, rec in data.get("nodes", {}).items()}
            return cls(**values)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise StoreError(f"{where} has a damaged catalog.json ({type(exc).__name__}: {exc}); "
                             "re-run the workflow into a new store") from exc

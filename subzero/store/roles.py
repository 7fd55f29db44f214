"""The store's roles: one narrow interface per job (zarr-python v3's ``abc/store.py``).

- `RunWriter`: the driver's side. It holds the writer lock, commits a node atomically
  (array, operator, manifest, then its catalog entry) and removes what no manifest names.
- `LineageReader`: the query side. It reads the catalog, manifests, arrays, operators
  and one shard per tile (a `subzero.encoders.base.Reader`), and never writes.
- `subzero.store.shards.ShardSink`: the task side. It takes a tile's opaque, sorted keys
  and values and its R-tree boxes from the encoders, and knows no key layout.

`subzero.store.FileStore` implements the first two, and a `ShardSink` writes into one of
its shard directories.  Clients get a store from `subzero.store.create_run`, `resume_run`
or `open_store`, typed by the role they use.
"""

from __future__ import annotations

from typing import Any, Protocol

from subzero.catalog import Manifest, RunRecord, ShardRecord
from subzero.store.location import Location

__all__ = ["LineageReader", "RunWriter"]


class LineageReader(Protocol):
    """Read access to a committed run: what queries, reopened runs and ``subzero info`` need."""

    @property
    def url(self) -> str:
        """Where the store lives (a directory or a URL)."""

    def read_catalog(self) -> RunRecord:
        """The run's catalog as stored."""

    def read_manifest(self, node: str) -> Manifest:
        """A committed node's shards and inline tables."""

    def shard_reader(self, node: str, strategy: str, record: ShardRecord, ndims: dict[int, int],
                     deadline: float | None = None) -> Any:
        """A `subzero.encoders.base.Reader` over one committed shard; ``ndims`` gives the
        axes of each R-tree slot (the encoders number the slots)."""

    def array(self, node: str, meta_xxh3: str | None = None) -> Any:
        """The `subzero.store.ArrayRef` of a node's array (checked against ``meta_xxh3``)."""

    def load_operator(self, node: str) -> Any:
        """A node's operator, unpickled."""

    def disk_bytes(self, node: str | None = None) -> int | None:
        """Bytes on disk of the whole store, or of one node's array (None when unknown)."""

    def writer(self) -> Any:
        """The `subzero.store.lock.Holder` of the writer lock (a live or a dead run), or None."""


class RunWriter(LineageReader, Protocol):
    """The one writer of a run (it holds the writer lock until `close`)."""

    #: where tasks write (the driver hands it to each `subzero.worker.NodeTask` with `shard_directory`)
    location: Location

    def write_catalog(self, record: RunRecord) -> None:
        """Replace the catalog atomically: a node is visible once its entry is written."""

    def save_operator(self, node: str, payload: bytes) -> None:
        """Keep a node's pickled operator."""

    def write_manifest(self, manifest: Manifest) -> None:
        """Commit a node's shards (before its catalog entry)."""

    def shard_directory(self, node: str, strategy: str) -> str:
        """The directory of one node's shards of one strategy (for its `ShardSink`)."""

    def array_meta_checksum(self, node: str) -> str:
        """The xxh3 of a committed array's metadata, as the catalog records it."""

    def remove_uncommitted(self, node: str, manifest: Manifest | None) -> int:
        """Delete the shards of ``node`` its manifest does not name; returns how many."""

    def remove_uncommitted_nodes(self, keep: set[str], keep_arrays: set[str] = ...) -> int:
        """Before a resumed run continues: remove what a killed run left outside ``keep``."""

    def adopt_node(self, src: "RunWriter | LineageReader", name: str, kind: str, with_array: bool = True) -> None:
        """Take a committed node's files from another store (linked where possible)."""

    def close(self) -> None:
        """Give up the writer lock."""

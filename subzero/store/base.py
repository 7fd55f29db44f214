"""The store interface: what executors and queries need from where a run lives.

A store holds a run's catalog (typed records), its arrays (chunked, written by the
tasks), its operators (pickled, so reopened runs can map and re-execute them) and its
lineage shards with their manifests.  `subzero.store.FileStore` implements it over a
local directory or any fsspec URL.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from subzero.catalog import Manifest, RunRecord, ShardRecord
from subzero.store.arrays import ArrayRef
from subzero.store.location import Location

__all__ = ["Store"]


class Store(ABC):
    """Where one run lives."""

    location: Location

    @property
    def url(self) -> str:
        return self.location.url

    # -- catalog --------------------------------------------------------------------------
    @abstractmethod
    def read_catalog(self) -> RunRecord:
        """The run's catalog as stored."""

    @abstractmethod
    def write_catalog(self, record: RunRecord) -> None:
        """Replace the catalog atomically (writers only)."""

    # -- arrays and operators -----------------------------------------------------------------
    @abstractmethod
    def array(self, node: str) -> ArrayRef:
        """The handle tasks and queries read node ``node``'s array through."""

    @abstractmethod
    def save_operator(self, node: str, payload: bytes) -> None:
        """Keep a node's pickled operator (writers only)."""

    @abstractmethod
    def load_operator(self, node: str) -> Any:
        """A node's operator, unpickled."""

    # -- lineage ------------------------------------------------------------------------------
    @abstractmethod
    def shard_directory(self, node: str, strategy: str) -> str:
        """The directory (under the store's root) of one node's shards of one strategy."""

    @abstractmethod
    def write_manifest(self, manifest: Manifest) -> None:
        """Commit a node's shards (writers only; before the node's catalog entry)."""

    @abstractmethod
    def read_manifest(self, node: str) -> Manifest:
        """A committed node's shards."""

    @abstractmethod
    def shard_reader(self, node: str, strategy: str, record: ShardRecord, ndims: dict[int, int],
                     deadline: float | None = None):
        """A `subzero.encoders.base.Reader` over one committed shard."""

    @abstractmethod
    def remove_uncommitted(self, node: str, manifest: Manifest | None) -> int:
        """Delete the shards of ``node`` its manifest does not name (failed or duplicate attempts);
        returns how many files were removed."""

"""Where a run lives: arrays (Zarr), lineage shards (LMDB + R-trees), catalog and manifests.

`Store` is the interface; `FileStore` implements it over a local directory or any
fsspec URL.  Only `subzero.store.arrays` imports zarr and only `subzero.store.shards`
imports lmdb.
"""

from __future__ import annotations

from subzero.store.arrays import ArrayRef
from subzero.store.base import Store
from subzero.store.file_store import FileStore, strategy_dirname
from subzero.store.location import Location, resolve

__all__ = ["Store", "FileStore", "ArrayRef", "Location", "resolve", "strategy_dirname"]

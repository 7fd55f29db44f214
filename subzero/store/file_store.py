"""The store over a directory or an fsspec URL.

Layout::

    STORE/.writer                       the writer lock (while a run writes the store)
    STORE/subzero-store.json            marks a directory subzero made (format, creation time)
    STORE/catalog.json                  the run's catalog (`subzero.catalog.RunRecord`), atomic
    STORE/arrays/NODE/                  Zarr v3 arrays, one chunk per tile
    STORE/operators/NODE.pkl            each node's operator (cloudpickle)
    STORE/manifests/NODE.json           committed shards per strategy and tile
    STORE/lineage/NODE/STRATEGY/tTILE-ATTEMPT.mdb (+ .SLOT.dat/.idx)   LMDB shards and R-trees

A node is committed when its manifest and then its catalog entry are written; shards a
manifest does not name (failed, retried or speculative attempts) are never read and
are removed when the node commits.  Readers never write to the store: query
statistics go to the user's cache directory.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import pickle
from pathlib import Path
from typing import Any

import xxhash

from subzero.catalog import FORMAT, Manifest, RunRecord, ShardRecord
from subzero.errors import StoreError
from subzero.store.arrays import ArrayRef, forget_store
from subzero.store.base import Store
from subzero.store.location import Location, resolve
from subzero.store.lock import LOCK_NAME, WriterLock, holder
from subzero.store.shards import ShardReader

__all__ = ["FileStore", "MARKER", "strategy_dirname"]

MARKER = "subzero-store.json"
_SUBDIRS = ("arrays", "operators", "manifests", "lineage")


def _entries(location: Location) -> list[str]:
    """What a store directory holds, leaving out writers' lock files in the making."""
    return [n for n in location.listdir() if not (n.startswith(LOCK_NAME + ".") and n.endswith(".tmp"))]


def strategy_dirname(strategy: str) -> str:
    return strategy.replace("/", "-")


class FileStore(Store):
    """A run's store at a `Location`.  Use `create` to start a run, `open` to read one."""

    def __init__(self, location: Location, lock: WriterLock | None = None):
        self.location = location
        self._lock = lock

    # -- lifecycle ----------------------------------------------------------------------------
    @classmethod
    def create(cls, store, record: RunRecord, overwrite: bool = False) -> "FileStore":
        """Take a new store for a run and write its first catalog.

        Refuses a store path that holds anything, unless ``overwrite`` is set and the
        directory is a store subzero made that no live run is writing.
        """
        location = resolve(store)
        cls._check_free(location, overwrite)
        lock = WriterLock.acquire(location, take_stale=overwrite)
        try:
            if overwrite:
                forget_store(location.url)
                for name in _entries(location):
                    if name != LOCK_NAME:
                        location.remove(name)
            elif [name for name in _entries(location) if name != LOCK_NAME]:  # filled since _check_free
                raise StoreError(f"store {location.url!r} already exists and is not empty; runs are never "
                                 "overwritten silently: choose a new store, or pass overwrite=True (--overwrite)")
            for sub in _SUBDIRS:
                location.makedirs(sub)
            made = {"format": FORMAT, "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
            location.write_bytes(json.dumps(made).encode(), MARKER)
            out = cls(location, lock)
            out.write_catalog(record)
        except BaseException:
            lock.release()
            raise
        return out

    @staticmethod
    def _check_free(location: Location, overwrite: bool) -> None:
        if location.is_local:
            path = Path(location.root)
            if path.exists() and not path.is_dir():
                raise StoreError(f"store {location.url!r} is a regular file, not a directory; choose a directory "
                                 "path for the run")
            if path.exists() and not os.access(path, os.W_OK):
                raise StoreError(f"store {location.url!r} is not writable; choose a directory you can write")
            if not path.exists():
                try:
                    path.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise StoreError(f"cannot create store directory {location.url!r} ({exc.strerror}); check "
                                     "the path and its permissions") from exc
        names = _entries(location)
        if not names:
            location.makedirs()
            return
        ours = MARKER in names or "catalog.json" in names
        if overwrite and ours:
            current = holder(location)
            if current is not None and current.alive:
                raise StoreError(f"store {location.url!r} is being written by another run "
                                 f"({current.describe()}); it cannot be overwritten while that run lives")
            return
        if overwrite:
            raise StoreError(f"store {location.url!r} is not empty and was not made by subzero; --overwrite only "
                             "replaces stores subzero made: choose another directory")
        if LOCK_NAME in names:
            current = holder(location)
            if current is not None:
                from subzero.store.lock import _held

                raise _held(location, current)
        raise StoreError(f"store {location.url!r} already exists and is not empty; runs are never overwritten "
                         "silently: choose a new store, or pass overwrite=True (--overwrite) to replace a store "
                         "subzero made")

    @classmethod
    def open(cls, store) -> "FileStore":
        """Open an existing store for reading, checking that it is one."""
        location = resolve(store)
        if location.is_local:
            path = Path(location.root)
            if path.exists() and not path.is_dir():
                raise StoreError(f"store {location.url!r} is a regular file, not a subzero store directory")
        if not location.isdir():
            raise StoreError(f"store {location.url!r} does not exist; pass the store given to wf.run (--store)")
        if not location.exists("catalog.json"):
            raise StoreError(f"{location.url!r} is not a subzero store (no catalog.json)")
        return cls(location)

    def close(self) -> None:
        """Give up the writer lock (writers)."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    # -- catalog ------------------------------------------------------------------------------
    def read_catalog(self) -> RunRecord:
        try:
            raw = self.location.read_bytes("catalog.json")
        except FileNotFoundError:
            raise StoreError(f"{self.url!r} is not a subzero store (no catalog.json)") from None
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise StoreError(f"store {self.url!r} has a corrupt catalog.json ({exc}); re-run the workflow into "
                             "a new store") from exc
        return RunRecord.from_dict(data, where=f"store {self.url!r}")

    def write_catalog(self, record: RunRecord) -> None:
        self.location.write_bytes(json.dumps(record.to_dict(), indent=1, sort_keys=True).encode(), "catalog.json")

    # -- arrays and operators -----------------------------------------------------------------
    def array(self, node: str) -> ArrayRef:
        return ArrayRef(self.location, f"arrays/{node}")

    def save_operator(self, node: str, payload: bytes) -> None:
        self.location.write_bytes(payload, "operators", f"{node}.pkl")

    def load_operator(self, node: str) -> Any:
        try:
            raw = self.location.read_bytes("operators", f"{node}.pkl")
        except FileNotFoundError as exc:
            raise StoreError(f"operator of node {node!r} is missing from store {self.url!r}") from exc
        try:
            return pickle.loads(raw)
        except Exception as exc:
            raise StoreError(f"operator of node {node!r} cannot be loaded from {self.url!r} "
                             f"({type(exc).__name__}: {exc}); is its module importable here?") from exc

    # -- lineage ------------------------------------------------------------------------------
    def shard_directory(self, node: str, strategy: str) -> str:
        return f"lineage/{node}/{strategy_dirname(strategy)}"

    def write_manifest(self, manifest: Manifest) -> None:
        self.location.write_bytes(json.dumps(manifest.to_dict()).encode(), "manifests", f"{manifest.node}.json")

    def read_manifest(self, node: str) -> Manifest:
        try:
            raw = self.location.read_bytes("manifests", f"{node}.json")
        except FileNotFoundError:
            raise StoreError(f"the manifest of node {node!r} is missing from store {self.url!r}; the store is "
                             "damaged (queries re-run the operator instead)") from None
        try:
            return Manifest.from_dict(json.loads(raw))
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise StoreError(f"the manifest of node {node!r} in store {self.url!r} is damaged ({exc}); queries "
                             "re-run the operator instead") from exc

    def shard_reader(self, node: str, strategy: str, record: ShardRecord, ndims: dict[int, int],
                     deadline: float | None = None) -> ShardReader:
        return ShardReader(self.location, self.shard_directory(node, strategy), record, ndims, deadline)

    def remove_uncommitted(self, node: str, manifest: Manifest | None) -> int:
        keep = {(strategy_dirname(s), r.name) for s, recs in (manifest.shards if manifest else {}).items()
                for r in recs if r.name}
        removed = 0
        for sdir in self.location.listdir("lineage", node):
            for name in self.location.listdir("lineage", node, sdir):
                if (sdir, name.split(".", 1)[0]) not in keep:
                    self.location.remove("lineage", node, sdir, name)
                    removed += 1
        return removed

    # -- query statistics (outside the store: readers never write to it) ------------------------
    def query_log_path(self) -> str:
        root = os.environ.get("SUBZERO_CACHE") or os.path.join(Path.home(), ".cache", "subzero")
        return os.path.join(root, "query-logs", xxhash.xxh3_64_hexdigest(self.url.encode()) + ".jsonl")

    def log_query(self, record: dict) -> None:
        """Append one executed query's per-step statistics (best effort)."""
        path = self.query_log_path()
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "a") as fh:
                fh.write(json.dumps(record) + "\n")
        except OSError:
            pass

    def query_log(self) -> list[dict]:
        """Logged queries of this store; a torn or foreign line is skipped."""
        path = self.query_log_path()
        out = []
        try:
            with open(path) as fh:
                for line in fh:
                    try:
                        item = json.loads(line)
                    except json.JSONDecodeError:
                        continue
                    if isinstance(item, dict):
                        out.append(item)
        except OSError:
            return []
        return out

    def __repr__(self) -> str:
        return f"FileStore({self.url!r})"

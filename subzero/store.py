"""A run's store: one directory holding arrays, lineage (LMDB) and the catalog.

Layout::

    STORE/catalog.json          workflow, shapes, strategies, statistics (written last)
    STORE/arrays/NODE.npy       every array, immutable once written
    STORE/operators/NODE.pkl    each node's operator, for mapping functions and re-runs
    STORE/lineage/              LMDB environment, one named database per (node, strategy)
    STORE/index/NODE~STRATEGY~SLOT.{dat,idx}   R-trees of FullMany/PayMany

This is the only module that imports lmdb.  A node's lineage is committed in one LMDB
transaction and its catalog entry is written after it (atomic rename), so after a crash
a node has all of its lineage or none.
"""

from __future__ import annotations

import json
import os
import pickle
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import lmdb
import numpy as np

from subzero.encoders.base import Batch
from subzero.encoders.codec import bytes_to_keys, make_keys
from subzero.errors import LookupTimeout, StoreError
from subzero.spatial_index import SpatialIndex, build_index

__all__ = ["RunStore", "FORMAT", "LookupTimeout"]

FORMAT = 1
_MAP_SIZE = 1 << 26  # initial address space; grown before a write that needs more
_ENVS: dict[str, lmdb.Environment] = {}
_ENVS_LOCK = threading.Lock()


def _forget_env(path: Path) -> None:
    """Close and drop a cached environment (its directory is being created anew)."""
    with _ENVS_LOCK:
        env = _ENVS.pop(str(path.resolve()), None)
    if env is not None:
        env.close()


def _env(path: Path, create: bool) -> lmdb.Environment:
    """One LMDB environment per path per process (LMDB forbids opening one twice)."""
    key = str(path.resolve())
    with _ENVS_LOCK:
        if key not in _ENVS:
            try:
                _ENVS[key] = lmdb.open(key, map_size=_MAP_SIZE, max_dbs=4096, subdir=True,
                                       create=create, sync=True, metasync=True, readahead=False)
            except lmdb.Error as exc:
                raise StoreError(f"cannot open the lineage database in {path} ({exc}); "
                                 "is this a subzero store? Re-run the workflow to rebuild it") from exc
        return _ENVS[key]


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


_CHUNK = 4096  # keys per getmulti / entries per scan batch between deadline checks


def _reserve(env: lmdb.Environment, nbytes: int) -> None:
    """Grow the memory map so that ``nbytes`` more fit (LMDB fails writes past it)."""
    info, stat = env.info(), env.stat()
    used = (info["last_pgno"] + 1) * stat["psize"]
    if used + nbytes + (16 << 20) > info["map_size"]:
        env.set_mapsize(max(2 * info["map_size"], 2 * (used + nbytes) + (16 << 20)))


class RunStore:
    """Files of one run.  Use `create` for a new run, `open` for an existing one."""

    def __init__(self, root: Path, catalog: dict[str, Any]):
        self.root = root
        self.catalog = catalog

    # -- lifecycle ------------------------------------------------------------------
    @classmethod
    def create(cls, root: str | os.PathLike, catalog: dict[str, Any]) -> "RunStore":
        """Start a new store; refuse a directory that already holds anything."""
        root = Path(root)
        if root.exists() and (not root.is_dir() or any(root.iterdir())):
            raise StoreError(
                f"store {str(root)!r} already exists and is not empty; runs are never "
                "overwritten: choose a new directory (or delete the old run yourself)")
        _forget_env(root / "lineage")  # a store deleted and made again at the same path
        for sub in ("arrays", "operators", "lineage", "index"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        store = cls(root, dict(catalog, format=FORMAT, nodes={}))
        store.save_catalog()
        return store

    @classmethod
    def open(cls, root: str | os.PathLike) -> "RunStore":
        """Open an existing store, checking that it is one."""
        root = Path(root)
        path = root / "catalog.json"
        if not root.is_dir():
            raise StoreError(f"store {str(root)!r} does not exist; pass the directory given as store= to wf.run")
        if not path.is_file():
            raise StoreError(f"{str(root)!r} is not a subzero store (no catalog.json)")
        try:
            catalog = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise StoreError(f"store {str(root)!r} has a corrupt catalog.json ({exc}); "
                             "re-run the workflow into a new store") from exc
        if not isinstance(catalog, dict) or catalog.get("format") != FORMAT or "workflow" not in catalog:
            raise StoreError(f"store {str(root)!r} has a catalog of an unknown format; "
                             f"this subzero reads format {FORMAT}")
        return cls(root, catalog)

    def save_catalog(self) -> None:
        _atomic_write(self.root / "catalog.json", json.dumps(self.catalog, indent=1, sort_keys=True).encode())

    # -- arrays and operators -----------------------------------------------------------
    def save_array(self, node: str, array: np.ndarray) -> None:
        path = self.root / "arrays" / f"{node}.npy"
        if path.exists():
            raise StoreError(f"array {node!r} is already stored in {self.root}; stored arrays are immutable")
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npy.tmp")
        with os.fdopen(fd, "wb") as fh:
            np.save(fh, np.asarray(array), allow_pickle=False)  # ascontiguousarray would make 0-d arrays 1-d
        os.replace(tmp, path)

    def array_path(self, node: str) -> str:
        return str(self.root / "arrays" / f"{node}.npy")

    def load_array(self, node: str, mmap: bool = True) -> np.ndarray:
        path = self.root / "arrays" / f"{node}.npy"
        try:
            return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
        except FileNotFoundError as exc:
            raise StoreError(f"array of node {node!r} is missing from store {str(self.root)!r}; "
                             "the run did not finish or the store was damaged") from exc
        except ValueError as exc:
            raise StoreError(f"array of node {node!r} in store {str(self.root)!r} is corrupt ({exc})") from exc

    def save_operator(self, node: str, payload: bytes) -> None:
        _atomic_write(self.root / "operators" / f"{node}.pkl", payload)

    def load_operator(self, node: str):
        path = self.root / "operators" / f"{node}.pkl"
        try:
            return pickle.loads(path.read_bytes())
        except FileNotFoundError as exc:
            raise StoreError(f"operator of node {node!r} is missing from store {str(self.root)!r}") from exc
        except Exception as exc:
            raise StoreError(f"operator of node {node!r} cannot be loaded from {str(self.root)!r} "
                             f"({type(exc).__name__}: {exc}); is its module importable here?") from exc

    # -- lineage ------------------------------------------------------------------------
    def write_lineage(self, node: str, batches: dict[str, Batch], ndims: dict[int, int]) -> dict[str, int]:
        """Write every strategy of one node: R-trees, then one LMDB transaction.

        Returns the bytes stored per strategy (entries plus index files).
        """
        sizes = {}
        for strategy, batch in batches.items():
            size = batch.nbytes
            for slot, (ids, mins, maxs) in batch.boxes.items():
                base = self._index_base(node, strategy, slot)
                build_index(base, ids, mins, maxs)
                size += sum(os.path.getsize(base + ext) for ext in (".dat", ".idx") if os.path.exists(base + ext))
            sizes[strategy] = size
        env = _env(self.root / "lineage", create=True)
        _reserve(env, sum(2 * b.nbytes + 64 * len(b.keys) for b in batches.values()))
        try:
            with env.begin(write=True) as txn:
                for strategy, batch in batches.items():
                    db = env.open_db(self._db_name(node, strategy), txn=txn)
                    txn.drop(db, delete=False)
                    with txn.cursor(db) as cur:
                        cur.putmulti(zip(batch.keys, batch.values), append=True)
        except lmdb.Error as exc:
            raise StoreError(f"writing lineage of node {node!r} to {self.root} failed ({exc}); "
                             "nothing of this node was committed") from exc
        return sizes

    def reader(self, node: str, strategy: str, ndims: dict[int, int], deadline: float | None = None) -> "LmdbReader":
        return LmdbReader(self, node, strategy, ndims, deadline)

    def log_query(self, record: dict) -> None:
        """Append one executed query's per-step statistics to ``query_log.jsonl``."""
        try:
            with open(self.root / "query_log.jsonl", "a") as fh:
                fh.write(json.dumps(record) + "\n")
        except OSError:
            pass  # statistics are best effort: a read-only store still answers queries

    def query_log(self) -> list[dict]:
        path = self.root / "query_log.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def _db_name(self, node: str, strategy: str) -> bytes:
        return f"{node}|{strategy}".encode()

    def _index_base(self, node: str, strategy: str, slot: int) -> str:
        return str(self.root / "index" / f"{node}~{strategy.replace('/', '-')}~{slot}")


class LmdbReader:
    """The `subzero.encoders.base.Reader` of one (node, strategy) database."""

    def __init__(self, store: RunStore, node: str, strategy: str, ndims: dict[int, int],
                 deadline: float | None = None):
        self._env = _env(store.root / "lineage", create=False)
        try:
            self._db = self._env.open_db(store._db_name(node, strategy), create=False)
        except lmdb.Error as exc:
            raise StoreError(f"lineage of node {node!r} ({strategy}) is missing from store "
                             f"{str(store.root)!r}; re-run the workflow to rebuild it") from exc
        self._store, self._node, self._strategy, self._ndims = store, node, strategy, ndims
        self._indexes: dict[int, SpatialIndex] = {}
        self._deadline = deadline

    def _check(self) -> None:
        if self._deadline is not None and time.perf_counter() > self._deadline:
            raise LookupTimeout()

    def get_many(self, keys: np.ndarray) -> tuple[np.ndarray, list[bytes]]:
        raw = np.asarray(keys, ">u8").tobytes()
        want = [raw[k : k + 8] for k in range(0, len(raw), 8)]
        found = []
        with self._env.begin(db=self._db, buffers=False) as txn, txn.cursor() as cur:
            for start in range(0, len(want), _CHUNK):
                self._check()
                found += cur.getmulti(want[start : start + _CHUNK])
        return bytes_to_keys([k for k, _ in found]), [v for _, v in found]

    def scan(self, kind: int) -> tuple[np.ndarray, list[bytes]]:
        start = make_keys(kind, 0, np.zeros(1, np.int64)).astype(">u8").tobytes()
        stop = make_keys(kind + 1, 0, np.zeros(1, np.int64)).astype(">u8").tobytes()
        keys, values = [], []
        self._check()
        with self._env.begin(db=self._db) as txn, txn.cursor() as cur:
            if cur.set_range(start):
                for k, v in cur:
                    if k >= stop:
                        break
                    keys.append(k)
                    values.append(v)
                    if len(keys) % _CHUNK == 0:
                        self._check()
        return bytes_to_keys(keys), values

    def intersect(self, slot: int, mins: np.ndarray, maxs: np.ndarray) -> np.ndarray:
        if slot not in self._indexes:
            self._indexes[slot] = SpatialIndex(self._store._index_base(self._node, self._strategy, slot),
                                               self._ndims[slot])
        return self._indexes[slot].intersect(mins, maxs)

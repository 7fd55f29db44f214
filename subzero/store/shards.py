"""Lineage shards: one LMDB file (plus R-trees) per tile (or per node), strategy and task attempt.

The only module that imports lmdb.  A task encodes its tile's lineage for one strategy
and writes it with `write_shard` under a name unique to the task attempt (on the local
executor, a node's tiles are written together as one shared shard, `write_tiles_shard`,
whose keys and R-tree boxes carry the tile: each tile reads only its own); the driver
commits the shards its stage reported (the node's manifest) and removes the rest.  A
shard is written once, then only read: readers open it read-only without a lock file
(``readonly=True, lock=False``), after checking the size and xxh3 checksum of each of its
files against the manifest, so a truncated or overwritten file is a `StoreError`, never
a crash or a wrong answer.  Open shards are kept in a small per-process cache.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from stat import S_ISDIR, S_ISREG
from typing import Protocol

import lmdb
import numpy as np
import xxhash

from subzero import config
from subzero.catalog import FileRecord, ShardRecord
from subzero.errors import LookupTimeout, StoreError
from subzero.store import cache as shard_cache
from subzero.spatial_index import INDEX_SUFFIXES, SpatialIndex, build_index
from subzero.store.failures import REBUILD_LINEAGE, reading
from subzero.store.location import Location

__all__ = ["Entries", "ShardSink", "write_shard", "write_tiles_shard", "ShardReader", "file_checksum", "close_all", "CACHE_SIZE"]

CACHE_SIZE = 64          # open shards kept per process
_CHUNK = 4096            # keys per getmulti / entries per scan batch between deadline checks
_PAGE = 4096


def file_checksum(path: str) -> str:
    """xxh3-64 of a file, hex."""
    h = xxhash.xxh3_64()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.hexdigest()


@contextlib.contextmanager
def _local_dir(location: Location, directory: str):
    """A local directory to write shard files in: the store's own, or a scratch one that is
    uploaded afterwards (object stores)."""
    if location.is_local:
        path = location.path(directory)
        os.makedirs(path, exist_ok=True)
        yield path, False
        return
    tmp = tempfile.mkdtemp(prefix="subzero-shard-")
    try:
        yield tmp, True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class Entries(Protocol):
    """One shard's contents as the encoders give them (`subzero.encoders.base.Batch`): opaque
    8-byte keys in ascending order with their values, and R-tree boxes per slot (``(ids,
    mins, maxs)``, closed).  The store knows no key layout: it keeps and returns bytes."""

    keys: list[bytes]
    values: list[bytes]
    boxes: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]

    @property
    def nbytes(self) -> int:
        """Bytes of the keys and values."""


@dataclass(frozen=True)
class ShardSink:
    """The task-side lineage sink of one node and strategy (picklable, shipped to tasks):
    each task attempt writes its tile's entries as one shard."""

    location: Location
    directory: str

    def write(self, stem: str, entries: Entries) -> tuple[tuple[FileRecord, ...], int]:
        """Write ``entries`` as shard ``stem``; returns its files and the bytes of its R-trees."""
        return write_shard(self.location, self.directory, stem, entries)


def write_shard(location: Location, directory: str, stem: str, batch: Entries) -> tuple[tuple[FileRecord, ...], int]:
    """Write one strategy's lineage of one tile as shard ``stem`` in ``directory``.

    Returns
    -------
    tuple
        The shard's files (size and checksum each) and the bytes of its R-trees.
    """
    with _local_dir(location, directory) as (local, remote):
        path = os.path.join(local, stem + ".mdb")
        _write_lmdb(path, batch)
        suffixes = [".mdb"]
        for slot, (ids, mins, maxs) in sorted(batch.boxes.items()):
            build_index(os.path.join(local, f"{stem}.{slot}"), ids, mins, maxs)
            suffixes += [f".{slot}{ext}" for ext in INDEX_SUFFIXES]
        files = []
        for suffix in suffixes:
            local_file = os.path.join(local, stem + suffix)
            files.append(FileRecord(suffix, os.path.getsize(local_file), file_checksum(local_file)))
            if remote:
                location.makedirs(directory)
                location.put_file(local_file, directory, stem + suffix)
    index_bytes = sum(f.size for f in files if f.suffix != ".mdb")
    return tuple(files), index_bytes


def write_tiles_shard(location: Location, directory: str, stem: str,
                      parts: list[tuple[int, Entries]]) -> tuple[tuple[FileRecord, ...], int]:
    """Write the lineage of several tiles of one node and strategy as one shard ``stem``.

    One LMDB file (and one R-tree per slot) in place of one per tile: each key is the tile's
    index (4 bytes, big-endian) followed by the entry's own key, and each R-tree box has the
    tile index as a last axis, so a `ShardReader` given a tile's record (its ``file_share``
    set) reads exactly that tile's entries and boxes, as from a shard of its own.

    Parameters
    ----------
    parts : list of (int, Entries)
        ``(tile index, its entries)``, in ascending tile order, each with keys.

    Returns
    -------
    tuple
        The shard's files (size and checksum each) and the bytes of its R-trees.
    """
    tiles = [t for t, _ in parts]
    if tiles != sorted(set(tiles)):
        raise StoreError(f"a shared shard's tiles must be distinct and ascending, got {tiles[:8]}... (this is a "
                         "subzero bug: please report it)")
    keys: list[bytes] = []
    for t, batch in parts:  # one prefix per tile, not a call per key (millions of keys for a FULL strategy)
        prefix = _prefix(t)
        keys.extend([prefix + k for k in batch.keys])
    values = [v for _, batch in parts for v in batch.values]
    nbytes = sum(batch.nbytes for _, batch in parts) + len(_prefix(0)) * len(keys)
    boxes: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for slot in sorted({slot for _, batch in parts for slot in batch.boxes}):
        got = [(t, batch.boxes[slot]) for t, batch in parts if slot in batch.boxes]
        boxes[slot] = (np.concatenate([ids for _, (ids, _, _) in got]),
                       np.concatenate([_with_tile(lo, t) for t, (_, lo, _) in got]),
                       np.concatenate([_with_tile(hi, t) for t, (_, _, hi) in got]))
    return write_shard(location, directory, stem, _Merged(keys, values, boxes, nbytes))


def _prefix(tile: int) -> bytes:
    """The key prefix of ``tile``'s entries in a shared shard."""
    return int(tile).to_bytes(4, "big")


def _with_tile(corners: np.ndarray, tile: int) -> np.ndarray:
    """Box corners with the tile index as a last axis (a shared shard's R-trees)."""
    corners = np.asarray(corners, np.float64)
    return np.hstack([corners, np.full((len(corners), 1), float(tile))])


@dataclass
class _Merged:
    """The entries of a shared shard (keys already prefixed by tile, in order)."""

    keys: list[bytes]
    values: list[bytes]
    boxes: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]
    #: bytes of the keys and values (the tiles' own, counted once, plus the prefixes)
    nbytes: int


def _write_lmdb(path: str, batch: Entries) -> None:
    need = 2 * (batch.nbytes + 32 * len(batch.keys)) + (1 << 20)
    map_size = -(-need // _PAGE) * _PAGE
    while True:
        if os.path.exists(path):
            os.unlink(path)  # a retried attempt of the same name starts afresh
        env = lmdb.open(path, subdir=False, lock=False, map_size=map_size, max_dbs=0, sync=False,
                        metasync=False, readahead=False, meminit=False)
        try:
            with env.begin(write=True) as txn, txn.cursor() as cur:
                cur.putmulti(zip(batch.keys, batch.values), append=True)
            return
        except lmdb.MapFullError:
            map_size *= 2
        finally:
            env.close()


def _as_keys(raw: list[bytes]) -> np.ndarray:
    """8-byte big-endian keys as uint64 (their order is LMDB's)."""
    return np.frombuffer(b"".join(raw), dtype=">u8").astype(np.uint64)


# -- reading ------------------------------------------------------------------------------------
class _Opened:
    """An open shard: its read-only LMDB environment and its R-trees, opened on demand."""

    def __init__(self, mdb_path: str, index_base: str):
        self.env = lmdb.open(mdb_path, subdir=False, readonly=True, lock=False, max_dbs=0, readahead=False)
        self.index_base = index_base
        self.indexes: dict[int, SpatialIndex] = {}

    def close(self) -> None:
        for index in self.indexes.values():
            index.close()
        self.env.close()


_CACHE: "OrderedDict[str, _Opened]" = OrderedDict()
_VERIFIED: set[tuple[str, str, int, float]] = set()
_LOCK = threading.Lock()
#: one lock per shard file being opened: LMDB refuses a second open of an environment in one
#: process, so threads that miss the cache at once wait for the first one's open
_OPENING: dict[str, threading.Lock] = {}


def close_all() -> None:
    """Close every cached shard (tests, and before a store is deleted)."""
    with _LOCK:
        while _CACHE:
            _CACHE.popitem()[1].close()
        _VERIFIED.clear()


atexit.register(close_all)  # LMDB environments and R-trees closed before interpreter teardown


def _verify(path: str, record: FileRecord, where: str) -> None:
    """Size, then checksum, of one file against the manifest (once per process and file version)."""
    with reading(where, path, REBUILD_LINEAGE):
        stat = os.stat(path)
        if S_ISDIR(stat.st_mode):  # a directory where the file belongs: worded by `reading`
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if not S_ISREG(stat.st_mode):  # a pipe, a device...
            raise OSError(errno.EINVAL, "not a regular file", path)
        key = (path, record.xxh3, stat.st_size, stat.st_mtime)
        if key in _VERIFIED:
            return
        if stat.st_size != record.size:
            raise StoreError(f"{where}: file {path!r} has {stat.st_size} bytes, the manifest says {record.size} "
                             "(truncated or overwritten); the store is damaged: re-run the workflow")
        checksum = file_checksum(path)
    if checksum != record.xxh3:
        raise StoreError(f"{where}: file {path!r} does not match its checksum (its bytes were changed); the "
                         "store is damaged: re-run the workflow")
    _VERIFIED.add(key)


def _cache_dir(location: Location) -> str:
    return os.path.join(config.cache_root(), "shards", xxhash.xxh3_64_hexdigest(location.url.encode()))


def _open(location: Location, directory: str, record: ShardRecord, where: str) -> _Opened:
    if location.is_local:
        local = location.path(directory)
    else:
        local = os.path.join(_cache_dir(location), directory)
    mdb = os.path.join(local, record.name + ".mdb")
    with _LOCK:
        opened = _CACHE.get(mdb)
        if opened is not None:
            _CACHE.move_to_end(mdb)
            return opened
        gate = _OPENING.setdefault(mdb, threading.Lock())
    with gate:  # one thread opens it; the others find it in the cache
        with _LOCK:
            opened = _CACHE.get(mdb)
            if opened is not None:
                _CACHE.move_to_end(mdb)
                return opened
        return _open_new(location, directory, record, where, local, mdb)


def _open_new(location: Location, directory: str, record: ShardRecord, where: str, local: str, mdb: str) -> _Opened:
    """Open (fetch first, when remote) and check the shard ``mdb`` not open yet; cache it."""
    for f in record.files:
        path = os.path.join(local, record.name + f.suffix)
        if not location.is_local and not (os.path.exists(path) and os.path.getsize(path) == f.size):
            os.makedirs(local, exist_ok=True)
            with reading(where, location.child_url(directory, record.name + f.suffix), REBUILD_LINEAGE):
                location.get_file(path + ".part", directory, record.name + f.suffix)
            os.replace(path + ".part", path)
            shard_cache.note_download(os.path.dirname(_cache_dir(location)), f.size)
        elif not location.is_local:
            shard_cache.touch(path)
        _verify(path, f, where)
    try:
        with reading(where, mdb, REBUILD_LINEAGE):
            opened = _Opened(mdb, os.path.join(local, record.name))
        pages = (opened.env.info()["last_pgno"] + 1) * opened.env.stat()["psize"]
    except lmdb.Error as exc:
        raise StoreError(f"{where}: shard {mdb!r} cannot be opened ({exc}); the store is damaged: re-run "
                         "the workflow") from exc
    if pages > os.path.getsize(mdb):  # a cut file whose manifest agrees: reading its lost pages is SIGBUS
        opened.close()
        raise StoreError(f"{where}: shard {mdb!r} has {os.path.getsize(mdb)} bytes but its database spans "
                         f"{pages} (truncated); the store is damaged: re-run the workflow")
    with _LOCK:
        _CACHE[mdb] = opened
        while len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)[1].close()
    return opened


class ShardReader:
    """The `subzero.encoders.base.Reader` of one committed shard.

    Parameters
    ----------
    location, directory
        The store and the shard's directory in it (``lineage/NODE/STRATEGY``).
    record : ShardRecord
        The shard as the manifest lists it (name, files, checksums).
    ndims : dict
        Number of axes per R-tree slot (the encoders number the slots), for the R-trees.
    deadline : float, optional
        ``time.perf_counter()`` past which lookups raise `LookupTimeout`.
    """

    def __init__(self, location: Location, directory: str, record: ShardRecord, ndims: dict[int, int],
                 deadline: float | None = None):
        self._where = f"lineage shard {directory}/{record.name}"
        self._opened = _open(location, directory, record, self._where)
        self._ndims, self._deadline = ndims, deadline
        #: a shared shard (several tiles): this tile's key prefix and R-tree axis; else none
        self._tile = None if record.file_share is None else record.tile
        self._prefix = b"" if self._tile is None else _prefix(self._tile)
        if self._tile is not None:
            self._where += f" (tile {self._tile})"

    def _check(self) -> None:
        if self._deadline is not None and time.perf_counter() > self._deadline:
            raise LookupTimeout()

    def get_many(self, keys: np.ndarray) -> tuple[np.ndarray, list[bytes]]:
        """The keys found (uint64) and their values."""
        raw = np.asarray(keys, ">u8").tobytes()
        head = self._prefix
        want = [head + raw[k : k + 8] for k in range(0, len(raw), 8)]
        found: list = []
        try:
            with self._opened.env.begin(buffers=False) as txn, txn.cursor() as cur:
                for start in range(0, len(want), _CHUNK):
                    self._check()
                    found += cur.getmulti(want[start : start + _CHUNK])
        except lmdb.Error as exc:
            raise StoreError(f"{self._where}: read failed ({exc}); the store is damaged") from exc
        cut = len(head)
        return _as_keys([k[cut:] for k, _ in found] if cut else [k for k, _ in found]), [v for _, v in found]

    def scan_ranges(self, starts: np.ndarray, stops: np.ndarray) -> tuple[np.ndarray, list[bytes]]:
        """Every entry whose key lies in one of the ranges ``[starts[k], stops[k])``."""
        lo = np.asarray(starts, ">u8").tobytes()
        hi = np.asarray(stops, ">u8").tobytes()
        head = self._prefix
        keys, values = [], []
        try:
            with self._opened.env.begin() as txn, txn.cursor() as cur:
                for k in range(0, len(lo), 8):
                    if k % (8 * _CHUNK) == 0:
                        self._check()
                    stop = head + hi[k:k + 8]
                    if cur.set_range(head + lo[k:k + 8]):
                        for key, v in cur:
                            if key >= stop:
                                break
                            keys.append(key)
                            values.append(v)
                            if len(keys) % _CHUNK == 0:
                                self._check()
        except lmdb.Error as exc:
            raise StoreError(f"{self._where}: read failed ({exc}); the store is damaged") from exc
        if head:
            keys = [key[len(head):] for key in keys]
        return _as_keys(keys), values

    def intersect(self, slot: int, mins: np.ndarray, maxs: np.ndarray) -> np.ndarray:
        """Ids whose box in R-tree ``slot`` meets any of the closed boxes ``[mins, maxs]``."""
        indexes = self._opened.indexes
        shared = self._tile is not None  # the tile is the R-tree's last axis
        if slot not in indexes:
            with _LOCK:
                if slot not in indexes:
                    indexes[slot] = SpatialIndex(f"{self._opened.index_base}.{slot}", self._ndims[slot] + shared)
        if shared:
            mins, maxs = _with_tile(mins, self._tile), _with_tile(maxs, self._tile)
        return indexes[slot].intersect(mins, maxs)

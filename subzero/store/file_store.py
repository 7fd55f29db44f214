"""The store over a directory or an fsspec URL.

Layout::

    STORE/.writer                       the writer lock (while a run writes the store)
    STORE/subzero-store.json            marks a directory subzero made (format, creation time, made by)
    STORE/catalog.json                  the run's catalog (`subzero.catalog.RunRecord`), atomic, checksummed
    STORE/arrays/NODE/                  Zarr v3 arrays, one chunk per tile (CRC32C per chunk)
    STORE/operators/NODE.pkl            each node's operator (cloudpickle, checksummed)
    STORE/manifests/NODE.json           committed shards per strategy and tile (checksummed)
    STORE/lineage/NODE/STRATEGY/tTILE-ATTEMPT.mdb (+ .SLOT.dat/.idx)   LMDB shards and R-trees

A node is committed when its manifest and then its catalog entry are written; shards a
manifest does not name (failed, retried or speculative attempts) are never read and
are removed when the node commits.  Every file is checked before it is used (see
`subzero.store.sealed`).  Readers never write to the store: query statistics go to
the user's cache directory (`subzero.store.cache`).  `FileStore` implements every role of
`subzero.store.roles`.  A run that was killed is continued with `FileStore.resume`
(which keeps the committed nodes and removes everything else) or replaced with
``create(..., overwrite=True)``.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import os
import pickle
import shutil
import stat
from pathlib import Path
from typing import Any, Callable

import xxhash

from subzero.catalog import FORMAT, READ_FORMATS, Manifest, RunRecord, ShardRecord
from subzero.errors import StoreError
from subzero.store.arrays import ArrayRef, forget_store
from subzero.store.failures import REBUILD, REBUILD_LINEAGE, reading
from subzero.store.location import Location, resolve
from subzero.store.lock import LOCK_NAME, Holder, WriterLock, _held, dead_temporaries, holder
from subzero.store.roles import RunWriter
from subzero.store.sealed import parse_json, seal_json, seal_pickle, unseal_json, unseal_pickle
from subzero.store.shards import ShardReader, close_all

__all__ = ["FileStore", "MARKER", "strategy_dirname"]

MARKER = "subzero-store.json"
_SUBDIRS = ("arrays", "operators", "manifests", "lineage")


def _entries(location: Location) -> list[str]:
    """What a store directory holds, leaving out writers' lock files in the making."""
    return [n for n in location.listdir() if not (n.startswith(LOCK_NAME + ".") and n.endswith(".tmp"))]


def _status(location: Location) -> str | None:
    """The status a store's catalog gives (unchecked: only to word an error), or None."""
    try:
        data = json.loads(location.read_bytes("catalog.json"))
    except (OSError, ValueError):
        return None
    return data.get("status") if isinstance(data, dict) and isinstance(data.get("status"), str) else None


def strategy_dirname(strategy: str) -> str:
    """A strategy's shard directory name (``/`` as ``-``: ``FullOne-backward``)."""
    return strategy.replace("/", "-")


class FileStore(RunWriter):
    """A run's store at a `Location`.  Use `create` to start a run, `open` to read one."""

    def __init__(self, location: Location, lock: WriterLock | None = None):
        self.location = location
        self._lock = lock

    @property
    def url(self) -> str:
        """Where the store lives (a directory or a URL)."""
        return self.location.url

    # -- lifecycle ----------------------------------------------------------------------------
    @classmethod
    def create(cls, store: str | os.PathLike | Location, record: RunRecord, overwrite: bool = False,
               made_by: str | None = None,
               later: "Callable[[Callable[[], None]], None] | None" = None) -> "FileStore":
        """Take a new store for a run and write its first catalog.

        Refuses a store path that holds anything, unless ``overwrite`` is set and the
        directory is a store subzero made that no live run is writing.  ``made_by`` is
        kept in the store's marker (`made_by` reads it back: ``subzero demo`` replaces
        only stores it made).  ``later``: given the first catalog's write instead of it being
        done now (a run written behind queues it first, after the store's directories: the store is
        ours once the writer lock and the marker are there, and a store killed before any catalog
        is one a run left as it began, which ``overwrite`` replaces); the marker is then not
        flushed to the disk either.
        """
        location = resolve(store)
        cls.check_new(location, overwrite)
        lock = WriterLock.acquire(location, take_stale=overwrite)
        try:
            if overwrite:
                cls._clear(location)
            elif [name for name in _entries(location) if name != LOCK_NAME]:  # filled since check_new
                raise StoreError(f"store {location.url!r} already exists and is not empty; runs are never "
                                 "overwritten silently: choose a new store, or pass overwrite=True (--overwrite)")
            out = cls._start(location, lock, record, made_by, later)
        except BaseException:
            lock.release()
            raise
        return out

    @classmethod
    def _start(cls, location: Location, lock: WriterLock, record: RunRecord, made_by: str | None,
               later: "Callable[[Callable[[], None]], None] | None" = None) -> "FileStore":
        made = {"format": FORMAT, "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                "made_by": made_by}
        # first: from now on the directory is ours
        location.write_bytes(json.dumps(made).encode(), MARKER, durable=later is None)
        out = cls(location, lock)
        if later is not None:  # its directories too come with the first write (tasks make their own)
            later(functools.partial(cls._lay_out, location))
            later(functools.partial(out.write_catalog, record))
        else:
            cls._lay_out(location)
            out.write_catalog(record)
        return out

    @staticmethod
    def _lay_out(location: Location) -> None:
        """A new store's directories; lock files a killed writer was making are removed."""
        for name in dead_temporaries(location):
            location.remove(name)
        for sub in _SUBDIRS:
            location.makedirs(sub)

    @staticmethod
    def _clear(location: Location) -> None:
        """Remove everything but the writer lock (its holder is this process) and the marker
        (rewritten next): the catalog first, so a run killed while clearing leaves a store
        that is still recognisably subzero's and holds no run to read."""
        forget_store(location.url)
        close_all()
        location.remove("catalog.json")
        for name in _entries(location) + dead_temporaries(location):
            if name not in (LOCK_NAME, MARKER):
                location.remove(name)
        if location.isdir(MARKER):  # a directory where the marker belongs (damage): the marker is rewritten next
            location.remove(MARKER)

    @classmethod
    def resume(cls, store: str | os.PathLike | Location, record: RunRecord,
               made_by: str | None = None) -> "tuple[FileStore, RunRecord | None]":
        """Take a store back to continue the run a crash or a failure left in it.

        Returns the store (its writer lock held) and the catalog as stored, or ``None``
        when there was nothing to continue (no store yet, an empty directory, or a store
        killed before its first catalog): then the store was started afresh with
        ``record``, as `create` does.  The lock of a run that no longer runs is taken
        over; a live run's is not.  Nothing is removed here: `remove_uncommitted_nodes`
        does that once the caller has checked that the run is the same.
        """
        location = resolve(store)
        if not cls.check_resumable(location):
            return cls.create(location, record, made_by=made_by), None
        lock = WriterLock.acquire(location, take_stale=True)
        try:
            if not location.exists("catalog.json"):  # killed before it wrote anything to keep
                cls._clear(location)
                return cls._start(location, lock, record, made_by), None
            out = cls(location, lock)
            try:
                stored = out.read_catalog()
            except StoreError as exc:
                raise StoreError(f"cannot resume the run in {location.url!r}: {exc}; replace it with "
                                 "overwrite=True (--overwrite)") from None
        except BaseException:
            lock.release()
            raise
        return out, stored

    @classmethod
    def check_resumable(cls, store: str | os.PathLike | Location) -> bool:
        """Refuse a store path a resumed run cannot take (a regular file, a directory subzero
        did not make, a store a live run is writing); False when there is nothing to resume
        (no directory, or an empty one)."""
        location = resolve(store)
        cls._check_path(location)
        names = [n for n in _entries(location) if n != LOCK_NAME] if location.isdir() else []
        if not names and not location.exists(LOCK_NAME):
            return False
        if names and MARKER not in names and "catalog.json" not in names:
            raise StoreError(f"store {location.url!r} is not a store subzero made (no {MARKER} or catalog.json): "
                             "there is no run to resume; choose another directory")
        current = holder(location)
        if current is not None and current.alive is not False:
            raise _held(location, current)
        return True

    @staticmethod
    def made_by(store: str | os.PathLike | Location) -> str | None:
        """Who made a store (the ``made_by`` given to `create`), or None when unknown."""
        location = resolve(store)
        try:
            with reading("the store's marker", location.child_url(MARKER)):
                info = json.loads(location.read_bytes(MARKER))
        except (StoreError, ValueError):  # no marker, or a damaged one: the maker is unknown
            return None
        return info.get("made_by") if isinstance(info, dict) and isinstance(info.get("made_by"), str) else None

    @staticmethod
    def _check_path(location: Location) -> None:
        if location.is_local:
            path = Path(location.root)
            if path.exists() and not path.is_dir():
                raise StoreError(f"store {location.url!r} is a regular file, not a directory; choose a directory "
                                 "path for the run")

    @classmethod
    def check_new(cls, store: str | os.PathLike | Location, overwrite: bool = False, create: bool = True) -> None:
        """Refuse a store path a new run cannot take: a regular file, a directory that is not
        writable, one that holds anything (unless ``overwrite`` of a store subzero made
        that no live run writes), or one a run is writing.  ``create=False`` checks
        without making the directory (the command line checks before it reads inputs)."""
        location = resolve(store)
        if location.is_local:  # one look at the path (a run's fixed cost)
            path = Path(location.root)
            try:
                mode: int | None = os.stat(path).st_mode
            except (FileNotFoundError, NotADirectoryError):
                mode = None
            if mode is not None and not stat.S_ISDIR(mode):
                cls._check_path(location)  # a regular file: said as such
            exists = mode is not None
            if exists and not os.access(path, os.W_OK):
                raise StoreError(f"store {location.url!r} is not writable; choose a directory you can write")
            if not exists and not create:
                return
            if not exists:
                try:
                    path.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise StoreError(f"cannot create store directory {location.url!r} ({exc.strerror}); check "
                                     "the path and its permissions") from exc
            names = _entries(location) if exists else []
            if not names:
                return
        else:
            names = _entries(location) if location.isdir() else []
            if not names:
                if create:
                    location.makedirs()
                return
        ours = MARKER in names or "catalog.json" in names or names == [LOCK_NAME]  # a run killed as it began
        if overwrite and ours:
            current = holder(location)
            if current is not None and current.alive is not False:
                raise _held(location, current)
            return
        if overwrite:
            raise StoreError(f"store {location.url!r} is not empty and was not made by subzero; --overwrite only "
                             "replaces stores subzero made: choose another directory")
        if LOCK_NAME in names:
            current = holder(location)
            if current is not None:
                raise _held(location, current)
        status = _status(location) if ours else None
        if status is not None and status != "done":
            raise StoreError(f"store {location.url!r} holds a run that did not finish (status {status!r}); continue "
                             "it with resume=True (--resume: the same workflow, inputs and options), or replace "
                             "it with overwrite=True (--overwrite: after changing any of them)")
        raise StoreError(f"store {location.url!r} already exists and is not empty; runs are never overwritten "
                         "silently: choose a new store, or pass overwrite=True (--overwrite) to replace a store "
                         "subzero made")

    @classmethod
    def open(cls, store: str | os.PathLike | Location) -> "FileStore":
        """Open an existing store for reading, checking that it is one."""
        location = resolve(store)
        if location.is_local:
            path = Path(location.root)
            if path.exists() and not path.is_dir():
                raise StoreError(f"store {location.url!r} is a regular file, not a subzero store directory")
        if not location.isdir():
            raise StoreError(f"store {location.url!r} does not exist; pass the store given to wf.run (--store)")
        if not location.exists("catalog.json"):
            if location.exists(MARKER):  # subzero made it: a live run has yet to write its first catalog, or it was lost
                current = holder(location)
                if current is not None and current.alive:
                    raise StoreError(f"store {location.url!r} is still being written by {current.describe()} and "
                                     "has no catalog yet: wait for the run to commit its first node and try again")
                raise StoreError(f"store {location.url!r} has lost its catalog.json; {REBUILD}")
            raise StoreError(f"{location.url!r} is not a subzero store (no catalog.json)")
        return cls(location)

    def close(self) -> None:
        """Give up the writer lock (writers)."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    # -- catalog ------------------------------------------------------------------------------
    def read_catalog(self) -> RunRecord:
        """The run's catalog, checked (format, seal); a `StoreError` names what is wrong."""
        with reading("the catalog", self.location.child_url("catalog.json"), REBUILD):
            raw = self.location.read_bytes("catalog.json")
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise StoreError(f"store {self.url!r} has a corrupt catalog.json ({exc}); re-run the workflow into "
                             "a new store") from exc
        where = f"store {self.url!r}"
        RunRecord.check_format(data, where)
        try:
            data = unseal_json(data, "its catalog.json")
        except StoreError as exc:
            raise StoreError(f"store {self.url!r} has a damaged catalog.json ({exc}); re-run the workflow into a "
                             "new store") from None
        return RunRecord.from_dict(data, where=where)

    def write_catalog(self, record: RunRecord) -> None:
        """Replace the catalog atomically, sealed (a writer that lost its lock raises instead)."""
        if self._lock is not None:
            self._lock.check()
        self.location.write_bytes(seal_json(record.to_dict()), "catalog.json")

    # -- arrays and operators -----------------------------------------------------------------
    def array(self, node: str, meta_xxh3: str | None = None) -> ArrayRef:
        """The `ArrayRef` of ``arrays/NODE`` (checked against ``meta_xxh3`` when given)."""
        return ArrayRef(self.location, f"arrays/{node}", meta_xxh3)

    def save_operator(self, node: str, payload: bytes) -> None:
        """Write ``operators/NODE.pkl`` (a checksummed frame: like a chunk, not flushed to the disk
        one by one; only the catalog is, and a torn frame after a power loss is told by its checksum)."""
        self.location.write_bytes(seal_pickle(payload), "operators", f"{node}.pkl", durable=False)

    def load_operator(self, node: str) -> Any:
        """Unpickle a node's operator; a `StoreError` when damaged or not importable here."""
        with reading(f"the operator of node {node!r}", self.location.child_url("operators", f"{node}.pkl"), REBUILD):
            raw = self.location.read_bytes("operators", f"{node}.pkl")
        raw = unseal_pickle(raw, f"the operator of node {node!r} in store {self.url!r}")
        try:
            op = pickle.loads(raw)
        except Exception as exc:
            raise StoreError(f"operator of node {node!r} cannot be loaded from {self.url!r} "
                             f"({type(exc).__name__}: {exc}); is its module importable here?") from exc
        restored = getattr(op, "restored", None)  # an operator saved without the output it holds reads it here
        return restored(lambda: self.array(node).read()) if restored is not None else op

    # -- lineage ------------------------------------------------------------------------------
    def shard_directory(self, node: str, strategy: str) -> str:
        """``lineage/NODE/STRATEGY``, where a node's shards of one strategy live."""
        return f"lineage/{node}/{strategy_dirname(strategy)}"

    def write_manifest(self, manifest: Manifest) -> None:
        """Write ``manifests/NODE.json`` atomically, sealed (a writer that lost its lock raises instead;
        not flushed one by one: a torn one after a power loss is told by its seal)."""
        if self._lock is not None:
            self._lock.check()
        self.location.write_bytes(seal_json(manifest.to_dict()), "manifests", f"{manifest.node}.json", durable=False)

    def read_manifest(self, node: str) -> Manifest:
        """A node's manifest, checked; a `StoreError` when missing or damaged."""
        where = f"the manifest of node {node!r} in store {self.url!r}"
        with reading(f"the manifest of node {node!r}", self.location.child_url("manifests", f"{node}.json"),
                     REBUILD_LINEAGE):
            raw = self.location.read_bytes("manifests", f"{node}.json")
        try:
            data = parse_json(raw, where)
            if isinstance(data, dict) and data.get("format") not in READ_FORMATS:
                return Manifest.from_dict(data)  # raises: another format
            manifest = Manifest.from_dict(unseal_json(data, where))
        except StoreError as exc:
            if "re-run the workflow" in str(exc):
                raise
            raise StoreError(f"{exc}; queries re-run the operator instead") from None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise StoreError(f"{where} is damaged ({exc}); queries re-run the operator instead") from exc
        if manifest.node != node:
            raise StoreError(f"{where} names node {manifest.node!r}; the store is damaged (queries re-run the "
                             "operator instead)")
        return manifest

    def shard_reader(self, node: str, strategy: str, record: ShardRecord, ndims: dict[int, int],
                     deadline: float | None = None) -> ShardReader:
        """A `ShardReader` over one committed shard (checked against ``record`` first)."""
        return ShardReader(self.location, self.shard_directory(node, strategy), record, ndims, deadline)

    def array_meta_checksum(self, node: str) -> str:
        """The xxh3 of ``arrays/NODE/zarr.json`` as written (the catalog keeps it)."""
        return xxhash.xxh3_64_hexdigest(self.location.read_bytes("arrays", node, "zarr.json"))

    def adopt_node(self, src: Any, name: str, kind: str, with_array: bool = True) -> None:
        """Take node ``name``'s committed files (its array unless not ``with_array``; an
        operator's pickle, manifest and shards) from the `FileStore` ``src``: hard links
        where both stores are local directories (files are never changed in place), else
        copies."""
        parts = [("arrays", name)] if with_array else []
        if kind == "operator":
            parts += [("operators", f"{name}.pkl"), ("manifests", f"{name}.json"), ("lineage", name)]
        for part in parts:
            _share(src.location, self.location, *part)

    def disk_bytes(self, node: str | None = None) -> int | None:
        """Bytes of the store's files (or of node ``node``'s array) on disk; None when unknown."""
        parts = ("arrays", node) if node is not None else ()
        if self.location.is_local:
            total = 0
            stack = [self.location.path(*parts)]
            while stack:
                try:
                    entries = list(os.scandir(stack.pop()))
                except OSError:
                    continue
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif not entry.name.endswith(".tmp"):
                        total += entry.stat(follow_symlinks=False).st_size
            return total
        try:
            return int(self.location.fs.du(self.location.path(*parts), total=True))
        except (OSError, ValueError, NotImplementedError):
            return None

    def writer(self) -> Holder | None:
        """Who holds the writer lock (a live or a dead run), or None."""
        return holder(self.location)

    def remove_uncommitted_nodes(self, keep: set[str], keep_arrays: set[str] = frozenset()) -> int:
        """Before a resumed run continues: remove what the killed run left of nodes not in
        ``keep`` (their arrays, unless in ``keep_arrays``; operators; manifests; shards), the
        shards of kept nodes their manifests do not name, and every temporary file.
        Returns how many entries were removed."""
        removed = 0
        arrays = set(keep) | set(keep_arrays)
        for sub, keeps, strip in (("arrays", arrays, ""), ("operators", arrays, ".pkl"),
                                  ("manifests", keep, ".json"), ("lineage", keep, "")):
            for name in self.location.listdir(sub):
                stem = name[: -len(strip)] if strip and name.endswith(strip) else name
                if stem not in keeps or (strip and not name.endswith(strip)):
                    self.location.remove(sub, name)
                    removed += 1
        for node in keep:
            if self.location.exists("manifests", f"{node}.json"):
                try:
                    manifest = self.read_manifest(node)
                except StoreError:  # damaged: its shards cannot be told apart, so none is removed
                    continue
                removed += self.remove_uncommitted(node, manifest)
        try:
            leftovers = [p for p in self.location.fs.find(self.location.root) if p.endswith(".tmp")]
        except FileNotFoundError:
            leftovers = []
        lock_temp = self.location.path(LOCK_NAME) + "."
        for name in dead_temporaries(self.location):  # a lock file a killed writer was making
            self.location.remove(name)
            removed += 1
        for path in leftovers:  # a killed writer's half-written files (a racing writer's lock file is its own)
            if not path.startswith(lock_temp):
                try:
                    self.location.fs.rm(path)
                    removed += 1
                except FileNotFoundError:
                    pass
        forget_store(self.url)
        close_all()
        return removed

    def remove_uncommitted(self, node: str, manifest: Manifest | None) -> int:
        """Delete the shard files of ``node`` its manifest does not name; returns how many."""
        keep = {(strategy_dirname(s), r.name) for s, recs in (manifest.shards if manifest else {}).items()
                for r in recs if r.name}
        removed = 0
        for sdir in self.location.listdir("lineage", node):
            for name in self.location.listdir("lineage", node, sdir):
                if (sdir, name.split(".", 1)[0]) not in keep:
                    self.location.remove("lineage", node, sdir, name)
                    removed += 1
        return removed

    def __repr__(self) -> str:
        return f"FileStore({self.url!r})"


def _share(a: Location, b: Location, *parts: str) -> None:
    """Link (or copy) every file under ``parts`` of ``a`` into the same place in ``b``."""
    if not a.exists(*parts):
        return
    if a.isdir(*parts):
        b.makedirs(*parts)
        for name in a.listdir(*parts):
            if not name.endswith(".tmp"):
                _share(a, b, *parts, name)
    elif a.is_local and b.is_local:
        _link(a.path(*parts), b.path(*parts))
    else:
        b.write_bytes(a.read_bytes(*parts), *parts, durable=False)


def _link(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except FileExistsError:
        os.unlink(dst)
        _link(src, dst)
    except OSError:  # another file system, or links not allowed: copy
        shutil.copy2(src, dst)

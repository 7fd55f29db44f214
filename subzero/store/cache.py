"""The user's cache of a store (``~/.cache/subzero``, the ``cache`` setting): readers' local
copies of remote shards under a size bound, and the log of the queries run on a store
(readers never write into a store); the log is written in batches, off the queries' path.

Queries over a store on object storage download the shard files they open and keep them,
verified, for the next query.  `note_download` counts what arrives; every `TRIM_EVERY_BYTES`
(or `TRIM_EVERY_FILES` downloads) `trim` removes the least recently used files until the
cache holds at most the ``cache_max_bytes`` setting (`subzero.config`).  A removed file is downloaded again when a query needs it.
"""

from __future__ import annotations

import atexit
import json
import os
import threading

import xxhash

from subzero import config

__all__ = ["note_download", "trim", "touch", "query_log_path", "log_query", "query_log"]

TRIM_EVERY_FILES = 64
_lock = threading.Lock()
_pending = {"files": 0, "bytes": 0}


def touch(path: str) -> None:
    """Mark a cached file as used now (its place in the least-recently-used order)."""
    try:
        os.utime(path)
    except OSError:
        pass


def note_download(root: str, nbytes: int) -> None:
    """Count a file downloaded into the cache under ``root``; trim the cache now and then."""
    limit = config.get("cache_max_bytes")
    with _lock:
        _pending["files"] += 1
        _pending["bytes"] += int(nbytes)
        due = _pending["files"] >= TRIM_EVERY_FILES or _pending["bytes"] >= max(limit // 16, 1)
        if due:
            _pending["files"] = _pending["bytes"] = 0
    if due:
        trim(root, limit)


def trim(root: str, max_bytes: int) -> int:
    """Remove the least recently used files under ``root`` until at most ``max_bytes`` remain;
    returns the bytes removed.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> for i in range(3):
    ...     _ = (d / f"f{i}").write_bytes(b"x" * 10); os.utime(d / f"f{i}", (i, i))
    >>> trim(str(d), 15), sorted(p.name for p in d.iterdir())
    (20, ['f2'])
    """
    files = []
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            try:
                stat = os.stat(path)
            except OSError:
                continue
            files.append((stat.st_mtime, stat.st_size, path))
    total = sum(size for _, size, _ in files)
    removed = 0
    for _, size, path in sorted(files):
        if total <= max_bytes:
            break
        try:
            os.unlink(path)
        except OSError:
            continue
        total -= size
        removed += size
    return removed


def query_log_path(url: str) -> str:
    """The file logging the queries run on the store at ``url`` from this machine."""
    return os.path.join(config.cache_root(), "query-logs", xxhash.xxh3_64_hexdigest(url.encode()) + ".jsonl")


#: a logged query reaches its file within this many seconds (written by a timer thread, off the query's path)
LOG_FLUSH_SECONDS = 1.0
#: or at once when this many queries wait (the memory they hold stays small)
LOG_FLUSH_RECORDS = 256


class _QueryLogWriter:
    """The queries logged in this process, written in batches: a query only hands its record over;
    a timer thread `LOG_FLUSH_SECONDS` later (a thread at once when `LOG_FLUSH_RECORDS` wait)
    encodes every waiting record and appends them to their files, one open and one write per
    file.  Reading a log (`query_log`) and the interpreter's exit write what waits first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the waiting records
        self._writing = threading.Lock()  # held while a batch is written: a reader's flush waits for it
        self._waiting: dict[str, list[dict]] = {}
        self._count = 0
        self._timer: threading.Timer | None = None

    def add(self, path: str, record: dict) -> None:
        with self._lock:
            self._waiting.setdefault(path, []).append(record)
            self._count += 1
            full = self._count >= LOG_FLUSH_RECORDS
            if not full and self._timer is None:
                self._timer = threading.Timer(LOG_FLUSH_SECONDS, self.flush)
                self._timer.daemon = True
                self._timer.start()
        if full:  # written now, still off the query's path
            threading.Thread(target=self.flush, name="subzero-query-log", daemon=True).start()

    def flush(self, path: str | None = None) -> None:
        """Write what waits (for ``path`` only, when given); best effort, as every log write."""
        with self._writing:
            self._write(path)

    def _write(self, path: str | None) -> None:
        with self._lock:
            if path is None:
                batch, self._waiting, self._count = self._waiting, {}, 0
            else:
                batch = {path: self._waiting.pop(path)} if path in self._waiting else {}
                self._count -= len(batch.get(path, ()))
            if not self._waiting and self._timer is not None:  # nothing left for the timer
                if self._timer is not threading.current_thread():
                    self._timer.cancel()
                self._timer = None
        for where, records in batch.items():
            try:
                os.makedirs(os.path.dirname(where), exist_ok=True)
                with open(where, "a") as fh:
                    fh.write("".join(json.dumps(r) + "\n" for r in records))
            except OSError:
                pass

    def forked(self) -> None:
        """In a forked child: the parent writes what waited; the child starts with nothing waiting
        and no timer (its thread was not copied)."""
        self._lock, self._writing = threading.Lock(), threading.Lock()
        self._waiting, self._count, self._timer = {}, 0, None


_log_writer = _QueryLogWriter()
atexit.register(_log_writer.flush)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_log_writer.forked)


def log_query(url: str, record: dict) -> None:
    """Append one executed query's per-step statistics (best effort; written within
    `LOG_FLUSH_SECONDS`, before `query_log` reads the log, and at the interpreter's exit).
    ``record`` is the caller's to give away: it is encoded later, as it is then."""
    _log_writer.add(query_log_path(url), record)


def query_log(url: str) -> list[dict]:
    """The logged queries of a store; a torn or foreign line is skipped."""
    _log_writer.flush(query_log_path(url))
    out = []
    try:
        with open(query_log_path(url)) as fh:
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

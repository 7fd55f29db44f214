"""The user's cache of a store (``~/.cache/subzero``, the ``cache`` setting): readers' local
copies of remote shards under a size bound, and the log of the queries run on a store
(readers never write into a store).

Queries over a store on object storage download the shard files they open and keep them,
verified, for the next query.  `note_download` counts what arrives; every `TRIM_EVERY_BYTES`
(or `TRIM_EVERY_FILES` downloads) `trim` removes the least recently used files until the
cache holds at most the ``cache_max_bytes`` setting (`subzero.config`).  A removed file is downloaded again when a query needs it.
"""

from __future__ import annotations

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


def log_query(url: str, record: dict) -> None:
    """Append one executed query's per-step statistics (best effort)."""
    path = query_log_path(url)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a") as fh:
            fh.write(json.dumps(record) + "\n")
    except OSError:
        pass


def query_log(url: str) -> list[dict]:
    """The logged queries of a store; a torn or foreign line is skipped."""
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

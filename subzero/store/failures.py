"""OS-level failures on store files, worded as `StoreError`s: the one place that does it.

A file of a store can be missing, be a directory where a file belongs, sit below a file
where a directory belongs, be unreadable (permissions), or fail to read at all (an I/O
error, a file system that went away).  Every reader of a store file (catalog, marker,
manifests, shards, R-trees, array metadata and chunks, operators, the writer lock) reads
it inside `reading`, which turns the `OSError` into a `StoreError` naming the file, what
went wrong and the fix.  A file cut short or changed is caught by its checksum or its
recorded size (`subzero.store.sealed`, `subzero.store.shards`), not here.

Because every one of those is a `StoreError`, the query fallback (`subzero.query.step`:
re-run the operator when stored lineage cannot be read, refuse when its strategy was
forced) covers every way a lineage file can be absent, not only a deleted one.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

from subzero.errors import StoreError

__all__ = ["reading", "store_file_error", "why", "REBUILD", "REBUILD_ARRAY", "REBUILD_LINEAGE"]

_REPLACE = "re-run the workflow into a new store (or replace this one with --overwrite)"
#: what damage to what a run computed (catalog, operators, arrays) means, and the fix
REBUILD = f"the store is damaged: {_REPLACE}"
#: ... of an array's metadata, which a run that failed before the array committed never wrote
REBUILD_ARRAY = f"the run did not commit the array or the store is damaged: {_REPLACE}"
#: ... of stored lineage, which is a cache
REBUILD_LINEAGE = ("the store is damaged: queries not forcing its strategy re-run the operator instead; re-run the "
                   "workflow to rebuild it")


def why(exc: OSError) -> str:
    """What an OS-level failure says about a store file, in words.

    Examples
    --------
    >>> why(IsADirectoryError(21, "Is a directory"))
    'is a directory where a file belongs'
    """
    if isinstance(exc, FileNotFoundError):
        return "is missing"
    if isinstance(exc, IsADirectoryError):
        return "is a directory where a file belongs"
    if isinstance(exc, NotADirectoryError):
        return "cannot be reached: a file stands where a directory belongs on its path"
    if isinstance(exc, PermissionError):
        return "cannot be read (permission denied)"
    return f"cannot be read ({exc.strerror or type(exc).__name__})"


def store_file_error(exc: OSError, what: str, path: str, fix: str = REBUILD) -> StoreError:
    """The `StoreError` for ``exc`` raised while reading ``what`` at ``path``.

    Parameters
    ----------
    exc : OSError
        The failure.
    what : str
        The file in the store's words (``"the manifest of node 'blur'"``).
    path : str
        Where it is (a path or URL), named in the message.
    fix : str
        What the failure means and what to do (`REBUILD`, `REBUILD_ARRAY`, `REBUILD_LINEAGE`); a
        permission failure says to grant access instead.

    Examples
    --------
    >>> str(store_file_error(FileNotFoundError(2, "No such file"), "the catalog", "/runs/a/catalog.json"))[:48]
    'the catalog is missing (/runs/a/catalog.json); t'
    """
    if isinstance(exc, PermissionError):
        return StoreError(f"{what} {why(exc)} ({path}); give this user read access to the store")
    return StoreError(f"{what} {why(exc)} ({path}); {fix}")


@contextlib.contextmanager
def reading(what: str, path: str | os.PathLike, fix: str = REBUILD) -> Iterator[None]:
    """Read a store file inside this block: an `OSError` leaves it as a `StoreError`
    (`store_file_error`); a `StoreError` raised inside passes unchanged.

    Examples
    --------
    >>> with reading("the catalog", "/nonexistent/catalog.json"):   # doctest: +SKIP
    ...     open("/nonexistent/catalog.json").read()
    Traceback (most recent call last):
    StoreError: the catalog is missing (/nonexistent/catalog.json); the store is damaged: ...
    """
    try:
        yield
    except StoreError:
        raise
    except OSError as exc:
        raise store_file_error(exc, what, os.fspath(path), fix) from exc

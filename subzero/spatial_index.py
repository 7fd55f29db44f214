"""R-tree indexes on bounding boxes of stored cell sets (the only module importing rtree).

Built once per shard and key side by bulk loading numpy arrays, stored beside the
shard's LMDB file, queried with many boxes in one vectorized call.  libspatialindex
opens its files for writing and rewrites a header page when an index is closed, so a
reader opens a private copy and the store's files are never written after their
task made them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref

from typing import TYPE_CHECKING, Any

import numpy as np

from subzero.errors import StoreError

if TYPE_CHECKING:
    from rtree import index as rtree_index

__all__ = ["build_index", "SpatialIndex", "INDEX_SUFFIXES"]

INDEX_SUFFIXES = (".dat", ".idx")


def _rtree() -> Any:
    """rtree's ``index`` module, imported when an index is first built or opened (a query that
    opens no shard, or a command that queries nothing, does not load libspatialindex)."""
    from rtree import index

    return index


def _props(ndim: int, overwrite: bool = False) -> "rtree_index.Property":
    props = _rtree().Property()
    props.dimension = max(ndim, 2)
    props.overwrite = overwrite
    return props


def _pad(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    return np.hstack([a, np.zeros((len(a), 1))]) if a.shape[1] == 1 else a


def build_index(base: str, ids: np.ndarray, mins: np.ndarray, maxs: np.ndarray) -> None:
    """Bulk-load an R-tree at ``base`` (+ .dat/.idx) over closed boxes ``[mins, maxs]``."""
    for ext in INDEX_SUFFIXES:  # libspatialindex appends to existing files: start afresh
        if os.path.exists(base + ext):
            os.unlink(base + ext)
    props = _props(mins.shape[1], overwrite=True)
    if len(ids) == 0:  # an empty index still exists, so a missing file means a damaged store
        _rtree().Index(base, properties=props, interleaved=True).close()
        return
    idx = _rtree().Index(base, (np.asarray(ids, np.int64), _pad(mins), _pad(maxs)),
                            properties=props, interleaved=True)
    idx.close()


class SpatialIndex:
    """A read handle on an index written by `build_index`, through a private copy of its files.

    Parameters
    ----------
    base : str
        The index's path without the ``.dat``/``.idx`` suffix.
    ndim : int
        Number of axes of the indexed boxes.
    """

    def __init__(self, base: str, ndim: int):
        self._idx = None
        self._tmp = None
        self._finalizer = None
        if not all(os.path.exists(base + ext) for ext in INDEX_SUFFIXES):
            raise StoreError(f"R-tree index {base}.dat is missing; the store is damaged "
                             "(queries re-run the operator instead)")
        self._tmp = tempfile.mkdtemp(prefix="subzero-rtree-", dir=_scratch())
        copy = os.path.join(self._tmp, "index")
        rtree = _rtree()
        try:
            for ext in INDEX_SUFFIXES:
                shutil.copyfile(base + ext, copy + ext)
            self._idx = rtree.Index(copy, properties=_props(ndim), interleaved=True)
        except Exception as exc:  # libspatialindex raises its own RTreeError
            self.close()
            raise StoreError(f"R-tree index {base}.dat is unreadable ({type(exc).__name__}: {exc}); "
                             "the lineage can be rebuilt by re-running the workflow") from exc
        # Closed deterministically: by `close`, when the handle is collected, or at interpreter
        # exit (weakref.finalize runs from atexit, before modules are torn down). Left to
        # rtree's own __del__ during shutdown's garbage collection, libspatialindex can crash
        # the process (SIGSEGV in Index.__del__) after every test passed.
        self._finalizer = weakref.finalize(self, _release, self._idx, self._tmp)

    def intersect(self, mins: np.ndarray, maxs: np.ndarray) -> np.ndarray:
        """Ids of boxes meeting any of the closed query boxes ``[mins, maxs]``."""
        if self._idx is None or len(mins) == 0:
            return np.empty(0, np.int64)
        try:
            ids, _ = self._idx.intersection_v(_pad(mins), _pad(maxs))
        except Exception as exc:
            raise StoreError(f"R-tree query failed ({type(exc).__name__}: {exc}); the index is damaged") from exc
        return np.asarray(ids, np.int64)

    def close(self) -> None:
        """Close the index and remove its private copy (idempotent)."""
        if self._finalizer is not None:
            self._finalizer()  # runs at most once
            self._finalizer = None
        else:
            _release(self._idx, self._tmp)
        self._idx = None
        self._tmp = None


def _release(idx, tmp: str | None) -> None:
    """Close an rtree handle and remove its scratch directory; safe to call on closed ones."""
    try:
        if idx is not None and idx.handle is not None:
            idx.close()
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _scratch() -> str | None:
    """A memory-backed scratch directory when the machine has one."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None

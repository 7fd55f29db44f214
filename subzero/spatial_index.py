"""R-tree indexes on bounding boxes of stored cell sets (the only module importing rtree).

Built once per (node, strategy, slot) by bulk loading numpy arrays, stored beside the
LMDB environment, queried with many boxes in one vectorized call.
"""

from __future__ import annotations

import os

import numpy as np
from rtree import index as rtree_index

from subzero.errors import StoreError

__all__ = ["build_index", "SpatialIndex"]


def _props(ndim: int, overwrite: bool = False) -> rtree_index.Property:
    props = rtree_index.Property()
    props.dimension = max(ndim, 2)
    props.overwrite = overwrite
    return props


def _pad(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    return np.hstack([a, np.zeros((len(a), 1))]) if a.shape[1] == 1 else a


def build_index(base: str, ids: np.ndarray, mins: np.ndarray, maxs: np.ndarray) -> None:
    """Bulk-load an R-tree at ``base`` (+ .dat/.idx) over closed boxes ``[mins, maxs]``."""
    for ext in (".dat", ".idx"):  # libspatialindex appends to existing files: start afresh
        if os.path.exists(base + ext):
            os.unlink(base + ext)
    props = _props(mins.shape[1], overwrite=True)
    if len(ids) == 0:  # an empty index still exists, so a missing file means a damaged store
        rtree_index.Index(base, properties=props, interleaved=True).close()
        return
    idx = rtree_index.Index(base, (np.asarray(ids, np.int64), _pad(mins), _pad(maxs)),
                            properties=props, interleaved=True)
    idx.close()


class SpatialIndex:
    """A read handle on an index written by `build_index`."""

    def __init__(self, base: str, ndim: int):
        self._idx = None
        if not (os.path.exists(base + ".dat") and os.path.exists(base + ".idx")):
            raise StoreError(f"R-tree index {base}.dat is missing; the store is damaged "
                             "(queries re-run the operator instead)")
        try:
            self._idx = rtree_index.Index(base, properties=_props(ndim), interleaved=True)
        except Exception as exc:  # libspatialindex raises its own RTreeError
            raise StoreError(f"R-tree index {base}.dat is unreadable ({exc}); "
                             "the lineage can be rebuilt by re-running the workflow") from exc

    def intersect(self, mins: np.ndarray, maxs: np.ndarray) -> np.ndarray:
        """Ids of boxes meeting any of the closed query boxes ``[mins, maxs]``."""
        if self._idx is None or len(mins) == 0:
            return np.empty(0, np.int64)
        ids, _ = self._idx.intersection_v(_pad(mins), _pad(maxs))
        return np.asarray(ids, np.int64)

    def close(self) -> None:
        if self._idx is not None:
            self._idx.close()
            self._idx = None

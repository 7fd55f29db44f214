"""Chunked arrays on disk (Zarr v3): the only module that imports zarr.

Every array of a run (inputs and node outputs) is a Zarr v3 array whose chunks are the
tiles of its node.  The task that computed a tile encodes it with the array's codec
pipeline and writes its chunk files itself; the driver writes the array's metadata
(``zarr.json``) when the node commits, because only then are the shape (of operators
whose output shape only running tells) and the dtype known.  Readers read boxes (a tile
plus its halo) and never the whole array.

Chunks carry a CRC32C checksum (zarr's ``crc32c`` codec) that zarr verifies on every
read; every chunk is written, even an all-zero one, so a missing chunk file means a
damaged store, and it is reported as one instead of being read as zeros.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from subzero.errors import StoreError
from subzero.store.location import Location

__all__ = ["ArrayRef", "ExternalArray", "write_array", "COMPRESSOR", "chunk_boxes"]

#: chunk compression: "none", "lz4" (Blosc LZ4, byte shuffle) or "zstd" (level 1); see the README
COMPRESSOR = os.environ.get("SUBZERO_COMPRESSOR", "lz4")

Box = tuple[tuple[int, int], ...]

_OPEN: dict[tuple[str, str], Any] = {}
_OPEN_LOCK = threading.Lock()


def _compressors(name: str) -> list:
    from zarr.codecs import BloscCodec, Crc32cCodec, ZstdCodec

    if name == "none":
        return [Crc32cCodec()]
    if name == "lz4":
        return [BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"), Crc32cCodec()]
    if name == "zstd":
        return [ZstdCodec(level=1), Crc32cCodec()]
    raise StoreError(f"unknown compressor {name!r}; use 'none', 'lz4' or 'zstd' (SUBZERO_COMPRESSOR)")


def _memory_array(shape: tuple[int, ...], chunks: tuple[int, ...], dtype, compressor: str):
    """An empty array with the store's metadata in a private memory store (its dict is returned)."""
    import zarr
    from zarr.storage import MemoryStore

    store: dict = {}
    arr = zarr.create_array(MemoryStore(store_dict=store), shape=shape, chunks=chunks, dtype=np.dtype(dtype),
                            fill_value=0, compressors=_compressors(compressor),
                            config={"write_empty_chunks": True})
    return arr, store


def chunk_boxes(box: Box, chunks: tuple[int, ...]) -> list[tuple[tuple[int, ...], Box]]:
    """The chunks (grid coordinates and boxes) a chunk-aligned ``box`` covers."""
    if not box:
        return [((), ())]
    per_axis = []
    for (lo, hi), c in zip(box, chunks):
        starts = range(lo - lo % c, hi, c) if hi > lo else []
        per_axis.append([(s // c, (s, min(s + c, hi))) for s in starts])
    import itertools

    return [(tuple(k for k, _ in combo), tuple(b for _, b in combo)) for combo in itertools.product(*per_axis)]


@dataclass(frozen=True)
class ArrayRef:
    """A picklable handle on one stored array: Spark tasks read and write through it.

    Parameters
    ----------
    location : Location
        The store's root.
    path : str
        The array's directory under the root, e.g. ``"arrays/blur"``.
    """

    location: Location
    path: str

    @property
    def url(self) -> str:
        return self.location.child_url(self.path)

    # -- writing (tasks) and committing (driver) -------------------------------------------
    def write_block(self, box: Box, block: np.ndarray, shape: tuple[int, ...], chunks: tuple[int, ...],
                    compressor: str = COMPRESSOR) -> int:
        """Write the chunks covering ``box`` (chunk-aligned) from ``block``; returns bytes written.

        Each chunk is encoded with the array's codec pipeline and written as one file
        (atomically on a local disk), so a retried task simply writes it again.
        """
        block = np.asarray(block)
        if not shape:  # a 0-d array is one chunk
            return self._write_chunks(block.reshape(()), (), (), (), compressor, [((), ())])
        return self._write_chunks(block, box, shape, chunks, compressor, chunk_boxes(box, chunks))

    def _write_chunks(self, block, box, shape, chunks, compressor, parts) -> int:
        written = 0
        for _, cbox in parts:
            arr, store = _memory_array(shape, chunks, block.dtype, compressor)
            sel = tuple(slice(lo, hi) for lo, hi in cbox)
            arr[sel] = block[tuple(slice(lo - blo, hi - blo) for (lo, hi), (blo, _) in zip(cbox, box))]
            for key, buf in store.items():
                if key == "zarr.json":
                    continue
                data = buf.to_bytes()
                parent = os.path.dirname(key)
                if parent:
                    self.location.makedirs(self.path, parent)
                self.location.write_bytes(data, self.path, key)
                written += len(data)
        return written

    def commit(self, shape: tuple[int, ...], dtype: str, chunks: tuple[int, ...],
               compressor: str = COMPRESSOR) -> None:
        """Write the array's metadata: from now on it opens as a Zarr array."""
        _, store = _memory_array(shape, chunks, dtype, compressor)
        self.location.makedirs(self.path)
        self.location.write_bytes(store["zarr.json"].to_bytes(), self.path, "zarr.json")

    # -- reading ----------------------------------------------------------------------------
    def open(self):
        """The array, read-only, opened once per process."""
        key = (self.location.url, self.path)
        with _OPEN_LOCK:
            arr = _OPEN.get(key)
        if arr is not None:
            return arr
        import zarr

        try:
            if self.location.is_local:
                from zarr.storage import LocalStore

                store = LocalStore(self.location.path(self.path), read_only=True)
            else:
                from zarr.storage import FsspecStore

                store = FsspecStore.from_url(self.url, read_only=True)
            arr = zarr.open_array(store, mode="r")
        except FileNotFoundError as exc:
            raise StoreError(f"array {self.url!r} is missing (no zarr.json): the run did not commit it or the "
                             "store was damaged; re-run the workflow") from exc
        except Exception as exc:  # zarr raises several kinds for damaged metadata
            raise StoreError(f"array {self.url!r} cannot be opened ({type(exc).__name__}: {exc}); the store is "
                             "damaged: re-run the workflow") from exc
        with _OPEN_LOCK:
            _OPEN[key] = arr
        return arr

    def read(self, box: Box | None = None) -> np.ndarray:
        """The cells of ``box`` (the whole array when None) as a numpy array.

        A missing chunk file or a chunk whose checksum does not match is a `StoreError`.
        """
        arr = self.open()
        if box is None:
            box = tuple((0, n) for n in arr.shape)
        if any(hi <= lo for lo, hi in box):
            return np.empty(tuple(max(hi - lo, 0) for lo, hi in box), dtype=arr.dtype)
        self._check_chunks(arr, box)
        try:
            return np.asarray(arr[tuple(slice(lo, hi) for lo, hi in box)])
        except ValueError as exc:
            raise StoreError(f"array {self.url!r} has a damaged chunk in box {box} ({exc}); re-run the "
                             "workflow to rebuild it") from exc

    def _check_chunks(self, arr, box: Box) -> None:
        chunks = tuple(arr.chunks)
        for coords, _ in chunk_boxes(tuple((lo - lo % c, hi) for (lo, hi), c in zip(box, chunks)), chunks):
            key = arr.metadata.encode_chunk_key(coords)
            if not self.location.exists(self.path, key):
                raise StoreError(f"array {self.url!r} is missing chunk {key!r}; the store is damaged: re-run "
                                 "the workflow to rebuild it")

    def forget(self) -> None:
        """Drop this array from the per-process cache of open arrays."""
        with _OPEN_LOCK:
            _OPEN.pop((self.location.url, self.path), None)


class ExternalArray:
    """An input that lives outside the store (a Zarr array): tasks read their boxes from it
    directly, so a large input never passes through the driver.

    Parameters
    ----------
    array : zarr.Array
        Any Zarr array this process and the executor's workers can open.
    name : str
        The workflow input it is bound to (named in errors).
    """

    def __init__(self, array, name: str):
        self.array, self.name = array, name
        self.shape = tuple(int(n) for n in array.shape)
        self.dtype = np.dtype(array.dtype)
        if self.dtype == object or self.dtype.names is not None or self.dtype.kind not in "biufcmM":
            raise StoreError(f"input {name!r} is a Zarr array of dtype {self.dtype}; inputs must be numeric")

    @staticmethod
    def accepts(value) -> bool:
        """True for the array types read in place (Zarr arrays)."""
        return type(value).__module__.split(".")[0] == "zarr" and hasattr(value, "shape")

    def read(self, box: Box | None = None) -> np.ndarray:
        if box is None:
            box = tuple((0, n) for n in self.shape)
        try:
            return np.asarray(self.array[tuple(slice(lo, hi) for lo, hi in box)])
        except Exception as exc:
            raise StoreError(f"input {self.name!r} cannot be read in box {box} ({type(exc).__name__}: {exc})") from exc


def write_array(ref: ArrayRef, array: np.ndarray, chunks: tuple[int, ...] | None = None,
                compressor: str = COMPRESSOR) -> tuple[int, ...]:
    """Store an in-memory array under ``ref``, chunk by chunk, and commit it; returns its chunks."""
    from subzero.tiling import default_chunks, tile_grid

    array = np.asarray(array)
    shape = tuple(int(n) for n in array.shape)
    chunks = tuple(chunks) if chunks is not None else default_chunks(shape)
    for tile in tile_grid(shape, tuple(range(len(shape))), chunks):
        ref.write_block(tile.box, array[tuple(slice(lo, hi) for lo, hi in tile.box)], shape, chunks, compressor)
    ref.commit(shape, str(array.dtype), chunks, compressor)
    return chunks

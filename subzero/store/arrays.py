"""Chunked arrays on disk (Zarr v3): the only module that imports zarr.

Every array of a run (inputs and node outputs) is a Zarr v3 array whose chunks are the
tiles of its node.  The task that computed a tile encodes it with the array's codec
pipeline and writes its chunk files itself; the driver writes the array's metadata
(``zarr.json``) when the node commits, because only then are the shape (of operators
whose output shape only running tells) and the dtype known.  Readers read boxes (a tile
plus its halo) and never the whole array.

Chunks carry a CRC32C checksum (zarr's ``crc32c`` codec) that is verified on every
read; every chunk is written, even an all-zero one, so a missing chunk file means a
damaged store, and it is reported as one instead of being read as zeros.

Tasks encode and decode chunks of the store's own codec pipelines (``bytes`` [+ ``blosc``
LZ4 | ``zstd``] + ``crc32c``) directly with numcodecs and google-crc32c rather than
through zarr's asynchronous API, whose event-loop hand-off costs milliseconds per call
under load; the chunks are standard Zarr v3 chunks (tests read them back with zarr, and
read zarr's), and `ArrayRef.open` gives users the array through zarr itself.

The compressor is chosen per array by what compresses (``"auto"``, the default): float
arrays (noise-like measurements compress by a few percent under zstd, at several times the
cost of a copy) are stored with the ``none`` pipeline (``bytes`` + ``crc32c``), everything
else (masks, labels, counts) with zstd; an array the driver writes from memory is judged by
compressing a sample chunk.  Every choice is one of the standard pipelines above, named in
the array's ``zarr.json``, so any reader (zarr, older subzero) reads it.

Decoded chunks of local stores are kept in a per-process cache bounded in bytes
(the ``chunk_cache_mb`` setting, `subzero.config`), keyed by the chunk file's identity (inode, size, modification time),
so the halo reads of neighbouring tiles decode a shared chunk once and a rewritten chunk is
never served stale.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
from numpy.typing import DTypeLike

from subzero import config
from subzero.cells import ArrayShape
from subzero.errors import StoreError
from subzero.store.failures import REBUILD, REBUILD_ARRAY, reading
from subzero.store.location import Location

__all__ = ["ArrayRef", "StoredArray", "ExternalArray", "HeldArray", "MemoryArray", "write_array", "chunk_boxes",
           "resolve_compressor", "sampled_compressor", "output_compressor", "metadata_checksum"]

# chunk compression is the ``compressor`` setting (`subzero.config`): "auto" (by what compresses,
# see the module's text), "none", "lz4" (Blosc LZ4, byte shuffle) or "zstd" (level 1); see docs/guide/storage.md
#: "auto" stores a sampled array compressed only when zstd shrinks it below this fraction
AUTO_RATIO = 0.8
#: the most bytes of its sample chunk "auto" compresses to decide (the middle of the chunk)
AUTO_SAMPLE_BYTES = 1 << 16

Box = tuple[tuple[int, int], ...]

_OPEN: dict[tuple[str, str], Any] = {}
_OPEN_LOCK = threading.Lock()


def resolve_compressor(name: str, dtype: DTypeLike) -> str:
    """The pipeline ``name`` means for an array of ``dtype``: "auto" is "none" for float and
    complex arrays, "zstd" for the others; any other name is itself."""
    if name != "auto":
        return name
    return "none" if np.dtype(dtype).kind in "fc" else "zstd"


def sampled_compressor(array: np.ndarray, chunks: tuple[int, ...]) -> str:
    """"zstd" if one chunk-sized sample of ``array`` (its middle; of that, the middle
    `AUTO_SAMPLE_BYTES`) compresses below `AUTO_RATIO` of its bytes under zstd, else "none"."""
    from numcodecs import Zstd

    if not array.size:
        return "zstd"
    box = tuple(slice(max(0, n // 2 - c // 2), max(0, n // 2 - c // 2) + c) for n, c in zip(array.shape, chunks))
    sample = array[box] if array.ndim else array.reshape(1)
    nbytes = sample.size * sample.itemsize
    if not nbytes:
        return "zstd"
    start = 0
    if nbytes > AUTO_SAMPLE_BYTES:  # whole cells from the middle: only the rows holding them are copied
        start = (nbytes - AUTO_SAMPLE_BYTES) // 2 // sample.itemsize * sample.itemsize
        row = nbytes // sample.shape[0]
        first, last = start // row, -(-(start + AUTO_SAMPLE_BYTES) // row)
        sample, start = sample[first:last], start - first * row
    raw = np.ascontiguousarray(sample).reshape(-1).view(np.uint8)[start:start + AUTO_SAMPLE_BYTES]
    return "zstd" if len(Zstd(level=1).encode(raw)) < AUTO_RATIO * raw.size else "none"


def output_compressor(inputs: "Sequence[ArrayRef | ExternalArray]", compressor: str | None = None) -> str:
    """What "auto" means for a node's output, from the stored arrays it reads: float outputs of
    float inputs that are all stored uncompressed (noise-like: sampled or computed from such;
    a `HeldArray` counts as the stored array it will be)
    stay uncompressed ("auto"); the output of a node over other stored arrays is compressed
    ("zstd"), since smoothed, masked and labelled arrays compress.  A copy of an external
    input (no stored array read), or another ``compressor``, keeps ``compressor`` (default: the
    ``compressor`` setting)."""
    if compressor is None:
        compressor = config.get("compressor")
    stored = [ref for ref in inputs if isinstance(ref, (ArrayRef, HeldArray, MemoryArray))
              or (not isinstance(ref, ExternalArray) and hasattr(ref, "layout"))]
    if compressor != "auto" or not stored:
        return compressor
    layouts = [ref.layout() for ref in stored]  # (shape, chunks, dtype, pipeline), read once per array
    pipelines = [pipeline for _, _, dtype, pipeline in layouts if dtype.kind in "fc"]
    return "auto" if pipelines and all(p == "none" for p in pipelines) else "zstd"


class BlockCache:
    """Arrays by key, least recently used evicted first, at most ``limit`` bytes in all (None:
    the ``chunk_cache_mb`` setting, read at use; `put` may give its own).  Values are read-only.

    The store's decoded chunks (`_CHUNKS`): keys carry the chunk file's inode, size and
    modification time; chunk files are replaced atomically (a new inode), so a rewritten chunk
    misses.  Also the process's recomputed tiles (`subzero.worker.RECOMPUTED_TILES`).
    """

    def __init__(self, limit: int | None = None):
        self._limit, self.size = limit, 0
        self._items: OrderedDict[tuple, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def limit(self) -> int:
        """The most bytes kept (0: nothing is kept)."""
        if self._limit is not None:
            return self._limit
        return int(config.get("chunk_cache_mb") * 2**20)

    def get(self, key: tuple) -> np.ndarray | None:
        """The chunk kept under ``key`` (now the most recently used), or None."""
        with self._lock:
            got = self._items.get(key)
            if got is not None:
                self._items.move_to_end(key)
            return got

    def put(self, key: tuple, chunk: np.ndarray, limit: int | None = None) -> None:
        """Keep ``chunk`` (unless larger than a quarter of ``limit``, default `limit`)."""
        limit = self.limit if limit is None else limit
        if chunk.nbytes > limit // 4:
            return
        chunk.flags.writeable = False
        with self._lock:
            if key in self._items:
                return
            self._items[key] = chunk
            self.size += chunk.nbytes
            while self.size > limit:
                _, old = self._items.popitem(last=False)
                self.size -= old.nbytes

    def clear(self, first: Any = None) -> None:
        """Forget every entry (``first``: those whose key starts with it)."""
        with self._lock:
            if first is None:
                self._items.clear()
                self.size = 0
                return
            for key in [k for k in self._items if k[0] == first]:
                self.size -= self._items.pop(key).nbytes


_CHUNKS = BlockCache()


def _compressors(name: str) -> list:
    from zarr.codecs import BloscCodec, Crc32cCodec, ZstdCodec

    if name == "none":
        return [Crc32cCodec()]
    if name == "lz4":
        return [BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"), Crc32cCodec()]
    if name == "zstd":
        return [ZstdCodec(level=1), Crc32cCodec()]
    raise StoreError(f"unknown compressor {name!r}; use 'none', 'lz4' or 'zstd' (the compressor setting, SUBZERO_COMPRESSOR)")


def _metadata(shape: tuple[int, ...], chunks: tuple[int, ...], dtype, compressor: str) -> bytes:
    """The ``zarr.json`` of an array, as zarr writes it."""
    import zarr
    from zarr.storage import MemoryStore

    store: dict = {}
    zarr.create_array(MemoryStore(store_dict=store), shape=shape, chunks=chunks, dtype=np.dtype(dtype),
                      fill_value=0, compressors=_compressors(compressor), config={"write_empty_chunks": True})
    return store["zarr.json"].to_bytes()


_META_SUMS: dict[tuple, str] = {}
_META_TEMPLATES: dict[tuple, dict | None] = {}


def _metadata_from_template(shape: tuple[int, ...], chunks: tuple[int, ...], dtype, compressor: str) -> bytes:
    """`_metadata`'s bytes, from zarr's own document for the same dtype, compressor and number of
    axes with the shape and chunk shape put in: zarr is asked once per such kind, not per shape.
    Used only where re-serializing zarr's document gives back its very bytes (else zarr is asked)."""
    import json

    kind = (len(shape), np.dtype(dtype).str, compressor)
    if kind not in _META_TEMPLATES:
        ones = (1,) * len(shape)
        made = _metadata(ones, ones, dtype, compressor)
        doc = json.loads(made)
        same = json.dumps(doc, indent=2).encode() == made and doc.get("shape") == list(ones) and \
            doc.get("chunk_grid", {}).get("configuration", {}).get("chunk_shape") == list(ones)
        _META_TEMPLATES[kind] = doc if same else None
    doc = _META_TEMPLATES[kind]
    if doc is None:
        return _metadata(shape, chunks, dtype, compressor)
    grid = {**doc["chunk_grid"], "configuration": {**doc["chunk_grid"]["configuration"], "chunk_shape": list(chunks)}}
    return json.dumps({**doc, "shape": list(shape), "chunk_grid": grid}, indent=2).encode()


def metadata_checksum(shape: tuple[int, ...], chunks: tuple[int, ...], dtype: DTypeLike, compressor: str) -> str:
    """The xxh3-64 checksum of the ``zarr.json`` `ArrayRef.commit` writes for these arguments
    (``compressor`` resolved as there), computed without writing it (cached per process)."""
    key = (tuple(int(n) for n in shape), tuple(int(n) for n in chunks), np.dtype(dtype).str,
           resolve_compressor(compressor, dtype))
    got = _META_SUMS.get(key)
    if got is None:
        import xxhash

        got = xxhash.xxh3_64_hexdigest(_metadata_from_template(key[0], key[1], dtype, key[3]))
        _META_SUMS[key] = got
    return got


def _codec(compressor: str, itemsize: int):
    """The numcodecs compressor of a pipeline (None for "none")."""
    if compressor == "none":
        return None
    if compressor == "lz4":
        from numcodecs import Blosc

        return Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE, blocksize=0, typesize=itemsize)
    if compressor == "zstd":
        from numcodecs import Zstd

        return Zstd(level=1)
    raise StoreError(f"unknown compressor {compressor!r}; use 'none', 'lz4' or 'zstd' (the compressor setting, SUBZERO_COMPRESSOR)")


def encode_chunk(chunk: np.ndarray, compressor: str) -> "bytes | memoryview":
    """A full chunk as the bytes of a Zarr v3 chunk: little-endian C order, compressed, CRC32C last.

    Uncompressed, the cells are copied once, straight from ``chunk`` (any strides) into the
    buffer returned, the checksum after them (no intermediate copies: inputs are written at the
    speed of one memory copy)."""
    import google_crc32c

    dtype = chunk.dtype.newbyteorder("<")
    codec = _codec(resolve_compressor(compressor, chunk.dtype), chunk.dtype.itemsize)
    if codec is not None:
        data = bytes(codec.encode(np.ascontiguousarray(chunk, dtype=dtype)))
        return data + np.uint32(google_crc32c.value(data)).astype("<u4").tobytes()
    nbytes = chunk.size * dtype.itemsize
    buffer = np.empty(nbytes + 4, np.uint8)
    np.copyto(buffer[:nbytes].view(dtype).reshape(chunk.shape), chunk, casting="equiv")  # byte order only
    view = memoryview(buffer)
    buffer[nbytes:] = np.frombuffer(np.uint32(google_crc32c.value(buffer[:nbytes])).astype("<u4").tobytes(), np.uint8)
    return view


def decode_chunk(data: bytes, shape: tuple[int, ...], dtype: DTypeLike, compressor: str, where: str) -> np.ndarray:
    """Inverse of `encode_chunk`; a checksum mismatch is a `StoreError` naming ``where``."""
    import google_crc32c

    raw = np.frombuffer(data, np.uint8)  # the file's bytes, sliced without copies
    if len(raw) < 4 or raw[-4:].view("<u4")[0] != google_crc32c.value(raw[:-4]):
        raise StoreError(f"{where} does not match its checksum (its bytes were changed or cut); the store is "
                         "damaged: re-run the workflow to rebuild it")
    dtype = np.dtype(dtype)
    body: Any = raw[:-4]
    codec = _codec(compressor, dtype.itemsize)
    if codec is not None:
        try:
            body = codec.decode(body)
        except Exception as exc:  # numcodecs' own errors: a chunk its metadata does not describe
            raise StoreError(f"{where} cannot be decoded as {compressor} ({type(exc).__name__}: {exc}); the store "
                             "is damaged or was written with another compressor: re-run the workflow") from exc
    try:
        return np.frombuffer(body, dtype=dtype.newbyteorder("<")).reshape(shape)
    except ValueError as exc:
        raise StoreError(f"{where} holds {len(body)} bytes, not a chunk of shape {shape} and dtype {dtype}; the "
                         "store is damaged") from exc


def _chunk_key(coords: tuple[int, ...]) -> str:
    return "/".join(["c", *map(str, coords)])


def _pipeline(meta: dict) -> str | None:
    """Which of our pipelines a ``zarr.json`` describes (None: another one; read through zarr)."""
    names = [c.get("name") for c in meta.get("codecs", ())]
    keys = meta.get("chunk_key_encoding", {})
    if keys.get("name", "default") != "default" or keys.get("configuration", {}).get("separator", "/") != "/":
        return None  # chunk files not named c/i/j: zarr finds them
    endian = (meta.get("codecs") or [{}])[0].get("configuration", {}).get("endian", "little")
    if endian != "little" or not names or names[0] != "bytes" or names[-1] != "crc32c":
        return None
    middle = names[1:-1]
    if not middle:
        return "none"
    if middle == ["blosc"] and meta["codecs"][1]["configuration"].get("cname") == "lz4":
        return "lz4"
    if middle == ["zstd"]:
        return "zstd"
    return None


def forget_store(url: str) -> None:
    """Drop every cached array of the store at ``url`` (it is being replaced)."""
    _CHUNKS.clear()
    with _OPEN_LOCK:
        for key in [k for k in _OPEN if k[0] == url]:
            del _OPEN[key]


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
    meta_xxh3 : str, optional
        The xxh3-64 checksum of its ``zarr.json`` as committed (from the catalog): when
        given, metadata that does not match is a `StoreError`, never a wrong shape.
    compressor : str
        How its chunks are compressed: the driver's choice (the ``compressor`` setting), carried to the
        tasks with the handle, so chunks and metadata agree whatever a worker's environment.
    """

    location: Location
    path: str
    meta_xxh3: str | None = None
    compressor: str = field(default_factory=lambda: config.get("compressor"))

    @property
    def url(self) -> str:
        """The array's directory as a URL (or local path)."""
        return self.location.child_url(self.path)

    # -- writing (tasks) and committing (driver) -------------------------------------------
    def write_block(self, box: Box, block: np.ndarray, shape: tuple[int, ...], chunks: tuple[int, ...],
                    compressor: str | None = None) -> int:
        """Write the chunks covering ``box`` (chunk-aligned) from ``block``; returns bytes written.

        Each chunk is encoded as a Zarr v3 chunk and written as one file (atomically on a
        local disk), so a retried task simply writes it again.
        """
        block = np.asarray(block)
        compressor = compressor or self.compressor
        if not shape:  # a 0-d array is one chunk
            parts = [((), ())]
            box = ()
        else:
            parts = chunk_boxes(box, chunks)
        written = 0
        made: set[str] = set()
        for coords, cbox in parts:
            part = block[tuple(slice(lo - blo, hi - blo) for (lo, hi), (blo, _) in zip(cbox, box))]
            if part.shape != tuple(chunks):  # an edge chunk: padded with the fill value, as zarr does
                full = np.zeros(chunks, dtype=block.dtype)
                full[tuple(slice(0, n) for n in part.shape)] = part
                part = full
            data = encode_chunk(part, compressor)
            key = _chunk_key(coords)
            parent = key.rsplit("/", 1)[0] if "/" in key else ""  # "": the array's own directory (0-d)
            if parent not in made:
                self.location.makedirs(self.path, *([parent] if parent else []))
                made.add(parent)
            self.location.write_bytes(data, self.path, key, durable=False)
            written += len(data)
        return written

    def commit(self, shape: tuple[int, ...], dtype: str, chunks: tuple[int, ...],
               compressor: str | None = None) -> str:
        """Write the array's metadata: from now on it opens as a Zarr array.  Returns the
        metadata's xxh3-64 checksum (kept in the catalog, see ``meta_xxh3``)."""
        import xxhash

        self.forget()
        self.location.makedirs(self.path)
        meta = _metadata_from_template(tuple(int(n) for n in shape), tuple(int(n) for n in chunks), dtype,
                                       resolve_compressor(compressor or self.compressor, dtype))
        self.location.write_bytes(meta, self.path, "zarr.json", durable=False)  # the catalog keeps its checksum
        return xxhash.xxh3_64_hexdigest(meta)

    def checked(self, meta_xxh3: str | None) -> "ArrayRef":
        """This array, read only if its metadata matches ``meta_xxh3``."""
        return ArrayRef(self.location, self.path, meta_xxh3, self.compressor)

    # -- reading ----------------------------------------------------------------------------
    def open(self) -> Any:
        """The array, read-only, opened once per process."""
        key = (self.location.url, self.path)
        with _OPEN_LOCK:
            arr = _OPEN.get(key)
        if arr is not None:
            return arr
        import zarr

        self.layout()  # the metadata checked against the catalog first
        try:
            if self.location.is_local:
                from zarr.storage import LocalStore

                store = LocalStore(self.location.path(self.path), read_only=True)
            else:
                from zarr.storage import FsspecStore

                store = FsspecStore.from_url(self.url, storage_options=dict(self.location.fs.storage_options),
                                             read_only=True)
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
        shape, chunks, dtype, pipeline = self.layout()
        if box is None:
            box = tuple((0, n) for n in shape)
        if len(box) != len(shape) or any(lo < 0 or hi > n for (lo, hi), n in zip(box, shape)):
            raise StoreError(f"box {box} is outside array {self.url!r} of shape {shape}")  # not edge padding
        if any(hi <= lo for lo, hi in box) or pipeline is None:
            if pipeline is None and all(hi > lo for lo, hi in box):
                return self._read_with_zarr(box)
            return np.empty(tuple(max(hi - lo, 0) for lo, hi in box), dtype=dtype)
        out = np.empty(tuple(hi - lo for lo, hi in box), dtype=dtype)
        aligned = tuple((lo - lo % c, hi) for (lo, hi), c in zip(box, chunks))
        for coords, cbox in (chunk_boxes(aligned, chunks) if shape else [((), ())]):
            chunk = self._chunk(_chunk_key(coords), tuple(chunks), dtype, pipeline)
            lo = [max(a, b) for (a, _), (b, _) in zip(cbox, box)]
            hi = [min(a, b) for (_, a), (_, b) in zip(cbox, box)]
            out[tuple(slice(l - b, h - b) for l, h, (b, _) in zip(lo, hi, box))] = \
                chunk[tuple(slice(l - c, h - c) for l, h, (c, _) in zip(lo, hi, cbox))]
        return out

    def _chunk(self, key: str, chunks: tuple[int, ...], dtype: np.dtype, pipeline: str) -> np.ndarray:
        """One decoded chunk (read-only), from the chunk cache when its file has not changed."""
        where = f"chunk {key!r} of array {self.url!r}"
        ident = None
        if _CHUNKS.limit and self.location.is_local:
            try:
                st = os.stat(self.location.path(self.path, key))
                ident = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, chunks, dtype.str, pipeline)
            except OSError:  # missing: the read below says so
                ident = None
            if ident is not None:
                got = _CHUNKS.get(ident)
                if got is not None:
                    return got
        with reading(where, self.location.child_url(self.path, key), REBUILD):
            data = self.location.read_bytes(self.path, key)
        chunk = decode_chunk(data, chunks, dtype, pipeline, where)
        if ident is not None:
            _CHUNKS.put(ident, chunk)
        return chunk

    def layout(self) -> tuple[tuple[int, ...], tuple[int, ...], np.dtype, str | None]:
        """(shape, chunks, dtype, pipeline) from the array's ``zarr.json``, read once per process."""
        key = (self.location.url, self.path, "layout", self.meta_xxh3)
        with _OPEN_LOCK:
            got = _OPEN.get(key)
        if got is not None:
            return got
        import json

        try:
            with reading(f"the metadata of array {self.url!r}", self.location.child_url(self.path, "zarr.json"),
                         REBUILD_ARRAY):
                raw = self.location.read_bytes(self.path, "zarr.json")
            if self.meta_xxh3 is not None:
                import xxhash

                if xxhash.xxh3_64_hexdigest(raw) != self.meta_xxh3:
                    raise StoreError(f"array {self.url!r}: its zarr.json does not match the checksum in the catalog "
                                     "(its bytes were changed); the store is damaged: re-run the workflow")
            meta = json.loads(raw)
            shape = tuple(int(n) for n in meta["shape"])
            chunks = tuple(int(n) for n in meta["chunk_grid"]["configuration"]["chunk_shape"])
            dtype = np.dtype(meta["data_type"])
            pipeline = _pipeline(meta)
        except StoreError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StoreError(f"array {self.url!r} has damaged metadata ({type(exc).__name__}: {exc}); re-run "
                             "the workflow") from exc
        got = (shape, chunks, dtype, pipeline)
        with _OPEN_LOCK:
            _OPEN[key] = got
        return got

    def _read_with_zarr(self, box: Box) -> np.ndarray:
        arr = self.open()
        try:
            return np.asarray(arr[tuple(slice(lo, hi) for lo, hi in box)])
        except Exception as exc:  # zarr's codecs raise ValueError, RuntimeError, EOFError... on damaged chunks
            raise StoreError(f"array {self.url!r} has a damaged chunk in box {box} ({exc}); re-run the "
                             "workflow to rebuild it") from exc

    def forget(self) -> None:
        """Drop this array from the per-process caches."""
        with _OPEN_LOCK:
            for key in [k for k in _OPEN if k[:2] == (self.location.url, self.path)]:
                del _OPEN[key]


class StoredArray(ArrayShape):
    """A stored array as users read it (`subzero.Run.output`): read-only, numpy-like.

    Indexing with ints and slices reads only the chunks it covers; ``np.asarray`` reads
    everything.  Every read checks the chunks' checksums, so damage is a `StoreError`,
    never wrong values.  ``.zarr`` gives the Zarr array itself.

    Examples
    --------
    >>> run.output("blur")[10:20, 5]            # doctest: +SKIP
    """

    def __init__(self, ref: ArrayRef):
        self._ref = ref
        self.shape, self.chunks, self.dtype, _ = ref.layout()

    @property
    def zarr(self) -> Any:
        """The Zarr array (its metadata checked first)."""
        return self._ref.open()

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = self._ref.read()
        return out if dtype is None else out.astype(dtype)

    def __getitem__(self, key) -> np.ndarray:
        items = key if isinstance(key, tuple) else (key,)
        if any(k is Ellipsis for k in items):
            at = next(i for i, k in enumerate(items) if k is Ellipsis)
            items = items[:at] + (slice(None),) * (self.ndim - len(items) + 1) + items[at + 1:]
        basic = len(items) <= self.ndim and all(
            isinstance(k, slice) or (isinstance(k, (int, np.integer)) and not isinstance(k, bool)) for k in items)
        if not basic:  # fancy indexing: numpy decides, on the whole array
            return np.asarray(self)[key]
        items = items + (slice(None),) * (self.ndim - len(items))
        box, local = [], []
        for k, n in zip(items, self.shape):
            if isinstance(k, slice):
                start, stop, step = k.indices(n)
                idx = range(start, stop, step)
                if not len(idx):
                    box.append((0, 0))
                    local.append(slice(0, 0))
                    continue
                lo, hi = min(idx[0], idx[-1]), max(idx[0], idx[-1]) + 1
                box.append((lo, hi))
                local.append(slice(idx[0] - lo, (idx[-1] - lo) + (1 if step > 0 else -1) or None, step)
                             if step > 0 else slice(idx[0] - lo, None if idx[-1] - lo == 0 else idx[-1] - lo - 1, step))
            else:
                i = int(k) + (n if k < 0 else 0)
                if not 0 <= i < n:
                    raise IndexError(f"index {int(k)} is out of bounds for an axis of length {n}")
                box.append((i, i + 1))
                local.append(0)
        return self._ref.read(tuple(box))[tuple(local)]

    def __repr__(self) -> str:
        return f"<StoredArray {self._ref.url!r} shape={self.shape} dtype={self.dtype}>"


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
    def accepts(value: Any) -> bool:
        """True for the array types read in place (Zarr arrays)."""
        return type(value).__module__.split(".")[0] == "zarr" and hasattr(value, "shape")

    def read(self, box: Box | None = None) -> np.ndarray:
        """The values in ``box`` (the whole array when None), read from the user's array."""
        if box is None:
            box = tuple((0, n) for n in self.shape)
        try:
            return np.asarray(self.array[tuple(slice(lo, hi) for lo, hi in box)])
        except Exception as exc:
            raise StoreError(f"input {self.name!r} cannot be read in box {box} ({type(exc).__name__}: {exc})") from exc


@dataclass(frozen=True)
class HeldArray:
    """A box of a node's output held in a task's memory, read as its stored array would be.

    A fused task (`subzero.worker.run_fused_tile`) computes an upstream node over the box
    its downstream nodes read and hands them this instead of the stored array: the same
    values, without writing and decoding them in between.  ``pipeline`` is the codec
    pipeline the stored array gets (`resolve_compressor`), so `output_compressor` chooses
    as it does over the committed array.
    """

    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    box: Box
    block: np.ndarray
    pipeline: str

    def read(self, box: Box | None = None) -> np.ndarray:
        """The cells of ``box`` (within the held box): a copy, as a stored array's read is, so an
        operator that writes into its input changes no other reader's values."""
        box = self.box if box is None else box
        if any(lo < hlo or hi > hhi for (lo, hi), (hlo, hhi) in zip(box, self.box)):
            raise StoreError(f"box {box} is outside the held box {self.box} of a fused node's output")
        return self.view(box).copy()

    def view(self, box: Box | None = None) -> np.ndarray:
        """The cells of ``box`` as a read-only view, for an operator that never writes its inputs
        (`subzero.operator.Operator.reads_only`)."""
        box = self.box if box is None else box
        if any(lo < hlo or hi > hhi for (lo, hi), (hlo, hhi) in zip(box, self.box)):
            raise StoreError(f"box {box} is outside the held box {self.box} of a fused node's output")
        out = self.block[tuple(slice(lo - hlo, hi - hlo) for (lo, hi), (hlo, _) in zip(box, self.box))]
        out.flags.writeable = False
        return out

    def layout(self) -> tuple[tuple[int, ...], tuple[int, ...], np.dtype, str | None]:
        """(shape, chunks, dtype, pipeline), as `ArrayRef.layout` gives the stored array's."""
        return self.shape, self.chunks, self.block.dtype, self.pipeline


class MemoryArray:
    """A node's whole output held in this process's memory instead of the store: the local
    executor's tiles write their boxes into it (threads, each its own box) and later nodes
    read boxes from it, as they would the stored array.  The driver keeps one per unstored
    node until its last reader has run (`subzero.driver`); nothing is written to disk.

    Parameters
    ----------
    name : str
        The node (named in errors).
    compressor : str
        The codec pipeline name its stored form would have (`output_compressor` reads it
        through `layout`, so readers choose as they do over a stored array).
    """

    def __init__(self, name: str, compressor: str = "none"):
        self.name, self.compressor = name, compressor
        self.block: np.ndarray | None = None
        self.chunks: tuple[int, ...] = ()
        self._lock = threading.Lock()
        with _HELD_LOCK:
            global _HELD_NEXT
            _HELD_NEXT += 1
            self.token = _HELD_NEXT
            _HELD[self.token] = self

    def __reduce__(self):
        # the local executor gives each thread its own copy of a task: every copy is this one array
        return (_held_array, (self.token, self.name))

    def release(self) -> None:
        """Drop the cells (its last reader has run)."""
        with _HELD_LOCK:
            _HELD.pop(self.token, None)
        self.block = None

    @property
    def url(self) -> str:
        """Where it is (for messages): this process's memory."""
        return f"memory:{self.name}"

    @property
    def nbytes(self) -> int:
        """Bytes held (0 before the first tile is written)."""
        return 0 if self.block is None else int(self.block.nbytes)

    def write_block(self, box: Box, block: np.ndarray, shape: tuple[int, ...], chunks: tuple[int, ...],
                    compressor: str | None = None) -> int:
        """Keep ``block`` as the cells of ``box`` (nothing to copy when it is `target`'s view of
        them, computed in place); returns 0 (no bytes written anywhere)."""
        block = np.asarray(block)
        destination = self.target(box, shape, chunks, block.dtype)
        if not _same_memory(destination, block):
            destination[...] = block
        return 0

    def target(self, box: Box, shape: tuple[int, ...], chunks: tuple[int, ...], dtype: Any) -> np.ndarray:
        """The writable cells of ``box`` in the whole array of ``shape`` and ``dtype`` (made on the
        first call; each tile its own box): a tile computes its values there (`Operator.run_into`),
        and its `write_block` then copies nothing."""
        with self._lock:
            if self.block is None or self.block.shape != tuple(shape) or self.block.dtype != np.dtype(dtype) or \
                    not self.block.flags.writeable:  # (a block kept whole, `write_whole`, is not written into)
                self.block = np.empty(tuple(shape), dtype=dtype)
                self.chunks = tuple(chunks)
            return self.block[tuple(slice(lo, hi) for lo, hi in box) + (Ellipsis,)]  # (0-d: an array, not a scalar)

    def write_whole(self, block: np.ndarray, chunks: tuple[int, ...]) -> int:
        """Keep ``block`` itself (not a copy) as the whole array: for a block nothing writes once
        computed (a numpy function's output over held inputs: fresh, or a read-only view of
        them, `subzero.operator.Operator.reads_only`; or a traced run's values); returns 0."""
        with self._lock:
            if self.block is None or not _same_memory(self.block, block):  # else computed in place (`target`)
                self.block = np.asarray(block)
            self.chunks = tuple(chunks)
        return 0

    def read(self, box: Box | None = None) -> np.ndarray:
        """The cells of ``box`` (the whole array when None): a copy, as a stored read is."""
        if self.block is None:
            raise StoreError(f"node {self.name!r}: its output is read before any tile of it ran")
        if box is None:
            return self.block.copy()
        return self.block[tuple(slice(lo, hi) for lo, hi in box)].copy()

    def view(self, box: Box | None = None) -> np.ndarray:
        """The cells of ``box`` as a read-only view, for an operator that never writes its inputs
        (`subzero.operator.Operator.reads_only`); the cells stay while the view lives."""
        if self.block is None:
            raise StoreError(f"node {self.name!r}: its output is read before any tile of it ran")
        out = self.block[tuple(slice(lo, hi) for lo, hi in box)] if box is not None else self.block[...]
        out.flags.writeable = False
        return out

    def layout(self) -> tuple[tuple[int, ...], tuple[int, ...], np.dtype, str | None]:
        """(shape, chunks, dtype, pipeline), as `ArrayRef.layout` gives a stored array's."""
        if self.block is None:
            raise StoreError(f"node {self.name!r}: its output is read before any tile of it ran")
        return self.block.shape, self.chunks, self.block.dtype, resolve_compressor(self.compressor, self.block.dtype)


def _same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` are the same cells of one buffer (same start, shape, strides, dtype)."""
    return (a.shape == b.shape and a.strides == b.strides and a.dtype == b.dtype
            and a.__array_interface__["data"][0] == b.__array_interface__["data"][0])


_HELD: "weakref.WeakValueDictionary[int, MemoryArray]" = weakref.WeakValueDictionary()
_HELD_LOCK = threading.Lock()
_HELD_NEXT = 0


def _held_array(token: int, name: str) -> MemoryArray:
    """The `MemoryArray` a pickled task names (in the process that holds it)."""
    with _HELD_LOCK:
        got = _HELD.get(token)
    if got is None:
        raise StoreError(f"node {name!r}: its output is held in the driver's memory, not stored; only the local "
                         "executor can read it (run with keep='all' to store every array)")
    return got


def write_array(ref: ArrayRef, array: np.ndarray, chunks: tuple[int, ...] | None = None,
                compressor: str | None = None, digests: list[str] | None = None,
                parallel: bool = True) -> tuple[int, ...]:
    """Store an in-memory array under ``ref``, chunk by chunk, and commit it; returns its chunks.

    ``parallel``: one writer thread per core (else the calling thread writes every chunk: a
    writer behind a run leaves the cores to it).

    ``digests``, when given, receives the `subzero.fingerprint.block_digest` of every chunk
    as it is written (in chunk order), for the input's fingerprint.
    """
    from subzero.tiling import default_chunks, tile_grid

    from concurrent.futures import ThreadPoolExecutor

    from subzero.fingerprint import block_digest

    array = np.asarray(array)
    shape = tuple(int(n) for n in array.shape)
    chunks = tuple(chunks) if chunks is not None else default_chunks(shape)
    compressor = compressor or ref.compressor
    if compressor == "auto":
        compressor = sampled_compressor(array, chunks)

    def one(box: Box) -> str:
        block = array[tuple(slice(lo, hi) for lo, hi in box)]
        ref.write_block(box, block, shape, chunks, compressor)
        return block_digest(block) if digests is not None else ""

    boxes = [tile.box for tile in tile_grid(shape, tuple(range(len(shape))), chunks)]
    if len(boxes) > 1 and parallel:  # compression, checksums and file writes release the GIL: one writer per core
        with ThreadPoolExecutor(max_workers=min(len(boxes), os.cpu_count() or 1)) as pool:
            got = list(pool.map(one, boxes))
    else:
        got = [one(box) for box in boxes]
    if digests is not None:
        digests.extend(got)
    ref.commit(shape, str(array.dtype), chunks, compressor)
    return chunks

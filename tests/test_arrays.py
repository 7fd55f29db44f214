"""Stored arrays (Zarr v3, one chunk per tile): every compressor and dtype round-trips through
`ArrayRef.write_block`/`commit`/`read`, boxes read like numpy slices, our arrays are zarr's and
zarr's are ours, and a damaged chunk or metadata file is a `StoreError`, never a wrong answer."""

from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

import subzero as sz
from subzero.store import ArrayRef, resolve
from subzero.store import arrays as arrays_mod
from subzero.store.arrays import ExternalArray, _compressors, forget_store, write_array
from subzero.tiling import default_chunks, tile_grid

COMPRESSORS = ["none", "lz4", "zstd"]
DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64",
          "complex64", "complex128"]


def sample(shape, dtype, seed=0) -> np.ndarray:
    """Values spanning the dtype (extremes included), no all-zero chunks for the shapes used here."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == bool:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        out = rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
        if out.size:
            out.reshape(-1)[:2] = [info.min, info.max][: out.size]
        return out
    values = rng.standard_normal(shape) * 1e3
    if dtype.kind == "c":
        values = values + 1j * rng.standard_normal(shape)
    out = values.astype(dtype)
    if out.size >= 3 and dtype.kind == "f":
        out.reshape(-1)[:3] = [np.inf, -0.0, np.finfo(dtype).max]
    return out


@pytest.fixture
def loc(tmp_path):
    return resolve(tmp_path / "s")


def write_tiles(ref: ArrayRef, array: np.ndarray, chunks, compressor: str, per: int = 1) -> int:
    """Write ``array`` as a task would, tile by tile (a tile = ``per`` chunks per axis), and commit."""
    shape = array.shape
    written = 0
    tile = tuple(c * per for c in chunks)
    for t in tile_grid(shape, tuple(range(len(shape))), tile):
        written += ref.write_block(t.box, array[tuple(slice(lo, hi) for lo, hi in t.box)], shape, chunks,
                                   compressor)
    ref.commit(shape, str(array.dtype), chunks, compressor)
    return written


def chunk_files(loc, path) -> dict[str, int]:
    root = loc.path(path)
    out = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            full = os.path.join(dirpath, name)
            out[os.path.relpath(full, root).replace(os.sep, "/")] = os.path.getsize(full)
    return out


# -- round trips ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("compressor", COMPRESSORS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_and_compressor_round_trips_with_edge_chunks(loc, compressor, dtype):
    array = sample((7, 5), dtype)
    ref = ArrayRef(loc, "arrays/x")
    written = write_tiles(ref, array, (3, 2), compressor)
    files = chunk_files(loc, "arrays/x")
    chunks = {k: n for k, n in files.items() if k != "zarr.json"}
    assert sorted(chunks) == [f"c/{i}/{j}" for i in range(3) for j in range(3)]  # edge chunks included
    assert written == sum(chunks.values())
    got = ref.read()
    assert got.dtype == np.dtype(dtype) and got.shape == array.shape
    np.testing.assert_array_equal(got, array)
    np.testing.assert_array_equal(ref.read(((2, 7), (1, 4))), array[2:7, 1:4])  # spans chunks and the edge
    # the chunks are zarr's own: zarr reads the array
    z = zarr.open_array(loc.path("arrays/x"), mode="r")
    assert z.shape == array.shape and z.dtype == np.dtype(dtype) and z.chunks == (3, 2)
    np.testing.assert_array_equal(z[:], array)
    assert ref.layout()[3] == compressor


@pytest.mark.parametrize("compressor", COMPRESSORS)
def test_a_tile_of_several_chunks_is_split_into_chunk_files(loc, compressor):
    array = sample((9, 10, 3), "float32", seed=3)
    ref = ArrayRef(loc, "arrays/big")
    write_tiles(ref, array, (2, 3, 3), compressor, per=2)  # tiles of 2 x 2 x 2 chunks
    files = chunk_files(loc, "arrays/big")
    assert len([k for k in files if k.startswith("c/")]) == 5 * 4 * 1
    np.testing.assert_array_equal(ref.read(), array)
    np.testing.assert_array_equal(zarr.open_array(loc.path("arrays/big"), mode="r")[:], array)


@st.composite
def arrays_and_boxes(draw):
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 9)) for _ in range(ndim))
    chunks = tuple(draw(st.integers(1, n + 1)) for n in shape)
    boxes = []
    for _ in range(4):
        box = []
        for n in shape:
            lo = draw(st.integers(0, n))
            box.append((lo, draw(st.integers(lo, n))))  # may be empty
        boxes.append(tuple(box))
    return shape, chunks, boxes


@settings(max_examples=40, deadline=None)
@given(arrays_and_boxes(), st.sampled_from(COMPRESSORS), st.sampled_from(["int16", "float64", "bool"]))
def test_any_box_reads_like_a_numpy_slice(tmp_path_factory, case, compressor, dtype):
    shape, chunks, boxes = case
    loc = resolve(tmp_path_factory.mktemp("boxes"))
    array = sample(shape, dtype, seed=len(boxes))
    ref = ArrayRef(loc, "arrays/a")
    write_tiles(ref, array, chunks, compressor)
    for box in boxes:
        got = ref.read(box)
        want = array[tuple(slice(lo, hi) for lo, hi in box)]
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(ref.read(), array)


def test_a_halo_box_reads_across_every_neighbouring_chunk(loc):
    array = np.arange(12 * 12, dtype=np.int32).reshape(12, 12)
    ref = ArrayRef(loc, "arrays/img")
    write_tiles(ref, array, (4, 4), "lz4")
    for lo0, lo1 in [(4, 4), (0, 0), (8, 8), (0, 8)]:
        halo = ((max(lo0 - 2, 0), min(lo0 + 6, 12)), (max(lo1 - 2, 0), min(lo1 + 6, 12)))
        np.testing.assert_array_equal(ref.read(halo), array[halo[0][0]:halo[0][1], halo[1][0]:halo[1][1]])


def test_empty_boxes_read_empty_arrays_without_touching_chunks(loc):
    ref = ArrayRef(loc, "arrays/a")
    write_tiles(ref, np.ones((4, 4), np.float32), (2, 2), "none")
    for name in os.listdir(loc.path("arrays/a/c/0")):
        os.unlink(loc.path("arrays/a/c/0", name))  # reading an empty box must not need them
    for box in [((0, 0), (0, 4)), ((1, 1), (2, 2)), ((4, 4), (0, 4))]:
        got = ref.read(box)
        assert got.dtype == np.float32 and got.shape == tuple(hi - lo for lo, hi in box)


def test_a_box_outside_the_array_is_refused_not_padded(loc):
    ref = ArrayRef(loc, "arrays/a")
    write_array(ref, np.arange(1, 11, dtype=np.float64), chunks=(4,))
    for box in [((8, 12),), ((-2, 3),), ((0, 11),), ((0, 2), (0, 1))]:
        with pytest.raises(sz.StoreError, match=r"outside array .* of shape \(10,\)"):
            ref.read(box)
    np.testing.assert_array_equal(ref.read(((8, 10),)), [9, 10])


@pytest.mark.parametrize("compressor", COMPRESSORS)
def test_a_0d_array_is_one_chunk(loc, compressor):
    ref = ArrayRef(loc, "arrays/scalar")
    assert write_array(ref, np.array(3.25), compressor=compressor) == ()
    assert sorted(chunk_files(loc, "arrays/scalar")) == ["c", "zarr.json"]
    for got in (ref.read(), ref.read(())):
        assert got.shape == () and got.dtype == np.float64 and got == 3.25
    assert zarr.open_array(loc.path("arrays/scalar"), mode="r")[()] == 3.25
    # a task writes a 0-d output the same way
    task_ref = ArrayRef(loc, "arrays/sum")
    task_ref.write_block((), np.array(7, np.int64), (), ())
    task_ref.commit((), "int64", ())
    assert task_ref.read() == 7


def test_an_array_without_cells(loc):
    ref = ArrayRef(loc, "arrays/none")
    write_array(ref, np.zeros((0, 5), np.int32))
    got = ref.read()
    assert got.shape == (0, 5) and got.dtype == np.int32
    assert zarr.open_array(loc.path("arrays/none"), mode="r").shape == (0, 5)


def test_big_endian_values_are_stored_little_endian_and_read_back(loc):
    array = np.arange(10, dtype=">f4") * 1.5  # FITS images are big-endian
    ref = ArrayRef(loc, "arrays/fits")
    write_array(ref, array, chunks=(4,))
    np.testing.assert_array_equal(ref.read(), array)
    np.testing.assert_array_equal(zarr.open_array(loc.path("arrays/fits"), mode="r")[:], array)


def test_write_array_uses_the_default_tiles_and_commits(loc):
    array = sample((130, 7), "int32")
    ref = ArrayRef(loc, "arrays/in")
    chunks = write_array(ref, array)
    assert chunks == default_chunks((130, 7))
    meta = json.loads((open(loc.path("arrays/in/zarr.json"), "rb").read()))
    assert meta["zarr_format"] == 3 and meta["shape"] == [130, 7] and meta["data_type"] == "int32"
    assert meta["chunk_grid"]["configuration"]["chunk_shape"] == list(chunks)
    assert [c["name"] for c in meta["codecs"]][-1] == "crc32c"
    np.testing.assert_array_equal(ref.read(), array)
    assert write_array(ArrayRef(loc, "arrays/in2"), array, chunks=(50, 7)) == (50, 7)
    assert len(chunk_files(loc, "arrays/in2")) == 3 + 1


def test_an_array_ref_is_picklable_and_reads_in_another_process(loc):
    ref = ArrayRef(loc, "arrays/a")
    write_array(ref, np.arange(6).reshape(2, 3))
    again = pickle.loads(pickle.dumps(ref))
    assert again == ref and again.url == loc.path("arrays/a")
    np.testing.assert_array_equal(again.read(), np.arange(6).reshape(2, 3))


def test_an_array_on_an_fsspec_store(tmp_path):
    loc = resolve("memory://test-arrays/run")
    try:
        ref = ArrayRef(loc, "arrays/m")
        array = sample((5, 6), "uint16")
        write_tiles(ref, array, (2, 4), "zstd")
        np.testing.assert_array_equal(ref.read(((1, 5), (3, 6))), array[1:5, 3:6])
        np.testing.assert_array_equal(np.asarray(ref.open()[:]), array)
    finally:
        loc.remove()


# -- interoperability with zarr ----------------------------------------------------------------------------------

@pytest.mark.parametrize("compressor", COMPRESSORS)
@pytest.mark.parametrize("dtype", ["bool", "uint8", "int64", "float32", "complex128"])
def test_arrays_zarr_writes_with_our_codecs_are_read_directly(loc, compressor, dtype):
    array = sample((6, 7), dtype, seed=5)
    z = zarr.create_array(loc.path("arrays/z"), shape=array.shape, chunks=(4, 3), dtype=array.dtype, fill_value=0,
                          compressors=_compressors(compressor), config={"write_empty_chunks": True})
    z[:] = array
    ref = ArrayRef(loc, "arrays/z")
    assert ref.layout()[3] == compressor  # our decoder, not zarr's
    np.testing.assert_array_equal(ref.read(), array)
    np.testing.assert_array_equal(ref.read(((3, 6), (2, 7))), array[3:6, 2:7])


@pytest.mark.parametrize("codecs", [
    {"compressors": [zarr.codecs.GzipCodec()]},
    {"compressors": [zarr.codecs.GzipCodec(), zarr.codecs.Crc32cCodec()]},
    {"compressors": [zarr.codecs.BloscCodec(cname="zstd"), zarr.codecs.Crc32cCodec()]},
    {"compressors": [zarr.codecs.ZstdCodec()]},
    {"compressors": [zarr.codecs.Crc32cCodec()], "chunk_key_encoding": {"name": "v2", "separator": "/"}},
    {"compressors": [zarr.codecs.Crc32cCodec()], "chunk_key_encoding": {"name": "default", "separator": "."}},
    {"compressors": [zarr.codecs.Crc32cCodec()], "serializer": zarr.codecs.BytesCodec(endian="big")},
    {"compressors": [zarr.codecs.Crc32cCodec()], "filters": [zarr.codecs.TransposeCodec(order=(1, 0))]},
], ids=["gzip", "gzip+crc", "blosc-zstd", "zstd-no-crc", "v2-keys", "dot-keys", "big-endian", "transpose"])
def test_arrays_with_other_codecs_are_read_through_zarr(loc, codecs):
    array = sample((6, 7), "int32", seed=9)
    z = zarr.create_array(loc.path("arrays/z"), shape=array.shape, chunks=(4, 3), dtype="int32", fill_value=0,
                          **codecs)
    z[:] = array
    ref = ArrayRef(loc, "arrays/z")
    assert ref.layout()[3] is None
    np.testing.assert_array_equal(ref.read(), array)
    np.testing.assert_array_equal(ref.read(((1, 5), (2, 7))), array[1:5, 2:7])
    assert ref.read(((2, 2), (0, 7))).shape == (0, 7)


# -- damage: a StoreError, never a wrong answer ----------------------------------------------------------------------

def damaged(loc, compressor="lz4", dtype="float64"):
    ref = ArrayRef(loc, "arrays/d")
    array = sample((6, 6), dtype, seed=2)
    write_tiles(ref, array, (3, 3), compressor)
    ref.read()  # layout cached: damage after a first read must still be caught
    return ref, loc.path("arrays/d/c/1/0")


def flip(path, pos):
    data = bytearray(open(path, "rb").read())
    data[pos] ^= 0x40
    open(path, "wb").write(bytes(data))


@pytest.mark.parametrize("compressor", COMPRESSORS)
def test_a_missing_chunk_is_reported_not_read_as_zeros(loc, compressor):
    ref, chunk = damaged(loc, compressor)
    os.unlink(chunk)
    with pytest.raises(sz.StoreError, match=r"chunk 'c/1/0' of array .* is missing.*re-run the workflow"):
        ref.read()
    with pytest.raises(sz.StoreError, match="chunk .* is missing"):
        ref.read(((2, 4), (0, 1)))  # any box touching it
    assert ref.read(((0, 3), (0, 6))).shape == (3, 6)  # the rest still reads


@pytest.mark.parametrize("compressor", COMPRESSORS)
@pytest.mark.parametrize("where", ["first", "middle", "checksum"])
def test_a_byte_flipped_chunk_is_reported(loc, compressor, where):
    ref, chunk = damaged(loc, compressor)
    size = os.path.getsize(chunk)
    flip(chunk, {"first": 0, "middle": size // 2, "checksum": size - 1}[where])
    with pytest.raises(sz.StoreError, match=r"chunk 'c/1/0' of array .* does not match its checksum"):
        ref.read()
    with pytest.raises(sz.StoreError, match="re-run the workflow"):
        ref.read(((3, 4), (1, 2)))


@pytest.mark.parametrize("compressor", COMPRESSORS)
@pytest.mark.parametrize("keep", [0, 3, 0.5, -1])
def test_a_truncated_chunk_is_reported(loc, compressor, keep):
    ref, chunk = damaged(loc, compressor)
    data = open(chunk, "rb").read()
    n = keep if isinstance(keep, int) and keep >= 0 else (len(data) - 1 if keep == -1 else int(len(data) * keep))
    open(chunk, "wb").write(data[:n])
    with pytest.raises(sz.StoreError, match="c/1/0.*(checksum|damaged)"):
        ref.read()


def test_a_chunk_of_the_wrong_size_with_a_valid_checksum_is_reported(loc):
    ref, chunk = damaged(loc, "none")
    other = ArrayRef(loc, "arrays/small")
    write_array(other, np.ones((2, 2)), chunks=(2, 2), compressor="none")
    with open(loc.path("arrays/small/c/0/0"), "rb") as src, open(chunk, "wb") as dst:
        dst.write(src.read())  # a well-formed chunk of another array
    with pytest.raises(sz.StoreError, match=r"holds 32 bytes, not a chunk of shape \(3, 3\)"):
        ref.read()


def test_a_zarr_array_missing_an_empty_chunk_is_refused_not_zeros(loc):
    """zarr skips all-fill chunks by default; our store writes every chunk, so a missing one is damage."""
    z = zarr.create_array(loc.path("arrays/z"), shape=(4,), chunks=(2,), dtype="int8", fill_value=0,
                          compressors=_compressors("none"))
    z[:] = [1, 2, 0, 0]
    with pytest.raises(sz.StoreError, match="chunk 'c/1' of array .* is missing"):
        ArrayRef(loc, "arrays/z").read()


@pytest.mark.parametrize("keep", [0, 5])
def test_a_damaged_chunk_read_through_zarr_is_a_store_error(loc, keep):
    """zarr's codecs fail in their own ways (zstd: RuntimeError); each is a StoreError.  (Without a
    crc32c codec, zarr cannot tell every damaged chunk: our arrays always carry one.)"""
    z = zarr.create_array(loc.path("arrays/z"), shape=(10,), chunks=(4,), dtype="f8", fill_value=0,
                          compressors=[zarr.codecs.ZstdCodec()])
    z[:] = np.arange(1, 11)
    chunk = loc.path("arrays/z/c/1")
    open(chunk, "wb").write(open(chunk, "rb").read()[:keep])
    with pytest.raises(sz.StoreError, match="has a damaged chunk"):
        ArrayRef(loc, "arrays/z").read()


def metadata_damage():
    def edit(**change):
        return lambda meta, raw: json.dumps({**meta, **change}).encode()
    return {
        "empty": lambda meta, raw: b"",
        "truncated": lambda meta, raw: raw[: len(raw) // 2],
        "binary": lambda meta, raw: b"\xff\xfe\x00\x81",
        "flipped": lambda meta, raw: bytes([raw[0] ^ 0x01]) + raw[1:],
        "a list": lambda meta, raw: b"[1, 2]",
        "no shape": lambda meta, raw: json.dumps({k: v for k, v in meta.items() if k != "shape"}).encode(),
        "bad shape": edit(shape="ab"),
        "bad dtype": edit(data_type="float99"),
        "no chunk grid": edit(chunk_grid={}),
        "codecs not a list of objects": edit(codecs="bytes"),
        "codec names only": edit(codecs=["bytes", "crc32c"]),
        "no codecs": lambda meta, raw: json.dumps({k: v for k, v in meta.items() if k != "codecs"}).encode(),
    }


@pytest.mark.parametrize("case", sorted(metadata_damage()))
def test_damaged_metadata_is_a_store_error(loc, case):
    ref = ArrayRef(loc, "arrays/m")
    write_array(ref, np.arange(10.0), chunks=(4,))
    path = loc.path("arrays/m/zarr.json")
    raw = open(path, "rb").read()
    open(path, "wb").write(metadata_damage()[case](json.loads(raw), raw))
    ref.forget()  # another process, reading it for the first time
    with pytest.raises(sz.StoreError, match=r"arrays/m.*(damaged|cannot be opened).*re-run the workflow"):
        ref.read()


def test_missing_metadata_is_a_store_error(loc):
    ref = ArrayRef(loc, "arrays/m")
    with pytest.raises(sz.StoreError, match=r"the metadata of array .* is missing \(.*zarr.json\)"):
        ref.read()
    ref.write_block(((0, 4),), np.arange(4.0), (4,), (4,))  # written by a task, never committed
    with pytest.raises(sz.StoreError, match="the run did not commit the array"):
        ref.read()
    with pytest.raises(sz.StoreError):
        ref.open()


def test_an_unknown_compressor_is_a_store_error(loc):
    with pytest.raises(sz.StoreError, match="unknown compressor 'brotli'"):
        ArrayRef(loc, "arrays/x").write_block(((0, 2),), np.zeros(2), (2,), (2,), compressor="brotli")
    with pytest.raises(sz.StoreError, match="'none', 'lz4' or 'zstd'"):
        ArrayRef(loc, "arrays/x").commit((2,), "float64", (2,), compressor="brotli")


# -- external inputs --------------------------------------------------------------------------------------------------

def test_external_arrays_accept_zarr_arrays_and_read_boxes(tmp_path):
    array = sample((8, 9), "float32", seed=4)
    z = zarr.create_array(str(tmp_path / "ext"), shape=array.shape, chunks=(3, 3), dtype="float32",
                          compressors=[zarr.codecs.GzipCodec()])
    z[:] = array
    assert ExternalArray.accepts(z) and ExternalArray.accepts(zarr.open_array(str(tmp_path / "ext"), mode="r"))
    assert not ExternalArray.accepts(array) and not ExternalArray.accepts([1, 2]) and not ExternalArray.accepts(None)
    ext = ExternalArray(z, "img")
    assert ext.shape == (8, 9) and ext.dtype == np.float32 and ext.name == "img"
    np.testing.assert_array_equal(ext.read(), array)
    np.testing.assert_array_equal(ext.read(((2, 7), (0, 4))), array[2:7, 0:4])


@pytest.mark.filterwarnings("ignore:The data type")
@pytest.mark.parametrize("dtype", [str, [("a", "i4"), ("b", "f8")]], ids=["string", "structured"])
def test_external_arrays_must_be_numeric(dtype):
    z = zarr.create_array(zarr.storage.MemoryStore(), shape=(3,), dtype=dtype)
    with pytest.raises(sz.StoreError, match="input 'names' is a Zarr array of dtype .*; inputs must be numeric"):
        ExternalArray(z, "names")


def test_an_unreadable_external_array_is_a_store_error(tmp_path):
    z = zarr.create_array(str(tmp_path / "ext"), shape=(8,), chunks=(4,), dtype="int16",
                          compressors=[zarr.codecs.Crc32cCodec()])
    z[:] = np.arange(8)
    flip(str(tmp_path / "ext" / "c" / "1"), 0)
    ext = ExternalArray(z, "raw")
    np.testing.assert_array_equal(ext.read(((0, 4),)), np.arange(4))
    with pytest.raises(sz.StoreError, match=r"input 'raw' cannot be read in box \(\(4, 8\),\)"):
        ext.read(((4, 8),))


# -- per-process caches --------------------------------------------------------------------------------------------

def test_forget_store_drops_the_cached_arrays_of_one_store(tmp_path):
    a, b = resolve(tmp_path / "a"), resolve(tmp_path / "b")
    ra, rb = ArrayRef(a, "arrays/x"), ArrayRef(b, "arrays/x")
    write_array(ra, np.arange(4.0))
    write_array(rb, np.arange(3.0))
    ra.read(), ra.open(), rb.read()
    # the store at a is replaced behind this process's back (another run with overwrite)
    zarr.create_array(a.path("arrays/x"), shape=(6,), chunks=(6,), dtype="float64", overwrite=True,
                      compressors=_compressors("lz4"), config={"write_empty_chunks": True})[:] = np.arange(6.0)
    assert ra.layout()[0] == (4,)  # the layout is cached per process...
    forget_store(a.url)
    np.testing.assert_array_equal(ra.read(), np.arange(6.0))
    assert ra.open().shape == (6,)
    cached = {k[0] for k in arrays_mod._OPEN}
    assert b.url in cached  # other stores keep theirs
    forget_store(b.url)
    assert not [k for k in arrays_mod._OPEN if k[0] == b.url]


def test_commit_refreshes_this_processes_view_of_the_array(loc):
    ref = ArrayRef(loc, "arrays/x")
    write_array(ref, np.arange(4.0), chunks=(2,))
    assert ref.layout()[0] == (4,)
    write_array(ref, np.arange(5.0), chunks=(2,))
    assert ref.layout()[0] == (5,)
    np.testing.assert_array_equal(ref.read(), np.arange(5.0))


# -- the chunk cache and the "auto" compressor (issue 23) -----------------------------------------
def test_a_rewritten_chunk_is_never_served_from_the_chunk_cache(tmp_path):
    ref = ArrayRef(resolve(str(tmp_path)), "arrays/a")
    first = np.arange(16, dtype=np.float32).reshape(4, 4)
    ref.write_block(((0, 4), (0, 4)), first, (4, 4), (4, 4), "zstd")
    ref.commit((4, 4), "float32", (4, 4), "zstd")
    assert np.array_equal(ref.read(), first)
    assert np.array_equal(ref.read(((1, 3), (1, 3))), first[1:3, 1:3])  # served from the cache
    ref.write_block(((0, 4), (0, 4)), first + 100, (4, 4), (4, 4), "zstd")  # a new file: a new identity
    got = ref.read()
    assert np.array_equal(got, first + 100)
    got[0, 0] = -1  # what read returns is the caller's own copy
    assert ref.read()[0, 0] == 100


def test_the_chunk_cache_stays_within_its_bytes():
    cache = arrays_mod.BlockCache(4000)
    for i in range(10):
        cache.put(("k", i), np.zeros(100, np.float64))  # 800 bytes each
    assert cache.size <= 4000 and cache.get(("k", 0)) is None and cache.get(("k", 9)) is not None
    assert not cache.get(("k", 9)).flags.writeable


def test_auto_stores_floats_uncompressed_and_the_rest_with_zstd(tmp_path):
    location = resolve(str(tmp_path))
    for name, values, pipeline in (("f", np.random.default_rng(0).normal(size=(6, 5)).astype(np.float32), "none"),
                                   ("m", np.arange(30).reshape(6, 5) % 3 == 0, "zstd")):
        ref = ArrayRef(location, f"arrays/{name}", compressor="auto")
        ref.write_block(((0, 6), (0, 5)), values, (6, 5), (3, 5))
        ref.commit((6, 5), str(values.dtype), (3, 5))
        meta = json.loads((tmp_path / "arrays" / name / "zarr.json").read_text())
        assert arrays_mod._pipeline(meta) == pipeline
        assert np.array_equal(ref.read(), values)
        assert np.array_equal(zarr.open_array(str(tmp_path / "arrays" / name), mode="r")[:], values)


def test_an_in_memory_input_is_compressed_only_when_a_sample_compresses(tmp_path):
    noise = np.random.default_rng(1).normal(size=(64, 64)).astype(np.float32)
    assert arrays_mod.sampled_compressor(noise, (32, 32)) == "none"
    assert arrays_mod.sampled_compressor(np.zeros((64, 64), np.float32), (32, 32)) == "zstd"
    ref = ArrayRef(resolve(str(tmp_path)), "arrays/z", compressor="auto")
    digests: list[str] = []
    write_array(ref, np.zeros((64, 64), np.float32), (16, 16), digests=digests)
    meta = json.loads((tmp_path / "arrays" / "z" / "zarr.json").read_text())
    assert arrays_mod._pipeline(meta) == "zstd" and len(digests) == 16


def test_write_array_digests_its_chunks_in_chunk_order_whatever_the_threads(tmp_path):
    from subzero.fingerprint import block_digest

    values = sample((50, 40), "int32", seed=3)
    digests: list[str] = []
    chunks = write_array(ArrayRef(resolve(str(tmp_path)), "arrays/d"), values, (16, 16), digests=digests)
    expected = [block_digest(values[tuple(slice(lo, hi) for lo, hi in t.box)])
                for t in tile_grid(values.shape, (0, 1), chunks)]
    assert digests == expected


def test_a_held_array_reads_like_its_stored_array_within_its_box():
    """A fused task's in-memory output: boxes inside its held box read as copies, with the
    layout its stored array will have; a box outside it is a StoreError, never wrong cells."""
    from subzero.store.arrays import HeldArray, output_compressor

    block = np.arange(20.0, dtype=np.float32).reshape(4, 5)
    held = HeldArray((10, 10), (4, 4), ((2, 6), (3, 8)), block, "none")
    got = held.read(((3, 5), (4, 6)))
    np.testing.assert_array_equal(got, block[1:3, 1:3])
    got[:] = -1  # a copy: the held block is unchanged
    assert block[1, 1] == 6.0
    assert held.layout() == ((10, 10), (4, 4), np.dtype(np.float32), "none")
    assert output_compressor([held]) == "auto" and output_compressor([HeldArray((1,), (1,), ((0, 1),),
                                                                                np.zeros(1), "zstd")]) == "zstd"
    with pytest.raises(sz.StoreError, match="outside the held box"):
        held.read(((1, 5), (4, 6)))


def test_a_tile_computed_in_its_held_arrays_cells_is_not_copied():
    """`MemoryArray.target` gives a tile's writable cells of the whole array (made once, for every
    tile); `write_block` of those very cells copies nothing, of any other block copies it in; a
    block kept whole (`write_whole`, not writable) is never written into: a new array is made."""
    from subzero.store.arrays import MemoryArray

    held = MemoryArray("n")
    top = held.target(((0, 2), (0, 4)), (4, 4), (2, 4), np.float64)
    np.negative(np.arange(8.0).reshape(2, 4), out=top)
    block = held.block
    held.write_block(((0, 2), (0, 4)), top, (4, 4), (2, 4))
    held.write_block(((2, 4), (0, 4)), np.arange(8.0, 16.0).reshape(2, 4), (4, 4), (2, 4))
    assert held.block is block and np.shares_memory(top, held.block)
    np.testing.assert_array_equal(held.read(), np.r_[-np.arange(8.0), np.arange(8.0, 16.0)].reshape(4, 4))
    kept = np.zeros((4, 4))
    kept.flags.writeable = False
    held.write_whole(kept, (4, 4))
    assert not np.shares_memory(held.target(((0, 1), (0, 4)), (4, 4), (4, 4), np.float64), kept)


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "complex128"])
@pytest.mark.parametrize("compressor", ["none", "zstd"])
def test_the_metadata_checksum_is_that_of_the_zarr_json_written(tmp_path, dtype, compressor):
    """Computed without writing (zarr asked once per kind of array, the shapes put in), it is the
    checksum of the ``zarr.json`` a commit writes, for every shape: zarr's own document."""
    import xxhash

    from subzero.store.arrays import metadata_checksum

    for k, (shape, chunks) in enumerate([((5, 7), (2, 3)), ((1024, 1000), (256, 256)), ((9,), (4,)), ((), ())]):
        ref = ArrayRef(resolve(str(tmp_path)), f"arrays/a{k}", compressor=compressor)
        ref.commit(shape, dtype, chunks, compressor)
        written = (tmp_path / "arrays" / f"a{k}" / "zarr.json").read_bytes()
        assert written == arrays_mod._metadata(shape, chunks, dtype, compressor)  # zarr's own, byte for byte
        assert metadata_checksum(shape, chunks, dtype, compressor) == xxhash.xxh3_64_hexdigest(written)


@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from(["<f8", ">f8", "<f4", ">i4", "<i2", "u1", "?", "<c8"]),
       shape=st.lists(st.integers(1, 7), min_size=0, max_size=3), step=st.integers(1, 3),
       compressor=st.sampled_from(["none", "zstd", "lz4"]))
def test_a_chunk_encodes_as_zarr_writes_it_and_decodes_to_its_cells(dtype, shape, step, compressor):
    # any strides and byte order: one copy into the chunk's buffer (none compressed), which is
    # little-endian C order then the CRC32C, as zarr's bytes + crc32c codecs write it
    import google_crc32c

    from subzero.store.arrays import decode_chunk, encode_chunk

    rng = np.random.default_rng(len(shape) + step)
    full = rng.integers(0, 100, size=[n * step for n in shape]).astype(dtype)
    chunk = full[tuple(slice(None, None, step) for _ in shape)] if shape else np.asarray(full).reshape(())
    data = bytes(encode_chunk(chunk, compressor))
    assert int.from_bytes(data[-4:], "little") == google_crc32c.value(data[:-4])
    if compressor == "none":
        assert data[:-4] == np.ascontiguousarray(chunk, dtype=chunk.dtype.newbyteorder("<")).tobytes()
    np.testing.assert_array_equal(decode_chunk(data, chunk.shape, chunk.dtype, compressor, "a chunk"), chunk)

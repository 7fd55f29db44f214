"""Lineage shards: `write_shard` + `ShardReader` give back exactly what the encoders wrote, lookups
honour their deadline, every damaged file is a `StoreError` (never a crash), readers never write
to the store, large batches grow the LMDB map, and the per-process cache closes what it evicts."""

from __future__ import annotations

import multiprocessing
import os
import re
import subprocess
import sys
import textwrap
import time
from unittest import mock

import lmdb
import numpy as np
import pytest

import subzero as sz
from subzero.catalog import FileRecord, ShardRecord
from subzero.encoders import encoder_for, merge_tiles
from subzero.encoders.base import Batch, FullEncoder, scan
from subzero.encoders.codec import CELL, OUT, PAIR, bytes_to_keys, keys_to_bytes, make_keys
from subzero.errors import LookupTimeout
from subzero.frontier import Frontier
from subzero.modes import Strategy
from subzero.pairs import FullPairs, PayloadPairs
from subzero.store import resolve
from subzero.store import shards as shards_mod
from subzero.store.shards import ShardReader, close_all, file_checksum, write_shard, write_tiles_shard

OUT_SHAPE, IN_SHAPES = (6, 5), ((6, 5), (4,))
SHAPES = (OUT_SHAPE, IN_SHAPES)
NDIMS = {OUT: 2, 0: 2, 1: 1}
FULL = ["FullOne/backward", "FullOne/forward", "FullMany/backward", "FullMany/forward"]
PAY = ["PayOne", "PayMany"]
INDEX_SLOTS = {"FullMany/backward": [OUT], "FullMany/forward": [0, 1], "PayMany": [OUT]}


def full_pairs() -> FullPairs:
    """Four pairs: out {0, 1} <- x {5}, y {0}; out {1, 29} <- x {6, 7}, y {}; out {12} <- x {29}, y {1, 3};
    out {} <- x {2}, y {2} (a pair without out cells)."""
    out = [[0, 1], [1, 29], [12], []]
    x = [[5], [6, 7], [29], [2]]
    y = [[0], [], [1, 3], [2]]

    def csr(groups):
        return np.array([c for g in groups for c in g], np.int64), np.cumsum([0] + [len(g) for g in groups])
    (oi, op), (xi, xp), (yi, yp) = csr(out), csr(x), csr(y)
    return FullPairs(oi, op, (xi, yi), (xp, yp))


def payload_pairs() -> PayloadPairs:
    """out {0, 7} -> b"a"; out {7} -> b"bb"; out {29} -> b"" (cell 7 holds two payloads)."""
    return PayloadPairs(np.array([0, 7, 7, 29]), np.array([0, 2, 3, 4]), [b"a", b"bb", b""])


def encode(strategy: str, tile: int = 0) -> Batch:
    enc = encoder_for(Strategy.parse(strategy))
    pairs = full_pairs() if strategy in FULL else payload_pairs()
    return merge_tiles([enc.encode(pairs, tile, SHAPES)])


def write(loc, strategy: str, stem: str = "t000000-a1", directory: str = "lineage/n/s") -> tuple[ShardRecord, Batch]:
    batch = encode(strategy)
    files, index_bytes = write_shard(loc, directory, stem, batch)
    return ShardRecord(0, stem, files, keys=len(batch.keys), nbytes=batch.nbytes, index_bytes=index_bytes), batch


def reader(loc, record, directory="lineage/n/s", deadline=None) -> ShardReader:
    return ShardReader(loc, directory, record, NDIMS, deadline)


def snapshot(directory) -> dict[str, tuple[bytes, int]]:
    out = {}
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        with open(path, "rb") as fh:
            out[name] = (fh.read(), os.stat(path).st_mtime_ns)
    return out


@pytest.fixture
def loc(tmp_path):
    close_all()  # a fresh process: nothing cached, nothing verified
    yield resolve(tmp_path / "s")
    close_all()


# -- writing and reading real encodings ----------------------------------------------------------------------------

@pytest.mark.parametrize("strategy", FULL + PAY)
def test_a_shard_holds_exactly_its_batch(loc, strategy):
    record, batch = write(loc, strategy)
    suffixes = [".mdb"] + [f".{slot}{ext}" for slot in INDEX_SLOTS.get(strategy, []) for ext in (".dat", ".idx")]
    assert [f.suffix for f in record.files] == suffixes
    directory = loc.path("lineage/n/s")
    assert sorted(os.listdir(directory)) == sorted(record.name + s for s in suffixes)  # no lock or temp files
    for f in record.files:
        path = os.path.join(directory, record.name + f.suffix)
        assert f.size == os.path.getsize(path) and f.xxh3 == file_checksum(path)
    assert record.index_bytes == sum(f.size for f in record.files if f.suffix != ".mdb")
    r = reader(loc, record)
    keys = bytes_to_keys(batch.keys)
    got_keys, got_values = r.get_many(keys)
    assert got_keys.tolist() == keys.tolist() and got_values == batch.values
    for kind in (CELL, PAIR):  # a scan is one key kind, in key order
        want = [(k, v) for k, v in zip(batch.keys, batch.values) if k[0] >> 4 == kind]
        got_keys, got_values = scan(r, kind)
        assert keys_to_bytes(got_keys) == [k for k, _ in want] and got_values == [v for _, v in want]
    assert scan(r, 7)[1] == [] and scan(r, 7)[0].size == 0


@pytest.mark.parametrize("strategy", FULL)
def test_full_shards_answer_like_the_pairs_in_memory(loc, strategy):
    record, _ = write(loc, strategy)
    enc, memory = encoder_for(Strategy.parse(strategy)), full_pairs()
    r = reader(loc, record)
    loaded = enc.load(r, SHAPES)

    def sets(p):
        return sorted((tuple(p.out_ids[p.out_ptr[k]:p.out_ptr[k + 1]].tolist()),
                       tuple(tuple(p.in_ids[i][p.in_ptr[i][k]:p.in_ptr[i][k + 1]].tolist()) for i in range(2)))
                      for k in range(p.n_pairs))
    assert sets(loaded) == sets(memory)
    rng = np.random.default_rng(0)
    for _ in range(5):
        out = Frontier.of_ids(rng.choice(30, 4), OUT_SHAPE)
        for i, shape in enumerate(IN_SHAPES):
            size = int(np.prod(shape))
            assert set(enc.backward(r, out, i, SHAPES).tolist()) == set(memory.backward(out, i).tolist())
            inn = Frontier.of_ids(rng.choice(size, 3), shape)
            assert set(enc.forward(r, inn, i, SHAPES).tolist()) == set(memory.forward(inn, i).tolist())


@pytest.mark.parametrize("strategy", PAY)
def test_payload_shards_answer_like_the_pairs_in_memory(loc, strategy):
    record, _ = write(loc, strategy)
    enc = encoder_for(Strategy.parse(strategy))
    r = reader(loc, record)

    def per_cell(p):
        return sorted((int(c), p.payloads[k]) for k in range(p.n_pairs)
                      for c in p.out_ids[p.out_ptr[k]:p.out_ptr[k + 1]])
    assert per_cell(enc.load(r, SHAPES)) == per_cell(payload_pairs())
    got = enc.lookup(r, Frontier.of_ids(np.array([7, 8]), OUT_SHAPE), SHAPES)
    assert per_cell(got) == [(7, b"a"), (7, b"bb")]
    assert enc.lookup(r, Frontier.of_ids(np.array([3]), OUT_SHAPE), SHAPES).n_pairs == 0


@pytest.mark.parametrize("strategy", list(INDEX_SLOTS))
def test_intersect_finds_the_pairs_whose_boxes_meet(loc, strategy):
    record, batch = write(loc, strategy)
    r = reader(loc, record)
    for slot in INDEX_SLOTS[strategy]:
        ids, mins, maxs = batch.boxes[slot]
        ndim = mins.shape[1]
        rng = np.random.default_rng(slot)
        shape = OUT_SHAPE if slot == OUT else IN_SHAPES[slot]
        for _ in range(10):
            lo = np.array([rng.integers(0, n) for n in shape], float)
            hi = lo + rng.integers(0, 3, ndim)
            want = {int(k) for k, a, b in zip(ids, mins, maxs) if np.all(a <= hi) and np.all(b >= lo)}
            assert set(r.intersect(slot, lo[None], hi[None]).tolist()) == want
        assert r.intersect(slot, np.empty((0, ndim)), np.empty((0, ndim))).size == 0


@pytest.mark.parametrize("strategy", FULL + PAY)
def test_a_shared_shard_reads_each_tile_as_a_shard_of_its_own(loc, strategy):
    """Tiles written together (`write_tiles_shard`): each tile's record reads exactly what the tile's own
    shard holds (keys, scans, R-tree hits), though the tiles' cell keys are the same keys."""
    tiles = [0, 2, 5]
    enc = encoder_for(Strategy.parse(strategy))
    pairs = full_pairs() if strategy in FULL else payload_pairs()
    batches = [merge_tiles([enc.encode(pairs, t, SHAPES)]) for t in tiles]
    files, index_bytes = write_tiles_shard(loc, "lineage/n/shared", "t000000-b1", list(zip(tiles, batches)))
    assert sorted(os.listdir(loc.path("lineage/n/shared"))) == sorted("t000000-b1" + f.suffix for f in files)
    assert index_bytes == sum(f.size for f in files if f.suffix != ".mdb")
    for t, batch in zip(tiles, batches):
        own_files, _ = write_shard(loc, "lineage/n/own", f"t{t:06d}-a1", batch)
        own = reader(loc, ShardRecord(t, f"t{t:06d}-a1", own_files), "lineage/n/own")
        shared = reader(loc, ShardRecord(t, "t000000-b1", files, file_share=1), "lineage/n/shared")
        every = np.unique(np.concatenate([bytes_to_keys(b.keys) for b in batches]))
        got, want = shared.get_many(every), own.get_many(every)
        assert got[0].tolist() == want[0].tolist() == bytes_to_keys(batch.keys).tolist() and got[1] == want[1]
        lo, hi = np.array([0, 1 << 62], np.uint64), np.array([1 << 62, (1 << 64) - 1], np.uint64)
        got, want = shared.scan_ranges(lo, hi), own.scan_ranges(lo, hi)  # every key there is, in order
        assert got[0].tolist() == want[0].tolist() == bytes_to_keys(batch.keys).tolist() and got[1] == want[1]
        for slot, (ids, mins, maxs) in batch.boxes.items():
            lo, hi = np.zeros((1, mins.shape[1])), np.full((1, mins.shape[1]), 99.0)
            assert sorted(shared.intersect(slot, lo, hi).tolist()) == sorted(own.intersect(slot, lo, hi).tolist()) \
                == sorted(ids.tolist())
        if strategy in PAY:
            assert enc.load(shared, SHAPES).payloads == enc.load(own, SHAPES).payloads


def test_a_shared_shards_tiles_must_ascend(loc):
    batch = encode("FullOne/backward")
    with pytest.raises(sz.StoreError, match="distinct and ascending"):
        write_tiles_shard(loc, "lineage/n/s", "t000000-c1", [(3, batch), (1, batch)])


def test_get_many_returns_only_the_keys_found(loc):
    record, batch = write(loc, "FullOne/backward")
    r = reader(loc, record)
    present = bytes_to_keys(batch.keys)[:2]
    absent = make_keys(CELL, OUT, np.array([3, 4]))  # out cells 3 and 4 have no lineage
    keys, values = r.get_many(np.concatenate([absent[:1], present, absent[1:]]))
    assert keys.tolist() == present.tolist() and values == batch.values[:2]
    keys, values = r.get_many(np.empty(0, np.uint64))
    assert keys.size == 0 and values == []


def test_an_empty_batch_is_a_valid_shard(loc):
    files, index_bytes = write_shard(loc, "lineage/n/s", "empty", merge_tiles([]))
    assert [f.suffix for f in files] == [".mdb"] and index_bytes == 0
    r = reader(loc, ShardRecord(0, "empty", files))
    assert scan(r, CELL)[1] == [] and r.get_many(make_keys(PAIR, 0, np.arange(3)))[1] == []


def test_a_retried_attempt_of_the_same_name_starts_afresh(loc):
    write(loc, "FullMany/backward")
    record, batch = write(loc, "FullMany/backward")  # same stem: its files are replaced, not appended to
    r = reader(loc, record)
    assert scan(r, PAIR)[1] == [v for k, v in zip(batch.keys, batch.values) if k[0] >> 4 == PAIR]
    assert len(r.intersect(OUT, np.zeros((1, 2)), np.full((1, 2), 10.0))) == len(batch.boxes[OUT][0])


def test_shards_on_an_fsspec_store_are_read_through_a_local_copy(tmp_path):
    close_all()
    loc = resolve(f"memory://test-shards-{os.getpid()}/run")
    try:
        record, batch = write(loc, "FullMany/forward")
        assert sorted(loc.listdir("lineage/n/s")) == sorted(record.name + f.suffix for f in record.files)
        r = reader(loc, record)
        assert r.get_many(bytes_to_keys(batch.keys))[1] == batch.values
        assert set(r.intersect(0, np.array([[0.0, 0.0]]), np.array([[5.0, 4.0]])).tolist()) == \
            set(batch.boxes[0][0].tolist())
        close_all()
        loc.remove("lineage/n/s", record.name + ".0.idx")
        missing = ShardRecord(0, "other", record.files)
        with pytest.raises(sz.StoreError, match=r"lineage shard .*other is missing \(memory://"):
            reader(loc, missing)
    finally:
        close_all()
        loc.remove()


# -- deadlines ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("strategy", ["FullOne/backward", "PayMany"])
def test_lookups_past_their_deadline_time_out(loc, strategy):
    record, batch = write(loc, strategy)
    late = reader(loc, record, deadline=time.perf_counter() - 1.0)
    with pytest.raises(LookupTimeout):
        late.get_many(bytes_to_keys(batch.keys))
    with pytest.raises(LookupTimeout):
        scan(late, PAIR)
    on_time = reader(loc, record, deadline=time.perf_counter() + 60.0)
    assert on_time.get_many(bytes_to_keys(batch.keys))[1] == batch.values


def test_a_long_scan_checks_its_deadline_between_batches(loc):
    n = 3 * shards_mod._CHUNK
    keys = make_keys(PAIR, 0, np.arange(n))
    batch = Batch(keys_to_bytes(keys), [b"v"] * n, {}, n)
    files, _ = write_shard(loc, "d", "long", batch)
    r = ShardReader(loc, "d", ShardRecord(0, "long", files), {}, deadline=time.perf_counter() + 3600)
    ticks = iter([0.0] + [1e9] * 10)  # the deadline passes after the first check
    with mock.patch.object(shards_mod.time, "perf_counter", lambda: next(ticks)):
        with pytest.raises(LookupTimeout):
            scan(r, PAIR)
    ticks = iter([0.0] + [1e9] * 10)
    with mock.patch.object(shards_mod.time, "perf_counter", lambda: next(ticks)):
        with pytest.raises(LookupTimeout):
            r.get_many(keys)


# -- damage --------------------------------------------------------------------------------------------------------

def damage(path: str, how: str) -> None:
    if how == "delete":
        os.unlink(path)
        return
    data = bytearray(open(path, "rb").read())
    if how == "flip":
        data[len(data) // 2] ^= 0x10
    elif how == "zero":
        data = b""
    elif how == "half":
        data = data[: len(data) // 2]
    with open(path, "wb") as fh:
        fh.write(bytes(data))


MESSAGES = {"delete": r"is missing", "flip": r"does not match its checksum",
            "zero": r"has 0 bytes, the manifest says \d+", "half": r"has \d+ bytes, the manifest says \d+"}


@pytest.mark.parametrize("how", sorted(MESSAGES))
@pytest.mark.parametrize("suffix", [".mdb", ".255.dat", ".255.idx"])
def test_every_damaged_file_is_a_store_error(loc, suffix, how):
    record, _ = write(loc, "FullMany/backward")
    damage(loc.path("lineage/n/s", record.name + suffix), how)
    with pytest.raises(sz.StoreError, match=rf"lineage shard lineage/n/s/{record.name}\b") as err:
        reader(loc, record)
    message = str(err.value)
    assert re.search(MESSAGES[how], message) and suffix in message and "re-run" in message, message
    assert isinstance(err.value, OSError)


def test_damage_after_a_first_read_is_caught_by_the_next_process(loc):
    record, batch = write(loc, "FullOne/forward")
    assert scan(reader(loc, record), PAIR)[1]
    damage(loc.path("lineage/n/s", record.name + ".mdb"), "flip")
    close_all()  # what a new process sees
    with pytest.raises(sz.StoreError, match="does not match its checksum"):
        reader(loc, record)


def test_a_manifest_naming_another_file_size_is_refused(loc):
    record, _ = write(loc, "PayOne")
    f = record.files[0]
    wrong = ShardRecord(0, record.name, (FileRecord(f.suffix, f.size + 4096, f.xxh3),))
    with pytest.raises(sz.StoreError, match="the manifest says"):
        reader(loc, wrong)


TRUNCATED = textwrap.dedent("""
    import os, sys
    import numpy as np
    from subzero.catalog import FileRecord, ShardRecord
    from subzero.encoders import encoder_for, merge_tiles
    from subzero.encoders.base import scan
    from subzero.encoders.codec import CELL
    from subzero.errors import StoreError
    from subzero.modes import Strategy
    from subzero.pairs import PayloadPairs
    from subzero.store import resolve
    from subzero.store.shards import ShardReader, file_checksum, write_shard

    root, how, trust = sys.argv[1], sys.argv[2], sys.argv[3] == "trust"
    loc = resolve(root)
    n = 20000  # a shard of many pages: reading past a cut mapping would be SIGBUS
    pairs = PayloadPairs(np.arange(n), np.arange(n + 1), [bytes([k % 251]) * 40 for k in range(n)])
    batch = merge_tiles([encoder_for(Strategy.parse("PayOne")).encode(pairs, 0, ((200, 100), ()))])
    files, _ = write_shard(loc, "d", "big", batch)
    path = loc.path("d", "big.mdb")
    os.truncate(path, 0 if how == "zero" else os.path.getsize(path) // 2)
    if trust:  # a manifest that agrees with the cut file: only LMDB's own page count can tell
        files = (FileRecord(".mdb", os.path.getsize(path), file_checksum(path)),)
    try:
        got = scan(ShardReader(loc, "d", ShardRecord(0, "big", files), {}), CELL)
    except StoreError as exc:
        print("StoreError:", exc)
        sys.exit(3)
    print("read", len(got[1]), "entries")
""")


@pytest.mark.parametrize("trust", ["manifest", "trust"])
@pytest.mark.parametrize("how", ["zero", "half"])
def test_a_truncated_lmdb_file_is_a_store_error_never_sigbus(tmp_path, how, trust):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in [os.getcwd(), os.environ.get("PYTHONPATH")] if p)}
    done = subprocess.run([sys.executable, "-c", TRUNCATED, str(tmp_path / "s"), how, trust], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr[-2000:])  # -7 would be SIGBUS
    assert "StoreError: lineage shard d/big:" in done.stdout and "re-run the workflow" in done.stdout


# -- readers never write ---------------------------------------------------------------------------------------------

def test_a_hundred_reads_leave_the_shard_files_untouched(loc):
    record, batch = write(loc, "FullMany/forward")
    directory = loc.path("lineage/n/s")
    before = snapshot(directory)
    enc = encoder_for(Strategy.parse("FullMany/forward"))
    frontier = Frontier.of_ids(np.array([5, 6]), IN_SHAPES[0])
    for k in range(100):
        if k % 10 == 0:
            close_all()  # reopen from the files now and then, as new processes do
        r = reader(loc, record)
        assert set(enc.forward(r, frontier, 0, SHAPES).tolist()) == {0, 1, 29}
        scan(r, PAIR), r.get_many(bytes_to_keys(batch.keys[:3])), r.intersect(1, np.zeros((1, 1)), np.ones((1, 1)))
    close_all()
    assert snapshot(directory) == before  # same names (no lock files), bytes and modification times


def _read_as_nobody(root: str, record: ShardRecord, conn) -> None:
    """In a forked child: drop root, then read the read-only shard."""
    try:
        os.setgid(65534)
        os.setuid(65534)
    except OSError as exc:
        conn.send(("no setuid", repr(exc), 0))
        conn.close()
        return
    try:
        close_all()
        directory = os.path.join(root, "lineage/n/s")
        writable = os.access(directory, os.W_OK)
        r = ShardReader(resolve(root), "lineage/n/s", record, NDIMS)
        found = len(scan(r, PAIR)[1]) + len(r.intersect(OUT, np.zeros((1, 2)), np.full((1, 2), 9.0)))
        close_all()
        conn.send(("ok", writable, found))
    except BaseException as exc:  # report everything to the parent
        conn.send(("error", repr(exc), 0))
    finally:
        conn.close()


def test_a_read_only_store_still_answers(tmp_path):
    """chmod -R a-w, then read.  Root ignores permission bits, so as root the read runs in a forked
    child that drops to the unprivileged user ``nobody`` (skipped where that is not possible)."""
    import tempfile

    root = tempfile.mkdtemp(prefix="subzero-ro-")  # outside pytest's private (0700) tmp tree
    os.chmod(root, 0o755)
    close_all()
    loc = resolve(root)
    try:
        record, batch = write(loc, "FullMany/backward")
        want = sum(1 for k in batch.keys if k[0] >> 4 == PAIR) + len(batch.boxes[OUT][0])
        for dirpath, dirs, files in os.walk(root):
            for name in files:
                os.chmod(os.path.join(dirpath, name), 0o444)
            os.chmod(dirpath, 0o555)
        if os.geteuid() != 0:
            assert not os.access(loc.path("lineage/n/s"), os.W_OK)
            r = reader(loc, record)
            assert len(scan(r, PAIR)[1]) + len(r.intersect(OUT, np.zeros((1, 2)), np.full((1, 2), 9.0))) == want
            return
        if not hasattr(os, "fork"):
            pytest.skip("running as root without fork: chmod cannot make the store read-only for this process")
        ctx = multiprocessing.get_context("fork")
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_read_as_nobody, args=(root, record, child))
        proc.start()
        child.close()
        got = parent.recv() if parent.poll(60) else ("error", "no answer", 0)
        proc.join(30)
        if got[0] == "no setuid":
            pytest.skip(f"running as root and cannot drop privileges here ({got[1]})")
        assert got[0] == "ok", got
        assert got[1] is False, "the store should not be writable for the reader"
        assert got[2] == want
    finally:
        for dirpath, dirs, files in os.walk(root):
            os.chmod(dirpath, 0o755)
        import shutil

        shutil.rmtree(root, ignore_errors=True)


# -- map growth, cache -------------------------------------------------------------------------------------------

def test_a_batch_larger_than_its_estimate_grows_the_map(loc):
    n = 1500
    rng = np.random.default_rng(1)
    values = [rng.bytes(int(rng.integers(2000, 6000))) for _ in range(n)]  # ~6 MB, overflow pages
    keys = keys_to_bytes(make_keys(PAIR, 0, np.arange(n)))

    class Underestimated(Batch):
        @property
        def nbytes(self):  # an estimate far below the real size: the first map is too small
            return 1000
    sizes = []
    real_open = lmdb.open

    def spy(path, **kw):
        sizes.append(kw["map_size"])
        return real_open(path, **kw)
    with mock.patch.object(shards_mod.lmdb, "open", spy):
        files, _ = write_shard(loc, "d", "big", Underestimated(keys, values, {}, n))
    assert len(sizes) >= 3 and all(b == 2 * a for a, b in zip(sizes, sizes[1:]))  # doubled until it fit
    r = ShardReader(loc, "d", ShardRecord(0, "big", files), {})
    got_keys, got_values = scan(r, PAIR)
    assert keys_to_bytes(got_keys) == keys and got_values == values
    assert r.get_many(make_keys(PAIR, 0, np.array([n - 1, 0])))[1] == [values[n - 1], values[0]]


def test_a_batch_of_several_megabytes_round_trips(loc):
    n = 400
    values = [bytes([k % 256]) * (10_000 + k) for k in range(n)]  # ~4 MB
    keys = keys_to_bytes(make_keys(CELL, OUT, np.arange(n) * 7))
    files, _ = write_shard(loc, "d", "mb", Batch(keys, values, {}, n))
    assert files[0].size > 4_000_000
    r = ShardReader(loc, "d", ShardRecord(0, "mb", files), {})
    assert scan(r, CELL)[1] == values


def test_the_cache_keeps_cache_size_shards_and_closes_the_evicted(loc):
    records = [write(loc, "FullMany/backward", stem=f"t{k:06d}-a")[0] for k in range(4)]
    with mock.patch.object(shards_mod, "CACHE_SIZE", 2):
        readers = []
        for rec in records[:3]:
            r = reader(loc, rec)
            r.intersect(OUT, np.zeros((1, 2)), np.ones((1, 2)))  # opens its R-tree (a private copy)
            readers.append(r)
        assert len(shards_mod._CACHE) == 2
        evicted = readers[0]._opened
        with pytest.raises(lmdb.Error):
            evicted.env.info()  # closed
        assert evicted.indexes[OUT]._idx is None  # its R-tree closed, private copy removed
        # a reader kept past its shard's eviction gets a StoreError (never a crash); a new one reopens it
        with pytest.raises(sz.StoreError):
            scan(readers[0], PAIR)
        assert scan(reader(loc, records[0]), PAIR)[1]
        assert scan(readers[2], PAIR)[1]  # the most recent survived
        assert len(shards_mod._CACHE) == 2
        again = reader(loc, records[0])
        assert again._opened is reader(loc, records[0])._opened  # cached: opened once


def test_close_all_closes_and_forgets_every_shard(loc):
    record, _ = write(loc, "PayMany")
    r = reader(loc, record)
    r.intersect(OUT, np.zeros((1, 2)), np.ones((1, 2)))
    opened = r._opened
    copy = opened.indexes[OUT]._tmp
    assert copy and os.path.isdir(copy)
    close_all()
    assert not shards_mod._CACHE and not shards_mod._VERIFIED
    with pytest.raises(lmdb.Error):
        opened.env.info()
    assert not os.path.exists(copy)
    damage(loc.path("lineage/n/s", record.name + ".mdb"), "flip")
    with pytest.raises(sz.StoreError, match="checksum"):  # verified again after close_all
        reader(loc, record)


def test_threads_opening_one_shard_at_once_share_one_open(loc):
    """LMDB refuses a second open of one environment in a process: threads that miss the cache
    together wait for the first one's open instead of failing (which a query took for damage)."""
    import threading

    record, _ = write(loc, "PayMany")
    close_all()
    barrier = threading.Barrier(8)
    got: list = []
    errors: list = []

    def open_it() -> None:
        barrier.wait()
        try:
            got.append(reader(loc, record)._opened)
        except BaseException as exc:  # noqa: BLE001  (asserted below)
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors and len(got) == 8 and all(o is got[0] for o in got)
    assert scan(reader(loc, record), PAIR)[1]

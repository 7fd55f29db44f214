"""The run store: never overwrites, refuses what is not a store, keeps arrays immutable, and
commits a node's lineage atomically."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import subzero as sz
import subzero.store as store_module
from subzero.encoders import Batch, encoder_for, merge_tiles
from subzero.encoders.codec import CELL, OUT, PAIR, keys_to_bytes, make_keys
from subzero.modes import Strategy
from subzero.pairs import FullPairs
from subzero.store import FORMAT, RunStore

SHAPES = ((4, 4), ((4, 4),))
NDIMS = {OUT: 2, 0: 2}


def tree(root) -> dict[str, bytes]:
    """Every file under ``root`` and its bytes."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, root)] = fh.read()
    return out


def example_pairs() -> FullPairs:
    """Three pairs over 4 x 4 arrays: out {0, 1} <- in {5}; out {1} <- in {6, 7}; out {15} <- in {0}."""
    return FullPairs(np.array([0, 1, 1, 15]), np.array([0, 2, 3, 4]),
                     (np.array([5, 6, 7, 0]),), (np.array([0, 1, 3, 4]),))


def batch_for(strategy: str, pairs: FullPairs | None = None) -> Batch:
    enc = encoder_for(Strategy.parse(strategy))
    return merge_tiles([enc.encode(example_pairs() if pairs is None else pairs, 0, SHAPES)])


@pytest.fixture
def store(tmp_path):
    return RunStore.create(tmp_path / "s", {"workflow": {"name": "w"}})


# -- create and open ---------------------------------------------------------------------------------------

def test_create_makes_the_layout_and_a_catalog(store, tmp_path):
    root = tmp_path / "s"
    assert sorted(p.name for p in root.iterdir()) == ["arrays", "catalog.json", "index", "lineage", "operators"]
    catalog = json.loads((root / "catalog.json").read_text())
    assert catalog["format"] == FORMAT and catalog["nodes"] == {} and catalog["workflow"] == {"name": "w"}
    assert RunStore.open(root).catalog == catalog


def test_create_accepts_an_existing_empty_directory(tmp_path):
    (tmp_path / "empty").mkdir()
    RunStore.create(tmp_path / "empty", {"workflow": {}})
    assert (tmp_path / "empty" / "catalog.json").is_file()


def test_create_refuses_a_non_empty_directory_and_touches_nothing(tmp_path):
    root = tmp_path / "old"
    (root / "sub").mkdir(parents=True)
    (root / "results.txt").write_bytes(b"precious")
    (root / "sub" / "data.bin").write_bytes(b"\x00\x01")
    before = tree(root)
    with pytest.raises(sz.StoreError, match="runs are never overwritten") as err:
        RunStore.create(root, {"workflow": {}})
    assert str(root) in str(err.value) and "new directory" in str(err.value)
    assert tree(root) == before and sorted(p.name for p in root.iterdir()) == ["results.txt", "sub"]


def test_create_refuses_an_existing_run(store, tmp_path):
    store.save_array("x", np.arange(3))
    before = tree(tmp_path / "s")
    with pytest.raises(sz.StoreError, match="never overwritten"):
        RunStore.create(tmp_path / "s", {"workflow": {"name": "other"}})
    assert tree(tmp_path / "s") == before


def test_create_refuses_a_file(tmp_path):
    path = tmp_path / "file"
    path.write_bytes(b"keep")
    with pytest.raises(sz.StoreError, match="already exists"):
        RunStore.create(path, {"workflow": {}})
    assert path.read_bytes() == b"keep"


def test_store_error_is_also_an_os_error():
    assert issubclass(sz.StoreError, OSError) and issubclass(sz.StoreError, sz.SubZeroError)


def test_open_a_missing_directory(tmp_path):
    with pytest.raises(sz.StoreError, match="does not exist") as err:
        RunStore.open(tmp_path / "nowhere")
    assert "nowhere" in str(err.value) and "store=" in str(err.value)


def test_open_a_directory_without_catalog(tmp_path):
    (tmp_path / "plain").mkdir()
    with pytest.raises(sz.StoreError, match=r"is not a subzero store \(no catalog.json\)"):
        RunStore.open(tmp_path / "plain")


@pytest.mark.parametrize("garbage", [b"\xff\xfe\x00\x81garbage", b"", b"{\"format\": 1,", b"\x89PNG\r\n\x1a\n"])
def test_open_a_corrupt_catalog(store, tmp_path, garbage):
    (tmp_path / "s" / "catalog.json").write_bytes(garbage)
    with pytest.raises(sz.StoreError, match="corrupt catalog.json") as err:
        RunStore.open(tmp_path / "s")
    assert "re-run the workflow" in str(err.value)


@pytest.mark.parametrize("catalog", [
    {"format": FORMAT + 1, "workflow": {}},
    {"format": "1", "workflow": {}},
    {"workflow": {}},
    {"format": FORMAT},
    [1, 2, 3],
    None,
])
def test_open_a_catalog_of_an_unknown_format(store, tmp_path, catalog):
    (tmp_path / "s" / "catalog.json").write_text(json.dumps(catalog))
    with pytest.raises(sz.StoreError, match="unknown format") as err:
        RunStore.open(tmp_path / "s")
    assert f"reads format {FORMAT}" in str(err.value)


def test_catalog_round_trips_through_save(store, tmp_path):
    store.catalog["nodes"]["blur"] = {"shape": [4, 4], "strategies": ["FullOne/backward"]}
    store.save_catalog()
    assert RunStore.open(tmp_path / "s").catalog["nodes"]["blur"]["strategies"] == ["FullOne/backward"]
    assert not [p for p in (tmp_path / "s").iterdir() if p.name.endswith(".tmp")]


# -- arrays and operators ----------------------------------------------------------------------------------

def test_arrays_round_trip_memory_mapped(store):
    x = np.arange(12.0).reshape(3, 4).T  # not contiguous
    store.save_array("x", x)
    got = store.load_array("x")
    assert isinstance(got, np.memmap) and not got.flags.writeable
    np.testing.assert_array_equal(got, x)
    np.testing.assert_array_equal(store.load_array("x", mmap=False), x)
    assert store.array_path("x").endswith(os.path.join("arrays", "x.npy"))


def test_arrays_are_immutable(store):
    store.save_array("x", np.zeros(3))
    with pytest.raises(sz.StoreError, match="already stored.*immutable"):
        store.save_array("x", np.ones(3))
    np.testing.assert_array_equal(store.load_array("x"), np.zeros(3))


def test_a_missing_array_names_the_node(store):
    with pytest.raises(sz.StoreError, match="array of node 'blur' is missing"):
        store.load_array("blur")


def test_a_corrupt_array_names_the_node(store, tmp_path):
    (tmp_path / "s" / "arrays" / "blur.npy").write_bytes(b"not an npy file")
    with pytest.raises(sz.StoreError, match="array of node 'blur' .* is corrupt"):
        store.load_array("blur")


def test_operators_round_trip_and_missing_ones_name_the_node(store):
    import pickle
    store.save_operator("t", pickle.dumps(sz.operators.Transpose()))
    assert isinstance(store.load_operator("t"), sz.operators.Transpose)
    with pytest.raises(sz.StoreError, match="operator of node 'u' is missing"):
        store.load_operator("u")
    store.save_operator("bad", b"garbage")
    with pytest.raises(sz.StoreError, match="operator of node 'bad' cannot be loaded"):
        store.load_operator("bad")


# -- lineage ---------------------------------------------------------------------------------------------------

def test_reader_of_lineage_never_written(store):
    with pytest.raises(sz.StoreError, match="lineage of node 'blur' .*is missing") as err:
        store.reader("blur", "FullOne/backward", NDIMS)
    assert "FullOne/backward" in str(err.value)
    store.write_lineage("other", {"FullOne/backward": batch_for("FullOne/backward")}, NDIMS)
    with pytest.raises(sz.StoreError, match="lineage of node 'blur'"):
        store.reader("blur", "FullOne/backward", NDIMS)
    with pytest.raises(sz.StoreError, match=r"lineage of node 'other' \(FullMany/backward\)"):
        store.reader("other", "FullMany/backward", NDIMS)


def test_write_two_strategies_of_one_node_both_readable(store, tmp_path):
    strategies = ["FullOne/backward", "FullMany/forward"]
    sizes = store.write_lineage("blur", {s: batch_for(s) for s in strategies}, NDIMS)
    assert set(sizes) == set(strategies) and all(v > 0 for v in sizes.values())
    assert sizes["FullMany/forward"] > batch_for("FullMany/forward").nbytes  # includes the R-tree files
    reopened = RunStore.open(tmp_path / "s")
    out_mask = np.zeros(16, bool)
    out_mask[1] = True
    for s in strategies:
        enc = encoder_for(Strategy.parse(s))
        reader = reopened.reader("blur", s, NDIMS)
        assert enc.load(reader, SHAPES).n_pairs == 3
        assert sorted(set(enc.backward(reader, out_mask, 0, SHAPES).tolist())) == [5, 6, 7]


def test_reader_get_many_and_scan(store):
    batch = batch_for("FullOne/backward")
    store.write_lineage("n", {"FullOne/backward": batch}, NDIMS)
    reader = store.reader("n", "FullOne/backward", NDIMS)
    keys, values = reader.scan(CELL)
    assert len(keys) == 3 and all(k >> np.uint64(60) == CELL for k in keys)  # out cells 0, 1, 15
    pair_keys, _ = reader.scan(PAIR)
    assert len(pair_keys) == 3
    found, got = reader.get_many(make_keys(CELL, OUT, np.array([15, 2, 0])))
    assert sorted(found.tolist()) == sorted(make_keys(CELL, OUT, np.array([0, 15])).tolist()) and len(got) == 2


def test_write_lineage_is_atomic_per_node(store):
    good = batch_for("FullOne/backward")
    bad = Batch([b"k" * 600], [b"v"], {}, 1)  # LMDB rejects keys over 511 bytes, mid-transaction
    with pytest.raises(sz.StoreError, match="nothing of this node was committed"):
        store.write_lineage("blur", {"FullOne/backward": good, "FullOne/forward": bad}, NDIMS)
    with pytest.raises(sz.StoreError, match="missing"):
        store.reader("blur", "FullOne/backward", NDIMS)  # the good half was not committed either
    store.write_lineage("blur", {"FullOne/backward": good}, NDIMS)
    assert encoder_for(Strategy.parse("FullOne/backward")).load(
        store.reader("blur", "FullOne/backward", NDIMS), SHAPES).n_pairs == 3


def test_rewriting_a_node_replaces_its_entries(store):
    store.write_lineage("n", {"FullOne/backward": batch_for("FullOne/backward")}, NDIMS)
    one = FullPairs(np.array([3]), np.array([0, 1]), (np.array([9]),), (np.array([0, 1]),))
    store.write_lineage("n", {"FullOne/backward": batch_for("FullOne/backward", one)}, NDIMS)
    loaded = encoder_for(Strategy.parse("FullOne/backward")).load(store.reader("n", "FullOne/backward", NDIMS), SHAPES)
    assert loaded.out_ids.tolist() == [3] and loaded.in_ids[0].tolist() == [9]


def test_rewriting_a_node_replaces_its_r_trees(store):
    strategy = "FullMany/backward"
    store.write_lineage("n", {strategy: batch_for(strategy)}, NDIMS)
    moved = FullPairs(np.array([3]), np.array([0, 1]), (np.array([9]),), (np.array([0, 1]),))
    store.write_lineage("n", {strategy: batch_for(strategy, moved)}, NDIMS)
    out_mask = np.zeros(16, bool)
    out_mask[3] = True
    enc = encoder_for(Strategy.parse(strategy))
    assert enc.backward(store.reader("n", strategy, NDIMS), out_mask, 0, SHAPES).tolist() == [9]


def test_lmdb_map_grows_for_a_large_batch(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "_MAP_SIZE", 1 << 20)  # start at 1 MiB so a few MiB must grow it
    store = RunStore.create(tmp_path / "big", {"workflow": {}})
    n, width = 3000, 2000  # ~6 MB of values
    rng = np.random.default_rng(0)
    values = [rng.bytes(width) for _ in range(n)]
    keys = keys_to_bytes(make_keys(PAIR, 0, np.arange(n)))
    store.write_lineage("big", {"FullMany/backward": Batch(keys, values, {}, n)}, NDIMS)
    env = store_module._env(tmp_path / "big" / "lineage", create=False)
    assert env.info()["map_size"] > n * width
    got_keys, got_values = store.reader("big", "FullMany/backward", NDIMS).scan(PAIR)
    assert len(got_keys) == n and got_values == values
    more = keys_to_bytes(make_keys(PAIR, 0, np.arange(n)))  # a second large node grows it again if needed
    store.write_lineage("big2", {"FullMany/backward": Batch(more, values, {}, n)}, NDIMS)
    assert store.reader("big2", "FullMany/backward", NDIMS).scan(PAIR)[1][-1] == values[-1]


def test_lookups_past_their_deadline_time_out(store):
    store.write_lineage("n", {"FullOne/backward": batch_for("FullOne/backward")}, NDIMS)
    reader = store.reader("n", "FullOne/backward", NDIMS, deadline=0.0)
    with pytest.raises(store_module.LookupTimeout):
        reader.get_many(make_keys(CELL, OUT, np.array([0])))


# -- query log -----------------------------------------------------------------------------------------------------

def test_query_log_appends_and_reads_back(store, tmp_path):
    assert store.query_log() == []
    records = [{"steps": [{"node": "blur", "strategy": "FullOne/backward", "seconds": 0.5}]}, {"steps": []}]
    for r in records:
        store.log_query(r)
    assert store.query_log() == records
    assert RunStore.open(tmp_path / "s").query_log() == records
    store.log_query({"n": 3})
    assert len(RunStore.open(tmp_path / "s").query_log()) == 3

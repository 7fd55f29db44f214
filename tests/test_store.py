"""The run store (FileStore): exclusive creation, never overwrites what it did not make, refuses
what is not a store, commits a node's shards by manifest, removes uncommitted attempts, and
keeps query statistics out of the store."""

from __future__ import annotations

import json
from dataclasses import replace
import os
import pickle
import time

import numpy as np
import pytest

import subzero as sz
from subzero.catalog import FORMAT, Manifest, RunRecord, ShardRecord
from subzero.encoders import encoder_for, merge_tiles
from subzero.encoders.codec import OUT
from subzero.frontier import Frontier
from subzero.modes import Strategy
from subzero.pairs import FullPairs
from subzero.store import FileStore
from subzero.store.file_store import MARKER
from subzero.store.shards import write_shard

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


def record(name: str = "w") -> RunRecord:
    return RunRecord(workflow={"name": name, "nodes": []}, created="2026-11-23T00:00:00+00:00", executor="local")


def example_pairs() -> FullPairs:
    """Three pairs over 4 x 4 arrays: out {0, 1} <- in {5}; out {1} <- in {6, 7}; out {15} <- in {0}."""
    return FullPairs(np.array([0, 1, 1, 15]), np.array([0, 2, 3, 4]),
                     (np.array([5, 6, 7, 0]),), (np.array([0, 1, 3, 4]),))


@pytest.fixture
def store(tmp_path):
    fs = FileStore.create(tmp_path / "s", record())
    yield fs
    fs.close()


def commit_shard(store: FileStore, node: str, strategy: str, tile: int = 0) -> ShardRecord:
    enc = encoder_for(Strategy.parse(strategy))
    batch = merge_tiles([enc.encode(example_pairs(), tile, SHAPES)])
    stem = f"t{tile:06d}-attempt"
    files, index_bytes = write_shard(store.location, store.shard_directory(node, strategy), stem, batch)
    return ShardRecord(tile, stem, files, keys=len(batch.keys), nbytes=batch.nbytes, index_bytes=index_bytes)


# -- create and open ---------------------------------------------------------------------------------------

def test_create_makes_the_layout_a_marker_a_lock_and_a_catalog(store, tmp_path):
    root = tmp_path / "s"
    assert sorted(p.name for p in root.iterdir()) == [".writer", "arrays", "catalog.json", "lineage", "manifests",
                                                      "operators", MARKER]
    catalog = json.loads((root / "catalog.json").read_text())
    assert catalog["format"] == FORMAT and catalog["nodes"] == {} and catalog["workflow"]["name"] == "w"
    assert FileStore.open(root).read_catalog() == record()
    store.close()
    assert not (root / ".writer").exists()  # the lock goes with the writer


def test_create_accepts_an_existing_empty_directory(tmp_path):
    (tmp_path / "empty").mkdir()
    FileStore.create(tmp_path / "empty", record()).close()
    assert (tmp_path / "empty" / "catalog.json").is_file()


def test_create_refuses_a_non_empty_directory_and_touches_nothing(tmp_path):
    root = tmp_path / "old"
    (root / "sub").mkdir(parents=True)
    (root / "results.txt").write_bytes(b"precious")
    (root / "sub" / "data.bin").write_bytes(b"\x00\x01")
    before = tree(root)
    with pytest.raises(sz.StoreError, match="runs are never overwritten") as err:
        FileStore.create(root, record())
    assert str(root) in str(err.value) and "new store" in str(err.value)
    with pytest.raises(sz.StoreError, match="not made by subzero"):
        FileStore.create(root, record(), overwrite=True)  # overwrite only replaces stores subzero made
    assert tree(root) == before


def test_create_refuses_an_existing_run_unless_overwrite(store, tmp_path):
    store.close()
    before = tree(tmp_path / "s")
    with pytest.raises(sz.StoreError, match=r"did not finish \(status 'running'\); continue it with resume=True"):
        FileStore.create(tmp_path / "s", record("other"))
    assert tree(tmp_path / "s") == before
    FileStore.open(tmp_path / "s").write_catalog(replace(record(), status="done"))
    with pytest.raises(sz.StoreError, match="never overwritten"):
        FileStore.create(tmp_path / "s", record("other"))
    FileStore.create(tmp_path / "s", record("other"), overwrite=True).close()
    assert FileStore.open(tmp_path / "s").read_catalog().workflow["name"] == "other"


def test_a_second_writer_is_refused_naming_the_first(store, tmp_path):
    with pytest.raises(sz.StoreError, match=r"being written by another run \(pid \d+ on host .*, started"):
        FileStore.create(tmp_path / "s", record(), overwrite=True)  # not even with overwrite


def test_create_refuses_a_file(tmp_path):
    path = tmp_path / "file"
    path.write_bytes(b"keep")
    with pytest.raises(sz.StoreError, match="is a regular file"):
        FileStore.create(path, record())
    with pytest.raises(sz.StoreError, match="is a regular file"):
        FileStore.open(path)
    assert path.read_bytes() == b"keep"


def test_store_error_is_also_an_os_error():
    assert issubclass(sz.StoreError, OSError) and issubclass(sz.StoreError, sz.SubZeroError)


def test_open_a_missing_directory(tmp_path):
    with pytest.raises(sz.StoreError, match="does not exist") as err:
        FileStore.open(tmp_path / "nowhere")
    assert "nowhere" in str(err.value) and "store given to wf.run" in str(err.value)


def test_open_a_directory_without_catalog(tmp_path):
    (tmp_path / "plain").mkdir()
    with pytest.raises(sz.StoreError, match=r"is not a subzero store \(no catalog.json\)"):
        FileStore.open(tmp_path / "plain")


def test_a_store_whose_live_writer_has_no_catalog_yet_is_being_written_not_lost(store, tmp_path):
    """A run writing its first catalog behind: another reader is told to wait, not that the catalog
    was lost; once its writer is gone, a missing catalog is a loss."""
    (tmp_path / "s" / "catalog.json").unlink()
    with pytest.raises(sz.StoreError, match=f"still being written by pid {os.getpid()}.*has no catalog yet"):
        FileStore.open(tmp_path / "s")
    store.close()
    with pytest.raises(sz.StoreError, match="lost its catalog.json"):
        FileStore.open(tmp_path / "s")


@pytest.mark.parametrize("garbage", [b"\xff\xfe\x00\x81garbage", b"", b"{\"format\": 2,", b"\x89PNG\r\n\x1a\n"])
def test_a_corrupt_catalog(store, tmp_path, garbage):
    (tmp_path / "s" / "catalog.json").write_bytes(garbage)
    with pytest.raises(sz.StoreError, match="corrupt catalog.json") as err:
        FileStore.open(tmp_path / "s").read_catalog()
    assert "re-run the workflow" in str(err.value)


@pytest.mark.parametrize("catalog,message", [
    ({"format": 1, "workflow": {}, "nodes": {}}, "store format 1"),
    ({"format": FORMAT + 1, "workflow": {}}, f"store format {FORMAT + 1}"),
    ({"format": "2", "workflow": {}}, "store format '2'"),
    ({"workflow": {}}, "store format None"),
    ({"format": FORMAT}, "not a subzero catalog"),
    ([1, 2, 3], "not a subzero catalog"),
    (None, "not a subzero catalog"),
    ({"format": FORMAT, "workflow": {}, "nodes": {"x": {"name": "x"}}}, "damaged catalog.json"),
])
def test_a_catalog_of_another_format_says_to_re_run(store, tmp_path, catalog, message):
    (tmp_path / "s" / "catalog.json").write_text(json.dumps(catalog))
    with pytest.raises(sz.StoreError, match=message) as err:
        FileStore.open(tmp_path / "s").read_catalog()
    assert "re-run the workflow" in str(err.value).lower()


def test_catalog_writes_are_atomic(store, tmp_path):
    store.write_catalog(record("second"))
    assert FileStore.open(tmp_path / "s").read_catalog().workflow["name"] == "second"
    assert not [p for p in (tmp_path / "s").iterdir() if p.name.endswith(".tmp")]


# -- operators ----------------------------------------------------------------------------------------------------

def test_operators_round_trip_and_missing_ones_name_the_node(store):
    store.save_operator("t", pickle.dumps(sz.operators.Transpose()))
    assert isinstance(store.load_operator("t"), sz.operators.Transpose)
    with pytest.raises(sz.StoreError, match="operator of node 'u' is missing"):
        store.load_operator("u")
    store.save_operator("bad", b"garbage")
    with pytest.raises(sz.StoreError, match="operator of node 'bad' cannot be loaded"):
        store.load_operator("bad")


# -- manifests and shards -------------------------------------------------------------------------------------------

def test_a_committed_shard_reads_back_through_the_manifest(store, tmp_path):
    strategies = ["FullOne/backward", "FullMany/forward"]
    manifest = Manifest("blur", {s: (commit_shard(store, "blur", s),) for s in strategies})
    store.write_manifest(manifest)
    reopened = FileStore.open(tmp_path / "s")
    assert reopened.read_manifest("blur") == manifest
    frontier = Frontier.of_ids(np.array([1]), (4, 4))
    for s in strategies:
        enc = encoder_for(Strategy.parse(s))
        reader = reopened.shard_reader("blur", s, manifest.shards[s][0], NDIMS)
        assert enc.load(reader, SHAPES).n_pairs == 3
        assert sorted(set(enc.backward(reader, frontier, 0, SHAPES).tolist())) == [5, 6, 7]


def test_a_missing_or_damaged_manifest_is_a_store_error(store, tmp_path):
    with pytest.raises(sz.StoreError, match="manifest of node 'blur' is missing"):
        store.read_manifest("blur")
    (tmp_path / "s" / "manifests" / "blur.json").write_text("{not json")
    with pytest.raises(sz.StoreError, match="manifest of node 'blur' .* is damaged"):
        store.read_manifest("blur")
    (tmp_path / "s" / "manifests" / "blur.json").write_text(json.dumps({"format": 1, "node": "blur"}))
    with pytest.raises(sz.StoreError, match="re-run the workflow"):
        store.read_manifest("blur")


def test_remove_uncommitted_keeps_exactly_the_manifest_shards(store, tmp_path):
    kept = commit_shard(store, "blur", "FullMany/backward", tile=0)
    retried = commit_shard(store, "blur", "FullMany/backward", tile=1)
    loser = retried.name.replace("attempt", "loser")
    directory = tmp_path / "s" / "lineage" / "blur" / "FullMany-backward"
    for f in retried.files:
        (directory / (retried.name + f.suffix)).rename(directory / (loser + f.suffix))
    dropped = commit_shard(store, "blur", "FullOne/backward")  # a strategy dropped for the budget
    manifest = Manifest("blur", {"FullMany/backward": (kept,)})
    removed = store.remove_uncommitted("blur", manifest)
    assert removed == len(retried.files) + len(dropped.files)
    names = {p.name.split(".")[0] for p in (tmp_path / "s" / "lineage").rglob("*") if p.is_file()}
    assert names == {kept.name}


def test_query_statistics_are_kept_outside_the_store(store, tmp_path):
    store.close()
    before = tree(tmp_path / "s")
    from subzero.store.cache import log_query, query_log, query_log_path

    url = FileStore.open(tmp_path / "s").url
    assert query_log(url) == []
    records = [{"steps": [{"node": "blur", "strategy": "FullOne/backward", "seconds": 0.5}]}, {"steps": []}]
    for r in records:
        log_query(url, r)
    assert query_log(FileStore.open(tmp_path / "s").url) == records
    with open(query_log_path(url), "a") as fh:
        fh.write('{"torn": ')  # a writer killed mid-line
    assert query_log(url) == records
    assert tree(tmp_path / "s") == before
    assert not query_log_path(url).startswith(str(tmp_path / "s"))


def test_the_query_log_is_written_in_batches_off_the_query(tmp_path, monkeypatch):
    from subzero.store import cache

    url = str(tmp_path / "batched")
    path = cache.query_log_path(url)
    records = [{"steps": [{"node": "n", "seconds": k / 10}]} for k in range(3)]
    monkeypatch.setattr(cache, "LOG_FLUSH_SECONDS", 60.0)
    cache.log_query(url, records[0])
    assert not os.path.exists(path)  # handed over: the query wrote nothing
    assert cache.query_log(url) == records[:1]  # a reader writes what waits first
    monkeypatch.setattr(cache, "LOG_FLUSH_SECONDS", 0.05)
    for r in records[1:]:
        cache.log_query(url, r)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and open(path).read().count("\n") < 3:
        time.sleep(0.01)
    assert [json.loads(line) for line in open(path)] == records  # the timer wrote the rest, in order

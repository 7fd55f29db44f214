"""Catalog records: every record round-trips through dicts and through JSON, old or unknown
formats and damaged records are `StoreError`s that say to re-run, and a catalog answers for the
nodes it committed."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import subzero as sz
from subzero.catalog import (FORMAT, ArrayRecord, FileRecord, Manifest, NodeRecord, NodeMetrics, PendingNode,
                             RunRecord, ShardRecord)
from subzero.modes import Strategy
from subzero.store import FileStore

# -- strategies: field values as JSON can hold them ----------------------------------------------------------------

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
counts = st.integers(0, 2**53)
seconds = st.floats(0, 1e6, allow_nan=False, allow_infinity=False)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) | seconds | names,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
    max_leaves=8)
json_dicts = st.dictionaries(names, json_values, max_size=4)
shapes = st.lists(st.integers(0, 10**6), max_size=4).map(tuple)
strategy_names = st.sampled_from(["BlackBox", "Map", "FullOne/backward", "FullMany/forward", "PayOne/backward",
                                  "PayMany/backward", "CompOne/backward", "CompMany/backward"])

file_records = st.builds(FileRecord, st.sampled_from([".mdb", ".255.dat", ".255.idx", ".0.dat", ".0.idx"]), counts,
                         st.text("0123456789abcdef", min_size=16, max_size=16))
shard_records = st.builds(ShardRecord, tile=st.integers(0, 10**6), name=st.none() | names,
                          files=st.lists(file_records, max_size=3).map(tuple), keys=counts, nbytes=counts,
                          index_bytes=counts, pairs=counts, out_cells=counts, in_cells=counts, encode_seconds=seconds)
manifests = st.builds(Manifest, node=names,
                      shards=st.dictionaries(strategy_names, st.lists(shard_records, max_size=3).map(tuple),
                                             max_size=3))
array_records = st.builds(ArrayRecord, shapes, st.sampled_from(["float64", "int32", "bool", "complex64", "uint8"]),
                          shapes, counts)
node_metrics = st.builds(
    NodeMetrics, tiles=st.integers(1, 10**4), wall_seconds=seconds, op_seconds=seconds, lineage_seconds=seconds,
    write_seconds=seconds, bytes=st.dictionaries(strategy_names, counts, max_size=3),
    keys=st.dictionaries(strategy_names, counts, max_size=3),
    encode_seconds=st.dictionaries(strategy_names, seconds, max_size=3),
    pairs=st.dictionaries(strategy_names, st.tuples(counts, counts, counts), max_size=3),
    file_bytes=st.dictionaries(strategy_names, counts, max_size=3))
node_records = st.builds(
    NodeRecord, name=names, kind=st.sampled_from(["input", "operator"]), array=array_records,
    strategies=st.lists(strategy_names, max_size=3).map(tuple), reason=st.text(max_size=20),
    stats=st.none() | node_metrics, dropped=st.dictionaries(strategy_names, st.text(max_size=10), max_size=2),
    predicted=json_dicts, profile=st.none() | json_dicts,
    pruned=st.dictionaries(strategy_names, st.text(max_size=10), max_size=2), compute_seconds=st.none() | seconds,
    tile_shape=st.none() | shapes, metadata=json_dicts)
pending_nodes = st.builds(
    PendingNode, st.lists(strategy_names, min_size=1, max_size=3).map(lambda ns: tuple(map(Strategy.parse, ns))),
    json_dicts, array_records, json_dicts)


@st.composite
def run_records(draw):
    nodes = draw(st.lists(node_records, max_size=4, unique_by=lambda n: n.name))
    return RunRecord(
        workflow=draw(json_dicts), created=draw(st.text(max_size=25)),
        executor=draw(st.sampled_from(["spark", "local"])),
        status=draw(st.sampled_from(["running", "failed", "done"])),
        tile_shape=draw(st.none() | st.integers(1, 512) | st.lists(st.integers(1, 512), max_size=3)),
        pinned=draw(st.dictionaries(names, st.lists(strategy_names, max_size=2), max_size=3)),
        input_bytes=draw(counts), workload=draw(st.none() | st.lists(json_dicts, max_size=2)),
        budgets=draw(json_dicts), optimizer=draw(st.none() | json_dicts), wall_seconds=draw(st.none() | seconds),
        fingerprint=draw(st.dictionaries(names, names, max_size=3)), nodes={n.name: n for n in nodes})


RECORDS = [(FileRecord, file_records), (ShardRecord, shard_records), (Manifest, manifests),
           (ArrayRecord, array_records), (NodeMetrics, node_metrics), (NodeRecord, node_records),
           (PendingNode, pending_nodes), (RunRecord, run_records())]


# -- round trips ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cls,records", RECORDS, ids=[c.__name__ for c, _ in RECORDS])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_records_round_trip_through_dicts_and_json(cls, records, data):
    record = data.draw(records)
    as_dict = record.to_dict()
    assert cls.from_dict(as_dict) == record
    text = json.dumps(as_dict, sort_keys=True)  # what the store writes
    again = cls.from_dict(json.loads(text))
    assert again == record
    assert json.dumps(again.to_dict(), sort_keys=True) == text  # stable bytes


def test_derived_properties():
    shard = ShardRecord(3, "t000003-a", (FileRecord(".mdb", 100, "0" * 16), FileRecord(".255.dat", 50, "1" * 16)))
    assert shard.disk_bytes == 150 and ShardRecord(0, None).disk_bytes == 0
    node = NodeRecord("blur", "operator", ArrayRecord((4, 5), "float32", (2, 5)))
    assert node.shape == (4, 5) and node.dtype == "float32"


def test_a_catalog_round_trips_through_the_store(tmp_path):
    rec = RunRecord(workflow={"name": "w", "nodes": [{"name": "x"}]}, created="2026-11-23T00:00:00+00:00",
                    executor="local", tile_shape=[64, 64])
    node = NodeRecord("x", "input", ArrayRecord((3, 4), "float64", (3, 4), 96))
    store = FileStore.create(tmp_path / "s", rec)
    store.write_catalog(rec.with_node(node))
    store.close()
    got = FileStore.open(tmp_path / "s").read_catalog()
    assert got == rec.with_node(node) and got.node("x").array.shape == (3, 4) and got.format == FORMAT


# -- formats and damage --------------------------------------------------------------------------------------------

def minimal(**extra) -> dict:
    return {"workflow": {"name": "w"}, "created": "now", "executor": "local", "format": FORMAT, **extra}


@pytest.mark.parametrize("data,message", [
    ({**minimal(), "format": 1}, "store format 1"),
    ({**minimal(), "format": FORMAT + 1}, f"store format {FORMAT + 1}"),
    ({**minimal(), "format": None}, "store format None"),
    ({k: v for k, v in minimal().items() if k != "format"}, "store format None"),
])
def test_a_catalog_of_another_format_says_to_re_run(data, message):
    with pytest.raises(sz.StoreError, match=message) as err:
        RunRecord.from_dict(data, where="store 'runs/x'")
    text = str(err.value)
    assert text.startswith("store 'runs/x'") and f"reads format {FORMAT}" in text and "Re-run the workflow" in text


def test_a_format_3_store_is_read_and_written_back_as_this_format():
    """Format 3 stores (one PayOne entry per cell) are still read; a catalog written again (a
    resumed run) says format 4, so format-3 code refuses the run layout it cannot read."""
    record = RunRecord.from_dict({**minimal(), "format": 3})
    assert record.format == 3 and record.to_dict()["format"] == FORMAT == 4
    manifest = Manifest.from_dict({"format": 3, "node": "blur", "shards": {}, "inline": {}})
    assert manifest.node == "blur" and manifest.to_dict()["format"] == FORMAT


@pytest.mark.parametrize("data", [None, [], "catalog", 3, {"format": FORMAT}])
def test_what_is_not_a_catalog(data):
    with pytest.raises(sz.StoreError, match="not a subzero catalog; re-run the workflow"):
        RunRecord.from_dict(data)


@pytest.mark.parametrize("data", [
    minimal(nodes={"x": {"name": "x"}}),                                          # no kind, no array
    minimal(nodes={"x": {"name": "x", "kind": "input", "array": {"shape": "ab"}}}),
    minimal(nodes={"x": {"name": "x", "kind": "input", "array": {"shape": [2], "dtype": "f8", "chunks": [2]},
                         "stats": {"pairs": {"FullOne": [1, "x", 3]}}}}),
    minimal(nodes=["x"]),                                                         # not a mapping
    minimal(nodes={"x": ["x", "input"]}),
    minimal(nodes={"x": {"name": "x", "kind": "input", "array": [2, 2]}}),
    minimal(unknown_field=1, created=None, nodes={"x": None}),
], ids=["missing-fields", "bad-shape", "bad-stats", "nodes-list", "node-list", "array-list", "node-null"])
def test_a_damaged_catalog_is_a_store_error(data):
    with pytest.raises(sz.StoreError, match=r"damaged catalog.json .*re-run the workflow into a new store"):
        RunRecord.from_dict(data)


def test_unknown_catalog_fields_are_ignored():
    rec = RunRecord.from_dict(minimal(added_by_a_later_version={"x": 1}))
    assert rec.workflow == {"name": "w"} and rec.nodes == {}


@pytest.mark.parametrize("data,message", [
    ({"format": 1, "node": "blur", "shards": {}}, f"has format 1, this subzero reads format {FORMAT}"),
    ({"node": "blur"}, "has format None"),
    ({"format": FORMAT + 1, "node": "blur"}, f"has format {FORMAT + 1}"),
])
def test_a_manifest_of_another_format_says_to_re_run(data, message):
    with pytest.raises(sz.StoreError, match=message) as err:
        Manifest.from_dict(data)
    assert "manifest of node 'blur'" in str(err.value) and "re-run the workflow into a new store" in str(err.value)


@pytest.mark.parametrize("content", [
    b"[1, 2]", b"null", b"\"manifest\"",
    json.dumps({"format": FORMAT, "node": "blur", "shards": [1]}).encode(),
    json.dumps({"format": FORMAT, "node": "blur", "shards": {"FullOne/backward": [{"tile": 0}]}}).encode(),
    json.dumps({"format": FORMAT, "node": "blur", "shards": {"FullOne/backward": [["t", "x"]]}}).encode(),
    json.dumps({"format": FORMAT, "node": "blur",
                "shards": {"FullOne/backward": [{"tile": 0, "name": "t", "files": [{"suffix": ".mdb"}]}]}}).encode(),
], ids=["list", "null", "string", "shards-list", "no-name", "shard-list", "file-fields"])
def test_a_damaged_manifest_is_a_store_error(tmp_path, content):
    store = FileStore.create(tmp_path / "s", RunRecord(workflow={"name": "w"}, created="now", executor="local"))
    (tmp_path / "s" / "manifests" / "blur.json").write_bytes(content)
    with pytest.raises(sz.StoreError, match=r"manifest of node 'blur'.*(damaged|format)") as err:
        store.read_manifest("blur")
    assert "re-run" in str(err.value)
    store.close()


# -- nodes ---------------------------------------------------------------------------------------------------------

def test_node_names_the_committed_nodes_when_one_is_missing():
    rec = RunRecord(workflow={}, created="now", executor="local")
    with pytest.raises(sz.StoreError, match=r"node 'blur' is not committed in this store \(committed: none\)"):
        rec.node("blur")
    rec = rec.with_node(NodeRecord("x", "input", ArrayRecord((2,), "int8", (2,))))
    rec = rec.with_node(NodeRecord("t", "operator", ArrayRecord((2,), "int8", (2,))))
    with pytest.raises(sz.StoreError, match=r"\(committed: x, t\); the run did not finish .* re-run the workflow"):
        rec.node("blur")


def test_with_node_adds_or_replaces_without_touching_the_original():
    empty = RunRecord(workflow={"name": "w"}, created="now", executor="local")
    x = NodeRecord("x", "input", ArrayRecord((2,), "int8", (2,)))
    t = NodeRecord("t", "operator", ArrayRecord((2,), "int8", (2,)), strategies=("Map",))
    one = empty.with_node(x)
    two = one.with_node(t)
    assert empty.nodes == {} and one.nodes == {"x": x}  # records are immutable values
    assert list(two.nodes) == ["x", "t"]  # in commit order
    t2 = NodeRecord("t", "operator", ArrayRecord((2,), "int8", (2,)), strategies=("FullOne/backward",))
    three = two.with_node(t2)
    assert three.node("t") == t2 and two.node("t") == t and list(three.nodes) == ["x", "t"]
    assert three.workflow is empty.workflow and three.created == "now"
    with pytest.raises(dataclasses.FrozenInstanceError):
        three.status = "done"


@settings(max_examples=20, deadline=None)
@given(pending=st.dictionaries(names, pending_nodes, max_size=3))
def test_a_two_phase_runs_pending_plan_is_typed_in_memory_and_plain_json_on_disk(pending):
    record = RunRecord({}, "now", "local", optimizer={"status": "optimal",
                                                      "pending": {n: p.to_dict() for n, p in pending.items()}})
    assert RunRecord({}, "now", "local").pending() is None
    assert record.pending() == pending
    assert all(isinstance(s, Strategy) for p in record.pending().values() for s in p.strategies)
    stored = json.loads(json.dumps(record.to_dict()))  # the catalog keeps strategy names
    assert all(isinstance(s, str) for p in stored["optimizer"]["pending"].values() for s in p["strategies"])
    assert RunRecord.from_dict(stored).pending() == pending


def _typed(value):
    """``value`` with every leaf's exact type beside it (equal only when types agree too)."""
    if dataclasses.is_dataclass(value):
        return (type(value).__name__, [(f.name, _typed(getattr(value, f.name))) for f in dataclasses.fields(value)])
    if isinstance(value, dict):
        return ("dict", [(_typed(k), _typed(v)) for k, v in value.items()])
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_typed(v) for v in value])
    return (type(value).__name__, value)


@settings(max_examples=60, deadline=None)
@given(record=run_records(), odd=st.sampled_from(["none", "tuples", "numpy"]))
def test_a_catalog_as_read_is_its_json_read_back(record, odd):
    import numpy as np

    for rec in list(record.nodes.values()):  # as a run's records are: no predictions, profile, metadata
        record = record.with_node(dataclasses.replace(rec, predicted={}, profile=None, metadata={}))
    plain = dict(record.nodes)
    if odd != "none" and record.nodes:  # a record JSON changes: through JSON, as the rest
        name, first = next(iter(record.nodes.items()))
        changed = dataclasses.replace(first, metadata={"axes": (0, 1)}) if odd == "tuples" else \
            dataclasses.replace(first, stats=NodeMetrics(wall_seconds=np.float64(0.5)))
        record = record.with_node(changed)
    got, want = record.as_read(), RunRecord.from_dict(json.loads(json.dumps(record.to_dict())))
    assert _typed(got) == _typed(want)
    assert list(got.nodes) == list(record.nodes)
    assert any(got.nodes[n] is rec for n, rec in plain.items()) == (len(record.nodes) > (odd != "none")), \
        "records of JSON's own types are taken as they are"

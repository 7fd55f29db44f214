"""subzero info, and stores that did not finish: info, explain and partial runs over committed nodes."""

from __future__ import annotations

import json

import numpy as np
import pytest

import subzero as sz
from subzero import operators as ops
from subzero.tools.info import info_data, info_text


class Boom(ops.Transpose):
    def run(self, ctx, x):
        raise ValueError("the detector file is unreadable")


def workflow(fail: bool) -> sz.Workflow:
    wf = sz.Workflow("life")
    x = wf.input("x")
    t = wf.add(ops.Transpose(), x, name="t")
    blur = wf.add(ops.GaussianFilter(1.0), t, name="blur")
    wf.add(Boom() if fail else ops.Flip(axis=0), blur, name="last")
    wf.add(ops.Sum(axis=0), t, name="total")
    return wf


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("life")
    x = np.arange(48.0).reshape(6, 8)
    done = workflow(False).run({"x": x}, store=root / "done", executor="local",
                               strategies={"t": ["FullOne"], "blur": ["Map", "FullMany/forward"]})
    with pytest.raises(sz.WorkflowError, match="detector file"):
        workflow(True).run({"x": x}, store=root / "failed", executor="local", strategies={"t": ["FullOne"]})
    return done, root / "failed"


def test_info_of_a_finished_store(stores):
    done, _ = stores
    data = info_data(done.path)
    json.dumps(data)
    assert data["status"] == "done" and data["workflow"] == "life" and data["executor"] == "local"
    assert data["inputs"] == ["x"] and data["outputs"] == ["last", "total"] and data["master"] is None
    nodes = {n["name"]: n for n in data["nodes"]}
    assert nodes["x"]["kind"] == "input" and nodes["x"]["shape"] == [6, 8] and nodes["x"]["dtype"] == "float64"
    t = nodes["t"]
    assert t["operator"] == "Transpose" and t["shape"] == [8, 6] and t["strategies"] == ["FullOne/backward"]
    assert t["lineage_bytes"] > 0 and t["lineage_file_bytes"] > 0 and t["array_bytes"] == 8 * 6 * 8
    assert nodes["blur"]["strategies"] == ["Map", "FullMany/forward"]
    # an intermediate is not stored (recomputed when read); the outputs and the input are
    assert not t["array_stored"] and not t["array_disk_bytes"] and "recomputed" in t["array_why"]
    assert all(nodes[n]["array_stored"] and nodes[n]["array_disk_bytes"] > 0 for n in ("x", "last", "total"))
    assert data["totals"]["lineage_bytes"] == sum(n.get("lineage_bytes", 0) for n in data["nodes"])
    text = info_text(data)
    assert "workflow 'life', status done" in text and "Transpose" in text and "8x6" in text
    assert "outputs: last, total" in text and "FullMany/forward" in text
    assert "not stored (2): " in text and text.rstrip().count("not stored") >= 3  # t and blur, in the table too


def test_a_failed_store_says_what_it_committed(stores):
    _, failed = stores
    data = info_data(failed)
    assert data["status"] == "failed" and data["committed"] == ["x", "t", "blur", "total"][:len(data["committed"])]
    nodes = {n["name"]: n for n in data["nodes"]}
    assert nodes["last"]["committed"] is False and nodes["last"]["operator"] == "Boom"
    assert "status failed: 3 of 5 nodes committed (x, t, blur); not committed: last, total" in info_text(data)
    with pytest.raises(sz.StoreError, match="did not finish .*subzero info"):
        sz.open_run(failed)


def test_a_partial_run_answers_over_its_committed_nodes(stores):
    done, failed = stores
    run = sz.open_run(failed, partial=True)
    assert run.committed == ["x", "t", "blur"]
    np.testing.assert_array_equal(run.backward("blur", [(0, 0)], to="x"), done.backward("blur", [(0, 0)], to="x"))
    assert run.output("t").shape == (8, 6)
    with pytest.raises(sz.LineageError, match="node 'last' is not committed .*the run is failed.*committed nodes: x, "
                                              "t, blur"):
        run.backward("last", [(0, 0)], to="x")
    with pytest.raises(sz.LineageError, match="not committed"):
        run.forward("x", [(0, 0)], to="total")


def test_explain_of_a_failed_store(stores):
    from subzero.tools.describe import explain_data
    from subzero.tools.explain import explain

    _, failed = stores
    run = sz.open_run(failed, partial=True)
    text = explain(run)
    assert "status failed: 3 of 5 nodes committed (x, t, blur); not committed: last, total" in text
    assert "last (Boom): not committed" in text and "t (Transpose, shape (8, 6)): FullOne/backward" in text
    data = explain_data(run)
    assert data["committed"] == ["x", "t", "blur"]
    assert {n["name"]: n["committed"] for n in data["nodes"]} == {"x": True, "t": True, "blur": True, "last": False,
                                                                "total": False}
    assert [n["operator"] for n in data["nodes"] if n["kind"] == "operator"] == ["Transpose", "GaussianFilter",
                                                                                 "Boom", "Sum"]


def test_info_of_a_store_being_written(tmp_path):
    from subzero.catalog import RunRecord
    from subzero.store import FileStore

    record = RunRecord(workflow=workflow(False).to_dict(), created="2026-01-01T00:00:00+00:00", executor="spark")
    store = FileStore.create(tmp_path / "live", record)
    try:
        data = info_data(tmp_path / "live")
        assert data["status"] == "running" and data["writer"]["alive"] is True and data["committed"] == []
        assert "(writing now: pid" in info_text(data) and "0 of 5 nodes committed" in info_text(data)
    finally:
        store.close()

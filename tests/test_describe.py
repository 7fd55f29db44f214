"""explain_data: the plan of a stored run as JSON-ready data, committed nodes and the rest."""

from __future__ import annotations

import json

import numpy as np
import pytest

import subzero as sz
from subzero.tools.describe import explain_data, jsonable


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    wf = sz.Workflow("d")
    x = wf.input("x")
    t = wf.add(sz.operators.Transpose(), x, name="t")
    wf.add(sz.operators.Sum(axis=0), t, name="total")
    return wf.run({"x": np.arange(12.0).reshape(3, 4)}, store=tmp_path_factory.mktemp("d") / "s", executor="local",
                  strategies={"t": ["Map", "FullOne"]})


def test_explain_data_lists_every_node(run):
    data = explain_data(run)
    json.dumps(data)  # JSON as it is
    assert data["workflow"] == "d" and data["status"] == "done" and data["executor"] == "local"
    assert [n["name"] for n in data["nodes"]] == ["x", "t", "total"]
    x, t, total = data["nodes"]
    assert x == {"name": "x", "kind": "input", "inputs": [], "committed": True, "shape": [3, 4], "dtype": "float64"}
    assert t["operator"] == "Transpose" and t["inputs"] == ["x"] and t["shape"] == [4, 3]
    assert t["strategies"] == list(run.strategies["t"]) and t["reason"] == "pinned"
    assert t["measured"]["disk_bytes"] > 0 and data["total_lineage_bytes"] == t["measured"]["disk_bytes"]
    assert total["strategies"] == ["Map"] and total["measured"]["disk_bytes"] == 0


def test_jsonable():
    assert jsonable({1: (np.int32(2), np.float64(0.5)), "a": np.arange(2)}) == {"1": [2, 0.5], "a": [0, 1]}


def test_docstring_examples():
    import doctest

    from subzero.tools import describe

    result = doctest.testmod(describe, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


def test_human_bytes():
    from subzero.tools.describe import human_bytes

    assert [human_bytes(n) for n in (None, 0, 999, 1500, 2.5e6, 2.5e9, 3e12)] == [
        "-", "0 B", "999 B", "1.5 KB", "2.5 MB", "2.5 GB", "3000.0 GB"]

"""The command line: run, query, explain, demo; user errors are one line and exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from subzero.cli import main, parse_cells


def run_cli(*args: str):
    return subprocess.run([sys.executable, "-m", "subzero.cli", *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "demo"
    assert main(["run", "demo", "--quick", "--store", str(path), "--executor", "local",
                 "--strategy", "crd_a=CompOne,FullMany", "--strategy", "merge=FullOne/forward"]) == 0
    return path


def test_run_then_query_backward_and_forward(store, capsys):
    assert main(["query", str(store), "backward", "blur", "--to", "exposure_a", "--cells", "0,0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["count"] == 4 and out["cells"] == [[0, 0], [0, 1], [1, 0], [1, 1]]
    assert main(["query", str(store), "forward", "exposure_b", "--to", "merge", "--cells", "3,4;5,6"]) == 0
    assert capsys.readouterr().out.split() == ["3,4", "5,6"]


def test_boxes_and_forced_strategies(store, capsys):
    args = ["query", str(store), "backward", "crd_a", "--to", "exposure_a", "--box", "0:2,0:3", "--json"]
    assert main(args) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(args + ["--using", "crd_a=FullMany"]) == 0
    assert json.loads(capsys.readouterr().out) == plain
    np.testing.assert_array_equal(parse_cells(None, ["0:2,0:3"]), [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]])


def test_explain_shows_strategies_and_costs(store, capsys):
    assert main(["explain", str(store)]) == 0
    text = capsys.readouterr().out
    assert "crd_a (CosmicRayDetect" in text and "CompOne/backward, FullMany/backward" in text
    assert "measured: disk" in text and "total lineage stored" in text


@pytest.mark.parametrize("args, fragment", [
    (["query", "/nonexistent/store", "backward", "a", "--to", "b", "--cells", "1,1"], "does not exist"),
    (["run", "no-such-workflow", "--store", "x"], "neither a built-in"),
    (["run", "demo", "--store", "STORE", "--strategy", "crd_a"], "must look like NODE=STRATEGY"),
])
def test_user_errors_are_one_line_with_exit_code_2(args, fragment, store):
    args = [str(store) if a == "STORE" else a for a in args]
    done = run_cli(*args)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and fragment in done.stderr and "Traceback" not in done.stderr


def test_bad_cells_from_the_cli(store):
    done = run_cli("query", str(store), "backward", "blur", "--to", "exposure_a", "--cells", "999,0")
    assert done.returncode == 2 and "out of bounds" in done.stderr and "Traceback" not in done.stderr
    done = run_cli("query", str(store), "backward", "blur", "--to", "exposure_a", "--cells", "a,b")
    assert done.returncode == 2 and "comma-separated integers" in done.stderr


def test_corrupt_store_is_a_clear_error(tmp_path):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "catalog.json").write_text("{not json")
    done = run_cli("explain", str(tmp_path / "bad"))
    assert done.returncode == 2 and "corrupt catalog.json" in done.stderr


def test_workflow_from_a_python_file(tmp_path, capsys):
    script = tmp_path / "flow.py"
    script.write_text(
        "import numpy as np, subzero as sz\n"
        "def build():\n"
        "    wf = sz.Workflow('file')\n"
        "    x = wf.input('x')\n"
        "    wf.add(sz.operators.Transpose(), x, name='t')\n"
        "    return wf, {'x': np.arange(6.).reshape(2, 3)}\n")
    assert main(["run", str(script), "--store", str(tmp_path / "s"), "--executor", "local"]) == 0
    assert main(["query", str(tmp_path / "s"), "backward", "t", "--to", "x", "--cells", "2,1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["cells"] == [[1, 2]]


def test_demo_runs_the_astronomy_workflow_and_prints_both_queries(tmp_path, capsys, store):
    assert main(["demo", "--quick", "--executor", "local", "--store", str(tmp_path / "d")]) == 0
    out = capsys.readouterr().out
    assert "ran the astronomy workflow" in out and "UDF     stars:" in out
    assert "backward: a star of" in out and "forward: cosmic-ray pixel" in out
    assert main(["demo", "--quick", "--executor", "local", "--store", str(tmp_path / "d")]) == 0  # rebuilt
    before = (store / "catalog.json").read_bytes()
    assert main(["demo", "--quick", "--executor", "local", "--store", str(store)]) == 2  # not the demo's
    assert (store / "catalog.json").read_bytes() == before

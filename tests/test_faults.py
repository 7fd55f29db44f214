"""A store that never lies: kill -9 at random moments of local and Spark runs, then resume; every
file kind of a finished store damaged; runs racing for one store while another is queried; a
read-only store; and every bad input of issue 13 answered by a clear error.

The full form (>= 20 kill trials, every damage) is ``subzero bench faults``
(`subzero_bench.faults`); this module runs a few trials of each, judged the same way.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

import subzero as sz
from subzero import operators as ops
from subzero_bench import faults as F
from subzero.tools.cli import main
from subzero.store.cache import query_log_path
from subzero.store.lock import LOCK_NAME
from subzero.store.sealed import seal_json
from subzero.store.shards import close_all

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def clean(faults_clean):
    """A clean run of the faults workflow (every strategy pinned) and its outputs and answers
    (tests/conftest.py: made once per session, tests/test_object_faults.py judges against it too)."""
    return faults_clean


def cli_error(capsys, argv: list[str], fragment: str) -> str:
    """``subzero ARGV`` fails with exit code 2 and one line on stderr holding ``fragment``."""
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("subzero: error: "), err
    assert fragment in err and "Traceback" not in err, err
    return err


# -- kill -9 ------------------------------------------------------------------------------------------------------

def test_kill_local_runs_at_random_moments_then_resume(clean):
    """Three local runs (pinned, optimized; one resumed run killed again) killed at random moments:
    the store refuses queries or answers exactly; resumed, it equals the clean run."""
    root, _, ref = clean
    rng = random.Random(7)
    duration = F.timed_run(root / "timed", "local", "pinned")
    trials = [F.kill_trial(root, ref, "local", plan, duration, rng, kills=kills)
              for plan, kills in (("pinned", 1), ("optimized", 1), ("pinned", 2))]
    for t in trials:
        assert t.ok, t
        assert t.resume == "exact" and t.final == "exact", t  # a local run is always resumable
        assert t.open in ("refused", "exact"), t
        if t.open == "refused" and t.state != "no catalog":
            assert "resume it (--resume)" in t.message or "does not exist" in t.message, t.message


@pytest.mark.slow  # a Spark run in a new process, killed, resumed: about 35 s
def test_kill_a_spark_run_then_resume(clean, tmp_path):
    """A Spark run (its JVM and Python workers included) killed while it computes (0.26 s after its
    fifth node committed): nothing is left running, the store refuses queries, its committed nodes
    survive, and a resumed run (local: the lineage is the same) is exact."""
    root, _, ref = clean
    rng = random.Random(5)
    trial = F.kill_trial(root, ref, "spark", "pinned", 8.0, rng, resume_executor="local", by_progress=True)
    assert trial.ok, trial
    committed = re.match(r"running, (\d+) node\(s\) committed", trial.state)  # the sixth may commit in 0.26 s
    assert trial.moment == "5 node(s) + 0.26 s" and trial.killed and committed, trial
    assert 5 <= int(committed.group(1)) < F.NODES, trial  # killed while it computes, never after it finished
    assert not trial.leaked and trial.committed_kept and trial.resume == "exact" and trial.final == "exact", trial


# -- damaged files -------------------------------------------------------------------------------------------------

CASES = [("catalog", "catalog.json"), ("marker", "subzero-store.json"), ("manifest", "manifests/bright.json"),
         ("manifest", "manifests/stars.json"), ("operator", "operators/blur.pkl"),
         ("operator", "operators/stars.pkl"), ("array metadata", "arrays/x/zarr.json"),
         ("array metadata", "arrays/blur/zarr.json"), ("array chunk", "arrays/blur/c/1/2"),
         ("array chunk", "arrays/diff/c/0/0"), ("lock file", LOCK_NAME), ("shard", "bright/FullMany-backward/.mdb"),
         ("shard", "bright/FullMany-backward/.255.dat"), ("shard", "bright/FullMany-backward/.255.idx"),
         ("shard", "stars/CompMany-backward/STAR.mdb"), ("shard", "stars/PayOne-backward/STAR.mdb"),
         ("shard", "rays/FullMany-forward/.0.idx"),
         ("shard", "diff/FullOne-backward/.mdb")]


def _resolve(store: Path, rel: str, ref: F.Reference | None = None) -> str:
    """A case's file: shards are named per attempt, so ``NODE/STRATEGY/.SUFFIX`` picks the first one,
    and ``NODE/STRATEGY/STAR.SUFFIX`` the one of the tile holding the queried star."""
    if not rel.startswith(("bright/", "stars/", "rays/", "diff/")):
        return rel
    node_dir, suffix = rel.rsplit("/", 1)
    found = sorted((store / "lineage" / node_dir).glob("t*" + suffix.removeprefix("STAR")))
    if suffix.startswith("STAR"):
        stems = F.tile_shards(store, node_dir.split("/")[0], F.star_tile(ref))
        found = [f for f in found if f.name.split(".", 1)[0] in stems]
    assert found, rel
    return str(found[0].relative_to(store))


@pytest.mark.parametrize("how", ["flip middle byte", "truncate to half"])
@pytest.mark.parametrize("kind, rel", CASES, ids=[f"{k}:{r}" for k, r in CASES])
def test_a_damaged_file_never_gives_a_wrong_answer(clean, kind, rel, how):
    """Every query (forced and chosen strategies) and every output read answers exactly or refuses with a
    StoreError; nothing crashes; the queries leave the damaged store's files as they were."""
    root, store, ref = clean
    case = F.damage_trial(store, root, ref, kind, _resolve(store, rel, ref), how)
    assert case.wrong == 0 and case.crashed == 0, case
    assert case.untouched, "queries wrote to the store"
    if rel in ("stars/CompMany-backward/STAR.mdb", "manifests/stars.json"):  # what the chosen strategy reads
        assert case.reexecuted > 0, case
    if kind in ("catalog", "operator"):
        assert case.outcome == "refused", case
    if kind in ("marker", "lock file"):  # not read by queries at all
        assert case.outcome == "exact", case
    if kind in ("shard", "manifest"):  # lineage is a cache: chosen strategies fall back to re-execution
        assert case.exact > 0, case


def test_damaged_lineage_is_re_executed_unless_forced(clean, tmp_path):
    """A damaged R-tree: a chosen strategy re-runs the tile (logged once per step); a forced one is a
    StoreError naming the file, on the command line one line and exit code 2."""
    _, store, ref = clean
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    F.damage(copy / _resolve(copy, "bright/FullMany-backward/.255.dat"), "flip middle byte")
    close_all()
    run = sz.open_run(copy)
    box = [(20, 60), (30, 90)]
    want = ref.answers[3]
    got = run.backward("bright", box=box, to="diff", using={"bright": "BlackBox"})
    assert np.array_equal(got, want)
    with pytest.raises(sz.StoreError, match=r"\.255\.dat.*does not match its checksum"):
        run.backward("bright", box=box, to="diff", using={"bright": "FullMany"})
    stored = run.strategies["bright"]
    assert "FullMany/backward" in stored
    from subzero.query import step
    from subzero.frontier import Frontier
    from subzero.modes import Direction, Strategy

    damaged: list[str] = []
    node = run.node("bright")
    frontier = Frontier.of_boxes(np.array([[20, 30]]), np.array([[60, 90]]), run.shape("bright"))
    result = step(run.lineage, node, frontier, 0, Direction.BACKWARD, Strategy.parse("FullMany/backward"),
                  damaged=damaged)
    assert np.array_equal(result.coords(), want) and len(damaged) >= 1 and ".255.dat" in damaged[0]


def test_damaged_lineage_is_reported_once(clean, tmp_path, caplog):
    _, store, ref = clean
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    F.damage(copy / "manifests" / "stars.json", "flip middle byte")
    close_all()
    run = sz.open_run(copy)
    with caplog.at_level("WARNING", logger="subzero.query"):
        for _ in range(3):  # the stars' stored lineage is chosen, found damaged, and the tiles re-run
            assert np.array_equal(F.ask(run, F.QUERIES[0], ref.cells, forced=False), ref.answers[0])
    warnings = [r for r in caplog.records if "manifest of node 'stars'" in r.getMessage()]
    assert len(warnings) == 1 and "re-running stars" in warnings[0].getMessage()
    assert "manifest of node 'stars'" in run.last_query[0]["damaged_lineage"]


def test_a_damaged_store_on_the_command_line_is_one_line(clean, tmp_path, capsys):
    _, store, ref = clean
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    F.damage(copy / "operators" / "stars.pkl", "flip middle byte")
    cli_error(capsys, ["query", str(copy), "backward", "stars", "--to", "x", "--cells", "1,1"],
              "operator of node 'stars'")
    F.damage(copy / "catalog.json", "truncate to half")
    cli_error(capsys, ["explain", str(copy)], "corrupt catalog.json")


def test_the_bench_writes_its_tables(tmp_path):
    """``subzero bench faults`` in small: one kill, every file kind cut by a byte, one race."""
    doc = F.run_faults(tmp_path, kills_local=1, kills_spark=0, races=1, damages=("cut last byte",), seed=1,
                       log=lambda line: None, s3_runs=0)  # the object-store trials: tests/test_object_faults.py
    assert doc["ok"], doc
    assert len(doc["kills"]) == 1 and len(doc["damage"]) >= 16 and len(doc["races"]) == 1
    report = (tmp_path / "REPORT.md").read_text()
    assert "## kill -9 at a random moment" in report and "| local | pinned |" in report
    assert "## One damaged file in a finished store" in report and "| catalog | cut last byte | refused |" in report
    assert "1/1 rounds: one run won" in report
    assert json.loads((tmp_path / "results.json").read_text())["ok"] is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["REPORT.md", "results.json"]  # no store left behind


# -- racing writers, readers beside writers --------------------------------------------------------------------------

def test_two_runs_racing_for_one_store_while_another_is_queried(clean):
    """Two runs start into one new store at once: one wins, the other is refused naming the winner's pid;
    meanwhile every query of another store answers exactly."""
    root, store, ref = clean
    r = F.race_round(root, store, ref)
    assert r.ok, r
    assert r.reader_queries >= len(F.QUERIES)


# -- readers never write --------------------------------------------------------------------------------------------

def _snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))
            if p.is_file()}


def _hundred_queries(store: str, ref: F.Reference) -> list[str]:
    """100 queries by stored strategies; returns problems (wrong answers, steps that did not use them)."""
    close_all()
    run = sz.open_run(store)
    problems = []
    forced = [(q, a) for q, a in zip(F.QUERIES, ref.answers) if q[4] and "BlackBox" not in q[4].values()]
    for k in range(100):
        q, want = forced[k % len(forced)]
        if not np.array_equal(F.ask(run, q, ref.cells), want):
            problems.append(f"wrong answer to {q}")
        for s in run.last_query:
            if s["switched_to_blackbox"] or s["damaged_lineage"]:
                problems.append(f"step {s['node']} did not use stored lineage: {s}")
        if k % 25 == 0:
            close_all()
    close_all()
    return problems


def test_a_read_only_store_answers_every_query_from_stored_lineage(clean):
    """chmod -R a-w; 100 queries by stored strategies, all exact, none re-executed; the files are
    byte-identical (and keep their times) afterwards.  As root, the reader is a child that drops to
    ``nobody`` (root ignores permission bits)."""
    _, store, ref = clean
    base = tempfile.mkdtemp(prefix="subzero-ro-")  # outside pytest's private (0700) tree
    os.chmod(base, 0o755)
    ro = Path(base) / "store"
    shutil.copytree(store, ro)
    try:
        for dirpath, _, files in os.walk(ro):
            for name in files:
                os.chmod(os.path.join(dirpath, name), 0o444)
            os.chmod(dirpath, 0o555)
        before = _snapshot(ro)
        if os.geteuid() != 0:
            assert _hundred_queries(str(ro), ref) == []
        else:
            got = F.as_nobody(lambda: (os.access(ro, os.W_OK), _hundred_queries(str(ro), ref)))
            if got[0] == "no setuid":
                pytest.skip(f"running as root and cannot drop privileges here ({got[1]})")
            assert got[0] == "ok", got
            assert got[1][0] is False, "the store should not be writable for the reader"
            assert got[1][1] == [], got[1][1][:5]
        assert _snapshot(ro) == before
    finally:
        for dirpath, _, _ in os.walk(ro):
            os.chmod(dirpath, 0o755)
        shutil.rmtree(base, ignore_errors=True)


def test_open_run_and_queries_write_nothing(clean):
    _, store, ref = clean
    before = _snapshot(store)
    for _ in range(3):
        run = sz.open_run(store)
        for q in F.QUERIES:
            F.ask(run, q, ref.cells)
        np.asarray(run.output("stars"))
        close_all()
    assert _snapshot(store) == before


# -- issue 13's bad inputs, one by one ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A small finished run (API and command line) and a workflow file."""
    root = tmp_path_factory.mktemp("bad")
    flow = root / "flow.py"
    flow.write_text("import numpy as np\nimport subzero as sz\nfrom subzero import operators as ops\n\n"
                    "def build(inputs):\n    wf = sz.Workflow('flow')\n"
                    "    b = wf.add(ops.GaussianFilter(1.0), wf.input('x'), name='blur')\n"
                    "    wf.add(ops.Label(), wf.add(ops.Threshold(0.5), b, name='bright'), name='stars')\n"
                    "    return wf, {'x': np.random.default_rng(0).random((40, 50))}\n")
    assert main(["run", str(flow), "--store", str(root / "run"), "--executor", "local", "-q",
                 "--strategy", "stars=FullMany", "--tile", "16"]) == 0
    return root


def test_a_huge_cell(small, capsys):
    cli_error(capsys, ["query", str(small / "run"), "backward", "stars", "--to", "x", "--cells",
                       "99999999999999999999999,0"], "is out of bounds")
    cli_error(capsys, ["query", str(small / "run"), "backward", "stars", "--to", "x", "--box",
                       "0:99999999999999999999999,0:2"], "is out of bounds")
    run = sz.open_run(small / "run")
    with pytest.raises(sz.LineageError, match="out of bounds"):
        run.backward("stars", [(10**23, 0)], to="x")


@pytest.mark.parametrize("argv, fragment", [
    (["--cells", "-1,0"], "cell (-1, 0) is out of bounds for node 'stars' of shape (40, 50)"),
    (["--box", "-3:2,0:1"], "out of bounds"),
])
def test_negative_cells_reach_the_query_not_argparse(small, capsys, argv, fragment):
    cli_error(capsys, ["query", str(small / "run"), "backward", "stars", "--to", "x", *argv], fragment)


@pytest.mark.parametrize("argv, fragment", [
    (["--max-disk", "-5MB"], "max_disk: got '-5MB'"),
    (["--max-runtime", "-2x"], "max_runtime"),
    (["--tile", "0"], "tile_shape must be a positive int"),
    (["--tile", "-1"], "tile_shape must be a positive int"),
])
def test_bad_run_options_are_refused_before_anything_is_written(small, capsys, argv, fragment):
    cli_error(capsys, ["run", str(small / "flow.py"), "--store", str(small / "new"), "--executor", "local", *argv],
              fragment)
    assert not (small / "new").exists()


def test_a_catalog_missing_a_node_entry(small, tmp_path, capsys):
    copy = tmp_path / "run"
    shutil.copytree(small / "run", copy)
    data = json.loads((copy / "catalog.json").read_text())
    data.pop("checksum")
    del data["nodes"]["bright"]
    (copy / "catalog.json").write_bytes(seal_json(data, indent=1))  # a consistent catalog that lacks a node
    with pytest.raises(sz.StoreError, match=r"lacks node\(s\) \['bright'\]"):
        sz.open_run(copy)
    cli_error(capsys, ["explain", str(copy)], "lacks node(s) ['bright']")
    data["status"] = "failed"  # a partial store may lack nodes, but never the inputs of one it has
    (copy / "catalog.json").write_bytes(seal_json(data, indent=1))
    with pytest.raises(sz.StoreError, match=r"node\(s\) \['stars'\] committed without their inputs"):
        sz.open_run(copy, partial=True)
    cli_error(capsys, ["explain", str(copy)], "committed without their inputs")


class ReturnsNone(sz.Operator):
    def run(self, ctx, x):
        return None


def test_an_operator_returning_none(tmp_path):
    wf = sz.Workflow("none")
    wf.add(ReturnsNone(), wf.input("x"), name="nothing")
    with pytest.raises(sz.WorkflowError, match=r"node 'nothing' \(ReturnsNone\): run\(\) returned None"):
        wf.run({"x": np.ones((4, 4))}, store=tmp_path / "s", executor="local")


@pytest.mark.parametrize("body, fragment", [
    ("def build():\n    return None\n", "build() must return a Workflow or (workflow, inputs dict), got NoneType"),
    ("def build():\n    return 3, 4\n", "got tuple"),
    ("build = 3\n", "must define build()"),
])
def test_a_build_that_does_not_return_a_workflow(tmp_path, capsys, body, fragment):
    (tmp_path / "bad.py").write_text(body)
    cli_error(capsys, ["run", str(tmp_path / "bad.py"), "--store", str(tmp_path / "s"), "--executor", "local"],
              fragment)
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("using, fragment", [
    ("FullOne", "using= must be a dict of node -> strategy name"),
    (["FullOne"], "using= must be a dict of node -> strategy name"),
    ({"stars": ["FullMany"]}, "using= for node 'stars' must be a strategy name"),
    ({"x": "FullOne"}, "using= names 'x', an input array"),
    ({"stars": "PayOne"}, "node 'stars' did not store 'PayOne/backward'"),
])
def test_bad_using(small, using, fragment):
    run = sz.open_run(small / "run")
    with pytest.raises(sz.LineageError) as err:
        run.backward("stars", [(1, 1)], to="x", using=using)
    assert fragment in str(err.value)


def test_bad_using_on_the_command_line(small, capsys):
    base = ["query", str(small / "run"), "backward", "stars", "--to", "x", "--cells", "1,1"]
    cli_error(capsys, base + ["--using", "x=FullOne"], "an input array")
    cli_error(capsys, base + ["--using", "stars"], "must look like NODE=STRATEGY")
    cli_error(capsys, base + ["--using", "stars=Nope"], "unknown strategy 'Nope'")


def test_a_torn_query_log_does_not_break_explain(small, capsys):
    run = sz.open_run(small / "run")
    run.backward("stars", [(1, 1)], to="x")
    assert run.query_log()  # reading writes the waiting records (the log is written in batches)
    with open(query_log_path(run.path), "a") as fh:
        fh.write('{"direction": "backw')  # a reader killed mid-line
    assert main(["explain", str(small / "run")]) == 0
    assert "stars" in capsys.readouterr().out


@pytest.mark.parametrize("text, fragment", [
    ('[{"direction": "backward", "node": "stars", "to": "x", "cells": [[1, 2]', "is not valid JSON"),
    ('{"direction": "backward"}', "workload must be a list of queries"),
    ('[{"direction": "back", "node": "stars", "to": "x"}]', "direction must be 'backward' or 'forward'"),
    ('[{"direction": "backward", "node": "blur", "to": "x", "cells": [[100, 2]]}]',
     "cell (100, 2) is out of bounds for node 'blur' of shape (40, 50)"),
    ('[{"direction": "backward", "node": "blur", "to": "x", "cells": [[1, 2, 3]]}]', "must have 2 coordinates"),
    ('[{"direction": "backward", "node": "blur", "to": "x", "cells": [["a", 2]]}]', "integer coordinates"),
    ('[{"direction": "backward", "node": "stars", "to": "x", "cells": [[-1, 2]]}]', "out of bounds"),
    ('[{"direction": "backward", "node": "nope", "to": "x"}]', "unknown node 'nope'"),
])
def test_a_bad_workload_file_is_named(small, tmp_path, capsys, text, fragment):
    path = tmp_path / "queries.json"
    path.write_text(text)
    err = cli_error(capsys, ["run", str(small / "flow.py"), "--store", str(tmp_path / "s"), "--executor", "local",
                             "--workload", str(path)], fragment)
    assert str(path) in err
    assert not (tmp_path / "s").exists()


def test_workload_cells_are_checked_from_python(tmp_path):
    wf = sz.Workflow("w")
    wf.add(ops.GaussianFilter(1.0), wf.input("x"), name="blur")
    bad = [{"direction": "backward", "node": "blur", "to": "x", "cells": [[7, 0]]}]
    with pytest.raises(sz.WorkflowError, match=r"workload query 0: cell \(7, 0\) is out of bounds"):
        wf.run({"x": np.ones((5, 5))}, store=tmp_path / "s", executor="local", workload=bad)
    assert not (tmp_path / "s").exists()


def test_a_store_path_that_is_a_regular_file(small, tmp_path, capsys):
    path = tmp_path / "a-file"
    path.write_text("not a store")
    for argv in (["run", str(small / "flow.py"), "--store", str(path), "--executor", "local"],
                 ["run", str(small / "flow.py"), "--store", str(path), "--executor", "local", "--resume"],
                 ["query", str(path), "backward", "stars", "--to", "x", "--cells", "1,1"]):
        cli_error(capsys, argv, "is a regular file")
    wf = sz.Workflow("w")
    wf.add(ops.GaussianFilter(1.0), wf.input("x"))
    with pytest.raises(sz.StoreError, match="is a regular file"):
        wf.run({"x": np.ones((3, 3))}, store=path, executor="local")
    assert path.read_text() == "not a store"


@pytest.mark.parametrize("how, fragment", [("delete", "does not exist"), ("truncate", "not a readable .npy")])
def test_a_deleted_or_truncated_input_file(small, tmp_path, capsys, how, fragment):
    path = tmp_path / "x.npy"
    np.save(path, np.random.default_rng(1).random((40, 50)))
    if how == "delete":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[:500])
    cli_error(capsys, ["run", str(small / "flow.py"), "--store", str(tmp_path / "s"), "--executor", "local",
                       "--input", f"x={path}"], fragment)
    assert not (tmp_path / "s").exists()


def test_an_existing_store_is_refused_before_spark_starts(small):
    """No JVM, no five seconds: the store is checked first."""
    code = (f"import sys, time\nfrom subzero.tools.cli import main\nt = time.time()\n"
            f"rc = main(['run', {str(small / 'flow.py')!r}, '--store', {str(small / 'run')!r}, '--executor', 'spark'])\n"
            "print(rc, 'pyspark' in sys.modules, round(time.time() - t, 1))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    rc, spark, _ = done.stdout.split()
    assert (rc, spark) == ("2", "False"), done.stdout + done.stderr
    assert "already exists and is not empty" in done.stderr and "--overwrite" in done.stderr

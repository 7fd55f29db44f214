"""The damaged-store corpus: every file kind of a store x every damage, through the API and the CLI.

One small store (the demo workflow, ``--quick``, local executor, with FULL, PAY, COMP and
FullRange lineage pinned so that it holds shards, R-trees and an inline table) is built once
per module and copied per case.  Each case damages one file (truncated, a byte flipped,
deleted, replaced by a directory) or one directory (deleted, replaced by a file) and asks
every query (chosen and forced strategies) and output read: each must answer exactly what
the undamaged store answers or refuse with our own error class (never a raw ``OSError``,
never a wrong answer), and the store must be left exactly as it was.  The unit of the module
is `subzero.store.failures`, the one place that words OS failures on store files.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import subzero as sz
from subzero_bench import faults as F
from subzero.tools.cli import main
from subzero.store.failures import REBUILD, reading, store_file_error, why
from subzero.store.lock import LOCK_NAME
from subzero.store.shards import close_all

ROOT = Path(__file__).resolve().parents[1]
TILE = (24, 32)
STRATEGIES = {"blur": ["FullMany", "FullOne/forward"], "crd_a": ["PayOne", "CompMany"], "merge": "FullRange"}

#: (direction, node, to, cells, using): chosen and forced, through every kind of stored lineage
QUERIES: list[tuple[str, str, str, Any, dict | None]] = [
    ("backward", "blur", "exposure_a", [(10, 10), (30, 40)], None),
    ("backward", "blur", "exposure_a", [(10, 10), (30, 40)], {"blur": "FullMany"}),
    ("forward", "merge", "blur", [(5, 5), (40, 60)], {"blur": "FullOne/forward"}),
    ("backward", "crd_a", "exposure_a", "rays", None),
    ("backward", "crd_a", "exposure_a", "rays", {"crd_a": "PayOne"}),
    ("backward", "crd_a", "exposure_a", "rays", {"crd_a": "CompMany"}),
    ("backward", "merge", "exposure_b", [(1, 1), (47, 63)], {"merge": "FullRange"}),
    ("backward", "column_total", "exposure_a", [(3,)], None),
    ("forward", "exposure_a", "column_total", [(20, 30)], None),
]
OUTPUTS = ("exposure_a", "blur", "crd_a", "column_total")

#: (kind, path in the store; ``NODE/STRATEGY/.SUFFIX`` is the first shard's file of that suffix)
FILES = [("catalog", "catalog.json"), ("marker", "subzero-store.json"), ("writer lock", LOCK_NAME),
         ("manifest (shards)", "manifests/blur.json"), ("manifest (payloads)", "manifests/crd_a.json"),
         ("manifest (inline)", "manifests/merge.json"),
         ("operator", "operators/blur.pkl"), ("operator", "operators/crd_a.pkl"),
         ("array metadata (input)", "arrays/exposure_a/zarr.json"), ("array metadata", "arrays/blur/zarr.json"),
         ("array chunk (input)", "arrays/exposure_a/c/0/0"), ("array chunk", "arrays/blur/c/0/0"),
         ("LMDB shard", "blur/FullMany-backward/.mdb"), ("LMDB shard", "blur/FullOne-forward/.mdb"),
         ("LMDB shard", "crd_a/PayOne-backward/.mdb"), ("LMDB shard", "crd_a/CompMany-backward/.mdb"),
         ("R-tree data", "blur/FullMany-backward/.255.dat"), ("R-tree index", "blur/FullMany-backward/.255.idx"),
         ("R-tree data", "crd_a/CompMany-backward/.0.dat"), ("R-tree index", "crd_a/CompMany-backward/.0.idx")]
FILE_DAMAGES = ("truncate to half", "flip middle byte", "delete", "replace by a directory")
DIRECTORIES = [("directory", d) for d in ("arrays", "arrays/blur", "arrays/blur/c", "operators", "manifests",
                                          "lineage", "lineage/blur", "lineage/crd_a/PayOne-backward")]

LINEAGE_KINDS = ("manifest", "LMDB shard", "R-tree")  # a cache: chosen strategies re-run the operator instead
OPENS_EVERYTHING = ("catalog", "operator")            # open_run reads them all: damage refuses the store


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """The undamaged store and its answers (checked against re-execution) and outputs."""
    from subzero.workflows.demo import build

    root = tmp_path_factory.mktemp("damaged")
    wf, inputs = build(quick=True)
    run = wf.run(inputs, store=str(root / "clean"), executor="local", tile_shape=TILE, strategies=STRATEGIES,
                 keep="all")  # the damage trials reach every array
    rays = np.argwhere(np.asarray(run.output("crd_a")) > 0)[:3]
    cells = {"rays": np.concatenate([rays, [[0, 0]]])}
    answers = []
    for q in QUERIES:
        got = _ask(run, q, cells)
        again = _ask(run, (*q[:4], {n: "BlackBox" for n in run.strategies}), cells)
        assert np.array_equal(got, again), q  # stored lineage and re-execution agree
        answers.append(got)
    outputs = {n: np.asarray(run.output(n)) for n in OUTPUTS}
    close_all()
    return root / "clean", cells, answers, outputs


def _ask(run, query, cells) -> np.ndarray:
    direction, node, to, start, using = query
    fn = run.backward if direction == "backward" else run.forward
    return fn(node, cells[start] if isinstance(start, str) else start, to=to, using=using)


def _path(store: Path, rel: str) -> Path:
    if rel.startswith(("blur/", "crd_a/")):
        node_dir, suffix = rel.rsplit("/", 1)
        found = sorted((store / "lineage" / node_dir).glob("t*" + suffix))
        assert found, rel
        return found[0]
    return store / rel


def _outcomes(store: Path, cells, answers, outputs) -> tuple[str, list[str], list[str]]:
    """(how the store opened, the outcome of every query and output read, the refusals' messages)."""
    try:
        run = sz.open_run(store)
    except sz.SubZeroError as exc:
        return "refused", [], [str(exc)]
    outcomes, messages = [], []

    def check(fn, want) -> None:
        try:
            got = fn()
        except sz.SubZeroError as exc:
            outcomes.append("refused")
            messages.append(str(exc))
            return
        outcomes.append("exact" if np.array_equal(np.asarray(got), want) else "WRONG")

    for q, want in zip(QUERIES, answers):
        check(lambda q=q: _ask(run, q, cells), want)
    for name, want in outputs.items():
        check(lambda name=name: np.asarray(run.output(name)), want)
    return "opened", outcomes, messages


def _damaged(clean_store: Path, tmp_path: Path, rel: str, how: str) -> Path:
    store = tmp_path / "store"
    shutil.copytree(clean_store, store)
    F.damage(_path(store, rel), how)
    close_all()
    return store


CASES = [(k, r, h) for k, r in FILES for h in FILE_DAMAGES] + [(k, r, h) for k, r in DIRECTORIES
                                                               for h in F.DIRECTORY_DAMAGES]


@pytest.mark.parametrize("kind, rel, how", CASES, ids=[f"{r}:{h}" for _, r, h in CASES])
def test_every_damage_answers_exactly_or_refuses_with_our_error(clean, tmp_path, caplog, kind, rel, how):
    """Our error class or the undamaged store's exact answer; never a raw OSError, never a wrong answer;
    the queries leave the damaged store as it was."""
    clean_store, cells, answers, outputs = clean
    store = _damaged(clean_store, tmp_path, rel, how)
    before = F.snapshot(store)
    with caplog.at_level("ERROR", logger="subzero.query"):  # the fallback's warnings: not the point here
        opened, outcomes, messages = _outcomes(store, cells, answers, outputs)
    close_all()
    assert "WRONG" not in outcomes, (outcomes, messages)
    assert F.snapshot(store) == before, "queries changed the store"
    for m in messages:
        assert "[Errno" not in m and "Traceback" not in m, m  # worded, not an OS error passed through
    forced = [q[4] is not None for q in QUERIES] + [False] * len(OUTPUTS)
    if kind in ("marker", "writer lock"):  # never read by queries
        assert opened == "opened" and set(outcomes) == {"exact"}, (outcomes, messages)
    elif kind.startswith(OPENS_EVERYTHING) or rel == "operators":
        assert opened == "refused", outcomes
        assert any(w in messages[0] for w in ("catalog", "operator")), messages
    elif kind.startswith(LINEAGE_KINDS) or rel.startswith("lineage") or rel == "manifests":
        assert opened == "opened", messages
        unforced = [o for o, f in zip(outcomes, forced) if not f]
        assert set(unforced) == {"exact"}, (outcomes, messages)  # re-executed, exactly
    else:
        assert opened == "opened", messages
        assert set(outcomes) <= {"exact", "refused"}, outcomes


UNREADABLE = ["catalog.json", "manifests/blur.json", "operators/crd_a.pkl", "arrays/blur/c/0/0",
              "blur/FullMany-backward/.mdb", "blur/FullMany-backward/.255.dat", "crd_a/CompMany-backward/.0.idx",
              "lineage/blur", "arrays/exposure_a"]


@pytest.mark.parametrize("rel", UNREADABLE)
def test_a_file_or_directory_the_reader_may_not_read(clean, rel):
    """chmod 000 on one file or directory, queried by a reader without the right (``nobody``, as root ignores
    permission bits): our error saying to grant read access, or the exact answer (lineage re-executed)."""
    clean_store, cells, answers, outputs = clean
    base = Path(tempfile.mkdtemp(prefix="subzero-perm-"))  # outside pytest's private (0700) tree
    try:
        store = base / "store"
        shutil.copytree(clean_store, store)
        for p in [base, *store.rglob("*"), store]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        _path(store, rel).chmod(0)
        close_all()
        got = F.as_nobody(lambda: _outcomes(store, cells, answers, outputs)) if os.geteuid() == 0 else \
            ("ok", _outcomes(store, cells, answers, outputs))
        if got[0] == "no setuid":
            pytest.skip(f"running as root and cannot drop privileges here ({got[1]})")
        assert got[0] == "ok", got
        opened, outcomes, messages = got[1]
        assert "WRONG" not in outcomes and messages, (outcomes, messages)
        for m in messages:
            assert "[Errno" not in m and "Traceback" not in m, m
        assert any("permission denied" in m and "give this user read access" in m for m in messages), messages
        if rel.startswith(("lineage", "blur/", "crd_a/", "manifests")):
            forced = [q[4] is not None for q in QUERIES] + [False] * len(OUTPUTS)
            assert opened == "opened" and {o for o, f in zip(outcomes, forced) if not f} == {"exact"}, outcomes
    finally:
        for p in [*base.rglob("*")]:
            if not p.is_symlink():
                p.chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)


HOLES = [("catalog.json", "replace by a directory"), ("catalog.json", "delete"), ("lineage", "replace by a file"),
         ("manifests/blur.json", "replace by a directory")]


@pytest.mark.parametrize("rel, how", HOLES)
def test_the_four_holes_of_issue_24(clean, tmp_path, rel, how):
    """The cases that leaked a raw OSError: each is now a StoreError naming the file and the fix, and lineage
    that is absent in any way is re-executed exactly unless its strategy is forced."""
    clean_store, cells, answers, _ = clean
    store = _damaged(clean_store, tmp_path, rel, how)
    if rel == "catalog.json":
        with pytest.raises(sz.StoreError, match=r"(the catalog is a directory where a file belongs|lost its "
                                                r"catalog\.json).*re-run the workflow into a new store") as err:
            sz.open_run(store)
        assert "catalog.json" in str(err.value)
        return
    run = sz.open_run(store)
    assert np.array_equal(_ask(run, QUERIES[0], cells), answers[0])  # chosen: re-executed
    with pytest.raises(sz.StoreError, match=r"(cannot be reached: a file stands where a directory belongs|is a "
                                            r"directory where a file belongs).*re-run the workflow to rebuild it"):
        _ask(run, QUERIES[1], cells)  # forced FullMany


# -- the command line: one line, exit code 2 -----------------------------------------------------------------------

CLI_CASES = [
    ("catalog.json", "replace by a directory", ["info"], "the catalog is a directory where a file belongs"),
    ("catalog.json", "truncate to half", ["explain"], "corrupt catalog.json"),
    ("lineage", "replace by a file", ["query", "backward", "blur", "--to", "exposure_a", "--cells", "10,10",
                                      "--using", "blur=FullMany"], "cannot be reached"),
    ("manifests/blur.json", "replace by a directory", ["query", "backward", "blur", "--to", "exposure_a",
                                                       "--cells", "10,10", "--using", "blur=FullMany"],
     "the manifest of node 'blur' is a directory where a file belongs"),
    ("operators/blur.pkl", "delete", ["query", "backward", "blur", "--to", "exposure_a", "--cells", "10,10"],
     "the operator of node 'blur' is missing"),
    ("arrays/blur/c/0/0", "replace by a directory",
     ["query", "backward", "hits", "--to", "blur", "--cells", "1,1", "--using", "hits=BlackBox"],
     "is a directory where a file belongs"),
    ("arrays/blur/zarr.json", "delete", ["query", "backward", "hits", "--to", "blur", "--cells", "1,1",
                                         "--using", "hits=BlackBox"], "the metadata of array"),
    ("blur/FullMany-backward/.255.dat", "replace by a directory",
     ["query", "backward", "blur", "--to", "exposure_a", "--box", "0:24,0:32", "--using", "blur=FullMany"],
     "is a directory where a file belongs"),
]


@pytest.mark.parametrize("rel, how, argv, fragment", CLI_CASES, ids=[f"{c[0]}:{c[1]}" for c in CLI_CASES])
def test_the_command_line_says_one_line_and_exits_2(clean, tmp_path, capsys, rel, how, argv, fragment):
    clean_store, *_ = clean
    store = _damaged(clean_store, tmp_path, rel, how)
    before = F.snapshot(store)
    capsys.readouterr()
    assert main([argv[0], str(store), *argv[1:]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("subzero: error: "), err
    assert fragment in err and "[Errno" not in err and "Traceback" not in err, err
    close_all()
    assert F.snapshot(store) == before


def test_the_command_line_in_a_fresh_process(clean, tmp_path):
    """Two real processes (the rest run in-process): a directory for a catalog, and forced lineage under a file."""
    clean_store, *_ = clean
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    for n, (rel, how, argv, fragment) in enumerate([CLI_CASES[0], CLI_CASES[2]]):
        store = _damaged(clean_store, tmp_path / str(n), rel, how)
        done = subprocess.run([sys.executable, "-m", "subzero", argv[0], str(store), *argv[1:]], capture_output=True,
                              text=True, env=env, timeout=120)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and fragment in done.stderr and "Traceback" not in done.stderr, done.stderr


# -- writers meeting a damaged store ---------------------------------------------------------------------------------

WRITER_CASES = [  # (damaged, how, overwrite or resume, None: the run succeeds, else what the StoreError says)
    (LOCK_NAME, "replace by a directory", "overwrite", "the writer lock is a directory where a file belongs"),
    (LOCK_NAME, "truncate to half", "overwrite", None),   # a stale lock, unreadable: taken over
    (LOCK_NAME, "flip middle byte", "overwrite", None),
    ("subzero-store.json", "replace by a directory", "overwrite", None),
    ("catalog.json", "replace by a directory", "resume", "the catalog is a directory where a file belongs"),
    ("operators", "replace by a file", "resume", "the operator of node"),
]


@pytest.mark.parametrize("rel, how, mode, refusal", WRITER_CASES, ids=[f"{c[0]}:{c[1]}:{c[2]}" for c in WRITER_CASES])
def test_a_run_into_a_damaged_store_is_refused_or_succeeds_never_a_raw_error(clean, tmp_path, rel, how, mode,
                                                                             refusal):
    """``overwrite`` and ``resume`` over a damaged store: the run succeeds (a damaged stale lock is taken over, a
    damaged marker rewritten) or is refused with a StoreError naming the file; a refused run removes nothing."""
    from subzero.workflows.demo import build

    clean_store, cells, answers, _ = clean
    store = _damaged(clean_store, tmp_path, rel, how)
    before = F.snapshot(store)
    wf, inputs = build(quick=True)
    options = dict(store=str(store), executor="local", tile_shape=TILE, strategies=STRATEGIES, keep="all",
                   **{mode: True})
    if refusal is None:
        run = wf.run(inputs, **options)
        assert np.array_equal(_ask(run, QUERIES[1], cells), answers[1])
        assert not (store / LOCK_NAME).exists() and (store / "subzero-store.json").is_file()
        return
    with pytest.raises(sz.StoreError, match=refusal) as err:
        wf.run(inputs, **options)
    assert "[Errno" not in str(err.value)
    assert F.snapshot(store) == before


def test_a_directory_for_a_writer_lock_on_the_command_line(clean, tmp_path, capsys):
    clean_store, *_ = clean
    store = _damaged(clean_store, tmp_path, LOCK_NAME, "replace by a directory")
    capsys.readouterr()
    assert main(["run", "demo", "--quick", "--executor", "local", "--store", str(store), "--overwrite", "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the writer lock is a directory where a file belongs" in err, err
    assert f"delete {store / LOCK_NAME} and try again" in err and "[Errno" not in err, err


# -- the wording -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("exc, words", [
    (FileNotFoundError(2, "No such file or directory"), "is missing"),
    (IsADirectoryError(21, "Is a directory"), "is a directory where a file belongs"),
    (NotADirectoryError(20, "Not a directory"), "a file stands where a directory belongs"),
    (PermissionError(13, "Permission denied"), "permission denied"),
    (OSError(5, "Input/output error"), "cannot be read (Input/output error)"),
])
def test_every_os_failure_is_worded_with_the_path_and_a_fix(exc, words):
    err = store_file_error(exc, "the manifest of node 'blur'", "/runs/a/manifests/blur.json")
    assert isinstance(err, sz.StoreError) and isinstance(err, OSError)
    message = str(err)
    assert message.startswith("the manifest of node 'blur' ") and words in message and why(exc) in message
    assert "(/runs/a/manifests/blur.json)" in message
    assert ("read access" in message) if isinstance(exc, PermissionError) else (REBUILD in message)


def test_reading_passes_our_own_errors_and_other_exceptions_unchanged(tmp_path):
    with pytest.raises(sz.StoreError, match=r"the catalog is a directory where a file belongs \(.*catalog.json\)"):
        with reading("the catalog", tmp_path / "catalog.json"):
            (tmp_path / "catalog.json").mkdir()
            (tmp_path / "catalog.json").read_bytes()
    mine = sz.StoreError("already worded")
    with pytest.raises(sz.StoreError) as err:
        with reading("x", "y"):
            raise mine
    assert err.value is mine
    with pytest.raises(KeyError):
        with reading("x", "y"):
            raise KeyError("not an OS failure")

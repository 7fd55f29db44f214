"""Fault injection: a store that never lies.

Three kinds of faults, each judged against a clean run of the same workflow (its outputs,
and backward and forward queries by every stored strategy, forced and chosen):

- **kill**: a run (local or Spark, optimized or pinned) in a child process is killed with
  SIGKILL at a random moment.  Its store must then refuse queries clearly (an unfinished
  run) or answer exactly (a run that had finished), no process of the run may be left
  behind, and a resumed run (``--resume``, itself killed once more in some trials) must
  end with the clean run's outputs and answers, or refuse clearly;
- **damage**: one file of a finished store, of every kind (catalog, marker, manifests,
  operators, array metadata and chunks, LMDB shards, R-tree files, a stray lock file),
  has a byte flipped or is cut short.  Every query must answer exactly (re-executing what
  it cannot trust) or refuse with a `subzero.StoreError`; never a wrong answer, never a
  crash; and the queries leave the store's files byte-identical;
- **race**: two runs start into one store path at once: one wins, the other is refused
  with a message naming the winner, while this process keeps querying another store.

`subzero bench faults [--quick] [--out DIR]` runs the full form (22 kill trials, 114 damaged
stores, 22 races: about ten minutes on two cores) and writes ``results.json`` and
``REPORT.md``; ``tests/test_faults.py`` runs a few trials of each.  The child process is
``python -m subzero_bench.faults child STORE EXECUTOR PLAN [--resume]``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

if TYPE_CHECKING:
    from subzero_bench.object_faults import Harness

__all__ = ["build", "inputs", "strategies", "QUERIES", "Reference", "reference", "kill_trial", "damage_cases",
           "damage", "snapshot", "as_nobody", "judge_store", "race_round", "run_faults", "harness", "render"]

SHAPE = (96, 128)
TILE = 32
PLANS = ("pinned", "optimized")
CHILD_TIMEOUT = 600


# -- the workflow -------------------------------------------------------------------------------------------------

def build():
    """The workflow every trial runs: mapping, FULL, PAY and COMP lineage, a two-pass
    operator (Label), a whole-array black box (Histogram) and a halo one (CosmicRayDetect)."""
    import subzero as sz
    from subzero import operators as ops

    wf = sz.Workflow("faults")
    x, y = wf.input("x"), wf.input("y")
    blur = wf.add(ops.GaussianFilter(1.5), x, name="blur")
    diff = wf.add(ops.Subtract(), blur, y, name="diff")
    bright = wf.add(ops.Threshold(0.62), diff, name="bright")
    wf.add(ops.Label(), bright, name="stars")
    wf.add(ops.Histogram(8), diff, name="hist")
    wf.add(ops.CosmicRayDetect(threshold=3.0, radius=1), x, name="rays")
    return wf


def inputs() -> dict[str, np.ndarray]:
    """The bench workflow's inputs: a seeded image with cosmic rays."""
    rng = np.random.default_rng(13)
    x = rng.random(SHAPE)
    x[rng.integers(0, SHAPE[0], 40), rng.integers(0, SHAPE[1], 40)] = 9.0  # cosmic rays
    return {"x": x, "y": rng.random(SHAPE) * 0.2}


def strategies(plan: str) -> dict[str, Any]:
    """Pinned strategies (every node: no optimizer), or a few pins and the optimizer for the rest."""
    if plan == "pinned":
        return {"diff": "FullOne", "bright": ["FullMany", "FullRange", "FullOne/forward"],
                "stars": ["PayOne", "CompMany"], "rays": ["CompOne", "PayMany", "FullMany/forward"]}
    return {"stars": "PayOne"}


def run_options(plan: str) -> dict[str, Any]:
    """The `Workflow.run` options of a plan (``"optimized"`` adds a workload and budgets); every
    array is stored (``keep="all"``), so the damage trials reach intermediates' chunks too."""
    options: dict[str, Any] = {"strategies": strategies(plan), "tile_shape": TILE, "keep": "all"}
    if plan == "optimized":
        options |= {"workload": [{"direction": "backward", "node": "stars", "to": "x", "cells": [[40, 60]]},
                                 {"direction": "forward", "node": "x", "to": "rays", "cells": [[10, 10]]}],
                    "max_disk": "20x"}
    return options


#: (direction, node, to, cells or box, using): by default and by every stored strategy
QUERIES: list[tuple[str, str, str, Any, dict | None]] = [
    ("backward", "stars", "x", "star", None),
    ("backward", "stars", "x", "star", {"stars": "PayOne", "bright": "FullMany", "diff": "FullOne"}),
    ("backward", "stars", "y", "star", {"stars": "CompMany", "bright": "FullRange"}),
    ("backward", "bright", "diff", {"box": [(20, 60), (30, 90)]}, {"bright": "FullMany"}),
    ("forward", "x", "stars", [(40, 60), (41, 61)], None),
    ("forward", "diff", "bright", [(5, 5), (70, 100)], {"bright": "FullOne/forward"}),
    ("forward", "diff", "stars", [(50, 64)], {"bright": "FullRange", "stars": "BlackBox"}),
    ("backward", "hist", "diff", [(3,)], {"hist": "BlackBox"}),
    ("backward", "hist", "y", [(5,)], None),
    ("backward", "rays", "x", "ray", {"rays": "CompOne"}),
    ("backward", "rays", "x", "ray", {"rays": "PayMany"}),
    ("forward", "x", "rays", "ray", {"rays": "FullMany/forward"}),
    ("forward", "x", "hist", [(0, 0)], None),
]


@dataclass
class Reference:
    """A clean run's outputs and query answers."""

    outputs: dict[str, np.ndarray]
    cells: dict[str, np.ndarray]
    answers: list[np.ndarray]


def _cells(ref_outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    stars = ref_outputs["stars"]
    sizes = np.bincount(stars.reshape(-1))[1:]
    star = np.argwhere(stars == 1 + int(np.argmax(sizes))) if len(sizes) else np.array([[40, 60]])
    rays = np.argwhere(ref_outputs["rays"] > 0)
    return {"star": star[:50], "ray": rays[:3] if len(rays) else np.array([[10, 10]])}


def star_tile(ref: Reference) -> int:
    """The tile (index in the stars node's tile grid) holding the first cell of the queried star."""
    r, c = (int(v) for v in ref.cells["star"][0])
    return (r // TILE) * -(-SHAPE[1] // TILE) + c // TILE


def tile_shards(store: str | Path, node: str, tile: int) -> set[str]:
    """The stems of the shards (any strategy) holding ``node``'s lineage of ``tile``, as its manifest
    names them: the tile's own shard, or the shard it shares with the node's other tiles."""
    manifest = json.loads((Path(store) / "manifests" / f"{node}.json").read_text())
    return {r["name"] for recs in manifest["shards"].values() for r in recs if r["tile"] == tile and r["name"]}


def ask(run, query, cells: dict[str, np.ndarray], forced: bool = True) -> np.ndarray:
    """One query of `QUERIES` on ``run`` (``forced=False`` drops its ``using``)."""
    direction, node, to, start, using = query
    kw: dict[str, Any] = {"using": using if forced else None}
    if isinstance(start, dict):
        kw["box"] = start["box"]
    else:
        kw["cells"] = cells[start] if isinstance(start, str) else start
    fn = run.backward if direction == "backward" else run.forward
    return fn(node, to=to, **kw)


def applicable(run, query) -> bool:
    """Whether the strategies a query forces were stored by ``run`` (an optimized run chooses its own)."""
    from subzero.modes import Strategy

    using = query[4] or {}
    return all(Strategy.parse(s).name in ("BlackBox", *run.strategies.get(n, ())) for n, s in using.items())


def reference(store: str | Path) -> Reference:
    """Run the workflow cleanly (in this process, locally, every strategy pinned) and keep
    its outputs and answers (lineage is exact: every plan answers alike); the answers of
    the stored strategies are checked against re-execution first."""
    wf = build()
    run = wf.run(inputs(), store=str(store), executor="local", **run_options("pinned"))
    outputs = {n.name: np.asarray(run.output(n.name)) for n in wf.nodes}
    cells = _cells(outputs)
    answers = []
    for q in QUERIES:
        got = ask(run, q, cells)
        blackbox = {n: "BlackBox" for n in run.strategies}
        again = ask(run, (*q[:4], blackbox), cells)
        if not np.array_equal(got, again):
            raise AssertionError(f"reference query {q} differs from re-execution")
        answers.append(got)
    return Reference(outputs, cells, answers)


# -- judging a store ----------------------------------------------------------------------------------------------

@dataclass
class Verdict:
    """What a store did when queried: per query "exact", "refused", "wrong" or "crash: ..."."""

    opened: bool
    message: str = ""
    outcomes: list[str] = field(default_factory=list)
    reexecuted: int = 0

    @property
    def wrong(self) -> bool:
        """True when some query answered wrong cells."""
        return any(o == "wrong" for o in self.outcomes)

    @property
    def crashed(self) -> bool:
        """True when some query crashed instead of answering or refusing."""
        return any(o.startswith("crash") for o in self.outcomes)

    @property
    def summary(self) -> str:
        """One word for the report: refused, wrong, crashed, re-executed or exact."""
        if not self.opened:
            return "refused"
        if self.wrong:
            return "WRONG"
        if self.crashed:
            return "CRASH"
        kinds = set(self.outcomes)
        return "exact" if kinds == {"exact"} else "refused" if kinds == {"refused"} else "exact or refused"


def judge_store(store: str | Path, ref: Reference, queries_only: bool = False) -> Verdict:
    """Open ``store`` and compare every output and every query (forced and chosen) with ``ref``."""
    import subzero as sz

    try:
        run = sz.open_run(str(store))
    except sz.SubZeroError as exc:
        return Verdict(False, str(exc))
    except Exception as exc:  # noqa: BLE001 - reported as a crash
        return Verdict(False, f"crash: {type(exc).__name__}: {exc}", ["crash: open"])
    verdict = Verdict(True)

    def check(fn: Callable[[], np.ndarray], want: np.ndarray) -> None:
        try:
            got = fn()
        except sz.SubZeroError as exc:
            verdict.outcomes.append("refused")
            verdict.message = verdict.message or str(exc)
            return
        except Exception as exc:  # noqa: BLE001
            verdict.outcomes.append(f"crash: {type(exc).__name__}: {exc}")
            return
        verdict.outcomes.append("exact" if np.array_equal(np.asarray(got), want) else "wrong")

    if not queries_only:
        for name, want in ref.outputs.items():
            check(lambda name=name: np.asarray(run.output(name)), want)
    for q, want in zip(QUERIES, ref.answers):
        for forced in (True, False):
            if forced and not applicable(run, q):
                continue
            check(lambda q=q, forced=forced: ask(run, q, ref.cells, forced), want)
            verdict.reexecuted += sum(1 for s in run.last_query if s.get("damaged_lineage"))
    return verdict


# -- kill -9 ------------------------------------------------------------------------------------------------------

def _child_env() -> dict[str, str]:
    from subzero_bench.timing import child_pythonpath

    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = child_pythonpath(root, env.get("PYTHONPATH"))
    env.setdefault("SUBZERO_SPARK_MASTER", "local[2, 4]")
    from subzero.progress import spark_conf

    options = spark_conf(0)["spark.driver.extraJavaOptions"]
    env["PYSPARK_SUBMIT_ARGS"] = f'--driver-java-options "{options}" pyspark-shell'
    return env


def start_child(store: str | Path, executor: str, plan: str, resume: bool = False,
                go: str | Path | None = None) -> subprocess.Popen:
    """A child process running the workflow into ``store``; it prints ``started`` once imported
    (and, given ``go``, then waits for that file to exist before it runs)."""
    args = [sys.executable, "-m", "subzero_bench.faults", "child", str(store), executor, plan] + \
        (["--resume"] if resume else []) + (["--go", str(go)] if go is not None else [])
    return subprocess.Popen(args, env=_child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _wait_started(proc: subprocess.Popen) -> None:
    line = proc.stdout.readline()
    if line.strip() != "started":
        raise RuntimeError(f"child did not start: {line!r} {proc.stderr.read()[-2000:]}")


def _group_gone(pgid: int, timeout: float) -> bool:
    """True once no process of group ``pgid`` is left (the driver's JVM and workers exit with it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
        time.sleep(0.1)
    return False


def _committed(store: Path) -> int:
    """How many nodes the store's catalog says are committed (0 without a readable catalog)."""
    try:
        return len(json.loads((store / "catalog.json").read_bytes()).get("nodes", {}))
    except (OSError, ValueError, AttributeError):
        return 0


def _kill(proc: subprocess.Popen, store: Path, delay: float, after_nodes: int = 0) -> tuple[bool, bool, float]:
    """SIGKILL the driver ``delay`` seconds after its store holds ``after_nodes`` committed nodes
    (0: after it started); returns (killed before it finished, leaked processes, seconds it ran)."""
    start = time.monotonic()
    while after_nodes and proc.poll() is None and _committed(store) < after_nodes:
        time.sleep(0.01)
    deadline = time.monotonic() + delay
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.005)
    ran = time.monotonic() - start
    killed = proc.poll() is None
    if killed:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    leaked = not _group_gone(proc.pid, 60)
    if leaked:
        os.killpg(proc.pid, signal.SIGKILL)
    return killed, leaked, ran


def timed_run(store: str | Path, executor: str, plan: str) -> float:
    """Seconds a clean child run takes from ``started`` to its end (to choose kill moments)."""
    proc = start_child(store, executor, plan)
    _wait_started(proc)
    start = time.monotonic()
    out, err = proc.communicate(timeout=CHILD_TIMEOUT)
    if proc.returncode != 0:
        raise RuntimeError(f"a clean run failed: {out[-1000:]} {err[-2000:]}")
    return time.monotonic() - start


def _resume(store: str | Path, executor: str, plan: str) -> tuple[str, str]:
    proc = start_child(store, executor, plan, resume=True)
    out, err = proc.communicate(timeout=CHILD_TIMEOUT)
    if proc.returncode == 0:
        return "ok", ""
    lines = [ln for ln in (out + err).splitlines() if ln.strip()]
    if proc.returncode == 2 and lines and lines[-1].startswith("refused:") and "Traceback" not in err:
        return "refused", lines[-1]
    return "crash", (err or out)[-2000:]


def _catalog_state(store: Path) -> str:
    """What the killed run had committed, as its catalog says (read without checks)."""
    try:
        data = json.loads((store / "catalog.json").read_text())
    except (OSError, ValueError):
        return "no catalog"
    pending = "pending" in (data.get("optimizer") or {})
    return f"{data.get('status')}, {len(data.get('nodes', {}))} node(s) committed" + (", plan kept" if pending else "")


def _leftovers(store: Path) -> list[str]:
    """Files a finished store should not hold: temporaries, shards no manifest names."""
    bad = [str(p) for p in store.rglob("*.tmp")]
    named = set()
    for m in (store / "manifests").glob("*.json"):
        for recs in json.loads(m.read_text())["shards"].values():
            named |= {r["name"] for r in recs if r["name"]}
    for f in (store / "lineage").rglob("*"):
        if f.is_file() and f.name.split(".", 1)[0] not in named:
            bad.append(str(f))
    return bad


def _committed_files(store: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file of the nodes the catalog says are committed: a resumed run must
    keep them as they are."""
    try:
        nodes = json.loads((store / "catalog.json").read_text()).get("nodes", {})
    except (OSError, ValueError):
        return {}
    files = []
    for node in nodes:
        files += [p for p in (store / "arrays" / node).rglob("*") if p.is_file()]
        files += [store / "operators" / f"{node}.pkl", store / "manifests" / f"{node}.json"]
        manifest = store / "manifests" / f"{node}.json"
        if manifest.exists():
            names = {r["name"] for recs in json.loads(manifest.read_text())["shards"].values() for r in recs if r["name"]}
            files += [p for p in (store / "lineage" / node).rglob("*") if p.name.split(".", 1)[0] in names]
    return {str(p.relative_to(store)): (p.stat().st_size, p.stat().st_mtime_ns) for p in files if p.exists()}


@dataclass
class KillTrial:
    executor: str
    plan: str
    delay: float
    kills: int
    moment: str
    killed: bool
    state: str
    open: str
    resume: str
    final: str
    leaked: bool
    leftovers: int
    committed_kept: bool
    seconds: float
    message: str = ""

    @property
    def ok(self) -> bool:
        """True when the killed run was refused or exact, resumed exactly and left nothing behind."""
        return (self.open in ("refused", "exact") and self.resume in ("exact", "refused") and not self.leaked
                and self.leftovers == 0 and self.committed_kept and (self.resume != "exact" or self.final == "exact"))


#: nodes of `build` (inputs included): a kill "by progress" waits for a random number of them
NODES = 8


def kill_trial(root: str | Path, ref: Reference, executor: str, plan: str, duration: float, rng: random.Random,
               kills: int = 1, resume_executor: str | None = None, by_progress: bool = False) -> KillTrial:
    """Kill a run at a random moment (``kills`` times: the first resume is killed too when 2),
    judge the store it left, resume it and judge the result.

    The moment is a uniform time in ``[0, 1.1 * duration]`` after the child started, or, with
    ``by_progress`` (how a Spark run, which spends its first seconds starting a JVM, is hit
    while it computes), a uniform time in ``[0, duration / NODES]`` after a random number of
    nodes was committed.
    """
    start = time.monotonic()
    store = Path(tempfile.mkdtemp(prefix="kill-", dir=root)) / "store"
    delays, killed, leaked, moments = [], False, False, []
    for k in range(kills):
        proc = start_child(store, executor if k == 0 else (resume_executor or executor), plan, resume=k > 0)
        _wait_started(proc)
        if by_progress:
            after, delay = rng.randint(1, NODES - 1), rng.uniform(0.0, duration / NODES)
        else:
            after, delay = 0, rng.uniform(0.0, duration * 1.1)
        was_killed, was_leaked, ran = _kill(proc, store, delay, after)
        delays.append(ran)
        moments.append(f"{after} node(s) + {delay:.2f} s" if after else f"{delay:.2f} s")
        killed, leaked = killed or was_killed, leaked or was_leaked
    state = _catalog_state(store)
    committed = _committed_files(store)
    opened = judge_store(store, ref)
    open_outcome = opened.summary if opened.opened else ("refused" if "crash" not in opened.message else "CRASH")
    status, message = _resume(store, resume_executor or executor, plan)
    final = "-"
    leftovers = 0
    after = _committed_files(store)
    kept = all(after.get(k) == v for k, v in committed.items())
    if status == "ok":
        verdict = judge_store(store, ref)
        final = verdict.summary
        status = "exact" if final == "exact" else final
        left = _leftovers(store)
        leftovers = len(left)
        message = message or "; ".join(left)[:300]
    shutil.rmtree(store.parent, ignore_errors=True)
    return KillTrial(executor, plan, round(sum(delays), 2), kills, "; ".join(moments), killed, state, open_outcome,
                     status, final, leaked, leftovers, kept, round(time.monotonic() - start, 1),
                     message or opened.message[:200])


# -- damaged files ------------------------------------------------------------------------------------------------

DAMAGES = ("flip first byte", "flip middle byte", "flip last byte", "truncate to 0", "truncate to half",
           "cut last byte")


def damage_cases(store: str | Path, ref: Reference | None = None) -> list[tuple[str, str]]:
    """(kind, path relative to the store) of one or two files of every kind in a finished store
    (with ``ref``, the stars' shards of the tile holding the queried star: the ones queries read)."""
    root = Path(store)
    rel = lambda p: str(p.relative_to(root))  # noqa: E731
    shards = sorted((root / "lineage").rglob("*.mdb"))
    dats, idxs = sorted((root / "lineage").rglob("*.dat")), sorted((root / "lineage").rglob("*.idx"))
    chunks = sorted(p for p in (root / "arrays" / "blur").rglob("*") if p.is_file() and p.name != "zarr.json")
    cases = [("catalog", "catalog.json"), ("marker", "subzero-store.json"),
             ("manifest (shards)", "manifests/bright.json"), ("manifest (payloads)", "manifests/stars.json"),
             ("operator (mapping)", "operators/blur.pkl"), ("operator (two-pass)", "operators/stars.pkl"),
             ("array metadata (input)", "arrays/x/zarr.json"), ("array metadata (node)", "arrays/blur/zarr.json"),
             ("array chunk", rel(chunks[len(chunks) // 2])), ("lock file left behind", ".writer")]
    star = tile_shards(root, "stars", star_tile(ref)) if ref is not None else None
    for kind, files in (("LMDB shard", shards), ("R-tree data", dats), ("R-tree index", idxs)):
        picks = [f for f in files if "bright" in str(f)][:1] + \
            [f for f in files if "stars" in str(f) and (star is None or f.name.split(".", 1)[0] in star)][:2]
        cases += [(kind, rel(f)) for f in (picks or files[:1])]
    return cases


#: damages of a file that take it away rather than change its bytes (a careless hand, a sync gone wrong)
REMOVALS = ("delete", "replace by a directory")
#: damages of a directory of the store
DIRECTORY_DAMAGES = ("delete", "replace by a file")


def damage(path: Path, how: str) -> None:
    """Damage one file (a `DAMAGES` or `REMOVALS` way) or directory (a `DIRECTORY_DAMAGES` way)
    in place, as a disk, a careless copy or a careless hand would."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
        if how == "replace by a file":
            path.write_bytes(b"not a directory\n")
        elif how != "delete":
            raise ValueError(f"a directory is damaged by {DIRECTORY_DAMAGES}, not {how!r}")
        return
    if not path.exists():  # the lock file of a finished store: one left behind by a crash
        path.write_text(json.dumps({"pid": 999999, "host": "elsewhere", "started": "2020-01-01T00:00:00+00:00"}))
    if how in REMOVALS:
        path.unlink()
        if how == "replace by a directory":
            path.mkdir()
        return
    data = bytearray(path.read_bytes())
    if how.startswith("flip"):
        if not data:
            return
        pos = {"first": 0, "middle": len(data) // 2, "last": len(data) - 1}[how.split()[1]]
        data[pos] ^= 0x5A
    elif how == "truncate to 0":
        data = bytearray()
    elif how == "truncate to half":
        data = data[: len(data) // 2]
    else:
        data = data[:-1]
    path.write_bytes(bytes(data))


def snapshot(root: Path) -> dict[str, tuple[bytes, int] | None]:
    """Every file of a store (its bytes and mtime) and every directory (None): what queries must leave as it was."""
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) if p.is_file() else None
            for p in sorted(Path(root).rglob("*"))}


@dataclass
class DamageCase:
    kind: str
    file: str
    how: str
    outcome: str
    exact: int
    refused: int
    wrong: int
    crashed: int
    reexecuted: int
    untouched: bool
    message: str = ""

    @property
    def ok(self) -> bool:
        """True when no query was wrong or crashed and the store was left untouched."""
        return self.wrong == 0 and self.crashed == 0 and self.untouched


def damage_trial(clean: str | Path, root: str | Path, ref: Reference, kind: str, rel: str, how: str) -> DamageCase:
    """Copy the clean store, damage one file, query everything; the store must not change."""
    from subzero.store.shards import close_all

    store = Path(tempfile.mkdtemp(prefix="damage-", dir=root)) / "store"
    shutil.copytree(clean, store)
    damage(store / rel, how)
    before = snapshot(store)
    close_all()
    import logging

    quiet = logging.getLogger("subzero.query")
    level, quiet.level = quiet.level, logging.ERROR  # the fallback's warnings: counted, not printed
    try:
        verdict = judge_store(store, ref)
    finally:
        quiet.level = level
    close_all()
    untouched = snapshot(store) == before
    shutil.rmtree(store.parent, ignore_errors=True)
    o = verdict.outcomes
    return DamageCase(kind, rel, how, verdict.summary, o.count("exact"), o.count("refused") + (not verdict.opened),
                      o.count("wrong"), sum(x.startswith("crash") for x in o), verdict.reexecuted, untouched,
                      verdict.message.splitlines()[0][:200] if verdict.message else "")


def as_nobody(fn: Callable[[], Any], timeout: float = 120.0) -> tuple[str, Any]:
    """``fn()`` in a forked child that first drops to user ``nobody`` (as root, permission bits are
    ignored, so a reader denied access is played by ``nobody``).  Returns ``("ok", result)``,
    ``("no setuid", why)`` where privileges cannot be dropped, or ``("error", repr)``."""
    import multiprocessing

    def child(conn) -> None:
        try:
            os.setgid(65534)
            os.setuid(65534)
        except OSError as exc:
            conn.send(("no setuid", repr(exc)))
            return
        try:
            conn.send(("ok", fn()))
        except BaseException as exc:  # everything goes back to the parent
            conn.send(("error", repr(exc)))
        finally:
            conn.close()

    ctx = multiprocessing.get_context("fork")
    parent, end = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=child, args=(end,))
    proc.start()
    end.close()
    got = parent.recv() if parent.poll(timeout) else ("error", "no answer")
    proc.join(30)
    return got


# -- racing writers -----------------------------------------------------------------------------------------------

@dataclass
class RaceRound:
    winners: int
    refused_naming_winner: int
    reader_queries: int
    reader_exact: int
    seconds: float

    @property
    def ok(self) -> bool:
        """True when one writer won, the other was refused naming it, and the reader stayed exact."""
        return self.winners == 1 and self.refused_naming_winner == 1 and self.reader_queries == self.reader_exact


def race_round(root: str | Path, reader_store: str | Path, ref: Reference, executor: str = "local") -> RaceRound:
    """Two runs start into one new store path at once; this process queries another store meanwhile."""
    import subzero as sz

    start = time.monotonic()
    store = Path(tempfile.mkdtemp(prefix="race-", dir=root)) / "store"
    go = store.parent / "go"
    procs = [start_child(store, executor, "pinned", go=go) for _ in range(2)]
    for p in procs:
        _wait_started(p)
    run = sz.open_run(str(reader_store))
    go.touch()
    asked = exact = 0
    while any(p.poll() is None for p in procs):
        for q, want in zip(QUERIES, ref.answers):
            asked += 1
            exact += bool(np.array_equal(ask(run, q, ref.cells), want))
    results = [p.communicate(timeout=CHILD_TIMEOUT) for p in procs]
    codes = [p.returncode for p in procs]
    winners = codes.count(0)
    named = 0
    for (out, err), code, p in zip(results, codes, procs):
        other = procs[1 - procs.index(p)].pid
        if code == 2 and f"pid {other} " in out + err and "Traceback" not in err:
            named += 1
    shutil.rmtree(store.parent, ignore_errors=True)
    return RaceRound(winners, named, asked, exact, round(time.monotonic() - start, 1))


# -- the bench ----------------------------------------------------------------------------------------------------

def run_faults(out_dir: str | Path, kills_local: int = 14, kills_spark: int = 8, races: int = 22,
               damages: tuple[str, ...] = DAMAGES, seed: int = 0, quick: bool = False,
               log: Callable[[str], None] | None = None, s3_runs: int = 3, only_s3: bool = False) -> dict:
    """The full fault-injection bench; writes ``results.json`` and ``REPORT.md`` into ``out_dir``.

    Parameters
    ----------
    kills_local, kills_spark : int
        kill -9 trials per executor (every third one also kills the resumed run once).
    races : int
        Rounds of two runs racing for one store.
    damages : tuple of str
        The ways each file is damaged (`DAMAGES`).
    quick : bool
        A few trials of each (about two minutes).
    s3_runs : int
        Runs per fault setting into ``s3://`` through a proxy failing S3 requests
        (`subzero_bench.object_faults`); 0 skips them (moto and s3fs missing: skipped too).
    only_s3 : bool
        Only the object-store trials.

    Returns
    -------
    dict
        The results; ``ok`` is True when every trial met the targets (no wrong answer, no crash,
        no leaked process, every store resumed exactly or refused clearly).
    """
    if quick:
        kills_local, kills_spark, races, damages = 4, 2, 2, ("flip middle byte", "truncate to half")
        s3_runs = min(s3_runs, 1)
    if only_s3:
        kills_local = kills_spark = races = 0
        damages = ()
    log = log or (lambda line: print(line, flush=True))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="faults-", dir=out))
    rng = random.Random(seed)
    started = time.monotonic()
    from subzero_bench.timing import machine_info, now_iso

    doc: dict[str, Any] = {"bench": "faults", "quick": bool(quick), "date": now_iso(), "machine": machine_info(),
                           "command": "subzero bench faults" + (" --quick" if quick else ""),
                           "seed": seed, "kills": [], "damage": [], "races": [], "object_store": [],
                           "load_start": [round(v, 2) for v in os.getloadavg()]}
    try:
        ref = reference(root / "clean-pinned")
        for executor, n in (("local", kills_local), ("spark", kills_spark)):
            if not n:
                continue
            durations = {plan: timed_run(root / f"timed-{executor}-{plan}", executor, plan) for plan in PLANS}
            log(f"faults: a clean {executor} run takes {durations['pinned']:.1f} s (pinned), "
                f"{durations['optimized']:.1f} s (optimized)")
            for k in range(n):
                plan = PLANS[k % 2]
                trial = kill_trial(root, ref, executor, plan, durations[plan], rng, kills=1 + (k % 3 == 2),
                                   by_progress=executor == "spark" or k % 4 == 3)
                doc["kills"].append(asdict(trial) | {"ok": trial.ok})
                log(f"faults: kill {executor} {plan} at {trial.moment}: {trial.state}; "
                    f"open {trial.open}; resume {trial.resume}{'' if trial.ok else '  <-- NOT OK'}")
        for kind, rel in (damage_cases(root / "clean-pinned", ref) if damages else []):
            for how in damages:
                case = damage_trial(root / "clean-pinned", root, ref, kind, rel, how)
                doc["damage"].append(asdict(case) | {"ok": case.ok})
                if not case.ok:
                    log(f"faults: damage {kind} {rel} {how}: {case.outcome}  <-- NOT OK")
        log(f"faults: {len(doc['damage'])} damaged stores judged")
        for _ in range(races):
            r = race_round(root, root / "clean-pinned", ref)
            doc["races"].append(asdict(r) | {"ok": r.ok})
        log(f"faults: {len(doc['races'])} races")
        if s3_runs:
            try:
                import moto.server  # noqa: F401
                import s3fs  # noqa: F401
            except ImportError:
                log("faults: moto[server] or s3fs missing: no object-store trials (pip install 'subzero[test]')")
            else:
                from subzero_bench.object_faults import object_store_trials

                doc["object_store"] = object_store_trials(ref, harness(), runs=s3_runs, seed=seed, log=log)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    doc["seconds"] = round(time.monotonic() - started, 1)
    doc["load_end"] = [round(v, 2) for v in os.getloadavg()]
    doc["ok"] = all(item["ok"] for kind in ("kills", "damage", "races", "object_store") for item in doc[kind])
    (out / "results.json").write_text(json.dumps(doc, indent=1))
    (out / "REPORT.md").write_text(render(doc))
    log(f"faults: wrote {out / 'results.json'} and {out / 'REPORT.md'} in {doc['seconds']:.0f} s")
    return doc


def harness() -> "Harness":
    """This bench's workflow, inputs, run options and judge, for the object-store trials."""
    from subzero_bench.object_faults import Harness

    return Harness(build, inputs, run_options, judge_store)


def render(doc: dict) -> str:
    """The bench's report: one table per fault kind, and the totals against the issue's targets."""
    from subzero_bench.object_faults import render as render_object_store

    kills, damages, races = doc["kills"], doc["damage"], doc["races"]
    objects = doc.get("object_store", [])
    lines = ["# Fault injection", ""]
    if kills:
        lines += ["A kill lands a uniform random time after the run started, or (\"N node(s) + t s\": every Spark "
                  "run, whose first seconds start a JVM, and every fourth local one) a uniform random time after N "
                  "nodes were committed; with two moments, the resumed run was killed too, then resumed again.", ""]
    lines += [f"{len(kills)} kill -9 trials, {len(damages)} damaged stores, {len(races)} races, "
              f"{len(objects)} runs on a failing object store ({doc.get('seconds', 0):.0f} s, seed {doc.get('seed')}; "
              f"load averages (1, 5, 15 min) {doc.get('load_start')} at the start, {doc.get('load_end')} at the end: "
              "other jobs shared the 2 cores).", ""]
    if kills:
        lines += ["## kill -9 at a random moment", "",
                  "| executor | plan | killed when | ran (s) | store left | queries of it | resume | "
                  "committed files kept | leaked processes | ok |", "|---|---|---|---|---|---|---|---|---|---|"]
        for t in kills:
            lines.append(f"| {t['executor']} | {t['plan']} | {t['moment']} | {t['delay']:.2f} | {t['state']} | "
                         f"{t['open']} | {t['resume']} | {'yes' if t['committed_kept'] else '**no**'} | "
                         f"{'yes' if t['leaked'] else 'no'} | {'yes' if t['ok'] else '**no**'} |")
        resumed = sum(t["resume"] == "exact" for t in kills)
        lines += ["", f"{sum(t['ok'] for t in kills)}/{len(kills)} ok: {resumed} resumed to the clean run's "
                      f"outputs and answers, {sum(t['resume'] == 'refused' for t in kills)} refused clearly, "
                      f"{sum(t['open'] == 'WRONG' or t['final'] == 'WRONG' for t in kills)} wrong answers, "
                      f"{sum(t['leaked'] for t in kills)} with leaked processes.", ""]
    if damages:
        lines += ["## One damaged file in a finished store", "",
                  "| file kind | damage | outcome | exact | refused | wrong | crashed | re-executed steps | "
                  "files unchanged by queries |", "|---|---|---|---|---|---|---|---|---|"]
        for c in damages:
            lines.append(f"| {c['kind']} | {c['how']} | {c['outcome']} | {c['exact']} | {c['refused']} | "
                         f"{c['wrong']} | {c['crashed']} | {c['reexecuted']} | {'yes' if c['untouched'] else '**no**'} |")
        lines += ["", f"{sum(c['ok'] for c in damages)}/{len(damages)} ok: "
                      f"{sum(c['wrong'] for c in damages)} wrong answers, {sum(c['crashed'] for c in damages)} crashes.",
                  ""]
    if races:
        lines += ["## Two runs racing for one store path", "",
                  f"{sum(r['ok'] for r in races)}/{len(races)} rounds: one run won, the other was refused naming it; "
                  f"{sum(r['reader_queries'] for r in races)} queries of another store meanwhile, "
                  f"{sum(r['reader_exact'] for r in races)} exact.", ""]
    lines += render_object_store(objects)
    return "\n".join(lines)


# -- the child ----------------------------------------------------------------------------------------------------

def _child(argv: list[str]) -> int:
    store, executor, plan = argv[:3]
    resume = "--resume" in argv
    import subzero as sz  # noqa: F401 - imported before "started", so kills land in the run

    if executor == "spark":
        import subzero.executors.spark  # noqa: F401 - pyspark, imported before "started" too
    wf, data = build(), inputs()
    print("started", flush=True)
    if "--go" in argv:  # wait for the signal to start (racing runs start together)
        go = argv[argv.index("--go") + 1]
        while not os.path.exists(go):
            time.sleep(0.001)
    try:
        wf.run(data, store=store, executor=executor, resume=resume, **run_options(plan))
    except sz.SubZeroError as exc:
        print("refused: " + " ".join(str(exc).split()), flush=True)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m subzero_bench.faults child ...`` (a trial's run), or the bench itself."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "child":
        return _child(argv[1:])
    paths = [a for a in argv if not a.startswith("--")]
    out = paths[0] if paths else "benchmarks/results/faults"
    return 0 if run_faults(out, quick="--quick" in argv, only_s3="--only-s3" in argv)["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

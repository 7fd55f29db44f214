"""``subzero bench dataplane``: Spark's and the local executor's cost without stored lineage,
and the tiny workflow's (issue 23).

The scale workflow (subtract, 3x3 Convolve, Threshold, Label) on two float32 images held
in memory, without stored lineage, run by

- ``numpy``: plain numpy/scipy on the whole arrays, one core (the dtypes scipy keeps);
- ``numpy+save``: the same, each node's output also saved once (``np.save``: the fair floor);
- ``local`` and ``spark`` (the embedded session, its JVM and Python workers up before the
  clock starts), by this checkout's code ("after") and by a baseline source tree
  ("before": ``SUBZERO_DATAPLANE_BASELINE``, a directory holding the older ``subzero``).

and the tiny workflow (a 3x4 float32 array, Convolve then Threshold) as a whole new process
each: ``subzero`` on the default Spark executor before and after (after: in-process, as its
inputs are tiny; and with ``SUBZERO_IN_PROCESS_BYTES=0``, starting its JVM with the faster
flags), the local executor, and a bare pyspark session plus one job (default settings: the
JVM's start).

Every measurement is a fresh process; configurations are interleaved round by round, so the
load of the machine (other jobs share its 2 cores) falls on all alike, and ``uptime``'s
1-minute load is recorded beside each.  Medians over the rounds.  Each run's per-node stats
(wall, operator, write seconds) are kept, and one profiled local run per code tree
(cProfile, one thread) splits its time into compute, chunk reads, chunk writes, compression
and checksums, and the rest.  A Spark worker also times its first Python job (the Python
workers' start) and a second one (a job's fixed cost).  "local: after, a stage per node" and
"spark: after, a stage per node" are this checkout with fusion off (``SUBZERO_FUSE=0``).  ``SUBZERO_DATAPLANE_ONLY`` (labels
separated by ``;``) and ``SUBZERO_DATAPLANE_ROUNDS`` run a focused comparison: those
configurations only, that many rounds, no profiled runs.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from subzero_bench.results import figure
from subzero_bench.timing import child_pythonpath
from subzero_bench.scale import THRESHOLD, workflow

__all__ = ["run_dataplane", "render_dataplane", "GOALS"]

SIDE, QUICK_SIDE = 8000, 1000
ROUNDS, QUICK_ROUNDS = 3, 1
#: (numerator, denominator, the most the ratio may be): issue 23's goals
GOALS = [("spark: after", "numpy", 1.5), ("spark: after", "numpy+save", 1.0), ("local: after", "numpy+save", 1.2)]
#: the pieces of a profiled run, by the functions that own them (first match wins)
PARTS = [("compression + checksums", ("numcodecs", "google_crc32c", "zstd", "blosc", "encode_chunk", "decode_chunk")),
         ("chunk reads", ("read_bytes", "cat_file", "_chunk", "BufferedReader", "ArrayRef.read")),
         ("chunk writes", ("write_bytes", "BufferedWriter", "write_block", "mkstemp", "posix.replace", "fsync")),
         ("compute (scipy/numpy)", ("scipy", "ndimage", "numpy", "operators/", "ufunc", "nonzero", "accumulate"))]


def _ours() -> Path:
    return Path(__file__).resolve().parents[2]


def _inputs(side: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(side)
    return {"x": rng.normal(size=(side, side)).astype(np.float32),
            "dark": (rng.normal(size=(side, side)) * 0.1).astype(np.float32)}


def _plain(x: np.ndarray, dark: np.ndarray, save: Path | None) -> None:
    from scipy import ndimage

    sub = x - dark
    blur = ndimage.convolve(sub, np.ones((3, 3)) / 9.0, mode="reflect")
    mask = blur > THRESHOLD
    labels, _ = ndimage.label(mask)
    if save is not None:
        for name, arr in (("x", x), ("dark", dark), ("sub", sub), ("blur", blur), ("mask", mask), ("label", labels)):
            np.save(save / f"{name}.npy", arr)


def _tiny(executor: str, store: str) -> None:
    import subzero as sz
    from subzero import operators as ops

    wf = sz.Workflow("tiny")
    blur = wf.add(ops.Convolve(np.ones((3, 3)) / 9.0), wf.input("x"), name="blur")
    wf.add(ops.Threshold(0.5), blur, name="mask")
    wf.run({"x": np.arange(12, dtype=np.float32).reshape(3, 4) / 12}, store=store, executor=executor)


#: the tiny workflow's baseline: a bare pyspark session (default settings) and one job, as a
#: user would type it (run as ``python -c``: pyspark's one home in subzero stays spark.py)
BARE_SPARK = ("from pyspark.sql import SparkSession; "
              "s = SparkSession.builder.master('local[*, 4]').config('spark.ui.enabled', 'false').getOrCreate(); "
              "s.sparkContext.parallelize(range(4), 2).map(lambda v: v + 1).collect(); print('{}')")


def _profile_parts(profile) -> dict[str, float]:
    import pstats

    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    parts = {name: 0.0 for name, _ in PARTS} | {"other": 0.0}
    for (path, _, func), (_, _, tottime, _, _) in stats.items():
        where = f"{path}:{func}"
        for name, keys in PARTS:
            if any(k in where for k in keys):
                parts[name] += tottime
                break
        else:
            parts["other"] += tottime
    return {k: round(v, 3) for k, v in parts.items()}


def worker(config: str, side: int, store: str) -> dict[str, Any]:
    """One configuration in this (fresh) process, with whichever ``subzero`` it imports."""
    if config.startswith("tiny-"):
        _tiny(config.split("-", 1)[1], store)
        return {}
    arrays = _inputs(side)
    from scipy import ndimage  # noqa: F401 - imported before the clock, as the executors' are

    if config.startswith("numpy"):
        save = Path(store) if config == "numpy+save" else None
        if save is not None:
            save.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        _plain(arrays["x"], arrays["dark"], save)
        return {"wall": time.perf_counter() - start}
    executor = "local" if config.startswith("local") else "spark"
    spark = None
    extra: dict[str, Any] = {}
    if executor == "spark":
        from subzero.executors.spark import get_session

        spark = get_session()
        spark.range(4).count()  # the JVM is up before the clock starts
        for key in ("python_worker_start", "job_fixed"):  # the first Python job starts the workers
            t0 = time.perf_counter()
            spark.sparkContext.parallelize(range(4), 2).map(lambda v: v + 1).collect()
            extra[key] = time.perf_counter() - t0
    wf = workflow()
    stages = _stages_reporter()
    profile = None
    if config.endswith("profile"):
        import cProfile

        profile = cProfile.Profile()
        profile.enable()
    start = stages.start = time.perf_counter()
    run = wf.run(arrays, store=store, executor=executor, spark=spark, progress=stages)
    if hasattr(run, "wait"):  # a local run's store is written behind it: timed until durable
        run.wait()
    wall = time.perf_counter() - start
    extra["stages"] = stages.spans
    if profile is not None:
        profile.disable()
        extra["parts"] = _profile_parts(profile)
    extra["nodes"] = {n: {"wall": r.stats.wall_seconds, "op": r.stats.op_seconds, "write": r.stats.write_seconds,
                          "tiles": r.stats.tiles} for n, r in run.catalog.nodes.items() if r.stats}
    labels = np.asarray(run.output("label"))
    extra["label_checksum"] = int(np.count_nonzero(labels)), int(labels.max())
    return {"wall": wall, **extra}


def _stages_reporter():
    from subzero.progress import Reporter

    class Stages(Reporter):
        """The run's stages as the driver starts and finishes them: (name, start, end) seconds
        from the run's start (an input the driver stores is a stage named after it)."""

        def __init__(self):
            super().__init__()
            self.start, self.spans, self._open = 0.0, [], {}

        def node_started(self, name, n_tiles):
            self._open[name] = time.perf_counter() - self.start

        def node_finished(self, name, ok=True):
            self.spans.append((name, self._open.pop(name, 0.0), time.perf_counter() - self.start))

    return Stages()


def _one(config: str, side: int, code: Path, store: Path, timeout: float, env_extra=None) -> dict[str, Any]:
    """``worker(config)`` in a fresh process importing ``subzero`` from ``code``."""
    shutil.rmtree(store, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=child_pythonpath(code), SUBZERO_DRIVER_MEMORY="1g", **(env_extra or {}))
    cmd = ([sys.executable, "-c", BARE_SPARK] if config == "tiny-bare" else
           [sys.executable, "-P", str(Path(__file__).resolve()), config, str(side), str(store)])
    from subzero_bench.timing import load_average  # here, not at the top: the worker runs on older trees too

    load = (load_average() or [float("nan")])[0]
    start = time.perf_counter()
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=str(store.parent))
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish within {timeout:.0f} s", "load": load}
    finally:
        shutil.rmtree(store, ignore_errors=True)
    process = time.perf_counter() - start
    if done.returncode != 0:
        return {"error": "\n".join((done.stderr or "").strip().splitlines()[-5:]), "load": load}
    got = json.loads(done.stdout.strip().splitlines()[-1])
    return {**got, "process": process, "load": load}


def _baseline() -> Path | None:
    given = os.environ.get("SUBZERO_DATAPLANE_BASELINE")
    return Path(given).resolve() if given else None


def run_dataplane(quick: bool, root: Path, size=None, log=print, timeout: float = 1800, **_) -> dict[str, Any]:
    """Every configuration once per round, rounds interleaved; returns the results body."""
    side = int(size or (QUICK_SIDE if quick else SIDE))
    rounds = int(os.environ.get("SUBZERO_DATAPLANE_ROUNDS") or (QUICK_ROUNDS if quick else ROUNDS))
    ours, base = _ours(), _baseline()
    trees = {"after": ours, **({"before": base} if base else {})}
    configs: list[tuple[str, str, Path, dict]] = [("numpy", "numpy", ours, {}), ("numpy+save", "numpy+save", ours, {})]
    for which, code in trees.items():
        configs += [(f"local: {which}", "local", code, {}), (f"spark: {which}", "spark", code, {}),
                    (f"tiny spark: {which}", "tiny-spark", code, {})]
    configs.insert(3, ("local: after, a stage per node", "local", ours, {"SUBZERO_FUSE": "0"}))
    configs.insert(5, ("spark: after, a stage per node", "spark", ours, {"SUBZERO_FUSE": "0"}))
    configs += [("tiny spark, JVM started: after", "tiny-spark", ours, {"SUBZERO_IN_PROCESS_BYTES": "0"}),
                ("tiny local: after", "tiny-local", ours, {}), ("tiny bare pyspark", "tiny-bare", ours, {})]
    only = [c.strip() for c in os.environ.get("SUBZERO_DATAPLANE_ONLY", "").split(";") if c.strip()]
    if only:  # a focused run: these configurations only (their labels, separated by ";")
        configs = [c for c in configs if c[0] in only]
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, *_ in configs}
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    for r in range(rounds):
        for label, config, code, env in configs:
            got = _one(config, side, code, root / "store", timeout, env)
            runs[label].append(got)
            shown = got.get("wall", got.get("process"))
            log(f"dataplane: round {r + 1}/{rounds} {label:>22}: "
                + (f"{shown:.2f} s" if shown is not None else got.get("error", "?").splitlines()[-1])
                + f" (load {got['load']})")
    profiles = {which: _one("local-profile", side, code, root / "store", timeout, {"SUBZERO_LOCAL_THREADS": "1"})
                for which, code in trees.items()} if not only else {}
    return {"setup": {"side": side, "cells": side * side, "rounds": rounds, "ours": str(ours),
                      "baseline": str(base) if base else None,
                      "workflow": "subtract -> Convolve 3x3 -> Threshold -> Label, float32 inputs in memory"},
            "figures": _figures(runs), "raw": {"runs": runs, "profiles": profiles}}


def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def _figures(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    wall = {label: _median(rs, "process" if label.startswith("tiny") else "wall") for label, rs in runs.items()}
    return {"seconds": figure("s", None, wall, "median wall: of the run (scale workflow), of the whole process (tiny)")}


def render_dataplane(doc: dict[str, Any]) -> list[str]:
    """The REPORT.md body."""
    s, raw = doc["setup"], doc["raw"]
    runs = raw["runs"]
    wall = doc["figures"]["seconds"]["values"]
    numpy_wall, floor = wall.get("numpy"), wall.get("numpy+save")

    def ratio(a, b):
        return f"{a / b:.2f}" if a and b else "-"

    out = [f"Scale workflow at {s['cells']:.1e} cells ({s['workflow']}), no stored lineage; {s['rounds']} rounds, "
           "each configuration a fresh process, interleaved; medians.  \"before\": "
           f"{s['baseline'] or '(no baseline given)'}; \"after\": {s['ours']}.  The load (uptime, 1 min) is "
           "beside each figure.", "",
           "| configuration | median (s) | runs (s) | load | x numpy | x numpy+save |", "|---|---|---|---|---|---|"]
    for label, rs in runs.items():
        if label.startswith("tiny"):
            continue
        vals = [r.get("wall") for r in rs]
        out.append(f"| {label} | {wall[label]:.2f} | " + ", ".join(f"{v:.2f}" if v else "err" for v in vals)
                   + f" | {', '.join(str(r.get('load')) for r in rs)} | {ratio(wall[label], numpy_wall)} | "
                   f"{ratio(wall[label], floor)} |" if wall.get(label) else f"| {label} | failed | | | | |")
    out += ["", "Goals (issue 23):", ""]
    for num, den, most in GOALS:
        a, b = wall.get(num), wall.get(den)
        if a and b:
            out.append(f"- {num} / {den} <= {most}: {a / b:.2f}, {'met' if a / b <= most else 'NOT met'} at this load")
    out += ["", "Tiny workflow (3x4 float32, Convolve then Threshold), the whole process:", "",
            "| configuration | median (s) | runs (s) | load |", "|---|---|---|---|"]
    for label, rs in runs.items():
        if label.startswith("tiny") and wall.get(label):
            out.append(f"| {label} | {wall[label]:.2f} | " + ", ".join(f"{r.get('process', 0):.2f}" for r in rs)
                       + f" | {', '.join(str(r.get('load')) for r in rs)} |")
    out += ["", "Where the time goes: per node (median over rounds of the catalog's stats; wall / operator / "
            "write seconds, the latter two summed over tiles and threads or tasks):", "",
            "| configuration | node | wall (s) | operator (s) | write (s) |", "|---|---|---|---|---|"]
    for label, rs in runs.items():
        nodes = [r.get("nodes") for r in rs if r.get("nodes")]
        for node in (nodes[0] if nodes else {}):
            med = {k: statistics.median(n[node][k] for n in nodes) for k in ("wall", "op", "write")}
            out.append(f"| {label} | {node} | {med['wall']:.2f} | {med['op']:.2f} | {med['write']:.2f} |")
    out += _breakdown(runs)
    spark_parts = [(label, _median(rs, "python_worker_start"), _median(rs, "job_fixed"))
                   for label, rs in runs.items() if label.startswith("spark")]
    out += ["", "Spark's fixed costs per process (median): " + "; ".join(
        f"{label}: first Python job (workers start) {a:.2f} s, a later job {b:.2f} s"
        for label, a, b in spark_parts if a is not None and b is not None) + ".", ""]
    prof = raw.get("profiles", {})
    if prof:
        keys = [name for name, _ in PARTS] + ["other"]
        out += ["One local run per code tree under cProfile, one thread (own time of the functions, by part):", "",
                "| code | wall (s) | " + " | ".join(keys) + " |", "|---|---|" + "---|" * len(keys)]
        for which, got in prof.items():
            parts = got.get("parts") or {}
            out.append(f"| {which} | {got.get('wall', float('nan')):.2f} | "
                       + " | ".join(f"{parts.get(k, 0):.2f}" for k in keys) + " |")
        out.append("")
    out += _notes(wall, runs)
    same = {label: {tuple(r["label_checksum"]) for r in rs if r.get("label_checksum")}
            for label, rs in runs.items() if not label.startswith(("tiny", "numpy"))}
    out += [f"Label output (labelled cells, components) per configuration: "
            + "; ".join(f"{k}: {sorted(v)}" for k, v in same.items()), ""]
    return out


def _breakdown(runs: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Where each run's wall went, by stage as the driver saw it (median over rounds): inputs the
    driver stores, each stage's wall and, beside it, its tasks' own operator and write seconds
    over the 2 cores (the rest of the stage: reading and decoding inputs inside the operator's
    time aside, scheduling, task serialization, Python workers, uneven tasks), and the driver
    between stages (commits, planning, a two-pass node's first pass and combine)."""
    rows = []
    for label, rs in runs.items():
        done = [r for r in rs if r.get("stages") and r.get("nodes")]
        if not done:
            continue
        names = [n for n, _, _ in done[0]["stages"] if n not in ("x", "dark")]
        cells = {"inputs": statistics.median(sum(e - b for n, b, e in r["stages"] if n in ("x", "dark"))
                                             for r in done)}
        for name in names:
            walls = [sum(e - b for n, b, e in r["stages"] if n == name) for r in done]
            work = [sum(r["nodes"][m]["op"] + r["nodes"][m]["write"] for m in name.split("+") if m in r["nodes"]) / 2
                    for r in done]
            cells[name] = (statistics.median(walls), statistics.median(work))
        between = [r["wall"] - sum(e - b for _, b, e in r["stages"]) for r in done]
        text = "; ".join(f"{n} {w:.2f} ({k:.2f})" for n, (w, k) in ((n, cells[n]) for n in names))
        rows.append(f"| {label} | {cells['inputs']:.2f} | {text} | {statistics.median(between):.2f} |")
    if not rows:
        return []
    return ["", "Where each run's wall goes, by stage as the driver runs them (median seconds over rounds): the "
            "inputs the driver stores; each stage's wall and, in brackets, its tasks' own operator + write seconds "
            "over 2 cores (the operator's seconds include reading its input boxes; the rest of the stage is "
            "scheduling, task serialization, Python workers and uneven tasks); the driver between stages "
            "(commits, planning, and before Label's stage its first pass and combine when that is a job of its "
            "own):", "", "| configuration | inputs (driver) | stages: wall (tasks' work / 2 cores) | driver between "
            "stages |", "|---|---|---|---|", *rows]


def _notes(wall: dict[str, Any], runs: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Why a goal is missed and what would reach it, from this run's numbers."""
    numpy_wall, floor = wall.get("numpy"), wall.get("numpy+save")
    if not numpy_wall or not floor:
        return []

    def stage(label: str, name: str) -> float:
        walls = [sum(e - b for n, b, e in r["stages"] if n == name) for r in runs.get(label, []) if r.get("stages")]
        return statistics.median(walls) if walls else float("nan")

    spark, local = wall.get("spark: after"), wall.get("local: after")
    fused = stage("spark: after", "sub+blur+mask")
    lines = ["Reading the goals:", "",
             f"- Saving the six arrays once (1.3 GB at 6.4e7 cells) costs {floor / numpy_wall:.1f}x plain numpy on "
             "this disk and load, so no run that stores every node's output can be within 1.5x of numpy that "
             "stores nothing: that goal is out of reach while every intermediate is stored; only storing fewer "
             "arrays (recomputing cheap intermediates at query time instead) could reach it.",
             f"- Against the fair floor (numpy saving each output once, {floor:.2f} s): the local executor "
             f"{local / floor if local else float('nan'):.2f}x, Spark {spark / floor if spark else float('nan'):.2f}x. "
             f"Subtract, convolve and threshold now run as one fused stage ({fused:.2f} s on Spark, was three "
             f"stages of {sum(stage('spark: before', n) for n in ('sub', 'blur', 'mask')):.2f} s) with Label's "
             "first pass in it; what is left on Spark is Label's second pass (a stage of its own: it relabels "
             "every tile and writes int64 labels through zstd, "
             f"{stage('spark: after', 'label'):.2f} s), the inputs the driver stores, and Spark's cost per task "
             "(the stage's wall beside its tasks' work in the table above).",
             f"- The local executor's fused stage took {stage('local: after', 'sub+blur+mask'):.2f} s against "
             f"{sum(stage('local: before', n) for n in ('sub', 'blur', 'mask')):.2f} s for the three stages before "
             "(whose Label first pass then ran between stages): its threads pay no per-stage cost and already "
             "share one process's decoded chunks, so fusing saves it little; it stays on for one execution path.",
             "- Each round runs the configurations in one order: this checkout's right after numpy+save has "
             "written 1.3 GB, whose write-back can slow the inputs they store (inputs: "
             + ", ".join(f"{label} {statistics.median(i):.2f} s" for label, i in (
                 (label, [sum(e - b for n, b, e in r["stages"] if n in ("x", "dark")) for r in rs if r.get("stages")])
                 for label, rs in runs.items() if label.startswith(("local", "spark"))) if i)
             + "); compare the stages.", ""]
    return lines


if __name__ == "__main__":  # one configuration: python -P dataplane.py CONFIG SIDE STORE
    print(json.dumps(worker(sys.argv[1], int(sys.argv[2]), sys.argv[3])))

"""Capture overhead (issue 23): a run that stores lineage over the same run without.

Two workloads, each configuration timed in a new process:

- ``label``: `subzero.operators.Label` alone over a 2000 x 2000 mask (Gaussian-smoothed
  noise above 0.8 sigma: about 19,000 components), default tiles; BlackBox (nothing
  stored) is the base, against CompOne, FullRange, FullMany and PayOne;
- ``astronomy``: the astronomy workflow (`subzero.workflows.astronomy`, 512 x 2000 per
  image); NoLineage is the base, against SubZero (the optimizer's plan for the astronomy
  bench's queries and budgets, calibration included) and SubZeroPaper (the paper's plan
  pinned).

Each process runs its configuration twice (the first run pays imports and, on Spark, the
Python workers' start; the Spark session starts before either and is not timed) and
reports the faster, wall-clock and CPU time of its own threads (``time.process_time``: the
work done, which other jobs' load inflates far less than the wall clock).  Every round runs
every configuration once, interleaved, so the machine's load falls on all alike; the figures
are medians over rounds, ``uptime`` is recorded before and after.

With a baseline source tree (``SUBZERO_CAPTURE_BASELINE``: a directory holding an older
``subzero`` package), every configuration also runs on that code ("before") in the same
rounds, and the ratios of both are reported side by side.  ``SUBZERO_CAPTURE_BENCHES=label`` (or
``astronomy``) runs one workload only, ``SUBZERO_CAPTURE_CONFIGS=CompOne,PayOne`` some of the Label
configurations (BlackBox always runs).  A child process gets only the
public API both trees share (its script is written into the bench's directory).  The
Label runs answer the same backward query; before and after must agree.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from subzero_bench.results import figure
from subzero_bench.timing import child_pythonpath, load_average

__all__ = ["run_capture", "render_capture", "LABEL_CONFIGS", "ASTRONOMY_CONFIGS", "GOALS"]

LABEL_CONFIGS = ("BlackBox", "CompOne", "FullRange", "FullMany", "PayOne")
ASTRONOMY_CONFIGS = ("NoLineage", "SubZero", "SubZeroPaper")
#: the issue's goals: capture over the base run
GOALS = {"label": 1.5, "astronomy": 1.15}

CHILD = r'''
import json, shutil, sys, time
import numpy as np

spec = json.loads(sys.argv[1])
spark = None
if spec["executor"] == "spark":
    from subzero.executors.spark import get_session
    spark = get_session()
out = {"seconds": [], "cpu_seconds": []}
store = spec["store"]


def label_inputs(side):
    import scipy.ndimage as nd
    noise = nd.gaussian_filter(np.random.default_rng(0).normal(size=(side, side)), 2.0)
    return {"mask": (noise > 0.8 * noise.std()).astype(np.uint8)}


if spec["bench"] == "label":
    import subzero as sz
    from subzero.operators import Label
    wf = sz.Workflow("label")
    wf.add(Label(), wf.input("mask"), name="label")
    inputs = label_inputs(spec["side"])
    options = {"strategies": {"label": [spec["config"]]}}
else:
    from subzero_bench import astronomy as A
    from subzero.workflows import astronomy as workflow
    wf, inputs = workflow.build(quick=spec["quick"])
    pins = A.pins(wf, "NoLineage" if spec["config"] == "workload" else spec["config"], True)
    options = {"strategies": pins}
    if pins is None:
        options.update(workload=json.load(open(spec["workload"])), max_disk=A.DISK_BUDGET,
                       max_runtime=spec.get("max_runtime") or A.RUNTIME_BUDGET)
for k in range(1 if spec["config"] == "workload" else 2):
    shutil.rmtree(store, ignore_errors=True)
    start, cpu = time.perf_counter(), time.process_time()
    run = wf.run(inputs, store=store, executor=spec["executor"], spark=spark, **options)
    if hasattr(run, "wait"):  # a local run's store is written behind it: timed until durable
        run.wait()
    out["seconds"].append(time.perf_counter() - start)
    out["cpu_seconds"].append(time.process_time() - cpu)  # this process's threads: what load inflates least
if spec["config"] == "workload":
    specs = A.queries(run, spec["quick"])
    json.dump([s.workload_entry() for s in specs if s.entire_array], open(spec["workload"], "w"))
opt = run.catalog.optimizer or {}
out["calibration_seconds"] = opt.get("calibration_seconds")
out["plan"] = {n: list(r.strategies) for n, r in run.catalog.nodes.items()
               if r.strategies and any(s not in ("Map", "BlackBox") for s in r.strategies)}
if spec["bench"] == "label" and spec["config"] != "BlackBox":
    mid = spec["side"] // 2
    got = run.backward("label", box=((mid - 10, mid + 10), (mid - 10, mid + 10)), to="mask",
                       using={"label": spec["config"]})
    out["answer"] = [len(got), int(np.asarray(got, np.int64).sum())]
print("CAPTURE " + json.dumps(out))
'''


def _child(script: Path, code: Path, spec: dict[str, Any], root: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = child_pythonpath(code)
    done = subprocess.run([sys.executable, str(script), json.dumps(spec)], capture_output=True, text=True, env=env,
                          cwd=root)
    line = [x for x in done.stdout.splitlines() if x.startswith("CAPTURE ")]
    if done.returncode != 0 or not line:
        raise RuntimeError(f"capture {spec['bench']} {spec['config']} ({code}) failed ({done.returncode}): "
                           f"{done.stderr.strip()[-600:]}")
    return json.loads(line[-1][len("CAPTURE "):])


def run_capture(quick: bool, root: Path, size=None, executors: tuple[str, ...] = ("local", "spark"),
                rounds: int | None = None, log=print) -> dict[str, Any]:
    """Run the benchmark (see the module docstring); returns the results document's body.

    ``size`` overrides the Label mask's side (default 2000; quick: 500); ``quick`` also
    runs the astronomy workflow at its quick size and one round per executor.
    ``SUBZERO_CAPTURE_BENCHES`` (``label,astronomy`` by default) picks the workloads run,
    ``SUBZERO_CAPTURE_EXECUTORS`` (``local,spark``) the executors, ``SUBZERO_CAPTURE_CONFIGS``
    the Label configurations besides BlackBox (all by default), ``SUBZERO_CAPTURE_ROUNDS``
    the local rounds (Spark runs one fewer, at least one); the
    optimizer's astronomy runs take the runtime budget ``SUBZERO_CAPTURE_RUNTIME`` (the
    astronomy bench's, ``2x``, by default)."""
    ours = Path(__file__).resolve().parents[2]
    root = Path(root).resolve()  # the children run in it: a relative --out would be resolved twice
    given = os.environ.get("SUBZERO_CAPTURE_BASELINE")
    codes = {"after": ours} | ({"before": Path(given).resolve()} if given else {})
    side = int(size) if size else (500 if quick else 2000)
    rounds = rounds or int(os.environ.get("SUBZERO_CAPTURE_ROUNDS", 0)) or (1 if quick else 2)
    script = root / "capture_child.py"
    script.write_text(CHILD)
    workload = root / "workload.json"
    load_before = load_average()
    raw: dict[str, Any] = {}
    benches = [b for b in os.environ.get("SUBZERO_CAPTURE_BENCHES", "label,astronomy").split(",") if b]
    if "astronomy" in benches:
        _child(script, ours, {"bench": "astronomy", "config": "workload", "executor": "local", "quick": quick,
                              "store": str(root / "workload"), "workload": str(workload)}, root)
    executors = tuple(e for e in os.environ.get("SUBZERO_CAPTURE_EXECUTORS", ",".join(executors)).split(",") if e)
    label_configs = ["BlackBox"] + [c for c in os.environ.get("SUBZERO_CAPTURE_CONFIGS", ",".join(LABEL_CONFIGS)).split(",")
                                    if c in LABEL_CONFIGS and c != "BlackBox"]
    runtime = os.environ.get("SUBZERO_CAPTURE_RUNTIME")
    for ex in executors:
        jobs = [("label", c) for c in label_configs if "label" in benches] + \
            [("astronomy", c) for c in ASTRONOMY_CONFIGS if "astronomy" in benches]
        for k in range(rounds if ex == "local" else max(1, rounds - 1)):
            for bench, config in jobs:
                for version, code in codes.items():
                    spec = {"bench": bench, "config": config, "executor": ex, "quick": quick, "side": side,
                            "store": str(root / f"{bench}-{config}-{version}-{ex}"), "workload": str(workload),
                            "max_runtime": runtime}
                    got = _child(script, code, spec, root)
                    got["load"] = load_average()
                    raw.setdefault(ex, {}).setdefault(bench, {}).setdefault(config, {}).setdefault(
                        version, []).append(got)
                    log(f"capture {ex} {bench} {config} {version}: {min(got['seconds']):.2f} s "
                        f"(load {got['load'][0]})")
    load_after = load_average()
    return {"setup": {"label_side": side, "label_configs": label_configs,
                      "astronomy_configs": list(ASTRONOMY_CONFIGS), "rounds": rounds, "executors": list(executors),
                      "baseline": given, "quick": quick, "goals": GOALS, "benches": benches,
                      "max_runtime": runtime or "2x (the astronomy bench's)"},
            "raw": {"runs": raw, "load_before": load_before, "load_after": load_after},
            "figures": {"capture": figure("x base run", "the same run without lineage", _ratios(raw),
                                          "median seconds (fastest of two runs per process) over the base "
                                          "configuration's, per executor and code version")}}


def _ratios(raw: dict[str, Any]) -> dict[str, Any]:
    """``{executor: {bench: {config: {version: {"seconds": median, "x_base": ratio}}}}}``."""
    out: dict[str, Any] = {}
    for ex, benches in raw.items():
        for bench, configs in benches.items():
            base = configs["BlackBox" if bench == "label" else "NoLineage"]
            for config, versions in configs.items():
                for version, runs in versions.items():
                    med = statistics.median(min(r["seconds"]) for r in runs)
                    ref = statistics.median(min(r["seconds"]) for r in base[version])
                    calib = [r["calibration_seconds"] for r in runs if r.get("calibration_seconds") is not None]
                    cpu = [min(r["cpu_seconds"]) for r in runs if r.get("cpu_seconds")]
                    cpu_ref = [min(r["cpu_seconds"]) for r in base[version] if r.get("cpu_seconds")]
                    out.setdefault(ex, {}).setdefault(bench, {}).setdefault(config, {})[version] = {
                        "seconds": med, "x_base": med / ref,
                        "cpu_x_base": statistics.median(cpu) / statistics.median(cpu_ref) if cpu and cpu_ref else None,
                        "calibration_seconds":
                        statistics.median(calib) if calib else None,
                        "plans": sorted({json.dumps(r["plan"], sort_keys=True) for r in runs}),
                        "answers": sorted({json.dumps(r.get("answer")) for r in runs})}
    return out


def render_capture(doc: dict[str, Any]) -> list[str]:
    """The body of REPORT.md."""
    s, r = doc["setup"], doc["raw"]
    values = doc["figures"]["capture"]["values"]
    versions = ["before", "after"] if s.get("baseline") else ["after"]
    out = [f"Label over a {s['label_side']} x {s['label_side']} mask (about 19,000 components at 2000); the "
           f"astronomy workflow with the optimizer's plan (SubZero, calibration included) and the paper's plan. "
           f"Every configuration in a new process, fastest of two runs in it, median of {s['rounds']} rounds "
           f"(Spark: {max(1, s['rounds'] - 1)}), interleaved"
           + (f"; before = {s['baseline']}" if s.get("baseline") else "") +
           f".  Load (uptime 1/5/15 min) at the start: {', '.join(map(str, r['load_before']))}; at the end: "
           f"{', '.join(map(str, r['load_after']))} (each run's own load is in results.json).", ""]
    for note in s.get("notes", []):  # how a merged report's rows were measured
        out += [note, ""]
    for ex, benches in values.items():
        for bench, configs in benches.items():
            goal = s["goals"][bench]
            out += [f"**{bench}, {ex} executor** (goal: <= {goal}x)", "",
                    "| configuration | " + " | ".join(f"{v} (s) | {v} (x base) | {v} (CPU x base)" for v in versions) +
                    " | calibration (s) | plans / answers |",
                    "| --- | " + " | ".join("--- | --- | ---" for _ in versions) + " | --- | --- |"]
            for config, per in configs.items():
                cells = " | ".join(f"{per[v]['seconds']:.2f} | {per[v]['x_base']:.2f} | "
                                   + ("-" if per[v].get("cpu_x_base") is None else f"{per[v]['cpu_x_base']:.2f}")
                                   if v in per else "- | - | -" for v in versions)
                calib = per.get("after", {}).get("calibration_seconds")
                key = "plans" if bench == "astronomy" else "answers"
                notes = "; ".join(f"{v}: {', '.join(per[v][key])}" for v in versions if v in per)
                out.append(f"| {config} | {cells} | {'-' if calib is None else f'{calib:.2f}'} | {notes} |")
            out.append("")
    return out

"""The numpy front end's benchmark: how long tracing takes, and whether a traced workflow
runs as fast as the same workflow built from operator classes.

- Trace time: a 50-call numpy function (arithmetic, ufuncs, reductions, reshapes,
  indexing, filters) and the astronomy workflow written as numpy
  (`subzero.workflows.astronomy_numpy`), each traced afresh many times (median, best).
- Run time: the astronomy workflow as the hand-built DAG (`subzero.workflows.astronomy`)
  and as traced numpy code, on the same inputs with the same strategies (the paper's
  plan pinned: composite lineage for the four UDFs, mapping functions for the built-ins),
  configurations interleaved (DAG, traced, DAG, traced...) so that the load of the
  machine falls on both alike, after one untimed warm-up run of each; ``uptime`` before
  and after.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from subzero_bench.results import figure
from subzero_bench.timing import load_average

__all__ = ["run_trace", "fifty_calls", "render_trace"]


def fifty_calls():
    """A traced function of 50 numpy and subzero.ndimage calls (counted in its body)."""
    from subzero import ndimage as szi
    from subzero.trace import workflow as traced_workflow

    @traced_workflow
    def fifty(x, y, scale: float = 2.0):
        a = (x - y) * scale                                  # 2
        b = np.where(np.isfinite(a), a, 0.0)                 # 2
        c = b - np.mean(b)                                   # 2
        d = c / (np.std(c) + 1e-9)                           # 3
        e = np.clip(d, -5, 5)                                # 1
        f = np.sqrt(np.abs(e)) + np.exp(-e ** 2)             # 6
        g = szi.gaussian_filter(f, 1.0)                      # 1
        h = szi.median_filter(g, 3)                          # 1
        i = np.maximum(h, np.minimum(f, 1.0))                # 2
        j = i.T[::2, 1:-1]                                   # 2
        k = np.sum(j, axis=0) + np.max(j, axis=0)            # 3
        m = np.concatenate([k, k[::-1]])                     # 2
        n = np.sort(m)                                       # 1
        o = np.pad(i, 1, mode="edge")                        # 1
        p = np.roll(o, 2, axis=1)[1:-1, 1:-1]                # 2
        q = szi.laplace(p) > 0.5                             # 2
        r = szi.binary_dilation(q)                           # 1
        s = np.where(r, p, np.nan)                           # 1
        t = np.nanmean(s, axis=1)                            # 1
        u = np.stack([t, t * 2], axis=1)                     # 2
        v = u @ u.T                                          # 1
        w = np.log1p(np.abs(v))                              # 2
        z = w.reshape(-1)[:10].astype(np.float32)            # 3
        labels, _ = szi.label(q)                             # 1 (Label + Relabel)
        cnt = np.count_nonzero(labels, axis=0)               # 1
        return {"n": n, "z": z, "cnt": cnt, "tot": np.sum(g) + np.sum(e > 1)}   # 4

    return fifty


def _trace_times(fn, inputs: dict[str, np.ndarray], repeat: int) -> dict[str, Any]:
    signature = fn._signature(inputs)
    values = fn.parameters()
    fn._trace(signature, values)  # warm: imports, operator modules
    seconds = []
    for _ in range(repeat):
        start = time.perf_counter()
        wf = fn._trace(signature, values)
        seconds.append(time.perf_counter() - start)
    return {"median_ms": statistics.median(seconds) * 1e3, "best_ms": min(seconds) * 1e3, "repeat": repeat,
            "nodes": len([n for n in wf.nodes if not n.is_input])}


def _uptime() -> str:
    return " ".join(f"{v:.2f}" for v in load_average()) or "-"


def run_trace(quick: bool, root: Path, size=None, executor: str = "spark", spark=None, log=print) -> dict[str, Any]:
    """Run the benchmark (see the module docstring); returns the results document's body."""
    from subzero_bench.astronomy import PAPER_PLAN
    from subzero_bench.configs import configuration
    from subzero.workflows import astronomy, astronomy_numpy

    rng = np.random.default_rng(0)
    small = {"x": rng.normal(size=(64, 64)), "y": rng.normal(size=(64, 64))}
    fifty = _trace_times(fifty_calls(), small, 50 if quick else 200)
    log(f"trace: 50-call function, {fifty['nodes']} nodes, median {fifty['median_ms']:.2f} ms")
    shape = tuple(size) if size else (astronomy.QUICK_SHAPE if quick else astronomy.SHAPE)
    dag, inputs = astronomy.build(shape=shape)
    traced_astronomy = _trace_times(astronomy_numpy.astronomy, inputs, 20 if quick else 50)
    log(f"trace: astronomy as numpy, {traced_astronomy['nodes']} nodes, median {traced_astronomy['median_ms']:.2f} ms")
    traced = astronomy_numpy.astronomy.trace(inputs)
    udfs: dict[str, str | list[str]] = dict(PAPER_PLAN)
    plans = {"DAG": (dag, configuration(dag, udfs)), "traced": (traced, configuration(traced, udfs))}
    reps = 2 if quick else 4
    walls: dict[str, list[float]] = {name: [] for name in plans}
    for name, (wf, pins) in plans.items():  # warm-up, untimed: the JVM, Python workers, imports
        wf.run(inputs, store=root / f"{name}-warm", strategies=pins, executor=executor, spark=spark)
    load = {"before": _uptime()}
    for rep in range(reps):
        for name, (wf, pins) in plans.items():  # interleaved: DAG, traced, DAG, traced...
            start = time.perf_counter()
            wf.run(inputs, store=root / f"{name}-{rep}", strategies=pins, executor=executor, spark=spark)
            walls[name].append(time.perf_counter() - start)
            log(f"run {rep + 1}/{reps}: {name} {walls[name][-1]:.2f} s (load {_uptime()})")
    load["after"] = _uptime()
    median = {name: statistics.median(w) for name, w in walls.items()}
    spread = {name: (max(w) - min(w)) / statistics.median(w) for name, w in walls.items()}
    ratio = median["traced"] / median["DAG"]
    return {
        "setup": {"shape": list(shape), "executor": executor, "repeats": reps, "plan": PAPER_PLAN,
                  "nodes": {"DAG": len(dag.nodes), "traced": len(traced.nodes)}, "load": load},
        "figures": {
            "trace_ms": figure("ms", None, {"fifty_calls": fifty, "astronomy_numpy": traced_astronomy},
                               "time to trace a function into a workflow (median and best of many fresh traces)"),
            "run_seconds": figure("s", None, {"median": median, "all": walls},
                                  "wall time of one astronomy run, same inputs and strategies"),
            "run_ratio": figure("x", "DAG", {"traced": ratio, "spread": spread},
                                "traced run time over the hand-built DAG's; spread = (max - min) / median per "
                                "configuration, the noise"),
        },
        "raw": {},
    }


def render_trace(doc: dict[str, Any]) -> list[str]:
    """The body of REPORT.md."""
    s, f = doc["setup"], doc["figures"]
    trace, runs, ratio = f["trace_ms"]["values"], f["run_seconds"]["values"], f["run_ratio"]["values"]
    out = ["## Tracing", "",
           "| function | nodes | median (ms) | best (ms) | traces |", "| --- | --- | --- | --- | --- |"]
    for name, t in trace.items():
        out.append(f"| {name} | {t['nodes']} | {t['median_ms']:.2f} | {t['best_ms']:.2f} | {t['repeat']} |")
    out += ["", f"Goal: a 50-call function traces in < 20 ms: median {trace['fifty_calls']['median_ms']:.2f} ms.", "",
            "## Run time: traced numpy vs the hand-built DAG", "",
            f"Astronomy workflow, {s['shape'][0]} x {s['shape'][1]} images, executor {s['executor']}, the paper's "
            f"plan pinned on both ({s['nodes']['DAG']} and {s['nodes']['traced']} nodes with inputs), "
            f"{s['repeats']} runs each after a warm-up run, interleaved.  Load (uptime 1/5/15 min): before "
            f"{s['load']['before']}, after {s['load']['after']}; other sessions share the 2 cores.", "",
            "| workflow | median (s) | runs (s) | spread |", "| --- | --- | --- | --- |"]
    for name in ("DAG", "traced"):
        out.append(f"| {name} | {runs['median'][name]:.2f} | {', '.join(f'{w:.2f}' for w in runs['all'][name])} | "
                   f"{ratio['spread'][name]:.0%} |")
    out += ["", f"traced / DAG: **{ratio['traced']:.3f}x** (within noise when the ratio's distance from 1 is below "
            "the spread).", ""]
    return out

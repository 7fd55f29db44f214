"""Traced code against numpy: every real-code corpus function and the numpy astronomy workflow,
traced with ``@sz.workflow`` and run, against the same function called eagerly.

Cases: the 21 functions of `subzero_bench.corpus.cases` and ``astronomy_numpy``: the
astronomy pipeline as written for the front end (`subzero.workflows.astronomy_numpy`, traced
as it is), against `astronomy_plain`, the same steps in plain numpy with the three library
steps (L.A.Cosmic, the repair, sep's detection) called directly.  Two sizes each: ``small``
(the largest corpus size of at most 1e4 input cells; the astronomy images 64 x 128) and
``large`` (the corpus' large size, at least 1e6 cells; the astronomy images 512 x 2000, the astronomy
benchmark's).

Every measurement is a new process (a small script written into the output directory that
imports only ``subzero``'s public API and the cases, so it runs on an older tree too).  In it:
the Spark session starts first when the executor is Spark (timed, reported apart, not in any
figure); one untimed eager call and one untimed traced run on the case's tiny inputs pay the
imports; then the eager numpy call (fastest of 3 at the small size, 1 at the large), the traced
run as a user makes it, ``f.run(inputs, store)`` (trace plus run: the trace's share is the function's
``last_trace_seconds``; fastest of 2 at the small size, 1 at the large; a local run returns before its store is
written, so the time until `Run.wait` returns is kept beside it as *durable*), the store's bytes, whether the run's
outputs are numpy's, and a 1-cell backward query from the first output's middle cell to every
input (one untimed, then the median of 5, or of those made in 2 s).  Rounds are interleaved:
every case, size, executor and code version once per round (the versions in turn first), so the
machine's load falls on all alike; the figures are medians over rounds, and ``os.getloadavg()``
is recorded beside every process.

Before and after in one run: ``SUBZERO_TRACED_BASELINE=/path/to/tree`` (a source tree holding an
older ``subzero``) runs every measurement on that code too ("before"), first on the child's
``PYTHONPATH``.  Other knobs: ``SUBZERO_TRACED_CASES=ndvi,evi`` (a subset; ``astronomy_numpy``
is a case name too), ``SUBZERO_TRACED_SIZES=small,large``, ``SUBZERO_TRACED_EXECUTORS=local,spark``,
``SUBZERO_TRACED_ROUNDS=3`` and ``SUBZERO_TRACED_TIMEOUT=1800`` (seconds per process; a process
over it is a failed measurement, reported).  ``--quick``: one round, the small size, local.

The goals (issue "traced code at numpy's speed"): at >= 1e6 cells on the local executor the
median traced/numpy <= 1.5x and none above 3x; at the small size <= 0.3 s + 1 ms per node;
the store <= 2x the inputs; a 1-cell backward query <= 10 ms.
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

__all__ = ["run_traced", "render_traced", "case_names", "astronomy_plain", "summarize", "GOALS", "ASTRONOMY",
           "ASTRONOMY_SHAPES"]

#: the numpy astronomy workflow's case name
ASTRONOMY = "astronomy_numpy"
#: its image shape per size (three inputs of this shape; both axes multiples of the 16-pixel mesh)
ASTRONOMY_SHAPES = {"tiny": (32, 64), "small": (64, 128), "large": (512, 2000)}  # large: the benchmark's own
#: small size: at most this many input cells, where a corpus size allows
SMALL_CELLS = 10_000
#: the issue's goals
GOALS = {"large_median_x_numpy": 1.5, "large_max_x_numpy": 3.0, "small_fixed_seconds": 0.3,
         "small_seconds_per_node": 0.001, "store_x_input": 2.0, "query_seconds": 0.010}


def case_names() -> list[str]:
    """Every case: the corpus functions, in table order, then ``astronomy_numpy``."""
    from subzero_bench.corpus.cases import CASES

    return [c.name for c in CASES] + [ASTRONOMY]


def astronomy_plain(flat, exposure_1, exposure_2):
    """`subzero.workflows.astronomy_numpy.astronomy` in plain numpy: the same expressions, and the
    three library steps (L.A.Cosmic through astroscrappy, the repair, sep's detection) called on
    arrays (`subzero.oracle.evaluate_operator`: the operator's own computation, no lineage)."""
    import math

    import numpy as np

    from subzero.oracle import evaluate_operator
    from subzero.workflows.astronomy import BIAS, MESH, DetectStars, RepairCosmics, cosmic_rays_udf, noise_sigma

    sigma = noise_sigma()
    flat_norm = flat / np.mean(flat.astype(np.float64))
    weighted, good = [], []
    for raw in (exposure_1, exposure_2):
        elec = (raw - BIAS) / flat_norm
        crmask = evaluate_operator(cosmic_rays_udf(), [elec])
        good_k = 1.0 - crmask
        rows, cols = elec.shape
        mesh = elec.reshape(rows // MESH, MESH, cols // MESH, MESH).mean(axis=(1, 3))
        back = np.repeat(np.repeat(mesh, MESH, axis=0), MESH, axis=1)
        weighted.append((elec - back) * good_k)
        good.append(good_k)
    cover = good[0] + good[1]
    merged = (weighted[0] + weighted[1]) / np.clip(cover, 1.0, None)
    clean = evaluate_operator(RepairCosmics(sigma), [merged, cover])
    from scipy import ndimage

    smooth = ndimage.gaussian_filter(clean, 1.0, truncate=2.0)
    snr = smooth * (1.0 / (sigma / math.sqrt(4 * math.pi)))
    return {"stars": evaluate_operator(DetectStars(threshold=5.0, minarea=5), [snr]).astype(np.int64)}


CHILD = r'''
import json, os, shutil, statistics, sys, time, warnings
import numpy as np

spec = json.loads(sys.argv[1])
out = {"load_start": [round(v, 2) for v in os.getloadavg()]}
spark = None
if spec["executor"] == "spark":
    started = time.perf_counter()
    from subzero.executors.spark import get_session
    spark = get_session()
    out["spark_start_seconds"] = time.perf_counter() - started

import subzero as sz
from subzero_bench.corpus.harness import _compare, named_outputs

if spec["case"] == "astronomy_numpy":
    from subzero.workflows import astronomy_numpy as A
    from subzero.workflows.astronomy import exposures
    from subzero_bench.traced import ASTRONOMY_SHAPES, astronomy_plain
    fn, plain = A.astronomy.fn, astronomy_plain
    make = lambda size: exposures(ASTRONOMY_SHAPES[size])
else:
    from subzero_bench.corpus.cases import case
    c = case(spec["case"])
    fn = plain = c.workflow.fn
    make = lambda size: c.inputs(size, 0)


def eager(inputs):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return plain(**inputs)


def traced(inputs, store):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = sz.workflow(fn, name=spec["case"])  # a new one: its trace is not cached
        started = time.perf_counter()
        run = f.run(inputs, store=store, executor=spec["executor"], spark=spark, overwrite=True)
        done = time.perf_counter()
        if hasattr(run, "wait"):  # a run whose store is written behind it: until the store is durable
            run.wait()
        behind = time.perf_counter() - done
        wf = f.trace(inputs)  # the trace f.run made (cached): its nodes
    t_trace = min(f.last_trace_seconds or 0.0, done - started)  # the trace's share of f.run
    return wf, run, t_trace, done - started - t_trace, behind


store = spec["store"]
tiny = make("tiny")  # imports, first calls: paid here, unmeasured
eager(tiny)
traced(tiny, store + "-warm")
shutil.rmtree(store + "-warm", ignore_errors=True)

inputs = make(spec["size"])
out["cells"] = int(sum(a.size for a in inputs.values()))
out["input_bytes"] = int(sum(a.nbytes for a in inputs.values()))
out["shapes"] = {k: list(a.shape) for k, a in inputs.items()}
repeat = 3 if spec["size"] != "large" else 1  # the small sizes: fastest of 3
best = None
for _ in range(repeat):
    started = time.perf_counter()
    expected = eager(inputs)
    best = min(best or float("inf"), time.perf_counter() - started)
out["numpy_seconds"] = best
out["trace_seconds"], out["run_seconds"], out["behind_seconds"] = [], [], []
for _ in range(2 if spec["size"] != "large" else 1):
    shutil.rmtree(store, ignore_errors=True)
    wf, run, t_trace, t_run, t_behind = traced(inputs, store)
    out["trace_seconds"].append(t_trace)
    out["run_seconds"].append(t_run)
    out["behind_seconds"].append(t_behind)
out["traced_seconds"] = min(a + b for a, b in zip(out["trace_seconds"], out["run_seconds"]))
out["durable_seconds"] = min(a + b + c for a, b, c in zip(out["trace_seconds"], out["run_seconds"],
                                                          out["behind_seconds"]))
out["nodes"] = len([n for n in wf.nodes if not n.is_input])
out["store_bytes"] = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(store) for f in fs)
equal = True
for name, value in named_outputs(expected).items():
    equal = equal and _compare(value, np.asarray(run.output(name)))[0]
out["values_equal"] = bool(equal)
first = next(iter(named_outputs(expected)))
shape = tuple(run.shape(first))
cell = [tuple(n // 2 for n in shape)]
sources = [n.name for n in wf.nodes if n.is_input and n.name in inputs]


def query():
    if hasattr(run, "backward_many"):
        return run.backward_many(first, cell, to=tuple(sources), as_="coords")
    return {s: run.backward(first, cell, to=s) for s in sources}


got = query()
out["query_cells"] = int(sum(len(v) for v in got.values()))
times = []
while len(times) < 5 and sum(times) < 2.0:  # a slow query (seconds) is timed fewer times
    started = time.perf_counter()
    query()
    times.append(time.perf_counter() - started)
out["query_seconds"] = statistics.median(times)
out["load_end"] = [round(v, 2) for v in os.getloadavg()]
shutil.rmtree(store, ignore_errors=True)
print("TRACED " + json.dumps(out))
'''


def _child(script: Path, code: Path, spec: dict[str, Any], root: Path, timeout: float) -> dict[str, Any]:
    """One measurement in a new process running ``code``'s subzero; ``{"error": ...}`` when it failed."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = child_pythonpath(code)
    try:
        done = subprocess.run([sys.executable, str(script), json.dumps(spec)], capture_output=True, text=True,
                              env=env, cwd=root, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"over the {timeout:.0f} s limit (SUBZERO_TRACED_TIMEOUT)"}
    line = [x for x in done.stdout.splitlines() if x.startswith("TRACED ")]
    if done.returncode != 0 or not line:
        tail = done.stderr.strip().splitlines()
        return {"error": (tail[-1] if tail else f"exit status {done.returncode}")[:300]}
    return json.loads(line[-1][len("TRACED "):])


def _sizes_of(name: str) -> dict[str, str]:
    """``{"small": corpus size, "large": "large"}``: the corpus size measured for each size."""
    if name == ASTRONOMY:
        return {"tiny": "tiny", "small": "small", "large": "large"}
    from subzero_bench.corpus.cases import case

    c = case(name)
    fits = [s for s in ("small", "tiny") if s in c.shapes and c.cells(s) <= SMALL_CELLS]
    return {"tiny": "tiny", "small": fits[0] if fits else "small", "large": "large"}


def _env_list(var: str, default: list[str]) -> list[str]:
    return [x.strip() for x in os.environ.get(var, ",".join(default)).split(",") if x.strip()]


def run_traced(quick: bool, root: Path, size=None, log=print, **_) -> dict[str, Any]:
    """Run the benchmark (see the module docstring) with its stores under ``root``; returns the
    results document's body.  ``size`` replaces the sizes run: ``"small"``, ``"large"`` or ``"tiny"`` (the
    corpus' smallest inputs, for tests; also a name ``SUBZERO_TRACED_SIZES`` takes)."""
    from subzero.errors import WorkflowError

    ours = Path(__file__).resolve().parents[2]
    root = Path(root).resolve()
    given = os.environ.get("SUBZERO_TRACED_BASELINE")
    codes = {"after": ours} | ({"before": Path(given).resolve()} if given else {})
    known = case_names()
    cases = _env_list("SUBZERO_TRACED_CASES", known)
    unknown = [c for c in cases if c not in known]
    if unknown:
        raise WorkflowError(f"SUBZERO_TRACED_CASES names unknown cases {', '.join(unknown)}; the cases: "
                            f"{', '.join(known)}")
    if given and not (Path(given) / "subzero" / "__init__.py").is_file():
        raise WorkflowError(f"SUBZERO_TRACED_BASELINE={given} holds no subzero package; give the root of a source "
                            "tree (e.g. git worktree add --detach DIR COMMIT)")
    sizes = [size] if size else _env_list("SUBZERO_TRACED_SIZES", ["small"] if quick else ["small", "large"])
    executors = _env_list("SUBZERO_TRACED_EXECUTORS", ["local"] if quick else ["local", "spark"])
    for var, got_, allowed in (("SUBZERO_TRACED_SIZES", sizes, ("tiny", "small", "large")),
                               ("SUBZERO_TRACED_EXECUTORS", executors, ("local", "spark"))):
        if set(got_) - set(allowed):
            raise WorkflowError(f"{var} names {', '.join(sorted(set(got_) - set(allowed)))}; choose from "
                                f"{', '.join(allowed)}")
    rounds = int(os.environ.get("SUBZERO_TRACED_ROUNDS", 0)) or (1 if quick else 3)
    timeout = float(os.environ.get("SUBZERO_TRACED_TIMEOUT", 1800))
    script = root / "traced_child.py"
    script.write_text(CHILD)
    load_before = load_average()
    raw: dict[str, Any] = {}
    for k in range(rounds):
        for name in cases:
            measured = _sizes_of(name)
            for sz_name in sizes:
                for ex in executors:
                    order = list(codes.items())
                    for version, code in order if k % 2 == 0 else order[::-1]:  # neither always goes first
                        spec = {"case": name, "size": measured[sz_name], "executor": ex,
                                "store": str(root / f"{name}-{sz_name}-{ex}-{version}")}
                        got = _child(script, code, spec, root, timeout)
                        got["load"] = load_average()
                        raw.setdefault(name, {}).setdefault(sz_name, {}).setdefault(ex, {}).setdefault(
                            version, []).append(got)
                        what = got.get("error") or (f"{got['traced_seconds']:.3f} s traced, "
                                                    f"{got['numpy_seconds']:.4f} s numpy")
                        log(f"traced round {k + 1} {name} {sz_name} {ex} {version}: {what} (load {got['load'][0]})")
    body = {"setup": {"cases": cases, "sizes": sizes, "executors": executors, "rounds": rounds, "baseline": given,
                      "versions": list(codes), "quick": quick, "goals": GOALS},
            "raw": {"runs": raw, "load_before": load_before, "load_after": load_average()}}
    rows = _rows(raw)
    body["figures"] = {"traced": figure("x numpy", "the function called eagerly on the same arrays", rows,
                                        "per case, size, executor and code version: medians over rounds"),
                       "summary": figure("x numpy", "the function called eagerly", summarize(rows, list(codes)),
                                         "the issue's goals beside the measured figures, per code version")}
    log("\n".join(render_traced({"setup": body["setup"], "raw": body["raw"], "figures": body["figures"]})))
    return body


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _rows(raw: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per case, size, executor and version: medians over the rounds that succeeded."""
    rows = []
    for name, sizes in raw.items():
        for size, executors in sizes.items():
            for ex, versions in executors.items():
                for version, runs in versions.items():
                    ok = [r for r in runs if "error" not in r]
                    row: dict[str, Any] = {"case": name, "size": size, "executor": ex, "version": version,
                                           "rounds": len(runs), "failed": len(runs) - len(ok),
                                           "error": next((r["error"] for r in runs if "error" in r), None),
                                           "load": [r["load"][0] for r in runs if r.get("load")]}
                    if ok:
                        traced = statistics.median(r["traced_seconds"] for r in ok)
                        numpy = statistics.median(r["numpy_seconds"] for r in ok)
                        nodes = ok[0]["nodes"]
                        # the ratio within each process (same load), then the median over rounds
                        ratio = _median([r["traced_seconds"] / r["numpy_seconds"] for r in ok if r["numpy_seconds"]])
                        durable = _median([r["durable_seconds"] for r in ok if "durable_seconds" in r])
                        row.update(cells=ok[0]["cells"], nodes=nodes, traced_seconds=traced, numpy_seconds=numpy,
                                   durable_seconds=durable,
                                   x_numpy=ratio,
                                   seconds_per_node=traced / nodes if nodes else None,
                                   small_goal_seconds=GOALS["small_fixed_seconds"]
                                   + GOALS["small_seconds_per_node"] * nodes,
                                   store_x_input=_median([r["store_bytes"] / r["input_bytes"] for r in ok]),
                                   query_seconds=_median([r["query_seconds"] for r in ok]),
                                   query_cells=ok[0]["query_cells"],
                                   values_equal=all(r["values_equal"] for r in ok),
                                   spark_start_seconds=_median([r["spark_start_seconds"] for r in ok
                                                                if "spark_start_seconds" in r]))
                    rows.append(row)
    return rows


def summarize(rows: list[dict[str, Any]], versions: list[str]) -> list[dict[str, Any]]:
    """The summary lines per version: the measured figure, the goal, and whether it is met.

    Examples
    --------
    >>> rows = [{"version": "after", "size": "large", "executor": "local", "x_numpy": 1.2, "store_x_input": 1.0,
    ...          "query_seconds": 0.002, "traced_seconds": 0.1, "small_goal_seconds": 0.31}]
    >>> [(s["figure"], s["met"]) for s in summarize(rows, ["after"])][:2]
    [('median time vs numpy, >= 1e6 cells, local', True), ('max time vs numpy, >= 1e6 cells, local', True)]
    """
    out = []
    for version in versions:
        mine = [r for r in rows if r["version"] == version and r.get("x_numpy") is not None]
        large = [r["x_numpy"] for r in mine if r["size"] == "large" and r["executor"] == "local"]
        small = [r for r in mine if r["size"] == "small"]
        stores = [r["store_x_input"] for r in mine if r["executor"] == "local"]
        queries = [r["query_seconds"] for r in mine]
        lines = [("median time vs numpy, >= 1e6 cells, local", _median(large), GOALS["large_median_x_numpy"], "x"),
                 ("max time vs numpy, >= 1e6 cells, local", max(large) if large else None,
                  GOALS["large_max_x_numpy"], "x"),
                 ("median store vs input, local", _median(stores), GOALS["store_x_input"], "x"),
                 ("median 1-cell backward query", _median(queries) * 1e3 if queries else None,
                  GOALS["query_seconds"] * 1e3, " ms"),
                 ("max 1-cell backward query", max(queries) * 1e3 if queries else None,
                  GOALS["query_seconds"] * 1e3, " ms")]
        for figure_, value, goal, unit in lines:
            out.append({"version": version, "figure": figure_, "value": value, "goal": goal, "unit": unit,
                        "met": None if value is None else value <= goal})
        within = [r for r in small if r["traced_seconds"] <= r["small_goal_seconds"]]
        out.append({"version": version, "figure": "small size within 0.3 s + 1 ms per node",
                    "value": f"{len(within)} of {len(small)}", "goal": "all", "unit": "",
                    "met": None if not small else len(within) == len(small)})
    return out


def _f(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 10 ** digits else f"{value:.{digits}g}"
    return str(value)


def render_traced(doc: dict[str, Any]) -> list[str]:
    """The body of REPORT.md: the setup and load, the goals table, one row per case and configuration."""
    s, r = doc["setup"], doc["raw"]
    # from the raw measurements, so that a report re-rendered by newer code computes as it does
    rows = _rows(r["runs"])
    summary = summarize(rows, s["versions"])
    out = [f"Every function of the real-code corpus and the numpy astronomy workflow, traced with `@sz.workflow` "
           f"(trace + run) against the same function called eagerly; each measurement in a new process, "
           f"{s['rounds']} interleaved round(s), medians; executors: {', '.join(s['executors'])}"
           + (f"; before = {s['baseline']}" if s.get("baseline") else "") +
           f".  Load (1/5/15 min) at the start: {', '.join(map(str, r['load_before']))}; at the end: "
           f"{', '.join(map(str, r['load_after']))}; each row's 1-minute load per round is beside it.", "",
           "| version | figure | measured | goal | met |", "| --- | --- | --- | --- | --- |"]
    for line in summary:
        value = line["value"]
        shown = f"{_f(float(value))}{line['unit']}" if isinstance(value, (int, float)) else _f(value)
        met = "-" if line["met"] is None else ("met" if line["met"] else "not met")
        goal = f"<= {line['goal']}{line['unit']}" if isinstance(line["goal"], (int, float)) else line["goal"]
        out.append(f"| {line['version']} | {line['figure']} | {shown} | {goal} | {met} |")
    out += ["", "*x numpy*: (trace + run) seconds over the eager call's in the same process, median over rounds; "
            "*traced*, *numpy*: the medians of their seconds; *durable*: until the store is written as well "
            "(a local run writes it behind its return: `Run.wait`); *s/node* at the small size, against "
            "its goal 0.3 s + 1 ms per node; *store*: the store's bytes over the inputs'; *query*: a 1-cell "
            "backward query from the first output's middle cell to every input, median of 5 after one (of fewer "
            "when they take over 2 s); "
            "*Spark start*: the session's start in the process, in no other figure.", "",
            "| case | size | cells | executor | version | nodes | traced (s) | durable (s) | numpy (s) | x numpy | s/node "
            "| small goal (s) | store x input | query (ms) | values equal | Spark start (s) | load | failed |",
            "|" + " --- |" * 18]
    for row in rows:
        small = row["size"] == "small"
        failed = f"{row['failed']} of {row['rounds']}" + (f": {row['error']}" if row.get("error") else "")
        q = row.get("query_seconds")
        out.append(" | ".join([
            f"| {row['case']}", row["size"], f"{row['cells']:,}" if row.get("cells") else "-", row["executor"],
            row["version"], _f(row.get("nodes")), _f(row.get("traced_seconds")), _f(row.get("durable_seconds")),
            _f(row.get("numpy_seconds")),
            _f(row.get("x_numpy")) + ("x" if row.get("x_numpy") is not None else ""),
            _f(row.get("seconds_per_node")) if small else "-", _f(row.get("small_goal_seconds")) if small else "-",
            _f(row.get("store_x_input")), _f(q * 1e3 if q is not None else None), _f(row.get("values_equal")),
            _f(row.get("spark_start_seconds")), ", ".join(f"{v:.1f}" for v in row["load"]),
            failed.replace("|", "\\|")]) + " |")
    return out + [""]

"""``subzero bench scale``: the data plane from 1e6 to 1e9 cells (issue 9).

The workflow is ``subtract -> 3x3 Convolve -> Threshold -> Label`` on two random float32
images (an exposure and a dark frame), run for each size by

- ``numpy``: plain numpy/scipy on whole in-memory arrays (the same functions and dtypes
  the operators use), while the arrays fit in memory;
- ``local`` / ``spark``: subzero's in-process executor and Spark (the embedded
  ``local[*, 4]`` session, ``spark.driver.memory=1g``), without stored lineage (the default
  plan: Map for the mapping operators, BlackBox for Label) and with it (``+lineage``:
  Label stores CompOne, a UDF-style composite strategy), and with the optimizer choosing the
  plan (``+optimizer``: ``max_runtime="1.3x"`` and the bench's own two queries as the
  workload, calibration included in the wall time; the plan it chose is recorded).

Every configuration runs in a fresh process, so its peak memory is its own: the driver's
peak RSS is the Python process's (plus, for Spark, the driver JVM's, where local-mode
executors also live), the executors' peak is that of Spark's Python workers.  Inputs
are generated tile by tile into Zarr arrays (seeded per tile) before any timing and
passed to ``wf.run`` as Zarr arrays, so no process ever holds a whole input.  After
each run, a 1-cell backward query (a labelled cell of Label back to the exposure) and
a 1-pixel forward query (the exposure to Label) are timed in the same process; the queried
cell is chosen from the inputs (`query_cell`), so it is the same for every configuration and
known before the optimizer's run (its workload).

``SUBZERO_SCALE_CONFIGS`` (comma-separated) and ``SUBZERO_SCALE_SIDES`` pick what runs;
``SUBZERO_SCALE_ROUNDS`` repeats the configurations, interleaved (each configuration's fastest
round is its row; every round is kept); ``SUBZERO_SCALE_CODECS=0`` skips the compressor sweep
(which is skipped anyway beyond `CODEC_MAX_CELLS`).  The load average is recorded around
every run: other jobs may share the machine.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from subzero_bench.results import figure
from subzero_bench.timing import child_pythonpath, dir_bytes

__all__ = ["run_scale", "SIDES", "MAX_SIDE", "CONFIGS", "workflow"]

SIDES = (1000, 4000, 8000, 16125)        # 1e6, 1.6e7, 6.4e7, 2.6e8 cells
MAX_SIDE = 31623                          # 1e9 cells, with --max
QUICK_SIDES = (500, 1000)
CONFIGS = ("numpy", "local", "local+lineage", "spark", "spark+lineage", "spark+optimizer")
NUMPY_MAX_CELLS = 3 * 10**8               # plain numpy holds six arrays: beyond this it does not fit
MAX_CONFIGS = ("spark", "spark+lineage", "spark+optimizer")  # at MAX_SIDE: what the 1e9 target is about
CODEC_MAX_CELLS = 10**8                   # the compressor sweep runs the local executor: not beyond this
THRESHOLD = 0.5
RUNTIME_BUDGET = "1.3x"                   # the optimizer's max_runtime (issue 23: <= 1.3x without lineage)
QUERY_WINDOW = 64                         # the queried cell is the first labelled one in this window


def workflow():
    """The scale workflow: subtract a dark frame, a 3x3 box blur, a threshold, connected components."""
    import subzero as sz
    from subzero import operators as ops

    wf = sz.Workflow("scale")
    x, dark = wf.input("x"), wf.input("dark")
    sub = wf.add(ops.Subtract(), x, dark, name="sub")
    blur = wf.add(ops.Convolve(np.ones((3, 3)) / 9.0), sub, name="blur")
    mask = wf.add(ops.Threshold(THRESHOLD), blur, name="mask")
    wf.add(ops.Label(), mask, name="label")
    return wf


def plain(x: np.ndarray, dark: np.ndarray) -> np.ndarray:
    """The same computation in plain numpy/scipy (the operators' functions and dtypes)."""
    from scipy import ndimage

    blur = ndimage.convolve(x - dark, np.ones((3, 3)) / 9.0, mode="reflect")  # float32, as Convolve keeps it
    labels, _ = ndimage.label(blur > THRESHOLD)
    return labels


def make_inputs(root: Path, side: int, chunk: int = 2048) -> dict[str, str]:
    """Random float32 exposure and dark frame of ``side x side`` cells as Zarr arrays under
    ``root``, written chunk by chunk (seeded per chunk); returns their paths."""
    import zarr

    paths = {}
    for name, scale in (("x", 1.0), ("dark", 0.1)):
        path = root / f"{name}-{side}.zarr"
        paths[name] = str(path)
        if (path / "zarr.json").exists():
            continue
        arr = zarr.create_array(str(path), shape=(side, side), chunks=(chunk, chunk), dtype="float32",
                                compressors=None, overwrite=True)
        for r in range(0, side, chunk):
            for c in range(0, side, chunk):
                rng = np.random.default_rng([side, r, c, int(scale * 10)])
                block = rng.normal(size=(min(chunk, side - r), min(chunk, side - c))) * scale
                arr[r:r + chunk, c:c + chunk] = block.astype(np.float32)
    return paths


def query_cell(inputs: dict[str, str], side: int) -> tuple[int, int]:
    """The cell both queries start from: the first cell over the threshold in a window near
    the middle, computed from the inputs (the workflow's own values there: subtract, 3x3 box,
    threshold; float32 as the operators keep it), the middle cell if none is."""
    import zarr
    from scipy import ndimage

    middle = side // 2
    lo, hi = max(middle - 1, 0), min(middle + QUERY_WINDOW + 1, side)
    x = np.asarray(zarr.open_array(inputs["x"], mode="r")[lo:hi, lo:hi])
    dark = np.asarray(zarr.open_array(inputs["dark"], mode="r")[lo:hi, lo:hi])
    blur = ndimage.convolve(x - dark, np.ones((3, 3)) / 9.0, mode="reflect")
    inner = blur[middle - lo:middle - lo + QUERY_WINDOW, middle - lo:middle - lo + QUERY_WINDOW]
    hit = np.argwhere(inner > THRESHOLD)
    return (middle + int(hit[0][0]), middle + int(hit[0][1])) if len(hit) else (middle, middle)


def workload(cell: tuple[int, int]) -> list[dict[str, Any]]:
    """The bench's two queries in the optimizer's workload format (`subzero.optimizer.workload`)."""
    return [{"direction": "backward", "node": "label", "to": "x", "cells": [list(cell)]},
            {"direction": "forward", "node": "x", "to": "label", "cells": [list(cell)]}]


def _plan(run) -> dict[str, list[str]]:
    """The strategies each node stored (the optimizer's choice, or the pins and defaults)."""
    return {name: list(r.strategies) for name, r in run.catalog.nodes.items() if r.strategies}


# -- one configuration, in its own process ---------------------------------------------------------------
class _Sampler:
    """Peak RSS of the Spark driver JVM and of Spark's Python workers, polled every 50 ms."""

    def __init__(self):
        import psutil

        self.me = psutil.Process()
        self.jvm = 0
        self.workers = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        import psutil

        while not self._stop.wait(0.05):
            jvm = workers = 0
            try:
                for child in self.me.children(recursive=True):
                    try:
                        rss = child.memory_info().rss
                        if "java" in child.name():
                            jvm += rss
                        else:
                            workers += rss
                    except psutil.Error:
                        continue
            except psutil.Error:
                continue
            self.jvm, self.workers = max(self.jvm, jvm), max(self.workers, workers)

    def stop(self) -> tuple[int, int]:
        self._stop.set()
        self._thread.join()
        return self.jvm, self.workers


def sampled_session(executor: str) -> tuple["_Sampler", Any]:
    """A `_Sampler` of the driver's memory started now, and for ``executor == "spark"`` the Spark
    session with its JVM up (so the clock that starts next does not count its start), else None."""
    sampler = _Sampler()
    if executor != "spark":
        return sampler, None
    from subzero.executors.spark import get_session

    spark = get_session()
    spark.range(4).count()  # the JVM is up before the clock starts
    return sampler, spark


def _python_peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def worker(config: str, side: int, inputs: dict[str, str], store: str) -> dict[str, Any]:
    """Run one configuration at one size in this (fresh) process; return its measurements."""
    import zarr

    arrays = {name: zarr.open_array(path, mode="r") for name, path in inputs.items()}
    if config == "numpy":
        x, dark = np.asarray(arrays["x"][:]), np.asarray(arrays["dark"][:])
        from scipy import ndimage  # noqa: F401 - imported before the clock starts, as the executors' are

        base = _python_peak()
        start = time.perf_counter()
        plain(x, dark)
        return {"wall": time.perf_counter() - start, "driver_rss": _python_peak(), "inputs_rss": base}
    executor, _, kind = config.partition("+")
    if kind not in ("", "lineage", "optimizer"):
        raise ValueError(f"unknown scale configuration {config!r}: expected EXECUTOR[+lineage|+optimizer]")
    cell = query_cell(inputs, side)
    options: dict[str, Any] = {"strategies": {"label": "CompOne"}} if kind == "lineage" else {}
    if kind == "optimizer":
        options = {"max_runtime": RUNTIME_BUDGET, "workload": workload(cell)}
    sampler = _Sampler()
    spark = None
    if executor == "spark":
        from subzero.executors.spark import get_session

        spark = get_session()
        spark.range(4).count()  # the JVM is up before the clock starts
    wf = workflow()
    start = time.perf_counter()
    run = wf.run(arrays, store=store, executor=executor, spark=spark, **options)
    if hasattr(run, "wait"):  # a local run's store is written behind it: timed until durable
        run.wait()
    wall = time.perf_counter() - start
    run_python, run_jvm = _python_peak(), sampler.jvm  # the run's own peaks, before the queries re-execute
    nodes = {n: {"wall": r.stats.wall_seconds, "op": r.stats.op_seconds, "lineage": r.stats.lineage_seconds,
                 "write": r.stats.write_seconds, "tiles": r.stats.tiles}
             for n, r in run.catalog.nodes.items() if r.stats}
    lineage_bytes = sum(sum(r.stats.bytes.values()) for r in run.catalog.nodes.values() if r.stats)
    queries = _queries(run, cell)
    jvm, workers = sampler.stop()
    optimizer = run.catalog.optimizer
    if optimizer is not None:
        optimizer = {k: v for k, v in optimizer.items() if k != "pending"}
        optimizer["explain"] = {n: {"reason": r.reason, "predicted": r.predicted, "pruned": r.pruned,
                                    "dropped": r.dropped, "compute_seconds": r.compute_seconds}
                                for n, r in run.catalog.nodes.items() if r.kind == "operator"}
    if spark is not None:
        spark.stop()
    return {"wall": wall, "driver_rss": _python_peak() + jvm, "driver_python_rss": _python_peak(),
            "driver_jvm_rss": jvm, "executor_rss": workers if executor == "spark" else None,
            "driver_rss_run": run_python + run_jvm, "driver_python_rss_run": run_python,
            "array_bytes": dir_bytes(Path(store) / "arrays"), "lineage_bytes": lineage_bytes,
            "lineage_file_bytes": dir_bytes(Path(store) / "lineage"), "nodes": nodes, "plan": _plan(run),
            "optimizer": optimizer, "query_cell": list(cell), **queries}


def _queries(run, cell: tuple[int, int]) -> dict[str, Any]:
    """A 1-cell backward query from ``cell`` of Label to the exposure and a 1-pixel forward query."""
    out: dict[str, Any] = {"query_labelled": bool(np.asarray(run.output("label")[cell[0]:cell[0] + 1, cell[1]:cell[1] + 1]).max() > 0)}
    for direction, (node, to, cells) in {"backward": ("label", "x", [cell]),
                                         "forward": ("x", "label", [cell])}.items():
        query = run.backward if direction == "backward" else run.forward
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            got = query(node, cells, to=to)
            times.append(time.perf_counter() - t0)
        out[f"{direction}_seconds"] = min(times)
        out[f"{direction}_first_seconds"] = times[0]
        out[f"{direction}_cells"] = int(len(got))
    return out


# -- the benchmark ------------------------------------------------------------------------------------------
def _one(config: str, side: int, inputs: dict[str, str], store: Path, timeout: float,
         env_extra: dict[str, str] | None = None) -> dict[str, Any]:
    """One configuration at one size in a fresh process (its measurements, or its error)."""
    shutil.rmtree(store, ignore_errors=True)
    env = dict(os.environ, SUBZERO_DRIVER_MEMORY="1g", **(env_extra or {}))
    env["PYTHONPATH"] = child_pythonpath(os.environ.get("PYTHONPATH"))
    cmd = [sys.executable, "-m", "subzero_bench.scale", config, str(side), json.dumps(inputs), str(store)]
    start = time.perf_counter()
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish within {timeout:.0f} s"}
    finally:
        shutil.rmtree(store, ignore_errors=True)
    if done.returncode != 0:
        return {"error": "\n".join((done.stderr or "").strip().splitlines()[-5:])}
    got = json.loads(done.stdout.strip().splitlines()[-1])
    got["process_seconds"] = time.perf_counter() - start
    return got


def compressor_sweep(root: Path, side: int, inputs: dict[str, str], timeout: float) -> dict[str, Any]:
    """The local run without lineage at one size under each chunk compressor: wall time and
    bytes of the stored arrays (random float images compress little; masks and labels a lot)."""
    return {codec: _one("local", side, inputs, root / f"store-codec-{codec}", timeout,
                        {"SUBZERO_COMPRESSOR": codec}) for codec in ("auto", "none", "lz4", "zstd")}


def _env_list(name: str) -> list[str] | None:
    value = os.environ.get(name, "").strip()
    return [v.strip() for v in value.split(",") if v.strip()] or None


def run_scale(quick: bool, root: Path, sides=None, configs=None, log=print, max_: bool = False,
              timeout: float = 3 * 3600, rounds: int | None = None) -> dict[str, Any]:
    """Run every configuration at every size, each in a fresh process; returns the results body.

    ``configs`` and ``sides`` default to ``SUBZERO_SCALE_CONFIGS`` / ``SUBZERO_SCALE_SIDES``
    (comma-separated) when set, else to `CONFIGS` and the sizes of the mode; ``rounds``
    (``SUBZERO_SCALE_ROUNDS``, default 1) runs the configurations that many times, interleaved
    at each size, and keeps each configuration's fastest round as its row."""
    env_sides = _env_list("SUBZERO_SCALE_SIDES")
    sides = list(sides or ([int(v) for v in env_sides] if env_sides else
                           (QUICK_SIDES if quick else SIDES + ((MAX_SIDE,) if max_ else ()))))
    configs = tuple(configs or _env_list("SUBZERO_SCALE_CONFIGS") or CONFIGS)
    rounds = max(1, int(rounds or os.environ.get("SUBZERO_SCALE_ROUNDS") or 1))
    data = Path(os.environ.get("SUBZERO_SCALE_DATA", root / "inputs"))
    data.mkdir(parents=True, exist_ok=True)
    raw: dict[str, Any] = {"load_before": list(os.getloadavg())}
    for side in sides:
        inputs = make_inputs(data, side)
        for k in range(rounds):
            for config in configs:
                if config == "numpy" and side * side > NUMPY_MAX_CELLS:
                    continue
                if side == MAX_SIDE and config not in MAX_CONFIGS:
                    continue
                load = list(os.getloadavg())
                got = _one(config, side, inputs, root / f"store-{config.replace('+', '-')}-{side}", timeout)
                got["load_before"], got["load_after"], got["round"] = load, list(os.getloadavg()), k
                _keep(raw, f"{config}@{side}", got)
                if "error" in got:
                    log(f"scale: {config} at {side}^2 failed: "
                        f"{got['error'].splitlines()[-1] if got['error'] else '?'}")
                    continue
                log(f"scale: {config:>15} at {side * side:.1e} cells: {got['wall']:.2f} s, driver "
                    f"{got['driver_rss'] / 1e9:.2f} GB" + (f", backward {got['backward_seconds'] * 1e3:.1f} ms, "
                                                           f"forward {got['forward_seconds'] * 1e3:.1f} ms"
                                                           if "backward_seconds" in got else "")
                    + (f", plan label={got['plan'].get('label')}" if got.get("optimizer") else "")
                    + f" (load {load[0]:.2f})")
    codec_side = sides[min(1, len(sides) - 1)]
    sweep = os.environ.get("SUBZERO_SCALE_CODECS", "1") != "0" and codec_side * codec_side <= CODEC_MAX_CELLS
    if sweep:
        raw["codecs"] = compressor_sweep(root, codec_side, make_inputs(data, codec_side), timeout)
        log("scale: compressors at " + f"{codec_side * codec_side:.1e} cells: " + ", ".join(
            f"{c} {r.get('wall', float('nan')):.2f} s / {r.get('array_bytes', 0) / 1e9:.2f} GB"
            for c, r in raw["codecs"].items()))
    raw["load_after"] = list(os.getloadavg())
    return {"setup": {"sides": sides, "cells": [s * s for s in sides], "configs": list(configs),
                      "codec_cells": codec_side * codec_side if sweep else None, "rounds": rounds,
                      "max_runtime": RUNTIME_BUDGET,
                      "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("SUBZERO_SCALE_")},
                      "workflow": "subtract -> Convolve 3x3 -> Threshold -> Label", "driver_memory": "1g"},
            "figures": _figures(raw, sides, configs), "raw": raw}


def _keep(raw: dict[str, Any], key: str, got: dict[str, Any]) -> None:
    """Record one round of a configuration: every round under ``rounds`` (its wall, load,
    plan), the fastest successful one as the configuration's row."""
    previous = raw.get(key)
    rounds = (previous or {}).get("rounds", []) + [
        {k: got.get(k) for k in ("wall", "driver_rss", "load_before", "load_after", "plan", "error",
                                 "backward_seconds", "forward_seconds")}]
    better = previous is None or "error" in previous or ("wall" in got and got["wall"] < previous["wall"])
    best: dict[str, Any] = got if better or previous is None else previous
    raw[key] = {**best, "rounds": rounds}


def _figures(raw: dict[str, Any], sides, configs) -> dict[str, Any]:
    def values(key, scale=1.0):
        return {c: {str(s * s): (raw[f"{c}@{s}"][key] * scale if raw.get(f"{c}@{s}", {}).get(key) is not None
                                 else None) for s in sides} for c in configs}

    ratio = {c: {str(s * s): (raw[f"{c}@{s}"]["wall"] / raw[f"numpy@{s}"]["wall"]
                              if "wall" in raw.get(f"{c}@{s}", {}) and "wall" in raw.get(f"numpy@{s}", {})
                              else None) for s in sides} for c in configs if c != "numpy"}
    def over_base(config: str, side: int) -> float | None:
        mine, base = raw.get(f"{config}@{side}", {}), raw.get(f"{config.partition('+')[0]}@{side}", {})
        return mine["wall"] / base["wall"] if "wall" in mine and "wall" in base else None

    vs_base = {c: {str(s * s): over_base(c, s) for s in sides} for c in configs if "+" in c}
    return {
        "wall": figure("s", None, values("wall"), "wall time of the run (inputs already on disk)"),
        "wall_vs_numpy": figure("x", "numpy", ratio, "run time relative to plain numpy/scipy at the same size"),
        "wall_vs_no_lineage": figure("x", "the same executor without lineage", vs_base,
                                     "run time relative to the same executor's run without lineage "
                                     "(fastest rounds)"),
        "driver_rss": figure("GB", None, values("driver_rss", 1e-9),
                             "peak RSS of the driver: the Python process, plus the JVM for Spark"),
        "executor_rss": figure("GB", None, values("executor_rss", 1e-9), "peak RSS of Spark's Python workers"),
        "array_bytes": figure("GB", None, values("array_bytes", 1e-9), "bytes of the stored arrays"),
        "lineage_bytes": figure("MB", None, values("lineage_bytes", 1e-6), "bytes of stored lineage"),
        "backward_ms": figure("ms", None, values("backward_seconds", 1e3), "1-cell backward query, label -> x"),
        "forward_ms": figure("ms", None, values("forward_seconds", 1e3), "1-pixel forward query, x -> label"),
    }


if __name__ == "__main__":  # one configuration: python -m subzero_bench.scale CONFIG SIDE INPUTS_JSON STORE
    print(json.dumps(worker(sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4])))

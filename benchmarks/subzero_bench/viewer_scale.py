"""The viewer at 1e9 cells: ``subzero view`` on a sky of 31,680 x 31,680 pixels.

The viewer benchmark's astronomy workflow cannot be built at 1e9 cells on this machine (its
inputs are simulated as whole images and DetectStars runs on the whole image), so this one
serves the lineage-statistics workflow's sky (`subzero_bench.stats`: raw -> bias -> 16 x 16
background mesh subtracted -> Gaussian -> threshold -> `Label` "stars", about 6e5 stars and
cosmic-ray hits), which is tiled end to end:

- build (once, kept): the sky written tile by tile into Zarr (`stats.sky_zarr`), then the
  workflow run on Spark from those Zarr inputs (Label storing CompOne), the driver's peak
  memory sampled as `subzero_bench.scale` samples it; no process holds a whole array;
- under load: ``subzero view`` started as a user starts it, measured once idle, 1, 5 and 20
  concurrent clients brushing random stars (`viewer.concurrent_brushes`), with 1 and 2
  server processes;
- tiles: random uncached tiles of every level below the overview of the stored nodes ``raw``
  and ``stars``, and of levels 0-2 of ``smooth`` (not stored: each tile's region re-run from the
  stored ancestors under it), through the same server, then the same tiles again (cached).

``python -m subzero_bench.viewer_scale [--side 31680] [--data DIR] [--out DIR]`` writes
``results.json`` and ``REPORT.md`` into ``--out`` (default ``benchmarks/results/viewer-1e9``);
the inputs and the store are kept under ``--data`` for the next run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from subzero_bench.viewer import TARGETS, _free_port, _load, _pct, _stats, concurrent_brushes, store_summary

__all__ = ["build_sky_store", "run_viewer_scale", "render", "SIDE"]

SIDE = 31680                 # 1.0e9 cells (a multiple of 16: the mesh, and of 40: the star grid)
CHUNK = 1980                 # the Zarr inputs' chunks: the run's own tiles at this side (16 x 16 of them)
TILE_NODES = {"raw": None, "stars": None, "smooth": 2}  # node: its highest level measured (None: below the overview)


def build_sky_store(side: int, data: str | Path, log: Callable[[str], None] = print) -> dict[str, Any]:
    """The stats workflow's store at ``side x side`` under ``data`` (built on Spark from Zarr
    inputs written tile by tile; kept: a second call reads ``build-{side}.json``).  Returns the build's
    record: paths, seconds, the driver's peak memory (Python and the JVM) and the load."""
    import zarr

    from subzero_bench.scale import _python_peak, sampled_session
    from subzero_bench.stats import sky_zarr, workflow

    data = Path(data)
    record = data / f"build-{side}.json"
    if record.exists():
        return json.loads(record.read_text())
    t0 = time.perf_counter()
    paths = sky_zarr(side, data / "inputs", tile=CHUNK if side == SIDE else min(side, 2000), log=log)
    inputs_seconds = time.perf_counter() - t0
    sampler, spark = sampled_session("spark")
    store = data / f"stats-{side}"
    load_before = _load()
    t0 = time.perf_counter()
    run = workflow().run({"raw": zarr.open_array(paths["raw"], mode="r")}, store=store, executor="spark",
                         spark=spark, strategies={"stars": ["CompOne"]})
    run_seconds = time.perf_counter() - t0
    jvm, workers = sampler.stop()
    doc = {"side": side, "cells": side * side, "store": str(store), **paths, "inputs_seconds": inputs_seconds,
           "run_seconds": run_seconds, "driver_python_rss": _python_peak(), "driver_jvm_rss": jvm,
           "executor_rss": workers, "load_before": load_before, "load_after": _load()}
    record.write_text(json.dumps(doc, indent=1))
    log(f"viewer-scale: built {store} in {run_seconds:.0f} s (inputs {inputs_seconds:.0f} s), driver peak "
        f"{(doc['driver_python_rss'] + jvm) / 1e9:.2f} GB")
    return doc


def _tiles(store: str | Path, cache: Path, seed: int, count: int, log: Callable[[str], None]) -> dict[str, Any]:
    """Random tiles through ``subzero view`` (one server process): uncached, then again cached."""
    import http.client

    from subzero.run import open_run
    from subzero.tools.view.tiles import TILE

    run = open_run(str(store))
    rng = random.Random(seed)
    wanted = []
    for node, highest in TILE_NODES.items():
        h, w = (int(n) for n in run.shape(node))
        top = max(0, math.ceil(math.log2(max(h, w) / TILE))) if max(h, w) > TILE else 0  # as `Pyramid.top`
        levels = range(0, min(top - 1, highest) + 1) if highest is not None else range(0, top)
        every = [(node, z) for z in levels]
        for _ in range(count):
            node_, z = rng.choice(every)
            span = TILE << z
            wanted.append((node_, z, rng.randrange(-(-h // span)), rng.randrange(-(-w // span))))
    port = _free_port()
    env = {**os.environ, "SUBZERO_CACHE": str(cache)}
    proc = subprocess.Popen([sys.executable, "-m", "subzero", "view", str(store), "--port", str(port), "--workers", "1"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out: dict[str, Any] = {"uncached": {}, "cached": {}}
    try:
        deadline = time.monotonic() + 1800
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/api/run")
                res = conn.getresponse()
                if res.status == 200 and json.loads(res.read()).get("idle", False):
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("subzero view did not start and become idle in 30 min")
            time.sleep(0.5)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        for phase in ("uncached", "cached"):
            for node, z, ty, tx in wanted:
                t0 = time.perf_counter()
                conn.request("GET", f"/tiles/{node}/{z}/{ty}/{tx}.png")
                res = conn.getresponse()
                body = res.read()
                if res.status != 200:
                    raise RuntimeError(f"tile {node}/{z}/{ty}/{tx}: HTTP {res.status} {body[:200]!r}")
                out[phase].setdefault(f"{node} level {z}", []).append(1000 * (time.perf_counter() - t0))
        conn.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # pragma: no cover
            proc.kill()
    for phase in ("uncached", "cached"):
        every = [v for vs in out[phase].values() for v in vs]
        log(f"viewer-scale: {len(every)} tiles {phase}: p50 {_pct(every, 50):.0f} ms, p95 {_pct(every, 95):.0f} ms "
            f"(load {_load()})")
        out[phase] = {key: _stats(vs) for key, vs in sorted(out[phase].items())} | {"all": _stats(every)}
    return out


def run_viewer_scale(side: int = SIDE, data: str | Path = "benchmarks/results/viewer-1e9/data",
                     out_dir: str | Path = "benchmarks/results/viewer-1e9", clients: tuple[int, ...] = (1, 5, 20),
                     workers: tuple[int, ...] = (1, 2), brushes: int = 10, tiles: int = 12, seed: int = 31,
                     log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Build (or reuse) the sky store, measure brushes under load and tiles; write the report."""
    from subzero.run import open_run
    from subzero_bench.timing import machine_info, now_iso

    log = log or (lambda line: print(line, flush=True))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    build = build_sky_store(side, data, log)
    store = Path(build["store"])
    cache = Path(data) / "cache"
    summary = store_summary(open_run(str(store)), store)
    under_load = {}
    for w in workers:
        under_load[str(w)] = concurrent_brushes(store, clients, brushes, seed, log, cache=cache, start_seconds=1800,
                                                workers=w)
    tile = _tiles(store, cache, seed, tiles, log) if tiles else None
    doc = {"bench": "viewer-scale", "date": now_iso(), "machine": machine_info(),
           "command": " ".join(["python", "-m", "subzero_bench.viewer_scale"] + sys.argv[1:]),
           "seconds": time.perf_counter() - start, "side": side, "cells": side * side, "build": build,
           "store": summary, "under_load": under_load, "tiles": tile, "targets": TARGETS}
    top = str(max(clients))
    doc["met"] = {"brush_under_load": min(r["clients"][top]["p95"] for r in under_load.values()) <= TARGETS["brush"]}
    (out / "results.json").write_text(json.dumps(doc, indent=1))
    (out / "REPORT.md").write_text(render(doc))
    log(f"viewer-scale: wrote {out / 'results.json'} and {out / 'REPORT.md'} in {doc['seconds']:.0f} s")
    return doc


def _f(v: float | None, digits: int = 1) -> str:
    return "-" if v is None or v != v else f"{v:.{digits}f}"


def render(doc: dict[str, Any]) -> str:
    """The bench's REPORT.md."""
    b, st = doc["build"], doc["store"]
    driver = (b["driver_python_rss"] + b["driver_jvm_rss"]) / 1e9
    lines = [f"# The viewer at {doc['cells']:.1e} cells", "",
             f"- date: {doc['date']}", f"- machine: {doc['machine']['cpu']} ({doc['machine']['nproc']} cores)",
             f"- command: `{doc['command']}`", "",
             f"The lineage-statistics workflow's sky at {doc['side']:,} x {doc['side']:,} pixels (raw -> bias -> 16 x 16 "
             "background mesh subtracted -> Gaussian -> threshold -> Label `stars`). The viewer benchmark's astronomy "
             "workflow is not built at this size: its inputs are simulated whole and its star detection runs on the "
             "whole image. This one is tiled end to end: the sky written tile by tile into Zarr "
             f"({b['inputs_seconds']:.0f} s), then the workflow run on Spark from the Zarr inputs, Label storing "
             f"CompOne: {b['run_seconds']:.0f} s, the driver's peak {driver:.2f} GB (Python and the JVM), load "
             f"{b['load_before']} before, {b['load_after']} after.", "",
             f"The store takes {st['bytes'] / 1e9:.1f} GB: {len(st['stored'])} arrays stored "
             f"({', '.join(st['stored'])}), {len(st['recomputed'])} recomputed from them when read "
             f"({', '.join(st['recomputed'])}).", "",
             "## Brushes under load", "",
             "`subzero view` started as a user starts it (its own process, uvicorn on loopback), measured once idle "
             "(the stored nodes' overview tiles made: each reads its whole array once, cached for the next start). "
             "Then N clients at once, each a thread with its own connection, brushing random stars (16 x 16 boxes "
             "centred on a star's pixel) one after the other: `POST /api/lineage` backward then forward, as the "
             "page sends a brush; latency is both answers end to end.", "",
             "| server processes | idle after (s) | clients | brushes | p50 (ms) | p95 (ms) | max (ms) | brushes/s | load |",
             "|---|---|---|---|---|---|---|---|---|"]
    for w, r in doc["under_load"].items():
        for n, c in r["clients"].items():
            lines.append(f"| {w} | {_f(r.get('idle_seconds'))} | {n} | {c['n']} | {_f(c['p50'])} | {_f(c['p95'])} | "
                         f"{_f(c['max'])} | {_f(c['brushes_per_second'])} | {c['load']} |")
    top = str(max(int(n) for r in doc["under_load"].values() for n in r["clients"]))
    best = min(doc["under_load"].items(), key=lambda kv: kv[1]["clients"][top]["p95"])
    lines += ["", f"At {top} clients: p95 **{_f(best[1]['clients'][top]['p95'])} ms** with {best[0]} server "
                  f"process(es) (target <= {doc['targets']['brush']:.0f} ms: "
                  f"{'met' if doc['met']['brush_under_load'] else 'not met'})."]
    if doc.get("tiles"):
        lines += ["", "## Tiles", "",
                  "Random 256 x 256 tiles through the same server (one process): every level below the overview of "
                  "the stored `raw` and `stars`, levels 0-2 of `smooth` (not stored: a tile re-runs only its region, "
                  "plus the Gaussian's halo, through `sub`, reading the stored chunks of `bias` and `back` under it), "
                  "first uncached, then the same tiles again (cached).", "",
                  "| tiles | phase | n | p50 (ms) | p95 (ms) | max (ms) |", "|---|---|---|---|---|---|"]
        for phase in ("uncached", "cached"):
            for key, s in doc["tiles"][phase].items():
                lines.append(f"| {key} | {phase} | {s['n']} | {_f(s['p50'])} | {_f(s['p95'])} | {_f(s['max'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m subzero_bench.viewer_scale``: build (or reuse) the sky store, measure, write the report."""
    parser = argparse.ArgumentParser(prog="python -m subzero_bench.viewer_scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--side", type=int, default=SIDE, help=f"the sky's side in pixels (default {SIDE}: 1e9 cells)")
    parser.add_argument("--data", default="benchmarks/results/viewer-1e9/data",
                        help="where the inputs and the store are built and kept")
    parser.add_argument("--out", default="benchmarks/results/viewer-1e9")
    parser.add_argument("--clients", default="1,5,20")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--brushes", type=int, default=10, help="brushes per concurrent client")
    parser.add_argument("--tiles", type=int, default=12, help="random tiles per node (0: none)")
    parser.add_argument("--seed", type=int, default=31, help="picks the stars brushed and the tiles (the kept cache "
                                                             "holds the tiles of seeds measured before)")
    args = parser.parse_args(argv)
    run_viewer_scale(args.side, args.data, args.out, tuple(int(c) for c in args.clients.split(",")),
                     tuple(int(w) for w in args.workers.split(",")), args.brushes, args.tiles, args.seed)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

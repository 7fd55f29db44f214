"""The viewer benchmark (issue 19): how fast ``subzero view`` answers a brush and serves tiles
on the astronomy workflow at 1.6e7 cells per image (800 x 20,000; the paper's plan: CompOne
for the four UDFs, Map elsewhere).

Measured through the app itself (Starlette's in-process client: routing, JSON and PNG
encoding included, no network):

- brush: a 16 x 16 box on a node, ``POST /api/lineage`` backward to every upstream node and
  forward to every downstream node (what the page sends); the server time is the sum of both
  answers' ``ms``. Baseline: the same walks called directly (`Run.backward_many` and
  `Run.forward_many` to the same nodes, as Frontiers), so the ratio is the API's overhead.
- tiles: uniformly random tiles over every level of the pyramid of three nodes, from an
  empty cache (uncached), then the same tiles again (cached). Baseline: what a viewer without
  tiles does, reading the whole array and rendering one picture of it.

- under load: ``subzero view`` in a process of its own and 1, 5, 20 concurrent clients
  brushing stars (`concurrent_brushes`), at 512 x 2000 and at the size measured.

``python -m subzero_bench.viewer [--out DIR] [--store DIR] [--clients 1,5,20] [--shape HxW]``
(``subzero bench viewer [--shape HxW]``) writes ``results.json`` and ``REPORT.md``; ``--store``
reuses a store built before; else the stores are built once under ``--out`` (``stores-HxW``) and
kept. ``--shape`` sets the images' shape (default 800 x 20,000).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

__all__ = ["run_viewer", "build_store", "render", "concurrent_brushes", "star_boxes", "SHAPE", "TARGETS"]

SHAPE = (800, 20000)
#: issue 19's targets (ms, p95)
TARGETS = {"brush": 150.0, "tile_cached": 50.0, "tile_uncached": 500.0}
BRUSH_NODES = ("stars", "clean", "crmask_1", "exposure_1")
TILE_NODES = ("exposure_1", "crmask_1", "stars")
#: the side of the label windows `star_boxes` draws stars from
STAR_WINDOW = 1024
#: the largest array the whole-array baseline of the tiles reads (cells): above it the
#: baseline is not measured (at 1e8 cells it took this process to a peak of 19 GB: the
#: recomputed array whole, and its picture's colours as float64 per cell)
WHOLE_READ_CELLS = 20_000_000


def parse_shape(text: str) -> tuple[int, int]:
    """``"HxW"`` as ``(H, W)``: the astronomy images' shape (both multiples of 16).

    >>> parse_shape("800x125008")
    (800, 125008)
    """
    parts = str(text).lower().replace(" ", "").split("x")
    if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"a shape is HxW with two positive integers, e.g. 800x20000; got {text!r}")
    return int(parts[0]), int(parts[1])


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, float), q)) if values else float("nan")


def _stats(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "p50": _pct(values, 50), "p95": _pct(values, 95), "max": max(values, default=float("nan"))}


def build_store(path: str | Path, shape: tuple[int, ...] = SHAPE, executor: str = "local") -> float:
    """Run the astronomy workflow at ``shape`` into ``path`` with the paper's plan; seconds."""
    from subzero_bench.astronomy import pins
    from subzero.workflows.astronomy import build

    wf, inputs = build(shape=(int(shape[0]), int(shape[1])))
    t0 = time.perf_counter()
    wf.run(inputs, store=str(path), executor=executor, strategies=pins(wf, "SubZeroPaper"), overwrite=True)
    return time.perf_counter() - t0


def _load() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:  # pragma: no cover
        return "-"


def _brushes(client, run, rng: random.Random, per_node: int, log: Callable[[str], None]) -> dict[str, Any]:
    from subzero.tools.view.lineage import reachable

    rows: dict[str, dict[str, list[float]]] = {}
    for node in BRUSH_NODES:
        h, w = run.shape(node)
        got: dict[str, list[float]] = {"server_ms": [], "http_ms": [], "direct_ms": [], "cells": []}
        for k in range(per_node + 1):
            r0, c0 = rng.randrange(0, h - 16), rng.randrange(0, w - 16)
            box = [r0, r0 + 16, c0, c0 + 16]
            server, cells = 0.0, 0
            t0 = time.perf_counter()
            for direction in ("backward", "forward"):
                res = client.post("/api/lineage", json={"node": node, "direction": direction, "boxes": [box],
                                                        "to": None})
                assert res.status_code == 200, res.text
                data = res.json()
                server += data["ms"]
                cells += sum(a["cells"] for a in data["answers"].values())
            http = 1000 * (time.perf_counter() - t0)
            t0 = time.perf_counter()
            for direction, walk in (("backward", run.backward_many), ("forward", run.forward_many)):
                to = reachable(run, node, direction)
                if to:
                    walk(node, box=[[(r0, r0 + 16), (c0, c0 + 16)]], to=to, as_="frontier")
            direct = 1000 * (time.perf_counter() - t0)
            if k == 0:
                continue  # the first brush of a node opens its shards: reported as a warm-up, not timed
            got["server_ms"].append(server)
            got["http_ms"].append(http)
            got["direct_ms"].append(direct)
            got["cells"].append(cells)
        rows[node] = got
        log(f"viewer: brush {node}: server p95 {_pct(got['server_ms'], 95):.1f} ms, direct p95 "
            f"{_pct(got['direct_ms'], 95):.1f} ms, {int(np.mean(got['cells']))} highlighted cells on average")
    return rows


def _tiles(client, app, run, rng: random.Random, count: int, log: Callable[[str], None]) -> dict[str, Any]:
    viewer = app.state.viewer
    tiles = []
    for node in TILE_NODES:
        p = viewer.pyramid(node)
        every = [(z, ty, tx) for z in range(p.top + 1) for ty in range(p.grid(z)[0]) for tx in range(p.grid(z)[1])]
        every = [t for t in every if t != (p.top, 0, 0)]  # the overview was made as the app started
        tiles += [(node, *t) for t in rng.sample(every, min(count, len(every)))]
    rng.shuffle(tiles)
    out: dict[str, Any] = {"uncached": [], "cached": [], "levels": {}}
    for phase in ("uncached", "cached"):
        for node, z, ty, tx in tiles:
            t0 = time.perf_counter()
            res = client.get(f"/tiles/{node}/{z}/{ty}/{tx}.png")
            ms = 1000 * (time.perf_counter() - t0)
            assert res.status_code == 200, res.text
            out[phase].append(ms)
            if phase == "uncached":
                out["levels"].setdefault(str(z), []).append(ms)
    baseline: dict[str, float | None] = {}
    for node in TILE_NODES:
        from subzero.tools.view.tiles import render

        p = viewer.pyramid(node)
        if p.shape[0] * p.shape[1] > WHOLE_READ_CELLS:
            baseline[node] = None  # the whole array would not fit this process's share of memory
            continue
        t0 = time.perf_counter()
        whole = np.asarray(run.output(node))
        render(whole if p.display != "image" else whole.astype(np.float32), p.display, p.limits())
        baseline[node] = 1000 * (time.perf_counter() - t0)
    out["whole_array_ms"] = baseline
    log(f"viewer: tiles uncached p95 {_pct(out['uncached'], 95):.1f} ms, cached p95 {_pct(out['cached'], 95):.1f} ms "
        f"over {len(tiles)} tiles")
    return out


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def star_boxes(run, count: int, rng: random.Random, node: str = "stars", side: int = 16,
               window: int = STAR_WINDOW) -> list[list[int]]:
    """``count`` boxes ``side`` x ``side`` centred on random pixels of stars (non-zero cells of
    the label array ``node``), as the page sends them: ``[r0, r1, c0, c1]``.

    Each box comes from one random ``window`` x ``window`` read of the labels (a window with no
    star is drawn again), so the memory it takes does not grow with the array."""
    labels = run.output(node)
    h, w = (int(n) for n in run.shape(node))
    wh, ww = min(window, h), min(window, w)
    out: list[list[int]] = []
    misses = 0
    while len(out) < count:
        y0, x0 = rng.randrange(0, h - wh + 1), rng.randrange(0, w - ww + 1)
        hit = np.argwhere(np.asarray(labels[y0:y0 + wh, x0:x0 + ww]) != 0)
        if not len(hit):
            misses += 1
            if misses > 100 * count:
                raise RuntimeError(f"no star found in {misses} random {wh} x {ww} windows of {node!r}")
            continue
        r, c = (int(v) for v in hit[rng.randrange(len(hit))])
        r, c = r + y0, c + x0
        r0, c0 = min(max(0, r - side // 2), h - side), min(max(0, c - side // 2), w - side)
        out.append([r0, r0 + side, c0, c0 + side])
    return out


def concurrent_brushes(store: str | Path, clients: tuple[int, ...] = (1, 5, 20), brushes: int = 10, seed: int = 31,
                       log: Callable[[str], None] | None = None, node: str = "stars",
                       cache: str | Path | None = None, start_seconds: float = 600.0,
                       workers: int = 1) -> dict[str, Any]:
    """Brush latency under load: ``subzero view`` started as a user starts it (a process of its
    own, uvicorn on loopback), then for each count of ``clients``, that many threads, each a
    client of its own (own connection and client id) brushing ``brushes`` stars one after the
    other: ``POST /api/lineage`` backward then forward, as the page sends a brush. A brush's
    latency is both answers end to end, as the client sees them.

    Nothing is measured before the server is idle (``GET /api/run`` says ``"idle"``: the
    overview tiles of the stored nodes, which it makes in the background as it starts, all
    made), so the brushes never share its CPU with that work;
    ``idle_seconds`` is how long that took from the server's start.

    ``cache``: the server's cache directory (its tiles and query log; default the user's);
    ``start_seconds``: how long the server may take to start and become idle; ``workers``: its
    processes (``subzero view --workers``).
    Returns ``{"clients": {N: {"p50", "p95", "max", "n", "seconds", "brushes_per_second", "load"}},
    "idle_seconds": S, ...}``.
    """
    import http.client
    import subprocess
    import threading

    from subzero.run import open_run

    log = log or (lambda line: print(line, flush=True))
    run = open_run(str(store))
    rng = random.Random(seed)
    port = _free_port()
    env = dict(os.environ)
    if cache is not None:
        env["SUBZERO_CACHE"] = str(cache)
    proc = subprocess.Popen([sys.executable, "-m", "subzero", "view", str(store), "--port", str(port), "--workers",
                             str(workers)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    out: dict[str, Any] = {"clients": {}, "load_before": _load(), "node": node, "workers": workers}
    try:
        started = time.monotonic()
        deadline = started + start_seconds
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/api/run")
                res = conn.getresponse()
                if res.status == 200 and json.loads(res.read()).get("idle", False):  # the stored overviews made: idle
                    conn.close()
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"subzero view did not start and become idle in {start_seconds:.0f} s: "
                                   f"{proc.stderr.read().decode() if proc.poll() is not None and proc.stderr else ''}")
            time.sleep(0.2)
        out["idle_seconds"] = time.monotonic() - started
        out["load_idle"] = _load()
        log(f"viewer: subzero view idle (the stored nodes' overviews made) {out['idle_seconds']:.1f} s after its start "
            f"(load {out['load_idle']})")

        def brush_once(conn, box: list[int], client: str) -> float:
            t0 = time.perf_counter()
            for direction in ("backward", "forward"):
                body = json.dumps({"node": node, "direction": direction, "boxes": [box], "to": None})
                conn.request("POST", "/api/lineage", body=body,
                             headers={"Content-Type": "application/json", "X-Subzero-Client": client})
                res = conn.getresponse()
                data = res.read()
                if res.status != 200:
                    raise RuntimeError(f"brush {box}: HTTP {res.status} {data[:300]!r}")
            return 1000 * (time.perf_counter() - t0)

        warm = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        for box in star_boxes(run, 3, rng, node):  # opens the shards the brushes read
            brush_once(warm, box, "warm-up")
        warm.close()
        for n in clients:
            boxes = [star_boxes(run, brushes, rng, node) for _ in range(n)]
            times: list[list[float]] = [[] for _ in range(n)]
            errors: list[BaseException] = []

            def client(k: int) -> None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
                try:
                    for box in boxes[k]:
                        times[k].append(brush_once(conn, box, f"bench-{n}-{k}"))
                except BaseException as exc:  # reported below  # noqa: BLE001
                    errors.append(exc)
                finally:
                    conn.close()

            threads = [threading.Thread(target=client, args=(k,)) for k in range(n)]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            seconds = time.perf_counter() - t0
            if errors:
                raise errors[0]
            every = [v for row in times for v in row]
            out["clients"][str(n)] = {**_stats(every), "seconds": seconds, "brushes_per_second": len(every) / seconds,
                                      "load": _load()}
            log(f"viewer: {n} concurrent client(s) brushing {node} ({workers} server process(es)): p50 {_pct(every, 50):.0f} ms, p95 "
                f"{_pct(every, 95):.0f} ms, {len(every) / seconds:.1f} brushes/s (load {_load()})")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # pragma: no cover
            proc.kill()
    out["load_after"] = _load()
    out["shape"] = list(run.shape(node))
    return out


def cached_store(out: Path, shape: tuple[int, ...], log: Callable[[str], None]) -> tuple[Path, float | None]:
    """The astronomy store at ``shape`` under ``out/stores-HxW`` (built once, kept for the
    next run; ignored by git), and the seconds its build took now (None: it was there)."""
    path = out / f"stores-{shape[0]}x{shape[1]}" / "astronomy"
    if (path / "catalog.json").exists():
        return path, None
    log(f"viewer: building the astronomy workflow at {shape[0]} x {shape[1]} into {path} (local executor, kept)")
    return path, build_store(path, shape)


def run_viewer(out_dir: str | Path = "benchmarks/results/viewer", store: str | Path | None = None,
               brushes: int = 40, tiles: int = 40, seed: int = 19, log: Callable[[str], None] | None = None,
               quick: bool = False, clients: tuple[int, ...] = (1, 5, 20), load_brushes: int = 10,
               shape: tuple[int, int] | None = None, recompute: bool = True, workers: tuple[int, ...] = (1, 2)) -> dict:
    """Run the benchmark and write ``results.json`` and ``REPORT.md`` into ``out_dir``
    (``quick``: 400 x 4000 images, 8 brushes and 8 tiles per node, built in a temporary
    directory; else the stores are built once under ``out_dir``, see `cached_store`).
    ``shape``: the images' shape (default `SHAPE`; 400 x 4000 when ``quick``); ``workers``: the
    counts of server processes the brushes under load are measured with, one after the other. ``recompute``: the
    overviews of the tiled nodes the run did not store are asked for (as a page first asking for them would make
    them, timed) before the tiles are measured; False: not (their upper tiles are then made as they are measured).

    Brushes under load (`concurrent_brushes`): ``clients`` counts of concurrent clients,
    ``load_brushes`` brushes each, on the store measured and (not ``quick``) on the
    512 x 2000 astronomy store as well."""
    from starlette.testclient import TestClient

    from subzero_bench.timing import machine_info, now_iso
    from subzero.run import open_run
    from subzero.tools.view.app import create_app
    from subzero.tools.view.tiles import run_cache_dir

    log = log or (lambda line: print(line, flush=True))
    shape = tuple(shape) if shape is not None else (400, 4000) if quick else SHAPE
    if quick:
        brushes, tiles = min(brushes, 8), min(tiles, 8)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="viewer-", dir=out))
    try:
        build_seconds = None
        if store is None and quick:
            store = tmp / "astronomy"
            log(f"viewer: building the astronomy workflow at {shape[0]} x {shape[1]} (local executor)")
            build_seconds = build_store(store, shape)
        elif store is None:
            store, build_seconds = cached_store(out, shape, log)
        run = open_run(str(store))
        store_info = store_summary(run, store)
        load_before = _load()
        # the server started for the brushes under load shares this cache: its overview tiles are made once
        app = create_app(run, run_cache_dir(run, tmp / "cache" / "view"), warm=False)
        viewer = app.state.viewer
        viewer.warm()  # what `subzero view` does in the background as it starts
        warm_seconds = float(viewer.warm_seconds or 0.0)
        recompute_seconds: float | None = None
        unstored = [name for name in TILE_NODES if not viewer.pyramid(name).stored]
        if recompute:  # what a page asking for their overviews makes (on demand: `subzero view` does not)
            t0 = time.perf_counter()
            for name in unstored:
                viewer._overview(name)
            recompute_seconds = time.perf_counter() - t0
        log(f"viewer: stretch limits and overview tiles of the stored nodes in {warm_seconds:.1f} s; of "
            f"{', '.join(unstored) or 'no node'} (recomputed, on demand) in {_f(recompute_seconds)} s (load {_load()})")
        rng = random.Random(seed)
        with TestClient(app) as client:
            brush = _brushes(client, run, rng, brushes, log)
            tile = _tiles(client, app, run, rng, tiles, log)
        load_after = _load()
        under_load: dict[str, Any] = {}
        if clients:
            stores = {"x".join(map(str, run.shape("exposure_1"))): Path(store)}
            if not quick:
                stores = {"512x2000": cached_store(out, (512, 2000), log)[0], **stores}
            for label, path in stores.items():
                for w in workers:  # the server in 1, 2, ... processes (`subzero view --workers`)
                    under_load[label if w == 1 else f"{label} ({w} workers)"] = concurrent_brushes(
                        path, tuple(clients), load_brushes, seed, log, cache=tmp / "cache",
                        start_seconds=600 + 2 * (warm_seconds + (recompute_seconds or 0)), workers=w)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    server = [v for r in brush.values() for v in r["server_ms"]]
    direct = [v for r in brush.values() for v in r["direct_ms"]]
    shape = tuple(run.shape("exposure_1"))
    doc: dict[str, Any] = {"bench": "viewer", "quick": bool(quick), "date": now_iso(), "machine": machine_info(),
           "command": " ".join(["python", "-m", "subzero_bench.viewer"] + sys.argv[1:]),
           "seconds": time.perf_counter() - start, "shape": list(shape), "cells": shape[0] * shape[1],
           "build_seconds": build_seconds, "warm_seconds": warm_seconds,
           "recompute_seconds": recompute_seconds, "recomputed_overviews": unstored, "load": {"before": load_before, "after": load_after},
           "store": store_info,
           "strategies": {k: list(v) for k, v in run.strategies.items()},
           "brush": {node: {k: _stats(v) for k, v in r.items()} for node, r in brush.items()},
           "brush_all": {"server_ms": _stats(server), "direct_ms": _stats(direct)},
           "tiles": {"uncached": _stats(tile["uncached"]), "cached": _stats(tile["cached"]),
                     "uncached_by_level": {z: _stats(v) for z, v in sorted(tile["levels"].items(), key=lambda kv: int(kv[0]))},
                     "whole_array_ms": tile["whole_array_ms"]},
           "targets": TARGETS, "under_load": under_load}
    most = [r["clients"][str(max(clients))] for r in under_load.values()] if clients else []
    doc["met"] = {"brush": doc["brush_all"]["server_ms"]["p95"] <= TARGETS["brush"],
                  "brush_under_load": bool(most) and most[-1]["p95"] <= TARGETS["brush"],
                  "tile_cached": doc["tiles"]["cached"]["p95"] <= TARGETS["tile_cached"],
                  "tile_uncached": doc["tiles"]["uncached"]["p95"] <= TARGETS["tile_uncached"]}
    (out / "results.json").write_text(json.dumps(doc, indent=1))
    (out / "REPORT.md").write_text(render(doc))
    log(f"viewer: wrote {out / 'results.json'} and {out / 'REPORT.md'} in {doc['seconds']:.0f} s")
    return doc


def store_summary(run, path: str | Path) -> dict[str, Any]:
    """What the store holds: its bytes on disk (every file under ``path``) and which nodes'
    arrays were stored (the run's ``keep``) or are recomputed when read."""
    size = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                size += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:  # pragma: no cover  (a file removed meanwhile)
                pass
    nodes = run.catalog.nodes
    return {"bytes": size, "stored": sorted(n for n in nodes if nodes[n].array.stored),
            "recomputed": sorted(n for n in nodes if not nodes[n].array.stored)}


def _f(v: float | None, digits: int = 1) -> str:
    return "-" if v is None or v != v else f"{v:.{digits}f}"


def render(doc: dict) -> str:
    """The bench's REPORT.md."""
    t, b = doc["targets"], doc["brush_all"]
    ok = {True: "yes", False: "**no**"}
    lines = [f"# Viewer benchmark (issue 19): {doc['cells']:.1e} cells per image", "",
             f"- date: {doc['date']}", f"- machine: {doc['machine']['cpu']} ({doc['machine']['nproc']} cores)",
             f"- command: `{doc['command']}`", "",
             f"The astronomy workflow at {doc['shape'][0]} x {doc['shape'][1]} = {doc['cells']:.1e} cells per image "
             f"(three inputs, 26 operators; the paper's plan: CompOne for the four UDFs, Map elsewhere"
             + (f"; built in {doc['build_seconds']:.0f} s with the local executor" if doc.get("build_seconds") else "")
             + f"). Load average (1, 5, 15 min) before: {doc['load']['before']}, after: {doc['load']['after']} "
             "(other work shared the 2 cores).", "",
             "## Brush to highlights", "",
             "A random 16 x 16 box on a node: backward to every upstream node and forward to every downstream node "
             "(two `POST /api/lineage`, as the page sends them). Server time: the sum of the two answers' `ms`; "
             "HTTP: both requests end to end in-process; direct: `Run.backward_many` + `Run.forward_many` to the "
             "same nodes without the API (the baseline). The first brush of each node (opening its shards) is "
             "not counted.", "",
             "| brushed node | brushes | server p50 (ms) | server p95 (ms) | HTTP p95 (ms) | direct p95 (ms) | "
             "highlighted cells (mean) |", "|---|---|---|---|---|---|---|"]
    for node, r in doc["brush"].items():
        lines.append(f"| {node} | {r['server_ms']['n']} | {_f(r['server_ms']['p50'])} | {_f(r['server_ms']['p95'])} | "
                     f"{_f(r['http_ms']['p95'])} | {_f(r['direct_ms']['p95'])} | {_f(r['cells']['p50'], 0)} |")
    loads = doc.get("under_load") or {}
    if loads:
        lines += ["", "## Brushes under load", "",
                  "`subzero view` started as a user starts it (its own process, uvicorn on loopback), measured only "
                  "once it is idle: the overview tiles of the stored nodes, which it makes in the background as it "
                  "starts, all made (those of the nodes it recomputes are made only when a page asks for them), so "
                  "no brush shares the CPU with that work ("
                  + ", ".join(f"{label}: idle {_f(r.get('idle_seconds'))} s after its start" for label, r in loads.items())
                  + "). Then N clients at once, each a thread with its own connection, brushing random "
                  "stars (16 x 16 boxes centred on a star's pixel) one after the other: `POST /api/lineage` backward "
                  "then forward, as the page sends a brush. Latency: both answers end to end, as the client sees "
                  "them. Load average (1, 5, 15 min) after each row.", "",
                  "| store (cells) | clients | brushes | p50 (ms) | p95 (ms) | max (ms) | brushes/s | load | "
                  "server processes |", "|---|---|---|---|---|---|---|---|---|"]
        for label, r in loads.items():
            h, w = (int(v) for v in label.split(" ")[0].split("x"))
            for n, c in r["clients"].items():
                lines.append(f"| {label} ({h * w:.1e}) | {n} | {c['n']} | {_f(c['p50'])} | {_f(c['p95'])} | "
                             f"{_f(c['max'])} | {_f(c['brushes_per_second'])} | {c['load']} | {r.get('workers', 1)} |")
        last = list(loads.values())[-1]["clients"]
        top = max(last, key=int)
        lines += ["", f"At {top} clients on the largest store ({list(loads.values())[-1].get('workers', 1)} server "
                      f"process(es)): p95 **{_f(last[top]['p95'])} ms** (target <= "
                      f"{t['brush']:.0f} ms: {ok[bool(doc['met'].get('brush_under_load'))]})."]
    lines += ["", "Backward answers include every cell of the input `flat`: the flat field is normalised by its "
                  "mean, so every pixel depends on all of it (one box in the answer, never expanded into cells).", "",
              f"All brushes: server p95 **{_f(b['server_ms']['p95'])} ms** (target <= {t['brush']:.0f} ms: "
                  f"{ok[doc['met']['brush']]}); direct p95 {_f(b['direct_ms']['p95'])} ms, so the API costs "
                  f"{_f(b['server_ms']['p95'] / b['direct_ms']['p95'], 2)}x the walks themselves at p95.", "",
              "## Tiles", "",
              f"As it starts, the app makes the stretch limits (zscale over nine level-0 tiles) and overview tile "
              f"(the top level: the whole array read once, through the levels below) of every 2-D node the run "
              f"stored, in a background thread: here {_f(doc.get('warm_seconds'))} s for the "
              f"{len((doc.get('store') or {}).get('stored', [])) or len(doc['strategies']) + 3} stored nodes. "
              "The nodes the run did not store have theirs made when a page first asks for them (each tile re-run "
              "from the stored ancestors, once, cached)"
              + (f"; here the overviews of {', '.join(doc['recomputed_overviews'])} were asked for before the tiles "
                 f"were measured and took {_f(doc.get('recompute_seconds'))} s"
                 if doc.get("recomputed_overviews") and doc.get("recompute_seconds") is not None else "")
              + ". "
              "Then uniformly random 256 x 256 tiles over every other level of the pyramids of "
              f"{', '.join(doc['tiles']['whole_array_ms'])}, not made before (uncached: the tile's footprint read "
              "from the store, downsampled, rendered, PNG-encoded, written to the cache), then the same tiles again "
              "(cached). Baseline: reading the whole array and rendering it as one picture (what a viewer without "
              "tiles does on every open).", "",
              "| | tiles | p50 (ms) | p95 (ms) | max (ms) | target p95 | met |", "|---|---|---|---|---|---|---|"]
    for key, target in (("uncached", "tile_uncached"), ("cached", "tile_cached")):
        s = doc["tiles"][key]
        lines.append(f"| {key} | {s['n']} | {_f(s['p50'])} | {_f(s['p95'])} | {_f(s['max'])} | <= {t[target]:.0f} ms | "
                     f"{ok[doc['met'][target]]} |")
    lines += ["", "Uncached tiles by level (0 = full resolution; level z averages 2^z x 2^z cells; levels up to 3 "
                  "are one read of the tile's footprint, higher ones are made from their four children, cached):",
              "",
              "| level | tiles | p50 (ms) | p95 (ms) | max (ms) |", "|---|---|---|---|---|"]
    for z, s in doc["tiles"]["uncached_by_level"].items():
        lines.append(f"| {z} | {s['n']} | {_f(s['p50'])} | {_f(s['p95'])} | {_f(s['max'])} |")
    whole = doc["tiles"]["whole_array_ms"]
    measured = {n: v for n, v in whole.items() if v is not None}
    lines += [""]
    if measured:
        lines += ["Whole array read and rendered (baseline): " + ", ".join(f"{n} {_f(v, 0)} ms" for n, v in measured.items())
                  + "."]
    if len(measured) < len(whole):
        lines += [f"The whole-array baseline is not measured above {WHOLE_READ_CELLS:.1e} cells: it would hold the "
                  "whole array in this process (what the tiles avoid)."]
    lines += ["", "## Store", ""]
    st = doc.get("store")
    if st:
        lines += [f"The store takes {st['bytes'] / 1e9:.2f} GB on disk ({st['bytes'] / doc['cells'] * 1e8 / 1e9:.2f} GB "
                  f"per 1e8 cells per image), with the run's defaults: {len(st['stored'])} arrays stored "
                  f"({', '.join(st['stored'])}), {len(st['recomputed'])} recomputed from their stored ancestors when "
                  f"read ({', '.join(st['recomputed']) or 'none'})."
                  + (f" Built in {doc['build_seconds']:.0f} s with the local executor "
                     f"({doc['build_seconds'] / doc['cells'] * 1e8:.0f} s per 1e8 cells per image)."
                     if doc.get("build_seconds") else ""), ""]
    lines += ["What a brush or a tile costs follows its footprint, not the array: a tile reads the chunks under it "
              "(an unstored node's tiles re-run only the tiles of its ancestors under them), a brush the shards of the "
              "tiles it touches; only the overview tiles read whole arrays, once, and are cached: those of the stored "
              "nodes in the background as the server starts, the others when first asked for.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m subzero_bench.viewer``: measure the viewer's API and write its report; the exit status."""
    parser = argparse.ArgumentParser(prog="python -m subzero_bench.viewer", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="benchmarks/results/viewer")
    parser.add_argument("--store", help="an astronomy store built before (else one is built, then deleted)")
    parser.add_argument("--brushes", type=int, default=40, help="brushes per node")
    parser.add_argument("--tiles", type=int, default=40, help="random tiles per node")
    parser.add_argument("--quick", action="store_true", help="400 x 4000 images, 8 brushes and tiles per node")
    parser.add_argument("--clients", default="1,5,20", help="counts of concurrent clients brushing (comma-separated; "
                                                             "empty: none)")
    parser.add_argument("--load-brushes", type=int, default=10, help="brushes per concurrent client")
    parser.add_argument("--stored-overviews-only", action="store_true",
                        help="do not ask for the overviews of the tiled nodes the run did not store before measuring "
                             "the tiles (their upper tiles are then made as they are measured)")
    parser.add_argument("--workers", default="1,2", help="server processes under load (subzero view --workers), "
                                                         "each count measured in turn (comma-separated)")
    parser.add_argument("--shape", type=parse_shape, help=f"the images' shape, HxW (default {SHAPE[0]}x{SHAPE[1]})")
    args = parser.parse_args(argv)
    clients = tuple(int(c) for c in args.clients.split(",") if c.strip())
    run_viewer(args.out, args.store, args.brushes, args.tiles, quick=args.quick, clients=clients,
               load_brushes=args.load_brushes, shape=args.shape, recompute=not args.stored_overviews_only,
               workers=tuple(int(w) for w in args.workers.split(",") if w.strip()) or (1,))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

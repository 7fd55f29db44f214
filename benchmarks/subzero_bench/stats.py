"""``python -m subzero_bench stats``: per-object lineage statistics and contamination counts (issue 20).

An astronomy-style workflow on a ``side x side`` float32 exposure (4000 x 4000 = 1.6e7
cells by default): bias subtraction, a 16 x 16 background mesh (mean, then upsampled)
subtracted, a Gaussian smoothing, a threshold and connected components (`Label`, the
star catalog's label array).  The sky holds about 1e4 stars on a jittered grid plus
cosmic-ray hits (single pixels and streaks), whose mask is the flags.

Measured in one process, on the stored run (local executor):

- ``table``: `Run.lineage_table` of every object over the raw exposure, with the
  cosmic-ray flags and the raw values: one labelled pass;
- ``per-object queries``: the baseline, one ``run.backward_mask`` per object, timed on a
  sample of objects and extrapolated to all (its rows are also checked against the table);
- ``count``: `contamination_count` of the cosmic-ray hits in the label array, against
  ``forward``: the union forward query of the same hits (`Run.forward_mask`), and checked
  per cell on a sample against one backward query per cell.

``SUBZERO_STATS_STORE`` (a store this workflow was run into, e.g. a 1e9-cell sky on Spark from
the Zarr inputs `sky_zarr` writes) with ``SUBZERO_STATS_FLAGS`` (that sky's ``hits`` Zarr array)
measures that store instead, read-only (`store_table`): the table of every object with the
hits as flags and ``raw`` as values, as Spark tasks (``SUBZERO_STATS_EXECUTOR``: ``spark``, the
default, or ``local``), in a fresh process whose driver peak RSS (Python plus the JVM, as the
scale bench measures it) is recorded beside the wall time and the load; then, in another fresh
process, `store_count`: the contamination count of the same hits in ``stars`` written chunk by
chunk into a Zarr array (``SUBZERO_STATS_WHAT``: ``table``, ``count`` or both, the default).
"""

from __future__ import annotations

import json
import logging
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from subzero_bench.results import figure
from subzero_bench.timing import child_pythonpath, load_average
from subzero.stats.table import BATCH_OBJECTS

__all__ = ["run_stats", "workflow", "sky", "sky_tile", "sky_zarr", "store_table", "SIDE", "QUICK_SIDE"]

SIDE, QUICK_SIDE = 4000, 800
SPACING = 40            # pixels between stars: (SIDE / SPACING)^2 = 1e4 stars
BIAS, SKY, READ_NOISE = 400.0, 150.0, 5.0
CR_RATE = 1 / 20000     # cosmic-ray hits per pixel
THRESHOLD = 25.0        # smoothed electrons (about 7 sigma of the smoothed sky noise)
BLOCK = 50 * SPACING  # columns of one seeded block of sky (one grid row high)
SAMPLE = 100            # objects (and cells) queried one by one for the baselines
COUNT_SAMPLE = 20       # counted cells of a built store checked against one backward query each
SCALING_SIDES = (8000,)  # full mode: a larger sky too (6.4e7 cells), without the per-object baseline


def workflow():
    """raw -> bias -> (mesh mean -> upsample) subtracted -> Gaussian -> threshold -> Label."""
    import subzero as sz
    from subzero import operators as ops

    wf = sz.Workflow("stats")
    raw = wf.input("raw")
    bias = wf.add(ops.SubtractScalar(BIAS), raw, name="bias")
    mesh = wf.add(ops.Downsample(16, how="mean"), bias, name="mesh")
    back = wf.add(ops.Upsample(16), mesh, name="back")
    sub = wf.add(ops.Subtract(), bias, back, name="sub")
    smooth = wf.add(ops.GaussianFilter(1.0, truncate=2.0), sub, name="smooth")
    bright = wf.add(ops.Threshold(THRESHOLD), smooth, name="bright")
    wf.add(ops.Label(), bright, name="stars")
    return wf


def sky_tile(side: int, rows: tuple[int, int], cols: tuple[int, int], seed: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """The cells ``[rows[0]:rows[1], cols[0]:cols[1]]`` of the ``side x side`` sky: (raw exposure in
    ADU, cosmic-ray mask).  Stars with a Gaussian PSF (sigma 1.5) sit on a jittered grid of
    `SPACING` pixels, one per grid cell, their 13 x 13 stamps inside it; Poisson sky, read noise
    and cosmic-ray hits (single pixels and streaks) are drawn per block (one grid row by `BLOCK`
    columns), seeded by its position, so tiles of any size and place assemble the same sky: a
    1e9-cell sky is written tile by tile without ever being held whole (`sky_zarr`)."""
    from subzero.workflows.astronomy import cosmic_rays

    (r0, r1), (c0, c1) = rows, cols
    image = np.empty((r1 - r0, c1 - c0), np.float64)
    hits = np.zeros(image.shape, bool)
    stamp = np.arange(-6, 7)
    dr, dc = np.meshgrid(stamp, stamp, indexing="ij")
    for br in range(r0 - r0 % SPACING, r1, SPACING):
        for bc in range(c0 - c0 % BLOCK, c1, BLOCK):
            rng = np.random.default_rng((seed, br // SPACING, bc // BLOCK))
            h, w = min(SPACING, side - br), min(BLOCK, side - bc)
            block = rng.poisson(SKY, size=(h, w)).astype(np.float64) + rng.normal(0.0, READ_NOISE, (h, w))
            if h == SPACING:  # stars only in whole grid cells
                n = w // SPACING
                centre = (np.arange(n) + 0.5) * SPACING
                pos = np.stack([np.full(n, SPACING / 2), centre], axis=1) + rng.uniform(-8, 8, size=(n, 2))
                flux = rng.uniform(300.0, 3000.0, size=n)
                base = np.floor(pos).astype(np.int64)
                r = base[:, :1] + dr.ravel()[None]
                c = base[:, 1:] + dc.ravel()[None]
                d2 = (r + 0.5 - pos[:, :1]) ** 2 + (c + 0.5 - pos[:, 1:]) ** 2
                psf = flux[:, None] * np.exp(-d2 / (2 * 1.5**2)) / (2 * np.pi * 1.5**2)
                np.add.at(block, (r.ravel(), c.ravel()), psf.ravel())
            cells, energy = cosmic_rays((h, w), rng)
            keep = rng.random(len(cells)) < CR_RATE / (1 / 2000)  # astronomy's rate is 1/2000: keep a tenth
            cells, energy = cells[keep], energy[keep]
            np.add.at(block, tuple(cells.T), energy)
            block_hits = np.zeros(block.shape, bool)
            block_hits[tuple(cells.T)] = True
            lo_r, hi_r, lo_c, hi_c = max(br, r0), min(br + h, r1), max(bc, c0), min(bc + w, c1)
            image[lo_r - r0:hi_r - r0, lo_c - c0:hi_c - c0] = block[lo_r - br:hi_r - br, lo_c - bc:hi_c - bc]
            hits[lo_r - r0:hi_r - r0, lo_c - c0:hi_c - c0] = block_hits[lo_r - br:hi_r - br, lo_c - bc:hi_c - bc]
    return (image + BIAS).astype(np.float32), hits


def sky(side: int, seed: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """(raw exposure in ADU, cosmic-ray mask) of the whole ``side x side`` sky (`sky_tile`)."""
    return sky_tile(side, (0, side), (0, side), seed)


def sky_zarr(side: int, root: str | Path, tile: int = 4000, seed: int = 20,
             log: Callable[[str], None] = print) -> dict[str, str]:
    """The ``side x side`` sky written tile by tile into two Zarr arrays under ``root``
    (``raw-{side}.zarr`` float32, ``hits-{side}.zarr`` bool, chunks ``tile x tile``), each tile made alone (`sky_tile`): memory follows a tile, not the sky.
    Arrays already complete (a marker file written last) are kept.  Returns their paths."""
    import zarr

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    paths = {name: root / f"{name}-{side}.zarr" for name in ("raw", "hits")}
    done = root / f"sky-{side}.done"
    if not done.exists():
        raw = zarr.create_array(str(paths["raw"]), shape=(side, side), chunks=(tile, tile), dtype="float32",
                                overwrite=True)
        hits = zarr.create_array(str(paths["hits"]), shape=(side, side), chunks=(tile, tile), dtype="bool",
                                 overwrite=True)
        t0 = time.perf_counter()
        for r in range(0, side, tile):
            for c in range(0, side, tile):
                rows, cols = (r, min(r + tile, side)), (c, min(c + tile, side))
                raw[rows[0]:rows[1], cols[0]:cols[1]], hits[rows[0]:rows[1], cols[0]:cols[1]] = \
                    sky_tile(side, rows, cols, seed)
            log(f"stats: sky {side}x{side}: rows to {min(r + tile, side)} written ({time.perf_counter() - t0:.0f} s)")
        done.write_text("complete\n")
    return {name: str(path) for name, path in paths.items()}


def _peak_bytes(fn) -> int:
    """Peak bytes numpy and Python allocate while ``fn`` runs (tracemalloc: numpy reports its
    buffers to it), beyond what was held before."""
    import tracemalloc

    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return int(tracemalloc.get_traced_memory()[1] - base)
    finally:
        tracemalloc.stop()


def _scaling_row(root: Path, side: int, log: Callable[[str], None]) -> dict[str, Any]:
    """A larger sky: the run, the table (default batches) and its peak memory, the count and
    the forward query, without the per-object baseline."""
    raw, hits = sky(side)
    t0 = time.perf_counter()
    run = run_workflow(raw, root / f"stats-{side}")
    run_seconds = time.perf_counter() - t0
    del raw
    load = load_average()
    t0 = time.perf_counter()
    table = run.lineage_table("stars", over="raw", flags=hits, values="raw")
    table_seconds = time.perf_counter() - t0
    peak = _peak_bytes(lambda: run.lineage_table("stars", over="raw", flags=hits, values="raw"))
    from subzero.stats import contamination_count

    t0 = time.perf_counter()
    count = contamination_count(run, "raw", hits, "stars")
    count_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    forward = run.forward_mask("raw", hits, to="stars")
    forward_seconds = time.perf_counter() - t0
    row = {"side": side, "cells": side * side, "objects": len(table), "flagged": int(hits.sum()),
           "run_seconds": run_seconds, "table_seconds": table_seconds, "table_peak_bytes": peak,
           "lineage_cells_total": int(np.asarray(table["n_lineage"]).sum()), "count_seconds": count_seconds,
           "forward_seconds": forward_seconds, "count_mask_agrees": bool(np.array_equal(count > 0, forward)),
           "load_before": load}
    log(f"stats: {side}x{side}: {len(table)} objects, table {table_seconds:.2f} s (peak {peak / 1e6:.0f} MB), "
        f"count {count_seconds:.2f} s vs forward {forward_seconds:.2f} s")
    return row


def run_workflow(raw: np.ndarray, store: Path):
    """The workflow run locally into ``store`` (Label storing CompOne)."""
    return workflow().run({"raw": raw}, store=store, executor="local", tile_shape=1000,
                          strategies={"stars": ["CompOne"]})


def _measured(call: Callable[[], Any], sampler: Any, spark: Any, executor: str) -> tuple[Any, dict[str, Any]]:
    """``call()`` timed, with the load beside it; then the driver's peak RSS (this process's plus
    the driver JVM's, from ``sampler``) and Spark's Python workers' peak, and Spark stopped."""
    load_before = load_average()
    t0 = time.perf_counter()
    got = call()
    wall = time.perf_counter() - t0
    load_after = load_average()
    jvm, workers = sampler.stop()
    python = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if spark is not None:
        spark.stop()
    return got, {"seconds": wall, "driver_rss": python + jvm, "driver_python_rss": python, "driver_jvm_rss": jvm,
                 "executor_rss": workers if executor == "spark" else None,
                 "load_before": load_before, "load_after": load_after}


def store_table(store: str, flags: str, executor: str = "spark") -> dict[str, Any]:
    """In this (fresh) process: the table of every object of the run in ``store`` (opened
    read-only) over ``raw``, the Zarr array ``flags`` as flags and ``raw`` as values, by
    ``executor``; its wall time, the driver's peak RSS (this process's, plus the driver JVM's,
    where local-mode executors also live) and Spark's Python workers' peak, and the table's sums."""
    import zarr

    import subzero as sz
    from subzero_bench.scale import sampled_session

    sampler, spark = sampled_session(executor)
    run = sz.open_run(store)
    hits = zarr.open_array(flags, mode="r")
    phases: list[float] = []

    class _Geometry(logging.Handler):  # the table logs its geometry pass's seconds
        def emit(self, record: logging.LogRecord) -> None:
            if "geometry of" in record.getMessage():
                phases.append(float(record.args[-1]))  # type: ignore[index]

    logger = logging.getLogger("subzero.stats.table")
    logger.setLevel(logging.INFO)
    logger.addHandler(_Geometry())
    table, measured = _measured(lambda: run.lineage_table("stars", over="raw", flags=hits, values="raw",
                                                          executor=executor), sampler, spark, executor)
    mismatches = _check_sample(run, table, hits)
    shape = tuple(run.shape("stars"))
    return {"store": str(store), "flags": str(flags), "executor": executor, "cells": int(np.prod(shape)),
            "side": int(shape[0]), "objects": len(table), "batches": table.meta["batches"],
            "geometry_seconds": phases[0] if phases else None,
            "lineage_cells_total": int(np.asarray(table["n_lineage"]).sum()),
            "objects_flagged": int((np.asarray(table["n_flagged"]) > 0).sum()),
            "sample": min(SAMPLE, len(table)), "sample_mismatches": mismatches,
            "values_sum": float(np.nansum(np.asarray(table["values_sum"]))), **measured}


def store_count(store: str, flags: str, executor: str = "spark") -> dict[str, Any]:
    """In this (fresh) process: `contamination_count` of the Zarr array ``flags`` (the hits of
    ``raw``) in ``stars`` of the run in ``store`` (opened read-only), by ``executor``, written
    chunk by chunk into a Zarr array under a temporary directory (removed after); its wall
    time, the driver's peak RSS (Python plus the driver JVM) and Spark's Python workers' peak,
    the count's sums and a sample of counted cells checked against one backward query each.
    The union forward query of the same flags is not run: its answer is a dense mask of
    ``stars`` (1 GB of bools at 1e9 cells), more than the driver's whole budget."""
    import shutil
    import tempfile

    import zarr

    import subzero as sz
    from subzero_bench.scale import sampled_session

    sampler, spark = sampled_session(executor)
    run = sz.open_run(store)
    hits = zarr.open_array(flags, mode="r")
    where = Path(tempfile.mkdtemp(prefix="subzero-count-"))
    try:
        counts, measured = _measured(lambda: run.contamination_count("raw", hits, "stars", out=str(where / "counts.zarr"),
                                                                     executor=executor), sampler, spark, executor)
        counted = total = biggest = 0
        sample: list[tuple[int, ...]] = []
        shape, chunks = tuple(counts.shape), tuple(counts.chunks)
        rng = np.random.default_rng(0)
        for r in range(0, shape[0], chunks[0]):  # one chunk at a time: never the whole array here
            for c in range(0, shape[1], chunks[1]):
                block = np.asarray(counts[r:r + chunks[0], c:c + chunks[1]])
                nonzero = np.argwhere(block > 0)
                counted, total = counted + len(nonzero), total + int(block.sum())
                biggest = max(biggest, int(block.max()))
                if len(nonzero):
                    sample.append(tuple(int(v) for v in nonzero[rng.integers(len(nonzero))] + (r, c)))
        picks = [sample[k] for k in np.linspace(0, len(sample) - 1, min(COUNT_SAMPLE, len(sample))).astype(int)]
        mismatches = 0
        for cell in picks:
            got = np.asarray(run.backward("stars", [cell], to="raw"), np.int64).reshape(-1, 2)
            from subzero.stats.chunks import gather

            flagged = int((gather(hits, np.ravel_multi_index(tuple(got.T), tuple(hits.shape))) != 0).sum())
            mismatches += int(flagged != int(counts[cell]))
    finally:
        shutil.rmtree(where, ignore_errors=True)
    return {"store": str(store), "flags": str(flags), "executor": executor, "cells": int(np.prod(shape)),
            "side": int(shape[0]), "contaminated_cells": counted, "count_total": total,
            "count_max": biggest, "sample": len(picks), "sample_mismatches": mismatches, **measured}


def _check_sample(run, table, hits) -> int:
    """Rows of `SAMPLE` objects spread over ``table`` against one backward query per object
    (its cells read from its bounding box; the answer's flags and values read where it lies):
    the rows that differ."""
    from subzero.stats.chunks import gather

    labels, raw = run.output("stars"), run.output("raw")
    shape = tuple(run.shape("raw"))
    bad = 0
    for k in np.linspace(0, len(table) - 1, min(SAMPLE, len(table))).astype(int).tolist():
        row = table[k]
        r0, r1, c0, c1 = (int(row[c]) for c in ("bbox_r0", "bbox_r1", "bbox_c0", "bbox_c1"))
        cells = np.argwhere(np.asarray(labels[r0:r1, c0:c1]) == row["label"]) + (r0, c0)
        got = np.asarray(run.backward("stars", cells, to="raw"), np.int64).reshape(-1, 2)
        ids = np.ravel_multi_index(tuple(got.T), shape)
        flagged = int((gather(hits, ids) != 0).sum())
        total = float(gather(raw, ids).astype(np.float64).sum())
        bad += int(len(got) != row["n_lineage"] or flagged != row["n_flagged"]
                   or not np.isclose(total, row["values_sum"], rtol=1e-9))
    return bad


def _store_run(store: str, flags: str, executor: str, log: Callable[[str], None],
               what: str = "table") -> dict[str, Any]:
    """`store_table` (``what="table"``) or `store_count` (``"count"``) in a fresh process with a
    1 GB driver (``SUBZERO_DRIVER_MEMORY=1g``)."""
    env = dict(os.environ, SUBZERO_DRIVER_MEMORY="1g", PYTHONPATH=child_pythonpath(os.environ.get("PYTHONPATH")))
    cmd = [sys.executable, "-m", "subzero_bench.stats", store, flags, executor, what]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=4 * 3600)
    if done.returncode != 0:
        raise RuntimeError(f"stats on {store} failed: {done.stderr.strip().splitlines()[-1:] or done.returncode}")
    got = json.loads(done.stdout.strip().splitlines()[-1])
    if what == "count":
        log(f"stats: {store}: contamination count of {got['contaminated_cells']:,} cells in {got['seconds']:.1f} s "
            f"on {executor}, driver peak {got['driver_rss'] / 1e9:.2f} GB (load {got['load_before']})")
        return got
    log(f"stats: {store}: {got['objects']:,} objects, {got['lineage_cells_total']:,} (object, cell) pairs; table "
        f"{got['seconds']:.1f} s on {executor}, driver peak {got['driver_rss'] / 1e9:.2f} GB "
        f"(load {got['load_before']})")
    return got


def run_stats(quick: bool, root: Path, side: int | None = None, log: Callable[[str], None] = print,
              spark: bool = True, **_ignored) -> dict[str, Any]:
    """Run the workflow, then time the table, the per-object baseline, the count and the forward
    query; with ``SUBZERO_STATS_STORE`` set, the table of that store instead (`store_table`)."""
    if os.environ.get("SUBZERO_STATS_STORE"):
        store, flags = os.environ["SUBZERO_STATS_STORE"], os.environ.get("SUBZERO_STATS_FLAGS", "")
        if not flags:
            raise ValueError("SUBZERO_STATS_STORE needs SUBZERO_STATS_FLAGS: the path of its sky's hits Zarr array")
        executor = os.environ.get("SUBZERO_STATS_EXECUTOR", "spark")
        which = [w.strip() for w in os.environ.get("SUBZERO_STATS_WHAT", "table,count").split(",") if w.strip()]
        if not which or set(which) - {"table", "count"}:
            raise ValueError(f"SUBZERO_STATS_WHAT={os.environ.get('SUBZERO_STATS_WHAT')!r}: give table, count or both "
                             "(comma-separated)")
        raw: dict[str, Any] = {}
        figures: dict[str, Any] = {}
        for what in which:  # each in a fresh process of its own: its own driver peak
            got = _store_run(store, flags, executor, log, what)
            raw[f"store_{what}"] = got
            figures[f"store_{what}"] = figure(
                "s", None, {"labelled pass" if what == "table" else "count written chunk by chunk":
                            {str(got["cells"]): got["seconds"]}},
                "lineage table of every object of a built store" if what == "table" else
                "contamination count of the hits in the label array of a built store, into a Zarr array")
        return {"setup": {"workflow": "raw -> bias -> mesh 16x16 mean -> upsample -> subtract -> Gaussian (sigma 1, "
                                      "truncate 2) -> threshold -> Label (CompOne)", "store": store,
                          "executor": executor, "driver_memory": "1g"},
                "figures": figures, "raw": raw}
    side = side or (QUICK_SIDE if quick else SIDE)
    raw, hits = sky(side)
    t0 = time.perf_counter()
    run = run_workflow(raw, root / f"stats-{side}")
    run_seconds = time.perf_counter() - t0
    labels = np.asarray(run.output("stars"))
    ids = np.unique(labels[labels > 0])
    log(f"stats: {side}x{side} run in {run_seconds:.1f} s, {len(ids)} objects, {int(hits.sum())} flagged pixels "
        f"(load {load_average()})")
    load_before = load_average()
    calls: list[float] = []
    for _ in range(2):  # the first call also imports astropy and opens the store's shards
        t0 = time.perf_counter()
        table = run.lineage_table("stars", over="raw", flags=hits, values="raw")
        calls.append(time.perf_counter() - t0)
    cold_seconds, table_seconds = calls[0], min(calls)
    log(f"stats: table of {len(table)} objects in {table_seconds:.2f} s (first call {cold_seconds:.2f} s)")
    table_peak = _peak_bytes(lambda: run.lineage_table("stars", over="raw", flags=hits, values="raw"))
    batch = BATCH_OBJECTS
    t0 = time.perf_counter()
    whole = run.lineage_table("stars", over="raw", flags=hits, values="raw", batch_objects=None)
    whole_seconds = time.perf_counter() - t0
    whole_peak = _peak_bytes(lambda: run.lineage_table("stars", over="raw", flags=hits, values="raw",
                                                       batch_objects=None))
    whole_same = all(np.array_equal(table[c], whole[c], equal_nan=True) for c in table.colnames)
    log(f"stats: peak memory {table_peak / 1e6:.0f} MB (batches of {batch}); one pass {whole_seconds:.2f} s, "
        f"peak {whole_peak / 1e6:.0f} MB, same table: {whole_same}")
    spark_seconds, spark_same = None, None
    if spark:
        from subzero.executors.spark import get_session

        get_session()  # the JVM starts before the clock does
        run.lineage_table("stars", over="raw", batch_objects=batch, executor="spark")  # workers warm
        t0 = time.perf_counter()
        on_spark = run.lineage_table("stars", over="raw", flags=hits, values="raw", batch_objects=batch,
                                     executor="spark")
        spark_seconds = time.perf_counter() - t0
        spark_same = all(np.array_equal(table[c], on_spark[c], equal_nan=True) for c in table.colnames)
        log(f"stats: on Spark's executors, batches of {batch}: {spark_seconds:.2f} s, same table: {spark_same}")
    # baseline: one backward query per object, on a sample, checked against the table
    rng = np.random.default_rng(0)
    sample = rng.choice(len(ids), size=min(SAMPLE, len(ids)), replace=False)
    coords = np.argwhere(labels > 0)
    flat_labels = labels[tuple(coords.T)]
    order = np.argsort(flat_labels, kind="stable")
    starts = np.searchsorted(flat_labels[order], ids)
    ends = np.searchsorted(flat_labels[order], ids, "right")
    mismatches = 0
    t0 = time.perf_counter()
    for k in sample.tolist():
        cells = coords[order[starts[k]:ends[k]]]
        mask = run.backward_mask("stars", cells, to="raw")
        mismatches += int(mask.sum() != table["n_lineage"][k] or (mask & hits).sum() != table["n_flagged"][k])
    per_object = (time.perf_counter() - t0) / len(sample)
    log(f"stats: per-object queries {per_object * 1e3:.1f} ms each ({per_object * len(ids):.1f} s for all), "
        f"{mismatches} mismatches")
    # contamination: labelled forward count vs the union forward query
    t0 = time.perf_counter()
    counts = run.forward_mask("raw", hits, to="stars")
    forward_seconds = time.perf_counter() - t0
    from subzero.stats import contamination_count

    t0 = time.perf_counter()
    count = contamination_count(run, "raw", hits, "stars")
    count_seconds = time.perf_counter() - t0
    count_peak = _peak_bytes(lambda: contamination_count(run, "raw", hits, "stars"))
    agree = bool(np.array_equal(count > 0, counts))
    touched = np.argwhere(count > 0)
    pick = touched[rng.choice(len(touched), size=min(SAMPLE, len(touched)), replace=False)] if len(touched) else touched
    count_mismatches = 0
    for cell in pick:
        b = run.backward_mask("stars", [tuple(cell)], to="raw")
        count_mismatches += int((b & hits).sum() != count[tuple(cell)])
    log(f"stats: count in {count_seconds:.2f} s vs forward query {forward_seconds:.2f} s "
        f"({count_seconds / forward_seconds:.2f}x); mask agrees: {agree}; {count_mismatches} count mismatches")
    load_after = load_average()
    n_cells = side * side
    raw_doc: dict[str, Any]
    raw_doc = {"side": side, "cells": n_cells, "objects": int(len(ids)), "flagged": int(hits.sum()),
               "run_seconds": run_seconds, "table_seconds": table_seconds, "table_first_call_seconds": cold_seconds,
               "per_object_seconds": per_object,
               "per_object_all_seconds": per_object * len(ids), "sample": int(len(sample)),
               "table_mismatches": mismatches, "forward_seconds": forward_seconds, "count_seconds": count_seconds,
               "count_mask_agrees": agree, "count_mismatches": count_mismatches, "count_max": int(count.max()),
               "contaminated_cells": int((count > 0).sum()),
               "objects_flagged": int((np.asarray(table["n_flagged"]) > 0).sum()),
            "sample": min(SAMPLE, len(table)), "sample_mismatches": mismatches,
               "lineage_cells_total": int(np.asarray(table["n_lineage"]).sum()),
               "table_peak_bytes": table_peak, "batch_objects": batch, "one_pass_seconds": whole_seconds,
               "one_pass_peak_bytes": whole_peak, "one_pass_same": whole_same, "count_peak_bytes": count_peak,
               "spark_seconds": spark_seconds, "spark_same": spark_same,
               "array_bytes": n_cells * 4,
               "load_before": list(load_before), "load_after": list(load_after)}
    key = str(n_cells)
    scaling = [_scaling_row(root, big, log) for big in (SCALING_SIDES if not quick and side == SIDE else ())]
    if scaling:
        raw_doc["scaling"] = scaling
    return {
        "setup": {"workflow": "raw -> bias -> mesh 16x16 mean -> upsample -> subtract -> Gaussian (sigma 1, "
                              "truncate 2) -> threshold -> Label (CompOne)", "side": side, "executor": "local",
                  "tile": 1000, "sample": SAMPLE},
        "figures": {
            "table": figure("s", None, {"labelled pass": {key: table_seconds},
                                        "one query per object": {key: per_object * len(ids)}},
                            "lineage table of every object (extrapolated from a sample for the baseline)"),
            "count": figure("s", "forward query", {"forward query": {key: forward_seconds},
                                                   "count": {key: count_seconds}},
                            "contamination count vs the union forward query of the same flags"),
        },
        "raw": raw_doc,
    }


if __name__ == "__main__":  # one store's table or count: python -m subzero_bench.stats STORE FLAGS EXECUTOR [table|count]
    which = sys.argv[4] if len(sys.argv) > 4 else "table"
    print(json.dumps((store_count if which == "count" else store_table)(sys.argv[1], sys.argv[2], sys.argv[3])))

"""The astronomy benchmark (SubZero VIII-A, Fig. 5): the LSST-style workflow under the
strategies of Table II plus the cell-level baseline, five backward queries and one
forward query (with and without the entire-array optimization); then the same
configurations on real data (astroscrappy's GMOS frame), and the perturbation oracle on
both workflows.

Every configuration runs the workflow once on Spark; disk is the lineage it stored
relative to the input arrays, runtime its wall time relative to NoLineage (every node
BlackBox, nothing stored).  Queries run in the driver, each configuration forcing its
stored strategies (BlackBox forces re-execution everywhere); every configuration must
return the same cells for each query.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from subzero_bench.cellpairs import MAX_PAIRS, CellPairs, estimate_cellpairs, write_cellpairs
from subzero_bench.configs import USE_OPTIMIZER, configuration, operator_nodes, static_using
from subzero_bench.harness import Harness, QuerySpec, RunRecord, check_same_cells, overhead_ratios
from subzero_bench.realdata import oracle_section, run_section, sample_cells
from subzero_bench.results import figure
from subzero_bench.timing import best_of, dir_bytes, timed
from subzero.cells import box_cells
from subzero.oracle import check_workflow
from subzero.run import Run
from subzero.workflows import astronomy as workflow

__all__ = ["run_astronomy", "run_gmos", "synthetic_oracle", "CONFIGS", "QUERY_CONFIGS"]

#: configurations that run the workflow (Table II, plus NoLineage as the time base)
CONFIGS = ("NoLineage", "BlackBox", "BlackBoxOpt", "FullOne", "FullMany", "SubZero")
#: configurations whose queries are timed (CellPairs answers from its Parquet files)
QUERY_CONFIGS = ("BlackBox", "BlackBoxOpt", "FullOne", "FullMany", "SubZero", "CellPairs")
#: the paper's plan: composite A-C, payload D.  D is now composite too (a pixel below the
#: threshold depends on itself: PayOne would store an entry per background pixel)
PAPER_PLAN = {"crmask_1": "CompOne", "crmask_2": "CompOne", "clean": "CompOne", "stars": "CompOne"}
DISK_BUDGET, RUNTIME_BUDGET = "3x", "2x"
#: A and B depend on a radius-8 window per pixel (289 cells): as region pairs that is 289
#: cell ids per pixel, about 1.2 GB per exposure at 512 x 2000, so the Full configurations
#: store their composite lineage instead (the same cells, from the window)
FULL_INSTEAD = {u: {"FullOne": "CompOne", "FullMany": "CompMany"} for u in ("crmask_1", "crmask_2")}


def pins(wf, config: str, use_optimizer: bool = USE_OPTIMIZER) -> dict[str, list[str]] | None:
    """The strategies a configuration pins (None: the optimizer chooses)."""
    udfs = list(workflow.UDFS)
    if config in ("NoLineage", "BlackBox"):
        return configuration(wf, {u: "BlackBox" for u in udfs}, builtin="BlackBox")
    if config == "BlackBoxOpt":
        return configuration(wf, {u: "BlackBox" for u in udfs})
    if config in ("FullOne", "FullMany"):
        return configuration(wf, {u: FULL_INSTEAD.get(u, {}).get(config, config) for u in udfs})
    if config == "SubZero":
        return None if use_optimizer else configuration(wf, PAPER_PLAN)
    if config == "SubZeroPaper":
        return configuration(wf, PAPER_PLAN)
    raise ValueError(f"unknown astronomy configuration {config!r}")


def _box(center, half: int, shape) -> np.ndarray:
    lo = [int(np.clip(c - half, 0, n - 1)) for c, n in zip(center, shape)]
    hi = [int(np.clip(c + half, 1, n)) for c, n in zip(center, shape)]
    return box_cells(tuple(lo), tuple(hi))


def queries(run: Run, quick: bool) -> list[QuerySpec]:
    """BQ0-BQ4, FQ0 and FQ0Slow, placed on features of the run's outputs."""
    half = 8 if quick else 16
    stars = np.asarray(run.output("stars"))
    ids, areas = np.unique(stars[stars > 0], return_counts=True)   # canonical labels, not 1..n
    label = int(ids[np.argmin(np.abs(areas - np.percentile(areas, 90)))])
    star = np.argwhere(stars == label)
    center = np.round(star.mean(axis=0)).astype(int)
    repaired = np.abs(np.asarray(run.output("clean"), float) - np.asarray(run.output("merged"), float))
    fix = np.unravel_index(int(np.argmax(repaired)), repaired.shape)
    crs = np.argwhere(np.asarray(run.output("crmask_1")) > 0)
    ray = crs[np.argmin(np.abs(crs - np.asarray(stars.shape) // 2).sum(axis=1))]
    shape = stars.shape
    flat = _box(np.asarray(shape) // 2, 2, shape)
    return [
        QuerySpec("BQ0", "backward", "stars", "exposure_1", star,
                  description=f"star {label} ({len(star)} pixels) back to exposure 1"),
        QuerySpec("BQ1", "backward", "stars", "clean", _box(center, half, shape),
                  description="output region around the star back to the repaired image (D, smoothing)"),
        QuerySpec("BQ2", "backward", "clean", "elec_2", _box(fix, half, shape),
                  description="repaired region back to calibrated exposure 2 (C, merge, B)"),
        QuerySpec("BQ3", "backward", "crmask_1", "exposure_1", _box(ray, half, shape),
                  description="cosmic-ray mask region back to exposure 1 (A, calibration)"),
        QuerySpec("BQ4", "backward", "snr", "exposure_2", _box(center, half, shape),
                  description="signal-to-noise region back to exposure 2 (the whole pipeline but D)"),
        QuerySpec("FQ0", "forward", "flat", "snr", flat,
                  description=f"{len(flat)} flat-field pixels forward through its global mean to the S/N image"),
        QuerySpec("FQ0Slow", "forward", "flat", "snr", flat, entire_array=False,
                  description="FQ0 without the entire-array optimization"),
    ]


def run_astronomy(quick: bool, root: Path, executor: str = "spark", spark=None,
                  shape: tuple[int, int] | None = None, log=print,
                  use_optimizer: bool = USE_OPTIMIZER) -> dict[str, Any]:
    """Run the benchmark; return the results document's ``setup``, ``figures``, ``raw``.

    With ``use_optimizer``, "SubZero" is the optimizer's plan for the workload of these
    queries (and "SubZeroPaper" the paper's plan, pinned); else "SubZero" is the paper's plan.
    """
    wf, inputs = workflow.build(quick=quick, shape=shape)
    configs = CONFIGS + (("SubZeroPaper",) if use_optimizer else ())
    harness = Harness(wf, inputs, root, executor=executor, spark=spark)
    harness.warm_up(pins(wf, "NoLineage"))
    runs: dict[str, RunRecord] = {}
    specs: list[QuerySpec] = []
    for config in configs:
        strategies = pins(wf, config, use_optimizer)
        extra = {}
        if strategies is None:
            extra = {"workload": [s.workload_entry() for s in specs if s.entire_array],
                     "max_disk": DISK_BUDGET, "max_runtime": RUNTIME_BUDGET}
        runs[config] = harness.execute(config, strategies, repeat=2, **extra)
        log(f"astronomy {config}: {runs[config].wall_seconds:.1f} s, "
            f"{runs[config].lineage_bytes / 1e6:.2f} MB of lineage")
        if config == "NoLineage":
            specs = queries(runs[config].run, quick)
    cell_root = root / "cellpairs"
    estimate = estimate_cellpairs(runs["NoLineage"].run)
    if estimate <= (MAX_PAIRS // 10 if quick else MAX_PAIRS):
        rows, capture = timed(lambda: write_cellpairs(runs["NoLineage"].run, cell_root))
        cellpairs = CellPairs(runs["NoLineage"].run, cell_root)
        log(f"astronomy CellPairs: {sum(rows.values()) / 1e6:.1f} M cell pairs in {capture:.1f} s")
    else:  # exact lineage of a radius-8 stencil is 289 pairs per pixel: too many to write
        rows, capture, cellpairs = {}, None, None
        log(f"astronomy CellPairs: skipped, about {estimate / 1e6:.0f} M cell pairs")

    seconds: dict[str, dict[str, float]] = {}
    counts: dict[str, int] = {}
    for spec in specs:
        answers, seconds[spec.name] = {}, {}
        for config in QUERY_CONFIGS + configs[len(CONFIGS):]:
            if config == "CellPairs" and cellpairs is None:
                continue
            if config == "CellPairs":
                fn = cellpairs.backward if spec.direction == "backward" else cellpairs.forward
                cells, t = best_of(lambda: fn(spec.node, spec.cells, spec.to))
            else:
                record = runs[config]
                using = ({n: "BlackBox" for n in operator_nodes(wf)} if config == "BlackBox"
                         else static_using(record.strategies, spec.direction))
                rec = harness.query(record, spec, using)
                cells, t = rec.cells, rec.seconds
            answers[config], seconds[spec.name][config] = cells, t
        check_same_cells(f"astronomy {spec.name}", answers)
        counts[spec.name] = len(answers["BlackBox"])
        log(f"astronomy {spec.name}: {counts[spec.name]} cells; " +
            ", ".join(f"{c} {t:.3f} s" for c, t in seconds[spec.name].items()))
    doc = _document(harness, runs, specs, seconds, counts, capture, rows,
                    dir_bytes(cell_root) if cellpairs is not None else None, quick, use_optimizer)
    doc["raw"]["cellpairs"]["estimate"] = estimate
    doc["oracle"] = synthetic_oracle(root / "oracle", quick, log)
    doc["real"] = run_gmos(root / "gmos", quick, executor, spark, log, use_optimizer)
    return doc


# -- the oracle on the synthetic workflow ----------------------------------------------------------
def synthetic_oracle(root: Path, quick: bool, log=print) -> dict[str, Any]:
    """The perturbation oracle over the synthetic workflow at the quick size (128 x 512: the
    oracle re-runs the workflow below a perturbed pixel six times per pixel), the paper's
    plan stored, run locally with 64 x 64 tiles."""
    wf, inputs = workflow.build(quick=True)
    run = wf.run(inputs, store=root / "run", strategies=configuration(wf, PAPER_PLAN), executor="local",
                 tile_shape=64)
    n = 16 if quick else 48
    cells = {"exposure_1": sample_cells(inputs["exposure_1"].shape, n, seed=1),
             "flat": sample_cells(inputs["flat"].shape, n // 4, seed=2)}
    report, spent = timed(lambda: check_workflow(run, wf, inputs, sources=list(cells), cells=cells,
                                                 targets=["crmask_1", "clean", "snr", "stars"], backward=16))
    log(f"astronomy oracle (synthetic, {inputs['flat'].shape[0]} x {inputs['flat'].shape[1]}): "
        f"{report.missed} missed pairs over {report.cells} cells ({spent:.0f} s)")
    return oracle_section(report, spent, f"the paper's plan, {inputs['flat'].shape[0]} x {inputs['flat'].shape[1]} "
                                         "inputs, run locally")


# -- real data: astroscrappy's GMOS frame ----------------------------------------------------------
#: the value-dependent nodes of the GMOS workflow, configured as UDFs are (Table II)
GMOS_CONFIGURED = ("crmask", "crd", "clean", "stars", "labels")
GMOS_PAPER_PLAN = {n: "CompOne" for n in GMOS_CONFIGURED}
#: the pixels of the issue that found the old lineage unsound (sep's ids, L.A.Cosmic's radius)
GMOS_WITNESSES = ((0, 140), (36, 141), (40, 144))


def gmos_pins(wf, config: str, use_optimizer: bool = USE_OPTIMIZER) -> dict[str, list[str]] | None:
    """The strategies a configuration pins on the GMOS workflow (None: the optimizer chooses)."""
    nodes = list(GMOS_CONFIGURED)
    if config in ("NoLineage", "BlackBox"):
        return configuration(wf, {u: "BlackBox" for u in nodes}, builtin="BlackBox")
    if config == "BlackBoxOpt":
        return configuration(wf, {u: "BlackBox" for u in nodes})
    if config in ("FullOne", "FullMany"):
        return configuration(wf, {u: config for u in nodes})
    if config == "SubZero":
        return None if use_optimizer else configuration(wf, GMOS_PAPER_PLAN)
    if config == "SubZeroPaper":
        return configuration(wf, GMOS_PAPER_PLAN)
    raise ValueError(f"unknown astronomy configuration {config!r}")


def gmos_queries(run: Run) -> list[QuerySpec]:
    """Backward from a star, a repaired region, a cosmic-ray region and a bright component;
    forward from cosmic-ray pixels and from the sky model."""
    stars = np.asarray(run.output("stars"))
    ids, areas = np.unique(stars[stars > 0], return_counts=True)
    label = int(ids[np.argmax(areas)])
    star = np.argwhere(stars == label)
    repaired = np.abs(np.asarray(run.output("clean"), float) - np.asarray(run.output("resid"), float))
    fix = np.unravel_index(int(np.argmax(repaired)), repaired.shape)
    rays = np.argwhere(np.asarray(run.output("crmask")) > 0)
    labels = np.asarray(run.output("labels"))
    lids, lareas = np.unique(labels[labels > 0], return_counts=True)
    component = np.argwhere(labels == lids[np.argmax(lareas)])
    shape = stars.shape
    return [
        QuerySpec("BQ0", "backward", "stars", "sci", star, description=f"the largest source ({len(star)} pixels) "
                  "back to the frame"),
        QuerySpec("BQ1", "backward", "clean", "sci", _box(fix, 8, shape),
                  description="the region around the largest repair back to the frame (C, CRD, A)"),
        QuerySpec("BQ2", "backward", "crmask", "var", _box(rays[0], 8, shape),
                  description="a cosmic-ray region of the mask back to the variance (A)"),
        QuerySpec("BQ3", "backward", "labels", "sky", component,
                  description=f"the largest bright component ({len(component)} pixels) back to the sky model"),
        QuerySpec("FQ0", "forward", "sci", "stars", rays[:8], description="8 cosmic-ray pixels forward to the sources"),
        QuerySpec("FQ1", "forward", "sky", "spectrum", _box(np.asarray(shape) // 2, 2, shape),
                  description="16 sky-model pixels forward to the spectrum"),
    ]


def run_gmos(root: Path, quick: bool, executor: str = "spark", spark=None, log=print,
             use_optimizer: bool = USE_OPTIMIZER) -> dict[str, Any]:
    """The astronomy benchmark on astroscrappy's GMOS frame (SCI, SKYFIT and VAR; the gain
    from the header), 64 x 64 tiles, and the perturbation oracle on the SubZero run."""
    wf, inputs = workflow.build_gmos()
    configs = CONFIGS + (("SubZeroPaper",) if use_optimizer else ())
    shape = inputs["sci"].shape
    n = 24 if quick else 200
    cells = {"sci": sample_cells(shape, n, seed=3, extra=GMOS_WITNESSES),
             "sky": sample_cells(shape, n // 5, seed=4), "var": sample_cells(shape, n // 5, seed=5)}
    return run_section(
        "gmos", wf, inputs, root, configs=configs, pins=lambda c: gmos_pins(wf, c, use_optimizer),
        queries=lambda record: gmos_queries(record.run),
        optimizer={"max_disk": DISK_BUDGET, "max_runtime": RUNTIME_BUDGET}, repeat=1 if quick else 2,
        executor=executor, spark=spark, tile_shape=64, log=log, oracle_config="SubZero",
        oracle={"sources": list(cells), "cells": cells, "backward": 16 if quick else 48,
                "targets": ["crmask", "crd", "clean", "stars", "labels", "spectrum"]},
        description=("astroscrappy's GMOS-S long-slit cutout (150 x 200: SCI, SKYFIT and VAR, electrons; gain "
                     "from the header), 17 operators: L.A.Cosmic with the sky and variance, CRD, a per-column "
                     "mean background, the repair, smoothing, sep sources, Label, a profile and a spectrum"))


def _document(harness, runs, specs, seconds, counts, capture, rows, cell_bytes, quick,
              use_optimizer) -> dict[str, Any]:
    base = runs["NoLineage"]
    input_bytes = harness.input_bytes
    disk, runtime = overhead_ratios(runs, base, input_bytes, cell_bytes, capture)
    store = {c: r.store_bytes / base.store_bytes for c, r in runs.items()}
    if cell_bytes is not None:
        store["CellPairs"] = (base.store_bytes + cell_bytes) / base.store_bytes
    speedup = {q: {c: seconds[q]["BlackBox"] / max(t, 1e-9) for c, t in seconds[q].items()} for q in seconds}
    backward = [s.name for s in specs if s.direction == "backward"]
    queried = list(seconds[specs[0].name])
    mean_speedup = {c: float(np.mean([speedup[q][c] for q in backward])) for c in queried}
    entire = {c: seconds["FQ0Slow"][c] / max(seconds["FQ0"][c], 1e-9) for c in queried}
    shape = list(np.asarray(harness.inputs["exposure_1"]).shape)
    setup = {"shape": shape, "inputs": {k: list(v.shape) for k, v in harness.inputs.items()},
             "input_bytes": input_bytes, "nodes": len(operator_nodes(harness.wf)),
             "udfs": workflow.UDFS, "executor": harness.executor, "quick": quick,
             "subzero_plan": ("the optimizer's plan (SubZeroPaper: the paper's plan pinned)" if use_optimizer
                              else "the paper's plan pinned (optimizer switch off)"),
             "subzero_strategies": {u: list(runs["SubZero"].strategies[u]) for u in workflow.UDFS},
             "queries": {s.name: s.summary() | {"result_cells": counts[s.name]} for s in specs}}
    figures = {
        "disk": figure("x input bytes", "input arrays", disk,
                       "lineage bytes stored (LMDB entries + R-tree files; CellPairs: Parquet files)"),
        "store": figure("x NoLineage store", "NoLineage", store,
                        "whole store (arrays + lineage + catalog) relative to the NoLineage store"),
        "runtime": figure("x NoLineage wall time", "NoLineage", runtime,
                          "wall time of the workflow run (CellPairs: NoLineage run + capturing every cell pair)"),
        "arrays": figure("x input bytes", "input arrays", base.array_bytes / input_bytes,
                         "every stored array (inputs, intermediates, outputs) relative to the inputs"),
        "query_seconds": figure("s", None, seconds, "query time per configuration (best of up to 3)"),
        "query_speedup": figure("x", "BlackBox", speedup, "BlackBox seconds / configuration seconds"),
        "mean_backward_speedup": figure("x", "BlackBox", mean_speedup,
                                        "mean over BQ0-BQ4 of BlackBox seconds / configuration seconds"),
        "entire_array_speedup": figure("x", "FQ0 (with the optimization)", entire,
                                       "FQ0Slow seconds / FQ0 seconds per configuration"),
    }
    raw = {"runs": {c: r.summary() for c, r in runs.items()},
           "cellpairs": {"capture_seconds": capture, "rows": rows, "bytes": cell_bytes},
           "base_wall_seconds": base.wall_seconds}
    return {"setup": setup, "figures": figures, "raw": raw}

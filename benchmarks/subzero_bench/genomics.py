"""The genomics benchmark (SubZero VIII-B, Figs. 6-7): the relapse-prediction workflow under
the UDF strategies of Table II plus the cell-level baseline; four queries run *static*
(every node's strategy forced with ``using``) and *dynamic* (the run picks per step);
then, with the optimizer switched on, a sweep of disk budgets (Fig. 7).

Runtime is relative to the BlackBox run (UDFs black-box, built-ins mapping: nothing
stored); disk is the lineage stored relative to the input matrices.  Then the same
configurations on real data (GSE7390, scikit-survival), and the perturbation oracle on both
workflows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from subzero_bench.cellpairs import CellPairs, write_cellpairs
from subzero_bench.configs import USE_OPTIMIZER, configuration, static_using
from subzero_bench.harness import Harness, QuerySpec, RunRecord, check_same_cells, overhead_ratios
from subzero_bench.realdata import oracle_section, run_section, sample_cells
from subzero_bench.results import figure
from subzero_bench.timing import best_of, dir_bytes, timed
from subzero.oracle import check_workflow
from subzero.workflows import genomics as workflow

__all__ = ["run_genomics", "run_gse7390", "synthetic_oracle", "CONFIGS", "BUDGETS_MB"]

#: Table II (genomics): what every UDF stores; built-ins store mapping lineage
CONFIGS: dict[str, list[str]] = {
    "BlackBox": ["BlackBox"],
    "FullOne": ["FullOne"],
    "FullMany": ["FullMany"],
    "FullForw": ["FullOne/forward"],
    "FullBoth": ["FullOne/forward", "FullOne"],
    "PayOne": ["PayOne"],
    "PayMany": ["PayMany"],
    "PayBoth": ["PayOne", "FullOne/forward"],
}
BUDGETS_MB = (1, 5, 10, 20, 50, 100)


def queries(inputs: dict[str, np.ndarray], wf) -> list[QuerySpec]:
    """The four queries of section II-B, on a complete training patient and feature."""
    complete = np.flatnonzero(~np.isnan(inputs["train"]).any(axis=1))
    patient = int(complete[0])
    values = np.array([(patient, c) for c in range(2, 7)])
    levels = wf.node("model").operator.levels
    feature = np.array([(2, v) for v in range(levels)])
    return [
        QuerySpec("BQ0", "backward", "relapse", "train", np.array([[0]]),
                  description="a relapse prediction back to the training matrix"),
        QuerySpec("BQ1", "backward", "model", "train", feature,
                  description="a model feature (every value of expression gene 1) back to the training matrix"),
        QuerySpec("FQ0", "forward", "train", "model", values,
                  description=f"{len(values)} training values of patient {patient} forward to the model"),
        QuerySpec("FQ1", "forward", "train", "relapse", values,
                  description="the same training values forward to the predictions"),
    ]


def run_genomics(quick: bool, root: Path, executor: str = "spark", spark=None,
                 scale: int | None = None, log=print, use_optimizer: bool = USE_OPTIMIZER) -> dict[str, Any]:
    """Run the benchmark; return the results document's ``setup``, ``figures``, ``raw``."""
    wf, inputs = workflow.build(quick=quick, scale=scale)
    harness = Harness(wf, inputs, root, executor=executor, spark=spark)
    pins = {c: configuration(wf, {u: s for u in workflow.UDFS}) for c, s in CONFIGS.items()}
    harness.warm_up(pins["BlackBox"])
    runs: dict[str, RunRecord] = {}
    for config, strategies in pins.items():
        runs[config] = harness.execute(config, strategies, repeat=2)
        log(f"genomics {config}: {runs[config].wall_seconds:.1f} s, {runs[config].lineage_bytes / 1e6:.2f} MB")
    cell_root = root / "cellpairs"
    rows, capture = timed(lambda: write_cellpairs(runs["BlackBox"].run, cell_root))
    cellpairs = CellPairs(runs["BlackBox"].run, cell_root)
    specs = queries(inputs, wf)

    static: dict[str, dict[str, float]] = {s.name: {} for s in specs}
    dynamic: dict[str, dict[str, float]] = {s.name: {} for s in specs}
    reference: dict[str, np.ndarray] = {}
    for spec in specs:
        answers = {}
        for config, record in runs.items():
            rec = harness.query(record, spec, static_using(record.strategies, spec.direction))
            answers[f"{config} static"], static[spec.name][config] = rec.cells, rec.seconds
            rec = harness.query(record, spec, None)
            answers[f"{config} dynamic"], dynamic[spec.name][config] = rec.cells, rec.seconds
        fn = cellpairs.backward if spec.direction == "backward" else cellpairs.forward
        answers["CellPairs"], t = best_of(lambda: fn(spec.node, spec.cells, spec.to))
        static[spec.name]["CellPairs"] = dynamic[spec.name]["CellPairs"] = t
        check_same_cells(f"genomics {spec.name}", answers)
        reference[spec.name] = answers["BlackBox static"]
        log(f"genomics {spec.name}: {len(reference[spec.name])} cells; static " +
            ", ".join(f"{c} {v:.3f}" for c, v in static[spec.name].items()))
    sweep = _sweep(harness, specs, reference, log) if use_optimizer else {}
    counts = {q: len(cells) for q, cells in reference.items()}
    doc = _document(harness, runs, specs, static, dynamic, counts, sweep, capture, rows,
                    dir_bytes(cell_root), use_optimizer)
    doc["oracle"] = synthetic_oracle(root / "oracle", quick, log)
    doc["real"] = run_gse7390(root / "gse7390", quick, executor, spark, log)
    return doc


# -- the perturbation oracle on the synthetic workflow -----------------------------------------------
ORACLE_TARGETS = ["train_cases", "test_cases", "model", "score", "relapse"]


def synthetic_oracle(root: Path, quick: bool, log=print) -> dict[str, Any]:
    """The perturbation oracle over the synthetic workflow at scale 1 (96 patients), the
    UDFs' payload lineage stored (PayOne; the model is a mapping), run locally."""
    wf, inputs = workflow.build(scale=1)
    run = wf.run(inputs, store=root / "run", strategies=configuration(wf, {u: "PayOne" for u in workflow.UDFS}),
                 executor="local")
    n = 24 if quick else 96
    cells = {"train": sample_cells(inputs["train"].shape, n, seed=1), "test": sample_cells(inputs["test"].shape, n, seed=2)}
    report, spent = timed(lambda: check_workflow(run, wf, inputs, sources=list(cells), cells=cells,
                                                 targets=ORACLE_TARGETS, backward=32))
    log(f"genomics oracle (synthetic, 96 patients): {report.missed} missed pairs over {report.cells} cells "
        f"({spent:.0f} s)")
    return oracle_section(report, spent, "PayOne UDFs, 96 patients, run locally")


# -- real data: GSE7390 ---------------------------------------------------------------------------
def gse7390_queries(inputs: dict[str, np.ndarray], wf) -> list[QuerySpec]:
    """The four queries of section II-B on GSE7390, and two through the signature score."""
    train, test = inputs["train"], inputs["test"]
    patient = int(np.flatnonzero(~np.isnan(train).any(axis=1))[0])
    values = np.array([(patient, c) for c in range(5, 10)])
    positive = np.flatnonzero((test[:, workflow.ER_COLUMN] > 0) & ~np.isnan(test).any(axis=1))
    levels = wf.node("model").operator.levels
    return [
        QuerySpec("BQ0", "backward", "relapse", "train", np.array([[0]]),
                  description="a relapse prediction back to the training matrix"),
        QuerySpec("BQ1", "backward", "model", "train", np.array([(5, v) for v in range(levels)]),
                  description="a model feature (every value of the first gene) back to the training matrix"),
        QuerySpec("BQ2", "backward", "risk", "test", np.array([[0, 0]]),
                  description="the first ER-positive patient's signature score back to the test matrix"),
        QuerySpec("FQ0", "forward", "train", "model", values,
                  description=f"{len(values)} gene levels of training patient {patient} forward to the model"),
        QuerySpec("FQ1", "forward", "train", "relapse", values,
                  description="the same training values forward to the predictions"),
        QuerySpec("FQ2", "forward", "test", "risk", np.array([(int(positive[0]), c) for c in range(5, 10)]),
                  description="5 gene levels of an ER-positive test patient forward to the signature scores"),
    ]


def run_gse7390(root: Path, quick: bool, executor: str = "spark", spark=None, log=print) -> dict[str, Any]:
    """The genomics benchmark on GSE7390 (scikit-survival): Table II's configurations, the
    queries, and the perturbation oracle on the PayBoth run."""
    wf, inputs = workflow.build_gse7390()
    pins = {c: configuration(wf, {u: s for u in workflow.GSE7390_UDFS}) for c, s in CONFIGS.items()}
    n = 24 if quick else 160
    cells = {"train": sample_cells(inputs["train"].shape, n, seed=3),
             "test": sample_cells(inputs["test"].shape, n, seed=4)}
    return run_section(
        "GSE7390", wf, inputs, root, configs=list(CONFIGS), pins=lambda c: pins[c],
        queries=lambda record: gse7390_queries(inputs, wf), optimizer={}, repeat=1 if quick else 2,
        executor=executor, spark=spark, tile_shape=None, log=log, oracle_config="PayBoth",
        oracle={"sources": list(cells), "cells": cells, "backward": 16 if quick else 48,
                "targets": ORACLE_TARGETS + ["er_positive", "risk"]},
        description=("GSE7390 as scikit-survival loads it (198 breast-cancer patients: distant metastasis, grade, ER "
                     "status, age, size and the 76-gene signature), even patients training, odd test; 17 operators: "
                     "the synthetic workflow's UDFs E-H and built-ins, plus a Filter of the ER-positive test "
                     "patients, a Slice of their genes and a MatMul with the signature's weights"))


def _sweep(harness: Harness, specs: list[QuerySpec], reference: dict[str, np.ndarray], log) -> dict[str, Any]:
    """Fig. 7: the optimizer's plan under each disk budget, its disk and dynamic query costs."""
    workload = [s.workload_entry() for s in specs]
    out = {}
    for mb in BUDGETS_MB:
        record = harness.execute(f"SubZero{mb}", None, workload=workload, max_disk=mb * 1e6)
        seconds = {}
        for spec in specs:
            rec = harness.query(record, spec, None)
            check_same_cells(f"genomics {spec.name} under max_disk={mb} MB",
                             {"BlackBox": reference[spec.name], f"SubZero{mb}": rec.cells})
            seconds[spec.name] = rec.seconds
        out[f"{mb} MB"] = {"disk_mb": record.lineage_bytes / 1e6, "runtime_seconds": record.wall_seconds,
                           "udf_strategies": {u: list(record.strategies[u]) for u in workflow.UDFS},
                           "query_seconds": seconds}
        log(f"genomics SubZero{mb}: {record.lineage_bytes / 1e6:.2f} MB, " +
            ", ".join(f"{u}={'+'.join(record.strategies[u])}" for u in workflow.UDFS))
    return out


def _document(harness, runs, specs, static, dynamic, counts, sweep, capture, rows, cell_bytes,
              use_optimizer) -> dict[str, Any]:
    base = runs["BlackBox"]
    input_bytes = harness.input_bytes
    disk, runtime = overhead_ratios(runs, base, input_bytes, cell_bytes, capture)

    def ratio(table):
        return {q: {c: t / max(table[q]["BlackBox"], 1e-9) for c, t in table[q].items()} for q in table}

    static_ratio, dynamic_ratio = ratio(static), ratio(dynamic)
    backward = [s.name for s in specs if s.direction == "backward"]
    forward = [s.name for s in specs if s.direction == "forward"]
    configs = list(runs)
    best = {d: max(1 / dynamic_ratio[q][c] for q in qs for c in configs)
            for d, qs in (("backward", backward), ("forward", forward))}
    train = harness.inputs["train"]
    setup = {"patients": int(train.shape[0]), "columns": int(train.shape[1]),
             "scale": int(train.shape[0] // workflow.N_PATIENTS), "input_bytes": input_bytes,
             "nodes": len([n for n in harness.wf.nodes if not n.is_input]), "udfs": workflow.UDFS,
             "configs": CONFIGS, "executor": harness.executor,
             "queries": {s.name: s.summary() | {"result_cells": counts[s.name]} for s in specs}}
    sweep_note = ("disk-budget sweep of the optimizer (max_disk in MB)" if use_optimizer else
                  "the disk-budget sweep needs the strategy optimizer inside Workflow.run; it is switched off "
                  "(benchmarks/subzero_bench/configs.py USE_OPTIMIZER) until that lands, so no sweep was run")
    figures = {
        "disk": figure("x input bytes", "input matrices", disk, "lineage bytes stored"),
        "runtime": figure("x BlackBox wall time", "BlackBox run", runtime,
                          "wall time of the run (fastest of 2; CellPairs: BlackBox run + capture)"),
        "static_seconds": figure("s", None, static, "query time, strategies forced per node (using=)"),
        "dynamic_seconds": figure("s", None, dynamic, "query time, the run choosing per step (no using)"),
        "static_ratio": figure("x", "BlackBox", static_ratio, "static seconds / BlackBox static seconds"),
        "dynamic_ratio": figure("x", "BlackBox", dynamic_ratio, "dynamic seconds / BlackBox dynamic seconds"),
        "mismatched_slowdown": figure("x", "BlackBox", max(static_ratio[q]["FullForw"] for q in backward),
                                      "worst static FullForw / BlackBox over the backward queries"),
        "worst_static_ratio": figure("x", "BlackBox", max(v for q in static_ratio for c, v in static_ratio[q].items()
                                                          if c in configs), "worst static / BlackBox"),
        "worst_dynamic_ratio": figure("x", "BlackBox", max(v for q in dynamic_ratio for c, v in dynamic_ratio[q].items()
                                                           if c in configs), "worst dynamic / BlackBox"),
        "best_dynamic_speedup": figure("x", "BlackBox", best,
                                       "best BlackBox / dynamic seconds over configurations, per direction"),
        "sweep": figure("s, MB", None, sweep, sweep_note),
    }
    raw = {"runs": {c: r.summary() for c, r in runs.items()},
           "cellpairs": {"capture_seconds": capture, "rows": rows, "bytes": cell_bytes}}
    return {"setup": setup, "figures": figures, "raw": raw}

"""The real-data halves of the astronomy and genomics benchmarks, and the oracle runs.

A real-data section runs a workflow on real inputs under the same configurations as the
synthetic half (each its own store, timed), times each query per configuration (every
configuration must return the same cells), and checks the lineage of one run with the
perturbation oracle (`subzero.oracle.check_workflow`), whose miss count goes into the
results beside disk, runtime and query latency.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from subzero_bench.configs import operator_nodes, static_using
from subzero_bench.harness import Harness, QuerySpec, RunRecord, check_same_cells
from subzero_bench.results import figure
from subzero_bench.timing import timed
from subzero.oracle import OracleReport, check_workflow
from subzero.dag import Workflow

__all__ = ["run_section", "oracle_section", "sample_cells"]


def sample_cells(shape: tuple[int, ...], n: int, seed: int, extra: Sequence[tuple[int, ...]] = ()) -> np.ndarray:
    """``n`` distinct cells of ``shape`` drawn with ``seed``, plus the ``extra`` cells."""
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape))
    flat = rng.choice(size, min(n, size), replace=False)
    cells = np.stack(np.unravel_index(flat, shape), axis=1)
    if len(extra):
        cells = np.concatenate([cells, np.asarray(extra, np.int64).reshape(-1, len(shape))])
    return np.unique(cells, axis=0)


def oracle_section(report: OracleReport, seconds: float, what: str) -> dict[str, Any]:
    """The oracle's counts for a results document."""
    return report.summary() | {"seconds": seconds, "what": what}


def run_section(name: str, wf: Workflow, inputs: dict[str, np.ndarray], root: Path, *, configs: Sequence[str],
                pins: Callable[[str], dict | None], queries: Callable[[RunRecord], list[QuerySpec]],
                optimizer: dict[str, Any], repeat: int, executor: str, spark, tile_shape, log,
                oracle: dict[str, Any], oracle_config: str, description: str) -> dict[str, Any]:
    """Run ``wf`` under every configuration, time the queries, run the oracle on one run.

    ``pins(config)`` gives the strategies (None: the optimizer's plan, given the workload
    of the queries and the ``optimizer`` budgets); ``queries(first_run)`` places the
    queries; ``oracle`` holds `check_workflow`'s keywords for the ``oracle_config`` run.
    """
    harness = Harness(wf, inputs, root, executor=executor, spark=spark, tile_shape=tile_shape)
    harness.warm_up(pins(configs[0]))
    runs: dict[str, RunRecord] = {}
    specs: list[QuerySpec] = []
    for config in configs:
        strategies = pins(config)
        extra = {}
        if strategies is None:
            extra = {"workload": [s.workload_entry() for s in specs]} | optimizer
        runs[config] = harness.execute(config, strategies, repeat=repeat, **extra)
        log(f"{name} {config}: {runs[config].wall_seconds:.2f} s, {runs[config].lineage_bytes / 1e6:.2f} MB of lineage")
        if not specs:
            specs = queries(runs[config])
    seconds: dict[str, dict[str, float]] = {}
    counts: dict[str, int] = {}
    for spec in specs:
        answers, seconds[spec.name] = {}, {}
        for config, record in runs.items():
            using = ({n: "BlackBox" for n in operator_nodes(wf)} if config in ("NoLineage", "BlackBox")
                     else static_using(record.strategies, spec.direction))
            if config == "NoLineage":
                continue
            rec = harness.query(record, spec, using)
            answers[config], seconds[spec.name][config] = rec.cells, rec.seconds
        check_same_cells(f"{name} {spec.name}", answers)
        counts[spec.name] = len(answers["BlackBox"])
        log(f"{name} {spec.name}: {counts[spec.name]} cells; " +
            ", ".join(f"{c} {t:.3f} s" for c, t in seconds[spec.name].items()))
    report, spent = timed(lambda: check_workflow(runs[oracle_config].run, wf, inputs, **oracle))
    log(f"{name} oracle: {report.missed} missed pairs over {report.cells} cells, {report.trials} re-runs "
        f"({spent:.0f} s)")
    base = runs[configs[0]]
    input_bytes = harness.input_bytes
    speedup = {q: {c: seconds[q]["BlackBox"] / max(t, 1e-9) for c, t in seconds[q].items()} for q in seconds}
    return {
        "title": name, "description": description,
        "setup": {"inputs": {k: list(np.shape(v)) for k, v in inputs.items()}, "input_bytes": input_bytes,
                  "nodes": len(operator_nodes(wf)), "tile_shape": tile_shape, "base": configs[0],
                  "strategies": {c: {k: list(v) for k, v in r.strategies.items()} for c, r in runs.items()},
                  "queries": {s.name: s.summary() | {"result_cells": counts[s.name]} for s in specs}},
        "figures": {
            "disk": figure("x input bytes", "input arrays", {c: r.lineage_bytes / input_bytes for c, r in runs.items()},
                           "lineage bytes stored"),
            "runtime": figure(f"x {configs[0]} wall time", configs[0],
                              {c: r.wall_seconds / base.wall_seconds for c, r in runs.items()},
                              f"wall time of the run relative to {configs[0]} (fastest of {repeat})"),
            "runtime_seconds": figure("s", None, {c: r.wall_seconds for c, r in runs.items()}, "wall time of the run"),
            "query_seconds": figure("s", None, seconds, "query time per configuration (best of up to 3)"),
            "query_speedup": figure("x", "BlackBox", speedup, "BlackBox seconds / configuration seconds"),
        },
        "oracle": oracle_section(report, spent, f"the {oracle_config} run"),
        "raw": {"runs": {c: r.summary() for c, r in runs.items()}},
    }

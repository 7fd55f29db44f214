"""Run a workflow under named strategy configurations and time lineage queries over the runs.

A *configuration* is a name (``"FullOne"``, ``"SubZero"``...) and the strategies each
node stores (paper Table II).  `Harness.execute` runs the workflow once per
configuration into its own store and records the wall time and what was stored;
`Harness.query` times one query over one run, forcing the strategy per node with
``using`` (or letting the run choose when ``using`` is None).
"""

from __future__ import annotations

import itertools
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from subzero_bench.timing import best_of, dir_bytes, timed
from subzero.errors import SubZeroError
from subzero.run import Run
from subzero.dag import Workflow

__all__ = ["BenchError", "QuerySpec", "RunRecord", "QueryRecord", "Harness", "check_same_cells", "overhead_ratios",
           "lineage_bytes"]


class BenchError(SubZeroError, RuntimeError):
    """A benchmark found something wrong, e.g. two strategies disagreeing on a query."""


@dataclass(frozen=True)
class QuerySpec:
    """One lineage query of a benchmark: ``direction`` from ``cells`` of ``node`` to ``to``.

    ``entire_array=False`` disables the entire-array optimization (paper VI-C) for it.
    """

    name: str
    direction: str
    node: str
    to: str
    cells: np.ndarray
    entire_array: bool = True
    description: str = ""

    def workload_entry(self) -> dict[str, Any]:
        """The query in the optimizer's workload format."""
        return {"direction": self.direction, "node": self.node, "to": self.to,
                "cells": np.asarray(self.cells).tolist()}

    def summary(self) -> dict[str, Any]:
        """The query as plain JSON for the results file."""
        return {"direction": self.direction, "node": self.node, "to": self.to,
                "n_cells": int(len(self.cells)), "entire_array": self.entire_array,
                "description": self.description}


@dataclass
class RunRecord:
    """One workflow run of one configuration."""

    config: str
    run: Run
    wall_seconds: float
    pinned: dict[str, tuple[str, ...]] | None

    @property
    def strategies(self) -> dict[str, tuple[str, ...]]:
        """The strategies each node stored."""
        return self.run.strategies

    @property
    def lineage_bytes(self) -> int:
        """Bytes of lineage in the store (shards and manifests)."""
        return lineage_bytes(self.run)

    @property
    def lineage_keys(self) -> int:
        """LMDB entries the run stored (from its catalog)."""
        return int(sum(sum(rec.stats.keys.values()) for rec in self.run.catalog.nodes.values() if rec.stats))

    @property
    def store_bytes(self) -> int:
        """Bytes of the whole store directory."""
        return dir_bytes(self.run.path)

    @property
    def array_bytes(self) -> int:
        """Bytes of the stored arrays."""
        return dir_bytes(Path(self.run.path) / "arrays")

    def node_bytes(self) -> dict[str, int]:
        """Lineage bytes stored per node (nodes that stored nothing are left out)."""
        out = {}
        for name, rec in self.run.catalog.nodes.items():
            total = sum(rec.stats.bytes.values()) if rec.stats else 0
            if total:
                out[name] = int(total)
        return out

    def summary(self) -> dict[str, Any]:
        """The run's measurements as plain JSON for the results file."""
        return {"wall_seconds": self.wall_seconds, "lineage_bytes": self.lineage_bytes,
                "keys": self.lineage_keys,
                "store_bytes": self.store_bytes, "array_bytes": self.array_bytes,
                "node_lineage_bytes": self.node_bytes(),
                "strategies": {k: list(v) for k, v in self.strategies.items()},
                "pinned": None if self.pinned is None else {k: list(v) for k, v in self.pinned.items()}}


@dataclass
class QueryRecord:
    """The answer and time of one query over one run."""

    cells: np.ndarray
    seconds: float


def lineage_bytes(run: Run) -> int:
    """Bytes of lineage a run stored (LMDB entries plus R-tree files, from its catalog)."""
    return int(sum(sum(rec.stats.bytes.values()) for rec in run.catalog.nodes.values() if rec.stats))


def overhead_ratios(runs: dict[str, "RunRecord"], base: "RunRecord", input_bytes: int, cell_bytes: int | None,
                    capture_seconds: float | None) -> tuple[dict[str, float], dict[str, float]]:
    """Lineage disk relative to the input and wall time relative to ``base``, per configuration,
    CellPairs included (its runtime is the base run plus capturing every cell pair)."""
    disk = {c: r.lineage_bytes / input_bytes for c, r in runs.items()}
    runtime = {c: r.wall_seconds / base.wall_seconds for c, r in runs.items()}
    if cell_bytes is not None:  # None: the CellPairs baseline was skipped
        disk["CellPairs"] = cell_bytes / input_bytes
        runtime["CellPairs"] = (base.wall_seconds + capture_seconds) / base.wall_seconds
    return disk, runtime


def check_same_cells(query: str, answers: dict[str, np.ndarray]) -> None:
    """Raise `BenchError` unless every strategy returned the same cells for ``query``."""
    if not answers:
        return
    (ref_name, ref), *rest = answers.items()
    for name, cells in rest:
        if cells.shape != ref.shape or not np.array_equal(cells, ref):
            a = {tuple(c) for c in ref.tolist()}
            b = {tuple(c) for c in cells.tolist()}
            raise BenchError(
                f"query {query}: {name} returned {len(b)} cells, {ref_name} returned {len(a)}; "
                f"{len(b - a)} only in {name} (e.g. {sorted(b - a)[:3]}), "
                f"{len(a - b)} only in {ref_name} (e.g. {sorted(a - b)[:3]})")


class Harness:
    """Runs one workflow on fixed inputs under many configurations, each in a new store.

    Parameters
    ----------
    wf, inputs
        The workflow and its input arrays.
    root
        A directory for the stores (one sub-directory per run, never reused).
    executor, spark, tile_shape
        Passed to `Workflow.run`.
    """

    _ids = itertools.count()

    def __init__(self, wf: Workflow, inputs: dict[str, np.ndarray], root: str | Path,
                 executor: str = "spark", spark=None, tile_shape=None):
        self.wf, self.inputs = wf, inputs
        self.root = Path(root)
        self.executor, self.spark, self.tile_shape = executor, spark, tile_shape

    @property
    def input_bytes(self) -> int:
        """Bytes of the workflow's inputs."""
        return int(sum(np.asarray(a).nbytes for a in self.inputs.values()))

    def execute(self, config: str, strategies: dict[str, Any] | None, repeat: int = 1, **optimizer) -> RunRecord:
        """Run the workflow with ``strategies`` pinned (None: the optimizer's plan, given the
        ``workload``/``max_disk``/``max_runtime`` keywords) and time it; with ``repeat > 1``
        keep the fastest of that many runs (the other stores are deleted)."""
        best: RunRecord | None = None
        for _ in range(max(repeat, 1)):
            store = self.root / f"{next(self._ids):03d}-{config.replace('/', '-')}"
            run, seconds = timed(lambda: self.wf.run(  # until durable: a local run's store is written behind it
                self.inputs, store=store, strategies=strategies, executor=self.executor,
                spark=self.spark, tile_shape=self.tile_shape, **optimizer).wait())
            record = RunRecord(config, run, seconds, None if strategies is None else
                               {k: tuple([v] if isinstance(v, str) else v) for k, v in strategies.items()})
            if best is None or record.wall_seconds < best.wall_seconds:
                if best is not None:
                    shutil.rmtree(best.run.path, ignore_errors=True)
                best = record
            else:
                shutil.rmtree(record.run.path, ignore_errors=True)
        return best

    def warm_up(self, strategies: dict[str, Any] | None) -> float:
        """Run once untimed (starts Spark's Python workers, imports the operators' modules
        there), then delete the store; returns the seconds it took."""
        record = self.execute("warm-up", strategies)
        shutil.rmtree(record.run.path, ignore_errors=True)
        return record.wall_seconds

    @staticmethod
    def query(record: RunRecord, spec: QuerySpec, using: dict[str, str] | None,
              repeat: int = 3, budget: float = 1.0) -> QueryRecord:
        """Time ``spec`` over ``record``'s run (best of ``repeat`` while under ``budget`` s)."""
        fn = record.run.backward if spec.direction == "backward" else record.run.forward
        cells, seconds = best_of(lambda: fn(spec.node, spec.cells, to=spec.to, using=using,
                                            entire_array=spec.entire_array),
                                 repeat=repeat, budget=budget)
        return QueryRecord(cells, seconds)

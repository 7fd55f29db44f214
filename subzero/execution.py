"""The workflow executor: runs nodes in order, tile by tile, and commits each node.

Per node: bind the operator to its shapes, run its tiles on the chosen executor (each
task encodes its own lineage), assemble and persist the output array, merge the tiles'
lineage and write it in one LMDB transaction, then record the node in the catalog.

When the optimizer chooses strategies (a workload or a budget is given and not every
node is pinned), the run has two phases: first every node is computed without lineage
and profiled on sample tiles; the integer program then picks strategies; second, only
the nodes that store lineage re-run their tiles to capture it.  The first phase is the
workflow's own cost, the base of relative runtime budgets.
"""

from __future__ import annotations

import datetime as _dt
import time
from typing import Any

import numpy as np

from subzero.encoders import merge_tiles
from subzero.errors import SubZeroError, WorkflowError
from subzero.modes import Strategy
from subzero.pickling import dump_operator
from subzero.planning import default_strategies, resolve_pinned
from subzero.runtime import NodeTask, TileResult, run_tile
from subzero.store import RunStore
from subzero.tiling import Tile, Whole, tile_grid
from subzero.workflow import Node, Workflow

__all__ = ["execute", "LocalExecutor", "make_executor", "bind_shapes"]


class LocalExecutor:
    """Runs a node's tiles one after another in this process."""

    name = "local"

    def map_tiles(self, task: NodeTask, tiles: list[Tile]) -> list[TileResult]:
        try:
            return [run_tile(task, tile) for tile in tiles]
        except SubZeroError:
            raise
        except Exception as exc:
            raise WorkflowError(f"node {task.node!r} failed: {type(exc).__name__}: {exc}") from exc


def make_executor(executor: str, spark=None):
    if executor == "local":
        return LocalExecutor()
    if executor == "spark":
        from subzero.spark import SparkExecutor

        return SparkExecutor(spark)
    raise WorkflowError(f"unknown executor {executor!r}; use 'spark' (default) or 'local'")


def _check_inputs(wf: Workflow, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
    if not isinstance(inputs, dict):
        raise WorkflowError(f"inputs must be a dict of input name -> array, got {type(inputs).__name__}")
    names = {n.name for n in wf.inputs}
    missing, extra = names - set(inputs), set(inputs) - names
    if missing:
        raise WorkflowError(f"workflow {wf.name!r} needs input(s) {sorted(missing)}; pass them in inputs=")
    if extra:
        raise WorkflowError(f"workflow {wf.name!r} has no input(s) {sorted(extra)}; its inputs are {sorted(names)}")
    arrays = {}
    for name, value in inputs.items():
        arr = np.asarray(value)
        if arr.dtype == object:
            raise WorkflowError(f"input {name!r} must be a numeric numpy array, got dtype object")
        arrays[name] = arr
    return arrays


def bind_shapes(node: Node, input_shapes: tuple[tuple[int, ...], ...]) -> None:
    """Bind ``node.operator`` to its input shapes and (when it can tell) its output shape."""
    op = node.operator
    op.input_shapes = tuple(tuple(int(n) for n in s) for s in input_shapes)
    try:
        shape = op.infer_output_shape(op.input_shapes)
    except WorkflowError as exc:
        raise WorkflowError(f"node {node.name!r} ({type(op).__name__}): {exc}") from exc
    op.output_shape = None if shape is None else tuple(int(n) for n in shape)
    if op.output_shape is None and not isinstance(op.effective_tiling(), Whole):
        raise WorkflowError(f"node {node.name!r}: {type(op).__name__} declares a tiling, so it must "
                            "implement infer_output_shape(input_shapes)")


def node_tiles(node: Node, tile_shape) -> list[Tile]:
    op = node.operator
    if op.output_shape is None:
        return [Tile(0, None)]
    return tile_grid(op.output_shape, op.effective_tiling().split_axes(op), tile_shape)


class _Execution:
    """One run in progress: the store, the executor and what has been measured so far."""

    def __init__(self, wf: Workflow, rs: RunStore, runner, tile_shape, max_disk: float | None):
        self.wf, self.rs, self.runner, self.tile_shape = wf, rs, runner, tile_shape
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.dtypes: dict[str, str] = {}
        self.disk_left = max_disk

    def save_input(self, node: Node, array: np.ndarray) -> None:
        self.rs.save_array(node.name, array)
        self.shapes[node.name] = array.shape
        self.rs.catalog["nodes"][node.name] = {"kind": "input", "shape": list(array.shape), "dtype": str(array.dtype)}
        self.rs.save_catalog()

    def task(self, node: Node, strategies: tuple[str, ...]) -> NodeTask:
        return NodeTask(node.name, node.operator, tuple(self.rs.array_path(i.name) for i in node.inputs), strategies)

    def compute(self, node: Node, strategies: tuple[str, ...]) -> tuple[list[TileResult], float]:
        """Bind, run every tile (encoding ``strategies``), persist the output array."""
        bind_shapes(node, tuple(self.shapes[i.name] for i in node.inputs))
        start = time.perf_counter()
        results = self.runner.map_tiles(self.task(node, strategies), node_tiles(node, self.tile_shape))
        wall = time.perf_counter() - start
        output = _assemble(results, node.operator.output_shape)
        node.operator.output_shape = output.shape
        self.rs.save_array(node.name, output)
        self.rs.save_operator(node.name, dump_operator(node.operator, node.name))
        self.shapes[node.name], self.dtypes[node.name] = output.shape, str(output.dtype)
        return results, wall

    def capture(self, node: Node, strategies: tuple[str, ...]) -> tuple[list[TileResult], float]:
        """Re-run a computed node's tiles to capture lineage (its output is already stored)."""
        start = time.perf_counter()
        results = self.runner.map_tiles(self.task(node, strategies), node_tiles(node, self.tile_shape))
        return results, time.perf_counter() - start

    def commit(self, node: Node, strategies: tuple[str, ...], results: list[TileResult], wall: float,
               extra: dict | None = None) -> dict:
        """Write the node's lineage (within the disk budget) and then its catalog entry."""
        stored = [s for s in strategies if Strategy.parse(s).stored]
        batches = {s: merge_tiles([r.encoded[s] for r in results]) for s in stored}
        dropped = self._fit_budget(batches)
        kept = tuple(s for s in strategies if s not in dropped) or ("BlackBox",)
        start = time.perf_counter()
        op = node.operator
        ndims = {0xFF: len(op.output_shape)} | {i: len(s) for i, s in enumerate(op.input_shapes)}
        sizes = self.rs.write_lineage(node.name, batches, ndims)
        if self.disk_left is not None:
            self.disk_left -= sum(sizes.values())
        entry = {
            "kind": "operator", "shape": list(op.output_shape), "dtype": self.dtypes[node.name],
            "strategies": list(kept),
            "stats": {
                "tiles": len(results), "wall_seconds": wall,
                "op_seconds": sum(r.op_seconds for r in results),
                "lineage_seconds": sum(r.lineage_seconds for r in results),
                "write_seconds": time.perf_counter() - start,
                "bytes": sizes,
                "keys": {s: len(b.keys) for s, b in batches.items()},
                "encode_seconds": {s: sum(r.encode_seconds.get(s, 0.0) for r in results) for s in batches},
                "pairs": {s: [sum(r.cells[s][k] for r in results) for k in range(3)] for s in batches},
            },
        }
        if dropped:
            entry["dropped"] = {s: "over the disk budget at run time" for s in dropped}
        entry.update(extra or {})
        self.rs.catalog["nodes"][node.name] = entry
        self.rs.save_catalog()
        return entry

    def _fit_budget(self, batches: dict) -> list[str]:
        """Drop the largest strategies until the node fits in what is left of the budget."""
        if self.disk_left is None:
            return []
        need = {s: b.nbytes + b.index_bytes_bound for s, b in batches.items()}
        dropped = []
        while batches and sum(need[s] for s in batches) > self.disk_left:
            worst = max(batches, key=lambda s: need[s])
            dropped.append(worst)
            del batches[worst]
        return dropped


def execute(wf: Workflow, inputs, store, strategies=None, max_disk=None, max_runtime=None,
            workload=None, executor="spark", spark=None, tile_shape=None):
    """Run ``wf`` on ``inputs`` into a new ``store``; see `Workflow.run`."""
    from subzero.optimizer.budgets import parse_disk_budget, parse_runtime_budget
    from subzero.optimizer.workload import parse_workload
    from subzero.run import Run

    arrays = _check_inputs(wf, inputs)
    pinned = resolve_pinned(wf, strategies)
    queries = parse_workload(wf, workload)
    input_bytes = int(sum(a.nbytes for a in arrays.values()))
    disk_budget = parse_disk_budget(max_disk, input_bytes)
    parse_runtime_budget(max_runtime, 1.0)  # reject a malformed budget before anything runs
    runner = make_executor(executor, spark)
    operators = [n for n in wf.nodes if not n.is_input]
    optimized = bool(queries or max_disk is not None or max_runtime is not None) and \
        any(n.name not in pinned for n in operators)
    catalog = {
        "workflow": wf.to_dict(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "executor": runner.name, "tile_shape": tile_shape, "status": "running",
        "pinned": {k: list(v) for k, v in pinned.items()},
        "input_bytes": input_bytes, "workload": workload if isinstance(workload, list) else None,
        "budgets": {"max_disk": max_disk, "max_runtime": max_runtime},
    }
    rs = RunStore.create(store, catalog)
    run = _Execution(wf, rs, runner, tile_shape, disk_budget)
    started = time.perf_counter()
    try:
        for node in wf.inputs:
            run.save_input(node, arrays[node.name])
        if optimized:
            _two_phase(run, operators, pinned, queries, max_runtime)
        else:
            for node in operators:
                chosen = pinned.get(node.name) or default_strategies(node)
                results, wall = run.compute(node, chosen)
                run.commit(node, chosen, results, wall, {"reason": "pinned" if node.name in pinned else "default"})
    except BaseException:
        rs.catalog["status"] = "failed"
        rs.save_catalog()
        raise
    rs.catalog["status"] = "done"
    rs.catalog["wall_seconds"] = time.perf_counter() - started
    rs.save_catalog()
    return Run(rs, wf)


def _two_phase(run: _Execution, operators: list[Node], pinned, queries, max_runtime) -> None:
    from subzero.optimizer.budgets import parse_runtime_budget
    from subzero.optimizer.calibrate import profile_node
    from subzero.optimizer.plan import optimize

    profiles, computed, base, calibration = {}, {}, 0.0, 0.0
    for node in operators:
        results, wall = run.compute(node, ())
        base += wall
        computed[node.name] = (results, wall)
        start = time.perf_counter()
        profiles[node.name] = profile_node(run.task(node, ()), node_tiles(node, run.tile_shape),
                                           _candidates(node, pinned), sum(r.op_seconds for r in results))
        calibration += time.perf_counter() - start
    runtime_budget = parse_runtime_budget(max_runtime, base)
    try:
        plan, problem = optimize(run.wf, profiles, queries, run.disk_left, runtime_budget, pinned)
        over_budget = ""
    except WorkflowError as exc:  # pins alone break a budget: plan the rest, pins fall back at commit
        plan, problem = optimize(run.wf, profiles, queries, run.disk_left, runtime_budget, {})
        over_budget = str(exc)
    run.rs.catalog["optimizer"] = {
        "base_seconds": base, "calibration_seconds": calibration, "solve_seconds": plan.solve_seconds,
        "objective": plan.objective, "status": plan.status, "max_disk_bytes": run.disk_left,
        "max_runtime_seconds": runtime_budget, "predicted_disk": plan.disk, "predicted_runtime": plan.runtime,
        "pins_over_budget": over_budget,
    }
    for node in operators:
        chosen = pinned.get(node.name) or tuple(plan.chosen.get(node.name, ("BlackBox",)))
        stored = tuple(s for s in chosen if Strategy.parse(s).stored)
        results, wall = run.capture(node, stored) if stored else computed[node.name]
        predicted = {c.strategy: {"disk": c.disk, "runtime": c.runtime, "query": dict(c.query_cost)}
                     for c in problem.candidates if c.node == node.name}
        run.commit(node, chosen, results, wall, {
            "reason": "pinned" if node.name in pinned else plan.reasons.get(node.name, ""), "predicted": predicted,
            "profile": profiles[node.name].to_dict(),
            "pruned": {s: why for (n, s), why in plan.pruned.items() if n == node.name},
            "compute_seconds": computed[node.name][1],
        })


def _candidates(node: Node, pinned: dict[str, tuple[str, ...]]) -> list[str]:
    """Strategies worth calibrating: mapping nodes keep mapping (SubZero VII) unless pinned."""
    from subzero.modes import Mode
    from subzero.planning import supported_strategies

    if Mode.MAP in node.operator.supported_modes():
        return list(dict.fromkeys(["Map", "BlackBox", *pinned.get(node.name, ())]))
    return supported_strategies(node.operator)


def _assemble(results: list[TileResult], shape) -> np.ndarray:
    if len(results) == 1 and (shape is None or results[0].output.shape == tuple(shape)):
        return np.array(results[0].output, order="C")  # keeps 0-d outputs 0-d
    out = np.empty(shape, dtype=np.result_type(*[r.output.dtype for r in results]))
    for r in results:
        out[tuple(slice(lo, hi) for lo, hi in r.tile.box)] = r.output
    return out

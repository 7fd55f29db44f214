"""The workflow executor: runs nodes in order, tile by tile, and commits each node.

Per node: bind the operator to its shapes, run its tiles on the chosen executor (each
task encodes its own lineage), assemble and persist the output array, merge the tiles'
lineage and write it in one LMDB transaction, then record the node in the catalog.
"""

from __future__ import annotations

import datetime as _dt
import time
from typing import Any

import numpy as np

from subzero.encoders import merge_tiles
from subzero.errors import SubZeroError, WorkflowError
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


def execute(wf: Workflow, inputs, store, strategies=None, max_disk=None, max_runtime=None,
            workload=None, executor="spark", spark=None, tile_shape=None):
    """Run ``wf`` on ``inputs`` into a new ``store``; see `Workflow.run`."""
    from subzero.run import Run

    arrays = _check_inputs(wf, inputs)
    pinned = resolve_pinned(wf, strategies)
    runner = make_executor(executor, spark)
    plan = {n.name: pinned.get(n.name) or default_strategies(n) for n in wf.nodes if not n.is_input}
    catalog = {
        "workflow": wf.to_dict(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "executor": runner.name,
        "tile_shape": tile_shape,
        "pinned": {k: list(v) for k, v in pinned.items()},
        "status": "running",
    }
    rs = RunStore.create(store, catalog)
    shapes: dict[str, tuple[int, ...]] = {}
    started = time.perf_counter()
    try:
        for node in wf.nodes:
            if node.is_input:
                rs.save_array(node.name, arrays[node.name])
                shapes[node.name] = arrays[node.name].shape
                rs.catalog["nodes"][node.name] = {"kind": "input", "shape": list(arrays[node.name].shape),
                                                  "dtype": str(arrays[node.name].dtype)}
                rs.save_catalog()
                continue
            shapes[node.name] = _run_node(rs, node, plan[node.name], shapes, runner, tile_shape)
    except BaseException:
        rs.catalog["status"] = "failed"
        rs.save_catalog()
        raise
    rs.catalog["status"] = "done"
    rs.catalog["wall_seconds"] = time.perf_counter() - started
    rs.save_catalog()
    return Run(rs, wf)


def _run_node(rs: RunStore, node: Node, strategies: tuple[str, ...], shapes, runner, tile_shape) -> tuple[int, ...]:
    op = node.operator
    bind_shapes(node, tuple(shapes[i.name] for i in node.inputs))
    tiling = op.effective_tiling()
    tiles = (tile_grid(op.output_shape, tiling.split_axes(op), tile_shape)
             if op.output_shape is not None else [Tile(0, None)])
    task = NodeTask(node.name, op, tuple(rs.array_path(i.name) for i in node.inputs), strategies)
    start = time.perf_counter()
    results = runner.map_tiles(task, tiles)
    wall = time.perf_counter() - start
    output = _assemble(results, op.output_shape)
    op.output_shape = output.shape
    rs.save_array(node.name, output)
    rs.save_operator(node.name, dump_operator(op, node.name))
    write_start = time.perf_counter()
    batches = {s: merge_tiles([r.encoded[s] for r in results]) for s in strategies if s in results[0].encoded}
    ndims = {0xFF: output.ndim} | {i: len(s) for i, s in enumerate(op.input_shapes)}
    sizes = rs.write_lineage(node.name, batches, ndims)
    write_seconds = time.perf_counter() - write_start
    rs.catalog["nodes"][node.name] = {
        "kind": "operator",
        "shape": list(output.shape),
        "dtype": str(output.dtype),
        "strategies": list(strategies),
        "stats": {
            "tiles": len(results),
            "wall_seconds": wall,
            "op_seconds": sum(r.op_seconds for r in results),
            "lineage_seconds": sum(r.lineage_seconds for r in results),
            "write_seconds": write_seconds,
            "bytes": sizes,
            "encode_seconds": {s: sum(r.encode_seconds.get(s, 0.0) for r in results) for s in batches},
            "pairs": {s: [sum(r.cells[s][k] for r in results) for k in range(3)] for s in batches},
        },
    }
    rs.save_catalog()
    return output.shape


def _assemble(results: list[TileResult], shape) -> np.ndarray:
    if len(results) == 1 and (shape is None or results[0].output.shape == tuple(shape)):
        return np.ascontiguousarray(results[0].output)
    out = np.empty(shape, dtype=np.result_type(*[r.output.dtype for r in results]))
    for r in results:
        out[tuple(slice(lo, hi) for lo, hi in r.tile.box)] = r.output
    return out

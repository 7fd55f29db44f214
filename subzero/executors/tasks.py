"""The task kinds: plain functions that map the runtime's task code over an executor.

Each is one `Executor.map` call with its function and `Job`: a node's tiles
(`worker.run_tile`), a fused stage's (`worker.run_fused_tile`), a two-pass operator's first
pass (`worker.prepare_tile`), any module-level function over a node's task (calibration's
`profile_part`), or over any context outside a node (lineage statistics' batches).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence, TypeVar

from subzero.executors.base import Executor, Job
from subzero.progress import Reporter
from subzero.worker import FusedTask, FusedTile, NodeTask, TileMeta, prepare_tile, run_fused_tile, run_tile
from subzero.tiling import Tile

__all__ = ["map_tiles", "map_fused", "map_prepare", "map_calls", "map_items"]

_Item = TypeVar("_Item")
_Out = TypeVar("_Out")
_Context = TypeVar("_Context")


def map_tiles(executor: Executor, task: NodeTask, tiles: Sequence[Tile],
              progress: Reporter | None = None) -> list[TileMeta]:
    """`worker.run_tile` on every tile: write its chunk and shards, return its `TileMeta`."""
    return executor.map(run_tile, task, tiles, Job(f"node {task.node!r}", f"subzero node {task.node}", task.node),
                        progress)


def map_fused(executor: Executor, task: FusedTask, tiles: Sequence[Tile],
              progress: Reporter | None = None) -> list[FusedTile]:
    """`worker.run_fused_tile` on every tile: each member's `TileMeta` (and the first-pass
    summary of the node after them), per tile, in one job for every member."""
    return executor.map(run_fused_tile, task, tiles,
                        Job(f"node {task.node!r}", f"subzero nodes {task.node}", task.node), progress)


def map_calls(executor: Executor, fn: Callable[[NodeTask, _Item], _Out], task: NodeTask,
              items: Sequence[_Item]) -> list[_Out]:
    """``fn(task, item)`` for every tile (or other item, as calibration's parts), in order;
    ``fn`` is module-level (pickled by reference) and its results are small."""
    return executor.map(fn, task, items,
                        Job(f"node {task.node!r}", f"subzero node {task.node} ({fn.__name__})", task.node))


def map_prepare(executor: Executor, task: NodeTask, tiles: Sequence[Tile]) -> list[Any]:
    """The first pass of a two-pass operator: `worker.prepare_tile`'s summary per tile."""
    return map_calls(executor, prepare_tile, task, tiles)


def map_items(executor: Executor, fn: Callable[[_Context, _Item], _Out], context: _Context, items: Sequence[_Item],
              what: str) -> list[_Out]:
    """``fn(context, item)`` for every item, in order, outside any node (lineage statistics'
    batches of objects); ``context`` is shipped once per task, ``what`` names the job."""
    return executor.map(fn, context, items, Job(what, what))

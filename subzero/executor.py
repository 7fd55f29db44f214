"""The executor contract: what the driver calls to run a node's tiles somewhere.

Two implementations sit side by side: `LocalExecutor` here (threads in this process) and
`subzero.spark.SparkExecutor` (Spark tasks).  Both run the same task code (`runtime.run_tile`
or a given module-level function) on a private copy of the task per worker and return the
small results in tile order; neither changes the task (a node's output shape is agreed by
`subzero.stage.NodeStage` from the `TileMeta`s).  A new executor subclasses `Executor`
(docs/architecture.md, "Where to add things").
"""

from __future__ import annotations

import contextvars
import os
import pickle
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Protocol, TypeVar, runtime_checkable

from subzero import config
from subzero.errors import StoreError, SubZeroError, WorkflowError
from subzero.operator import Operator
from subzero.pickling import dumps_with_operator
from subzero.progress import Reporter
from subzero.runtime import FusedTask, FusedTile, NodeTask, TileMeta, prepare_tile, run_fused_tile, run_tile
from subzero.tiling import Tile

__all__ = ["Executor", "LocalExecutor"]

_Item = TypeVar("_Item")
_Out = TypeVar("_Out")
_Context = TypeVar("_Context")


@runtime_checkable
class Executor(Protocol):
    """Runs a node's task on tiles and returns what each tile's call returned, in tile order."""

    #: the executor's name as the catalog records it ("local", "spark")
    name: str

    @property
    def master(self) -> str | None:
        """Where the tasks run (a Spark master URL), or None in this process."""
        ...

    def map_tiles(self, task: NodeTask, tiles: list[Tile], progress: Reporter | None = None) -> list[TileMeta]:
        """`runtime.run_tile` on every tile: write its chunk and shards, return its `TileMeta`."""
        ...

    def map_fused(self, task: FusedTask, tiles: list[Tile], progress: Reporter | None = None) -> list[FusedTile]:
        """`runtime.run_fused_tile` on every tile: each member's `TileMeta` (and the first-pass
        summary of the node after them), per tile."""
        ...

    def map_prepare(self, task: NodeTask, tiles: list[Tile]) -> list[Any]:
        """The first pass of a two-pass operator: `runtime.prepare_tile`'s summary per tile."""
        return self.map_calls(prepare_tile, task, tiles)

    def warm_up(self) -> None:
        """Get ready for the tasks to come without waiting for it (Spark: start its Python
        workers and import the task code while the driver stores the inputs); by default,
        nothing to do."""
        return None

    def map_calls(self, fn: Callable[[NodeTask, _Item], _Out], task: NodeTask, tiles: list[_Item]) -> list[_Out]:
        """``fn(task, tile)`` for every tile (or other item, as calibration's parts), in order;
        ``fn`` is module-level (pickled by reference) and its results are small."""
        ...

    def map_items(self, fn: Callable[[_Context, _Item], _Out], context: _Context, items: list[_Item],
                  what: str) -> list[_Out]:
        """``fn(context, item)`` for every item, in order, outside any node (``stats.table``'s
        batches of objects); ``context`` is shipped once per task, ``what`` names the job."""
        ...


class LocalExecutor(Executor):
    """Runs a node's tiles in this process, on a few threads (numpy and scipy release the GIL).

    Each thread works on its own copy of the task, as each Spark worker does, so an
    operator never sees two tiles at once.

    Parameters
    ----------
    threads
        How many threads (default: the ``local_threads`` setting (`subzero.config`), else up to 4 cores).
    """

    name = "local"
    master = None  # in this process

    def __init__(self, threads: int | None = None):
        self.threads = threads or config.get("local_threads") or min(os.cpu_count() or 1, 4)

    def map_tiles(self, task: NodeTask, tiles: list[Tile], progress: Reporter | None = None) -> list[TileMeta]:
        """`runtime.run_tile` on every tile, in tile order."""
        return self._map(run_tile, task, tiles, progress if progress is not None else Reporter())

    def map_fused(self, task: FusedTask, tiles: list[Tile], progress: Reporter | None = None) -> list[FusedTile]:
        """`runtime.run_fused_tile` on every tile, in tile order."""
        return self._map(run_fused_tile, task, tiles, progress if progress is not None else Reporter())

    def map_calls(self, fn: Callable[[NodeTask, _Item], _Out], task: NodeTask, tiles: list[_Item]) -> list[_Out]:
        """``fn(task, tile)`` for every tile, in tile order (e.g. calibration's `profile_part`)."""
        return self._map(fn, task, tiles, Reporter())

    def map_items(self, fn: Callable[[_Context, _Item], _Out], context: _Context, items: list[_Item],
                  what: str) -> list[_Out]:
        """``fn(context, item)`` for every item, in order, in this thread."""
        try:
            return [fn(context, item) for item in items]
        except SubZeroError:
            raise
        except Exception as exc:
            raise WorkflowError(f"{what} failed: {type(exc).__name__}: {exc}") from exc

    def _map(self, fn, task: "NodeTask | FusedTask", tiles: list, progress: Reporter) -> list:
        try:
            if len(tiles) == 1 or self.threads == 1:
                out = []
                for tile in tiles:
                    out.append(fn(task, tile))
                    progress.tiles_done(task.node, 1)
                return out
            payload = dumps_with_operator(task, _operators(task), task.node)
            local = threading.local()
            caller = contextvars.copy_context()  # the caller's `config.set` overrides hold in the threads too

            def one(tile: Tile):
                if not hasattr(local, "task"):
                    local.task = pickle.loads(payload)
                got = caller.copy().run(fn, local.task, tile)
                progress.tiles_done(task.node, 1)
                return got

            pool = ThreadPoolExecutor(self.threads, thread_name_prefix="subzero-tile")
            try:
                out = list(pool.map(one, tiles))
            except BaseException as exc:
                # Ctrl-C or the store's service failing: report now, tiles not started never start, and the
                # running ones end on their own (the driver's cleanup stops their storage retries)
                pool.shutdown(wait=not isinstance(exc, (KeyboardInterrupt, StoreError)), cancel_futures=True)
                raise
            pool.shutdown()
            return out
        except SubZeroError:
            raise
        except Exception as exc:
            raise WorkflowError(f"node {task.node!r} failed: {type(exc).__name__}: {exc}") from exc


def _operators(task: "NodeTask | FusedTask") -> "Operator | tuple[Operator, ...]":
    """The operator(s) a task pickles (a fused task's members')."""
    return task.operators if isinstance(task, FusedTask) else task.operator

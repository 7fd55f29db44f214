"""The executor contract: what the driver calls to run a node's tiles somewhere.

Two implementations sit side by side: `subzero.execution.LocalExecutor` (threads in this
process) and `subzero.spark.SparkExecutor` (Spark tasks).  Both run the same task code
(`runtime.run_tile`, `runtime.prepare_tile` or a given module-level function) on a private
copy of the task per worker, and return the results in tile order; only small metadata
comes back.  The driver (`execution`), replay and calibration type their executor as
`Executor`; a new executor subclasses it (see docs/architecture.md, "Where to add things").
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, TypeVar, runtime_checkable

from subzero.progress import Reporter
from subzero.runtime import NodeTask, TileMeta
from subzero.tiling import Tile

__all__ = ["Executor"]

_Item = TypeVar("_Item")
_Out = TypeVar("_Out")


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
        """`runtime.run_tile` on every tile: write its chunk and shards, return its `TileMeta`.
        Sets ``task.operator.output_shape`` from the first `TileMeta` when it was unknown
        (callers read it afterwards; docs/architecture.md, "Known debts" 2)."""
        ...

    def map_prepare(self, task: NodeTask, tiles: list[Tile]) -> list[Any]:
        """The first pass of a two-pass operator: `runtime.prepare_tile`'s summary per tile."""
        ...

    def map_calls(self, fn: Callable[[NodeTask, _Item], _Out], task: NodeTask, tiles: list[_Item]) -> list[_Out]:
        """``fn(task, tile)`` for every tile (or other item, as calibration's parts), in order;
        ``fn`` is module-level (pickled by reference) and its results are small."""
        ...

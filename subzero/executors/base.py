"""The executor contract: one primitive, map a function over items, and what a job is.

An executor runs ``fn(context, item)`` for every item somewhere (threads in this process:
`subzero.executors.local.LocalExecutor`; Spark tasks: `subzero.executors.spark.SparkExecutor`)
and returns the small results in item order.  Each worker gets a private copy of the context
(a node's task: `worker.NodeTask`, `worker.FusedTask`), so an operator never sees two tiles at
once; no executor changes the context.  What runs is given by the caller: the task kinds
(a node's tiles, a fused stage's, a two-pass operator's first pass, calibration's parts, lineage
statistics' batches) are plain functions over an executor (`subzero.executors.tasks`).
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence, TypeVar, runtime_checkable

from subzero.pickling import dumps_with_operator
from subzero.progress import Reporter
from subzero.worker import FusedTask

__all__ = ["Executor", "Job", "payload"]

_Item = TypeVar("_Item")
_Out = TypeVar("_Out")
_Context = TypeVar("_Context")


@dataclass(frozen=True)
class Job:
    """What one `Executor.map` is, for its messages and its progress.

    Attributes
    ----------
    label : str
        Names the job in an error ("node 'blur'", "lineage statistics of 'stars'").
    description : str
        The Spark job's description (its web UI and logs).
    node : str, optional
        The node whose tiles are mapped: the context is a task holding its operator(s),
        shipped with them by value (`subzero.pickling.dumps_with_operator`), each worker works
        on a private copy, and progress counts the node's tiles.  None: any other job (its
        context pickled as it is; the local executor runs it in order in this thread).
    """

    label: str
    description: str
    node: str | None = None


@runtime_checkable
class Executor(Protocol):
    """Maps a module-level function over items and returns each call's result, in item order."""

    #: the executor's name as the catalog records it ("local", "spark")
    name: str

    @property
    def master(self) -> str | None:
        """Where the tasks run (a Spark master URL), or None in this process."""
        ...

    def map(self, fn: Callable[[_Context, _Item], _Out], context: _Context, items: Sequence[_Item], job: Job,
            progress: Reporter | None = None) -> list[_Out]:
        """``fn(context, item)`` for every item, in order.

        ``fn`` is module-level (pickled by reference) and its results small; ``context`` is
        shipped once per worker (each its own copy); a failure raises `subzero.WorkflowError`
        naming ``job.label``; ``progress`` (with ``job.node``) is told of each finished item.
        """
        ...

    def warm_up(self) -> None:
        """Get ready for the tasks to come without waiting for it (Spark: start its Python
        workers and import the task code while the driver stores the inputs); by default,
        nothing to do."""
        return None


def payload(context: Any, job: Job) -> bytes:
    """``context`` as the bytes a worker loads its copy from: a node's task with its
    operator(s) by value (operators defined in a user's module run on workers that cannot
    import it), any other context pickled as it is."""
    if job.node is None:
        return pickle.dumps(context)
    ops = context.operators if isinstance(context, FusedTask) else context.operator  # a fused task: its members'
    return dumps_with_operator(context, ops, job.node)

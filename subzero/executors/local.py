"""The local executor: a job's items on a few threads in this process."""

from __future__ import annotations

import contextvars
import itertools
import os
import pickle
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, Callable, Sequence, TypeVar

from subzero import config
from subzero.errors import StoreError, SubZeroError, WorkflowError
from subzero.executors.base import Executor, Job, payload
from subzero.progress import Reporter

__all__ = ["LocalExecutor"]

_Item = TypeVar("_Item")
_Out = TypeVar("_Out")
_Context = TypeVar("_Context")


class LocalExecutor(Executor):
    """Runs a node's tiles in this process, on a few threads (numpy and scipy release the GIL):
    the calling thread and the others of a pool, each on an item at a time.

    Each thread works on its own copy of the task, as each Spark worker does, so an
    operator never sees two tiles at once.  A job over no node (``Job.node`` None: lineage
    statistics' batches) runs in order in the calling thread.

    Parameters
    ----------
    threads
        How many threads (default: the ``local_threads`` setting (`subzero.config`), else up to 4 cores).
    """

    name = "local"
    master = None  # in this process

    def __init__(self, threads: int | None = None):
        self.threads = threads or config.get("local_threads") or min(os.cpu_count() or 1, 4)

    def map(self, fn: Callable[[_Context, _Item], _Out], context: _Context, items: Sequence[_Item], job: Job,
            progress: Reporter | None = None) -> list[_Out]:
        """``fn(context, item)`` for every item, in order (see `Executor.map`)."""
        try:
            if job.node is None:
                return [fn(context, item) for item in items]
            return self._threads(fn, context, list(items), job, job.node,
                                 progress if progress is not None else Reporter())
        except SubZeroError:
            raise
        except Exception as exc:
            raise WorkflowError(f"{job.label} failed: {type(exc).__name__}: {exc}") from exc

    def _threads(self, fn: Callable[[Any, Any], Any], context: Any, items: list, job: Job, node: str,
                 progress: Reporter) -> list:
        if len(items) == 1 or self.threads == 1:
            out = []
            for item in items:
                out.append(fn(context, item))
                progress.tiles_done(node, 1)
            return out
        loaded = _private(context, job)
        local = threading.local()
        caller = contextvars.copy_context()  # the caller's `config.set` overrides hold in the threads too

        def one(item):
            if not hasattr(local, "context"):
                local.context = pickle.loads(loaded)
            got = caller.copy().run(fn, local.context, item)
            progress.tiles_done(node, 1)
            return got

        # the calling thread works too, beside threads - 1 of the pool, each taking the next item not
        # started: a job of two bands costs one pool round trip, and no core waits on the caller
        results: list[Any] = [None] * len(items)
        order = itertools.count()
        stop = threading.Event()  # a failure or Ctrl-C: items not started never start

        def share() -> None:
            for k in order:
                if k >= len(items) or stop.is_set():
                    return
                try:
                    results[k] = one(items[k])
                except BaseException:
                    stop.set()
                    raise

        helpers = [_pool(self.threads - 1).submit(share) for _ in range(min(self.threads, len(items)) - 1)]
        try:
            share()
            for h in helpers:
                h.result()
            return results
        except BaseException as exc:
            # Ctrl-C or the store's service failing: report now, items not started never start, and the
            # running ones end on their own (the driver's cleanup stops their storage retries)
            stop.set()
            if not isinstance(exc, (KeyboardInterrupt, StoreError)):
                wait(helpers)
            raise


def _private(context: Any, job: Job) -> bytes:
    """The bytes each thread loads its own copy of ``context`` from: pickled as it is when it
    can be (nothing leaves this process: the classes are imported here), else as a Spark
    worker's (`payload`: operators by value, cloudpickle)."""
    try:
        return pickle.dumps(context, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # a lambda, a class made inside a function...: what cloudpickle takes by value
        return payload(context, job)


_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def _pool(threads: int) -> ThreadPoolExecutor:
    """The process's pool of ``threads`` tile threads, started once (a job of a few small tiles
    then costs no thread start)."""
    with _POOLS_LOCK:
        if threads not in _POOLS:
            _POOLS[threads] = ThreadPoolExecutor(threads, thread_name_prefix=f"subzero-tile-{threads}")
        return _POOLS[threads]

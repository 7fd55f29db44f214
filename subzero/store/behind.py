"""Write-behind persistence: a run's store writes done by one background thread, in order.

A local run computes with its arrays in memory and returns its results as soon as they are
computed; the chunks of the arrays it keeps, the operators, manifests and catalog are written
by a `WriteBehind` thread, one job after another in the order the driver gave them.  The
commit order of the store is therefore kept as it is when writing in the caller's thread: a
node's chunks, then its ``zarr.json`` and operator, then its manifest, last the catalog that
names it.  A crash (kill -9) part way leaves a store whose catalog says ``running`` and names
only nodes whose files were all written: `subzero.open_run` reports it incomplete and
``resume=True`` continues it, exactly as after a crash mid-run.

`BehindStore` is the run's `RunWriter` over a `FileStore` with such a thread: its writing
methods queue a job, its reading methods first wait for the jobs queued before them (so a
reader never sees a half-written file of this run).  `AfterWrites` is the `LineageReader` a
`subzero.Run` reads through until the writes are done: every read waits for them once.

While the run computes, the thread leaves it the cores: a job waits until it is ``hold``
seconds old (the driver gives its ``commit_seconds``) unless the run is finished
(`WriteBehind.finish`), someone waits for the writes (`WriteBehind.settle`, a read) or the queue
is full.  A short run thus returns before anything is written (its writes then take the cores it
no longer uses, rather than slowing each of its stages down), and a long one's store lags it by
at most ``hold`` seconds, as its catalog does (``commit_seconds``).

A traced run whose trace computed every value goes further: the rest of the run itself (storing,
lineage, commits) runs behind its return, on a writer thread given to `WriteBehind.produce`;
`WriteBehind.settle`, and so every read and `wait_for_writes`, first waits for it to end, and its
failure is raised by `WriteBehind.wait` as a write's is.

The thread is not a daemon: at a normal interpreter exit Python waits for it, so nothing
queued is lost.  It is one of the process's writer threads, kept idle between runs (a run then
starts no thread; at exit the idle ones end at once).  Its memory is bounded: a job carries the bytes it holds (an array's cells)
and `WriteBehind.submit` blocks while more than ``limit`` bytes are queued.  A job that fails
stops the writing (later jobs are skipped, except the one releasing the writer lock); the
error is logged and raised by `WriteBehind.wait` (`subzero.Run.wait`, and any query).
"""

from __future__ import annotations

import collections
import contextvars
import functools
import logging
import os
import queue
import threading
import time
import weakref
from concurrent.futures import Future
from typing import Any, Callable

from subzero.catalog import Manifest, RunRecord, ShardRecord
from subzero.errors import StoreError

__all__ = ["WriteBehind", "BehindStore", "AfterWrites", "wait_for_writes"]

log = logging.getLogger(__name__)

#: the stores being written behind in this process, by URL (a new run into one waits for it)
_ACTIVE: "weakref.WeakValueDictionary[str, WriteBehind]" = weakref.WeakValueDictionary()
_ACTIVE_LOCK = threading.Lock()


def wait_for_writes(url: str) -> None:
    """Wait until this process has finished writing the store at ``url`` behind a run (a new
    run into it, or a resume, then finds it as the earlier run left it); errors are ignored
    here (the earlier run's `subzero.Run.wait` reports them)."""
    with _ACTIVE_LOCK:
        writer = _ACTIVE.get(url)
    if writer is not None:
        writer.settle()


#: how long an idle writer thread waits for the next run's writes before it ends
WRITER_IDLE_SECONDS = 30.0
_WRITERS_LOCK = threading.Lock()
_IDLE_WRITERS: list["queue.SimpleQueue[Callable[[], None] | None]"] = []  # idle threads' inboxes
_WRITERS_EXIT = [False]  # the interpreter is exiting: threads end once their writes are done


def _writer_thread(loop: Callable[[], None], name: str) -> None:
    """Run ``loop`` on an idle writer thread, or a new one (not a daemon: the interpreter waits
    for the writes at exit)."""
    with _WRITERS_LOCK:
        inbox = _IDLE_WRITERS.pop() if _IDLE_WRITERS else None
    if inbox is not None:
        inbox.put(functools.partial(_named, loop, name))
        return
    inbox = queue.SimpleQueue()
    inbox.put(functools.partial(_named, loop, name))
    threading.Thread(target=_serve, args=(inbox,), name=name, daemon=False).start()


def _named(loop: Callable[[], None], name: str) -> None:
    threading.current_thread().name = name
    loop()


def _serve(inbox: "queue.SimpleQueue[Callable[[], None] | None]") -> None:
    """A writer thread: the loops given to it, one after another, idle in between."""
    while True:
        try:
            work = inbox.get(timeout=WRITER_IDLE_SECONDS)
        except queue.Empty:
            with _WRITERS_LOCK:
                if inbox in _IDLE_WRITERS:  # nobody gave it work meanwhile: it ends
                    _IDLE_WRITERS.remove(inbox)
                    return
            continue  # taken just now: its work is on the way
        if work is None:
            return
        work()
        threading.current_thread().name = "subzero-write-behind (idle)"
        with _WRITERS_LOCK:
            if _WRITERS_EXIT[0]:
                return
            _IDLE_WRITERS.append(inbox)


def _end_idle_writers() -> None:
    """At interpreter exit (before Python waits for its threads) and in a forked child (whose
    writer threads did not come along): idle writer threads end, none is reused."""
    with _WRITERS_LOCK:
        _WRITERS_EXIT[0] = True
        for inbox in _IDLE_WRITERS:
            inbox.put(None)
        _IDLE_WRITERS.clear()


def _forked() -> None:
    _IDLE_WRITERS.clear()  # their threads are not in this process


try:
    threading._register_atexit(_end_idle_writers)  # type: ignore[attr-defined]  # as concurrent.futures does
except (AttributeError, RuntimeError):  # no such hook (idle threads then end after WRITER_IDLE_SECONDS)
    pass
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


#: the runs of this process finishing behind their return (`WriteBehind.produce`): each one's event is set when it ended
_PRODUCING: set[threading.Event] = set()
_PRODUCERS_HOOKED = [False]


def _wait_for_producers() -> None:
    """At interpreter exit: the runs finishing behind their return end first (their writes are then
    waited for with the writer threads).  Registered after `concurrent.futures`' own exit hook, so
    it runs before it: a run still computing (its lineage on the executor's threads) may still start
    work on a pool."""
    with _ACTIVE_LOCK:
        pending = list(_PRODUCING)
    for done in pending:
        done.wait()


def _hook_producers() -> None:
    """Register `_wait_for_producers` (once, at the first `WriteBehind.produce`)."""
    import concurrent.futures.thread  # noqa: F401  (its exit hook registered first: it runs after ours)

    with _ACTIVE_LOCK:
        if _PRODUCERS_HOOKED[0]:
            return
        _PRODUCERS_HOOKED[0] = True
    try:
        threading._register_atexit(_wait_for_producers)  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError):  # no such hook, or the interpreter is exiting already
        pass


class WriteBehind:
    """One background thread running queued jobs in order, at most ``limit`` bytes queued.

    Parameters
    ----------
    name : str
        What it writes (the thread's name and messages: the store's URL).
    limit : int
        The most bytes the queued jobs may hold (a single larger job is queued alone).
    hold : float
        Seconds a job may wait, while the run computes, before it runs (0: at once); a waiter
        (`settle`, a submit that finds the queue full) or `finish` ends the wait.

    Examples
    --------
    >>> done = []
    >>> w = WriteBehind("demo", 2**20)
    >>> w.submit(done.append, 1); w.submit(done.append, 2); w.finish(); w.wait()
    >>> done
    [1, 2]
    """

    def __init__(self, name: str, limit: int, hold: float = 0.0):
        self.name, self.limit, self.hold = name, max(int(limit), 0), max(float(hold), 0.0)
        #: (function, arguments, bytes held, run after a failure, when it was queued)
        self._jobs: collections.deque[tuple[Callable[..., Any], tuple, int, bool, float]] = collections.deque()
        self._queued = 0  # bytes the queued and running jobs hold
        self._submitted = self._done = 0
        self._waiting = 0  # callers waiting for the thread (settle, a full queue): no job waits then
        self._finished = False
        self.error: BaseException | None = None
        #: the work still queueing jobs (`produce`): set once it ended; its thread, and what stopped it
        self._producer: threading.Event | None = None
        self._producer_thread: int | None = None
        self.producer_error: BaseException | None = None
        self._cond = threading.Condition()
        _writer_thread(self._loop, f"subzero-write-behind {name}")
        with _ACTIVE_LOCK:
            _ACTIVE[name] = self

    def submit(self, fn: Callable[..., Any], *args: Any, nbytes: int = 0, always: bool = False) -> None:
        """Queue ``fn(*args)``, holding ``nbytes`` until it ran; blocks while the queue is full.
        ``always``: run it even after an earlier job failed (releasing the lock)."""
        with self._cond:
            if self._finished:
                raise StoreError(f"the writes behind the run into {self.name!r} are finished; nothing more can "
                                 "be queued (this is a bug in subzero)")
            if self._queued and self._queued + nbytes > self.limit and self.error is None:
                self._waiting += 1
                self._cond.notify_all()
                try:
                    while self._queued and self._queued + nbytes > self.limit and self.error is None:
                        self._cond.wait()
                finally:
                    self._waiting -= 1
            idle = not self._jobs
            self._jobs.append((fn, args, nbytes, always, time.monotonic()))
            self._queued += nbytes
            self._submitted += 1
            if idle:  # else the thread is busy or waits for the first job's time: it finds this one then
                self._cond.notify_all()  # (a wake-up per job would take the interpreter from the run each time)

    def produce(self, work: Callable[[], None], name: str) -> None:
        """Run ``work`` (the rest of a run that returned before it: it queues this writer's jobs
        and ends with `finish`) on a writer thread of its own, in the caller's context (its
        settings); until it ended, `settle` (so `wait`, every read and `wait_for_writes`) waits
        for it first, except on that thread.  A failure of ``work`` is logged at once and raised
        by `wait`: never silent."""
        _hook_producers()
        done = threading.Event()
        context = contextvars.copy_context()
        self._producer = done
        with _ACTIVE_LOCK:
            _PRODUCING.add(done)

        def body() -> None:
            self._producer_thread = threading.get_ident()
            try:
                context.run(work)
            except BaseException as exc:  # kept for `wait`
                self.producer_error = exc
                log.error("the run into %s failed behind its return: %s: %s", self.name, type(exc).__name__, exc)
            finally:
                with _ACTIVE_LOCK:
                    _PRODUCING.discard(done)
                done.set()

        _writer_thread(body, name)

    def finish(self) -> None:
        """No more jobs: the thread ends once the queued ones ran."""
        with self._cond:
            self._finished = True
            self._cond.notify_all()

    @property
    def pending(self) -> int:
        """Jobs queued or running."""
        with self._cond:
            return self._submitted - self._done

    def settle(self) -> None:
        """Wait until every job queued so far ran (or was skipped after a failure); first, until the
        work still queueing jobs (`produce`) ended, unless this is its thread."""
        producer = self._producer
        if producer is not None and self._producer_thread != threading.get_ident():
            producer.wait()
        with self._cond:
            target = self._submitted
            if self._done >= target:
                return
            self._waiting += 1
            self._cond.notify_all()  # the jobs held back run now
            try:
                while self._done < target:
                    self._cond.wait()
            finally:
                self._waiting -= 1

    def wait(self) -> None:
        """`settle`, then raise the error that stopped the writing or the work queueing it
        (`produce`), if any (a `StoreError` naming the store; the original error is its cause)."""
        self.settle()
        failed = self.producer_error
        if failed is not None and self.error is None and self._producer_thread != threading.get_ident():
            raise StoreError(f"the run into {self.name!r} failed behind its return ({type(failed).__name__}: "
                             f"{failed}); the store holds the nodes committed before the failure: free the "
                             "cause, then resume the run (resume=True, --resume)") from failed
        if self.error is not None:
            raise StoreError(f"writing the run's store {self.name!r} behind it failed ({type(self.error).__name__}: "
                             f"{self.error}); the store holds the nodes committed before the failure: free the "
                             "cause, then resume the run (resume=True, --resume)") from self.error

    def _delay(self) -> float:
        """Seconds the first queued job still waits (the run computes); 0: run it now."""
        if not self.hold or self._finished or self._waiting:
            return 0.0
        return self._jobs[0][4] + self.hold - time.monotonic()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    if not self._jobs:
                        if self._finished:  # finished and drained
                            return
                        self._cond.wait()
                        continue
                    delay = self._delay()
                    if delay <= 0:
                        break
                    self._cond.wait(delay)
                fn, args, nbytes, always, _ = self._jobs[0]
                skip = self.error is not None and not always
            try:
                if not skip:
                    fn(*args)
            except BaseException as exc:  # kept for `wait`; the thread goes on draining
                if self.error is None:
                    self.error = exc
                    log.error("writing the store %s behind the run failed: %s: %s", self.name, type(exc).__name__,
                              exc)
            finally:
                with self._cond:
                    self._jobs.popleft()
                    self._queued -= nbytes
                    self._done += 1
                    self._cond.notify_all()


class BehindStore:
    """A `RunWriter` whose writes run on a `WriteBehind` thread, in the order they were made.

    Writing methods (catalog, operators, manifests, array chunks through `write_array`,
    removals, ``close``) queue a job; reading methods wait for what was queued before them.
    ``shard_directory`` and ``array`` answer at once (tasks write their own shards and the
    chunks of arrays not held in memory, before the driver queues the node's commit).
    ``limit`` and ``hold`` are its `WriteBehind`'s.
    """

    def __init__(self, inner: Any, limit: int, hold: float = 0.0):
        self.inner = inner
        self.behind = WriteBehind(inner.url, limit, hold)
        self._arrays: collections.Counter[str] = collections.Counter()  # node -> its array writes queued
        self._arrays_lock = threading.Lock()

    # -- what reads and tasks need at once -----------------------------------------------------
    @property
    def url(self) -> str:
        """The store's URL."""
        return self.inner.url

    @property
    def location(self) -> Any:
        """The store's `Location` (tasks write their shards under it)."""
        return self.inner.location

    def shard_directory(self, node: str, strategy: str) -> str:
        """Where a node's strategy writes its shards (tasks write them themselves)."""
        return self.inner.shard_directory(node, strategy)

    def array(self, node: str, meta_xxh3: str | None = None) -> Any:
        """The array handle of ``node`` (after its queued writes, when it has any)."""
        with self._arrays_lock:
            queued = self._arrays[node] > 0
        if queued:
            self.behind.wait()
        return self.inner.array(node, meta_xxh3)

    # -- writing: queued -------------------------------------------------------------------------
    def write_array(self, node: str, block: Any, chunks: tuple[int, ...], compressor: str,
                    copy: "Future[Any] | None" = None) -> str:
        """Queue storing ``block`` (an array this run holds: no one may change it) as ``node``'s
        array with ``chunks`` and the resolved ``compressor``; returns the checksum its
        ``zarr.json`` will have (for the catalog), computed now.  ``copy``: what is stored is the
        array this future gives (a copy of ``block`` being made beside the run; ``block`` only
        tells its shape, dtype and bytes), waited for by the write."""
        from subzero.store.arrays import metadata_checksum, write_array

        with self._arrays_lock:
            self._arrays[node] += 1
        given: Any = block if copy is None else None  # (the job holds no reference to an array it does not store)

        def job() -> None:
            try:
                write_array(self.inner.array(node), given if copy is None else copy.result(), chunks, compressor,
                            parallel=False)
            finally:
                with self._arrays_lock:
                    self._arrays[node] -= 1

        self.behind.submit(job, nbytes=int(block.nbytes))
        return metadata_checksum(tuple(block.shape), chunks, block.dtype, compressor)

    def write_catalog(self, record: RunRecord) -> None:
        """Queue writing the catalog as ``record`` says (the nodes it names were queued before)."""
        self.behind.submit(self.inner.write_catalog, record)

    def save_operator(self, node: str, payload: bytes) -> None:
        """Queue writing a node's operator."""
        self.behind.submit(self.inner.save_operator, node, payload, nbytes=len(payload))

    def save_operator_later(self, node: str, dump: Callable[[], bytes], nbytes: int = 0) -> None:
        """Queue pickling a node's operator (``dump()`` gives its bytes: it must hold an operator
        no one changes) and writing it, holding about ``nbytes``: the pickling too is done behind."""
        self.behind.submit(lambda: self.inner.save_operator(node, dump()), nbytes=nbytes)

    def write_manifest(self, manifest: Manifest) -> None:
        """Queue writing a node's manifest."""
        self.behind.submit(self.inner.write_manifest, manifest)

    def remove_uncommitted(self, node: str, manifest: Manifest | None) -> int:
        """Queue removing the shards of ``node`` its manifest does not name; returns 0 (not counted)."""
        self.behind.submit(self.inner.remove_uncommitted, node, manifest)
        return 0

    def remove_uncommitted_nodes(self, keep: set[str], keep_arrays: "set[str] | frozenset[str]" = frozenset()) -> int:
        """Remove what a resumed run did not commit (at once, after the queued writes)."""
        self.behind.wait()
        return self.inner.remove_uncommitted_nodes(keep, keep_arrays)

    def adopt_node(self, src: Any, name: str, kind: str, with_array: bool = True) -> None:
        """Take a node's files from another store (after the queued writes)."""
        self.behind.wait()
        self.inner.adopt_node(src, name, kind, with_array)

    def close(self) -> None:
        """Queue giving up the writer lock (run even after a failed write); no job may follow."""
        self.behind.submit(self.inner.close, always=True)
        self.behind.finish()

    # -- reading: after the queued writes -------------------------------------------------------
    def read_catalog(self) -> RunRecord:
        """The stored catalog (after the queued writes)."""
        self.behind.wait()
        return self.inner.read_catalog()

    def read_manifest(self, node: str) -> Manifest:
        """A node's manifest (after the queued writes)."""
        self.behind.wait()
        return self.inner.read_manifest(node)

    def shard_reader(self, node: str, strategy: str, record: ShardRecord, ndims: dict[int, int],
                     deadline: float | None = None) -> Any:
        """A shard's reader (after the queued writes)."""
        self.behind.wait()
        return self.inner.shard_reader(node, strategy, record, ndims, deadline)

    def load_operator(self, node: str) -> Any:
        """A node's stored operator (after the queued writes)."""
        self.behind.wait()
        return self.inner.load_operator(node)

    def array_meta_checksum(self, node: str) -> str:
        """The checksum of a stored ``zarr.json`` (after the queued writes)."""
        self.behind.wait()
        return self.inner.array_meta_checksum(node)

    def disk_bytes(self, node: str | None = None) -> int | None:
        """Bytes on disk (after the queued writes)."""
        self.behind.wait()
        return self.inner.disk_bytes(node)

    def writer(self) -> Any:
        """Who holds the writer lock (after the queued writes)."""
        self.behind.wait()
        return self.inner.writer()

    def __repr__(self) -> str:
        return f"BehindStore({self.inner!r}, {self.behind.pending} job(s) queued)"


class AfterWrites:
    """The `LineageReader` of a run written behind: every read waits for the writes first
    (once they are done, reads go straight to ``reader``)."""

    def __init__(self, reader: Any, behind: WriteBehind):
        self.reader, self.behind = reader, behind
        self._settled = False

    def wait(self) -> None:
        """Wait for the run's writes; raise the error that stopped them, if any."""
        if not self._settled:
            self.behind.wait()
            self._settled = True

    @property
    def url(self) -> str:
        """The store's URL."""
        return self.reader.url

    def read_catalog(self) -> RunRecord:
        """The stored catalog."""
        self.wait()
        return self.reader.read_catalog()

    def read_manifest(self, node: str) -> Manifest:
        """A node's manifest."""
        self.wait()
        return self.reader.read_manifest(node)

    def shard_reader(self, node: str, strategy: str, record: ShardRecord, ndims: dict[int, int],
                     deadline: float | None = None) -> Any:
        """A shard's reader."""
        self.wait()
        return self.reader.shard_reader(node, strategy, record, ndims, deadline)

    def array(self, node: str, meta_xxh3: str | None = None) -> Any:
        """A stored array's handle."""
        self.wait()
        return self.reader.array(node, meta_xxh3)

    def load_operator(self, node: str) -> Any:
        """A node's stored operator."""
        self.wait()
        return self.reader.load_operator(node)

    def disk_bytes(self, node: str | None = None) -> int | None:
        """Bytes on disk."""
        self.wait()
        return self.reader.disk_bytes(node)

    def writer(self) -> Any:
        """Who holds the writer lock."""
        self.wait()
        return self.reader.writer()

    def __getattr__(self, name: str) -> Any:  # anything else a FileStore offers readers
        if name in ("reader", "behind", "_settled"):
            raise AttributeError(name)
        self.wait()
        return getattr(self.reader, name)

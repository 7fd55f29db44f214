"""The Spark executor: one Spark task per tile (the only module that imports pyspark).

A task receives the pickled node task and one tile, reads its tile of the inputs from
the store, writes its output chunk and lineage shards into the store, and returns a
`subzero.runtime.TileMeta`: a few hundred bytes.  Only the metadata of successful
attempts reaches the driver, which commits exactly one shard per tile; shards of failed,
retried or speculative attempts are removed at commit.

Sessions, the pyspark way: a session that already exists (made by ``spark-submit`` or
by the user) is used as it is; otherwise an embedded ``local[*, 4]`` session is made
(four attempts per task, so a failed task is retried as on a cluster), or one for
``master`` (``spark://host:7077``), whose reachability is checked before a JVM starts.
"""

from __future__ import annotations

import os
import pickle
import shutil
import socket
import sys
import threading
from functools import partial
from urllib.parse import urlparse

from subzero.errors import SubZeroError, WorkflowError
from subzero.pickling import dumps_with_operator
from subzero.runtime import NodeTask, TileMeta, prepare_tile, run_tile
from subzero.tiling import Tile

__all__ = ["SparkExecutor", "get_session", "DEFAULT_MASTER"]

DEFAULT_MASTER = "local[*, 4]"
CONNECT_TIMEOUT = 10.0   # seconds to reach a standalone master before giving up
_ERROR_MARK = "subzero-task-error: "


def _check_java() -> None:
    if os.environ.get("JAVA_HOME") or shutil.which("java"):
        return
    raise SubZeroError(
        "Spark needs Java 17 or newer, and no 'java' is on PATH (JAVA_HOME is unset). "
        "Run 'bash scripts/setup.sh' (installs openjdk-17-jre-headless on Debian), "
        "or run the workflow with executor='local'")


def _check_reachable(master: str) -> None:
    """Fail fast, with one line, when a standalone master's address does not answer."""
    if not master.startswith("spark://"):
        return
    for hostport in master[len("spark://"):].split(","):
        parsed = urlparse("spark://" + hostport)
        try:
            with socket.create_connection((parsed.hostname, parsed.port or 7077), timeout=CONNECT_TIMEOUT):
                return
        except OSError:
            continue
    raise SubZeroError(f"Spark master {master} cannot be reached (no answer within {CONNECT_TIMEOUT:.0f} s); check "
                       "that the master runs, the host and port (default 7077), and the firewall")


def _active_session():
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession()


def get_session(master: str | None = None, log_level: str = "ERROR"):
    """The active Spark session, or a new one for ``master`` (default: embedded ``local[*, 4]``).

    A session that exists already (``spark-submit``, or one the user made) is returned as
    it is, whatever ``master`` says: its master was chosen by whoever made it.
    """
    _check_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    active = _active_session()
    if active is not None:
        return active
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("subzero")
    under_submit = bool(os.environ.get("PYSPARK_GATEWAY_PORT"))  # spark-submit started the JVM and chose a master
    if not under_submit:
        chosen = master or os.environ.get("SUBZERO_SPARK_MASTER", DEFAULT_MASTER)
        _check_reachable(chosen)
        builder = (builder.master(chosen)
                   .config("spark.driver.memory", os.environ.get("SUBZERO_DRIVER_MEMORY", "1g"))
                   .config("spark.ui.enabled", "false")
                   .config("spark.ui.showConsoleProgress", "false")
                   .config("spark.python.worker.reuse", "true"))
    builder = builder.config("spark.driver.maxResultSize", "512m")
    try:
        spark = builder.getOrCreate()
    except Exception as exc:
        raise SubZeroError(f"Spark could not start ({type(exc).__name__}: {str(exc).splitlines()[0][:300]}); "
                           "check the master URL and the Java installation, or use executor='local'") from None
    spark.sparkContext.setLogLevel(log_level)
    return spark


class SparkExecutor:
    """Runs a node's tiles as Spark tasks and collects their metadata."""

    name = "spark"

    def __init__(self, spark=None):
        self.spark = spark if spark is not None else get_session()

    @property
    def master(self) -> str:
        return self.spark.sparkContext.master

    def map_tiles(self, task: NodeTask, tiles: list[Tile], progress=None) -> list[TileMeta]:
        sc = self.spark.sparkContext
        group = f"subzero-{task.node}-{id(task)}"
        sc.setJobGroup(group, f"subzero node {task.node}", interruptOnCancel=True)
        payload = dumps_with_operator(task, task.operator, task.node)
        stop = threading.Event()
        watcher = None
        if progress is not None:
            watcher = threading.Thread(target=_watch, args=(sc, group, task.node, len(tiles), progress, stop),
                                       daemon=True)
            watcher.start()
        try:
            metas = sc.parallelize(tiles, max(len(tiles), 1)).map(partial(_run_pickled, payload)).collect()
        except KeyboardInterrupt:
            sc.cancelJobGroup(group)
            raise
        except Exception as exc:  # the Python error of the task, not the JVM's trace
            raise WorkflowError(f"node {task.node!r} failed on Spark: {_python_error(exc)}") from None
        finally:
            stop.set()
            if watcher is not None:
                watcher.join(timeout=2)
        if metas and task.operator.output_shape is None:
            task.operator.output_shape = metas[0].shape
        return metas


    def map_prepare(self, task: NodeTask, tiles: list[Tile]) -> list:
        """The first pass of a two-pass operator: every tile's summary, in tile order."""
        return self.map_calls(prepare_tile, task, tiles)

    def map_calls(self, fn, task: NodeTask, tiles: list[Tile]) -> list:
        """``fn(task, tile)`` for every tile as Spark tasks, in tile order; ``fn`` is a module-level
        function (pickled by reference) whose results are small (summaries, measurements)."""
        sc = self.spark.sparkContext
        sc.setJobDescription(f"subzero node {task.node} ({fn.__name__})")
        payload = dumps_with_operator(task, task.operator, task.node)
        try:
            return sc.parallelize(tiles, max(len(tiles), 1)).map(partial(_call_pickled, fn, payload)).collect()
        except Exception as exc:
            raise WorkflowError(f"node {task.node!r} failed on Spark: {_python_error(exc)}") from None


def _watch(sc, group: str, node: str, total: int, progress, stop: threading.Event) -> None:
    """Report finished tasks of the node's job as Spark's status tracker sees them."""
    done = 0
    tracker = sc.statusTracker()
    while not stop.wait(0.25):
        try:
            finished = 0
            for job in tracker.getJobIdsForGroup(group):
                info = tracker.getJobInfo(job)
                for stage in (info.stageIds if info else ()):
                    st = tracker.getStageInfo(stage)
                    finished += st.numCompletedTasks if st else 0
        except Exception:
            return
        if finished > done:
            progress.tiles_done(node, min(finished, total) - done)
            done = min(finished, total)


def _run_pickled(payload: bytes, tile: Tile) -> TileMeta:
    """Task body: the task travels as our own pickle, so operators defined in any user
    module (not importable on the workers) still run.  Errors carry a marker so the
    driver can report the Python error alone."""
    try:
        return run_tile(pickle.loads(payload), tile)
    except Exception as exc:
        raise RuntimeError(f"{_ERROR_MARK}{type(exc).__name__}: {exc}".replace("\n", " ")) from exc


def _call_pickled(fn, payload: bytes, tile: Tile):
    try:
        return fn(pickle.loads(payload), tile)
    except Exception as exc:
        raise RuntimeError(f"{_ERROR_MARK}{type(exc).__name__}: {exc}".replace("\n", " ")) from exc


def _python_error(exc: Exception) -> str:
    text = str(exc)
    for line in text.splitlines():
        if _ERROR_MARK in line:
            return line.split(_ERROR_MARK, 1)[1].strip()[:500]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        head = ln.split(":")[0]
        if ("Error" in head or "Exception" in head) and not ln.startswith(("at ", "org.apache", "py4j")):
            return ln[:500]
    return (lines[-1] if lines else type(exc).__name__)[:500]

"""The Spark executor: one Spark task per tile (the only module that imports pyspark).

The embedded default is a ``local[*, 4]`` session (four attempts per task, so a failed
task is retried as on a cluster); pass ``spark=`` to use any other session, e.g. one
whose master is a standalone cluster (``spark://host:7077``).
"""

from __future__ import annotations

import os
import pickle
import shutil
import sys
from functools import partial

from subzero.errors import SubZeroError, WorkflowError
from subzero.pickling import dumps_with_operator
from subzero.runtime import NodeTask, TileResult, run_tile
from subzero.tiling import Tile

__all__ = ["SparkExecutor", "get_session"]

DEFAULT_MASTER = "local[*, 4]"


def _check_java() -> None:
    if os.environ.get("JAVA_HOME") or shutil.which("java"):
        return
    raise SubZeroError(
        "Spark needs Java 17 or newer, and no 'java' is on PATH (JAVA_HOME is unset). "
        "Run 'bash scripts/setup.sh' (installs openjdk-17-jre-headless on Debian), "
        "or run the workflow with executor='local'")


def get_session(master: str | None = None):
    """The active Spark session, or a new embedded one (``local[*, 4]`` by default)."""
    _check_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and master is None:
        return active
    spark = (
        SparkSession.builder.master(master or os.environ.get("SUBZERO_SPARK_MASTER", DEFAULT_MASTER))
        .appName("subzero")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", os.environ.get("SUBZERO_DRIVER_MEMORY", "4g"))
        .config("spark.driver.maxResultSize", "0")
        .config("spark.python.worker.reuse", "true")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class SparkExecutor:
    """Runs a node's tiles as Spark tasks; only results of successful tasks come back, so
    a retried or speculative task never duplicates or loses lineage."""

    name = "spark"

    def __init__(self, spark=None):
        self.spark = spark if spark is not None else get_session()

    def map_tiles(self, task: NodeTask, tiles: list[Tile]) -> list[TileResult]:
        sc = self.spark.sparkContext
        sc.setJobDescription(f"subzero node {task.node}")
        payload = dumps_with_operator(task, task.operator, task.node)
        try:
            return sc.parallelize(tiles, max(len(tiles), 1)).map(partial(_run_pickled, payload)).collect()
        except Exception as exc:  # Py4J / PythonException: report the Python error, not the JVM trace
            raise WorkflowError(f"node {task.node!r} failed on Spark: {_python_error(exc)}") from exc


def _run_pickled(payload: bytes, tile: Tile) -> TileResult:
    """Task body: the task travels as our own pickle, so operators defined in any user
    module (not importable on the workers) still run."""
    return run_tile(pickle.loads(payload), tile)


def _python_error(exc: Exception) -> str:
    text = str(exc)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "Error" in ln.split(":")[0] or "Exception" in ln.split(":")[0]:
            if not ln.startswith(("at ", "org.apache", "py4j")):
                return ln[:500]
    return (lines[-1] if lines else type(exc).__name__)[:500]

"""Where a run's tasks run: the executor contract, its two implementations, and the factory.

`base` holds the contract (`Executor.map`, one primitive: a function over items, with a
`Job` naming it and a progress reporter), `local` the in-process executor (threads), `spark`
the Spark executor and sessions (the only pyspark user), `tasks` the task kinds as plain
functions over an executor.  `make_executor` and `check_executor` turn the name a user gives
("local", "spark") into one, for the driver and for replay alike.
"""

from __future__ import annotations

from typing import Any

from subzero.errors import StoreError, WorkflowError
from subzero.executors.base import Executor, Job
from subzero.executors.local import LocalExecutor

__all__ = ["Executor", "Job", "LocalExecutor", "make_executor", "check_executor"]


def make_executor(executor: str, spark: Any = None) -> Executor:
    """The executor named ``executor``: "local" (threads here) or "spark" (on ``spark``, a
    `pyspark.sql.SparkSession`, or on `subzero.executors.spark.get_session`'s)."""
    check_executor(executor, "")
    if executor == "local":
        return LocalExecutor()
    from subzero.executors.spark import SparkExecutor

    return SparkExecutor(spark)


def check_executor(executor: str, store_url: str) -> None:
    """Refuse what cannot work before anything starts: an unknown executor name, or Spark
    over a store in this process's memory (``memory://``), which its workers cannot see.

    Raises
    ------
    WorkflowError
        For an unknown name.
    StoreError
        For Spark over a ``memory://`` store.
    """
    if executor not in ("spark", "local"):
        raise WorkflowError(f"unknown executor {executor!r}; use 'spark' (default) or 'local'")
    if executor == "spark" and store_url.startswith("memory://"):
        raise StoreError(f"store {store_url!r} lives in this process's memory, which Spark's workers cannot see; "
                         "use executor='local' or a store on a file system the workers share")

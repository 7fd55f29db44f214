"""Where a statistic's tasks run: in this process or as Spark tasks, which arguments travel to
Spark's executors by reference, and the run each executor process opens once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from subzero.errors import LineageError
from subzero.stats.chunks import is_lazy

__all__ = ["SPARK_CELLS", "executor_for", "travels", "opened_run"]

#: label arrays at least this large are answered on Spark's executors when the run used Spark
SPARK_CELLS = 10**8

_RUNS: dict[str, Any] = {}


def executor_for(run: Any, executor: str | None, size: int) -> str:
    """``"local"`` or ``"spark"``: the ``executor`` asked for, checked; None picks Spark for an
    array of at least `SPARK_CELLS` cells of a run made on Spark, else this process."""
    if executor is None:
        return "spark" if run.catalog.executor == "spark" and size >= SPARK_CELLS else "local"
    if executor not in ("local", "spark"):
        raise LineageError(f"executor={executor!r}: use 'local' (this process), 'spark' (the executors) or None "
                           "(Spark for large arrays of runs made on Spark)")
    return executor


def travels(arg: Any) -> bool:
    """True when ``arg`` goes to Spark's tasks by reference (a node's name, a chunked array-like
    such as a Zarr array), not by value."""
    return isinstance(arg, str) or (is_lazy(arg) and getattr(arg, "chunks", None) is not None)


def opened_run(store: str, opener: Callable[[str], Any] | None) -> Any:
    """The run of ``store``, opened with ``opener`` once per process (Spark's Python workers keep
    it between tasks)."""
    if store not in _RUNS:
        if opener is None:  # pragma: no cover - the statistics send Spark only questions with one
            raise LineageError(f"a lineage statistics task outside the driver needs the run's opener to open {store}")
        _RUNS[store] = opener(store)
    return _RUNS[store]

"""Clocks, sizes and the machine: what every benchmark measures the same way."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import time
from pathlib import Path
from typing import Callable, TypeVar

__all__ = ["best_of", "timed", "dir_bytes", "machine_info", "now_iso", "load_average", "BENCH_HOME", "child_pythonpath"]

T = TypeVar("T")

#: the folder holding ``subzero_bench`` (a checkout's ``benchmarks/``): a child process that imports
#: the benchmarks finds them there, whichever subzero tree it measures
BENCH_HOME = Path(__file__).resolve().parents[1]


def child_pythonpath(*roots: str | Path | None) -> str:
    """``PYTHONPATH`` for a child process: ``roots`` first (the subzero tree it measures; the
    ones given as None or empty are left out), then `BENCH_HOME`, so ``subzero_bench`` imports
    even when it is not installed (or the tree measured is an older one).

    Examples
    --------
    >>> child_pythonpath("/old/tree", None).split(os.pathsep)[0]
    '/old/tree'
    >>> child_pythonpath().endswith("benchmarks")
    True
    """
    return os.pathsep.join([str(r) for r in roots if r] + [str(BENCH_HOME)])


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    """Call ``fn`` once; return its result and the wall-clock seconds it took.

    Examples
    --------
    >>> value, seconds = timed(lambda: sum(range(10)))
    >>> value
    45
    """
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def best_of(fn: Callable[[], T], repeat: int = 3, budget: float = 1.0) -> tuple[T, float]:
    """The fastest of up to ``repeat`` calls of ``fn``, repeating only while the calls
    so far took less than ``budget`` seconds in total (slow calls are timed once).

    Returns the result of the first call and the minimum time.

    Examples
    --------
    >>> value, seconds = best_of(lambda: 2 + 2, repeat=3)
    >>> value
    4
    """
    value, best = timed(fn)
    spent = best
    for _ in range(repeat - 1):
        if spent >= budget:
            break
        _, seconds = timed(fn)
        spent += seconds
        best = min(best, seconds)
    return value, best


def dir_bytes(path: str | os.PathLike) -> int:
    """Total length of the files under ``path`` (an LMDB data file grows with its pages)."""
    return sum((Path(root) / name).stat().st_size for root, _, files in os.walk(path) for name in files)


def machine_info() -> dict[str, object]:
    """CPU model, cores, memory, OS and Python of this machine (Linux /proc files)."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kb = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "nproc": os.cpu_count(),
        "memory_gb": round(mem_kb / 1024**2, 1) if mem_kb else None,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
    }


def now_iso() -> str:
    """The current UTC time, to the second."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def load_average() -> list[float]:
    """The machine's load over 1, 5 and 15 minutes (as ``uptime`` prints it), rounded; [] where unknown."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:  # pragma: no cover
        return []

"""Benchmarks after the SubZero paper's section VIII: astronomy, genomics, micro, and the
project's own (scale, faults, trace, stats, coldquery, capture, dataplane, viewer, traced).

A distribution of its own (``subzero-benchmarks``, in the checkout's ``benchmarks/``): the
``subzero`` package ships no benchmark code, and its ``subzero bench NAME`` command imports
this package on demand (`run_command`); ``python -m subzero_bench NAME`` does the same.

`main` runs one benchmark and writes ``results.json`` (figures with units and
baselines), ``REPORT.md`` (our numbers beside the paper's) and PNG figures into an
output directory; `write_summary` combines several into one markdown report.

Examples
--------
>>> import subzero_bench as bench
>>> bench.main("micro", quick=True, out_dir="benchmarks/results/micro")   # doctest: +SKIP
0
>>> "faults" in COMMANDS and set(BENCHES) < set(COMMANDS)
True
"""

from __future__ import annotations

import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from subzero_bench.results import read_json, write_json
from subzero_bench.timing import machine_info, now_iso
from subzero.errors import SubZeroError

__all__ = ["main", "run_bench", "run_command", "render_dir", "write_summary", "BENCHES", "COMMANDS"]

#: the benchmarks `run_bench` runs (results.json, REPORT.md and figures through `render_dir`)
BENCHES = ("astronomy", "genomics", "micro", "scale", "trace", "stats", "coldquery", "capture", "dataplane",
           "traced")
#: every ``subzero bench NAME``: BENCHES, the two that write their own report (faults, viewer), and
#: ``refresh`` (re-runs the benchmarks behind RESULTS.md and rewrites their sections: `subzero_bench.refresh`)
COMMANDS = BENCHES + ("faults", "viewer", "refresh")


def _runner(name: str) -> Callable[..., dict[str, Any]]:
    if name == "astronomy":
        from subzero_bench.astronomy import run_astronomy
        return lambda quick, root, size, **kw: run_astronomy(quick, root, shape=size, **kw)
    if name == "genomics":
        from subzero_bench.genomics import run_genomics
        return lambda quick, root, size, **kw: run_genomics(quick, root, scale=size, **kw)
    if name == "micro":
        from subzero_bench.micro import run_micro
        return lambda quick, root, size, **kw: run_micro(quick, root, size=size, **kw)
    if name == "scale":
        from subzero_bench.scale import run_scale
        return lambda quick, root, size, log=print, max_=False, **kw: run_scale(quick, root, sides=size, log=log,
                                                                                 max_=max_)
    if name == "trace":
        from subzero_bench.trace import run_trace
        return lambda quick, root, size, **kw: run_trace(quick, root, size=size, **kw)
    if name == "stats":
        from subzero_bench.stats import run_stats
        return lambda quick, root, size, log=print, executor="spark", **kw: run_stats(
            quick, root, side=size, log=log, spark=executor == "spark")
    if name == "coldquery":
        from subzero_bench.coldquery import run_coldquery
        return lambda quick, root, size, log=print, **kw: run_coldquery(quick, root, size=size, log=log)
    if name == "capture":
        from subzero_bench.capture import run_capture
        return lambda quick, root, size, log=print, **kw: run_capture(quick, root, size=size, log=log)
    if name == "dataplane":
        from subzero_bench.dataplane import run_dataplane
        return lambda quick, root, size, log=print, **kw: run_dataplane(quick, root, size=size, log=log)
    if name == "traced":
        from subzero_bench.traced import run_traced
        return lambda quick, root, size, log=print, **kw: run_traced(quick, root, size=size, log=log)
    raise SubZeroError(f"unknown benchmark {name!r}; choose one of {', '.join(BENCHES)}")


def run_bench(name: str, quick: bool, out_dir: str | Path, size=None, executor: str = "spark",
              spark=None, command: str | None = None, log: Callable[[str], None] | None = None,
              use_optimizer: bool | None = None, **options) -> dict[str, Any]:
    """Run benchmark ``name`` and write its results, report and figures into ``out_dir``.

    Parameters
    ----------
    name : {"astronomy", "genomics", "micro"}
    quick : bool
        Small inputs and a reduced grid (each bench finishes in under two minutes).
    out_dir : path
        Created if missing; ``results.json``, ``REPORT.md`` and ``*.png`` are overwritten.
        The runs' stores live in a temporary sub-directory, deleted at the end.
    size : optional
        Override the input size (tests): the image shape for astronomy, the patient
        replication factor for genomics, the array side for micro.
    executor, spark
        ``"spark"`` (default: the embedded local session, one per process) or ``"local"``.
    command : str, optional
        The command line to record (default: this process's).
    log : callable, optional
        Receives one progress line at a time (default: print).
    use_optimizer : bool, optional
        Astronomy and genomics: override `subzero_bench.configs.USE_OPTIMIZER`.

    Returns
    -------
    dict
        The results document written to ``results.json``.
    """
    runner = _runner(name)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    log = log or (lambda line: print(line, flush=True))
    # scale runs each configuration in a new process; stats starts Spark only for its Spark row
    if executor == "spark" and spark is None and name not in ("scale", "stats", "coldquery", "capture", "dataplane",
                                                                  "traced"):
        from subzero.executors.spark import get_session

        spark = get_session()
    stores = Path(tempfile.mkdtemp(prefix="stores-", dir=out))
    start = time.perf_counter()
    try:
        extra = {} if use_optimizer is None or name in ("micro", "scale") else {"use_optimizer": use_optimizer}
        if name == "scale":
            extra["max_"] = bool(options.get("max_", False))
        body = runner(quick, stores, size, executor=executor, spark=spark, log=log, **extra)
    finally:
        shutil.rmtree(stores, ignore_errors=True)
    doc = {"bench": name, "quick": bool(quick), "date": now_iso(), "machine": machine_info(),
           "command": command or shlex.join([Path(sys.argv[0]).name] + sys.argv[1:]),
           "seconds": time.perf_counter() - start} | body
    write_json(out / "results.json", doc)
    plots = render_dir(out)
    log(f"{name}: wrote {out / 'results.json'}, {out / 'REPORT.md'} and {len(plots)} figures "
        f"in {doc['seconds']:.0f} s")
    return read_json(out / "results.json")


def render_dir(out_dir: str | Path) -> list[str]:
    """(Re)draw the figures and write REPORT.md from ``out_dir/results.json``; returns the
    figure file names."""
    from subzero_bench.plots import plot
    from subzero_bench.report import render

    out = Path(out_dir)
    doc = read_json(out / "results.json")
    plots = plot(doc, out)
    (out / "REPORT.md").write_text(render(doc, plots))
    return plots


def main(name: str, quick: bool = False, out_dir: str | None = None, **options) -> int:
    """The entry point of ``subzero bench NAME [--quick] [--out DIR]``: run one benchmark
    (see `run_bench`; default ``out_dir``: ``benchmarks/results/NAME``); returns 0."""
    run_bench(name, quick, out_dir or f"benchmarks/results/{name}", **options)
    return 0


def run_command(name: str, quick: bool = False, out_dir: str | None = None, max_: bool = False,
                shape: tuple[int, int] | None = None) -> int:
    """``subzero bench NAME`` (and ``python -m subzero_bench NAME``): run one of `COMMANDS` into
    ``out_dir`` (default ``benchmarks/results/NAME``); the exit status (faults and viewer: 1 when
    a trial failed or a target was missed).

    Parameters
    ----------
    name : str
        One of `COMMANDS`.
    quick : bool
        Small sizes: each finishes in under two minutes.
    out_dir : str, optional
        The output directory (refresh: the results file rewritten, default ``benchmarks/RESULTS.md``).
    max_ : bool
        scale only: also 1e9 cells.
    shape : tuple of int, optional
        viewer only: the astronomy images' shape (default 800 x 20,000; the default ``out_dir`` is then
        ``benchmarks/results/viewer-HxW``).
    """
    if name == "refresh":  # out_dir: the results file rewritten
        import os

        from subzero_bench.refresh import refresh

        sections = [s for s in os.environ.get("SUBZERO_REFRESH_SECTIONS", "").split(",") if s]
        return refresh(sections or None, quick=quick, results=out_dir)
    out = out_dir or (f"benchmarks/results/{name}-{shape[0]}x{shape[1]}" if shape else f"benchmarks/results/{name}")
    if name == "viewer":
        from subzero_bench.viewer import run_viewer

        return 0 if all(run_viewer(out, quick=quick, shape=shape)["met"].values()) else 1
    if name == "faults":
        from subzero_bench.faults import run_faults

        return 0 if run_faults(out, quick=quick)["ok"] else 1
    extra = {"max_": max_} if name == "scale" else {}
    return main(name, quick=quick, out_dir=out, **extra)


def write_summary(result_dirs: list[str | Path], path: str | Path, preface: str = "") -> Path:
    """Combine the reports in ``result_dirs`` (each holding results.json and REPORT.md)
    into one markdown file at ``path``."""
    from subzero_bench.report import render_summary

    dirs = [Path(d) for d in result_dirs]
    docs = [read_json(d / "results.json") for d in dirs]
    path = Path(path)
    path.write_text(render_summary(docs, [d / "REPORT.md" for d in dirs], path.parent, preface))
    return path

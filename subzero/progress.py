"""Progress of a run and diagnostics: progress reporters, logging, Spark's log level.

A run reports progress to the object given as ``wf.run(..., progress=reporter)``; the
executor calls, from any thread::

    reporter.node_started("blur", 16)      # a node starts, as 16 tiles (Spark tasks)
    reporter.tiles_done("blur", 1)         # more tiles finished
    reporter.node_finished("blur")         # done (``ok=False``: it failed)

`Reporter` is the no-op base. The command line picks one with `choose_reporter`: a
`TerminalReporter` (a live display: an overall bar, one bar per running node with tiles
done / total and elapsed time) when stderr is a terminal and ``--quiet`` is not given, else
a `LoggingReporter` (one INFO line per node, shown with ``-v``). Diagnostics go through
`logging` under the ``subzero`` logger (`configure_logging`); results stay on stdout.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any, TextIO

__all__ = [
    "Reporter", "LoggingReporter", "TerminalReporter", "choose_reporter", "configure_logging", "current_verbosity",
    "spark_log_level", "spark_conf", "LOGGER",
]

LOGGER = "subzero"
log = logging.getLogger(__name__)


class Reporter:
    """Receives a run's progress; this base class ignores it (the default reporter).

    Every method may be called from any thread. A node may be started more than once
    (e.g. computed, then re-run to capture lineage); each start begins a new count.
    """

    def run_started(self, workflow: str, n_nodes: int) -> None:
        """A run of ``workflow`` with ``n_nodes`` nodes (inputs included) begins (called by the CLI)."""

    def run_finished(self, ok: bool = True) -> None:
        """The run ended: every node done (``ok``), or it failed or was interrupted (called by the CLI)."""

    def node_started(self, name: str, n_tiles: int) -> None:
        """Node ``name`` starts running as ``n_tiles`` tiles (Spark tasks)."""

    def tiles_done(self, name: str, n: int = 1) -> None:
        """``n`` more tiles of node ``name`` finished."""

    def node_finished(self, name: str, ok: bool = True) -> None:
        """Node ``name`` finished: all its tiles (``ok``), or it failed (``ok=False``)."""

    def note(self, text: str) -> None:
        """A one-line event outside any node (the Spark session started, and how long it took)."""

    def close(self) -> None:
        """The run is over: release the display (the reporter is not used again)."""


class LoggingReporter(Reporter):
    """One INFO log line per finished node: its tiles and wall time (seen with ``-v``)."""

    def __init__(self, logger: logging.Logger | None = None):
        self._log = logger or logging.getLogger(f"{LOGGER}.progress")
        self._lock = threading.Lock()
        self._nodes: dict[str, list] = {}  # name -> [tiles done, total, start]
        self._run_start = time.perf_counter()

    def run_started(self, workflow: str, n_nodes: int) -> None:
        self._run_start = time.perf_counter()
        self._log.info("running workflow %r: %d node(s)", workflow, n_nodes)

    def run_finished(self, ok: bool = True) -> None:
        self._log.info("run %s after %.1f s", "finished" if ok else "stopped", time.perf_counter() - self._run_start)

    def note(self, text: str) -> None:
        self._log.info("%s", text)

    def node_started(self, name: str, n_tiles: int) -> None:
        with self._lock:
            self._nodes[name] = [0, int(n_tiles), time.perf_counter()]
        self._log.debug("node %s: started, %d tile(s)", name, n_tiles)

    def tiles_done(self, name: str, n: int = 1) -> None:
        with self._lock:
            if name in self._nodes:
                self._nodes[name][0] += int(n)

    def node_finished(self, name: str, ok: bool = True) -> None:
        with self._lock:
            done, total, start = self._nodes.pop(name, [0, 0, time.perf_counter()])
        if ok:
            self._log.info("node %s: %d tile(s) in %.2f s", name, total, time.perf_counter() - start)
        else:
            self._log.info("node %s: failed after %d/%d tile(s), %.2f s", name, done, total,
                           time.perf_counter() - start)


class TerminalReporter(Reporter):
    """A live display on a terminal (rich): an overall bar counting finished nodes, and one
    bar per running node with tiles done / total and elapsed time.

    A finished node's bar leaves the display (a failed one stays, marked failed), so a
    workflow of any size keeps a display a few lines high; with ``verbose`` each finished
    node also leaves one line above it.

    Parameters
    ----------
    stream
        Where to draw (default: ``sys.stderr``, keeping stdout for results).
    verbose
        Print a line per finished node.
    """

    def __init__(self, stream: TextIO | None = None, verbose: bool = False):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._console = Console(file=stream or sys.stderr)
        self._progress = Progress(
            TextColumn("{task.description:>20}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[unit]}"),
            TimeElapsedColumn(), console=self._console, transient=False)
        self._verbose = verbose
        self._lock = threading.Lock()
        self._tasks: dict[str, tuple[Any, int, float]] = {}  # node -> (rich task id, tiles, start)
        self._overall: Any = None
        self._overall_total = 0
        self._finished: set[str] = set()
        self._started = False

    def _start(self) -> None:
        if not self._started:
            self._progress.start()
            self._started = True

    def run_started(self, workflow: str, n_nodes: int) -> None:
        with self._lock:
            self._start()
            self._overall_total = max(int(n_nodes), 1)
            self._overall = self._progress.add_task(f"workflow {workflow}", total=self._overall_total, unit="nodes")

    def run_finished(self, ok: bool = True) -> None:
        with self._lock:
            if self._overall is not None:
                if ok:
                    self._progress.update(self._overall, completed=self._overall_total)
                self._progress.stop_task(self._overall)

    def node_started(self, name: str, n_tiles: int) -> None:
        with self._lock:
            self._start()
            old = self._tasks.pop(name, None)
            if old is not None:  # started again before it finished: a fresh bar
                self._progress.remove_task(old[0])
            total = max(int(n_tiles), 1)
            self._tasks[name] = (self._progress.add_task(name, total=total, unit="tiles"), total, time.perf_counter())

    def tiles_done(self, name: str, n: int = 1) -> None:
        with self._lock:
            task = self._tasks.get(name)
            if task is not None:
                self._progress.advance(task[0], int(n))

    def node_finished(self, name: str, ok: bool = True) -> None:
        with self._lock:
            task = self._tasks.pop(name, None)
            if task is not None:
                if ok:
                    self._progress.remove_task(task[0])
                    if self._verbose:
                        self._progress.console.print(
                            f"{name:>20} {task[1]} tile(s) in {time.perf_counter() - task[2]:.2f} s", highlight=False)
                else:
                    self._progress.update(task[0], description=f"{name} (failed)")
                    self._progress.stop_task(task[0])
            if ok and self._overall is not None and name not in self._finished:
                self._finished.add(name)
                self._progress.update(self._overall, completed=min(len(self._finished), self._overall_total))

    def note(self, text: str) -> None:
        with self._lock:
            self._start()
            self._progress.console.print(f"{text}", highlight=False)

    def close(self) -> None:
        with self._lock:
            if self._started:
                self._progress.stop()
                self._started = False


def choose_reporter(stream: TextIO | None = None, quiet: bool = False, verbose: bool = False) -> Reporter:
    """The reporter the command line uses: none with ``quiet``, a live display when
    ``stream`` (default stderr) is a terminal (a line per node too if ``verbose``), else
    one log line per node (shown with ``-v``)."""
    stream = stream if stream is not None else sys.stderr
    if quiet:
        return Reporter()
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        try:
            return TerminalReporter(stream, verbose=verbose)
        except ImportError:  # rich missing: degrade to log lines
            log.debug("rich is not installed: progress as log lines")
    return LoggingReporter()


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at emit time (so a live progress display that
    redirects stderr keeps log lines above its bars)."""

    def __init__(self, stream: TextIO | None = None):
        super().__init__(stream)
        self._fixed = stream

    @property
    def stream(self):  # type: ignore[override]
        return self._fixed if self._fixed is not None else sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # logging.StreamHandler.__init__ assigns it
        pass


def configure_logging(verbosity: int = 0, quiet: bool = False, stream: TextIO | None = None) -> logging.Logger:
    """Set up the ``subzero`` logger for the command line.

    Parameters
    ----------
    verbosity
        Count of ``-v``: 0 shows warnings and errors, 1 adds INFO (per-node progress lines,
        inputs loaded, Spark warnings), 2 adds DEBUG.
    quiet
        Only errors.
    stream
        Where log lines go (default: ``sys.stderr`` at the time of each line).

    Examples
    --------
    >>> import io; buf = io.StringIO()
    >>> _ = configure_logging(1, stream=buf)
    >>> logging.getLogger("subzero.cli").info("loaded x"); buf.getvalue()
    'subzero: loaded x\\n'
    """
    global _verbosity
    _verbosity = -1 if quiet else int(verbosity)
    logger = logging.getLogger(LOGGER)
    for handler in list(logger.handlers):
        if getattr(handler, "_subzero", False):
            logger.removeHandler(handler)
    level = logging.ERROR if quiet else (logging.WARNING, logging.INFO)[min(verbosity, 1)] if verbosity < 2 \
        else logging.DEBUG
    handler = _StderrHandler(stream)
    handler._subzero = True  # type: ignore[attr-defined]
    fmt = "%(asctime)s %(name)s %(levelname)s: %(message)s" if verbosity >= 2 else "subzero: %(message)s"
    handler.setFormatter(_LevelPrefix(fmt))
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    logging.getLogger("py4j").setLevel(logging.DEBUG if verbosity >= 3 else logging.WARNING)
    return logger


_verbosity = 0


def current_verbosity() -> int:
    """The ``-v`` count the command line was given (-1 with ``--quiet``; 0 outside the CLI), so
    the module that starts Spark can pass ``spark_conf(current_verbosity())`` and
    ``spark_log_level(current_verbosity())`` without the value travelling through ``wf.run``."""
    return _verbosity


class _LevelPrefix(logging.Formatter):
    """``subzero: warning: ...`` for warnings and errors, ``subzero: ...`` for information."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if record.levelno >= logging.WARNING and text.startswith("subzero: "):
            text = f"subzero: {record.levelname.lower()}: {text[len('subzero: '):]}"
        return text


def spark_log_level(verbosity: int) -> str:
    """The log4j level for Spark at a ``-v`` count: ``"OFF"`` by default (a failing task's
    JVM trace is noise: the Python error is reported instead), ``"WARN"``, ``"INFO"``,
    ``"DEBUG"`` with ``-v``, ``-vv``, ``-vvv``.

    For ``SparkContext.setLogLevel`` once the session exists.

    Examples
    --------
    >>> spark_log_level(0), spark_log_level(1)
    ('OFF', 'WARN')
    """
    return ("OFF", "WARN", "INFO", "DEBUG")[max(0, min(int(verbosity), 3))]


def spark_conf(verbosity: int = 0) -> dict[str, str]:
    """Spark settings that keep log4j and Spark's own progress bar out of the terminal
    from the moment the JVM starts (``setLogLevel`` only helps after the session exists).

    For ``SparkSession.builder.config(key, value)`` when subzero creates the session
    (not for a session that ``spark-submit`` or the user made): the driver's log4j2 level
    comes from a system property read by the configuration file shipped with subzero.

    Examples
    --------
    >>> spark_conf(0)["spark.ui.showConsoleProgress"]
    'false'
    """
    from pathlib import Path

    config = Path(__file__).with_name("log4j2.properties").resolve()
    level = spark_log_level(verbosity).lower()
    return {
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={config.as_uri()} -Dsubzero.log.level={level}",
        "spark.ui.showConsoleProgress": "false",
    }

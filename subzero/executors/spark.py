"""The Spark executor: a node's tiles as Spark tasks (the only module that imports pyspark).

A task receives the pickled node task and a few neighbouring tiles (``tasks_per_core``
tasks per core of the session, so Spark's per-task cost is paid per core, not per tile);
for each tile it reads its tile of the inputs from the store, writes its output chunk and
lineage shards into the store, and returns a `subzero.worker.TileMeta`: a few hundred
bytes.  Only the metadata of successful
attempts reaches the driver, which commits exactly one shard per tile; shards of failed,
retried or speculative attempts are removed at commit.

Sessions, the pyspark way: a session that already exists (made by ``spark-submit`` or
by the user) is used as it is; otherwise an embedded ``local[*, 4]`` session is made
(four attempts per task, so a failed task is retried as on a cluster), or one for
``master`` (``spark://host:7077``).  A standalone master fails fast and says why, in one
line: its address is tried with a socket before a JVM starts (``spark_connect_timeout``; a port
that answers HTTP is a web UI, not a master), the session must start and the master
register the application within ``spark_start_timeout`` (a master that never registers it is no
Spark master or another version), and a first executor must register within
``spark_executor_timeout`` (a master without free workers would leave every job waiting, silently).

A task's error reaches the driver as pyspark's ``PythonException`` (its text is the
worker's traceback); the driver reports the operator's own error, ``ValueError: ...``,
from it, not the JVM's stack.
"""

from __future__ import annotations

import itertools
import logging
import os
import pickle
import shutil
import socket
import sys
import threading
import time
from contextlib import contextmanager
from functools import partial
from typing import Any, Callable, Sequence, TypeVar
from urllib.parse import urlparse

from subzero import config
from subzero.errors import SubZeroError, WorkflowError
from subzero.executors.base import Executor, Job, payload
from subzero.progress import Reporter
from subzero.store.lock import pid_alive

__all__ = ["SparkExecutor", "get_session", "DEFAULT_MASTER"]

DEFAULT_MASTER = "local[*, 4]"
# The limits below are settings (`subzero.config`), read at use:
#: ``spark_connect_timeout``: seconds to reach a standalone master's address before giving up;
#: ``spark_start_timeout``: seconds for a session with a standalone master to start: the driver's
#: JVM and SparkContext (14-18 s on a loaded 2-core machine) and the master registering the
#: application (a master that never answers the registration is given up by Spark itself after
#: about 60 s); ``spark_executor_timeout``: seconds for a standalone master to give the application
#: its first executor; ``tasks_per_core``: Spark tasks per core of the session (a task runs several
#: tiles in turn, so a node's stage pays Spark's per-task cost a few times per core, not once per tile)
_ERROR_MARK = "subzero-task-error: "
log = logging.getLogger(__name__)


def _check_java() -> None:
    if os.environ.get("JAVA_HOME") or shutil.which("java"):
        return
    raise SubZeroError(
        "Spark needs Java 17 or newer, and no 'java' is on PATH (JAVA_HOME is unset). "
        "Run 'bash scripts/setup.sh' (installs openjdk-17-jre-headless on Debian), "
        "or run the workflow with executor='local'")


def _check_reachable(master: str) -> None:
    """Fail fast, with one line, when a standalone master's address does not answer, or
    answers as no Spark master does (`_probe`)."""
    if not master.startswith("spark://"):
        return
    for hostport in master[len("spark://"):].split(","):
        parsed = urlparse("spark://" + hostport)
        try:
            with socket.create_connection((parsed.hostname, parsed.port or 7077), timeout=config.get("spark_connect_timeout")) as sock:
                answer = _probe(sock, parsed.hostname)
        except OSError:
            continue
        if answer == "http":
            raise SubZeroError(f"{hostport} answers HTTP: it is a web server (a Spark master's web UI is port "
                               "8080), not a Spark master; give the master's own URL, spark://host:7077, as its log "
                               "and web UI show it")
        if answer != "closed":
            raise SubZeroError(f"Spark master {master} answers but is no Spark master ({answer}: a Spark master "
                               "drops a message it cannot read at once); check the host and port (default 7077)")
        return
    raise SubZeroError(f"Spark master {master} cannot be reached (no answer within {config.get('spark_connect_timeout'):.0f} s); check "
                       "that the master runs, the host and port (default 7077), and the firewall")


#: a server has ``spark_probe_timeout`` seconds (`subzero.config`) to react to `_probe`'s message
#: (a Spark master closes at once)


def _probe(sock: socket.socket, host: str | None) -> str:
    """How the server behind ``sock`` reacts to an HTTP request: ``"http"`` (a web server),
    ``"closed"`` (what a Spark master's RPC port does with a frame it cannot read), ``"silent"``
    (nothing within ``spark_probe_timeout``) or ``"other"`` (another protocol's answer)."""
    try:
        sock.settimeout(config.get("spark_probe_timeout"))
        sock.sendall(f"HEAD / HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
        head = sock.recv(5)
    except socket.timeout:
        return "silent"
    except OSError:  # reset: closed
        return "closed"
    if not head:
        return "closed"
    return "http" if head == b"HTTP/" else "other"


def _standalone(master: str | None) -> bool:
    return bool(master) and master.startswith("spark://")


def _create(builder, master: str | None):
    """``builder.getOrCreate()``; for a standalone master, watched while it starts.

    Starting is the driver's JVM, then the SparkContext, then the master registering the
    application (``getOrCreate`` returns once it did).  On a busy machine that takes tens of
    seconds, so no step has a tight limit: the whole is given ``spark_start_timeout``, progress is
    logged (``-v``) every 15 s, and a master that never registers the application (no Spark
    master, or another Spark version: its messages are not understood) is reported as such
    when Spark gives up on it.
    """
    if not _standalone(master):
        return builder.getOrCreate()
    from pyspark import SparkContext

    box: dict = {}

    def create() -> None:
        try:
            box["session"] = builder.getOrCreate()
        except BaseException as exc:  # handed to the caller
            box["error"] = exc

    limit = config.get("spark_start_timeout")
    started = time.monotonic()
    worker = threading.Thread(target=create, name="subzero-spark-start", daemon=True)
    worker.start()
    said = started
    while worker.is_alive() and time.monotonic() - started < limit:
        worker.join(0.2)
        if time.monotonic() - said >= 15:
            said = time.monotonic()
            step = "the driver's JVM is starting" if SparkContext._gateway is None else \
                f"waiting for {master} to register the application"
            log.info("Spark start-up: %s (%.0f s)", step, said - started)
    if worker.is_alive():
        step = "its JVM did not start" if SparkContext._gateway is None else \
            "the master has not registered the application yet"
        raise SubZeroError(f"Spark session for {master} still starting after {limit:.0f} s ({step}); the "
                           "machine may be overloaded: try again, or raise SUBZERO_SPARK_START_TIMEOUT")
    if "error" in box:
        text = str(box["error"])
        if "unresponsive" in text or "Master removed our application" in text or "Failed to connect to" in text:
            from pyspark import __version__ as version

            raise SubZeroError(f"Spark master {master} answers but never registered this application: it is no "
                               f"Spark master, or one running another Spark version than this pyspark ({version}); "
                               "check the URL (spark://host:7077, not the web UI's port) and the master's "
                               "version (its web UI and log show it)") from None
        raise box["error"]
    return box["session"]


def _wait_for_executors(spark, master: str) -> None:
    """Return once a standalone application has an executor, or fail saying to check workers."""
    sc = spark.sparkContext
    limit = config.get("spark_executor_timeout")
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            if sc._jsc.sc().getExecutorMemoryStatus().size() > 1:  # the driver counts as one
                return
        except Exception:  # the context died (the master dropped the application)
            break
        time.sleep(0.25)
    raise SubZeroError(f"Spark master {master} gave this application no executor within {limit:.0f} s "
                       "(it registered the application, but no worker has free cores and memory for it); check "
                       "that workers are registered with it and not busy with other applications (its web UI "
                       "lists them), or raise SUBZERO_SPARK_EXECUTOR_TIMEOUT")


def driver_log_path() -> str:
    """Where the JVM of a session subzero starts writes its own output (without ``-v``):
    ``CACHE/spark/driver-PID.log`` (the ``cache`` setting, default ``~/.cache/subzero``); the most
    recent `DRIVER_LOGS_KEPT` are kept."""
    return os.path.join(config.cache_root(), "spark", f"driver-{os.getpid()}.log")


#: how many driver logs of earlier sessions `driver_log_path`'s directory keeps
DRIVER_LOGS_KEPT = 20

#: JVM options of the driver of a session subzero starts: the JVM only schedules tasks and
#: moves a few hundred bytes per tile, so it starts with the client compiler only and the
#: serial collector (both start faster), and with class-data sharing (`_class_data_sharing`)
JVM_START_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xlog:cds=off -Xlog:cds+dynamic=off"


def _class_data_sharing() -> str:
    """The JVM option that maps Spark's classes from a class-data-sharing archive, or dumps one.

    The archive (``CACHE/spark-cds/classes-<java and pyspark versions>.jsa``) is made by
    the first session's JVM when it exits (``-XX:ArchiveClassesAtExit``), under a name of
    its own (with the driver's process id) so that no session maps a half-written archive; a
    session after it (its driver gone, the file untouched for a minute) renames it into place and maps it (``-XX:SharedArchiveFile``),
    which halves the JVM's start.  A stale or unreadable archive is ignored by the JVM.
    The ``spark_cds`` setting (``SUBZERO_SPARK_CDS=0``) turns this off.
    """
    if not config.get("spark_cds"):
        return ""
    import glob

    from pyspark import __version__ as pyspark_version

    root = os.path.dirname(driver_log_path()) + "-cds"  # not among the driver logs, which are pruned
    java = shutil.which("java") or ""
    if os.environ.get("JAVA_HOME"):
        java = os.path.join(os.environ["JAVA_HOME"], "bin", "java")
    try:
        real = os.path.realpath(java)
        stamp = f"{os.path.basename(os.path.dirname(os.path.dirname(real)))}-{int(os.stat(real).st_mtime)}"
    except OSError:
        return ""
    final = os.path.join(root, f"classes-{stamp}-pyspark{pyspark_version}.jsa")
    if not os.path.exists(final):
        for done in glob.glob(final + ".*.dump"):
            pid = int(done.rsplit(".", 2)[-2]) if done.rsplit(".", 2)[-2].isdigit() else 0
            # the driver that asked for it has exited, and its JVM (which dumps as it exits,
            # after the driver) has not written it for a minute: the archive is complete
            if pid and not pid_alive(pid) and time.time() - os.path.getmtime(done) > 60:
                if os.path.getsize(done) > 0:
                    os.replace(done, final)
                    break
                os.unlink(done)
    if os.path.exists(final):
        for left in glob.glob(final + ".*.dump"):  # archives of sessions that raced the first one
            pid = int(left.rsplit(".", 2)[-2]) if left.rsplit(".", 2)[-2].isdigit() else 0
            if pid and not pid_alive(pid) and time.time() - os.path.getmtime(left) > 60:
                try:
                    os.unlink(left)
                except OSError:
                    pass
        return f"-XX:SharedArchiveFile={final}"
    mine = f"{final}.{os.getpid()}.dump"
    try:
        os.makedirs(root, exist_ok=True)
        if glob.glob(final + ".*.dump"):  # another session is making it
            return ""
        open(mine, "wb").close()  # claimed: the JVM replaces it with the archive as it exits
    except OSError:
        return ""
    return f"-XX:ArchiveClassesAtExit={mine}"


@contextmanager
def _jvm_output_to(path: str | None):
    """While a session starts, launch its JVM with stdout and stderr going to ``path``: the
    JVM's own warnings (``Using incubator modules``, native-hadoop, spark-submit notices) and
    those of the Python workers it starts stay out of the terminal.  ``None``: inherited."""
    if path is None:
        yield
        return
    from pyspark import SparkContext

    module = sys.modules[SparkContext.__module__]  # pyspark.core.context (4.x) or pyspark.context
    original = getattr(module, "launch_gateway", None)
    if original is None:  # pragma: no cover - a pyspark without it: leave the output as it is
        yield
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    logs = sorted((os.path.join(os.path.dirname(path), f) for f in os.listdir(os.path.dirname(path))
                   if f.startswith("driver-") and f.endswith(".log")), key=lambda f: os.stat(f).st_mtime)
    for old in logs[:max(0, len(logs) - DRIVER_LOGS_KEPT)]:
        try:
            os.unlink(old)
        except OSError:
            pass
    out = open(path, "ab")

    def launch(conf=None, popen_kwargs=None):
        kwargs = dict(popen_kwargs or {}, stdout=out, stderr=out)
        return original(conf, popen_kwargs=kwargs)

    setattr(module, "launch_gateway", launch)  # the module pyspark reads it from when the session starts
    try:
        yield
    finally:
        setattr(module, "launch_gateway", original)
        out.close()  # the JVM holds its own descriptor


def _tail(path: str | None, lines: int = 3) -> str:
    if not path or not os.path.exists(path):
        return ""
    with open(path, "rb") as f:
        text = f.read()[-4000:].decode("utf-8", "replace")
    kept = [ln.strip() for ln in text.splitlines() if ln.strip()][-lines:]
    return " | ".join(kept)


def would_start_embedded() -> bool:
    """True when a Spark executor made now would start a new embedded session (no session
    in this process, not under spark-submit, no master chosen: `DEFAULT_MASTER`): a JVM start
    of several seconds that a workflow on tiny inputs does not need (`subzero.driver`)."""
    if os.environ.get("PYSPARK_GATEWAY_PORT") or config.get("spark_master"):
        return False
    return "pyspark" not in sys.modules or _active_session() is None


def _active_session():
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession()


def get_session(master: str | None = None, log_level: str = "ERROR", conf: dict[str, str] | None = None) -> Any:
    """The active Spark session, or a new one for ``master`` (default: embedded ``local[*, 4]``).

    A session that exists already (``spark-submit``, or one the user made) is returned as
    it is, whatever ``master`` says: its master was chosen by whoever made it.

    A session subzero makes binds its driver and block manager to 127.0.0.1 when it runs
    in-process (``local[...]``; ``SPARK_LOCAL_IP`` or ``conf`` choose otherwise), has no web UI
    (``spark.ui.enabled``), and, unless subzero logs at INFO (``-v``), sends its
    JVM's own output to `driver_log_path`.  ``conf`` (``--conf key=value``) is passed to
    Spark last, so it overrides any of these.
    """
    _check_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    active = _active_session()
    if active is not None:
        if master and master != active.sparkContext.master:
            log.warning("master %s ignored: a Spark session exists already, with master %s", master,
                        active.sparkContext.master)
        return active
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("subzero")
    under_submit = bool(os.environ.get("PYSPARK_GATEWAY_PORT"))  # spark-submit started the JVM and chose a master
    chosen = None
    if under_submit and master:
        log.warning("master %s ignored: spark-submit chose the master (its --master)", master)
    if not under_submit:
        chosen = master or config.get("spark_master") or DEFAULT_MASTER
        _check_reachable(chosen)
        builder = (builder.master(chosen)
                   .config("spark.driver.memory", config.get("driver_memory"))
                   .config("spark.ui.enabled", "false")
                   .config("spark.ui.showConsoleProgress", "false")
                   .config("spark.python.worker.reuse", "true")
                   .config("spark.driver.extraJavaOptions", f"{JVM_START_OPTIONS} {_class_data_sharing()}".strip()))
        if chosen.startswith("local") and not os.environ.get("SPARK_LOCAL_IP"):
            # in-process: nothing needs to reach the driver from another machine
            builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    builder = builder.config("spark.driver.maxResultSize", "512m")
    # Python workers start with `python -m pyspark.daemon` in their working directory, which
    # puts that directory first on sys.path: a profile.py or types.py there would replace the
    # module pyspark imports.  PYTHONSAFEPATH (Python 3.11+) keeps it off.
    builder = builder.config("spark.executorEnv.PYTHONSAFEPATH", "1")
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    # the JVM's own output: to a file unless -v (subzero's logger at INFO) asks to see it
    jvm_log = driver_log_path() if not under_submit and not log.isEnabledFor(logging.INFO) else None
    try:
        with _jvm_output_to(jvm_log):
            spark = _create(builder, chosen)
    except SubZeroError:
        raise
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        tail = _tail(jvm_log)
        raise SubZeroError(f"Spark could not start{f' with master {chosen}' if chosen else ''} "
                           f"({type(exc).__name__}: {first}{f'; the JVM said: {tail}' if tail else ''}); check the "
                           "master URL and the Java installation, or use executor='local' (--executor local)") from None
    spark.sparkContext.setLogLevel(log_level)
    _take_sigint()
    for key in conf or {}:  # what the session really has (-v)
        log.info("Spark setting %s=%s", key, spark.sparkContext.getConf().get(key, None))
    if _standalone(spark.sparkContext.master):
        _wait_for_executors(spark, spark.sparkContext.master)
    return spark


_Item = TypeVar("_Item")
_Out = TypeVar("_Out")
_Context = TypeVar("_Context")
_JOB_IDS = itertools.count()  # a job group per map: what its watcher follows and Ctrl-C cancels


class SparkExecutor(Executor):
    """Runs a node's tiles as Spark tasks and collects their metadata."""

    name = "spark"

    def __init__(self, spark=None):
        """Run on ``spark`` (a `pyspark.sql.SparkSession`), or on `get_session`'s when None."""
        self.spark = spark if spark is not None else get_session()

    @property
    def master(self) -> str:
        """The session's master URL."""
        return self.spark.sparkContext.master

    def map(self, fn: Callable[[_Context, _Item], _Out], context: _Context, items: Sequence[_Item], job: Job,
            progress: Reporter | None = None) -> list[_Out]:
        """``fn(context, item)`` for every item as Spark tasks, in order (see `Executor.map`):
        the context shipped once per task, ``progress`` following the job's finished tasks."""
        watch = (job.node, progress) if progress is not None and job.node is not None else None
        group = f"subzero-{job.node or 'items'}-{getattr(fn, '__name__', 'fn')}-{next(_JOB_IDS)}"
        return self._job(fn, payload(context, job), list(items), group, job.description, job.label, watch)

    def warm_up(self) -> None:
        """Start a job, in the background, whose tasks (one per core) import what the tasks of a
        run import (numpy, scipy, subzero's runtime and operators): the Python workers start
        and import while the driver stores the inputs, not in the first node's tasks.  The
        nodes' jobs queue behind it; its failure is of no concern."""
        sc = self.spark.sparkContext
        cores = max(1, sc.defaultParallelism)

        def job() -> None:
            try:
                sc.setJobGroup(f"subzero-warm-up-{id(self)}", "subzero warm-up: Python workers import the task code")
                sc.parallelize(range(cores), cores).foreach(_import_task_code)
            except Exception as exc:  # the session is stopping; the run's own jobs say what is wrong
                log.info("Spark warm-up job failed: %s", exc)

        threading.Thread(target=job, name="subzero-spark-warm-up", daemon=True).start()

    def _job(self, fn, loaded: bytes, items: list, group: str, description: str, failing: str,
             watch: tuple[str, Reporter] | None = None) -> list:
        """``fn(loaded payload, item)`` for every item, as the Spark job group ``group``; a
        failure names ``failing``; ``watch`` (node, progress) reports the finished tiles."""
        sc = self.spark.sparkContext
        slices = _slices(sc, len(items))
        stop = threading.Event()
        watcher = None
        if watch is not None:
            watcher = threading.Thread(target=_watch, args=(sc, group, watch[0], len(items), slices, watch[1], stop),
                                       daemon=True)
            watcher.start()
        try:
            return _collect(sc, group, description, lambda: sc.parallelize(items, slices).mapPartitions(
                partial(_call_partition, fn, loaded)))
        except Exception as exc:  # the Python error of the task, not the JVM's trace
            raise WorkflowError(f"{failing} failed on Spark: {_python_error(exc)}") from None
        finally:
            stop.set()
            if watcher is not None:
                watcher.join(timeout=2)


def _collect(sc, group: str, description: str, make_rdd) -> list:
    """``make_rdd().collect()`` as job group ``group``, run by a thread of its own while this
    one waits: Ctrl-C then lands here, between two waits, never inside a py4j call (which
    would leave its connection half-read and fill the terminal with py4j's tracebacks); the
    job group is cancelled and `KeyboardInterrupt` raised."""
    box: dict = {}

    def job() -> None:
        try:
            sc.setJobGroup(group, description, interruptOnCancel=True)  # per thread (pinned threads)
            box["result"] = make_rdd().collect()
        except BaseException as exc:  # handed to the waiting thread
            box["error"] = exc

    worker = threading.Thread(target=job, name=f"subzero-job-{group}", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.2)
    except KeyboardInterrupt:
        try:
            sc.cancelJobGroup(group)
        except Exception:  # the JVM is going away with this process anyway
            pass
        worker.join(5)
        raise
    if "error" in box:
        raise box["error"]
    return box["result"]


def _take_sigint() -> None:
    """Make Ctrl-C a plain KeyboardInterrupt again in a session subzero made.

    pyspark's own SIGINT handler calls into the JVM from inside the interrupted py4j call
    (a reentrant call on the same socket: a screen of py4j tracebacks); subzero cancels
    its job itself (`_collect`).  py4j's own log lines about the interrupted call are kept
    for ``-v``.
    """
    import signal

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
    root = logging.getLogger()
    if not any(isinstance(f, _Py4JNoise) for f in root.filters):
        root.addFilter(_Py4JNoise())
    if not logging.getLogger("subzero").isEnabledFor(logging.INFO):
        logging.getLogger("py4j").setLevel(logging.CRITICAL)  # its connection shutting down after Ctrl-C


class _Py4JNoise(logging.Filter):
    """Drops py4j's root-logger tracebacks of an interrupted call unless subzero logs at INFO (``-v``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if f"{os.sep}py4j{os.sep}" not in record.pathname:
            return True
        return logging.getLogger("subzero").isEnabledFor(logging.INFO)


def _watch(sc, group: str, node: str, total: int, tasks: int, progress, stop: threading.Event) -> None:
    """Report the tiles of the node's finished tasks (``total`` tiles in ``tasks`` tasks) as
    Spark's status tracker sees them."""
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
        finished = min(total, finished * total // max(tasks, 1))
        if finished > done:
            progress.tiles_done(node, finished - done)
            done = finished


def _slices(sc, n_tiles: int) -> int:
    """How many Spark tasks run a node's ``n_tiles`` tiles (each task some neighbouring tiles)."""
    return max(1, min(n_tiles, config.get("tasks_per_core") * max(1, sc.defaultParallelism)))


def _import_task_code(_) -> None:
    """What a task of a run imports before its first tile (`SparkExecutor.warm_up`)."""
    import scipy.ndimage  # noqa: F401 - what the array operators compute with

    import subzero.worker  # noqa: F401 - numpy, the store, the encoders and the task code


def _call_partition(fn, payload: bytes, tiles):
    """Task body: ``fn(task, tile)`` for each tile of the partition, in order.  The task
    travels as our own pickle (loaded once per Spark task), so operators defined in any
    user module (not importable on the workers) still run.  Errors carry a marker so the
    driver can report the Python error alone."""
    try:
        task = pickle.loads(payload)
        for tile in tiles:
            yield fn(task, tile)
    except Exception as exc:
        raise RuntimeError(f"{_ERROR_MARK}{type(exc).__name__}: {exc}".replace("\n", " ")) from exc


def _python_error(exc: Exception) -> str:
    """The operator's own error from a failed Spark job: the marked line our task body
    raised, else the last exception line of the worker's traceback (pyspark's
    ``PythonException`` carries it), else the first line of the JVM's error."""
    text = str(exc)
    for line in reversed(text.splitlines()):
        if _ERROR_MARK in line:
            return line.split(_ERROR_MARK, 1)[1].strip()[:500]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if _is_python_exception(exc):  # the worker's traceback: its last exception line
        tail = [ln for ln in lines if not ln.startswith(("File ", "Traceback", "^", "~"))]
        for ln in reversed(tail):
            head = ln.split(":")[0]
            if head.replace(".", "").replace("_", "").isalnum() and ("Error" in head or "Exception" in head):
                return ln[:500]
    for ln in reversed(lines):
        head = ln.split(":")[0]
        if ("Error" in head or "Exception" in head) and not ln.startswith(("at ", "org.apache", "py4j")):
            return ln[:500]
    return (lines[0] if lines else type(exc).__name__)[:500]


def _is_python_exception(exc: Exception) -> bool:
    try:
        from pyspark.errors import PythonException
    except ImportError:  # pragma: no cover - pyspark < 3.4
        return "PythonException" in type(exc).__name__
    return isinstance(exc, PythonException)

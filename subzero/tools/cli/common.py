"""What the commands share: one-line error handling, the Spark session and progress display of a
run, the store check, ``--storage-option``.

`dispatch` runs a parsed command: errors a user can fix (`SubZeroError`, `OSError`, bad JSON, a
missing optional package) print one line on stderr and return 2, an interrupt 130, a reader of
stdout that went away 141.  Imports are deferred to the function that needs them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from subzero.errors import StorageUnavailable, SubZeroError, WorkflowError

if TYPE_CHECKING:
    from subzero.dag import Workflow
    from subzero.run import Run

__all__ = ["store_command", "dispatch", "one_line", "check_store", "spark_session", "quiet_spark_launch", "parse_spark_conf",
           "run_with_progress", "apply_storage_options"]


def store_command(sub: Any, common: argparse.ArgumentParser, name: str, func: Any, help: str,
                  description: str | None = None, aliases: tuple[str, ...] = ()) -> argparse.ArgumentParser:
    """The sub-parser of a command that reads a store: ``subzero NAME STORE ...`` calling
    ``func(args)``, with the options every command takes (``common``); the caller adds its own."""
    parser = sub.add_parser(name, aliases=list(aliases), parents=[common], help=help, description=description)
    parser.add_argument("store")
    parser.set_defaults(func=func)
    return parser


def check_store(path: str, overwrite: bool, resume: bool) -> None:
    """Fail before reading inputs or starting Spark if the store cannot be taken: a regular
    file, a directory that holds anything (without --overwrite or --resume), a store a live
    run is writing."""
    from subzero.store import check_store_path

    if overwrite and resume:
        raise WorkflowError("give --resume (continue the run in the store) or --overwrite (replace it), not both")
    check_store_path(path, resume, overwrite)


def quiet_spark_launch(verbosity: int) -> None:
    """Keep Spark's log4j output out of the terminal from JVM start (unless ``-v``), for a
    session subzero starts itself; a session made by spark-submit or the user is untouched."""
    from subzero.progress import spark_conf

    if "PYSPARK_SUBMIT_ARGS" in os.environ or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    options = spark_conf(verbosity)["spark.driver.extraJavaOptions"]
    os.environ["PYSPARK_SUBMIT_ARGS"] = f'--driver-java-options "{options}" pyspark-shell'


def spark_session(args: argparse.Namespace) -> Any:
    """The session for ``--executor spark``: with ``--master``, made for that master unless a
    session exists already (spark-submit's, used as it is); else None (the executor makes or
    finds one itself)."""
    conf = parse_spark_conf(getattr(args, "conf", None))
    if args.master and args.executor != "spark":
        raise WorkflowError(f"--master {args.master} is for --executor spark; the {args.executor} executor "
                            "runs in this process (drop --master or use --executor spark)")
    if conf and args.executor != "spark":
        raise WorkflowError(f"--conf is for --executor spark; the {args.executor} executor runs no Spark")
    if not args.master and not conf:
        return None
    quiet_spark_launch(args.verbose)
    from subzero.progress import spark_log_level
    from subzero.executors.spark import get_session

    return get_session(args.master, log_level=spark_log_level(args.verbose), conf=conf)


def run_with_progress(args: argparse.Namespace, wf: Workflow, inputs: dict, **kwargs: Any) -> Run:
    """`subzero.driver.execute` of ``wf`` with ``RunOptions(**kwargs)``, its progress reported on
    stderr as the command's ``--quiet``/``--verbose`` ask (a Spark launch's log kept quiet)."""
    import contextlib

    from subzero.driver import RunOptions, execute
    from subzero.progress import choose_reporter

    if kwargs.get("executor", "spark") == "spark":
        quiet_spark_launch(args.verbose)
    with contextlib.closing(choose_reporter(sys.stderr, args.quiet, verbose=args.verbose > 0)) as reporter:
        reporter.run_started(wf.name, len(wf.nodes))  # inputs too: storing them is reported as a node
        ok = False
        try:
            run = execute(wf, inputs, RunOptions(progress=reporter, **kwargs))
            ok = True
        finally:
            reporter.run_finished(ok)
    return run


def apply_storage_options(args: argparse.Namespace) -> None:
    """``--storage-option KEY=VALUE``: fsspec's configuration for the protocol of every store the
    command names, so each place that opens them (and the tasks they travel to) uses them."""
    from subzero.store.location import configure_storage_options, parse_storage_options

    options = parse_storage_options(getattr(args, "storage_option", None))
    for name in ("store", "out"):
        url = getattr(args, name, None)
        if options and isinstance(url, str):
            configure_storage_options(url, options)


def parse_spark_conf(items: list[str] | None) -> dict[str, str]:
    """``--conf key=value`` (repeatable) as a dict of Spark settings."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise WorkflowError(f"--conf {item!r} must look like KEY=VALUE (e.g. spark.driver.memory=4g)")
        out[key.strip()] = value
    return out


def one_line(exc: BaseException) -> str:
    """The message of ``exc`` on one line (its type's name when it has none), for ``subzero: error: ...``."""
    text = " ".join(part.strip() for part in str(exc).strip().splitlines() if part.strip())
    return text or type(exc).__name__


def dispatch(args: argparse.Namespace) -> int:
    """Run the command ``args.func`` was set to; its exit status, or the one of its error after
    printing it in one line on stderr (1: the store's service kept failing; 2: a user error; 130: interrupted;
    141: stdout's reader
    went away, as in ``subzero query ... | head``).  ``-v`` prints the traceback of an error too."""
    try:
        apply_storage_options(args)
        return args.func(args)
    except BrokenPipeError:  # `subzero query ... | head`: the reader left; no error message
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # keep Python's exit-time flush of stdout quiet
        return 141
    except ModuleNotFoundError as exc:  # an optional package (the astronomy operators', the benches')
        print(f"subzero: error: {exc}; install it (pip install 'subzero[workflows]' brings the astronomy and "
              "genomics workflows' packages, pip install -e ./benchmarks the benchmarks', or run scripts/setup.sh)",
              file=sys.stderr)
        return 2
    except StorageUnavailable as exc:  # the service failed, not the user: exit 1, one line
        if args.verbose:
            import traceback

            traceback.print_exception(exc, file=sys.stderr)
        print(f"subzero: error: {one_line(exc)}", file=sys.stderr)
        return 1
    except (SubZeroError, OSError, json.JSONDecodeError) as exc:
        if args.verbose:
            import traceback

            traceback.print_exception(exc, file=sys.stderr)
        print(f"subzero: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        print(f"subzero: interrupted{f'; {exc}' if str(exc) else ''}", file=sys.stderr)
        return 130

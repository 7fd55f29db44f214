"""``subzero run``: run a workflow (a built-in name or a Python file) into a store."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from subzero.tools.cli.common import check_store, run_with_progress, spark_session
from subzero.errors import WorkflowError
from subzero.modes import parse_node_strategies as _parse_strategies

__all__ = ["add_parser", "cmd_run"]


def _load_workflow(ref: str, files: dict[str, Any], params: dict[str, str], quick: bool,
                   choice: str | None = None):
    """(workflow, inputs) from a built-in name or a Python file defining ``build`` or
    ``@sz.workflow`` functions (``choice``: which one, ``--workflow NAME``)."""
    import importlib

    from subzero.input_files import call_build
    from subzero.workflows import BUILTIN

    if ref in BUILTIN:
        return call_build(importlib.import_module(BUILTIN[ref]).build, f"built-in workflow {ref!r}", files, params,
                          quick)
    path = Path(ref)
    if not path.is_file():
        raise WorkflowError(
            f"workflow {ref!r} is neither a built-in ({', '.join(sorted(BUILTIN))}) nor a file")
    namespace = _exec_workflow_file(path)
    build = namespace.get("build")
    if choice is not None or not callable(build):
        from subzero.trace.traced import from_namespace

        traced = from_namespace(namespace, ref, files, params, quick, choice)
        if traced is not None:
            return traced
    if not callable(build):
        raise WorkflowError(f"{ref} must define build() returning (workflow, inputs), or an @sz.workflow function")
    return call_build(build, ref, files, params, quick)


def _exec_workflow_file(path: Path) -> dict[str, Any]:
    """The namespace of a workflow file; a syntax error or an exception while it runs (an
    import that fails, a typo) is one `WorkflowError` naming ``file:line`` (``-v``: the traceback)."""
    import runpy
    import traceback

    folder = os.path.dirname(os.path.abspath(path))
    if folder not in sys.path:  # its helper modules import; appended, so no file there replaces a module
        sys.path.append(folder)
    try:
        return runpy.run_path(str(path), run_name="subzero_workflow")
    except SyntaxError as exc:
        where = f"{exc.filename or path}:{exc.lineno}" if exc.lineno else str(path)
        raise WorkflowError(f"{where}: {type(exc).__name__}: {exc.msg}; fix the workflow file "
                            "(-v shows the traceback)") from exc
    except Exception as exc:
        frames = traceback.extract_tb(exc.__traceback__)
        mine = [f for f in frames if os.path.realpath(f.filename) == os.path.realpath(path)] or frames[-1:]
        where = f"{mine[-1].filename}:{mine[-1].lineno}" if mine else str(path)
        raise WorkflowError(f"{where}: {type(exc).__name__}: {exc} (while loading the workflow file; -v shows "
                            "the traceback)") from exc


def _read_workload(path: str) -> Any:
    """The queries of a ``--workload`` file; a missing or malformed file is an error naming it."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise WorkflowError(f"--workload {path!r} does not exist; give a JSON file of sample queries") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkflowError(f"--workload {path!r} cannot be read ({exc})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorkflowError(f"--workload {path!r} is not valid JSON ({exc.msg} at line {exc.lineno}, column "
                            f"{exc.colno}); it must be a list of queries such as "
                            '[{"direction": "backward", "node": "stars", "to": "raw", "cells": [[3, 4]]}]') from None


def _check_workload(path: str | None, workload: Any, wf, inputs: dict) -> None:
    """Check the workload against the workflow before anything runs, naming the file."""
    if workload is None:
        return
    from subzero.driver import static_shapes
    from subzero.optimizer.workload import parse_workload

    try:
        parse_workload(wf, workload, static_shapes(wf, {k: v for k, v in inputs.items() if hasattr(v, "shape")}))
    except WorkflowError as exc:
        raise WorkflowError(f"--workload {path!r}: {exc}") from None


def cmd_run(args: argparse.Namespace) -> int:
    """``subzero run``: run a workflow into a store; the exit status."""
    from subzero.input_files import check_bound, parse_assignments, read_inputs

    files = parse_assignments(args.input, "--input", "NAME=PATH")
    params = parse_assignments(args.param, "--param", "KEY=VALUE")
    strategies = _parse_strategies(args.strategy, "--strategy")
    workload = _read_workload(args.workload) if args.workload else None
    check_store(args.store, args.overwrite, args.resume)
    arrays, headers = read_inputs(files)  # every file is checked before the store exists
    wf, inputs = _load_workflow(args.workflow, arrays, params, args.quick, args.workflow_name)
    check_bound(wf, inputs, files)
    _check_workload(args.workload, workload, wf, inputs)
    from subzero.input_files import header_to_text

    metadata = {name: {"fits_header": header_to_text(h)} for name, h in headers.items() if name in inputs}
    spark = spark_session(args)
    try:
        run = run_with_progress(args, wf, inputs, store=args.store, strategies=strategies or None,
                                 executor=args.executor, spark=spark, tile_shape=args.tile, max_disk=args.max_disk,
                                 max_runtime=args.max_runtime, workload=workload, input_metadata=metadata or None,
                                 overwrite=args.overwrite, resume=args.resume, keep=_keep(args.keep))
    except KeyboardInterrupt:
        raise _Interrupted(_committed_text(args.store)) from None
    for node, stored in run.strategies.items():
        print(f"{node:>16}  {', '.join(stored)}")
    print(f"stored in {run.path}")
    return 0


def _keep(given: str | None):
    """``--keep``: "needed" (the default), "all", or comma-separated node names."""
    if not given or given in ("needed", "all"):
        return given or "needed"
    return [name.strip() for name in given.split(",") if name.strip()]


class _Interrupted(KeyboardInterrupt):
    """Ctrl-C during a run, with what the store kept."""


def _committed_text(store: str) -> str:
    """What an interrupted run committed, and how to continue it (one line)."""
    from subzero.errors import StorageUnavailable
    from subzero.store import retry

    failing = "the store's service is failing; run the same command with --resume once it answers"
    if retry.gave_up() not in (None, "the run was interrupted"):  # the service fails: reading it would wait again
        return failing
    try:
        from subzero.tools.info import info_data

        data = info_data(store)
    except StorageUnavailable:
        return failing
    except Exception:  # nothing was stored yet, or the store cannot be read
        return "nothing was committed"
    done = [n["name"] for n in data["nodes"] if n["committed"]]
    names = ", ".join(done) if len(done) <= 8 else ", ".join(done[:8]) + ", ..."
    return (f"{len(done)} of {len(data['nodes'])} nodes committed in {store}"
            f"{f' ({names})' if done else ''}; run the same command with --resume to continue")


def add_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """``subzero run``."""
    run = sub.add_parser("run", parents=[common], help="run a workflow and store its lineage",
                         description="Run a workflow (a built-in name or a Python file defining build()) and store "
                                     "its arrays and lineage in a new directory.")
    run.add_argument("workflow", help="built-in workflow name, or a Python file defining build() or an "
                                      "@sz.workflow function")
    run.add_argument("--workflow", dest="workflow_name", metavar="NAME",
                     help="the @sz.workflow function to run, when the file defines several")
    run.add_argument("--store", required=True, help="new directory for the run")
    run.add_argument("--input", action="append", metavar="NAME=PATH",
                     help="bind workflow input NAME to a file: .npy, FITS (file.fits, file.fits[1], file.fits[SCI]) "
                          "or a Zarr array (repeatable)")
    run.add_argument("--param", action="append", metavar="KEY=VALUE",
                     help="pass KEY=VALUE to the workflow file's build(), or set the @sz.workflow function's "
                          "parameter KEY (repeatable)")
    run.add_argument("--strategy", action="append", metavar="NODE=STRATEGY[,STRATEGY]",
                     help="pin strategies for a node (repeatable)")
    run.add_argument("--executor", choices=["spark", "local"], default="spark")
    run.add_argument("--master", help="Spark master URL, e.g. spark://127.0.0.1:7077")
    run.add_argument("--tile", type=int, help="tile length per axis")
    run.add_argument("--max-disk", help="lineage disk budget: bytes ('50MB') or input multiple ('2x')")
    run.add_argument("--max-runtime", help="runtime budget: seconds ('30s') or multiple of the plain run ('1.5x')")
    run.add_argument("--workload", help="JSON file of sample queries for the optimizer")
    run.add_argument("--quick", action="store_true",
                     help="small inputs (built-in workflows; a file's build() must take a 'quick' parameter)")
    run.add_argument("--conf", action="append", metavar="KEY=VALUE",
                     help="a Spark setting for the session subzero starts, repeatable (e.g. spark.driver.memory=4g)")
    run.add_argument("--resume", action="store_true",
                     help="continue the run a crash or failure left in --store (the same workflow, inputs and "
                          "options): committed nodes are kept, the others run")
    run.add_argument("--overwrite", action="store_true",
                     help="replace the run in --store (a store subzero made that no live run is writing)")
    run.add_argument("--keep", metavar="needed|all|NODE,...", default="needed",
                     help="which arrays to store: 'needed' (inputs, outputs, the workload's nodes; the default: "
                          "the others are recomputed when read), 'all', or these nodes as well")
    run.set_defaults(func=cmd_run)

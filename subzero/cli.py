"""The ``subzero`` command line (also ``python -m subzero``): run workflows, query their lineage.

Results go to stdout; progress and diagnostics (`logging`, ``-v``/``-q``) to stderr.
Errors a user can fix print one line on stderr and exit with code 2, having written nothing.
Imports are deferred to the command that needs them, so a query starts fast.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from subzero.errors import LineageError, SubZeroError, WorkflowError
from subzero.inputs import node_fits_header as _fits_header
from subzero.modes import parse_node_strategies as _parse_strategies

if TYPE_CHECKING:
    import numpy as np

__all__ = ["main", "build_parser", "parse_cells", "parse_boxes"]

log = logging.getLogger(__name__)


# -- workflows and their inputs ---------------------------------------------------------------

def _load_workflow(ref: str, files: dict[str, Any], params: dict[str, str], quick: bool,
                   choice: str | None = None):
    """(workflow, inputs) from a built-in name or a Python file defining ``build`` or
    ``@sz.workflow`` functions (``choice``: which one, ``--workflow NAME``)."""
    import importlib

    from subzero.inputs import call_build
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


def _check_store(path: str, overwrite: bool, resume: bool) -> None:
    """Fail before reading inputs or starting Spark if the store cannot be taken: a regular
    file, a directory that holds anything (without --overwrite or --resume), a store a live
    run is writing."""
    from subzero.store import check_store_path

    if overwrite and resume:
        raise WorkflowError("give --resume (continue the run in the store) or --overwrite (replace it), not both")
    check_store_path(path, resume, overwrite)


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
    from subzero.execution import static_shapes
    from subzero.optimizer.workload import parse_workload

    try:
        parse_workload(wf, workload, static_shapes(wf, {k: v for k, v in inputs.items() if hasattr(v, "shape")}))
    except WorkflowError as exc:
        raise WorkflowError(f"--workload {path!r}: {exc}") from None


def _quiet_spark_launch(verbosity: int) -> None:
    """Keep Spark's log4j output out of the terminal from JVM start (unless ``-v``), for a
    session subzero starts itself; a session made by spark-submit or the user is untouched."""
    from subzero.progress import spark_conf

    if "PYSPARK_SUBMIT_ARGS" in os.environ or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    options = spark_conf(verbosity)["spark.driver.extraJavaOptions"]
    os.environ["PYSPARK_SUBMIT_ARGS"] = f'--driver-java-options "{options}" pyspark-shell'


def _spark_session(args):
    """The session for ``--executor spark``: with ``--master``, made for that master unless a
    session exists already (spark-submit's, used as it is); else None (the executor makes or
    finds one itself)."""
    conf = _spark_conf(getattr(args, "conf", None))
    if args.master and args.executor != "spark":
        raise WorkflowError(f"--master {args.master} is for --executor spark; the {args.executor} executor "
                            "runs in this process (drop --master or use --executor spark)")
    if conf and args.executor != "spark":
        raise WorkflowError(f"--conf is for --executor spark; the {args.executor} executor runs no Spark")
    if not args.master and not conf:
        return None
    _quiet_spark_launch(args.verbose)
    from subzero.progress import spark_log_level
    from subzero.executors.spark import get_session

    return get_session(args.master, log_level=spark_log_level(args.verbose), conf=conf)


def _run_with_progress(args, wf, inputs: dict, **kwargs):
    import contextlib

    from subzero.execution import RunOptions, execute
    from subzero.progress import choose_reporter

    if kwargs.get("executor", "spark") == "spark":
        _quiet_spark_launch(args.verbose)
    with contextlib.closing(choose_reporter(sys.stderr, args.quiet, verbose=args.verbose > 0)) as reporter:
        reporter.run_started(wf.name, len(wf.nodes))  # inputs too: storing them is reported as a node
        ok = False
        try:
            run = execute(wf, inputs, RunOptions(progress=reporter, **kwargs))
            ok = True
        finally:
            reporter.run_finished(ok)
    return run


def cmd_run(args) -> int:
    """``subzero run``: run a workflow into a store; the exit status."""
    from subzero.inputs import check_bound, parse_assignments, read_inputs

    files = parse_assignments(args.input, "--input", "NAME=PATH")
    params = parse_assignments(args.param, "--param", "KEY=VALUE")
    strategies = _parse_strategies(args.strategy, "--strategy")
    workload = _read_workload(args.workload) if args.workload else None
    _check_store(args.store, args.overwrite, args.resume)
    arrays, headers = read_inputs(files)  # every file is checked before the store exists
    wf, inputs = _load_workflow(args.workflow, arrays, params, args.quick, args.workflow_name)
    check_bound(wf, inputs, files)
    _check_workload(args.workload, workload, wf, inputs)
    from subzero.inputs import header_to_text

    metadata = {name: {"fits_header": header_to_text(h)} for name, h in headers.items() if name in inputs}
    spark = _spark_session(args)
    try:
        run = _run_with_progress(args, wf, inputs, store=args.store, strategies=strategies or None,
                                 executor=args.executor, spark=spark, tile_shape=args.tile, max_disk=args.max_disk,
                                 max_runtime=args.max_runtime, workload=workload, input_metadata=metadata or None,
                                 overwrite=args.overwrite, resume=args.resume)
    except KeyboardInterrupt:
        raise _Interrupted(_committed_text(args.store)) from None
    for node, stored in run.strategies.items():
        print(f"{node:>16}  {', '.join(stored)}")
    print(f"stored in {run.path}")
    return 0


class _Interrupted(KeyboardInterrupt):
    """Ctrl-C during a run, with what the store kept."""


def _committed_text(store: str) -> str:
    """What an interrupted run committed, and how to continue it (one line)."""
    try:
        from subzero.info import info_data

        data = info_data(store)
    except Exception:  # nothing was stored yet, or the store cannot be read
        return "nothing was committed"
    done = [n["name"] for n in data["nodes"] if n["committed"]]
    names = ", ".join(done) if len(done) <= 8 else ", ".join(done[:8]) + ", ..."
    return (f"{len(done)} of {len(data['nodes'])} nodes committed in {store}"
            f"{f' ({names})' if done else ''}; run the same command with --resume to continue")


# -- queries ------------------------------------------------------------------------------------

def parse_boxes(boxes: list[str] | None, fits: bool = False) -> list[list[tuple[int, int]]]:
    """Boxes from ``--box 0:2,5:8`` (half-open, numpy order) as ``[[(lo, hi), ...], ...]``.

    With ``fits``, a box is an inclusive 1-based FITS section ``X0:X1,Y0:Y1`` (x along
    columns), converted to numpy order.

    Examples
    --------
    >>> parse_boxes(["0:2,5:8"])
    [[(0, 2), (5, 8)]]
    >>> parse_boxes(["6:8,1:2"], fits=True)
    [[(0, 2), (5, 8)]]
    """
    out = []
    for text in boxes or []:
        try:
            pairs = [(int(a), int(b)) for a, b in (r.split(":") for r in text.split(","))]
        except ValueError:
            hint = "X0:X1,Y0:Y1 (1-based, inclusive), e.g. 10:20,5:8" if fits else "LO:HI per axis, e.g. 0:2,5:8"
            raise LineageError(f"box {text!r} must be {hint}") from None
        if any(abs(v) >= 2**62 for p in pairs for v in p):
            raise LineageError(f"box {text!r} is out of bounds: a coordinate is larger than any array")
        if fits:
            if any(lo < 1 for lo, _ in pairs):
                raise LineageError(f"box {text!r}: with --fits-coords, coordinates count from 1")
            pairs = [(lo - 1, hi) for lo, hi in reversed(pairs)]
        out.append(pairs)
    return out


def parse_cells(cells: list[str] | None, boxes: list[str] | None, fits: bool = False) -> "np.ndarray":
    """Cells from ``--cells 1,2 --cells 3,4`` (or ``--cells "1,2;3,4"``) and the cells of the
    half-open boxes ``--box 0:2,5:8``, as ``(N, ndim)`` numpy coordinates.

    With ``fits``, cells are 1-based ``x,y`` (DS9/FITS order: x along columns) and boxes are
    inclusive 1-based FITS sections ``X0:X1,Y0:Y1`` (see `parse_boxes`).

    Examples
    --------
    >>> parse_cells(["1,2;3,4"], None).tolist()
    [[1, 2], [3, 4]]
    >>> parse_cells(["6,3"], ["1:2,1:1"], fits=True).tolist()
    [[2, 5], [0, 0], [0, 1]]
    """
    import numpy as np

    from subzero.cells import box_cells

    rows = []
    example = "X,Y (1-based)" if fits else "R,C"
    for text in cells or []:
        for chunk in text.split(";"):
            try:
                row = [int(v) for v in chunk.split(",") if v.strip() != ""]
            except ValueError:
                raise LineageError(f"cell {chunk!r} must be comma-separated integers, e.g. 3,4") from None
            if any(abs(v) >= 2**62 for v in row):
                raise LineageError(f"cell {chunk!r} is out of bounds: a coordinate is larger than any array "
                                   "(coordinates count from 0 up to the node's shape)")
            if fits:
                if any(v < 1 for v in row):
                    raise LineageError(f"cell {chunk!r}: with --fits-coords, coordinates count from 1 ({example})")
                row = [v - 1 for v in reversed(row)]
            rows.append(row)
    parsed = parse_boxes(boxes, fits)
    for pairs in parsed:
        if any(hi <= lo for lo, hi in pairs):
            raise LineageError(f"box {','.join(f'{lo}:{hi}' for lo, hi in pairs)} (numpy order, half-open) is empty: "
                               "each axis needs LO < HI")
    blocks = [box_cells(*zip(*pairs)) for pairs in parsed]  # arrays, not Python rows
    if not rows and not blocks:
        raise LineageError(f"give cells with --cells {example} (repeatable, or several as 'A,B;C,D') "
                           f"or --box {'X0:X1,Y0:Y1' if fits else 'R0:R1,C0:C1'}")
    if len({len(r) for r in rows} | {b.shape[1] for b in blocks}) != 1:
        raise LineageError("all cells must have the same number of coordinates")
    if rows:
        blocks.insert(0, np.array(rows, dtype=np.int64))
    return np.concatenate(blocks).astype(np.int64, copy=False)


def _add_sky_cells(args, run, node: str) -> None:
    """``--sky "RA DEC"`` (repeatable): each position becomes the cell of ``node`` holding it,
    through the WCS of its pixel grid (a FITS input's, or that of a node on its grid), added
    to ``args.cells`` in the convention of the other cells (numpy, or FITS with --fits-coords)."""
    if not getattr(args, "sky", None):
        return
    from subzero.view.sky import node_wcs, parse_sky, sky_to_pixel

    wcs = node_wcs(run).get(run.node(node).name)
    if wcs is None:
        raise LineageError(f"--sky: node {node!r} has no WCS (only FITS inputs with a celestial WCS, and nodes on "
                           "their pixel grid, have one); give --cells or --box instead")
    for text in args.sky:
        row, col = sky_to_pixel(wcs, parse_sky(text), run.shape(node))
        args.cells = (args.cells or []) + [f"{col + 1},{row + 1}" if args.fits_coords else f"{row},{col}"]


def _query_start(args) -> dict[str, Any]:
    """``cells=`` or, for boxes alone, ``box=`` (never expanded into cells) for a Run query."""
    if args.box and not args.cells:
        return {"box": parse_boxes(args.box, args.fits_coords)}
    return {"cells": parse_cells(args.cells, args.box, args.fits_coords)}


def _check_outputs(args, run, mask_node: str, drawn: list[str]) -> None:
    """Refuse bad output files before the query runs, so an error writes nothing: ``--mask``
    and ``--regions`` are of ``mask_node``, ``--plot`` draws the 2-D ones of ``drawn``."""
    if not (args.mask or args.regions or args.plot):
        return  # nothing to write: no need for the export module (numpy.ma, astropy on demand)
    from subzero.export import MASK_SUFFIXES, PLOT_SUFFIXES, REGION_SUFFIXES, check_output

    if args.mask:
        check_output(args.mask, MASK_SUFFIXES, "--mask")
    if args.regions:
        check_output(args.regions, REGION_SUFFIXES, "--regions")
        if len(run.shape(mask_node)) != 2:
            raise LineageError(f"--regions: node {mask_node!r} has shape {run.shape(mask_node)}; DS9 regions are for "
                               "2-D images (use --mask for other ranks)")
        if getattr(args, "regions_frame", "image") == "fk5":
            from subzero.view.sky import node_wcs

            if run.node(mask_node).name not in node_wcs(run):
                raise LineageError(f"--regions-frame fk5: node {mask_node!r} has no WCS (not a FITS input with one, "
                                   "nor on its pixel grid); write image regions instead")
    if args.plot:
        check_output(args.plot, PLOT_SUFFIXES, "--plot")
        if all(len(run.shape(n)) != 2 for n in drawn):
            shapes = " and ".join(f"{n!r} has shape {run.shape(n)}" for n in dict.fromkeys(drawn))
            raise LineageError(f"--plot draws 2-D arrays; {shapes} (use --mask or --json instead)")


def _plot(args, run, ends: list[tuple[str, Any, str]]) -> None:
    """Draw ``(node, cells, title)`` panels side by side (cells: a mask or a `Frontier`);
    an end that is not 2-D is left out with a warning."""
    from subzero.export import Panel, plot_panels
    from subzero.view.lineage import display_kind
    from subzero.view.sky import node_wcs

    panels = []
    grids = node_wcs(run)
    for node, cells, title in ends:
        if len(run.shape(node)) != 2:
            log.warning("--plot: %s has shape %s, not 2-D: not drawn", node, run.shape(node))
            continue
        # the stored array itself: only the cutout around the cells is read
        panels.append(Panel(title, run.output(node), cells, wcs=grids.get(run.node(node).name),
                            display=display_kind(run, run.node(node).name)))
    plot_panels(args.plot, panels, origin="lower" if args.fits_coords else "upper")


def _write_files(args, run, node: str, mask, history: str, text: str) -> list[str]:
    """``--mask`` and ``--regions`` of ``mask`` (cells of ``node``); the paths written."""
    written = []
    if args.mask:
        from subzero.export import write_mask

        written.append(str(write_mask(args.mask, mask, _fits_header(run, node), history=history)))
    if args.regions:
        from subzero.export import write_regions

        wcs = None
        if getattr(args, "regions_frame", "image") == "fk5":  # `_check_outputs` made sure the node has one
            from subzero.view.sky import node_wcs

            wcs = node_wcs(run)[run.node(node).name]
        written.append(str(write_regions(args.regions, mask, text=text, wcs=wcs)))
    return written


def _open_traced(args) -> tuple[Any, dict, dict | None]:
    """What ``query`` and ``brush`` start from: the run, its start cells (``--sky`` included)
    and the strategies ``--using`` forces."""
    from subzero.run import open_run

    run = open_run(args.store)
    _add_sky_cells(args, run, args.node)
    return run, _query_start(args), {k: v[-1] for k, v in _parse_strategies(args.using, "--using").items()} or None


def cmd_query(args) -> int:
    """``subzero query``: trace cells backward or forward and print or write them; the exit status."""
    run, start, using = _open_traced(args)
    _check_outputs(args, run, args.to, [args.node, args.to])
    query = run.backward if args.direction == "backward" else run.forward
    answer = query(args.node, to=args.to, using=using, as_="frontier", **start)
    result = answer.coords()  # the answer's cells; a mask of the array only for the files that need one
    mask = answer.mask() if (args.mask or args.regions) else None
    shown = result
    if args.fits_coords:
        from subzero.export import to_fits_coords

        shown = to_fits_coords(result)
    written = _write_files(args, run, args.to, mask,
                           f"subzero {args.direction} lineage of {args.node} in {args.to}: {len(result)} cells",
                           f"{args.to}: {args.direction} of {args.node}")
    if args.plot:
        first = run.frontier(args.node, **start)
        what = f"{args.direction} lineage"
        _plot(args, run, [(args.node, first, f"{args.node}: {first.count} cell(s) queried"),
                          (args.to, answer, f"{args.to}: {len(result)} cell(s), {what} of {args.node}")])
        written.append(str(args.plot))
    if args.json:
        print(json.dumps({"direction": args.direction, "from": args.node, "to": args.to,
                          "shape": list(run.shape(args.to)), "coords": "fits" if args.fits_coords else "numpy",
                          "count": len(result), "cells": shown.tolist(), "written": written}))
    elif written:
        print(f"{args.direction} {args.node} -> {args.to}: {len(result)} cell(s); wrote {', '.join(written)}")
    else:
        sys.stdout.write("".join(",".join(map(str, row)) + "\n" for row in shown.tolist()))
    return 0


def _bbox_text(frontier, fits: bool) -> str:
    """A frontier's bounding box: ``rows 3:9, cols 10:12`` (numpy) or ``[11:12,4:9]`` (FITS)."""
    box = frontier.bbox()
    if box is None:
        return "none"
    lo, hi = box
    if fits:
        return "[" + ",".join(f"{int(a) + 1}:{int(b)}" for a, b in zip(lo[::-1], hi[::-1])) + "]"
    return "[" + ", ".join(f"{int(a)}:{int(b)}" for a, b in zip(lo, hi)) + "]"


def cmd_brush(args) -> int:
    """``subzero brush``: linked brushing from a node's cells; the exit status."""
    from subzero.brush import brush, brush_data, default_source

    run, start, using = _open_traced(args)
    to = args.to or default_source(run, args.node)
    outputs = [o for item in args.outputs or [] for o in item.split(",") if o] or None
    names = [run.node(o).name for o in outputs] if outputs else [n.name for n in run.workflow.outputs]
    _check_outputs(args, run, to, [args.node, to, *names])
    result = brush(run, args.node, to=to, outputs=names, using=using, **start)
    written = _write_files(args, run, to, result.traced.mask() if (args.mask or args.regions) else None,
                           f"subzero brush: lineage of {result.brushed.count} cells of {args.node} in {to}: "
                           f"{result.traced.count} cells", f"{to}: lineage of the brush on {args.node}")
    if args.plot:
        ends = [(args.node, result.brushed, f"{args.node}: {result.brushed.count} cell(s) brushed"),
                (to, result.traced, f"{to}: {result.traced.count} cell(s) they come from")]
        ends += [(name, f, f"{name}: {f.count} cell(s) they reach") for name, f in result.linked.items()]
        _plot(args, run, ends)
        written.append(str(args.plot))
    if args.json:
        data = brush_data(result, fits=args.fits_coords)
        print(json.dumps(data | {"written": written}))
        return 0
    fits = args.fits_coords
    lines = [f"brushed {args.node}: {result.brushed.count} cell(s) in {_bbox_text(result.brushed, fits)}",
             f"  <- {to}: {result.traced.count} cell(s) in {_bbox_text(result.traced, fits)}"]
    lines += [f"  -> {name}: {f.count} cell(s) in {_bbox_text(f, fits)}" for name, f in result.linked.items()]
    lines.append(f"in {1000 * result.seconds:.1f} ms (backward {1000 * result.backward_seconds:.1f} ms, forward "
                 f"{1000 * result.forward_seconds:.1f} ms)" + (f"; wrote {', '.join(written)}" if written else ""))
    print("\n".join(lines))
    return 0


# -- replay ----------------------------------------------------------------------------------------

def _replay_patches(args, run) -> list:
    """The `subzero.replay.Patch` es of ``subzero replay``'s flags, every file read and every
    cell checked before anything is written."""
    from subzero.brush import default_source
    from subzero.inputs import parse_assignments, read_input
    from subzero.replay import Patch

    files = parse_assignments(args.input, "--input", "NAME=PATH")
    if (args.set is None) == (not files):
        raise WorkflowError("give the new values: --set VALUE (one value for every replaced cell) or "
                            "--input NAME=PATH (a file to take them from), one of the two")
    value = None
    if args.set is not None:
        try:
            value = float(args.set)
        except ValueError:
            raise WorkflowError(f"--set {args.set!r} must be a number (e.g. 0, 100.5, nan)") from None
    for name in files:
        if not run.node(name).is_input:
            raise WorkflowError(f"--input {name}=...: {name!r} is not an input of workflow {run.workflow.name!r}; its "
                                f"inputs are {', '.join(n.name for n in run.workflow.inputs)}")
    if args.from_node is None:
        if args.cells or args.box or value is not None:
            raise WorkflowError("--cells/--box/--set need --from NODE: the node the cells belong to (an input, or "
                                "an output whose lineage is traced back to --to INPUT)")
        return [Patch(name, None, source=read_input(path)[0]) for name, path in files.items()]
    if not (args.cells or args.box):
        raise WorkflowError(f"--from {args.from_node}: give its cells with --cells or --box")
    node = run.node(args.from_node)
    start = _query_start(args)
    if node.is_input:
        if args.to and run.node(args.to) is not node:
            raise WorkflowError(f"--from {node.name} is an input: its cells are replaced as they are; drop --to")
        target, cells = node.name, run.frontier(node, **start)
    else:
        target = run.node(args.to).name if args.to else default_source(run, node.name)
        cells = run.backward(node, to=target, as_="frontier", **start)
    if files and set(files) != {target}:
        raise WorkflowError(f"the replaced cells are cells of {target!r}; --input gives {', '.join(files)}: give "
                            f"--input {target}=PATH")
    source = read_input(files[target])[0] if files else None
    return [Patch(target, cells, value=value, source=source)]


def _replay_text(result, fits: bool) -> str:
    seconds = result.seconds
    lines = [f"replayed workflow {result.run.workflow.name!r} from {result.source} into {result.run.path} in "
             f"{seconds:.2f} s ({result.executor})"]
    patched = {r.name: r for r in result.nodes if r.how == "patched"}
    for name, (replaced, changed) in result.inputs.items():
        lines.append(f"  {name}: {replaced} cell(s) replaced, {changed} changed ({patched[name].rerun} of "
                     f"{patched[name].tiles} chunk(s) written)")
    rows = [("node", "re-ran", "changed cells")]
    linked = []
    for r in result.nodes:
        if r.how == "linked":
            linked.append(r.name)
        elif r.how != "patched":
            what = f"{r.rerun} of {r.tiles} tile(s)" + (f" ({r.why})" if r.why else "")
            rows.append((r.name, what, str(r.changed)))
    widths = [max(len(row[k]) for row in rows) for k in range(3)]
    if len(rows) > 1:
        lines.extend("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows)
    if linked:
        lines.append(f"  unchanged, linked from the old store: {', '.join(linked)}")
    lines.append("outputs:")
    for name, out in result.outputs.items():
        text = f"  {name}: {out.changed.count} cell(s) changed"
        if out.changed.count:
            text += f" in {_bbox_text(out.changed, fits)}"
        if out.within_lineage is True:
            text += "; within the forward lineage of the changed input cells"
        elif out.within_lineage is False:
            text += "; NOT within the forward lineage of the changed input cells: an operator's lineage is wrong"
        lines.append(text)
    return "\n".join(lines)


def cmd_replay(args) -> int:
    """``subzero replay``: replace input cells and re-run what they reach into a new store; the exit status."""
    import contextlib

    from subzero.progress import choose_reporter
    from subzero.replay import replay
    from subzero.run import open_run

    run = open_run(args.store)
    _check_store(args.out, overwrite=args.overwrite, resume=False)
    patches = _replay_patches(args, run)
    outputs = [o for item in args.outputs or [] for o in item.split(",") if o] or None
    spark = _spark_session(args)
    if args.executor == "spark":
        _quiet_spark_launch(args.verbose)
    with contextlib.closing(choose_reporter(sys.stderr, args.quiet, verbose=args.verbose > 0)) as reporter:
        reporter.run_started(f"{run.workflow.name} (replay)", len(run.workflow.nodes))
        ok = False
        try:
            result = replay(run, patches, args.out, executor=args.executor, spark=spark, progress=reporter,
                            outputs=outputs, check=not args.no_check, overwrite=args.overwrite)
            ok = True
        finally:
            reporter.run_finished(ok)
    if args.json:
        from subzero.describe import frontier_data

        print(json.dumps({
            "source": result.source, "store": result.run.path, "executor": result.executor,
            "seconds": result.seconds, "check_seconds": result.check_seconds,
            "inputs": {k: {"replaced": a, "changed": b} for k, (a, b) in result.inputs.items()},
            "nodes": [{"name": r.name, "how": r.how, "tiles": r.tiles, "rerun": r.rerun, "changed": r.changed,
                       "seconds": r.seconds, "why": r.why or None} for r in result.nodes],
            "outputs": {k: frontier_data(o.changed, args.fits_coords) | {"within_lineage": o.within_lineage}
                        for k, o in result.outputs.items()}}))
    else:
        print(_replay_text(result, args.fits_coords))
    if any(o.within_lineage is False for o in result.outputs.values()):
        log.warning("some changed output cells lie outside the forward lineage of the changed input cells")
    return 0


# -- the demo, explain, bench ------------------------------------------------------------------

DEMO_MARKER = "MADE_BY_SUBZERO_DEMO"  # in stores of older demos
DEMO = "subzero demo"  # the ``made_by`` of the demo's stores


def _made_by_demo(store: Path) -> bool:
    """True for a store ``subzero demo`` made (finished, failed or killed at any point)."""
    from subzero.store import made_by
    from subzero.store.lock import LOCK_NAME

    if not store.is_dir():
        return False
    names = [p.name for p in store.iterdir() if not (p.name.startswith(LOCK_NAME + ".") and p.name.endswith(".tmp"))]
    return made_by(store) == DEMO or DEMO_MARKER in names or names == [LOCK_NAME]


def cmd_demo(args) -> int:
    """The main job: the astronomy benchmark workflow on Spark, planned by the optimizer for a
    small workload, then a backward query (a star back to the raw pixels of exposure 1) and a
    forward one (a cosmic-ray pixel of exposure 1 forward to the repaired image), each timed
    against re-executing every operator (BlackBox)."""
    import time

    import numpy as np

    from subzero.workflows import load_builtin
    from subzero.workflows.astronomy import UDFS

    store = Path(args.store)
    ours = _made_by_demo(store)  # a store an earlier demo made, even one it was killed making: rebuilt
    wf, inputs = load_builtin("astronomy", quick=args.quick)
    middle = [[n // 2 for n in inputs["exposure_1"].shape]]
    workload = [{"direction": "backward", "node": "stars", "to": "exposure_1", "cells": middle},
                {"direction": "forward", "node": "exposure_1", "to": "clean", "cells": middle}]
    start = time.perf_counter()
    run = _run_with_progress(args, wf, inputs, store=store, workload=workload, max_disk="2x", executor=args.executor,
                             overwrite=ours, made_by=DEMO)
    shape = "x".join(map(str, inputs["exposure_1"].shape))
    print(f"ran the astronomy workflow ({len(run.strategies)} operators, {shape} exposures) on {run.catalog.executor} "
          f"in {time.perf_counter() - start:.1f} s into {run.path}")
    for node in UDFS:
        print(f"  UDF {node:>9}: {', '.join(run.strategies[node])}  [{run.catalog.nodes[node].reason}]")
    blackbox = {node: "BlackBox" for node in run.strategies}

    def timed(query, *a, **kw):
        t0 = time.perf_counter()
        got = query(*a, **kw)
        return got, time.perf_counter() - t0

    labels = np.asarray(run.output("stars"))
    sizes = np.bincount(labels.reshape(-1))[1:]
    star = np.argwhere(labels == 1 + int(np.argmax(sizes))) if len(sizes) else np.array([middle[0]])
    back, t = timed(run.backward, "stars", star, to="exposure_1")
    again, t_bb = timed(run.backward, "stars", star, to="exposure_1", using=blackbox)
    _check_same(back, again, "backward")
    print(f"backward: a star of {len(star)} pixels <- {len(back)} pixels of exposure_1 in {1000 * t:.1f} ms "
          f"({t_bb / t:.0f}x faster than re-running the workflow's operators: {1000 * t_bb:.0f} ms)")
    rays = np.argwhere(np.asarray(run.output("crmask_1")) > 0)
    ray = [tuple(int(v) for v in rays[len(rays) // 2])] if len(rays) else middle
    fwd, t = timed(run.forward, "exposure_1", ray, to="clean")
    again, t_bb = timed(run.forward, "exposure_1", ray, to="clean", using=blackbox)
    _check_same(fwd, again, "forward")
    print(f"forward: cosmic-ray pixel {list(ray[0])} of exposure_1 -> {len(fwd)} pixels of the repaired image "
          f"in {1000 * t:.1f} ms ({t_bb / t:.0f}x faster than re-execution: {1000 * t_bb:.0f} ms)")
    print(f"explain the plan: subzero explain {run.path}")
    return 0


def _check_same(stored, re_executed, direction: str) -> None:
    """The demo's correctness check: stored lineage and re-execution give the same cells."""
    import numpy as np

    if not np.array_equal(stored, re_executed):
        raise LineageError(f"the demo's {direction} query gave {len(stored)} cell(s) from stored lineage but "
                           f"{len(re_executed)} by re-execution; this is a bug in subzero, please report it")


def cmd_explain(args) -> int:
    """``subzero explain``: what each node stored and why; the exit status."""
    from subzero.run import open_run

    run = open_run(args.store, partial=True)  # a failed or running store: what it committed
    if args.json:
        from subzero.describe import explain_data

        print(json.dumps(explain_data(run), indent=2))
        return 0
    from subzero.explain import explain

    print(explain(run))
    return 0


def cmd_info(args) -> int:
    """``subzero info``: a store's summary; the exit status."""
    from subzero.info import info_data, info_text

    data = info_data(args.store)
    print(json.dumps(data, indent=2) if args.json else info_text(data))
    return 0


def cmd_view(args) -> int:
    """``subzero view``: serve the viewer over a store until interrupted; the exit status."""
    from subzero.view.server import serve

    serve(args.store, host=args.host, port=args.port, open_browser=args.open)
    return 0


def cmd_bench(args) -> int:
    """``subzero bench``: run a benchmark and write its results; the exit status."""
    if args.name == "viewer":
        from subzero.bench.viewer import run_viewer

        doc = run_viewer(args.out or "benchmarks/results/viewer", quick=args.quick)
        return 0 if all(doc["met"].values()) else 1
    if args.name == "faults":
        from subzero.bench.faults import run_faults

        doc = run_faults(args.out or "benchmarks/results/faults", quick=args.quick)
        return 0 if doc["ok"] else 1
    from subzero.bench import main as bench_main

    extra = {"max_": args.max} if args.name == "scale" else {}
    return bench_main(args.name, quick=args.quick, out_dir=args.out or f"benchmarks/results/{args.name}", **extra)


# -- the parser -------------------------------------------------------------------------------

def _add_cell_options(parser) -> None:
    """``--cells``, ``--box`` and ``--fits-coords``: the cells a query, brush or replay starts from."""
    parser.add_argument("--cells", action="append", metavar="R,C[;R,C...]",
                        help="one cell 'R,C' or several 'R,C;R,C' (repeatable)")
    parser.add_argument("--box", action="append", metavar="R0:R1,C0:C1", help="a half-open box (repeatable)")
    parser.add_argument("--fits-coords", action="store_true",
                        help="cells are 1-based X,Y and boxes inclusive X0:X1,Y0:Y1 (DS9/FITS); output likewise")


def _add_answer_options(parser, func, traced: str, json_help: str, plot_help: str) -> None:
    """The options ``query`` and ``brush`` share: the start cells, forced strategies, and where the
    ``traced`` cells go (JSON, a plot, a mask, DS9 regions); ``func`` runs the command."""
    parser.set_defaults(func=func)
    _add_cell_options(parser)
    parser.add_argument("--using", action="append", metavar="NODE=STRATEGY", help="force a stored strategy")
    parser.add_argument("--json", action="store_true", help=json_help)
    parser.add_argument("--plot", metavar="FILE.png", help=plot_help)
    parser.add_argument("--mask", metavar="FILE.npy|FILE.fits", help=f"write the {traced} as a boolean mask")
    parser.add_argument("--regions", metavar="FILE.reg", help=f"write the {traced} as DS9 regions (2-D)")
    parser.add_argument("--regions-frame", choices=["image", "fk5"], default="image",
                        help="--regions in image coordinates (default) or fk5 through the node's WCS")
    parser.add_argument("--sky", action="append", metavar="'RA DEC'",
                        help="a cell by sky position, degrees or sexagesimal (ICRS/fk5), through the node's WCS "
                             "(repeatable)")


def _version() -> str:
    from subzero import __version__

    return f"subzero {__version__}"


def build_parser() -> argparse.ArgumentParser:
    """The ``subzero`` argument parser with every sub-command."""
    parser = argparse.ArgumentParser(prog="subzero", description="Fine-grained lineage for array workflows on Spark.")
    parser.add_argument("--version", action="version", version=_version())
    common = argparse.ArgumentParser(add_help=False)
    # -v/-q work before or after the command: the sub-commands' copies only override when given
    for where, verbose, quiet in ((parser, 0, False), (common, argparse.SUPPRESS, argparse.SUPPRESS)):
        where.add_argument("-v", "--verbose", action="count", default=verbose,
                           help="more diagnostics on stderr, repeatable (-v: with Spark's warnings; -vv: debug)")
        where.add_argument("-q", "--quiet", action="store_true", default=quiet, help="no progress display, errors only")
    common.add_argument("--storage-option", action="append", metavar="KEY=VALUE", dest="storage_option",
                        help="an fsspec option of the store's file system, repeatable (s3://: endpoint_url=URL, "
                             "key=..., secret=..., client_kwargs.region_name=...)")
    sub = parser.add_subparsers(dest="command", required=True)

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
    run.set_defaults(func=cmd_run)

    query = sub.add_parser("query", parents=[common], help="backward or forward lineage of cells of a stored run")
    query.add_argument("store")
    query.add_argument("direction", choices=["backward", "forward"])
    query.add_argument("node", help="the node the cells belong to")
    query.add_argument("--to", required=True, help="the node to trace to")
    _add_answer_options(query, cmd_query, "traced cells", "print JSON instead of one cell per line",
                        "draw the traced cells over the arrays (PNG, PDF, SVG)")

    brush = sub.add_parser("brush", parents=[common],
                           help="linked brushing: cells of a node back to an input and forward to every output",
                           description="Trace the brushed cells of NODE back to an input (--to; default: NODE's only "
                                       "input) and those input cells forward to every output of the workflow, in "
                                       "one call (Smoke's linked brushing).")
    brush.add_argument("store")
    brush.add_argument("node", help="the node the brushed cells belong to")
    brush.add_argument("--to", help="the input to trace back to (default: the node's only input)")
    brush.add_argument("--outputs", action="append", metavar="NODE[,NODE]",
                       help="the nodes to trace forward to (default: the workflow's outputs)")
    _add_answer_options(brush, cmd_brush, "traced input cells", "print JSON: counts and disjoint boxes of every answer",
                        "draw the brush, the input cells and every output's cells")

    replay = sub.add_parser("replay", parents=[common],
                            help="what-if: replace input cells and re-run only what they reach, into a new store",
                            description="Selective replay (Titian): replace cells of an input (given directly with "
                                        "--from INPUT, or traced back from an output's cells with --from NODE --to "
                                        "INPUT) by --set VALUE or by the values of --input NAME=PATH, re-run only "
                                        "the tiles the change reaches into a new store, and report which output "
                                        "cells changed.  --input alone replaces the whole input: only the cells "
                                        "that differ count as changed.")
    replay.add_argument("store", help="the finished run to start from")
    replay.add_argument("--store", dest="out", required=True, metavar="NEW", help="new directory for the replayed run")
    replay.add_argument("--from", dest="from_node", metavar="NODE",
                        help="the node --cells/--box belong to: an input, or an output traced back to --to")
    replay.add_argument("--to", metavar="INPUT", help="the input whose cells are replaced (default: NODE's only input)")
    _add_cell_options(replay)
    replay.add_argument("--set", metavar="VALUE", help="the new value of every replaced cell (e.g. 0, 1e3, nan)")
    replay.add_argument("--input", action="append", metavar="NAME=PATH",
                        help="take the new values from a file of the input's shape (.npy, FITS, Zarr)")
    replay.add_argument("--outputs", action="append", metavar="NODE[,NODE]",
                        help="the nodes to report changes of (default: the workflow's outputs)")
    replay.add_argument("--executor", choices=["local", "spark"], default="local",
                        help="where re-run tiles run (default: in this process; a replay re-runs few tiles)")
    replay.add_argument("--master", help="Spark master URL, with --executor spark")
    replay.add_argument("--overwrite", action="store_true",
                        help="replace NEW if it is a store subzero made (a failed replay's) and no run is writing it")
    replay.add_argument("--no-check", action="store_true",
                        help="skip checking the changed outputs against the forward lineage of the changed inputs")
    replay.add_argument("--json", action="store_true", help="print JSON")
    replay.set_defaults(func=cmd_replay)

    demo = sub.add_parser("demo", parents=[common],
                          help="the main job: the astronomy workflow on Spark and two lineage queries")
    demo.add_argument("--store", default="runs/demo")
    demo.add_argument("--executor", choices=["spark", "local"], default="spark")
    demo.add_argument("--quick", action="store_true", help="128 x 500 exposures instead of 512 x 2000")
    demo.set_defaults(func=cmd_demo)
    explain = sub.add_parser("explain", parents=[common],
                             help="the chosen strategy per node, predicted and measured costs, and why")
    explain.add_argument("store")
    explain.add_argument("--json", action="store_true", help="print JSON")
    explain.set_defaults(func=cmd_explain)

    info = sub.add_parser("info", parents=[common],
                          help="what a store holds: nodes, shapes, dtypes, strategies, sizes, status",
                          description="Describe a store from its catalog: its nodes (inputs and operators), their "
                                      "shapes, dtypes, chunks, strategies and sizes, and the run's status (also for "
                                      "a run that failed or is still running).")
    info.add_argument("store")
    info.add_argument("--json", action="store_true", help="print JSON")
    info.set_defaults(func=cmd_info)

    from subzero.cli_stats import add_parsers as add_stats_parsers

    add_stats_parsers(sub, common)  # catalog, contaminate

    view = sub.add_parser("view", parents=[common], help="browse a store in a web page, with linked brushing",
                          description="Serve a page showing every node of a stored run (2-D nodes as pan/zoom "
                                      "images) where brushing cells of one node highlights their backward lineage "
                                      "upstream and forward lineage downstream; read-only; Ctrl-C stops it.")
    view.add_argument("store")
    view.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    view.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    view.add_argument("--open", action="store_true", help="open the page in a web browser")
    view.set_defaults(func=cmd_view)

    bench = sub.add_parser("bench", parents=[common],
                           help="reproduce the paper's experiments side by side with baselines")
    bench.add_argument("name", choices=["astronomy", "genomics", "micro", "scale", "faults", "trace", "stats",
                                        "coldquery", "capture", "dataplane", "viewer"])
    bench.add_argument("--quick", action="store_true", help="small sizes: under two minutes")
    bench.add_argument("--max", action="store_true",
                       help="scale: also 1e9 cells (Spark only; about 20 minutes on 2 cores and 40 GB of disk)")
    bench.add_argument("--out", help="output directory (default benchmarks/results/NAME)")
    bench.set_defaults(func=cmd_bench)
    return parser


#: options whose value may start with "-" (a negative cell or a negative budget is refused by the
#: option itself, with its own message, not by argparse as "expected one argument")
_VALUE_OPTIONS = ("--cells", "--box", "--max-disk", "--max-runtime", "--tile", "--set")


def _attach_negative_values(argv: list[str]) -> list[str]:
    """``--cells -1,0`` -> ``--cells=-1,0``: argparse reads a value starting with "-" as an option.

    Examples
    --------
    >>> _attach_negative_values(["query", "--cells", "-1,0", "--max-disk", "-5MB", "-v"])
    ['query', '--cells=-1,0', '--max-disk=-5MB', '-v']
    """
    out: list[str] = []
    k = 0
    while k < len(argv):
        item = argv[k]
        if item in _VALUE_OPTIONS and k + 1 < len(argv) and re.match(r"^-[\d.]", argv[k + 1]):
            out.append(f"{item}={argv[k + 1]}")
            k += 2
            continue
        out.append(item)
        k += 1
    return out


def _apply_storage_options(args) -> None:
    """``--storage-option KEY=VALUE``: fsspec's configuration for the protocol of every store the
    command names, so each place that opens them (and the tasks they travel to) uses them."""
    from subzero.store.location import configure_storage_options, parse_storage_options

    options = parse_storage_options(getattr(args, "storage_option", None))
    for name in ("store", "out"):
        url = getattr(args, name, None)
        if options and isinstance(url, str):
            configure_storage_options(url, options)


def _spark_conf(items: list[str] | None) -> dict[str, str]:
    """``--conf key=value`` (repeatable) as a dict of Spark settings."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise WorkflowError(f"--conf {item!r} must look like KEY=VALUE (e.g. spark.driver.memory=4g)")
        out[key.strip()] = value
    return out


def _one_line(exc: BaseException) -> str:
    text = " ".join(part.strip() for part in str(exc).strip().splitlines() if part.strip())
    return text or type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (0; 2 for a user error; 130 when interrupted;
    141 when stdout's reader went away, as in ``subzero query ... | head``)."""
    from subzero.progress import configure_logging

    args = build_parser().parse_args(_attach_negative_values(sys.argv[1:] if argv is None else list(argv)))
    configure_logging(args.verbose, args.quiet)
    if args.verbose < 2:
        import warnings

        warnings.filterwarnings("ignore", category=FutureWarning, module=r"pyspark(\..*)?$")
    try:
        _apply_storage_options(args)
        return args.func(args)
    except BrokenPipeError:  # `subzero query ... | head`: the reader left; no error message
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # keep Python's exit-time flush of stdout quiet
        return 141
    except ModuleNotFoundError as exc:  # an optional package (the astronomy operators', the benches')
        print(f"subzero: error: {exc}; install it (pip install 'subzero[bench]' brings the astronomy and "
              "benchmark packages, or run scripts/setup.sh)", file=sys.stderr)
        return 2
    except (SubZeroError, OSError, json.JSONDecodeError) as exc:
        if args.verbose:
            import traceback

            traceback.print_exception(exc, file=sys.stderr)
        print(f"subzero: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        print(f"subzero: interrupted{f'; {exc}' if str(exc) else ''}", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

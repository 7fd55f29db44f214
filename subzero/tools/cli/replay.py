"""``subzero replay``: replace input cells and re-run only what they reach, into a new store."""

from __future__ import annotations

import argparse
import json
import logging
import sys

from subzero.tools.cli.cells import add_cell_options, query_start
from subzero.tools.cli.common import check_store, quiet_spark_launch, spark_session
from subzero.tools.cli.query import bbox_text
from subzero.errors import WorkflowError

__all__ = ["add_parser", "cmd_replay"]

log = logging.getLogger(__name__)


def _replay_patches(args, run) -> list:
    """The `subzero.replay.Patch` es of ``subzero replay``'s flags, every file read and every
    cell checked before anything is written."""
    from subzero.tools.brush import default_source
    from subzero.input_files import parse_assignments, read_input
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
    start = query_start(args)
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
            text += f" in {bbox_text(out.changed, fits)}"
        if out.within_lineage is True:
            text += "; within the forward lineage of the changed input cells"
        elif out.within_lineage is False:
            text += "; NOT within the forward lineage of the changed input cells: an operator's lineage is wrong"
        lines.append(text)
    return "\n".join(lines)


def cmd_replay(args: argparse.Namespace) -> int:
    """``subzero replay``: replace input cells and re-run what they reach into a new store; the exit status."""
    import contextlib

    from subzero.progress import choose_reporter
    from subzero.replay import replay
    from subzero.run import open_run

    run = open_run(args.store)
    check_store(args.out, overwrite=args.overwrite, resume=False)
    patches = _replay_patches(args, run)
    outputs = [o for item in args.outputs or [] for o in item.split(",") if o] or None
    spark = spark_session(args)
    if args.executor == "spark":
        quiet_spark_launch(args.verbose)
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
        from subzero.tools.describe import frontier_data

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


def add_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """``subzero replay``."""
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
    add_cell_options(replay)
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

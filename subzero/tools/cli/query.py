"""``subzero query`` (backward or forward lineage of cells) and ``subzero brush`` (linked
brushing), and where their answers go: stdout, JSON, a plot, a mask, DS9 regions."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import TYPE_CHECKING, Any

from subzero.tools.cli.cells import add_cell_options, add_sky_cells, query_start
from subzero.tools.cli.common import store_command
from subzero.errors import LineageError
from subzero.input_files import node_fits_header as _fits_header
from subzero.modes import Direction
from subzero.modes import parse_node_strategies as _parse_strategies

if TYPE_CHECKING:
    from subzero.frontier import Frontier

__all__ = ["add_parser", "cmd_query", "cmd_brush", "bbox_text"]

log = logging.getLogger(__name__)


def _check_outputs(args, run, mask_node: str, drawn: list[str]) -> None:
    """Refuse bad output files before the query runs, so an error writes nothing: ``--mask``
    and ``--regions`` are of ``mask_node``, ``--plot`` draws the 2-D ones of ``drawn``."""
    if not (args.mask or args.regions or args.plot):
        return  # nothing to write: no need for the export module (numpy.ma, astropy on demand)
    from subzero.tools.export import MASK_SUFFIXES, PLOT_SUFFIXES, REGION_SUFFIXES, check_output

    if args.mask:
        check_output(args.mask, MASK_SUFFIXES, "--mask")
    if args.regions:
        check_output(args.regions, REGION_SUFFIXES, "--regions")
        if len(run.shape(mask_node)) != 2:
            raise LineageError(f"--regions: node {mask_node!r} has shape {run.shape(mask_node)}; DS9 regions are for "
                               "2-D images (use --mask for other ranks)")
        if getattr(args, "regions_frame", "image") == "fk5":
            from subzero.tools.view.sky import node_wcs

            if run.node(mask_node).name not in node_wcs(run):
                raise LineageError(f"--regions-frame fk5: node {mask_node!r} has no WCS (not a FITS input with one, "
                                   "nor on its pixel grid); write image regions instead")
    if args.plot:
        check_output(args.plot, PLOT_SUFFIXES, "--plot")
        if all(len(run.shape(n)) != 2 for n in drawn):
            shapes = " and ".join(f"{n!r} has shape {run.shape(n)}" for n in dict.fromkeys(drawn))
            raise LineageError(f"--plot draws 2-D arrays; {shapes} (use --mask or --json instead)")


def _plot(args, run, ends: list[tuple[str, Any, str, str]]) -> None:
    """Draw ``(node, cells, title, role)`` panels side by side (cells: a mask or a `Frontier`;
    role: ``brush``, ``backward`` or ``forward``, their colour); an end that is not 2-D is
    left out with a warning."""
    from subzero.tools.export import Panel, plot_panels
    from subzero.tools.view.lineage import display_kind
    from subzero.tools.view.sky import node_wcs

    panels = []
    grids = node_wcs(run)
    for node, cells, title, role in ends:
        if len(run.shape(node)) != 2:
            log.warning("--plot: %s has shape %s, not 2-D: not drawn", node, run.shape(node))
            continue
        # the stored array itself: only the cutout around the cells is read
        panels.append(Panel(title, run.output(node), cells, wcs=grids.get(run.node(node).name),
                            display=display_kind(run, run.node(node).name), role=role))
    plot_panels(args.plot, panels, origin="lower" if args.fits_coords else "upper")


def _write_files(args, run, node: str, mask, history: str, text: str) -> list[str]:
    """``--mask`` and ``--regions`` of ``mask`` (cells of ``node``); the paths written."""
    written = []
    if args.mask:
        from subzero.tools.export import write_mask

        written.append(str(write_mask(args.mask, mask, _fits_header(run, node), history=history)))
    if args.regions:
        from subzero.tools.export import write_regions

        wcs = None
        if getattr(args, "regions_frame", "image") == "fk5":  # `_check_outputs` made sure the node has one
            from subzero.tools.view.sky import node_wcs

            wcs = node_wcs(run)[run.node(node).name]
        written.append(str(write_regions(args.regions, mask, text=text, wcs=wcs)))
    return written


def _open_traced(args) -> tuple[Any, dict, dict | None]:
    """What ``query`` and ``brush`` start from: the run, its start cells (``--sky`` included)
    and the strategies ``--using`` forces."""
    from subzero.run import open_run

    run = open_run(args.store)
    add_sky_cells(args, run, args.node)
    return run, query_start(args), {k: v[-1] for k, v in _parse_strategies(args.using, "--using").items()} or None


def cmd_query(args: argparse.Namespace) -> int:
    """``subzero query``: trace cells backward or forward and print or write them; the exit status."""
    run, start, using = _open_traced(args)
    _check_outputs(args, run, args.to, [args.node, args.to])
    query = run.backward if Direction.parse(args.direction) is Direction.BACKWARD else run.forward
    answer = query(args.node, to=args.to, using=using, as_="frontier", **start)
    result = answer.coords()  # the answer's cells; a mask of the array only for the files that need one
    mask = answer.mask() if (args.mask or args.regions) else None
    shown = result
    if args.fits_coords:
        from subzero.tools.export import to_fits_coords

        shown = to_fits_coords(result)
    written = _write_files(args, run, args.to, mask,
                           f"subzero {args.direction} lineage of {args.node} in {args.to}: {len(result)} cells",
                           f"{args.to}: {args.direction} of {args.node}")
    if args.plot:
        from subzero.tools.export import query_text

        first = run.frontier(args.node, **start)
        asked = f"{args.node}{query_text(first, args.fits_coords)}"
        _plot(args, run, [(args.node, first, f"{asked}: {first.count} cell(s) queried", "brush"),
                          (args.to, answer, f"{args.to}: {len(result)} cell(s), {args.direction} lineage of {asked}",
                           args.direction)])
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


def bbox_text(frontier: Frontier, fits: bool) -> str:
    """A frontier's bounding box: ``rows 3:9, cols 10:12`` (numpy) or ``[11:12,4:9]`` (FITS)."""
    box = frontier.bbox()
    if box is None:
        return "none"
    lo, hi = box
    if fits:
        return "[" + ",".join(f"{int(a) + 1}:{int(b)}" for a, b in zip(lo[::-1], hi[::-1])) + "]"
    return "[" + ", ".join(f"{int(a)}:{int(b)}" for a, b in zip(lo, hi)) + "]"


def cmd_brush(args: argparse.Namespace) -> int:
    """``subzero brush``: linked brushing from a node's cells; the exit status."""
    from subzero.tools.brush import brush, brush_data, default_source

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
        from subzero.tools.export import query_text

        asked = f"{args.node}{query_text(result.brushed, args.fits_coords)}"
        ends = [(args.node, result.brushed, f"{asked}: {result.brushed.count} cell(s) brushed", "brush"),
                (to, result.traced, f"{to}: {result.traced.count} cell(s), backward lineage of {asked}", "backward")]
        ends += [(name, f, f"{name}: {f.count} cell(s), forward lineage of those in {to}", "forward")
                 for name, f in result.linked.items()]
        _plot(args, run, ends)
        written.append(str(args.plot))
    if args.json:
        data = brush_data(result, fits=args.fits_coords)
        print(json.dumps(data | {"written": written}))
        return 0
    fits = args.fits_coords
    lines = [f"brushed {args.node}: {result.brushed.count} cell(s) in {bbox_text(result.brushed, fits)}",
             f"  <- {to}: {result.traced.count} cell(s) in {bbox_text(result.traced, fits)}"]
    lines += [f"  -> {name}: {f.count} cell(s) in {bbox_text(f, fits)}" for name, f in result.linked.items()]
    lines.append(f"in {1000 * result.seconds:.1f} ms (backward {1000 * result.backward_seconds:.1f} ms, forward "
                 f"{1000 * result.forward_seconds:.1f} ms)" + (f"; wrote {', '.join(written)}" if written else ""))
    print("\n".join(lines))
    return 0


def _add_answer_options(parser, func, traced: str, json_help: str, plot_help: str) -> None:
    """The options ``query`` and ``brush`` share: the start cells, forced strategies, and where the
    ``traced`` cells go (JSON, a plot, a mask, DS9 regions); ``func`` runs the command."""
    parser.set_defaults(func=func)
    add_cell_options(parser)
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


def add_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """``subzero query`` and ``subzero brush``."""
    query = store_command(sub, common, "query", cmd_query, help="backward or forward lineage of cells of a stored run")
    query.add_argument("direction", choices=["backward", "forward"])
    query.add_argument("node", help="the node the cells belong to")
    query.add_argument("--to", required=True, help="the node to trace to")
    _add_answer_options(query, cmd_query, "traced cells", "print JSON instead of one cell per line",
                        "draw the traced cells over the arrays (PNG, PDF, SVG)")

    brush = store_command(sub, common, "brush", cmd_brush,
                          help="linked brushing: cells of a node back to an input and forward to every output",
                          description="Trace the brushed cells of NODE back to an input (--to; default: NODE's only "
                                      "input) and those input cells forward to every output of the workflow, in "
                                      "one call (Smoke's linked brushing).")
    brush.add_argument("node", help="the node the brushed cells belong to")
    brush.add_argument("--to", help="the input to trace back to (default: the node's only input)")
    brush.add_argument("--outputs", action="append", metavar="NODE[,NODE]",
                       help="the nodes to trace forward to (default: the workflow's outputs)")
    _add_answer_options(brush, cmd_brush, "traced input cells", "print JSON: counts and disjoint boxes of every answer",
                        "draw the brush, the input cells and every output's cells")

"""The ``subzero table`` and ``subzero contaminate`` commands (lineage statistics: `subzero.stats`).

``subzero catalog`` is the older name of ``subzero table`` (an alias): a run's catalog is its
``catalog.json``, the record of what it stored.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from subzero.errors import LineageError
from subzero.tools.cli.common import store_command

if TYPE_CHECKING:
    import numpy as np

__all__ = ["add_parser", "cmd_table", "cmd_contaminate"]

TABLE_FORMATS = {".ecsv": "ascii.ecsv", ".csv": "ascii.csv", ".fits": "fits", ".fit": "fits", ".fts": "fits"}


def add_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """``subzero table`` (also ``subzero catalog``, its older name) and ``subzero contaminate``."""
    table = store_command(
        sub, common, "table", cmd_table, aliases=("catalog",),
        help="per-object lineage statistics of a label array (one row per object)",
        description="For every object of a label array (a node holding ints, 0 = background), the size of its "
                    "backward lineage in --over, how many of those cells are flagged, and statistics of --values "
                    "over them; all objects carried together (in batches of neighbours), never a query per object.")
    table.add_argument("--objects", required=True, help="the node whose array labels the objects")
    table.add_argument("--over", help="the ancestor the lineage is measured in (default: the one input --objects "
                                      "is computed from)")
    table.add_argument("--flags", help="flagged cells of --over: a file (.npy, .fits, .fits[EXT], .zarr), a node, "
                                       "or an expression such as 'raw>60000' (nonzero = flagged)")
    table.add_argument("--values", help="values of --over's cells to sum, average and maximise: a file or a node")
    table.add_argument("--out", required=True, metavar="FILE.ecsv|FILE.fits|FILE.csv", help="the table to write")
    table.add_argument("--using", action="append", metavar="NODE=STRATEGY", help="force a stored strategy")

    cont = store_command(
        sub, common, "contaminate", cmd_contaminate,
        help="where flagged input cells end up (and, with --count, how many)",
        description="The forward lineage of every flagged cell of --from in --to, as a mask; with --count, for "
                    "each cell of --to the number of distinct flagged cells in its backward lineage.")
    cont.add_argument("--from", dest="source", required=True, help="the node the flags are on (e.g. an input)")
    cont.add_argument("--flags", required=True,
                      help="flagged cells: a file (.npy, .fits, .fits[EXT], .zarr), a node, or 'raw>60000'")
    cont.add_argument("--to", required=True, help="the descendant to map the contamination in")
    cont.add_argument("--out", required=True, metavar="FILE.fits|FILE.npy|DIR.zarr",
                      help="the mask (uint8 0/1), or with --count the counts (int32), of --to's shape; with "
                           "--count, a new .zarr array is written chunk by chunk (int64), never held in memory")
    cont.add_argument("--count", action="store_true",
                      help="count distinct flagged cells per cell (set semantics) instead of a mask")
    cont.add_argument("--plot", metavar="FILE.png", help="draw the flags and the contamination (PNG, PDF, SVG)")
    cont.add_argument("--using", action="append", metavar="NODE=STRATEGY", help="force a stored strategy")


def _using(args) -> dict | None:
    from subzero.modes import parse_node_strategies

    return {k: v[-1] for k, v in parse_node_strategies(args.using, "--using").items()} or None


def _table_format(path: str) -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in TABLE_FORMATS:
        raise LineageError(f"--out {path!r}: give a file ending in {', '.join(TABLE_FORMATS)}")
    from subzero.tools.export import check_output

    check_output(path, tuple(TABLE_FORMATS), "--out")
    return TABLE_FORMATS[suffix]


def cmd_table(args: argparse.Namespace) -> int:
    """``subzero table``: a per-object lineage table of a stored run; the exit status."""
    import numpy as np

    from subzero.tools.export import atomic_path
    from subzero.run import open_run
    from subzero.stats.spec import parse_flags, read_array_spec

    fmt = _table_format(args.out)
    run = open_run(args.store)
    from subzero.stats.table import default_over

    over = run.node(args.over) if args.over else default_over(run, run.node(args.objects))
    flags = parse_flags(run, args.flags, run.shape(over)) if args.flags else None
    values = read_array_spec(run, args.values, "--values") if args.values else None
    table = run.lineage_table(args.objects, over=over.name, flags=flags, values=values, using=_using(args))
    table.meta = {k: v for k, v in table.meta.items() if v is not None}
    if args.flags:
        table.meta["flags"] = args.flags
    if args.values:
        table.meta["values"] = args.values
    out = Path(args.out)
    with atomic_path(out) as tmp:
        table.write(tmp, format=fmt, overwrite=True)
    flagged = int(np.count_nonzero(table["n_flagged"])) if "n_flagged" in table.colnames else None
    extra = f", {flagged} with flagged cells in their lineage" if flagged is not None else ""
    print(f"table of {args.objects} over {over.name}: {len(table)} object(s){extra}; wrote {out}")
    return 0


def _write_counts(path: Path, counts: np.ndarray, header, history: str) -> None:
    import numpy as np

    from subzero.tools.export import atomic_path

    if path.suffix.lower() == ".npy":
        with atomic_path(path) as tmp:
            np.save(tmp, counts)
        return
    from astropy.io import fits

    from subzero.tools.export import write_fits_mask

    write_fits_mask(path, counts > 0, header, history)  # the header handling, then the counts as data
    with fits.open(path) as hdus:
        out = fits.PrimaryHDU(counts.astype(np.int32), header=hdus[0].header)
    with atomic_path(path) as tmp:
        out.writeto(tmp, overwrite=True, output_verify="silentfix")


def cmd_contaminate(args: argparse.Namespace) -> int:
    """``subzero contaminate``: contamination masks and counts of flagged cells; the exit status."""
    import numpy as np

    from subzero.input_files import node_fits_header
    from subzero.tools.export import MASK_SUFFIXES, PLOT_SUFFIXES, Panel, check_output, plot_panels, write_mask
    from subzero.run import open_run
    from subzero.stats import contamination_count, contamination_mask
    from subzero.stats.spec import parse_flags

    if args.count and str(args.out).rstrip("/").lower().endswith(".zarr"):
        return _count_to_zarr(args)
    out = check_output(args.out, MASK_SUFFIXES, "--out")
    if args.plot:
        check_output(args.plot, PLOT_SUFFIXES, "--plot")
    run = open_run(args.store)
    src, to = run.node(args.source), run.node(args.to)
    flags = parse_flags(run, args.flags, run.shape(src))
    using = _using(args)
    flag_mask = (np.asarray(run.output(flags)) if isinstance(flags, str) else np.asarray(flags)) != 0
    if flag_mask.shape != tuple(run.shape(src)):
        raise LineageError(f"--flags has shape {flag_mask.shape}, node {src.name!r} has shape {tuple(run.shape(src))}; "
                           "give flags of that shape")
    n_flags = int(np.count_nonzero(flag_mask))
    what = f"{n_flags} flagged cell(s) of {src.name} ({args.flags})"
    if args.count:
        counts = contamination_count(run, src.name, flag_mask, to.name, using=using)
        mask = counts > 0
        _write_counts(out, counts, node_fits_header(run, to.name), f"subzero contaminate --count: {what} in {to.name}")
        summary = f"{int(mask.sum())} cell(s) of {to.name} depend on them, at most {int(counts.max(initial=0))} each"
    else:
        mask = contamination_mask(run, src.name, flag_mask, to.name, using=using)
        write_mask(out, mask, node_fits_header(run, to.name), history=f"subzero contaminate: {what} in {to.name}")
        summary = f"{int(mask.sum())} cell(s) of {to.name} depend on them"
    written = [str(out)]
    if args.plot:
        panels = []
        if len(run.shape(src)) == 2:
            panels.append(Panel(f"{src.name}: {n_flags} flagged cell(s) ({args.flags})", np.asarray(run.output(src)),
                                flag_mask, role="brush"))
        if len(run.shape(to)) == 2:
            panels.append(Panel(f"{to.name}: {int(mask.sum())} contaminated cell(s), forward lineage of the flagged "
                                f"cells of {src.name}", np.asarray(run.output(to)), mask, role="forward"))
            if args.count:
                panels.append(Panel(f"distinct flagged cells per cell of {to.name} (max {int(counts.max(initial=0))})",
                                    counts, np.zeros(counts.shape, bool), display="counts", role="forward"))
        if not panels:
            raise LineageError(f"--plot draws 2-D arrays; {src.name!r} and {to.name!r} are not 2-D")
        plot_panels(args.plot, panels)
        written.append(str(args.plot))
    print(f"contaminate {src.name} -> {to.name}: {what}; {summary}; wrote {', '.join(written)}")
    return 0


def _count_to_zarr(args: argparse.Namespace) -> int:
    """``subzero contaminate --count --out DIR.zarr``: the counts written chunk by chunk (flags
    that are a node or a Zarr array read chunk by chunk too); the exit status."""
    import numpy as np

    from subzero.run import open_run
    from subzero.stats.spec import parse_flags

    if args.plot:
        raise LineageError("--plot draws arrays held in memory; with --out DIR.zarr, plot the written array later "
                           "or give --out FILE.fits")
    run = open_run(args.store)
    src, to = run.node(args.source), run.node(args.to)
    flags = parse_flags(run, args.flags, run.shape(src))
    counts = run.contamination_count(src, flags, to, using=_using(args), out=args.out)
    shape, chunks = tuple(counts.shape), tuple(counts.chunks)
    counted = biggest = 0
    for lo in np.ndindex(*(-(-n // c) for n, c in zip(shape, chunks))):  # a chunk at a time
        block = np.asarray(counts[tuple(slice(k * c, (k + 1) * c) for k, c in zip(lo, chunks))])
        counted, biggest = counted + int(np.count_nonzero(block)), max(biggest, int(block.max(initial=0)))
    print(f"contaminate {src.name} -> {to.name}: flags {args.flags}; {counted} cell(s) of {to.name} depend on them, "
          f"at most {biggest} each; wrote {args.out}")
    return 0

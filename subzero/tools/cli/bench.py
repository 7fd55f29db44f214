"""``subzero bench NAME``: run a benchmark of the separate ``subzero-benchmarks`` distribution
(package ``subzero_bench``, in the checkout's ``benchmarks/``), imported only here and only when
the command runs; without it installed, one line says what to install."""

from __future__ import annotations

import argparse

from subzero.errors import WorkflowError

__all__ = ["add_parser", "cmd_bench", "NAMES"]

#: the benchmarks ``subzero bench`` offers (``subzero_bench.COMMANDS``; a test keeps the two equal):
#: listed here so that building the parser imports no benchmark code
NAMES = ("astronomy", "genomics", "micro", "scale", "faults", "trace", "stats", "coldquery", "capture", "dataplane",
         "viewer", "traced", "refresh")


def cmd_bench(args: argparse.Namespace) -> int:
    """``subzero bench``: run a benchmark and write its results; the exit status.

    The benchmarks are a distribution of their own (``subzero-benchmarks``, package
    ``subzero_bench``, in the checkout's ``benchmarks/``), imported here only."""
    try:
        import subzero_bench
    except ModuleNotFoundError as exc:
        if exc.name != "subzero_bench":
            raise
        raise WorkflowError("the benchmarks are not installed: from a checkout of subzero, pip install -e ./benchmarks "
                            "(scripts/setup.sh does)") from None
    shape = getattr(args, "shape", None)
    if shape is not None:
        if args.name != "viewer":
            raise WorkflowError(f"--shape sets the viewer benchmark's image shape; {args.name!r} does not take it")
        parts = shape.lower().split("x")
        if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise WorkflowError(f"--shape must be HxW with two positive integers (e.g. 800x125008), got {shape!r}")
        return subzero_bench.run_command(args.name, quick=args.quick, out_dir=args.out,
                                         shape=(int(parts[0]), int(parts[1])))
    return subzero_bench.run_command(args.name, quick=args.quick, out_dir=args.out, max_=args.max)


def add_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """``subzero bench``."""
    bench = sub.add_parser("bench", parents=[common],
                           help="reproduce the paper's experiments side by side with baselines")
    bench.add_argument("name", choices=NAMES)
    bench.add_argument("--quick", action="store_true", help="small sizes: under two minutes")
    bench.add_argument("--max", action="store_true",
                       help="scale: also 1e9 cells (Spark only; about 20 minutes on 2 cores and 40 GB of disk)")
    bench.add_argument("--shape", help="viewer: the astronomy images' shape, HxW (default 800x20000; stores are kept "
                                       "under the output directory)")
    bench.add_argument("--out", help="output directory (default benchmarks/results/NAME; refresh: the results file "
                                     "rewritten, default benchmarks/RESULTS.md)")
    bench.set_defaults(func=cmd_bench)

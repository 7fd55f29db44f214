"""``python -m subzero_bench NAME [--quick] [--out DIR]`` runs one benchmark;
``python -m subzero_bench report DIR...`` re-renders reports and figures from results.json;
``python -m subzero_bench summary DIR... --out FILE`` combines reports into one file."""

from __future__ import annotations

import argparse
import shlex
import sys

from subzero_bench import BENCHES, COMMANDS, main, render_dir, run_command, write_summary


def cli(argv: list[str] | None = None) -> int:
    """``python -m subzero_bench NAME``: run one benchmark (or ``report``/``summary``); the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m subzero_bench")
    parser.add_argument("name", choices=COMMANDS + ("report", "summary"))
    parser.add_argument("dirs", nargs="*", help="report, summary: result directories")
    parser.add_argument("--quick", action="store_true", help="small inputs, reduced grid")
    parser.add_argument("--max", action="store_true", help="scale: also 1e9 cells (Spark only)")
    parser.add_argument("--shape", help="viewer: the astronomy images' shape, HxW (default 800x20000)")
    parser.add_argument("--out", help="output directory (summary: output file)")
    parser.add_argument("--preface", help="summary: a markdown file to put after the machine table")
    args = parser.parse_args(argv)
    if args.name == "report":
        for d in args.dirs:
            render_dir(d)
        return 0
    if args.name == "summary":
        if not args.dirs or not args.out:
            parser.error("summary needs result directories and --out FILE")
        preface = open(args.preface).read() if args.preface else ""
        print(write_summary(args.dirs, args.out, preface))
        return 0
    if args.shape is not None and args.name != "viewer":
        parser.error("--shape sets the viewer benchmark's image shape only")
    if args.name not in BENCHES:  # faults, viewer: their own reports
        from subzero_bench.viewer import parse_shape

        try:
            shape = parse_shape(args.shape) if args.shape is not None else None
        except ValueError as exc:
            parser.error(str(exc))
        return run_command(args.name, quick=args.quick, out_dir=args.out, shape=shape)
    extra = {"max_": args.max} if args.name == "scale" else {}
    return main(args.name, args.quick, args.out, command=shlex.join(["python", "-m", "subzero_bench"] + argv), **extra)


if __name__ == "__main__":
    sys.exit(cli())

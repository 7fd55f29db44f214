"""The ``subzero`` command line (also ``python -m subzero``): run workflows, query their lineage.

Results go to stdout; progress and diagnostics (`logging`, ``-v``/``-q``) to stderr.
Errors a user can fix print one line on stderr and exit with code 2, having written nothing
(`subzero.tools.cli.common.dispatch`).  One module per command or small family (``run``, ``query``
with ``brush``, ``replay``, ``demo``, ``info`` with ``explain``, ``stats``: ``table`` and
``contaminate``, ``view``, ``bench``), each giving ``add_parser(sub, common)`` and its ``cmd_*``;
`build_parser` assembles them.  Imports are deferred to the command that needs them, so a
query starts fast.
"""

from __future__ import annotations

import argparse
import re
import sys

from subzero.tools.cli import bench, demo, info, query, replay, run, stats, view
from subzero.tools.cli.cells import parse_boxes, parse_cells
from subzero.tools.cli.common import dispatch

__all__ = ["main", "build_parser", "parse_cells", "parse_boxes"]

#: the commands' modules, in the order ``subzero --help`` lists them
COMMANDS = (run, query, replay, demo, info, stats, view, bench)


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
    for module in COMMANDS:
        module.add_parser(sub, common)
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


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (0; 1 when the store's service kept failing;
    2 for a user error; 130 when interrupted;
    141 when stdout's reader went away, as in ``subzero query ... | head``)."""
    from subzero.progress import configure_logging

    args = build_parser().parse_args(_attach_negative_values(sys.argv[1:] if argv is None else list(argv)))
    configure_logging(args.verbose, args.quiet)
    if args.verbose < 2:
        import warnings

        warnings.filterwarnings("ignore", category=FutureWarning, module=r"pyspark(\..*)?$")
    return dispatch(args)

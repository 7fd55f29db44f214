"""``subzero info`` (what a store holds) and ``subzero explain`` (what each node stored and why)."""

from __future__ import annotations

import argparse
import json

from subzero.tools.cli.common import store_command

__all__ = ["add_parser", "cmd_explain", "cmd_info"]


def cmd_explain(args: argparse.Namespace) -> int:
    """``subzero explain``: what each node stored and why; the exit status."""
    from subzero.run import open_run

    run = open_run(args.store, partial=True)  # a failed or running store: what it committed
    if args.json:
        from subzero.tools.describe import explain_data

        print(json.dumps(explain_data(run), indent=2))
        return 0
    from subzero.tools.explain import explain

    print(explain(run))
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    """``subzero info``: a store's summary; the exit status."""
    from subzero.tools.info import info_data, info_text

    data = info_data(args.store)
    print(json.dumps(data, indent=2) if args.json else info_text(data))
    return 0


def add_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """``subzero explain``, ``subzero info`` and ``subzero config``."""
    explain = store_command(sub, common, "explain", cmd_explain,
                            help="the chosen strategy per node, predicted and measured costs, and why")
    explain.add_argument("--json", action="store_true", help="print JSON")

    info = store_command(sub, common, "info", cmd_info,
                         help="what a store holds: nodes, shapes, dtypes, strategies, sizes, status",
                         description="Describe a store from its catalog: its nodes (inputs and operators), their "
                                     "shapes, dtypes, chunks, strategies and sizes, and the run's status (also for "
                                     "a run that failed or is still running).")
    info.add_argument("--json", action="store_true", help="print JSON")

    conf = sub.add_parser("config", parents=[common], help="every setting's current value and its source",
                          description="Print every setting (docs/guide/configuration.md) with its current value "
                                      "and where it comes from: default, the config file, the environment "
                                      "(SUBZERO_*).")
    conf.add_argument("--json", action="store_true", help="print JSON")
    conf.set_defaults(func=cmd_config)


def cmd_config(args: argparse.Namespace) -> int:
    """``subzero config``: every setting's current value and where it comes from; the exit status."""
    import json

    from subzero import config

    rows = list(config.rows())
    if args.json:
        print(json.dumps({name: {"value": value, "source": where, "type": kind}
                          for name, value, where, kind, _ in rows}, indent=2))
        return 0
    print(f"config file: {config.config_path()}")
    width = max(len(r[0]) for r in rows)
    vwidth = max(len(r[1] or "unset") for r in rows)
    for name, value, where, _, _ in rows:
        print(f"{name:<{width}}  {value or 'unset':<{vwidth}}  {where}")
    return 0

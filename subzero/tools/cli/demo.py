"""``subzero demo``: the astronomy workflow (`subzero.workflows.astronomy`, in the package) on
Spark, planned by the optimizer, and two lineage queries checked against re-execution."""

from __future__ import annotations

import argparse
from pathlib import Path

from subzero.tools.cli.common import run_with_progress
from subzero.errors import LineageError

__all__ = ["add_parser", "cmd_demo", "DEMO"]


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


def cmd_demo(args: argparse.Namespace) -> int:
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
    run = run_with_progress(args, wf, inputs, store=store, workload=workload, max_disk="2x", executor=args.executor,
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


def add_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """``subzero demo``."""
    demo = sub.add_parser("demo", parents=[common],
                          help="the main job: the astronomy workflow on Spark and two lineage queries")
    demo.add_argument("--store", default="runs/demo")
    demo.add_argument("--executor", choices=["spark", "local"], default="spark")
    demo.add_argument("--quick", action="store_true", help="128 x 500 exposures instead of 512 x 2000")
    demo.set_defaults(func=cmd_demo)

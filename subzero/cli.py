"""The ``subzero`` command line: run workflows, query their lineage.

Errors a user can fix print one line on stderr and exit with code 2.
"""

from __future__ import annotations

import argparse
import json
import runpy
import sys
from pathlib import Path

import numpy as np

from subzero.errors import LineageError, SubZeroError, WorkflowError

__all__ = ["main"]


def _load_workflow(ref: str, quick: bool):
    from subzero.workflows import BUILTIN, load_builtin

    if ref in BUILTIN:
        return load_builtin(ref, quick=quick)
    path = Path(ref)
    if not path.is_file():
        raise WorkflowError(f"workflow {ref!r} is neither a built-in ({', '.join(sorted(BUILTIN))}) nor a file")
    namespace = runpy.run_path(str(path), run_name="subzero_workflow")
    build = namespace.get("build")
    if not callable(build):
        raise WorkflowError(f"{ref} must define build() returning (workflow, inputs)")
    return build()


def _parse_assignments(items: list[str], what: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for item in items or []:
        node, sep, value = item.partition("=")
        if not sep or not node or not value:
            raise WorkflowError(f"{what} {item!r} must look like NODE=STRATEGY[,STRATEGY]")
        out.setdefault(node, []).extend(v for v in value.split(",") if v)
    return out


def parse_cells(cells: list[str] | None, boxes: list[str] | None) -> np.ndarray:
    """Cells from ``--cells 1,2 --cells 3,4`` and boxes from ``--box 0:2,5:8`` (half-open)."""
    from subzero.cells import box_cells

    rows = []
    for text in cells or []:
        for chunk in text.split(";"):
            try:
                rows.append([int(v) for v in chunk.split(",") if v.strip() != ""])
            except ValueError:
                raise LineageError(f"cell {chunk!r} must be comma-separated integers, e.g. 3,4") from None
    for text in boxes or []:
        try:
            lo, hi = zip(*[(int(a), int(b)) for a, b in (r.split(":") for r in text.split(","))])
        except ValueError:
            raise LineageError(f"box {text!r} must be LO:HI per axis, e.g. 0:2,5:8") from None
        rows.extend(box_cells(lo, hi).tolist())
    if not rows:
        raise LineageError("give cells with --cells R,C (repeatable) or --box LO:HI,LO:HI")
    if len({len(r) for r in rows}) != 1:
        raise LineageError("all cells must have the same number of coordinates")
    return np.array(rows, dtype=np.int64)


def cmd_run(args) -> int:
    wf, inputs = _load_workflow(args.workflow, args.quick)
    strategies = _parse_assignments(args.strategy, "--strategy")
    workload = json.loads(Path(args.workload).read_text()) if args.workload else None
    spark = None
    if args.executor == "spark" and args.master:
        from subzero.spark import get_session

        spark = get_session(args.master)
    run = wf.run(inputs, store=args.store, strategies=strategies or None, executor=args.executor,
                 spark=spark, tile_shape=args.tile, max_disk=args.max_disk, max_runtime=args.max_runtime,
                 workload=workload)
    for node, stored in run.strategies.items():
        print(f"{node:>16}  {', '.join(stored)}")
    print(f"stored in {run.path}")
    return 0


def cmd_query(args) -> int:
    from subzero.run import open_run

    run = open_run(args.store)
    cells = parse_cells(args.cells, args.box)
    using = {k: v[-1] for k, v in _parse_assignments(args.using, "--using").items()} or None
    query = run.backward if args.direction == "backward" else run.forward
    result = query(args.node, cells, to=args.to, using=using)
    if args.json:
        print(json.dumps({"direction": args.direction, "from": args.node, "to": args.to,
                          "count": len(result), "cells": result.tolist()}))
    else:
        for row in result.tolist():
            print(",".join(map(str, row)))
    return 0


DEMO_MARKER = "MADE_BY_SUBZERO_DEMO"


def cmd_demo(args) -> int:
    """The main job: the astronomy benchmark workflow on Spark, planned by the optimizer for a
    small workload, then a backward query (a star back to the raw pixels of exposure 1) and a
    forward one (a cosmic-ray pixel of exposure 1 forward to the repaired image), each timed
    against re-executing every operator (BlackBox)."""
    import shutil
    import time

    from subzero.workflows import load_builtin
    from subzero.workflows.astronomy import UDFS

    store = Path(args.store)
    marker = store / DEMO_MARKER
    if marker.exists():
        shutil.rmtree(store)  # a store an earlier demo made: rebuilt on every demo run
    wf, inputs = load_builtin("astronomy", quick=args.quick)
    middle = [[n // 2 for n in inputs["exposure_1"].shape]]
    workload = [{"direction": "backward", "node": "stars", "to": "exposure_1", "cells": middle},
                {"direction": "forward", "node": "exposure_1", "to": "clean", "cells": middle}]
    start = time.perf_counter()
    run = wf.run(inputs, store=store, workload=workload, max_disk="2x", executor=args.executor)
    marker.write_text("made by `subzero demo`, which rebuilds this store on every run\n")
    shape = "x".join(map(str, inputs["exposure_1"].shape))
    print(f"ran the astronomy workflow ({len(run.strategies)} operators, {shape} exposures) on {args.executor} "
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
    assert np.array_equal(back, again)
    print(f"backward: a star of {len(star)} pixels <- {len(back)} pixels of exposure_1 in {1000 * t:.1f} ms "
          f"({t_bb / t:.0f}x faster than re-running the workflow's operators: {1000 * t_bb:.0f} ms)")
    rays = np.argwhere(np.asarray(run.output("crmask_1")) > 0)
    ray = [tuple(int(v) for v in rays[len(rays) // 2])] if len(rays) else middle
    fwd, t = timed(run.forward, "exposure_1", ray, to="clean")
    again, t_bb = timed(run.forward, "exposure_1", ray, to="clean", using=blackbox)
    assert np.array_equal(fwd, again)
    print(f"forward: cosmic-ray pixel {list(ray[0])} of exposure_1 -> {len(fwd)} pixels of the repaired image "
          f"in {1000 * t:.1f} ms ({t_bb / t:.0f}x faster than re-execution: {1000 * t_bb:.0f} ms)")
    print(f"explain the plan: subzero explain {run.path}")
    return 0


def cmd_explain(args) -> int:
    from subzero.explain import explain
    from subzero.run import open_run

    print(explain(open_run(args.store)))
    return 0


def cmd_bench(args) -> int:
    from subzero.bench import main as bench_main

    return bench_main(args.name, quick=args.quick, out_dir=args.out or f"benchmarks/results/{args.name}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="subzero", description="Fine-grained lineage for array workflows on Spark.")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a workflow and store its lineage")
    run.add_argument("workflow", help="built-in workflow name or a Python file defining build()")
    run.add_argument("--store", required=True, help="new directory for the run")
    run.add_argument("--strategy", action="append", metavar="NODE=STRATEGY[,STRATEGY]",
                     help="pin strategies for a node (repeatable)")
    run.add_argument("--executor", choices=["spark", "local"], default="spark")
    run.add_argument("--master", help="Spark master URL, e.g. spark://127.0.0.1:7077")
    run.add_argument("--tile", type=int, help="tile length per axis")
    run.add_argument("--max-disk", help="lineage disk budget: bytes ('50MB') or input multiple ('2x')")
    run.add_argument("--max-runtime", help="runtime budget: seconds ('30s') or multiple of the plain run ('1.5x')")
    run.add_argument("--workload", help="JSON file of sample queries for the optimizer")
    run.add_argument("--quick", action="store_true", help="small inputs for built-in workflows")
    run.set_defaults(func=cmd_run)

    query = sub.add_parser("query", help="backward or forward lineage of cells of a stored run")
    query.add_argument("store")
    query.add_argument("direction", choices=["backward", "forward"])
    query.add_argument("node", help="the node the cells belong to")
    query.add_argument("--to", required=True, help="the node to trace to")
    query.add_argument("--cells", action="append", help="a cell 'R,C' or several 'R,C;R,C' (repeatable)")
    query.add_argument("--box", action="append", help="a half-open box 'R0:R1,C0:C1' (repeatable)")
    query.add_argument("--using", action="append", metavar="NODE=STRATEGY", help="force a stored strategy")
    query.add_argument("--json", action="store_true", help="print JSON instead of one cell per line")
    query.set_defaults(func=cmd_query)

    demo = sub.add_parser("demo", help="the main job: the astronomy workflow on Spark and two lineage queries")
    demo.add_argument("--store", default="runs/demo")
    demo.add_argument("--executor", choices=["spark", "local"], default="spark")
    demo.add_argument("--quick", action="store_true", help="128 x 500 exposures instead of 512 x 2000")
    demo.set_defaults(func=cmd_demo)
    explain = sub.add_parser("explain", help="the chosen strategy per node, predicted and measured costs, and why")
    explain.add_argument("store")
    explain.set_defaults(func=cmd_explain)

    bench = sub.add_parser("bench", help="reproduce the paper's experiments side by side with baselines")
    bench.add_argument("name", choices=["astronomy", "genomics", "micro"])
    bench.add_argument("--quick", action="store_true", help="small sizes: under two minutes")
    bench.add_argument("--out", help="output directory (default benchmarks/results/NAME)")
    bench.set_defaults(func=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except SubZeroError as exc:
        print(f"subzero: error: {exc}", file=sys.stderr)
        return 2
    except (OSError, json.JSONDecodeError) as exc:
        print(f"subzero: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

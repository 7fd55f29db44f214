"""``python -m subzero_bench.corpus``: run the real-code corpus and write its table.

Run from the repository root with ``PYTHONPATH=$PWD:$PWD/benchmarks``.  Every case is
evaluated at the ``small`` and ``large`` sizes on the local executor and, unless
``--no-spark``, at ``small`` on Spark; the table is printed and written to
``benchmarks/results/corpus/corpus.json`` and ``corpus.md`` (``--out`` elsewhere).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from typing import Any

from subzero_bench.corpus.cases import CASES, case
from subzero_bench.corpus.harness import Result, evaluate

_HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.normpath(os.path.join(_HERE, "..", "..", "results", "corpus"))
#: perturbed cells per input (the oracle's and the eager check's) by size: the large size
#: re-runs a million-cell function per perturbation, so it samples fewer
CELLS = {"tiny": 16, "small": 16, "large": 3}


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "uptime unavailable"


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10,
                             cwd=_HERE).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out = ""
    return out or "unknown"


_LEGEND = ("*traced?*: `@sz.workflow` traced the function as written and the workflow ran (else *error*: the "
           "exception and the first line of its message).  *values equal*: the run's outputs are the eager numpy "
           "call's (NaN-aware, floats within 1e-7).  *oracle misses*: `subzero.oracle.check_workflow`'s missed "
           "pairs.  *eager misses*: output cells the ORIGINAL function changed when an input cell was perturbed, "
           "outside the run's forward lineage of that cell (unsound lineage).  *coarse*: the share of operator "
           "nodes labelled coarse.  *time vs numpy*: (trace + run) over the eager call (best of 3; 1 at the large "
           "size).  *store vs input*: the run's store bytes over the inputs' bytes.")


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def table(results: list[Result]) -> str:
    """The Markdown table: one row per case, size and executor."""
    head = ("| case | package | domain | size | cells | executor | traced? | error | values equal | oracle misses "
            "| eager misses | coarse | time vs numpy | store vs input |")
    rows = [head, "|" + " --- |" * 14]
    for r in results:
        error = r.error.replace("|", "\\|")
        error = error if len(error) <= 160 else error[:157] + "..."
        rows.append(f"| {r.case} | {r.package} | {r.domain} | {r.size} | {r.cells:,} | {r.executor} | "
                    f"{_fmt(r.traced and r.ran)} | {error} | {_fmt(r.values_equal)} | {_fmt(r.oracle_misses)} | "
                    f"{_fmt(r.eager_misses)} | {_fmt(r.coarse_fraction, 2)} | "
                    f"{_fmt(r.time_ratio) + 'x' if r.time_ratio is not None else '-'} | "
                    f"{_fmt(r.store_ratio) + 'x' if r.store_ratio is not None else '-'} |")
    return "\n".join(rows)


def summary(results: list[Result]) -> str:
    """One paragraph: how many cases traced, matched numpy and kept sound lineage."""
    names = sorted({r.case for r in results})
    traced = sorted({r.case for r in results if r.traced and r.ran})
    ok = sorted({r.case for r in results if r.ok} - {r.case for r in results if r.ran and not r.ok})
    stopped: dict[str, set[str]] = {}
    for r in results:
        if r.error and r.case not in traced:
            stopped.setdefault(r.error.split(":")[0], set()).add(r.case)
    why = "; ".join(f"{kind}: {len(cases)}" for kind, cases in sorted(stopped.items(), key=lambda kv: -len(kv[1])))
    return (f"{len(names)} cases; traced and ran as written: {len(traced)} ({', '.join(traced) or 'none'}); "
            f"numpy's values with no oracle or eager miss at every size run: {len(ok)}"
            + (f"; stopped by {why}." if why else "."))


def main(argv: list[str] | None = None) -> int:
    """Run the corpus (see the module docstring); returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m subzero_bench.corpus", description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="*", help="case names (default: all)")
    parser.add_argument("--sizes", nargs="*", default=["small", "large"], help="sizes on the local executor")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark rows (small size)")
    parser.add_argument("--out", default=DEFAULT_OUT, help="directory for corpus.json and corpus.md")
    parser.add_argument("--name", nargs="+", default=["corpus"],
                        help="file name stem(s) of the outputs (the same results under each)")
    parser.add_argument("--title", default="The real-code corpus", help="the Markdown page's heading")
    args = parser.parse_args(argv)
    cases = [case(n) for n in args.cases] if args.cases else list(CASES)
    load_before = _uptime()
    started = time.time()
    results: list[Result] = []
    for c in cases:  # a first, unmeasured run, so that no measured one pays subzero's imports
        if evaluate(c, "tiny", oracle_cells=1, eager_cells=1, repeat=1).ran:
            break
    spark_warm = False
    for c in cases:
        for size in args.sizes:
            r = evaluate(c, size, oracle_cells=CELLS[size], eager_cells=CELLS[size],
                         repeat=3 if size != "large" else 1)
            results.append(r)
            print(f"{c.name:28s} {size:6s} local  {'ok' if r.ok else (r.error[:90] or 'unsound/unequal')}",
                  flush=True)
        if not args.no_spark and "small" in args.sizes and any(r.ran for r in results if r.case == c.name):
            if not spark_warm:  # subzero's embedded session, started (and reused) by a first tiny run
                evaluate(c, "tiny", executor="spark", oracle_cells=1, eager_cells=1, repeat=1)
                spark_warm = True
            r = evaluate(c, "small", executor="spark", oracle_cells=CELLS["small"], eager_cells=CELLS["small"])
            results.append(r)
            print(f"{c.name:28s} small  spark  {'ok' if r.ok else (r.error[:90] or 'unsound/unequal')}", flush=True)
    load_after = _uptime()
    text = table(results)
    print(text)
    print(summary(results))
    os.makedirs(args.out, exist_ok=True)
    meta = {"python": sys.version.split()[0], "platform": platform.platform(), "commit": _commit(),
            "seconds": round(time.time() - started, 1), "uptime_before": load_before, "uptime_after": load_after}
    for name in args.name:
        with open(os.path.join(args.out, f"{name}.json"), "w") as f:
            json.dump({"meta": meta, "results": [r.to_dict() for r in results]}, f, indent=1)
        with open(os.path.join(args.out, f"{name}.md"), "w") as f:
            f.write(f"# {args.title}\n\nsubzero at `{meta['commit']}`, Python {meta['python']}, "
                    f"{meta['seconds']} s.  \n`uptime` before: `{load_before}`  \n`uptime` after: `{load_after}`\n\n"
                    f"{summary(results)}\n\n{_LEGEND}\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

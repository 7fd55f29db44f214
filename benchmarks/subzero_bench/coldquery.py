"""A cold ``subzero query``: a new process answering from stored lineage, next to
``python -c "import numpy"`` (issue 23: <= 0.3 s median).

The store is the demo workflow (``subzero run demo --quick --executor local``) with stored
lineage pinned on four nodes (`PINS`; the others are answered by mapping functions, so no
query re-executes an operator).  Two queries, each in a fresh Python process:

- ``shards``: ``backward blur --to exposure_a`` forced through both stored strategies (two
  LMDB shards and an R-tree opened);
- ``auto``: ``backward column_total --to exposure_a``, through seven nodes with the strategies
  the query-time optimizer picks (stored shards, an inline FullRange table, mapping functions).

Each is run by this checkout's code ("after") and, when a baseline source tree is given
(``SUBZERO_COLDQUERY_BASELINE``: a directory holding the older ``subzero`` package; default
the package the interpreter's environment installs, when that is another tree), by the
baseline's ("before"), both through the same launcher (``python -c "from subzero.tools.cli import
main; ..."``, or ``subzero.cli`` in a baseline from before that move), plus this checkout's
``python -m subzero``.  Configurations are interleaved
(numpy, before, after, ... in every round) so the load of the machine falls on all alike;
each command runs twice untimed first, and bytecode is cached in a private directory
(``PYTHONPYCACHEPREFIX``), as for an installed package.  The answers of before and after are
compared.  ``uptime`` is recorded before and after.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from subzero_bench.results import figure
from subzero_bench.timing import load_average

__all__ = ["run_coldquery", "render_coldquery", "QUERIES"]

#: the queries timed: name -> the arguments after ``subzero query STORE``
QUERIES: dict[str, list[str]] = {
    "shards": ["backward", "blur", "--cells", "3,4", "--to", "exposure_a",
               "--using", "blur=FullMany/backward", "--using", "merge=FullOne/backward"],
    "auto": ["backward", "column_total", "--cells", "3", "--to", "exposure_a"],
}
PINS = ["merge=FullOne/backward", "blur=FullMany/backward", "crd_a=FullRange", "crd_b=FullOne/backward"]
LAUNCHER = ("import sys\ntry:\n    from subzero.tools.cli import main\n"
            "except ImportError:  # a baseline from before the move\n    from subzero.cli import main\n"
            "sys.exit(main(sys.argv[1:]))")
GOAL_SECONDS = 0.3


def _ours() -> Path:
    return Path(__file__).resolve().parents[2]


def _baseline() -> Path | None:
    """The source tree of the code to compare against, or None (then "before" is not measured)."""
    given = os.environ.get("SUBZERO_COLDQUERY_BASELINE")
    if given:
        return Path(given).resolve()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", "import subzero, os; print(os.path.dirname(os.path.dirname("
                           "os.path.realpath(subzero.__file__))))"], capture_output=True, text=True, env=env,
                          cwd="/")
    installed = Path(done.stdout.strip()).resolve() if done.returncode == 0 and done.stdout.strip() else None
    return installed if installed and installed != _ours() else None


def _env(root: Path, code: Path | None, cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    env["PYTHONPYCACHEPREFIX"] = str(cache)
    if code is not None:
        env["PYTHONPATH"] = str(code)
    return env


def _time(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])}... failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return seconds, done.stdout


def _import_ms(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    """Total import time (ms) of one run of ``cmd`` as ``-X importtime`` reports it."""
    done = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], capture_output=True, text=True, env=env, cwd=cwd)
    total = 0
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if line.startswith("import time:") and len(parts) == 3 and parts[2].startswith(" ") \
                and not parts[2].startswith("  ") and parts[1].strip().isdigit():
            total += int(parts[1])
    return total / 1000


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
    return {"median": statistics.median(values), "p90": p90, "best": ordered[0], "n": len(values)}


def run_coldquery(quick: bool, root: Path, size=None, executor: str = "local", spark=None,
                  log=print) -> dict[str, Any]:
    """Run the benchmark (see the module docstring); returns the results document's body.

    ``size`` overrides the number of timed rounds (default 15; quick: 9)."""
    rounds = int(size) if size else (9 if quick else 15)
    ours, base = _ours(), _baseline()
    cache = root / "pycache"
    store = root / "demo"
    py = sys.executable
    env_ours = _env(root, ours, cache)
    made = subprocess.run([py, "-m", "subzero", "run", "demo", "--quick", "--executor", "local", "-q",
                           "--store", str(store), *sum((["--strategy", p] for p in PINS), [])],
                          capture_output=True, text=True, env=env_ours, cwd=root)
    if made.returncode != 0:
        raise RuntimeError(f"the demo store could not be made: {made.stderr.strip()[-400:]}")
    numpy_env = _env(root, None, cache)
    configs: dict[str, tuple[list[str], dict[str, str]]] = {"import numpy": ([py, "-c", "import numpy"], numpy_env)}
    for name, args in QUERIES.items():
        query = ["query", str(store), *args]
        if base is not None:
            configs[f"{name}: before"] = ([py, "-c", LAUNCHER, *query], _env(root, base, cache))
        configs[f"{name}: after"] = ([py, "-c", LAUNCHER, *query], env_ours)
        configs[f"{name}: after, python -m subzero"] = ([py, "-m", "subzero", *query], env_ours)
    answers: dict[str, str] = {}
    for label, (cmd, env) in configs.items():  # warm-up, untimed: bytecode caches, the page cache
        for _ in range(2):
            _, answers[label] = _time(cmd, env, root)
    load_before = load_average()
    times: dict[str, list[float]] = {label: [] for label in configs}
    for k in range(rounds):
        for label, (cmd, env) in configs.items():
            times[label].append(_time(cmd, env, root)[0])
        log(f"coldquery: round {k + 1}/{rounds}: " + ", ".join(f"{lab} {t[-1]:.3f}" for lab, t in times.items()))
    load_after = load_average()
    imports = {label: statistics.median(_import_ms(cmd, env, root) for _ in range(5))
               for label, (cmd, env) in configs.items() if label != "import numpy"}
    loaded = {label: _loaded(cmd, env, root) for label, (cmd, env) in configs.items() if "-c" in cmd}
    stats = {label: _summary(v) for label, v in times.items()}
    numpy_median = stats["import numpy"]["median"]
    rows: dict[str, dict[str, Any]] = {}
    for label, s in stats.items():
        rows[label] = dict(s, x_numpy=s["median"] / numpy_median, import_ms=imports.get(label),
                           modules=loaded.get(label, {}).get("modules"), heavy=loaded.get(label, {}).get("heavy"))
        name = label.split(":")[0]
        if label.endswith("after") and f"{name}: before" in stats:
            rows[label]["after_over_before"] = s["median"] / stats[f"{name}: before"]["median"]
    same = {name: answers[f"{name}: after"] == answers[f"{name}: before"] for name in QUERIES
            if f"{name}: before" in answers}
    return {
        "setup": {"store": "demo --quick, local executor, pinned " + ", ".join(PINS), "queries": QUERIES,
                  "rounds": rounds, "baseline": str(base) if base else None, "ours": str(ours),
                  "python": sys.version.split()[0], "goal_seconds": GOAL_SECONDS,
                  "cells": {name: len(answers[f"{name}: after"].splitlines()) for name in QUERIES}},
        "raw": {"times": times, "load_before": load_before, "load_after": load_after, "same_answer": same,
                "heavy_modules_loaded": loaded["shards: after"]["heavy"]},
        "figures": {"cold_query": figure("s", "import numpy", rows, "a cold `subzero query` in a new process")},
    }


HEAVY = ("fsspec", "zarr", "asyncio", "ssl", "pyspark", "matplotlib", "astropy", "scipy", "pulp", "rtree", "lmdb")


def _loaded(cmd: list[str], env: dict[str, str], cwd: Path) -> dict[str, Any]:
    """How many modules one run of ``cmd`` (a ``python -c CODE ARGS...`` launcher) leaves in
    ``sys.modules``, and which heavy packages among them (deterministic, unlike import times)."""
    code = (f"import atexit, json, sys\natexit.register(lambda: sys.stderr.write('\\nMODULES ' + json.dumps("
            f"[len(sys.modules), sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))]) + '\\n'))\n"
            + cmd[2])
    done = subprocess.run([cmd[0], "-c", code, *cmd[3:]], capture_output=True, text=True, env=env, cwd=cwd)
    line = [x for x in done.stderr.splitlines() if x.startswith("MODULES ")]
    count, heavy = json.loads(line[-1][8:]) if line else (None, ["?"])
    return {"modules": count, "heavy": heavy}


def render_coldquery(doc: dict[str, Any]) -> list[str]:
    """The body of REPORT.md."""
    s, r = doc["setup"], doc["raw"]
    rows = doc["figures"]["cold_query"]["values"]
    load = f"{', '.join(map(str, r['load_before']))} before, {', '.join(map(str, r['load_after']))} after"

    def fmt(v: Any, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    out = [f"Store: {s['store']}.  {s['rounds']} rounds, every command once per round, interleaved, each in a new "
           f"process (after two untimed runs: bytecode cached, as installed).  Load (uptime 1/5/15 min): {load}; "
           "other jobs shared the 2 cores.", "",
           "| command | median (s) | p90 (s) | best (s) | x import numpy | after / before | imports (ms) | modules "
           "| heavy packages |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for label, v in rows.items():
        out.append(f"| {label} | {v['median']:.3f} | {v['p90']:.3f} | {v['best']:.3f} | {v['x_numpy']:.2f} | "
                   f"{fmt(v.get('after_over_before'), '.2f')} | {fmt(v.get('import_ms'), '.0f')} | "
                   f"{fmt(v.get('modules'), 'd')} | {', '.join(v.get('heavy') or []) or '-'} |")
    out += ["", "Queries (`subzero query STORE ...`): " + "; ".join(
        f"{name}: `{' '.join(args)}` ({s['cells'][name]} cells)" for name, args in s["queries"].items()), "",
        f"\"before\": the code in {s['baseline'] or '(no baseline given)'}; \"after\": this checkout ({s['ours']}); "
        "both through `python -c \"from subzero.tools.cli import main; ...\"`. Same answers before and after: "
        f"{r['same_answer'] or 'not compared'}.  Imports (ms): the sum of `-X importtime`'s top-level "
        "entries, median of 5 runs (noisy under load); modules: `len(sys.modules)` at exit, and the heavy "
        f"packages among them ({', '.join(HEAVY)}).", "",
        f"Heavy packages a cold `shards` query imports now: {', '.join(r['heavy_modules_loaded']) or 'none'}.", ""]
    for name in s["queries"]:
        after = rows.get(f"{name}: after")
        if after:
            met = "met" if after["median"] <= s["goal_seconds"] else "NOT met"
            out.append(f"- Goal (issue 23) for `{name}`: median <= {s['goal_seconds']} s: {after['median']:.3f} s, "
                       f"{met} at this load ({after['x_numpy']:.2f}x `import numpy`).")
    return out + [""]

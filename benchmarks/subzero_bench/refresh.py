"""``subzero bench refresh [--quick]``: re-run the benchmarks behind ``benchmarks/RESULTS.md`` on the
current tree and rewrite each one's section in place.

A section of RESULTS.md is the text between ``<!-- refresh:NAME -->`` and ``<!-- /refresh:NAME -->``
(`SECTIONS` names them: astronomy, genomics, micro, scale, stats, viewer, faults, corpus,
traced).  For each, in order, the refresh runs the benchmark in a new process (``python -m
subzero_bench NAME --out DIR``, the corpus ``python -m subzero_bench.corpus --out DIR``) with
this tree first on ``PYTHONPATH`` and ``OMP_NUM_THREADS=1``, then replaces the section by the
report it wrote (its title one level down, figure links made relative to RESULTS.md), headed by
one line giving the date, the commit, the mode and ``uptime``'s load before and after; and it
updates (or adds) the benchmark's row in the table at the top.  A section without markers is
added at the end.  A benchmark that fails leaves its section as it was; the exit status is
then 1.

Full mode writes the results where the committed ones live (``benchmarks/results/NAME``) and
takes hours on two cores (scale runs without its 1e9-cell rows, which are separate commands;
see RESULTS.md).  ``--quick`` runs every benchmark at its quick size into
``benchmarks/results/quick/NAME`` and says "quick" in each section's line.
``SUBZERO_REFRESH_SECTIONS=astronomy,traced`` (or ``--sections``) refreshes some sections only;
``--results FILE`` rewrites another file than ``benchmarks/RESULTS.md``.  The Headlines at the top
of RESULTS.md quote numbers by hand: read them again after a refresh.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from subzero_bench.timing import BENCH_HOME, child_pythonpath, load_average, now_iso

__all__ = ["SECTIONS", "refresh", "replace_section", "section_text", "update_index", "main"]

#: the sections of RESULTS.md a refresh rewrites, in the order it runs them
SECTIONS = ("astronomy", "genomics", "micro", "scale", "stats", "viewer", "faults", "corpus", "traced")
#: the checkout holding ``benchmarks/`` and the ``subzero`` it measures
ROOT = BENCH_HOME.parent


def _begin(name: str) -> str:
    return f"<!-- refresh:{name} -->"


def _end(name: str) -> str:
    return f"<!-- /refresh:{name} -->"


def replace_section(text: str, name: str, body: str) -> str:
    """``text`` with the section ``name`` (between its markers) replaced by ``body``, markers kept;
    a section not in ``text`` is added at its end.

    Examples
    --------
    >>> doc = "# R\\n<!-- refresh:micro -->\\nold\\n<!-- /refresh:micro -->\\ntail\\n"
    >>> replace_section(doc, "micro", "new").splitlines()
    ['# R', '<!-- refresh:micro -->', 'new', '<!-- /refresh:micro -->', 'tail']
    >>> replace_section("# R\\n", "traced", "t").splitlines()[-3:]
    ['<!-- refresh:traced -->', 't', '<!-- /refresh:traced -->']
    """
    begin, end = _begin(name), _end(name)
    block = f"{begin}\n{body.strip()}\n{end}"
    if begin in text and end in text and text.index(begin) < text.index(end):
        head, rest = text.split(begin, 1)
        return head + block + rest.split(end, 1)[1]
    return text.rstrip("\n") + "\n\n" + block + "\n"


def section_text(report: Path, results: Path, stamp: str) -> str:
    """A report (REPORT.md or the corpus' page) as a section of ``results``: its ``# title`` as
    ``## title``, every other heading one level down, the stamp line under the title, the
    report's own date/machine/command lines dropped, figure links relative to ``results``."""
    lines = report.read_text().splitlines()
    title = lines[0].lstrip("# ").strip() if lines and lines[0].startswith("#") else report.parent.name
    rel = os.path.relpath(report.parent, results.parent)
    body = []
    for line in lines[1 if lines and lines[0].startswith("#") else 0:]:
        if line.startswith(("- date:", "- machine:", "- command:")):
            continue
        if line.startswith("#"):
            line = "#" + line
        line = re.sub(r"\]\((?!https?:|/|#)([^)]+\.(?:png|md))\)", lambda m: f"]({rel}/{m.group(1)})", line)
        if line.strip() or (body and body[-1].strip()):  # no run of blank lines, none at the start
            body.append(line)
    return "\n".join([f"## {title}", "", stamp, ""] + body).rstrip() + "\n"


def update_index(text: str, name: str, row: list[str]) -> str:
    """``text`` with the first row of its top table (``| bench | mode | ...``) for bench ``name``
    replaced by ``row`` (added after the table's last row when it has none).

    Examples
    --------
    >>> doc = "| bench | mode |\\n|---|---|\\n| micro | full |\\n\\nrest"
    >>> update_index(doc, "micro", ["micro", "quick"]).splitlines()[2]
    '| micro | quick |'
    >>> update_index(doc, "traced", ["traced", "full"]).splitlines()[3]
    '| traced | full |'
    """
    lines = text.split("\n")
    start = next((k for k, ln in enumerate(lines) if ln.startswith("| bench | mode |")), None)
    new = "| " + " | ".join(row) + " |"
    if start is None:
        return text
    k = start + 2
    while k < len(lines) and lines[k].startswith("|"):
        if lines[k].split("|")[1].strip() == name:
            lines[k] = new
            return "\n".join(lines)
        k += 1
    lines.insert(k, new)
    return "\n".join(lines)


def _commit() -> str:
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT,
                              timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, cwd=ROOT, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (done.stdout.strip() or "unknown") + (" (with uncommitted changes)" if dirty else "")


def _command(name: str, out: Path, quick: bool) -> tuple[list[str], Path]:
    """The command that runs benchmark ``name`` into ``out``, and the report it writes."""
    if name == "corpus":
        extra = ["--no-spark", "--sizes", "small"] if quick else []
        return [sys.executable, "-m", "subzero_bench.corpus", "--out", str(out), *extra], out / "corpus.md"
    return [sys.executable, "-m", "subzero_bench", name, "--out", str(out)] + (["--quick"] if quick else []), \
        out / "REPORT.md"


def refresh(sections: list[str] | None = None, quick: bool = False, results: str | Path | None = None,
            results_dir: str | Path | None = None, log: Callable[[str], None] = print) -> int:
    """Re-run ``sections`` (default all of `SECTIONS`) and rewrite them in ``results`` (default
    ``benchmarks/RESULTS.md``); see the module docstring.  Returns the exit status: 0, or 1 when a
    benchmark failed (its section is left as it was).

    Parameters
    ----------
    sections : list of str, optional
        Names from `SECTIONS`.
    quick : bool
        Every benchmark at its quick size, into ``benchmarks/results/quick/NAME``.
    results : path, optional
        The file rewritten.
    results_dir : path, optional
        Where each benchmark writes (``DIR/NAME``; default ``benchmarks/results``, quick:
        ``benchmarks/results/quick``).
    log : callable
        Receives one progress line at a time.
    """
    from subzero.errors import WorkflowError

    chosen = list(sections or SECTIONS)
    unknown = [s for s in chosen if s not in SECTIONS]
    if unknown:
        raise WorkflowError(f"unknown RESULTS.md section(s) {', '.join(unknown)}; the sections: {', '.join(SECTIONS)}")
    path = Path(results) if results else BENCH_HOME / "RESULTS.md"
    base = Path(results_dir).resolve() if results_dir else BENCH_HOME / "results" / ("quick" if quick else "")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=child_pythonpath(ROOT), OMP_NUM_THREADS="1")
    failed = []
    for name in chosen:
        out = base / name
        out.mkdir(parents=True, exist_ok=True)
        command, report = _command(name, out, quick)
        load_before, started = load_average(), time.perf_counter()
        log(f"refresh {name}: {' '.join(command[1:])} (load {', '.join(map(str, load_before))})")
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        seconds, load_after = time.perf_counter() - started, load_average()
        if done.returncode not in (0, 1) or not report.exists() or report.stat().st_mtime < time.time() - seconds - 1:
            tail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            log(f"refresh {name}: FAILED, its section left as it was: {tail}")
            failed.append(name)
            continue
        mode = "quick" if quick else "full"
        commit = _commit()
        rel = os.path.relpath(out, ROOT)
        shown = " ".join((["python -m subzero_bench.corpus", "--out", rel] + command[6:]) if name == "corpus" else
                         ["subzero bench", name, "--out", rel] + (["--quick"] if quick else []))
        stamp = (f"*Refreshed by `subzero bench refresh{' --quick' if quick else ''}` on {now_iso()} at commit "
                 f"{commit}, {mode} mode, {seconds:.0f} s; load (1/5/15 min) before "
                 f"{', '.join(map(str, load_before))}, after {', '.join(map(str, load_after))}"
                 + (f"; exit status {done.returncode}: a target missed or a trial failed, see the report" if
                    done.returncode else "") + ".*")
        text = path.read_text()
        text = replace_section(text, name, section_text(report, path, stamp))
        text = update_index(text, name, [name, mode, now_iso(), f"{seconds:.0f}", f"`{shown}`"])
        path.write_text(text)
        log(f"refresh {name}: section rewritten in {path} ({seconds:.0f} s)")
    if failed:
        log(f"refresh: {len(failed)} failed ({', '.join(failed)}); their sections are unchanged")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """``python -m subzero_bench.refresh [--quick] [--sections NAME...] [--results FILE]``."""
    parser = argparse.ArgumentParser(prog="python -m subzero_bench.refresh", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="quick sizes, into benchmarks/results/quick/NAME")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, help="some sections only (default: all)")
    parser.add_argument("--results", help="the file rewritten (default benchmarks/RESULTS.md)")
    args = parser.parse_args(argv)
    env = [s for s in os.environ.get("SUBZERO_REFRESH_SECTIONS", "").split(",") if s]
    return refresh(args.sections or env or None, quick=args.quick, results=args.results)


if __name__ == "__main__":
    sys.exit(main())

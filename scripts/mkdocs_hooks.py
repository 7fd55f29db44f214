"""MkDocs hooks for subzero's documentation site (``mkdocs.yml`` names this file).

The benchmark results live beside the code they measure (``benchmarks/RESULTS.md`` and
``benchmarks/results/*/REPORT.md`` with their figures), where the benchmarks write them.
This hook adds them to the site under ``benchmarks/``, so the user guide links to the
committed numbers and the site never carries a stale copy. The benchmarks' reports name the
tracker issues they were written for; the site shows them without those references
(`strip_issue_references`): the user documentation names no issue numbers.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

_SUFFIXES = {".md", ".png", ".svg"}

# (pattern, replacement), applied in order: the forms the reports use
_ISSUE_FORMS = [
    (re.compile(r"\bIssue \d+ goal\b"), "Goal"),
    (re.compile(r"\bthe code before\s+issue \d+\b"), "an earlier version"),
    (re.compile(r"\bthe issue's\b"), "the"),
    (re.compile(r"\bthe five operations of issue \d+\b"), "the five operations DSLog measured"),
    (re.compile(r";\s*issues? \d+(?=[;)])"), ""),                  # "(capture; issue 23; ..."
    (re.compile(r"\s*\(issues? \d+(?:[;,][^()]*)?\)"), ""),        # " (issue 23)"
    (re.compile(r"\(issues? \d+;\s*"), "("),                       # "(issue 23; see ...)"
    (re.compile(r"\bissue \d+'s\b"), "the"),
    (re.compile(r"\bissues? \d+\b", re.IGNORECASE), "an earlier change"),
]


def strip_issue_references(markdown: str) -> str:
    """Drop tracker references ("(issue 23)", "Issue 23 goal", ...) from a report's text.

    Examples
    --------
    >>> strip_issue_references("# Scale benchmark: 1e6 to 1e9 cells (issue 9)")
    '# Scale benchmark: 1e6 to 1e9 cells'
    >>> strip_issue_references("**Capture** (capture; issue 23; before = main)")
    '**Capture** (capture; before = main)'
    >>> strip_issue_references("Issue 23 goal: at 1e9 cells")
    'Goal: at 1e9 cells'
    """
    for pattern, replacement in _ISSUE_FORMS:
        markdown = pattern.sub(replacement, markdown)
    return markdown


def on_files(files: Files, config: Any) -> Files:
    """Add ``benchmarks/RESULTS.md`` and every report and figure under ``benchmarks/results``."""
    root = Path(config["config_file_path"]).parent
    bench = root / "benchmarks"
    if not bench.is_dir():
        return files
    for path in sorted(bench.rglob("*")):
        if not path.is_file() or path.suffix not in _SUFFIXES:
            continue
        if path.name == "summary_preface.md":  # the preface is already part of RESULTS.md
            continue
        uri = path.relative_to(root).as_posix()
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Show the benchmark reports without tracker issue numbers."""
    if page.file.src_uri.startswith("benchmarks/"):
        return strip_issue_references(markdown)
    return markdown

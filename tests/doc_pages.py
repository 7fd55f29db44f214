"""The documentation pages tests read: the examples, commands and tables of the user guide
(``docs/``) are the single source; tests run and check them as the pages show them, never a
copy of their text."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
_HEADING = re.compile(r"(#+) (.*?)\s*$")


def page(rel: str) -> str:
    """The text of the page ``docs/<rel>`` (e.g. ``"guide/cli.md"``)."""
    path = DOCS / rel
    assert path.is_file(), f"docs/{rel} is missing: point the test at the page that now holds what it checks"
    return path.read_text()


def _headings(lines: list[str]) -> list[tuple[int, int, str]]:
    """(line index, level, title) of the headings of a page, fenced blocks skipped."""
    found, fenced = [], False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := _HEADING.match(line)):
            found.append((i, len(match.group(1)), match.group(2)))
    return found


def section(rel: str, heading: str | None = None) -> str:
    """The part of ``docs/<rel>`` from ``heading`` (its title, without the ``#``) up to the next
    heading of the same or a higher level; ``None``: the page's opening, up to its first
    ``##`` heading."""
    lines = page(rel).splitlines(keepends=True)
    headings = _headings(lines)
    if heading is None:
        start, level = 0, 2
    else:
        at = [(i, lvl) for i, lvl, title in headings if title == heading]
        assert len(at) == 1, f"docs/{rel} has {len(at)} headings {heading!r}; expected one"
        start, level = at[0]
    end = next((i for i, lvl, _ in headings if i > start and lvl <= level), len(lines))
    return "".join(lines[start:end])


def fenced(text: str, lang: str) -> list[str]:
    """The bodies of the ``lang`` fenced blocks of ``text`` (a page or a section), in order."""
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.S | re.M)


def block(rel: str, lang: str, opening: str) -> str:
    """The one ``lang`` fenced block of ``docs/<rel>`` whose text starts with ``opening``."""
    found = [body for body in fenced(page(rel), lang) if body.startswith(opening)]
    assert len(found) == 1, f"docs/{rel} has {len(found)} ```{lang} blocks starting {opening!r}; expected one"
    return found[0]


def commands(text: str) -> list[str]:
    """The non-blank lines of the ``bash`` fenced blocks of ``text``, stripped, in order."""
    return [line.strip() for body in fenced(text, "bash") for line in body.splitlines() if line.strip()]

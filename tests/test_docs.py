"""The documentation: the site builds with warnings as errors (tutorials executed), and the
README keeps its limits (the two-command block first, short, no tracker references)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
TWO_COMMANDS = [
    "bash scripts/setup.sh && .venv/bin/subzero demo",
    "bash scripts/setup.sh && .venv/bin/python -m pytest -q",
]
README_MAX_LINES = 200
ISSUE_NUMBER = re.compile(r"\bissues? #?\d+", re.IGNORECASE)
BUILD_TIMEOUT_S = 420   # the build itself takes 20-60 s; a loaded 2-core machine is slower


def _fenced_blocks(text: str) -> list[list[str]]:
    blocks, current = [], None
    for line in text.splitlines():
        if line.startswith("```"):
            if current is None:
                current = []
            else:
                blocks.append(current)
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def _user_pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md")) + sorted(DOCS.rglob("*.ipynb")) + [README]


# -- the README ---------------------------------------------------------------------------------

def test_readme_opens_with_exactly_the_two_commands() -> None:
    blocks = _fenced_blocks(README.read_text())
    assert blocks, "README.md has no fenced block"
    assert [line.strip() for line in blocks[0] if line.strip()] == TWO_COMMANDS


def test_readme_is_short() -> None:
    n = len(README.read_text().splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines; move detail into a page under docs/"


def test_readme_links_point_at_files_that_exist() -> None:
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text())
    local = [link for link in links if not re.match(r"[a-z]+://", link)]
    assert local, "the README links into the documentation"
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def test_no_issue_numbers_in_user_documentation() -> None:
    hits = [f"{page.relative_to(ROOT)}:{i}: {line.strip()}"
            for page in _user_pages()
            for i, line in enumerate(page.read_text().splitlines(), 1) if ISSUE_NUMBER.search(line)]
    assert not hits, "user documentation names tracker issues:\n" + "\n".join(hits)


# -- the site -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1",
               # the tutorials' kernel and mkdocstrings import this tree, not an installed copy
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    took = time.perf_counter() - t0
    assert proc.returncode == 0, f"mkdocs build --strict failed after {took:.0f} s:\n{proc.stderr[-6000:]}"
    return out


def _text(html_file: Path) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html_file.read_text()))


def test_every_page_is_built_and_in_the_nav(site: Path) -> None:
    home = (site / "index.html").read_text()
    for page in sorted(DOCS.rglob("*.md")) + sorted(DOCS.rglob("*.ipynb")):
        rel = page.relative_to(DOCS).with_suffix("")
        url = "" if rel.name == "index" and rel.parent == Path(".") else (
            f"{rel.parent.as_posix()}/" if rel.name == "index" else f"{rel.as_posix()}/")
        assert (site / url / "index.html").is_file(), f"{page} was not built"
        if url:
            assert f'href="{url}"' in home, f"{page} is not in the navigation"


def test_tutorials_are_executed_at_build_time(site: Path) -> None:
    # text printed by the notebooks' code, and the figures they draw: present only if they ran
    numpy_page = (site / "tutorials" / "numpy-lineage" / "index.html").read_text()
    assert "raw pixels, rows" in _text(site / "tutorials" / "numpy-lineage" / "index.html")
    assert "data:image/png;base64," in numpy_page
    astro = (site / "tutorials" / "astronomy" / "index.html").read_text()
    assert re.search(r"\d+ of \d+ stars have a cosmic-ray pixel", _text(site / "tutorials" / "astronomy" / "index.html"))
    assert "data:image/png;base64," in astro
    # the viewer tutorial: run.view(), a brush set from Python and read back (its asserts ran)
    assert re.search(r"brushed \d+ cells of stars", _text(site / "tutorials" / "viewer" / "index.html"))
    for page in ("numpy-lineage", "astronomy", "viewer"):
        assert "Traceback" not in _text(site / "tutorials" / page / "index.html")


def test_api_reference_is_generated_from_the_docstrings(site: Path) -> None:
    from subzero.run import Run, open_run

    run_page = _text(site / "reference" / "run" / "index.html")
    for doc in (open_run.__doc__, Run.backward.__doc__):
        assert doc
        first = " ".join(doc.strip().splitlines()[0].replace("`", "").split())
        assert first[:40] in run_page, f"{first!r} not on the API page"
    operators = _text(site / "reference" / "operators" / "index.html")
    for name in ("GaussianFilter", "Label", "Transpose", "CosmicRays"):
        assert name in operators


def test_benchmark_results_are_part_of_the_site(site: Path) -> None:
    assert (site / "benchmarks" / "RESULTS" / "index.html").is_file()
    reports = sorted((ROOT / "benchmarks" / "results").glob("*/REPORT.md"))
    assert reports
    for report in reports:
        rel = report.relative_to(ROOT).with_suffix("")
        assert (site / rel / "index.html").is_file(), f"{report} is not in the site"
    for page in [site / "benchmarks" / "RESULTS" / "index.html"] + sorted((site / "benchmarks" / "results").rglob("*.html")):
        assert not ISSUE_NUMBER.search(_text(page)), f"{page} names a tracker issue"

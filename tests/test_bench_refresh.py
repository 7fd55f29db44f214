"""``subzero bench refresh``: a section of RESULTS.md is rewritten between its markers from the report
a real (tiny) run wrote, the top table's row updated, and everything else left as it was."""

from __future__ import annotations

import doctest

from subzero_bench import refresh as R

PAGE = """# Benchmark results

| bench | mode | date | time (s) | command |
|---|---|---|---|---|
| micro | full | 2026-01-01 | 404 | `subzero bench micro` |

Preface, kept.

<!-- refresh:micro -->
## Microbenchmark
old micro text
<!-- /refresh:micro -->

## Not refreshed
kept too
"""


def test_section_text_moves_headings_down_and_links_to_the_results_file(tmp_path):
    report = tmp_path / "results" / "x" / "REPORT.md"
    report.parent.mkdir(parents=True)
    report.write_text("# Title\n\n- date: d\n- machine: m\n- command: c\n\n## Part\n\n![fig_a.png](fig_a.png)\n")
    text = R.section_text(report, tmp_path / "RESULTS.md", "*stamp*")
    assert text.splitlines()[:3] == ["## Title", "", "*stamp*"]
    assert "### Part" in text and "![fig_a.png](results/x/fig_a.png)" in text and "- date:" not in text


def test_replace_section_keeps_the_rest_and_appends_a_new_one():
    page = R.replace_section(PAGE, "micro", "## Microbenchmark\nnew")
    assert "old micro text" not in page and "new\n<!-- /refresh:micro -->" in page
    assert page.split("<!-- refresh:micro -->")[0] == PAGE.split("<!-- refresh:micro -->")[0]
    assert page.endswith("## Not refreshed\nkept too\n")
    added = R.replace_section(page, "traced", "## Traced")
    assert added.startswith(page.rstrip("\n")) and added.endswith("<!-- refresh:traced -->\n## Traced\n"
                                                                   "<!-- /refresh:traced -->\n")


def test_refresh_runs_the_bench_and_rewrites_its_section(tmp_path, monkeypatch):
    monkeypatch.setenv("SUBZERO_TRACED_CASES", "ndvi")
    monkeypatch.setenv("SUBZERO_TRACED_SIZES", "tiny")
    monkeypatch.delenv("SUBZERO_TRACED_BASELINE", raising=False)
    page = tmp_path / "RESULTS.md"
    page.write_text(PAGE)
    lines: list[str] = []
    assert R.refresh(["traced"], quick=True, results=page, results_dir=tmp_path / "res", log=lines.append) == 0
    text = page.read_text()
    assert text.split("<!-- refresh:traced -->")[0].rstrip() == PAGE.replace(
        "| micro | full | 2026-01-01 | 404 | `subzero bench micro` |",
        "| micro | full | 2026-01-01 | 404 | `subzero bench micro` |\n" + next(
            ln for ln in text.splitlines() if ln.startswith("| traced | quick |"))).rstrip()
    section = text.split("<!-- refresh:traced -->")[1]
    assert section.lstrip().startswith("## Traced code against numpy")
    assert "*Refreshed by `subzero bench refresh --quick` on " in section and "quick mode" in section
    assert "| ndvi | tiny |" in section and (tmp_path / "res" / "traced" / "results.json").exists()
    assert any("section rewritten" in ln for ln in lines)


def test_unknown_section_is_an_error(tmp_path):
    from subzero.errors import WorkflowError

    try:
        R.refresh(["nope"], results=tmp_path / "R.md")
    except WorkflowError as exc:
        assert "nope" in str(exc) and "traced" in str(exc)
    else:
        raise AssertionError("an unknown section was accepted")


def test_docstring_examples():
    result = doctest.testmod(R)
    assert result.failed == 0 and result.attempted >= 4

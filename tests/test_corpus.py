"""The real-code corpus (benchmarks/subzero_bench/corpus): published packages' functions, decorated
with ``@sz.workflow`` and nothing else, must trace, give numpy's values and sound lineage.

Every case runs at two small sizes and two tilings on the local executor.  A case that
fails today is a strict xfail whose reason is today's error: when the tracer learns to run
it, the xfail turns into a failure that says to remove the mark.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

import subzero as sz

_BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
if _BENCHMARKS not in sys.path:
    sys.path.insert(0, _BENCHMARKS)

for _package in ("astropy", "skimage", "photutils", "conorm", "pyet", "spyndex", "chemotools", "xarray"):
    pytest.importorskip(_package, reason="the corpus extra (pip install -e '.[corpus]') is not installed")

from subzero_bench.corpus import __main__ as corpus_main  # noqa: E402
from subzero_bench.corpus.cases import CASES, Case, case  # noqa: E402
from subzero_bench.corpus.harness import eager_check, evaluate, named_outputs, short_error, tilings  # noqa: E402

#: today's error per case (the first line's gist): these cases are strict xfails
TODAY: dict[str, str] = {
    # case name -> why it fails today (a strict xfail: when it starts passing, the test says so)
}

SIZES = ("tiny", "small")


def _params():
    for c in CASES:
        marks = [pytest.mark.xfail(strict=True, raises=AssertionError, reason=TODAY[c.name])] \
            if c.name in TODAY else []
        for size in SIZES:
            for tiling in ("whole", "split"):
                yield pytest.param(c.name, size, tiling, marks=marks, id=f"{c.name}-{size}-{tiling}")


@pytest.mark.parametrize("name, size, tiling", list(_params()))
def test_case_traces_with_numpys_values_and_sound_lineage(name, size, tiling, tmp_path):
    c = case(name)
    shape = next(iter(c.inputs(size).values())).shape
    r = evaluate(c, size, tile_shape=tilings(shape)[tiling], oracle_cells=8, eager_cells=8, repeat=1,
                 workdir=str(tmp_path))
    assert r.traced and r.ran, r.error
    assert r.values_equal, f"max |traced - numpy| = {r.max_abs_diff}"
    assert not r.oracle_mismatches, r.oracle_mismatches
    assert r.oracle_cells > 0 and r.eager_trials > 0
    assert r.oracle_misses == 0, r.first_misses
    assert r.eager_misses == 0, r.first_misses


def test_every_xfail_names_a_case():
    assert set(TODAY) <= {c.name for c in CASES}


def test_the_corpus_spans_the_domains_and_sizes():
    """The large inputs are counted from the shapes declared, not made (seconds per case): the
    tiny and small ones, made, show that every input of a case has the shape declared."""
    assert len(CASES) >= 14
    assert {"astronomy", "microscopy", "genomics", "climate", "remote sensing", "signals"} <= {c.domain for c in CASES}
    for c in CASES:
        made = {size: c.inputs(size) for size in ("tiny", "small")}
        assert all(a.shape == c.shapes[size] for size in made for a in made[size].values()), c.name
        assert list(made["tiny"]) == list(made["small"]), c.name
        large = len(made["small"]) * int(np.prod(c.shapes["large"]))
        assert large >= 1_000_000, c.name
        assert c.cells("tiny") < c.cells("small") < large


def test_inputs_are_seeded():
    c = case("ndvi")
    a, b, other = c.inputs("tiny", seed=3), c.inputs("tiny", seed=3), c.inputs("tiny", seed=4)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["nir"], other["nir"])


def test_named_outputs_names_as_the_tracer_does():
    assert list(named_outputs(np.ones(3))) == ["out"]
    assert list(named_outputs((np.ones(3), 2.0))) == ["out0", "out1"]
    got = named_outputs({"mean": np.float64(2.0), "mask": np.ma.masked_array([1.0, 2.0], [False, True])})
    assert got["mean"].shape == ()
    assert np.isnan(got["mask"][1]) and got["mask"][0] == 1.0


def test_short_error_keeps_the_class_and_the_first_line():
    err = ValueError(f"{os.sep}x{os.sep}site-packages{os.sep}pkg{os.sep}mod.py:3: boom\nmore")
    assert short_error(err) == f"ValueError: pkg{os.sep}mod.py:3: boom"


def _refused_by_numpy_too() -> Case:
    @sz.workflow
    def broken(x):
        return x @ np.ones((x.shape[1] + 1, 2))  # shapes numpy refuses as well

    return Case("broken", "numpy", "np.matmul", "test", broken, {"tiny": (4, 3)},
                lambda shape, rng: {"x": rng.normal(size=shape)})


def test_a_traced_error_is_recorded_not_raised(tmp_path):
    r = evaluate(_refused_by_numpy_too(), "tiny", repeat=1, workdir=str(tmp_path))
    assert not r.traced and r.error
    assert r.values_equal is None


class _NoLineage:
    """A run whose forward lineage is empty: every eager change is a miss."""

    def __init__(self, run):
        self.run = run

    def forward(self, *args, **kwargs):
        return np.empty((0, 2), np.int64)

    def shape(self, name):
        return self.run.shape(name)


def test_the_eager_check_counts_changes_outside_the_lineage(tmp_path):
    c = case("ndvi")
    inputs = c.inputs("tiny")
    run = c.workflow.trace(inputs).run(inputs, store=str(tmp_path / "run"), executor="local")
    outputs = named_outputs(c.workflow(**inputs))
    misses, trials, _, _ = eager_check(c.workflow, inputs, run, outputs, cells=4)
    assert trials > 0 and misses == 0
    misses, _, _, described = eager_check(c.workflow, inputs, _NoLineage(run), outputs, cells=4)
    assert misses >= 8 and described  # each perturbed cell changes its own NDVI, at least


def test_main_writes_the_table(tmp_path, capsys):
    assert corpus_main.main(["--cases", "ndvi", "otsu_mask", "--sizes", "tiny", "--no-spark", "--out",
                             str(tmp_path)]) == 0
    data = json.loads((tmp_path / "corpus.json").read_text())
    rows = {r["case"]: r for r in data["results"]}
    assert rows["ndvi"]["ok"] and rows["otsu_mask"]["ok"]
    md = (tmp_path / "corpus.md").read_text()
    assert "| ndvi |" in md and "load average" in md + data["meta"]["uptime_before"]
    assert "otsu_mask" in capsys.readouterr().out

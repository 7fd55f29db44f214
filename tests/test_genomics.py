"""The genomics workflow: data, UDF lineage exactness, strategies agreeing on every query."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest

import subzero as sz

from subzero_bench.configs import configuration, static_using
from subzero_bench.genomics import CONFIGS, queries
from subzero_bench.harness import check_same_cells
from subzero.errors import WorkflowError
from subzero.oracle import check_operator, check_workflow, evaluate_operator
from subzero.workflows import genomics as gen


def _tmp() -> Path:
    return Path(tempfile.mkdtemp(prefix="subzero-genomics-"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("genomics")
    wf, inputs = gen.build(scale=1)
    out = {c: wf.run(inputs, store=root / c, strategies=configuration(wf, {u: s for u in gen.UDFS}),
                     executor="local")
           for c, s in CONFIGS.items()}
    return wf, inputs, out


def test_data_is_deterministic_typed_and_scales_by_replication():
    a, b = gen.patients(96, seed=10), gen.patients(96, seed=10)
    assert np.array_equal(a, b, equal_nan=True) and a.shape == (96, gen.COLUMNS)
    assert set(np.unique(a[:, 0])) == {0.0, 1.0}                              # relapse outcome
    assert set(np.unique(a[:, 1])) <= {0.0, 1.0, 2.0, 3.0}                    # histology
    assert np.isnan(a).any(axis=1).sum() >= 1                                  # incomplete patients
    binary = a[:, gen.KINDS[0] == gen.BINARY]
    assert set(np.unique(binary)) == {0.0, 1.0} and (binary.std(axis=0) > 0).all()
    _, big = gen.build(scale=3)
    assert big["train"].shape == (288, gen.COLUMNS)
    assert np.array_equal(big["test"][96:192], big["test"][:96], equal_nan=True)
    with pytest.raises(WorkflowError):
        gen.build(scale=0)


def test_every_strategy_returns_the_same_cells_static_and_dynamic(runs):
    wf, inputs, out = runs
    for spec in queries(inputs, wf):
        answers = {}
        for config, run in out.items():
            fn = run.backward if spec.direction == "backward" else run.forward
            answers[f"{config} static"] = fn(spec.node, spec.cells, to=spec.to,
                                             using=static_using(run.strategies, spec.direction))
            answers[f"{config} dynamic"] = fn(spec.node, spec.cells, to=spec.to)
        check_same_cells(spec.name, answers)
        assert len(answers["BlackBox static"])


def test_extraction_lineage_is_the_source_row(runs):
    _, inputs, out = runs
    run = out["PayOne"]
    cases = np.asarray(run.output("train_cases"))
    complete = np.flatnonzero(~np.isnan(inputs["train"]).any(axis=1))
    assert len(cases) == len(complete)
    r, c = len(cases) - 1, 7
    row = [[complete[r], k] for k in range(gen.COLUMNS)]
    assert run.backward("train_cases", [(r, c)], to="train").tolist() == row


def test_model_lineage_is_the_feature_column_and_every_outcome(runs):
    _, _, out = runs
    run = out["PayMany"]
    assert run.strategies["model"] == ("Map",)                  # a mapping UDF stores nothing
    n = len(np.asarray(run.output("train_discrete")))
    f = 1                                                     # expression gene 1 (column 2)
    got = run.backward("model", [(1 + f, 3)], to="train_discrete")
    assert [tuple(x) for x in got.tolist()] == sorted([(p, 0) for p in range(n)] + [(p, 1 + f) for p in range(n)])
    prior = run.backward("model", [(0, 0)], to="train_discrete")
    assert prior.tolist() == [[p, 0] for p in range(n)]
    assert run.backward("model", [(0, 2)], to="train_discrete").tolist() == []


def test_naive_bayes_counts_the_class_totals():
    """Issue 12, cause 4: flipping patient 1's outcome changes feature 0's value-0 cell
    (the class totals change), so that cell's lineage holds every outcome."""
    d = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    model = evaluate_operator(gen.NaiveBayes(), [d])
    flipped = d.copy()
    flipped[1, 0] = 1.0
    assert round(float(model[1, 0]), 4) == 0.8755
    assert round(float(evaluate_operator(gen.NaiveBayes(), [flipped])[1, 0]), 4) == 0.5108
    wf = sz.Workflow("nb")
    wf.add(gen.NaiveBayes(), wf.input("d"), name="model")
    run = wf.run({"d": d}, store=_tmp() / "run", executor="local")
    assert [1, 0] in run.backward("model", [(1, 0)], to="d").tolist()
    assert check_operator(gen.NaiveBayes(), [d], using=["Map", "BlackBox"]).ok


def test_complete_cases_depend_on_their_whole_row():
    """Issue 12, cause 5: a NaN in (0, 1) drops row 0, so (0, 0) (was 1) becomes 3: the
    cell depends on every cell of its row, not only on the one it copies."""
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    y = x.copy()
    y[0, 1] = np.nan
    assert evaluate_operator(gen.CompleteCases(), [x])[0, 0] == 1
    assert evaluate_operator(gen.CompleteCases(), [y])[0, 0] == 3
    wf = sz.Workflow("cc")
    wf.add(gen.CompleteCases(), wf.input("x"), name="cc")
    run = wf.run({"x": x}, store=_tmp() / "run", strategies={"cc": ["PayOne", "FullOne"]}, executor="local")
    for strategy in ("PayOne", "FullOne", "BlackBox"):
        assert run.backward("cc", [(0, 0)], to="x", using={"cc": strategy}).tolist() == [[0, 0], [0, 1]]
    assert check_operator(gen.CompleteCases(), [x], strategies=["PayOne"], using=["PayOne", "BlackBox"]).ok


def test_selections_identify_rows_by_source_or_by_position():
    """Issue 12, cause 6: a dropped row moves the rows below it.  By default a row is its
    source row (no miss: the moved rows did not change); lineage="positional" holds it to
    its position: row r depends on the decisions of every row up to its source."""
    x = np.array([[1.0, 2.0], [np.nan, 0.0], [5.0, 6.0], [7.0, 8.0]])
    source = check_operator(gen.CompleteCases(), [x], strategies=["PayOne"], using=["PayOne", "BlackBox"])
    assert source.ok, str(source)
    positional = check_operator(gen.CompleteCases("positional"), [x], strategies=["PayOne", "FullOne"],
                                using=["PayOne", "FullOne", "BlackBox"])
    assert positional.ok, str(positional)
    wf = sz.Workflow("cc")
    wf.add(gen.CompleteCases("positional"), wf.input("x"), name="cc")
    run = wf.run({"x": x}, store=_tmp() / "run", strategies={"cc": ["PayOne"]}, executor="local")
    assert run.backward("cc", [(0, 0)], to="x").tolist() == [[0, 0], [0, 1]]          # row 0: its own
    assert len(run.backward("cc", [(1, 0)], to="x")) == 6                              # rows 0..2
    assert len(run.backward("cc", [(2, 0)], to="x")) == 8                              # the last: all
    # the default reading: the same row is the same cell, wherever it lands
    wf = sz.Workflow("cc")
    wf.add(gen.CompleteCases(), wf.input("x"), name="cc")
    run = wf.run({"x": x}, store=_tmp() / "run", strategies={"cc": ["PayOne"]}, executor="local")
    assert run.backward("cc", [(1, 0)], to="x").tolist() == [[2, 0], [2, 1]]
    assert run.forward("x", [(1, 0)], to="cc").tolist() == []


@pytest.mark.parametrize("name", ["CompleteCases", "NaiveBayes", "Predict"])
def test_udfs_pass_the_perturbation_oracle(name):
    rng = np.random.default_rng(3)
    d = np.column_stack([rng.integers(0, 2, 9), rng.integers(0, gen.LEVELS, (9, 4))]).astype(float)
    if name == "CompleteCases":
        x = rng.normal(size=(7, 4))
        x[[1, 4], [2, 0]] = np.nan
        op, inputs, strategies = gen.CompleteCases(), [x], ["PayOne", "PayMany", "FullOne", "FullMany/forward"]
    elif name == "NaiveBayes":
        op, inputs, strategies = gen.NaiveBayes(), [d], ["FullOne", "FullMany/forward"]
    else:
        model = rng.normal(size=(5, gen.LEVELS))
        op, inputs, strategies = gen.Predict(), [model, d], ["PayOne", "PayMany", "FullOne", "FullMany/forward"]
    using = strategies + ["BlackBox"]
    report = check_operator(op, inputs, strategies=strategies, using=using)
    assert report.ok, str(report)


def test_prediction_lineage_is_the_patient_and_its_model_cells(runs):
    _, _, out = runs
    run = out["FullOne"]
    d = np.asarray(run.output("test_discrete"))
    model = run.backward("score", [(4,)], to="model")
    want = [(0, 0)] + [(1 + f, int(x)) for f, x in enumerate(d[4, 1:])]
    assert [tuple(x) for x in model.tolist()] == sorted(want)
    row = run.backward("score", [(4,)], to="test_discrete")
    assert row.tolist() == [[4, c] for c in range(1, gen.COLUMNS)]
    score = np.asarray(run.output("model"))[0, 0] + sum(np.asarray(run.output("model"))[k] for k in want[1:])
    assert np.isclose(np.asarray(run.output("score"))[4], score)


# =====================================================================================
# Real data: GSE7390 (scikit-survival), held to the perturbation oracle
# =====================================================================================
def test_gse7390_is_encoded_numbers_and_its_raw_form_is_refused():
    pytest.importorskip("sksurv")
    from sksurv.datasets import load_breast_cancer

    from subzero.inputs_check import check_input_array

    data, kinds, names = gen.gse7390()
    assert data.shape == (198, 81) and names[:5] == list(gen.GSE7390_CLINICAL)
    assert set(np.unique(data[:, 0])) == {0.0, 1.0} and np.isnan(data[:, 1]).sum() >= 1   # "unkown" grade
    features, outcome = load_breast_cancer()
    with pytest.raises(sz.WorkflowError, match=r"non-numeric column\(s\) 'er' \(category\), 'grade' \(category\)"):
        check_input_array("features", features)
    with pytest.raises(sz.WorkflowError, match="structured array with fields 'e.tdm'"):
        check_input_array("outcome", outcome)


def test_gse7390_workflow_passes_the_oracle(tmp_path):
    pytest.importorskip("sksurv")
    wf, inputs = gen.build_gse7390()
    assert len([n for n in wf.nodes if not n.is_input]) == 17
    strategies = configuration(wf, {u: ["PayOne", "FullOne/forward"] for u in gen.GSE7390_UDFS})
    run = wf.run(inputs, store=tmp_path / "run", strategies=strategies, executor="local")
    incomplete = np.argwhere(np.isnan(inputs["test"]))[:1]
    cells = {"train": np.argwhere(np.ones(inputs["train"].shape, bool))[::211],
             "test": np.concatenate([np.argwhere(np.ones(inputs["test"].shape, bool))[::257], incomplete])}
    report = check_workflow(run, wf, inputs, sources=["train", "test"], cells=cells, backward=8,
                            targets=["train_cases", "test_cases", "model", "score", "er_positive", "risk"])
    assert report.ok, str(report)
    assert report.changed > 0

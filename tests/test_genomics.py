"""The genomics workflow: data, UDF lineage exactness, strategies agreeing on every query."""

from __future__ import annotations

import numpy as np
import pytest

from subzero.bench.configs import configuration, static_using
from subzero.bench.genomics import CONFIGS, queries
from subzero.bench.harness import check_same_cells
from subzero.errors import WorkflowError
from subzero.workflows import genomics as gen


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


def test_extraction_lineage_is_the_source_cell(runs):
    _, inputs, out = runs
    run = out["PayOne"]
    cases = np.asarray(run.output("train_cases"))
    complete = np.flatnonzero(~np.isnan(inputs["train"]).any(axis=1))
    assert len(cases) == len(complete)
    r, c = len(cases) - 1, 7
    assert run.backward("train_cases", [(r, c)], to="train").tolist() == [[complete[r], c]]


def test_model_lineage_is_the_contributing_patients(runs):
    _, _, out = runs
    run = out["PayMany"]
    d = np.asarray(run.output("train_discrete"))
    f, v = 1, int(d[0, 2])                                    # expression gene 1 (column 2)
    got = run.backward("model", [(1 + f, v)], to="train_discrete")
    rows = np.flatnonzero(d[:, 1 + f] == v)
    want = sorted([(p, 0) for p in rows] + [(p, 1 + f) for p in rows])
    assert [tuple(x) for x in got.tolist()] == want
    prior = run.backward("model", [(0, 0)], to="train_discrete")
    assert prior.tolist() == [[p, 0] for p in range(len(d))]


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

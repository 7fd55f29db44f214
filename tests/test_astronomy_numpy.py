"""The astronomy workflow written as numpy code answers every query as the hand-built DAG."""

from __future__ import annotations

import numpy as np
import pytest

from subzero_bench.astronomy import queries
from subzero.workflows import astronomy, astronomy_numpy

SHAPE = (64, 128)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("astronomy")
    dag, inputs = astronomy.build(shape=SHAPE)
    traced, same = astronomy_numpy.build(shape=SHAPE)
    assert all(np.array_equal(inputs[k], same[k]) for k in inputs)
    return (dag.run(inputs, store=root / "dag", executor="local"),
            traced.run(inputs, store=root / "traced", executor="local"), inputs)


def test_the_traced_workflow_computes_the_dags_values(runs):
    dag, traced, _ = runs
    for name in ("flat_norm", "elec_1", "crmask_1", "crmask_2", "cover", "stars"):
        np.testing.assert_array_equal(np.asarray(traced.output(name)), np.asarray(dag.output(name)), err_msg=name)
    for name in ("mesh_2", "back_1", "merged", "clean", "snr"):  # block means summed in another order
        np.testing.assert_allclose(np.asarray(traced.output(name)), np.asarray(dag.output(name)), rtol=1e-12,
                                   atol=1e-9, err_msg=name)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return np.array_equal(np.unique(np.asarray(a), axis=0), np.unique(np.asarray(b), axis=0))


def test_every_benchmark_query_gets_the_same_cells(runs):
    dag, traced, _ = runs
    for spec in queries(dag, quick=True):
        ask = "backward" if spec.direction == "backward" else "forward"
        want = getattr(dag, ask)(spec.node, spec.cells, to=spec.to, entire_array=spec.entire_array)
        got = getattr(traced, ask)(spec.node, spec.cells, to=spec.to, entire_array=spec.entire_array)
        assert _same(got, want), spec.name


@pytest.mark.parametrize("seed", [0, 1])
def test_single_cells_both_ways_through_every_udf(runs, seed):
    dag, traced, inputs = runs
    rng = np.random.default_rng(seed)
    stars = np.asarray(dag.output("stars"))
    on_star = np.argwhere(stars > 0)
    cells = [tuple(on_star[rng.integers(len(on_star))]), tuple(rng.integers(0, SHAPE))]
    for cell in cells:
        for source in ("exposure_1", "exposure_2", "flat"):
            assert _same(traced.backward("stars", [cell], to=source), dag.backward("stars", [cell], to=source))
            assert _same(traced.forward(source, [cell], to="stars"), dag.forward(source, [cell], to="stars"))
        assert _same(traced.backward("clean", [cell], to="elec_1"), dag.backward("clean", [cell], to="elec_1"))
        assert _same(traced.forward("elec_2", [cell], to="snr"), dag.forward("elec_2", [cell], to="snr"))

"""The astronomy workflow: inputs, UDF lineage exactness, strategies agreeing on every query."""

from __future__ import annotations

import numpy as np
import pytest

from subzero.bench.astronomy import CONFIGS, pins, queries
from subzero.bench.configs import operator_nodes, static_using
from subzero.bench.harness import check_same_cells
from subzero.errors import WorkflowError
from subzero.workflows import astronomy as astro

SHAPE = (32, 64)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The tiny workflow run locally once per configuration, SubZero as the paper's plan
    (small tiles: C runs tiled)."""
    root = tmp_path_factory.mktemp("astronomy")
    wf, inputs = astro.build(shape=SHAPE)
    out = {}
    for config in CONFIGS + ("CompMany",):
        strategies = (pins(wf, config, use_optimizer=False) if config != "CompMany" else
                      pins(wf, "BlackBoxOpt") | {u: ["CompMany"] for u in ("crmask_1", "crmask_2", "clean")}
                      | {"stars": ["PayMany"]})
        out[config] = wf.run(inputs, store=root / config, strategies=strategies, executor="local", tile_shape=16)
    return wf, inputs, out


def test_inputs_are_deterministic_real_sky_with_cosmic_rays():
    a, b = astro.exposures(SHAPE), astro.exposures(SHAPE)
    assert set(a) == {"exposure_1", "exposure_2", "flat"}
    assert all(np.array_equal(a[k], b[k]) and a[k].dtype == np.float32 and a[k].shape == SHAPE for k in a)
    assert not np.array_equal(a["exposure_1"], a["exposure_2"])        # independent noise and hits
    cells, energy = astro.cosmic_rays((512, 2000), np.random.default_rng(0))
    assert len(cells) > 512 and energy.min() >= 300                     # singles plus streaks
    assert astro.sky_image((512, 2000)).shape == (512, 2000)


def test_build_rejects_shapes_the_mesh_cannot_take():
    with pytest.raises(WorkflowError, match="multiples of 16"):
        astro.build(shape=(30, 64))


def test_workflow_has_22_builtins_and_four_udfs():
    wf, _ = astro.build(shape=SHAPE)
    names = operator_nodes(wf)
    assert len(names) - len(astro.UDFS) == 22 and set(astro.UDFS) <= set(names)


def test_every_strategy_returns_the_same_cells_for_every_query(runs):
    wf, _, out = runs
    for spec in queries(out["NoLineage"], quick=True):
        answers = {}
        for config, run in out.items():
            using = ({n: "BlackBox" for n in operator_nodes(wf)} if config in ("NoLineage", "BlackBox")
                     else static_using(run.strategies, spec.direction))
            fn = run.backward if spec.direction == "backward" else run.forward
            answers[config] = fn(spec.node, spec.cells, to=spec.to, using=using, entire_array=spec.entire_array)
        check_same_cells(spec.name, answers)
        assert len(answers["BlackBox"])


def test_composite_lineage_is_the_pixel_itself_unless_flagged(runs):
    _, _, out = runs
    run = out["SubZero"]
    flags = np.asarray(run.output("crmask_1")).astype(bool)
    clean = tuple(np.argwhere(~flags)[0])
    assert run.backward("crmask_1", [clean], to="elec_1").tolist() == [list(clean)]
    ray = np.argwhere(flags)[0]
    got = run.backward("crmask_1", [tuple(ray)], to="elec_1")
    lo, hi = np.maximum(ray - 3, 0), np.minimum(ray + 4, SHAPE)
    assert len(got) == np.prod(hi - lo) and got.min(axis=0).tolist() == lo.tolist()


def test_repair_is_exact_on_tiles_with_its_halo(runs, tmp_path):
    wf, inputs, out = runs
    whole = wf.run(inputs, store=tmp_path / "whole", strategies=pins(wf, "FullOne"), executor="local",
                   tile_shape=1000)
    assert np.array_equal(np.asarray(whole.output("clean")), np.asarray(out["FullOne"].output("clean")))
    cells = np.argwhere(np.ones(SHAPE, bool))[::37]
    assert np.array_equal(whole.backward("clean", cells, to="merged"),
                          out["FullOne"].backward("clean", cells, to="merged"))


def test_star_lineage_reproduces_the_star(runs):
    _, _, out = runs
    run = out["SubZero"]
    stars = np.asarray(run.output("stars"))
    pixel = tuple(np.argwhere(stars > 0)[0])
    lineage = run.backward("stars", [pixel], to="snr")
    assert len(lineage) == (stars == stars[pixel]).sum()
    only = np.zeros(SHAPE)
    only[tuple(lineage.T)] = np.asarray(run.output("snr"))[tuple(lineage.T)]
    again = astro.DetectStars(threshold=5.0, minarea=5).labels(only)
    assert np.array_equal(np.argwhere(again == again[pixel]), lineage)   # same star, any label


def test_star_payload_round_trips():
    footprint = np.array([[0, 1, 1], [1, 1, 0]], bool)
    payload = astro.DetectStars.encode(7, np.array([10, 20]), footprint)
    label, cells = astro.DetectStars.decode(payload)
    assert label == 7 and cells.tolist() == [[10, 21], [10, 22], [11, 20], [11, 21]]

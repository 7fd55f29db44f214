"""The astronomy workflow: inputs, UDF lineage exactness, strategies agreeing on every query."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

from subzero_bench.astronomy import CONFIGS, pins, queries
from subzero_bench.configs import operator_nodes, static_using
from subzero_bench.harness import check_same_cells
from subzero.errors import WorkflowError
from subzero.oracle import check_workflow
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


def test_cosmic_ray_lineage_is_the_derived_window_flagged_or_not(runs):
    """Issue 12, causes 2 and 3: a mask pixel, flagged or clean, depends on the window of
    radius 8 (one L.A.Cosmic iteration) around it, not on itself or a guessed radius 3."""
    _, _, out = runs
    run = out["SubZero"]
    flags = np.asarray(run.output("crmask_1")).astype(bool)
    assert flags.any() and (~flags).any()
    reach = astro.cosmic_rays_udf().reach
    assert reach == 8
    for pixel in (np.argwhere(~flags)[0], np.argwhere(flags)[0]):
        got = run.backward("crmask_1", [tuple(pixel)], to="elec_1")
        lo, hi = np.maximum(pixel - reach, 0), np.minimum(pixel + reach + 1, SHAPE)
        assert len(got) == np.prod(hi - lo) and got.min(axis=0).tolist() == lo.tolist()


def test_repair_is_exact_on_tiles_with_its_halo(runs, tmp_path):
    wf, inputs, out = runs
    whole = wf.run(inputs, store=tmp_path / "whole", strategies=pins(wf, "FullOne"), executor="local",
                   tile_shape=1000)
    assert np.array_equal(np.asarray(whole.output("clean")), np.asarray(out["FullOne"].output("clean")))
    cells = np.argwhere(np.ones(SHAPE, bool))[::37]
    assert np.array_equal(whole.backward("clean", cells, to="merged"),
                          out["FullOne"].backward("clean", cells, to="merged"))


def test_star_lineage_is_the_star_and_its_ring(runs):
    """Issue 12, cause 1: labels are canonical (a star's first pixel), so re-running on
    the star's lineage alone gives the same label; the lineage is the star and the ring
    of pixels around it."""
    _, _, out = runs
    run = out["SubZero"]
    stars = np.asarray(run.output("stars"))
    pixel = tuple(np.argwhere(stars > 0)[0])
    star = stars == stars[pixel]
    assert stars[pixel] == 1 + np.flatnonzero(star.reshape(-1))[0]
    lineage = run.backward("stars", [pixel], to="snr")
    ring = ndimage.binary_dilation(star, np.ones((3, 3), bool))
    assert np.array_equal(lineage, np.argwhere(ring))
    only = np.zeros(SHAPE)
    only[tuple(lineage.T)] = np.asarray(run.output("snr"))[tuple(lineage.T)]
    again = astro.DetectStars(threshold=5.0, minarea=5).labels(only)
    assert np.array_equal(again == stars[pixel], star)
    background = tuple(np.argwhere(stars == 0)[0])
    assert run.backward("stars", [background], to="snr").tolist() == [list(background)]


# =====================================================================================
# Real data: astroscrappy's GMOS frame, held to the perturbation oracle
# =====================================================================================
@pytest.fixture(scope="module")
def gmos(tmp_path_factory):
    wf, inputs = astro.build_gmos()
    strategies = {"crmask": ["CompOne"], "crd": ["CompOne"], "clean": ["CompOne"], "stars": ["CompOne"],
                  "labels": ["CompOne"]}
    run = wf.run(inputs, store=tmp_path_factory.mktemp("gmos") / "run", strategies=strategies,
                 executor="local", tile_shape=64)
    return wf, inputs, run


def test_gmos_inputs_come_from_the_fits_file_with_the_header_gain():
    inputs, calib = astro.gmos_frame()
    assert {k: v.shape for k, v in inputs.items()} == {"sci": (150, 200), "sky": (150, 200), "var": (150, 200)}
    assert all(v.dtype == np.float32 and v.dtype.isnative for v in inputs.values())   # FITS is big-endian
    assert calib["gain"] == 1.0                     # DRAGONS converted the frame to electrons (ADUTOELE)
    assert astro.header_gain({"GAIN": 1.933}) == 1.933
    with pytest.raises(WorkflowError, match="no gain"):
        astro.header_gain({})


def test_gmos_finds_the_two_cosmic_rays_and_canonical_stars(gmos):
    _, _, run = gmos
    crmask = np.asarray(run.output("crmask")).astype(bool)
    assert ndimage.label(crmask, np.ones((3, 3)))[1] == 2         # astroscrappy's test: two cosmic rays
    stars = np.asarray(run.output("stars"))
    for label in np.unique(stars[stars > 0]):
        assert label == 1 + np.flatnonzero(stars.reshape(-1) == label)[0]


def test_gmos_lineage_passes_the_oracle_at_the_pixels_that_broke_it(gmos):
    """Issue 12, causes 1-3 on real data: sci(0, 140) renumbered a far-away star under sep's
    ids; sci(36, 141) unflagged crmask(40, 144) beyond the guessed radius 3."""
    wf, inputs, run = gmos
    assert [40, 144] in run.forward("sci", [(36, 141)], to="crmask").tolist()
    cells = {"sci": [(0, 140), (36, 141), (40, 144), (75, 100), (120, 38)]}
    report = check_workflow(run, wf, inputs, sources=["sci"], cells=cells, backward=8,
                            targets=["crmask", "crd", "clean", "stars", "spectrum"])
    assert report.ok, str(report)
    assert report.changed > 0 and report.rejected == 0


def test_a_star_region_is_its_group_grown_by_the_ring():
    """`DetectStars` resolves a payload (the group's box and bitmask) by dilating the bitmask in
    its box: the same sorted cells as growing the decoded group cell by cell, clipped at the
    edges; kept per payload, read-only."""
    from subzero.operators._kernels import decode_region, encode_region
    from subzero.operators.astro import DetectStars, _grown_region

    rng = np.random.default_rng(7)
    for _ in range(200):
        shape = (int(rng.integers(2, 25)), int(rng.integers(2, 25)))
        n = int(rng.integers(1, 15))
        group = np.unique(np.stack([rng.integers(0, shape[0], n), rng.integers(0, shape[1], n)], axis=1), axis=0)
        payload = encode_region(group, 2)
        cells = decode_region(payload, 2)
        want = DetectStars._grown(cells, np.zeros(len(cells), np.int64), shape)[1]
        got = _grown_region(payload, shape)
        np.testing.assert_array_equal(got, want)
        assert not got.flags.writeable and _grown_region(payload, shape) is got


def test_lacosmic_runs_on_the_library_threads_setting_and_flags_the_same_pixels(monkeypatch):
    """L.A.Cosmic's OpenMP code runs on ``library_threads`` threads in the calling thread (0: the
    library's default), and the mask does not depend on how many."""
    import astroscrappy
    from threadpoolctl import ThreadpoolController

    from subzero import config

    rng = np.random.default_rng(4)
    image = rng.normal(100.0, 5.0, (40, 48))
    image[rng.integers(0, 40, 8), rng.integers(0, 48, 8)] += 500.0
    seen = []
    real = astroscrappy.detect_cosmics

    def detect(*args, **kwargs):
        seen.append(ThreadpoolController().select(user_api="openmp").info()[0]["num_threads"])
        return real(*args, **kwargs)

    monkeypatch.setattr(astroscrappy, "detect_cosmics", detect)
    op = astro.cosmic_rays_udf()
    masks = []
    for n in (1, 2, 0):
        with config.set(library_threads=n):
            masks.append(op.mask(image))
    assert masks[0].any() and all(np.array_equal(masks[0], m) for m in masks[1:])
    default = ThreadpoolController().select(user_api="openmp").info()[0]["num_threads"]
    assert seen == [1, 2, default]

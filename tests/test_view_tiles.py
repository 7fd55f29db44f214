"""Tile pyramids: the values of every level are the block means (images) or maxima (labels)
of the stored array, made from reads of the tiles' footprints or from children; PNGs are
cached outside the store, which no request changes."""

from __future__ import annotations

import hashlib
import io
import os

import numpy as np
import pytest

import subzero as sz
from subzero import operators as ops
from subzero.tools.view import tiles
from subzero.tools.view.tiles import TILE, TilePyramid, label_colors, render, run_cache_dir


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    wf = sz.Workflow("tiles")
    x = wf.input("x")
    wf.add(ops.Label(), wf.add(ops.Threshold(0.9), x, name="bright"), name="stars")
    rng = np.random.default_rng(3)
    data = rng.random((1024, 768)).astype(np.float32)
    data[5, 7] = np.nan
    return wf.run({"x": data}, store=str(tmp_path_factory.mktemp("tiles") / "s"), executor="local", tile_shape=300)


def _digest(root) -> dict[str, str]:
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            out[p] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


def _blocks(a: np.ndarray, f: int, how) -> np.ndarray:
    return how(a.reshape(a.shape[0] // f, f, a.shape[1] // f, f), axis=(1, 3))


@pytest.mark.filterwarnings("ignore:Mean of empty slice")
@pytest.mark.parametrize("direct", [TILE, 4 * TILE])  # children only, or one read per tile
def test_levels_are_block_means_and_maxima(run, tmp_path, monkeypatch, direct):
    monkeypatch.setattr(tiles, "DIRECT_READ", direct)
    x = np.asarray(run.output("x"))
    stars = np.asarray(run.output("stars"))
    img = TilePyramid(run, "x", tmp_path, "image")
    lab = TilePyramid(run, "stars", tmp_path, "labels")
    assert img.top == 2 and img.grid(0) == (4, 3) and img.grid(2) == (1, 1) and img.level_shape(2) == (256, 192)
    for z in range(3):
        f = 1 << z
        whole = np.concatenate([np.concatenate([img.values(z, ty, tx) for tx in range(img.grid(z)[1])], axis=1)
                                for ty in range(img.grid(z)[0])])
        with np.errstate(all="ignore"):
            expected = _blocks(x.astype(np.float64), f, np.nanmean)
        nan_block = (5 // f, 7 // f)  # a mean of means weighs the NaN's block differently: checked apart
        assert np.isnan(whole[nan_block]) if z == 0 else np.isfinite(whole[nan_block])
        whole[nan_block] = expected[nan_block] = 0
        np.testing.assert_allclose(whole, expected, rtol=1e-5)
        labels = np.concatenate([np.concatenate([lab.values(z, ty, tx) for tx in range(lab.grid(z)[1])], axis=1)
                                 for ty in range(lab.grid(z)[0])])
        np.testing.assert_array_equal(labels, _blocks(stars, f, np.max))
    assert not (img.dir / "values" / "0").exists()  # level 0 is never copied out of the store
    if direct == TILE:
        assert (img.dir / "values" / "2" / "0_0.npy").exists()


def test_pngs_are_cached_outside_the_store_which_stays_unchanged(run, tmp_path):
    from PIL import Image

    before = _digest(run.path)
    pyramid = TilePyramid(run, "x", tmp_path, "image")
    png = pyramid.png(1, 1, 0)
    image = Image.open(io.BytesIO(png))
    assert image.size == (TILE, TILE) and image.mode == "RGB"
    assert pyramid.png_path(1, 1, 0).read_bytes() == png and str(pyramid.dir).startswith(str(tmp_path))
    lo, hi = pyramid.limits()
    assert 0.0 <= lo < hi <= 1.0
    assert _digest(run.path) == before
    with pytest.raises(sz.LineageError, match="levels 0..2, not 3"):
        pyramid.png(3, 0, 0)
    with pytest.raises(sz.LineageError, match="level 0 has tiles 0..3 x 0..2"):
        pyramid.png(0, 4, 0)


def test_render_colours():
    masks = render(np.array([[False, True]]), "mask", None)
    assert masks[0, 0].tolist() != masks[0, 1].tolist()
    grey = render(np.array([[0.0, 0.5, 1.0, np.nan]], np.float32), "image", (0.0, 1.0))
    assert grey[0, 0].tolist() == [0, 0, 0] and grey[0, 2].tolist() == [255, 255, 255]
    assert grey[0, 1, 0] > 128  # asinh lifts the faint half
    assert grey[0, 3].tolist() == list(tiles.NAN_RGB)
    colours = label_colors(np.arange(0, 50))
    assert colours[0].tolist() == [0, 0, 0] and len({tuple(c) for c in colours[1:].tolist()}) == 49
    assert colours[1:].max(axis=1).min() > 150  # every label bright against the black background


def test_cache_dir_follows_the_environment(run, monkeypatch, tmp_path):
    monkeypatch.setenv("SUBZERO_CACHE", str(tmp_path))
    d = run_cache_dir(run)
    assert d.parent == tmp_path / "view" and d == run_cache_dir(sz.open_run(run.path))


def test_an_unstored_nodes_tiles_are_made_once_however_many_ask(run, tmp_path, monkeypatch):
    """``bright`` was not stored (an intermediate: its tiles re-run from ``x``): threads of two
    pyramids over one cache (as two server processes are) asking for its overview at once wait
    for one computation of each tile, the direct reads included, all cached; the values are the
    block maxima of the recomputed array."""
    import threading

    monkeypatch.setattr(tiles, "DIRECT_READ", TILE)
    pyramids = [TilePyramid(run, "bright", tmp_path, "mask") for _ in range(2)]
    assert not pyramids[0].stored and TilePyramid(run, "x", tmp_path, "image").stored
    made: list[tuple[int, int, int]] = []
    for pyramid in pyramids:
        for method in ("_from_children", "_read"):
            def counted(z, ty, tx, real=getattr(pyramid, method)):
                made.append((z, ty, tx))
                return real(z, ty, tx)

            monkeypatch.setattr(pyramid, method, counted)
    top = pyramids[0].top
    assert not pyramids[0].cached(top, 0, 0)
    got: list[np.ndarray] = []
    threads = [threading.Thread(target=lambda p=pyramids[k % 2]: got.append(p.values(top, 0, 0))) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    every = [(z, ty, tx) for z in range(top + 1) for ty in range(pyramids[0].grid(z)[0])
             for tx in range(pyramids[0].grid(z)[1])]
    assert sorted(made) == sorted(every)  # each once, not once per thread or pyramid
    assert all(pyramids[1].cached(*t) for t in every)
    bright = np.asarray(run.output("bright"))
    assert len(got) == 4 and all(np.array_equal(g, _blocks(bright, 4, np.max)) for g in got)
    np.testing.assert_array_equal(pyramids[1].values(0, 1, 2), bright[256:512, 512:768])  # read back, not made
    assert len(made) == len(every)


def test_an_unstored_nodes_zoomed_out_tiles_read_their_footprint_once(run, tmp_path, monkeypatch):
    """A level >= 1 tile of an unstored node within `DIRECT_READ` is one read of its footprint
    (re-running only what it covers), not a read per child tile; above it, from its children."""
    from subzero.worker import RECOMPUTED_TILES

    pyramid = TilePyramid(run, "bright", tmp_path, "mask")
    array = run.array("bright")
    assert not pyramid.stored and TILE * 2 <= tiles.DIRECT_READ
    reads: list[tuple] = []
    real = array.read
    monkeypatch.setattr(array, "read", lambda box=None: reads.append(box) or real(box))
    RECOMPUTED_TILES.clear()
    bright = np.asarray(run.output("x")) > 0.9
    np.testing.assert_array_equal(pyramid.values(1, 1, 0), _blocks(bright[512:1024, 0:512], 2, np.max))
    assert reads == [((512, 1024), (0, 512))]
    reads.clear()
    monkeypatch.setattr(tiles, "DIRECT_READ", TILE)
    np.testing.assert_array_equal(pyramid.values(1, 0, 1), _blocks(bright[0:512, 512:768], 2, np.max))
    assert sorted(reads) == [((0, 256), (512, 768)), ((256, 512), (512, 768))]  # its two children
    RECOMPUTED_TILES.clear()

"""Masks, DS9 regions and pictures of traced cells: each file is what it claims to be."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import subzero as sz
from subzero.tools.export import (
    Panel, check_output, from_fits_coords, mask_boxes, plot_panels, to_fits_coords, write_fits_mask, write_mask,
    write_regions,
)

fits = pytest.importorskip("astropy.io.fits")
regions = pytest.importorskip("regions")
image_io = pytest.importorskip("matplotlib.image")


def star_mask(shape=(40, 60)):
    mask = np.zeros(shape, dtype=bool)
    mask[10:14, 20:23] = True
    mask[12, 23] = True
    mask[30, 5] = True
    return mask


def test_fits_coordinates_are_reversed_and_one_based():
    cells = np.array([[0, 0], [2, 5]])
    np.testing.assert_array_equal(to_fits_coords(cells), [[1, 1], [6, 3]])
    np.testing.assert_array_equal(from_fits_coords(to_fits_coords(cells)), cells)
    np.testing.assert_array_equal(to_fits_coords(np.array([[1, 2, 3]])), [[4, 3, 2]])


@given(arrays(bool, st.tuples(st.integers(1, 12), st.integers(1, 12))))
def test_mask_boxes_cover_the_mask_exactly_once(mask):
    cover = np.zeros(mask.shape, dtype=np.int64)
    for r0, r1, c0, c1 in mask_boxes(mask):
        assert r0 < r1 and c0 < c1
        cover[r0:r1, c0:c1] += 1
    np.testing.assert_array_equal(cover, mask.astype(np.int64))


def test_mask_boxes_merge_a_block_into_one_box():
    assert mask_boxes(star_mask()) == [(10, 12, 20, 23), (12, 13, 20, 24), (13, 14, 20, 23), (30, 31, 5, 6)]


def test_npy_mask_has_exactly_the_cells(tmp_path):
    mask = star_mask()
    write_mask(tmp_path / "m.npy", mask)
    back = np.load(tmp_path / "m.npy")
    assert back.dtype == bool
    np.testing.assert_array_equal(back, mask)


def test_fits_mask_keeps_the_header_and_wcs(tmp_path):
    mask = star_mask()
    header = fits.ImageHDU(np.zeros(mask.shape, np.int16), name="SCI").header
    header.update({"OBJECT": "M31", "CTYPE1": "RA---TAN", "CTYPE2": "DEC--TAN", "CRPIX1": 30.0, "CRPIX2": 20.0,
                   "CRVAL1": 10.68, "CRVAL2": 41.27, "CDELT1": -1e-4, "CDELT2": 1e-4, "BSCALE": 2.0, "BZERO": 100})
    header.add_history("flat-fielded")
    write_fits_mask(tmp_path / "m.fits", mask, header, history="subzero backward lineage of stars")
    with fits.open(tmp_path / "m.fits") as hdus:
        (hdu,) = hdus
        np.testing.assert_array_equal(hdu.data.astype(bool), mask)
        assert hdu.data.dtype == np.uint8 and hdu.header["OBJECT"] == "M31" and hdu.header["CRPIX1"] == 30.0
        assert "BSCALE" not in hdu.header and "XTENSION" not in hdu.header
        history = [str(h) for h in hdu.header["HISTORY"]]
        assert history == ["flat-fielded", "subzero backward lineage of stars"]
    from astropy.wcs import WCS

    assert WCS(fits.getheader(tmp_path / "m.fits")).wcs.ctype[0] == "RA---TAN"


def test_regions_parse_back_to_the_traced_cells(tmp_path):
    mask = star_mask()
    write_regions(tmp_path / "m.reg", mask, text="stars")
    text = (tmp_path / "m.reg").read_text()
    assert "image" in text.splitlines()[1:3] and "box(6.00000000,31.00000000,1.00000000,1.00000000" in text
    cover = np.zeros(mask.shape, dtype=bool)
    for region in regions.Regions.read(str(tmp_path / "m.reg"), format="ds9"):
        assert isinstance(region, regions.RectanglePixelRegion)
        cover |= region.to_mask(mode="center").to_image(mask.shape).astype(bool)
    np.testing.assert_array_equal(cover, mask)


@pytest.mark.parametrize("path, fragment", [
    ("m.txt", "give a file ending in .npy, .fits"),
    ("nodir/m.npy", "directory"),
])
def test_check_output(tmp_path, path, fragment):
    with pytest.raises(sz.LineageError, match=fragment):
        check_output(tmp_path / path, (".npy", ".fits"), "--mask")


def test_regions_refuse_other_ranks(tmp_path):
    with pytest.raises(sz.LineageError, match="2-D"):
        write_regions(tmp_path / "m.reg", np.zeros((2, 2, 2), bool))
    assert list(tmp_path.iterdir()) == []


def png(path):
    return image_io.imread(str(path))


class Recording:
    """A 2-D array-like that records the slices read from it (a stored array reads only those)."""

    def __init__(self, array):
        self.array, self.reads = array, []
        self.shape, self.dtype = array.shape, array.dtype

    def __getitem__(self, key):
        self.reads.append(key)
        return self.array[key]


def tinted(path, role: str = "backward") -> int:
    """Pixels of a picture tinted by ``role``'s overlay (magenta backward: red and blue well over
    green; cyan forward: green and blue well over red)."""
    pixels = png(path)[..., :3]
    r, g, b = pixels[..., 0], pixels[..., 1], pixels[..., 2]
    if role == "backward":
        return int(np.count_nonzero((r > g + 0.25) & (b > g + 0.25)))
    return int(np.count_nonzero((g > r + 0.25) & (b > r + 0.25)))


def test_a_plot_is_a_cutout_around_the_cells_read_alone(tmp_path):
    from subzero.tools.export import panel_window

    rng = np.random.default_rng(0)
    image = Recording(rng.normal(100, 5, (1000, 1200)))
    mask = np.zeros((1000, 1200), bool)
    mask[500:506, 300:304] = True
    assert panel_window(mask.shape, mask) == (492, 514, 292, 312)  # the box, 8 cells of margin at least
    plot_panels(tmp_path / "p.png", [Panel("star", image, mask, role="backward")])
    assert image.reads == [(slice(492, 514), slice(292, 312))]  # never the whole array
    assert tinted(tmp_path / "p.png") > 2000  # the traced cells fill a good part of the picture


def test_the_whole_array_when_the_cells_span_it(tmp_path):
    from subzero.tools.export import panel_window
    from subzero.frontier import Frontier

    mask = star_mask()
    assert panel_window(mask.shape, mask) == (0, 40, 0, 60)  # a star and a far cell: most of the array
    assert panel_window((40, 60), np.zeros((40, 60), bool)) == (0, 40, 0, 60)
    frontier = Frontier.of_boxes(np.array([[100, 200]]), np.array([[110, 220]]), (1000, 1000))
    assert panel_window(frontier.shape, frontier) == (90, 120, 190, 230)
    plot_panels(tmp_path / "p.png", [Panel("a", np.arange(2400.0).reshape(40, 60), mask, role="forward"),
                                     Panel("b", np.arange(600).reshape(20, 30), np.zeros((20, 30), bool))],
                origin="lower")
    height, width = png(tmp_path / "p.png").shape[:2]
    assert width > 1.5 * height and tinted(tmp_path / "p.png", "forward") > 50


def test_window_masks_of_frontiers_match_masks():
    from subzero.tools.export import window_mask
    from subzero.frontier import Frontier

    mask = star_mask((40, 60))
    for cells in (Frontier.of_mask(mask), Frontier.of_ids(np.flatnonzero(mask), mask.shape), mask):
        np.testing.assert_array_equal(window_mask(cells, (8, 20, 18, 30)), mask[8:20, 18:30])


def test_labels_in_a_categorical_colormap_and_sky_axes(tmp_path):
    from astropy.wcs import WCS

    from subzero.tools.export import _rgb, display_of

    labels = np.zeros((50, 70), dtype=np.int32)
    labels[10:14, 20:24], labels[30:33, 40:44], labels[31, 45] = 1, 2, 3
    assert display_of(labels) == "labels" and display_of(labels > 0) == "mask" and display_of(labels * 1.0) == "image"
    colours = _rgb(labels, "labels")
    assert colours[0, 0].tolist() == [0, 0, 0] and len({tuple(colours[r, c]) for r, c in ((11, 21), (31, 41), (31, 45))}) == 3
    w = WCS(naxis=2)
    w.wcs.ctype, w.wcs.crval, w.wcs.crpix, w.wcs.cdelt = ["RA---TAN", "DEC--TAN"], [150, 2], [35, 25], [-1e-4, 1e-4]
    plot_panels(tmp_path / "l.png", [Panel("labels", labels, labels == 2, wcs=w),
                                     Panel("flat", np.ones((5, 7)), np.ones((5, 7), bool)),
                                     Panel("nan", np.full((5, 7), np.nan), np.zeros((5, 7), bool))])
    assert png(tmp_path / "l.png").shape[1] >= 300


def test_a_plot_refuses_arrays_that_are_not_2d(tmp_path):
    with pytest.raises(sz.LineageError, match=r"only 2-D arrays"):
        plot_panels(tmp_path / "p.png", [Panel("cube", np.zeros((2, 3, 4)), np.zeros((2, 3, 4), bool))])
    with pytest.raises(sz.LineageError, match=r"ending in \.png"):
        plot_panels(tmp_path / "p.gif", [Panel("a", np.zeros((2, 3)), np.zeros((2, 3), bool))])
    assert list(tmp_path.iterdir()) == []


def test_docstring_examples():
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module("subzero.tools.export"), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


def test_counts_are_drawn_on_a_sequential_scale_from_zero(tmp_path):
    """A count map (``display="counts"``) is not a label array: its largest count gets the top of
    a sequential colormap (magma's pale yellow), which the categorical label colours never give."""
    from matplotlib import colormaps
    from PIL import Image

    counts = np.zeros((40, 60), np.int32)
    counts[10:30, 20:40] = 3
    counts[15:25, 25:35] = 12
    top = np.array(colormaps["magma"](1.0)[:3]) * 255
    for display, expected in (("counts", True), (None, False)):
        out = plot_panels(tmp_path / f"{display}.png", [Panel("counts", counts, np.zeros(counts.shape, bool),
                                                              display=display)])
        rgb = np.asarray(Image.open(out).convert("RGB"), np.float64)
        assert (np.abs(rgb - top).max(axis=-1) < 8).any() == expected, display


def test_pictures_have_colour_bars_titles_and_the_users_file_mode(tmp_path, monkeypatch):
    """An image panel has a colour bar (a labels panel none), the title is the caller's alone
    (no window range that reads as the query), and the file has the mode of any new file of
    the user (0o666 less the umask), not mkstemp's private 0o600."""
    from matplotlib.figure import Figure

    from subzero.tools.export import LINEAGE_COLORS

    made: list = []
    real_savefig = Figure.savefig

    def keep(fig, *args, **kwargs):
        made.append(fig)
        return real_savefig(fig, *args, **kwargs)

    rng = np.random.default_rng(1)
    mask = star_mask((40, 60))
    labels = mask.astype(np.int32) * 7
    monkeypatch.setattr(Figure, "savefig", keep)
    old = os.umask(0o027)
    try:
        out = plot_panels(tmp_path / "p.png", [Panel("raw[8:20, 18:30]: queried", rng.normal(0, 1, (40, 60)), mask),
                                               Panel("stars: backward", labels, mask, role="backward")])
    finally:
        os.umask(old)
    assert (out.stat().st_mode & 0o777) == 0o640
    (fig,) = made
    bars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert len(bars) == 1 and "zscale" in bars[0].get_ylabel()
    titles = [ax.get_title() for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert titles == ["raw[8:20, 18:30]: queried", "stars: backward"]
    assert set(LINEAGE_COLORS) == {"brush", "backward", "forward"}
    with pytest.raises(sz.LineageError, match="role 'sideways'"):
        plot_panels(tmp_path / "q.png", [Panel("a", np.zeros((4, 4)), np.ones((4, 4), bool), role="sideways")])


def test_wide_arrays_are_stacked_at_a_size_that_reads(tmp_path):
    """Whole wide exposures (4 times wider than high) stack in one column, 6 to 12 inches wide,
    not three 13-inch strips side by side."""
    image = np.random.default_rng(2).normal(0, 1, (100, 400))
    mask = np.zeros(image.shape, bool)
    mask[::7, ::5] = True  # cells spread over the whole array
    out = plot_panels(tmp_path / "w.png", [Panel(t, image, mask, role="forward") for t in ("a", "b", "c")], dpi=50)
    height, width = png(out).shape[:2]
    assert 300 <= width <= 700 and height > width / 2

"""Seeing a lineage answer: masks (``.npy``, FITS), DS9 region files, and pictures.

Coordinates inside subzero are numpy's: ``(row, col)``, 0-based. FITS and DS9 count
``(x, y)`` from 1, x along columns: `to_fits_coords` and `from_fits_coords` convert
(for any rank: FITS axes are numpy's reversed).

Every writer checks its arguments before it writes and writes through a temporary file
renamed into place, so a failure leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from subzero.errors import LineageError

if TYPE_CHECKING:
    from astropy.io.fits import Header

__all__ = ["to_fits_coords", "from_fits_coords", "mask_boxes", "check_output", "write_mask", "write_fits_mask",
           "write_regions", "Panel", "plot_panels", "MASK_SUFFIXES", "PLOT_SUFFIXES", "REGION_SUFFIXES"]

MASK_SUFFIXES = (".npy", ".fits", ".fit", ".fts")
PLOT_SUFFIXES = (".png", ".pdf", ".svg")
REGION_SUFFIXES = (".reg",)


# -- coordinates -----------------------------------------------------------------------------

def to_fits_coords(coords: np.ndarray) -> np.ndarray:
    """numpy ``(row, col)`` 0-based -> FITS/DS9 ``(x, y)`` 1-based (axes reversed, plus one).

    Examples
    --------
    >>> to_fits_coords(np.array([[2, 5]])).tolist()
    [[6, 3]]
    """
    coords = np.asarray(coords, dtype=np.int64)
    return coords[:, ::-1] + 1 if coords.ndim == 2 else coords


def from_fits_coords(coords: np.ndarray) -> np.ndarray:
    """FITS/DS9 ``(x, y)`` 1-based -> numpy ``(row, col)`` 0-based; the inverse of `to_fits_coords`.

    Examples
    --------
    >>> from_fits_coords(np.array([[6, 3]])).tolist()
    [[2, 5]]
    """
    coords = np.asarray(coords, dtype=np.int64)
    return coords[:, ::-1] - 1 if coords.ndim == 2 else coords


def mask_boxes(mask: np.ndarray) -> list[tuple[int, int, int, int]]:
    """Cover a 2-D mask exactly with disjoint half-open boxes ``(row0, row1, col0, col1)``:
    runs of cells along each row, merged with identical runs in the rows below.

    Examples
    --------
    >>> mask_boxes(np.array([[1, 1, 0], [1, 1, 0], [0, 0, 1]], bool))
    [(0, 2, 0, 2), (2, 3, 2, 3)]
    """
    mask = np.asarray(mask, dtype=bool)
    if mask.ndim != 2:
        raise LineageError(f"boxes need a 2-D mask, got shape {mask.shape}")
    edges = np.diff(np.pad(mask, ((0, 0), (1, 1))).astype(np.int8), axis=1)
    starts, ends = np.argwhere(edges == 1), np.argwhere(edges == -1)  # both in row-major order
    open_boxes: dict[tuple[int, int], list[int]] = {}
    boxes: list[tuple[int, int, int, int]] = []
    for (row, c0), (_, c1) in zip(starts.tolist(), ends.tolist()):
        box = open_boxes.get((c0, c1))
        if box is not None and box[1] == row:
            box[1] = row + 1
            continue
        if box is not None:
            boxes.append(tuple(box))  # type: ignore[arg-type]
        open_boxes[(c0, c1)] = [row, row + 1, c0, c1]
    boxes.extend(tuple(b) for b in open_boxes.values())  # type: ignore[misc]
    return sorted(boxes)


# -- writing files ---------------------------------------------------------------------------

def check_output(path: str | os.PathLike, suffixes: Sequence[str], flag: str) -> Path:
    """A writable output path with one of ``suffixes``, else a `LineageError` naming ``flag``.

    Examples
    --------
    >>> check_output("traced.npy", MASK_SUFFIXES, "--mask").name
    'traced.npy'
    """
    p = Path(path)
    if p.suffix.lower() not in suffixes:
        raise LineageError(f"{flag} {str(path)!r}: give a file ending in {', '.join(suffixes)}")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise LineageError(f"{flag} {str(path)!r}: directory {str(parent)!r} does not exist; create it first")
    if p.is_dir():
        raise LineageError(f"{flag} {str(path)!r} is a directory; give a file name")
    return p


@contextlib.contextmanager
def _atomic(path: Path) -> Iterator[Path]:
    """A temporary path next to ``path``, renamed onto it if the block succeeds."""
    fd, tmp = tempfile.mkstemp(dir=path.parent if str(path.parent) else ".", prefix=f".{path.name}.",
                               suffix=path.suffix)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_mask(path: str | os.PathLike, mask: np.ndarray, header: "Header | None" = None,
               history: str | None = None) -> Path:
    """Write a boolean mask: ``.npy`` (bool) or FITS (uint8 0/1, see `write_fits_mask`)."""
    p = check_output(path, MASK_SUFFIXES, "--mask")
    if p.suffix.lower() == ".npy":
        with _atomic(p) as tmp:
            np.save(tmp, np.asarray(mask, dtype=bool))
        return p
    return write_fits_mask(p, mask, header, history)


# keywords that describe the data layout of the image the header came from
_STRUCTURAL = ("SIMPLE", "XTENSION", "BITPIX", "EXTEND", "PCOUNT", "GCOUNT", "BSCALE", "BZERO", "BLANK",
               "BUNIT", "CHECKSUM", "DATASUM", "DATAMIN", "DATAMAX", "ZIMAGE", "ZBITPIX", "ZCMPTYPE")


def write_fits_mask(path: str | os.PathLike, mask: np.ndarray, header: "Header | None" = None,
                    history: str | None = None) -> Path:
    """Write a boolean mask as a FITS image (uint8: 1 = traced cell), keeping ``header``.

    Parameters
    ----------
    path
        The ``.fits`` file to write (replaced if it exists).
    mask
        Boolean array, numpy axis order (FITS NAXIS1 is its last axis).
    header
        The header of the image the mask lies on (e.g. the input's, with its WCS): its
        cards are copied, except those describing the original data layout.
    history
        A HISTORY card to add, e.g. the query that made the mask.

    Examples
    --------
    >>> import tempfile, os
    >>> from astropy.io import fits
    >>> path = os.path.join(tempfile.mkdtemp(), "m.fits")
    >>> _ = write_fits_mask(path, np.eye(2, dtype=bool), fits.Header({"OBJECT": "M31"}))
    >>> fits.getdata(path).tolist(), fits.getheader(path)["OBJECT"]
    ([[1, 0], [0, 1]], 'M31')
    """
    from astropy.io import fits

    p = Path(path)
    data = np.asarray(mask, dtype=bool).astype(np.uint8)
    out = fits.Header()
    if header is not None:
        for card in header.cards:
            key = card.keyword
            if key in _STRUCTURAL or key.startswith("NAXIS") or key.startswith("TFORM") or key == "":
                continue
            if key in ("HISTORY", "COMMENT"):
                out.add_history(str(card.value)) if key == "HISTORY" else out.add_comment(str(card.value))
                continue
            with contextlib.suppress(ValueError, KeyError):
                out.append(card, end=True)
    if history:
        out.add_history(history)
    hdu = fits.PrimaryHDU(data, header=out)
    with _atomic(p) as tmp:
        hdu.writeto(tmp, overwrite=True, output_verify="silentfix")
    return p


def write_regions(path: str | os.PathLike, mask: np.ndarray, color: str = "red", text: str | None = None,
                  wcs: Any = None) -> Path:
    """Write the cells of a 2-D mask as a DS9 region file in image coordinates, or in fk5
    (degrees) through ``wcs`` (an astropy celestial WCS of the mask's pixel grid).

    Cells merge into rectangles (`mask_boxes`), so a star is a handful of boxes, not one
    region per pixel; DS9 places pixel ``(row, col)`` at ``x = col + 1, y = row + 1``.

    Examples
    --------
    >>> import tempfile, os
    >>> from regions import Regions
    >>> path = os.path.join(tempfile.mkdtemp(), "r.reg")
    >>> _ = write_regions(path, np.array([[0, 1], [0, 1]], bool))
    >>> (r,) = Regions.read(path, format="ds9"); (r.center.x, r.center.y, r.width, r.height)
    (1.0, 0.5, 1.0, 2.0)
    """
    from regions import PixCoord, RectanglePixelRegion, Regions

    p = check_output(path, REGION_SUFFIXES, "--regions")
    mask = np.asarray(mask, dtype=bool)
    if mask.ndim != 2:
        raise LineageError(f"--regions: DS9 regions are for 2-D images; this array has shape {mask.shape}")
    shapes = []
    for i, (r0, r1, c0, c1) in enumerate(mask_boxes(mask)):
        meta = {"text": text} if text and i == 0 else {}
        region = RectanglePixelRegion(PixCoord(x=(c0 + c1 - 1) / 2, y=(r0 + r1 - 1) / 2), width=c1 - c0,
                                      height=r1 - r0, meta=meta, visual={"color": color})
        if wcs is not None:  # fk5: DS9's default sky frame; the rectangle keeps its pixel extent
            region = region.to_sky(wcs)
            region.center = region.center.transform_to("fk5")
        shapes.append(region)
    text = Regions(shapes).serialize(format="ds9")
    if wcs is not None:  # astropy-regions names FK5 J2000 "j2000"; DS9 and the world call it fk5
        text = text.replace("\nj2000\n", "\nfk5\n", 1)
    with _atomic(p) as tmp:
        tmp.write_text(text)
    return p


# -- pictures --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Panel:
    """One picture: a 2-D array, the cells to show over it, and a title."""

    title: str
    image: Any
    mask: np.ndarray


def _norm(image: np.ndarray):
    """A display normalisation: DS9's zscale for images, min..max for labels and flags."""
    from matplotlib.colors import Normalize

    finite = image[np.isfinite(image)] if image.dtype.kind == "f" else image.reshape(-1)
    if finite.size == 0:
        return Normalize(0, 1)
    lo, hi = float(finite.min()), float(finite.max())
    discrete = image.dtype.kind in "biu" and np.unique(finite[: 1 << 16]).size <= 16
    if not discrete and finite.size > 16:
        try:
            from astropy.visualization import AsinhStretch, ImageNormalize, ZScaleInterval

            zlo, zhi = ZScaleInterval().get_limits(finite)
            if zhi > zlo:
                return ImageNormalize(vmin=zlo, vmax=zhi, stretch=AsinhStretch(0.5), clip=True)
        except ImportError:  # pragma: no cover - astropy is a dependency
            zlo, zhi = np.percentile(finite, [1, 99.5])
            if zhi > zlo:
                return Normalize(float(zlo), float(zhi), clip=True)
    return Normalize(lo, hi if hi > lo else lo + 1)


def plot_panels(path: str | os.PathLike, panels: Sequence[Panel], origin: str = "upper", color: str = "red",
                max_inches: tuple[float, float] = (16.0, 9.0), dpi: int = 100) -> Path:
    """Draw each panel's image with its cells as a translucent overlay and an outline,
    side by side, and save the figure (PNG, PDF or SVG by the suffix).

    The figure is the panels and nothing else (titles sit inside them), so a single
    panel's picture has the array's aspect: ``width / height == cols / rows``.

    Parameters
    ----------
    panels
        2-D panels, left to right (e.g. the query's cells, then the traced cells).
    origin
        ``"upper"``: row 0 at the top (numpy); ``"lower"``: y up, as DS9 shows FITS images.
    """
    from matplotlib.colors import to_rgba
    from matplotlib.figure import Figure  # no pyplot: no global backend, no GUI, nothing to close

    p = check_output(path, PLOT_SUFFIXES, "--plot")
    if not panels:
        raise LineageError("--plot: nothing to draw")
    for panel in panels:
        if np.ndim(panel.image) != 2:
            raise LineageError(f"--plot: {panel.title!r} has shape {np.shape(panel.image)}; only 2-D arrays are drawn")
    rows = max(np.shape(pl.image)[0] for pl in panels)
    gap = max(1, round(0.02 * max(np.shape(pl.image)[1] for pl in panels)))  # in cells
    cols = sum(np.shape(pl.image)[1] for pl in panels) + gap * (len(panels) - 1)
    scale = min(max_inches[0] / cols, max_inches[1] / rows, 0.5)  # inches per cell
    if scale * max(rows, cols) < 3.0:  # tiny arrays: at least 3 inches on the long side
        scale = 3.0 / max(rows, cols)
    fig = Figure(figsize=(cols * scale, rows * scale), dpi=dpi)
    x = 0
    rgba = to_rgba(color)
    for panel in panels:
        image = np.asarray(panel.image)
        mask = np.asarray(panel.mask, dtype=bool)
        r, c = image.shape
        ax = fig.add_axes((x / cols, (rows - r) / rows if origin == "upper" else 0.0, c / cols, r / rows))
        x += c + gap
        ax.set_axis_off()
        shown = image.astype(np.float32) if image.dtype.kind == "b" else image
        ax.imshow(shown, cmap="gray", norm=_norm(np.asarray(shown)), origin=origin,
                  interpolation="nearest", aspect="auto")
        overlay = np.zeros((r, c, 4), dtype=np.float32)
        overlay[mask] = (rgba[0], rgba[1], rgba[2], 0.45)
        ax.imshow(overlay, origin=origin, interpolation="nearest", aspect="auto")
        if mask.any() and not mask.all():
            ax.contour(mask.astype(np.float32), levels=[0.5], colors=[color], linewidths=1.0)
            (r0, c0), (r1, c1) = np.argwhere(mask).min(axis=0), np.argwhere(mask).max(axis=0)
            if max(r1 - r0 + 1, c1 - c0 + 1) * scale * dpi < 16:  # too small to see: ring it
                ax.plot([(c0 + c1) / 2], [(r0 + r1) / 2], marker="o", markersize=16, markerfacecolor="none",
                        markeredgecolor=color, markeredgewidth=1.5)
        ax.set_xlim(-0.5, c - 0.5)
        ax.set_ylim((r - 0.5, -0.5) if origin == "upper" else (-0.5, r - 0.5))
        ax.text(0.01, 0.99, panel.title, transform=ax.transAxes, va="top", ha="left", fontsize=9,
                color="white", bbox={"facecolor": "black", "alpha": 0.6, "pad": 2, "edgecolor": "none"})
    with _atomic(p) as tmp:
        fig.savefig(tmp, dpi=dpi, format=p.suffix.lstrip(".").lower(), facecolor="white")
    return p

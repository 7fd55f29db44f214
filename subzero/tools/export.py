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
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from subzero.errors import LineageError

if TYPE_CHECKING:
    from astropy.io.fits import Header

__all__ = ["atomic_path", "current_umask", "LINEAGE_COLORS", "query_text", "to_fits_coords", "from_fits_coords", "mask_boxes", "check_output", "write_mask", "write_fits_mask",
           "write_regions", "Panel", "plot_panels", "panel_window", "window_mask", "display_of", "label_colors",
           "MASK_RGB", "NAN_RGB", "MASK_SUFFIXES", "PLOT_SUFFIXES", "REGION_SUFFIXES"]

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
    return _swap_axes(coords, 1)


def from_fits_coords(coords: np.ndarray) -> np.ndarray:
    """FITS/DS9 ``(x, y)`` 1-based -> numpy ``(row, col)`` 0-based; the inverse of `to_fits_coords`.

    Examples
    --------
    >>> from_fits_coords(np.array([[6, 3]])).tolist()
    [[2, 5]]
    """
    return _swap_axes(coords, -1)


def _swap_axes(coords: np.ndarray, shift: int) -> np.ndarray:
    """Rows of coordinates with their axes reversed and ``shift`` added (other arrays as they are)."""
    coords = np.asarray(coords, dtype=np.int64)
    return coords[:, ::-1] + shift if coords.ndim == 2 else coords


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


_umask_lock = threading.Lock()


def current_umask() -> int:
    """The process's file mode creation mask (read from ``/proc`` where it can be, as setting
    it to read it is not thread-safe; else set and restored under a lock)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _umask_lock:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path next to ``path``, renamed onto it if the block succeeds.

    The file gets the mode any new file of the user gets (``0o666`` less the umask), not the
    private ``0o600`` of the temporary file ``mkstemp`` makes.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent if str(path.parent) else ".", prefix=f".{path.name}.",
                               suffix=path.suffix)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_mask(path: str | os.PathLike, mask: np.ndarray, header: "Header | None" = None,
               history: str | None = None) -> Path:
    """Write a boolean mask: ``.npy`` (bool) or FITS (uint8 0/1, see `write_fits_mask`)."""
    p = check_output(path, MASK_SUFFIXES, "--mask")
    if p.suffix.lower() == ".npy":
        with atomic_path(p) as tmp:
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
    with atomic_path(p) as tmp:
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
    with atomic_path(p) as tmp:
        tmp.write_text(text)
    return p


# -- pictures --------------------------------------------------------------------------------

#: the colour of each kind of cells, in the CLI's pictures and the viewer's page alike (served
#: by ``GET /api/style``): the cells queried (brushed) white, backward lineage magenta, forward
#: lineage cyan. None of them is a label colour (`label_colors` are saturated, bright hues that
#: stay off pure magenta and cyan only by chance, so overlays are also outlined) nor grey.
LINEAGE_COLORS = {"brush": "#ffffff", "backward": "#ff00ff", "forward": "#00ffff"}


def query_text(cells: Any, fits: bool = False) -> str:
    """The cells of a query, briefly: ``[10:26, 30:46]`` (numpy's half-open rows, cols) when
    they fill their bounding box, else ``N cells in [..]``; FITS/DS9's 1-based inclusive
    ``[x0:x1,y0:y1]`` with ``fits``. ``cells`` is a mask or a `subzero.frontier.Frontier`.

    Examples
    --------
    >>> m = np.zeros((40, 60), bool); m[10:26, 30:46] = True
    >>> query_text(m), query_text(m, fits=True)
    ('[10:26, 30:46]', '[31:46,11:26]')
    >>> m[0, 0] = True; query_text(m)
    '257 cells in [0:26, 0:46]'
    """
    if hasattr(cells, "bbox"):
        box, count = cells.bbox(), int(cells.count)
    else:
        hit = np.argwhere(np.asarray(cells, dtype=bool))
        box, count = (None if not len(hit) else (hit.min(axis=0), hit.max(axis=0) + 1)), len(hit)
    if box is None:
        return "no cells"
    lo, hi = (np.asarray(b, np.int64).reshape(-1) for b in box)
    if fits:
        where = "[" + ",".join(f"{int(a) + 1}:{int(b)}" for a, b in zip(lo[::-1], hi[::-1])) + "]"
    else:
        where = "[" + ", ".join(f"{int(a)}:{int(b)}" for a, b in zip(lo, hi)) + "]"
    return where if count == int(np.prod(hi - lo)) else f"{count} cells in {where}"

@dataclass(frozen=True)
class Panel:
    """One picture: a 2-D array, the cells to show over it, and a title.

    ``image`` may be any 2-D array-like (a stored array reads only the window drawn);
    ``mask`` a boolean array of its shape or a `subzero.frontier.Frontier` over it; ``wcs``
    the celestial WCS of its pixel grid (sky axes); ``display`` ``"image"``, ``"labels"``,
    ``"mask"`` or ``"counts"`` (a sequential colormap from 0, with a colour bar; default:
    from the dtype: booleans are masks, integers labels).
    """

    title: str
    image: Any
    mask: Any
    wcs: Any = None
    display: str | None = None
    #: what the cells are: ``"brush"`` (the cells queried), ``"backward"`` or ``"forward"``
    #: (a lineage answer); their colour is `LINEAGE_COLORS`'s
    role: str = "brush"


def _bbox(cells: Any) -> tuple[int, int, int, int] | None:
    """``(r0, r1, c0, c1)`` of a mask or a Frontier's cells, or None when empty."""
    if hasattr(cells, "bbox"):
        box = cells.bbox()
        return None if box is None else (int(box[0][0]), int(box[1][0]), int(box[0][1]), int(box[1][1]))
    hit = np.argwhere(np.asarray(cells, dtype=bool))
    if not len(hit):
        return None
    (r0, c0), (r1, c1) = hit.min(axis=0), hit.max(axis=0) + 1
    return int(r0), int(r1), int(c0), int(c1)


def panel_window(shape: tuple[int, int], cells: Any, margin: float = 0.5, min_margin: int = 8,
                 whole: float = 0.5) -> tuple[int, int, int, int]:
    """The part of an array a picture shows: the cells' bounding box with a margin (half its
    size, at least ``min_margin`` cells) on every side, clipped to the array; the whole array
    when that window would cover more than ``whole`` of it, or there are no cells.

    Examples
    --------
    >>> mask = np.zeros((1000, 1000), bool); mask[500:504, 300:310] = True
    >>> panel_window(mask.shape, mask)
    (492, 512, 292, 318)
    >>> panel_window((40, 60), np.ones((40, 60), bool))
    (0, 40, 0, 60)
    """
    rows, cols = int(shape[0]), int(shape[1])
    box = _bbox(cells)
    if box is None:
        return 0, rows, 0, cols
    r0, r1, c0, c1 = box
    pad = max(min_margin, int(np.ceil(margin * max(r1 - r0, c1 - c0))))
    r0, r1, c0, c1 = max(0, r0 - pad), min(rows, r1 + pad), max(0, c0 - pad), min(cols, c1 + pad)
    if (r1 - r0) * (c1 - c0) > whole * rows * cols:
        return 0, rows, 0, cols
    return r0, r1, c0, c1


def window_mask(cells: Any, window: tuple[int, int, int, int]) -> np.ndarray:
    """The cells (a mask or a Frontier) inside ``window`` as a boolean mask of the window,
    without making a mask of the whole array for a Frontier."""
    r0, r1, c0, c1 = window
    if not hasattr(cells, "boxes"):
        return np.asarray(cells, dtype=bool)[r0:r1, c0:c1]
    out = np.zeros((r1 - r0, c1 - c0), bool)
    if cells.is_empty:
        return out
    inside = cells.within((r0, c0), (r1, c1))
    if inside.is_empty:
        return out
    lo, hi = inside.boxes()
    for (a, b), (c, d) in zip(lo.tolist(), hi.tolist()):
        out[max(a, r0) - r0:min(c, r1) - r0, max(b, c0) - c0:min(d, c1) - c0] = True
    return out


def display_of(image: np.ndarray, display: str | None = None) -> str:
    """``display``, or from the dtype: ``"mask"`` for booleans, ``"labels"`` for integers,
    else ``"image"``."""
    if display:
        return display
    kind = np.asarray(image).dtype.kind
    return "mask" if kind == "b" else ("labels" if kind in "iu" else "image")


NAN_RGB = (40, 40, 120)  # NaN pixels: dark blue, unlike any grey
MASK_RGB = ((24, 24, 24), (255, 176, 0))  # False, True (flags: amber)


def label_colors(labels: np.ndarray) -> np.ndarray:
    """A categorical colormap: label 0 black, every other label a bright colour of its own
    (hues spread by the golden ratio, so neighbouring labels differ), as ``uint8`` RGB.

    Examples
    --------
    >>> label_colors(np.array([0, 1, 2])).tolist()[0], len({tuple(c) for c in label_colors(np.arange(1, 9)).tolist()})
    ([0, 0, 0], 8)
    """
    from matplotlib.colors import hsv_to_rgb

    v = np.asarray(labels).astype(np.int64)
    hue = np.mod(v * 0.6180339887498949, 1.0)
    sat = 0.55 + 0.35 * np.mod(v * 0.37, 1.0)
    hsv = np.stack([hue, sat, np.full(v.shape, 0.95)], axis=-1)
    rgb = (hsv_to_rgb(hsv) * 255).astype(np.uint8)
    rgb[v == 0] = 0
    return rgb


def _norm(image: np.ndarray):
    """A display normalisation: DS9's zscale with an asinh stretch (min..max when zscale
    cannot tell, e.g. a constant image)."""
    from matplotlib.colors import Normalize

    finite = image[np.isfinite(image)] if image.dtype.kind == "f" else image.reshape(-1)
    if finite.size == 0:
        return Normalize(0, 1)
    lo, hi = float(finite.min()), float(finite.max())
    if finite.size > 16:
        from astropy.visualization import AsinhStretch, ImageNormalize, ZScaleInterval

        zlo, zhi = ZScaleInterval().get_limits(finite)
        if zhi > zlo:
            return ImageNormalize(vmin=zlo, vmax=zhi, stretch=AsinhStretch(0.5), clip=True)
    return Normalize(lo, hi if hi > lo else lo + 1)


def _rgb(image: np.ndarray, display: str) -> np.ndarray | None:
    """Labels in a categorical colormap, masks in two colours (``uint8`` RGB); None for images."""
    if display == "labels":
        return label_colors(image)
    if display == "mask":
        return np.asarray(MASK_RGB, np.uint8)[np.asarray(image, bool).astype(np.intp)]
    return None


def plot_panels(path: str | os.PathLike, panels: Sequence[Panel], origin: str = "upper",
                panel_inches: float = 4.5, dpi: int = 100) -> Path:
    """Draw each panel as a cutout around its cells, with axes, and save the figure (PNG, PDF
    or SVG by the suffix).

    Each panel shows `panel_window` of its array (the whole array when the cells span most
    of it): images with DS9's zscale and an asinh stretch and a colour bar, labels in a
    categorical colormap, masks in two colours, counts on a sequential scale with a colour
    bar; the cells as a translucent overlay with an outline (and a ring when they are too
    small to see) in their role's colour (`LINEAGE_COLORS`). Axes count the array's rows and
    columns (FITS/DS9 ``x``, ``y`` from 1 with ``origin="lower"``), or RA and Dec when the
    panel has a WCS; the title sits above the panel, never on the data.

    Panels sit side by side, ``panel_inches`` high; when one is more than twice as wide as
    high (a whole wide exposure) they are stacked in one column instead, 6 to 12 inches wide,
    so a figure stays a readable size whatever the arrays' shapes.

    Parameters
    ----------
    panels
        2-D panels, left to right or top to bottom (e.g. the query's cells, then the traced cells).
    origin
        ``"upper"``: row 0 at the top (numpy); ``"lower"``: y up and FITS coordinates, as
        DS9 shows FITS images.
    """
    from matplotlib.colors import to_rgba
    from matplotlib.figure import Figure  # no pyplot: no global backend, no GUI, nothing to close

    p = check_output(path, PLOT_SUFFIXES, "--plot")
    if not panels:
        raise LineageError("--plot: nothing to draw")
    for panel in panels:
        if len(np.shape(panel.image)) != 2:
            raise LineageError(f"--plot: {panel.title!r} has shape {np.shape(panel.image)}; only 2-D arrays are drawn")
        if panel.role not in LINEAGE_COLORS:
            raise LineageError(f"--plot: panel {panel.title!r} has role {panel.role!r}; give one of "
                               f"{', '.join(LINEAGE_COLORS)}")
    windows = [panel_window(np.shape(pl.image), pl.mask) for pl in panels]
    aspects = [(w[3] - w[2]) / (w[1] - w[0]) for w in windows]  # width / height of each cutout
    bar = 0.9  # inches beside a panel for its colour bar and labels
    if max(aspects) <= 2.0:
        height = panel_inches
        widths = [min(max(a * height, 1.6), 2 * height) for a in aspects]
        fig = Figure(figsize=(sum(widths) + (0.9 + bar) * len(panels), height + 1.0), dpi=dpi, layout="constrained")
        grid = fig.add_gridspec(1, len(panels), width_ratios=widths)
        cells = [grid[0, k] for k in range(len(panels))]
    else:
        width = min(max(max(aspects) * 2.5, 6.0), 12.0)
        heights = [min(max(width / a, 1.0), panel_inches) for a in aspects]
        fig = Figure(figsize=(width + 0.9 + bar, sum(heights) + 0.9 * len(panels)), dpi=dpi, layout="constrained")
        grid = fig.add_gridspec(len(panels), 1, height_ratios=heights)
        cells = [grid[k, 0] for k in range(len(panels))]
    fits = origin == "lower"
    for k, (panel, (r0, r1, c0, c1)) in enumerate(zip(panels, windows)):
        color = LINEAGE_COLORS[panel.role]
        rgba = to_rgba(color)
        image = np.asarray(panel.image[r0:r1, c0:c1])
        mask = window_mask(panel.mask, (r0, r1, c0, c1))
        display = display_of(image, panel.display)
        wcs = panel.wcs[r0:r1, c0:c1] if panel.wcs is not None else None
        ax = fig.add_subplot(cells[k], projection=wcs) if wcs is not None else fig.add_subplot(cells[k])
        ax.set_facecolor("#808080")
        base = 1.0 if fits else 0.0  # FITS pixels count from 1
        extent = None  # WCS axes draw in the cutout's own pixels, and with north up (origin lower)
        if wcs is None:
            x0, x1, y0, y1 = c0 - 0.5 + base, c1 - 0.5 + base, r0 - 0.5 + base, r1 - 0.5 + base
            extent = (x0, x1, y0, y1) if origin == "lower" else (x0, x1, y1, y0)
        shown_origin = "lower" if wcs is not None else origin
        shown = _rgb(image, display)
        if shown is not None:
            ax.imshow(shown, origin=shown_origin, interpolation="nearest", extent=extent, aspect="equal")
        elif display == "counts":
            from matplotlib.colors import Normalize

            drawn = ax.imshow(image, cmap="magma", norm=Normalize(0, max(int(image.max(initial=0)), 1)),
                              origin=shown_origin, interpolation="nearest", extent=extent, aspect="equal")
            fig.colorbar(drawn, ax=ax, shrink=0.9, label="count")
        else:
            values = image.astype(np.float32) if image.dtype.kind == "b" else image
            drawn = ax.imshow(values, cmap="gray", norm=_norm(np.asarray(values)), origin=shown_origin,
                              interpolation="nearest", extent=extent, aspect="equal")
            fig.colorbar(drawn, ax=ax, shrink=0.9, label="value (zscale, asinh)")
        overlay = np.zeros(mask.shape + (4,), dtype=np.float32)
        overlay[mask] = (rgba[0], rgba[1], rgba[2], 0.45)
        ax.imshow(overlay, origin=shown_origin, interpolation="nearest", extent=extent, aspect="equal")
        if mask.any() and not mask.all():
            xs = np.arange(c0, c1) + (base if extent is not None else -c0)
            ys = np.arange(r0, r1) + (base if extent is not None else -r0)
            ax.contour(xs, ys, mask.astype(np.float32), levels=[0.5], colors=[color], linewidths=1.0)
            (a0, b0), (a1, b1) = np.argwhere(mask).min(axis=0), np.argwhere(mask).max(axis=0)
            if max(a1 - a0 + 1, b1 - b0 + 1) < 0.02 * max(mask.shape):  # too small to see: ring it
                ax.plot([xs[(b0 + b1) // 2]], [ys[(a0 + a1) // 2]], marker="o", markersize=16,
                        markerfacecolor="none", markeredgecolor=color, markeredgewidth=1.5)
        if wcs is not None:
            coords = getattr(ax, "coords")  # a WCSAxes (astropy.visualization.wcsaxes)
            coords[0].set_axislabel("RA")
            coords[1].set_axislabel("Dec")
        else:
            ax.set_xlabel("x (FITS)" if fits else "column")
            ax.set_ylabel("y (FITS)" if fits else "row")
        ax.tick_params(labelsize=8)
        ax.set_title(panel.title, fontsize=9, color="black")
    with atomic_path(p) as tmp:
        fig.savefig(tmp, dpi=dpi, format=p.suffix.lstrip(".").lower(), facecolor="white", bbox_inches="tight",
                    pad_inches=0.1)
    return p

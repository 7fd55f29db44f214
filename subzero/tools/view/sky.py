"""Sky coordinates of pixels: the celestial WCS of a FITS input, and the nodes that keep its
pixel grid.

A FITS input's header is kept in its catalog record (``metadata["fits_header"]``, written by
``subzero run --input NAME=FILE.fits``). A node of the same shape as such an input, reached
from it only through operators whose tiles keep cells in place (elementwise operators and
stencils: tilings `Elementwise` and `Halo`), lies on the same grid and takes its WCS. A
transpose, a flip, a crop or a resampling does not.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from subzero.errors import LineageError

if TYPE_CHECKING:
    from astropy.wcs import WCS

    from subzero.run import Run

__all__ = ["input_wcs", "node_wcs", "pixel_to_sky", "sky_to_pixel", "parse_sky"]


def input_wcs(run: "Run", name: str) -> "WCS | None":
    """The celestial WCS of the FITS header stored with node ``name`` (an input), or None."""
    record = run.catalog.nodes.get(name)
    text = record.metadata.get("fits_header") if record is not None else None
    if not text:
        return None
    from astropy.wcs import WCS, FITSFixedWarning

    from subzero.input_files import header_from_text

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FITSFixedWarning)
        try:
            wcs = WCS(header_from_text(text))
        except Exception:  # a header astropy cannot make a WCS of: no sky coordinates  # noqa: BLE001
            return None
    if not wcs.has_celestial or wcs.celestial.naxis != 2:
        return None
    return wcs.celestial


def _keeps_grid(node) -> bool:
    from subzero.tiling import Elementwise, Halo

    return isinstance(node.operator.effective_tiling(), (Elementwise, Halo))


def node_wcs(run: "Run") -> dict[str, "WCS"]:
    """Node name -> the WCS of its pixel grid, for FITS inputs with a celestial WCS and the
    nodes that keep their grid (same shape, reached only through `Elementwise`/`Halo` operators)."""
    out: dict[str, WCS] = {}
    for node in run.workflow.nodes:
        if node.name not in run.catalog.nodes:
            continue
        if node.is_input:
            wcs = input_wcs(run, node.name)
            if wcs is not None and len(run.shape(node.name)) == 2:
                out[node.name] = wcs
            continue
        shape = run.shape(node.name)
        parents = [p for p in node.inputs if p.name in out and run.shape(p.name) == shape]
        if parents and _keeps_grid(node):
            out[node.name] = out[parents[0].name]
    return out


def pixel_to_sky(wcs: "WCS", row: float, col: float) -> tuple[float, float]:
    """numpy ``(row, col)`` (0-based, cell centres) -> ``(ra, dec)`` in degrees (ICRS)."""
    from astropy.coordinates import ICRS

    sky = wcs.pixel_to_world(col, row)
    sky = sky.transform_to(ICRS())
    return float(sky.ra.deg), float(sky.dec.deg)


def parse_sky(text: str) -> Any:
    """``"RA DEC"`` in degrees (``"150.1 2.2"``) or sexagesimal (``"10:00:24 +02:12:00"``,
    ``"10h00m24s +2d12m"``), ICRS/fk5, as an astropy ``SkyCoord``.

    Raises
    ------
    LineageError
        Not two coordinates astropy can read.
    """
    from astropy import units as u
    from astropy.coordinates import SkyCoord

    parts = str(text).replace(",", " ").split()
    if len(parts) != 2:
        raise LineageError(f"--sky {text!r}: give 'RA DEC', in degrees ('150.1 2.2') or sexagesimal "
                           "('10:00:24.5 +02:12:00')")
    sexagesimal = any(ch in text for ch in ":hdms")
    try:
        if sexagesimal:
            return SkyCoord(parts[0], parts[1], unit=(u.hourangle, u.deg), frame="icrs")
        return SkyCoord(float(parts[0]), float(parts[1]), unit=u.deg, frame="icrs")
    except (ValueError, TypeError) as exc:
        raise LineageError(f"--sky {text!r}: not a sky position ({exc}); give 'RA DEC' in degrees or "
                           "sexagesimal") from None


def sky_to_pixel(wcs: "WCS", coord: Any, shape: tuple[int, ...]) -> tuple[int, int]:
    """The cell ``(row, col)`` holding sky position ``coord`` (a ``SkyCoord``).

    Raises
    ------
    LineageError
        The position falls outside the array.
    """
    x, y = (float(v) for v in wcs.world_to_pixel(coord))
    if not (np.isfinite(x) and np.isfinite(y)):
        raise LineageError(f"sky position {coord.to_string('hmsdms')} does not project onto this image (it is on the "
                           "far side of the sky from it)")
    row, col = int(np.floor(y + 0.5)), int(np.floor(x + 0.5))
    if not (0 <= row < shape[0] and 0 <= col < shape[1]):
        raise LineageError(f"sky position {coord.to_string('hmsdms')} is at pixel (row {row}, col {col}), outside "
                           f"the array of shape {tuple(shape)}")
    return row, col

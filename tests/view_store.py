"""A small stored run for the viewer's tests: two inputs, a stencil, a threshold, a labelling,
a sum of two branches and a transpose; one store per strategy (local executor)."""

from __future__ import annotations

import numpy as np

import subzero as sz
from subzero import operators as ops

STRATEGIES = ("Map", "BlackBox", "FullOne", "FullOne/forward", "FullMany", "FullMany/forward", "FullRange", "PayOne",
              "PayMany", "CompOne", "CompMany")
SHAPE = (24, 20)


def build() -> sz.Workflow:
    wf = sz.Workflow("viewtest")
    x, y = wf.input("x"), wf.input("y")
    blur = wf.add(ops.GaussianFilter(1.0, truncate=2.0), x, name="blur")
    bright = wf.add(ops.Threshold(0.55), blur, name="bright")
    wf.add(ops.Label(), bright, name="stars")
    wf.add(ops.Add(), blur, y, name="mixed")
    wf.add(ops.Transpose(), y, name="flipped")
    return wf


def inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {"x": rng.random(SHAPE).astype(np.float32), "y": rng.random(SHAPE).astype(np.float32)}


def pins(wf: sz.Workflow, strategy: str) -> dict[str, list[str]]:
    """Every operator node that can store ``strategy`` pinned to it (BlackBox: every node)."""
    from subzero.modes import Strategy

    mode = Strategy.parse(strategy).mode
    out = {}
    for node in wf.nodes:
        if node.is_input:
            continue
        if strategy == "BlackBox" or mode in node.operator.supported_modes() or (
                strategy.startswith("Full") and sz.Mode.MAP in node.operator.supported_modes()):
            out[node.name] = [strategy]
    return out


def make_run(path, strategy: str = "Map", metadata: dict | None = None):
    wf = build()
    return wf.run(inputs(), store=str(path), executor="local", tile_shape=8, strategies=pins(wf, strategy),
                  input_metadata=metadata)


#: the astronomy store's image shape (both axes multiples of 16) and the WCS of its inputs
ASTRO_SHAPE = (96, 192)


def astro_wcs():
    """A TAN projection, 0.72 arcsec pixels, north up and east left, centred on the image."""
    from astropy.wcs import WCS

    w = WCS(naxis=2)
    w.wcs.ctype = ["RA---TAN", "DEC--TAN"]
    w.wcs.crval = [150.1, 2.2]
    w.wcs.crpix = [ASTRO_SHAPE[1] / 2 + 0.5, ASTRO_SHAPE[0] / 2 + 0.5]
    w.wcs.cdelt = [-0.0002, 0.0002]
    return w


def make_astro_run(path):
    """The astronomy workflow (`subzero.workflows.astronomy`) on small images whose inputs carry
    a FITS header with `astro_wcs`, stored with the planner's strategies (local executor)."""
    from subzero.input_files import header_to_text
    from subzero.workflows.astronomy import build as build_astronomy

    wf, data = build_astronomy(shape=ASTRO_SHAPE)
    header = header_to_text(astro_wcs().to_header())
    return wf.run(data, store=str(path), executor="local", tile_shape=48,
                  input_metadata={name: {"fits_header": header} for name in data})

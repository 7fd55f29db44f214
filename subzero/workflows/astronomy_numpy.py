"""The astronomy benchmark workflow (`subzero.workflows.astronomy`) as a scientist writes
it: plain numpy and ``subzero.ndimage``, traced by ``@sz.workflow``.

The calibration, background and merge steps are numpy expressions; the four library
steps (L.A.Cosmic through astroscrappy, the repair, sep's detection) are operator
classes called with ``sz.apply``, as any operator class can be from numpy code.  Nodes
the queries name are named with ``sz.name`` after the hand-built DAG's nodes, so every
query of the astronomy benchmark runs on both; the traced workflow answers each with the
same cells (``tests/test_astronomy_numpy.py``).

Two steps are written the numpy way and so differ in form from the DAG: the flat's
global mean is ``np.mean`` (a whole-array statistic, all-to-all like the DAG's one
block mean) and the background mesh is ``reshape`` + ``mean`` and ``np.repeat`` (the DAG's
``Downsample``/``Upsample`` by 16, the same blocks).

Examples
--------
>>> wf, inputs = build(shape=(32, 64))
>>> [n.name for n in wf.nodes][:4]
['flat', 'exposure_1', 'exposure_2', 'astype']
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import subzero as sz
from subzero.trace import workflow as traced_workflow
from subzero import ndimage as szi
from subzero.errors import WorkflowError
from subzero.workflows.astronomy import (BIAS, MESH, QUICK_SHAPE, SHAPE, UDFS, DetectStars, RepairCosmics,
                                         cosmic_rays_udf, exposures, noise_sigma)
from subzero.dag import Workflow

__all__ = ["astronomy", "build", "UDFS"]


def _background(elec, mesh_name: str, back_name: str):
    """The sky background: the mean of each MESH x MESH block, repeated over the block."""
    rows, cols = elec.shape
    blocks = elec.reshape(rows // MESH, MESH, cols // MESH, MESH)
    mesh = sz.name(blocks.mean(axis=(1, 3)), mesh_name)
    return sz.name(np.repeat(np.repeat(mesh, MESH, axis=0), MESH, axis=1), back_name)


@traced_workflow
def astronomy(flat: np.ndarray, exposure_1: np.ndarray, exposure_2: np.ndarray) -> dict[str, Any]:
    """Two exposures calibrated, cleaned of background and cosmic rays, merged, repaired,
    smoothed and searched for stars (SubZero Fig. 1)."""
    sigma = noise_sigma()
    flat_norm = sz.name(flat / np.mean(flat.astype(np.float64)), "flat_norm")
    weighted, good = [], []
    for k, raw in ((1, exposure_1), (2, exposure_2)):
        elec = sz.name((raw - BIAS) / flat_norm, f"elec_{k}")
        crmask = sz.apply(cosmic_rays_udf(), elec, name=f"crmask_{k}")          # UDF A / B
        good_k = sz.name(1.0 - crmask, f"good_{k}")
        sub = sz.name(elec - _background(elec, f"mesh_{k}", f"back_{k}"), f"sub_{k}")
        weighted.append(sz.name(sub * good_k, f"wsub_{k}"))
        good.append(good_k)
    cover = sz.name(good[0] + good[1], "cover")
    merged = sz.name((weighted[0] + weighted[1]) / np.clip(cover, 1.0, None), "merged")
    clean = sz.apply(RepairCosmics(sigma), merged, cover, name="clean")        # UDF C
    smooth = sz.name(szi.gaussian_filter(clean, 1.0, truncate=2.0), "smooth")
    psf_noise = sigma / math.sqrt(4 * math.pi)  # noise of a unit-sum Gaussian (sigma 1) smoothing
    snr = sz.name(smooth * (1.0 / psf_noise), "snr")
    stars = sz.apply(DetectStars(threshold=5.0, minarea=5), snr, dtype=np.int64)  # UDF D
    return {"stars": stars}


def build(quick: bool = False, shape: tuple[int, int] | None = None) -> tuple[Workflow, dict[str, np.ndarray]]:
    """The traced workflow and its inputs, as `subzero.workflows.astronomy.build` gives the DAG's."""
    size = tuple(shape or (QUICK_SHAPE if quick else SHAPE))
    if len(size) != 2 or size[0] % MESH or size[1] % MESH:
        raise WorkflowError(f"astronomy image shape must be 2-D with both axes multiples of {MESH}, got {size}")
    inputs = exposures((size[0], size[1]))
    return astronomy.trace(inputs), inputs

"""A small image workflow: two noisy exposures, cosmic-ray flags, a merge, a blur, column totals."""

from __future__ import annotations

import numpy as np

from subzero import operators as ops
from subzero.dag import Workflow

__all__ = ["build"]


def build(quick: bool = False) -> tuple[Workflow, dict[str, np.ndarray]]:
    """The demo workflow and its inputs (deterministic, generated)."""
    rows, cols = (48, 64) if quick else (256, 384)
    rng = np.random.default_rng(7)
    yy, xx = np.mgrid[0:rows, 0:cols]
    sky = 100 + 400 * np.exp(-((yy - rows / 3) ** 2 + (xx - cols / 2) ** 2) / 60.0)
    first = sky + rng.normal(0, 5, sky.shape)
    second = sky + rng.normal(0, 5, sky.shape)
    for image in (first, second):
        hits = rng.integers(0, [rows, cols], size=(max(rows * cols // 2000, 3), 2))
        image[hits[:, 0], hits[:, 1]] += 900.0

    wf = Workflow("demo")
    a = wf.input("exposure_a")
    b = wf.input("exposure_b")
    flags_a = wf.add(ops.CosmicRayDetect(threshold=200.0, radius=2), a, name="crd_a")
    flags_b = wf.add(ops.CosmicRayDetect(threshold=200.0, radius=2), b, name="crd_b")
    merged = wf.add(ops.Add(), a, b, name="merge")
    blurred = wf.add(ops.Convolve(np.full((3, 3), 1 / 9.0), mode="reflect"), merged, name="blur")
    flags = wf.add(ops.Add(), flags_a, flags_b, name="flags")
    hits = wf.add(ops.Multiply(), blurred, flags, name="hits")
    by_column = wf.add(ops.Transpose(), hits, name="by_column")
    wf.add(ops.Sum(axis=1), by_column, name="column_total")
    return wf, {"exposure_a": first, "exposure_b": second}

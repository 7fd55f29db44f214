"""What the viewer's page reads besides tiles: tile values for its own colour mapping, display
limits, line plots of 1-D nodes, scalars, the compass of a WCS, and statistics and histograms
of brushed and lineage cells, each computed from the store with numpy (no loop per cell).

>>> cell_stats(np.array([1.0, 2.0, 4.0, np.nan]), bins=3)["median"]   # NaN counted, not used
2.0
"""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from subzero.errors import LineageError
from subzero.tools.view.lineage import LineageRequest, answer_frontiers

if TYPE_CHECKING:
    from astropy.wcs import WCS

    from subzero.run import Run
    from subzero.tools.view.tiles import TilePyramid

__all__ = ["LIMIT_MODES", "HIST_BINS", "LINE_POINTS", "STATS_DIGITS", "tile_values", "limits", "line",
           "compass", "cell_stats", "request_stats", "object_boxes"]

#: display limits the page offers: DS9's zscale, the extremes, or symmetric percentiles
LIMIT_MODES = ("zscale", "minmax", "99.5", "99", "95", "90")
#: histogram bins of a statistics answer
HIST_BINS = 40
#: the most points a line plot of a 1-D node has (longer lines give min and max per bin)
LINE_POINTS = 2000
#: significant digits of the statistics
STATS_DIGITS = 6


def _round(value: float, digits: int = STATS_DIGITS) -> float | None:
    return float(f"{value:.{digits}g}") if math.isfinite(value) else None


def tile_values(pyramid: "TilePyramid", z: int, ty: int, tx: int) -> tuple[bytes, tuple[int, int], str]:
    """Tile ``(z, ty, tx)``'s values (level ``z`` of `subzero.tools.view.tiles`) as little-endian
    bytes, row-major, their shape and their type: ``"float32"`` for images, ``"int32"`` for
    labels and masks whose values fit (labels stay exact), ``"float32"`` otherwise. The page
    maps them to colours itself."""
    raw = pyramid.values(z, ty, tx)
    exact = pyramid.display != "image" and (not raw.size or (int(raw.min()) >= -2**31 and int(raw.max()) < 2**31))
    values = np.ascontiguousarray(raw, dtype="<i4" if exact else "<f4")
    return values.tobytes(), (int(values.shape[0]), int(values.shape[1])), "int32" if exact else "float32"


def _sample(pyramid: "TilePyramid") -> np.ndarray:
    """The finite values of up to nine level-0 tiles spread over the array (zscale's sample)."""
    gy, gx = pyramid.grid(0)
    ys = sorted({int(round(v)) for v in np.linspace(0, gy - 1, min(3, gy))})
    xs = sorted({int(round(v)) for v in np.linspace(0, gx - 1, min(3, gx))})
    sample = np.concatenate([pyramid.values(0, y, x).reshape(-1) for y in ys for x in xs]).astype(np.float64)
    return sample[np.isfinite(sample)]


def limits(pyramid: "TilePyramid", mode: str) -> dict[str, Any]:
    """Display limits ``{"lo", "hi", "mode"}`` of a 2-D node: ``zscale`` (the tiles'
    limits), ``minmax`` or a symmetric percentile (``"99.5"`` keeps the middle 99.5 %), from
    the values of up to nine full-resolution tiles spread over the array.

    Raises
    ------
    LineageError
        ``mode`` is not one of `LIMIT_MODES`.
    """
    if mode not in LIMIT_MODES:
        raise LineageError(f"limits {mode!r}: give one of {', '.join(LIMIT_MODES)}")
    zs = pyramid.limits()
    if mode == "zscale" and zs is not None:
        lo, hi = zs
    else:
        sample = _sample(pyramid)
        if not sample.size:
            lo, hi = 0.0, 1.0
        elif mode in ("minmax", "zscale"):
            lo, hi = float(sample.min()), float(sample.max())
        else:
            cut = (100.0 - float(mode)) / 2
            lo, hi = (float(v) for v in np.percentile(sample, [cut, 100.0 - cut]))
    if not hi > lo:
        hi = lo + 1.0
    return {"lo": _round(lo, 7), "hi": _round(hi, 7), "mode": mode}


def line(run: "Run", name: str, points: int = LINE_POINTS) -> dict[str, Any]:
    """A node of one value as ``{"kind": "scalar", "value"}``; a 1-D node as ``{"kind":
    "line", "n", "x", "lo", "hi"}``: its values, or where it has more than ``points``, the
    minimum and maximum of each of ``points`` bins starting at index ``x``.

    Raises
    ------
    LineageError
        A node of two or more axes with more than one value (those have tiles).
    """
    shape = tuple(run.shape(name))
    size = int(np.prod(shape)) if shape else 1
    if size == 1:
        value = np.asarray(run.output(name)[...]).reshape(-1)[0].item()
        return {"kind": "scalar", "value": _round(value, 7) if isinstance(value, float) else value}
    if len(shape) != 1:
        raise LineageError(f"node {name!r} has shape {shape}: a line plot is for 1-D nodes and one-value nodes; "
                           "2-D nodes have tiles (/tiles/NODE/Z/TY/TX.png)")
    values = np.asarray(run.output(name)[:], np.float64)
    n = len(values)
    if n <= points:
        x = np.arange(n)
        lo = hi = values
    else:
        edges = np.linspace(0, n, points + 1).astype(np.int64)
        x = edges[:-1]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            lo, hi = np.fmin.reduceat(values, x), np.fmax.reduceat(values, x)
    rounded = [[_round(float(v), 7) for v in a] for a in (lo, hi)]
    return {"kind": "line", "n": n, "x": x.tolist(), "lo": rounded[0], "hi": rounded[1]}


def compass(wcs: "WCS", shape: tuple[int, ...]) -> dict[str, list[float]]:
    """Unit vectors ``[dcol, drow]`` (numpy axes) pointing north and east at the image's
    centre: where a small step in Dec and in RA lands on the pixel grid."""
    from astropy import units as u

    row, col = (shape[0] - 1) / 2, (shape[1] - 1) / 2
    centre = wcs.pixel_to_world(col, row)
    step = 10 * u.arcsec
    out = {}
    for key, offset in (("north", (0 * u.deg, step)), ("east", (step, 0 * u.deg))):
        moved = centre.spherical_offsets_by(*offset)
        x, y = (float(v) for v in wcs.world_to_pixel(moved))
        d = np.array([x - col, y - row])
        norm = float(np.hypot(*d)) or 1.0
        out[key] = [round(float(v) / norm, 6) for v in d]
    return out


def cell_stats(values: np.ndarray, bins: int = HIST_BINS) -> dict[str, Any]:
    """``count`` (cells), ``finite``, ``min``, ``max``, ``mean``, ``median``, ``std`` and a
    histogram ``{"edges", "counts"}`` of ``values`` (NaN and infinities counted, not used)."""
    v = np.asarray(values, np.float64).reshape(-1)
    finite = v[np.isfinite(v)]
    out: dict[str, Any] = {"count": int(v.size), "finite": int(finite.size)}
    if not finite.size:
        return {**out, "min": None, "max": None, "mean": None, "median": None, "std": None,
                "hist": {"edges": [], "counts": []}}
    lo, hi = float(finite.min()), float(finite.max())
    counts, edges = np.histogram(finite, bins=bins, range=(lo, hi if hi > lo else lo + 1.0))
    return {**out, "min": _round(lo), "max": _round(hi), "mean": _round(float(finite.mean())),
            "median": _round(float(np.median(finite))), "std": _round(float(finite.std())),
            "hist": {"edges": [_round(float(e)) for e in edges], "counts": counts.tolist()}}


def _values_in(run: "Run", name: str, mask: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The values of node ``name`` where ``mask`` (over the box ``lo:hi``) is set: one read of that box."""
    box = tuple(slice(int(a), int(b)) for a, b in zip(lo, hi))
    return np.asarray(run.output(name)[box])[mask]


def request_stats(run: "Run", request: LineageRequest) -> dict[str, Any]:
    """Statistics (`cell_stats`) of the brushed cells of ``request`` and of its lineage in each
    node of ``request.to``: ``{"brush": {...}, "answers": {NAME: {...}}}``. Each node is read
    once, over the bounding box of its cells."""
    lo, hi = request.lo.min(axis=0), request.hi.max(axis=0)
    mask = np.zeros(tuple(int(n) for n in hi - lo), bool)
    for a, b in zip(request.lo - lo, request.hi - lo):  # one slice per brushed box
        mask[tuple(slice(int(x), int(y)) for x, y in zip(a, b))] = True
    out: dict[str, Any] = {"brush": cell_stats(_values_in(run, request.node, mask, lo, hi)), "answers": {}}
    frontiers, _ = answer_frontiers(run, request)
    for name, frontier in frontiers.items():
        box = frontier.bbox()
        if box is None:
            out["answers"][name] = cell_stats(np.zeros(0))
            continue
        flo, fhi = (np.asarray(b, np.int64) for b in box)
        full = frontier.mask()
        sub = full[tuple(slice(int(a), int(b)) for a, b in zip(flo, fhi))] if full.ndim else full
        out["answers"][name] = cell_stats(_values_in(run, name, sub, flo, fhi) if full.ndim else
                                          np.asarray(run.output(name)[...]).reshape(-1))
    return out


def object_boxes(run: "Run", name: str, label: int, bbox: tuple[int, int, int, int] | None = None) -> dict[str, Any]:
    """The cells of a 2-D label array ``name`` equal to ``label`` (one object of a catalogue),
    within ``bbox`` ``(r0, r1, c0, c1)`` (half-open; default the whole array), as disjoint
    row-run boxes: ``{"label", "cells", "boxes": [[r, r + 1, c0, c1], ...]}``.

    Raises
    ------
    LineageError
        ``name`` is not 2-D, or ``bbox`` is empty or outside it.
    """
    shape = tuple(run.shape(name))
    if len(shape) != 2:
        raise LineageError(f"node {name!r} has shape {shape}: catalogue objects are on 2-D label arrays")
    r0, r1, c0, c1 = bbox if bbox is not None else (0, shape[0], 0, shape[1])
    if not (0 <= r0 < r1 <= shape[0] and 0 <= c0 < c1 <= shape[1]):
        raise LineageError(f"bbox {[r0, r1, c0, c1]} is empty or outside node {name!r} of shape {shape}; give "
                           "r0,r1,c0,c1 with 0 <= r0 < r1 <= rows and 0 <= c0 < c1 <= cols")
    inside = np.asarray(run.output(name)[r0:r1, c0:c1]) == label
    edges = np.diff(np.pad(inside, ((0, 0), (1, 1))).astype(np.int8), axis=1)
    rows, starts = np.nonzero(edges == 1)   # row-major order: the k-th start and end are one run
    _, ends = np.nonzero(edges == -1)
    boxes = np.column_stack([rows + r0, rows + r0 + 1, starts + c0, ends + c0])
    return {"label": label, "cells": int(inside.sum()), "boxes": boxes.tolist()}

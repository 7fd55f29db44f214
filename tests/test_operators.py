"""Tests of the built-in operators (subzero/operators): values, lineage and the runtime.

Every operator is described once in `SPECS` (a builder of random cases with a
numpy/scipy reference output) and checked, under every mode it supports, against lineage
computed by brute force:

- mapping operators: the per-cell loop of ``map_b`` on single cells, made trustworthy
  by a perturbation check (changing an input cell outside ``map_b(o)`` never changes
  ``o``), and, for operators that copy or add cells, by equality with the perturbation
  lineage;
- value-dependent operators: the lineage they ``lwrite`` (FULL, and PAY expanded by
  ``map_p``) against an explicit python reference (e.g. a flood fill for Label).

The same cases then run through the real runtime (``executor="local"``, tiny tiles) and
every stored strategy, ``Map`` and ``BlackBox`` must answer queries like the reference.
"""

from __future__ import annotations

import copy
import itertools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import ndimage

import subzero as sz
from subzero import operators as ops
from subzero.cells import to_coords, to_ids
from subzero.context import Context
from subzero.modes import Mode
from subzero.operators import filters1d
from subzero.operators.measurements import STATISTICS, LabeledStatistic
from subzero.operators.morphology import BinaryFillHoles
from subzero.operators.neighbourhood import (GaussianGradientMagnitude, GaussianLaplace, GenericFilter, PercentileFilter,
                                            Prewitt, RankFilter)
from subzero.oracle import check_operator, evaluate_operator
from subzero.pairs import FullPairs, PayloadPairs, owners
from subzero.worker import expand_payloads
from subzero.tiling import box_slices, full_box, tile_grid

MODES = ops.neighbourhood.MODES


def examples(n: int) -> settings:
    """Hypothesis settings of this module: ``n`` examples, no deadline."""
    return settings(max_examples=n, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# =====================================================================================
# The catalogue: one random case builder per operator
# =====================================================================================
@dataclass
class Case:
    """An operator, inputs for it, and the reference output (numpy / scipy / python)."""

    op: sz.Operator
    inputs: list[np.ndarray]
    expected: np.ndarray
    #: per input, the value replacing cells outside a lineage in the re-run check
    #: (None: fresh random values, fine for lineage that is closed under perturbation)
    sentinel: list | None = None
    #: python reference lineage (value-dependent operators): one (n_out, n_in) bool
    #: relation per input
    reference: Callable[["Case"], list[np.ndarray]] | None = None
    #: for selections: the axis along which a re-run moves the kept slice to position 0
    moves_along: int | None = None
    #: perturbation lineage must equal map_b exactly (operators that copy or add cells)
    tight: bool = False
    extra: dict = field(default_factory=dict)


SPECS: dict[str, Callable[[np.random.Generator, int, int], Case]] = {}


def spec(*names):
    def register(fn):
        for name in names:
            SPECS[name] = partial(fn, name=name) if len(names) > 1 else fn
        return fn
    return register


def rand_shape(rng, ndim: int, side: int, lo: int = 1) -> tuple[int, ...]:
    return tuple(int(n) for n in rng.integers(lo, max(side, lo) + 1, size=ndim))


def floats(rng, shape) -> np.ndarray:
    """Random values away from 0 (so products and quotients always feel a perturbation)."""
    return np.round(rng.choice([-1.0, 1.0], size=shape) * rng.uniform(0.25, 3.0, size=shape), 3)


def bcast(rng, out: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts to ``out``: some leading axes dropped, some axes set to 1."""
    drop = int(rng.integers(0, len(out) + 1)) if len(out) > 1 else 0
    return tuple(1 if rng.random() < 0.3 else n for n in out[drop:]) or (1,)


def per_axis(rng, ndim, lo, hi, scalar_ok=True):
    values = tuple(int(v) for v in rng.integers(lo, hi + 1, size=ndim))
    return values[0] if scalar_ok and ndim and rng.random() < 0.3 else values


BINARY = {"Add": np.add, "Subtract": np.subtract, "Multiply": np.multiply, "Divide": np.true_divide,
          "Power": np.power, "Maximum": np.maximum, "Minimum": np.minimum}
SCALAR = {"AddScalar": np.add, "SubtractScalar": np.subtract, "MultiplyScalar": np.multiply,
          "DivideScalar": np.true_divide, "PowerScalar": np.power}


@spec(*BINARY)
def _binary(rng, ndim, side, name):
    out = rand_shape(rng, ndim, side)
    x, y = floats(rng, bcast(rng, out)), floats(rng, bcast(rng, out))
    if name == "Power":  # a base of 1 would ignore its exponent
        x = np.abs(x) + 1.5
    return Case(getattr(ops, name)(), [x, y], BINARY[name](x, y), tight=name not in ("Maximum", "Minimum"))


@spec(*SCALAR)
def _scalar(rng, ndim, side, name):
    x, value, reverse = floats(rng, rand_shape(rng, ndim, side)), float(floats(rng, ())), bool(rng.random() < 0.5)
    if name == "PowerScalar":
        x, value = (x, abs(value) + 1.5) if reverse else (np.abs(x) + 1.5, value)
    expected = SCALAR[name](value, x) if reverse else SCALAR[name](x, value)
    return Case(getattr(ops, name)(value, reverse=reverse), [x], expected, tight=True)


@spec("Where")
def _where(rng, ndim, side):
    out = rand_shape(rng, ndim, side)
    c, x, y = rng.random(bcast(rng, out)) < 0.5, floats(rng, bcast(rng, out)), floats(rng, bcast(rng, out))
    return Case(ops.Where(), [c, x, y], np.where(c, x, y))


@spec("Clip")
def _clip(rng, ndim, side):
    x = floats(rng, rand_shape(rng, ndim, side))
    lo, hi = sorted(rng.uniform(-2, 2, 2).round(2))
    lo, hi = [(lo, hi), (None, hi), (lo, None)][int(rng.integers(3))]
    return Case(ops.Clip(lo, hi), [x], np.clip(x, lo, hi))


@spec("Threshold")
def _threshold(rng, ndim, side):
    x, value = floats(rng, rand_shape(rng, ndim, side)), float(rng.uniform(-2, 2))
    compare = str(rng.choice([">", ">=", "<", "<=", "==", "!="]))
    return Case(ops.Threshold(value, compare), [x], eval(f"x {compare} value"))


@spec("Apply")
def _apply(rng, ndim, side):
    out = rand_shape(rng, ndim, side)
    if rng.random() < 0.5:
        x = floats(rng, out)
        return Case(ops.Apply(np.sin), [x], np.sin(x), tight=True)
    x, y = floats(rng, bcast(rng, out)), floats(rng, bcast(rng, out))
    return Case(ops.Apply(lambda a, b: np.hypot(a, b) + 1, nin=2), [x, y], np.hypot(x, y) + 1)


@spec("Transpose")
def _transpose(rng, ndim, side):
    x = floats(rng, rand_shape(rng, ndim, side))
    axes = None if rng.random() < 0.3 else tuple(int(a) for a in rng.permutation(ndim))
    return Case(ops.Transpose(axes), [x], np.transpose(x, axes), tight=True)


@spec("Reshape")
def _reshape(rng, ndim, side):
    x = floats(rng, rand_shape(rng, ndim, side))
    d = int(rng.choice([k for k in range(1, x.size + 1) if x.size % k == 0]))
    shape = [(-1,), (d, -1), (x.size // d, d), (1, d, -1)][int(rng.integers(4))]
    return Case(ops.Reshape(shape), [x], x.reshape(shape), tight=True)


@spec("Slice")
def _slice(rng, ndim, side):
    x = floats(rng, rand_shape(rng, ndim, side))
    for _ in range(50):
        parts = []
        for n in x.shape:
            pick = lambda: None if rng.random() < 0.3 else int(rng.integers(-n - 1, n + 2))  # noqa: E731
            parts.append((pick(), pick(), None if rng.random() < 0.3 else int(rng.choice([-3, -2, -1, 1, 2, 3]))))
        if x[tuple(slice(*p) for p in parts)].size:
            break
    else:
        parts = [(None, None, None)] * ndim
    start, stop, step = (tuple(p[k] for p in parts) for k in range(3))
    return Case(ops.Slice(start, stop, step), [x], x[tuple(slice(*p) for p in parts)], tight=True)


@spec("Concatenate")
def _concatenate(rng, ndim, side):
    base, axis, k = rand_shape(rng, ndim, side), int(rng.integers(-ndim, ndim)), int(rng.integers(1, 4))
    shapes = [base[: axis % ndim] + (int(rng.integers(1, side + 1)),) + base[axis % ndim + 1:] for _ in range(k)]
    xs = [floats(rng, s) for s in shapes]
    return Case(ops.Concatenate(axis), xs, np.concatenate(xs, axis), tight=True)


@spec("Stack")
def _stack(rng, ndim, side):
    shape, axis, k = rand_shape(rng, ndim, side), int(rng.integers(-ndim - 1, ndim + 1)), int(rng.integers(1, 4))
    xs = [floats(rng, shape) for _ in range(k)]
    return Case(ops.Stack(axis), xs, np.stack(xs, axis), tight=True)


@spec("Flip")
def _flip(rng, ndim, side):
    x = floats(rng, rand_shape(rng, ndim, side))
    axis = [None, int(rng.integers(-ndim, ndim)), tuple(int(a) for a in np.flatnonzero(rng.random(ndim) < 0.5))][
        int(rng.integers(3))]
    return Case(ops.Flip(axis), [x], np.flip(x, axis), tight=True)


@spec("Pad")
def _pad(rng, ndim, side):
    x = floats(rng, rand_shape(rng, ndim, side))
    widths = [tuple(int(w) for w in rng.integers(0, 5, 2)) for _ in range(ndim)]
    width = [widths, int(widths[0][0]), widths[0]][int(rng.integers(3))]
    mode, value = str(rng.choice(["constant", "edge", "reflect", "symmetric", "wrap"])), float(floats(rng, ()))
    extra = {"constant_values": value} if mode == "constant" else {}
    return Case(ops.Pad(width, mode, value), [x], np.pad(x, width, mode, **extra), tight=True)


def py_boundary(v: int, n: int, mode: str) -> int | None:
    """The index a scipy.ndimage filter reads for virtual position ``v`` (scalar python)."""
    if 0 <= v < n:
        return v
    if mode in ("constant", "grid-constant"):
        return None
    if mode == "nearest":
        return min(max(v, 0), n - 1)
    if mode in ("wrap", "grid-wrap"):
        return v % n
    while not 0 <= v < n:  # reflect (edge repeated) or mirror (edge not repeated)
        edge = 1 if mode == "mirror" and n > 1 else 0
        v = (-v - 1 + edge) if v < 0 else (2 * n - 1 - v - edge)
        if n == 1:
            return 0
    return v


@spec("Shift")
def _shift(rng, ndim, side):
    x = floats(rng, rand_shape(rng, ndim, side))
    shift = tuple(int(rng.integers(-n - 1, n + 2)) for n in x.shape)
    mode, cval = str(rng.choice(MODES)), float(floats(rng, ()))
    expected = np.empty_like(x)
    for j in itertools.product(*map(range, x.shape)):
        src = [py_boundary(a - s, n, mode) for a, s, n in zip(j, shift, x.shape)]
        expected[j] = cval if None in src else x[tuple(src)]
    return Case(ops.Shift(shift, mode, cval), [x], expected, tight=True)


@spec("Tile")
def _tile(rng, ndim, side):
    x = floats(rng, rand_shape(rng, ndim, side))
    reps = tuple(int(r) for r in rng.integers(1, 4, size=int(rng.integers(1, ndim + 1))))
    return Case(ops.Tile(reps), [x], np.tile(x, reps), tight=True)


@spec("Convolve", "Correlate")
def _kernel(rng, ndim, side, name):
    x = floats(rng, rand_shape(rng, ndim, side))
    kernel = floats(rng, rand_shape(rng, ndim, 4)) * (rng.random(rand_shape(rng, ndim, 1)) < 0.7)
    kernel.reshape(-1)[int(rng.integers(kernel.size))] = 1.5
    mode, cval = str(rng.choice(MODES)), float(floats(rng, ()))
    fn = ndimage.convolve if name == "Convolve" else ndimage.correlate
    return Case(getattr(ops, name)(kernel, mode, cval), [x], fn(x, kernel, mode=mode, cval=cval))


@spec("GaussianFilter")
def _gaussian(rng, ndim, side):
    x = floats(rng, rand_shape(rng, ndim, side))
    sigma = float(rng.uniform(0, 1.5)) if rng.random() < 0.5 else tuple(rng.uniform(0, 1.5, ndim).round(2))
    order, truncate, mode = int(rng.integers(0, 2)), float(rng.uniform(1, 4)), str(rng.choice(MODES))
    expected = ndimage.gaussian_filter(x, sigma, order=order, mode=mode, cval=0.5, truncate=truncate)
    return Case(ops.GaussianFilter(sigma, order, mode, 0.5, truncate), [x], expected)


@spec("UniformFilter")
def _uniform(rng, ndim, side):
    x, size, mode = floats(rng, rand_shape(rng, ndim, side)), per_axis(rng, ndim, 1, 4), str(rng.choice(MODES))
    return Case(ops.UniformFilter(size, mode, -1.0), [x], ndimage.uniform_filter(x, size, mode=mode, cval=-1.0))


@spec("MedianFilter", "MaximumFilter", "MinimumFilter")
def _rank(rng, ndim, side, name):
    x, mode = floats(rng, rand_shape(rng, ndim, side)), str(rng.choice(MODES))
    fn = {"MedianFilter": ndimage.median_filter, "MaximumFilter": ndimage.maximum_filter,
          "MinimumFilter": ndimage.minimum_filter}[name]
    if rng.random() < 0.5:
        size = per_axis(rng, ndim, 1, 4)
        return Case(getattr(ops, name)(size, mode=mode, cval=0.1), [x], fn(x, size, mode=mode, cval=0.1))
    footprint = rng.random(rand_shape(rng, ndim, 4)) < 0.6
    footprint.reshape(-1)[0] = True
    # the reference goes through 2-D: scipy's 1-D fast path ignores the footprint's holes
    expected = fn(x[None], footprint=footprint[None], mode=mode, cval=0.1)[0]
    return Case(getattr(ops, name)(footprint=footprint, mode=mode, cval=0.1), [x], expected)


@spec("RankFilter", "PercentileFilter")
def _ranked(rng, ndim, side, name):
    x, mode = floats(rng, rand_shape(rng, ndim, side)), str(rng.choice(MODES))
    if name == "RankFilter":
        value, fn, cls = int(rng.integers(-1, 1)), ndimage.rank_filter, RankFilter
    else:
        value, fn, cls = float(rng.uniform(-100, 100)), ndimage.percentile_filter, PercentileFilter
    if rng.random() < 0.5:
        size = per_axis(rng, ndim, 1, 3)
        return Case(cls(value, size, mode=mode, cval=0.1), [x], fn(x, value, size, mode=mode, cval=0.1))
    footprint = rng.random(rand_shape(rng, ndim, 3)) < 0.6
    footprint.reshape(-1)[0] = True
    expected = fn(x[None], value, footprint=footprint[None], mode=mode, cval=0.1)[0]  # through 2-D, as _rank
    return Case(cls(value, footprint=footprint, mode=mode, cval=0.1), [x], expected)


@spec("GaussianLaplace", "GaussianGradientMagnitude")
def _gaussian_derivatives(rng, ndim, side, name):
    x, mode = floats(rng, rand_shape(rng, ndim, side)), str(rng.choice(MODES))
    sigma = float(rng.uniform(0, 1.5)) if rng.random() < 0.5 else tuple(rng.uniform(0, 1.5, ndim).round(2))
    truncate = float(rng.uniform(1, 4))
    cls = GaussianLaplace if name == "GaussianLaplace" else GaussianGradientMagnitude
    expected = getattr(ndimage, cls.fn)(x, sigma, mode=mode, cval=0.5, truncate=truncate)
    return Case(cls(sigma, mode, 0.5, truncate), [x], expected)


@spec("Prewitt")
def _prewitt(rng, ndim, side):
    x, mode, axis = floats(rng, rand_shape(rng, ndim, side)), str(rng.choice(MODES)), int(rng.integers(-ndim, ndim))
    return Case(Prewitt(axis, mode, 2.0), [x], ndimage.prewitt(x, axis, mode=mode, cval=2.0))


@spec("Laplace")
def _laplace(rng, ndim, side):
    x, mode = floats(rng, rand_shape(rng, ndim, side)), str(rng.choice(MODES))
    return Case(ops.Laplace(mode, 2.0), [x], ndimage.laplace(x, mode=mode, cval=2.0))


@spec("Sobel")
def _sobel(rng, ndim, side):
    x, mode, axis = floats(rng, rand_shape(rng, ndim, side)), str(rng.choice(MODES)), int(rng.integers(-ndim, ndim))
    return Case(ops.Sobel(axis, mode, 2.0), [x], ndimage.sobel(x, axis, mode=mode, cval=2.0))


@spec("BinaryDilation", "BinaryErosion")
def _morphology(rng, ndim, side, name):
    x = rng.random(rand_shape(rng, ndim, side)) < (0.25 if name == "BinaryDilation" else 0.75)
    structure = None
    if rng.random() < 0.6:
        structure = rng.random(rand_shape(rng, ndim, 3)) < 0.6
        structure.reshape(-1)[int(rng.integers(structure.size))] = True
    iterations, border = int(rng.integers(1, 3)), int(rng.integers(0, 2))
    fn = ndimage.binary_dilation if name == "BinaryDilation" else ndimage.binary_erosion
    expected = fn(x, structure, iterations, border_value=border)
    return Case(getattr(ops, name)(structure, iterations, border), [x], expected)


@spec("Downsample")
def _downsample(rng, ndim, side):
    x, factor = floats(rng, rand_shape(rng, ndim, side)), per_axis(rng, ndim, 1, 3)
    how = str(rng.choice(["mean", "sum", "max", "min"]))
    f = (factor,) * ndim if isinstance(factor, int) else factor
    expected = np.empty(tuple(-(-n // k) for n, k in zip(x.shape, f)))
    for j in itertools.product(*map(range, expected.shape)):
        block = x[tuple(slice(a * k, (a + 1) * k) for a, k in zip(j, f))]
        expected[j] = getattr(np, how)(block)
    return Case(ops.Downsample(factor, how), [x], expected, tight=how in ("mean", "sum"))


@spec("Upsample")
def _upsample(rng, ndim, side):
    x, factor = floats(rng, rand_shape(rng, ndim, side)), per_axis(rng, ndim, 1, 3)
    expected = x
    for axis, f in enumerate((factor,) * ndim if isinstance(factor, int) else factor):
        expected = np.repeat(expected, f, axis=axis)
    return Case(ops.Upsample(factor), [x], expected, tight=True)


@spec("Dot")
def _dot(rng, ndim, side):
    k = int(rng.integers(1, side + 1))
    a = floats(rng, rand_shape(rng, int(rng.integers(0, 3)), side) + (k,))
    b_shape = [(k,), (k, int(rng.integers(1, side + 1))), (2, k, 3)][int(rng.integers(3))]
    b = floats(rng, b_shape)
    return Case(ops.Dot(), [a, b], np.dot(a, b).reshape(np.shape(np.dot(a, b)) or (1,)), tight=True)


@spec("MatMul")
def _matmul(rng, ndim, side):
    n, k, m = rand_shape(rng, 3, side)
    a, b = floats(rng, (n, k)), floats(rng, (k, m))
    return Case(ops.MatMul(), [a, b], a @ b, tight=True)


@spec("Outer")
def _outer(rng, ndim, side):
    a, b = floats(rng, rand_shape(rng, int(rng.integers(1, 3)), side)), floats(rng, rand_shape(rng, 1, side))
    return Case(ops.Outer(), [a, b], np.multiply.outer(a, b), tight=True)


@spec("Inverse")
def _inverse(rng, ndim, side):
    n = int(rng.integers(1, side + 1))
    x = floats(rng, (n, n)) + 4 * n * np.eye(n)
    return Case(ops.Inverse(), [x], np.linalg.inv(x))


REDUCE = {"Sum": np.sum, "Mean": np.mean, "Std": np.std, "Min": np.min, "Max": np.max, "Count": np.count_nonzero}


@spec(*REDUCE)
def _reduce(rng, ndim, side, name):
    ndim = max(ndim, 2)  # keep one axis: a 0-d output cannot be queried (see the report)
    shape = rand_shape(rng, ndim, side)
    x = rng.integers(0, 3, shape).astype(float) if name == "Count" else floats(rng, shape)
    axes = tuple(int(a) for a in rng.choice(ndim, size=int(rng.integers(1, ndim)), replace=False))
    axis = axes[0] - ndim if len(axes) == 1 and rng.random() < 0.5 else axes
    return Case(getattr(ops, name)(axis), [x], np.asarray(REDUCE[name](x, axis=axis)), tight=name in ("Sum", "Mean"))


@spec("GlobalMean", "GlobalStd")
def _global(rng, ndim, side, name):
    x = floats(rng, rand_shape(rng, ndim, side))
    fn = np.mean if name == "GlobalMean" else np.std
    return Case(getattr(ops, name)(), [x], fn(x, keepdims=True))


NAN_REDUCE = {"NanSum": np.nansum, "NanMean": np.nanmean, "NanStd": np.nanstd, "NanMin": np.nanmin,
              "NanMax": np.nanmax, "AnyOf": np.any, "AllOf": np.all}


@spec(*NAN_REDUCE)
def _nan_reduce(rng, ndim, side, name):
    ndim = max(ndim, 2)  # keep one axis, as the other axis reductions
    shape = rand_shape(rng, ndim, side)
    x = floats(rng, shape)
    if name in ("AnyOf", "AllOf"):
        x = (x > 0).astype(float)
    else:
        x[rng.random(shape) < 0.2] = np.nan
        x[(slice(None),) * (ndim - 1) + (0,)] = 1.0  # no all-NaN line (nanmean of nothing warns)
    axis = int(rng.integers(0, ndim - 1))
    with np.errstate(all="ignore"):
        return Case(getattr(ops, name)(axis), [x], np.asarray(NAN_REDUCE[name](x, axis=axis)))


@spec("GlobalReduction")
def _global_reduction(rng, ndim, side):
    x = floats(rng, rand_shape(rng, ndim, side))
    how = ["sum", "min", "max", "count_nonzero", "var", "nansum", "prod"][int(rng.integers(0, 7))]
    expected = np.count_nonzero(x, axis=tuple(range(ndim)), keepdims=True) if how == "count_nonzero" \
        else getattr(np, how)(x, keepdims=True)
    return Case(ops.GlobalReduction(how), [x], expected)


@spec("HistogramEdges")
def _histogram_edges(rng, ndim, side):
    x = floats(rng, rand_shape(rng, ndim, side))
    bins = int(rng.integers(1, 5))
    return Case(ops.HistogramEdges(bins), [x], np.histogram_bin_edges(x, bins))


@spec("Relabel")
def _relabel(rng, ndim, side):
    x = rng.choice([0, 0, 3, 7, 12], size=rand_shape(rng, ndim, side)).astype(np.int64)
    expected = np.searchsorted(np.unique(x[x != 0]), x) + 1
    return Case(ops.Relabel(), [x], np.where(x != 0, expected, 0).astype(np.int32), tight=True)


@spec("NearestZoom")
def _nearest_zoom(rng, ndim, side):
    x = floats(rng, rand_shape(rng, ndim, side))
    zoom = tuple(float(z) for z in rng.choice([0.5, 1.0, 1.5, 2.0, 3.0], size=ndim))
    return Case(ops.NearestZoom(zoom), [x], ndimage.zoom(x, zoom, order=0), tight=True)


@spec("Sort", "ArgSort")
def _sort(rng, ndim, side, name):
    x, axis = rng.integers(0, 4, rand_shape(rng, ndim, side)).astype(float), int(rng.integers(-ndim, ndim))
    fn = np.sort if name == "Sort" else np.argsort
    return Case(getattr(ops, name)(axis), [x], fn(x, axis=axis, kind="stable"))


STATISTIC_HOWS = ["median", "nanmedian", "percentile", "nanpercentile", "quantile", "nanquantile", "var", "nanvar",
                  "prod", "nanprod", "ptp", "argmax", "argmin", "nanargmax", "nanargmin"]


@spec("Statistic")
def _statistic(rng, ndim, side):
    ndim = max(ndim, 2)  # keep one axis, as the other axis reductions
    shape = rand_shape(rng, ndim, side)
    how = STATISTIC_HOWS[int(rng.integers(len(STATISTIC_HOWS)))]
    x = floats(rng, shape)
    if how.startswith("nan"):
        x[rng.random(shape) < 0.2] = np.nan
        x[(0,) * ndim] = 1.0  # no all-NaN line (nanargmax of nothing raises)
        x[(slice(None),) * (ndim - 1) + (0,)] = 1.0
    if "arg" in how:
        axes: tuple[int, ...] | int = int(rng.integers(-ndim, ndim))
        if how.startswith("nan"):  # every line along the axis keeps a number
            x[tuple(slice(None) if k != int(axes) % ndim else 0 for k in range(ndim))] = 1.0
    else:
        axes = tuple(int(a) for a in rng.choice(ndim, size=int(rng.integers(1, ndim)), replace=False))
        if how.startswith("nan"):
            x[tuple(slice(None) if k not in axes else 0 for k in range(ndim))] = 1.0
    q = None
    kwargs: dict = {}
    if how in ("percentile", "nanpercentile"):
        q = float(rng.uniform(0, 100))
        kwargs = {"q": q}
    elif how in ("quantile", "nanquantile"):
        q = float(rng.uniform(0, 1))
        kwargs = {"q": q}
    ddof = int(rng.integers(0, 2)) if how in ("var", "nanvar") else 0
    fn = getattr(np, how)
    with np.errstate(all="ignore"):
        if how in ("var", "nanvar"):
            expected = fn(x, axis=axes, ddof=ddof)
        elif q is not None:
            expected = fn(x, q, axis=axes)
        else:
            expected = fn(x, axis=axes)
    return Case(ops.Statistic(how, axes, ddof=ddof, **kwargs), [x], np.asarray(expected))


@spec("Cumulative")
def _cumulative(rng, ndim, side):
    x, axis = floats(rng, rand_shape(rng, ndim, side)), int(rng.integers(-ndim, ndim))
    how = str(rng.choice(["cumsum", "cumprod", "nancumsum", "nancumprod"]))
    if how.startswith("nan"):
        x[rng.random(x.shape) < 0.2] = np.nan
    return Case(ops.Cumulative(how, axis), [x], getattr(np, how)(x, axis=axis), tight=not how.startswith("nan"))


@spec("Diff")
def _diff(rng, ndim, side):
    axis = int(rng.integers(-ndim, ndim))
    shape = list(rand_shape(rng, ndim, side))
    shape[axis] = max(shape[axis], 2)
    x, n = floats(rng, tuple(shape)), int(rng.integers(1, shape[axis]))
    return Case(ops.Diff(n, axis), [x], np.diff(x, n, axis=axis), tight=True)


@spec("SequenceConvolve")
def _convolve1d(rng, ndim, side):
    n, m = int(rng.integers(1, side + 3)), int(rng.integers(1, side + 3))
    a, v = floats(rng, (n,)), floats(rng, (m,))
    mode, correlate = str(rng.choice(["full", "same", "valid"])), bool(rng.random() < 0.5)
    expected = (np.correlate if correlate else np.convolve)(a, v, mode)
    pick = int(rng.integers(3))  # both inputs, a constant v, a constant a
    if pick == 0:
        return Case(ops.SequenceConvolve(mode, correlate), [a, v], expected, tight=True)
    if pick == 1:
        return Case(ops.SequenceConvolve(mode, correlate, constant=v, constant_at=1), [a], expected, tight=True)
    return Case(ops.SequenceConvolve(mode, correlate, constant=a, constant_at=0), [v], expected, tight=True)


@spec("Take")
def _take(rng, ndim, side):
    x, axis = floats(rng, rand_shape(rng, ndim, side)), int(rng.integers(-ndim, ndim))
    n = x.shape[axis]
    indices = rng.integers(-n, n, size=int(rng.integers(1, 5)))
    return Case(ops.Take(indices, axis), [x], np.take(x, indices, axis=axis), tight=True)


@spec("TakeAlong")
def _take_along(rng, ndim, side):
    shape = rand_shape(rng, ndim, side)
    axis = int(rng.integers(-ndim, ndim))
    x = floats(rng, shape)
    ishape = [int(rng.integers(1, 4)) if k == axis % ndim else (1 if rng.random() < 0.3 else n)
              for k, n in enumerate(shape)]
    indices = rng.integers(-shape[axis], shape[axis], size=tuple(ishape))
    return Case(ops.TakeAlong(indices, axis), [x], np.take_along_axis(x, indices % shape[axis], axis=axis),
                tight=True)


EINSUMS = ["ij,jk->ik", "i,j->ij", "ij->ji", "ijk->ik", "ij,ij->i", "i,i->", "ij->", "ijk,kj->ik", "ij,j", "kij->jik"]


@spec("Einsum")
def _einsum(rng, ndim, side):
    subscripts = EINSUMS[int(rng.integers(len(EINSUMS)))]
    sizes = {c: int(rng.integers(1, side + 1)) for c in "ijk"}
    operands = subscripts.split("->")[0].split(",")
    xs = [floats(rng, tuple(sizes[c] for c in part)) for part in operands]
    expected = np.asarray(np.einsum(subscripts, *xs))
    return Case(ops.Einsum(subscripts), xs, expected.reshape(1) if expected.ndim == 0 else expected, tight=True)


@spec("Lookup")
def _lookup(rng, ndim, side):
    pick = int(rng.integers(3))
    cells = floats(rng, rand_shape(rng, ndim, side))
    table = np.sort(floats(rng, (int(rng.integers(1, side + 2)),)))
    if pick == 0:  # np.searchsorted(a, v): each result on its v and all of a
        return Case(ops.Lookup(np.searchsorted, (True, False), cells.shape), [table, cells],
                    np.searchsorted(table, cells))
    if pick == 1:  # np.isin(element, test_elements): on its element and every test element
        cells = rng.integers(0, 4, cells.shape).astype(float)
        tests = rng.integers(0, 4, int(rng.integers(1, side + 2))).astype(float)
        return Case(ops.Lookup(np.isin, (False, True), cells.shape), [cells, tests], np.isin(cells, tests))
    xp = np.cumsum(np.abs(floats(rng, table.shape)))  # np.interp(x, xp, fp): on its x and all of xp, fp
    fp = floats(rng, table.shape)
    return Case(ops.Lookup(np.interp, (False, True, True), cells.shape), [cells, xp, fp], np.interp(cells, xp, fp))


# -- value-dependent operators and their python references ----------------------------
def flat_cells(shape):
    return list(itertools.product(*map(range, shape)))


def label_reference(case: Case) -> list[np.ndarray]:
    """Flood fill: each foreground cell's component and the background cells around it, in pure python."""
    x = case.inputs[0]
    ndim = x.ndim
    structure = case.op.structure if case.op.structure is not None else ndimage.generate_binary_structure(ndim, 1)
    steps = [tuple(int(v) for v in d) for d in np.argwhere(structure) - np.array(structure.shape) // 2]
    cells, rel = flat_cells(x.shape), np.zeros((x.size, x.size), bool)
    index = {c: k for k, c in enumerate(cells)}
    for c in cells:
        if x[c] == 0:
            rel[index[c], index[c]] = True
            continue
        seen, todo = {c}, [c]
        while todo:
            here = todo.pop()
            for d in steps:
                near = tuple(a + b for a, b in zip(here, d))
                if all(0 <= a < n for a, n in zip(near, x.shape)) and x[near] != 0 and near not in seen:
                    seen.add(near)
                    todo.append(near)
        for s in seen:
            rel[index[c], index[s]] = True
            for d in steps:  # the ring: background cells next to the component
                near = tuple(a + b for a, b in zip(s, d))
                if all(0 <= a < n for a, n in zip(near, x.shape)) and x[near] == 0:
                    rel[index[c], index[near]] = True
    return [rel]


@spec("Label")
def _label(rng, ndim, side):
    x = (rng.random(rand_shape(rng, ndim, side)) < rng.uniform(0.2, 0.6)) * rng.integers(1, 4)
    structure = None if rng.random() < 0.5 else ndimage.generate_binary_structure(ndim, ndim)
    case = Case(ops.Label(structure), [x], np.zeros(x.shape, np.int64), sentinel=[0], reference=label_reference)
    rel = label_reference(case)[0] & (x.reshape(-1) != 0)[None, :]  # the component, without its ring
    first = rel.argmax(axis=1)  # the component's first cell in C order
    case.expected = np.where(x.reshape(-1) != 0, first + 1, 0).reshape(x.shape)
    return case


def histogram_reference(case: Case) -> list[np.ndarray]:
    """Members reading: the cells counted in each bin (+ the extremes fixing data edges)."""
    x, op = case.inputs[0].reshape(-1), case.op
    finite = [v for v in x.tolist() if np.isfinite(v)]
    edges = np.histogram_bin_edges(np.array(finite), op.bins, op.range).tolist()
    data_range = isinstance(op.bins, int) and op.range is None and finite
    rel = np.zeros((len(edges) - 1, x.size), bool)
    for k, v in enumerate(x.tolist()):
        for b in range(len(edges) - 1):
            last = b == len(edges) - 2
            if edges[b] <= v < edges[b + 1] or (last and v == edges[-1]):
                rel[b, k] = True
                break
        if data_range and v in (min(finite), max(finite)):
            rel[:, k] = True
    return [rel]


def _histogram_case(rng, ndim, side, lineage):
    x = floats(rng, rand_shape(rng, ndim, side))
    x.reshape(-1)[rng.random(x.size) < 0.15] = rng.choice([np.nan, np.inf, -np.inf])
    bins = int(rng.integers(1, 6)) if rng.random() < 0.7 else tuple(np.sort(rng.uniform(-3, 3, 4)).round(2))
    value_range = None if rng.random() < 0.5 or not isinstance(bins, int) else (-1.5, 2.0)
    finite = x[np.isfinite(x)]
    expected = np.histogram(finite, bins, value_range)[0]
    members = lineage == "members"
    return Case(ops.Histogram(bins, value_range, lineage=lineage), [x], expected, sentinel=[np.nan],
                reference=histogram_reference if members else None)


def fill_holes_reference(case: Case) -> list[np.ndarray]:
    """Label's flood fill on the background: a background cell reads its component and ring."""
    return label_reference(Case(case.op, [case.inputs[0] == 0], case.expected))


@spec("BinaryFillHoles")
def _fill_holes(rng, ndim, side):
    x = rng.random(rand_shape(rng, ndim, side)) < rng.uniform(0.4, 0.8)
    structure = None if rng.random() < 0.5 else ndimage.generate_binary_structure(ndim, ndim)
    return Case(BinaryFillHoles(structure), [x], ndimage.binary_fill_holes(x, structure),
                reference=fill_holes_reference)


def measure_reference(case: Case) -> list[np.ndarray]:
    """Per value: the input cells of its label (every cell for scipy's median of an absent
    label); every label cell (dependence)."""
    x, labels = case.inputs
    op = case.op
    flat = labels.reshape(-1)
    wanted = [None] if op.index is None else np.atleast_1d(op.index).tolist()
    per_value = size(op.output_shape) // max(len(wanted), 1)
    rel_x = np.zeros((size(op.output_shape), x.size), bool)
    rel_l = np.ones((size(op.output_shape), labels.size), bool)
    for j, k in enumerate(wanted):
        members = flat > 0 if k is None else flat == k
        if op.how == "median" and not members.any():  # scipy reads another label's value
            members = np.ones(x.size, bool)
        if op.lineage == "members":
            rel_l[j * per_value:(j + 1) * per_value] = members
        rel_x[j * per_value:(j + 1) * per_value] = members
    return [rel_x, rel_l]


@spec("LabeledStatistic", "LabeledStatistic[members]")
def _labeled_statistic(rng, ndim, side, name):
    lineage = "members" if name.endswith("[members]") else "dependence"
    shape = rand_shape(rng, ndim, side)
    x, labels = floats(rng, shape), rng.integers(-1, 4, shape)
    labels.reshape(-1)[0] = 1  # scipy raises on positions of no cell at all
    how = str(rng.choice(sorted(STATISTICS)))
    index = [None, 2, list(rng.integers(0, 6, int(rng.integers(0, 4)))), range(1, 4)][int(rng.integers(0, 4))]
    extra = dict(func=np.ptp, out_dtype=float, default=-1.0) if how == "labeled_comprehension" else {}
    try:
        op = LabeledStatistic(how, index, lineage=lineage, **extra)
        expected = op.measure(x, labels)
    except (ValueError, IndexError):  # scipy raises on some statistics of an absent label: measure them all
        index = None
        op = LabeledStatistic(how, index, lineage=lineage, **extra)
        expected = op.measure(x, labels)
    reference = getattr(ndimage, how)
    args = (x, labels, index) + ((np.ptp, float, -1.0) if extra else ())
    want = np.asarray(reference(*args), dtype=expected.dtype).reshape(expected.shape)
    # members: label cells outside the lineage become a label nobody measures (a measured one would join)
    return Case(op, [x, labels], want, reference=measure_reference,
                sentinel=[None, -7] if lineage == "members" else None)


@spec("LabeledStatistic[unlabelled]")
def _statistic_unlabelled(rng, ndim, side):
    x, how = floats(rng, rand_shape(rng, ndim, side)), str(rng.choice(["mean", "maximum_position", "median"]))
    op = LabeledStatistic(how, labels=False)
    return Case(op, [x], np.asarray(getattr(ndimage, how)(x), np.float64).reshape(op.infer_output_shape((x.shape,))))


FILTERS_1D = {"Correlate1D": ndimage.correlate1d, "Convolve1D": ndimage.convolve1d,
              "UniformFilter1D": ndimage.uniform_filter1d, "GaussianFilter1D": ndimage.gaussian_filter1d,
              "MinimumFilter1D": ndimage.minimum_filter1d, "MaximumFilter1D": ndimage.maximum_filter1d}


@spec(*FILTERS_1D)
def _filter1d(rng, ndim, side, name):
    x, mode = floats(rng, rand_shape(rng, ndim, side)), str(rng.choice(MODES))
    axis = int(rng.integers(-ndim, ndim))
    if name in ("Correlate1D", "Convolve1D"):
        arg = floats(rng, int(rng.integers(1, 5))) * (rng.random() < 0.8)
    elif name == "GaussianFilter1D":
        arg = float(rng.uniform(0, 1.5))
    else:
        arg = int(rng.integers(1, 5))
    op = getattr(filters1d, name)(arg, axis, mode=mode, cval=0.5)
    return Case(op, [x], FILTERS_1D[name](x, arg, axis, mode=mode, cval=0.5))


def window_spread(values: np.ndarray) -> float:
    """A generic_filter function: the range of a window's values."""
    return float(values.max() - values.min())


@spec("GenericFilter")
def _generic(rng, ndim, side):
    x, mode = floats(rng, rand_shape(rng, ndim, side)), str(rng.choice(MODES))
    if rng.random() < 0.5:
        size = per_axis(rng, ndim, 1, 3)
        return Case(GenericFilter(window_spread, size, mode=mode), [x],
                    ndimage.generic_filter(x, window_spread, size, mode=mode))
    footprint = rng.random(rand_shape(rng, ndim, 3)) < 0.6
    footprint.reshape(-1)[0] = True
    return Case(GenericFilter(window_spread, footprint=footprint, mode=mode), [x],
                ndimage.generic_filter(x, window_spread, footprint=footprint, mode=mode))


@spec("Histogram")
def _histogram(rng, ndim, side):
    """The default, dependence reading: every bin depends on every cell (all-to-all)."""
    return _histogram_case(rng, ndim, side, "dependence")


@spec("Histogram[members]")
def _histogram_members(rng, ndim, side):
    return _histogram_case(rng, ndim, side, "members")


def slices_above(x: np.ndarray, axis: int, t: float) -> np.ndarray:
    """The Filter predicate of the tests: slices along ``axis`` whose maximum exceeds ``t``."""
    return np.moveaxis(x, axis, 0).reshape(x.shape[axis], -1).max(axis=1) > t


def selection_reference(case: Case) -> list[np.ndarray]:
    """Source reading: an output cell reads its source slice's decision and the cell it
    copies; positional reading: also the decisions of every slice up to its source (every
    slice, for the last output slice)."""
    x, axis, keep = case.inputs[-1], case.op._axis(), case.extra["keep"]
    src = [s for s in range(x.shape[axis]) if keep[s]]
    positional = case.op.lineage == "positional"
    out_cells, in_cells = flat_cells(case.expected.shape), flat_cells(x.shape)
    rel_x = np.zeros((len(out_cells), len(in_cells)), bool)
    rel_c = np.zeros((len(out_cells), x.shape[axis]), bool)
    for o, cell in enumerate(out_cells):
        origin = src[cell[axis]]
        bound = x.shape[axis] - 1 if positional and cell[axis] == len(src) - 1 else origin
        decided = range(bound + 1) if positional else [origin]
        for s_ in decided:
            rel_c[o, s_] = True
        for k, c in enumerate(in_cells):
            same = all(a == b for d, (a, b) in enumerate(zip(c, cell)) if d != axis)
            if case.extra["whole_slice"]:
                rel_x[o, k] = c[axis] in decided
            else:
                rel_x[o, k] = c[axis] == origin and same
    return [rel_x] if case.extra["whole_slice"] else [rel_c, rel_x]


def _filter_case(rng, ndim, side, lineage):
    x, axis, t = floats(rng, rand_shape(rng, ndim, side)), int(rng.integers(-ndim, ndim)), 1.0
    x[(slice(None),) * (axis % ndim) + (int(rng.integers(x.shape[axis])),)] = 2.5  # keep one slice at least
    keep = [bool(np.max(np.take(x, s, axis=axis)) > t) for s in range(x.shape[axis])]
    return Case(ops.Filter(partial(slices_above, axis=axis, t=t), axis, lineage), [x], np.compress(keep, x, axis),
                sentinel=[np.nan], reference=selection_reference,
                moves_along=axis % ndim if lineage == "source" else None,
                extra={"keep": keep, "whole_slice": True})


def _compress_case(rng, ndim, side, lineage):
    x, axis = floats(rng, rand_shape(rng, ndim, side)), int(rng.integers(-ndim, ndim))
    condition = rng.integers(0, 2, x.shape[axis])
    condition[int(rng.integers(len(condition)))] = 1
    return Case(ops.Compress(axis, lineage), [condition, x], np.compress(condition, x, axis), sentinel=[0, None],
                reference=selection_reference, moves_along=axis % ndim if lineage == "source" else None,
                extra={"keep": condition.tolist(), "whole_slice": False})


@spec("Filter")
def _filter(rng, ndim, side):
    return _filter_case(rng, ndim, side, "source")


@spec("Filter[positional]")
def _filter_positional(rng, ndim, side):
    return _filter_case(rng, ndim, side, "positional")


@spec("Compress")
def _compress(rng, ndim, side):
    return _compress_case(rng, ndim, side, "source")


@spec("Compress[positional]")
def _compress_positional(rng, ndim, side):
    return _compress_case(rng, ndim, side, "positional")


def crd_reference(case: Case) -> list[np.ndarray]:
    x, op = case.inputs[0], case.op
    excess = x - ndimage.median_filter(x, size=3, mode="reflect")
    cells = flat_cells(x.shape)
    rel = np.zeros((x.size, x.size), bool)
    for o, c in enumerate(cells):  # the 3x3 detection window, a larger square when flagged
        r = 1 if excess[c] <= op.threshold else max(1, op.radius + (excess[c] > 4 * op.threshold))
        for k, d in enumerate(cells):
            rel[o, k] = all(abs(a - b) <= r for a, b in zip(c, d))
    return [rel]


@spec("CosmicRayDetect")
def _crd(rng, ndim, side):
    x = floats(rng, rand_shape(rng, 2, max(side, 3)))
    x.reshape(-1)[rng.random(x.size) < 0.1] = 200.0
    x.reshape(-1)[rng.random(x.size) < 0.05] = 900.0
    op = ops.CosmicRayDetect(threshold=100.0, radius=int(rng.integers(0, 3)))
    expected = (x - ndimage.median_filter(x, size=3, mode="reflect") > 100.0).astype(np.uint8)
    return Case(op, [x], expected, reference=crd_reference)


# -- astronomy operators (astroscrappy, sep) ---------------------------------------------
def sky(rng, shape, hits: int = 3) -> np.ndarray:
    """A sky of 100 +- 5 with a star and ``hits`` cosmic-ray pixels (a pair of them adjacent)."""
    yy, xx = np.mgrid[0:shape[0], 0:shape[1]]
    cy, cx = rng.uniform(0, shape[0]), rng.uniform(0, shape[1])
    x = 100.0 + rng.normal(0.0, 5.0, shape) + 400.0 * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / 4.5)
    cells = rng.integers(0, shape, size=(hits, 2))
    x[tuple(cells.T)] += rng.uniform(300.0, 1500.0, hits)
    r, c = cells[0]
    x[r, min(c + 1, shape[1] - 1)] += 800.0
    return x


def window_relation(shape, radius_of_cell) -> np.ndarray:
    """o ~ c iff the Chebyshev distance is at most the radius of o (None: every cell)."""
    cells = all_cells(shape)
    dist = np.abs(cells[:, None, :] - cells[None, :, :]).max(axis=2)
    radius = np.array([np.inf if r is None else r for r in radius_of_cell], float)
    return dist <= radius[:, None]


def cosmic_rays_reference(case: Case) -> list[np.ndarray]:
    op, x = case.op, case.inputs[0]
    flags = np.asarray(case.expected, bool)
    whole = op.global_pixels(flags, x).reshape(-1)
    rel = window_relation(x.shape, [None if w else op.reach for w in whole])
    return [rel] * len(case.inputs)


def _cosmic_rays_case(rng, niter):
    import astroscrappy

    side = 17 if niter == 1 else 12  # two iterations reach 14 (18 with sepmed): every pixel
    shape = (int(rng.integers(ops.CosmicRays.MIN_SIDE, side)), int(rng.integers(ops.CosmicRays.MIN_SIDE, side + 2)))
    x = sky(rng, shape)
    background, variance = bool(rng.random() < 0.5), bool(rng.random() < 0.5)
    bkg = np.full(shape, 100.0) + rng.normal(0, 1, shape)
    var = np.abs(x - 0.5 * bkg) + 25.0
    satlevel = float(rng.choice([np.inf, 1200.0]))
    op = ops.CosmicRays(sigclip=4.0, objlim=3.0, readnoise=5.0, satlevel=satlevel, niter=niter,
                        sepmed=bool(rng.random() < 0.5), background=background, variance=variance)
    inputs = [x] + [bkg] * background + [var] * variance
    expected = astroscrappy.detect_cosmics(
        x.astype(np.float32), inbkg=bkg.astype(np.float32) if background else None,
        invar=var.astype(np.float32) if variance else None, sigclip=4.0, objlim=3.0, readnoise=5.0,
        satlevel=satlevel, niter=niter, sepmed=op.sepmed)[0].astype(np.uint8)
    return Case(op, inputs, expected, reference=cosmic_rays_reference if niter > 1 else None)


@spec("CosmicRays")
def _cosmic_rays(rng, ndim, side):
    """One iteration: a stencil (MAP) of radius lacosmic_reach(1), on tiles."""
    return _cosmic_rays_case(rng, 1)


@spec("CosmicRays[niter=2]")
def _cosmic_rays_2(rng, ndim, side):
    """Two iterations: whole images, composite (global payloads near fully flagged windows)."""
    return _cosmic_rays_case(rng, 2)


def repair_reference(case: Case) -> list[np.ndarray]:
    op, (merged, cover) = case.op, case.inputs
    flags = op.flags(merged, cover).reshape(-1)
    w = op.window_radius
    return [window_relation(merged.shape, np.where(flags, w + 1, 1)),
            window_relation(merged.shape, np.where(flags, w, 0))]


@spec("RepairCosmics")
def _repair(rng, ndim, side):
    shape = (int(rng.integers(4, 10)), int(rng.integers(4, 10)))
    merged = sky(rng, shape, hits=2) - 100.0
    cover = rng.choice([0, 1, 2], size=shape, p=[0.1, 0.3, 0.6])
    op = ops.RepairCosmics(sigma=5.0, nsigma=float(rng.uniform(4, 10)), window=int(rng.integers(0, 3)))
    flags = op.flags(merged, cover)
    expected = merged.astype(np.float64).copy()
    w = op.window_radius
    for r, c in zip(*np.nonzero(flags)):  # the median of the unflagged pixels of the window
        box = (slice(max(r - w, 0), r + w + 1), slice(max(c - w, 0), c + w + 1))
        good = merged[box][~flags[box]]
        expected[r, c] = np.median(good) if good.size else 0.0
    return Case(op, [merged, cover], expected, reference=repair_reference)


def stars_reference(case: Case) -> list[np.ndarray]:
    """A pixel above the threshold: its 8-connected group and the ring around it; else itself."""
    x, op = case.inputs[0], case.op
    above = x > op.threshold
    cells = flat_cells(x.shape)
    rel = np.zeros((x.size, x.size), bool)
    index = {c: k for k, c in enumerate(cells)}
    for c in cells:
        if not above[c]:
            rel[index[c], index[c]] = True
            continue
        seen, todo = {c}, [c]
        while todo:
            here = todo.pop()
            for d in itertools.product((-1, 0, 1), repeat=2):
                near = (here[0] + d[0], here[1] + d[1])
                if 0 <= near[0] < x.shape[0] and 0 <= near[1] < x.shape[1] and above[near] and near not in seen:
                    seen.add(near)
                    todo.append(near)
        for g in seen:
            for d in itertools.product((-1, 0, 1), repeat=2):
                near = (g[0] + d[0], g[1] + d[1])
                if 0 <= near[0] < x.shape[0] and 0 <= near[1] < x.shape[1]:
                    rel[index[c], index[near]] = True
    return [rel]


@spec("DetectStars")
def _stars(rng, ndim, side):
    shape = (int(rng.integers(5, 12)), int(rng.integers(5, 12)))
    yy, xx = np.mgrid[0:shape[0], 0:shape[1]]
    x = rng.normal(0.0, 1.0, shape)
    for _ in range(int(rng.integers(1, 4))):
        cy, cx = rng.uniform(0, shape[0]), rng.uniform(0, shape[1])
        x += rng.uniform(6, 20) * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / rng.uniform(0.5, 3.0))
    op = ops.DetectStars(threshold=float(rng.uniform(3, 6)), minarea=int(rng.integers(1, 5)))
    groups, _ = ndimage.label(x > op.threshold, np.ones((3, 3), bool))
    areas = np.bincount(groups.reshape(-1))
    first = np.full(len(areas), x.size)
    np.minimum.at(first, groups.reshape(-1), np.arange(x.size))
    star = (groups > 0) & (areas[groups] >= op.minarea)
    expected = np.where(star, first[groups] + 1, 0)
    return Case(op, [x], expected, sentinel=[0.0], reference=stars_reference)


# -- indexing fixed when a function was traced on values, and the coarse step ------------------
@spec("Gather")
def _gather(rng, ndim, side):
    x = floats(rng, rand_shape(rng, ndim, side))
    keep = rng.random(x.shape) < 0.6
    keep.flat[0] = True
    source = np.arange(x.size).reshape(x.shape)[keep]
    # x[mask] as traced (the mask's bits) or as positions (held as bits when those are smaller)
    op = ops.Gather(mask=keep) if rng.random() < 0.5 else ops.Gather(source)
    return Case(op, [x], x[keep], tight=True)


@pytest.mark.parametrize("axis", [0, 1, (0, 2), (1, 2)])
def test_a_reduction_maps_a_few_cells_by_their_pairs_as_its_mask_form_does(axis):
    op = ops.Mean(axis)
    op = op.bound([(6, 7, 5)], op.infer_output_shape(((6, 7, 5),)))
    every = np.argwhere(np.ones(op.output_shape, bool))
    for cells in (every[[0, 3]], every):  # a few cells (their pairs) and every cell (the mask)
        mask = np.zeros(op.output_shape, bool)
        mask[tuple(cells.T)] = True
        np.testing.assert_array_equal(op.map_b(cells, 0), np.argwhere(op.map_b_mask(mask, 0)))


@given(seed=st.integers(0, 2**16), density=st.floats(0.05, 1.0))
@settings(max_examples=25, deadline=None)
def test_gather_mask_forms_are_the_union_of_its_cells_for_every_guide(seed, density):
    # a boolean mask (src guide), an integer index (out guide) and a summary (one): the mask
    # forms a dense frontier takes agree with map_b / map_f cell by cell
    rng = np.random.default_rng(seed)
    flat = np.arange(20).reshape(4, 5)
    keep = rng.random((4, 5)) < 0.6
    keep.flat[0] = True
    index = rng.integers(0, 5, 3)
    cases = [(ops.Gather(flat[keep], ["src:0:2"]), [(4, 5), (4, 5)]),
             (ops.Gather(flat[:, index], ["out:1:1"]), [(4, 5), (3,)]),
             (ops.Gather(flat[keep], ["one"]), [(4, 5), (2,)])]
    for gather, shapes in cases:
        op = gather.bound(shapes, gather._source.shape)
        out_cells = to_coords(np.arange(op._source.size), op.output_shape)
        pick = rng.random(len(out_cells)) < density
        for i, shape in enumerate(shapes):
            expect = np.zeros(shape, bool)
            expect.reshape(-1)[to_ids(op.map_b(out_cells[pick], i), shape)] = True
            assert np.array_equal(op.map_b_mask(pick.reshape(op.output_shape), i), expect)
        hit = rng.random(shapes[0]) < density
        expect = np.zeros(op.output_shape, bool)
        expect.reshape(-1)[to_ids(op.map_f(np.argwhere(hit), 0), op.output_shape)] = True
        assert np.array_equal(op.map_f_mask(hit, 0), expect)


@spec("Scatter")
def _scatter(rng, ndim, side):
    x = floats(rng, rand_shape(rng, ndim, side))
    written = rng.random(x.shape) < 0.5
    v = floats(rng, (int(rng.integers(1, 6)),))
    source = rng.integers(0, len(v), size=int(written.sum()))
    expected = x.copy()
    expected[written] = v[source]
    return Case(ops.Scatter(written, source), [x, v], expected, tight=True)


@spec("Coordinates")
def _coordinates(rng, ndim, side):
    x = floats(rng, rand_shape(rng, ndim, side))
    source = np.flatnonzero(x > 0)
    axis = int(rng.integers(0, x.ndim))
    return Case(ops.Coordinates(source, x.shape, axis), [x], np.nonzero(x > 0)[axis])


@spec("Opaque")
def _opaque(rng, ndim, side):
    x = floats(rng, rand_shape(rng, ndim, side))
    return Case(ops.Opaque(np.sort, (x.size,), "a test", nin=1), [x.reshape(-1)], np.sort(x.reshape(-1)))


EXPORTED = sorted(n for n in ops.__all__ if isinstance(getattr(ops, n), type)
                  and issubclass(getattr(ops, n), sz.Operator)
                  and not getattr(ops, n).__name__.endswith(("Operator", "Reduction")))
NAMES = sorted(SPECS)


def test_every_exported_operator_has_a_spec():
    assert sorted(set(EXPORTED) - set(NAMES)) == []


# =====================================================================================
# Helpers: bind and run an operator as the runtime does, lineage as relations
# =====================================================================================
def build(name: str, seed: int, ndim: int, side: int) -> Case:
    case = SPECS[name](np.random.default_rng(seed), ndim, side)
    case.op = bind(case.op, case.inputs)
    return case


def bind(op, inputs):
    """A copy of ``op`` bound to the shapes of ``inputs`` (a value-dependent output shape
    is learnt by running it once, as the runtime does)."""
    op = copy.copy(op)
    op.input_shapes = tuple(tuple(np.shape(x)) for x in inputs)
    op.output_shape = op.infer_output_shape(op.input_shapes)
    if op.output_shape is None:
        boxes = tuple(full_box(s) for s in op.input_shapes)
        op.output_shape = np.shape(op.run(Context("op", (), None, boxes, op.input_shapes, None), *inputs))
    return op


def execute(op, inputs, modes=frozenset(), tile_shape=None):
    """Run a bound operator tile by tile, as `subzero.worker` does (input boxes, halos,
    trimming); returns (output, FULL pairs, payload pairs) in global cell ids."""
    tiling = op.effective_tiling()
    out, fulls, pays = None, [], []
    tiles = tile_grid(op.output_shape, tiling.split_axes(op), tile_shape)

    def read(i, box):
        return np.asarray(inputs[i])[box_slices(box)]

    if op.two_pass:  # the first pass over every tile, combined, as the executor does
        summaries = []
        for tile in tiles:
            in_boxes = tuple(tiling.input_box(op, tile.box, i) for i in range(len(inputs)))
            ctx = Context("op", (), tile.box, in_boxes, op.input_shapes, op.output_shape, reader=read)
            summaries.append(op.prepare(ctx, *[read(i, b) for i, b in enumerate(in_boxes)]))
        op.combine(summaries)
    for tile in tiles:
        in_boxes = tuple(tiling.input_box(op, tile.box, i) for i in range(len(inputs)))
        result_box = tiling.result_box(op, tile.box, in_boxes)
        ctx = Context("op", frozenset(modes) & op.supported_modes(), tile.box, in_boxes, op.input_shapes,
                      op.output_shape, reader=read)
        ctx.set_result_box(result_box)
        with np.errstate(all="ignore"):
            got = np.asarray(op.run(ctx, *[np.asarray(x)[box_slices(b)] for x, b in zip(inputs, in_boxes)]))
        assert got.shape == tuple(hi - lo for lo, hi in result_box)
        if out is None:
            out = np.empty(op.output_shape, got.dtype)
        out[box_slices(tile.box)] = got[box_slices(tile.box, result_box)]
        fulls.append(ctx.full_pairs(result_box))
        pays.append(ctx.payload_pairs(result_box))
    if hasattr(op, "attach_output"):  # as a run does: Label's payloads are resolved from its output
        op.attach_output(lambda box, out=out: np.asarray(out)[box_slices(box)])
    return out, FullPairs.concat(fulls, len(inputs)), PayloadPairs.concat(pays)


def size(shape) -> int:
    return int(np.prod(shape))


def full_relation(pairs: FullPairs, i: int, n_out: int, n_in: int) -> np.ndarray:
    """The (n_out, n_in) relation of region pairs: o ~ c iff some pair holds both."""
    out_side = np.zeros((pairs.n_pairs, n_out))
    out_side[owners(pairs.out_ptr), pairs.out_ids] = 1
    in_side = np.zeros((pairs.n_pairs, n_in))
    in_side[owners(pairs.in_ptr[i]), pairs.in_ids[i]] = 1
    return out_side.T @ in_side > 0


def pairs_relation(op, owner, coords, cells, i) -> np.ndarray:
    rel = np.zeros((size(op.output_shape), size(op.input_shapes[i])), bool)
    if len(owner):
        rel[to_ids(cells[np.asarray(owner)], op.output_shape), to_ids(coords, op.input_shapes[i])] = True
    return rel


def all_cells(shape) -> np.ndarray:
    return np.argwhere(np.ones(shape, bool)).astype(np.int64)


def ids_of(coords, shape) -> np.ndarray:
    coords = np.asarray(coords, np.int64).reshape(-1, len(shape))
    assert np.all((coords >= 0) & (coords < np.array(shape))), "lineage cell outside the array"
    return to_ids(coords, shape)


def per_cell_map_relation(op, i) -> np.ndarray:
    """Brute force: ``map_b`` called on one output cell at a time."""
    rel = np.zeros((size(op.output_shape), size(op.input_shapes[i])), bool)
    for k, cell in enumerate(all_cells(op.output_shape)):
        rel[k, ids_of(op.map_b(cell[None], i), op.input_shapes[i])] = True
    return rel


def reference_relations(case: Case) -> list[np.ndarray]:
    """The brute-force lineage of a case, one relation per input."""
    op = case.op
    if case.reference is not None:
        return case.reference(case)
    if Mode.MAP in op.supported_modes():
        return [per_cell_map_relation(op, i) for i in range(len(case.inputs))]
    return [np.ones((size(op.output_shape), size(s)), bool) for s in op.input_shapes]  # all-to-all


def fresh_like(x: np.ndarray, rng) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype == bool:
        return rng.random(x.shape) < 0.5
    if x.dtype.kind in "iu":
        return rng.integers(0, 4, x.shape).astype(x.dtype)
    return floats(rng, x.shape) * 7 + 11


def same_values(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind in "fc" or b.dtype.kind in "fc":
        return a.shape == b.shape and bool(np.all(np.isclose(a, b, rtol=1e-9, atol=1e-12, equal_nan=True)))
    return bool(np.array_equal(a, b))


def kind(name: str) -> str:
    op = SPECS[name](np.random.default_rng(0), 2, 3).op
    modes = op.supported_modes()
    return "map" if Mode.MAP in modes else ("value" if modes - {Mode.BLACKBOX} else "blackbox")


#: a number that names its component (identity reading): not a function of the cell alone
IDENTITY_READINGS = ["Relabel"]
MAPPING = [n for n in NAMES if kind(n) == "map" and n not in IDENTITY_READINGS]
VALUE = [n for n in NAMES if kind(n) == "value"]
BLACKBOX = [n for n in NAMES if kind(n) == "blackbox"]
CASE_ARGS = dict(seed=st.integers(0, 2**32 - 1), ndim=st.integers(1, 3), side=st.integers(1, 6))


# =====================================================================================
# Values: tiled runs equal whole runs equal the numpy / scipy reference
# =====================================================================================
@pytest.mark.parametrize("name", NAMES)
@examples(40)
@given(tile=st.integers(1, 4), **CASE_ARGS)
def test_output_matches_reference_tiled_and_whole(name, tile, seed, ndim, side):
    case = build(name, seed, ndim, side)
    for tile_shape in (None, tile):
        out = execute(case.op, case.inputs, tile_shape=tile_shape)[0]
        assert same_values(out, case.expected), f"{name} tile_shape={tile_shape}"
        assert out.shape == case.op.output_shape == case.expected.shape


# =====================================================================================
# Mapping operators: per-cell brute force, pairs, masks, forward = inverted backward
# =====================================================================================
@pytest.mark.parametrize("name", MAPPING)
@examples(50)
@given(data=st.data(), **CASE_ARGS)
def test_mapping_functions_agree_with_per_cell_brute_force(name, data, seed, ndim, side):
    case = build(name, seed, ndim, side)
    op, out_cells = case.op, all_cells(case.op.output_shape)
    rng = np.random.default_rng(seed)
    for i, shape in enumerate(op.input_shapes):
        rel = per_cell_map_relation(op, i)
        # map_b_pairs on every cell at once is the per-cell loop
        owner, coords = op.map_b_pairs(out_cells, i)
        ids_of(coords, shape)
        assert np.array_equal(pairs_relation(op, owner, coords, out_cells, i), rel)
        # map_b on a random set is the union; so is map_b_mask
        pick = rng.random(len(out_cells)) < data.draw(st.floats(0.05, 1.0))
        expect_in = rel[pick].any(axis=0).reshape(shape)
        got = np.zeros(shape, bool)
        got.reshape(-1)[ids_of(op.map_b(out_cells[pick], i), shape)] = True
        assert np.array_equal(got, expect_in)
        masked = op.map_b_mask(pick.reshape(op.output_shape), i)
        if masked is not None:
            assert np.array_equal(np.asarray(masked, bool), expect_in)
        # map_f is the inversion of map_b: o in map_f({c}) iff c in map_b({o})
        in_cells = all_cells(shape)
        hit = rng.random(len(in_cells)) < data.draw(st.floats(0.05, 1.0))
        expect_out = rel[:, hit].any(axis=1).reshape(op.output_shape)
        got = np.zeros(op.output_shape, bool)
        got.reshape(-1)[ids_of(op.map_f(in_cells[hit], i), op.output_shape)] = True
        assert np.array_equal(got, expect_out)
        masked = op.map_f_mask(hit.reshape(shape), i)
        if masked is not None:
            assert np.array_equal(np.asarray(masked, bool), expect_out)
        if op.entire_array_safe:  # every output cell reads something, every input cell is read
            assert rel.any(axis=1).all() and rel.any(axis=0).all()


def perturbed(x: np.ndarray, k: int) -> np.ndarray:
    y = np.array(x, copy=True)
    flat = y.reshape(-1)
    if y.dtype == bool:
        flat[k] = not flat[k]
    elif y.dtype.kind in "iu":
        flat[k] += 1
    else:
        flat[k] = flat[k] + (abs(flat[k]) + 1.0) * 7.3
    return y


@pytest.mark.parametrize("name", MAPPING)
@examples(25)
@given(seed=st.integers(0, 2**32 - 1), ndim=st.integers(1, 3), side=st.integers(1, 4))
def test_mapping_lineage_is_closed_under_perturbation(name, seed, ndim, side):
    """Changing an input cell outside map_b(o) never changes output o (and, for operators
    that copy or add cells, changing one inside always does)."""
    case = build(name, seed, ndim, side)
    op = case.op
    base = execute(op, case.inputs)[0]
    for i, x in enumerate(case.inputs):
        rel = per_cell_map_relation(op, i)
        for k in range(np.size(x)):
            inputs = list(case.inputs)
            inputs[i] = perturbed(x, k)
            # a tolerance: running sums (uniform_filter) spread rounding errors along a line
            changed = ~np.isclose(execute(op, inputs)[0], base, rtol=1e-9, atol=1e-12, equal_nan=True).reshape(-1)
            assert not np.any(changed & ~rel[:, k]), f"input {i} cell {k} changed outputs outside its lineage"
            if case.tight:
                assert np.array_equal(changed, rel[:, k]), f"input {i} cell {k}: lineage names unread cells"


# =====================================================================================
# Value-dependent operators: what they lwrite against a python reference
# =====================================================================================
@pytest.mark.parametrize("name", VALUE)
@examples(50)
@given(**CASE_ARGS)
def test_value_dependent_lineage_matches_python_reference(name, seed, ndim, side):
    case = build(name, seed, ndim, side)
    op = case.op
    reference = case.reference(case)
    modes = op.supported_modes()
    out, full, _ = execute(op, case.inputs, {Mode.FULL})
    assert same_values(out, case.expected)
    n_out = size(op.output_shape)
    for i, rel in enumerate(reference):
        assert np.array_equal(full_relation(full, i, n_out, rel.shape[1]), rel), f"FULL lineage of input {i}"
    for mode in modes & {Mode.PAY, Mode.COMP}:
        _, _, pay = execute(op, case.inputs, {mode})
        expanded = expand_payloads(op, pay)
        cells_with_payload = np.zeros(n_out, bool)
        cells_with_payload[pay.out_ids] = True
        assert mode is Mode.COMP or cells_with_payload.all(), "PAY must cover every output cell"
        for i, rel in enumerate(reference):
            got = full_relation(expanded, i, n_out, rel.shape[1])
            if mode is Mode.COMP:  # the mapping default answers the cells without a payload
                rest = all_cells(op.output_shape)[~cells_with_payload]
                got |= pairs_relation(op, *op.map_b_pairs(rest, i), rest, i)
            assert np.array_equal(got, rel), f"{mode} lineage of input {i}"
            for payload, ids in pay.by_payload():  # map_p is the union of map_p_pairs
                cells = to_coords(ids, op.output_shape)
                union = np.unique(ids_of(op.map_p(cells, payload, i), op.input_shapes[i]))
                assert np.array_equal(union, np.unique(ids_of(op.map_p_pairs(cells, payload, i)[1],
                                                              op.input_shapes[i])))
    if op.entire_array_safe:
        assert all(rel.any(axis=1).all() and rel.any(axis=0).all() for rel in reference)


# =====================================================================================
# The perturbation oracle: no single input cell changes an output outside its lineage
# =====================================================================================
#: readings that are not dependence by design (docs/guide/lineage.md, "What lineage means")
NOT_DEPENDENCE = ["Histogram[members]", "Relabel", "LabeledStatistic[members]"]  # Relabel: the component reading


@pytest.mark.parametrize("name", [n for n in NAMES if n not in NOT_DEPENDENCE + ["Label"]])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_perturbation_oracle_finds_no_miss(name, seed):
    """Every cell of a small input (a sample of 40) perturbed six ways, re-run plainly; every
    changed output must be in the forward lineage of every stored strategy, Map and
    BlackBox (tiles of 2: tiles straddle every halo), and the cell in the backward one."""
    case = build(name, seed, ndim=1 + seed % 3, side=5)
    stored, using = strategies_for(case.op)
    wide = name.startswith(("CosmicRays", "RepairCosmics", "DetectStars"))  # library calls on images
    report = check_operator(case.op, case.inputs, tile_shape=4 if wide else 2, strategies=stored, using=using,
                            cells=24 if wide else 40, backward=16, seed=seed)
    assert report.ok, str(report)
    assert report.trials > 0


def test_histogram_members_reading_is_not_dependence():
    """The oracle holds the members reading to nothing: a cell moved into a bin changes it."""
    x = np.array([0.0, 1.0, 2.0, 3.0])
    assert check_operator(ops.Histogram(2, range=(0.0, 4.0)), [x]).ok
    report = check_operator(ops.Histogram(2, range=(0.0, 4.0), lineage="members"), [x])
    assert not report.ok and report.misses[0].direction == "forward"


def test_label_lineage_holds_the_component_boundary():
    report = check_operator(ops.Label(), [np.array([[0.0, 1.0], [1.0, 0.0]])])
    assert report.ok, str(report)


def test_crd_unflagged_pixel_depends_on_its_detection_window(tmp_path):
    """Issue 12, cause 3: the centre of a bright 2x2 block is clean, but zeroing a block
    pixel flags it; the clean pixel's lineage is its 3x3 window, not itself."""
    x = np.zeros((5, 5))
    x[[1, 1, 2, 2, 3], [1, 2, 1, 2, 3]] = 1000
    crd = ops.CosmicRayDetect()
    assert evaluate_operator(crd, [x])[2, 2] == 0
    y = x.copy()
    y[1, 1] = 0
    assert evaluate_operator(crd, [y])[2, 2] == 1
    wf = sz.Workflow("crd")
    wf.add(crd, wf.input("x"), name="crd")
    run = wf.run({"x": x}, store=tmp_path / "run", strategies={"crd": ["CompOne", "FullOne", "PayMany"]},
                 executor="local", tile_shape=2)
    for strategy in ("CompOne", "FullOne", "PayMany", "BlackBox"):
        got = run.backward("crd", [(2, 2)], to="x", using={"crd": strategy})
        assert got.tolist() == [[r, c] for r in (1, 2, 3) for c in (1, 2, 3)], strategy
    assert check_operator(crd, [x], tile_shape=2, strategies=["CompOne"], using=["CompOne", "BlackBox"]).ok


ENTIRE_ARRAY = [
    (ops.Add(), [(2, 3), (3,)], True),
    (ops.Concatenate(), [(2, 3), (1, 3)], False),  # SubZero's example
    (ops.Stack(), [(2, 3), (2, 3)], False),
    (ops.Slice(step=2), [(4,)], False),
    (ops.Slice(step=-1), [(4,)], True),
    (ops.Pad(1), [(3,)], False),
    (ops.Pad(1, "reflect"), [(3,)], True),
    (ops.Shift(1, "nearest"), [(3,)], False),
    (ops.Shift(1, "wrap"), [(3,)], True),
    (ops.Convolve([1.0, 2.0, 1.0]), [(5,)], True),
    (ops.Convolve([1.0, 0.0, 1.0]), [(5,)], False),
    (ops.Sobel(), [(4, 4)], False),
    (ops.Downsample(2), [(5,)], True),
    (ops.Sum(axis=1), [(2, 3)], True),
    (ops.MatMul(), [(2, 3), (3, 4)], True),
    (ops.Inverse(), [(3, 3)], True),
    (ops.GlobalMean(), [(3, 3)], True),
    (ops.Sort(), [(3, 3)], True),
    (ops.Label(), [(3, 3)], True),
    (ops.Histogram(), [(3, 3)], True),
    (ops.Histogram(lineage="members"), [(3, 3)], False),
    (BinaryFillHoles(), [(3, 3)], True),
    (LabeledStatistic("sum_labels", [1, 2]), [(3, 3), (3, 3)], False),
    (LabeledStatistic("median", labels=False), [(3, 3)], True),
    (ops.CosmicRayDetect(), [(3, 3)], True),
    (ops.Filter(partial(slices_above, axis=0, t=0.0)), [(3, 3)], False),
    (ops.Compress(), [(3,), (3, 3)], False),
]


@pytest.mark.parametrize("op, shapes, safe", ENTIRE_ARRAY, ids=[type(e[0]).__name__ for e in ENTIRE_ARRAY])
def test_entire_array_safety_is_declared_where_it_holds(op, shapes, safe):
    op = copy.copy(op)
    op.input_shapes = tuple(shapes)
    assert op.entire_array_safe is safe


def test_payloads_are_small():
    """A Label tile's payload is its component table: 16 bytes and, per component, its id and
    the box of its cells and ring (five words in 2-D), whatever the components' sizes; a
    selection's one row index."""
    case = build("Label", 3, 2, 6)
    _, _, pay = execute(case.op, case.inputs, {Mode.PAY})
    components = int(np.asarray(case.op.run(None, *case.inputs)).max())
    assert max(map(len, pay.payloads)) <= 16 + 8 * components * (1 + 2 * 2)
    for name in ("Filter", "Compress"):
        case = build(name, 3, 2, 6)
        _, _, pay = execute(case.op, case.inputs, {Mode.PAY})
        assert {len(p) for p in pay.payloads} == {8}


ENVELOPED = [n for n in NAMES if type(SPECS[n](np.random.default_rng(0), 2, 4).op).map_p_envelope
             is not sz.Operator.map_p_envelope]


@pytest.mark.parametrize("name", ENVELOPED)
@examples(25)
@given(**CASE_ARGS)
def test_vectorized_payload_envelopes_equal_the_default(name, seed, ndim, side):
    """An operator's own ``map_p_envelope`` gives the boxes the default gives from ``map_p``:
    with the pairs' cells, and with none (a box that holds the lineage whatever the cells)."""
    case = build(name, seed, ndim, side)
    for mode in sorted(case.op.supported_modes() & {Mode.PAY, Mode.COMP}, key=str):
        pay = execute(case.op, case.inputs, {mode})[2]
        payloads = [p for p, _ in pay.by_payload()]
        cells = [to_coords(ids, case.op.output_shape) for _, ids in pay.by_payload()]
        for i in range(len(case.inputs)):
            lo, hi = case.op.map_p_envelope(payloads, i, cells=cells)
            base_lo, base_hi = sz.Operator.map_p_envelope(case.op, payloads, i, cells=cells)
            assert np.array_equal(lo, base_lo) and np.array_equal(hi, base_hi), mode
            lo, hi = case.op.map_p_envelope(payloads, i)
            assert np.all(lo <= base_lo) and np.all(hi >= base_hi), mode


# =====================================================================================
# Re-running on only the backward lineage reproduces the value
# =====================================================================================
@pytest.mark.parametrize("name", [n for n in NAMES if n not in BLACKBOX + IDENTITY_READINGS])
@examples(30)
@given(**CASE_ARGS)
def test_rerun_on_backward_lineage_reproduces_the_value(name, seed, ndim, side):
    case = build(name, seed, ndim, side)
    op, rng = case.op, np.random.default_rng(seed + 1)
    relations = reference_relations(case)
    out_cells = all_cells(op.output_shape)
    for o in rng.choice(len(out_cells), size=min(4, len(out_cells)), replace=False):
        inputs = []
        for i, (x, rel) in enumerate(zip(case.inputs, relations)):
            keep = rel[o].reshape(np.shape(x))
            value = None if case.sentinel is None else case.sentinel[i]
            other = fresh_like(x, rng) if value is None else np.full(np.shape(x), value, dtype=np.result_type(x, value))
            inputs.append(np.where(keep, x, other))
        rerun = bind(case.op, inputs)
        out = execute(rerun, inputs)[0]
        cell = tuple(out_cells[o])
        if case.moves_along is not None:
            cell = cell[: case.moves_along] + (0,) + cell[case.moves_along + 1:]
        assert same_values(out[cell], case.expected[tuple(out_cells[o])]), f"output cell {tuple(out_cells[o])}"


# =====================================================================================
# Through the real runtime: every strategy answers like the brute-force reference
# =====================================================================================
def strategies_for(op) -> tuple[list[str], list[str]]:
    """(the strategies to store, the ones to query with: those, Map and BlackBox)."""
    modes = op.supported_modes()
    if modes == {Mode.BLACKBOX}:
        return ["BlackBox"], ["BlackBox"]
    stored = ["FullOne", "FullMany/forward"]
    stored += ["PayOne", "PayMany"] if Mode.PAY in modes else []
    stored += ["CompOne", "CompMany"] if Mode.COMP in modes else []
    using = [sz.Strategy.parse(s).name for s in stored] + ["BlackBox"]
    return stored, using + (["Map"] if Mode.MAP in modes else [])


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_runtime_queries_match_reference(name, seed, tmp_path):
    case = build(name, seed, ndim=1 + seed % 3, side=6)
    rng = np.random.default_rng(seed)
    stored, using = strategies_for(case.op)
    wf = sz.Workflow(name)
    node = wf.add(case.op, *[wf.input(f"x{i}") for i in range(len(case.inputs))], name="op")
    run = wf.run({f"x{i}": x for i, x in enumerate(case.inputs)}, store=tmp_path / "run",
                 strategies={"op": stored}, executor="local", tile_shape=3)
    assert same_values(run.output(node), case.expected)
    op = node.operator
    relations = reference_relations(case)
    out_shape = tuple(op.output_shape)
    for i, rel in enumerate(relations):
        in_shape = tuple(op.input_shapes[i])
        backward = [rng.random(size(out_shape)) < p for p in (0.0, 0.2, 1.0)]
        backward[0][int(rng.integers(size(out_shape)))] = True
        forward = [rng.random(size(in_shape)) < p for p in (0.0, 0.2, 1.0)]
        forward[0][int(rng.integers(size(in_shape)))] = True
        for strategy in using:
            for pick in backward:
                got = run.backward_mask("op", pick.reshape(out_shape), to=f"x{i}", using={"op": strategy})
                assert np.array_equal(got.reshape(-1), rel[pick].any(axis=0)), f"backward with {strategy}"
            for hit in forward:
                got = run.forward_mask(f"x{i}", hit.reshape(in_shape), to="op", using={"op": strategy})
                assert np.array_equal(got.reshape(-1), rel[:, hit].any(axis=1)), f"forward with {strategy}"


@pytest.mark.parametrize("name", ["Apply", "Filter", "Label", "Pad"])
def test_reopened_run_answers_like_the_original(name, tmp_path):
    """Operators (with user functions) pickle into the store and map from there."""
    case = build(name, 4, 2, 6)
    stored, using = strategies_for(case.op)
    wf = sz.Workflow(name)
    wf.add(case.op, *[wf.input(f"x{i}") for i in range(len(case.inputs))], name="op")
    run = wf.run({f"x{i}": x for i, x in enumerate(case.inputs)}, store=tmp_path / "run",
                 strategies={"op": stored}, executor="local", tile_shape=3)
    again = sz.open_run(tmp_path / "run")
    cells = all_cells(case.op.output_shape)[::3]
    for strategy in using:
        assert np.array_equal(again.backward("op", cells, to="x0", using={"op": strategy}),
                              run.backward("op", cells, to="x0", using={"op": strategy}))


# =====================================================================================
# No python loop over cells in the lineage functions
# =====================================================================================
SUBZERO_DIR = os.path.dirname(sz.__file__)


def line_events(fn) -> int:
    """How many lines of subzero's own code run during ``fn()``."""
    count = 0

    def tracer(frame, event, arg):
        nonlocal count
        if not frame.f_code.co_filename.startswith(SUBZERO_DIR):
            return None
        if event == "line":
            count += 1
        return tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(previous)
    return count


def lineage_calls(case: Case, n: int) -> dict[str, Callable[[], object]]:
    """The lineage functions of a case's operator, called on ``n`` cells (or all of them)."""
    op = case.op
    out_cells, calls = all_cells(op.output_shape), {}
    for i, shape in enumerate(op.input_shapes):
        cells, in_cells = out_cells[:n], all_cells(shape)[:n]
        mask, in_mask = np.zeros(size(op.output_shape), bool), np.zeros(size(shape), bool)
        mask[:n], in_mask[:n] = True, True
        if Mode.MAP in op.supported_modes() or Mode.COMP in op.supported_modes():
            calls |= {
                f"map_b[{i}]": partial(op.map_b, cells, i), f"map_f[{i}]": partial(op.map_f, in_cells, i),
                f"map_b_pairs[{i}]": partial(op.map_b_pairs, cells, i),
                f"map_b_mask[{i}]": partial(op.map_b_mask, mask.reshape(op.output_shape), i),
                f"map_f_mask[{i}]": partial(op.map_f_mask, in_mask.reshape(shape), i),
            }
        if Mode.PAY in op.supported_modes():
            _, _, pay = execute(op, case.inputs, {Mode.PAY})
            payload = max(pay.by_payload(), key=lambda group: len(group[1]))[0]
            calls |= {f"map_p[{i}]": partial(op.map_p, cells, payload, i),
                      f"map_p_pairs[{i}]": partial(op.map_p_pairs, cells, payload, i)}
    return calls


@pytest.mark.parametrize("name", [n for n in NAMES if n not in BLACKBOX])
def test_lineage_functions_do_not_loop_over_cells(name):
    case = build(name, 5, 2, 8)
    few, many = lineage_calls(case, 2), lineage_calls(case, 10**9)
    for key in few:
        few[key]()  # what an operator makes once per shape (its index maps) is made before counting
        assert line_events(many[key]) - line_events(few[key]) <= 8, f"{name}.{key} loops over cells"


# =====================================================================================
# Argument and shape errors
# =====================================================================================
BAD_SHAPES = [
    (ops.Add(), [(2, 3), (4,)], "do not broadcast"),
    (ops.Apply(np.add), [(3,)], "nin=2"),
    (ops.Transpose((0, 0)), [(2, 3)], "not a permutation"),
    (ops.Reshape((4, -1)), [(3, 3)], "cannot reshape"),
    (ops.Reshape((-1, -1)), [(3, 3)], "at most one -1"),
    (ops.Slice(step=0), [(3,)], "step must be non-zero"),
    (ops.Slice(start=(1, 2, 3)), [(4, 4)], "start must be None, an int, or one"),
    (ops.Concatenate(axis=1), [(2, 3), (3, 3)], "except axis=1"),
    (ops.Concatenate(axis=2), [(2, 3)], r"axis=2 is out of range"),
    (ops.Stack(), [(2, 3), (2, 4)], "same shape"),
    (ops.Flip(axis=(0, 0)), [(2, 3)], "must not repeat"),
    (ops.Pad(-1), [(3,)], "non-negative"),
    (ops.Pad([[1, 2, 3]]), [(3, 3)], r"\(before, after\) pair"),
    (ops.Shift((1, 2, 3)), [(3, 3)], "shift needs one entry per axis"),
    (ops.Tile((1, 2, 3)), [(3, 3)], "more entries"),
    (ops.Convolve(np.ones((3, 3))), [(5,)], "kernel is 2-D"),
    (ops.GaussianFilter((1.0, 2.0)), [(5,)], "sigma needs one entry per axis"),
    (ops.GaussianFilter(-1.0), [(5,)], "sigma must be >= 0"),
    (ops.UniformFilter(0), [(5,)], "size must be >= 1"),
    (ops.MedianFilter(footprint=np.ones((2, 2))), [(5,)], "footprint is 2-D"),
    (ops.Sobel(axis=3), [(3, 3)], "axis=3 is out of range"),
    (ops.BinaryErosion(np.ones(3)), [(3, 3)], "structure is 1-D"),
    (ops.Downsample(0), [(4,)], "factor must be >= 1"),
    (ops.Upsample((2, 2, 2)), [(3, 3)], "factor needs one entry per axis"),
    (ops.MatMul(), [(2, 3), (4, 5)], "cannot multiply"),
    (ops.Dot(), [(2, 3), (4,)], "not aligned"),
    (ops.Inverse(), [(2, 3)], "square matrix"),
    (ops.Sum(axis=2), [(2, 3)], "axis=2 is out of range"),
    (ops.Mean(axis=(0, 0)), [(2, 3)], "must not repeat"),
    (ops.GlobalMean(), [()], "at least 1 axis"),
    (ops.Sort(axis=2), [(3, 3)], "axis=2 is out of range"),
    (ops.Label(np.ones((3, 3))), [(5,)], "structure is 2-D"),
    (ops.Compress(), [(4,), (3, 2)], "condition has shape"),
    (ops.Statistic("median", axis=2), [(2, 3)], "axis=2 is out of range"),
    (ops.Diff(3), [(3,)], "leaves no cell"),
    (ops.SequenceConvolve(), [(3, 3), (3,)], "two non-empty 1-D operands"),
    (ops.Take([5], 0), [(3,)], "out of bounds"),
    (ops.TakeAlong(np.zeros(2, int)), [(3, 3)], "same number of axes"),
    (ops.Einsum("ij,jk->ik"), [(2, 3), (4, 5)], "must have the same length"),
    (ops.Lookup(np.isin, (False, True), (3,)), [(4,), (2,)], "does not broadcast"),
]


@pytest.mark.parametrize("op, shapes, message", BAD_SHAPES, ids=[type(b[0]).__name__ for b in BAD_SHAPES])
def test_bad_shapes_raise_workflow_error(op, shapes, message):
    op = copy.copy(op)
    op.input_shapes = tuple(shapes)
    with pytest.raises(sz.WorkflowError, match=message):
        op.infer_output_shape(tuple(shapes))


BAD_ARGS = [
    (lambda: ops.Clip(), "give lo, hi or both"),
    (lambda: ops.Threshold(1.0, compare="=>"), "compare must be one of"),
    (lambda: ops.Apply(3), "fn must be a callable"),
    (lambda: ops.AddScalar(np.ones(3)), "value must be a scalar"),
    (lambda: ops.Pad(1, mode="linear_ramp"), "mode must be one of"),
    (lambda: ops.Shift(1, mode="bogus"), "mode must be one of"),
    (lambda: ops.Convolve(np.ones(3), mode="bogus"), "mode must be one of"),
    (lambda: ops.MedianFilter(size=None), "give size or footprint"),
    (lambda: ops.BinaryDilation(iterations=0), "iterations must be an int >= 1"),
    (lambda: ops.Downsample(2, how="median"), "how must be one of"),
    (lambda: ops.Histogram(0), "positive number of bins"),
    (lambda: ops.Histogram([3.0, 1.0]), "increasing"),
    (lambda: ops.Histogram(4, range=(2.0, 1.0)), "lo <= hi"),
    (lambda: ops.Filter(3), "predicate must be a callable"),
    (lambda: ops.Statistic("mode"), "how must be one of"),
    (lambda: ops.Statistic("percentile", q=[1.0, 2.0]), "one scalar q"),
    (lambda: ops.Statistic("argmax", axis=(0, 1)), "reduces one axis"),
    (lambda: ops.Cumulative("cummax"), "how must be one of"),
    (lambda: ops.Diff(0), "n must be an int >= 1"),
    (lambda: ops.SequenceConvolve(mode="bogus"), "mode must be one of"),
    (lambda: ops.Take([[1]]), "1-D array of ints"),
    (lambda: ops.Einsum("ii->i"), "repeats an index"),
    (lambda: ops.Einsum("...i->i"), "'...'"),
    (lambda: ops.Lookup(3, (True,), (2,)), "fn must be a callable"),
]


@pytest.mark.parametrize("make, message", BAD_ARGS, ids=[m for _, m in BAD_ARGS])
def test_bad_arguments_raise_workflow_error(make, message):
    with pytest.raises(sz.WorkflowError, match=message):
        make()


def test_errors_name_the_node_when_a_workflow_runs(tmp_path):
    wf = sz.Workflow("bad")
    wf.add(ops.MatMul(), wf.input("a"), wf.input("b"), name="product")
    with pytest.raises(sz.WorkflowError, match=r"node 'product' \(MatMul\): MatMul: cannot multiply"):
        wf.run({"a": np.ones((2, 3)), "b": np.ones((2, 3))}, store=tmp_path / "run", executor="local")


def test_filter_predicate_of_the_wrong_shape_is_a_workflow_error(tmp_path):
    wf = sz.Workflow("bad")
    wf.add(ops.Filter(lambda x: x > 0), wf.input("x"), name="rows")
    with pytest.raises(sz.WorkflowError, match=r"predicate returned an array of shape \(3, 2\), expected \(3,\)"):
        wf.run({"x": np.ones((3, 2))}, store=tmp_path / "run", executor="local")


def test_operators_page_table_lists_every_operator():
    """The tables of docs/guide/operators.md ("Built-in operators") have a row per exported operator."""
    from doc_pages import section

    table = section("guide/operators.md", "Built-in operators (`subzero.operators`)")
    missing = [n for n in EXPORTED if f"| {n} " not in table and f"| {n}(" not in table]
    assert missing == []


@pytest.mark.parametrize("n_cells", [1, 5, 400])  # few cells: their windows enumerated; many: a dilated mask
def test_window_lineage_of_cells_is_the_dilation_of_their_mask(n_cells):
    from scipy import ndimage

    op = ops.CosmicRayDetect(radius=2)
    op.input_shapes, op.output_shape = ((40, 40),), (40, 40)
    ids = np.random.default_rng(n_cells).choice(1600, size=n_cells, replace=False)
    cells = np.stack(np.unravel_index(ids, (40, 40)), axis=1)
    mask = np.zeros((40, 40), bool)
    mask[tuple(cells.T)] = True
    expected = np.argwhere(ndimage.binary_dilation(mask, np.ones((3, 3), bool)))
    np.testing.assert_array_equal(op.map_b(cells, 0), expected)
    np.testing.assert_array_equal(op.map_f(cells, 0), expected)
    np.testing.assert_array_equal(op.map_p(cells, b"\x02", 0),
                                  np.argwhere(ndimage.binary_dilation(mask, np.ones((5, 5), bool))))


@pytest.mark.parametrize("corner", [(0, 0), (180, 1400), (388, 2988)])
def test_window_lineage_of_clustered_cells_dilates_only_around_them(corner):
    """Cells clustered in a large array (a brush): the dilation of a mask of their bounding
    box grown by the window, clipped at the array's edges, is exactly the whole array's."""
    from scipy import ndimage

    shape = (400, 3000)
    op = ops.CosmicRayDetect(radius=3)
    op.input_shapes, op.output_shape = (shape,), shape
    rng = np.random.default_rng(sum(corner))
    cells = np.unique(np.stack([corner[0] + rng.integers(0, 12, 60), corner[1] + rng.integers(0, 12, 60)], axis=1),
                      axis=0)
    mask = np.zeros(shape, bool)
    mask[tuple(cells.T)] = True
    side = 2 * op.window(0) + 1
    expected = np.argwhere(ndimage.binary_dilation(mask, np.ones((side, side), bool)))
    np.testing.assert_array_equal(op.map_b(cells, 0), expected)
    np.testing.assert_array_equal(op.map_f(cells, 0), expected)


@pytest.mark.parametrize("op", [ops.Convolve(np.ones((3, 3)) / 9.0), ops.Correlate(np.ones((3, 3)) / 9.0),
                                ops.GaussianFilter(1.0), ops.Laplace()])
def test_filters_keep_float32_as_scipy_does_and_widen_integers(op):
    from scipy import ndimage

    x = np.random.default_rng(0).normal(size=(9, 7)).astype(np.float32)
    op.input_shapes, op.output_shape = ((9, 7),), (9, 7)
    got = op.run(None, x)
    assert got.dtype == np.float32
    if isinstance(op, ops.Convolve):
        assert np.array_equal(got, ndimage.convolve(x, op.kernel, mode=op.mode, cval=op.cval))
    assert op.run(None, np.arange(63).reshape(9, 7)).dtype == np.float64


@examples(60)
@given(n=st.integers(1, 40), m=st.integers(1, 12), mode=st.sampled_from(["full", "same", "valid"]),
       correlate=st.booleans(), at=st.integers(0, 1), tile=st.integers(1, 8), seed=st.integers(0, 2**16))
def test_convolve1d_tiles_give_numpys_values_to_the_bit(n, m, mode, correlate, at, tile, seed):
    """A constant kernel splits the output into tiles; each tile reads a part longer than the
    kernel, so numpy orders the operands as for the whole and sums in the same order."""
    rng = np.random.default_rng(seed)
    a, v = rng.normal(size=n), rng.normal(size=m)
    op = bind(ops.SequenceConvolve(mode, correlate, constant=a if at == 0 else v, constant_at=at), [v if at == 0 else a])
    got = execute(op, [v if at == 0 else a], tile_shape=tile)[0]
    assert np.array_equal(got, (np.correlate if correlate else np.convolve)(a, v, mode))


@given(seed=st.integers(0, 2**16), density=st.floats(0.0, 1.0), size=st.integers(1, 300))
@settings(max_examples=30, deadline=None)
def test_gather_of_a_mask_its_bits_and_its_positions_agree_and_ship_small(seed, density, size):
    """``Gather(mask=m)``, ``Gather(positions)`` (bits when smaller) and an operator pickled in the
    positions form of older stores give the same values and lineage; a shipped copy carries bits."""
    import pickle

    rng = np.random.default_rng(seed)
    shape = (size, 3)
    keep = rng.random(shape) < density
    x = floats(rng, shape)
    positions = np.flatnonzero(keep)
    old = ops.Gather(positions)
    old.__dict__.update(_positions=None, _bits=None)  # the state a pickle of older stores holds
    state = {k: v for k, v in old.__dict__.items() if k not in ("_positions", "_bits", "_source_shape", "_extent")}
    state["_source"] = positions
    older = ops.Gather.__new__(ops.Gather)
    older.__setstate__(state)
    forms = [ops.Gather(mask=keep), ops.Gather(positions), older]
    forms += [pickle.loads(pickle.dumps(op)) for op in forms[:2]]
    counted = ops.Gather(mask=keep, count=len(positions))  # the count a trace has from its selection
    assert (counted.output_cells, counted.source_digest) == (forms[0].output_cells, forms[0].source_digest)
    forms.append(counted)
    out_cells = np.argwhere(np.ones((len(positions),), bool))
    in_cells = np.argwhere(keep | (rng.random(shape) < 0.5))
    for op in forms:
        op = op.bound([shape], op.infer_output_shape((shape,)))
        assert op.output_shape == (len(positions),)
        assert np.array_equal(execute(op, [x], tile_shape=7)[0], x[keep])
        np.testing.assert_array_equal(op.map_b(out_cells, 0), np.argwhere(keep))
        np.testing.assert_array_equal(to_ids(op.map_f(in_cells, 0), op.output_shape),
                                      np.flatnonzero(np.isin(positions, to_ids(in_cells, shape))))
    shipped = len(pickle.dumps(forms[0]))
    assert shipped <= keep.size // 8 + 2000 and shipped <= positions.nbytes + 2000


@examples(60)
@given(shape=st.lists(st.integers(1, 9), min_size=1, max_size=3), tile=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_scatter_of_a_box_reads_each_tiles_part_of_the_values(shape, tile, seed):
    """``x[a:b, c:d] = v`` with ``v`` of the box's shape: each tile reads its part of ``v`` as a
    box (no cell lookup), and the values and lineage are those of the cell by cell path."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape)
    box = tuple(slice(lo, int(rng.integers(lo + 1, n + 1))) for lo, n in
                ((int(rng.integers(0, n)), n) for n in shape))
    written = np.zeros(x.shape, bool)
    written[box] = True
    v = rng.normal(size=x[box].shape)
    expected = x.copy()
    expected[box] = v
    op = bind(ops.Scatter(written, np.arange(v.size)), [x, v])
    assert op._block_of() == tuple((s.start, s.stop) for s in box)
    assert np.array_equal(execute(op, [x, v], tile_shape=tile)[0], expected)
    cell_by_cell = bind(ops.Scatter(written, np.arange(v.size)), [x, v])
    cell_by_cell._block = None
    for t in tile_grid(x.shape, tuple(range(x.ndim)), tile):
        assert op.input_box(t.box, 1) == cell_by_cell.input_box(t.box, 1)
    cells = np.argwhere(np.ones(x.shape, bool))
    np.testing.assert_array_equal(op.map_b(cells, 1), np.argwhere(np.ones(v.shape, bool)))


def test_opaque_nodes_of_one_call_compute_it_once_per_inputs(tmp_path):
    """The nodes picking elements of one call's result (a library call returning a tuple) share
    it: the call runs once for them, again only when its inputs' values differ."""
    calls = []

    def stats(x):
        calls.append(1)
        return np.sort(x), np.cumsum(x), "a label"

    x = np.random.default_rng(0).normal(size=50)
    wf = sz.Workflow("shared")
    xin = wf.input("x")
    for k in (0, 1):
        wf.add(ops.Opaque(stats, (50,), "a test", pick=k), xin, name=f"part{k}")
    for values in (x, x + 1):
        calls.clear()
        run = wf.run({"x": values}, store=str(tmp_path / str(values[0])), executor="local")
        assert np.array_equal(np.asarray(run.output("part0")), np.sort(values))
        assert np.array_equal(np.asarray(run.output("part1")), np.cumsum(values))
        assert len(calls) == 1
    assert ops.Opaque(stats, (50,), "a test")._call_key is None  # one node: nothing shared


def test_histogram_bins_are_those_a_binary_search_finds():
    """Histogram's cell-to-bin assignment (a guess from the value, checked against the edges)
    is `np.searchsorted`'s, cell for cell: values on edges, at the ends, outside, NaN, inf."""
    from subzero.operators.value import _bins_of

    rng = np.random.default_rng(4)
    for bins in (1, 7, 256):
        v = np.concatenate([rng.normal(size=5000), rng.integers(-3, 4, 500).astype(float),
                            [np.nan, np.inf, -np.inf, 1e300, -1e-300, 0.0]])
        finite = np.isfinite(v)
        edges = np.histogram_bin_edges(v[finite], bins=bins, range=(-2.0, 2.5) if bins == 7 else None)
        v = np.concatenate([v, edges, np.nextafter(edges, np.inf), np.nextafter(edges, -np.inf)])
        inside = np.isfinite(v) & (v >= edges[0]) & (v <= edges[-1])
        got = _bins_of(v, edges, inside)
        np.testing.assert_array_equal(got[inside], (np.searchsorted(edges, v, side="right") - 1)[inside])


def test_histogram_counts_without_lineage_are_the_assigned_bins():
    """With no lineage asked, Histogram counts as ``np.histogram`` does (blocked, no per-cell bin):
    the same counts as its cell-to-bin assignment, for values on edges, at the ends, outside, of
    one value, integers; NaN or infinite values with no range take the assignment's path."""
    rng = np.random.default_rng(5)
    base = np.concatenate([rng.normal(size=3000), rng.integers(-3, 4, 300).astype(float), [1e300, -1e-300, 0.0]])
    for bins, value_range in ((1, None), (7, (-2.0, 2.5)), (256, None), (5, (0.0, 0.0)), (3, None)):
        op = ops.Histogram(bins, value_range)
        edges = np.histogram_bin_edges(base, bins=bins, range=value_range)
        for v in (np.concatenate([base, edges, np.nextafter(edges, np.inf), np.nextafter(edges, -np.inf)]),
                  np.full(10, 2.0), np.arange(-5, 40).reshape(5, 9)):
            index, _ = op.assign(v)
            got = op.counts(v)
            assert got is not None and got.dtype == np.int64
            np.testing.assert_array_equal(got, np.bincount(index[index >= 0], minlength=bins))
    with_nan = np.array([1.0, np.nan, 3.0])
    assert ops.Histogram(2).counts(with_nan) is None and ops.Histogram([0.0, 1.0]).counts(base) is None
    np.testing.assert_array_equal(ops.Histogram(2, range=(0.0, 4.0)).counts(with_nan), [1, 1])


def test_relabel_numbers_from_a_table_are_those_of_a_sort():
    """Relabel numbers small non-negative ids through a table over their range (O(cells)):
    the numbers the sort of its distinct values gives, zeros kept; others still sort."""
    from subzero.operators.numeric import _ranks_by_table

    rng = np.random.default_rng(6)
    relabel = ops.Relabel()
    for x in (rng.integers(0, 50, (30, 40)), rng.choice([0, 0, 3, 1200, 7], (25, 20)), np.zeros((4, 4), np.int64),
              rng.integers(0, 5, 100).astype(np.uint8), np.array([5, -2, 0, 9]), np.array([0, 2**40, 3])):
        x = np.asarray(x)
        ids = np.unique(x[x != 0])
        expected = np.where(x != 0, np.searchsorted(ids, x) + 1, 0).astype(np.int32)
        got = relabel.run(None, x)
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, expected)
    assert _ranks_by_table(np.array([5, -2, 0])) is None and _ranks_by_table(np.array([0, 2**40])) is None
    assert _ranks_by_table(np.array([0.0, 1.0])) is None


@pytest.mark.parametrize("op, arity", [
    (ops.Add(), 2), (ops.Divide(), 2), (ops.Maximum(), 2), (ops.SubtractScalar(1.5, reverse=True), 1),
    (ops.PowerScalar(2), 1), (ops.Clip(-0.5, 0.5), 1), (ops.Threshold(0.0, compare="<="), 1),
    (ops.Apply(np.exp), 1), (ops.Apply(np.hypot), 2)])
def test_an_operator_that_fills_out_writes_runs_values_into_the_array_given(op, arity):
    """`Operator.run_into` gives ``run``'s values, bit for bit, in the array given, also when that
    array is one of its inputs (numpy's ufuncs read an input it overwrites as if copied)."""
    rng = np.random.default_rng(5)
    xs = [rng.normal(size=(6, 5)) for _ in range(arity)]
    assert op.fills_out
    expected = op.run(None, *xs)
    out = np.empty_like(expected)
    assert op.run_into(None, out, *xs) is out
    np.testing.assert_array_equal(out, expected)
    if expected.dtype == xs[0].dtype:  # in place of its first input
        first = xs[0].copy()
        op.run_into(None, first, first, *xs[1:])
        np.testing.assert_array_equal(first, expected)
    assert not ops.Where().fills_out and not ops.Apply(lambda v: v + 1).fills_out and not ops.Convolve(np.ones(3)).fills_out


@pytest.mark.parametrize("op", [ops.MedianFilter(5), ops.RankFilter(1, 4), ops.PercentileFilter(30.0, 6),
                                ops.MaximumFilter(3), ops.MinimumFilter(5),
                                filters1d.MaximumFilter1D(4), filters1d.MinimumFilter1D(5, mode="constant", cval=0.2)],
                         ids=lambda op: type(op).__name__)
@pytest.mark.parametrize("shape", [(80,), (3, 40)])
def test_a_nan_changes_rank_and_extreme_filters_only_within_its_window(op, shape):
    """scipy's running windows (its 1-D rank path, the separable maximum and minimum passes)
    carry a NaN along a line past the window; the operators read only their window, and give
    scipy's values wherever no NaN is near."""
    x = np.random.default_rng(len(shape)).random(shape)
    report = check_operator(op, [x], tile_shape=16, kinds=("nan",), cells=None, backward=8)
    assert report.ok, str(report)
    assert report.trials == x.size
    y = x.copy()
    y.reshape(-1)[7] = np.nan
    far = np.ones(shape, bool)
    far.reshape(-1)[:20] = False  # the NaN's lines' neighbourhood (window at most 6)
    if len(shape) == 2:
        far[:, :20] = False
    assert np.array_equal(evaluate_operator(op, [y])[far], evaluate_operator(op, [x])[far])

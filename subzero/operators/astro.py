"""Astronomy operators: L.A.Cosmic cosmic-ray masks, cosmic-ray repair, source detection.

They wrap the libraries an astronomer already uses (``astroscrappy``, ``sep``) and state
their lineage exactly (dependence: docs/guide/lineage.md, "What lineage means"); the perturbation
oracle (`subzero.oracle`) holds each of them to it.

- `CosmicRays` (L.A.Cosmic): every pixel's flag depends on the square window of radius
  `lacosmic_reach` around it in every input, a radius derived from the parameters
  (median filter sizes, the two growth steps, ``niter`` cleaning rounds); pixels near a
  cosmic ray so large that astroscrappy cleaned it with the image's global median depend
  on the whole image.
- `RepairCosmics`: a pixel depends on the 3x3 window its flag reads (and on its own
  coverage); a repaired pixel on the window it was interpolated from, and on that
  window's flags.
- `DetectStars` (sep): a pixel above the threshold depends on its connected group of
  above-threshold pixels and the ring of pixels around it (they decide the group's extent,
  size and canonical label); any other pixel only on itself.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from typing import Any

import numpy as np

from subzero import config
from subzero.context import Context
from subzero.errors import LineageError, WorkflowError
from subzero.lazy import LazyModule
from subzero.modes import Mode
from subzero.operator import Operator
from subzero.operators._args import check_choice
from subzero.operators._kernels import (cell_set_boxes, decode_region, encode_regions, group_boxes,
                                       region_envelopes, repeat_pairs)
from subzero.operators.composite import WHOLE, WindowLineage, dilate
from subzero.operators.identity import IdentityMapping
from subzero.tiling import Halo, Shape, Tiling

ndimage = LazyModule("scipy.ndimage")  # imported on first use

__all__ = ["CosmicRays", "RepairCosmics", "DetectStars", "lacosmic_reach", "window_pairs"]

CLEANTYPES = ("meanmask", "medmask", "idw")

_openmp: Any = None  # threadpoolctl's controls of the OpenMP runtimes loaded, made at first use (`_library_threads`)


def _library_threads() -> Any:
    """A context in which a library's OpenMP code (astroscrappy's) runs on the ``library_threads``
    setting's number of threads, in the calling thread (0: as the library would).  subzero runs
    tiles on the executor's threads already: OpenMP's own threads on top of them outnumber the
    cores, and each of its parallel loops then waits for threads that are not running (a 264 x 266
    L.A.Cosmic tile took 0.11-0.36 s on two threads at load 5, 0.05 s on one).  The mask is the
    same with any number of threads."""
    global _openmp
    n = int(config.get("library_threads"))
    if n <= 0:
        return contextlib.nullcontext()
    if _openmp is None:  # after the library is imported: its OpenMP runtime is loaded by then
        from threadpoolctl import ThreadpoolController

        _openmp = ThreadpoolController().select(user_api="openmp")
    return _openmp.limit(limits=n)
FSMODES = ("median", "convolve")


def window_pairs(cells: np.ndarray, radius: int, shape: Shape) -> tuple[np.ndarray, np.ndarray]:
    """Per-cell ``(owner, coords)`` of the ``(2r+1)^2`` windows around ``cells``, clipped to ``shape``."""
    return WindowLineage._window_pairs(np.asarray(cells, np.int64), int(radius), tuple(shape))


# =====================================================================================
# L.A.Cosmic
# =====================================================================================
def lacosmic_reach(niter: int, sepmed: bool = True, fsmode: str = "median", psfsize: int = 7,
                   saturation: bool = False) -> int:
    """How far (Chebyshev distance, in pixels) astroscrappy's mask reads: the radius of the
    window every flag depends on, derived from the algorithm (astroscrappy 1.x).

    One iteration on arrays it reads directly:

    - the Laplacian of the 2x subsampled image, rebinned: 1 pixel;
    - the noise model, a median of the variance (sepmed: separable 7x7, else 5x5): 3 (2);
    - S = Laplacian / noise: max(1, noise); S' = S - median(S) (7x7 / 5x5): S + 3 (2);
    - fine structure: median 5x5 then 9x9 (sepmed) or 3x3 then 7x7: 6 (4); with
      ``fsmode="convolve"``, the PSF kernel's half size plus the noise model;
    - seeds read S' and F; two 3x3 growth steps read seeds 2 pixels away: seed + 2.

    The saturation mask (``satlevel`` finite: the 7x7/5x5 median, then two 5x5 dilations)
    reaches 7 (6), and a flag reads it 2 pixels away.  Between iterations a flagged pixel
    is cleaned from its 5x5 window (2 more pixels, of data and flags), and the next
    iteration runs on the cleaned image; the mask only grows, so the final mask reads as
    far as the last iteration does.

    Examples
    --------
    >>> lacosmic_reach(1), lacosmic_reach(2), lacosmic_reach(4)
    (8, 18, 38)
    """
    noise = 3 if sepmed else 2
    smooth = 3 if sepmed else 2
    sp = max(1, noise) + smooth
    fine = (2 + 4 if sepmed else 1 + 3) if fsmode == "median" else int(psfsize) // 2 + noise
    detect = max(sp, fine, noise) + 2
    mask = noise + 4 if saturation else 0
    cleaned, flags = 0, 0
    for _ in range(max(int(niter), 1)):
        flags = max(flags, cleaned + detect, mask + 2 if saturation else 0)
        cleaned = max(cleaned, flags, mask) + 2
    return flags


class CosmicRays(WindowLineage, Operator):
    """L.A.Cosmic cosmic-ray mask (``astroscrappy.detect_cosmics``); 1 marks a cosmic ray.

    Inputs: the image (counts; ``gain`` converts to electrons), then, if
    ``background`` is True, the sky background L.A.Cosmic subtracts (``inbkg``), then, if
    ``variance`` is True, the variance it uses as its noise model (``invar``).  Parameters
    are astroscrappy's (``cleantype`` one of the masked ones: ``"median"`` re-cleans every
    flagged pixel each round, which makes every pixel depend on the whole image).

    Lineage: every pixel, flagged or not, depends on the window of radius
    ``reach = lacosmic_reach(niter, ...)`` around it in each input (a clean pixel would be
    flagged by a change anywhere its detection read; a flagged one is never farther-reaching,
    since the mask only grows); that is the mapping default.  astroscrappy cleans a cosmic
    ray whose whole 5x5 window is flagged with the image's median, a global statistic: the
    pixels within ``reach`` of such a window (none in most images) carry the payload `WHOLE`
    (they depend on every pixel).  With ``niter=1`` no cleaning round feeds the mask: the
    operator is a stencil (``MAP``; ``COMP`` stores nothing) and runs on tiles with a halo
    of ``reach``; with more iterations it runs on whole images (the medians are global).

    Examples
    --------
    >>> CosmicRays(niter=2).reach
    18
    """

    #: the smallest image side astroscrappy's filters take
    MIN_SIDE = 9

    def __init__(self, sigclip: float = 4.5, sigfrac: float = 0.3, objlim: float = 5.0, gain: float = 1.0,
                 readnoise: float = 6.5, satlevel: float = 65536.0, niter: int = 4, sepmed: bool = True,
                 cleantype: str = "meanmask", fsmode: str = "median", psfmodel: str = "gauss",
                 psffwhm: float = 2.5, psfsize: int = 7, background: bool = False, variance: bool = False):
        self.sigclip, self.sigfrac, self.objlim = float(sigclip), float(sigfrac), float(objlim)
        self.gain, self.readnoise, self.satlevel = float(gain), float(readnoise), float(satlevel)
        if int(niter) < 1:
            raise WorkflowError(f"CosmicRays: niter must be >= 1, got {niter!r}")
        self.niter, self.sepmed = int(niter), bool(sepmed)
        self.cleantype = check_choice(cleantype, CLEANTYPES, "CosmicRays", "cleantype")
        self.fsmode = check_choice(fsmode, FSMODES, "CosmicRays", "fsmode")
        self.psfmodel, self.psffwhm, self.psfsize = str(psfmodel), float(psffwhm), int(psfsize)
        self.background, self.variance = bool(background), bool(variance)

    @property
    def reach(self) -> int:
        """The window radius every flag depends on (`lacosmic_reach`)."""
        return lacosmic_reach(self.niter, self.sepmed, self.fsmode, self.psfsize, np.isfinite(self.satlevel))

    @property
    def n_inputs(self) -> int:
        return 1 + self.background + self.variance

    @property
    def tiling(self) -> Tiling | None:
        """One iteration: tiles with a halo of ``reach`` are exact.  More: whole images (the
        cleaning rounds read global medians)."""
        return Halo(self.reach) if self.niter == 1 else None

    def supported_modes(self) -> set[Mode]:
        return {Mode.MAP, Mode.COMP} if self.niter == 1 else {Mode.COMP, Mode.FULL}

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        names = ["image"] + ["background"] * self.background + ["variance"] * self.variance
        if len(input_shapes) != len(names):
            raise WorkflowError(f"CosmicRays takes {len(names)} input(s) ({', '.join(names)}), got "
                                f"{len(input_shapes)}")
        if len({tuple(s) for s in input_shapes}) != 1 or len(input_shapes[0]) != 2:
            raise WorkflowError(f"CosmicRays takes 2-D inputs of one shape ({', '.join(names)}), "
                                f"got {list(input_shapes)}")
        if min(input_shapes[0]) < self.MIN_SIDE:
            raise WorkflowError(f"CosmicRays needs images of at least {self.MIN_SIDE} x {self.MIN_SIDE} pixels "
                                f"(astroscrappy's 9x9 median), got {tuple(input_shapes[0])}")
        return tuple(input_shapes[0])

    def window(self, i: int) -> int:
        return self.reach

    def _arrays(self, inputs):
        image = np.ascontiguousarray(inputs[0], np.float32)
        rest = list(inputs[1:])
        bkg = np.ascontiguousarray(rest.pop(0), np.float32) if self.background else None
        var = np.ascontiguousarray(rest.pop(0), np.float32) if self.variance else None
        return image, bkg, var

    def mask(self, *inputs: np.ndarray) -> np.ndarray:
        """The cosmic-ray mask of the inputs (bool)."""
        import astroscrappy

        image, bkg, var = self._arrays(inputs)
        with _library_threads():
            mask, _ = astroscrappy.detect_cosmics(
                image, inbkg=bkg, invar=var, sigclip=self.sigclip, sigfrac=self.sigfrac, objlim=self.objlim,
                gain=self.gain, readnoise=self.readnoise, satlevel=self.satlevel, niter=self.niter,
                sepmed=self.sepmed, cleantype=self.cleantype, fsmode=self.fsmode, psfmodel=self.psfmodel,
                psffwhm=self.psffwhm, psfsize=self.psfsize, verbose=False)
        return np.asarray(mask, bool)

    def global_pixels(self, flags: np.ndarray, image: np.ndarray) -> np.ndarray:
        """Pixels whose flag may read the global median: within ``reach`` of a cosmic ray
        whose 5x5 cleaning window is all bad (flagged or saturated), if a cleaning round
        feeds a later iteration."""
        if self.niter < 2 or not flags.any():
            return np.zeros(flags.shape, bool)
        bad = flags.copy()
        if np.isfinite(self.satlevel):  # a superset of astroscrappy's saturation mask
            with np.errstate(invalid="ignore"):
                bad |= dilate(np.asarray(image, np.float64) * self.gain >= self.satlevel, 4)
        fallback = ndimage.binary_erosion(bad, np.ones((5, 5), bool), border_value=0) & flags
        return dilate(fallback, self.reach) if fallback.any() else np.zeros(flags.shape, bool)

    def run(self, ctx: Context, *inputs: np.ndarray) -> np.ndarray:
        flags = self.mask(*inputs)
        if ctx.modes & {Mode.COMP, Mode.FULL}:
            payload = np.where(self.global_pixels(flags, inputs[0]), WHOLE, 0).astype(np.uint8)
            self.write_window_lineage(ctx, payload)
        return flags.astype(np.uint8)


# =====================================================================================
# Repair
# =====================================================================================
class RepairCosmics(WindowLineage, Operator):
    """Repair an image: inputs the image and its coverage (how many exposures were free of
    cosmic rays at each pixel).

    A pixel is flagged when no exposure covers it, or when it is a residual cosmic ray (it
    exceeds the median of its 3x3 neighbourhood by ``nsigma * sigma`` and by twice that
    median).  A flagged pixel becomes the median of the unflagged pixels of its
    ``(2 * window + 1)^2`` window (0 when there is none); the others keep their value.

    Lineage: an unflagged pixel depends on the 3x3 window of the image its flag read and on
    its own coverage (the mapping default: radius 1 and 0); a flagged pixel also on every
    pixel of its window and on their flags' inputs: radius ``window + 1`` in the image and
    ``window`` in the coverage (the payload).  Tiles carry a halo of ``window + 1``.
    """

    def __init__(self, sigma: float, nsigma: float = 8.0, window: int = 2):
        self.sigma, self.nsigma, self.window_radius = float(sigma), float(nsigma), int(window)
        if not 0 <= self.window_radius < 250:
            raise WorkflowError(f"RepairCosmics: window must be an int in 0..249, got {window!r}")
        self.radius = self.window_radius + 1

    @property
    def tiling(self) -> Tiling | None:
        """Tiles with a halo of the repair radius."""
        return Halo(self.radius)

    def supported_modes(self) -> set[Mode]:
        return {Mode.COMP, Mode.PAY, Mode.FULL}

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        if len(input_shapes) != 2 or len({tuple(s) for s in input_shapes}) != 1 or len(input_shapes[0]) != 2:
            raise WorkflowError(f"RepairCosmics takes an image and its coverage, 2-D, of one shape; "
                                f"got {list(input_shapes)}")
        return tuple(input_shapes[0])

    def window(self, i: int) -> int:
        return 1 if i == 0 else 0

    def payload_window(self, r: int, i: int) -> int | None:
        if r == 0:
            return self.window(i)
        return r if i == 0 else r - 1

    def flags(self, merged: np.ndarray, cover: np.ndarray) -> np.ndarray:
        """The cells of ``merged`` flagged as cosmic rays within ``cover``."""
        x = np.asarray(merged, np.float64)
        median = ndimage.median_filter(x, size=3, mode="reflect")
        excess = x - median
        with np.errstate(invalid="ignore"):
            return (np.asarray(cover) <= 0) | ((excess > self.nsigma * self.sigma) & (excess > 2 * np.abs(median)))

    def run(self, ctx: Context, merged: np.ndarray, cover: np.ndarray) -> np.ndarray:
        flags = self.flags(merged, cover)
        out = np.array(merged, np.float64)
        bad = np.argwhere(flags)
        if len(bad):
            owner, near = window_pairs(bad, self.window_radius, flags.shape)
            values = np.where(flags[tuple(near.T)], np.nan, out[tuple(near.T)])
            table = np.full((len(bad), (2 * self.window_radius + 1) ** 2), np.nan)
            slot = np.arange(len(owner)) - np.searchsorted(owner, owner)
            table[owner, slot] = values
            with warnings.catch_warnings():  # a window with no unflagged pixel repairs to 0
                warnings.simplefilter("ignore", RuntimeWarning)
                fixed = np.nanmedian(table, axis=1)
            out[tuple(bad.T)] = np.where(np.isnan(fixed), 0.0, fixed)
        if ctx.modes:
            self.write_window_lineage(ctx, np.where(flags, self.radius, 0).astype(np.uint8))
        return out


# =====================================================================================
# Source detection
# =====================================================================================
@functools.lru_cache(maxsize=4096)
def _grown_region(payload: bytes, shape: tuple[int, ...]) -> np.ndarray:
    """`DetectStars._region`: the cells of the group ``payload`` encodes (`encode_region`: its box
    and bitmask) and its ring, clipped to ``shape``, sorted (read-only: shared by every step
    reaching the same star).  The bitmask is dilated within its box grown by one pixel: a few
    operations on the star's box, not per cell."""
    head = np.frombuffer(payload[:32], "<i8").astype(np.int64)
    lo, extent = head[:2], head[2:]
    count = int(np.prod(extent))
    if count <= 0:
        return np.empty((0, 2), np.int64)
    bits = np.unpackbits(np.frombuffer(payload[32:], np.uint8), count=count).astype(bool).reshape(tuple(extent))
    grown = np.zeros(tuple(extent + 2), bool)
    for dr, dc in np.argwhere(DetectStars.STRUCTURE).tolist():  # the 8-connected ring: nine shifted copies
        grown[dr:dr + extent[0], dc:dc + extent[1]] |= bits
    region = np.argwhere(grown).astype(np.int64) + (lo - 1)
    region = region[np.all((region >= 0) & (region < np.asarray(shape, np.int64)), axis=1)]
    region.flags.writeable = False
    return region


class DetectStars(IdentityMapping, Operator):
    """Detect and label stars with ``sep.extract`` (no filtering, no deblending): pixels
    above ``threshold`` (in units of the input, e.g. a signal-to-noise image) that form an
    8-connected group of at least ``minarea`` pixels.

    A star's pixels are labelled ``1 +`` the flat (C order) index of its first pixel
    (background 0): unlike sep's sequential numbers, which count the stars detected
    before it anywhere in the image, a star's label depends on that star alone.

    Lineage: a pixel above the threshold depends on its group of above-threshold pixels
    (8-connected, whether or not it reached ``minarea``) and on the ring of pixels around
    the group: a change inside can split or shrink it, one on the ring can grow it or merge
    it with another, and either can change its size test and its label; nothing else can.
    Any other pixel depends only on itself (it would have to rise above the threshold).
    Modes: ``COMP`` (identity default; each group's pixels share a payload, the group as
    bounding box + bitmask, which ``map_p`` grows by one pixel), ``PAY`` (the same, with
    an empty payload, "itself", for the other pixels) and ``FULL``.  Stars have no size
    limit, so the operator runs on whole images.
    """

    entire_array_safe = True
    #: the groups' connectivity (sep's)
    STRUCTURE = np.ones((3, 3), bool)

    def __init__(self, threshold: float = 5.0, minarea: int = 5):
        self.threshold, self.minarea = float(threshold), int(minarea)

    def supported_modes(self) -> set[Mode]:
        return {Mode.COMP, Mode.PAY, Mode.FULL}

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        if len(input_shapes[0]) != 2:
            raise WorkflowError(f"DetectStars takes a 2-D image, got shape {input_shapes[0]}")
        return tuple(input_shapes[0])

    def segments(self, snr: np.ndarray) -> np.ndarray:
        """sep's segmentation map (sequential ids)."""
        import sep

        data = np.array(snr, dtype=np.float64, order="C")  # sep writes into its input buffer
        sep.set_extract_pixstack(max(300_000, data.size))
        _, seg = sep.extract(data, self.threshold, minarea=self.minarea, filter_kernel=None,
                             deblend_cont=1.0, clean=False, segmentation_map=True)
        return np.asarray(seg, np.int64)

    def labels(self, snr: np.ndarray) -> np.ndarray:
        """Canonical star labels: ``1 +`` the flat index of each star's first pixel, 0 elsewhere."""
        seg = self.segments(snr).reshape(-1)
        first = np.full(int(seg.max(initial=0)) + 1, seg.size, np.int64)
        np.minimum.at(first, seg, np.arange(seg.size, dtype=np.int64))
        return np.where(seg > 0, first[seg] + 1, 0).reshape(np.shape(snr))

    def groups(self, snr: np.ndarray) -> tuple[np.ndarray, int]:
        """The 8-connected groups of above-threshold pixels (1..n, 0 elsewhere)."""
        with np.errstate(invalid="ignore"):
            above = np.asarray(snr, np.float64) > self.threshold
        return ndimage.label(above, self.STRUCTURE)

    def run(self, ctx: Context, snr: np.ndarray) -> np.ndarray:
        labels = self.labels(snr)
        if ctx.modes:
            self._write(ctx, *self.groups(snr))
        return labels

    def _write(self, ctx, groups: np.ndarray, n: int) -> None:
        shape = groups.shape
        flat = groups.reshape(-1)
        if Mode.FULL in ctx.modes:
            cells = np.argwhere(np.ones(shape, bool)).astype(np.int64)
            inside = flat > 0
            owner, ring = self._grown(cells[inside], flat[inside] - 1, shape)
            pair = np.where(inside, flat - 1, n + np.arange(flat.size, dtype=np.int64))
            ins = np.concatenate([ring, cells[~inside]])
            in_pair = np.concatenate([owner, pair[~inside]])
            ctx.lwrite_many(cells, ins, out_pair=pair, in_pair=[in_pair])
        if ctx.modes & {Mode.COMP, Mode.PAY}:
            inside = flat > 0
            if n:  # one payload per group (`encode_region` of its cells), made for every group at once
                cells = np.argwhere(groups > 0)
                owner = flat[inside] - 1
                lo, hi = group_boxes(cells, owner, n)
                ctx.lwrite_many(cells, out_pair=owner, payload=encode_regions(cells, owner, lo, hi))
            if Mode.PAY in ctx.modes:
                ctx.lwrite(np.argwhere(groups == 0), payload=b"")

    @classmethod
    def _grown(cls, cells: np.ndarray, owner: np.ndarray, shape) -> tuple[np.ndarray, np.ndarray]:
        """Per owner, the distinct cells within one pixel of its ``cells`` (clipped)."""
        offsets = np.argwhere(cls.STRUCTURE).astype(np.int64) - 1
        near = (cells[:, None, :] + offsets[None]).reshape(-1, 2)
        who = np.repeat(np.asarray(owner, np.int64), len(offsets))
        ok = np.all((near >= 0) & (near < np.asarray(shape)), axis=1)
        key = who[ok] * int(np.prod(shape)) + np.ravel_multi_index(tuple(near[ok].T), shape)
        key = np.unique(key)
        return key // int(np.prod(shape)), np.stack(np.unravel_index(key % int(np.prod(shape)), shape), axis=1)

    # -- payloads: a group, grown by its ring -------------------------------------------
    def _region(self, payload: bytes) -> np.ndarray:
        """The group ``payload`` names grown by its ring (read-only): a function of the payload
        and the image's shape alone, so kept for the next brush of the same star."""
        return _grown_region(payload, tuple(self.input_shapes[0]))

    def map_p(self, cells: np.ndarray, payload: bytes, i: int) -> np.ndarray:
        if not payload:
            return np.asarray(cells, np.int64)
        return self._region(payload) if len(cells) else np.empty((0, 2), np.int64)

    def map_p_pairs(self, cells: np.ndarray, payload: bytes, i: int) -> tuple[np.ndarray, np.ndarray]:
        if not payload:
            return self.map_b_pairs(cells, i)
        return repeat_pairs(len(cells), self._region(payload))

    def map_p_envelope(self, payloads: list[bytes], i: int,
                       cells: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The groups' boxes, read from the payloads' headers at once and grown by one pixel
        (the ring, clipped to the image); the empty payload ("the pixel itself") gets the box
        of its pair's ``cells``, or the whole image when ``cells`` is not given."""
        shape = np.asarray(self.input_shapes[0], np.int64)
        try:
            lo, hi, empty = region_envelopes(payloads, 2)
        except ValueError as exc:
            raise LineageError(f"DetectStars.map_p_envelope: {exc}; these are not DetectStars payloads") from None
        none = np.any(hi <= lo, axis=1) & ~empty
        lo, hi = np.maximum(lo - 1, 0), np.minimum(hi + 1, shape)
        lo[none], hi[none] = 0, 0
        if empty.any():
            if cells is None:
                lo[empty], hi[empty] = 0, shape
            else:
                lo[empty], hi[empty] = cell_set_boxes(cells, np.flatnonzero(empty), 2)
        return lo, hi

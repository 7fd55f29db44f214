"""The astronomy benchmark workflow (SubZero section II-A, Fig. 1): an LSST-style pipeline.

Two exposures of the same sky are bias-subtracted and flat-fielded, cleaned of their
backgrounds, and masked for cosmic rays separately (UDFs A and B: L.A.Cosmic through
``astroscrappy``); the masked images are merged, the remaining cosmic rays and the
pixels hit in both exposures are repaired (UDF C), and stars are detected and labelled
(UDF D: ``sep``, the SExtractor engine).  22 built-in operators sit in between.

The sky is real: ``skimage.data.hubble_deep_field()`` in grey-scale, tiled to the image
shape and blurred by a point-spread function.  Each exposure adds independent Poisson
and read noise and independent cosmic-ray hits (sharp single pixels and short streaks),
all from fixed seeds (the field's faint texture below its 97th percentile is taken as
sky, so objects are the brightest 3% of it).  A flat-field frame is the third input; the
flat is normalised by its global mean (an all-to-all statistic: a mapping operator, the
mean of one block that is the whole frame), the path of the forward query FQ0.

Lineage of the UDFs (paper section V):

- A, B, C are composite: a pixel depends on itself (the mapping default) unless it is
  flagged, then on the ``(2r+1)^2`` window around it (payload: the radius ``r``).
- D is a payload operator: a star pixel depends on every pixel of its star; the
  payload (label, bounding box, footprint bits) lets ``map_p`` recover those pixels.
  Background pixels carry no lineage (they are the absence of a star).
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from subzero.errors import WorkflowError
from subzero.lazy import LazyModule
from subzero.modes import Mode
from subzero.operator import Operator
from subzero.operators.elementwise import (Add, Clip, Divide, MultiplyScalar, Multiply, Subtract,
                                           SubtractScalar)
from subzero.operators.identity import IdentityMapping
from subzero.operators.neighbourhood import GaussianFilter
from subzero.operators.resampling import Downsample, Upsample
from subzero.tiling import Halo
from subzero.workflow import Workflow

ndimage = LazyModule("scipy.ndimage")  # imported on first use

__all__ = ["build", "CosmicRays", "RepairCosmics", "DetectStars", "UDFS", "SHAPE", "QUICK_SHAPE",
           "sky_image", "exposures"]

SHAPE, QUICK_SHAPE = (512, 2000), (128, 512)
BIAS = 400.0          # ADU added by the read-out electronics
SKY = 150.0           # sky background, electrons per pixel
SCALE = 4000.0        # electrons of the brightest object pixel
OBJECT_PERCENTILE = 97  # the field's faintest 97% is sky: its texture is subtracted
READ_NOISE = 5.0      # electrons
PSF_SIGMA = 1.5       # pixels
MESH = 16             # background mesh, pixels
CR_RATE = 1 / 2000    # cosmic-ray hits per pixel per exposure
#: node name -> the paper's UDF letter
UDFS = {"crmask_1": "A", "crmask_2": "B", "clean": "C", "stars": "D"}


# -- inputs -------------------------------------------------------------------------------
def sky_image(shape: tuple[int, int]) -> np.ndarray:
    """The Hubble Deep Field in grey-scale (0..1), tiled to ``shape``: column blocks of the
    1000-pixel-wide field taken from shifted rows, every other one mirrored."""
    from skimage import color, data

    field = color.rgb2gray(data.hubble_deep_field())
    rows, cols = shape
    if rows > field.shape[0]:
        raise WorkflowError(f"astronomy images have at most {field.shape[0]} rows, asked for {rows}")
    blocks = []
    for k in range(math.ceil(cols / field.shape[1])):
        top = (k * 360) % (field.shape[0] - rows + 1)
        block = field[top:top + rows]
        blocks.append(block[:, ::-1] if k % 2 else block)
    return np.hstack(blocks)[:, :cols]


def flat_field(shape: tuple[int, int], seed: int = 3) -> np.ndarray:
    """A flat field: vignetting (10% at the corners) times 1% pixel-to-pixel response."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:shape[0], 0:shape[1]]
    r2 = ((yy - shape[0] / 2) / shape[0]) ** 2 + ((xx - shape[1] / 2) / shape[1]) ** 2
    return ((1.0 - 0.2 * r2) * rng.normal(1.0, 0.01, shape)).astype(np.float32)


def cosmic_rays(shape: tuple[int, int], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(cells, electrons) of cosmic-ray hits: half single pixels, half streaks of 2-6 pixels."""
    n = max(2, int(shape[0] * shape[1] * CR_RATE))
    start = rng.integers(0, shape, size=(n, 2))
    length = np.where(np.arange(n) % 2 == 0, 1, rng.integers(2, 7, size=n))
    step = np.array([(0, 1), (1, 0), (1, 1), (1, -1)])[rng.integers(0, 4, size=n)]
    hit = np.repeat(np.arange(n), length)
    along = np.arange(len(hit)) - np.repeat(np.cumsum(length) - length, length)
    cells = np.clip(start[hit] + along[:, None] * step[hit], 0, np.asarray(shape) - 1)
    return cells, rng.uniform(300.0, 3000.0, size=len(cells))


def exposures(shape: tuple[int, int]) -> dict[str, np.ndarray]:
    """The workflow's inputs: two exposures (ADU, float32) and the flat field."""
    field = sky_image(shape)
    objects = np.clip(field - np.percentile(field, OBJECT_PERCENTILE), 0.0, None)
    sky = SKY + SCALE / max(objects.max(), 1e-9) * ndimage.gaussian_filter(objects, PSF_SIGMA)
    flat = flat_field(shape)
    out = {"flat": flat}
    for k, seed in ((1, 11), (2, 22)):
        rng = np.random.default_rng(seed)
        image = rng.poisson(sky * flat).astype(np.float64) + rng.normal(0.0, READ_NOISE, shape)
        cells, energy = cosmic_rays(shape, rng)
        np.add.at(image, tuple(cells.T), energy)
        out[f"exposure_{k}"] = (image + BIAS).astype(np.float32)
    return out


# -- composite lineage shared by A, B and C ---------------------------------------------------
def window_pairs(cells: np.ndarray, radius: int, shape) -> tuple[np.ndarray, np.ndarray]:
    """Per-cell ``(owner, coords)`` of the ``(2r+1)^2`` windows around ``cells``, clipped to ``shape``."""
    side = np.arange(-radius, radius + 1)
    offsets = np.stack(np.meshgrid(side, side, indexing="ij"), axis=-1).reshape(-1, 2)
    coords = (np.asarray(cells, np.int64)[:, None, :] + offsets[None]).reshape(-1, 2)
    owner = np.repeat(np.arange(len(cells), dtype=np.int64), len(offsets))
    inside = np.all((coords >= 0) & (coords < np.asarray(shape)), axis=1)
    return owner[inside], coords[inside]


class _Composite(IdentityMapping, Operator):
    """Composite lineage (COMP): every output pixel depends on the same pixel of each input
    (the `IdentityMapping` default), except flagged pixels, which depend on the window of
    radius ``radius`` (the payload)."""

    entire_array_safe = True
    radius: int = 3

    def supported_modes(self):
        return {Mode.COMP, Mode.FULL}

    def infer_output_shape(self, input_shapes):
        if len({tuple(s) for s in input_shapes}) != 1 or len(input_shapes[0]) != 2:
            raise WorkflowError(f"{type(self).__name__} takes 2-D inputs of one shape, got {list(input_shapes)}")
        return tuple(input_shapes[0])

    def write_lineage(self, ctx, flags: np.ndarray) -> None:
        """``lwrite`` the lineage of an output whose flagged pixels are ``flags``."""
        n_in = len(self.input_shapes)
        if Mode.FULL in ctx.modes:
            cells = np.argwhere(np.ones(flags.shape, bool))
            ids = np.arange(len(cells), dtype=np.int64)
            plain = ~flags.reshape(-1)
            owner, near = window_pairs(cells[~plain], self.radius, flags.shape)
            ins = np.concatenate([cells[plain], near])
            pair = np.concatenate([ids[plain], ids[~plain][owner]])
            ctx.lwrite_many(cells, *[ins] * n_in, out_pair=ids, in_pair=[pair] * n_in)
        if Mode.COMP in ctx.modes:
            flagged = np.argwhere(flags)
            ctx.lwrite(flagged, payload=np.full((len(flagged), 1), self.radius, np.uint8))

    # payload override: the window
    def map_p_pairs(self, cells, payload, i):
        return window_pairs(np.asarray(cells, np.int64), int(payload[0]), self.input_shapes[i])

    def map_p(self, cells, payload, i):
        coords = self.map_p_pairs(cells, payload, i)[1]
        return np.unique(coords, axis=0) if len(coords) else coords


class CosmicRays(_Composite):
    """UDFs A and B: the L.A.Cosmic cosmic-ray mask (``astroscrappy.detect_cosmics``) of one
    exposure in electrons; 1 marks a cosmic-ray pixel.

    L.A.Cosmic iterates Laplacian and median filters over the whole image, so the operator
    runs on whole images (no tiling: a tile with a halo would not be exact).
    """

    def __init__(self, sigclip: float = 5.0, objlim: float = 8.0, readnoise: float = READ_NOISE,
                 niter: int = 2, radius: int = 3):
        self.sigclip, self.objlim, self.readnoise = float(sigclip), float(objlim), float(readnoise)
        self.niter, self.radius = int(niter), int(radius)

    def mask(self, x: np.ndarray) -> np.ndarray:
        import astroscrappy

        mask, _ = astroscrappy.detect_cosmics(np.ascontiguousarray(x, np.float32), sigclip=self.sigclip,
                                              objlim=self.objlim, gain=1.0, readnoise=self.readnoise,
                                              satlevel=1e9, niter=self.niter, verbose=False)
        return np.asarray(mask, bool)

    def run(self, ctx, x):
        flags = self.mask(x)
        self.write_lineage(ctx, flags)
        return flags.astype(np.uint8)


class RepairCosmics(_Composite):
    """UDF C: repair the merged image.  Inputs: the merged image and the coverage (how many
    exposures were free of cosmic rays at each pixel).

    A pixel is flagged when no exposure covers it, or when it is a residual cosmic ray (it
    exceeds the median of its 3x3 neighbourhood by ``nsigma * sigma`` and by twice that
    median).  A flagged pixel becomes the median of the unflagged pixels of its
    ``(2 * window + 1)^2`` window.  Flags read a 3x3 neighbourhood, so an output pixel reads
    at most ``window + 1`` pixels away: that is the payload radius and the tiles' halo.
    """

    def __init__(self, sigma: float, nsigma: float = 8.0, window: int = 2):
        self.sigma, self.nsigma, self.window = float(sigma), float(nsigma), int(window)
        self.radius = self.window + 1

    @property
    def tiling(self):
        return Halo(self.radius)

    def flags(self, merged: np.ndarray, cover: np.ndarray) -> np.ndarray:
        x = np.asarray(merged, np.float64)
        median = ndimage.median_filter(x, size=3, mode="reflect")
        excess = x - median
        return (np.asarray(cover) <= 0) | ((excess > self.nsigma * self.sigma) & (excess > 2 * np.abs(median)))

    def run(self, ctx, merged, cover):
        flags = self.flags(merged, cover)
        out = np.array(merged, np.float64)
        bad = np.argwhere(flags)
        if len(bad):
            owner, near = window_pairs(bad, self.window, flags.shape)
            values = np.where(flags[tuple(near.T)], np.nan, out[tuple(near.T)])
            table = np.full((len(bad), (2 * self.window + 1) ** 2), np.nan)
            slot = np.arange(len(owner)) - np.searchsorted(owner, owner)
            table[owner, slot] = values
            with warnings.catch_warnings():  # a window with no unflagged pixel repairs to 0
                warnings.simplefilter("ignore", RuntimeWarning)
                fixed = np.nanmedian(table, axis=1)
            out[tuple(bad.T)] = np.where(np.isnan(fixed), 0.0, fixed)
        self.write_lineage(ctx, flags)
        return out


class DetectStars(Operator):
    """UDF D: detect and label stars (``sep.extract``, no filtering, no deblending): pixels
    above ``threshold`` (in units of the input, a signal-to-noise image) that form a
    connected group of at least ``minarea`` pixels; each group gets a label 1, 2, ...

    Stars have no size limit, so the operator runs on whole images.
    """

    entire_array_safe = False  # the forward lineage of the whole input is only the star pixels
    HEADER = np.dtype([("label", "<i4"), ("r0", "<i4"), ("c0", "<i4"), ("h", "<u2"), ("w", "<u2")])

    def __init__(self, threshold: float = 5.0, minarea: int = 5):
        self.threshold, self.minarea = float(threshold), int(minarea)

    def supported_modes(self):
        return {Mode.PAY, Mode.FULL}

    def infer_output_shape(self, input_shapes):
        if len(input_shapes[0]) != 2:
            raise WorkflowError(f"DetectStars takes a 2-D image, got shape {input_shapes[0]}")
        return tuple(input_shapes[0])

    def labels(self, snr: np.ndarray) -> np.ndarray:
        import sep

        data = np.array(snr, dtype=np.float64, order="C")  # sep writes into its input buffer
        sep.set_extract_pixstack(max(300_000, data.size))
        _, seg = sep.extract(data, self.threshold, minarea=self.minarea, filter_kernel=None,
                             deblend_cont=1.0, clean=False, segmentation_map=True)
        return np.asarray(seg, np.int32)

    def run(self, ctx, snr):
        labels = self.labels(snr)
        star = labels > 0
        if Mode.FULL in ctx.modes:
            cells = np.argwhere(star)
            pair = labels[star].astype(np.int64) - 1
            ctx.lwrite_many(cells, cells, out_pair=pair, in_pair=[pair])
        if Mode.PAY in ctx.modes:  # one payload per star: its label, box and footprint
            payloads = [b""] * (int(labels.max()) if labels.size else 0)
            for k, box in enumerate(ndimage.find_objects(labels), start=1):
                if box is not None:
                    origin = np.array([box[0].start, box[1].start])
                    payloads[k - 1] = self.encode(k, origin, labels[box] == k)
            ctx.lwrite_many(np.argwhere(star), out_pair=labels[star].astype(np.int64) - 1, payload=payloads)
        return labels

    # -- payload: label, bounding box, footprint bits ---------------------------------------
    @classmethod
    def encode(cls, label: int, origin: np.ndarray, footprint: np.ndarray) -> bytes:
        head = np.array([(label, origin[0], origin[1], footprint.shape[0], footprint.shape[1])], cls.HEADER)
        return head.tobytes() + np.packbits(footprint.reshape(-1)).tobytes()

    @classmethod
    def decode(cls, payload: bytes) -> tuple[int, np.ndarray]:
        """(label, star pixel coordinates) of a payload."""
        head = np.frombuffer(payload[:cls.HEADER.itemsize], cls.HEADER)[0]
        bits = np.unpackbits(np.frombuffer(payload[cls.HEADER.itemsize:], np.uint8),
                             count=int(head["h"]) * int(head["w"]))
        cells = np.argwhere(bits.reshape(int(head["h"]), int(head["w"]))) + [int(head["r0"]), int(head["c0"])]
        return int(head["label"]), cells.astype(np.int64)

    def map_p_pairs(self, cells, payload, i):
        _, star = self.decode(payload)
        owner = np.repeat(np.arange(len(cells), dtype=np.int64), len(star))
        return owner, np.tile(star, (len(cells), 1))

    def map_p(self, cells, payload, i):
        return self.decode(payload)[1]


# -- the workflow -------------------------------------------------------------------------
def noise_sigma() -> float:
    """The sky noise of the merged image in electrons: Poisson sky plus read noise, two exposures."""
    return math.sqrt((SKY + READ_NOISE**2) / 2.0)


def build(quick: bool = False, shape: tuple[int, int] | None = None) -> tuple[Workflow, dict[str, np.ndarray]]:
    """The astronomy workflow and its inputs: two exposures and a flat field of ``shape``
    (default 512 x 2000; 128 x 512 when ``quick``; both axes multiples of 16).

    Examples
    --------
    >>> wf, inputs = build(shape=(32, 64))
    >>> sorted(inputs), len([n for n in wf.nodes if not n.is_input])
    (['exposure_1', 'exposure_2', 'flat'], 26)
    """
    shape = tuple(shape or (QUICK_SHAPE if quick else SHAPE))
    if len(shape) != 2 or shape[0] % MESH or shape[1] % MESH:
        raise WorkflowError(f"astronomy image shape must be 2-D with both axes multiples of {MESH}, got {shape}")
    sigma = noise_sigma()
    wf = Workflow("astronomy")
    flat = wf.input("flat")
    flat_level = wf.add(Downsample(shape, how="mean"), flat, name="flat_level")  # the global mean, 1 x 1
    flat_norm = wf.add(Divide(), flat, flat_level, name="flat_norm")
    weighted, good = [], []
    for k in (1, 2):
        raw = wf.input(f"exposure_{k}")
        bias = wf.add(SubtractScalar(BIAS), raw, name=f"bias_{k}")
        elec = wf.add(Divide(), bias, flat_norm, name=f"elec_{k}")
        crmask = wf.add(CosmicRays(), elec, name=f"crmask_{k}")            # UDF A / B
        good_k = wf.add(SubtractScalar(1.0, reverse=True), crmask, name=f"good_{k}")
        mesh = wf.add(Downsample(MESH, how="mean"), elec, name=f"mesh_{k}")
        back = wf.add(Upsample(MESH), mesh, name=f"back_{k}")
        sub = wf.add(Subtract(), elec, back, name=f"sub_{k}")
        weighted.append(wf.add(Multiply(), sub, good_k, name=f"wsub_{k}"))
        good.append(good_k)
    num = wf.add(Add(), *weighted, name="num")
    cover = wf.add(Add(), *good, name="cover")
    weight = wf.add(Clip(lo=1.0), cover, name="weight")
    merged = wf.add(Divide(), num, weight, name="merged")
    clean = wf.add(RepairCosmics(sigma), merged, cover, name="clean")       # UDF C
    smooth = wf.add(GaussianFilter(1.0, truncate=2.0), clean, name="smooth")
    psf_noise = sigma / math.sqrt(4 * math.pi)  # noise of a unit-sum Gaussian (sigma 1) smoothing
    snr = wf.add(MultiplyScalar(1.0 / psf_noise), smooth, name="snr")
    wf.add(DetectStars(threshold=5.0, minarea=5), snr, name="stars")         # UDF D
    return wf, exposures(shape)

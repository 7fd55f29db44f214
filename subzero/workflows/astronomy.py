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

The UDFs live in `subzero.operators.astro`, with their lineage (exact: the perturbation
oracle holds them to it):

- A, B (`CosmicRays`, L.A.Cosmic, one iteration): every pixel, flagged or not, depends on
  the window of radius 8 around it (`lacosmic_reach`: the Laplacian, the medians of the
  noise model and fine structure, two growth steps): a stencil, so they run on tiles.
- C (`RepairCosmics`): composite: a pixel depends on the 3x3 window its flag reads; a
  repaired pixel on the window it was interpolated from (payload: the radius, 3).
- D (`DetectStars`): composite: a pixel above the threshold depends on its group and the
  ring around it (payload: the group); any other pixel on itself.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from subzero.errors import WorkflowError
from subzero.lazy import LazyModule
from subzero.operators.astro import CosmicRays, DetectStars, RepairCosmics
from subzero.operators.elementwise import (Add, Clip, Divide, MultiplyScalar, Multiply, Subtract,
                                           SubtractScalar)
from subzero.operators.neighbourhood import GaussianFilter
from subzero.operators.resampling import Downsample, Upsample
from subzero.dag import Workflow

ndimage = LazyModule("scipy.ndimage")  # imported on first use

__all__ = ["build", "build_gmos", "gmos_frame", "gmos_path", "header_gain", "cosmic_rays_udf",
           "CosmicRays", "RepairCosmics", "DetectStars", "UDFS", "SHAPE", "QUICK_SHAPE",
           "sky_image", "exposures", "cosmic_ray_masks"]

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
    yy, xx = np.ogrid[0:shape[0], 0:shape[1]]  # broadcast: no two full index arrays
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
    return _simulate(shape)[0]


def cosmic_ray_masks(shape: tuple[int, int]) -> dict[str, np.ndarray]:
    """The cosmic-ray hits injected into each exposure of `exposures` (same seeds), as
    boolean masks keyed by input name: the ground truth flags of the workflow.

    Examples
    --------
    >>> masks = cosmic_ray_masks((32, 64))
    >>> sorted(masks), masks["exposure_1"].dtype
    (['exposure_1', 'exposure_2'], dtype('bool'))
    """
    return _simulate(shape)[1]


def _simulate(shape: tuple[int, int]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    field = sky_image(shape)
    objects = np.clip(field - np.percentile(field, OBJECT_PERCENTILE), 0.0, None)
    sky = SKY + SCALE / max(objects.max(), 1e-9) * ndimage.gaussian_filter(objects, PSF_SIGMA)
    del field, objects  # large images: hold only what the exposures need
    flat = flat_field(shape)
    out, hits = {"flat": flat}, {}
    for k, seed in ((1, 11), (2, 22)):
        rng = np.random.default_rng(seed)
        image = rng.poisson(sky * flat).astype(np.float64) + rng.normal(0.0, READ_NOISE, shape)
        cells, energy = cosmic_rays(shape, rng)
        np.add.at(image, tuple(cells.T), energy)
        out[f"exposure_{k}"] = (image + BIAS).astype(np.float32)
        hit = np.zeros(shape, bool)
        hit[tuple(cells.T)] = True
        hits[f"exposure_{k}"] = hit
    return out, hits


# -- the workflow -------------------------------------------------------------------------
def cosmic_rays_udf() -> CosmicRays:
    """UDFs A and B: L.A.Cosmic on one exposure in electrons (no saturation: the synthetic
    exposures have none), one iteration: a stencil of radius 8 that runs on tiles.  (Two
    iterations reach 18 pixels through a cleaning round and need whole images, since
    astroscrappy cleans large hits with the global median.)"""
    return CosmicRays(sigclip=5.0, objlim=8.0, gain=1.0, readnoise=READ_NOISE, satlevel=np.inf, niter=1)


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
        crmask = wf.add(cosmic_rays_udf(), elec, name=f"crmask_{k}")       # UDF A / B
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


# -- real data: astroscrappy's GMOS frame -----------------------------------------------------
#: node name -> role, for the real-data workflow (`build_gmos`)
#: astroscrappy's test cutout of a GMOS-S long-slit frame (S20190808S0048, reduced with DRAGONS)
GMOS_FILE = ("tests", "data", "gmos.fits")


def gmos_path() -> str:
    """The path of ``gmos.fits`` inside the installed astroscrappy package."""
    import os

    import astroscrappy

    path = os.path.join(os.path.dirname(astroscrappy.__file__), *GMOS_FILE)
    if not os.path.exists(path):
        raise WorkflowError(f"astroscrappy's test frame is missing at {path}; reinstall astroscrappy>=1.1 "
                            "(its wheel ships tests/data/gmos.fits)")
    return path


def header_gain(header: Any) -> float:
    """Electrons per count of a FITS frame: ``GAIN`` if the header has it; 1.0 when the
    frame was already converted to electrons (DRAGONS records ``ADUTOELE``)."""
    for key in ("GAIN", "EGAIN"):
        if key in header:
            return float(header[key])
    if "ADUTOELE" in header:
        return 1.0
    raise WorkflowError("the FITS header gives no gain (GAIN, EGAIN) and no ADU-to-electrons conversion "
                        "(ADUTOELE); pass the gain explicitly")


def gmos_frame() -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """The GMOS frame's SCI, SKYFIT and VAR extensions (native float32, electrons) and its
    calibration: the gain (from the header), the read noise (the header's, else the value
    astroscrappy's test uses for this frame; L.A.Cosmic ignores it when given the variance)
    and the median noise."""
    from astropy.io import fits

    from subzero.inputs_check import check_input_array

    with fits.open(gmos_path()) as hdul:
        header = hdul[0].header
        arrays = {name: check_input_array(name, np.asarray(hdul[ext].data))
                  for name, ext in (("sci", "SCI"), ("sky", "SKYFIT"), ("var", "VAR"))}
    readnoise = float(header.get("RDNOISE", header.get("READNOIS", 4.24)))
    calib = {"gain": header_gain(header), "readnoise": readnoise,
             "sigma": float(np.median(np.sqrt(np.clip(arrays["var"], 0, None))))}
    return arrays, calib


def build_gmos() -> tuple[Workflow, dict[str, np.ndarray]]:
    """The real-data workflow: 17 operators on astroscrappy's GMOS frame (150 x 200).

    L.A.Cosmic gets the sky background and the variance the reduction produced (as a real
    pipeline passes them) and the gain from the header; the paper's CRD flags what it
    missed in the sky-subtracted frame; a per-column mean removes the residual background;
    the flagged pixels are repaired; the frame is smoothed, divided by its noise, and
    searched for sources (sep) and labelled (connected components of the bright pixels);
    the repaired frame is summed into a spatial profile and a spectrum.

    Examples
    --------
    >>> wf, inputs = build_gmos()
    >>> sorted(inputs), len([n for n in wf.nodes if not n.is_input])
    (['sci', 'sky', 'var'], 17)
    """
    from subzero.operators import Apply, CosmicRayDetect, Label, Maximum, Mean, Sum, Threshold

    inputs, calib = gmos_frame()
    sigma = calib["sigma"]
    wf = Workflow("gmos")
    sci, sky, var = wf.input("sci"), wf.input("sky"), wf.input("var")
    crmask = wf.add(CosmicRays(sigclip=4.5, sigfrac=0.3, objlim=5.0, gain=calib["gain"],
                               readnoise=calib["readnoise"], satlevel=np.inf, niter=1,
                               background=True, variance=True), sci, sky, var, name="crmask")     # A
    sub = wf.add(Subtract(), sci, sky, name="sub")
    crd = wf.add(CosmicRayDetect(threshold=15 * sigma, radius=3), sub, name="crd")
    flags = wf.add(Maximum(), crmask, crd, name="flags")
    cover = wf.add(SubtractScalar(1.0, reverse=True), flags, name="cover")
    column = wf.add(Mean(axis=0), sub, name="column_bg")                      # per-column background
    resid = wf.add(Subtract(), sub, column, name="resid")
    clean = wf.add(RepairCosmics(sigma, nsigma=8.0, window=2), resid, cover, name="clean")          # C
    smooth = wf.add(GaussianFilter(1.0, truncate=2.0), clean, name="smooth")
    noise = wf.add(Apply(np.sqrt), var, name="noise")
    ratio = wf.add(Divide(), smooth, noise, name="ratio")
    snr = wf.add(MultiplyScalar(math.sqrt(4 * math.pi)), ratio, name="snr")   # unit noise after smoothing
    wf.add(DetectStars(threshold=5.0, minarea=5), snr, name="stars")                                # D
    bright = wf.add(Threshold(5.0, ">"), snr, name="bright")
    wf.add(Label(), bright, name="labels")
    wf.add(Sum(axis=1), clean, name="profile")
    wf.add(Sum(axis=0), clean, name="spectrum")
    return wf, inputs

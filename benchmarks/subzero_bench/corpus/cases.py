"""The real-code corpus: functions of published packages, called as published inside `@sz.workflow`.

Each case is a small snippet a user could have written: a numpy function that calls one
package's function on its input arrays (the ``@sz.workflow`` decorator is the only change),
with seeded, realistic generated inputs at three sizes (``tiny`` and ``small`` for the tests,
``small`` and ``large`` (at least 1e6 cells) for the benchmark).  Nothing is downloaded and no
third-party code is copied: the packages come from PyPI (the ``corpus`` extra of setup.cfg).

`CASES` is the registry, in table order; `case(name)` looks one up.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from scipy import ndimage

import subzero as sz

__all__ = ["Case", "CASES", "SIZES", "case"]

SIZES = ("tiny", "small", "large")


class _Package:
    """A package imported, with the submodules the cases call, on its first attribute access:
    a process that runs one case imports that case's package only (photutils alone takes
    seconds), and the functions called are the package's own (looked up at call time).

    Examples
    --------
    >>> _Package("json", "decoder").decoder.JSONDecodeError.__name__
    'JSONDecodeError'
    """

    def __init__(self, name: str, *submodules: str):
        self._name, self._submodules = name, submodules

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        module = importlib.import_module(self._name)
        for sub in self._submodules:
            importlib.import_module(f"{self._name}.{sub}")
        return getattr(module, attr)


pd = _Package("pandas")
xr = _Package("xarray")
signal = _Package("scipy.signal")
astropy = _Package("astropy", "convolution", "nddata", "stats")
chemotools = _Package("chemotools", "scatter")
conorm = _Package("conorm")
photutils = _Package("photutils", "background")
pyet = _Package("pyet")
skimage = _Package("skimage", "exposure", "filters", "morphology")
spyndex = _Package("spyndex")


@dataclass(frozen=True)
class Case:
    """One corpus entry.

    Attributes
    ----------
    name : str
        The case's name (also the workflow's).
    package, call, domain : str
        The PyPI distribution, the function called (as imported), the field it serves.
    workflow : sz.TracedWorkflow
        The snippet, decorated with ``@sz.workflow`` (calling it runs plain numpy).
    shapes : dict
        Size name (`SIZES`) -> the shape of every input array at that size.
    make : callable
        ``make(shape, rng) -> {input name: array}``: the generated inputs.
    """

    name: str
    package: str
    call: str
    domain: str
    workflow: Any
    shapes: dict[str, tuple[int, ...]]
    make: Callable[[tuple[int, ...], np.random.Generator], dict[str, np.ndarray]]

    def inputs(self, size: str, seed: int = 0) -> dict[str, np.ndarray]:
        """The seeded inputs of ``size`` (one of `SIZES`)."""
        if size not in self.shapes:
            raise KeyError(f"case {self.name!r} has no size {size!r}; its sizes: {', '.join(self.shapes)}")
        return self.make(self.shapes[size], np.random.default_rng(seed))

    def cells(self, size: str) -> int:
        """Input cells at ``size`` (summed over the inputs)."""
        return int(sum(a.size for a in self.inputs(size).values()))


# =====================================================================================
# Realistic inputs (seeded)
# =====================================================================================
def _smooth(shape: tuple[int, ...], rng: np.random.Generator, sigma: float) -> np.ndarray:
    """Spatially correlated noise, unit variance."""
    field = ndimage.gaussian_filter(rng.standard_normal(shape), sigma, mode="wrap")
    return (field - field.mean()) / (field.std() or 1.0)


def star_field(shape: tuple[int, ...], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A CCD frame: sky with a gradient, Gaussian stars (PSF sigma 1.6 px), Poisson and read noise."""
    ny, nx = shape
    yy, xx = np.mgrid[0:ny, 0:nx]
    sky = 200.0 + 20.0 * (yy / ny) + 10.0 * (xx / nx)
    image = np.zeros(shape)
    n = max(4, int(ny * nx / 400))
    ys, xs = rng.integers(0, ny, n), rng.integers(0, nx, n)
    flux = rng.pareto(1.5, n) * 2000.0 + 500.0
    image[ys, xs] += flux
    image = ndimage.gaussian_filter(image, 1.6) + sky
    frame = rng.poisson(image).astype(np.float64) + rng.normal(0.0, 5.0, shape)
    return {"image": frame}


def cell_image(shape: tuple[int, ...], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A fluorescence micrograph: blob-shaped nuclei (radius 3-7 px) on a dim background, in [0, 1]."""
    ny, nx = shape
    seeds = np.zeros(shape)
    n = max(3, int(ny * nx / 600))
    seeds[rng.integers(0, ny, n), rng.integers(0, nx, n)] = rng.uniform(0.6, 1.0, n)
    nuclei = ndimage.grey_dilation(seeds, footprint=skimage.morphology.disk(5))
    nuclei = ndimage.gaussian_filter(nuclei, 1.2)
    image = 0.08 + 0.02 * _smooth(shape, rng, 12.0) + nuclei + rng.normal(0.0, 0.02, shape)
    return {"image": np.clip(image, 0.0, 1.0)}


def counts_matrix(shape: tuple[int, ...], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """RNA-seq counts, genes x samples: negative binomial with log-normal gene means and per-sample depths."""
    genes, samples = shape
    mean = np.exp(rng.normal(4.0, 1.5, (genes, 1))) * rng.uniform(0.5, 2.0, (1, samples))
    dispersion = 0.1
    p = 1.0 / (1.0 + mean * dispersion)
    counts = rng.negative_binomial(1.0 / dispersion, p)
    counts[rng.random(genes) < 0.05] = 0  # unexpressed genes
    return {"counts": counts.astype(np.int64)}


def temperatures(shape: tuple[int, ...], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Daily air temperature (deg C) on a grid, time x y x: a seasonal cycle, weather noise, a diurnal range."""
    days = shape[0]
    season = 12.0 - 10.0 * np.cos(2 * np.pi * np.arange(days) / 365.25)
    tmean = season.reshape((days,) + (1,) * (len(shape) - 1)) + 2.0 * _smooth(shape, rng, 2.0)
    spread = rng.uniform(3.0, 7.0, shape)
    return {"tmean": tmean, "tmax": tmean + spread, "tmin": tmean - spread}


def mean_temperature(shape: tuple[int, ...], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The daily mean temperature of `temperatures`."""
    return {"tmean": temperatures(shape, rng)["tmean"]}


def reflectance(shape: tuple[int, ...], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Surface reflectance bands of a scene with vegetated and bare patches (blue, red, near infrared)."""
    vegetation = 1.0 / (1.0 + np.exp(-2.0 * _smooth(shape, rng, 6.0)))
    noise = lambda: rng.normal(0.0, 0.005, shape)  # noqa: E731
    red = 0.12 - 0.08 * vegetation + noise()
    nir = 0.20 + 0.30 * vegetation + noise()
    blue = 0.08 - 0.04 * vegetation + noise()
    return {"nir": nir, "red": red, "blue": blue}


def reflectance_2(shape: tuple[int, ...], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The red and near infrared bands of `reflectance`."""
    bands = reflectance(shape, rng)
    return {"nir": bands["nir"], "red": bands["red"]}


def noisy_signal(shape: tuple[int, ...], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A sampled 1-D signal: two tones, a slow drift, white noise and a few impulsive spikes."""
    n = shape[0]
    t = np.arange(n) / 1000.0
    x = np.sin(2 * np.pi * 5.0 * t) + 0.5 * np.sin(2 * np.pi * 40.0 * t) + 0.3 * t + rng.normal(0.0, 0.2, n)
    spikes = rng.random(n) < 0.002
    x[spikes] += rng.normal(0.0, 5.0, int(spikes.sum()))
    return {"x": x}


def spectra(shape: tuple[int, ...], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """NIR spectra, samples x wavelengths: absorption bands with per-sample scatter (gain, offset)."""
    samples, waves = shape
    w = np.linspace(0.0, 1.0, waves)
    bands = sum(a * np.exp(-0.5 * ((w - c) / s) ** 2) for a, c, s in ((1.0, 0.3, 0.05), (0.6, 0.55, 0.08),
                                                                      (0.8, 0.8, 0.04)))
    conc = rng.uniform(0.5, 1.5, (samples, 1))
    gain, offset = rng.uniform(0.8, 1.2, (samples, 1)), rng.uniform(-0.1, 0.1, (samples, 1))
    return {"X": gain * (conc * bands + 0.2 * w) + offset + rng.normal(0.0, 0.002, shape)}


# =====================================================================================
# The snippets: the package's function, called as published
# =====================================================================================
# -- astronomy ---------------------------------------------------------------------------
@sz.workflow
def sigma_clip_columns(image):
    return astropy.stats.sigma_clip(image, sigma=3.0, maxiters=5, axis=0, masked=False)


@sz.workflow
def sigma_clipped_stats(image):
    mean, median, std = astropy.stats.sigma_clipped_stats(image, sigma=3.0)
    return {"mean": mean, "median": median, "std": std}


@sz.workflow
def block_reduce(image):
    return astropy.nddata.block_reduce(image, 4, func=np.mean)


@sz.workflow
def convolve_gaussian(image):
    return astropy.convolution.convolve(image, astropy.convolution.Gaussian2DKernel(1.5))


@sz.workflow
def background_2d(image):
    bkg = photutils.background.Background2D(image, (32, 32), filter_size=(3, 3))
    return {"background": bkg.background, "subtracted": image - bkg.background}


# -- microscopy / segmentation ----------------------------------------------------------
@sz.workflow
def otsu_mask(image):
    return image > skimage.filters.threshold_otsu(image)


@sz.workflow
def li_mask(image):
    return image > skimage.filters.threshold_li(image)


@sz.workflow
def remove_small_objects(image):
    mask = image > skimage.filters.threshold_otsu(image)
    return skimage.morphology.remove_small_objects(mask, max_size=20)


@sz.workflow
def rescale_intensity(image):
    return skimage.exposure.rescale_intensity(image, in_range=(0.05, 0.95), out_range=(0.0, 1.0))


@sz.workflow
def sobel_edges(image):
    return skimage.filters.sobel(image)


# -- genomics ---------------------------------------------------------------------------
@sz.workflow
def median_of_ratios(counts):
    return conorm.mrn(pd.DataFrame(counts)).to_numpy()


@sz.workflow
def counts_per_million(counts):
    return conorm.cpm(pd.DataFrame(counts)).to_numpy()


# -- climate / remote sensing -----------------------------------------------------------
def _grid(values, start: str = "2000-01-01"):
    time = pd.date_range(start, periods=values.shape[0], freq="D")
    return xr.DataArray(values, dims=("time", "y", "x"), coords={"time": time})


@sz.workflow
def hargreaves_pet(tmean, tmax, tmin, lat: float = 0.8):
    pet = pyet.hargreaves(_grid(tmean), _grid(tmax), _grid(tmin), lat=lat)
    return pet.to_numpy()


@sz.workflow
def saturation_vapour_pressure(tmean):
    return pyet.calc_e0(tmean)


@sz.workflow
def ndvi(nir, red):
    return spyndex.computeIndex("NDVI", params={"N": nir, "R": red})


@sz.workflow
def evi(nir, red, blue):
    return spyndex.computeIndex("EVI", params={"N": nir, "R": red, "B": blue, "g": 2.5, "C1": 6.0, "C2": 7.5,
                                               "L": 1.0})


# -- 1-D signals and spectra ------------------------------------------------------------
@sz.workflow
def savgol(x):
    return signal.savgol_filter(x, 11, 3)


@sz.workflow
def detrend(x):
    return signal.detrend(x)


@sz.workflow
def medfilt(x):
    return signal.medfilt(x, 5)


@sz.workflow
def snv(X):
    return chemotools.scatter.StandardNormalVariate().fit_transform(X)


@sz.workflow
def msc(X):
    return chemotools.scatter.MultiplicativeScatterCorrection().fit_transform(X)


# =====================================================================================
# The registry
# =====================================================================================
_IMAGE = {"tiny": (48, 40), "small": (128, 96), "large": (1024, 1024)}
_COUNTS = {"tiny": (300, 6), "small": (2000, 8), "large": (125_000, 8)}
_DAYS = {"tiny": (40, 3, 2), "small": (365, 8, 6), "large": (365, 55, 50)}
_SIGNAL = {"tiny": (1000,), "small": (8192,), "large": (1_048_576,)}
_SPECTRA = {"tiny": (12, 64), "small": (60, 256), "large": (1000, 1024)}

CASES: tuple[Case, ...] = (
    Case("sigma_clip_columns", "astropy", "astropy.stats.sigma_clip", "astronomy", sigma_clip_columns, _IMAGE,
         star_field),
    Case("sigma_clipped_stats", "astropy", "astropy.stats.sigma_clipped_stats", "astronomy", sigma_clipped_stats,
         _IMAGE, star_field),
    Case("block_reduce", "astropy", "astropy.nddata.block_reduce", "astronomy", block_reduce, _IMAGE, star_field),
    Case("convolve_gaussian", "astropy", "astropy.convolution.convolve", "astronomy", convolve_gaussian, _IMAGE,
         star_field),
    Case("background_2d", "photutils", "photutils.background.Background2D", "astronomy", background_2d, _IMAGE,
         star_field),
    Case("otsu_mask", "scikit-image", "skimage.filters.threshold_otsu", "microscopy", otsu_mask, _IMAGE,
         cell_image),
    Case("li_mask", "scikit-image", "skimage.filters.threshold_li", "microscopy", li_mask, _IMAGE, cell_image),
    Case("remove_small_objects", "scikit-image", "skimage.morphology.remove_small_objects", "microscopy",
         remove_small_objects, _IMAGE, cell_image),
    Case("rescale_intensity", "scikit-image", "skimage.exposure.rescale_intensity", "microscopy",
         rescale_intensity, _IMAGE, cell_image),
    Case("sobel_edges", "scikit-image", "skimage.filters.sobel", "microscopy", sobel_edges, _IMAGE, cell_image),
    Case("median_of_ratios", "conorm", "conorm.mrn", "genomics", median_of_ratios, _COUNTS, counts_matrix),
    Case("counts_per_million", "conorm", "conorm.cpm", "genomics", counts_per_million, _COUNTS, counts_matrix),
    Case("hargreaves_pet", "pyet", "pyet.hargreaves", "climate", hargreaves_pet, _DAYS, temperatures),
    Case("saturation_vapour_pressure", "pyet", "pyet.calc_e0", "climate", saturation_vapour_pressure, _DAYS,
         mean_temperature),
    Case("ndvi", "spyndex", "spyndex.computeIndex", "remote sensing", ndvi, _IMAGE, reflectance_2),
    Case("evi", "spyndex", "spyndex.computeIndex", "remote sensing", evi, _IMAGE, reflectance),
    Case("savgol", "scipy", "scipy.signal.savgol_filter", "signals", savgol, _SIGNAL, noisy_signal),
    Case("detrend", "scipy", "scipy.signal.detrend", "signals", detrend, _SIGNAL, noisy_signal),
    Case("medfilt", "scipy", "scipy.signal.medfilt", "signals", medfilt, _SIGNAL, noisy_signal),
    Case("snv", "chemotools", "chemotools.scatter.StandardNormalVariate", "spectroscopy", snv, _SPECTRA, spectra),
    Case("msc", "chemotools", "chemotools.scatter.MultiplicativeScatterCorrection", "spectroscopy", msc, _SPECTRA,
         spectra),
)


def case(name: str) -> Case:
    """The case named ``name``."""
    for c in CASES:
        if c.name == name:
            return c
    raise KeyError(f"no corpus case {name!r}; the cases: {', '.join(c.name for c in CASES)}")

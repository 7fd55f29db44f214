"""Input files (.npy, FITS, Zarr) and calling a workflow file's build() with them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import subzero as sz
from subzero.input_files import (
    call_build, check_bound, header_from_text, header_to_text, parse_assignments, read_input, read_inputs,
)

fits = pytest.importorskip("astropy.io.fits")
ASTROPY_DATA = Path(fits.__file__).parent / "tests" / "data"


@pytest.fixture
def image():
    return np.arange(12, dtype=np.float32).reshape(3, 4)


def write_fits(path: Path, image: np.ndarray, with_table: bool = False) -> Path:
    primary = fits.PrimaryHDU()
    primary.header["TELESCOP"] = "HST"
    sci = fits.ImageHDU(image, name="SCI")
    sci.header["OBJECT"] = "M31"
    sci.header["CRPIX1"] = 2.0
    hdus = [primary, sci, fits.ImageHDU(image * 2, name="SCI", ver=2)]
    if with_table:
        hdus.append(fits.BinTableHDU.from_columns([fits.Column(name="a", format="J", array=np.arange(3))],
                                                  name="CAT"))
    fits.HDUList(hdus).writeto(path)
    return path


# -- reading files ----------------------------------------------------------------------------

def test_npy_is_memory_mapped(tmp_path, image):
    np.save(tmp_path / "x.npy", image)
    array, header = read_input(str(tmp_path / "x.npy"))
    assert header is None and isinstance(array, np.memmap)
    np.testing.assert_array_equal(array, image)


def test_fits_default_index_name_and_version(tmp_path, image):
    path = write_fits(tmp_path / "img.fits", image)
    for spec, expected in [(str(path), image), (f"{path}[1]", image), (f"{path}[sci]", image),
                           (f"{path}[SCI,2]", image * 2), (f"{path}[2]", image * 2)]:
        array, header = read_input(spec)
        np.testing.assert_array_equal(array, expected)
        assert array.dtype.isnative and header["OBJECT" if expected is image else "EXTNAME"]
    array, header = read_input(f"{path}[1]")
    assert header["OBJECT"] == "M31" and header["CRPIX1"] == 2.0


def test_fits_primary_image_and_big_endian_data(tmp_path):
    data = np.arange(6, dtype=">i4").reshape(2, 3)
    fits.PrimaryHDU(data).writeto(tmp_path / "p.fits")
    array, header = read_input(str(tmp_path / "p.fits"))
    assert array.dtype == np.dtype("int32") and array.dtype.isnative and header["NAXIS"] == 2
    np.testing.assert_array_equal(array, data)


def test_astropy_shipped_files():
    hst = ASTROPY_DATA / "o4sp040b0_raw.fits"  # HST STIS raw: empty primary, SCI/ERR/DQ extensions
    array, header = read_input(str(hst))
    assert array.shape == (44, 62) and header["EXTNAME"] == "SCI"
    array, _ = read_input(f"{ASTROPY_DATA / 'comp.fits'}[1]")  # a tile-compressed image
    assert array.shape == (300, 440)
    with pytest.raises(sz.WorkflowError, match=r"\[ERR\] holds no image"):
        read_input(f"{hst}[ERR]")


def test_zarr_array(tmp_path, image):
    zarr = pytest.importorskip("zarr")
    z = zarr.open_array(str(tmp_path / "x.zarr"), mode="w", shape=image.shape, dtype=image.dtype, chunks=(2, 2))
    z[:] = image
    array, header = read_input(str(tmp_path / "x.zarr"))
    assert header is None and array.shape == image.shape
    np.testing.assert_array_equal(np.asarray(array), image)
    zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    with pytest.raises(sz.WorkflowError, match="not a readable Zarr array"):
        read_input(str(tmp_path / "g.zarr"))


@pytest.mark.parametrize("spec, fragment", [
    ("missing.npy", "does not exist"),
    ("x.txt", "unknown format '.txt'"),
    ("bad.npy", "not a readable .npy"),
    ("img.fits[7]", "has no extension [7]; it has: [0] PRIMARY PrimaryHDU; [1] SCI ImageHDU (3, 4)"),
    ("img.fits[DQ]", "has no extension [DQ]"),
    ("img.fits[CAT]", "[CAT] holds no image (BinTableHDU)"),
    ("img.fits[0]", "[0] holds no image (PrimaryHDU, no data)"),
    ("img.fits[]", "empty FITS extension"),
    ("img.fits[SCI,x]", "must be an integer"),
    ("table.fits", "holds no image HDU"),
    ("bad.fits", "not a readable FITS file"),
])
def test_bad_files_name_the_file_and_the_fix(tmp_path, image, spec, fragment, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_fits(tmp_path / "img.fits", image, with_table=True)
    fits.HDUList([fits.PrimaryHDU(), fits.BinTableHDU.from_columns(
        [fits.Column(name="a", format="J", array=np.arange(3))])]).writeto(tmp_path / "table.fits")
    (tmp_path / "x.txt").write_text("1 2 3")
    (tmp_path / "bad.npy").write_bytes(b"not numpy")
    (tmp_path / "bad.fits").write_bytes(b"SIMPLE  =  nonsense" + b" " * 100)
    with pytest.raises(sz.WorkflowError) as info:
        read_input(spec)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_read_inputs_and_headers(tmp_path, image):
    np.save(tmp_path / "dark.npy", image)
    arrays, headers = read_inputs({"raw": f"{write_fits(tmp_path / 'img.fits', image)}[SCI]",
                                   "dark": str(tmp_path / "dark.npy")})
    assert set(arrays) == {"raw", "dark"} and set(headers) == {"raw"}
    text = header_to_text(headers["raw"])
    assert header_from_text(text)["OBJECT"] == "M31"


def test_parse_assignments():
    assert parse_assignments(["a=1", "b=x=y"], "--param") == {"a": "1", "b": "x=y"}
    for bad in (["a"], ["=1"], ["a="]):
        with pytest.raises(sz.WorkflowError, match="must look like"):
            parse_assignments(bad, "--param")
    with pytest.raises(sz.WorkflowError, match="given twice"):
        parse_assignments(["a=1", "a=2"], "--param")


# -- build() signatures -----------------------------------------------------------------------

def workflow() -> sz.Workflow:
    wf = sz.Workflow("w")
    wf.add(sz.operators.Transpose(), wf.input("x"), name="t")
    return wf


def test_build_without_arguments_keeps_its_inputs_unless_files_replace_them():
    def build():
        return workflow(), {"x": np.zeros((2, 2))}

    wf, inputs = call_build(build, "f.py", {}, {})
    assert inputs["x"].shape == (2, 2)
    wf, inputs = call_build(build, "f.py", {"x": np.ones((3, 3))}, {})
    assert inputs["x"].shape == (3, 3)


def test_build_with_inputs_and_typed_params():
    seen = {}

    def build(inputs, sigma: float = 1.0, size=3, smooth: bool = False, name: str = "a", quick: bool = False):
        seen.update(inputs=inputs, sigma=sigma, size=size, smooth=smooth, name=name, quick=quick)
        return workflow()

    wf, inputs = call_build(build, "f.py", {"x": np.ones(2)}, {"sigma": "2.5", "size": "5", "smooth": "yes",
                                                             "name": "b"}, quick=True)
    assert seen == {"inputs": {"x": inputs["x"]}, "sigma": 2.5, "size": 5, "smooth": True, "name": "b", "quick": True}
    assert isinstance(wf, sz.Workflow) and set(inputs) == {"x"}


def test_build_with_params_dict_or_kwargs():
    def build(inputs, params):
        assert params == {"k": "v"}
        return workflow(), {}

    call_build(build, "f.py", {}, {"k": "v"})

    def build_kw(data, **options):
        assert options == {"k": "v"} and data == {"x": 1}
        return workflow(), dict(data)

    assert call_build(build_kw, "f.py", {"x": 1}, {"k": "v"})[1] == {"x": 1}


@pytest.mark.parametrize("build, params, quick, fragment", [
    (lambda: workflow(), {"k": "v"}, False, "unknown --param 'k': f.py: build() takes no parameters"),
    (lambda inputs, sigma=1.0: workflow(), {"sgima": "2"}, False, "unknown --param 'sgima'"),
    (lambda inputs, sigma=1.0: workflow(), {"sigma": "wide"}, False, "expects float for 'sigma'"),
    (lambda inputs, smooth=False: workflow(), {"smooth": "maybe"}, False, "expects bool"),
    (lambda: workflow(), {}, True, "--quick: f.py: build() takes no 'quick' parameter"),
    (lambda inputs, *, sigma: workflow(), {}, False, "needs 'sigma'; give --param sigma=VALUE"),
    (lambda: 42, {}, False, "must return a Workflow or (workflow, inputs dict), got int"),
])
def test_build_errors_say_what_to_do(build, params, quick, fragment):
    with pytest.raises(sz.WorkflowError) as info:
        call_build(build, "f.py", {}, params, quick=quick)
    assert fragment in str(info.value)


def test_check_bound():
    wf = workflow()
    check_bound(wf, {"x": 1}, {"x": "x.npy"})
    with pytest.raises(sz.WorkflowError, match="workflow 'w' has no input 'y'; its inputs are x"):
        check_bound(wf, {"x": 1, "y": 2}, {"y": "y.npy"})
    with pytest.raises(sz.WorkflowError, match="needs input 'x': give --input x=PATH"):
        check_bound(wf, {}, {})


def test_docstring_examples():
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module("subzero.input_files"), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0

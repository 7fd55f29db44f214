"""subzero.ndimage: scipy.ndimage's names over symbolic arrays give scipy's values, dtypes
and numbering, with the operators' exact lineage."""

from __future__ import annotations

import types

import numpy as np
import pytest
from scipy import ndimage

import subzero as sz
from subzero import ndimage as szi
from subzero.oracle import check_workflow, evaluate_workflow
from subzero.trace import UnsupportedCallError

RNG = np.random.default_rng(3)
IMAGE = np.round(RNG.normal(size=(9, 11)), 3)
KERNEL = np.array([[0.0, 1.0, 0.5], [2.0, -1.0, 0.0], [0.0, 0.25, 0.0]])

CALLS = {
    "convolve": (lambda m, x: m.convolve(x, KERNEL, mode="nearest")),
    "correlate": (lambda m, x: m.correlate(x, KERNEL, mode="constant", cval=1.0)),
    "gaussian_filter": (lambda m, x: m.gaussian_filter(x, 1.2, truncate=3.0)),
    "gaussian_filter_order": (lambda m, x: m.gaussian_filter(x, (1.0, 0.7), order=(0, 1), mode="mirror")),
    "uniform_filter": (lambda m, x: m.uniform_filter(x, 3)),
    "median_filter": (lambda m, x: m.median_filter(x, size=3)),
    "maximum_filter": (lambda m, x: m.maximum_filter(x, footprint=KERNEL != 0)),
    "minimum_filter": (lambda m, x: m.minimum_filter(x, size=(2, 3), mode="wrap")),
    "laplace": (lambda m, x: m.laplace(x)),
    "sobel": (lambda m, x: m.sobel(x, axis=0)),
    "binary_dilation": (lambda m, x: m.binary_dilation(x > 0.5, iterations=2)),
    "binary_erosion": (lambda m, x: m.binary_erosion(x > -0.5)),
    "zoom": (lambda m, x: m.zoom(x, (2, 0.5), order=0)),
    "zoom_grid": (lambda m, x: m.zoom(x, 3, order=0, grid_mode=True, mode="grid-constant")),
}


@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_each_function_gives_scipys_values_and_dtype(name, dtype):
    image = IMAGE.astype(dtype)
    call = CALLS[name]
    traced = sz.workflow(lambda x: call(szi, x), name=name).trace({"x": image})
    got = evaluate_workflow(traced, {"x": image})["out"]
    want = call(ndimage, image)
    assert got.dtype == want.dtype and got.shape == want.shape
    if dtype == np.float64:
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    else:  # separable filters round each pass to float32 in scipy
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_functions_run_scipy_on_numpy_arrays():
    np.testing.assert_array_equal(szi.gaussian_filter(IMAGE, 1.0), ndimage.gaussian_filter(IMAGE, 1.0))
    labels, n = szi.label(IMAGE > 1)
    assert n == ndimage.label(IMAGE > 1)[1]


def test_label_numbers_components_as_scipy_and_returns_their_count():
    @sz.workflow
    def blobs(x, level: float = 0.8):
        labels, n = szi.label(x > level, structure=np.ones((3, 3)))
        return {"labels": labels, "n": n, "share": labels / n}

    wf = blobs.trace({"x": IMAGE})
    values = evaluate_workflow(wf, {"x": IMAGE})
    want, n = ndimage.label(IMAGE > 0.8, structure=np.ones((3, 3)))
    assert values["labels"].dtype == want.dtype == np.int32
    np.testing.assert_array_equal(values["labels"], want)
    assert int(values["n"].reshape(())) == n > 3
    np.testing.assert_allclose(values["share"], want / n)
    assert [n.name for n in wf.nodes] == ["x", "greater", "label", "labels", "n", "share"]


def test_a_filter_pipeline_runs_with_exact_lineage(tmp_path):
    @sz.workflow
    def smooth(x):
        s = szi.gaussian_filter(x, 1.0, truncate=2.0, mode="nearest")
        edges = szi.sobel(s, axis=1)
        return {"mask": szi.binary_dilation(np.abs(edges) > 1.0), "med": szi.median_filter(edges, 3)}

    run = smooth.run({"x": IMAGE}, store=tmp_path / "r", executor="local")
    np.testing.assert_array_equal(np.asarray(run.output("mask")),
                                  ndimage.binary_dilation(np.abs(ndimage.sobel(
                                      ndimage.gaussian_filter(IMAGE, 1.0, truncate=2.0, mode="nearest"), 1)) > 1.0))
    report = check_workflow(run, smooth.trace({"x": IMAGE}), {"x": IMAGE}, cells=10, backward=6)
    assert report.ok, str(report)
    # radius 2 (gaussian) + 1 (sobel) + 1 (median) around (4, 5): rows 0..8, columns 1..9
    cells = run.backward("med", [(4, 5)], to="x")
    assert len(cells) == 81 and cells.min(axis=0).tolist() == [0, 1] and cells.max(axis=0).tolist() == [8, 9]


def test_label_dependence_reading_passes_the_oracle(tmp_path):
    @sz.workflow
    def blobs(x):
        return szi.label(x > 0.8, lineage="dependence")[0]

    small = IMAGE[:5, :6]
    run = blobs.run({"x": small}, store=tmp_path / "r", executor="local")
    report = check_workflow(run, blobs.trace({"x": small}), {"x": small}, cells=10, backward=6)
    assert report.ok, str(report)


@pytest.mark.parametrize("call, fragment", [
    (lambda x: szi.zoom(x, 2), "order=3"),
    (lambda x: szi.gaussian_filter(x, 1.0, axes=(0,)), "axes="),
    (lambda x: szi.convolve(x, KERNEL, origin=1), "origin=1"),
    (lambda x: szi.binary_erosion(x > 0, mask=x > 1), "mask="),
])
def test_unsupported_arguments_are_named_from_shapes_and_coarse_on_values(call, fragment):
    f = sz.workflow(lambda x: call(x), name="f")
    with pytest.raises(UnsupportedCallError, match=fragment):  # traced from shapes alone: said, with the fix
        f.trace({"x": types.SimpleNamespace(shape=IMAGE.shape, dtype=IMAGE.dtype)})
    assert not f.report({"x": IMAGE}).exact  # traced on values: it runs, as a labelled coarse step

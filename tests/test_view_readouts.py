"""What the viewer's page reads besides tiles (`subzero.tools.view.readouts`), through the app's
endpoints: tile values, display limits, line plots and scalars, the compass, and statistics of
brushed and lineage cells, each checked against numpy over the stored arrays."""

from __future__ import annotations

import numpy as np
import pytest
from starlette.testclient import TestClient

import subzero as sz
from subzero import operators as ops
from subzero.input_files import header_to_text
from subzero.tools.view.app import create_app
from subzero.tools.view.readouts import LINE_POINTS, cell_stats
from view_store import make_run


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from astropy.wcs import WCS

    w = WCS(naxis=2)
    w.wcs.ctype = ["RA---TAN", "DEC--TAN"]
    w.wcs.crval = [150.0, 2.0]
    w.wcs.crpix = [10.5, 12.5]
    w.wcs.cdelt = [-0.001, 0.001]
    run = make_run(tmp_path_factory.mktemp("readouts") / "s", "FullMany",
                   metadata={"x": {"fits_header": header_to_text(w.to_header())}})
    return run, TestClient(create_app(run, tmp_path_factory.mktemp("readoutscache"), warm=False))


def test_tile_values_are_the_pyramids(store):
    run, client = store
    got = client.get("/api/values/blur/0/0/0")
    assert got.status_code == 200 and got.headers["x-shape"] == "24,20"
    np.testing.assert_array_equal(np.frombuffer(got.content, "<f4").reshape(24, 20),
                                  np.asarray(run.output("blur")[:], np.float32))
    labels = client.get("/api/values/stars/0/0/0")  # labels stay exact integers
    assert labels.headers["x-dtype"] == "int32" and got.headers["x-dtype"] == "float32"
    np.testing.assert_array_equal(np.frombuffer(labels.content, "<i4").reshape(24, 20), np.asarray(run.output("stars")[:]))
    assert client.get("/api/values/blur/0/1/0").status_code == 404
    assert client.get("/api/values/nope/0/0/0").status_code == 404


def test_limits_modes(store):
    run, client = store
    x = np.asarray(run.output("x")[:], np.float64)
    minmax = client.get("/api/limits/x?mode=minmax").json()
    assert (minmax["lo"], minmax["hi"]) == pytest.approx((x.min(), x.max()), rel=1e-6)
    p99 = client.get("/api/limits/x?mode=99").json()
    assert (p99["lo"], p99["hi"]) == pytest.approx(tuple(np.percentile(x, [0.5, 99.5])), rel=1e-6)
    z = client.get("/api/limits/x").json()
    assert z["mode"] == "zscale" and z["lo"] < z["hi"]
    bad = client.get("/api/limits/x?mode=median")
    assert bad.status_code == 400 and "zscale" in bad.json()["error"]


def test_compass_where_there_is_a_wcs(store):
    run, client = store
    got = client.get("/api/compass/blur").json()  # blur keeps x's grid: north is +row, east is -col here
    assert got["north"] == pytest.approx([0, 1], abs=1e-3) and got["east"] == pytest.approx([-1, 0], abs=1e-3)
    none = client.get("/api/compass/flipped")
    assert none.status_code == 400 and "no WCS" in none.json()["error"]


def test_stats_of_brush_and_lineage_match_numpy(store):
    run, client = store
    boxes = [[6, 12, 4, 10], [8, 10, 10, 13]]
    got = client.post("/api/stats", json={"node": "bright", "direction": "backward", "boxes": boxes, "to": ["x"]})
    assert got.status_code == 200, got.text
    body = got.json()
    brush = np.zeros(run.shape("bright"), bool)
    for r0, r1, c0, c1 in boxes:
        brush[r0:r1, c0:c1] = True
    assert body["brush"]["count"] == brush.sum() == 36 + 6
    lineage = run.backward_mask("bright", cells=brush, to="x")
    values = np.asarray(run.output("x")[:], np.float64)[lineage]
    x = body["answers"]["x"]
    assert x["count"] == lineage.sum() and sum(x["hist"]["counts"]) == lineage.sum()
    for key, fn in (("min", np.min), ("max", np.max), ("mean", np.mean), ("median", np.median), ("std", np.std)):
        assert x[key] == pytest.approx(float(fn(values)), rel=1e-5)
    assert client.post("/api/stats", json={"node": "bright", "direction": "sideways", "boxes": boxes}).status_code == 400
    # the same cells given as boxes (the page sends a lineage answer's boxes): the same statistics, no walk
    answer = client.post("/api/lineage", json={"node": "bright", "direction": "backward", "boxes": boxes,
                                               "to": ["x"]}).json()["answers"]["x"]
    direct = client.post("/api/stats", json={"node": "x", "boxes": answer["boxes"]}).json()
    assert direct["brush"] == x and direct["answers"] == {}


def test_cell_stats_counts_nan_without_using_it():
    got = cell_stats(np.array([1.0, np.nan, 3.0, np.inf]), bins=2)
    assert (got["count"], got["finite"], got["min"], got["max"], got["mean"]) == (4, 2, 1.0, 3.0, 2.0)
    assert got["hist"]["counts"] == [1, 1]
    assert cell_stats(np.zeros(0))["median"] is None


def test_line_and_scalar_nodes(tmp_path):
    wf = sz.Workflow("lines")
    v = wf.input("v")
    wf.add(ops.MultiplyScalar(2.0), v, name="twice")
    wf.add(ops.Sum(), v, name="total")
    data = np.sin(np.arange(3 * LINE_POINTS) / 50.0)
    run = wf.run({"v": data}, store=str(tmp_path / "s"), executor="local", tile_shape=512)
    client = TestClient(create_app(run, tmp_path / "cache", warm=False))
    line = client.get("/api/line/twice").json()
    assert line["kind"] == "line" and line["n"] == len(data) and len(line["x"]) == LINE_POINTS
    bins = np.split(2 * data, line["x"][1:])
    assert line["lo"] == pytest.approx([b.min() for b in bins], abs=1e-6)
    assert line["hi"] == pytest.approx([b.max() for b in bins], abs=1e-6)
    total = client.get("/api/line/total").json()
    assert total == {"kind": "scalar", "value": pytest.approx(float(data.sum()), rel=1e-6)}
    assert client.get("/api/line/nope").status_code == 404


def test_object_boxes_are_exactly_the_label(store):
    run, client = store
    labels = np.asarray(run.output("stars")[:])
    label = int(np.bincount(labels[labels > 0]).argmax())
    rows, cols = np.nonzero(labels == label)
    bbox = f"{rows.min()},{rows.max() + 1},{cols.min()},{cols.max() + 1}"
    got = client.get(f"/api/object/stars?label={label}&bbox={bbox}").json()
    mask = np.zeros(labels.shape, bool)
    for r0, r1, c0, c1 in got["boxes"]:
        assert not mask[r0:r1, c0:c1].any()  # disjoint
        mask[r0:r1, c0:c1] = True
    np.testing.assert_array_equal(mask, labels == label)
    assert got["cells"] == mask.sum() and client.get(f"/api/object/stars?label={label}").json() == got
    assert client.get("/api/object/stars?label=1&bbox=0,99,0,1").status_code == 400
    assert client.get("/api/object/stars?label=star").status_code == 400

"""The viewer over HTTP (Starlette's TestClient): the JSON API of the contract, tiles, pixel
values with RA/Dec, exports as the CLI writes them, and HTTP 400 with a JSON error for every
bad request."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from starlette.testclient import TestClient

from subzero.inputs import header_to_text
from subzero.view.app import create_app

from view_store import make_run


def _wcs():
    from astropy.wcs import WCS

    w = WCS(naxis=2)
    w.wcs.ctype = ["RA---TAN", "DEC--TAN"]
    w.wcs.crval = [150.0, 2.0]
    w.wcs.crpix = [10.5, 12.5]
    w.wcs.cdelt = [-0.001, 0.001]
    return w


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("viewapp") / "s", "FullOne",
                    metadata={"x": {"fits_header": header_to_text(_wcs().to_header())}})


@pytest.fixture(scope="module")
def client(run, tmp_path_factory):
    with TestClient(create_app(run, tmp_path_factory.mktemp("viewcache"))) as c:
        yield c


def test_nodes(client):
    got = client.get("/api/nodes")
    assert got.status_code == 200
    nodes = {n["name"]: n for n in got.json()}
    assert nodes["blur"] | {} == nodes["blur"]
    assert {k: nodes["blur"][k] for k in ("name", "operator", "shape", "dtype", "strategies", "inputs")} == {
        "name": "blur", "operator": "GaussianFilter", "shape": [24, 20], "dtype": "float32",
        "strategies": ["FullOne/backward"], "inputs": ["x"]}
    # x has a WCS; blur, bright, stars and mixed (blur + y) keep its grid; flipped (a transpose) and y do not
    assert {n for n, v in nodes.items() if v["wcs"]} == {"x", "blur", "bright", "stars", "mixed"}
    assert nodes["blur"]["levels"] == 1 and nodes["blur"]["tile"] == 256


def test_lineage_matches_the_run(client, run):
    body = {"node": "stars", "direction": "backward", "boxes": [[2, 10, 3, 9], [8, 12, 6, 14]], "to": None}
    got = client.post("/api/lineage", json=body)
    assert got.status_code == 200
    data = got.json()
    assert set(data) == {"answers", "ms"} and set(data["answers"]) == {"x", "blur", "bright"}
    for name, answer in data["answers"].items():
        mask = np.zeros(run.shape(name), np.int32)
        for r0, r1, c0, c1 in answer["boxes"]:
            mask[r0:r1, c0:c1] += 1
        assert mask.max() == 1
        expected = run.backward_mask("stars", box=[[(2, 10), (3, 9)], [(8, 12), (6, 14)]], to=name)
        np.testing.assert_array_equal(mask.astype(bool), expected)
        assert answer["cells"] == expected.sum()


@pytest.mark.parametrize("content, message", [
    (b"{not json", "not JSON"),
    (json.dumps({"node": "nope", "direction": "forward", "boxes": [[0, 1, 0, 1]]}), "unknown node 'nope'"),
    (json.dumps({"node": "x", "direction": "forward", "boxes": [[0, 1, 0, 99]]}), "outside node 'x'"),
    (json.dumps({"node": "x", "direction": "up", "boxes": [[0, 1, 0, 1]]}), "\"backward\" or \"forward\""),
    (json.dumps({"node": "x", "direction": "forward", "boxes": [[0, 1, 0, 1]], "to": ["y"]}), "not downstream"),
])
def test_bad_requests_are_400_with_a_json_error(client, content, message):
    got = client.post("/api/lineage", content=content, headers={"Content-Type": "application/json"})
    assert got.status_code == 400 and message in got.json()["error"]


def test_tiles(client):
    from PIL import Image

    got = client.get("/tiles/stars/0/0/0.png")
    assert got.status_code == 200 and got.headers["content-type"] == "image/png"
    assert Image.open(io.BytesIO(got.content)).size == (20, 24)  # (width, height) of the whole array
    for url, status in [("/tiles/stars/1/0/0.png", 404), ("/tiles/nope/0/0/0.png", 404), ("/nothing", 404)]:
        bad = client.get(url)
        assert bad.status_code == status and "error" in bad.json()


def test_pixel_with_sky_coordinates(client, run):
    got = client.get("/api/pixel/blur?row=11&col=9").json()
    assert got["value"] == pytest.approx(float(run.output("blur")[11, 9]))
    sky = _wcs().pixel_to_world(9, 11)
    assert got["ra"] == pytest.approx(sky.ra.deg) and got["dec"] == pytest.approx(sky.dec.deg)
    assert "ra" not in client.get("/api/pixel/flipped?row=1&col=1").json()
    assert client.get("/api/pixel/blur?row=99&col=0").status_code == 400


def test_exports(client, run, tmp_path):
    from astropy.io import fits
    from regions import Regions

    body = {"node": "stars", "direction": "backward", "boxes": [[2, 10, 3, 9]], "target": "x"}
    expected = run.backward_mask("stars", box=[(2, 10), (3, 9)], to="x")
    got = client.post("/api/export", json=body | {"format": "npy"})
    assert got.status_code == 200 and 'filename="x-backward.npy"' in got.headers["content-disposition"]
    np.testing.assert_array_equal(np.load(io.BytesIO(got.content)), expected)
    got = client.post("/api/export", json=body | {"format": "fits"})
    with fits.open(io.BytesIO(got.content)) as hdul:
        np.testing.assert_array_equal(hdul[0].data.astype(bool), expected)
        assert hdul[0].header["CTYPE1"] == "RA---TAN"  # the input's WCS comes along
    for fmt, frame in [("reg", "image"), ("reg-fk5", "fk5")]:
        got = client.post("/api/export", json=body | {"format": fmt})
        assert got.status_code == 200 and f"\n{frame}\n" in got.text
        path = tmp_path / f"{fmt}.reg"
        path.write_text(got.text)
        regions = Regions.read(str(path), format="ds9")
        cells = 0
        for r in regions:
            pix = r.to_pixel(_wcs()) if fmt == "reg-fk5" else r
            cells += round(pix.width) * round(pix.height)
        assert cells == expected.sum()
    brush = client.post("/api/export", json=body | {"target": "stars", "format": "npy"})
    assert np.load(io.BytesIO(brush.content)).sum() == 8 * 6  # the brush itself
    bad = client.post("/api/export", json=body | {"target": "flipped", "format": "npy"})
    assert bad.status_code == 400 and "not upstream" in bad.json()["error"]
    no_wcs = client.post("/api/export", json={"node": "y", "direction": "forward", "boxes": [[0, 2, 0, 2]],
                                              "target": "flipped", "format": "reg-fk5"})
    assert no_wcs.status_code == 400 and "has no WCS" in no_wcs.json()["error"]
    assert client.post("/api/export", json=body | {"format": "png"}).status_code == 400


def test_page_and_static_files(client):
    page = client.get("/")
    assert page.status_code == 200 and "/static/view.js" in page.text
    assert client.get("/static/view.js").status_code == 200
    assert client.get("/api/run").json()["workflow"] == "viewtest"

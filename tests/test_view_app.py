"""The viewer over HTTP (Starlette's TestClient): the JSON API of the contract, tiles, pixel
values with RA/Dec, exports as the CLI writes them, and HTTP 400 with a JSON error for every
bad request."""

from __future__ import annotations

import io
import json
import re
import time
from typing import Any

import numpy as np
import pytest
from starlette.testclient import TestClient

from subzero.input_files import header_to_text
from subzero.tools.view.app import create_app

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
    for url, status in [("/tiles/stars/1/0/0.png", 404), ("/tiles/nope/0/0/0.png", 404), ("/nothing", 404),
                        ("/tiles/stars/" + "9" * 5000 + "/0/0.png", 404), ("/tiles/stars/0/-1/0.png", 404),
                        ("/tiles/stars/0/x/0.png", 404), ("/api/pixel/x?row=" + "9" * 5000 + "&col=0", 400)]:
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


def _post(client, path, content, content_type="application/json"):
    return client.post(path, content=content, headers={"Content-Type": content_type})


LINEAGE = {"node": "stars", "direction": "backward", "boxes": [[2, 10, 3, 9]], "to": None}
EXPORT = {"node": "stars", "direction": "backward", "boxes": [[2, 10, 3, 9]], "target": "x", "format": "npy"}


@pytest.mark.parametrize("path, content", [
    ("/api/lineage", "[" * 5000 + "]" * 5000),
    ("/api/lineage", '{"node": "stars", "direction": "backward", "boxes": ' + "[" * 5000 + "]" * 5000 + "}"),
    ("/api/lineage", '{"node": "stars", "direction": "backward", "boxes": ' + "[" * 200 + "]" * 200 + "}"),
    ("/api/export", '{"node": "stars", "target": "x", "format": "npy", "boxes": ' + "[" * 5000 + "]" * 5000 + "}"),
    ("/api/export", '{"node": {"a": ' * 3000 + "1" + "}" * 3000 + "}"),
    ("/api/lineage", '{"node": ' + "9" * 5000 + "}"),
])
def test_deep_nesting_and_huge_numbers_are_400s(client, path, content):
    got = _post(client, path, content)
    assert got.status_code == 400 and got.headers["content-type"] == "application/json"
    assert "deep" in got.json()["error"] or "not JSON" in got.json()["error"]


def test_the_body_size_limit_is_413_naming_the_setting(client, monkeypatch):
    monkeypatch.setenv("SUBZERO_VIEW_MAX_BODY_BYTES", "200")
    small = json.dumps(LINEAGE)
    assert len(small) < 200 and client.post("/api/lineage", json=LINEAGE).status_code == 200
    big = json.dumps(LINEAGE | {"boxes": [[2, 10, 3, 9]] * 20})
    for path in ("/api/lineage", "/api/export"):
        got = _post(client, path, big)
        assert got.status_code == 413 and "view_max_body_bytes" in got.json()["error"]
    # a streamed body of unknown length is cut off at the limit too
    got = client.post("/api/lineage", content=iter([b"[" + b"0, " * 100] * 10 + [b"0]"]),
                      headers={"Content-Type": "application/json"})
    assert got.status_code == 413 and "200 bytes" in got.json()["error"]


def test_the_box_count_limit_is_400_naming_the_setting(client, monkeypatch):
    monkeypatch.setenv("SUBZERO_VIEW_MAX_BOXES", "3")
    assert client.post("/api/lineage", json=LINEAGE | {"boxes": [[2, 10, 3, 9]] * 3}).status_code == 200
    for path, body in (("/api/lineage", LINEAGE), ("/api/export", EXPORT)):
        got = client.post(path, json=body | {"boxes": [[2, 10, 3, 9]] * 4})
        assert got.status_code == 400
        assert '"boxes" has 4 boxes, over 3' in got.json()["error"] and "view_max_boxes" in got.json()["error"]


@pytest.mark.parametrize("path, body, words", [
    ("/api/export", EXPORT | {"target": "nope"}, ['"target" names an unknown node', "'nope'", "x, y"]),
    ("/api/export", EXPORT | {"target": "flipped"}, ['"target"', "not upstream of 'stars'", "x, blur, bright"]),
    ("/api/export", EXPORT | {"target": 3}, ['"target" must be the name', "got 3"]),
    ("/api/export", EXPORT | {"format": ["npy"]}, ['"format" must be one of npy, fits, reg, reg-fk5', "['npy']"]),
    ("/api/export", EXPORT | {"to": ["x"]}, ['an export has no "to"', '"target"']),
    ("/api/lineage", LINEAGE | {"to": []}, ['"to" is an empty list', "upstream nodes of 'stars' (x, blur, bright)"]),
    ("/api/lineage", LINEAGE | {"to": "x"}, ['"to" must be a list of node names or null', "got 'x'"]),
    ("/api/lineage", LINEAGE | {"colour": 1}, ["unknown field(s) 'colour'", "node, direction, boxes, to"]),
    ("/api/lineage", LINEAGE | {"boxes": [[2, 10, 3, 9]] * 50 + [[0]]}, ["box [0]", "4 integers"]),
])
def test_field_errors_name_the_field_what_came_and_what_is_allowed(client, path, body, words):
    got = client.post(path, json=body)
    assert got.status_code == 400
    for word in words:
        assert word in got.json()["error"], (word, got.json()["error"])
    assert len(got.json()["error"]) < 400  # what came is quoted cut short


def test_empty_and_non_json_bodies(client):
    for path in ("/api/lineage", "/api/export"):
        assert _post(client, path, b"").status_code == 400 and "empty" in _post(client, path, b" ").json()["error"]
        got = _post(client, path, json.dumps(LINEAGE), "text/plain")
        assert got.status_code == 415 and "Content-Type: application/json" in got.json()["error"]
        assert _post(client, path, b"\xff\xfe", "application/json").status_code == 400


def test_values_are_rounded_and_exports_stay_exact(client, run):
    from subzero.tools.view.app import VALUE_DIGITS, readout

    exact = float(run.output("blur")[11, 9])
    got = client.get("/api/pixel/blur?row=11&col=9").json()
    assert got["value"] == readout(exact) == pytest.approx(exact, rel=10 ** (1 - VALUE_DIGITS))
    assert len(repr(got["value"]).replace("-", "").replace(".", "").lstrip("0")) <= VALUE_DIGITS
    assert len(repr(got["ra"]).split(".")[1]) <= 7 and len(repr(got["dec"]).split(".")[1]) <= 7
    assert readout(481.68158495195786) == 481.6816 and readout(float("nan")) is None and readout(7) == 7


def test_a_token_guards_every_request(run, tmp_path):
    with TestClient(create_app(run, tmp_path, warm=False, token="s3cret")) as c:
        for url in ("/", "/api/nodes", "/static/view.js", "/tiles/stars/0/0/0.png", "/api/pixel/x?row=0&col=0"):
            denied = c.get(url)
            assert denied.status_code == 403 and "needs its token" in denied.json()["error"], url
        assert c.get("/api/nodes?token=wrong").status_code == 403
        assert c.post("/api/lineage", json=LINEAGE).status_code == 403
        assert c.get("/api/nodes", headers={"Authorization": "token s3cret"}).status_code == 200
        page = c.get("/?token=s3cret")  # the printed URL: the answer sets the cookie the page then sends
        assert page.status_code == 200 and re.match(r"subzero_view_token-\w{12}=s3cret;", page.headers["set-cookie"])
        assert "SameSite=Strict" in page.headers["set-cookie"]
        assert c.post("/api/lineage", json=LINEAGE).status_code == 200  # the cookie from here on
        assert c.get("/tiles/stars/0/0/0.png").status_code == 200
    with TestClient(create_app(run, tmp_path, warm=False, token="other")) as other:  # another viewer on this host
        other.cookies.set(page.headers["set-cookie"].split("=")[0], "s3cret")
        assert other.get("/api/nodes").status_code == 403
        assert other.get("/api/nodes?token=other").status_code == 200 and other.get("/api/nodes").status_code == 200


# -- fuzzing: every malformed request is a 4xx with a JSON body, never a 5xx -------------------------------

def _corpus(seed: int = 7) -> list[tuple[bytes, str]]:
    """Malformed bodies: deep nesting, huge bodies, wrong types in every field, unknown fields,
    empty bodies, non-JSON content types; each with the content type it is sent with."""
    rng = np.random.default_rng(seed)
    wrong = [None, True, -1, 0, 2**70, 1.5, 1e308, float("nan"), "", "\u0000", [], [[]], {}, {"a": 1},
             [[0, 1]], [[0, 1, 0]] * 3, [["0", "1", "0", "1"]], [[0.5, 1, 0, 1]], [[-5, 1, 0, 1]], ["flipped"],
             [None], ["nope"], "sideways", "nope", [[10, 2, 3, 9]], [[0, 10**30, 0, 1]]]
    bodies: list[Any] = []
    for base in (LINEAGE, EXPORT):
        for field in list(base) + ["target", "format", "to", "extra"]:
            for value in wrong:
                if not (base is LINEAGE and field == "to" and value is None):  # that one is right
                    bodies.append(base | {field: value})
            if field in base and not (base is LINEAGE and field == "to"):  # "to" may be left out
                bodies.append({k: v for k, v in base.items() if k != field})
    raw = [json.dumps(b).encode() for b in bodies]
    raw += [b"", b" ", b"null", b"[]", b"0", b'"x"', b"{", b"}", b"\xff" * 10, b"{" * 3000, b"[" * 100_000,
            ("[" * 2000 + "]" * 2000).encode(), b'{"boxes": ' + b"[" * 50 + b"]" * 50 + b"}",
            json.dumps(LINEAGE | {"boxes": [[2, 10, 3, 9]] * 200_000}).encode(), b" " * 3_000_000,
            bytes(rng.integers(0, 256, 4096, dtype=np.uint8))]
    for _ in range(40):  # random splices of a valid body
        text = json.dumps(EXPORT).encode()
        cut = int(rng.integers(0, len(text)))
        raw.append(text[:cut] + bytes(rng.integers(32, 127, 3, dtype=np.uint8)) + text[cut + 3:])
    cases = [(b, "application/json") for b in raw]
    cases += [(json.dumps(LINEAGE).encode(), t) for t in ("text/plain", "application/x-www-form-urlencoded",
                                                          "multipart/form-data; boundary=x", "")]
    return cases


def test_fuzzed_requests_are_4xx_json_and_the_server_keeps_answering(run, tmp_path):
    cases = _corpus()
    with TestClient(create_app(run, tmp_path, warm=False), raise_server_exceptions=False) as c:
        t0 = time.monotonic()
        for path in ("/api/lineage", "/api/export"):
            for content, ctype in cases:
                got = c.post(path, content=content, headers={"Content-Type": ctype} if ctype else {})
                assert 400 <= got.status_code < 500, (path, content[:200], got.status_code, got.text[:200])
                assert got.headers["content-type"] == "application/json" and got.json()["error"]
        assert time.monotonic() - t0 < 30, "the fuzzed corpus took too long"
        assert c.get("/api/nodes").status_code == 200
        assert c.post("/api/lineage", json=LINEAGE).status_code == 200


def _json_values():
    from hypothesis import strategies as st

    leaves = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
    return st.recursive(leaves, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=5),
                                                                                           inner, max_size=4),
                        max_leaves=20)


def test_any_json_value_in_any_field_is_answered_without_a_5xx(run, tmp_path):
    """Hypothesis puts arbitrary JSON in one field of a valid request (or adds an unknown one):
    the answer is a 200 with the contract's keys or a 4xx with a JSON error, never a 5xx."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    fields = sorted(set(LINEAGE) | set(EXPORT) | {"extra"})
    with TestClient(create_app(run, tmp_path, warm=False), raise_server_exceptions=False) as c:

        @settings(max_examples=150, deadline=None, derandomize=True,
                  suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
        @given(which=st.sampled_from(["/api/lineage", "/api/export"]), field=st.sampled_from(fields),
               value=_json_values())
        def check(which, field, value):
            base = LINEAGE if which == "/api/lineage" else EXPORT
            got = _post(c, which, json.dumps(base | {field: value}))  # Infinity too, which json.loads takes
            assert got.status_code == 200 or 400 <= got.status_code < 500, (which, field, value, got.text[:200])
            if got.status_code != 200:
                assert got.headers["content-type"] == "application/json" and got.json()["error"]
            elif which == "/api/lineage":
                assert set(got.json()) == {"answers", "ms"}

        check()
        assert c.post("/api/lineage", json=LINEAGE).status_code == 200


def test_answer_request_is_the_apps_answer_without_a_socket(run, client, tmp_path):
    import asyncio

    from subzero.tools.view.app import answer_request

    app = create_app(run, tmp_path, warm=False)
    body = {"node": "bright", "direction": "forward", "boxes": [[2, 5, 3, 9]], "to": None}
    for method, path, data in (("GET", "/api/nodes", None), ("GET", "/api/pixel/x?row=2&col=3", None),
                               ("POST", "/api/lineage", json.dumps(body).encode()), ("POST", "/api/lineage", b"{"),
                               ("GET", "/tiles/x/0/0/0.png", None), ("GET", "/tiles/x/0/9/9.png", None),
                               ("GET", "/api/pixel/no%20such?row=0&col=0", None)):
        reply = asyncio.run(answer_request(app, method, path, data))
        http = client.request(method, path, content=data, headers={"Content-Type": "application/json"} if data else {})
        assert (reply.status, reply.headers["content-type"]) == (http.status_code, http.headers["content-type"]), path
        if reply.headers["content-type"] == "image/png":
            assert reply.body == http.content
        else:
            got, want = reply.json(), http.json()
            if isinstance(got, dict):
                got.pop("ms", None), want.pop("ms", None)
            assert got == want, path


def test_style_gives_the_colours_the_cli_pictures_use(client):
    from subzero.tools.export import LINEAGE_COLORS, MASK_RGB

    got = client.get("/api/style")
    assert got.status_code == 200
    assert got.json()["lineage"] == LINEAGE_COLORS and got.json()["mask"] == [list(c) for c in MASK_RGB]


def test_a_newer_brush_of_a_client_cancels_its_older_one(run, tmp_path):
    """A client's next lineage request in a direction sets the cancel event of its previous
    one (other clients and the other direction untouched); a cancelled request is a 409 JSON
    answer; a bad client id a 400."""
    from subzero.tools.view.app import Brushes

    brushes = Brushes(workers=2)
    first = brushes.begin("tab-1", "backward")
    other_direction, other_client = brushes.begin("tab-1", "forward"), brushes.begin("tab-2", "backward")
    anonymous = brushes.begin(None, "backward")
    second = brushes.begin("tab-1", "backward")
    assert first.is_set() and not any(e.is_set() for e in (second, other_direction, other_client, anonymous))
    brushes.end("tab-1", "backward", first)
    brushes.end("tab-1", "backward", second)
    assert brushes.cancelled == 1 and ("tab-1", "backward") not in brushes._latest
    brushes.pool.shutdown()

    app = create_app(run, tmp_path / "cache", warm=False)
    body = {"node": "stars", "direction": "backward", "boxes": [[2, 10, 3, 9]], "to": None}
    with TestClient(app) as c:
        real_begin = app.state.brushes.begin

        def superseded(client, direction):
            event = real_begin(client, direction)
            real_begin(client, direction)  # a newer brush of the same client arrives at once
            return event

        app.state.brushes.begin = superseded
        got = c.post("/api/lineage", json=body, headers={"X-Subzero-Client": "tab-1"})
        assert got.status_code == 409 and got.json()["cancelled"] is True and "superseded" in got.json()["error"]
        app.state.brushes.begin = real_begin
        assert c.post("/api/lineage", json=body, headers={"X-Subzero-Client": "tab-1"}).status_code == 200
        bad = c.post("/api/lineage", json=body, headers={"X-Subzero-Client": "x" * 200})
        assert bad.status_code == 400 and "X-Subzero-Client" in bad.json()["error"].replace("x-subzero-client",
                                                                                           "X-Subzero-Client")


def test_a_client_that_disconnects_cancels_its_walk(run, monkeypatch):
    """While a walk runs, the app asks whether its client is still there; once it has gone,
    the walk's cancel event is set (the walk stops at its next step: QueryCancelled)."""
    import asyncio

    import subzero.tools.view.app as app_module
    from subzero.errors import QueryCancelled
    from subzero.tools.view.app import Brushes
    from subzero.tools.view.lineage import parse_lineage_request

    def walk(run, request, cancel):  # a walk that runs until it is cancelled (at most 10 s)
        if cancel.wait(10):
            raise QueryCancelled("cancelled at a step")
        return {"answers": {}, "ms": 0}

    asked = []

    async def gone() -> bool:
        asked.append(True)
        return True

    monkeypatch.setattr(app_module, "lineage_answers", walk)
    monkeypatch.setattr(app_module, "DISCONNECT_POLL", 0.01)
    brushes = Brushes(workers=1)
    req = parse_lineage_request(run, {"node": "stars", "direction": "backward", "boxes": [[2, 10, 3, 9]], "to": None})
    with pytest.raises(QueryCancelled):
        asyncio.run(brushes.answer(run, req, "tab-1", gone))
    assert asked and brushes.cancelled == 1
    brushes.pool.shutdown()


def test_warm_makes_only_the_stored_overviews_and_the_others_when_asked(tmp_path, monkeypatch):
    """The server is idle once the stored nodes' overviews are made; those of the nodes the run
    did not store (here ``blur`` and ``bright``: intermediates, each a re-run) are made when a
    page asks for one, then cached, with the values the recomputed array has."""
    from subzero.tools.view.app import Viewer

    run = make_run(tmp_path / "s")
    viewer = create_app(run, tmp_path / "cache", warm=False).state.viewer
    unstored = {name for name in run.catalog.nodes if not run.catalog.node(name).array.stored}
    assert unstored == {"blur", "bright"} and not run.log_queries  # brushes stay out of the query log
    warmed: list[str] = []
    real = Viewer._overview

    def noted(self, name):
        warmed.append(name)
        real(self, name)

    monkeypatch.setattr(Viewer, "_overview", noted)
    viewer.warm()
    assert viewer.warmed.is_set() and warmed and not set(warmed) & unstored
    assert all(viewer.pyramid(name).png_path(viewer.pyramid(name).top, 0, 0).exists() for name in warmed)
    with TestClient(create_app(run, tmp_path / "cache", warm=False)) as idle:  # no background work at all
        assert idle.get("/api/run").json()["idle"]
    busy = create_app(run, tmp_path / "cache2", warm=True)  # idle once its stored overviews are made
    with TestClient(busy) as client:
        deadline = time.monotonic() + 30
        while not client.get("/api/run").json()["idle"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.get("/api/run").json()["warm"]
        for name in unstored:
            pyramid = busy.state.viewer.pyramid(name)
            assert not pyramid.png_path(pyramid.top, 0, 0).exists() and not pyramid.cached(pyramid.top, 0, 0)
            res = client.get(f"/api/values/{name}/{pyramid.top}/0/0")
            assert res.status_code == 200 and pyramid.cached(pyramid.top, 0, 0)
            h, w = (int(v) for v in res.headers["x-shape"].split(","))
            got = np.frombuffer(res.content, np.dtype(res.headers["x-dtype"]).newbyteorder("<")).reshape(h, w)
            assert pyramid.top == 0  # the whole array in one tile: the recomputed array's values
            np.testing.assert_array_equal(got, np.asarray(run.output(name)).astype(got.dtype))
            assert client.get(f"/tiles/{name}/{pyramid.top}/0/0.png").status_code == 200
        assert {n["name"]: n["display"] for n in client.get("/api/nodes").json()} == busy.state.viewer.kinds
    assert json.loads((tmp_path / "cache2" / "display.json").read_text())  # remembered for the next start
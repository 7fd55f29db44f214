"""The notebook widget (`subzero.tools.view.widget`, `run.view()`): its answers are the HTTP server's,
its selection round-trips from Python, and its JavaScript works in a real chromium.

No JavaScript runs in a kernel without a notebook front end, so the widget's module is also
loaded in chromium (selenium) by a small harness page: the module exactly as the widget ships it
(`widget_esm`), rendered with a model whose ``send`` goes to the real viewer server (``subzero
view``'s `make_server`) and whose replies come back as the widget's own (``msg:custom``). Every
wait is bounded; the server runs on a free loopback port and is stopped at the end."""

from __future__ import annotations

import json
import re
import shutil
import socket
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

from subzero.errors import LineageError
from subzero.tools.view.widget import Selection, ViewerWidget, widget_css, widget_esm
from view_store import make_run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
needs_chromium = pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER),
                                    reason="no chromium/chromedriver on this machine (scripts/setup.sh installs "
                                           "them: apt-get install chromium chromium-driver)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("widget") / "s", "FullMany")


@pytest.fixture(scope="module")
def widget(run, tmp_path_factory):
    return ViewerWidget(run, warm=False, cache_dir=tmp_path_factory.mktemp("widgetcache"))


@pytest.fixture(scope="module")
def server(run, tmp_path_factory):
    from subzero.tools.view.server import make_server

    srv, url = make_server(run.path, "127.0.0.1", _free_port(), tmp_path_factory.mktemp("widgetservercache"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started:
        assert time.monotonic() < deadline, "the viewer did not start within 20 s"
        time.sleep(0.05)
    yield url
    srv.should_exit = True
    thread.join(10)


def _http(url: str, method: str, path: str, body: str | None) -> tuple[int, str, bytes, dict[str, str]]:
    req = urllib.request.Request(url.rstrip("/") + path, method=method, data=body.encode() if body else None,
                                 headers={"Content-Type": "application/json"} if body is not None else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as res:
            return res.status, res.headers.get("content-type"), res.read(), {k.lower(): v for k, v in res.headers.items()}
    except urllib.error.HTTPError as err:
        return err.code, err.headers.get("content-type"), err.read(), {k.lower(): v for k, v in err.headers.items()}


def _reply(widget: ViewerWidget, message: dict) -> tuple[dict, list]:
    sent: list = []
    widget.send = lambda content, buffers=None: sent.append((content, buffers))  # type: ignore[method-assign]
    try:
        widget._on_message(widget, message, [])
    finally:
        del widget.send
    assert len(sent) <= 1
    return sent[0] if sent else ({}, [])


LINEAGE = json.dumps({"node": "bright", "direction": "backward", "boxes": [[6, 12, 4, 10]], "to": None})
REQUESTS = [
    ("GET", "/api/nodes", None),
    ("GET", "/api/run", None),
    ("GET", "/api/pixel/blur?row=3&col=4", None),
    ("GET", "/api/pixel/blur?row=99&col=4", None),
    ("POST", "/api/lineage", LINEAGE),
    ("POST", "/api/lineage", "[" * 2000),
    ("POST", "/api/lineage", json.dumps({"node": "nope", "direction": "backward", "boxes": [[0, 1, 0, 1]]})),
    ("POST", "/api/export", json.dumps({"node": "bright", "direction": "backward", "boxes": [[6, 12, 4, 10]],
                                        "target": "x", "format": "npy"})),
    ("GET", "/tiles/x/0/0/0.png", None),
    ("GET", "/tiles/nope/0/0/0.png", None),
    ("GET", "/api/values/blur/0/0/0", None),
    ("GET", "/api/values/stars/0/0/0", None),
    ("GET", "/api/limits/blur?mode=zscale", None),
    ("GET", "/api/object/stars?label=1", None),
    ("POST", "/api/stats", json.dumps({"node": "bright", "boxes": [[6, 12, 4, 10]]})),
    ("GET", "/static/view.js", None),
]


def test_the_widget_answers_every_request_as_the_http_server(widget, server):
    for k, (method, path, body) in enumerate(REQUESTS):
        content, buffers = _reply(widget, {"kind": "request", "id": f"t-{k}", "method": method, "path": path,
                                           "body": body})
        status, ctype, data, headers = _http(server, method, path, body)
        assert content["kind"] == "reply" and content["id"] == f"t-{k}"
        assert (content["status"], content["headers"]["content-type"]) == (status, ctype), (method, path)
        for name, value in headers.items():  # the shape and dtype of tile values reach the cell
            if name in ("x-shape", "x-dtype"):
                assert content["headers"][name] == value, (method, path, name)
        got = buffers[0]
        if ctype.startswith("application/json"):
            a, b = json.loads(got), json.loads(data)
            for answer in (a, b):
                if isinstance(answer, dict):
                    answer.pop("ms", None)  # the time the answer took
                    answer.pop("warm", None)  # how many overview tiles each server made so far
                    answer.pop("idle", None)
            assert a == b, (method, path)
        else:
            assert got == data, (method, path)
        if status >= 400:
            assert "error" in json.loads(got)


def test_malformed_messages_are_answered_with_an_error_or_ignored(widget):
    for bad in ({"method": "PUT", "path": "/api/nodes"}, {"method": "GET", "path": "api/nodes"},
                {"method": "POST", "path": "/api/lineage", "body": {"node": "x"}}, {"method": "GET", "path": 7}):
        content, buffers = _reply(widget, {"kind": "request", "id": "b", **bad})
        assert content["status"] == 400 and "widget request" in json.loads(buffers[0])["error"]
    assert _reply(widget, {"kind": "other"}) == ({}, [])
    assert _reply(widget, "not a dict") == ({}, [])  # type: ignore[arg-type]


def test_show_and_selection_round_trip(widget, run):
    widget.clear()
    assert widget.selection.node is None and widget.selection.cells.size == 0
    with pytest.raises(LineageError, match="give node=NAME"):
        widget.show([(1, 2)])
    cells = np.array([[3, 5], [3, 4], [10, 1], [3, 4], [4, 4], [4, 5]])
    widget.show(cells, node="bright")
    expect = np.unique(cells, axis=0)
    sel = widget.selection
    assert isinstance(sel, Selection) and sel.node == "bright"
    np.testing.assert_array_equal(sel.cells, expect)
    # the brush is a disjoint cover of the cells, in the API's flat box form
    boxes = widget.brush["boxes"]
    assert sum((b[1] - b[0]) * (b[3] - b[2]) for b in boxes) == len(expect) < len(cells)
    # the node stays when none is given; a mask and a box are cells too
    mask = np.zeros(run.shape("bright"), bool)
    mask[2:4, 7:9] = True
    widget.show(mask)
    assert widget.selection.node == "bright"
    np.testing.assert_array_equal(widget.selection.cells, np.argwhere(mask))
    widget.show(box=[(2, 4), (7, 9)], node="flipped")
    assert widget.selection.node == "flipped"
    np.testing.assert_array_equal(widget.selection.cells, np.argwhere(mask))
    # what the page asks for the brush is the run's own lineage
    answer = widget.request("/api/lineage", {"node": "flipped", "direction": "backward",
                                             "boxes": widget.brush["boxes"], "to": ["y"]}).json()
    assert answer["answers"]["y"]["cells"] == len(run.backward("flipped", np.argwhere(mask), to="y"))
    for bad, match in (({"cells": [(99, 0)], "node": "bright"}, "out"), ({"cells": [(0, 0)], "node": "nope"}, "nope"),
                       ({"cells": [(0, 0)], "box": [(0, 1), (0, 1)], "node": "x"}, "one of them")):
        with pytest.raises(LineageError, match=match):
            widget.show(**bad)
    widget.show([], node="x")
    assert widget.brush == {} and widget.selection.node is None


def test_values_reach_the_cell_as_the_array(widget, run):
    """A tile's values travel as raw bytes with their shape and dtype: the cell rebuilds the array."""
    content, buffers = _reply(widget, {"kind": "request", "id": "v", "method": "GET", "path": "/api/values/stars/0/0/0",
                                       "body": None})
    shape = tuple(int(v) for v in content["headers"]["x-shape"].split(","))
    got = np.frombuffer(buffers[0], dtype=np.dtype(content["headers"]["x-dtype"]).newbyteorder("<")).reshape(shape)
    want = np.asarray(run.output("stars")[:])
    np.testing.assert_array_equal(got[:want.shape[0], :want.shape[1]], want[:shape[0], :shape[1]])


def test_the_module_is_the_pages_and_the_style_stays_inside_the_widget(widget):
    from subzero.tools.view.app import STATIC

    esm = widget._esm
    assert esm == widget_esm() and esm.startswith((STATIC / "view.js").read_text())
    assert esm.count("export function mount(") == 1 and esm.count("export default") == 1
    assert not re.search(r"^\s*import\b", esm, re.M)  # one module: no file imports another
    css = widget_css()
    selectors = [s.strip() for rule in re.findall(r"([^{}]+)\{", re.sub(r"/\*.*?\*/", "", css, flags=re.S))
                 for s in rule.split(",")]
    assert len(selectors) >= 20 and all(re.match(r"\.szv[-.\s]", s + " ") for s in selectors), selectors


# -- the widget's JavaScript in chromium -------------------------------------------------------

@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,900"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    driver.set_script_timeout(30)
    yield driver
    driver.quit()


def _wait(driver, script: str, seconds: float = 30.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = driver.execute_script(script)
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out after {seconds} s waiting for: {script}")


#: the harness: the widget's module from a blob URL, rendered into a notebook-like cell with a
#: model whose ``send`` goes to the viewer's server on this page's origin, its reply handed back
#: as the widget's reply message; ``save_changes`` records what the widget would sync to Python
HARNESS = r"""
const [esm, css, done] = arguments;
document.head.innerHTML = "<style>body{margin:0;background:#fff;font:13px sans-serif} .jp-cell{margin:12px;"
  + "border:1px solid #ccc;padding:4px}</style><style>" + css + "</style>";
document.body.innerHTML = '<div class="jp-cell"><pre>In [3]: w = run.view(); w</pre><div id="out"></div></div>';
const handlers = {}, values = {brush: {}};
const emit = (name, ...args) => (handlers[name] || []).slice().forEach((h) => h(...args));
window.saved = [];
window.handlers = handlers;
window.model = {
  get: (k) => values[k],
  set: (k, v) => { const old = JSON.stringify(values[k]); values[k] = v; if (JSON.stringify(v) !== old) emit("change:" + k, v); },
  save_changes: () => { window.saved.push(JSON.parse(JSON.stringify(values.brush))); },
  on: (name, h) => { (handlers[name] = handlers[name] || []).push(h); },
  off: (name, h) => { handlers[name] = (handlers[name] || []).filter((x) => x !== h); },
  send: (msg) => {
    fetch(msg.path, msg.method === "POST" ? {method: "POST", headers: {"Content-Type": "application/json"}, body: msg.body} : {})
      .then(async (res) => {
        const body = await res.arrayBuffer(), headers = {};
        for (const k of ["content-type", "content-disposition", "x-shape", "x-dtype"]) if (res.headers.get(k)) headers[k] = res.headers.get(k);
        emit("msg:custom", {kind: "reply", id: msg.id, status: res.status, headers}, [new DataView(body)]);
      });
  },
};
import(URL.createObjectURL(new Blob([esm], {type: "text/javascript"})))
  .then((mod) => { window.cleanup = mod.default.render({model: window.model, el: document.getElementById("out")}); done(true); },
        (err) => done(String(err)));
"""


def open_harness(driver, url: str) -> None:
    """Load the widget's module in ``driver`` on the viewer server's origin and render it."""
    driver.get(url.rstrip("/") + "/api/run")  # any page of the server: its origin answers the model's requests
    assert driver.execute_async_script(HARNESS, widget_esm(), widget_css()) is True
    _wait(driver, "const v = document.getElementById('out').subzeroView; return v && v.ready")
    _settled(driver)


def _settled(driver) -> None:
    _wait(driver, "const s = document.getElementById('out').subzeroView; return Object.values(s.frames)"
                  ".every(f => f.tilesDrawn > 0) && Object.values(s.limits).every(l => !l.then)")


@needs_chromium
def test_the_widget_brushes_in_chromium_and_python_reads_it_back(widget, run, server, browser):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    t0 = time.monotonic()
    open_harness(browser, server)
    state = "document.getElementById('out').subzeroView"
    assert browser.execute_script(f"return {state}.errors") == 0
    # the cell is the page: its graph, a main frame, its toolbar
    drawn = [g.get_attribute("data-node") for g in browser.find_elements(By.CSS_SELECTOR, "#out g.szv-gnode")]
    assert sorted(drawn) == sorted(run.committed)
    # drag a box on 'bright' in the cell, as in the page
    browser.find_element(By.CSS_SELECTOR, '#out g.szv-gnode[data-node="bright"]').click()
    _wait(browser, f"return {state}.main === 'bright'")
    _settled(browser)
    browser.find_element(By.CSS_SELECTOR, '#out button[data-tool="box"]').click()
    canvas = browser.find_element(By.CSS_SELECTOR, "#out canvas.szv-main-canvas")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", canvas)

    def offset(r, c):  # selenium offsets are from the element's centre
        x, y = browser.execute_script(f"return {state}.frames.main.toScreen(arguments[0], arguments[1])", r, c)
        return round(x - canvas.size["width"] / 2), round(y - canvas.size["height"] / 2)

    (ActionChains(browser).move_to_element_with_offset(canvas, *offset(6.5, 4.5)).click_and_hold()
     .move_to_element_with_offset(canvas, *offset(11.5, 9.5)).release().perform())
    _wait(browser, f"return {state}.brushes > 0")
    brush = browser.execute_script("return window.model.get('brush')")
    assert brush == {"node": "bright", "boxes": [[6, 12, 4, 10]]}
    assert browser.execute_script("return window.saved") == [brush]  # synced to Python once
    # what Python reads back is the brushed cells
    widget.brush = brush
    np.testing.assert_array_equal(widget.selection.cells, np.argwhere(np.ones((6, 6), bool)) + [6, 4])
    answers = browser.execute_script(f"return {state}.answers")
    assert answers["x"]["cells"] == len(run.backward("bright", box=[(6, 12), (4, 10)], to="x"))

    # a brush set from Python is drawn in the cell (its node in the main frame), with its lineage
    stars = np.asarray(run.output("stars")[:])
    star = np.argwhere(stars == stars.max())
    widget.show(star, node="stars")
    browser.execute_script("window.model.set('brush', arguments[0])", widget.brush)
    _wait(browser, f"return {state}.brushes > 1")
    assert browser.execute_script(f"return {state}.main") == "stars"
    request = browser.execute_script(f"return {state}.request")
    assert request["node"] == "stars"
    mask = np.zeros(stars.shape, bool)
    for r0, r1, c0, c1 in request["boxes"]:
        mask[r0:r1, c0:c1] = True
    np.testing.assert_array_equal(np.argwhere(mask), star)
    answers = browser.execute_script(f"return {state}.answers")
    assert answers["x"]["cells"] == len(run.backward("stars", star, to="x"))
    assert browser.execute_script("return window.saved.length") == 1  # a brush from Python is not sent back
    # clear in the cell clears the brush in Python too
    browser.find_element(By.XPATH, "//div[@id='out']//button[normalize-space(.)='clear']").click()
    assert browser.execute_script("return window.model.get('brush')") == {}
    assert browser.execute_script("return window.saved.slice(-1)[0]") == {}
    assert browser.execute_script(f"return {state}.errors") == 0
    # closing the view lets go of the model
    browser.execute_script("window.cleanup()")
    assert browser.execute_script("return [window.handlers['change:brush'].length, window.handlers['msg:custom'].length]") \
        == [0, 0]
    assert time.monotonic() - t0 < 60

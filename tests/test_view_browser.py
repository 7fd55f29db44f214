"""The viewer in a real browser (Debian's chromium and chromedriver, driven by selenium; both
installed by scripts/setup.sh), on the astronomy workflow with a WCS: the graph, `stars` in the
main frame, a lasso around a star, its lineage lit on the inputs with linked zoom, a value read
in sexagesimal RA/Dec, statistics, export, regions, a catalogue and the state in the URL. Each state's
screenshot is saved as ``docs/images/viewer-*.png`` (the viewer's guide page shows them) when
the page changed since they were taken.
Bounded in time: every wait has a deadline, the server runs on a free loopback port and is
stopped at the end; one page load is shared (plus one reload for the URL state)."""

from __future__ import annotations

import hashlib
import io
import re
import shutil
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from view_store import astro_wcs, make_astro_run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER),
                                reason="no chromium/chromedriver on this machine (scripts/setup.sh installs them: "
                                       "apt-get install chromium chromium-driver)")
IMAGES = Path(__file__).resolve().parent.parent / "docs" / "images"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from subzero.tools.view.server import make_server

    run = make_astro_run(tmp_path_factory.mktemp("viewbrowser") / "astro")
    srv, url = make_server(run.path, "127.0.0.1", _free_port(), tmp_path_factory.mktemp("viewbrowsercache"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started:
        assert time.monotonic() < deadline, "the viewer did not start within 20 s"
        time.sleep(0.05)
    yield run, url
    srv.should_exit = True
    thread.join(10)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    downloads = tmp_path_factory.mktemp("downloads")
    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,900",
                "--force-device-scale-factor=1"):
        options.add_argument(arg)
    options.add_experimental_option("prefs", {"download.default_directory": str(downloads),
                                              "download.prompt_for_download": False})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    driver.set_script_timeout(30)
    driver.downloads = downloads
    yield driver
    driver.quit()


def _wait(driver, script: str, seconds: float = 30.0, *args):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = driver.execute_script(script, *args)
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out after {seconds} s waiting for: {script}")


def _settled(driver) -> None:
    """Every frame has drawn its tiles and no request is waiting."""
    _wait(driver, "const s = window.subzeroView; return s.ready && Object.values(s.frames)"
                  ".every(f => f.tilesDrawn > 0) && Object.values(s.limits).every(l => !l.then)")
    time.sleep(0.3)


def _page_digest() -> str:
    """The digest of the page's files: the screenshots in docs/ are of this version of the page."""
    from subzero.tools.view.app import STATIC

    return hashlib.sha256(b"".join((STATIC / f).read_bytes() for f in ("index.html", "view.js", "view.css"))).hexdigest()


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    """Where the screenshots go: docs/images when the page changed since they were taken (its
    digest is kept beside them, so an unchanged page leaves the tree clean), else a temporary folder."""
    stamp = IMAGES / "viewer-page.sha256"
    if stamp.exists() and stamp.read_text().strip() == _page_digest():
        return tmp_path_factory.mktemp("shots")
    IMAGES.mkdir(parents=True, exist_ok=True)
    return IMAGES


def _shot(driver, folder: Path, name: str) -> None:
    driver.save_screenshot(str(folder / f"viewer-{name}.png"))


def _mask_of(boxes, shape) -> np.ndarray:
    mask = np.zeros(shape, bool)
    for r0, r1, c0, c1 in boxes:
        mask[r0:r1, c0:c1] = True
    return mask


def _centres_inside(polygon, shape) -> np.ndarray:
    """The cells whose centres (r + 0.5, c + 0.5) lie inside ``polygon`` ([[r, c], ...]), by matplotlib."""
    from matplotlib.path import Path as MplPath

    rows, cols = np.mgrid[0:shape[0], 0:shape[1]]
    centres = np.column_stack([cols.ravel() + 0.5, rows.ravel() + 0.5])
    inside = MplPath(np.asarray(polygon)[:, ::-1]).contains_points(centres)
    return inside.reshape(shape)


def test_graph_lasso_lineage_sky_stats_export(server, browser, shots):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    run, url = server
    shape = run.shape("stars")
    browser.get(url)
    _settled(browser)
    # the graph: every node, laid out by layer; the main frame starts on the workflow's last image
    drawn = [g.get_attribute("data-node") for g in browser.find_elements(By.CSS_SELECTOR, "g.szv-gnode")]
    assert sorted(drawn) == sorted(run.committed)
    edges = len(browser.find_elements(By.CSS_SELECTOR, "path.szv-edge"))
    assert edges == sum(len(n.inputs) for n in run.workflow.nodes)
    # search: the other nodes dim, Enter shows the match; then a click on the graph puts stars in the main frame
    search = browser.find_element(By.CSS_SELECTOR, ".szv-search")
    search.send_keys("exposure_1\n")
    _wait(browser, "return window.subzeroView.main === 'exposure_1'")
    assert len(browser.find_elements(By.CSS_SELECTOR, "g.szv-gnode.szv-dim")) == len(run.committed) - 1
    _settled(browser)
    _shot(browser, shots, "graph")
    search.clear()
    search.send_keys(" ")
    browser.find_element(By.CSS_SELECTOR, 'g.szv-gnode[data-node="stars"]').click()
    _wait(browser, "return window.subzeroView.main === 'stars'")
    _settled(browser)

    # lasso the largest star: exactly the cells whose centres are inside the drawn polygon
    labels = np.asarray(run.output("stars")[:])
    ids, counts = np.unique(labels[labels > 0], return_counts=True)
    rr, cc = np.nonzero(labels == ids[np.argmax(counts)])
    cy, cx = (rr.min() + rr.max() + 1) / 2, (cc.min() + cc.max() + 1) / 2
    rad = max(rr.max() + 1 - rr.min(), cc.max() + 1 - cc.min()) / 2 + 1.5
    canvas = browser.find_element(By.CSS_SELECTOR, "canvas.szv-main-canvas")

    def offset(r, c):  # selenium offsets are from the element's centre
        x, y = browser.execute_script("return window.subzeroView.frames.main.toScreen(arguments[0], arguments[1])", r, c)
        return round(x - canvas.size["width"] / 2), round(y - canvas.size["height"] / 2)

    points = [offset(cy + rad * np.sin(t), cx + 1.2 * rad * np.cos(t)) for t in np.linspace(0, 2 * np.pi, 15)]
    chain = ActionChains(browser).move_to_element_with_offset(canvas, *points[0]).click_and_hold()
    for p in points[1:]:
        chain = chain.move_to_element_with_offset(canvas, *p)
    chain.release().perform()
    _wait(browser, "return window.subzeroView.brushes > 0")
    state = browser.execute_script("const s = window.subzeroView; return {node: s.selNode, shapes: s.shapes, "
                                   "boxes: s.boxes, errors: s.errors}")
    assert state["node"] == "stars" and state["errors"] == 0 and state["shapes"][0]["t"] == "poly"
    brushed = _mask_of(state["boxes"], shape)
    np.testing.assert_array_equal(brushed, _centres_inside(state["shapes"][0]["pts"], shape))
    assert np.all(brushed[labels == ids[np.argmax(counts)]]), "the lasso missed part of the star"

    # its lineage: lit on every input (graph and side frames), counts exactly run.backward's
    answers = browser.execute_script("return window.subzeroView.answers")
    for name in ("exposure_1", "exposure_2", "flat"):
        assert answers[name]["direction"] == "backward"
        assert answers[name]["cells"] == int(run.backward_mask("stars", cells=brushed, to=name).sum())
        assert "szv-lit-backward" in browser.find_element(
            By.CSS_SELECTOR, f'g.szv-gnode[data-node="{name}"]').get_attribute("class")
        assert browser.find_elements(By.CSS_SELECTOR, f'.szv-frame[data-node="{name}"] canvas')
    assert browser.find_elements(By.CSS_SELECTOR, "path.szv-edge.szv-lit-backward")

    # linked zoom: wheel on the star in the main frame; the inputs' frames show the same window
    for _ in range(5):
        browser.execute_script("""
            const c = document.querySelector('canvas.szv-main-canvas'), r = c.getBoundingClientRect();
            const [x, y] = window.subzeroView.frames.main.toScreen(arguments[0], arguments[1]);
            c.dispatchEvent(new WheelEvent('wheel', {deltaY: -100, clientX: r.left + x, clientY: r.top + y,
                                                      bubbles: true, cancelable: true}));""", cy, cx)
    _settled(browser)
    views = browser.execute_script("""const s = window.subzeroView;
        return Object.fromEntries(Object.entries(s.frames).map(([k, f]) => [k, f.window()]));""")
    assert views["main"][1] - views["main"][0] < shape[0] / 2  # zoomed in
    for name in ("exposure_1", "exposure_2"):  # same grid: the same window, up to the frames' aspect
        main, side = views["main"], views[name]
        assert abs((side[0] + side[1]) - (main[0] + main[1])) < 0.5 and abs((side[2] + side[3]) - (main[2] + main[3])) < 0.5
    # another shape (the 16 x 16 background mesh): the window mapped through the lineage's bounding boxes
    mapped, mesh_box = browser.execute_script("const s = window.subzeroView; return [s.frames.mesh_1.mapped, "
                                              "s.answers.mesh_1.bbox]")
    rows, cols = np.nonzero(brushed)
    src = (rows.min(), rows.max() + 1, cols.min(), cols.max() + 1)
    for axis, (a, b) in enumerate(((0, 1), (2, 3))):
        scale = (mesh_box[b] - mesh_box[a]) / (src[b] - src[a])
        want = mesh_box[a] + scale * ((views["main"][a] + views["main"][b]) / 2 - src[a])
        assert (views["mesh_1"][a] + views["mesh_1"][b]) / 2 == pytest.approx(want, abs=1e-6)
    assert mapped
    magenta = browser.execute_script("""
        const c = document.querySelector('.szv-frame[data-node="exposure_1"] canvas');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0; for (let i = 0; i < d.length; i += 4) if (d[i] > 200 && d[i + 2] > 200 && d[i + 1] < 90) n++;
        return n;""")
    assert magenta > 20, "the backward lineage is not drawn on exposure_1"
    # statistics of the brushed cells and of the lineage in exposure_1, computed server-side
    _wait(browser, "return window.subzeroView.stats")
    Select(browser.find_element(By.CSS_SELECTOR, ".szv-stats-target")).select_by_value("exposure_1")
    stats = _wait(browser, "const s = window.subzeroView.stats; return s && s.answers.exposure_1 && s")
    assert stats["brush"]["count"] == int(brushed.sum())
    lineage = run.backward_mask("stars", cells=brushed, to="exposure_1")
    values = np.asarray(run.output("exposure_1")[:])[lineage]
    got = stats["answers"]["exposure_1"]
    assert got["count"] == lineage.sum() and sum(got["hist"]["counts"]) == lineage.sum()
    for key, want in (("min", values.min()), ("max", values.max()), ("mean", values.mean()),
                      ("median", np.median(values))):
        assert got[key] == pytest.approx(float(want), rel=1e-5)
    _shot(browser, shots, "lineage")

    # exposure_1 in the main frame keeps the view; a value read in sexagesimal RA/Dec, DS9's 1-based x, y
    browser.find_element(By.CSS_SELECTOR, '.szv-frame[data-node="exposure_1"]').click()
    _wait(browser, "return window.subzeroView.main === 'exposure_1'")
    _settled(browser)
    assert browser.execute_script("return window.subzeroView.frames.main.window()") == pytest.approx(views["main"])
    row, col = int(cy), int(cx)
    ActionChains(browser).move_to_element_with_offset(canvas, *offset(row + 0.5, col + 0.5)).perform()
    text = _wait(browser, "const t = window.subzeroView.readout; return t.includes('RA') && t")
    m = re.search(r"x (\d+)  y (\d+)  value (\S+)  RA (\d\d:\d\d:\d\d\.\d{3})  Dec ([+-]\d\d:\d\d:\d\d\.\d\d)", text)
    assert m, text
    x, y = int(m.group(1)), int(m.group(2))
    assert (y - 1, x - 1) == (row, col)
    value = float(np.asarray(run.output("exposure_1")[row, col]))
    assert float(m.group(3)) == pytest.approx(value, rel=1e-5) and len(m.group(3).replace(".", "").lstrip("-0")) <= 6
    sky = astro_wcs().pixel_to_world(col, row)
    assert m.group(4) == sky.ra.to_string(unit="hour", sep=":", precision=3, pad=True)
    assert m.group(5) == sky.dec.to_string(sep=":", precision=2, alwayssign=True, pad=True)
    comp = browser.execute_script("return window.subzeroView.compass.exposure_1")
    assert comp["north"] == pytest.approx([0, 1], abs=1e-3) and comp["east"] == pytest.approx([-1, 0], abs=1e-3)
    _shot(browser, shots, "readout")

    # export the lineage in exposure_1 as a mask: exactly run.backward's
    Select(browser.find_element(By.CSS_SELECTOR, ".szv-export-target")).select_by_value("exposure_1")
    Select(browser.find_elements(By.CSS_SELECTOR, ".szv-toolbar select")[-1]).select_by_value("npy")
    browser.find_element(By.CSS_SELECTOR, "button.szv-export").click()
    got = _wait(browser, "return window.subzeroView.lastExport")
    assert got.get("name") == "exposure_1-backward.npy", got
    path = browser.downloads / "exposure_1-backward.npy"
    deadline = time.monotonic() + 20
    while not path.exists():
        assert time.monotonic() < deadline, "the export was not downloaded"
        time.sleep(0.1)
    time.sleep(0.2)
    np.testing.assert_array_equal(np.load(path), lineage)

    # display controls: linear stretch, viridis, minmax limits, lineage filled; the colour bar follows
    for control, choice in (("stretch", "linear"), ("colormap", "viridis"), ("limits", "minmax")):
        sel = browser.find_element(By.XPATH, f"//label[starts-with(normalize-space(.), '{control}')]/select")
        Select(sel).select_by_value(choice)
    browser.find_element(By.XPATH, "//label[contains(., 'lineage as outline')]/input").click()
    browser.find_element(By.CSS_SELECTOR, "button.szv-enlarge").click()
    _settled(browser)
    lo, hi = (float(v) for v in browser.execute_script(
        "const c = document.querySelector('.szv-cbar'); return [c.dataset.lo, c.dataset.hi]"))
    assert lo < value and hi > value
    _shot(browser, shots, "controls")
    browser.find_element(By.CSS_SELECTOR, "button.szv-enlarge").click()

    # the state is in the URL: a reload restores the node, the view, the brush and the display
    before = browser.execute_script("const s = window.subzeroView; return [s.main, s.boxes, s.settings]")
    browser.refresh()
    _wait(browser, "return window.subzeroView && window.subzeroView.brushes > 0")
    after = browser.execute_script("const s = window.subzeroView; return [s.main, s.boxes, s.settings]")
    assert after == before

    # a DS9 region file in image coordinates brushes exactly the cells whose centres are inside
    browser.execute_script("window.subzeroView.controller.loadRegions(arguments[0])",
                           f"# Region file format: DS9 version 4.1\nimage\ncircle({cx + 0.5},{cy + 0.5},4.2)\n")
    _wait(browser, "return window.subzeroView.shapes[0].t === 'circle' && window.subzeroView.brushes > 1")
    rows, cols = np.mgrid[0:shape[0], 0:shape[1]]
    circle = (rows + 0.5 - cy) ** 2 + (cols + 0.5 - cx) ** 2 <= 4.2 ** 2
    np.testing.assert_array_equal(_mask_of(browser.execute_script("return window.subzeroView.boxes"), shape), circle)
    # "add" joins a box to the selection: the union, as disjoint boxes
    browser.execute_script("window.subzeroView.controller.select([{t: 'box', r0: 2, r1: 9, c0: 3, c1: 7}], null, 'add')")
    _wait(browser, "return window.subzeroView.shapes.length === 2 && window.subzeroView.brushes > 2")
    boxes = browser.execute_script("return window.subzeroView.boxes")
    union = circle.copy()
    union[2:9, 3:7] = True
    np.testing.assert_array_equal(_mask_of(boxes, shape), union)
    assert sum((b[1] - b[0]) * (b[3] - b[2]) for b in boxes) == union.sum()  # disjoint
    # regions out: the selection's shapes as a DS9 file that the regions package reads back
    from regions import Regions

    browser.find_element(By.XPATH, "//button[normalize-space(.)='regions out']").click()
    path = browser.downloads / "exposure_1-brush.reg"
    deadline = time.monotonic() + 20
    while not path.exists():
        assert time.monotonic() < deadline, "the regions were not downloaded"
        time.sleep(0.1)
    time.sleep(0.2)
    circle_reg, box_reg = Regions.parse(path.read_text(), format="ds9")  # 0-based pixel centres
    assert (circle_reg.center.x, circle_reg.center.y, circle_reg.radius) == pytest.approx((cx - 0.5, cy - 0.5, 4.2))
    assert (box_reg.center.x, box_reg.center.y, box_reg.width, box_reg.height) == pytest.approx((4.5, 5.0, 4, 7))
    # a catalogue written by `subzero catalog` (ECSV): a ring on every object; a row brushes exactly its object
    table = run.lineage_table("stars", over="exposure_1")
    text = io.StringIO()
    table.write(text, format="ascii.ecsv")
    browser.execute_script("window.subzeroView.controller.loadCatalog(arguments[0])", text.getvalue())
    assert len(browser.find_elements(By.CSS_SELECTOR, ".szv-cat-table tbody tr")) == len(table) == len(ids)
    star = int(table["label"][np.argmax(table["area"])])
    done = browser.execute_script("return window.subzeroView.brushes")
    browser.find_element(By.CSS_SELECTOR, f'.szv-cat-table tr[data-label="{star}"]').click()
    _wait(browser, "return window.subzeroView.brushes > arguments[0]", 30, done)
    assert browser.execute_script("return window.subzeroView.main") == "stars"
    np.testing.assert_array_equal(_mask_of(browser.execute_script("return window.subzeroView.boxes"), shape),
                                  labels == star)
    _settled(browser)
    _shot(browser, shots, "catalog")
    assert browser.execute_script("return window.subzeroView.errors") == 0
    if shots == IMAGES:  # every state passed: the screenshots are of this page
        (IMAGES / "viewer-page.sha256").write_text(_page_digest() + "\n")


def test_the_page_names_its_client_and_drops_a_superseded_brush_silently(server, browser):
    """Every POST of a page carries one ``X-Subzero-Client`` id (so the server lets its newer brush
    supersede its older one), and a 409 ``cancelled`` answer rejects with `Cancelled`, which the
    page does not count as an error."""
    run, url = server
    browser.get(url)
    _wait(browser, "return window.subzeroView && window.subzeroView.ready")
    got = browser.execute_async_script("""
        const done = arguments[arguments.length - 1];
        import(new URL("static/view.js", location.href).href).then(async (m) => {
          const seen = [], realFetch = window.fetch;
          window.fetch = (path, init) => { seen.push(init.headers["X-Subzero-Client"]); return realFetch(path, init); };
          const answers = [];
          try {
            const api = m.httpApi("");
            for (let k = 0; k < 2; k++)
              answers.push((await (await api.post("api/lineage",
                {node: "stars", direction: "backward", boxes: [[0, 2, 0, 2]], to: null})).json()).answers);
          } finally { window.fetch = realFetch; }
          let cancelled = null, plain = null;
          const answer409 = async () => new Response(JSON.stringify({error: "superseded", cancelled: true}), {status: 409});
          const answer400 = async () => new Response(JSON.stringify({error: "bad box"}), {status: 400});
          try { await m.apiOver(answer409).post("api/lineage", {}); } catch (e) { cancelled = e instanceof m.Cancelled; }
          try { await m.apiOver(answer400).post("api/lineage", {}); } catch (e) { plain = [e instanceof m.Cancelled, e.message]; }
          done({seen, answers, cancelled, plain});
        }).catch((e) => done({failed: String(e)}));
    """)
    assert "failed" not in got, got
    assert len(got["seen"]) == 2 and got["seen"][0] == got["seen"][1] and got["seen"][0].startswith("page-")
    assert got["answers"][0] == got["answers"][1] and got["answers"][0]  # the same walk, answered both times
    assert got["cancelled"] is True
    assert got["plain"] == [False, "bad box"]

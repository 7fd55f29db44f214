"""The viewer in a real browser (Debian's chromium and chromedriver, driven by selenium; both
installed by scripts/setup.sh): the page loads, tiles render, a drag on one node highlights
its lineage on the others, and export downloads the answer. Bounded in time: every wait has
a deadline, the server runs on a free loopback port and is stopped at the end."""

from __future__ import annotations

import shutil
import socket
import threading
import time

import numpy as np
import pytest

from view_store import make_run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER),
                                reason="no chromium/chromedriver on this machine (scripts/setup.sh installs them: "
                                       "apt-get install chromium chromium-driver)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from subzero.tools.view.server import make_server

    run = make_run(tmp_path_factory.mktemp("viewbrowser") / "s", "FullMany")
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
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(arg)
    options.add_experimental_option("prefs", {"download.default_directory": str(downloads),
                                              "download.prompt_for_download": False})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    driver.set_script_timeout(30)
    driver.downloads = downloads
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


def test_page_tiles_brush_and_export(server, browser):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    run, url = server
    browser.get(url)
    _wait(browser, "return window.subzeroView && window.subzeroView.ready")
    cards = browser.find_elements(By.CSS_SELECTOR, ".card")
    assert [c.get_attribute("data-node") for c in cards] == ["x", "y", "blur", "bright", "stars", "mixed", "flipped"]
    # a tile rendered: every 2-D view has loaded its tile and painted it onto its canvas
    _wait(browser, "return Object.values(window.subzeroView.views).every(v => v.tilesLoaded > 0)")
    lit = browser.execute_script("""
        const c = document.querySelector('canvas[data-node="x"]');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0; for (let i = 0; i < d.length; i += 4) if (d[i] + d[i + 1] + d[i + 2] > 90) n++;
        return n;""")
    assert lit > 1000, "the tile of x was not drawn"

    # drag a box over part of 'bright' (its canvas shows the 24 x 20 array at 12.5 px per cell)
    canvas = browser.find_element(By.CSS_SELECTOR, 'canvas[data-node="bright"]')
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", canvas)
    scale, ox, oy = browser.execute_script("const v = window.subzeroView.views.bright; return [v.scale, v.ox, v.oy];")
    w, h = canvas.size["width"], canvas.size["height"]

    def offset(row, col):  # selenium offsets are from the element's centre
        return round((col - ox) * scale - w / 2), round((row - oy) * scale - h / 2)

    start, end = offset(6.5, 4.5), offset(11.5, 9.5)
    (ActionChains(browser).move_to_element_with_offset(canvas, *start).click_and_hold()
     .move_to_element_with_offset(canvas, *end).release().perform())
    _wait(browser, "return window.subzeroView.brushes > 0")
    assert browser.execute_script("return window.subzeroView.errors") == 0
    request = browser.execute_script("return window.subzeroView.request")
    assert request["node"] == "bright" and request["boxes"] == [[6, 12, 4, 10]]
    box = [(6, 12), (4, 10)]
    cells = {c.get_attribute("data-node"): c.get_attribute("data-cells") for c in
             browser.find_elements(By.CSS_SELECTOR, ".card")}
    assert cells["bright"] == "36"
    assert cells["x"] == str(len(run.backward("bright", box=box, to="x")))  # upstream, backward
    assert cells["stars"] == str(len(run.forward("bright", box=box, to="stars")))  # downstream, forward
    assert cells["y"] == "" and cells["flipped"] == ""  # not connected to 'bright'
    # the upstream node shows highlighted cells (the backward colour) on its canvas
    pink = browser.execute_script("""
        const c = document.querySelector('canvas[data-node="x"]');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0; for (let i = 0; i < d.length; i += 4) if (d[i] > 150 && d[i] > d[i + 1] + 60 && d[i] > d[i + 2] + 30) n++;
        return n;""")
    assert pink > 500, "no highlighted cells drawn on x"

    # export the backward answer in x as a mask
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element(By.ID, "export-target")).select_by_value("x")
    Select(browser.find_element(By.ID, "export-format")).select_by_value("npy")
    browser.find_element(By.ID, "export").click()
    got = _wait(browser, "return window.subzeroView.lastExport")
    assert got.get("name") == "x-backward.npy", got
    path = browser.downloads / "x-backward.npy"
    deadline = time.monotonic() + 20
    while not path.exists():
        assert time.monotonic() < deadline, "the export was not downloaded"
        time.sleep(0.1)
    time.sleep(0.2)
    np.testing.assert_array_equal(np.load(path), run.backward_mask("bright", box=box, to="x"))

    # zoom to answer: the view of x now frames the answer's bounding box
    browser.execute_script("""document.querySelector('.card[data-node="x"] .answer button').click()""")
    scale_after = browser.execute_script("return window.subzeroView.views.x.scale")
    assert scale_after > scale

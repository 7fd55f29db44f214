"""``subzero view STORE`` as a user runs it: prints its URL, serves the page on 127.0.0.1
without a token, requires a token (made and printed in the URL) on any other address,
answers malformed requests over real HTTP with 4xx JSON and keeps answering, stops cleanly on
Ctrl-C (SIGINT), and refuses a bad store or a busy port in one line."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from view_store import make_run

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(tmp_path) -> dict:
    return os.environ | {"PYTHONPATH": str(ROOT), "SUBZERO_CACHE": str(tmp_path / "cache")}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("viewserver") / "s", "Map").path


def _wait(url: str) -> None:
    deadline = time.monotonic() + 20
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            assert time.monotonic() < deadline, "the viewer did not answer within 20 s"
            time.sleep(0.1)


def _request(url: str, data: bytes | None = None, headers: dict | None = None) -> tuple[int, bytes, dict]:
    req = urllib.request.Request(url, data, headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as res:
            return res.status, res.read(), dict(res.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


def _stop(proc) -> None:
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=15) == 0
    assert "Traceback" not in proc.stderr.read()


def test_serves_until_ctrl_c(store, tmp_path):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "subzero", "view", store, "--port", str(port)], cwd=tmp_path,
                            env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert f"http://127.0.0.1:{port}/" in line and "Ctrl-C" in line and "token" not in line
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/nodes", timeout=5) as res:
                    nodes = json.load(res)
                break
            except OSError:
                assert time.monotonic() < deadline, "the viewer did not answer within 20 s"
                time.sleep(0.1)
        assert [n["name"] for n in nodes][:3] == ["x", "y", "blur"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 0
        assert "stopped" in proc.stdout.read() and "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_refuses_a_busy_port_and_a_missing_store(store, tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        got = subprocess.run([sys.executable, "-m", "subzero", "view", store, "--port", str(port)], cwd=tmp_path,
                             env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert got.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in got.stderr
    assert len(got.stderr.strip().splitlines()) == 1
    got = subprocess.run([sys.executable, "-m", "subzero", "view", str(tmp_path / "none")], cwd=tmp_path,
                         env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert got.returncode == 2 and got.stderr.startswith("subzero: error:") and "Traceback" not in got.stderr


def test_any_other_address_requires_a_token(store, tmp_path):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "subzero", "view", store, "--host", "0.0.0.0", "--port", str(port)],
                            cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert f"http://0.0.0.0:{port}/?token=" in line
        token = line.split("?token=")[1].split()[0]
        assert len(token) >= 24
        base = f"http://127.0.0.1:{port}"
        _wait(base + "/api/run")
        status, body, _ = _request(base + "/api/nodes")
        assert status == 403 and "needs its token" in json.loads(body)["error"]
        status, body, _ = _request(base + "/api/nodes?token=" + token[:-1] + "x")
        assert status == 403
        status, body, headers = _request(f"{base}/?token={token}")
        cookie = headers["set-cookie"].split(";")[0]
        assert status == 200 and cookie.startswith("subzero_view_token-") and cookie.endswith(f"={token}")
        status, body, _ = _request(base + "/api/nodes", headers={"Cookie": cookie})
        assert status == 200 and json.loads(body)[0]["name"] == "x"
        status, body, _ = _request(base + "/api/nodes", headers={"Authorization": f"token {token}"})
        assert status == 200
        _stop(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_malformed_requests_over_http_are_4xx_json_and_it_keeps_answering(store, tmp_path):
    port = _free_port()
    env = _env(tmp_path) | {"SUBZERO_VIEW_MAX_BODY_BYTES": "100000"}
    proc = subprocess.Popen([sys.executable, "-m", "subzero", "view", store, "--port", str(port), "--token", "tk"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert f"http://127.0.0.1:{port}/?token=tk" in proc.stdout.readline()  # a token given is kept on loopback
        base = f"http://127.0.0.1:{port}"
        _wait(base + "/api/run")
        auth = {"Authorization": "token tk", "Content-Type": "application/json"}
        good = json.dumps({"node": "blur", "direction": "backward", "boxes": [[0, 2, 0, 2]], "to": None}).encode()
        cases = [(b"[" * 50_000, 400), (b'{"boxes": ' + b"[" * 5000 + b"}", 400), (b"", 400),
                 (b"{" + b" " * 500_000 + b"}", 413), (good, 200)] * 3
        t0 = time.monotonic()
        for path in ("/api/lineage", "/api/export"):
            for content, status in cases:
                got, body, headers = _request(base + path, content, auth)
                want = 400 if (path, status) == ("/api/export", 200) else status  # an export needs a target
                assert got == want and headers["content-type"] == "application/json", (path, content[:50], got)
                assert got == 200 or json.loads(body)["error"]
        assert time.monotonic() - t0 < 30
        assert _request(base + "/api/lineage", good, {**auth, "Content-Type": "text/plain"})[0] == 415
        assert _request(base + "/api/nodes", headers=auth)[0] == 200
        _stop(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _children(pid: int) -> set[int]:
    try:
        return {int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}
    except OSError:  # not Linux
        return set()


def test_two_worker_processes_answer_as_one_and_stop_on_sigterm(store, tmp_path):
    """``--workers 2``: two pre-forked processes on one port answer every request as the app
    in one process does; both report idle once the one that makes the overviews is done;
    SIGTERM stops them all."""
    from starlette.testclient import TestClient

    from subzero.run import open_run
    from subzero.tools.view.app import create_app

    body = [{"node": node, "direction": direction, "boxes": boxes, "to": None}
            for node, boxes in (("blur", [[0, 2, 0, 2]]), ("bright", [[1, 5, 2, 9], [3, 4, 0, 12]]), ("x", [[0, 3, 0, 3]]))
            for direction in ("backward", "forward")] * 2  # each twice: with two workers, both answer some
    with TestClient(create_app(open_run(store), tmp_path / "one", warm=False)) as one:
        want = [one.get("/api/nodes").json()] + [one.post("/api/lineage", json=b).json()["answers"] for b in body]
        want.append(one.get("/tiles/blur/0/0/0.png").content)
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "subzero", "view", store, "--port", str(port), "--workers", "2"],
                            cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert f"127.0.0.1:{port}" in proc.stdout.readline()
        base = f"http://127.0.0.1:{port}"
        _wait(base + "/api/run")
        deadline = time.monotonic() + 30
        while not json.loads(_request(base + "/api/run")[1])["idle"]:
            assert time.monotonic() < deadline, "the viewer did not become idle within 30 s"
            time.sleep(0.1)
        got = [json.loads(_request(base + "/api/nodes")[1])]
        for b in body:
            status, data, _ = _request(base + "/api/lineage", json.dumps(b).encode(), {"Content-Type": "application/json"})
            assert status == 200
            got.append(json.loads(data)["answers"])
        got.append(_request(base + "/tiles/blur/0/0/0.png")[1])
        assert got == want
        kids = _children(proc.pid)
        assert len(kids) == 2 or not Path("/proc").is_dir()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        assert "stopped" in proc.stdout.read() and "Traceback" not in proc.stderr.read()
        assert not any(Path(f"/proc/{k}").exists() for k in kids)  # no worker left behind
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

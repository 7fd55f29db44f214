"""``subzero view STORE`` as a user runs it: prints its URL, serves the page on 127.0.0.1,
stops cleanly on Ctrl-C (SIGINT), and refuses a bad store or a busy port in one line."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
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


def test_serves_until_ctrl_c(store, tmp_path):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "subzero", "view", store, "--port", str(port)], cwd=tmp_path,
                            env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert f"http://127.0.0.1:{port}/" in line and "Ctrl-C" in line
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

"""Store locations: paths and URLs resolve to one root, a whole run lives in an fsspec store
(``memory://``) as it does in a directory, a missing file-system package says what to install,
and file writes are atomic."""

from __future__ import annotations

import importlib.util
import os
import pickle
import threading
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

import subzero as sz
from subzero.store import Location, resolve
from subzero.store import location as location_mod


# -- resolve -----------------------------------------------------------------------------------------------------

def test_relative_paths_resolve_against_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for given in ("runs/demo", Path("runs/demo"), "./runs/demo", "file://runs/demo"):
        loc = resolve(given)
        assert loc.url == loc.root == str(tmp_path / "runs" / "demo") and loc.is_local and loc.scheme == "file"
    assert resolve("runs/demo/").root == str(tmp_path / "runs" / "demo")


def test_home_and_file_urls(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve("~/runs/x").root == str(tmp_path / "runs" / "x")
    assert resolve("file://~/runs/x").root == str(tmp_path / "runs" / "x")
    assert resolve(f"file://{tmp_path}/a").root == str(tmp_path / "a")
    assert resolve(f"file://{tmp_path}/a").path("b", "c") == str(tmp_path / "a" / "b" / "c")
    loc = resolve(tmp_path / "a")
    assert resolve(loc) is loc


def test_memory_urls(tmp_path):
    loc = resolve("memory://bucket/run/")
    assert loc.url == "memory://bucket/run" and loc.root == "/bucket/run"
    assert not loc.is_local and loc.scheme == "memory"
    assert loc.path("arrays", "x") == "/bucket/run/arrays/x"
    assert loc.child_url("arrays", "x") == "memory://bucket/run/arrays/x"


@pytest.mark.parametrize("value,message", [
    ("", "store is empty"),
    (None, "got NoneType"),
    (42, "got int"),
    ("nosuchproto://bucket/run", r"cannot be reached \(ValueError: Protocol not known: nosuchproto\)"),
])
def test_what_is_not_a_store_location(value, message):
    with pytest.raises(sz.StoreError, match=message):
        resolve(value)


@pytest.mark.parametrize("url,package", [("s3://bucket/run", "s3fs"), ("gs://bucket/run", "gcsfs"),
                                         ("az://container/run", "adlfs")])
def test_a_scheme_whose_package_is_missing_says_what_to_install(url, package):
    if importlib.util.find_spec(package) is not None:
        pytest.skip(f"{package} is installed here")
    with pytest.raises(sz.StoreError) as err:
        resolve(url)
    text = str(err.value)
    assert url in text and "needs a package that is not installed" in text and package in text
    assert "install" in text.lower() and "or use a local directory" in text


def test_a_location_pickles_for_the_tasks(tmp_path):
    for loc in (resolve(tmp_path / "s"), resolve("memory://pickled/run")):
        again = pickle.loads(pickle.dumps(loc))
        assert (again.url, again.root, again.is_local) == (loc.url, loc.root, loc.is_local)
    loc = resolve("memory://pickled/run")
    loc.makedirs()
    loc.write_bytes(b"seen", "f")
    assert pickle.loads(pickle.dumps(loc)).read_bytes("f") == b"seen"
    loc.remove()


# -- file operations -----------------------------------------------------------------------------------------------

@pytest.fixture(params=["local", "memory"])
def loc(request, tmp_path):
    if request.param == "local":
        yield resolve(tmp_path / "store")
        return
    loc = resolve(f"memory://test-location-{os.getpid()}/{tmp_path.name}")
    yield loc
    loc.remove()


def test_files_round_trip(loc):
    loc.makedirs("a", "b")
    loc.write_bytes(b"one", "a", "b", "f.bin")
    assert loc.read_bytes("a", "b", "f.bin") == b"one"
    assert loc.exists("a", "b", "f.bin") and loc.isdir("a", "b") and not loc.isdir("a", "b", "f.bin")
    loc.write_bytes(b"two!", "a", "b", "f.bin")  # replaced whole
    assert loc.read_bytes("a", "b", "f.bin") == b"two!"
    loc.write_bytes(b"x\ny\n", "a", "log")
    assert loc.listdir("a") == ["b", "log"] and loc.listdir("a", "b") == ["f.bin"]
    loc.remove("a", "b")
    assert not loc.exists("a", "b", "f.bin") and loc.listdir("a") == ["log"]
    loc.remove("a", "nothing")  # removing what is not there is fine


def test_listing_a_missing_directory_is_empty(loc):
    assert loc.listdir("no", "such", "dir") == []
    assert loc.listdir() == [] and not loc.exists()
    assert not loc.exists("no") and not loc.isdir("no")


def test_reading_a_missing_file_is_file_not_found(loc):
    loc.makedirs()
    with pytest.raises(FileNotFoundError):
        loc.read_bytes("missing")


def test_put_and_get_files(loc, tmp_path):
    src, dst = tmp_path / "src.bin", tmp_path / "dst.bin"
    src.write_bytes(os.urandom(5000))
    loc.makedirs("d")
    loc.put_file(str(src), "d", "copy.bin")
    loc.get_file(str(dst), "d", "copy.bin")
    assert dst.read_bytes() == src.read_bytes()


def test_a_directory_that_cannot_be_made_is_a_store_error(tmp_path):
    (tmp_path / "file").write_bytes(b"x")
    loc = resolve(tmp_path / "file")
    with pytest.raises(sz.StoreError, match=r"cannot create .*file/sub.* check that the store location is writable"):
        loc.makedirs("sub")


def test_writes_leave_no_temporary_files_and_flush_only_when_durable(tmp_path):
    loc = resolve(tmp_path)
    calls = []
    real = os.fsync
    with mock.patch.object(location_mod.os, "fsync", lambda fd: (calls.append(fd), real(fd))):
        loc.write_bytes(b"catalog", "catalog.json")
        assert len(calls) == 1
        loc.write_bytes(b"chunk", "c0", durable=False)
        assert len(calls) == 1
    assert sorted(os.listdir(tmp_path)) == ["c0", "catalog.json"]


def test_a_failed_write_keeps_the_old_file_and_no_temporary(tmp_path):
    loc = resolve(tmp_path)
    loc.write_bytes(b"old", "catalog.json")
    with mock.patch.object(location_mod.os, "replace", side_effect=OSError(28, "No space left on device")):
        with pytest.raises(OSError, match="No space left"):
            loc.write_bytes(b"new" * 1000, "catalog.json")
    assert (tmp_path / "catalog.json").read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["catalog.json"]


def test_a_reader_sees_the_old_file_or_the_new_one_never_a_part(tmp_path):
    loc = resolve(tmp_path)
    versions = [bytes([k]) * (1 << 20) for k in (1, 2)]
    loc.write_bytes(versions[0], "f")
    stop = threading.Event()

    def write():
        k = 0
        while not stop.is_set():
            k ^= 1
            loc.write_bytes(versions[k], "f", durable=False)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        for _ in range(200):
            data = loc.read_bytes("f")
            assert data in versions, f"torn read of {len(data)} bytes"
    finally:
        stop.set()
        writer.join()
    assert not [n for n in os.listdir(tmp_path) if n != "f"]


# -- a whole run in an fsspec store ----------------------------------------------------------------------------------

def build():
    wf = sz.Workflow("mem")
    x = wf.input("x")
    t = wf.add(sz.operators.Transpose(), x, name="t")
    wf.add(sz.operators.UniformFilter(size=3), t, name="blur")
    return wf


STRATEGIES = {"t": ["FullOne", "FullMany/forward"], "blur": "FullMany"}


def snapshot(loc) -> dict[str, bytes]:
    return {p: loc.fs.cat_file(p) for p in loc.fs.find(loc.root)}


def test_a_run_in_a_memory_store_answers_like_one_in_a_directory(tmp_path):
    data = np.arange(48.0).reshape(6, 8)
    url = f"memory://test-run-{os.getpid()}/{tmp_path.name}"
    loc = resolve(url)
    try:
        local = build().run({"x": data}, store=tmp_path / "local", executor="local", strategies=STRATEGIES,
                            tile_shape=4)
        remote = build().run({"x": data}, store=url, executor="local", strategies=STRATEGIES, tile_shape=4)
        assert remote.strategies == local.strategies
        assert not Path("memory:").exists()  # not taken for a relative directory
        assert "catalog.json" in loc.listdir() and loc.listdir("lineage", "t") == ["FullMany-forward",
                                                                                   "FullOne-backward"]
        assert not loc.exists(".writer")  # the run released its lock
        before = snapshot(loc)
        reopened = sz.open_run(url)
        for run in (remote, reopened):
            np.testing.assert_array_equal(np.asarray(run.output("t")[:]), data.T)
            np.testing.assert_array_equal(np.asarray(run.output("blur")[:]), np.asarray(local.output("blur")[:]))
            for cells in ([(1, 2)], [(0, 0), (7, 5)]):
                np.testing.assert_array_equal(run.backward("blur", cells, to="x"),
                                              local.backward("blur", cells, to="x"))
                np.testing.assert_array_equal(run.backward("t", cells, to="x", using={"t": "FullOne/backward"}),
                                              local.backward("t", cells, to="x"))
            for cells in ([(2, 1)], [(5, 7)]):
                np.testing.assert_array_equal(run.forward("x", cells, to="blur"), local.forward("x", cells, to="blur"))
                np.testing.assert_array_equal(run.forward("x", cells, to="t", using={"t": "FullMany/forward"}),
                                              local.forward("x", cells, to="t"))
        assert snapshot(loc) == before  # queries never write to the store
        with pytest.raises(sz.StoreError, match="already exists"):
            build().run({"x": data}, store=url, executor="local")
    finally:
        loc.remove()

"""Stores on object storage, for real: an S3 service on loopback (moto's server), runs with the
local and the Spark executor, queries from new processes, info, explain, resume after kill -9,
overwrite, replay, the ways to point at an endpoint, and a proxy that fails requests."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import subzero as sz
from subzero import operators as ops
from subzero_bench.object_store import FaultProxy, s3_service
from subzero.errors import StorageUnavailable

pytest.importorskip("moto.server")
pytest.importorskip("s3fs")

ROOT = Path(__file__).resolve().parents[1]

FLOW = """
import numpy as np
import subzero as sz
from subzero import operators as ops


def build(inputs=None):
    wf = sz.Workflow("objects")
    x = wf.input("x")
    blur = wf.add(ops.Convolve(np.ones((3, 3)), mode="reflect"), x, name="blur")
    bright = wf.add(ops.Threshold(4.0), blur, name="bright")
    wf.add(ops.Label(), bright, name="stars")
    return wf, {"x": image()}


def image():
    rng = np.random.default_rng(7)
    x = rng.random((48, 40))
    x[10:13, 5:9] += 2.0
    x[30:34, 20:22] += 3.0
    return x
"""

PINS = {"blur": ["FullOne", "FullMany/forward"], "stars": ["FullMany", "PayOne"]}
CELLS = [(11, 6), (31, 20), (0, 0), (47, 39)]


def flow():
    namespace: dict = {}
    exec(compile(FLOW, "flow.py", "exec"), namespace)
    return namespace["build"]()


def answers(run) -> dict:
    """Every strategy's backward and forward answers over the test cells, and the outputs."""
    out = {}
    for node in ("blur", "stars"):
        out[f"out:{node}"] = np.asarray(run.output(node)).tolist()
    for using in (None, {"stars": "FullMany"}, {"stars": "PayOne"}, {"blur": "FullOne"}):
        kw = {"using": using} if using else {}
        out[f"b:{using}"] = run.backward("stars", CELLS, to="x", **kw).tolist()
    out["f"] = run.forward("x", CELLS, to="stars").tolist()
    out["f:blur"] = run.forward("x", CELLS, to="blur", using={"blur": "FullMany/forward"}).tolist()
    return out


@pytest.fixture(scope="module")
def s3():
    with s3_service() as service:
        service.make_bucket("runs")
        yield service


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    wf, inputs = flow()
    run = wf.run(inputs, store=tmp_path_factory.mktemp("disk") / "run", strategies=PINS, executor="local")
    return answers(run)


def cli(*args: str, cwd: Path, env: dict | None = None, timeout: float = 300):
    full = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run([sys.executable, "-m", "subzero", *args], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=timeout)


def test_local_runs_to_s3_answer_as_a_disk_store_also_from_a_new_process(s3, reference, tmp_path):
    wf, inputs = flow()
    run = wf.run(inputs, store="s3://runs/local", strategies=PINS, executor="local")
    assert answers(run) == reference
    assert answers(sz.open_run("s3://runs/local")) == reference
    (tmp_path / "flow.py").write_text(FLOW)
    query = cli("query", "s3://runs/local", "backward", "stars", "--to", "x", "--cells", "11,6;31,20;0,0;47,39",
                "--json", cwd=tmp_path)
    assert query.returncode == 0, query.stderr
    assert json.loads(query.stdout)["cells"] == reference["b:None"]
    info = cli("info", "s3://runs/local", "--json", cwd=tmp_path)
    assert info.returncode == 0, info.stderr
    data = json.loads(info.stdout)
    assert data["status"] == "done" and data["committed"] == ["x", "blur", "bright", "stars"]
    explain = cli("explain", "s3://runs/local", cwd=tmp_path)
    assert explain.returncode == 0 and "FullMany" in explain.stdout, explain.stderr


def test_spark_runs_to_s3_with_storage_options_answer_as_a_disk_store(s3, reference, spark, monkeypatch):
    """The session's Python workers may predate AWS_ENDPOINT_URL: storage options travel with
    the store to every task instead."""
    options = {"endpoint_url": s3.endpoint, "key": "testing", "secret": "testing"}
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    wf, inputs = flow()
    run = wf.run(inputs, store="s3://runs/spark", strategies=PINS, spark=spark, executor="spark", tile_shape=16,
                 storage_options=options)
    assert answers(run) == reference
    assert answers(sz.open_run("s3://runs/spark", storage_options=options)) == reference
    monkeypatch.setenv("SUBZERO_STORAGE_TIMEOUT", "1")  # nothing listens there: retried for a second, not a minute
    with pytest.raises(sz.StoreError, match="s3://runs/spark"):  # without them: no endpoint, no credentials
        sz.open_run("s3://runs/spark", storage_options={"endpoint_url": "http://127.0.0.1:9", "key": "x",
                                                        "secret": "y", "config_kwargs": {"retries": {"max_attempts": 1}}})


def test_every_way_to_name_the_endpoint_works_from_the_command_line(s3, tmp_path):
    """AWS_ENDPOINT_URL, fsspec's configuration (FSSPEC_S3_ENDPOINT_URL) and --storage-option."""
    (tmp_path / "flow.py").write_text(FLOW)
    keys = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_ENDPOINT_URL": ""}
    ways = {"env": ([], {"AWS_ENDPOINT_URL": s3.endpoint}),
            "fsspec": ([], {**keys, "FSSPEC_S3_ENDPOINT_URL": s3.endpoint}),
            "flag": (["--storage-option", f"endpoint_url={s3.endpoint}"], keys)}
    for name, (flags, env) in ways.items():
        done = cli("run", "flow.py", "--store", f"s3://runs/way-{name}", "--executor", "local", *flags, cwd=tmp_path,
                   env=env)
        assert done.returncode == 0, (name, done.stderr)
        info = cli("info", f"s3://runs/way-{name}", "--json", *flags, cwd=tmp_path, env=env)
        assert info.returncode == 0 and json.loads(info.stdout)["status"] == "done", (name, info.stderr)
    bad = cli("info", "s3://runs/way-flag", "--storage-option", "endpoint_url", cwd=tmp_path, env=keys)
    assert bad.returncode == 2 and bad.stderr.startswith("subzero: error: --storage-option 'endpoint_url' must")


SLOW = FLOW.replace("def build(inputs=None):", '''class Slow(ops.AddScalar):
    def run(self, ctx, x):
        import time
        time.sleep(0.15)
        return super().run(ctx, x)


def build(inputs=None):''').replace(
    '    wf.add(ops.Label(), bright, name="stars")',
    '    stars = wf.add(ops.Label(), bright, name="stars")\n    wf.add(Slow(1.0), stars, name="late")')


def test_kill_9_then_resume_then_overwrite_then_replay_on_s3(s3, tmp_path, monkeypatch, capsys):
    from subzero.tools.cli import main

    (tmp_path / "flow.py").write_text(SLOW)
    monkeypatch.chdir(tmp_path)
    store = "s3://runs/killed"
    args = ["run", "flow.py", "--store", store, "--executor", "local", "--tile", "8", "--strategy", "stars=FullMany"]
    env = dict(os.environ, PYTHONPATH=str(ROOT), SUBZERO_COMMIT_SECONDS="0")  # stars visible as soon as committed
    proc = subprocess.Popen([sys.executable, "-m", "subzero", *args], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if "stars" in sz.open_run(store, partial=True).committed:
                    break
            except sz.StoreError:
                pass
            time.sleep(0.1)
        assert proc.poll() is None, proc.stderr.read()
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert main(["info", store, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["status"] == "running" and "late" not in info["committed"], info
    assert main([*args, "--resume"]) == 0
    assert main([*args[:3], "disk", *args[4:]]) == 0
    on_s3, on_disk = sz.open_run(store), sz.open_run(tmp_path / "disk")
    np.testing.assert_array_equal(np.asarray(on_s3.output("late")), np.asarray(on_disk.output("late")))
    cells = [(11, 6), (31, 20), (3, 3)]
    assert on_s3.backward("late", cells, to="x").tolist() == on_disk.backward("late", cells, to="x").tolist()
    assert on_s3.forward("x", cells, to="late").tolist() == on_disk.forward("x", cells, to="late").tolist()
    assert main([*args, "--overwrite"]) == 0
    capsys.readouterr()
    replays = {}
    for name, source, target in (("s3", store, "s3://runs/replayed"), ("disk", "disk", "replayed")):
        assert main(["replay", source, "--from", "x", "--cells", "11,6", "--set", "9", "--store", target,
                     "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        replays[name] = [(n["name"], n["how"], n["tiles"], n["rerun"]) for n in report["nodes"]]
    assert replays["s3"] == replays["disk"]
    np.testing.assert_array_equal(np.asarray(sz.open_run("s3://runs/replayed").output("late")),
                                  np.asarray(sz.open_run(tmp_path / "replayed").output("late")))


def test_transient_faults_are_retried_and_answers_stay_exact(s3, reference):
    """5% of requests fail (503 SlowDown or a reset connection): the run and its queries are exact."""
    with FaultProxy(s3.endpoint, rate=0.05, seed=3) as proxy:
        options = {"endpoint_url": proxy.endpoint, "key": "testing", "secret": "testing"}
        wf, inputs = flow()
        run = wf.run(inputs, store="s3://runs/faulty", strategies=PINS, executor="local", storage_options=options)
        from subzero.store import shards

        shards.close_all()  # queries download their shards again, through the proxy
        assert answers(sz.open_run("s3://runs/faulty", storage_options=options)) == reference
        assert answers(run) == reference
    assert proxy.requests > 100 and proxy.slowdowns > 0 and proxy.resets > 0, vars(proxy)


@pytest.mark.parametrize("after", [0, 60])
def test_an_outage_is_a_store_error_naming_the_store_and_the_service(s3, after):
    """The service down from the start, or from the 60th request on (mid-run): a StoreError
    naming the store and the service, and no store claiming to be a finished run."""
    from subzero import config

    store = f"s3://runs/outage-{after}"
    with FaultProxy(s3.endpoint, rate=0.0, outage_after=after) as proxy:
        options = {"endpoint_url": proxy.endpoint, "key": "testing", "secret": "testing",
                   "config_kwargs": {"retries": {"max_attempts": 1}}}
        wf, inputs = flow()
        # short budgets: the failed run's cleanup (mark it failed, release the lock) retries for a
        # second, not lock_release_timeout's default 10
        with config.set(s3_retries=2, lock_release_timeout=1.0), pytest.raises(sz.StoreError) as caught:
            wf.run(inputs, store=store, strategies=PINS, executor="local", storage_options=options)
    message = str(caught.value)
    assert store in message and f"S3 at {proxy.endpoint}" in message, message
    with pytest.raises(sz.StoreError, match="does not exist|did not finish"):
        sz.open_run(store)


def test_storage_options_parse_nested_keys_and_json_values():
    from subzero.store.location import parse_storage_options

    assert parse_storage_options(["endpoint_url=http://h:1", "client_kwargs.region_name=eu", "anon=false",
                                  "retries=3"]) == {"endpoint_url": "http://h:1", "client_kwargs": {"region_name": "eu"},
                                                    "anon": False, "retries": 3}
    with pytest.raises(sz.StoreError, match="KEY=VALUE"):
        parse_storage_options(["endpoint_url"])


# -- outages: every wait bounded and said (tests/storage_outage.py runs `subzero run` behind the fault proxy) ---------

def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("subzero: error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], stderr
    return errors[0]


@pytest.mark.slow
def test_an_outage_from_a_random_point_ends_the_run_within_its_budget_and_resume_completes_it(
        s3, reference, tmp_path):
    """Every request fails from a random one on: the run exits 1 within the configured budget
    (plus the cleanup's and the process's own seconds), saying so while it waits and in one line
    at the end; the lock is released or stale; --resume afterwards completes the run exactly.
    A short budget (3 s, the default is 60) proves the bound in seconds: the wait is at least
    the budget and far below the default's."""
    from storage_outage import TimedFaultProxy, run_cli

    from subzero.store.lock import holder
    from subzero.store.location import resolve

    budget = 3.0
    after = random.Random(int(budget)).randint(30, 180)  # the run makes about 230 requests (9 tiles per node)
    store = f"s3://runs/outage-budget-{int(budget)}"
    limits = {"SUBZERO_STORAGE_TIMEOUT": str(budget), "SUBZERO_LOCK_RELEASE_TIMEOUT": "1"}
    with TimedFaultProxy(s3.endpoint, rate=0.0, outage_after=after) as proxy:
        got = run_cli(tmp_path, proxy.endpoint, store, env=limits, timeout=600)
    assert proxy.down_at is not None
    waited = got.ended - proxy.down_at
    print(f"outage after {after} requests, budget {budget:g} s: exit {got.returncode} {waited:.1f} s after it began")
    assert got.returncode == 1, got.stderr
    assert budget * 0.9 <= waited <= budget + 1 + 30, waited  # the budget bounds the wait, and is used (lock: 1 s)
    line = _one_error_line(got.stderr)
    assert store in line and f"S3 at {proxy.endpoint}" in line and "--resume" in line, line
    assert "writer lock" in line, line  # released, or not and what happens then
    assert f"S3 at {proxy.endpoint} failing (" in got.stderr and "retrying" in got.stderr
    left = holder(resolve(store))
    assert left is None or left.alive is False, left  # released, or stale: resume takes it over
    again = run_cli(tmp_path, s3.endpoint, store, "--resume", timeout=600)
    assert again.returncode == 0, again.stderr
    from subzero.store import shards

    shards.close_all()
    assert answers(sz.open_run(store)) == reference


@pytest.mark.slow
def test_ctrl_c_during_an_outage_exits_promptly_with_one_line(s3, tmp_path):
    import threading

    from storage_outage import FLOW, PINS

    (tmp_path / "flow.py").write_text(FLOW)
    with FaultProxy(s3.endpoint, rate=0.0, outage_after=40) as proxy:
        env = dict(os.environ, PYTHONPATH=str(ROOT), AWS_ENDPOINT_URL=proxy.endpoint, SUBZERO_LOCK_RELEASE_TIMEOUT="2")
        proc = subprocess.Popen([sys.executable, "-m", "subzero", "run", "flow.py", "--store", "s3://runs/interrupted",
                                 "--executor", "local", "--tile", "8", *PINS], cwd=tmp_path, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        lines: list[str] = []
        said = threading.Event()

        def read() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                lines.append(line)
                if "failing (" in line:
                    said.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            assert said.wait(240), "".join(lines)
            proc.send_signal(signal.SIGINT)
            started = time.monotonic()
            code = proc.wait(60)
            took = time.monotonic() - started
        finally:
            if proc.poll() is None:
                proc.kill()
        reader.join(5)
    assert code == 130 and took < 2 + 10, (code, took, "".join(lines))
    last = [line for line in lines if line.strip()][-1]
    assert last.startswith("subzero: interrupted") and "--resume" in last, lines
    assert not any(line.startswith("Traceback") for line in lines), lines


@pytest.mark.slow
def test_queries_during_an_outage_fail_within_the_budget_and_cached_shards_still_answer(s3, reference, tmp_path):
    from subzero import config
    from subzero.store import retry, shards

    wf, inputs = flow()
    store = "s3://runs/queried"
    wf.run(inputs, store=store, strategies=PINS, executor="local")
    with FaultProxy(s3.endpoint, rate=0.0) as proxy:
        options = {"endpoint_url": proxy.endpoint}
        shards.close_all()
        run = sz.open_run(store, storage_options=options)
        cached = run.backward("stars", CELLS, to="x", using={"stars": "FullMany"}).tolist()
        assert cached == reference["b:{'stars': 'FullMany'}"]
        proxy.outage_after = proxy.requests  # the service goes down now
        with config.set(storage_timeout=2.0):
            retry.begin()
            assert run.backward("stars", CELLS, to="x", using={"stars": "FullMany"}).tolist() == cached
            started = time.monotonic()
            with pytest.raises(sz.StoreError) as caught:  # needs shards it never fetched
                run.forward("x", CELLS, to="blur", using={"blur": "FullMany/forward"})
            assert time.monotonic() - started < 2.0 + 5
        assert isinstance(caught.value, StorageUnavailable) and f"S3 at {proxy.endpoint}" in str(caught.value)
        (tmp_path / "flow.py").write_text(FLOW)
        started = time.monotonic()
        query = cli("query", store, "backward", "stars", "--to", "x", "--cells", "11,6", cwd=tmp_path,
                    env={"AWS_ENDPOINT_URL": proxy.endpoint, "SUBZERO_STORAGE_TIMEOUT": "3"})
        took = time.monotonic() - started
    assert query.returncode == 1 and took < 3 + 30, (query.returncode, took, query.stderr)
    line = _one_error_line(query.stderr)
    assert store in line and f"S3 at {proxy.endpoint}" in line, line

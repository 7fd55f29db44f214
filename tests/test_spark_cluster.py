"""The Spark executor on a standalone cluster on loopback: the commands of docs/guide/spark.md,
lineage exactly the local executor's, an executor JVM killed mid-run.

Its own module (helpers from tests/test_spark.py) because it is the suite's longest test: with
``--dist loadfile`` a module runs on one worker, and this one alone keeps a worker busy for minutes
while the other runs the rest of tests/test_spark.py.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import subzero as sz
from test_spark import ROOT, SLOW_FLOW, _env, _free_port, _one_line, _processes_marked, dump_lineage


def _job_file(cwd: Path) -> None:
    """The data of the page "Your own data" (a FITS exposure and a dark frame), its workflow file, and
    the spark-submit job file of the page "Clusters, spark-submit and object storage"."""
    from doc_pages import block
    from test_cli import exposure, stars_flow

    fits = pytest.importorskip("astropy.io.fits")
    image, dark = exposure()
    fits.HDUList([fits.PrimaryHDU(), fits.ImageHDU(image, name="SCI")]).writeto(cwd / "exposure.fits")
    np.save(cwd / "dark.npy", dark)
    (cwd / "stars.py").write_text(stars_flow()[0])
    (cwd / "stars_job.py").write_text(block("guide/spark.md", "python", "# stars_job.py: "))


RANDOM_ON_CLUSTER = r"""
import sys
sys.path[:0] = [{root!r}, {tests!r}]
import numpy as np
from subzero.strategies import supported_strategies
from subzero.executors.spark import get_session
from test_run import BINARY, UNARY, build, inputs_for
from test_spark import dump_lineage

spark = get_session({master!r})
rng = np.random.default_rng(11)
for k in range({count}):  # random workflows, as tests/test_run.py draws them
    n, count = int(rng.integers(3, 7)), int(rng.integers(3, 6))
    names, spec, binary_at = ["x", "y"], [], int(rng.integers(0, count))
    for j in range(count):
        kind = str(rng.choice(BINARY if j == binary_at else UNARY + BINARY))
        spec.append((f"n{{j}}", kind, [str(rng.choice(names)) for _ in range(2 if kind in BINARY else 1)]))
        names.append(f"n{{j}}")
    pins = {{node.name: supported_strategies(node.operator) for node in build(spec).nodes if not node.is_input}}
    runs = [build(spec).run(inputs_for(n, k), store=f"{out}/{{k}}-{{executor}}", strategies=pins, spark=spark,
                            executor=executor, tile_shape=3).wait() for executor in ("spark", "local")]
    assert dump_lineage(runs[0].path) == dump_lineage(runs[1].path), spec
    last = spec[-1][0]
    for node in pins:
        assert np.array_equal(runs[0].output(node), runs[1].output(node), equal_nan=True), (spec, node)
    cells = [tuple(int(rng.integers(0, s)) for s in runs[0].shape(last)) for _ in range(3)]
    for to in ("x", "y"):
        if to in {{a.name for a in runs[0].workflow.ancestors(runs[0].node(last))}}:
            assert np.array_equal(runs[0].backward(last, cells, to=to), runs[1].backward(last, cells, to=to))
    print(k, [s[1] for s in spec], "same lineage on the cluster", flush=True)
print("master", spark.sparkContext.master)
"""


def _wait_for_port(port: int, seconds: float = 90) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"nothing listens on port {port} after {seconds} s")


def _executor_jvms(mark: str) -> list[int]:
    """Pids of the executor JVMs (CoarseGrainedExecutorBackend) started by this test's workers."""
    pids = []
    for pid in _processes_marked(mark):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"CoarseGrainedExecutorBackend" in f.read():
                    pids.append(pid)
        except OSError:
            continue
    return pids


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds the executors' JVMs through /proc")
def test_standalone_cluster_on_loopback(tmp_path, monkeypatch):
    """The cluster of docs/guide/spark.md on loopback, every command of its opening as written (ports and
    directories aside): an S3 service (moto's), a master, two workers with work directories of
    their own, a run and a spark-submit job whose store is on S3.  A master without workers
    fails in one line; the cluster records exactly the lineage of the in-process executor, for
    the page's workflow and a random one; and a run whose executor JVM is killed with kill -9
    mid-run stores lineage identical to an undisturbed run's."""
    import shlex
    import uuid

    import pyspark

    from doc_pages import commands, section
    from subzero.tools.info import info_data

    pytest.importorskip("moto.server")
    home = Path(pyspark.__file__).parent
    ports = {"9000": _free_port(), "7077": _free_port(), "8080": _free_port(), "8081": _free_port(),
             "8082": _free_port()}
    lines = commands(section("guide/spark.md"))  # the page's opening, before "Object storage"
    for old, new in ports.items():
        lines = [ln.replace(old, str(new)) for ln in lines]
    lines = [ln.replace("/tmp/subzero-worker-", str(tmp_path / "worker-")) for ln in lines]
    assert [ln.split()[0] for ln in lines] == ["moto_server", "export", "spark-class", "spark-class", "spark-class",
                                               "subzero", "spark-submit"]
    mark = uuid.uuid4().hex
    exported = dict(item.split("=", 1) for item in shlex.split(lines[1])[1:])
    env = _env(SPARK_HOME=str(home), SUBZERO_TEST_RUN=mark, **exported)
    for key, value in exported.items():
        monkeypatch.setenv(key, value)  # this process reads the S3 stores too
    bindir = Path(sys.executable).parent  # where pip put spark-class, spark-submit and moto_server

    def argv(line: str) -> list[str]:
        args = shlex.split(line.rstrip("& "))
        if args[0] == "subzero":
            return [sys.executable, "-m", "subzero", *args[1:]]
        tool = bindir / args[0]
        return [str(tool if tool.exists() else home / "bin" / args[0]), *args[1:]]

    def start(line: str) -> subprocess.Popen:
        return subprocess.Popen(argv(line), env=env, cwd=tmp_path, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)

    _job_file(tmp_path)
    procs = [start(lines[0])]
    try:
        _wait_for_port(ports["9000"])
        procs.append(start(lines[2]))
        _wait_for_port(ports["7077"])
        master = f"spark://127.0.0.1:{ports['7077']}"
        # no worker yet: the run stops in one line instead of waiting forever
        lonely = subprocess.run([sys.executable, "-m", "subzero", "run", "demo", "--quick", "--store",
                                 str(tmp_path / "lonely"), "--master", master], cwd=tmp_path, capture_output=True,
                                text=True, env=dict(env, SUBZERO_SPARK_EXECUTOR_TIMEOUT="3"), timeout=300)
        _one_line(lonely, f"Spark master {master} gave this application no executor within 3 s")
        assert not (tmp_path / "lonely").exists()
        procs += [start(lines[3]), start(lines[4])]
        for line in lines[5:]:
            done = subprocess.run(argv(line), env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, (line, done.stderr[-3000:])
            assert "stored in" in done.stdout, (line, done.stdout[-3000:])
        for name in ("stars-cluster", "stars-submitted"):  # spark-submit's master is the one the job's run used
            info = info_data(f"s3://runs/{name}")
            assert info["status"] == "done" and info["executor"] == "spark" and info["master"] == master, name
        for n in (1, 2):  # the workers wrote into their own directories, not into the pyspark package
            assert any((tmp_path / f"worker-{n}").iterdir()), n
        local = subprocess.run([sys.executable, "-m", "subzero", "run", "stars.py", "--input", "raw=exposure.fits[SCI]",
                                "--input", "dark=dark.npy", "--store", "runs/stars-local", "--executor", "local"],
                               env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert local.returncode == 0, local.stderr
        assert dump_lineage("s3://runs/stars-cluster") == dump_lineage(tmp_path / "runs" / "stars-local")
        # one random workflow on the cluster (tests/test_run.py and the shared session's tests draw many)
        script = RANDOM_ON_CLUSTER.format(root=str(ROOT), tests=str(ROOT / "tests"), master=master, count=1,
                                          out=str(tmp_path / "random"))
        done = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.count("same lineage on the cluster") == 1 and f"master {master}" in done.stdout
        _kill_an_executor_mid_run(tmp_path, env, master, mark)
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def _kill_an_executor_mid_run(tmp_path: Path, env: dict, master: str, mark: str) -> None:
    """kill -9 of one executor JVM while a node's tasks run: Spark runs them again (on the other
    worker, or a new executor), and the lineage stored is the in-process executor's, exactly."""
    (tmp_path / "slow.py").write_text(SLOW_FLOW)
    args = ["run", "slow.py", "--tile", "32", "--strategy", "a=FullMany", "--strategy", "b=FullOne"]
    store = "s3://runs/killed-executor"
    proc = subprocess.Popen([sys.executable, "-m", "subzero", *args, "--store", store, "--master", master],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    killed = None
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None and killed is None:
            try:
                committed = sz.open_run(store, partial=True).committed
            except sz.StoreError:
                committed = []
            executors = _executor_jvms(mark)
            if "a" in committed and len(executors) == 2:
                time.sleep(0.5)  # node b's tasks are running on both executors
                killed = executors[0]
                os.kill(killed, 9)
            time.sleep(0.2)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert killed is not None, "the run ended before an executor could be killed"
    assert proc.returncode == 0, err
    undisturbed = subprocess.run([sys.executable, "-m", "subzero", *args, "--store", "runs/undisturbed",
                                  "--executor", "local"], cwd=tmp_path, env=env, capture_output=True, text=True,
                                 timeout=300)
    assert undisturbed.returncode == 0, undisturbed.stderr
    assert dump_lineage(store) == dump_lineage(tmp_path / "runs" / "undisturbed")
    run = sz.open_run(store)
    np.testing.assert_array_equal(np.asarray(run.output("b")), np.full((256, 256), 2.0))

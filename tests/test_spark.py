"""The Spark executor: same lineage as in-process, retried tasks, errors, a loopback cluster."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import subzero as sz
from subzero import operators as ops
from subzero.store import FileStore


def build(flaky_marker: str | None = None, kill: bool = False) -> sz.Workflow:
    wf = sz.Workflow("sp")
    x = wf.input("x")
    y = wf.input("y")
    blur = wf.add(ops.Convolve(np.ones((3, 3)), mode="reflect"), x, name="blur")
    crd = wf.add(ops.CosmicRayDetect(threshold=50.0, radius=1), x, name="crd")
    add = FlakyAdd(flaky_marker, kill) if flaky_marker else ops.Add()
    wf.add(add, blur, y, name="sum")
    wf.add(ops.MatMul(), crd, y, name="mm")
    return wf


class FlakyAdd(ops.Add):
    """Add with explicit FULL lineage whose first attempt of its first tile fails: raises, or
    (``kill``) ends its Python worker at once, as a killed executor would."""

    def __init__(self, marker: str, kill: bool = False):
        self.marker, self.kill = marker, kill

    def supported_modes(self):
        return {sz.Mode.MAP, sz.Mode.FULL}

    def run(self, ctx, x, y):
        cells = np.argwhere(np.ones(np.broadcast_shapes(x.shape, y.shape), bool))
        if sz.Mode.FULL in ctx.modes:
            n = np.arange(len(cells))
            ctx.lwrite_many(cells, cells, cells, out_pair=n, in_pair=[n, n])
        if ctx.tile_box[0][0] == 0 and ctx.tile_box[1][0] == 0 and not os.path.exists(self.marker):
            Path(self.marker).write_text("failed once")
            if self.kill:
                os._exit(1)
            raise RuntimeError("injected failure on the first attempt")
        return np.add(x, y)


PINS = {"blur": ["FullOne", "FullMany/forward"], "crd": ["CompOne", "PayMany", "FullOne/forward"],
        "sum": ["FullOne", "FullMany"], "mm": "Map"}


def inputs():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(10, 10)) * 5
    x[4, 4] = 300.0
    return {"x": x, "y": rng.normal(size=(10, 10))}


def dump_lineage(path: Path) -> dict:
    """Every committed lineage entry of a store, by (node, strategy, tile): shard names differ
    between runs (they name the task attempt), their contents must not (a tile's entries in a
    shard its stage's tiles share are those under its key prefix, the prefix dropped)."""
    import lmdb

    if "://" in str(path):  # an object store: a local copy of it first
        import tempfile

        from subzero.store.location import resolve

        location, local = resolve(str(path)), Path(tempfile.mkdtemp(prefix="subzero-dump-"))
        for remote in location.fs.find(location.root):
            target = local / remote[len(location.root):].lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            location.fs.get_file(remote, str(target))
        path = local
    from subzero.store.shards import close_all

    close_all()  # LMDB refuses a second open of a file in one process: queries may hold these shards open
    store = FileStore.open(path)
    out = {}
    for node in store.read_catalog().nodes.values():
        if node.kind != "operator" or not node.stats.bytes:
            continue
        manifest = store.read_manifest(node.name)
        for strategy, records in manifest.shards.items():
            for rec in records:
                if rec.name is None:
                    out[(node.name, strategy, rec.tile)] = None
                    continue
                mdb = os.path.join(path, store.shard_directory(node.name, strategy), rec.name + ".mdb")
                env = lmdb.open(mdb, subdir=False, readonly=True, lock=False)
                with env.begin() as txn:
                    entries = list(txn.cursor())
                env.close()
                if rec.file_share is not None:  # a shard shared by a local stage's tiles: this tile's entries
                    head = int(rec.tile).to_bytes(4, "big")
                    entries = [(k[len(head):], v) for k, v in entries if k.startswith(head)]
                out[(node.name, strategy, rec.tile)] = entries
    return out


def test_spark_records_exactly_the_lineage_of_the_local_executor(spark, tmp_path):
    on_spark = build().run(inputs(), store=tmp_path / "spark", strategies=PINS, spark=spark, tile_shape=4)
    local = build().run(inputs(), store=tmp_path / "local", strategies=PINS, executor="local", tile_shape=4).wait()
    assert on_spark.catalog.executor == "spark" and on_spark.catalog.nodes["blur"].stats.tiles == 9
    lineage = dump_lineage(tmp_path / "spark")
    assert lineage == dump_lineage(tmp_path / "local") and len(lineage) == 9 * (2 + 3 + 2)
    for node in ("blur", "crd", "sum", "mm"):
        np.testing.assert_array_equal(on_spark.output(node), local.output(node))
    np.testing.assert_array_equal(on_spark.backward("sum", [(4, 4)], to="x"),
                                  local.backward("sum", [(4, 4)], to="x"))


def test_a_task_runs_several_tiles_once_there_are_more_tiles_than_slots(spark):
    from subzero import config
    from subzero.executors.spark import _slices

    sc = spark.sparkContext
    slots = config.get("tasks_per_core") * sc.defaultParallelism
    assert _slices(sc, 3) == min(3, slots) and _slices(sc, 10 * slots) == slots and _slices(sc, 0) == 1
    # 9 tiles in the runs below: on 2 cores, 8 tasks, one of which runs two tiles (and is retried whole)


@pytest.mark.parametrize("kill", [False, True], ids=["raised", "killed"])
def test_a_retried_task_neither_duplicates_nor_loses_lineage(spark, tmp_path, kill):
    marker = tmp_path / "marker"
    run = build(str(marker), kill).run(inputs(), store=tmp_path / "flaky", strategies=PINS, spark=spark, tile_shape=4)
    assert marker.read_text() == "failed once"  # the first attempt really failed
    (tmp_path / "already-failed").write_text("so the reference run never fails")
    build(str(tmp_path / "already-failed")).run(inputs(), store=tmp_path / "clean", strategies=PINS,
                                                executor="local", tile_shape=4).wait()  # its files as written
    assert dump_lineage(tmp_path / "flaky") == dump_lineage(tmp_path / "clean")
    pairs = run.catalog.nodes["sum"].stats.pairs["FullOne/backward"]
    assert pairs == (100, 100, 200)  # one pair per cell, each reading x and y once
    manifest = FileStore.open(tmp_path / "flaky").read_manifest("sum")
    assert [r.tile for r in manifest.shards["FullOne/backward"]] == list(range(9))  # one attempt per tile
    committed = {r.name for recs in manifest.shards.values() for r in recs}
    on_disk = {p.name.split(".")[0] for p in (tmp_path / "flaky" / "lineage" / "sum").rglob("*.mdb")}
    assert on_disk == committed  # the failed attempt's shards are gone


class Broken(ops.Add):
    def run(self, ctx, x, y):
        raise ValueError("the instrument file is unreadable")


def test_an_operator_error_on_spark_is_one_clear_workflow_error(spark, tmp_path):
    wf = sz.Workflow("broken")
    x = wf.input("x")
    wf.add(Broken(), x, x, name="bad")
    with pytest.raises(sz.WorkflowError, match="node 'bad' failed on Spark: .*instrument file is unreadable"):
        wf.run({"x": np.ones((4, 4))}, store=tmp_path / "b", spark=spark)
    catalog = json.loads((tmp_path / "b" / "catalog.json").read_text())
    assert catalog["status"] == "failed" and "bad" not in catalog["nodes"]
    with pytest.raises(sz.StoreError, match="did not finish"):
        sz.open_run(tmp_path / "b")


class Halve(ops.ElementwiseOperator):
    """A user's elementwise operator, pickled by value into the Spark workers."""

    fn = staticmethod(lambda x: x / 2)


def test_fused_nodes_on_spark_store_what_the_local_executor_stores(spark, tmp_path):
    """Subtract -> convolve -> a user's operator -> threshold run as one Spark stage: the same
    arrays (bytes and metadata) and lineage answers as the local executor's; an error in a
    member names the fused nodes and the operator's own error."""
    wf = sz.Workflow("fused")
    x, y = wf.input("x"), wf.input("y")
    sub = wf.add(ops.Subtract(), x, y, name="sub")
    blur = wf.add(ops.Convolve(np.ones((3, 3)) / 9.0), sub, name="blur")
    half = wf.add(Halve(), blur, name="half")
    wf.add(ops.Threshold(0.2), half, name="mask")
    runs = {ex: wf.run(inputs(), store=tmp_path / ex, spark=spark, executor=ex, tile_shape=(4, 3))
            for ex in ("spark", "local")}
    assert runs["spark"].catalog.executor == "spark"
    for node in ("sub", "blur", "half", "mask"):
        assert runs["spark"].array(node).layout() == runs["local"].array(node).layout()
        np.testing.assert_array_equal(runs["spark"].output(node), runs["local"].output(node))
    assert runs["spark"].backward("mask", [(4, 4)], to="x").tolist() == \
        runs["local"].backward("mask", [(4, 4)], to="x").tolist() == [[3, 3], [3, 4], [3, 5], [4, 3], [4, 4],
                                                                      [4, 5], [5, 3], [5, 4], [5, 5]]
    bad = sz.Workflow("fused-bad")
    a = bad.input("x")
    bad.add(Broken(), bad.add(ops.Threshold(0.2), a, name="mask"), a, name="bad")
    with pytest.raises(sz.WorkflowError, match="node 'mask\\+bad' failed on Spark: .*instrument file is unreadable"):
        bad.run({"x": np.ones((40, 40))}, store=tmp_path / "b", spark=spark)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


ROOT = Path(__file__).resolve().parents[1]


def _env(**extra) -> dict:
    """The environment of a command a user types: no spark-submit session around, subzero importable."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_SUBMIT_ARGS", "PYSPARK_GATEWAY_PORT",
                                                             "PYSPARK_GATEWAY_SECRET")}
    # these commands are about Spark: their small inputs must not run in-process instead
    env.update(PYTHONPATH=str(ROOT), PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1",
               SUBZERO_IN_PROCESS_BYTES="0", **extra)
    return env


def _one_line(done, fragment: str) -> None:
    lines = [line for line in done.stderr.splitlines() if "incubator modules" not in line]  # the JVM's own
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("subzero: error: "), done.stderr
    assert fragment in lines[0], lines[0]


def test_a_master_that_cannot_be_reached_fails_in_one_line_within_30_s(tmp_path):
    port = _free_port()  # nothing listens there
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "subzero", "run", "demo", "--quick", "--store", str(tmp_path / "s"),
                           "--master", f"spark://127.0.0.1:{port}"], capture_output=True, text=True, env=_env(),
                          timeout=60)
    assert time.monotonic() - start < 30
    _one_line(done, f"Spark master spark://127.0.0.1:{port} cannot be reached")
    assert "check that the master runs" in done.stderr and not (tmp_path / "s").exists()


def test_a_port_that_is_no_spark_master_fails_in_one_line(tmp_path):
    """Something answers on the port, but it is not a Spark master: refused, not waited for (its silence
    for spark_probe_timeout, 1 s here instead of the default 5, says so)."""
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    held = []
    stop = threading.Event()

    def accept():
        server.settimeout(0.5)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])  # accept and say nothing
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        start = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "subzero", "run", "demo", "--quick", "--store",
                               str(tmp_path / "s"), "--master", f"spark://127.0.0.1:{port}"],
                              capture_output=True, text=True, env=_env(SUBZERO_SPARK_PROBE_TIMEOUT="1"), timeout=120)
        elapsed = time.monotonic() - start
    finally:
        stop.set()
        thread.join(2)
        for conn in held:
            conn.close()
        server.close()
    _one_line(done, f"Spark master spark://127.0.0.1:{port} answers but is no Spark master (silent")
    assert elapsed < 30 and not (tmp_path / "s").exists()  # refused before a JVM starts


def test_a_web_server_given_as_the_master_fails_in_one_line(tmp_path):
    """The master's web UI port (8080) given for its RPC port (7077): said so, at once."""
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        done = subprocess.run([sys.executable, "-m", "subzero", "run", "demo", "--quick", "--store",
                               str(tmp_path / "s"), "--master", f"spark://127.0.0.1:{server.server_address[1]}"],
                              capture_output=True, text=True, env=_env(), timeout=120, cwd=tmp_path)
    finally:
        server.shutdown()
        server.server_close()
    _one_line(done, f"127.0.0.1:{server.server_address[1]} answers HTTP: it is a web server")
    assert "spark://host:7077" in done.stderr and not (tmp_path / "s").exists()


def test_python_error_of_a_worker_traceback():
    from pyspark.errors import PythonException

    from subzero.executors.spark import _python_error

    trace = ("An exception was thrown from the Python worker:\nTraceback (most recent call last):\n"
             '  File "/x/worker.py", line 12, in run\n    raise KeyError("ccd 3")\nKeyError: \'ccd 3\'')
    assert _python_error(PythonException(message=trace)) == "KeyError: 'ccd 3'"
    marked = trace + "\nRuntimeError: subzero-task-error: ValueError: bad pixel at 3,4"
    assert _python_error(PythonException(message=marked)) == "ValueError: bad pixel at 3,4"
    lost = RuntimeError("Job aborted: executor lost\n\tat org.apache.spark.Foo")
    assert _python_error(lost) == "Job aborted: executor lost"


SLOW_FLOW = """
import time

import numpy as np
import subzero as sz
from subzero import operators as ops
from subzero.tiling import Elementwise


class Slow(sz.Operator):
    tiling = Elementwise()

    def supported_modes(self):
        return {sz.Mode.MAP}

    def infer_output_shape(self, input_shapes):
        return input_shapes[0]

    def run(self, ctx, x):
        time.sleep(0.1)
        return x + 1

    def map_b(self, cells, i):
        return cells

    def map_f(self, cells, i):
        return cells


def build(inputs):
    wf = sz.Workflow("slow")
    a = wf.add(ops.AddScalar(1.0), wf.input("x"), name="a")
    wf.add(Slow(), a, name="b")
    return wf, {"x": np.zeros((256, 256))}
"""


def _processes_marked(mark: str) -> list[int]:
    """Pids of processes whose environment carries ``mark`` (the JVM and workers of one run)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if mark.encode() in f.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


@pytest.mark.slow  # two Spark runs in new processes, one interrupted: about 40 s
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds the run's processes through /proc")
def test_ctrl_c_is_one_line_leaves_no_jvm_and_resume_continues(tmp_path):
    """Ctrl-C during a Spark run, in a directory holding profile.py and types.py (which
    Spark's Python workers would import instead of the standard modules): one line naming
    what was committed and --resume, exit 130, no py4j traceback, no JVM left; --resume
    then finishes the run exactly."""
    import re
    import signal
    import uuid

    from subzero.tools.info import info_data

    (tmp_path / "slow.py").write_text(SLOW_FLOW)
    for name in ("profile", "types"):
        (tmp_path / f"{name}.py").write_text("raise SystemExit('the working directory shadowed a module')\n")
    mark = f"SUBZERO_TEST_RUN={uuid.uuid4().hex}"
    # one stage per node (not a and b fused into one), so b's tasks run after a is committed
    env = _env(SUBZERO_TEST_RUN=mark.split("=", 1)[1], SUBZERO_FUSE="0")
    command = [sys.executable, "-m", "subzero", "run", "slow.py", "--store", "s", "--tile", "32"]
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if "a" in info_data(tmp_path / "s")["committed"]:
                    break
            except Exception:  # no store or catalog yet
                pass
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()
        time.sleep(1.0)  # node b's tasks are running
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert err.splitlines() == [f"subzero: interrupted; 2 of 3 nodes committed in s (x, a); run the same command "
                                "with --resume to continue"], err
    deadline = time.monotonic() + 20
    while _processes_marked(mark) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _processes_marked(mark), "a JVM or Python worker outlived the interrupted run"
    # resumed with -v and a Spark setting: the setting reaches the session, Spark's start-up is a
    # line of its own, and -v shows the JVM's own output (kept in the driver log otherwise)
    done = subprocess.run(command + ["--resume", "-v", "--conf", "spark.subzero.probe=42"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "subzero: Spark setting spark.subzero.probe=42" in done.stderr, done.stderr
    assert re.search(r"subzero: Spark session local\[\*, 4\] ready in [\d.]+ s", done.stderr), done.stderr
    assert "Using incubator modules" in done.stderr and "Using incubator modules" not in err
    run = sz.open_run(tmp_path / "s")
    np.testing.assert_array_equal(np.asarray(run.output("b")), np.full((256, 256), 2.0))


def test_the_embedded_session_listens_on_loopback_only(spark):
    """Driver and block manager bound to 127.0.0.1 (unless SPARK_LOCAL_IP says otherwise), no web UI."""
    psutil = pytest.importorskip("psutil")
    from pyspark import SparkContext

    conf = spark.sparkContext.getConf()
    assert conf.get("spark.ui.enabled") == "false"
    if os.environ.get("SPARK_LOCAL_IP"):
        pytest.skip("SPARK_LOCAL_IP chooses the interface")
    assert conf.get("spark.driver.bindAddress") == "127.0.0.1" and conf.get("spark.driver.host") == "127.0.0.1"
    jvm = psutil.Process(SparkContext._gateway.proc.pid)
    listening = [c.laddr.ip for c in jvm.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN]
    assert listening and all(ip in ("127.0.0.1", "::ffff:127.0.0.1", "::1") for ip in listening), listening


def test_the_class_data_sharing_archive_is_dumped_once_then_mapped(tmp_path, monkeypatch):
    from subzero.executors import spark as spark_mod

    monkeypatch.setenv("SUBZERO_CACHE", str(tmp_path))
    first = spark_mod._class_data_sharing()
    assert first.startswith("-XX:ArchiveClassesAtExit=") and first.endswith(f".{os.getpid()}.dump")
    dump = Path(first.split("=", 1)[1])
    assert spark_mod._class_data_sharing() == ""  # being made (its driver alive): nobody else dumps
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    finished = dump.with_name(dump.name.replace(f".{os.getpid()}.", f".{gone.pid}."))
    finished.write_bytes(b"archive")
    os.utime(finished, (time.time() - 120, time.time() - 120))
    got = spark_mod._class_data_sharing()
    final = str(dump).rsplit(".", 2)[0]
    assert got == f"-XX:SharedArchiveFile={final}" and Path(final).read_bytes() == b"archive"
    monkeypatch.setenv("SUBZERO_SPARK_CDS", "0")
    assert spark_mod._class_data_sharing() == ""


def test_warm_up_imports_the_task_code_in_a_background_job(spark):
    """The warm-up returns at once; its job (one task per core) imports the task code in the
    Python workers and succeeds, and a node's job after it runs as usual."""
    from subzero.executors.spark import SparkExecutor

    executor = SparkExecutor(spark)
    started = time.perf_counter()
    executor.warm_up()
    assert time.perf_counter() - started < 1.0
    tracker, group = spark.sparkContext.statusTracker(), f"subzero-warm-up-{id(executor)}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        jobs = [tracker.getJobInfo(j) for j in tracker.getJobIdsForGroup(group)]
        if jobs and all(j is not None and j.status == "SUCCEEDED" for j in jobs):
            break
        time.sleep(0.1)
    assert jobs and jobs[0].status == "SUCCEEDED"
    import operator

    from subzero.executors.tasks import map_items

    assert map_items(executor, operator.mul, 2, [1, 2, 3], "doubling") == [2, 4, 6]

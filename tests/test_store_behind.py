"""Write-behind persistence (`subzero.store.behind`): a local run returns once computed and a
background thread writes its store in commit order.  The same store and the same answers as a
run written in the caller's thread; a crash part way leaves a store that is resumed as after a
crash mid-run; a failed write is reported, never hidden."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import subzero as sz
from subzero import operators as ops
from subzero.store.behind import AfterWrites, BehindStore, WriteBehind, wait_for_writes
from subzero.store.file_store import FileStore

ROOT = Path(__file__).resolve().parents[1]


def workflow() -> sz.Workflow:
    wf = sz.Workflow("behind")
    x = wf.input("x")
    crd = wf.add(ops.CosmicRayDetect(threshold=30.0, radius=1), x, name="crd")
    blur = wf.add(ops.Convolve(np.ones((3, 3)), mode="constant"), x, name="blur")
    wf.add(ops.Multiply(), crd, blur, name="hits")
    return wf


@sz.workflow
def traced(a, b):
    d = (a - b) / (a + b + 1.0)
    return np.where(d > 0, d * 2.0, np.abs(d))


def image(n: int = 300, seed: int = 5) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(n, n))
    x[3, 3] = x[n * 2 // 3, n // 2] = 200.0
    return x


PINS = {"crd": ("PayOne", "FullRange"), "hits": ("FullMany", "FullOne/forward")}
CELLS = [(3, 3), (200, 150), (0, 0), (299, 120)]


def run_it(wf, inputs, store, behind: bool, **kw):
    with sz.config.set(write_behind=behind, commit_seconds=0.0):
        return wf.run(inputs, store=store, executor="local", **kw)


def answers(run, wf) -> dict:
    """Every node's values and each node's backward and forward lineage of ``CELLS`` to and from the inputs."""
    got: dict = {}
    inputs = [n.name for n in wf.inputs]
    for node in run.workflow.nodes:
        got[node.name] = np.asarray(run.output(node.name))
        if node.is_input:
            continue
        cells = [c for c in CELLS if all(i < n for i, n in zip(c, run.shape(node.name)))]
        for src in inputs:
            got[(node.name, src, "b")] = run.backward(node.name, cells, to=src)
            got[(node.name, src, "f")] = run.forward(src, cells, to=node.name)
    return got


def assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=str(k))


def array_files(store: Path) -> dict[str, bytes]:
    return {str(p.relative_to(store)): p.read_bytes() for p in sorted((store / "arrays").rglob("*")) if p.is_file()}


def records(run) -> dict:
    return {n: (r.array, r.strategies, r.kind) for n, r in run.catalog.nodes.items()}


@pytest.mark.parametrize("keep", ["needed", "all"])
def test_the_same_store_and_answers_as_writing_in_the_callers_thread(tmp_path, keep):
    wf, inputs = workflow(), {"x": image()}
    direct = run_it(wf, inputs, tmp_path / "direct", False, strategies=PINS, keep=keep)
    behind = run_it(wf, inputs, tmp_path / "behind", True, strategies=PINS, keep=keep)
    assert isinstance(behind.store, AfterWrites) and not isinstance(direct.store, AfterWrites)
    assert behind.wait() is behind
    assert records(behind) == records(direct)
    assert array_files(tmp_path / "behind") == array_files(tmp_path / "direct")  # chunk for chunk, zarr.json too
    assert_same(answers(behind, wf), answers(direct, wf))
    reopened = sz.open_run(tmp_path / "behind")
    assert reopened.catalog.status == "done" and records(reopened) == records(direct)
    assert_same(answers(reopened, wf), answers(direct, wf))


def test_a_traced_function_fused_and_held_in_memory(tmp_path):
    rng = np.random.default_rng(1)
    inputs = {"a": rng.random((257, 300)), "b": rng.random((257, 300))}
    wf = traced.trace(inputs)
    direct = run_it(wf, inputs, tmp_path / "direct", False)
    behind = run_it(wf, inputs, tmp_path / "behind", True)
    np.testing.assert_array_equal(np.asarray(behind.output(wf.results[0])), traced.fn(**inputs))
    assert records(behind) == records(direct)
    assert array_files(tmp_path / "behind") == array_files(tmp_path / "direct")
    assert_same(answers(behind, wf), answers(direct, wf))


def test_operators_are_pickled_behind_the_run_as_the_callers_thread_stores_them(tmp_path, monkeypatch):
    from subzero import stage

    threads = []
    dump = stage.dump_operator
    monkeypatch.setattr(stage, "dump_operator", lambda op, node: threads.append(threading.get_ident()) or dump(op, node))
    wf, inputs = workflow(), {"x": image()}
    direct = run_it(wf, inputs, tmp_path / "direct", False, strategies=PINS)
    assert set(threads) == {threading.get_ident()}
    threads.clear()
    behind = run_it(wf, inputs, tmp_path / "behind", True, strategies=PINS).wait()
    assert len(threads) == 3 and threading.get_ident() not in threads  # subzero's operators: pickled by the writer

    def operator_files(store: Path) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted((store / "operators").iterdir())}

    assert operator_files(tmp_path / "behind") == operator_files(tmp_path / "direct")
    assert_same(answers(sz.open_run(tmp_path / "behind"), wf), answers(direct, wf))
    assert_same(answers(behind, wf), answers(direct, wf))


def test_the_callers_array_may_change_once_run_returns(tmp_path):
    wf, x = workflow(), image(64)
    kept = x.copy()
    run = run_it(wf, {"x": x}, tmp_path / "s", True)
    x[:] = -1.0  # before the writer has stored it, perhaps
    np.testing.assert_array_equal(np.asarray(run.wait().output("x")), kept)
    resumed = run_it(wf, {"x": kept}, tmp_path / "s", True, resume=True)  # the fingerprint is of the values run
    assert resumed.catalog.status == "done"


def test_a_kept_view_of_the_callers_array_is_stored_as_it_was_given(tmp_path):
    """The run reads the caller's input while its copy is made beside it: an output that is a
    view of that input (a transpose) is stored from a copy too, as it was when run returned."""
    wf = sz.Workflow("view")
    x_node = wf.input("x")
    wf.add(ops.Transpose(), x_node, name="t")
    wf.add(ops.Multiply(), x_node, x_node, name="sq")
    x = image(96)
    kept = x.copy()
    run = run_it(wf, {"x": x}, tmp_path / "s", True, strategies={"t": ("Map",), "sq": ("Map",)})
    x[:] = -1.0
    reopened = sz.open_run(tmp_path / "s")
    for got in (run.wait(), reopened):
        np.testing.assert_array_equal(np.asarray(got.output("t")), kept.T)
        np.testing.assert_array_equal(np.asarray(got.output("sq")), kept * kept)
        np.testing.assert_array_equal(np.asarray(got.output("x")), kept)
    assert x.flags.writeable  # the caller's array is left as it was


def test_a_traced_runs_input_copies_start_before_its_trace_and_are_stored(tmp_path, monkeypatch):
    """A traced function's local run starts copying its inputs before it traces (a thread copies
    while the trace runs); the run stores those copies, made once per input."""
    from subzero import fingerprint

    made = []
    start = fingerprint.CopyBeside.__init__
    monkeypatch.setattr(fingerprint.CopyBeside, "__init__", lambda self, value, chunks: made.append(id(value)) or
                        start(self, value, chunks))
    rng = np.random.default_rng(2)
    inputs = {"a": rng.random((120, 90)), "b": rng.random((120, 90))}
    kept = {k: v.copy() for k, v in inputs.items()}
    run = run_it(traced, inputs, tmp_path / "s", True)
    for value in inputs.values():
        value[:] = 0.0
    assert sorted(made) == sorted(id(v) for v in inputs.values())
    np.testing.assert_array_equal(np.asarray(run.wait().output(traced.trace(kept).results[0])), traced.fn(**kept))
    for name, value in kept.items():
        np.testing.assert_array_equal(np.asarray(sz.open_run(tmp_path / "s").output(name)), value)


def test_a_new_run_into_the_store_waits_for_the_writes_behind_the_last(tmp_path):
    wf = workflow()
    first = run_it(wf, {"x": image()}, tmp_path / "s", True)
    second = run_it(wf, {"x": image(seed=6)}, tmp_path / "s", True, overwrite=True)  # the lock is ours again
    np.testing.assert_array_equal(np.asarray(second.output("x")), image(seed=6))
    assert first.store.behind.pending == 0  # the second waited for the first's writes before taking the store
    assert sz.open_run(tmp_path / "s").catalog.status == "done"


def test_writes_run_in_order_with_bounded_memory():
    w = WriteBehind("test-order", limit=100)
    gate, done = threading.Event(), []
    w.submit(gate.wait, nbytes=80)
    started = time.perf_counter()
    blocked = threading.Thread(target=lambda: w.submit(done.append, 2, nbytes=80))
    blocked.start()
    blocked.join(0.2)
    assert blocked.is_alive()  # 160 bytes would be queued: the caller waits
    gate.set()
    blocked.join(5)
    w.submit(done.append, 3)
    w.finish()
    w.wait()
    assert done == [2, 3] and w.pending == 0 and time.perf_counter() - started >= 0.2
    with pytest.raises(sz.StoreError, match="finished"):
        w.submit(done.append, 4)


def test_writes_wait_while_the_run_computes_until_waited_for_full_or_finished():
    """With ``hold``, a queued write leaves the cores to the run until it is that old, someone
    waits for the writes, the queue is full, or the run finished: none waits longer than needed."""
    w, done = WriteBehind("test-hold", limit=100, hold=60.0), []
    w.submit(done.append, 1)
    time.sleep(0.1)
    assert done == []  # held back: the run computes
    w.settle()  # a reader waits for the writes: they run now
    assert done == [1]
    w.submit(done.append, 2, nbytes=80)
    w.submit(done.append, 3, nbytes=80)  # 160 bytes would be queued: the held write runs, this one queues
    assert done == [1, 2]
    w.finish()  # the run is over: the rest is written at once
    w.wait()
    assert done == [1, 2, 3]
    aged = WriteBehind("test-hold-age", limit=100, hold=0.05)
    queued = time.monotonic()
    aged.submit(done.append, 4)
    while done[-1] != 4 and time.monotonic() - queued < 5:
        time.sleep(0.005)
    assert done[-1] == 4 and time.monotonic() - queued >= 0.05  # the longest a write waits
    aged.finish()
    aged.wait()


def test_a_failed_write_stops_the_writes_and_is_reported(tmp_path, monkeypatch):
    calls = []

    def full(self, manifest):
        calls.append(manifest.node)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(FileStore, "write_manifest", full)
    run = run_it(workflow(), {"x": image(64)}, tmp_path / "s", True, strategies=PINS)  # computing succeeds
    with pytest.raises(sz.StoreError, match="failed .*No space left.*resume the run") as exc:
        run.wait()
    assert isinstance(exc.value.__cause__, OSError)
    with pytest.raises(sz.StoreError):  # a query says so too
        run.backward("hits", [(3, 3)], to="x")
    assert calls == ["crd"]  # the first failure stopped every later write, but the lock was released
    with pytest.raises(sz.StoreError, match="did not finish"):
        sz.open_run(tmp_path / "s")
    monkeypatch.undo()
    resumed = run_it(workflow(), {"x": image(64)}, tmp_path / "s", True, strategies=PINS, resume=True)
    reference = run_it(workflow(), {"x": image(64)}, tmp_path / "ref", False, strategies=PINS)
    assert_same(answers(resumed, workflow()), answers(reference, workflow()))


CHILD = textwrap.dedent('''
    import os, signal, sys
    import numpy as np
    import subzero as sz
    from subzero.store.file_store import FileStore
    sys.path.insert(0, {tests!r})
    from test_store_behind import PINS, image, workflow

    writes = [0]
    original = FileStore.write_catalog

    def write_catalog(self, record):  # on the writer's thread: the process dies mid-write
        writes[0] += 1
        if writes[0] == {kill_at}:
            os.kill(os.getpid(), signal.SIGKILL)
        original(self, record)

    FileStore.write_catalog = write_catalog
    with sz.config.set(write_behind=True, commit_seconds=0.0):
        run = workflow().run({{"x": image()}}, store=sys.argv[1], executor="local", strategies=PINS)
    print("returned", flush=True)
    {after}
''')


def child(store: Path, kill_at: int, after: str = "") -> subprocess.CompletedProcess:
    script = CHILD.format(tests=str(ROOT / "tests"), kill_at=kill_at, after=after)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "SUBZERO_WRITE_BEHIND": "1"}
    return subprocess.run([sys.executable, "-c", script, str(store)], capture_output=True, text=True, env=env,
                          timeout=120)


def test_kill_9_while_writing_behind_then_resume_gives_the_same_answers(tmp_path):
    store = tmp_path / "s"
    got = child(store, kill_at=4)  # 1: created, 2: the input, 3: crd, 4: blur, when the writer gets there
    assert got.returncode == -signal.SIGKILL, got.stderr
    with pytest.raises(sz.StoreError, match="did not finish"):
        sz.open_run(store)
    partial = sz.open_run(store, partial=True)
    assert partial.committed == ["x", "crd"]  # committed in order: the nodes whose writes all ran
    resumed = run_it(workflow(), {"x": image()}, store, True, strategies=PINS, resume=True)
    reference = run_it(workflow(), {"x": image()}, tmp_path / "ref", False, strategies=PINS)
    assert records(resumed).keys() == records(reference).keys()
    assert array_files(store) == array_files(tmp_path / "ref")
    assert_same(answers(resumed, workflow()), answers(reference, workflow()))


def test_a_normal_exit_waits_for_the_writes(tmp_path):
    got = child(tmp_path / "s", kill_at=-1)  # never killed; the script ends as soon as the run returned
    assert got.returncode == 0 and "returned" in got.stdout, got.stderr
    run = sz.open_run(tmp_path / "s")
    assert run.catalog.status == "done" and run.writer() is None if hasattr(run, "writer") else True
    reference = run_it(workflow(), {"x": image()}, tmp_path / "ref", False, strategies=PINS)
    assert_same(answers(run, workflow()), answers(reference, workflow()))


def test_writer_threads_are_reused_and_an_exit_does_not_wait_for_idle_ones(tmp_path):
    """Each run's writes run on a writer thread kept idle between runs (a run starts none once
    one is idle); at interpreter exit the idle ones end at once."""
    code = textwrap.dedent(f"""
        import threading, time, numpy as np, subzero as sz
        wf = sz.Workflow("w"); wf.add(sz.operators.Transpose(), wf.input("x"), name="n")
        with sz.config.set(write_behind=True, commit_seconds=0.0):
            for k in range(3):
                wf.run({{"x": np.ones((20, 20))}}, store={str(tmp_path)!r} + f"/s{{k}}", executor="local").wait()
                time.sleep(0.05)  # its thread is idle again
        writers = [t for t in threading.enumerate() if t.name.startswith("subzero-write-behind")]
        print(len(writers), time.monotonic())
    """)
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    ended = time.monotonic()
    assert got.returncode == 0, got.stderr
    writers, printed = got.stdout.split()
    assert int(writers) == 1  # three runs, one thread
    assert ended - float(printed) < 10  # not the idle thread's WRITER_IDLE_SECONDS


def test_spark_and_object_stores_are_written_in_the_callers_thread(tmp_path):
    store = FileStore.create(tmp_path / "s", _record())
    behind = BehindStore(store, 2**20)
    assert behind.url == store.url and behind.location is store.location
    behind.close()
    behind.behind.wait()
    wait_for_writes(store.url)  # nothing left: returns at once
    run = run_it(workflow(), {"x": image(16)}, "memory://behind-test/s", True)
    assert not isinstance(run.store, AfterWrites)  # an fsspec URL: written by the caller


def _record():
    from subzero.catalog import RunRecord

    return RunRecord(workflow={}, created="now", executor="local")


SLOW_CHILD = textwrap.dedent('''
    import os, sys, time
    import subzero as sz
    from subzero.store.file_store import FileStore
    sys.path.insert(0, {tests!r})
    from test_store_behind import PINS, image, workflow

    original = FileStore.write_catalog
    go = sys.argv[1] + "-go"
    written = []

    def write_catalog(self, record):  # a stalled disk, on the writer's thread: after the first
        waited = time.monotonic() + 30  # catalog, each waits for the test's signal (30 s at most)
        while written and not os.path.exists(go) and time.monotonic() < waited:
            time.sleep(0.02)
        written.append(record)
        original(self, record)

    FileStore.write_catalog = write_catalog
    with sz.config.set(write_behind=True, commit_seconds=0.0):
        run = workflow().run({{"x": image()}}, store=sys.argv[1], executor="local", strategies=PINS)
    print("returned", flush=True)
''')


def test_another_process_opening_the_store_waits_for_the_writes_behind(tmp_path):
    """A store another live process still writes behind its run is waited for by `open_run` (for
    at most ``open_wait_seconds``; past that, the refusal names the writer and ``partial=True``)."""
    store = tmp_path / "s"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", SLOW_CHILD.format(tests=str(ROOT / "tests")), str(store)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "returned", proc.stderr
        with sz.config.set(open_wait_seconds=0.0), pytest.raises(sz.StoreError, match=r"still being written by pid"):
            sz.open_run(store)
        (tmp_path / "s-go").touch()  # the writer's disk recovers
        run = sz.open_run(store)  # waits for the writer
        assert run.catalog.status == "done"
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
    reference = run_it(workflow(), {"x": image()}, tmp_path / "ref", False, strategies=PINS)
    assert_same(answers(run, workflow()), answers(reference, workflow()))


def test_a_new_store_is_ours_at_once_and_its_first_catalog_is_written_behind(tmp_path):
    """Written behind, a new store has its lock and marker when `create_run` returns (another
    writer is refused, a kill leaves a store `overwrite` replaces); its directories and first
    catalog are the first writes queued."""
    from subzero.catalog import RunRecord
    from subzero.store import create_run
    from subzero.store.file_store import MARKER

    fs = create_run(tmp_path / "s", RunRecord(workflow={}, created="now", executor="local"), behind=2**20, hold=60.0)
    assert isinstance(fs, BehindStore) and (tmp_path / "s" / ".writer").exists()
    assert {p.name for p in (tmp_path / "s").iterdir()} == {".writer", MARKER}  # nothing else on the caller's thread
    with pytest.raises(sz.StoreError, match="writ"):
        FileStore.create(tmp_path / "s", RunRecord(workflow={}, created="now", executor="local"), overwrite=True)
    fs.behind.settle()
    assert {"arrays", "operators", "manifests", "lineage"} <= {p.name for p in (tmp_path / "s").iterdir()}
    assert fs.read_catalog().status == "running"
    fs.close()
    fs.behind.wait()


def test_inputs_are_digested_beside_the_run_into_every_catalog_written(tmp_path):
    """A held input's digest is computed beside the run (not before its first node), yet the
    returned and the stored catalogs name it: the digest of the values the run was given."""
    from subzero.fingerprint import array_digest
    from subzero.tiling import default_chunks

    wf, x = workflow(), image(64)
    kept = x.copy()
    with sz.config.set(write_behind=True):  # the default commit_seconds: one catalog write at the end
        run = wf.run({"x": x}, store=tmp_path / "s", executor="local")
    x[:] = 0.0
    digest = array_digest(kept, default_chunks(kept.shape))
    assert run.catalog.fingerprint["input:x"] == digest
    assert sz.open_run(tmp_path / "s").catalog.fingerprint["input:x"] == digest


def test_work_producing_writes_is_waited_for_and_its_failure_raised():
    """`WriteBehind.produce`: the rest of a run on a thread of its own, queueing writes; `settle`
    (every read, `wait_for_writes`) waits for it first, except on its own thread, and `wait`
    raises its failure, naming the store."""
    w, done = WriteBehind("test-produce", limit=100), []
    gate = threading.Event()

    def rest():
        gate.wait(5)
        w.submit(done.append, 1)
        w.settle()  # on its own thread: waits for the jobs, not for itself
        w.submit(done.append, 2)
        w.finish()

    w.produce(rest, "test-producer")
    waiter = threading.Thread(target=lambda: wait_for_writes("test-produce"))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive() and done == []  # the run behind has queued nothing yet: waited for
    gate.set()
    waiter.join(5)
    assert not waiter.is_alive() and done == [1, 2]
    w.wait()

    failing = WriteBehind("test-produce-fails", limit=100)

    def fails():
        failing.finish()
        raise sz.WorkflowError("over the disk budget")

    failing.produce(fails, "test-producer-fails")
    with pytest.raises(sz.StoreError, match=r"test-produce-fails.*failed behind its return \(WorkflowError: over the "
                                            r"disk budget\).*resume") as exc:
        failing.wait()
    assert isinstance(exc.value.__cause__, sz.WorkflowError)


TRACED_CHILD = textwrap.dedent('''
    import sys
    import subzero as sz
    sys.path.insert(0, {tests!r})
    from test_store_behind import image, traced

    inputs = {{"a": image(96, 1), "b": image(96, 2)}}
    pins = {{n.name: "FullOne" for n in traced.trace(inputs).nodes if n.name in ("subtract", "out")}}
    run = sz.workflow(traced.fn).run(inputs, store=sys.argv[1], executor="local", tile_shape=(32, 32), strategies=pins)
    print("returned", run._finishing is not None, flush=True)
''')


def test_an_exit_right_after_a_run_continuing_behind_its_return_leaves_its_store_complete(tmp_path):
    """A traced run returns before its lineage is captured (on the executor's threads) and its
    store written; a script ending at once still leaves the store done, with every answer."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    got = subprocess.run([sys.executable, "-c", TRACED_CHILD.format(tests=str(ROOT / "tests")), str(tmp_path / "s")],
                         capture_output=True, text=True, env=env, timeout=120)
    assert got.returncode == 0 and got.stdout.split() == ["returned", "True"], got.stderr
    assert "failed" not in got.stderr, got.stderr
    inputs = {"a": image(96, 1), "b": image(96, 2)}
    wf = traced.trace(inputs)
    pins = {n.name: "FullOne" for n in wf.nodes if n.name in ("subtract", "out")}
    reference = run_it(wf, inputs, tmp_path / "ref", False, tile_shape=(32, 32), strategies=pins)
    stored = sz.open_run(tmp_path / "s")
    assert stored.catalog.status == "done" and records(stored) == records(reference)
    assert stored.strategies == reference.strategies and any(s != ("Map",) for s in stored.strategies.values())
    assert_same(answers(stored, wf), answers(reference, wf))

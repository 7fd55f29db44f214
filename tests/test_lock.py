"""The writer lock: of writers racing for one store (threads or processes) exactly one wins and the
others are told who holds it; a lock left by a killed run is reported as such and taken only with
overwrite; releasing removes it."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from unittest import mock

import pytest

import subzero as sz
from subzero.catalog import RunRecord
from subzero.store import FileStore, resolve
from subzero.store import lock as lock_mod
from subzero.store.lock import LOCK_NAME, WriterLock, holder

HELD = re.compile(r"being written by another run \(pid (\d+) on host (\S+), started (\S+)\)")
STALE = re.compile(r"was being written by pid (-?\d+) on host (\S+), started (\S+), which is no longer running")


def record(name: str = "w") -> RunRecord:
    return RunRecord(workflow={"name": name, "nodes": []}, created="2026-11-23T00:00:00+00:00", executor="local")


def lock_info(root) -> dict:
    with open(os.path.join(root, LOCK_NAME)) as fh:
        return json.load(fh)


def child_env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in [os.getcwd(), os.environ.get("PYTHONPATH")] if p)}


# -- one writer --------------------------------------------------------------------------------------------------

def test_the_lock_names_the_run_and_release_removes_it(tmp_path):
    loc = resolve(tmp_path)
    lock = WriterLock.acquire(loc)
    info = lock_info(tmp_path)
    assert info["pid"] == os.getpid() and info["host"] == socket.gethostname()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", info["started"])
    h = holder(loc)
    assert (h.pid, h.host, h.started, h.alive) == (os.getpid(), socket.gethostname(), info["started"], True)
    lock.release()
    assert not (tmp_path / LOCK_NAME).exists() and holder(loc) is None
    lock.release()  # twice is harmless
    WriterLock.acquire(loc).release()  # and the store can be taken again


def test_a_second_writer_is_refused_with_the_holder_named(tmp_path):
    loc = resolve(tmp_path)
    lock = WriterLock.acquire(loc)
    started = lock_info(tmp_path)["started"]
    for take_stale in (False, True):  # a live lock is never taken, not even by overwrite
        with pytest.raises(sz.StoreError) as err:
            WriterLock.acquire(loc, take_stale=take_stale)
        m = HELD.search(str(err.value))
        assert m and m.groups() == (str(os.getpid()), socket.gethostname(), started)
        assert "wait for it to finish or choose another store" in str(err.value)
    lock.release()


def test_closing_a_store_releases_its_lock(tmp_path):
    store = FileStore.create(tmp_path / "s", record())
    assert (tmp_path / "s" / LOCK_NAME).exists()
    store.close()
    assert not (tmp_path / "s" / LOCK_NAME).exists()
    store.close()
    FileStore.create(tmp_path / "s", record("again"), overwrite=True).close()


# -- racing writers ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("round_", range(8))
def test_threads_racing_to_create_one_store(tmp_path, round_):
    path = tmp_path / "s"
    n = 4
    barrier = threading.Barrier(n)
    results: list = [None] * n

    def create(k):
        barrier.wait()
        try:
            results[k] = FileStore.create(path, record(f"w{k}"))
        except sz.StoreError as exc:
            results[k] = exc

    threads = [threading.Thread(target=create, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    winners = [r for r in results if isinstance(r, FileStore)]
    losers = [r for r in results if isinstance(r, sz.StoreError)]
    assert len(winners) == 1 and len(losers) == n - 1, results
    started = lock_info(path)["started"]
    for exc in losers:
        m = HELD.search(str(exc))
        assert m, str(exc)
        assert m.groups() == (str(os.getpid()), socket.gethostname(), started)
    name = FileStore.open(path).read_catalog().workflow["name"]
    assert name == f"w{results.index(winners[0])}"  # the winner's catalog, untouched by the others
    winners[0].close()


RACER = textwrap.dedent("""
    import os, sys, time
    from subzero.catalog import RunRecord
    from subzero.errors import StoreError
    from subzero.store import FileStore

    work, rounds, me = sys.argv[1], int(sys.argv[2]), sys.argv[3]

    def wait_for(name):
        while not os.path.exists(os.path.join(work, name)):
            time.sleep(0.002)

    for k in range(rounds):
        wait_for(f"go{k}")
        rec = RunRecord(workflow={"name": me, "nodes": []}, created="now", executor="local")
        try:
            store = FileStore.create(os.path.join(work, f"store{k}"), rec)
            result = f"won {os.getpid()}"
        except StoreError as exc:
            store, result = None, f"lost {exc}"
        with open(os.path.join(work, f"result{k}-{me}.tmp"), "w") as fh:  # renamed when written: the test
            fh.write(result)                                                # never reads a half-written result
        os.replace(os.path.join(work, f"result{k}-{me}.tmp"), os.path.join(work, f"result{k}-{me}"))
        wait_for(f"release{k}")  # the winner holds the store until both have answered
        if store is not None:
            store.close()
""")


def test_processes_racing_to_create_one_store(tmp_path):
    rounds, names = 4, ("a", "b")
    procs = [subprocess.Popen([sys.executable, "-c", RACER, str(tmp_path), str(rounds), me], env=child_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for me in names]
    try:
        for k in range(rounds):
            (tmp_path / f"go{k}").touch()
            files = [tmp_path / f"result{k}-{me}" for me in names]
            deadline = time.monotonic() + 90
            while not all(f.exists() for f in files) and time.monotonic() < deadline:
                assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
                time.sleep(0.01)
            results = [f.read_text() for f in files]
            won = [r for r in results if r.startswith("won")]
            lost = [r for r in results if r.startswith("lost")]
            assert len(won) == 1 and len(lost) == 1, results
            winner_pid = won[0].split()[1]
            m = HELD.search(lost[0])
            assert m, lost[0]
            assert m.groups() == (winner_pid, socket.gethostname(), lock_info(tmp_path / f"store{k}")["started"])
            winner = names[results.index(won[0])]
            assert FileStore.open(tmp_path / f"store{k}").read_catalog().workflow["name"] == winner
            (tmp_path / f"release{k}").touch()
        for p in procs:
            assert p.wait(60) == 0, p.communicate()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert not any((tmp_path / f"store{k}" / LOCK_NAME).exists() for k in range(rounds))


def test_a_store_finished_while_a_second_writer_took_the_lock_is_not_clobbered(tmp_path):
    """A creator checks the directory is free, then takes the lock: a run that starts and ends in
    between must not be overwritten by it."""
    path = tmp_path / "s"
    real = WriterLock.acquire.__func__
    calls = []

    def acquire_after_another_run(cls, location, take_stale=False):
        calls.append(location)
        if len(calls) == 1:
            FileStore.create(path, record("first")).close()  # a whole run, between check and lock
        return real(cls, location, take_stale)

    with mock.patch.object(WriterLock, "acquire", classmethod(acquire_after_another_run)):
        with pytest.raises(sz.StoreError, match="already exists and is not empty"):
            FileStore.create(path, record("second"))
    assert FileStore.open(path).read_catalog().workflow["name"] == "first"
    assert not (path / LOCK_NAME).exists()


def test_a_lock_file_being_written_names_its_run(tmp_path):
    """A racing writer can find the lock file created but its contents not yet written; it waits for
    them rather than naming nobody."""
    import fcntl

    loc = resolve(tmp_path)
    path = tmp_path / LOCK_NAME
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)  # what acquire does first...
    fcntl.flock(fd, fcntl.LOCK_EX)
    payload = {"pid": 4242, "host": socket.gethostname(), "started": "2026-11-23T01:02:03+00:00"}
    writer = threading.Timer(0.1, lambda: os.write(fd, json.dumps(payload).encode()))  # ...then the run's name
    writer.start()
    try:
        with pytest.raises(sz.StoreError) as err:
            WriterLock.acquire(loc, take_stale=True)
        m = HELD.search(str(err.value))
        assert m and m.groups() == ("4242", socket.gethostname(), "2026-11-23T01:02:03+00:00"), str(err.value)
    finally:
        writer.join()
        os.close(fd)


# -- stale locks ---------------------------------------------------------------------------------------------------

HOLDER = textwrap.dedent("""
    import sys, time
    from subzero.catalog import RunRecord
    from subzero.store import FileStore

    FileStore.create(sys.argv[1], RunRecord(workflow={"name": "killed", "nodes": []}, created="now",
                                            executor="local"))
    print("holding", flush=True)
    time.sleep(600)
""")


def test_a_killed_writer_leaves_a_stale_lock_taken_only_with_overwrite(tmp_path):
    path = tmp_path / "s"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], env=child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "holding", proc.stderr.read()
        info = lock_info(path)
        assert info["pid"] == proc.pid
        with pytest.raises(sz.StoreError, match=HELD):  # alive: refused, even with overwrite
            FileStore.create(path, record(), overwrite=True)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert (path / LOCK_NAME).exists()  # nobody cleaned up
    h = holder(resolve(path))
    assert (h.pid, h.alive) == (proc.pid, False)
    for attempt in (lambda: FileStore.create(path, record()), lambda: WriterLock.acquire(resolve(path))):
        with pytest.raises(sz.StoreError) as err:
            attempt()
        m = STALE.search(str(err.value))
        assert m and m.groups() == (str(proc.pid), info["host"], info["started"]), str(err.value)
        assert "resume" in str(err.value) and "overwrite" in str(err.value)
    assert FileStore.open(path).read_catalog().workflow["name"] == "killed"  # readers are not blocked
    store = FileStore.create(path, record("new"), overwrite=True)
    assert lock_info(path)["pid"] == os.getpid()
    assert FileStore.open(path).read_catalog().workflow["name"] == "new"
    store.close()
    assert not (path / LOCK_NAME).exists()


@pytest.mark.parametrize("content", [b"", b"{\"pid\": 12", b"[1, 2]"], ids=["empty", "torn", "not-an-object"])
def test_a_lock_file_left_unwritten_by_a_killed_writer_is_stale(tmp_path, monkeypatch, content):
    """A writer killed between creating the lock file and writing it leaves an unreadable lock: it is
    stale (nobody holds it), so overwrite takes it; it must not block the store forever."""
    monkeypatch.setattr(lock_mod, "_WRITE_WAIT", 0.05)  # how long a reader waits for the contents
    FileStore.create(tmp_path / "s", record("old")).close()
    (tmp_path / "s" / LOCK_NAME).write_bytes(content)
    loc = resolve(tmp_path / "s")
    assert holder(loc).alive is False
    with pytest.raises(sz.StoreError, match="no longer running"):
        FileStore.create(tmp_path / "s", record())
    FileStore.create(tmp_path / "s", record("new"), overwrite=True).close()
    assert FileStore.open(tmp_path / "s").read_catalog().workflow["name"] == "new"


def test_a_lock_of_a_dead_pid_without_a_lock_file_handle_is_stale(tmp_path):
    """A lock file nobody holds (copied, or its holder gone) with a pid that no longer runs."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": proc.pid, "host": socket.gethostname(),
                                                  "started": "2026-11-23T00:00:00+00:00"}))
    loc = resolve(tmp_path)
    assert holder(loc).alive is False
    with pytest.raises(sz.StoreError, match=STALE):
        WriterLock.acquire(loc)
    WriterLock.acquire(loc, take_stale=True).release()
    assert not (tmp_path / LOCK_NAME).exists()


# -- remote stores -------------------------------------------------------------------------------------------------

def test_a_remote_store_lock_names_its_holder(tmp_path):
    loc = resolve(f"memory://test-lock-{os.getpid()}/run")
    try:
        lock = WriterLock.acquire(loc)
        h = holder(loc)
        assert (h.pid, h.host, h.alive) == (os.getpid(), socket.gethostname(), True)  # this machine: pid checked
        with pytest.raises(sz.StoreError, match=HELD):
            WriterLock.acquire(loc)
        with pytest.raises(sz.StoreError, match=HELD):
            WriterLock.acquire(loc, take_stale=True)  # a live run's lock is never taken
        lock.release()
        assert holder(loc) is None and not loc.exists(LOCK_NAME)
    finally:
        loc.remove()


def test_a_remote_lock_from_another_machine_is_never_taken(tmp_path):
    """On an object store there is no lock to test: a holder on another host may live, so
    resume and overwrite refuse and say how to clear a lock the user knows is stale."""
    loc = resolve(f"memory://test-lock-far-{os.getpid()}/run")
    try:
        loc.write_bytes(json.dumps({"pid": 1, "host": "far-away", "started": "then"}).encode(), LOCK_NAME)
        assert holder(loc).alive is None
        with pytest.raises(sz.StoreError, match=r"cannot tell from here .* delete .*\.writer"):
            WriterLock.acquire(loc, take_stale=True)
    finally:
        loc.remove()


def _far_lock(loc, lease_until: float, token: str = "theirs") -> None:
    loc.write_bytes(json.dumps({"pid": 1, "host": "far-away", "started": "then", "token": token,
                                "lease_until": lease_until}).encode(), LOCK_NAME)


def test_a_remote_lock_with_a_running_lease_is_live_and_a_lapsed_one_is_taken_over():
    """A lease tells from anywhere: running, the holder lives (refused, saying until when);
    lapsed, resume and overwrite take the lock over (a plain run is told to use them)."""
    loc = resolve(f"memory://test-lock-lease-{os.getpid()}/run")
    try:
        _far_lock(loc, time.time() + 600)
        assert holder(loc).alive is True
        with pytest.raises(sz.StoreError, match=r"being written by another run .*; its lease runs until .* UTC"):
            WriterLock.acquire(loc, take_stale=True)
        _far_lock(loc, time.time() - 1)
        assert holder(loc).alive is False
        with pytest.raises(sz.StoreError, match=r"no longer running \(its lease lapsed at .* UTC\); continue it "
                                                r"with resume \(--resume\)"):
            WriterLock.acquire(loc)
        lock = WriterLock.acquire(loc, take_stale=True)
        now = holder(loc)
        assert (now.pid, now.token, now.alive) == (os.getpid(), lock.token, True)
        assert lock.lease_until is not None and lock.lease_until > time.time() + 30
        lock.release()
        assert holder(loc) is None
    finally:
        loc.remove()


def test_two_writers_racing_for_a_lapsed_lock_never_both_take_it():
    loc = resolve(f"memory://test-lock-race-{os.getpid()}/run")
    try:
        for _ in range(3):
            _far_lock(loc, time.time() - 1)
            won: list[WriterLock] = []
            lost: list[BaseException] = []
            go = threading.Barrier(2)

            def take() -> None:
                go.wait()
                try:
                    won.append(WriterLock.acquire(loc, take_stale=True))
                except sz.StoreError as exc:
                    lost.append(exc)

            threads = [threading.Thread(target=take) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            assert len(won) == 1 and len(lost) == 1, (won, lost)
            assert holder(loc).token == won[0].token and "being written by another run" in str(lost[0])
            won[0].release()
    finally:
        loc.remove()


def test_a_lock_file_this_process_left_behind_is_no_live_writer():
    """A run of this process that could not remove its remote lock (the service failed) is over:
    the lock file naming it is not taken for a live writer here (open_run would wait for it),
    while a lock this process holds is."""
    loc = resolve(f"memory://test-lock-left-{os.getpid()}/run")
    try:
        lock = WriterLock.acquire(loc)
        assert holder(loc).alive is True
        left = loc.read_bytes(LOCK_NAME)
        lock.release()
        loc.write_bytes(left, LOCK_NAME)  # as if its removal had failed
        assert holder(loc).pid == os.getpid() and holder(loc).alive is False
        WriterLock.acquire(loc, take_stale=True).release()  # resume takes it at once
    finally:
        loc.remove()


def test_the_heartbeat_renews_the_lease_and_a_writer_that_lost_its_lock_stops_committing():
    loc = resolve(f"memory://test-lock-beat-{os.getpid()}/run")
    try:
        with sz.config.set(lock_lease=1.5):
            lock = WriterLock.acquire(loc)
        first = lock.lease_until
        time.sleep(1.4)  # two renewals (every 0.5 s)
        assert lock.lease_until > first and holder(loc).lease_until == lock.lease_until
        lock.check()  # still ours
        _far_lock(loc, time.time() + 600)  # another writer took it (a lapsed lease elsewhere, say)
        time.sleep(0.8)
        with pytest.raises(sz.StoreError, match="taken over by pid 1 on host far-away.*--resume"):
            lock.check()
        lock.release()  # leaves the other writer's lock alone
        assert holder(loc).token == "theirs"
        lapsed = WriterLock(loc, None, "mine", time.time() - 1)
        with pytest.raises(sz.StoreError, match=r"lapsed at .* \(its renewals failed\)"):
            lapsed.check()
    finally:
        loc.remove()


def test_a_lock_file_a_killed_writer_was_making_is_cleaned_up(tmp_path):
    """A writer killed inside `_locked_file` leaves ``.writer.PID.THREAD.tmp``: the next run into the
    store removes it once that pid is gone; a live racer's is left alone."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    dead = tmp_path / "s" / f"{LOCK_NAME}.{proc.pid}.1.tmp"
    live = tmp_path / "s" / f"{LOCK_NAME}.{os.getppid()}.1.tmp"
    dead.parent.mkdir()
    dead.write_text("{}")
    live.write_text("{}")
    assert lock_mod.dead_temporaries(resolve(tmp_path / "s")) == [dead.name]
    FileStore.create(tmp_path / "s", record()).close()  # the directory counts as empty, and is cleaned
    assert not dead.exists() and live.exists()

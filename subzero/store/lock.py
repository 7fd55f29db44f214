"""The writer lock of a store: one run writes a store, and a second is refused at once.

A writer takes the store by creating ``STORE/.writer`` exclusively (``O_CREAT | O_EXCL``)
and holds an ``fcntl`` lock on it for the whole run; the file names the run (pid, host,
start time).  Another writer fails to create the file and is told who holds it.  A lock
whose process is gone (the ``fcntl`` lock is free, or the pid no longer runs on this
host) is stale: it is reported, never silently taken over; ``resume`` or ``overwrite``
take it explicitly.

On object storage there is no ``fcntl``: the lock file carries a lease (``lease_until``, a
UNIX time ``lock_lease`` seconds ahead, `subzero.config`) that a heartbeat thread renews every
third of the lease while the run lives.  A lock whose lease expired (its run died, or lost
the service for longer than the lease) is stale as above; one whose lease runs is live, even
from another machine.  A writer that takes a lock re-reads it after `SETTLE` seconds and
gives up if another writer's token is there (two writers racing for a stale lock: one wins),
and a writer whose lease lapsed (its renewals failed) or was taken over stops committing
(`WriterLock.check`).
"""

from __future__ import annotations

import contextvars
import datetime as _dt
import logging
import errno
import json
import os
import threading
import time
import uuid
from dataclasses import dataclass

from subzero import config
from subzero.errors import StoreError
from subzero.store.failures import store_file_error
from subzero.store.location import Location

__all__ = ["WriterLock", "LOCK_NAME", "holder", "dead_temporaries", "pid_alive"]

LOCK_NAME = ".writer"
_WRITE_WAIT = 0.5  # seconds a lock file may take to get its contents (created, then written)
#: seconds a writer waits after writing a remote lock file before reading it back (a racing
#: writer's file has replaced it by then)
SETTLE = 0.5
log = logging.getLogger(__name__)
#: the tokens of the writer locks this process holds now: a lock file naming this process with
#: another token is a run of ours that ended without removing it (the service failed), not a live one
_HELD_TOKENS: set[str] = set()


@dataclass(frozen=True)
class Holder:
    """Who holds (or held) a store's writer lock."""

    pid: int
    host: str
    started: str
    alive: bool | None  # None: cannot tell (another host, or a remote store)
    lease_until: float | None = None  # UNIX time its lease ends (remote stores), None: no lease
    token: str | None = None

    def describe(self) -> str:
        """The holder in words, for messages."""
        return f"pid {self.pid} on host {self.host}, started {self.started}"


def _clock(when: float) -> str:
    """A UNIX time as ``2026-11-28 04:15:19 UTC``."""
    return _dt.datetime.fromtimestamp(when, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this machine (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def holder(location: Location) -> Holder | None:
    """The holder named in the store's lock file, or None when there is no lock.

    A lock file is created, then written: one without readable contents is waited for
    briefly; if it stays unreadable its writer died in between (stale unless its lock is held).
    """
    deadline = time.monotonic() + _WRITE_WAIT
    while True:
        try:
            info = json.loads(location.read_bytes(LOCK_NAME))
        except FileNotFoundError:
            return None
        except (IsADirectoryError, NotADirectoryError, PermissionError) as exc:  # never a lock file in the making
            raise store_file_error(exc, "the writer lock", location.child_url(LOCK_NAME),
                                   f"the store is damaged: if no run writes this store, delete "
                                   f"{location.child_url(LOCK_NAME)} and try again") from exc
        except StoreError:  # the service fails: not a lock in the making
            raise
        except (ValueError, OSError):
            info = None
        if isinstance(info, dict) or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    if not isinstance(info, dict):
        return Holder(-1, "?", "?", _flock_held(location.path(LOCK_NAME)) if location.is_local else None)
    alive = _flock_held(location.path(LOCK_NAME)) if location.is_local else None
    if alive is None and info.get("host") == _hostname():  # an object store: a holder on this machine can be checked
        pid = int(info.get("pid", -1))
        alive = info.get("token") in _HELD_TOKENS if pid == os.getpid() else pid_alive(pid)
    lease = info.get("lease_until")
    lease_until = float(lease) if isinstance(lease, (int, float)) and not isinstance(lease, bool) and \
        not location.is_local else None  # a local lock's fcntl lock tells whether its run lives
    if lease_until is not None and alive is not False:
        alive = time.time() < lease_until  # a lapsed lease: its run died or lost the store for longer
    token = info.get("token") if isinstance(info.get("token"), str) else None
    return Holder(int(info.get("pid", -1)), str(info.get("host", "?")), str(info.get("started", "?")), alive,
                  lease_until, token)


def _flock_held(path: str) -> bool | None:
    """True when some process holds the fcntl lock on ``path``, False when none does."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


class WriterLock:
    """The lock a writing run holds on its store; `release` when the run ends."""

    def __init__(self, location: Location, fd: int | None, token: str = "", lease_until: float | None = None,
                 started: str = ""):
        self.location, self._fd = location, fd
        self.token, self.lease_until, self._started = token, lease_until, started
        self.lost: str | None = None  # why this writer no longer holds the lock (taken over, lease lapsed)
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    def _payload(self, lease_until: float) -> bytes:
        return json.dumps({"pid": os.getpid(), "host": _hostname(), "started": self._started, "token": self.token,
                           "lease_until": lease_until}).encode()

    def _start_heartbeat(self) -> None:
        """Renew the lease every third of it in a daemon thread, in the caller's configuration."""
        context = contextvars.copy_context()
        self._heartbeat = threading.Thread(target=context.run, args=(self._renew_forever,), daemon=True,
                                           name="subzero-lock-heartbeat")
        self._heartbeat.start()

    def _renew_forever(self) -> None:
        lease = config.get("lock_lease")
        while not self._stop.wait(lease / 3):
            try:
                current = holder(self.location)
                if self._stop.is_set():
                    return
                if current is None or current.token != self.token:
                    self.lost = (f"the writer lock of {self.location.url!r} was taken over by "
                                 f"{current.describe() if current else 'nobody (it was removed)'}")
                    log.error("%s; this run stops committing", self.lost)
                    return
                until = time.time() + lease
                with config.set(storage_timeout=lease / 3):
                    self.location.write_bytes(self._payload(until), LOCK_NAME)
                self.lease_until = until
            except StoreError as exc:  # the service fails: the run's own operations say so; try again later
                log.debug("renewing the writer lock failed: %s", exc)

    def check(self) -> None:
        """Raise `StoreError` when this writer may no longer commit: the lock was taken over, or
        its lease lapsed (renewals failed for longer than the lease)."""
        if self.lost is None and self.lease_until is not None and not self.location.is_local \
                and time.time() > self.lease_until:
            self.lost = (f"the writer lock of {self.location.url!r} lapsed at {_clock(self.lease_until)} "
                         "(its renewals failed)")
        if self.lost is not None:
            raise StoreError(f"{self.lost}; this run stopped so that two runs never write one store: continue it "
                             "with --resume")

    @classmethod
    def acquire(cls, location: Location, take_stale: bool = False) -> "WriterLock":
        """Take the store's writer lock, or raise `StoreError` naming the run that holds it.

        ``take_stale`` takes over the lock of a run that no longer runs (resume, overwrite);
        the lock of a live run is never taken.
        """
        lease_until = time.time() + config.get("lock_lease")
        lock = cls(location, None, uuid.uuid4().hex, lease_until, _now())
        payload = lock._payload(lease_until)
        if not location.is_local:
            current = holder(location)
            if current is not None and (not take_stale or current.alive is not False):
                raise _held(location, current)
            if current is not None:
                log.warning("taking over the writer lock of %s (%s)", location.url, current.describe())
            _HELD_TOKENS.add(lock.token)  # ours from the moment the file may name it
            try:
                location.write_bytes(payload, LOCK_NAME)
                time.sleep(SETTLE)  # a writer racing for the same stale lock has written by now: the last one wins
                now = holder(location)
                if now is None or now.token != lock.token:
                    raise _held(location, now) if now is not None else StoreError(
                        f"store {location.url!r}: the writer lock vanished while it was taken; try again")
            except BaseException:
                _HELD_TOKENS.discard(lock.token)
                raise
            lock._start_heartbeat()
            return lock
        path = location.path(LOCK_NAME)
        for _ in range(2):
            try:
                fd = _locked_file(path, payload)
            except FileExistsError:
                current = holder(location)
                if current is None:
                    continue  # released between our attempt and the read: try again
                if current.alive is False and take_stale:
                    os.unlink(path)
                    continue
                raise _held(location, current) from None
            except OSError as exc:
                if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                    raise StoreError(f"store {location.url!r} is not writable ({exc.strerror}); choose a store "
                                     "directory you can write") from exc
                raise
            lock._fd = fd
            _HELD_TOKENS.add(lock.token)
            return lock
        raise StoreError(f"store {location.url!r}: could not take the writer lock; try again")

    def release(self) -> None:
        """Give the store up: remove the lock file (then drop the fcntl lock).  On object
        storage, a lock another writer took over is left to it; a lock that cannot be removed
        (the service fails) is a `StoreError` saying when its lease ends and what happens then."""
        self._stop.set()
        _HELD_TOKENS.discard(self.token)  # this run writes no more, whether or not the file goes
        try:
            if self.location.is_local:
                self.location.remove(LOCK_NAME)
                return
            try:
                current = holder(self.location)
                if current is not None and current.token == self.token:
                    self.location.remove(LOCK_NAME)
            except StoreError as exc:
                until = _clock(self.lease_until) if self.lease_until is not None else "?"
                raise StoreError(f"the writer lock could not be released ({self.location.service} failing): it "
                                 f"lapses at {until}, and from then on --resume (or --overwrite) takes it over "
                                 "(no other run writes the store before)") from exc
        finally:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def _locked_file(path: str, payload: bytes) -> int:
    """Create ``path`` exclusively, already written and already ``flock``-ed: the contents go
    to a private file that is locked, then hard-linked into place (``link`` fails if the
    path exists), so no reader ever sees the lock file empty or unlocked.  Returns the
    descriptor that holds the lock.  Not flushed to the disk: whether its run lives is the
    ``flock``, which no machine crash leaves held, so a lock left unreadable by one is a dead
    run's (`holder`), taken over by resume and overwrite as any other."""
    import fcntl

    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    try:
        os.write(fd, payload)
        fcntl.flock(fd, fcntl.LOCK_EX)  # the lock belongs to the file, so to every name it has
        os.link(tmp, path)
    except BaseException:
        os.close(fd)
        raise
    finally:
        os.unlink(tmp)
    return fd


def dead_temporaries(location: Location) -> list[str]:
    """Names of lock files in the making (``.writer.PID.THREAD.tmp``) whose writer is gone: a
    process killed while it took the lock.  Those of live processes (racing writers) are left."""
    out = []
    for name in location.listdir():
        parts = name.split(".")
        if not (name.startswith(LOCK_NAME + ".") and name.endswith(".tmp") and len(parts) == 5):
            continue
        try:
            pid = int(parts[2])
        except ValueError:
            continue
        if pid != os.getpid() and not pid_alive(pid):
            out.append(name)
    return out


def _held(location: Location, current: Holder) -> StoreError:
    if current.alive is False:
        gone = f"its lease lapsed at {_clock(current.lease_until)}" if current.lease_until is not None \
            else "the run was killed"
        return StoreError(f"store {location.url!r} was being written by {current.describe()}, which is no longer "
                          f"running ({gone}); continue it with resume (--resume) or replace it with "
                          "overwrite (--overwrite)")
    if current.alive is None:  # an object store written from another machine: no lock to test
        return StoreError(f"store {location.url!r} is marked as being written by {current.describe()}, and subzero "
                          f"cannot tell from here whether that run still lives; if it does not, delete "
                          f"{location.child_url(LOCK_NAME)} and try again, else choose another store")
    lease = "" if current.lease_until is None else \
        f"; its lease runs until {_clock(current.lease_until)}, renewed while it lives (if it died, --resume takes " \
        "the lock over after that)"
    return StoreError(f"store {location.url!r} is being written by another run ({current.describe()}); wait for it "
                      f"to finish or choose another store{lease}")


def _hostname() -> str:
    """This machine's name (socket is imported here: a reader that takes no lock never needs it)."""
    import socket

    return socket.gethostname()

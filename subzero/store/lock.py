"""The writer lock of a store: one run writes a store, and a second is refused at once.

A writer takes the store by creating ``STORE/.writer`` exclusively (``O_CREAT | O_EXCL``)
and holds an ``fcntl`` lock on it for the whole run; the file names the run (pid, host,
start time).  Another writer fails to create the file and is told who holds it.  A lock
whose process is gone (the ``fcntl`` lock is free, or the pid no longer runs on this
host) is stale: it is reported, never silently taken over; ``resume`` or ``overwrite``
take it explicitly.
"""

from __future__ import annotations

import datetime as _dt
import errno
import json
import os
import threading
import time
from dataclasses import dataclass

from subzero.errors import StoreError
from subzero.store.failures import store_file_error
from subzero.store.location import Location

__all__ = ["WriterLock", "LOCK_NAME", "holder", "dead_temporaries", "pid_alive"]

LOCK_NAME = ".writer"
_WRITE_WAIT = 0.5  # seconds a lock file may take to get its contents (created, then written)


@dataclass(frozen=True)
class Holder:
    """Who holds (or held) a store's writer lock."""

    pid: int
    host: str
    started: str
    alive: bool | None  # None: cannot tell (another host, or a remote store)

    def describe(self) -> str:
        """The holder in words, for messages."""
        return f"pid {self.pid} on host {self.host}, started {self.started}"


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
        except (ValueError, OSError):
            info = None
        if isinstance(info, dict) or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    if not isinstance(info, dict):
        return Holder(-1, "?", "?", _flock_held(location.path(LOCK_NAME)) if location.is_local else None)
    alive = _flock_held(location.path(LOCK_NAME)) if location.is_local else None
    if alive is None and info.get("host") == _hostname():
        alive = pid_alive(int(info.get("pid", -1)))  # an object store: a holder on this machine can be checked
    return Holder(int(info.get("pid", -1)), str(info.get("host", "?")), str(info.get("started", "?")), alive)


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

    def __init__(self, location: Location, fd: int | None):
        self.location, self._fd = location, fd

    @classmethod
    def acquire(cls, location: Location, take_stale: bool = False) -> "WriterLock":
        """Take the store's writer lock, or raise `StoreError` naming the run that holds it.

        ``take_stale`` takes over the lock of a run that no longer runs (resume, overwrite);
        the lock of a live run is never taken.
        """
        payload = json.dumps({"pid": os.getpid(), "host": _hostname(), "started": _now()}).encode()
        if not location.is_local:
            current = holder(location)
            if current is not None and (not take_stale or current.alive is not False):
                raise _held(location, current)
            location.write_bytes(payload, LOCK_NAME)
            return cls(location, None)
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
            return cls(location, fd)
        raise StoreError(f"store {location.url!r}: could not take the writer lock; try again")

    def release(self) -> None:
        """Give the store up: remove the lock file (then drop the fcntl lock)."""
        try:
            self.location.remove(LOCK_NAME)
        finally:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def _locked_file(path: str, payload: bytes) -> int:
    """Create ``path`` exclusively, already written and already ``flock``-ed: the contents go
    to a private file that is locked, then hard-linked into place (``link`` fails if the
    path exists), so no reader ever sees the lock file empty or unlocked.  Returns the
    descriptor that holds the lock."""
    import fcntl

    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    try:
        os.write(fd, payload)
        os.fsync(fd)
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
        return StoreError(f"store {location.url!r} was being written by {current.describe()}, which is no longer "
                          "running (the run was killed); continue it with resume (--resume) or replace it with "
                          "overwrite (--overwrite)")
    if current.alive is None:  # an object store written from another machine: no lock to test
        return StoreError(f"store {location.url!r} is marked as being written by {current.describe()}, and subzero "
                          f"cannot tell from here whether that run still lives; if it does not, delete "
                          f"{location.child_url(LOCK_NAME)} and try again, else choose another store")
    return StoreError(f"store {location.url!r} is being written by another run ({current.describe()}); wait for it "
                      "to finish or choose another store")


def _hostname() -> str:
    """This machine's name (socket is imported here: a reader that takes no lock never needs it)."""
    import socket

    return socket.gethostname()

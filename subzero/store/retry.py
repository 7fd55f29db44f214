"""The one retry policy of operations on a store's service (object storage): bounded in time, said
while it happens, and given up once.

Every operation on a remote store (a chunk, a shard, a manifest, the catalog, the lock) goes
through `attempt`: a request that fails transiently (503 SlowDown, a reset connection, a
timeout) is tried again after an exponential backoff (at most ``storage_backoff_max`` seconds)
until it has failed for ``storage_timeout`` seconds (or ``s3_retries`` attempts), or the
service has been failing for ``storage_run_timeout`` seconds in all since the run began.  The
client underneath makes one attempt per call (`client_options`: botocore ``max_attempts=1`` with
connect and read timeouts, s3fs ``retries=1``), so the limits are not multiplied.

While a service fails, a warning says so within seconds and every ``REPORT_EVERY`` seconds
after (``S3 at http://host:9000 failing (503 SlowDown) for 20 s, retrying``).  Once an operation
gave up, the others of this process stop retrying (`gave_up`), except cleanup inside
`cleanup_window` (marking the run failed, releasing the writer lock), which has
``lock_release_timeout`` seconds in all.  A success (the service answers again) or `begin` (a
new run) forgets the outage.  Ctrl-C interrupts a wait at once (the waits are plain sleeps).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import random
import threading
import time
from typing import Any, Callable, Iterator, TypeVar

from subzero import config
from subzero.errors import StorageUnavailable, StoreError

__all__ = ["attempt", "begin", "abandon", "cleanup_window", "client_options", "transient", "reason", "gave_up",
           "REPORT_EVERY"]

log = logging.getLogger(__name__)

#: seconds between two warnings about the same failing service (the first one comes after
#: ``FIRST_REPORT`` seconds of failure: a single retried request says nothing)
REPORT_EVERY = 10.0
FIRST_REPORT = 1.0
_FIRST_DELAY = 0.2

_T = TypeVar("_T")

#: errors that are the answer, not a failing service: never retried
_FINAL = (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError, NotADirectoryError, StoreError,
          NotImplementedError, TypeError)
_TRANSIENT_WORDS = ("slowdown", "slow down", "503", "500", "502", "504", "throttl", "requesttimeout", "reset",
                    "connection", "connect ", "timed out", "timeout", "internalerror", "serviceunavailable",
                    "broken pipe", "remote end closed", "server disconnected", "service unavailable",
                    "reduce your request rate")  # s3fs's words for 503 SlowDown (an OSError EBUSY)


class _Outage:
    """What this process knows of its store's service: since when it fails, failing time so far
    in this run, whether an operation gave up, when it last said so."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.wake = threading.Event()  # set by `abandon`: waits end at once
        self.down_since: float | None = None
        self.failed_before = 0.0  # seconds of failure in this run before the current outage
        self.gave_up: str | None = None  # the message of the operation that gave up
        self.said = float("-inf")
        self.cleanup_until: float | None = None  # the one deadline of a failed run's cleanup

    def failing_for(self, now: float) -> float:
        return 0.0 if self.down_since is None else now - self.down_since

    def run_failing(self, now: float) -> float:
        return self.failed_before + self.failing_for(now)


_STATE = _Outage()
_cleanup_until: contextvars.ContextVar[float | None] = contextvars.ContextVar("subzero_cleanup_until", default=None)


def begin() -> None:
    """A run begins: forget earlier outages and restart the run's failure budget."""
    with _STATE.lock:
        _STATE.reset()


def abandon(why: str) -> None:
    """Stop waiting for the service (Ctrl-C, or a failed tile's siblings): operations waiting to
    retry wake up, and every failing operation of this process gives up at its next failure
    (cleanup inside `cleanup_window` still has its own short budget)."""
    with _STATE.lock:
        _STATE.gave_up = _STATE.gave_up or why
        _STATE.wake.set()


def gave_up() -> str | None:
    """The message of the operation of this process that gave up on the service (None: none did,
    or the service answered since)."""
    return _STATE.gave_up


@contextlib.contextmanager
def cleanup_window() -> Iterator[None]:
    """Inside: the store operations of a failed run's cleanup (mark it failed, release the lock),
    retried for ``lock_release_timeout`` seconds in all (one deadline from the first window on, until
    `begin` or the service answers), even after an operation gave up."""
    with _STATE.lock:
        if _STATE.cleanup_until is None:
            _STATE.cleanup_until = time.monotonic() + config.get("lock_release_timeout")
        until = _STATE.cleanup_until
    token = _cleanup_until.set(until)
    try:
        yield
    finally:
        _cleanup_until.reset(token)


def client_options(options: dict[str, Any], defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    """``options`` for s3fs with botocore's own retries and timeouts set from the policy (one
    attempt per call, ``storage_connect_timeout``, ``storage_read_timeout``) unless the caller
    set them (in ``options`` or in fsspec's configuration, ``defaults``)."""
    given = {**((defaults or {}).get("config_kwargs") or {}), **(options.get("config_kwargs") or {})}
    given.setdefault("retries", {"max_attempts": 1, "mode": "standard"})
    given.setdefault("connect_timeout", config.get("storage_connect_timeout"))
    given.setdefault("read_timeout", config.get("storage_read_timeout"))
    return {**options, "config_kwargs": given}


def transient(exc: BaseException) -> bool:
    """True for a failure worth another attempt: the service is busy or unreachable (503
    SlowDown, 5xx, a reset or refused connection, a timeout), not an answer (missing file,
    access denied)."""
    if isinstance(exc, _FINAL):
        return False
    text = f"{type(exc).__name__} {exc}".lower()
    return any(word in text for word in _TRANSIENT_WORDS)


def reason(exc: BaseException) -> str:
    """A failure in a few words, for messages: ``503 SlowDown``, ``connection reset``, ``timed out``."""
    text = f"{type(exc).__name__} {exc}".lower()
    if "slowdown" in text or "slow down" in text or "reduce your request rate" in text:
        return "503 SlowDown"
    for code in ("500", "502", "503", "504"):
        if code in text:
            return f"HTTP {code}"
    if "service unavailable" in text or "serviceunavailable" in text:  # a 503 without a body (HEAD)
        return "HTTP 503"
    if "throttl" in text:
        return "throttled"
    if "internalerror" in text:
        return "HTTP 500"
    if "reset" in text or "closed" in text or "disconnected" in text or "broken pipe" in text:
        return "connection reset"
    if "timeout" in text or "timed out" in text:
        return "timed out"
    if "connect" in text:
        return "cannot connect"
    return type(exc).__name__


def attempt(call: Callable[[], _T], service: str, store: str, doing: str) -> _T:
    """``call()``, tried again while it fails transiently, within the policy's limits.

    Parameters
    ----------
    call
        One attempt at the operation (a single request underneath).
    service, store, doing
        For messages: ``S3 at http://host:9000``, the store's URL, ``writing 'catalog.json'``.

    Raises
    ------
    StorageUnavailable
        The service kept failing past a limit: one line naming the service, the store, what
        failed, for how long, and that ``--resume`` continues the run.
    """
    budget = config.get("storage_timeout")
    run_budget = config.get("storage_run_timeout")
    attempts = config.get("s3_retries")
    backoff_max = config.get("storage_backoff_max")
    cleanup_until = _cleanup_until.get()
    started: float | None = None
    tries = 0
    while True:
        tries += 1
        try:
            result = call()
        except Exception as exc:
            if not transient(exc):
                raise
            now = time.monotonic()
            started = now if started is None else started
            with _STATE.lock:
                if _STATE.down_since is None:
                    _STATE.down_since = now
                failing = _STATE.failing_for(now)
                run_failing = _STATE.run_failing(now)
                already = _STATE.gave_up
            own = now - started
            limit = None
            if cleanup_until is not None:
                if now >= cleanup_until:
                    limit = f"the cleanup's {config.get('lock_release_timeout'):g} s (lock_release_timeout)"
            elif already is not None:  # the first operation that gave up says it all
                error = StorageUnavailable(already if already.startswith("store ") else
                                           f"store {store!r}: {already} while {doing}")
                raise error from exc
            elif own >= budget:
                limit = f"storage_timeout {budget:g} s"
            elif run_failing >= run_budget:
                limit = f"storage_run_timeout {run_budget:g} s for the run"
            elif tries >= attempts:
                limit = f"s3_retries {attempts} attempts"
            if limit is not None:
                error = StorageUnavailable(
                    f"store {store!r}: {service} failing ({reason(exc)}) for {max(failing, own):.0f} s while {doing}; "
                    f"gave up ({limit}); once the service answers, try again (a stopped run: --resume, in Python "
                    "resume=True)")
                abandon(str(error))
                raise error from exc
            _say(service, reason(exc), failing, budget)
            delay = min(backoff_max, _FIRST_DELAY * 2 ** (tries - 1)) * random.uniform(0.5, 1.0)
            end = started + budget if cleanup_until is None else cleanup_until
            pause = max(0.0, min(delay, end - now))
            if cleanup_until is None:
                _STATE.wake.wait(pause)  # `abandon` (Ctrl-C, a sibling gave up) ends it at once
            else:
                time.sleep(pause)
            continue
        if started is not None or _STATE.down_since is not None:
            _recovered(service)
        return result


def _say(service: str, why: str, failing: float, budget: float) -> None:
    """Warn that ``service`` fails (at most every `REPORT_EVERY` seconds)."""
    now = time.monotonic()
    with _STATE.lock:
        if failing < FIRST_REPORT or now - _STATE.said < REPORT_EVERY:
            return
        _STATE.said = now
    log.warning("%s failing (%s) for %.0f s, retrying (each operation gives up after %g s: storage_timeout)",
                service, why, failing, budget)


def _recovered(service: str) -> None:
    now = time.monotonic()
    with _STATE.lock:
        if _STATE.down_since is None:
            return
        failing = now - _STATE.down_since
        _STATE.failed_before += failing
        _STATE.down_since = None
        _STATE.gave_up = None
        _STATE.cleanup_until = None
        said = _STATE.said > float("-inf")
        _STATE.said = float("-inf")
    if said:
        log.warning("%s answers again (after %.0f s of failures)", service, failing)

"""subzero.store.retry: the one retry policy of a store's service, on calls that fail as s3fs's do
(503 SlowDown is an OSError EBUSY "Please reduce your request rate.", a reset connection a
botocore error); the real service behind a fault proxy is tests/test_object_store.py's."""

from __future__ import annotations

import errno
import logging
import threading
import time

import pytest

import subzero as sz
from subzero import config
from subzero.errors import StorageUnavailable
from subzero.store import retry

SLOWDOWN = OSError(errno.EBUSY, "Please reduce your request rate.")


class ConnectionClosedError(Exception):
    """botocore's name for a connection reset by the peer."""


RESET = ConnectionClosedError("Connection was closed before we received a valid response from endpoint URL")


@pytest.fixture(autouse=True)
def fresh():
    retry.begin()
    yield
    retry.begin()


class Failing:
    """A call that fails ``times`` times with ``error`` (forever when None), then answers."""

    def __init__(self, error: BaseException, times: int | None = None):
        self.error, self.times, self.calls = error, times, 0

    def __call__(self) -> str:
        self.calls += 1
        if self.times is None or self.calls <= self.times:
            raise self.error
        return "answer"


def test_transient_failures_and_their_reasons():
    assert retry.transient(SLOWDOWN) and retry.reason(SLOWDOWN) == "503 SlowDown"
    assert retry.transient(RESET) and retry.reason(RESET) == "connection reset"
    bare = OSError(errno.EBUSY, "Service Unavailable")  # s3fs's 503 to a HEAD request (no body to name it)
    assert retry.transient(bare) and retry.reason(bare) == "HTTP 503"
    timeout = TimeoutError("Read timeout on endpoint URL")
    assert retry.transient(timeout) and retry.reason(timeout) == "timed out"
    for final in (FileNotFoundError("x"), PermissionError("Access Denied"), sz.StoreError("damaged"),
                  ValueError("bad bucket name")):
        assert not retry.transient(final), final


def test_a_few_failures_are_retried_quietly_and_answer(caplog):
    call = Failing(SLOWDOWN, times=3)
    with config.set(storage_backoff_max=0.01), caplog.at_level(logging.WARNING, "subzero"):
        assert retry.attempt(call, "S3 at http://h:1", "s3://b/run", "reading 'x'") == "answer"
    assert call.calls == 4 and not caplog.records  # failing for less than a second says nothing


@pytest.mark.parametrize("budget", [0.6, 1.5])
def test_a_lasting_failure_gives_up_after_the_budget_saying_what_and_where(budget, caplog, monkeypatch):
    monkeypatch.setattr(retry, "FIRST_REPORT", 0.2)
    call = Failing(SLOWDOWN)
    started = time.monotonic()
    with config.set(storage_timeout=budget, storage_backoff_max=0.1), caplog.at_level(logging.WARNING, "subzero"):
        with pytest.raises(StorageUnavailable) as caught:
            retry.attempt(call, "S3 at http://h:1", "s3://b/run", "writing 'catalog.json'")
    took = time.monotonic() - started
    assert budget <= took < budget + 0.5 and call.calls > 3
    text = str(caught.value)
    assert isinstance(caught.value, sz.StoreError) and "\n" not in text
    for part in ("s3://b/run", "S3 at http://h:1", "503 SlowDown", "writing 'catalog.json'", "storage_timeout",
                 "--resume"):
        assert part in text, (part, text)
    said = [r.getMessage() for r in caplog.records]
    assert said and said[0].startswith("S3 at http://h:1 failing (503 SlowDown) for 0 s, retrying"), said
    assert retry.gave_up() == text


def test_an_answer_is_never_retried():
    call = Failing(FileNotFoundError("s3://b/run/x"))
    with pytest.raises(FileNotFoundError):
        retry.attempt(call, "S3", "s3://b/run", "reading 'x'")
    assert call.calls == 1


def test_attempts_are_capped_too():
    call = Failing(RESET)
    with config.set(s3_retries=3, storage_backoff_max=0.01), pytest.raises(StorageUnavailable, match="s3_retries 3"):
        retry.attempt(call, "S3", "s3://b/run", "reading 'x'")
    assert call.calls == 3


def test_the_run_budget_counts_every_outage_of_the_run():
    with config.set(storage_run_timeout=0.5, storage_timeout=10, storage_backoff_max=0.05):
        for _ in range(2):  # two outages of about 0.3 s each: the service answers in between
            assert retry.attempt(Failing(SLOWDOWN, times=4), "S3", "s3://b/run", "reading 'x'") == "answer"
        with pytest.raises(StorageUnavailable, match="storage_run_timeout"):
            retry.attempt(Failing(SLOWDOWN), "S3", "s3://b/run", "reading 'x'")
    retry.begin()  # a new run: a new budget
    assert retry.attempt(Failing(SLOWDOWN, times=1), "S3", "s3://b/run", "reading 'x'") == "answer"


def test_after_one_operation_gave_up_the_others_stop_at_their_next_failure():
    with config.set(storage_timeout=0.2, storage_backoff_max=0.05), pytest.raises(StorageUnavailable) as first:
        retry.attempt(Failing(SLOWDOWN), "S3", "s3://b/run", "writing 'a'")
    other = Failing(RESET)
    started = time.monotonic()
    with pytest.raises(StorageUnavailable) as second:
        retry.attempt(other, "S3", "s3://b/run", "writing 'b'")
    assert other.calls == 1 and time.monotonic() - started < 0.5 and str(second.value) == str(first.value)
    assert retry.attempt(Failing(RESET, times=0), "S3", "s3://b/run", "reading 'c'") == "answer"  # it answers again
    assert retry.gave_up() is None


def test_abandon_wakes_a_waiting_operation_at_once():
    got: dict[str, BaseException] = {}

    def wait() -> None:
        try:
            with config.set(storage_timeout=60, storage_backoff_max=30):
                retry.attempt(Failing(SLOWDOWN), "S3", "s3://b/run", "reading 'x'")
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            got["error"] = exc

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.8)  # in its backoff by now
    started = time.monotonic()
    retry.abandon("the run was interrupted")
    thread.join(5)
    assert not thread.is_alive() and time.monotonic() - started < 1.0
    assert isinstance(got["error"], StorageUnavailable) and "interrupted" in str(got["error"])


def test_the_cleanup_has_one_short_window_after_giving_up():
    with config.set(storage_timeout=0.1, storage_backoff_max=0.05, lock_release_timeout=0.6):
        with pytest.raises(StorageUnavailable):
            retry.attempt(Failing(SLOWDOWN), "S3", "s3://b/run", "writing 'a'")
        started = time.monotonic()
        with retry.cleanup_window():
            assert retry.attempt(Failing(SLOWDOWN, times=2), "S3", "s3://b/run", "writing 'catalog.json'") == "answer"
        retry.abandon("the service failed again")
        with retry.cleanup_window():  # the same deadline as the first window, not a new one
            with pytest.raises(StorageUnavailable, match="lock_release_timeout"):
                retry.attempt(Failing(SLOWDOWN), "S3", "s3://b/run", "removing '.writer'")
        assert time.monotonic() - started < 0.6 + 0.3


def test_client_options_make_botocore_try_once_with_timeouts_unless_given():
    with config.set(storage_connect_timeout=2, storage_read_timeout=7):
        got = retry.client_options({"endpoint_url": "http://h:1"})
        assert got["config_kwargs"] == {"retries": {"max_attempts": 1, "mode": "standard"}, "connect_timeout": 2.0,
                                        "read_timeout": 7.0}
        mine = retry.client_options({"config_kwargs": {"retries": {"max_attempts": 3}}},
                                    {"config_kwargs": {"read_timeout": 1}})
        assert mine["config_kwargs"] == {"retries": {"max_attempts": 3}, "connect_timeout": 2.0, "read_timeout": 1}

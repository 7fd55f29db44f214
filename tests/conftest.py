"""Shared fixtures: one Spark session for the whole test session, hypothesis profiles."""

from __future__ import annotations

import os

# astroscrappy's OpenMP threads spin-wait: on the tiny images of the tests (and 2 cores
# shared with Spark) one thread is 5x faster per call; set before anything loads OpenMP
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("default", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")


@pytest.fixture(scope="session")
def spark():
    """The embedded local[2, 4] Spark session (4 attempts per task), shared by all tests."""
    from subzero.executors.spark import get_session

    session = get_session("local[2, 4]")
    yield session
    session.stop()


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory):
    """Query statistics and remote-shard caches go to a directory of this test session."""
    os.environ["SUBZERO_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    yield


@pytest.fixture(scope="session")
def faults_clean(tmp_path_factory):
    """``(root, store, reference)``: a clean run of the faults bench's workflow (every strategy
    pinned) and its outputs and answers, made once for the modules that judge runs against it
    (tests/test_faults.py, tests/test_object_faults.py); tests copy the store, never change it."""
    from subzero_bench import faults

    root = tmp_path_factory.mktemp("faults")
    return root, root / "clean", faults.reference(root / "clean")

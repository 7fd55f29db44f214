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


# The modules that take longest, longest first (seconds on one worker of a quiet 2-core machine,
# measured with --durations). pytest-xdist's ``--dist loadfile`` hands out whole modules in
# collection order (setup.cfg passes --no-loadscope-reorder, else it orders them by their count of
# tests, and these few-but-slow modules came last, leaving one worker busy minutes after the other
# was done): longest first, the small modules fill in at the end and both workers finish together.
# A module missing here only runs in its usual place; remeasure when a module grows past a minute.
LONGEST_FIRST = ("test_spark_cluster.py", "test_spark.py", "test_object_store.py", "test_cli.py",
                 "test_object_faults.py", "test_faults.py", "test_bench.py", "test_docs.py", "test_replay.py")


def pytest_collection_modifyitems(session, config, items):
    """Run the modules of ``LONGEST_FIRST`` first, in its order; the others after, as collected."""
    rank = {name: n for n, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a module's own order stays

"""Shared fixtures: one Spark session for the whole test session, hypothesis profiles."""

from __future__ import annotations

import os
from pathlib import Path

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
    """Query statistics and remote-shard caches go to a directory of this test session.

    Only the JVM's class-data-sharing archive (``spark-cds``) is the user's (`user_cache`): in a
    directory of the session's own, every worker's session JVM dumped an archive as it exited
    (after the last test) that no later session used, and while it ran (the whole session) no
    JVM of the tests' own commands started from one (which halves a JVM's start)."""
    from subzero import config

    user = Path(config.cache_root())  # read before SUBZERO_CACHE points to the session's directory
    cache = tmp_path_factory.mktemp("cache")
    try:
        (user / "spark-cds").mkdir(parents=True, exist_ok=True)
        os.symlink(user / "spark-cds", cache / "spark-cds")
    except OSError:  # a read-only home: the archive stays this session's
        pass
    os.environ["SUBZERO_CACHE"] = str(cache)
    yield user


@pytest.fixture(scope="session")
def user_cache(private_cache) -> Path:
    """The user's own cache directory (``~/.cache/subzero`` unless the ``cache`` setting says
    otherwise), not the session's: for caches that only save work and change no answer, kept
    from one test session (and one clone) to the next: the JVM's class-data-sharing archive
    (keyed by the Java and pyspark versions; a JVM ignores a stale one) and mypy's cache
    (each module checked again when its source, or what it imports, changed)."""
    return private_cache


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

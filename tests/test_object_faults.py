"""The faults bench's object-store trials: runs into s3:// through a proxy failing requests end
exact or refused clearly, never wrong, and the report says so."""

from __future__ import annotations

import pytest

from subzero import config
from subzero_bench import faults as F
from subzero_bench.object_faults import object_store_trials, render

pytest.importorskip("moto.server")
pytest.importorskip("s3fs")


@pytest.mark.slow
def test_failing_requests_end_exact_or_refused_clearly(faults_clean):
    _, _, ref = faults_clean  # the clean run tests/test_faults.py judges against (tests/conftest.py)
    rates = (("5% of requests fail", 0.05, None), ("outage after 150 requests", 0.0, 150))
    # the outage's failed run cleans up (marks itself failed, releases its lock) within a second,
    # not lock_release_timeout's default 10: the same outcome, in seconds
    with config.set(lock_release_timeout=1.0):
        trials = object_store_trials(ref, F.harness(), runs=1, rates=rates, seed=2, log=lambda line: None)
    assert [t["outcome"] for t in trials] == ["exact", "refused clearly"], trials
    assert trials[0]["injected"] > 0 and trials[0]["slowdowns"] > 0 and trials[0]["resets"] > 0
    assert "S3 at http://127.0.0.1:" in trials[1]["detail"] and "s3://faults/" in trials[1]["detail"]
    report = "\n".join(render(trials))
    assert "| 5% of requests fail | 1 |" in report and "2 runs" in report and ", 0 wrong." in report

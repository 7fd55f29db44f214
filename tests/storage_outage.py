"""Test helper: `subzero run` into ``s3://`` on moto's S3 server behind the fault proxy
(`subzero_bench.object_store.FaultProxy`), timed from start to exit.

Also a script, for a measurement by hand (``python tests/storage_outage.py [OUTAGE_AFTER]``):
one run with every request failing from the OUTAGE_AFTER-th on, its exit status, seconds and
the last lines of its stderr.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from subzero_bench.object_store import FaultProxy

ROOT = Path(__file__).resolve().parents[1]

FLOW = """
import numpy as np
import subzero as sz
from subzero import operators as ops


def build(inputs=None):
    wf = sz.Workflow("outage")
    x = wf.input("x")
    blur = wf.add(ops.Convolve(np.ones((3, 3)), mode="reflect"), x, name="blur")
    bright = wf.add(ops.Threshold(4.0), blur, name="bright")
    wf.add(ops.Label(), bright, name="stars")
    rng = np.random.default_rng(7)
    image = rng.random((48, 40))
    image[10:13, 5:9] += 2.0
    image[30:34, 20:22] += 3.0
    return wf, {"x": image}
"""

PINS = ("--strategy", "blur=FullOne,FullMany/forward", "--strategy", "stars=FullMany,PayOne")


class TimedFaultProxy(FaultProxy):
    """The fault proxy, also noting when the first request failed (`down_at`, monotonic)."""

    down_at: float | None = None

    def _choose(self) -> str | None:
        fault = super()._choose()
        if fault is not None and self.down_at is None:
            self.down_at = time.monotonic()
        return fault


@dataclass
class Exit:
    """How a `subzero run` ended."""

    returncode: int
    seconds: float
    stderr: str
    ended: float  # monotonic time of the exit


def run_cli(workdir: Path, endpoint: str, store: str, *flags: str, env: dict[str, str] | None = None,
            timeout: float = 900) -> Exit:
    """``subzero run flow.py --store STORE`` (local executor, tiles of 16: 9 per node) against ``endpoint``."""
    (workdir / "flow.py").write_text(FLOW)
    environ = dict(os.environ, PYTHONPATH=str(ROOT), AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="testing",
                   AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1", **(env or {}))
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "subzero", "run", "flow.py", "--store", store, "--executor", "local",
                           "--tile", "16", *PINS, *flags], cwd=workdir, env=environ, capture_output=True, text=True,
                          timeout=timeout)
    return Exit(done.returncode, time.monotonic() - started, done.stderr, time.monotonic())


if __name__ == "__main__":  # pragma: no cover - a measurement by hand
    import tempfile

    from subzero_bench.object_store import s3_service

    after = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    with s3_service() as service, tempfile.TemporaryDirectory() as tmp:
        service.make_bucket("runs")
        with TimedFaultProxy(service.endpoint, rate=0.0, outage_after=after) as proxy:
            got = run_cli(Path(tmp), proxy.endpoint, "s3://runs/outage", timeout=1800)
        down = got.ended - proxy.down_at if proxy.down_at is not None else float("nan")
        print(f"exit {got.returncode} after {got.seconds:.1f} s, {down:.1f} s after the outage began "
              f"({proxy.requests} requests, outage after {after})")
        print("\n".join(got.stderr.strip().splitlines()[-5:]))

"""subzero.entry: the slot Workflow.run's driver is installed in (by the package)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import subzero
from subzero import entry
from subzero.errors import WorkflowError
from subzero.operators import Transpose
from subzero.dag import Workflow

ROOT = Path(__file__).resolve().parents[1]


def _transpose() -> Workflow:
    wf = Workflow("entry")
    wf.add(Transpose(), wf.input("x"), name="t")
    return wf


def test_the_package_installs_the_driver():
    assert entry.runner() is subzero._run_workflow


def test_workflow_run_delegates_to_the_installed_runner_with_every_option(monkeypatch, tmp_path):
    seen = {}

    def fake(workflow, inputs, store, /, **options):
        seen.update(workflow=workflow, inputs=inputs, store=store, options=options)
        return "a run"

    monkeypatch.setattr(entry, "_installed", fake)
    wf = _transpose()
    x = np.ones((2, 3))
    assert wf.run({"x": x}, tmp_path / "s", executor="local", overwrite=True) == "a run"
    assert seen["workflow"] is wf and seen["inputs"]["x"] is x and seen["store"] == tmp_path / "s"
    assert seen["options"]["executor"] == "local" and seen["options"]["overwrite"] is True
    assert set(seen["options"]) == {"strategies", "max_disk", "max_runtime", "workload", "executor", "spark",
                                    "tile_shape", "overwrite", "resume", "progress", "input_metadata",
                                    "storage_options"}


def test_no_runner_is_a_clear_workflow_error(monkeypatch, tmp_path):
    monkeypatch.setattr(entry, "_installed", None)
    with pytest.raises(WorkflowError, match="no driver is installed for Workflow.run"):
        _transpose().run({"x": np.ones((2, 3))}, tmp_path / "s", executor="local")


def test_a_fresh_process_runs_through_the_workflow_module_alone(tmp_path):
    """`from subzero.dag import Workflow` then `wf.run(...)`: the package's __init__ ran
    first and installed the driver, which imports execution only on the first run."""
    code = ("import sys, numpy as np\n"
            "from subzero.dag import Workflow\n"
            "from subzero.operators import Transpose\n"
            "assert 'subzero.execution' not in sys.modules\n"
            "wf = Workflow('fresh')\n"
            "wf.add(Transpose(), wf.input('x'), name='t')\n"
            f"run = wf.run({{'x': np.arange(6.0).reshape(2, 3)}}, {str(tmp_path / 's')!r}, executor='local')\n"
            "print(type(run).__name__, run.backward('t', [(2, 1)], to='x').tolist())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "Run [[1, 2]]"

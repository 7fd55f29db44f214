"""Where a statistic's tasks run (subzero/stats/tasks): the executor choice and its error, which
arguments travel to Spark by reference, and the run opened once per process."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import subzero as sz
from subzero import operators as ops
from subzero.run import open_run
from subzero.stats import tasks


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    wf = sz.Workflow("tasks")
    wf.add(ops.Threshold(0.5), wf.input("x"), name="bright")
    return wf.run({"x": np.eye(6)}, store=tmp_path_factory.mktemp("tasks") / "run", executor="local")


def test_a_local_run_stays_local_and_a_named_executor_is_kept(run):
    assert tasks.executor_for(run, None, tasks.SPARK_CELLS * 10) == "local"  # made here: answered here
    assert tasks.executor_for(run, "spark", 1) == "spark"
    assert tasks.executor_for(run, "local", tasks.SPARK_CELLS) == "local"


def test_an_unknown_executor_is_a_lineage_error_naming_the_choices(run):
    with pytest.raises(sz.LineageError, match="executor='gpu': use 'local'.*'spark'"):
        tasks.executor_for(run, "gpu", 1)


def test_names_and_chunked_arrays_travel_by_reference_in_memory_arrays_by_value(tmp_path):
    chunked = zarr.open(str(tmp_path / "flags.zarr"), mode="w", shape=(8, 8), chunks=(4, 4), dtype=bool)
    assert tasks.travels("bright") and tasks.travels(chunked)
    assert not tasks.travels(np.zeros((8, 8), bool)) and not tasks.travels(None)


def test_a_store_is_opened_once_per_process(run):
    calls = []

    def opener(path):
        calls.append(path)
        return open_run(path)

    store = str(run.path)
    tasks._RUNS.pop(store, None)
    first = tasks.opened_run(store, opener)
    assert tasks.opened_run(store, opener) is first and calls == [store]
    assert np.array_equal(np.asarray(first.output("bright")), np.eye(6) > 0.5)
    tasks._RUNS.pop(store, None)

"""subzero.executor: the Executor protocol both executors are declared against."""

from __future__ import annotations

from subzero.execution import LocalExecutor, make_executor
from subzero.executor import Executor
from subzero.operators import Transpose
from subzero.runtime import NodeTask
from subzero.dag import Workflow


def _double(task: NodeTask, item: int) -> int:
    return 2 * item


def test_the_local_executor_is_an_executor_and_a_factory_is_not():
    local = make_executor("local")
    assert isinstance(local, LocalExecutor) and isinstance(local, Executor)
    assert local.name == "local" and local.master is None
    assert not isinstance(lambda: local, Executor)  # the driver's factory: made on first use


def test_map_calls_returns_each_items_result_in_order():
    wf = Workflow("e")
    wf.add(Transpose(), wf.input("x"), name="t")
    task = NodeTask("t", wf.node("t").operator, (), (), None)
    items = list(range(9))
    assert LocalExecutor(threads=3).map_calls(_double, task, items) == [2 * i for i in items]
    assert LocalExecutor(threads=1).map_calls(_double, task, items) == [2 * i for i in items]


def test_the_spark_executor_is_an_executor(spark):
    from subzero.spark import SparkExecutor

    executor = SparkExecutor(spark)
    assert isinstance(executor, Executor) and executor.name == "spark"
    assert executor.master == spark.sparkContext.master
    wf = Workflow("e")
    wf.add(Transpose(), wf.input("x"), name="t")
    task = NodeTask("t", wf.node("t").operator, (), (), None)
    # a builtin, pickled by reference, so Spark's workers need no test module
    assert executor.map_calls(getattr, task, ["node", "strategies", "node"]) == ["t", (), "t"]


def _add(context: int, item: int) -> int:
    return context + item


def test_map_items_is_part_of_the_contract_and_runs_here_in_order():
    """`map_items` (``stats.table``'s batches) is in the `Executor` protocol; the local
    executor runs it in this process, in order, and names the job in a failure."""
    import pytest

    from subzero.errors import WorkflowError

    assert LocalExecutor().map_items(_add, 10, [3, 1, 2], "sums") == [13, 11, 12]
    with pytest.raises(WorkflowError, match="sums failed"):
        LocalExecutor().map_items(_add, None, [1], "sums")


def test_executors_never_set_a_shape_on_the_task_they_run(tmp_path):
    """A whole-array operator whose output shape only running tells: the executor returns
    it in the tiles' metadata and leaves the task's operator and shapes as they were."""
    import numpy as np

    from subzero.operator import Operator
    from subzero.store import ArrayRef, resolve
    from subzero.store.arrays import write_array
    from subzero.tiling import Tile

    class Positive(Operator):
        def run(self, ctx, x):
            return x[x > 0]

    ref = ArrayRef(resolve(tmp_path), "arrays/x")
    write_array(ref, np.array([1.0, -1.0, 2.0]))
    op = Positive().bound(((3,),), None)
    task = NodeTask("p", op, (ref,), ((3,),), None)
    metas = LocalExecutor(threads=1).map_tiles(task, [Tile(0, None)])  # type: ignore[arg-type]
    assert metas[0].shape == (2,)
    assert task.output_shape is None and op.output_shape is None

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
    task = NodeTask("t", wf.node("t").operator, (), ())
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
    task = NodeTask("t", wf.node("t").operator, (), ())
    # a builtin, pickled by reference, so Spark's workers need no test module
    assert executor.map_calls(getattr, task, ["node", "strategies", "node"]) == ["t", (), "t"]

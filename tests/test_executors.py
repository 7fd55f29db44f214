"""subzero.executors: the one-primitive Executor contract, the local executor, the task kinds
and the factory."""

from __future__ import annotations

import pytest

from subzero.errors import StoreError, WorkflowError
from subzero.executors import Executor, Job, LocalExecutor, check_executor, make_executor
from subzero.executors.tasks import map_calls, map_items, map_tiles
from subzero.operators import Transpose
from subzero.progress import Reporter
from subzero.worker import NodeTask
from subzero.dag import Workflow


def _double(task: NodeTask, item: int) -> int:
    return 2 * item


def _task() -> NodeTask:
    wf = Workflow("e")
    wf.add(Transpose(), wf.input("x"), name="t")
    return NodeTask("t", wf.node("t").operator, (), (), None)


class _Counted(Reporter):
    def __init__(self) -> None:
        super().__init__()
        self.done: dict[str, int] = {}

    def tiles_done(self, name: str, n: int = 1) -> None:
        self.done[name] = self.done.get(name, 0) + n


def test_the_local_executor_is_an_executor_and_a_factory_is_not():
    local = make_executor("local")
    assert isinstance(local, LocalExecutor) and isinstance(local, Executor)
    assert local.name == "local" and local.master is None
    assert not isinstance(lambda: local, Executor)  # the driver's factory: made on first use


def test_the_factory_refuses_what_cannot_work():
    with pytest.raises(WorkflowError, match="unknown executor 'yarn'"):
        make_executor("yarn")
    with pytest.raises(StoreError, match="Spark's workers cannot see"):
        check_executor("spark", "memory://s")
    check_executor("local", "memory://s")


@pytest.mark.parametrize("threads", [1, 3])
def test_map_returns_each_items_result_in_order_and_reports_a_nodes_items(threads):
    items = list(range(9))
    seen = _Counted()
    got = LocalExecutor(threads=threads).map(_double, _task(), items, Job("node 't'", "t", "t"), seen)
    assert got == [2 * i for i in items] and seen.done == {"t": len(items)}
    assert map_calls(LocalExecutor(threads=threads), _double, _task(), items) == [2 * i for i in items]


def _where(task: NodeTask, item: int) -> str:
    import threading
    import time

    if item == 5:
        raise ValueError("item 5")
    time.sleep(0.002)
    return threading.current_thread().name


def test_the_calling_thread_takes_items_beside_the_pool_and_a_failure_stops_the_rest():
    """Items go to the calling thread and threads - 1 of the pool, each taking the next one not
    started: at most ``threads`` at once, the caller among them; a failing item stops the items
    not started and names the node."""
    import threading

    got = map_calls(LocalExecutor(threads=2), _where, _task(), [0, 1, 2, 3])
    assert threading.current_thread().name in got and len(set(got)) <= 2
    ran = []
    with pytest.raises(WorkflowError, match="node 't' failed: ValueError: item 5"):
        map_calls(LocalExecutor(threads=2), lambda t, i: ran.append(i) or _where(t, i), _task(), list(range(40)))
    assert 5 in ran and len(ran) < 40


def _add(context: int, item: int) -> int:
    return context + item


def test_a_job_outside_a_node_runs_here_in_order_and_a_failure_names_the_job():
    """``stats.table``'s batches: no node, the context as it is (not pickled), in order; a
    failure names the job, a node's failure the node."""
    assert map_items(LocalExecutor(), _add, 10, [3, 1, 2], "sums") == [13, 11, 12]
    with pytest.raises(WorkflowError, match="sums failed: TypeError"):
        map_items(LocalExecutor(), _add, None, [1], "sums")
    with pytest.raises(WorkflowError, match="node 't' failed: TypeError"):
        map_calls(LocalExecutor(threads=2), _add, _task(), [1, 2])  # type: ignore[arg-type]


def test_the_spark_executor_is_an_executor(spark):
    from subzero.executors.spark import SparkExecutor

    executor = SparkExecutor(spark)
    assert isinstance(executor, Executor) and executor.name == "spark"
    assert executor.master == spark.sparkContext.master
    # a builtin, pickled by reference, so Spark's workers need no test module
    assert map_calls(executor, getattr, _task(), ["node", "strategies", "node"]) == ["t", (), "t"]


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
    metas = map_tiles(LocalExecutor(threads=1), task, [Tile(0, None)])  # type: ignore[arg-type]
    assert metas[0].shape == (2,)
    assert task.output_shape is None and op.output_shape is None

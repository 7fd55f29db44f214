"""The Spark executor: same lineage as in-process, retried tasks, errors, a loopback cluster."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import subzero as sz
from subzero import operators as ops
from subzero.store import FileStore


def build(flaky_marker: str | None = None, kill: bool = False) -> sz.Workflow:
    wf = sz.Workflow("sp")
    x = wf.input("x")
    y = wf.input("y")
    blur = wf.add(ops.Convolve(np.ones((3, 3)), mode="reflect"), x, name="blur")
    crd = wf.add(ops.CosmicRayDetect(threshold=50.0, radius=1), x, name="crd")
    add = FlakyAdd(flaky_marker, kill) if flaky_marker else ops.Add()
    wf.add(add, blur, y, name="sum")
    wf.add(ops.MatMul(), crd, y, name="mm")
    return wf


class FlakyAdd(ops.Add):
    """Add with explicit FULL lineage whose first attempt of its first tile fails: raises, or
    (``kill``) ends its Python worker at once, as a killed executor would."""

    def __init__(self, marker: str, kill: bool = False):
        self.marker, self.kill = marker, kill

    def supported_modes(self):
        return {sz.Mode.MAP, sz.Mode.FULL}

    def run(self, ctx, x, y):
        cells = np.argwhere(np.ones(np.broadcast_shapes(x.shape, y.shape), bool))
        if sz.Mode.FULL in ctx.modes:
            n = np.arange(len(cells))
            ctx.lwrite_many(cells, cells, cells, out_pair=n, in_pair=[n, n])
        if ctx.tile_box[0][0] == 0 and ctx.tile_box[1][0] == 0 and not os.path.exists(self.marker):
            Path(self.marker).write_text("failed once")
            if self.kill:
                os._exit(1)
            raise RuntimeError("injected failure on the first attempt")
        return np.add(x, y)


PINS = {"blur": ["FullOne", "FullMany/forward"], "crd": ["CompOne", "PayMany", "FullOne/forward"],
        "sum": ["FullOne", "FullMany"], "mm": "Map"}


def inputs():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(10, 10)) * 5
    x[4, 4] = 300.0
    return {"x": x, "y": rng.normal(size=(10, 10))}


def dump_lineage(path: Path) -> dict:
    """Every committed lineage entry of a store, by (node, strategy, tile): shard names differ
    between runs (they name the task attempt), their contents must not."""
    import lmdb

    store = FileStore.open(path)
    out = {}
    for node in store.read_catalog().nodes.values():
        if node.kind != "operator" or not node.stats.bytes:
            continue
        manifest = store.read_manifest(node.name)
        for strategy, records in manifest.shards.items():
            for rec in records:
                if rec.name is None:
                    out[(node.name, strategy, rec.tile)] = None
                    continue
                mdb = os.path.join(path, store.shard_directory(node.name, strategy), rec.name + ".mdb")
                env = lmdb.open(mdb, subdir=False, readonly=True, lock=False)
                with env.begin() as txn:
                    out[(node.name, strategy, rec.tile)] = list(txn.cursor())
                env.close()
    return out


def test_spark_records_exactly_the_lineage_of_the_local_executor(spark, tmp_path):
    on_spark = build().run(inputs(), store=tmp_path / "spark", strategies=PINS, spark=spark, tile_shape=4)
    local = build().run(inputs(), store=tmp_path / "local", strategies=PINS, executor="local", tile_shape=4)
    assert on_spark.catalog.executor == "spark" and on_spark.catalog.nodes["blur"].stats.tiles == 9
    lineage = dump_lineage(tmp_path / "spark")
    assert lineage == dump_lineage(tmp_path / "local") and len(lineage) == 9 * (2 + 3 + 2)
    for node in ("blur", "crd", "sum", "mm"):
        np.testing.assert_array_equal(on_spark.output(node), local.output(node))
    np.testing.assert_array_equal(on_spark.backward("sum", [(4, 4)], to="x"),
                                  local.backward("sum", [(4, 4)], to="x"))


@pytest.mark.parametrize("kill", [False, True], ids=["raised", "killed"])
def test_a_retried_task_neither_duplicates_nor_loses_lineage(spark, tmp_path, kill):
    marker = tmp_path / "marker"
    run = build(str(marker), kill).run(inputs(), store=tmp_path / "flaky", strategies=PINS, spark=spark, tile_shape=4)
    assert marker.read_text() == "failed once"  # the first attempt really failed
    (tmp_path / "already-failed").write_text("so the reference run never fails")
    build(str(tmp_path / "already-failed")).run(inputs(), store=tmp_path / "clean", strategies=PINS,
                                                executor="local", tile_shape=4)
    assert dump_lineage(tmp_path / "flaky") == dump_lineage(tmp_path / "clean")
    pairs = run.catalog.nodes["sum"].stats.pairs["FullOne/backward"]
    assert pairs == (100, 100, 200)  # one pair per cell, each reading x and y once
    manifest = FileStore.open(tmp_path / "flaky").read_manifest("sum")
    assert [r.tile for r in manifest.shards["FullOne/backward"]] == list(range(9))  # one attempt per tile
    committed = {r.name for recs in manifest.shards.values() for r in recs}
    on_disk = {p.name.split(".")[0] for p in (tmp_path / "flaky" / "lineage" / "sum").rglob("*.mdb")}
    assert on_disk == committed  # the failed attempt's shards are gone


class Broken(ops.Add):
    def run(self, ctx, x, y):
        raise ValueError("the instrument file is unreadable")


def test_an_operator_error_on_spark_is_one_clear_workflow_error(spark, tmp_path):
    wf = sz.Workflow("broken")
    x = wf.input("x")
    wf.add(Broken(), x, x, name="bad")
    with pytest.raises(sz.WorkflowError, match="node 'bad' failed on Spark: .*instrument file is unreadable"):
        wf.run({"x": np.ones((4, 4))}, store=tmp_path / "b", spark=spark)
    catalog = (tmp_path / "b" / "catalog.json").read_text()
    assert '"status": "failed"' in catalog and '"bad"' not in catalog.split('"nodes"')[1]
    with pytest.raises(sz.StoreError, match="did not finish"):
        sz.open_run(tmp_path / "b")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_standalone_cluster_on_loopback(tmp_path):
    """A real standalone master and worker (pyspark's bin/spark-class) and the CLI as a client."""
    import pyspark

    home = Path(pyspark.__file__).parent
    port = _free_port()
    env = dict(os.environ, SPARK_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    spark_class = str(home / "bin" / "spark-class")
    master = subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(_free_port())],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = subprocess.Popen([spark_class, "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}",
                               "--host", "127.0.0.1", "--cores", "2", "--memory", "1g",
                               "--webui-port", str(_free_port()), "--work-dir", str(tmp_path / "work")],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.5)
        cli = [sys.executable, "-m", "subzero.cli"]
        store = tmp_path / "cluster"
        ran = subprocess.run(cli + ["run", "demo", "--quick", "--store", str(store), "--master",
                                    f"spark://127.0.0.1:{port}", "--strategy", "crd_a=CompOne"],
                             env=env, capture_output=True, text=True, timeout=300)
        assert ran.returncode == 0, ran.stderr[-2000:]
        query = subprocess.run(cli + ["query", str(store), "backward", "column_total", "--to", "exposure_a",
                                      "--cells", "5", "--json"], env=env, capture_output=True, text=True)
        assert query.returncode == 0, query.stderr
        local = subprocess.run(cli + ["run", "demo", "--quick", "--store", str(tmp_path / "local"),
                                      "--executor", "local", "--strategy", "crd_a=CompOne"],
                               capture_output=True, text=True)
        assert local.returncode == 0, local.stderr
        assert dump_lineage(store) == dump_lineage(tmp_path / "local")
        assert json.loads(query.stdout)["count"] == 48 * 3  # a 3x3 blur: columns 4-6, every row
    finally:
        for proc in (worker, master):
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()

"""NodeStage: one node's execution (bind, run on an executor, agree the shape, manifest)."""

from __future__ import annotations

import numpy as np
import pytest

from subzero import operators as ops
from subzero.catalog import RunRecord
from subzero.errors import WorkflowError
from subzero.executors import LocalExecutor
from subzero.modes import Strategy
from subzero.operator import Operator
from subzero.stage import NodeStage, lineage_metrics
from subzero.store import FileStore
from subzero.store.arrays import write_array


class _Positive(Operator):
    """A whole-array operator whose output shape only running tells."""

    def run(self, ctx, x):
        return x[x > 0]


def _store(tmp_path, x):
    store = FileStore.create(tmp_path / "s", RunRecord(workflow={}, created="now", executor="local"))
    write_array(store.array("x"), x, (4, 4))
    return store


def test_bind_keeps_the_operator_and_plans_tiles_and_chunks(tmp_path):
    x = np.arange(64.0).reshape(8, 8)
    store = _store(tmp_path, x)
    op = ops.GaussianFilter(1.0)
    stage = NodeStage.bind("blur", op, [(8, 8)], [store.array("x")], store, tile_shape=4)
    assert op.output_shape is None and op.input_shapes == ()  # the operator given is left as it was
    assert stage.operator is not op and stage.operator.output_shape == stage.output_shape == (8, 8)
    assert len(stage.tiles) == 4 and stage.chunks == (4, 4)
    task = stage.task((Strategy.parse("Map"), Strategy.parse("FullOne")), write_output=True)
    assert task.strategies == (Strategy.parse("FullOne"),) and task.output_shape == (8, 8)
    with pytest.raises(WorkflowError, match="node 'bad'"):
        NodeStage.bind("bad", ops.Subtract(), [(8, 8), (3, 3)], [store.array("x")] * 2, store)
    store.close()


def test_a_shape_only_running_tells_is_agreed_and_bound_to_a_new_stage(tmp_path):
    x = np.array([[1.0, -1.0], [2.0, 3.0]])
    store = _store(tmp_path, x)
    stage = NodeStage.bind("pos", _Positive(), [(2, 2)], [store.array("x")], store)
    assert stage.output_shape is None and stage.tiles[0].box is None
    done = stage.run(LocalExecutor(threads=1), (), write_output=True)
    assert done.shape == (3,) and done.stage.output_shape == (3,) and done.stage.operator.output_shape == (3,)
    assert stage.output_shape is None and stage.operator.output_shape is None  # nothing shared was changed
    record = done.commit_array()
    assert (record.shape, record.dtype) == ((3,), "float64")
    np.testing.assert_array_equal(store.array("pos").read(((0, 3),)), [1.0, 2.0, 3.0])
    store.close()


def test_a_manifest_keeps_the_previous_shards_of_tiles_that_did_not_run(tmp_path):
    x = np.arange(64.0).reshape(8, 8)
    store = _store(tmp_path, x)
    stage = NodeStage.bind("blur", ops.GaussianFilter(1.0), [(8, 8)], [store.array("x")], store, tile_shape=4)
    full_one = (Strategy.parse("FullOne"),)
    first = stage.run(LocalExecutor(threads=1), full_one, write_output=True)
    old = stage.manifest(full_one, first.metas)
    again = stage.run(LocalExecutor(threads=1), full_one, write_output=True, tiles=[stage.tiles[2]])
    new = stage.manifest(full_one, again.metas, previous=old)
    (name,) = new.shards
    assert [r.tile for r in new.shards[name]] == [0, 1, 2, 3]
    assert [r.name for r in new.shards[name]] == [r.name if r.tile != 2 else again.metas[0].shards[name].name
                                                   for r in old.shards[name]]
    assert lineage_metrics(new)["pairs"][name] == lineage_metrics(old)["pairs"][name]
    store.close()


@pytest.mark.parametrize("group_bytes", [1 << 24, 1])
def test_a_local_stage_writes_one_shard_per_strategy_each_tile_reading_its_own(tmp_path, monkeypatch, group_bytes):
    """In this process the node's tiles share a shard per strategy and run of `worker.SHARED_SHARD_BYTES`
    (`worker.write_pending`): each tile's record reads what that tile alone writes (`run_tile`), and the
    records' bytes add up to the files'."""
    from dataclasses import replace

    from subzero import worker
    from subzero.encoders.codec import slot_ndims
    from subzero.store.shards import ShardReader
    from subzero.worker import run_tile

    monkeypatch.setattr(worker, "SHARED_SHARD_BYTES", group_bytes)
    x = np.arange(64.0).reshape(8, 8)
    store = _store(tmp_path, x)
    stage = NodeStage.bind("blur", ops.GaussianFilter(1.0), [(8, 8)], [store.array("x")], store, tile_shape=4)
    strategies = (Strategy.parse("FullOne"), Strategy.parse("FullMany/forward"))
    done = stage.run(LocalExecutor(threads=2), strategies, write_output=True)
    manifest = stage.manifest(strategies, done.metas)
    ndims = slot_ndims((8, 8), [(8, 8)])
    every = np.array([0, (1 << 64) - 1], np.uint64)
    for s in strategies:
        records = manifest.shards[s.name]
        directory = store.shard_directory("blur", s.name)
        assert len({r.name for r in records}) == (1 if group_bytes > 1 else 4)  # one shard per tile: each its own run
        assert all(r.file_share is not None for r in records)
        on_disk = sum(p.stat().st_size for p in (tmp_path / "s" / directory).iterdir())
        assert lineage_metrics(manifest)["file_bytes"][s.name] == on_disk
        shards = {r.name: r.files for r in records}
        assert sum(r.index_bytes for r in records) == sum(f.size for files in shards.values() for f in files
                                                          if f.suffix != ".mdb")
        alone_task = replace(stage.task(strategies), shard_dirs=((s.name, "alone"),) * 1, strategies=(s,))
        for r in records:
            alone = run_tile(alone_task, stage.tiles[r.tile]).shards[s.name]
            assert alone.file_share is None and (alone.keys, alone.nbytes) == (r.keys, r.nbytes)
            mine = ShardReader(store.location, directory, r, ndims).scan_ranges(every[:1], every[1:])
            want = ShardReader(store.location, "alone", alone, ndims).scan_ranges(every[:1], every[1:])
            assert mine[0].tolist() == want[0].tolist() and mine[1] == want[1]
    store.close()


def test_lineage_past_the_pending_limit_is_written_tile_by_tile(tmp_path, monkeypatch):
    """A process holds at most `worker.PENDING_BYTES` of unwritten lineage: past it a tile writes its own
    shard at once (as on Spark); what was held is released after the stage."""
    from subzero import worker

    store = _store(tmp_path, np.arange(64.0).reshape(8, 8))
    stage = NodeStage.bind("blur", ops.GaussianFilter(1.0), [(8, 8)], [store.array("x")], store, tile_shape=4)
    full_one = (Strategy.parse("FullOne"),)
    monkeypatch.setattr(worker, "PENDING_BYTES", 0)
    records = stage.manifest(full_one, stage.run(LocalExecutor(threads=2), full_one).metas).shards["FullOne/backward"]
    assert len({r.name for r in records}) == 4 and all(r.file_share is None and r.name for r in records)
    assert not worker._pending
    monkeypatch.setattr(worker, "PENDING_BYTES", 1 << 30)
    monkeypatch.setattr(worker, "_write_pending", lambda *args: 1 / 0)  # a failed write holds nothing after
    with pytest.raises(ZeroDivisionError):
        stage.run(LocalExecutor(threads=2), full_one)
    assert not worker._pending
    store.close()


@pytest.mark.parametrize("noisy", [True, False])
def test_outputs_are_compressed_as_their_inputs_suggest(tmp_path, noisy):
    """Float outputs of incompressible float inputs stay uncompressed, every other output is
    zstd; chunks and metadata agree, so the values read back exactly."""
    import subzero as sz

    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 64)) if noisy else np.repeat(np.arange(64.0), 64).reshape(64, 64)
    wf = sz.Workflow("c")
    blur = wf.add(ops.Convolve(np.ones((3, 3)) / 9.0), wf.input("x"), name="blur")
    wf.add(ops.Threshold(0.5), blur, name="mask")
    run = wf.run({"x": x}, store=tmp_path / "c", executor="local", tile_shape=16, keep="all")
    pipelines = {name: run.array(name).layout()[3] for name in ("x", "blur", "mask")}
    assert pipelines == ({"x": "none", "blur": "none", "mask": "zstd"} if noisy else
                         {"x": "zstd", "blur": "zstd", "mask": "zstd"})
    from scipy import ndimage

    np.testing.assert_array_equal(np.asarray(run.output("blur")), ndimage.convolve(x, np.ones((3, 3)) / 9.0))



def test_tiles_rewritten_into_a_committed_array_keep_its_pipeline(tmp_path):
    """A replay re-running some tiles writes them with the committed array's compressor (zstd
    here), not the one the inputs would suggest now (none: x is noise), so chunks and metadata
    agree."""
    from dataclasses import replace

    from subzero.store.arrays import output_compressor, write_array as write

    x = np.random.default_rng(2).normal(size=(8, 8))
    store = FileStore.create(tmp_path / "s", RunRecord(workflow={}, created="now", executor="local"))
    write(replace(store.array("x"), compressor="none"), x, (4, 4))
    replace(store.array("x"), compressor="none").commit((8, 8), "float64", (4, 4))
    stage = NodeStage.bind("blur", ops.GaussianFilter(1.0), [(8, 8)], [store.array("x")], store, tile_shape=4)
    assert output_compressor(stage.inputs) == "auto" and stage.output_ref().compressor == "auto"
    replace(store.array("blur"), compressor="zstd").commit((8, 8), "float64", (4, 4))
    assert stage.output_ref().compressor == "zstd"
    stage.run(LocalExecutor(threads=1), (), write_output=True, tiles=[stage.tiles[1]])
    got = store.array("blur").read(((0, 4), (4, 8)))
    from scipy import ndimage

    np.testing.assert_allclose(got, ndimage.gaussian_filter(x, 1.0)[0:4, 4:8])
    store.close()


def test_bands_merge_a_grid_into_whole_tile_runs_one_per_thread(monkeypatch):
    """A stage held in memory runs as a few bands of whole tiles (chunk-aligned), one per thread,
    more only past `BAND_CELLS`; a box list that is not a full grid is left as it is."""
    from subzero import stage as stage_module
    from subzero.stage import bands
    from subzero.tiling import Tile, tile_grid

    grid = tile_grid((10, 7), (0, 1), 2)
    got = bands(grid, (10, 7), LocalExecutor(threads=2))
    assert [t.box for t in got] == [((0, 6), (0, 7)), ((6, 10), (0, 7))]  # 5 tile rows, split 3 + 2
    assert bands(grid, (10, 7), None) == [Tile(0, ((0, 10), (0, 7)))]
    monkeypatch.setattr(stage_module, "BAND_CELLS", 30)  # 70 cells: at least 3 bands
    assert [t.box[0] for t in bands(grid, (10, 7), None)] == [(0, 4), (4, 8), (8, 10)]
    assert bands(grid[:3], (10, 7), None) == grid[:3]


def test_a_stage_held_in_memory_runs_as_bands_with_the_same_values_and_tile_count(tmp_path):
    """Banded or tile by tile, a traced chain held in memory gives numpy's values; its catalog
    still counts its tiles (queries price re-running them), not its bands."""
    import subzero as sz

    @sz.workflow
    def chain(a, b):
        d = (a - b) / (a + b + 1.0)
        return np.where(d > 0, d * 2.0, np.abs(d))

    rng = np.random.default_rng(3)
    inputs = {"a": rng.random((70, 50)), "b": rng.random((70, 50))}
    from subzero.progress import Reporter

    class Tasks(Reporter):
        started: dict[str, int] = {}

        def node_started(self, name: str, n_tiles: int) -> None:
            self.started[name] = n_tiles

    wf = chain.trace(inputs)
    with sz.config.set(local_threads=2):
        run = wf.run(inputs, store=tmp_path / "s", executor="local", tile_shape=16, progress=Tasks()).wait()
    np.testing.assert_array_equal(np.asarray(run.output(wf.results[0])), chain.fn(**inputs))
    assert max(Tasks.started.values()) == 2 and any("+" in name for name in Tasks.started)  # one fused stage, 2 bands
    for node in wf.nodes:
        if not node.is_input:
            assert run.catalog.nodes[node.name].stats.tiles == 5 * 4, node.name
    cell = [(33, 21)]
    assert {tuple(c) for c in run.backward(wf.results[0], cell, to="a")} == {(33, 21)}

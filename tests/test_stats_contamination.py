"""Contamination counts (subzero/stats/contamination) without a dense array per batch: sparse
pairs per batch merged by cell id give what the dense per-batch bincount gave (the count as it
was computed before), for flags across chunk edges, as sparse pairs, written chunk by chunk into
a Zarr array, in this process and on Spark."""

from __future__ import annotations

import numpy as np
import pytest

import subzero as sz
from subzero import operators as ops
from subzero.modes import Direction
from subzero.stats import contamination_count
from subzero.stats.contamination import merge_counts
from subzero.stats.labelled import LabelledCells, propagate


def dense_reference(run, src: str, flags: np.ndarray, to: str) -> np.ndarray:
    """Every flagged cell carried in one labelled pass, counted by a dense bincount over ``to``."""
    shape, to_shape = tuple(run.shape(src)), tuple(run.shape(to))
    ids = np.flatnonzero(np.asarray(flags).reshape(-1)).astype(np.int64)
    start = LabelledCells(shape, np.arange(len(ids), dtype=np.int64) * int(np.prod(shape)) + ids)
    reached = propagate(run, run.node(src), run.node(to), start, Direction.FORWARD)
    return np.bincount(reached.cells, minlength=int(np.prod(to_shape))).astype(np.int64).reshape(to_shape)


@pytest.fixture(scope="module")
def sky(tmp_path_factory):
    """x -> bias -> (2x2 mean -> upsample) subtracted -> blur -> threshold -> Label on 20 x 26,
    tiles of 6 x 6; flags in every chunk, on chunk edges and in the last partial chunk."""
    wf = sz.Workflow("sky")
    x = wf.input("x")
    bias = wf.add(ops.SubtractScalar(1.0), x, name="bias")
    back = wf.add(ops.Upsample(2), wf.add(ops.Downsample(2, how="mean"), bias, name="mesh"), name="back")
    sub = wf.add(ops.Subtract(), bias, back, name="sub")
    blur = wf.add(ops.Convolve(np.ones((3, 3)) / 9, mode="constant"), sub, name="blur")
    wf.add(ops.Label(), wf.add(ops.Threshold(0.2), blur, name="bright"), name="objects")
    rng = np.random.default_rng(11)
    image = rng.random((20, 26)) * 0.2
    image[4:8, 4:9] += 2.0
    image[13:17, 16:25] += 2.0
    flags = rng.random(image.shape) < 0.08
    flags[5, 5] = flags[6, 6] = flags[11, 11] = flags[12, 12] = flags[19, 25] = True  # chunk edges, last chunk
    root = tmp_path_factory.mktemp("contam")
    run = wf.run({"x": image}, store=root / "run", executor="local", tile_shape=6)
    return run, flags, root


def test_merge_counts_adds_pairs_by_cell():
    ids, counts = merge_counts([(np.array([5, 1]), np.array([1, 2])), (np.array([1, 9]), np.array([3, 1]))])
    assert ids.tolist() == [1, 5, 9] and counts.tolist() == [5, 1, 1]
    empty = merge_counts([])
    assert len(empty[0]) == len(empty[1]) == 0


@pytest.mark.parametrize("batch_cells", [1, 7, None])
def test_dense_and_sparse_counts_are_the_dense_bincounts(sky, batch_cells):
    run, flags, _ = sky
    expected = dense_reference(run, "x", flags, "objects")
    got = contamination_count(run, "x", flags, "objects", batch_cells=batch_cells)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, expected)
    ids, counts = contamination_count(run, "x", flags, "objects", batch_cells=batch_cells, sparse=True)
    np.testing.assert_array_equal(ids, np.flatnonzero(expected))
    np.testing.assert_array_equal(counts, expected.reshape(-1)[ids])


def test_zarr_flags_and_an_out_array_written_chunk_by_chunk(sky, tmp_path):
    import zarr

    run, flags, _ = sky
    lazy = zarr.create_array(str(tmp_path / "flags.zarr"), shape=flags.shape, chunks=(7, 5), dtype=bool)
    lazy[:] = flags
    expected = dense_reference(run, "x", flags, "objects")
    written = run.contamination_count("x", lazy, "objects", batch_cells=5, out=str(tmp_path / "counts.zarr"))
    assert tuple(written.chunks) == tuple(run.output("objects").chunks)
    np.testing.assert_array_equal(np.asarray(written[:]), expected)
    assert not (tmp_path / "counts.zarr" / ".subzero-parts").exists()
    with pytest.raises(sz.LineageError, match="exists already"):
        run.contamination_count("x", lazy, "objects", out=str(tmp_path / "counts.zarr"))
    nothing = run.contamination_count("x", np.zeros(flags.shape, bool), "objects", out=str(tmp_path / "none.zarr"))
    assert not np.asarray(nothing[:]).any()


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(batch_cells=0), "batch_cells"),
    (dict(sparse=True, out="x.zarr"), "not both"),
    (dict(out=3), "path"),
    (dict(executor="gpu"), "executor="),
])
def test_bad_arguments_are_lineage_errors(sky, kwargs, fragment):
    run, flags, _ = sky
    with pytest.raises(sz.LineageError, match=fragment):
        run.contamination_count("x", flags, "objects", **kwargs)
    with pytest.raises(sz.LineageError, match="must cover"):
        run.contamination_count("x", flags[:3], "objects")


def test_on_spark_tasks_read_the_flags_count_and_write_the_chunks(sky, spark, tmp_path):
    import zarr

    run, flags, _ = sky
    lazy = zarr.create_array(str(tmp_path / "flags.zarr"), shape=flags.shape, chunks=(6, 6), dtype=bool)
    lazy[:] = flags
    expected = dense_reference(run, "x", flags, "objects")
    np.testing.assert_array_equal(run.contamination_count("x", lazy, "objects", batch_cells=9, executor="spark"),
                                  expected)
    written = run.contamination_count("x", lazy, "objects", batch_cells=9, executor="spark",
                                      out=str(tmp_path / "counts.zarr"))
    np.testing.assert_array_equal(np.asarray(written[:]), expected)

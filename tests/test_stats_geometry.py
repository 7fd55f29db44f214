"""Objects read chunk by chunk (subzero/stats/geometry): partial geometry merged by label and
batches that read their own cells give the table the whole-array computation gives (the
label array's cells all held at once, as `lineage_table` did before), row for row and value
for value, for objects across chunk edges, float labels, empty arrays, 1-D and 3-D arrays,
Zarr flags/labels, in this process and on Spark."""

from __future__ import annotations

import numpy as np
import pytest

import subzero as sz
from subzero import operators as ops
from subzero.modes import Direction
from subzero.stats.geometry import Geometry, batch_cells, block_geometry, chunk_blocks, plan_batches
from subzero.stats.labelled import LabelledCells, propagate


def reference_table(run, node, over, flags=None, values=None, objects=None) -> dict[str, np.ndarray]:
    """The table from the whole label array at once: every labelled cell, its object, the
    geometry by ``bincount`` over all cells, one labelled pass of every object."""
    labels = np.asarray(objects if objects is not None else run.output(node))
    shape = labels.shape
    flat = labels.reshape(-1)
    cells = np.flatnonzero(flat).astype(np.int64)
    label_ids, index = np.unique(flat[cells].astype(np.int64), return_inverse=True)
    index = index.reshape(-1)
    n = len(label_ids)
    coords = np.stack(np.unravel_index(cells, shape), axis=1)
    area = np.bincount(index, minlength=n)
    names = ["r", "c"] if len(shape) == 2 else (["i"] if len(shape) == 1 else [f"a{k}" for k in range(len(shape))])
    out: dict[str, np.ndarray] = {"label": label_ids, "area": area}
    for axis, name in enumerate(names):
        lo, hi = np.full(n, np.iinfo(np.int64).max), np.full(n, -1)
        np.minimum.at(lo, index, coords[:, axis])
        np.maximum.at(hi, index, coords[:, axis] + 1)
        out[f"bbox_{name}0"], out[f"bbox_{name}1"] = lo, hi
    for axis, name in enumerate(names):
        out[f"centroid_{name}"] = np.bincount(index, coords[:, axis], minlength=n) / np.maximum(area, 1)
    reached = propagate(run, run.node(node), run.node(over), LabelledCells.of(index, cells, shape), Direction.BACKWARD)
    lab, cell = reached.labels, reached.cells
    out["n_lineage"] = n_lineage = np.bincount(lab, minlength=n)
    if flags is not None:
        f = np.asarray(run.output(flags) if isinstance(flags, str) else flags).reshape(-1)
        out["n_flagged"] = np.bincount(lab, weights=f[cell] != 0, minlength=n).astype(np.int64)
        out["flagged_fraction"] = np.divide(out["n_flagged"], n_lineage, out=np.zeros(n), where=n_lineage > 0)
    if values is not None:
        v = np.asarray(run.output(values) if isinstance(values, str) else values).reshape(-1)[cell].astype(np.float64)
        total = np.bincount(lab, weights=v, minlength=n).astype(np.float64)
        vmax = np.full(n, np.nan)
        if len(cell):
            starts = np.flatnonzero(np.r_[True, lab[1:] != lab[:-1]])
            vmax[lab[starts]] = np.maximum.reduceat(v, starts)
        out["values_sum"], out["values_max"] = total, vmax
        out["values_mean"] = np.divide(total, n_lineage, out=np.full(n, np.nan), where=n_lineage > 0)
    return out


def assert_same(table, reference: dict[str, np.ndarray]) -> None:
    assert sorted(table.colnames) == sorted(reference)
    for name, want in reference.items():
        got = np.asarray(table[name])
        assert got.dtype.kind == np.asarray(want).dtype.kind, name
        np.testing.assert_array_equal(got, want, err_msg=name)  # exact: same values, same order


@pytest.fixture(scope="module")
def blobs(tmp_path_factory):
    """x -> blur -> bright -> Label on 20 x 26 with tiles of 6 x 6: blobs across chunk edges
    (one crossing four chunks), a one-cell object in the last partial chunk."""
    wf = sz.Workflow("blobs")
    x = wf.input("x")
    blur = wf.add(ops.Convolve(np.ones((3, 3)) / 9, mode="constant"), x, name="blur")
    bright = wf.add(ops.Threshold(0.5), blur, name="bright")
    wf.add(ops.Label(), bright, name="objects")
    rng = np.random.default_rng(7)
    image = np.zeros((20, 26))
    image[4:8, 4:9] = 1.0      # across a row edge and a column edge of the 6 x 6 chunks
    image[10:15, 1:3] = 1.0
    image[13:17, 16:25] = 1.0
    image[19, 25] = 30.0
    image += rng.random(image.shape) * 0.1
    root = tmp_path_factory.mktemp("blobs")
    run = wf.run({"x": image}, store=root / "run", executor="local", tile_shape=6)
    return run, image, root


def test_partial_geometry_merged_by_label_is_the_whole_arrays(blobs):
    run, _, _ = blobs
    labels = run.output("objects")
    whole = np.asarray(labels)
    cells = np.flatnonzero(whole)
    everything = Geometry.of_cells(whole.reshape(-1)[cells].astype(np.int64),
                                   np.stack(np.unravel_index(cells, whole.shape), axis=1), cells)
    for blocks in (1, 3, 100):
        parts = [block_geometry(labels, b) for b in chunk_blocks(whole.shape, labels.chunks, blocks)]
        merged = Geometry.merge(parts, 2)
        for name in ("labels", "area", "lo", "hi", "sums"):
            np.testing.assert_array_equal(getattr(merged, name), getattr(everything, name))
    assert len(chunk_blocks(whole.shape, labels.chunks, 100)) == 4 * 5  # one chunk each, no more
    assert len(everything) >= 4 and not merged.fractional and not merged.negative


@pytest.mark.parametrize("batch_objects", [1, 2, None])
def test_batches_read_exactly_their_objects_cells(blobs, batch_objects):
    run, _, _ = blobs
    labels = run.output("objects")
    whole = np.asarray(labels)
    geometry = Geometry.merge([block_geometry(labels, b) for b in chunk_blocks(whole.shape, labels.chunks, 4)], 2)
    batches = plan_batches(geometry, whole.shape, labels.chunks, batch_objects)
    assert np.array_equal(np.sort(np.concatenate([b.objects for b in batches])), np.arange(len(geometry)))
    assert max(len(b.chunks) for b in batches) >= 4  # an object across a corner of four chunks
    for batch in batches:
        local, cells = batch_cells(labels, batch)
        for k, label in enumerate(batch.labels):
            np.testing.assert_array_equal(np.sort(cells[local == k]), np.flatnonzero(whole == label))


def test_the_table_is_the_whole_arrays_table(blobs, tmp_path):
    import zarr

    run, image, _ = blobs
    flags = image > 0.5
    reference = reference_table(run, "objects", "x", flags=flags, values="x")
    for batch_objects in (1, 3, None):
        assert_same(run.lineage_table("objects", over="x", flags=flags, values="x", batch_objects=batch_objects),
                    reference)
    # flags, values and labels as Zarr arrays (other chunks than the store's), read where needed
    z = {name: zarr.create_array(str(tmp_path / f"{name}.zarr"), shape=a.shape, chunks=(7, 5), dtype=a.dtype)
         for name, a in (("flags", flags), ("values", image), ("labels", np.asarray(run.output("objects"))))}
    z["flags"][:], z["values"][:], z["labels"][:] = flags, image, np.asarray(run.output("objects"))
    table = run.lineage_table("objects", over="x", flags=z["flags"], values=z["values"], objects=z["labels"],
                              batch_objects=2)
    assert_same(table, reference)
    assert table.meta["flags"] == "array" and table.meta["batches"] == -(-len(table) // 2)
    with pytest.raises(sz.LineageError, match="flags= has shape"):
        run.lineage_table("objects", over="x", flags=zarr.zeros((3, 3), store=str(tmp_path / "bad.zarr")))


def test_float_labels_empty_arrays_and_bad_labels(blobs):
    run, image, _ = blobs
    labels = np.asarray(run.output("objects"))
    as_float = labels.astype(np.float32)
    assert_same(run.lineage_table("objects", over="x", objects=as_float, values=image, batch_objects=2),
                reference_table(run, "objects", "x", values=image, objects=as_float))
    empty = run.lineage_table("objects", over="x", objects=np.zeros_like(labels), flags=image > 0.5)
    assert len(empty) == 0 and empty.meta["batches"] == 0
    assert_same(empty, reference_table(run, "objects", "x", flags=image > 0.5, objects=np.zeros_like(labels)))
    half = as_float.copy()
    half[half > 0] += 0.5
    with pytest.raises(sz.LineageError, match="float32 values, not object labels"):
        run.lineage_table("objects", over="x", objects=half)
    with pytest.raises(sz.LineageError, match="negative labels"):
        run.lineage_table("objects", over="x", objects=-labels)


@pytest.mark.parametrize("shape, tile", [((31,), 7), ((6, 7, 8), 3)])
def test_one_and_three_dimensional_labels(tmp_path, shape, tile):
    rng = np.random.default_rng(len(shape))
    wf = sz.Workflow("nd")
    x = wf.input("x")
    wf.add(ops.GaussianFilter(0.7, mode="nearest"), wf.add(ops.SubtractScalar(1.0), x, name="b"), name="g")
    data = rng.random(shape)
    run = wf.run({"x": data}, store=tmp_path / "run", executor="local", tile_shape=tile)
    objects = (rng.random(shape) < 0.4) * rng.integers(1, 6, shape)
    flags = rng.random(shape) < 0.2
    assert_same(run.lineage_table("g", over="x", objects=objects, flags=flags, values="x", batch_objects=2),
                reference_table(run, "g", "x", flags=flags, values="x", objects=objects))


def test_on_spark_the_tasks_read_labels_flags_and_values(blobs, spark, tmp_path):
    import zarr

    run, image, _ = blobs
    flags = zarr.create_array(str(tmp_path / "flags.zarr"), shape=image.shape, chunks=(8, 8), dtype=bool)
    flags[:] = image > 0.5
    reference = reference_table(run, "objects", "x", flags=image > 0.5, values="x")
    table = run.lineage_table("objects", over="x", flags=flags, values="x", batch_objects=2, executor="spark")
    assert table.meta["executor"] == "spark"
    assert_same(table, reference)
    labels = np.asarray(run.output("objects"))  # in memory: each batch carries its cells
    assert_same(run.lineage_table("objects", over="x", objects=labels, flags=image > 0.5, values="x", batch_objects=3,
                                  executor="spark"), reference)

"""The CellPairs baseline: every cell pair in Parquet, its size estimate and its answers."""

from __future__ import annotations

import numpy as np

import subzero as sz
from subzero import operators as ops
from subzero_bench.cellpairs import CellPairs, estimate_cellpairs, write_cellpairs


def small_run(tmp_path):
    wf = sz.Workflow("cp")
    x = wf.input("x")
    blur = wf.add(ops.Convolve(np.ones((3, 3)), mode="constant"), x, name="blur")
    wf.add(ops.Transpose(), blur, name="t")
    x0 = np.random.default_rng(0).normal(size=(12, 12))
    return wf.run({"x": x0}, store=tmp_path / "s", executor="local", tile_shape=4)


def test_the_estimate_is_close_to_the_pairs_written(tmp_path):
    run = small_run(tmp_path)
    rows = write_cellpairs(run, tmp_path / "pairs")
    # blur: 9 pairs per cell inside, fewer at the border (the estimate scales a corner tile); t: one each
    assert rows == {"blur.0": 100 * 9 + 40 * 6 + 4 * 4, "t.0": 144}
    assert 0.6 * sum(rows.values()) <= estimate_cellpairs(run) <= 1.2 * sum(rows.values())


def test_cellpairs_answer_like_the_run(tmp_path):
    run = small_run(tmp_path)
    write_cellpairs(run, tmp_path / "pairs")
    pairs = CellPairs(run, tmp_path / "pairs")
    for cells in ([[0, 0]], [[5, 7], [11, 11]]):
        np.testing.assert_array_equal(pairs.backward("t", cells, "x"), run.backward("t", cells, to="x"))
        np.testing.assert_array_equal(pairs.forward("x", cells, "t"), run.forward("x", cells, to="t"))

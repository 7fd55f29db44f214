"""The runtime inside a task: modes per call, derived FULL lineage, tracing, payload expansion."""

from __future__ import annotations

import numpy as np

from subzero import operators as ops
from subzero.modes import Mode
from subzero.pairs import PayloadPairs
from subzero.frontier import Frontier
from subzero.runtime import NodeTask, derived_full, expand_payloads, modes_for, run_tile, trace_tile
from subzero.store import ArrayRef, resolve
from subzero.store.arrays import write_array
from subzero.tiling import Tile


def bound(op, *shapes):
    op.input_shapes = tuple(shapes)
    op.output_shape = op.infer_output_shape(op.input_shapes)
    return op


def saved(tmp_path, name, array) -> ArrayRef:
    ref = ArrayRef(resolve(tmp_path), f"arrays/{name}")
    write_array(ref, array)
    return ref


def test_modes_for_splits_payload_modes_into_separate_calls():
    assert modes_for(["Map", "BlackBox"]) == [frozenset()]
    assert modes_for(["FullOne", "CompOne"]) == [frozenset({Mode.FULL, Mode.COMP})]
    assert modes_for(["PayOne", "CompMany", "FullMany/forward"]) == [
        frozenset({Mode.PAY, Mode.FULL}), frozenset({Mode.COMP})]


def test_derived_full_pairs_match_the_mapping_function():
    op = bound(ops.Convolve(np.ones((3, 3)), mode="constant"), (5, 6))
    pairs = derived_full(op, ((1, 3), (0, 6)))
    assert pairs.n_pairs == 12
    for k, out in enumerate(pairs.out_ids.tolist()):
        cell = np.array([np.unravel_index(out, (5, 6))])
        expected = np.ravel_multi_index(tuple(op.map_b(cell, 0).T), (5, 6))
        got = pairs.in_ids[0][pairs.in_ptr[0][k]:pairs.in_ptr[0][k + 1]]
        assert sorted(got.tolist()) == sorted(expected.tolist())


def test_run_tile_trims_the_halo_and_encodes_each_strategy(tmp_path):
    x = np.arange(36.0).reshape(6, 6)
    op = bound(ops.Convolve(np.ones((3, 3)), mode="reflect"), (6, 6))
    location = resolve(tmp_path)
    out = ArrayRef(location, "arrays/blur")
    strategies = ("FullOne/backward", "FullMany/forward", "Map")
    task = NodeTask("blur", op, (saved(tmp_path, "x", x),), strategies, output=out, chunks=(3, 3),
                    location=location, shard_dirs=tuple((s, f"lineage/{s.replace('/', '-')}") for s in strategies))
    meta = run_tile(task, Tile(3, ((3, 6), (0, 3))))
    from scipy import ndimage

    out.commit((6, 6), meta.dtype, meta.chunks)
    np.testing.assert_allclose(out.read(((3, 6), (0, 3))),
                               ndimage.convolve(x, np.ones((3, 3)), mode="reflect")[3:6, 0:3])
    assert set(meta.shards) == {"FullOne/backward", "FullMany/forward"}  # Map stores nothing
    record = meta.shards["FullOne/backward"]
    assert (record.pairs, record.out_cells) == (9, 9) and record.tile == 3
    assert all((tmp_path / "lineage" / "FullOne-backward" / (record.name + f.suffix)).stat().st_size == f.size
               for f in record.files)
    assert meta.shards["FullMany/forward"].index_bytes > 0  # its R-tree on the input cells


def test_trace_tile_of_a_composite_operator_is_default_plus_overrides(tmp_path):
    x = np.zeros((7, 7))
    x[3, 3] = 500.0
    op = bound(ops.CosmicRayDetect(threshold=200.0, radius=1), (7, 7))  # 500 < 4 x 200: radius 1
    task = NodeTask("crd", op, (saved(tmp_path, "x", x),), ())
    pairs = trace_tile(task, Tile(0, ((0, 7), (0, 7))))
    flagged = Frontier.of_coords(np.array([[3, 3]]), (7, 7))
    assert sorted(pairs.backward(flagged, 0).tolist()) == sorted(
        np.ravel_multi_index((r, c), (7, 7)) for r in (2, 3, 4) for c in (2, 3, 4))
    clean = Frontier.of_coords(np.array([[0, 0]]), (7, 7))  # a clean pixel: the default, its 3x3 detection window
    assert sorted(pairs.backward(clean, 0).tolist()) == [0, 1, 7, 8]  # (clipped)


def test_expand_payloads_calls_map_p_once_per_distinct_payload():
    op = bound(ops.CosmicRayDetect(radius=1), (5, 5))
    pay = PayloadPairs(np.array([0, 12, 24]), np.array([0, 1, 2, 3]), [b"\x01", b"\x00", b"\x01"])
    full = expand_payloads(op, pay)
    sizes = {int(o): int(n) for o, n in zip(full.out_ids, np.diff(full.in_ptr[0]))}
    assert sizes == {0: 4, 12: 9, 24: 4}  # payload 0: the default 3x3 window

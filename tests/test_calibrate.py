"""Calibration on sample tiles predicts what the real run stores."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest

import subzero as sz
from subzero import operators as ops
from subzero.executors import LocalExecutor
from subzero.modes import Mode, Strategy
from subzero.tiling import tile_grid
from subzero.worker import NodeTask
from subzero.optimizer.calibrate import profile_node
from subzero.strategies import supported_strategies


def node_tiles(op, tile_shape):
    """The tiles of a bound operator's output."""
    return tile_grid(op.output_shape, op.effective_tiling().split_axes(op), tile_shape)


def test_profile_scales_sample_tiles_to_the_node(tmp_path):
    wf = sz.Workflow("c")
    x = wf.input("x")
    wf.add(ops.Convolve(np.ones((3, 3)), mode="constant"), x, name="blur")
    names = ["FullOne/backward", "FullMany/backward", "FullOne/forward"]
    run = wf.run({"x": np.ones((40, 40))}, store=tmp_path / "c", executor="local", tile_shape=10,
                 strategies={"blur": names})
    node = run.node("blur")
    tiles = node_tiles(node.operator, 10)
    op = node.operator
    task = NodeTask("blur", op, (run.store.array("x"),), op.input_shapes, op.output_shape)
    profile = profile_node(task, tiles, supported_strategies(op), op_seconds=0.01, runner=LocalExecutor())
    assert profile.tiles == 16 and profile.mapping and not profile.all_to_all
    assert profile.fan_backward == pytest.approx(9, rel=0.15) and profile.fan_forward == pytest.approx(9, rel=0.35)  # halo cells of sampled tiles
    measured = run.catalog.nodes["blur"].stats.bytes
    for name in names:
        # the R-tree part is an upper bound (budgets rely on it), so within 2x
        assert measured[name] / 2 <= profile.strategies[name].bytes <= 2 * measured[name]
        assert profile.strategies[name].pairs == pytest.approx(1600, rel=0.05)


def test_sample_tiles_are_measured_by_the_executors_tasks(spark, tmp_path):
    """Calibration runs as tasks (here Spark's) that send back measurements only; the profile
    equals the one measured in this process."""
    from subzero.executors import LocalExecutor
    from subzero.executors.spark import SparkExecutor

    wf = sz.Workflow("c")
    x = wf.input("x")
    wf.add(ops.CosmicRayDetect(threshold=5.0, radius=1), x, name="crd")
    image = np.random.default_rng(1).normal(size=(40, 40))
    image[5, 5] = image[25, 30] = image[0, 12] = 100.0  # cosmic rays in the sampled tiles
    run = wf.run({"x": image}, store=tmp_path / "c", executor="local", tile_shape=10)
    node = run.node("crd")
    op = node.operator
    task = NodeTask("crd", op, (run.store.array("x"),), op.input_shapes, op.output_shape)
    names = ["FullOne/backward", "FullRange", "CompOne/backward", "PayMany/backward"]
    here = profile_node(task, node_tiles(node.operator, 10), names, op_seconds=0.01, runner=LocalExecutor(threads=1))
    there = profile_node(task, node_tiles(node.operator, 10), names, op_seconds=0.01, runner=SparkExecutor(spark))
    for name in names:
        assert there.strategies[name].bytes == pytest.approx(here.strategies[name].bytes)
        assert there.strategies[name].pairs == here.strategies[name].pairs > 0
    assert there.fan_backward == pytest.approx(here.fan_backward)


@pytest.mark.parametrize("make, shape", [
    (lambda: ops.Convolve(np.ones((3, 3)), mode="constant"), (12, 9)),
    (lambda: ops.Downsample((4, 3), how="mean"), (12, 9)),
    (lambda: ops.Downsample((12, 9), how="mean"), (12, 9)),   # one out cell reads the whole input
    (lambda: ops.Transpose(), (7, 5)),
])
def test_mapping_fans_count_what_the_derived_pairs_hold(make, shape):
    """The fans of a mapping node, counted from ``map_b_pairs``, equal those of its
    derived FULL pairs: input cells per output cell, output cells per distinct input cell."""
    from subzero.optimizer.calibrate import mapping_fans
    from subzero.worker import derived_full

    op = make()
    op.input_shapes = (shape,)
    op.output_shape = op.infer_output_shape(op.input_shapes)
    box = tuple((0, min(n, 4)) for n in op.output_shape)
    pairs = derived_full(op, box)
    links = sum(len(ids) for ids in pairs.in_ids)
    back, forward = mapping_fans(op, box)
    assert back == pytest.approx(max(links / pairs.n_pairs, 1.0))
    assert forward == pytest.approx(max(links / len(np.unique(pairs.in_ids[0])), 1.0))


@pytest.mark.parametrize("size", [10, 1 << 30])
def test_distinct_count_by_bitmap_or_sort(size):
    from subzero.optimizer.calibrate import distinct_count

    ids = np.random.default_rng(1).integers(0, min(size, 1000), 500) * (size // min(size, 1000))
    assert distinct_count(ids, size) == len(np.unique(ids))
    assert distinct_count(ids[:0], size) == 0


def _crd_run(tmp_path, seed: int, side: int, spikes, tile_shape: int):
    """A local run of one CosmicRayDetect over Gaussian noise with spikes of 100 at ``spikes``."""
    wf = sz.Workflow("c")
    wf.add(ops.CosmicRayDetect(threshold=5.0, radius=1), wf.input("x"), name="crd")
    image = np.random.default_rng(seed).normal(size=(side, side))
    for cell in spikes:
        image[cell] = 100.0
    return wf.run({"x": image}, store=tmp_path / "c", executor="local", tile_shape=tile_shape)


def test_a_node_of_one_tile_is_measured_by_two_tasks_like_one(tmp_path):
    """A whole-array node's FULL and payload strategies are measured by two tasks at once;
    the profile is the one a single task measures."""
    from subzero.executors import LocalExecutor
    from subzero.optimizer.calibrate import profile_tile

    run = _crd_run(tmp_path, seed=2, side=30, spikes=((5, 5), (20, 12)), tile_shape=30)
    node = run.node("crd")
    tiles = node_tiles(node.operator, 30)
    assert len(tiles) == 1
    op = node.operator
    task = NodeTask("crd", op, (run.store.array("x"),), op.input_shapes, op.output_shape)
    names = ["FullOne/backward", "FullMany/forward", "FullRange", "CompOne/backward", "PayOne/backward",
             "PayMany/backward"]
    split = profile_node(task, tiles, names, op_seconds=0.01, runner=LocalExecutor(threads=2))
    whole = profile_tile(NodeTask("crd", op, task.inputs, op.input_shapes, op.output_shape,
                                  tuple(Strategy.parse(n) for n in names)), tiles[0])
    for name in names:
        nbytes, _, pairs, outs, ins, keys, _ = whole.strategies[name]
        got = split.strategies[name]
        assert (got.pairs, got.out_cells, got.in_cells) == (pairs, outs, ins), name
        if name != "FullRange":  # FullRange keeps its merged inline table
            assert got.keys == pytest.approx(keys) and got.bytes >= nbytes, name
    assert split.fan_backward == pytest.approx(max(whole.links / whole.fanout, 1.0))
    assert split.fan_forward == pytest.approx(max(whole.links / whole.distinct_in, 1.0))
    assert split.trace_seconds > 0


def test_windows_cut_one_pass_tiles_to_a_few_percent_and_keep_two_pass_tiles():
    """Calibration measures windows of the sample tiles (about 2% of the node, each at least
    `MIN_SAMPLE_CELLS`) when tiles may be any box, and whole tiles otherwise."""
    from subzero.optimizer.calibrate import MIN_SAMPLE_CELLS, sample_tiles, sample_windows

    shape = (2000, 4000)
    conv = ops.Convolve(np.ones((3, 3)))
    conv = conv.bound((shape,), shape)
    tiles = node_tiles(conv, 500)
    windows = sample_windows(conv, tiles)
    chosen = sample_tiles(tiles)
    assert [w.index for w in windows] == [t.index for t in chosen]
    for w, t in zip(windows, chosen):
        assert all(tlo <= lo < hi <= thi for (lo, hi), (tlo, thi) in zip(w.box, t.box))
        assert MIN_SAMPLE_CELLS <= np.prod([hi - lo for lo, hi in w.box]) < 1.1 * 0.02 * 2000 * 4000 / 2
    label = ops.Label().bound((shape,), shape)
    assert sample_windows(label, node_tiles(label, 500)) == sample_tiles(node_tiles(label, 500))  # two passes


def test_the_profile_is_the_same_from_run_to_run(tmp_path):
    """Capture costs are predicted from what is stored, not timed: two calibrations of the
    same node give the same profile (so the same plan), whatever the load."""
    run = _crd_run(tmp_path, seed=1, side=40, spikes=((5, 5), (25, 30)), tile_shape=10)
    node = run.node("crd")
    op = node.operator
    task = NodeTask("crd", op, (run.store.array("x"),), op.input_shapes, op.output_shape)
    names = supported_strategies(op)
    first, second = (profile_node(task, node_tiles(op, 10), names, op_seconds=0.01, runner=LocalExecutor())
                     for _ in range(2))
    assert first.to_dict() == second.to_dict()
    full, comp = first.strategies["FullOne/backward"], first.strategies["CompOne/backward"]
    assert full.encode_seconds > comp.encode_seconds > 0  # a FULL strategy makes every cell's pairs


def test_a_crop_reads_a_centred_window_as_a_whole_array(tmp_path):
    from subzero.optimizer.calibrate import CroppedInput, crop_box

    assert crop_box((100, 100)) is None  # small enough to measure whole
    box = crop_box((600, 400), fraction=0.05, min_cells=1000)
    lens = [hi - lo for lo, hi in box]
    assert 0.04 <= np.prod(lens) / (600 * 400) <= 0.06 and lens[0] / lens[1] == pytest.approx(1.5, rel=0.02)
    assert [lo for lo, _ in box] == [(600 - lens[0]) // 2, (400 - lens[1]) // 2]
    values = np.arange(600 * 400, dtype=np.float64).reshape(600, 400)
    wf = sz.Workflow("c")
    wf.add(ops.Negate() if hasattr(ops, "Negate") else ops.MultiplyScalar(-1.0), wf.input("x"), name="y")
    run = wf.run({"x": values}, store=tmp_path / "c", executor="local")
    crop = CroppedInput(run.store.array("x"), tuple(lo for lo, _ in box))
    np.testing.assert_array_equal(crop.read(((0, 5), (2, 7))), values[box[0][0]:box[0][0] + 5, box[1][0] + 2:box[1][0] + 7])


def test_before_the_node_runs_its_operator_time_is_estimated_from_the_sample(tmp_path):
    """``op_seconds=None`` (a one-pass run plans a node before computing it): the profile is a
    one-pass one and its operator time comes from the sample windows run without lineage."""
    wf = sz.Workflow("c")
    x = wf.input("x")
    wf.add(ops.CosmicRayDetect(threshold=5.0, radius=1), x, name="crd")
    image = np.random.default_rng(1).normal(size=(40, 40))
    run = wf.run({"x": image}, store=tmp_path / "c", executor="local", tile_shape=10)
    op = run.node("crd").operator
    task = NodeTask("crd", op, (run.store.array("x"),), op.input_shapes, op.output_shape)
    names = supported_strategies(op)
    before = profile_node(task, node_tiles(op, 10), names, op_seconds=None, runner=LocalExecutor())
    after = profile_node(task, node_tiles(op, 10), names, op_seconds=0.01, runner=LocalExecutor())
    assert before.one_pass and not after.one_pass and before.op_seconds > 0 and after.op_seconds == 0.01
    assert {k: v for k, v in before.to_dict().items() if k not in ("op_seconds", "one_pass")} == \
        {k: v for k, v in after.to_dict().items() if k not in ("op_seconds", "one_pass")}


def test_a_candidate_whose_capture_alone_exceeds_the_limit_is_not_encoded(tmp_path):
    """A `CaptureLimit` skips encoding what the integer program would prune (a capture over the
    runtime budget left): the others' profiles are unchanged, pinned ones are always kept."""
    from subzero.optimizer.calibrate import CaptureLimit

    run = _crd_run(tmp_path, seed=1, side=40, spikes=((5, 5), (25, 30)), tile_shape=10)
    op = run.node("crd").operator
    task = NodeTask("crd", op, (run.store.array("x"),), op.input_shapes, op.output_shape)
    names = supported_strategies(op)

    def profile(limit):
        return profile_node(task, node_tiles(op, 10), names, op_seconds=0.01, runner=LocalExecutor(), limit=limit)

    free = profile(None)
    assert not free.skipped and profile(CaptureLimit(1e9, 0.0, 0.0)).to_dict() == free.to_dict()
    stored = {n for n in names if Strategy.parse(n).stored}
    none_left = profile(CaptureLimit(0.0, 0.0, 0.0, keep=("FullMany/backward",)))
    assert set(none_left.strategies) == {"FullMany/backward"} and set(none_left.skipped) == stored - {"FullMany/backward"}
    assert none_left.strategies["FullMany/backward"] == free.strategies["FullMany/backward"]
    assert "exceeds the runtime budget left" in none_left.skipped["FullOne/backward"]
    cheap = max(free.strategies[n].encode_seconds for n in stored if n.startswith("Comp"))
    dear = min(free.strategies[n].encode_seconds for n in stored if not n.startswith("Comp"))
    assert cheap < dear / 2  # a payload per flagged cell (COMP) against one per cell (PAY) or every pair (FULL)
    between = profile(CaptureLimit((cheap + dear) / 2, 0.0, 0.0))
    assert set(between.skipped) == {n for n in stored if not n.startswith("Comp")}
    assert between.strategies == {n: free.strategies[n] for n in between.strategies}
    # the operator's time counts LIMIT_MARGIN times as the sample measured it: a budget of 1000 s per second keeps all
    assert not profile(CaptureLimit(0.0, 1e3, 0.0)).skipped


def test_a_run_names_the_candidates_calibration_did_not_encode(tmp_path):
    """A one-pass run under a tight runtime budget: FULL candidates over it are not calibrated,
    the node's record says why (as the integer program's own pruning does), the plan is the same."""
    wf = sz.Workflow("c")
    wf.add(ops.CosmicRayDetect(threshold=5.0, radius=1), wf.input("x"), name="crd")
    image = np.random.default_rng(1).normal(size=(200, 200))
    image[50, 50] = image[120, 130] = 100.0
    workload = [{"node": "crd", "direction": "backward", "cells": [[50, 50]], "to": "x"}]
    run = wf.run({"x": image}, store=tmp_path / "c", executor="local", tile_shape=50, workload=workload,
                 max_runtime="1.05x")
    record = run.catalog.nodes["crd"]
    assert any("not calibrated" in why for why in record.pruned.values())
    assert not any(n in record.profile["strategies"] for n in record.profile["skipped"])
    assert all(Strategy.parse(s).mode.name != "FULL" for s in record.strategies)
    got = run.backward("crd", cells=[(50, 50)], to="x")
    assert len(got) > 1 and sorted(map(tuple, np.asarray(got).tolist())) == \
        sorted(map(tuple, np.asarray(run.backward("crd", cells=[(50, 50)], to="x", using={"crd": "BlackBox"})).tolist()))


def test_fans_are_measured_on_a_quarter_when_no_full_candidate_can_be_chosen(tmp_path):
    """When the limit rules out every FULL candidate, a sample window runs without FULL lineage
    and its fans come from a centred quarter of it (close to the whole window's); a pinned FULL
    candidate keeps the whole window's measurement."""
    from subzero.optimizer.calibrate import CaptureLimit, fans_window, sample_windows

    spikes = tuple((r, c) for r in range(20, 400, 37) for c in range(15, 400, 41))
    run = _crd_run(tmp_path, seed=3, side=400, spikes=spikes, tile_shape=200)
    op = run.node("crd").operator
    task = NodeTask("crd", op, (run.store.array("x"),), op.input_shapes, op.output_shape)
    tiles = node_tiles(op, 200)
    windows = sample_windows(op, tiles)
    assert all(fans_window(op, w) is not None for w in windows)
    assert fans_window(op, windows[0]).box == tuple((lo + (hi - lo) // 4, hi - (hi - lo) // 4) for lo, hi in windows[0].box)
    names = supported_strategies(op)

    def profile(limit):
        return profile_node(task, tiles, names, op_seconds=None, runner=LocalExecutor(), limit=limit)

    free = profile(None)
    stored = {n for n in names if Strategy.parse(n).stored}
    cheap = max(free.strategies[n].encode_seconds for n in stored if n.startswith("Comp"))
    dear = min(free.strategies[n].encode_seconds for n in stored if n.startswith("Full"))
    quarter = profile(CaptureLimit((cheap + dear) / 2, 0.0, 0.0))
    assert {n for n in stored if n.startswith("Full")} <= set(quarter.skipped)
    assert quarter.fan_backward == pytest.approx(free.fan_backward, rel=0.05)
    assert quarter.fan_forward == pytest.approx(free.fan_forward, rel=0.15)
    assert quarter.trace_seconds == pytest.approx(free.trace_seconds, rel=0.1)
    for name in quarter.strategies:
        assert quarter.strategies[name] == free.strategies[name]
    pinned = profile(CaptureLimit((cheap + dear) / 2, 0.0, 0.0, keep=("FullOne/backward",)))
    assert pinned.strategies["FullOne/backward"] == free.strategies["FullOne/backward"]
    assert (pinned.fan_backward, pinned.fan_forward, pinned.trace_seconds) == \
        (free.fan_backward, free.fan_forward, free.trace_seconds)


def test_a_wide_mapping_counts_its_fans_on_a_smaller_corner():
    """`fans_corner` keeps the 32-cell corner of a pointwise mapping and cuts a wide window's
    corner so that its links stay under the bound; the fans it gives stay the window's."""
    from subzero.optimizer.calibrate import fans_corner, mapping_fans

    box = ((0, 200), (0, 200))
    point = ops.MultiplyScalar(2.0).bound(((200, 200),), (200, 200))
    assert fans_corner(point, box) == ((0, 32), (0, 32))
    wide = ops.Convolve(np.ones((41, 41)), mode="constant").bound(((200, 200),), (200, 200))
    corner = fans_corner(wide, box, max_links=20_000)
    side = corner[0][1]
    assert corner == ((0, side), (0, side)) and 1 <= side < 32
    links = len(wide.map_b_pairs(np.array([[r, c] for r in range(side) for c in range(side)]), 0)[0])
    assert links <= 20_000 * 1.5
    back, _ = mapping_fans(wide, corner)
    assert 21 * 21 <= back <= 41 * 41  # a clipped window at the array's corner


def test_a_kept_profile_is_recalled_only_while_what_it_skipped_stays_over_the_limit():
    """`recall` gives back what `remember` kept (a copy), with the operator time a node computed
    first measured; a profile that skipped a candidate is not recalled under a looser limit (nor
    without one), under which calibrating now would encode it."""
    from subzero.optimizer.calibrate import CaptureLimit, forget, recall, remember, reuse_key
    from subzero.optimizer.cost_model import NodeProfile, StrategyProfile

    forget()
    key, other = reuse_key(["op:a", [10, 10], ["CompOne/backward"]]), reuse_key(["op:b", [10, 10], []])
    kept = NodeProfile("n", op_seconds=1.0, one_pass=False, strategies={"CompOne/backward": StrategyProfile(bytes=10.0)},
                       skipped={"FullRange": "over"}, skipped_at={"FullRange": [3.0, 1.0]})
    remember(key, kept)
    kept.strategies.clear()  # the kept copy is the caller's no longer
    tight, near, loose = (CaptureLimit(f, 0.5, 0.0) for f in (0.5, 2.2, 3.0))  # 1.5, 3.2, 4 s at 1 s of operator
    got = recall(key, tight, 2.0)
    assert got is not None and got.strategies["CompOne/backward"].bytes == 10.0 and got.op_seconds == 2.0
    assert recall(key, near, None) is not None  # 3 s of capture against 3.2 s: within the slack, still skipped
    assert recall(key, loose, None) is None and recall(key, None, None) is None and recall(other, tight, None) is None
    plain = NodeProfile("m", op_seconds=1.0, one_pass=True)
    remember(other, plain)
    assert recall(other, None, None) == plain and recall(other, loose, 5.0).op_seconds == 1.0  # one pass: its estimate
    forget()
    assert recall(key, tight, None) is None


def test_a_samples_range_table_of_many_rules_grows_with_the_node_and_of_few_does_not():
    """Range rules of regular lineage (a stencil: a few rules) are as large for the node as for
    the samples; rules per region of the data (here one per cell) grow with the node's cells, and
    past the inline limit are kept in chunks a query reads."""
    from subzero.encoders.full_range import CHUNK_RULES, INLINE_BYTES
    from subzero.encoders.ranges import compress, serialize
    from subzero.optimizer.calibrate import REGULAR_RULES, _merged_table
    from subzero.pairs import FullPairs

    shape = (64, 64)
    out = np.arange(64 * 64, dtype=np.int64)
    ptr = np.arange(len(out) + 1, dtype=np.int64)
    shifted = FullPairs(out, ptr, (out,), (ptr,))  # every cell depends on itself: one rule
    scattered = np.random.default_rng(0).permutation(len(out)).astype(np.int64)[:400]
    irregular = FullPairs(np.sort(scattered), np.arange(401, dtype=np.int64),
                          (scattered,), (np.arange(401, dtype=np.int64),))  # no pattern: explicit cells
    regular_table = serialize(compress(shifted, shape, [shape]))
    irregular_table = serialize(compress(irregular, shape, [shape]))
    assert _merged_table(regular_table, 100.0, 1.0, 1.0, 1.0, 1.0).bytes == len(regular_table)
    for scale in (2.0, 1000.0):
        got = _merged_table(irregular_table, scale, 1.0, 1.0, 1.0, 1.0)
        assert got.bytes == pytest.approx(len(irregular_table) * scale)
        assert (got.keys > 0) == (got.bytes > INLINE_BYTES)
    assert _merged_table(irregular_table, 1000.0, 1.0, 1.0, 1.0, 1.0).keys >= 1000 * (REGULAR_RULES + 1) / CHUNK_RULES


def test_full_candidates_measured_on_a_quarter_predict_what_the_whole_window_measures(tmp_path, monkeypatch):
    """Calibration makes FULL pairs and a payload per cell (PAY), many times the operator's cost,
    on a centred quarter of each sample window only and scales them to the window: the counts and
    fans it predicts are those of the whole windows measured, the sizes too (PayOne's runs, which
    a subsample of the window's pairs breaks, closer to what the run stores), and the COMP
    candidates are measured as before."""
    from subzero.optimizer import calibrate

    spikes = tuple((r, c) for r in range(20, 400, 37) for c in range(15, 400, 41))
    run = _crd_run(tmp_path, seed=3, side=400, spikes=spikes, tile_shape=200)
    op = run.node("crd").operator
    task = NodeTask("crd", op, (run.store.array("x"),), op.input_shapes, op.output_shape)
    tiles, names = node_tiles(op, 200), supported_strategies(op)
    quarter = profile_node(task, tiles, names, op_seconds=None, runner=LocalExecutor())
    monkeypatch.setattr(calibrate, "fans_window", lambda *args, **kwargs: None)  # the whole windows, as before
    whole = profile_node(task, tiles, names, op_seconds=None, runner=LocalExecutor())
    wf = sz.Workflow("c")
    wf.add(ops.CosmicRayDetect(threshold=5.0, radius=1), wf.input("x"), name="crd")
    stored = wf.run({"x": np.asarray(run.output("x"))}, store=tmp_path / "pay", executor="local", tile_shape=200,
                    strategies={"crd": ["PayOne/backward"]}).catalog.nodes["crd"].stats  # what the run stores
    assert set(quarter.strategies) == set(whole.strategies)
    for name, got in quarter.strategies.items():
        want = whole.strategies[name]
        if name.startswith("Comp"):
            assert got == want, name
            continue
        if name == "PayOne/backward":
            for what in ("pairs", "out_cells"):
                assert getattr(got, what) == pytest.approx(getattr(want, what), rel=0.1), (name, what)
            real = stored.bytes[name]
            assert abs(np.log(got.bytes / real)) <= abs(np.log(want.bytes / real)), (got.bytes, want.bytes, real)
            continue
        for what in ("pairs", "out_cells", "in_cells"):
            assert getattr(got, what) == pytest.approx(getattr(want, what), rel=0.1), (name, what)
        assert got.bytes == pytest.approx(want.bytes, rel=0.25), name
        assert got.encode_seconds == pytest.approx(want.encode_seconds, rel=0.1), name
    assert quarter.fan_backward == pytest.approx(whole.fan_backward, rel=0.05)
    assert quarter.fan_forward == pytest.approx(whole.fan_forward, rel=0.15)


def test_a_profile_kept_on_disk_is_recalled_by_a_new_process_and_only_by_the_same_code(tmp_path, monkeypatch):
    """`remember` also writes the profile under the cache directory: a process that did not
    measure it (here: this one's memory dropped) recalls the same profile; a damaged file is
    dropped, and other code (`code_digest`) or the ``keep_calibration`` setting off reads nothing."""
    from subzero import config
    from subzero.optimizer import calibrate
    from subzero.optimizer.calibrate import CaptureLimit, forget, profile_path, recall, remember, reuse_key

    run = _crd_run(tmp_path, seed=1, side=40, spikes=((5, 5), (25, 30)), tile_shape=10)
    op = run.node("crd").operator
    task = NodeTask("crd", op, (run.store.array("x"),), op.input_shapes, op.output_shape)
    measured = profile_node(task, node_tiles(op, 10), supported_strategies(op), op_seconds=None,
                            runner=LocalExecutor(), limit=CaptureLimit(1e9, 0.0, 0.0))
    with config.set(cache=str(tmp_path / "cache")):
        forget()
        key = reuse_key(["crd", "digests"])
        remember(key, measured)
        path = profile_path(key)
        assert path is not None and path.startswith(str(tmp_path / "cache")) and (tmp_path / "cache").exists()
        forget(disk=False)  # a new process: nothing in memory
        assert recall(key, None, None).to_dict() == measured.to_dict()
        forget(disk=False)
        with open(path, "w") as f:
            f.write('{"key": "')  # cut short
        assert recall(key, None, None) is None and not os.path.exists(path)
        remember(key, measured)
        forget(disk=False)
        monkeypatch.setattr(calibrate, "_CODE", ["other code"])
        assert reuse_key(["crd", "digests"]) != key and recall(reuse_key(["crd", "digests"]), None, None) is None
        monkeypatch.undo()
        with config.set(keep_calibration=False):
            assert recall(key, None, None) is None
        assert recall(key, None, None) is not None
        others = [reuse_key(["crd", k]) for k in range(3)]
        for k, other in enumerate(others):
            remember(other, measured)
            os.utime(profile_path(other), ns=(k, k))  # used long ago, the first least recently
        forget(disk=False)
        calibrate._trim(os.path.dirname(path), keep=2)  # the least recently used go first
        assert recall(key, None, None) is not None and recall(others[2], None, None) is not None
        assert recall(others[0], None, None) is None and recall(others[1], None, None) is None
        forget()
        assert recall(key, None, None) is None


def test_a_whole_array_operators_full_candidates_measured_on_a_crop_predict_the_whole_tile(tmp_path, monkeypatch):
    """A whole-array operator measured on one tile makes its FULL and PAY pairs on a centred
    quarter crop of its inputs (`fans_crop`), scaled to the tile: the counts, fans and sizes it
    predicts are the whole tile's, the COMP candidates are measured as before, and its range
    table, too small a sample to call regular, grows with the cells."""
    from subzero.optimizer import calibrate

    rng = np.random.default_rng(5)
    image = rng.normal(0.0, 1.0, (240, 240))
    for r, c in zip(rng.integers(3, 237, 90), rng.integers(3, 237, 90)):  # stars spread over the field
        image[r - 1:r + 2, c - 1:c + 2] += 30.0
    wf = sz.Workflow("s")
    wf.add(ops.DetectStars(threshold=5.0, minarea=3), wf.input("x"), name="stars")
    run = wf.run({"x": image}, store=tmp_path / "s", executor="local")
    op = run.node("stars").operator
    task = NodeTask("stars", op, (run.store.array("x"),), op.input_shapes, op.output_shape)
    tiles, names = node_tiles(op, 240), supported_strategies(op)
    assert len(tiles) == 1 and calibrate.fans_crop(task, tiles[0])[1].box == ((0, 120), (0, 120))
    cropped = profile_node(task, tiles, names, op_seconds=None, runner=LocalExecutor())
    monkeypatch.setattr(calibrate, "fans_crop", lambda *args, **kwargs: None)  # the whole tile, as before
    whole = profile_node(task, tiles, names, op_seconds=None, runner=LocalExecutor())
    assert set(cropped.strategies) == set(whole.strategies)
    for name, got in cropped.strategies.items():
        want = whole.strategies[name]
        if name.startswith("Comp"):
            assert got == want, name
            continue
        for what in ("pairs", "out_cells", "in_cells"):
            assert getattr(got, what) == pytest.approx(getattr(want, what), rel=0.15), (name, what)
        assert got.bytes == pytest.approx(want.bytes, rel=0.35), name
    assert cropped.fan_backward == pytest.approx(whole.fan_backward, rel=0.15)
    assert cropped.fan_forward == pytest.approx(whole.fan_forward, rel=0.15)


def test_entry_sizes_count_what_the_merged_shard_holds(tmp_path):
    """Calibration counts an encoded tile's bytes, keys and boxes without merging it into a
    shard: the counts are `merge_tiles`' for every strategy."""
    from subzero.encoders import encoder_for, merge_tiles
    from subzero.optimizer.calibrate import entry_sizes
    from subzero.worker import capture_tile, with_envelopes

    run = _crd_run(tmp_path, seed=4, side=48, spikes=((5, 5), (20, 12), (30, 40)), tile_shape=24)
    op = run.node("crd").operator
    strategies = tuple(Strategy.parse(n) for n in supported_strategies(op) if Strategy.parse(n).stored)
    task = NodeTask("crd", op, (run.store.array("x"),), op.input_shapes, op.output_shape, strategies)
    capture = capture_tile(task, node_tiles(op, 24)[0])
    for strategy in strategies:
        pairs = capture.pairs_for(strategy)
        if strategy.mode is not Mode.FULL:
            pairs = with_envelopes(op, pairs)
        encoded = encoder_for(strategy).encode(pairs, capture.tile.index, capture.shapes)
        batch = merge_tiles([encoded])
        assert entry_sizes(encoded) == (batch.nbytes, len(batch.keys),
                                        sum(len(ids) for ids, _, _ in batch.boxes.values())), strategy.name


@pytest.mark.parametrize("case", ["crd", "blur"])
def test_counted_candidates_hold_no_more_than_their_encoding_measures(tmp_path, case):
    """FULL and PAY candidates named in ``bound`` are counted, not encoded: their lowest costs
    (`lower_bound`) have the pairs, cells and capture time their encoding gives and no more
    bytes or keys (also where the encodings sample `MAX_PAIRS` pairs); the rest is unchanged."""
    from subzero.optimizer.calibrate import MAX_PAIRS

    if case == "crd":
        run, side, tile = _crd_run(tmp_path, seed=3, side=40, spikes=((5, 5), (25, 30)), tile_shape=10), 40, 10
        name = "crd"
    else:
        wf = sz.Workflow("c")
        wf.add(ops.Convolve(np.ones((3, 3)), mode="constant"), wf.input("x"), name="blur")
        side, tile, name = 300, 150, "blur"
        run = wf.run({"x": np.random.default_rng(0).normal(size=(side, side))}, store=tmp_path / "b",
                     executor="local", tile_shape=tile)
    op = run.node(name).operator
    task = NodeTask(name, op, (run.store.array("x"),), op.input_shapes, op.output_shape)
    names = [n for n in supported_strategies(op) if Strategy.parse(n).stored]
    dear = [n for n in names if Strategy.parse(n).mode in (Mode.FULL, Mode.PAY)]

    def profile(bound):
        return profile_node(task, node_tiles(op, tile), names, op_seconds=0.01, runner=LocalExecutor(), bound=bound)

    free, counted = profile(()), profile(dear)
    assert set(counted.bounds) == set(dear) and set(counted.strategies) == set(names) - set(dear)
    assert counted.strategies == {n: free.strategies[n] for n in counted.strategies}
    assert (counted.fan_backward, counted.fan_forward) == (free.fan_backward, free.fan_forward)
    for n in dear:
        least, real = counted.bounds[n], free.strategies[n]
        assert (least.pairs, least.out_cells, least.in_cells) == (real.pairs, real.out_cells, real.in_cells), n
        assert least.encode_seconds == pytest.approx(real.encode_seconds), n
        assert 0 <= least.bytes <= real.bytes and 0 <= least.keys <= real.keys, n
        # the encodings that pack every id keep a floor that can rule a candidate out (not 0)
        assert (least.bytes > 0 and least.keys > 0) is n.startswith(("FullMany", "PayMany", "FullOne")), n
    if case == "blur":  # a quarter of a window holds more pairs than the encodings sample
        assert free.strategies["FullOne/backward"].pairs / 2 > MAX_PAIRS


def test_a_runs_mapping_nodes_of_one_kind_and_shape_count_their_fans_once(monkeypatch):
    """Mapping fans are a function of the operator's code, arguments, shapes and corner: nodes
    alike share one count (`kept_mapping_fans`), another argument or shape counts anew."""
    from subzero.optimizer import calibrate

    counted = []
    real = calibrate.mapping_fans
    monkeypatch.setattr(calibrate, "mapping_fans", lambda op, box: counted.append(box) or real(op, box))
    kept: dict = {}
    box = ((0, 100), (0, 100))
    same = [ops.Convolve(np.ones((3, 3))).bound(((100, 100),), (100, 100)) for _ in range(2)]
    fans = [calibrate.kept_mapping_fans(op, box, kept) for op in same]
    assert len(counted) == 1 and fans[0] == fans[1] == real(same[0], calibrate.fans_corner(same[0], box))
    wider = ops.Convolve(np.ones((5, 5))).bound(((100, 100),), (100, 100))
    assert calibrate.kept_mapping_fans(wider, box, kept) != fans[0] and len(counted) == 2
    calibrate.kept_mapping_fans(ops.Convolve(np.ones((3, 3))).bound(((200, 100),), (200, 100)), box, kept)
    assert len(counted) == 3 and len(kept) == 3


def test_a_node_calibrated_from_its_first_tiles_measures_what_its_samples_do(tmp_path):
    """`profile_first`: the node's first tiles (the first and the middle one) run for real, under
    every COMP candidate, their lineage held unwritten; the FULL and PAY candidates only counted on
    the sample windows' quarters.  The profile holds what `profile_node` holds, measured on the
    whole tiles: the same fans and bounds, COMP sizes of the same order; `FirstTiles.keep` gives the
    tiles with the chosen strategy's lineage only, none when they do not hold it."""
    from subzero.optimizer.calibrate import profile_first
    from subzero.worker import release_pending

    spikes = ((5, 5), (25, 30), (70, 12), (45, 45), (3, 77))
    run = _crd_run(tmp_path, seed=1, side=80, spikes=spikes, tile_shape=20)
    op = run.node("crd").operator
    task = NodeTask("crd", op, (run.store.array("x"),), op.input_shapes, op.output_shape)
    names = supported_strategies(op)
    tiles = node_tiles(op, 20)
    counted = [n for n in names if Strategy.parse(n).mode in (Mode.FULL, Mode.PAY)]
    sampled = profile_node(task, tiles, names, op_seconds=None, runner=LocalExecutor(), bound=counted)
    stored = tuple(s for s in map(Strategy.parse, names) if s.stored)
    profile, first = profile_first(replace(task, strategies=stored), tiles, task, tiles, names, LocalExecutor())
    try:
        assert [m.tile.index for m in first.metas] == [0, len(tiles) // 2] and first.wall > 0
        comp = {n for n in names if n.startswith("Comp")}
        assert first.encoded == comp and all(set(m.pending) <= comp and set(m.shards) == comp for m in first.metas)
        assert not first.wrote()  # held for the node's run to write with its other tiles
        assert profile.one_pass and profile.tiles == len(tiles) and profile.op_seconds > 0
        assert set(profile.bounds) == set(sampled.bounds) == set(counted) and set(profile.strategies) == comp
        assert profile.fan_backward == sampled.fan_backward and profile.fan_forward == sampled.fan_forward
        assert profile.bounds == sampled.bounds  # counted on the same quarters
        for name in comp:  # whole tiles against windows of them: the same order
            got, want = profile.strategies[name], sampled.strategies[name]
            assert want.bytes / 4 <= got.bytes <= 4 * want.bytes and got.encode_seconds > 0
        kept = first.keep((Strategy.parse("CompOne/backward"),))
        assert [set(m.shards) for m in kept] == [{"CompOne/backward"}] * 2 and \
            all(set(m.pending) <= {"CompOne/backward"} for m in kept)
        assert first.keep((Strategy.parse("FullOne/backward"),)) == []  # not held: the node runs every tile
        assert all(not m.shards and not m.pending for m in first.keep((Strategy.parse("BlackBox"),)))
    finally:
        release_pending(first.task)

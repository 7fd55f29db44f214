"""Tests of Label (subzero/operators/label.py): tiled in two passes, it is exactly the
whole-array operator.

The reference is ``scipy.ndimage.label`` on the whole mask, renumbered with canonical ids
(``1 +`` the flat index of a component's first cell, found by ``np.unique``), and its
lineage the component relation (a labelled cell reads its component, a background cell
itself).  Tiled runs go through an in-process copy of the executor's two passes (fast,
for hypothesis) and through ``wf.run`` (local executor, and Spark once), under every
strategy.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import ndimage

import subzero as sz
from subzero import operators as ops
from subzero.cells import to_coords, to_ids
from subzero.context import Context
from subzero.modes import Mode
from subzero.operators._kernels import decode_region, encode_region, encode_regions, region_envelopes
from subzero.operators.label import (SeamIndex, TileSummary, canonical_ids, component_boxes, first_cells,
                                    first_cells_in_boxes, read_component_table)
from subzero.pairs import FullPairs, PayloadPairs
from subzero.worker import expand_payloads
from subzero.tiling import box_slices, full_box, tile_grid

STRATEGIES = ["FullOne", "FullMany", "FullOne/forward", "FullMany/forward", "PayOne", "PayMany", "CompOne", "CompMany"]
USING = ["BlackBox", "FullOne", "FullMany", "FullOne/forward", "FullMany/forward", "PayOne", "PayMany", "CompOne",
         "CompMany"]


def examples(n: int) -> settings:
    return settings(max_examples=n, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# =====================================================================================
# References and an in-process copy of the executor's two passes
# =====================================================================================
def reference(mask: np.ndarray, structure=None) -> np.ndarray:
    """Canonical labels of the whole mask: scipy's components, renamed by their first cell."""
    labels, n = ndimage.label(mask, structure)
    values, first = np.unique(labels.reshape(-1), return_index=True)
    table = np.zeros(n + 1, np.int64)
    table[values[values > 0]] = first[values > 0] + 1
    return table[labels]


def _ring(expected: np.ndarray, structure) -> np.ndarray:
    """Per cell, the labels of the components it is in the ring of (0 where none), as a list."""
    structure = ndimage.generate_binary_structure(expected.ndim, 1) if structure is None else np.asarray(structure)
    offsets = np.argwhere(structure) - np.array(structure.shape) // 2
    return offsets[np.any(offsets != 0, axis=1)]


def backward_ref(expected: np.ndarray, cells: np.ndarray, structure=None) -> np.ndarray:
    """The backward lineage of ``cells``: a labelled cell's component and its ring (the
    background cells next to it), a background cell itself; sorted coords."""
    ids = to_ids(cells, expected.shape)
    flat = expected.reshape(-1)
    comp = np.isin(flat, flat[ids][flat[ids] > 0]) & (flat > 0)
    hit = comp.copy()
    hit[ids[flat[ids] == 0]] = True
    grid = comp.reshape(expected.shape)
    for d in _ring(expected, structure):  # background cells next to a traced component
        shifted = np.zeros_like(grid)
        src = tuple(slice(max(-k, 0), n - max(k, 0)) for k, n in zip(d, grid.shape))
        dst = tuple(slice(max(k, 0), n - max(-k, 0)) for k, n in zip(d, grid.shape))
        shifted[dst] = grid[src]
        hit |= (shifted & (expected == 0)).reshape(-1)
    return np.argwhere(hit.reshape(expected.shape))


def forward_ref(expected: np.ndarray, cells: np.ndarray, structure=None) -> np.ndarray:
    """The forward lineage of ``cells``: the components whose backward lineage holds one of them
    (a labelled cell's own component; for a background cell, those it rings), and a background
    cell itself; sorted coords."""
    flat = expected.reshape(-1)
    ids = to_ids(cells, expected.shape)
    hit = np.zeros(flat.size, bool)
    hit[ids] = True
    for value in np.unique(flat[flat > 0]):
        back = to_ids(backward_ref(expected, np.argwhere(expected == value)[:1], structure), expected.shape)
        if np.isin(back, ids).any():
            hit |= flat == value
    return np.argwhere(hit.reshape(expected.shape))


def bound(op: ops.Label, shape) -> ops.Label:
    op = copy.copy(op)
    op.input_shapes = (tuple(shape),)
    op.output_shape = op.infer_output_shape(op.input_shapes)
    return op


def two_pass(op: ops.Label, x: np.ndarray, tile_shape, modes=()):
    """Run a bound Label as the executor does: prepare every tile, combine, run every tile.
    Returns (output, FULL pairs, payload pairs, summaries)."""
    tiles = tile_grid(x.shape, op.effective_tiling().split_axes(op), tile_shape)

    def read(i, box):
        return x[box_slices(box)]

    def context(tile, m=()):
        ctx = Context("label", frozenset(m), tile.box, (tile.box,), op.input_shapes, op.output_shape, reader=read)
        ctx.set_result_box(tile.box)
        return ctx

    summaries = [op.prepare(context(t), read(0, t.box)) for t in tiles]
    op.combine(summaries)
    out = np.zeros(x.shape, np.int64)
    fulls, pays = [], []
    for t in tiles:
        ctx = context(t, modes)
        got = op.run(ctx, read(0, t.box))
        assert got.dtype == np.int64 and got.shape == tuple(hi - lo for lo, hi in t.box)
        out[box_slices(t.box)] = got
        fulls.append(ctx.full_pairs(t.box))
        pays.append(ctx.payload_pairs(t.box))
    op.attach_output(lambda box: out[box_slices(box)])  # as a run does: payloads name its components
    return out, FullPairs.concat(fulls, 1), PayloadPairs.concat(pays), summaries


def symmetric_structure(rng, ndim: int) -> np.ndarray:
    s = rng.random((3,) * ndim) < 0.5
    s |= s[(slice(None, None, -1),) * ndim]
    s[(1,) * ndim] = True
    return s


@st.composite
def cases(draw, max_side: int = 12):
    """A random mask (1-3 D), a structure (None, full, random symmetric) and a tile shape."""
    ndim = draw(st.integers(1, 3))
    side = max_side if ndim < 3 else max_side // 2
    shape = tuple(draw(st.lists(st.integers(1, side), min_size=ndim, max_size=ndim)))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    mask = rng.random(shape) < draw(st.floats(0.1, 0.9))
    structure = [None, ndimage.generate_binary_structure(ndim, ndim), symmetric_structure(rng, ndim)][
        draw(st.integers(0, 2))]
    tile = tuple(draw(st.lists(st.integers(1, side), min_size=ndim, max_size=ndim)))
    return mask, structure, tile


# =====================================================================================
# Values: tiled labels are the whole-array canonical labels
# =====================================================================================
@examples(150)
@given(case=cases())
def test_tiled_labels_are_scipy_canonical_labels(case):
    mask, structure, tile = case
    op = bound(ops.Label(structure), mask.shape)
    out = two_pass(op, mask, tile)[0]
    assert np.array_equal(out, reference(mask, structure))
    assert np.array_equal(op.run(Context("label", (), None, (full_box(mask.shape),), op.input_shapes,
                                         op.output_shape), mask), out), "whole-array run"


def snake(n: int) -> np.ndarray:
    """One component winding through every row of an n x n array (spans every tile)."""
    x = np.zeros((n, n), bool)
    x[::2] = True
    x[1::4, -1] = True
    x[3::4, 0] = True
    return x


def corner_ring() -> np.ndarray:
    """A ring around the corner where four 4x4 tiles meet: one component in four tiles,
    and two cells that only touch diagonally across that corner."""
    x = np.zeros((8, 8), bool)
    x[2, 2:6] = x[5, 2:6] = x[2:6, 2] = x[2:6, 5] = True
    x[0, 3], x[1, 4] = True, True  # diagonal neighbours across the tiles' vertical seam
    return x


def u_shape() -> np.ndarray:
    """Two arms in tile (0, 0) joined only in tile (1, 0): two parts of one component in one tile."""
    x = np.zeros((8, 8), bool)
    x[0:6, 0] = x[0:6, 3] = x[5, 0:4] = True
    return x


LAYOUTS = [
    ("snake", snake(16), None, (3, 5)),
    ("snake-1x1", snake(6), None, (1, 1)),
    ("corner ring, cross", corner_ring(), None, (4, 4)),
    ("corner ring, full", corner_ring(), np.ones((3, 3), bool), (4, 4)),
    ("diagonal chain, full", np.eye(9, dtype=bool), np.ones((3, 3), bool), (2, 2)),
    ("diagonal chain, cross", np.eye(9, dtype=bool), None, (2, 2)),
    ("u shape", u_shape(), None, (4, 4)),
    ("all foreground", np.ones((7, 5), bool), None, (2, 3)),
    ("empty", np.zeros((5, 7), bool), None, (2, 2)),
    ("3-D tube", np.pad(np.ones((6, 1, 1), bool), 1), np.ones((3, 3, 3), bool), (2, 2, 2)),
    ("1-D", np.array([1, 1, 0, 1, 1, 1, 1, 0, 1], bool), None, (2,)),
]


@pytest.mark.parametrize("name, mask, structure, tile", LAYOUTS, ids=[l[0] for l in LAYOUTS])
def test_components_crossing_tiles_every_way(name, mask, structure, tile):
    op = bound(ops.Label(structure), mask.shape)
    out, full, pay, _ = two_pass(op, mask, tile, {Mode.FULL, Mode.PAY})
    expected = reference(mask, structure)
    assert np.array_equal(out, expected)
    whole = bound(ops.Label(structure), mask.shape)
    _, wfull, wpay, _ = two_pass(whole, mask, None, {Mode.FULL, Mode.PAY})
    assert relation(full) == relation(wfull)
    assert relation(expand_payloads(op, pay)) == relation(full), "payloads resolve to the same lineage at any tiling"
    assert relation(expand_payloads(whole, wpay)) == relation(wfull)


def relation(pairs: FullPairs) -> set[tuple[int, int]]:
    out, ins = pairs.out_ids, pairs.in_ids[0]
    got = set()
    for p in range(pairs.n_pairs):
        o = out[pairs.out_ptr[p]:pairs.out_ptr[p + 1]]
        i = ins[pairs.in_ptr[0][p]:pairs.in_ptr[0][p + 1]]
        got |= set(itertools.product(o.tolist(), i.tolist()))
    return got


def test_a_component_spanning_many_tiles_is_one_label_and_one_record():
    mask = snake(16)
    op = bound(ops.Label(), mask.shape)
    out, _, pay, _ = two_pass(op, mask, (3, 3), {Mode.PAY})
    assert len(np.unique(out[mask])) == 1 and out[0, 0] == 1
    assert len(op._seams.global_ids) == 1
    # every tile covers its cells with one table; the snake's record, in every tile it crosses, is
    # its id and its bounding box grown by one (the whole array), not its cells
    assert len(pay.payloads) == 36 and pay.cover is None  # 6 x 6 tiles, concatenated
    for table in pay.payloads:
        ids, lo, hi = read_component_table(table, 2)
        assert ids.tolist() in ([], [1]) and all(a.tolist() == [0, 0] and b.tolist() == [16, 16] for a, b in zip(lo, hi))
    lineage = backward_ref(out, np.argwhere(mask)[:1])  # the snake and its ring
    owner, got = op.map_p_pairs(np.argwhere(mask)[:2], pay.payloads[0], 0)
    assert owner.tolist() == [0] * len(lineage) + [1] * len(lineage)
    assert all(np.array_equal(np.unique(got[owner == k], axis=0), lineage) for k in (0, 1))


def test_a_table_payload_needs_the_stored_label_array():
    mask = corner_ring()
    op = bound(ops.Label(), mask.shape)
    _, _, pay, _ = two_pass(op, mask, (4, 4), {Mode.COMP})
    cell = np.argwhere(mask)[:1]
    table = next(p for p, ids in pay.by_payload() if to_ids(cell, mask.shape)[0] in ids)
    fresh = bound(ops.Label(), mask.shape)  # no label array attached
    with pytest.raises(sz.LineageError, match="no label array is attached"):
        fresh.map_p(cell, table, 0)
    with pytest.raises(sz.LineageError, match="not a component table"):
        op.map_p(cell, table[:-8], 0)
    assert pickle.loads(pickle.dumps(op)).__dict__.get("_output") is None  # a process attaches its own
    op.attach_output(lambda box: np.full(tuple(b - a for a, b in box), 99, np.int64))  # labels that do not match
    with pytest.raises(sz.LineageError, match="does not match its lineage"):
        op.map_p(cell, table, 0)


# =====================================================================================
# Lineage: every mode, the same as the whole-array run, and within lineage_box
# =====================================================================================
@examples(60)
@given(case=cases(max_side=9))
def test_lineage_of_every_mode_is_the_component_relation(case):
    mask, structure, tile = case
    op = bound(ops.Label(structure), mask.shape)
    expected = reference(mask, structure)
    cells = np.argwhere(np.ones(mask.shape, bool))
    truth = {(int(o), int(i)) for o, c in zip(to_ids(cells, mask.shape), cells)
             for i in to_ids(backward_ref(expected, c[None], structure), mask.shape)}
    _, full, _, _ = two_pass(op, mask, tile, {Mode.FULL})
    assert relation(full) == truth
    for mode in (Mode.PAY, Mode.COMP):
        _, _, pay, _ = two_pass(op, mask, tile, {mode})
        got = relation(expand_payloads(op, pay))
        assert sorted(pay.out_ids.tolist()) == list(range(mask.size))  # covered tiles: every cell, one table each
        assert got == truth, mode
    # every tile's lineage lies in its lineage box
    for t in tile_grid(mask.shape, tuple(range(mask.ndim)), tile):
        lo, hi = (np.array(v) for v in zip(*op.lineage_box(t.box, 0)))
        inside = np.all((cells >= [a for a, _ in t.box]) & (cells < [b for _, b in t.box]), axis=1)
        reach = backward_ref(expected, cells[inside], structure) if inside.any() else np.zeros((0, mask.ndim), np.int64)
        assert np.all((reach >= lo) & (reach < hi)), f"tile {t.box}: lineage outside {op.lineage_box(t.box, 0)}"


def label_workflow(structure=None, name="label"):
    wf = sz.Workflow("labels")
    node = wf.add(ops.Label(structure), wf.input("x"), name=name)
    return wf, node


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_strategy_answers_like_the_component_relation(seed, tmp_path):
    rng = np.random.default_rng(seed)
    shape = [(23, 17), (9, 8, 7), (61,)][seed]
    mask = rng.random(shape) < [0.45, 0.3, 0.6][seed]
    if seed == 0:
        mask[3:20, 5] = True  # a long component across the tiles
    structure = [None, np.ones((3, 3, 3), bool), None][seed]
    wf, _ = label_workflow(structure)
    run = wf.run({"x": mask}, store=tmp_path / "run", strategies={"label": STRATEGIES}, executor="local",
                 tile_shape=[(5, 4), (3, 4, 2), (7,)][seed])
    expected = reference(mask, structure)
    assert np.array_equal(run.output("label"), expected)
    cells = np.argwhere(np.ones(shape, bool))
    picks = [cells[rng.choice(len(cells), 1)], cells[rng.choice(len(cells), 6, replace=False)],
             np.argwhere(mask)[:1]]
    for pick in picks:
        back, fwd = backward_ref(expected, pick, structure), forward_ref(expected, pick, structure)
        for strategy in USING:
            assert np.array_equal(run.backward("label", pick, to="x", using={"label": strategy}), back), strategy
            assert np.array_equal(run.forward("x", pick, to="label", using={"label": strategy}), fwd), strategy
    again = sz.open_run(tmp_path / "run")  # the seam index travels with the stored operator
    for strategy in ("BlackBox", "CompOne"):
        assert np.array_equal(again.forward("x", picks[1], to="label", using={"label": strategy}),
                              forward_ref(expected, picks[1], structure))


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])  # fixtures: same each time
@given(case=cases(max_side=8), data=st.data())
def test_stored_payload_strategies_answer_like_the_definition_and_every_other(case, data, tmp_path_factory):
    """Through the store (local executor, random masks, structures and tile shapes, components
    crossing the tiles' seams): CompOne and PayOne (covered tiles: a table of component records
    per tile, the cells read back from the stored label array) answer backward and forward
    exactly as the component relation, FullRange, FullOne and BlackBox do."""
    mask, structure, tile = case
    wf, _ = label_workflow(structure)
    store = tmp_path_factory.mktemp("stored")
    run = wf.run({"x": mask}, store=store / "run", strategies={"label": ["CompOne", "PayOne", "FullRange", "FullOne"]},
                 executor="local", tile_shape=tile)
    expected = reference(mask, structure)
    assert np.array_equal(run.output("label"), expected)
    cells = np.argwhere(np.ones(mask.shape, bool))
    pick = cells[data.draw(st.lists(st.integers(0, len(cells) - 1), min_size=1, max_size=4, unique=True))]
    back, fwd = backward_ref(expected, pick, structure), forward_ref(expected, pick, structure)
    for strategy in ("CompOne", "PayOne", "FullRange", "FullOne", "BlackBox"):
        assert np.array_equal(run.backward("label", pick, to="x", using={"label": strategy}), back), strategy
        assert np.array_equal(run.forward("x", pick, to="label", using={"label": strategy}), fwd), strategy


def test_a_store_written_before_layout_three_still_answers(tmp_path):
    """tests/data/label-e47cab4 was written by e47cab4 (PayOne/CompOne layout 2: one entry per run,
    R-trees over the envelopes); this code opens it and answers as the definition says."""
    import shutil
    from pathlib import Path

    data = Path(__file__).parent / "data"
    shutil.copytree(data / "label-e47cab4", tmp_path / "old")
    mask = np.load(data / "label-e47cab4-mask.npy")
    run = sz.open_run(tmp_path / "old")
    assert list((tmp_path / "old" / "lineage" / "label" / "CompOne-backward").glob("*.0.dat"))  # its R-trees
    expected = reference(mask)
    assert np.array_equal(np.asarray(run.output("label")), expected)
    cells = np.argwhere(np.ones(mask.shape, bool))
    for pick in (np.array([[5, 4]]), cells[::7], np.argwhere(~mask)[:3]):
        for strategy in ("CompOne", "PayOne", "BlackBox"):
            assert np.array_equal(run.backward("label", pick, to="x", using={"label": strategy}),
                                  backward_ref(expected, pick)), strategy
            assert np.array_equal(run.forward("x", pick, to="label", using={"label": strategy}),
                                  forward_ref(expected, pick)), strategy


@examples(25)
@given(case=cases(max_side=9), data=st.data())
def test_rerun_on_the_backward_lineage_reproduces_the_value(case, data):
    mask, structure, tile = case
    expected = reference(mask, structure)
    cell = tuple(data.draw(st.integers(0, n - 1)) for n in mask.shape)
    keep = np.zeros(mask.shape, bool)
    keep[tuple(backward_ref(expected, np.array([cell]), structure).T)] = True
    rerun = bound(ops.Label(structure), mask.shape)
    assert two_pass(rerun, np.where(keep, mask, False), tile)[0][cell] == expected[cell]


def test_workflow_runs_on_spark_like_local(spark, tmp_path):
    rng = np.random.default_rng(7)
    mask = rng.random((40, 30)) < 0.5
    mask[2:38, 11] = True
    wf, _ = label_workflow(np.ones((3, 3), bool))
    run = wf.run({"x": mask}, store=tmp_path / "spark", strategies={"label": ["CompOne", "PayOne", "FullOne"]},
                 executor="spark", spark=spark, tile_shape=(8, 7))
    expected = reference(mask, np.ones((3, 3), bool))
    assert np.array_equal(run.output("label"), expected)
    cells = np.array([[20, 11], [0, 0], [39, 29], [5, 17]])
    for strategy in ("CompOne", "PayOne", "FullOne", "BlackBox"):
        assert np.array_equal(run.backward("label", cells, to="x", using={"label": strategy}),
                              backward_ref(expected, cells, np.ones((3, 3), bool))), strategy
        assert np.array_equal(run.forward("x", cells, to="label", using={"label": strategy}),
                              forward_ref(expected, cells, np.ones((3, 3), bool))), strategy


def test_untiled_label_keeps_the_whole_array_behaviour(tmp_path):
    class WholeLabel(ops.Label):
        tiling = None

    rng = np.random.default_rng(3)
    mask = rng.random((12, 9)) < 0.5
    wf = sz.Workflow("whole")
    wf.add(WholeLabel(), wf.input("x"), name="label")
    run = wf.run({"x": mask}, store=tmp_path / "run", strategies={"label": ["PayMany", "FullOne"]},
                 executor="local", tile_shape=3)
    assert run.node_record("label").stats.tiles == 1
    expected = reference(mask)
    assert np.array_equal(run.output("label"), expected)
    cell = np.argwhere(mask)[:2]
    for strategy in ("PayMany", "FullOne", "BlackBox"):
        assert np.array_equal(run.backward("label", cell, to="x", using={"label": strategy}),
                              backward_ref(expected, cell))


# =====================================================================================
# The first pass: summaries are O(perimeter), the seam index O(seam components)
# =====================================================================================
def test_summaries_hold_only_the_shared_faces():
    rng = np.random.default_rng(4)
    mask = rng.random((60, 50)) < 0.5
    op = bound(ops.Label(), mask.shape)
    _, _, _, summaries = two_pass(op, mask, (20, 25))
    for s in summaries:
        assert isinstance(s, TileSummary)
        (r0, r1), (c0, c1) = s.box
        perimeter = 2 * ((r1 - r0) + (c1 - c0))
        assert len(s.cells) <= perimeter and len(s.parts) <= len(s.cells)
        coords = to_coords(s.cells, mask.shape)
        on_shared_face = ((coords[:, 0] == r0) & (r0 > 0)) | ((coords[:, 0] == r1 - 1) & (r1 < 60)) | \
                         ((coords[:, 1] == c0) & (c0 > 0)) | ((coords[:, 1] == c1 - 1) & (c1 < 50))
        assert on_shared_face.all() and mask[tuple(coords.T)].all()
    assert isinstance(op._seams, SeamIndex)
    assert len(op._seams.part_ids) <= sum(len(s.parts) for s in summaries)
    assert op.params() == {"structure": None}, "the seam index is no operator argument"


def _same_seams(got: SeamIndex, want: SeamIndex) -> None:
    for f in dataclasses.fields(SeamIndex):
        a, b = getattr(got, f.name), getattr(want, f.name)
        if isinstance(b, np.ndarray):
            assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), f.name
        else:
            assert a == b, f.name


def _seams_both_ways(mask, structure, tile) -> tuple[SeamIndex, SeamIndex]:
    """The seam index of the first pass and combine, and the one made from the whole output."""
    passed, known = bound(ops.Label(structure), mask.shape), bound(ops.Label(structure), mask.shape)
    two_pass(passed, mask, tile)
    tiles = tile_grid(mask.shape, known.effective_tiling().split_axes(known), tile)
    assert known.combine_output(reference(mask, structure), [t.box for t in tiles])
    return passed._seams, known._seams


@examples(120)
@given(case=cases())
def test_seams_from_the_whole_output_are_the_first_passes(case):
    _same_seams(*reversed(_seams_both_ways(*case)))


@pytest.mark.parametrize("name, mask, structure, tile", LAYOUTS, ids=[l[0] for l in LAYOUTS])
def test_seams_from_the_whole_output_on_every_crossing_layout(name, mask, structure, tile):
    passed, known = _seams_both_ways(mask, structure, tile)
    _same_seams(known, passed)


def test_seams_are_not_made_from_an_output_they_cannot_come_from():
    mask = u_shape()
    op = bound(ops.Label(), mask.shape)
    labels = reference(mask)
    boxes = [t.box for t in tile_grid(mask.shape, (0, 1), (4, 4))]
    assert not op.combine_output(labels[:, :4], boxes), "another shape"
    assert not op.combine_output(labels.astype(float), boxes), "not ids"
    assert not op.combine_output(labels, boxes[:3]), "not a grid"
    assert not op.combine_output(labels * 1000, boxes), "ids past the array"
    assert op._seams is None


def test_a_tile_without_the_first_pass_is_refused():
    mask = np.ones((4, 4), bool)
    op = bound(ops.Label(), mask.shape)
    box = ((0, 2), (0, 2))
    with pytest.raises(sz.WorkflowError, match=r"tile \(\(0, 2\), \(0, 2\)\) .* was not in the first pass"):
        op.run(Context("label", (), box, (box,), op.input_shapes, op.output_shape), mask[:2, :2])


@pytest.mark.parametrize("structure, message", [
    (np.ones((3, 3)), "structure is 2-D"),
    (np.ones((5,)), r"symmetric \(3,\) array"),
    (np.array([1, 1, 0]), r"symmetric \(3,\) array"),
])
def test_bad_structures_are_workflow_errors(structure, message):
    with pytest.raises(sz.WorkflowError, match=message):
        ops.Label(structure).infer_output_shape(((5,),))


# =====================================================================================
# Kernels: first cells, canonical ids, payloads of many regions at once, envelopes
# =====================================================================================
def test_first_cells_take_the_fast_path_and_the_fallback():
    flat = np.array([0, 1, 1, 2, 0, 3, 2, 1], np.int32)
    assert first_cells(flat, 3).tolist() == [1, 3, 5]
    shuffled = np.array([0, 2, 1, 2, 3, 1], np.int32)  # not numbered in raster order
    assert first_cells(shuffled, 3).tolist() == [2, 1, 4]
    labels = np.array([[0, 1], [2, 2]], np.int32)
    assert canonical_ids(labels, 2, (3, 4), (10, 10)).tolist() == [36, 45]  # 1 + flat index of (3, 5), (4, 4)


@examples(150)
@given(case=cases())
def test_first_cells_in_boxes_are_first_cells(case):
    # the PAY/COMP path finds each component's first cell in its box (one slice of it)
    mask, structure, _ = case
    labels, n = ndimage.label(mask, structure)
    lo, hi = component_boxes(labels, n)
    objects = ndimage.find_objects(labels, n)
    assert lo.tolist() == [[s.start for s in box] for box in objects]
    assert hi.tolist() == [[s.stop for s in box] for box in objects]
    assert first_cells_in_boxes(labels, lo, hi, max_cells=labels.size).tolist() == \
        first_cells(labels.reshape(-1), n).tolist()
    origin, shape = (2,) * mask.ndim, tuple(d + 3 for d in mask.shape)
    assert canonical_ids(labels, n, origin, shape, (lo, hi)).tolist() == canonical_ids(labels, n, origin, shape).tolist()


def test_first_cells_in_boxes_fall_back_when_the_slices_outgrow_the_array():
    labels = np.array([[1, 2, 3], [1, 2, 3]], np.int32)
    lo, hi = np.zeros((3, 2), np.int64), np.array([[2, 3]] * 3)  # slices of 3 x 3 cells > the array's 6
    assert first_cells_in_boxes(labels, lo, hi, max_cells=6).tolist() == [0, 1, 2]
    assert first_cells_in_boxes(labels, *component_boxes(labels, 3)).tolist() == [0, 1, 2]  # 3 > a quarter of 6


@examples(100)
@given(seed=st.integers(0, 2**32 - 1), ndim=st.integers(1, 3), m=st.integers(1, 6))
def test_encode_regions_is_encode_region_for_each(seed, ndim, m):
    rng = np.random.default_rng(seed)
    sets = [np.unique(rng.integers(0, 7, (int(rng.integers(1, 9)), ndim)), axis=0) + rng.integers(0, 50, ndim)
            for _ in range(m)]
    coords = np.concatenate(sets)
    region = np.repeat(np.arange(m), [len(s) for s in sets])
    order = rng.permutation(len(coords))
    lo = np.array([s.min(axis=0) for s in sets])
    hi = np.array([s.max(axis=0) + 1 for s in sets])
    got = encode_regions(coords[order], region[order], lo, hi)
    assert got == [encode_region(s, ndim) for s in sets]
    assert all(np.array_equal(decode_region(p, ndim), s) for p, s in zip(got, sets))
    elo, ehi, empty = region_envelopes(got + [b""], ndim)
    assert np.array_equal(elo[:m], lo) and np.array_equal(ehi[:m], hi) and empty.tolist() == [False] * m + [True]


def test_map_p_envelope_reads_the_headers():
    mask = corner_ring()
    op = bound(ops.Label(), mask.shape)
    _, _, pay, _ = two_pass(op, mask, (4, 4), {Mode.PAY})
    payloads = [p for p, _ in pay.by_payload()]
    lo, hi = op.map_p_envelope(payloads, 0)  # tables over cells not given: the whole input
    assert lo.tolist() == [[0, 0]] * len(payloads) and hi.tolist() == [[8, 8]] * len(payloads)
    owned = [to_coords(ids, mask.shape) for _, ids in pay.by_payload()]
    lo, hi = op.map_p_envelope(payloads, 0, cells=owned)  # the cells' boxes and their records' boxes
    base_lo, base_hi = sz.Operator.map_p_envelope(op, payloads, 0, cells=owned)  # the default, from map_p
    assert np.array_equal(lo, base_lo) and np.array_equal(hi, base_hi)
    regions = [encode_region(np.array([[1, 2], [3, 1]]), 2), b""]  # region payloads (stores before tables)
    lo, hi = op.map_p_envelope(regions, 0, cells=[np.array([[0, 0]]), np.array([[5, 6]])])
    assert lo.tolist() == [[1, 1], [5, 6]] and hi.tolist() == [[4, 3], [6, 7]]
    one = np.array([[1, 1], [6, 7]])
    lo, hi = op.map_p_envelope([b"", b""], 0, cells=one)
    assert lo.tolist() == one.tolist() and hi.tolist() == (one + 1).tolist()


def test_default_map_p_envelope_needs_the_cells():
    op = bound(ops.Label(), (4, 4))
    with pytest.raises(sz.LineageError, match="needs the pairs' out cells"):
        sz.Operator.map_p_envelope(op, [b""], 0)


def test_lineage_box_of_a_box_the_first_pass_did_not_see_holds_its_lineage():
    mask = np.zeros((20, 20), bool)
    mask[2, 1:9] = True  # inside tile (0, 0)
    mask[5:15, 7] = True  # across tiles (0, 0) and (1, 0)
    op = bound(ops.Label(), mask.shape)
    expected = two_pass(op, mask, (10, 10))[0]
    cells = np.argwhere(np.ones(mask.shape, bool))
    for box in [((2, 3), (1, 2)), ((12, 13), (7, 8)), ((0, 20), (15, 16)), ((1, 6), (0, 12))]:
        lo, hi = (np.array(v) for v in zip(*op.lineage_box(box, 0)))
        inside = np.all((cells >= [a for a, _ in box]) & (cells < [b for _, b in box]), axis=1)
        reach = backward_ref(expected, cells[inside])
        assert np.all((reach >= lo) & (reach < hi)), box


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), ndim=st.integers(1, 3), density=st.floats(0.05, 0.9),
       tiled=st.booleans(), connectivity=st.integers(1, 3))
def test_ring_cells_on_a_raster_equal_one_sort_of_every_neighbour(seed, ndim, density, tiled, connectivity):
    """The raster path of `ring_cells` (a shifted comparison per offset) returns exactly what
    the sort of every neighbour does, for whole arrays and for a tile's labels at an origin; so
    does `raster_rings` on the labels themselves."""
    from subzero.operators.label import _ring_sorted, raster_rings, ring_cells

    rng = np.random.default_rng(seed)
    shape = tuple(int(n) for n in rng.integers(2, 10, size=ndim))
    structure = ndimage.generate_binary_structure(ndim, min(connectivity, ndim))
    labels, n = ndimage.label(rng.random(shape) < density, structure)
    origin = np.zeros(ndim, np.int64)
    if tiled:  # a tile of the array: its labels at an origin, the cells of some of its components
        lo = np.array([int(rng.integers(0, s // 2 + 1)) for s in shape])
        labels, n = ndimage.label(labels[tuple(slice(a, None) for a in lo)] > 0, structure)
        origin, shape = lo, shape
    keep = rng.random(n + 1) < 0.7
    fg = np.argwhere((labels > 0) & keep[labels])
    cells, group = fg + origin, labels[tuple(fg.T)].astype(np.int64) - 1
    offsets = np.argwhere(structure) - 1
    offsets = offsets[np.any(offsets != 0, axis=1)]
    for args in ((labels, origin), ()):
        got = ring_cells(cells, group, structure, shape, *args)
        want = _ring_sorted(cells, group, offsets, shape, *(args or (None, None)))
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    # raster_rings, on the labels as they are (Label's tiles and crops), finds the same (group, cell) set
    ring, g = raster_rings(np.where(keep[labels], labels, 0), labels == 0, origin, shape, structure)
    want = ring_cells(cells, group, structure, shape, labels, origin)
    assert sorted(zip(g.tolist(), map(tuple, ring.tolist()))) == sorted(zip(want[1].tolist(), map(tuple, want[0].tolist())))
    assert len(set(zip(g.tolist(), map(tuple, ring.tolist())))) == len(g)  # each once

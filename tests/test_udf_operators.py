"""The operators a udf becomes: each pattern's lineage over broadcast inputs, every form of
it (cells, pairs, boxes, the tiles' input boxes) against brute force, and the call itself."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from subzero.errors import WorkflowError
from subzero.udf_operators import (
    MapShapes, UdfBlackBox, UdfElementwise, UdfLines, UdfMapped, UdfReduce, UdfWindow, suggest_pattern,
)

SHAPES = [[(5, 6)], [(5, 6), (1, 6)], [(5, 1), (6,)], [(2, 3, 4), (3, 1)]]


def _cells(shape):
    return np.array(list(itertools.product(*[range(n) for n in shape])), np.int64).reshape(-1, len(shape))


def _rows(a):
    return {tuple(r) for r in np.asarray(a).tolist()}


def _box_cells(lo, hi):
    return _rows(_cells(tuple(h - l for l, h in zip(lo, hi))) + np.asarray(lo, np.int64))


def _bound(op, shapes):
    return op.bound(shapes, op.infer_output_shape(tuple(shapes)))


def _patterns():
    yield UdfWindow(np.negative, 1)
    yield UdfWindow(np.negative, 2)
    yield UdfLines(np.negative, 0)
    yield UdfLines(np.negative, -1)
    yield UdfReduce(np.negative, 0)
    yield UdfReduce(np.negative, -1, keepdims=True)
    yield UdfReduce(np.negative)


@pytest.mark.parametrize("shapes", SHAPES, ids=str)
@pytest.mark.parametrize("make", list(_patterns()), ids=lambda op: op.lineage)
def test_every_form_of_the_lineage_agrees_with_brute_force(make, shapes):
    op = _bound(make, shapes)
    outs = _cells(op.output_shape)
    for i, shape in enumerate(shapes):
        back = {tuple(o): _rows(op.map_b(o[None], i)) for o in outs}
        for o, got in back.items():  # every output cell reads cells of input i, inside it
            assert got and all(len(c) == len(shape) and all(0 <= v < n for v, n in zip(c, shape)) for c in got)
        for c in _cells(shape):  # forward is the inverse of backward
            want = {o for o, got in back.items() if tuple(c) in got}
            assert _rows(op.map_f(c[None], i)) == want
        owner, coords = op.map_b_pairs(outs, i)
        for k, o in enumerate(outs):
            assert _rows(coords[owner == k]) == back[tuple(o)]
        lo, hi = np.zeros((1, len(op.output_shape)), np.int64), np.array([op.output_shape], np.int64)
        half = hi.copy()
        half[0, 0] = max(1, hi[0, 0] // 2)
        for box_hi in (hi, half):
            inside = _cells(tuple(box_hi[0]))
            union = set().union(*[back[tuple(o)] for o in inside])
            blo, bhi = op.map_b_boxes(lo, box_hi, i)
            assert _box_cells(blo[0], bhi[0]) == union
            tile_reads = op.effective_tiling().input_box(op, tuple(zip(lo[0], box_hi[0])), i)
            assert _box_cells([a for a, _ in tile_reads], [z for _, z in tile_reads]) >= union


@pytest.mark.parametrize("shapes", SHAPES, ids=str)
@pytest.mark.parametrize("make", list(_patterns()), ids=lambda op: op.lineage)
def test_the_mask_forms_are_the_unions_of_the_cell_forms(make, shapes):
    op = _bound(make, shapes)
    rng = np.random.default_rng(7)
    for i, shape in enumerate(shapes):
        for density in (0.1, 0.6):
            out = rng.random(op.output_shape) < density
            want = np.zeros(shape, bool)
            got = op.map_b(np.argwhere(out), i)
            want[tuple(got.T)] = True
            np.testing.assert_array_equal(op.map_b_mask(out, i), want)
            cells = rng.random(shape) < density
            fwd = np.zeros(op.output_shape, bool)
            got = op.map_f(np.argwhere(cells), i)
            fwd[tuple(got.T)] = True
            np.testing.assert_array_equal(op.map_f_mask(cells, i), fwd)


@pytest.mark.parametrize("make", list(_patterns()), ids=lambda op: op.lineage)
def test_forward_boxes_cover_exactly_the_forward_lineage(make):
    shapes = [(5, 6), (1, 6)]
    op = _bound(make, shapes)
    for i, shape in enumerate(shapes):
        lo, hi = np.zeros((1, len(shape)), np.int64), np.ones((1, len(shape)), np.int64)
        flo, fhi = op.map_f_boxes(lo, hi, i)
        assert _box_cells(flo[0], fhi[0]) == _rows(op.map_f(np.zeros((1, len(shape)), np.int64), i))


def test_shapes_and_bad_arguments():
    assert _bound(UdfReduce(np.sum, (0, 2)), [(2, 3, 4)]).output_shape == (3,)
    assert _bound(UdfReduce(np.sum), [(2, 3)]).output_shape == (1, 1)
    assert UdfReduce(np.sum).logical_shape((2, 3)) == ()
    assert _bound(UdfLines(np.sort, 0), [(4, 1), (3,)]).output_shape == (4, 3)
    with pytest.raises(WorkflowError, match="do not broadcast"):
        UdfWindow(np.sort, 1).infer_output_shape(((4, 2), (3,)))
    with pytest.raises(WorkflowError, match="out of range"):
        UdfLines(np.sort, 2).infer_output_shape(((4, 2),))
    with pytest.raises(WorkflowError, match="radius"):
        UdfWindow(np.sort, (1, 2, 3)).infer_output_shape(((4, 2),))


def test_the_call_hands_0d_values_as_numpy_scalars_and_picks_an_output():
    seen = []
    op = UdfElementwise(lambda x, n: seen.append(n) or (x * n, x + n), "f", scalars=(False, True), pick=1)
    out = op.call([np.ones((2, 3)), np.full((1, 1), 3, np.int32)])
    assert isinstance(seen[0], np.int32) and out.tolist() == [[4.0] * 3] * 2
    with pytest.raises(WorkflowError, match=r"returned 2 arrays; declare one pattern per output"):
        UdfElementwise(lambda x: (x, x), "f").call([np.ones(2)])


def test_run_refuses_a_shape_the_pattern_does_not_give_and_names_the_pattern():
    op = _bound(UdfLines(lambda x: x.var(axis=0), 0, name="var0"), [(30, 20)])
    with pytest.raises(WorkflowError, match=r"sz.udf var0: .* returned shape \(20,\); declare sz.Reduce\(axis=0\)"):
        op.run(None, np.ones((30, 20)))
    one = _bound(UdfReduce(np.var), [(3, 4)])
    assert one.run(None, np.arange(12.0).reshape(3, 4)).shape == (1, 1)


def test_mapping_functions_old_and_new_signatures():
    old = _bound(UdfMapped(np.negative, lambda c, i: c, lambda c, i: c), [(3, 4)])
    assert old.map_b(np.array([[1, 2]]), 0).tolist() == [[1, 2]]
    got = []
    new = _bound(UdfMapped(np.negative, lambda c, i, shapes: got.append(shapes) or c, lambda c, i, **kw: c), [(3, 4)])
    assert new.map_b(np.array([[1, 2]]), 0).tolist() == [[1, 2]] and got == [MapShapes(((3, 4),), (3, 4))]
    assert new.map_f(np.array([[1, 2]]), 0).tolist() == [[1, 2]]
    assert _bound(UdfBlackBox(np.sum, shape=(1,)), [(3, 4)]).output_shape == (1,)


@pytest.mark.parametrize("shapes, out, want", [
    ([(30, 20)], (20,), "sz.Reduce(axis=0)"),
    ([(30, 20)], (30,), "sz.Reduce(axis=1)"),
    ([(30, 20)], (1, 20), "sz.Reduce(axis=0, keepdims=True)"),
    ([(30, 20)], (), "sz.Reduce()"),
    ([(4, 5, 6)], (5,), "sz.Reduce(axis=(0, 2))"),
    ([(30, 20), (20,)], (30, 20), "lineage='elementwise', sz.Window(radius=r) or sz.Lines(axis=a)"),
    ([(30, 20)], (7, 7), "lineage='all', shape=(7, 7)"),
])
def test_suggest_pattern(shapes, out, want):
    assert suggest_pattern(shapes, out) == want


@pytest.mark.parametrize("make", list(_patterns()), ids=lambda op: op.lineage)
def test_no_cells_have_no_lineage(make):
    op = _bound(make, [(5, 6), (6,)])
    assert op.map_b(np.empty((0, len(op.output_shape)), np.int64), 1).shape == (0, 1)
    assert op.map_f(np.empty((0, 2), np.int64), 0).shape == (0, len(op.output_shape))

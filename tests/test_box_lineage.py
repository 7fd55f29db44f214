"""Box forms of mapping functions (``map_b_boxes`` / ``map_f_boxes``): for every built-in operator
that has them, the boxes they return hold exactly the lineage of the cells of the query boxes,
and a query given a box stays a box through them."""

from __future__ import annotations

import numpy as np
import pytest

import subzero as sz
from subzero import operators as ops
from subzero.boxes import ids_in_boxes
from subzero.cells import to_coords, to_ids
from subzero.frontier import Frontier
from subzero.query import map_step

from test_operators import SPECS


def _random_boxes(rng, shape, n):
    lo = np.array([[rng.integers(0, s) for s in shape] for _ in range(n)], np.int64).reshape(n, len(shape))
    hi = lo + np.array([[rng.integers(1, s - l + 1) for s, l in zip(shape, row)] for row in lo], np.int64)
    return lo, hi


def _ids(boxes, shape):
    lo, hi = boxes
    return ids_in_boxes(lo, hi, shape) if len(lo) else np.empty(0, np.int64)


def _cases():
    names = []
    for name, build in sorted(SPECS.items()):
        case = build(np.random.default_rng(0), 2, 6)
        op = case.op
        if type(op).map_b_boxes is not sz.Operator.map_b_boxes or type(op).map_f_boxes is not sz.Operator.map_f_boxes:
            names.append(name)
    return names


BOXED = _cases()


def test_the_box_forms_cover_the_index_mapping_families():
    assert {"Transpose", "Add", "Slice", "Flip", "Pad", "Tile"} <= set(BOXED)


@pytest.mark.parametrize("name", BOXED)
@pytest.mark.parametrize("seed", range(6))
def test_box_forms_hold_exactly_the_lineage_of_the_boxes_cells(name, seed):
    rng = np.random.default_rng(seed)
    case = SPECS[name](rng, int(rng.integers(1, 4)), 6)
    op = case.op
    op.input_shapes = tuple(tuple(np.shape(x)) for x in case.inputs)
    op.output_shape = tuple(np.shape(case.expected))
    if not all(op.input_shapes) or not op.output_shape or not all(op.output_shape):
        return
    for i, in_shape in enumerate(op.input_shapes):
        lo, hi = _random_boxes(rng, op.output_shape, int(rng.integers(1, 4)))
        got = op.map_b_boxes(lo, hi, i)
        if got is not None:
            cells = to_coords(ids_in_boxes(lo, hi, op.output_shape), op.output_shape)
            want = np.unique(to_ids(op.map_b(cells, i), in_shape)) if len(cells) else np.empty(0, np.int64)
            np.testing.assert_array_equal(_ids(got, in_shape), want, err_msg=f"{name} backward input {i}")
        lo, hi = _random_boxes(rng, in_shape, int(rng.integers(1, 4)))
        got = op.map_f_boxes(lo, hi, i)
        if got is not None:
            cells = to_coords(ids_in_boxes(lo, hi, in_shape), in_shape)
            want = np.unique(to_ids(op.map_f(cells, i), op.output_shape)) if len(cells) else np.empty(0, np.int64)
            np.testing.assert_array_equal(_ids(got, op.output_shape), want, err_msg=f"{name} forward input {i}")


def test_a_box_query_stays_boxes_through_box_forms():
    op = ops.Transpose()
    op.input_shapes, op.output_shape = ((300, 200),), (200, 300)
    box = Frontier.of_boxes(np.array([[10, 20]]), np.array([[110, 220]]), (200, 300))
    got = map_step(op, box, 0, "backward", (300, 200))
    assert got.kind == "boxes" and got.count == 100 * 200
    assert got.bbox()[0].tolist() == [20, 10] and got.bbox()[1].tolist() == [220, 110]


def test_forward_through_a_broadcast_is_the_broadcast_extent():
    op = ops.Add()
    op.input_shapes, op.output_shape = ((5, 1), (4,)), (5, 4)
    np.testing.assert_array_equal(op.map_f(np.array([[2, 0]]), 0), [[2, 0], [2, 1], [2, 2], [2, 3]])
    np.testing.assert_array_equal(op.map_f(np.array([[3]]), 1), [[r, 3] for r in range(5)])

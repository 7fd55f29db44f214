"""Tilings: tiles cover an array exactly once, and each tiling reads the boxes its operator needs."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from scipy import ndimage
from hypothesis import given, settings
from hypothesis import strategies as st

import subzero as sz
from subzero import operators as ops
from subzero.context import Context
from subzero.replay import Patch, replay
from subzero.tiling import (Elementwise, Halo, Permuted, Reduced, RowBlocks, Whole, box_shape, box_slices,
                            intersects, target_tile_cells, tile_grid, tile_lens)


def bound(shapes, out=None):
    """A stand-in operator: only the shapes a tiling looks at."""
    return SimpleNamespace(input_shapes=tuple(map(tuple, shapes)), output_shape=out)


def bind(op: sz.Operator, *shapes) -> sz.Operator:
    """Bind a real operator to input shapes, as the runtime does before any call."""
    op.input_shapes = tuple(tuple(s) for s in shapes)
    op.output_shape = tuple(op.infer_output_shape(op.input_shapes))
    return op


# -- tile_grid ----------------------------------------------------------------------------------

@st.composite
def grids(draw):
    shape = tuple(draw(st.lists(st.integers(0, 7), min_size=1, max_size=3)))
    split = tuple(a for a in range(len(shape)) if draw(st.booleans()))
    tile_shape = draw(st.one_of(
        st.none(), st.integers(1, 8),
        st.lists(st.integers(1, 8), min_size=0, max_size=len(shape)).map(tuple)))
    return shape, split, tile_shape


@settings(max_examples=150, deadline=None)
@given(grids())
def test_tile_grid_covers_the_shape_exactly_once(case):
    shape, split, tile_shape = case
    tiles = tile_grid(shape, split, tile_shape)
    assert [t.index for t in tiles] == list(range(len(tiles)))
    cover = np.zeros(shape, np.int64)
    for t in tiles:
        assert len(t.box) == len(shape)
        for axis, ((lo, hi), n) in enumerate(zip(t.box, shape)):
            assert 0 <= lo <= hi <= n
            if axis not in split:
                assert (lo, hi) == (0, n)
        cover[box_slices(t.box)] += 1
    assert np.all(cover == 1)
    assert len({t.box for t in tiles}) == len(tiles)


@settings(max_examples=60, deadline=None)
@given(grids())
def test_tile_lengths_follow_tile_shape(case):
    shape, split, tile_shape = case
    if tile_shape is None:
        return
    lens = [tile_shape] * len(shape) if isinstance(tile_shape, int) else \
        list(tile_shape) + [max(shape)] * (len(shape) - len(tile_shape))
    for t in tile_grid(shape, split, tile_shape):
        for axis in split:
            lo, hi = t.box[axis]
            step = max(1, lens[axis])
            assert lo % step == 0
            assert hi - lo == min(step, shape[axis] - lo)


def test_no_split_axes_is_one_tile():
    assert [t.box for t in tile_grid((4, 5), (), 2)] == [((0, 4), (0, 5))]


def test_default_tile_size_is_about_65536_cells():
    tiles = tile_grid((1000, 1000), (0, 1), None)
    assert 10 <= len(tiles) <= 30
    assert max(np.prod(box_shape(t.box)) for t in tiles) <= 1 << 17


@pytest.mark.parametrize("shape, split", [((1 << 20, 1), (0, 1)), ((1, 1 << 20), (0, 1)), ((1 << 20,), (0,)),
                                          ((1 << 18, 4), (0, 1)), ((3, 5, 1 << 17), (0, 1, 2)), ((1 << 20, 1), (0,)),
                                          ((2048, 2048), (0, 1)), ((1 << 17, 8), (0,))])
def test_default_tiles_hold_the_target_cells_whatever_the_arrays_shape(shape, split):
    """A narrow array ((N, 1), a row, a short axis) gets tiles of about the target cells, as a
    square one does: a short axis is taken whole and the cells it leaves go to the others."""
    target = target_tile_cells(int(np.prod(shape)))
    tiles = tile_grid(shape, split, None)
    cells = [int(np.prod(box_shape(t.box))) for t in tiles]
    assert len(cells) <= -(-int(np.prod(shape)) // int(target * 0.98))
    assert max(cells) <= target * 1.02 and np.median(cells) >= target * 0.98


def test_default_tiles_of_arrays_with_no_short_axis_cut_each_axis_evenly():
    """Where every split axis is longer than its share (the per-axis root of the target cells),
    it is cut into as many tiles as the share asks for, of even lengths: no last tile is a
    sliver, whose chunk Zarr would store at full size (365 days: ten tiles of 37, not nine of 40
    and one of 5); a length that divides evenly is the root itself."""
    for shape in [(1000, 1000), (130, 7), (4096, 4096), (365, 55, 50), (7,), (512, 2000), (3, 5, 1 << 17)]:
        split = tuple(range(len(shape)))
        lens = tile_lens(shape, split, None)
        root = int(round((target_tile_cells(int(np.prod(shape)))) ** (1 / len(shape))))
        for n, length in zip(shape, lens):
            count = -(-n // length)
            assert -(-n // count) == length and count * length - n < count  # even: the last tile short by < 1 cell each
            if n % root == 0 and n > root:
                assert length == root
    assert tile_lens((365, 55, 50), (0, 1, 2), None) == (37, 28, 25)  # 10 x 2 x 2 tiles, none mostly padding


def test_a_store_tiled_as_before_opens_and_answers_identically(tmp_path, monkeypatch):
    """A store whose narrow arrays were tiled by the per-axis root (256 x 1 tiles of a (4096, 1)
    array) opens, reads and answers as it did, and resumes, after the default tiles changed: the
    tiles of each array are its record's, never today's default."""
    import subzero.tiling as tiling

    def old_lens(shape, split_axes):  # the per-axis root, before short axes were taken whole
        whole = int(np.prod([shape[a] for a in range(len(shape)) if a not in split_axes]))
        per = max(target_tile_cells(int(np.prod(shape))) / max(whole, 1), 1.0)
        return [max(1, int(round(per ** (1.0 / max(len(split_axes), 1)))))] * len(shape)

    x = np.random.default_rng(0).normal(size=(4096, 1))
    wf = sz.Workflow("narrow")
    xin = wf.input("x")
    smooth = wf.add(ops.UniformFilter(5), xin, name="smooth")
    wf.add(ops.Multiply(), smooth, xin, name="out")
    queries = [("out", [(7, 0), (300, 0), (4095, 0)], "x"), ("smooth", [(255, 0), (256, 0)], "x")]
    with monkeypatch.context() as m:
        m.setattr(tiling, "_target_lens", old_lens)
        run = wf.run({"x": x}, store=str(tmp_path / "old"), executor="local", strategies={"out": "FullOne"})
        run.wait()
        before = {q[0] + str(q[1]): run.backward(*q[:2], to=q[2]) for q in queries}
        forward = run.forward("x", [(256, 0)], to="out")
        values = np.asarray(run.output("out"))
    assert sz.open_run(str(tmp_path / "old")).catalog.nodes["out"].tile_shape == (256, 1)
    assert tile_lens((4096, 1), (0, 1), None) == (4096, 1)  # today's default: one tile
    reopened = sz.open_run(str(tmp_path / "old"))
    for node, cells, to in queries:
        np.testing.assert_array_equal(reopened.backward(node, cells, to=to), before[node + str(cells)])
    np.testing.assert_array_equal(reopened.forward("x", [(256, 0)], to="out"), forward)
    np.testing.assert_array_equal(np.asarray(reopened.output("out")), values)
    resumed = wf.run({"x": x}, store=str(tmp_path / "old"), executor="local", strategies={"out": "FullOne"},
                     resume=True)
    resumed.wait()
    np.testing.assert_array_equal(np.asarray(resumed.output("out")), values)
    cells = reopened.frontier("x", cells=[(300, 0)])
    replayed = replay(reopened, Patch("x", cells, value=7.0), str(tmp_path / "replayed"))
    assert {n.name: (n.how, n.rerun) for n in replayed.nodes if n.name != "x"} == {"smooth": ("tiles", 1),
                                                                                  "out": ("tiles", 1)}
    expected = x.copy()
    expected[300, 0] = 7.0
    np.testing.assert_allclose(np.asarray(replayed.run.output("out")),
                               ndimage.uniform_filter(expected, 5) * expected)


def test_tiles_are_row_major():
    boxes = [t.box for t in tile_grid((4, 4), (0, 1), 2)]
    assert boxes == [((0, 2), (0, 2)), ((0, 2), (2, 4)), ((2, 4), (0, 2)), ((2, 4), (2, 4))]


def test_box_helpers():
    assert box_shape(((1, 4), (2, 2))) == (3, 0)
    assert box_slices(((2, 4), (1, 3)), origin=((1, 5), (0, 9))) == (slice(1, 3), slice(1, 3))
    assert intersects(((0, 2), (0, 2)), [1, 1], [5, 5]) and not intersects(((0, 2), (0, 2)), [2, 0], [5, 5])


# -- input_box / result_box ---------------------------------------------------------------------------

def test_whole_reads_every_input_entirely_and_never_splits():
    op = bound([(3, 4), (5,)], (2, 2))
    assert Whole().split_axes(op) == ()
    assert Whole().input_box(op, ((0, 2), (0, 2)), 0) == ((0, 3), (0, 4))
    assert Whole().input_box(op, ((0, 2), (0, 2)), 1) == ((0, 5),)


@pytest.mark.parametrize("in_shape, expected", [
    ((6, 8), ((2, 4), (3, 7))),   # same shape: the same box
    ((1, 8), ((0, 1), (3, 7))),   # size-1 axis broadcasts: cell 0
    ((6, 1), ((2, 4), (0, 1))),
    ((8,), ((3, 7),)),            # missing leading axis
    ((1,), ((0, 1),)),
    ((), ()),                     # a scalar array
])
def test_elementwise_input_box_broadcasts(in_shape, expected):
    op = bound([in_shape], (6, 8))
    assert Elementwise().input_box(op, ((2, 4), (3, 7)), 0) == expected


@pytest.mark.parametrize("out_box, expected", [
    (((2, 4), (3, 5)), ((1, 5), (2, 6))),     # interior: grown by one
    (((0, 2), (0, 2)), ((0, 3), (0, 3))),     # clipped at the low edges
    (((4, 6), (6, 8)), ((3, 6), (5, 8))),     # clipped at the high edges
])
def test_halo_input_box_is_clipped_at_edges(out_box, expected):
    op = bound([(6, 8)], (6, 8))
    halo = Halo(1)
    in_box = halo.input_box(op, out_box, 0)
    assert in_box == expected
    assert halo.result_box(op, out_box, (in_box,)) == in_box


def test_halo_with_per_axis_widths():
    op = bound([(10, 10)], (10, 10))
    assert Halo((2, 0)).input_box(op, ((4, 6), (4, 6)), 0) == ((2, 8), (4, 6))
    assert Halo((3, 1)).input_box(op, ((0, 10), (0, 10)), 0) == ((0, 10), (0, 10))


def test_result_box_defaults_to_the_tile():
    op = bound([(6, 8)], (6, 8))
    for tiling in (Elementwise(), Whole(), RowBlocks()):
        assert tiling.result_box(op, ((1, 2), (3, 4)), (((0, 6), (0, 8)),)) == ((1, 2), (3, 4))


def test_permuted_input_box():
    op = bound([(3, 4, 5)], (5, 3, 4))
    assert Permuted((2, 0, 1)).input_box(op, ((0, 1), (1, 2), (2, 3)), 0) == ((1, 2), (2, 3), (0, 1))
    assert Permuted((1, 0)).input_box(bound([(2, 3)]), ((0, 3), (1, 2)), 0) == ((1, 2), (0, 3))


def test_reduced_input_box_reads_the_reduced_axis_whole():
    op = bound([(4, 5, 6)], (4, 6))
    assert Reduced(1).input_box(op, ((1, 3), (2, 4)), 0) == ((1, 3), (0, 5), (2, 4))
    assert Reduced(0).input_box(bound([(4, 5)]), ((2, 3),), 0) == ((0, 4), (2, 3))
    assert Reduced(1).input_box(bound([(4, 5)]), ((2, 3),), 0) == ((2, 3), (0, 5))


def test_row_blocks_split_rows_and_read_all_of_the_right_matrix():
    op = bound([(6, 3), (3, 4)], (6, 4))
    assert RowBlocks().split_axes(op) == (0,)
    assert RowBlocks().input_box(op, ((2, 4), (0, 4)), 0) == ((2, 4), (0, 3))
    assert RowBlocks().input_box(op, ((2, 4), (0, 4)), 1) == ((0, 3), (0, 4))


# -- real operators: tiled results equal the whole-array result ---------------------------------------

def run_tiled(op: sz.Operator, inputs: list[np.ndarray], tile_len: int) -> np.ndarray:
    """Compute ``op`` tile by tile the way the runtime does: read input boxes, trim the result box."""
    tiling = op.effective_tiling()
    out = np.full(op.output_shape, np.nan)
    for tile in tile_grid(op.output_shape, tiling.split_axes(op), tile_len):
        in_boxes = tuple(tiling.input_box(op, tile.box, i) for i in range(len(inputs)))
        result_box = tiling.result_box(op, tile.box, in_boxes)
        ctx = Context("op", (), tile.box, in_boxes, op.input_shapes, op.output_shape)
        got = op.run(ctx, *[x[box_slices(b)] for x, b in zip(inputs, in_boxes)])
        assert got.shape == box_shape(result_box)
        out[box_slices(tile.box)] = got[box_slices(tile.box, result_box)]
    return out


CASES = {
    "add-broadcast": (lambda: ops.Add(), [(5, 6), (1, 6)]),
    "add-missing-axis": (lambda: ops.Add(), [(5, 6), (6,)]),
    "multiply": (lambda: ops.Multiply(), [(4, 7), (4, 7)]),
    "transpose": (lambda: ops.Transpose(), [(5, 7)]),
    "transpose-3d": (lambda: ops.Transpose((2, 0, 1)), [(3, 4, 5)]),
    "sum-axis0": (lambda: ops.Sum(axis=0), [(5, 6)]),
    "sum-axis1": (lambda: ops.Sum(axis=1), [(3, 5, 4)]),
    "matmul": (lambda: ops.MatMul(), [(7, 3), (3, 5)]),
    "convolve-reflect": (lambda: ops.Convolve(np.arange(9.0).reshape(3, 3), mode="reflect"), [(7, 6)]),
    "convolve-constant": (lambda: ops.Convolve(np.ones((1, 5)), mode="constant"), [(6, 9)]),
}


@pytest.mark.parametrize("tile_len", [1, 2, 3])
@pytest.mark.parametrize("case", list(CASES))
def test_tiled_run_equals_whole_run(case, tile_len):
    make, shapes = CASES[case]
    op = bind(make(), *shapes)
    rng = np.random.default_rng(len(case) + tile_len)
    inputs = [rng.normal(size=s) for s in shapes]
    whole = op.run(Context("op", (), (), (), op.input_shapes, op.output_shape), *inputs)
    np.testing.assert_allclose(run_tiled(op, inputs, tile_len), whole, rtol=1e-12, atol=1e-12)

"""Frontiers: whatever form a frontier holds (ids, boxes, dense mask) and however it was built,
every view of it (ids, coords, mask, boxes, count, bbox, membership, clipping, union) agrees
with a dense numpy mask; `cover_ids` and `ids_in_boxes` invert each other."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import subzero.frontier as frontier_mod
from subzero.frontier import DENSE_FRACTION, Frontier, cover_ids, ids_in_boxes

# -- strategies ---------------------------------------------------------------------------------------------

MAX_CELLS = 3000


@st.composite
def shapes(draw):
    """0-d to 3-d shapes with size-1 axes, short axes and one or two long ones."""
    ndim = draw(st.integers(0, 3))
    longest = {1: 2000, 2: 60, 3: 15}.get(ndim, 6)
    axis = st.one_of(st.just(1), st.integers(2, 5), st.integers(6, longest))
    shape = tuple(draw(axis) for _ in range(ndim))
    return shape if int(np.prod(shape, dtype=np.int64)) <= MAX_CELLS else tuple(min(n, 10) for n in shape)


@st.composite
def masks(draw, shape):
    """A reference cell set: a few drawn ids, or a random mask of some density."""
    size = int(np.prod(shape, dtype=np.int64))
    how = draw(st.sampled_from(["ids", "density"]))
    ref = np.zeros(size, bool)
    if how == "ids":
        ref[draw(st.lists(st.integers(0, size - 1), max_size=12))] = True
    else:
        density = draw(st.sampled_from([0.0, 0.02, 0.1, DENSE_FRACTION, 0.2, 0.5, 0.95, 1.0]))
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        ref = rng.random(size) < density
    return ref.reshape(shape)


@st.composite
def box_lists(draw, shape, max_boxes=5, outside=True):
    """Half-open boxes, overlapping, possibly reaching past the array (``outside``) or empty."""
    n = draw(st.integers(0, max_boxes))
    slack = 2 if outside else 0
    lo, hi = [], []
    for _ in range(n):
        a = [draw(st.one_of(st.integers(-slack, 0), st.integers(-slack, d))) for d in shape]  # edges often
        b = [draw(st.one_of(st.integers(x, min(x + 2, d + slack)), st.integers(x - 1, d + slack),
                            st.integers(d, d + slack))) for x, d in zip(a, shape)]
        lo.append(a)
        hi.append(b)
    return np.array(lo, np.int64).reshape(n, len(shape)), np.array(hi, np.int64).reshape(n, len(shape))


def paint(lo, hi, shape) -> np.ndarray:
    """The reference mask of boxes (clipped to the array; empty boxes paint nothing)."""
    ref = np.zeros(shape, bool)
    for a, b in zip(lo, hi):
        if np.all(np.asarray(b) > np.asarray(a)):
            ref[tuple(slice(max(x, 0), max(y, 0)) for x, y in zip(a, b))] = True
    return ref


def box_mask(lo, hi, shape) -> np.ndarray:
    return paint(np.asarray(lo).reshape(1, -1), np.asarray(hi).reshape(1, -1), shape)


# -- one frontier against its reference ------------------------------------------------------------------------

def check_ids(f, ref):
    got = f.ids()
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, np.flatnonzero(ref.reshape(-1)))


def check_coords(f, ref):
    got = f.coords()
    assert got.dtype == np.int64 and got.shape == (int(ref.sum()), ref.ndim)
    np.testing.assert_array_equal(got, np.argwhere(ref))


def check_mask(f, ref):
    got = f.mask()
    assert got.dtype == bool and got.shape == ref.shape
    np.testing.assert_array_equal(got, ref)


def check_boxes(f, ref):
    lo, hi = f.boxes()
    assert lo.shape == hi.shape and lo.shape[1:] == (ref.ndim,)
    assert np.all(hi > lo) and np.all(lo >= 0) and np.all(hi <= np.asarray(ref.shape, np.int64))
    np.testing.assert_array_equal(paint(lo, hi, ref.shape), ref)


def check_count(f, ref):
    n = int(ref.sum())
    assert f.count == n and len(f) == n


def check_estimate(f, ref):
    assert f.estimate() >= int(ref.sum())
    assert f.estimate() <= ref.size


def check_bbox(f, ref):
    box = f.bbox()
    if not ref.any():
        assert box is None
        return
    c = np.argwhere(ref)
    np.testing.assert_array_equal(box[0], c.min(axis=0))
    np.testing.assert_array_equal(box[1], c.max(axis=0) + 1)


def check_flags(f, ref):
    assert f.is_empty == (not ref.any())
    assert f.is_full == bool(ref.all())


def check_contains(f, ref):
    every = np.arange(ref.size, dtype=np.int64)
    np.testing.assert_array_equal(f.contains(every), ref.reshape(-1))
    some = np.random.default_rng(0).permutation(every)[:7]
    np.testing.assert_array_equal(f.contains(some), ref.reshape(-1)[some])


def check_form(f, ref):
    """A frontier is a dense mask only above DENSE_FRACTION of the array (and 64 cells)."""
    if f.kind == "mask":
        assert f.count > DENSE_FRACTION * ref.size and f.count > 64


CHECKS = [check_ids, check_coords, check_mask, check_boxes, check_count, check_estimate, check_bbox, check_flags,
          check_contains, check_form]


def agrees(make, ref):
    """Every view of a fresh frontier from ``make()`` (views cache: each check gets its own), then all
    views of one frontier in turn."""
    for check in CHECKS:
        check(make(), ref)
    f = make()
    for check in CHECKS[::-1]:
        check(f, ref)


def builds(ref, boxes=None):
    """Frontiers of ``ref`` built every way (name -> factory)."""
    shape = ref.shape
    ids = np.flatnonzero(ref.reshape(-1))
    rng = np.random.default_rng(len(ids))
    shuffled = rng.permutation(np.r_[ids, ids[: len(ids) // 3]]).astype(np.int64)  # unsorted, duplicates
    out = {
        "of_ids": lambda: Frontier.of_ids(shuffled, shape),
        "of_ids unique": lambda: Frontier.of_ids(ids, shape, unique=True),
        "of_coords": lambda: Frontier.of_coords(np.argwhere(ref)[rng.permutation(len(ids))],
                                                shape),
        "of_mask": lambda: Frontier.of_mask(ref.copy()),
        "cover boxes": lambda: Frontier.of_boxes(*cover_ids(ids, shape), shape, disjoint=True),
    }
    if boxes is not None:
        out["of_boxes"] = lambda: Frontier.of_boxes(boxes[0], boxes[1], shape)
    return out


# -- properties ------------------------------------------------------------------------------------------------

@settings(max_examples=80, deadline=None)
@given(st.data())
def test_every_form_agrees_with_the_mask(data):
    shape = data.draw(shapes())
    ref = data.draw(masks(shape))
    for make in builds(ref).values():
        agrees(make, ref)


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_overlapping_boxes_agree_with_the_mask(data):
    shape = data.draw(shapes())
    lo, hi = data.draw(box_lists(shape))
    ref = paint(lo, hi, shape)
    f = Frontier.of_boxes(lo, hi, shape)
    assert f.kind == ("boxes" if ref.any() and shape else "ids")
    agrees(lambda: Frontier.of_boxes(lo, hi, shape), ref)


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_boxes_too_large_to_expand_go_through_a_mask(data):
    shape = data.draw(shapes())
    lo, hi = data.draw(box_lists(shape))
    ref = paint(lo, hi, shape)
    with mock.patch.object(frontier_mod, "MAX_BOX_EXPANSION", 3):
        agrees(lambda: Frontier.of_boxes(lo, hi, shape), ref)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_within_and_meets_agree_with_the_mask(data):
    shape = data.draw(shapes())
    if data.draw(st.booleans()):
        boxes = data.draw(box_lists(shape))
        ref = paint(*boxes, shape)
    else:
        boxes, ref = None, data.draw(masks(shape))
    (qlo,), (qhi,) = data.draw(box_lists(shape, max_boxes=1).filter(lambda b: len(b[0]) == 1))
    inside = ref & box_mask(qlo, qhi, shape)
    for name, make in builds(ref, boxes).items():
        assert make().meets(qlo, qhi) == bool(inside.any()), name
        agrees(lambda: make().within(qlo, qhi), inside)


@pytest.mark.parametrize("qlo,qhi", [((-1, -2), (4, 3)), ((-3, 0), (-1, 10)), ((10, 8), (15, 14)),
                                     ((-5, -5), (20, 20)), ((3, -4), (6, -1)), ((2, 2), (2, 5))])
def test_within_and_meets_a_box_reaching_past_the_array(qlo, qhi):
    shape = (12, 10)
    ref = np.random.default_rng(1).random(shape) < 0.6
    boxes = (np.array([[-2, -2], [5, 3]]), np.array([[6, 4], [14, 12]]))
    assert Frontier.of_mask(ref).kind == "mask"  # the dense form too
    inside = ref & box_mask(qlo, qhi, shape)
    for name, make in builds(ref).items():
        assert make().meets(qlo, qhi) == bool(inside.any()), name
        agrees(lambda: make().within(qlo, qhi), inside)
    f = Frontier.of_boxes(*boxes, shape)
    inside = paint(*boxes, shape) & box_mask(qlo, qhi, shape)
    assert f.meets(qlo, qhi) == bool(inside.any())
    agrees(lambda: f.within(qlo, qhi), inside)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_union_agrees_with_the_mask(data):
    shape = data.draw(shapes())
    a, b = data.draw(masks(shape)), data.draw(masks(shape))
    boxes = data.draw(box_lists(shape))
    c = paint(*boxes, shape)
    makers = [(a, m) for m in builds(a).values()] + [(b, m) for m in builds(b).values()] + \
             [(c, lambda: Frontier.of_boxes(*boxes, shape))]
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    for k in rng.choice(len(makers), size=(6, 2)):
        (ra, ma), (rb, mb) = makers[k[0]], makers[k[1]]
        agrees(lambda: ma().union(mb()), ra | rb)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_union_all_agrees_with_the_mask(data):
    shape = data.draw(shapes())
    a, b = data.draw(masks(shape)), data.draw(masks(shape))
    boxes = data.draw(box_lists(shape))
    c = paint(*boxes, shape)
    makers = [(a, m) for m in builds(a).values()] + [(b, m) for m in builds(b).values()] + \
             [(c, lambda: Frontier.of_boxes(*boxes, shape))]
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    for k in range(1, 6):
        chosen = [makers[j] for j in rng.choice(len(makers), size=k)]
        parts = [m() for _, m in chosen]
        held = [p.mask().copy() for p in parts]
        agrees(lambda: Frontier.union_all(parts), np.logical_or.reduce([r for r, _ in chosen]))
        for p, before in zip(parts, held):  # no part is written into
            np.testing.assert_array_equal(p.mask(), before)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_cover_ids_gives_disjoint_boxes_covering_exactly_the_ids(data):
    shape = data.draw(shapes())
    ref = data.draw(masks(shape))
    ids = np.flatnonzero(ref.reshape(-1)).astype(np.int64)
    lo, hi = cover_ids(ids, shape)
    assert lo.dtype == hi.dtype == np.int64 and lo.shape == hi.shape == (len(lo), len(shape))
    assert np.all(hi > lo)
    volume = int(np.prod(hi - lo, axis=1).sum())
    assert volume == len(ids)  # disjoint: volumes add up to the cells
    np.testing.assert_array_equal(paint(lo, hi, shape), ref)
    np.testing.assert_array_equal(ids_in_boxes(lo, hi, shape), ids)
    assert len(lo) <= max(len(ids), 0)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_ids_in_boxes_lists_the_cells_of_overlapping_boxes(data):
    shape = data.draw(shapes())
    lo, hi = data.draw(box_lists(shape, outside=False))
    ref = paint(lo, hi, shape)
    got = ids_in_boxes(lo, hi, shape)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, np.flatnonzero(ref.reshape(-1)))
    # and back: the cover of those ids paints the same cells
    np.testing.assert_array_equal(paint(*cover_ids(got, shape), shape), ref)


def test_cover_ids_merges_rectangles_into_one_box():
    shape = (6, 7, 5)
    ref = box_mask((1, 2, 0), (4, 6, 5), shape)
    lo, hi = cover_ids(np.flatnonzero(ref.reshape(-1)), shape)
    assert lo.tolist() == [[1, 2, 0]] and hi.tolist() == [[4, 6, 5]]
    lo, hi = cover_ids(np.arange(6 * 7 * 5), shape)
    assert lo.tolist() == [[0, 0, 0]] and hi.tolist() == [[6, 7, 5]]


# -- representation ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("size", [64, 100, 513, 4096])
def test_a_frontier_is_a_dense_mask_only_above_the_dense_fraction(size):
    threshold = max(int(DENSE_FRACTION * size), 64)
    below = np.arange(threshold)
    above = np.arange(threshold + 1) if threshold + 1 <= size else None
    assert Frontier.of_ids(below, (size,)).kind == "ids"
    mask = np.zeros(size, bool)
    mask[below] = True
    assert Frontier.of_mask(mask).kind == "ids"
    if above is not None:
        assert Frontier.of_ids(above, (size,)).kind == "mask"
        mask[above] = True
        assert Frontier.of_mask(mask).kind == "mask"
    # boxes stay boxes whatever their volume: they cost their number, not their cells
    assert Frontier.of_boxes(np.array([[0]]), np.array([[size]]), (size,)).kind == "boxes"


def test_union_picks_the_form_again():
    shape = (40, 40)
    small = Frontier.of_ids(np.arange(10), shape)
    assert small.union(Frontier.of_ids(np.arange(10, 20), shape)).kind == "ids"
    big = Frontier.of_ids(np.arange(0, 1600, 2), shape)
    assert big.kind == "mask"
    assert big.union(small).kind == "mask" and big.union(small).count == 805
    sparse = Frontier.of_mask(np.eye(40, dtype=bool))  # 40 cells: ids
    assert sparse.kind == "ids" and sparse.union(small).kind == "ids"


# -- empty, full, 0-d -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(), (1,), (7,), (1, 1), (3, 1, 4), (5, 6)])
def test_empty_and_full(shape):
    agrees(lambda: Frontier.empty(shape), np.zeros(shape, bool))
    agrees(lambda: Frontier.full(shape), np.ones(shape, bool))
    assert Frontier.empty(shape).is_empty and not Frontier.empty(shape).is_full
    assert Frontier.full(shape).is_full and not Frontier.full(shape).is_empty
    assert Frontier.full(shape).count == int(np.prod(shape, dtype=np.int64))
    full, empty = Frontier.full(shape), Frontier.empty(shape)
    agrees(lambda: full.union(empty), np.ones(shape, bool))
    agrees(lambda: empty.union(full), np.ones(shape, bool))
    agrees(lambda: empty.union(Frontier.empty(shape)), np.zeros(shape, bool))


def test_full_is_full_only_when_every_cell_is_in():
    shape = (4, 5)
    halves = Frontier.of_boxes(np.array([[0, 0], [2, 0]]), np.array([[2, 5], [4, 5]]), shape)
    assert halves.is_full and halves.count == 20
    hole = Frontier.of_boxes(np.array([[0, 0], [2, 0]]), np.array([[2, 5], [4, 4]]), shape)
    assert not hole.is_full and hole.count == 18
    almost = Frontier.of_ids(np.arange(19), shape)
    assert not almost.is_full and Frontier.of_ids(np.arange(20), shape).is_full
    every = np.argwhere(np.ones(shape, bool))  # every cell as a mask or as one box: laid out in C order
    for full in (Frontier.of_mask(np.ones(shape, bool)), Frontier((4, 5), mask=np.ones(shape, bool), count=20),
                 Frontier.of_boxes(np.array([[1, 2]]), np.array([[3, 5]]), shape)):
        expected = every if full.count == 20 else np.argwhere(full.mask())
        np.testing.assert_array_equal(full.coords(), expected)


def test_a_0d_array_has_one_cell():
    shape = ()
    one = np.ones((), bool)
    agrees(lambda: Frontier.of_ids(np.array([0, 0]), shape), one)
    agrees(lambda: Frontier.of_coords(np.zeros((1, 0), np.int64), shape), one)
    agrees(lambda: Frontier.of_mask(np.array(True)), one)
    agrees(lambda: Frontier.of_mask(np.array(False)), np.zeros((), bool))
    agrees(lambda: Frontier.of_boxes(np.zeros((1, 0)), np.zeros((1, 0)), shape), one)
    agrees(lambda: Frontier.of_boxes(np.zeros((0, 0)), np.zeros((0, 0)), shape), np.zeros((), bool))
    f = Frontier.full(shape)
    assert f.coords().shape == (1, 0) and f.mask().shape == ()
    assert f.meets(np.zeros(0), np.zeros(0)) and f.within(np.zeros(0), np.zeros(0)).count == 1
    np.testing.assert_array_equal(ids_in_boxes(np.zeros((1, 0)), np.zeros((1, 0)), shape), [0])
    lo, hi = cover_ids(np.array([0]), shape)
    assert lo.shape == hi.shape == (1, 0)
    assert cover_ids(np.empty(0, np.int64), shape)[0].shape == (0, 0)


def test_repr_names_the_form_and_the_size():
    f = Frontier.of_ids(np.array([3, 1]), (4, 4))
    assert repr(f) == "Frontier(ids, 2 of 16 cells, shape (4, 4))"


# -- compact boxes and contained boxes --------------------------------------------------------------------------
@given(st.data())
def test_compact_boxes_are_exactly_the_cells_and_few(data):
    """`compact_boxes` gives the frontier's own cells as boxes, one per 16 cells at most (or
    one), or None; its cover is made once and kept, also by a copy."""
    shape = data.draw(shapes())
    ref = data.draw(masks(shape))
    f = Frontier.of_ids(np.flatnonzero(ref.reshape(-1)), shape)
    got = f.compact_boxes()
    if f.kind == "mask":
        assert got is None
        return
    lo, hi = f.boxes()
    assert f.boxes()[0] is lo  # made once
    assert f.copy().boxes()[0] is not lo and np.array_equal(f.copy().boxes()[0], lo)
    if got is None:
        assert len(lo) > max(1, f.count // 16)
    else:
        assert len(got[0]) <= max(1, f.count // 16)
        assert np.array_equal(paint(*got, shape), ref)


@given(st.data())
def test_a_union_of_boxes_drops_those_another_contains(data):
    shape = data.draw(shapes().filter(lambda s: len(s) > 0))
    lo, hi = data.draw(box_lists(shape, outside=False))
    keep = np.all(hi > lo, axis=1)
    lo, hi = lo[keep], hi[keep]
    inner = (lo + (hi - lo) // 3, hi - (hi - lo) // 3)  # inside each box (or empty)
    outer = Frontier.of_boxes(lo, hi, shape)
    got = outer.union(Frontier.of_boxes(*inner, shape))
    assert np.array_equal(got.mask(), paint(lo, hi, shape))
    kept = frontier_mod.drop_contained(*(np.concatenate([a, b]) for a, b in zip((lo, hi), inner)))
    assert len(kept[0]) <= max(len(lo), 1) and np.array_equal(paint(*kept, shape), paint(lo, hi, shape))

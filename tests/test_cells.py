"""Cells: user coordinates are validated with useful errors; ids, coordinates and masks round-trip."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import subzero as sz
from subzero.cells import as_coords, box_cells, coords_from_mask, mask_from_coords, to_coords, to_ids, unique_ids

shapes = st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple)


@st.composite
def shape_and_coords(draw, max_cells: int = 20):
    """A shape and (N, ndim) in-bounds int64 coordinates over it (duplicates allowed)."""
    shape = draw(shapes)
    rows = draw(st.lists(st.tuples(*[st.integers(0, n - 1) for n in shape]), max_size=max_cells))
    return shape, np.array(rows, dtype=np.int64).reshape(-1, len(shape))


# -- as_coords: accepted forms -------------------------------------------------------------

def test_list_of_tuples():
    got = as_coords([(1, 2), (0, 3)], (3, 4), "x")
    assert got.dtype == np.int64 and got.shape == (2, 2)
    assert got.tolist() == [[1, 2], [0, 3]]


def test_array_of_coordinates_keeps_order_and_duplicates():
    cells = np.array([[2, 0], [0, 1], [2, 0]], dtype=np.int32)
    got = as_coords(cells, (3, 2), "x")
    assert got.dtype == np.int64
    assert got.tolist() == [[2, 0], [0, 1], [2, 0]]


def test_single_tuple_is_one_cell_for_rank_above_one():
    assert as_coords((1, 2, 0), (2, 3, 1), "x").tolist() == [[1, 2, 0]]


def test_one_dimensional_arrays_take_a_flat_list_of_cells():
    assert as_coords([3, 0, 4], (5,), "x").tolist() == [[3], [0], [4]]
    assert as_coords([(3,), (1,)], (5,), "x").tolist() == [[3], [1]]


def test_boolean_mask_gives_its_set_cells_in_row_major_order():
    mask = np.zeros((3, 4), bool)
    mask[2, 1] = mask[0, 3] = mask[1, 0] = True
    assert as_coords(mask, (3, 4), "x").tolist() == [[0, 3], [1, 0], [2, 1]]
    assert as_coords(np.zeros((3, 4), bool), (3, 4), "x").shape == (0, 2)


@pytest.mark.parametrize("empty", [[], (), np.empty((0, 3), np.int64), np.empty(0, np.float64)])
def test_empty_cells_give_an_empty_coordinate_array_of_the_right_rank(empty):
    got = as_coords(empty, (2, 3, 4), "x")
    assert got.shape == (0, 3) and got.dtype == np.int64


def test_integral_floats_are_accepted():
    got = as_coords([(1.0, 2.0)], (3, 4), "x")
    assert got.dtype == np.int64 and got.tolist() == [[1, 2]]


def test_object_arrays_of_integers_are_integers():
    """What pandas and JSON readers give (issue 24: this was called out of bounds)."""
    assert as_coords(np.array([[1, 2]], dtype=object), (48, 64), "x").tolist() == [[1, 2]]
    mixed = np.array([[np.int32(3), 2.0], [7, np.uint8(5)]], dtype=object)
    assert as_coords(mixed, (48, 64), "x").tolist() == [[3, 2], [7, 5]]
    assert as_coords(np.array([4], dtype=object), (10,), "x").tolist() == [[4]]


def test_pandas_frames_and_series_of_tuples():
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"row": [1, 2], "col": [3.0, 4.0]})
    assert as_coords(frame, (5, 5), "x").tolist() == [[1, 3], [2, 4]]
    assert as_coords(pd.Series([(1, 2), (3, 4)]), (5, 5), "x").tolist() == [[1, 2], [3, 4]]
    assert as_coords(pd.DataFrame(np.eye(3, dtype=bool)), (3, 3), "x").tolist() == [[0, 0], [1, 1], [2, 2]]
    with pytest.raises(sz.LineageError, match=r"must be integer coordinates, got <NA>"):
        as_coords(pd.DataFrame({"row": pd.array([1, None], dtype="Int64"), "col": [3, 4]}), (5, 5), "x")


def test_a_single_integer_is_a_cell_of_a_one_dimensional_array():
    assert as_coords(3, (5,), "x").tolist() == [[3]]
    with pytest.raises(sz.LineageError, match="got a single number; pass a list of 2-tuples"):
        as_coords(3, (5, 5), "x")


@pytest.mark.parametrize("cells, fragment", [
    (np.array([[1, True]], dtype=object), "hold the bool True among coordinates"),
    (np.array([[1, "2"]], dtype=object), "got '2' (str)"),
    (np.array([[1, None]], dtype=object), "got None (NoneType)"),
    (np.array([[1, 2.5]], dtype=object), "got 2.5 (floats are accepted only with integral values"),
    (np.array([[1, float("nan")]], dtype=object), "got nan"),
    ([["1", "2"]], "got strings (dtype <U1)"),
    (np.array(["2020-01-01"], dtype="M8[D]"), "got dates"),
    ([[[1, 2]]], "got nesting of shape (1, 1, 2)"),
    (np.array([[1, 2**70]], dtype=object), "cell coordinate 1180591620717411303424 is out of bounds"),
    (np.array([[1, -2**70]], dtype=object), "cell coordinate -1180591620717411303424 is out of bounds"),
])
def test_every_odd_dtype_is_named(cells, fragment):
    with pytest.raises(sz.LineageError) as err:
        as_coords(cells, (48, 64), "node 'blur'")
    assert fragment in str(err.value) and "node 'blur'" in str(err.value), str(err.value)


@given(st.lists(st.tuples(st.integers(0, 47), st.integers(0, 63)), min_size=1, max_size=10),
       st.sampled_from(["int", "object", "float", "object float"]))
def test_every_accepted_dtype_gives_the_same_cells(rows, form):
    want = as_coords(rows, (48, 64), "x")
    cast = {"int": lambda r: np.array(r), "object": lambda r: np.array(r, dtype=object),
            "float": lambda r: np.array(r, dtype=float),
            "object float": lambda r: np.array(r, dtype=float).astype(object)}
    got = as_coords(cast[form](rows), (48, 64), "x")
    assert got.dtype == np.int64 and np.array_equal(got, want)


# -- as_coords: rejected forms -------------------------------------------------------------

@pytest.mark.parametrize("cells", [[(0.5, 1)], [(np.nan, 1)], [(np.inf, 0)], "ab", [None], [(1j, 0)]])
def test_non_integers_are_rejected(cells):
    with pytest.raises(sz.LineageError, match="must be integer coordinates") as err:
        as_coords(cells, (3, 4), "node 'blur' output")
    assert "node 'blur' output" in str(err.value) and "(3, 4)" in str(err.value)


@pytest.mark.parametrize("cells, shape", [
    ([(1, 2, 3)], (3, 4)),
    ((1,), (3, 4)),
    (5, (3, 4)),
    (np.zeros((2, 2, 2), np.int64), (3, 4)),
    ([(1, 2)], (3, 4, 5)),
    ([(1, 2)], (5,)),
])
def test_wrong_rank_is_rejected_with_the_expected_rank(cells, shape):
    with pytest.raises(sz.LineageError, match=f"must have {len(shape)} coordinates each") as err:
        as_coords(cells, shape, "input 'x'")
    assert "input 'x'" in str(err.value) and str(shape) in str(err.value)


@pytest.mark.parametrize("cells", [[(1, 2), (3,)], [[1, 2], [3, 4, 5]]])
def test_ragged_cells_are_a_lineage_error(cells):
    with pytest.raises(sz.LineageError, match=r"\(3, 4\)") as err:
        as_coords(cells, (3, 4), "input 'x'")
    assert "input 'x'" in str(err.value) and "2 coordinates" in str(err.value)


@pytest.mark.parametrize("cells, shape", [([()], (4,)), ([(), ()], (3, 4))])
def test_cells_with_no_coordinates_are_a_rank_error(cells, shape):
    with pytest.raises(sz.LineageError, match=f"must have {len(shape)} coordinates"):
        as_coords(cells, shape, "x")


def test_the_cell_of_a_zero_dimensional_array():
    assert as_coords([()], (), "x").shape == (1, 0)


def test_boolean_mask_of_another_shape_is_rejected():
    with pytest.raises(sz.LineageError, match=r"has shape \(4, 3\), expected \(3, 4\)"):
        as_coords(np.ones((4, 3), bool), (3, 4), "x")


@pytest.mark.parametrize("cells, bad", [
    ([(0, 0), (3, 0)], (3, 0)),
    ([(0, 4)], (0, 4)),
    ([(-1, 2)], (-1, 2)),
    (np.array([[1, 1], [2, 9], [5, 5]]), (2, 9)),
])
def test_out_of_bounds_names_the_shape_and_the_first_bad_cell(cells, bad):
    with pytest.raises(sz.LineageError) as err:
        as_coords(cells, (3, 4), "node 'blur' output")
    message = str(err.value)
    assert "out of bounds" in message and "node 'blur' output" in message
    assert "(3, 4)" in message and str(bad) in message


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("huge", [1e20, -1e19])
def test_huge_integral_floats_are_out_of_bounds_as_given(huge):
    with pytest.raises(sz.LineageError, match="out of bounds") as err:
        as_coords([(huge, 0)], (3, 4), "x")
    assert "9223372036854775808" not in str(err.value) and "(3, 4)" in str(err.value)


def test_huge_unsigned_cells_are_named_as_given():
    with pytest.raises(sz.LineageError, match="out of bounds") as err:
        as_coords(np.array([[2**63, 0]], dtype=np.uint64), (3, 4), "x")
    assert "-9223372036854775808" not in str(err.value) and "9223372036854775808" in str(err.value)


def test_out_of_bounds_counts_the_bad_cells():
    with pytest.raises(sz.LineageError, match=r"\(2 bad cell\(s\)\)"):
        as_coords([(0, 0), (9, 9), (0, -1)], (3, 4), "x")


def test_lineage_error_is_also_a_value_error():
    with pytest.raises(ValueError):
        as_coords([(9, 9)], (3, 4), "x")
    assert issubclass(sz.LineageError, ValueError) and issubclass(sz.LineageError, sz.SubZeroError)


@settings(max_examples=50, deadline=None)
@given(data=st.data(), shape=shapes)
def test_as_coords_accepts_exactly_the_in_bounds_cells(data, shape):
    cell = tuple(data.draw(st.integers(-2, n + 1)) for n in shape)
    inside = all(0 <= c < n for c, n in zip(cell, shape))
    if inside:
        assert as_coords([cell], shape, "x").tolist() == [list(cell)]
    else:
        with pytest.raises(sz.LineageError, match="out of bounds"):
            as_coords([cell], shape, "x")


# -- ids, coordinates and masks ---------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(shape_and_coords())
def test_ids_and_coords_round_trip(case):
    shape, coords = case
    ids = to_ids(coords, shape)
    assert ids.dtype == np.int64 and ids.shape == (len(coords),)
    assert np.all((ids >= 0) & (ids < np.prod(shape)))
    np.testing.assert_array_equal(to_coords(ids, shape), coords)


@settings(max_examples=30, deadline=None)
@given(shapes)
def test_ids_are_row_major_flat_indices(shape):
    everything = np.argwhere(np.ones(shape, bool))
    np.testing.assert_array_equal(to_ids(everything, shape), np.arange(int(np.prod(shape))))


def test_zero_dimensional_coords():
    assert to_coords(np.array([0, 0]), ()).shape == (2, 0)


def test_zero_dimensional_ids():
    """The one cell of a 0-d array (e.g. Sum(axis=0) of a 1-D input) is id 0."""
    assert to_ids(np.empty((3, 0), np.int64), ()).tolist() == [0, 0, 0]
    assert mask_from_coords(np.empty((1, 0), np.int64), ()).item() is True


@settings(max_examples=60, deadline=None)
@given(shape_and_coords())
def test_mask_from_coords_and_back_gives_sorted_unique_cells(case):
    shape, coords = case
    mask = mask_from_coords(coords, shape)
    assert mask.shape == shape and mask.dtype == bool
    assert int(mask.sum()) == len({tuple(c) for c in coords.tolist()})
    back = coords_from_mask(mask)
    assert back.dtype == np.int64
    assert [tuple(c) for c in back.tolist()] == sorted({tuple(c) for c in coords.tolist()})


@settings(max_examples=40, deadline=None)
@given(data=st.data(), shape=shapes)
def test_coords_from_mask_and_back_is_the_same_mask(data, shape):
    flat = data.draw(st.lists(st.booleans(), min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
    mask = np.array(flat, bool).reshape(shape)
    np.testing.assert_array_equal(mask_from_coords(coords_from_mask(mask), shape), mask)


# -- boxes --------------------------------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(data=st.data(), shape=shapes)
def test_box_cells_lists_every_cell_of_the_half_open_box_once_in_order(data, shape):
    lo = tuple(data.draw(st.integers(0, n)) for n in shape)
    hi = tuple(data.draw(st.integers(a, n)) for a, n in zip(lo, shape))
    cells = box_cells(lo, hi)
    assert cells.dtype == np.int64 and cells.shape == (int(np.prod([b - a for a, b in zip(lo, hi)])), len(shape))
    expected = np.zeros(shape, bool)
    expected[tuple(slice(a, b) for a, b in zip(lo, hi))] = True
    np.testing.assert_array_equal(cells, coords_from_mask(expected))


def test_box_cells_of_an_empty_and_a_zero_dimensional_box():
    assert box_cells((1, 2), (1, 5)).shape == (0, 2)
    assert box_cells((), ()).shape == (1, 0)
    assert box_cells((2, 1), (4, 3)).tolist() == [[2, 1], [2, 2], [3, 1], [3, 2]]


@pytest.mark.parametrize("size", [50, 1 << 30])
def test_unique_ids_by_bitmap_or_sort(size):
    ids = np.random.default_rng(3).integers(0, 50, 200) * (size // 50)
    assert unique_ids(ids, size).tolist() == np.unique(ids).tolist()
    assert unique_ids(ids[:0], size).tolist() == []

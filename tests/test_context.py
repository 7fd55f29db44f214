"""The task context: lwrite buffers region pairs, applies tile offsets, trims halos, and
rejects malformed cells with a LineageError."""

from __future__ import annotations

import numpy as np
import pytest

import subzero as sz
from subzero.cells import to_ids
from subzero.context import Context

SHAPE = (6, 8)
WHOLE = ((0, 6), (0, 8))


def make_ctx(tile_box=WHOLE, input_boxes=(WHOLE,), input_shapes=(SHAPE,), output_shape=SHAPE,
             result_box=WHOLE, modes=(sz.Mode.FULL,)) -> Context:
    ctx = Context("blur", modes, tile_box, tuple(input_boxes), tuple(input_shapes), output_shape)
    ctx.set_result_box(result_box)
    return ctx


def cells(*coords, ndim: int = 2) -> np.ndarray:
    return np.array(coords, dtype=np.int64).reshape(len(coords), len(coords[0]) if coords else ndim)


def ids(coords, shape=SHAPE) -> list[int]:
    return to_ids(np.asarray(coords, np.int64).reshape(-1, len(shape)), shape).tolist()


def pairs_as_sets(fp) -> list[tuple[frozenset, ...]]:
    def groups(a, p):
        return [frozenset(a[p[k]:p[k + 1]].tolist()) for k in range(len(p) - 1)]
    sides = [groups(fp.out_ids, fp.out_ptr)] + [groups(a, p) for a, p in zip(fp.in_ids, fp.in_ptr)]
    return [tuple(s[k] for s in sides) for k in range(fp.n_pairs)]


# -- full pairs ----------------------------------------------------------------------------------------

def test_nothing_written():
    ctx = make_ctx()
    assert not ctx.wrote_full and not ctx.wrote_payload
    assert ctx.full_pairs(WHOLE).n_pairs == 0 and ctx.full_pairs(WHOLE).n_inputs == 1
    assert ctx.payload_pairs(WHOLE).n_pairs == 0
    assert ctx.modes == frozenset({sz.Mode.FULL})


def test_lwrite_one_pair():
    ctx = make_ctx()
    ctx.lwrite(cells((1, 2), (0, 0)), cells((5, 7), (0, 1), (3, 3)))
    assert ctx.wrote_full and not ctx.wrote_payload
    fp = ctx.full_pairs(WHOLE)
    assert fp.n_pairs == 1
    assert fp.out_ids.tolist() == sorted(ids([(1, 2), (0, 0)]))  # grouped, sorted within the pair
    assert fp.in_ids[0].tolist() == sorted(ids([(5, 7), (0, 1), (3, 3)]))


def test_successive_lwrites_are_separate_pairs():
    ctx = make_ctx()
    ctx.lwrite(cells((0, 0)), cells((1, 1)))
    ctx.lwrite(cells((0, 0), (2, 2)), cells((3, 3)))
    ctx.lwrite(cells((4, 4)), cells())
    assert pairs_as_sets(ctx.full_pairs(WHOLE)) == [
        (frozenset(ids([(0, 0)])), frozenset(ids([(1, 1)]))),
        (frozenset(ids([(0, 0), (2, 2)])), frozenset(ids([(3, 3)]))),
        (frozenset(ids([(4, 4)])), frozenset()),
    ]


def test_two_inputs_of_different_shapes():
    ctx = make_ctx(input_boxes=(WHOLE, ((0, 3),)), input_shapes=(SHAPE, (3,)))
    ctx.lwrite(cells((1, 1)), cells((2, 2)), cells((2,), (0,)))
    fp = ctx.full_pairs(WHOLE)
    assert fp.n_inputs == 2
    assert fp.in_ids[0].tolist() == ids([(2, 2)]) and fp.in_ids[1].tolist() == [0, 2]


def test_lwrite_many_records_pairs_by_label():
    ctx = make_ctx()
    out = cells((0, 0), (0, 1), (5, 5), (1, 1))
    ins = cells((2, 2), (3, 3), (4, 4))
    ctx.lwrite_many(out, ins, out_pair=[0, 0, 1, 2], in_pair=[[1, 0, 0]])
    assert sorted(pairs_as_sets(ctx.full_pairs(WHOLE)), key=sorted) == sorted([
        (frozenset(ids([(0, 0), (0, 1)])), frozenset(ids([(3, 3), (4, 4)]))),
        (frozenset(ids([(5, 5)])), frozenset(ids([(2, 2)]))),
        (frozenset(ids([(1, 1)])), frozenset()),
    ], key=sorted)


def test_lwrite_many_after_lwrite_keeps_labels_apart():
    ctx = make_ctx()
    ctx.lwrite(cells((0, 0)), cells((1, 1)))
    ctx.lwrite_many(cells((2, 2), (3, 3)), cells((4, 4), (5, 5)), out_pair=[0, 1], in_pair=[[0, 1]])
    ctx.lwrite(cells((0, 1)), cells((1, 2)))
    assert pairs_as_sets(ctx.full_pairs(WHOLE)) == [
        (frozenset(ids([(0, 0)])), frozenset(ids([(1, 1)]))),
        (frozenset(ids([(2, 2)])), frozenset(ids([(4, 4)]))),
        (frozenset(ids([(3, 3)])), frozenset(ids([(5, 5)]))),
        (frozenset(ids([(0, 1)])), frozenset(ids([(1, 2)]))),
    ]


def test_lwrite_many_matches_lwrite_per_pair():
    rng = np.random.default_rng(7)
    n_pairs = 20
    out = np.argwhere(np.ones(SHAPE, bool))[rng.permutation(48)[:30]]
    out_pair = rng.integers(0, n_pairs, len(out))
    ins = rng.integers(0, [6, 8], size=(50, 2))
    in_pair = rng.integers(0, n_pairs, len(ins))
    many = make_ctx()
    many.lwrite_many(out, ins, out_pair=out_pair, in_pair=[in_pair])
    one = make_ctx()
    for p in range(n_pairs):
        if (out_pair == p).any():
            one.lwrite(out[out_pair == p], ins[in_pair == p])
    assert pairs_as_sets(many.full_pairs(WHOLE)) == pairs_as_sets(one.full_pairs(WHOLE))


# -- tile offsets and trimming ------------------------------------------------------------------------

def test_tile_offsets_apply_to_input_boxes_and_result_box_origin():
    tile = ((2, 4), (4, 8))
    ctx = make_ctx(tile_box=tile, input_boxes=(((2, 4), (4, 8)), ((0, 6), (0, 8))),
                   input_shapes=(SHAPE, SHAPE), result_box=tile)
    ctx.lwrite(cells((0, 0), (1, 3)), cells((0, 0)), cells((0, 0)))
    fp = ctx.full_pairs(tile)
    assert fp.out_ids.tolist() == ids([(2, 4), (3, 7)])
    assert fp.in_ids[0].tolist() == ids([(2, 4)])  # offset by input box 0
    assert fp.in_ids[1].tolist() == ids([(0, 0)])  # input 1 handed whole: no offset


def test_halo_out_cells_outside_the_tile_are_trimmed():
    tile = ((2, 4), (2, 4))
    halo = ((1, 5), (1, 5))  # run() returned the tile grown by one cell
    ctx = make_ctx(tile_box=tile, input_boxes=(halo,), result_box=halo)
    ctx.lwrite(cells((0, 0)), cells((0, 0)))                 # out (1, 1): outside the tile, dropped
    ctx.lwrite(cells((1, 1), (0, 1)), cells((2, 2)))         # out (2, 2) kept, (1, 2) trimmed
    ctx.lwrite(cells((2, 2), (3, 3)), cells((3, 3), (0, 3)))  # out (3, 3) kept, (4, 4) trimmed
    fp = ctx.full_pairs(halo)
    assert pairs_as_sets(fp) == [
        (frozenset(ids([(2, 2)])), frozenset(ids([(3, 3)]))),
        (frozenset(ids([(3, 3)])), frozenset(ids([(4, 4), (1, 4)]))),
    ]


def test_whole_array_frame_is_global():
    ctx = make_ctx()
    ctx.lwrite(cells((5, 7)), cells((5, 7)))
    fp = ctx.full_pairs(WHOLE)
    assert fp.out_ids.tolist() == fp.in_ids[0].tolist() == [47]


# -- payload pairs --------------------------------------------------------------------------------------

def payload_sets(pp) -> list[tuple[frozenset, bytes]]:
    return [(frozenset(pp.out_ids[pp.out_ptr[k]:pp.out_ptr[k + 1]].tolist()), pp.payloads[k])
            for k in range(pp.n_pairs)]


def test_payload_bytes_is_one_pair():
    ctx = make_ctx(modes=(sz.Mode.PAY,))
    ctx.lwrite(cells((0, 1), (2, 3)), payload=b"\x01\x02")
    assert ctx.wrote_payload and not ctx.wrote_full
    assert payload_sets(ctx.payload_pairs(WHOLE)) == [(frozenset(ids([(0, 1), (2, 3)])), b"\x01\x02")]


@pytest.mark.parametrize("payload", [bytearray(b"xy"), memoryview(b"xy")])
def test_payload_bytes_like(payload):
    ctx = make_ctx(modes=(sz.Mode.PAY,))
    ctx.lwrite(cells((1, 1)), payload=payload)
    assert ctx.payload_pairs(WHOLE).payloads == [b"xy"]


def test_per_cell_payload_array_is_one_pair_per_cell():
    ctx = make_ctx(modes=(sz.Mode.PAY,))
    rows = np.array([[1, 2], [3, 4], [5, 6]], dtype=np.int16)
    ctx.lwrite(cells((0, 0), (1, 1), (2, 2)), payload=rows)
    got = payload_sets(ctx.payload_pairs(WHOLE))
    assert got == [(frozenset(ids([(k, k)])), rows[k].tobytes()) for k in range(3)]


def test_per_cell_payload_sequence_and_one_dimensional_array():
    ctx = make_ctx(modes=(sz.Mode.PAY,))
    ctx.lwrite(cells((0, 0), (0, 1)), payload=[b"a", b"bc"])
    ctx.lwrite(cells((3, 3), (4, 4)), payload=np.array([7, 8], dtype="<i4"))
    assert payload_sets(ctx.payload_pairs(WHOLE)) == [
        (frozenset(ids([(0, 0)])), b"a"), (frozenset(ids([(0, 1)])), b"bc"),
        (frozenset(ids([(3, 3)])), np.int32(7).tobytes()), (frozenset(ids([(4, 4)])), np.int32(8).tobytes())]


def test_empty_per_cell_payloads():
    ctx = make_ctx(modes=(sz.Mode.PAY,))
    ctx.lwrite(cells(), payload=np.empty((0, 3), np.float64))  # no cells at all
    ctx.lwrite(cells((1, 2), (2, 1)), payload=np.empty((2, 0), np.float64))  # zero-width payloads
    ctx.lwrite(cells(), payload=[])
    assert payload_sets(ctx.payload_pairs(WHOLE)) == [(frozenset(ids([(1, 2)])), b""), (frozenset(ids([(2, 1)])), b"")]


def test_payload_pairs_are_trimmed_and_offset_like_full_pairs():
    tile = ((2, 4), (0, 8))
    halo = ((1, 5), (0, 8))
    ctx = make_ctx(tile_box=tile, input_boxes=(halo,), result_box=halo, modes=(sz.Mode.PAY,))
    ctx.lwrite(cells((0, 0)), payload=b"gone")                   # global (1, 0): trimmed
    ctx.lwrite(cells((1, 0), (3, 0)), payload=b"half")           # (2, 0) kept, (4, 0) trimmed
    ctx.lwrite(cells((2, 5), (3, 5)), payload=[b"kept", b"cut"])  # (3, 5) kept, (4, 5) trimmed
    assert payload_sets(ctx.payload_pairs(halo)) == [
        (frozenset(ids([(2, 0)])), b"half"), (frozenset(ids([(3, 5)])), b"kept")]


# -- errors ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("out, ins, fragment", [
    (cells((1, 2, 3)), [cells((0, 0))], r"outcells must be an \(N, 2\)"),
    (cells((1, 2)), [cells((0, 0, 0))], r"incells\[0\] must be an \(N, 2\)"),
    (np.array([1, 2]), [cells((0, 0))], r"outcells must be an \(N, 2\)"),
    (np.array([[0.5, 1.0]]), [cells((0, 0))], "integer coordinate"),
    (cells((1, 2)), [np.array([[0.0, 1.0]])], "integer coordinate"),
])
def test_wrong_rank_or_dtype(out, ins, fragment):
    ctx = make_ctx()
    with pytest.raises(sz.LineageError, match=fragment) as err:
        ctx.lwrite(out, *ins)
    assert "blur" in str(err.value)


@pytest.mark.parametrize("out, ins, bad", [
    (cells((6, 0)), [cells((0, 0))], "(6, 0)"),
    (cells((0, -1)), [cells((0, 0))], "(0, -1)"),
    (cells((0, 0)), [cells((1, 1), (0, 8))], "(0, 8)"),
])
def test_out_of_frame_names_the_cell_and_the_frame(out, ins, bad):
    ctx = make_ctx()
    with pytest.raises(sz.LineageError, match="outside the array of shape") as err:
        ctx.lwrite(out, *ins)
    assert bad in str(err.value) and "(6, 8)" in str(err.value)


def test_in_cells_are_checked_against_the_tile_input_box_not_the_whole_array():
    ctx = make_ctx(tile_box=((0, 2), (0, 2)), input_boxes=(((0, 3), (0, 3)),), result_box=((0, 2), (0, 2)))
    with pytest.raises(sz.LineageError, match=r"\(3, 0\).*shape \(3, 3\)"):
        ctx.lwrite(cells((0, 0)), cells((3, 0)))
    with pytest.raises(sz.LineageError, match=r"\(2, 0\).*shape \(2, 2\)"):
        ctx.lwrite(cells((2, 0)), cells((0, 0)))


def test_out_cells_checked_after_run_when_the_frame_was_unknown():
    ctx = Context("blur", (sz.Mode.FULL,), WHOLE, (WHOLE,), (SHAPE,), SHAPE)  # no set_result_box
    ctx.lwrite(cells((9, 9)), cells((0, 0)))
    with pytest.raises(sz.LineageError, match=r"\(9, 9\).*output of shape \(6, 8\)"):
        ctx.full_pairs(WHOLE)


@pytest.mark.parametrize("out", [cells((1, 2, 3)), cells((1, 2, 3), (0, 1, 2))])
def test_wrong_rank_out_cells_checked_after_run_when_the_frame_was_unknown(out):
    """As for a whole-array operator whose output shape only running tells."""
    ctx = Context("blur", (sz.Mode.FULL,), WHOLE, (WHOLE,), (SHAPE,), None)
    ctx.set_result_box(None)
    ctx.lwrite(out, cells((0, 0)))
    ctx.bind_output(WHOLE, SHAPE)
    with pytest.raises(sz.LineageError, match="outcells have 3 coordinates.*has 2 axes") as err:
        ctx.full_pairs(WHOLE)
    assert "blur" in str(err.value)


def test_out_cells_of_an_unknown_frame_are_offset_once_bound():
    ctx = Context("blur", (sz.Mode.FULL,), WHOLE, (WHOLE,), (SHAPE,), None)
    ctx.set_result_box(None)
    ctx.lwrite(cells((1, 2)), cells((0, 0)))
    ctx.lwrite(cells(), cells((3, 3)))  # an empty out set is fine before the frame is known
    ctx.bind_output(WHOLE, SHAPE)
    fp = ctx.full_pairs(WHOLE)
    assert pairs_as_sets(fp) == [(frozenset(ids([(1, 2)])), frozenset(ids([(0, 0)])))]


@pytest.mark.parametrize("n", [0, 2])
def test_wrong_number_of_input_arrays(n):
    ctx = make_ctx()
    with pytest.raises(sz.LineageError, match=f"got {n} input cell arrays, the operator has 1 inputs"):
        ctx.lwrite(cells((0, 0)), *[cells((0, 0))] * n)


def test_lwrite_many_argument_checks():
    ctx = make_ctx()
    with pytest.raises(sz.LineageError, match="one cell array and one in_pair per input"):
        ctx.lwrite_many(cells((0, 0)), cells((1, 1)), out_pair=[0], in_pair=[])
    with pytest.raises(sz.LineageError, match="got 2 pair labels for 1 cells"):
        ctx.lwrite_many(cells((0, 0)), cells((1, 1)), out_pair=[0, 1], in_pair=[[0]])
    with pytest.raises(sz.LineageError, match="outside the array"):
        ctx.lwrite_many(cells((0, 0)), cells((6, 1)), out_pair=[0], in_pair=[[0]])
    assert not ctx.wrote_full


@pytest.mark.parametrize("out_pair, in_pair", [([-1], [0]), ([0], [-2])])
def test_lwrite_many_negative_labels_are_a_lineage_error(out_pair, in_pair):
    ctx = make_ctx()
    with pytest.raises(sz.LineageError, match="pair labels must be >= 0"):
        ctx.lwrite_many(cells((0, 0)), cells((1, 1)), out_pair=out_pair, in_pair=[in_pair])
    assert not ctx.wrote_full


def test_payload_and_input_cells_together():
    ctx = make_ctx()
    with pytest.raises(sz.LineageError, match="input cells or a payload, not both"):
        ctx.lwrite(cells((0, 0)), cells((1, 1)), payload=b"x")


@pytest.mark.parametrize("payload, fragment", [
    ([b"a"], "got 1 payloads for 2 out cells"),
    (np.zeros((3, 2)), "got 3 payloads for 2 out cells"),
    ("ab", "must be bytes or one payload per out cell"),
    (7, "must be bytes or one payload per out cell"),
])
def test_bad_payloads(payload, fragment):
    ctx = make_ctx(modes=(sz.Mode.PAY,))
    with pytest.raises(sz.LineageError, match=fragment):
        ctx.lwrite(cells((0, 0), (1, 1)), payload=payload)
    assert not ctx.wrote_payload


def test_lwrite_many_with_one_payload_per_pair():
    ctx = make_ctx()
    out = cells((0, 0), (0, 1), (2, 2), (1, 1))
    ctx.lwrite_many(out, out_pair=[1, 1, 0, 1], payload=[b"zero", b"one"])
    pay = ctx.payload_pairs(WHOLE)
    groups = {bytes(p): sorted(pay.out_ids[pay.out_ptr[k]:pay.out_ptr[k + 1]].tolist()) for k, p in enumerate(pay.payloads)}
    assert groups == {b"zero": ids([(2, 2)]), b"one": sorted(ids([(0, 0), (0, 1), (1, 1)]))}
    with pytest.raises(sz.LineageError, match="has no payload"):
        ctx.lwrite_many(out, out_pair=[0, 0, 5, 0], payload=[b"a"])
    with pytest.raises(sz.LineageError, match="not both"):
        ctx.lwrite_many(out, out, out_pair=[0] * 4, in_pair=[[0] * 4], payload=[b"a"])


# -- covered tiles ----------------------------------------------------------------------------------------
def test_lwrite_tile_covers_every_cell_of_the_tile_with_one_payload():
    tile = ((2, 4), (0, 8))
    ctx = make_ctx(tile_box=tile, input_boxes=(tile,), result_box=tile, modes=(sz.Mode.COMP,))
    lo, hi = np.array([[1, 0], [3, 6]]), np.array([[4, 3], [5, 8]])
    ctx.lwrite_tile(b"table", lo, hi)
    pay = ctx.payload_pairs(tile)
    assert pay.payloads == [b"table"] and pay.out_ptr.tolist() == [0, 16]
    assert pay._ids is None  # counted without making them: storing a covered tile needs no cell ids
    import pickle

    again = pickle.loads(pickle.dumps(pay))  # shipped (Spark) before its ids were made
    assert pay.out_ids.tolist() == again.out_ids.tolist() == ids(np.argwhere(np.ones((2, 8), bool)) + [2, 0])
    assert again.cover == pay.cover and again.payloads == pay.payloads
    assert pay.cover == tile and np.array_equal(pay.records[0][0], lo) and np.array_equal(pay.records[0][1], hi)
    elo, ehi = pay.envelopes[0]
    assert elo.tolist() == [[1, 0]] and ehi.tolist() == [[5, 8]]  # the tile and every record


def test_lwrite_tile_is_checked():
    ctx = make_ctx(modes=(sz.Mode.COMP,))
    with pytest.raises(sz.LineageError, match="record boxes must be two"):
        ctx.lwrite_tile(b"t", np.zeros((2, 3)), np.zeros((2, 3)))
    ctx.lwrite_tile(b"t", np.zeros((0, 2)), np.zeros((0, 2)))
    ctx.lwrite(cells((0, 0)), payload=b"p")
    with pytest.raises(sz.LineageError, match="cannot be mixed"):
        ctx.payload_pairs(WHOLE)

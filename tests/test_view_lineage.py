"""The viewer's lineage API logic: answers are disjoint boxes whose union is exactly
`run.backward`/`run.forward`, for random brushes on every node, in both directions, under
every strategy; bad requests are `LineageError`s naming the mistake."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import subzero as sz
from subzero.frontier import Frontier
from subzero.tools.view.lineage import (disjoint_boxes, grid_disjoint, lineage_answers, node_list, parse_lineage_request,
                                  reachable)

from view_store import SHAPE, STRATEGIES, make_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("viewlineage")
    return {s: make_run(root / s.replace("/", "-"), s) for s in STRATEGIES}


def _cells(boxes: list[list[int]], shape) -> np.ndarray:
    """The sorted unique coordinates of flat boxes, and a check that the boxes are disjoint."""
    mask = np.zeros(shape, np.int32)
    for b in boxes:
        mask[tuple(slice(b[2 * k], b[2 * k + 1]) for k in range(len(shape)))] += 1
    assert mask.max(initial=0) <= 1, "answer boxes overlap"
    return np.argwhere(mask > 0)


NODES = ("x", "y", "blur", "bright", "stars", "mixed", "flipped")


@st.composite
def brushes(draw):
    node = draw(st.sampled_from(NODES))
    rows, cols = SHAPE[::-1] if node == "flipped" else SHAPE
    boxes = []
    for _ in range(draw(st.integers(1, 3))):
        r0 = draw(st.integers(0, rows - 1))
        c0 = draw(st.integers(0, cols - 1))
        boxes.append([r0, draw(st.integers(r0 + 1, min(rows, r0 + 9))), c0, draw(st.integers(c0 + 1, min(cols, c0 + 9)))])
    return node, draw(st.sampled_from(("backward", "forward"))), boxes


@settings(max_examples=60)
@given(strategy=st.sampled_from(STRATEGIES), brush=brushes())
def test_answers_are_exactly_the_query_answers(runs, strategy, brush):
    node, direction, boxes = brush
    run = runs[strategy]
    req = parse_lineage_request(run, {"node": node, "direction": direction, "boxes": boxes, "to": None})
    got = lineage_answers(run, req)
    assert set(got["answers"]) == set(reachable(run, node, direction)) and got["ms"] >= 0
    query = run.backward if direction == "backward" else run.forward
    box = [[(b[0], b[1]), (b[2], b[3])] for b in boxes]
    for target, answer in got["answers"].items():
        expected = query(node, box=box, to=target)
        cells = _cells(answer["boxes"], run.shape(target))
        np.testing.assert_array_equal(cells, expected)
        assert answer["cells"] == len(expected)
        if len(expected):
            lo, hi = expected.min(axis=0), expected.max(axis=0) + 1
            assert answer["bbox"] == [lo[0], hi[0], lo[1], hi[1]]
        else:
            assert answer["bbox"] is None and answer["boxes"] == []
        # exact lineage: every strategy answers what the mapping functions (and re-execution) answer
        np.testing.assert_array_equal(cells, runs["Map"].backward(node, box=box, to=target) if direction == "backward"
                                      else runs["Map"].forward(node, box=box, to=target))


def test_to_names_some_nodes(runs):
    run = runs["FullOne"]
    req = parse_lineage_request(run, {"node": "x", "direction": "forward", "boxes": [[3, 5, 4, 6]], "to": ["stars"]})
    got = lineage_answers(run, req)
    assert list(got["answers"]) == ["stars"]
    np.testing.assert_array_equal(_cells(got["answers"]["stars"]["boxes"], SHAPE),
                                  run.forward("x", box=[(3, 5), (4, 6)], to="stars"))
    none = parse_lineage_request(run, {"node": "x", "direction": "backward", "boxes": [[0, 1, 0, 1]], "to": None})
    assert lineage_answers(run, none)["answers"] == {}  # an input has nothing upstream


@pytest.mark.parametrize("body, message", [
    ([1, 2], "must be a JSON object"),
    ({"node": "nope", "direction": "backward", "boxes": [[0, 1, 0, 1]]}, "unknown node 'nope'"),
    ({"node": 3, "direction": "backward", "boxes": [[0, 1, 0, 1]]}, "must be a node name"),
    ({"node": "blur", "direction": "sideways", "boxes": [[0, 1, 0, 1]]}, "must be \"backward\" or \"forward\""),
    ({"node": "blur", "direction": "backward", "boxes": []}, "non-empty list"),
    ({"node": "blur", "direction": "backward", "boxes": [[0, 1, 0]]}, "4 integers"),
    ({"node": "blur", "direction": "backward", "boxes": [[0, 30, 0, 1]]}, "outside node 'blur'"),
    ({"node": "blur", "direction": "backward", "boxes": [[5, 5, 0, 1]]}, "or empty"),
    ({"node": "blur", "direction": "backward", "boxes": [[0, 1.5, 0, 1]]}, "must be an integer"),
    ({"node": "blur", "direction": "backward", "boxes": [[0, True, 0, 1]]}, "must be an integer"),
    ({"node": "blur", "direction": "backward", "boxes": [[0, 1, 0, 1]], "to": ["stars"]}, "not upstream of 'blur'"),
    ({"node": "blur", "direction": "backward", "boxes": [[0, 1, 0, 1]], "to": ["zz"]}, "unknown node 'zz'"),
    ({"node": "blur", "direction": "backward", "boxes": [[0, 1, 0, 1]], "to": "x"}, "list of node names or null"),
    ({"node": "blur", "direction": "backward", "boxes": [[0, 1, 0, 1]], "cells": 3}, "unknown field"),
])
def test_bad_requests_say_what_is_wrong(runs, body, message):
    with pytest.raises(sz.LineageError, match=message):
        parse_lineage_request(runs["Map"], body)


def test_node_list_has_the_contract_fields(runs):
    nodes = {n["name"]: n for n in node_list(runs["PayOne"])}
    assert list(nodes) == ["x", "y", "blur", "bright", "stars", "mixed", "flipped"]
    assert nodes["stars"]["operator"] == "Label" and nodes["stars"]["strategies"] == ["PayOne/backward"]
    assert nodes["stars"]["display"] == "labels" and nodes["bright"]["display"] == "mask"
    assert nodes["mixed"]["inputs"] == ["blur", "y"] and nodes["flipped"]["shape"] == [20, 24]
    assert nodes["x"] | {} == nodes["x"] and {"name", "operator", "shape", "dtype", "strategies", "inputs"} <= set(nodes["x"])


def test_overlapping_boxes_become_disjoint():
    f = Frontier.of_boxes(np.array([[0, 0], [1, 1], [5, 5]]), np.array([[3, 3], [4, 4], [6, 6]]), (8, 8))
    lo, hi = disjoint_boxes(f)
    mask = np.zeros((8, 8), np.int32)
    for a, b in zip(lo, hi):
        mask[a[0]:b[0], a[1]:b[1]] += 1
    assert mask.max() == 1 and np.array_equal(mask.astype(bool), f.mask())
    assert disjoint_boxes(Frontier.empty((3, 3)))[0].shape == (0, 2)


def test_twenty_threads_brushing_at_once_get_the_serial_answers(runs):
    """Walks share the run's query engine and shard readers without a lock: 20 threads
    brushing every node in both directions at once answer exactly what one thread does."""
    from concurrent.futures import ThreadPoolExecutor

    run = runs["FullOne"]
    rng = np.random.default_rng(7)
    bodies = []
    for k in range(40):
        node = NODES[k % len(NODES)]
        rows, cols = SHAPE[::-1] if node == "flipped" else SHAPE
        r0, c0 = int(rng.integers(0, rows - 4)), int(rng.integers(0, cols - 4))
        bodies.append({"node": node, "direction": ("backward", "forward")[k % 2],
                       "boxes": [[r0, r0 + 4, c0, c0 + 4]], "to": None})

    def answer(body):
        got = lineage_answers(run, parse_lineage_request(run, body))["answers"]
        return {name: (a["boxes"], a["cells"]) for name, a in got.items()}

    serial = [answer(b) for b in bodies]
    with ThreadPoolExecutor(20) as pool:
        together = list(pool.map(answer, bodies * 2))
    assert together == serial * 2 and any(serial)


class _SetAfter:
    """An event that reads as set from its ``n``-th question on (a walk asks once per step)."""

    def __init__(self, n: int):
        self.n, self.asked = n, 0

    def is_set(self) -> bool:
        self.asked += 1
        return self.asked > self.n


def test_a_cancelled_walk_stops_at_a_step_boundary(runs):
    from subzero.errors import QueryCancelled

    run = runs["FullOne"]
    req = parse_lineage_request(run, {"node": "stars", "direction": "backward", "boxes": [[2, 9, 3, 9]], "to": None})
    with pytest.raises(QueryCancelled, match="before its walk began"):
        lineage_answers(run, req, cancel=_SetAfter(0))
    midway = _SetAfter(2)  # asked before the walk, then at each step: stops at the second step
    with pytest.raises(QueryCancelled, match=r"cancelled before it stepped through '\w+'"):
        lineage_answers(run, req, cancel=midway)
    assert midway.asked == 3
    never = _SetAfter(10 ** 6)
    assert lineage_answers(run, req, cancel=never)["answers"] == lineage_answers(run, req)["answers"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30), st.integers(1, 12), st.integers(1, 12)),
                min_size=1, max_size=20))
def test_overlapping_boxes_cut_on_their_grid_are_disjoint_and_exact(boxes):
    lo = np.array([[r, c] for r, c, _, _ in boxes], np.int64)
    hi = lo + np.array([[h, w] for _, _, h, w in boxes], np.int64)
    got_lo, got_hi = grid_disjoint(lo, hi)
    count = np.zeros((42, 42), np.int32)
    for a, b in zip(got_lo, got_hi):
        count[a[0]:b[0], a[1]:b[1]] += 1
    want = Frontier.of_boxes(lo, hi, (42, 42)).mask()
    assert count.max() == 1 and np.array_equal(count.astype(bool), want)

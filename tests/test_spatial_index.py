"""R-tree indexes: a bulk-built index finds exactly the boxes that meet the query boxes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import subzero as sz
from subzero.spatial_index import SpatialIndex, build_index

_bases = itertools.count()


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("index")


def closed_boxes(draw, n: int, ndim: int, extent: int = 20) -> tuple[np.ndarray, np.ndarray]:
    lo = np.array([[draw(st.integers(0, extent)) for _ in range(ndim)] for _ in range(n)], np.float64).reshape(n, ndim)
    span = np.array([[draw(st.integers(0, 6)) for _ in range(ndim)] for _ in range(n)], np.float64).reshape(n, ndim)
    return lo, lo + span


def brute_force(ids, mins, maxs, qmins, qmaxs) -> set[int]:
    """Ids whose closed box meets any closed query box."""
    hits = set()
    for i, lo, hi in zip(ids.tolist(), mins, maxs):
        if any(np.all(lo <= qh) and np.all(ql <= hi) for ql, qh in zip(qmins, qmaxs)):
            hits.add(i)
    return hits


@settings(max_examples=60, deadline=None)
@given(data=st.data(), ndim=st.integers(1, 3), n=st.integers(1, 40), nq=st.integers(0, 5))
def test_intersect_returns_exactly_the_boxes_meeting_the_queries(index_dir, data, ndim, n, nq):
    mins, maxs = closed_boxes(data.draw, n, ndim)
    ids = np.array(data.draw(st.lists(st.integers(0, 1 << 40), min_size=n, max_size=n, unique=True)), np.int64)
    base = str(index_dir / f"i{next(_bases)}")
    build_index(base, ids, mins, maxs)
    qmins, qmaxs = closed_boxes(data.draw, nq, ndim)
    index = SpatialIndex(base, ndim)
    try:
        got = index.intersect(qmins, qmaxs)
        assert got.dtype == np.int64
        assert set(got.tolist()) == brute_force(ids, mins, maxs, qmins, qmaxs)
    finally:
        index.close()


def test_one_dimensional_boxes(tmp_path):
    base = str(tmp_path / "line")
    build_index(base, np.array([1, 2, 3]), np.array([[0.0], [5.0], [9.0]]), np.array([[2.0], [5.0], [12.0]]))
    index = SpatialIndex(base, 1)
    assert set(index.intersect(np.array([[2.0]]), np.array([[5.0]])).tolist()) == {1, 2}  # closed ends touch
    assert index.intersect(np.array([[6.0]]), np.array([[8.0]])).size == 0
    assert set(index.intersect(np.array([[0.0], [10.0]]), np.array([[0.0], [10.0]])).tolist()) == {1, 3}


def test_touching_corners_intersect(tmp_path):
    base = str(tmp_path / "corner")
    build_index(base, np.array([7]), np.array([[0.0, 0.0]]), np.array([[2.0, 2.0]]))
    index = SpatialIndex(base, 2)
    assert index.intersect(np.array([[2.0, 2.0]]), np.array([[3.0, 3.0]])).tolist() == [7]
    assert index.intersect(np.array([[2.0, 3.0]]), np.array([[3.0, 4.0]])).size == 0


def test_an_absent_index_is_a_damaged_store(tmp_path):
    with pytest.raises(sz.StoreError, match="missing"):
        SpatialIndex(str(tmp_path / "never-built"), 2)


def test_building_from_no_boxes_writes_an_empty_index(tmp_path):
    base = str(tmp_path / "empty")
    build_index(base, np.empty(0, np.int64), np.empty((0, 2)), np.empty((0, 2)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.dat", "empty.idx"]
    assert SpatialIndex(base, 2).intersect(np.zeros((1, 2)), np.ones((1, 2))).size == 0


def test_no_query_boxes_find_nothing(tmp_path):
    base = str(tmp_path / "some")
    build_index(base, np.array([1]), np.zeros((1, 2)), np.ones((1, 2)))
    assert SpatialIndex(base, 2).intersect(np.empty((0, 2)), np.empty((0, 2))).size == 0


def test_rebuilding_overwrites_the_old_index(tmp_path):
    base = str(tmp_path / "again")
    build_index(base, np.array([1]), np.zeros((1, 2)), np.ones((1, 2)))
    build_index(base, np.array([2]), np.full((1, 2), 5.0), np.full((1, 2), 6.0))
    index = SpatialIndex(base, 2)
    assert index.intersect(np.zeros((1, 2)), np.full((1, 2), 10.0)).tolist() == [2]


def test_an_unreadable_index_is_a_store_error(tmp_path):
    base = str(tmp_path / "broken")
    for ext in (".dat", ".idx"):
        with open(base + ext, "wb") as fh:
            fh.write(b"garbage")
    with pytest.raises(sz.StoreError, match="unreadable"):
        SpatialIndex(base, 2)


_USER_MODULE = '''
import numpy as np
import pytest
import subzero as sz


class RowPrefix(sz.Operator):
    """Output (r, c) depends on input cells (r, 0..c): a user-written FULL/PAY operator."""
    def supported_modes(self):
        return {sz.Mode.FULL, sz.Mode.PAY}

    def run(self, ctx, x):
        if sz.Mode.FULL in ctx.modes:
            for r in range(x.shape[0]):
                for c in range(x.shape[1]):
                    ctx.lwrite([(r, c)], [(r, k) for k in range(c + 1)])
        elif sz.Mode.PAY in ctx.modes:
            for r in range(x.shape[0]):
                for c in range(x.shape[1]):
                    ctx.lwrite([(r, c)], payload=np.int64(c).tobytes())
        return np.cumsum(x, axis=1)

    def map_p(self, cells, payload, i):
        c = int(np.frombuffer(payload, np.int64)[0])
        return np.array([(r, k) for r, _ in cells for k in range(c + 1)])


@pytest.mark.parametrize("strategy", ["FullMany", "PayOne", "PayMany"])
def test_query(tmp_path, strategy):
    wf = sz.Workflow("w")
    x = wf.input("x")
    y = wf.add(RowPrefix(), x, name="y")
    run = wf.run({"x": np.arange(72.).reshape(8, 9)}, store=str(tmp_path / "s"),
                 strategies={"y": strategy}, executor="local")
    assert run.backward(y, [(3, 4)], to=x).tolist() == [[3, k] for k in range(5)]
    assert run.forward(x, [(3, 4)], to=y).tolist() == [[3, k] for k in range(4, 9)]
'''


def test_a_process_that_queried_r_trees_exits_cleanly(tmp_path):
    """rtree handles left to garbage collection at shutdown crashed pytest with SIGSEGV (139)."""
    import os
    import subprocess
    import sys

    (tmp_path / "test_user_operator.py").write_text(_USER_MODULE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.path.dirname(os.path.dirname(sz.__file__)),
                                                                   os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-X", "faulthandler", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(tmp_path / "test_user_operator.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert "3 passed" in done.stdout, done.stdout + done.stderr
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"

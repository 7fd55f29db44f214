"""Linked brushing: one call traces a brush back to an input and forward to every output, and
answers what the two queries answer one by one."""

from __future__ import annotations

import numpy as np
import pytest

import subzero as sz
from subzero import operators as ops
from subzero.tools.brush import brush, brush_data, default_source


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Two inputs, three outputs: one from x alone, one from both, one from y alone."""
    wf = sz.Workflow("b")
    x, y = wf.input("x"), wf.input("y")
    blur = wf.add(ops.GaussianFilter(1.0, truncate=2.0), x, name="blur")
    wf.add(ops.Threshold(0.5), blur, name="bright")
    wf.add(ops.Add(), blur, y, name="mixed")
    wf.add(ops.Transpose(), y, name="flipped")
    rng = np.random.default_rng(1)
    return wf.run({"x": rng.random((40, 30)), "y": rng.random((40, 30))}, store=tmp_path_factory.mktemp("b") / "s",
                  executor="local", tile_shape=16, strategies={"blur": ["FullOne"], "mixed": ["FullMany/forward"]})


def test_brush_is_backward_then_forward_to_every_output(run):
    box = [(10, 14), (5, 9)]
    got = brush(run, "mixed", box=box, to="x")
    back = run.backward("mixed", box=box, to="x")
    np.testing.assert_array_equal(got.traced.coords(), back)
    assert got.brushed.count == 16 and got.node == "mixed" and got.to == "x"
    assert set(got.linked) == {"bright", "mixed", "flipped"}
    for out in ("bright", "mixed"):
        np.testing.assert_array_equal(got.linked[out].coords(), run.forward("x", back, to=out))
    assert got.linked["flipped"].is_empty  # computed from y alone
    assert got.seconds == got.backward_seconds + got.forward_seconds > 0


def test_boxes_stay_boxes_through_box_forms(run):
    got = brush(run, "bright", box=[(10, 20), (10, 20)], to="x", outputs=["bright"])
    assert got.traced.kind == "boxes" and got.linked["bright"].kind == "boxes"
    assert got.traced.count == 14 * 14 and got.linked["bright"].count == 18 * 18  # the halo, each way


def test_default_source_and_errors(run):
    assert default_source(run, "bright") == "x"
    with pytest.raises(sz.LineageError, match="computed from inputs x, y; say which"):
        default_source(run, "mixed")
    with pytest.raises(sz.LineageError, match="not an ancestor"):
        brush(run, "flipped", cells=[(1, 1)], to="x")
    with pytest.raises(sz.LineageError, match="out of bounds"):
        brush(run, "bright", cells=[(99, 1)])


def test_brush_data_is_json(run):
    import json

    got = brush(run, "bright", cells=[(3, 4)], outputs=["bright", "mixed"])
    data = brush_data(got)
    json.dumps(data)
    assert data["brushed"] == {"node": "bright", "shape": [40, 30], "count": 1, "boxes": [[[3, 4], [4, 5]]]}
    assert data["traced"]["count"] == 25 and data["outputs"]["mixed"]["count"] == got.linked["mixed"].count
    fits = brush_data(got, fits=True)
    assert fits["brushed"]["boxes"] == ["5:5,4:4"] and fits["coords"] == "fits"

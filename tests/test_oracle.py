"""The perturbation oracle (subzero/oracle.py): perturbations, comparison by identity, and
that it finds a UDF's unsound lineage and passes a sound one, alone and in a workflow."""

from __future__ import annotations

import numpy as np
import pytest

import subzero as sz
from subzero import operators as ops
from subzero.oracle import (KINDS, OracleReport, _align, _changed, check_operator, check_workflow,
                            evaluate_operator, evaluate_workflow, perturbations)


class SmoothButClaimsItself(sz.Operator):
    """A UDF whose declared lineage is too small: it averages 3 neighbours, says 1."""

    tiling = sz.Halo(1)

    def supported_modes(self):
        return {sz.Mode.MAP}

    def infer_output_shape(self, input_shapes):
        return tuple(input_shapes[0])

    def run(self, ctx, x):
        p = np.pad(np.asarray(x, float), 1, mode="edge")
        return (p[:-2] + p[1:-1] + p[2:]) / 3

    def map_b(self, cells, i):
        return cells

    def map_f(self, cells, i):
        return cells


class Picky(sz.Operator):
    """Refuses negative values (a WorkflowError), else doubles."""

    def supported_modes(self):
        return {sz.Mode.MAP}

    def infer_output_shape(self, input_shapes):
        return tuple(input_shapes[0])

    def run(self, ctx, x):
        if np.any(~(x >= 0)):
            raise sz.WorkflowError("Picky: values must be >= 0")
        return 2 * x

    def map_b(self, cells, i):
        return cells

    def map_f(self, cells, i):
        return cells


def test_perturbations_of_floats_ints_and_booleans():
    x = np.array([1.0, 2.0, np.nan])
    kinds = dict(perturbations(x, 0))
    assert list(kinds) == list(KINDS)
    sigma = np.std([1.0, 2.0])
    assert kinds["+5sigma"][0] == 1.0 + 5 * sigma and kinds["spike"][0] == 1.0 + 1000 * sigma
    assert np.isnan(kinds["nan"][0]) and kinds["zero"][0] == 0.0 and kinds["tiny"][0] != 1.0
    assert kinds["tiny"][1:].tolist()[0] == 2.0                                    # only the one cell
    assert "nan" not in dict(perturbations(x, 2)) and "tiny" not in dict(perturbations(x, 2))  # NaN + step
    ints = dict(perturbations(np.array([3, 0], np.int8), 0))
    assert set(ints) == {"tiny", "+5sigma", "-5sigma", "spike", "zero"} and ints["spike"][0] == 127  # clipped
    assert [k for k, _ in perturbations(np.array([True, False]), 1)] == ["flip"]
    assert "zero" not in dict(perturbations(np.array([0.0, 1.0]), 0))             # already zero


def test_changed_compares_values_and_missing_cells():
    base = np.array([[1.0, 2.0], [3.0, np.nan]])
    assert not _changed(base, base.copy()).any()
    assert _changed(base, base + 1e-13).sum() == 0                                # rounding is not a change
    assert _changed(base, np.array([[1.0, 2.0]])).tolist() == [[False, False], [True, True]]
    assert _changed(np.array([1, 2]), np.array([1, 3])).tolist() == [False, True]


def test_align_matches_cells_by_identity():
    base_keys = np.array([[10, 11], [30, 31]])
    keys, values = np.array([[30, 31], [40, 41]]), np.array([[3.0, 3.5], [4.0, 4.5]])
    got = _align(base_keys, keys, values)
    assert np.isnan(got[0]).all() and got[1].tolist() == [3.0, 3.5]               # row 10 dropped, 40 new
    filled = _align(base_keys, keys, values, fill=np.zeros((2, 2)))
    assert filled.tolist() == [[0.0, 0.0], [3.0, 3.5]]


def test_check_operator_finds_a_udf_whose_lineage_is_too_small():
    report = check_operator(SmoothButClaimsItself(), [np.arange(8.0)], tile_shape=3)
    assert not report.ok and report.missed > 0 and report.cells == 8
    miss = report.misses[0]
    assert miss.source == "x0" and miss.target == "op" and miss.direction in ("forward", "backward")
    assert "not in its" in str(miss) and "missed pair" in str(report)
    with pytest.raises(sz.LineageError, match="missed pair"):
        report.raise_if_unsound()


def test_check_operator_passes_a_sound_operator_with_extras():
    report = check_operator(ops.MedianFilter(3), [np.arange(25.0).reshape(5, 5)], tile_shape=2,
                            strategies=["FullOne"], using=["FullOne", "Map", "BlackBox"])
    assert report.ok and report.trials > 0 and report.extras > 0       # a median ignores some changes
    assert report.forward_queries == 3 * 25 and report.backward_checked > 0
    assert set(report.summary()) >= {"misses", "extras", "cells", "trials", "misses_by_target"}


def test_a_reference_function_replaces_the_operators_run():
    from scipy import ndimage

    x = np.arange(12.0).reshape(3, 4)
    report = check_operator(ops.MedianFilter(3), [x], reference=lambda a: ndimage.median_filter(a, 3))
    assert report.ok and report.trials > 0
    # scipy's uniform_filter keeps a running sum: a NaN travels along the line, past the box
    # our UniformFilter reads (it sums each box explicitly), and the oracle sees it
    leaky = lambda a: ndimage.uniform_filter(a, 3)  # noqa: E731
    no_nan = [k for k in KINDS if k != "nan"]
    assert check_operator(ops.UniformFilter(3), [x], reference=leaky, kinds=no_nan).ok
    report = check_operator(ops.UniformFilter(3), [x], reference=leaky, kinds=["nan"])
    assert not report.ok and all(m.kinds in (("nan",), ()) for m in report.misses)
    assert check_operator(ops.UniformFilter(3), [x]).ok


def test_refused_values_are_rejected_not_changed():
    report = check_operator(Picky(), [np.array([1.0, 2.0])])
    assert report.ok and report.rejected >= 4 and "values must be >= 0" in report.errors[0]


def test_cells_can_be_sampled_or_named():
    x = np.arange(100.0).reshape(10, 10)
    assert check_operator(ops.Transpose(), [x], cells=7).cells == 7
    assert check_operator(ops.Transpose(), [x], cells={"x0": [(0, 0), (9, 9)]}).cells == 2


def _selection_workflow(lineage):
    wf = sz.Workflow("sel")
    x = wf.input("x")
    kept = wf.add(ops.Filter(lambda a: a[:, 0] > 0, lineage=lineage), x, name="kept")
    doubled = wf.add(ops.MultiplyScalar(2.0), kept, name="doubled")
    wf.add(ops.Sum(axis=1), doubled, name="rows")
    wf.add(ops.Mean(axis=0), kept, name="columns")
    return wf


@pytest.mark.parametrize("lineage", ["source", "positional"])
def test_check_workflow_through_a_selection(tmp_path, lineage):
    """Rows dropped by a perturbation move the rows below them: by source they are the
    same cells (re-aligned before the operators below run), by position they depend on
    every decision before them; either way nothing is missed."""
    x = np.array([[1.0, 2.0], [-1.0, 3.0], [2.0, 0.5], [4.0, -1.0]])
    wf = _selection_workflow(lineage)
    run = wf.run({"x": x}, store=tmp_path / "run", strategies={"kept": ["PayOne"]}, executor="local")
    report = check_workflow(run, wf, {"x": x}, targets=["kept", "doubled", "rows", "columns"], cells=None)
    assert report.ok, str(report)
    assert report.cells == 8 and report.changed > 0


def test_check_workflow_finds_a_wrong_udf_inside(tmp_path):
    x = np.arange(6.0)
    wf = sz.Workflow("bad")
    smooth = wf.add(SmoothButClaimsItself(), wf.input("x"), name="smooth")
    wf.add(ops.AddScalar(1.0), smooth, name="out")
    run = wf.run({"x": x}, store=tmp_path / "run", executor="local")
    report = check_workflow(run, wf, {"x": x})
    assert not report.ok and set(report.missed_by_target) == {"out"}
    with pytest.raises(sz.WorkflowError, match="not an input"):
        check_workflow(run, wf, {"x": x}, sources=["smooth"])


def test_evaluate_workflow_is_the_plain_computation():
    wf = _selection_workflow("source")
    x = np.array([[1.0, 2.0], [-1.0, 3.0]])
    out = evaluate_workflow(wf, {"x": x})
    assert out["kept"].tolist() == [[1.0, 2.0]] and out["rows"].tolist() == [6.0]
    assert evaluate_operator(ops.Transpose(), [x]).tolist() == x.T.tolist()


def test_report_summary_is_jsonable():
    import json

    json.dumps(OracleReport("x").summary())

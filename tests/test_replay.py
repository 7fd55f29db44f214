"""Selective replay: a replayed store equals a full run on the patched inputs (arrays and lineage,
tile by tile), re-runs only the tiles the change reaches, and its changed outputs lie within the
forward lineage of the changed input cells."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import subzero as sz
from subzero import operators as ops
from subzero.frontier import Frontier
from subzero.replay import Patch, replay

from test_run import build, inputs_for, run_all_strategies, workflows
from test_spark import dump_lineage


def reference(run, spec, patched: dict, tmp_path, tile_shape):
    """The workflow run from scratch on the patched inputs, with the same strategies."""
    pins = {name: list(s) for name, s in run.strategies.items()}
    return build(spec).run(patched, store=tmp_path / "reference", strategies=pins, executor="local",
                           tile_shape=tile_shape)


@settings(max_examples=15)
@given(data=st.data(), wf=workflows())
def test_replay_equals_a_full_run_on_the_patched_inputs(tmp_path_factory, data, wf):
    spec, n = wf
    tmp = tmp_path_factory.mktemp("replay")
    tile_shape = data.draw(st.sampled_from([2, 3]))
    seed = data.draw(st.integers(0, 5))
    run = run_all_strategies(tmp, spec, n, seed, tile_shape)
    name = data.draw(st.sampled_from(["x", "y"]))
    r0, c0 = data.draw(st.integers(0, n - 1)), data.draw(st.integers(0, n - 1))
    r1, c1 = data.draw(st.integers(r0 + 1, n)), data.draw(st.integers(c0 + 1, n))
    value = data.draw(st.sampled_from([0.0, 500.0, -3.5]))
    cells = run.frontier(name, box=[(r0, r1), (c0, c1)])
    result = replay(run, Patch(name, cells, value=value), tmp / "replayed")

    patched = {k: np.array(run.output(k)) for k in ("x", "y")}
    patched[name][r0:r1, c0:c1] = value
    ref = reference(run, spec, patched, tmp, tile_shape)
    for node in ref.workflow.nodes:  # every array as a full run computes it
        np.testing.assert_array_equal(np.asarray(result.run.output(node.name)), np.asarray(ref.output(node.name)),
                                      err_msg=node.name)
    result.run.wait(), ref.wait()  # both written behind their return: their files are read raw below
    assert dump_lineage(tmp / "replayed") == dump_lineage(tmp / "reference")  # every shard's entries, tile by tile

    changed = {n: int(np.count_nonzero(np.asarray(result.run.output(n)) != np.asarray(run.output(n))))
               for n in result.outputs}
    for out, change in result.outputs.items():
        assert change.changed.count == changed[out]  # measured, not guessed
        assert change.within_lineage is True
    by_node = {r.name: r for r in result.nodes}
    touched = run.workflow.descendants(run.node(name))
    for node in run.workflow.nodes:  # nodes the patch cannot reach are linked as they were
        if node not in touched:
            assert by_node[node.name].how == "linked"
    assert result.inputs[name][0] == (r1 - r0) * (c1 - c0)


def stencil_run(tmp_path, shape=(64, 64), tile=16):
    wf = sz.Workflow("st")
    x = wf.input("x")
    blur = wf.add(ops.GaussianFilter(1.0, truncate=2.0), x, name="blur")
    wf.add(ops.MultiplyScalar(2.0), blur, name="twice")
    wf.add(ops.Transpose(), wf.input("y"), name="other")
    rng = np.random.default_rng(0)
    inputs = {"x": rng.normal(size=shape), "y": rng.normal(size=shape)}
    return wf.run(inputs, store=tmp_path / "run", executor="local", tile_shape=tile,
                  strategies={"blur": ["FullOne"], "twice": ["Map"], "other": ["FullOne/forward"]})


def test_replay_reruns_only_the_tiles_the_change_reaches(tmp_path):
    run = stencil_run(tmp_path)
    result = replay(run, Patch("x", run.frontier("x", cells=[(20, 20)]), value=1e3), tmp_path / "new")
    nodes = {r.name: r for r in result.nodes}
    assert (nodes["blur"].how, nodes["blur"].rerun, nodes["blur"].tiles) == ("tiles", 1, 16)
    assert nodes["blur"].changed == 25 and nodes["twice"].rerun == 1 and nodes["twice"].changed == 25
    assert nodes["other"].how == "linked" and nodes["y"].how == "linked"
    # untouched files are shared, not copied: same inode (stores never change a file in place)
    old, new = tmp_path / "run" / "arrays" / "other", tmp_path / "new" / "arrays" / "other"
    chunk = next(p for p in old.rglob("*") if p.is_file() and p.name != "zarr.json")
    assert os.stat(chunk).st_ino == os.stat(new / chunk.relative_to(old)).st_ino
    # a cell on a tile's edge reaches the neighbours' halos
    again = replay(run, Patch("x", run.frontier("x", cells=[(16, 16)]), value=1e3), tmp_path / "edge")
    assert {r.name: r.rerun for r in again.nodes}["blur"] == 4
    assert again.outputs["twice"].changed.count == 25 and again.outputs["twice"].within_lineage
    # the old store is untouched
    assert np.asarray(run.output("x"))[16, 16] != 1e3 and sz.open_run(tmp_path / "run").catalog.replayed_from is None
    info = sz.open_run(tmp_path / "edge").catalog
    assert info.replayed_from["store"] == run.path and info.replayed_from["changed"] == {"x": 1}
    assert info.nodes["blur"].metadata["replayed"]["tiles"] == 4


def test_a_patch_that_changes_nothing_reruns_nothing(tmp_path):
    run = stencil_run(tmp_path)
    same = np.asarray(run.output("x"))[3, 4]
    result = replay(run, Patch("x", run.frontier("x", cells=[(3, 4)]), value=same), tmp_path / "new")
    assert result.inputs["x"] == (1, 0)
    assert all(r.how in ("linked", "patched") for r in result.nodes)
    assert all(o.changed.count == 0 for o in result.outputs.values())


def test_a_replacement_array_changes_only_the_cells_that_differ(tmp_path):
    run = stencil_run(tmp_path)
    fixed = np.array(run.output("x"))
    fixed[40:42, 50:53] = 0.0
    result = replay(run, Patch("x", None, source=fixed), tmp_path / "new")
    assert result.inputs["x"] == (64 * 64, 6)
    np.testing.assert_array_equal(result.run.output("x"), fixed)
    assert result.outputs["twice"].changed.count == 6 * 7 and result.outputs["other"].changed.count == 0


def test_replay_refuses_what_it_cannot_do(tmp_path):
    run = stencil_run(tmp_path)
    cells = run.frontier("x", cells=[(1, 1)])
    with pytest.raises(sz.WorkflowError, match="patches inputs"):
        replay(run, Patch("blur", run.frontier("blur", cells=[(1, 1)]), value=0.0), tmp_path / "a")
    with pytest.raises(sz.WorkflowError, match="either value= .* or source="):
        replay(run, Patch("x", cells), tmp_path / "b")
    with pytest.raises(sz.WorkflowError, match="shape"):
        replay(run, Patch("x", cells, source=np.zeros((3, 3))), tmp_path / "c")
    with pytest.raises(sz.StoreError, match="is the run it replays"):
        replay(run, Patch("x", cells, value=0.0), tmp_path / "run")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    with pytest.raises(sz.StoreError, match="already exists"):
        replay(run, Patch("x", cells, value=0.0), tmp_path / "taken")
    assert os.listdir(tmp_path / "taken") == ["notes.txt"]
    ints = sz.Workflow("i")
    ints.add(ops.Transpose(), ints.input("x"), name="t")
    small = ints.run({"x": np.arange(6, dtype=np.int16).reshape(2, 3)}, store=tmp_path / "ints", executor="local")
    with pytest.raises(sz.WorkflowError, match="does not fit input 'x', which holds int16"):
        replay(small, Patch("x", small.frontier("x", cells=[(0, 0)]), value=0.5), tmp_path / "d")
    assert not any((tmp_path / d).exists() for d in "abcd")


def test_a_changed_shape_propagates_as_a_whole_change(tmp_path):
    """A value-dependent output shape (Filter): downstream nodes re-run whole."""
    wf = sz.Workflow("f")
    kept = wf.add(ops.Filter(lambda s: s.sum(axis=1) > 0), wf.input("x"), name="kept")
    wf.add(ops.MultiplyScalar(2.0), kept, name="double")
    x = np.array([[1.0, 1.0], [-1.0, -1.0], [2.0, 2.0]])
    run = wf.run({"x": x}, store=tmp_path / "run", executor="local")
    result = replay(run, Patch("x", run.frontier("x", box=[(1, 2), (0, 2)]), value=5.0), tmp_path / "new")
    assert result.run.shape("double") == (3, 2) and run.shape("double") == (2, 2)
    np.testing.assert_array_equal(result.run.output("double"), [[2, 2], [10, 10], [4, 4]])
    assert result.outputs["double"].changed.count == 6

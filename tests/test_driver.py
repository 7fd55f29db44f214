"""Running workflows (in-process executor): inputs, strategies, failures, budgets, the two phases."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

import subzero as sz
from subzero import operators as ops
from subzero.executors import LocalExecutor
from subzero.progress import Reporter
from subzero.store import FileStore


def small_workflow() -> sz.Workflow:
    wf = sz.Workflow("small")
    x = wf.input("x")
    crd = wf.add(ops.CosmicRayDetect(threshold=30.0, radius=1), x, name="crd")
    blur = wf.add(ops.Convolve(np.ones((3, 3)), mode="constant"), x, name="blur")
    wf.add(ops.Multiply(), crd, blur, name="hits")
    return wf


def image(n: int = 12) -> np.ndarray:
    rng = np.random.default_rng(5)
    x = rng.normal(size=(n, n))
    x[3, 3] = x[8, 9] = 200.0
    return x


WORKLOAD = [{"direction": "backward", "node": "hits", "to": "x", "cells": [[3, 3]]},
            {"direction": "forward", "node": "x", "to": "crd", "cells": [[8, 9], [1, 1]]}]


def lineage_bytes(run) -> int:
    return sum(sum(rec.stats.bytes.values()) for rec in run.catalog.nodes.values() if rec.kind == "operator")


def test_inputs_are_checked(tmp_path):
    wf = small_workflow()
    with pytest.raises(sz.WorkflowError, match=r"needs input\(s\) \['x'\]"):
        wf.run({}, store=tmp_path / "a", executor="local")
    with pytest.raises(sz.WorkflowError, match=r"has no input\(s\) \['z'\]"):
        wf.run({"x": image(), "z": image()}, store=tmp_path / "b", executor="local")
    with pytest.raises(sz.WorkflowError, match="must be a numeric array .*got dtype object"):
        wf.run({"x": np.array([object()])}, store=tmp_path / "c", executor="local")
    with pytest.raises(sz.WorkflowError, match="unknown executor 'yarn'"):
        wf.run({"x": image()}, store=tmp_path / "d", executor="yarn")


def test_strategies_are_checked_before_anything_runs(tmp_path):
    wf = small_workflow()
    with pytest.raises(sz.WorkflowError, match="cannot store 'Map'.*supports"):
        wf.run({"x": image()}, store=tmp_path / "a", strategies={"crd": "Map"}, executor="local")
    with pytest.raises(sz.WorkflowError, match="unknown strategy 'FullAll'"):
        wf.run({"x": image()}, store=tmp_path / "b", strategies={"blur": "FullAll"}, executor="local")
    with pytest.raises(sz.WorkflowError, match="unknown node 'nope'"):
        wf.run({"x": image()}, store=tmp_path / "c", strategies={"nope": "Map"}, executor="local")
    with pytest.raises(sz.WorkflowError, match="payload lineage stores no input cells"):
        wf.run({"x": image()}, store=tmp_path / "d", strategies={"crd": "PayOne/forward"}, executor="local")
    assert not (tmp_path / "a").exists()


def test_shape_mismatch_names_the_node(tmp_path):
    wf = sz.Workflow("bad")
    x, y = wf.input("x"), wf.input("y")
    wf.add(ops.Add(), x, y, name="plus")
    with pytest.raises(sz.WorkflowError, match="node 'plus' \\(Add\\): .*input shapes .* do not broadcast"):
        wf.run({"x": np.ones((3, 4)), "y": np.ones((5, 4))}, store=tmp_path / "s", executor="local")
    assert not (tmp_path / "s").exists()  # refused from the shapes alone, before the store was made
    # a mismatch further down the workflow, too: nothing is stored, and the corrected run works
    t = wf.add(ops.Transpose(), wf.node("plus"), name="t")
    wf.add(ops.Add(), t, x, name="late")
    with pytest.raises(sz.WorkflowError, match="node 'late' \\(Add\\): .*nothing was stored"):
        wf.run({"x": np.ones((3, 4)), "y": np.ones((3, 4))}, store=tmp_path / "s", executor="local")
    assert not (tmp_path / "s").exists()


def test_existing_store_is_never_overwritten(tmp_path):
    wf = small_workflow()
    wf.run({"x": image()}, store=tmp_path / "s", executor="local").wait()  # its files as written
    before = (tmp_path / "s" / "catalog.json").read_bytes()
    with pytest.raises(sz.StoreError, match="never overwritten"):
        small_workflow().run({"x": image()}, store=tmp_path / "s", executor="local")
    assert (tmp_path / "s" / "catalog.json").read_bytes() == before


class FailsOnSecondTile(ops.Add):
    tiling = sz.Elementwise()

    def run(self, ctx, x, y):
        if ctx.tile_box[0][0] > 0:
            raise ArithmeticError("sensor overflow")
        return x + y


def test_a_failed_run_leaves_no_node_a_query_would_trust(tmp_path):
    wf = sz.Workflow("fails")
    x = wf.input("x")
    a = wf.add(ops.Transpose(), x, name="ok")
    wf.add(FailsOnSecondTile(), a, a, name="bad")
    with pytest.raises(sz.WorkflowError, match="node 'bad' failed: ArithmeticError: sensor overflow"):
        wf.run({"x": np.ones((6, 6))}, store=tmp_path / "f", executor="local", tile_shape=3)
    catalog = json.loads((tmp_path / "f" / "catalog.json").read_text())
    assert catalog["status"] == "failed"
    assert "ok" in catalog["nodes"] and "bad" not in catalog["nodes"]
    with pytest.raises(sz.StoreError, match="did not finish"):
        sz.open_run(tmp_path / "f")


def test_default_plan_is_mapping_else_blackbox(tmp_path):
    run = small_workflow().run({"x": image()}, store=tmp_path / "d", executor="local")
    assert run.strategies == {"crd": ("BlackBox",), "blur": ("Map",), "hits": ("Map",)}
    assert lineage_bytes(run) == 0


def test_optimizer_plans_from_a_workload_and_answers_alike(tmp_path):
    run = small_workflow().run({"x": image()}, store=tmp_path / "o", workload=WORKLOAD, executor="local")
    assert run.strategies["blur"] == ("Map",) and run.strategies["hits"] == ("Map",)
    assert run.strategies["crd"] != ("BlackBox",)  # queried both ways: cheap composite lineage pays off
    opt = run.catalog.optimizer
    assert opt["status"] == "optimal" and opt["solve_seconds"] > 0 and opt["base_seconds"] > 0
    reference = small_workflow().run({"x": image()}, store=tmp_path / "r", executor="local",
                                     strategies={"crd": "FullOne", "blur": "Map", "hits": "Map"})
    for q in WORKLOAD:
        query = run.backward if q["direction"] == "backward" else run.forward
        ref = reference.backward if q["direction"] == "backward" else reference.forward
        np.testing.assert_array_equal(query(q["node"], q["cells"], to=q["to"]),
                                      ref(q["node"], q["cells"], to=q["to"]))
    np.testing.assert_array_equal(run.output("hits"), reference.output("hits"))


@pytest.mark.parametrize("budget", ["1B", "200B", "5KB", "1MB"])
def test_measured_lineage_never_exceeds_the_disk_budget(tmp_path, budget):
    from subzero.optimizer.budgets import parse_disk_budget

    pins = {"blur": ["FullOne", "FullMany/forward"]}  # pinned strategies count against the budget too
    run = small_workflow().run({"x": image()}, store=tmp_path / "b", workload=WORKLOAD, max_disk=budget,
                               executor="local", strategies=pins if budget == "1MB" else None)
    assert lineage_bytes(run) <= parse_disk_budget(budget, image().nbytes)
    if budget == "1B":
        assert run.strategies["crd"] == ("BlackBox",)


def test_pinned_lineage_over_the_budget_falls_back_at_commit(tmp_path):
    run = small_workflow().run({"x": image()}, store=tmp_path / "p", max_disk="1KB", executor="local",
                               strategies={"blur": ["FullOne", "FullMany"]}, workload=WORKLOAD)
    entry = run.catalog.nodes["blur"]
    assert lineage_bytes(run) <= 1000
    assert entry.strategies == ("BlackBox",) and set(entry.dropped) == {"FullOne/backward", "FullMany/backward"}
    run.wait()  # the store is written behind the run: its files are all there once it is durable
    assert not list((tmp_path / "p" / "lineage" / "blur").rglob("*.mdb"))  # dropped shards are removed
    np.testing.assert_array_equal(run.backward("blur", [(0, 0)], to="x"), [[0, 0], [0, 1], [1, 0], [1, 1]])


def test_relative_budgets_are_recorded(tmp_path):
    run = small_workflow().run({"x": image()}, store=tmp_path / "r", workload=WORKLOAD, max_disk="2x",
                               max_runtime="10x", executor="local")
    opt = run.catalog.optimizer
    assert opt["max_disk_bytes"] == pytest.approx(2 * image().nbytes)
    assert opt["max_runtime_seconds"] == pytest.approx(9 * opt["base_seconds"])
    assert lineage_bytes(run) <= 2 * image().nbytes


def test_a_workload_may_name_its_nodes_by_object(tmp_path):
    wf = small_workflow()
    hits, x = wf.node("hits"), wf.node("x")
    workload = [{"direction": "backward", "node": hits, "to": x, "cells": [(3, 4)]}]
    run = wf.run({"x": image()}, store=tmp_path / "w", workload=workload, executor="local")
    assert run.catalog.workload == [{"direction": "backward", "node": "hits", "to": "x", "cells": [[3, 4]]}]
    assert sz.open_run(tmp_path / "w").catalog.workload == run.catalog.workload


def test_bad_budgets_and_workloads_are_workflow_errors(tmp_path):
    wf = small_workflow()
    with pytest.raises(sz.WorkflowError, match="max_disk"):
        wf.run({"x": image()}, store=tmp_path / "a", max_disk="lots", executor="local")
    with pytest.raises(sz.WorkflowError, match="max_runtime"):
        wf.run({"x": image()}, store=tmp_path / "r", max_runtime="0.5x", executor="local")
    assert not (tmp_path / "r").exists()  # rejected before anything ran
    with pytest.raises(sz.WorkflowError, match="workload query 0"):
        wf.run({"x": image()}, store=tmp_path / "b", workload=[{"node": "hits"}], executor="local")
    with pytest.raises(sz.WorkflowError, match="unknown node 'nowhere'"):
        wf.run({"x": image()}, store=tmp_path / "c", executor="local",
               workload=[{"direction": "backward", "node": "nowhere", "to": "x"}])


class MinusGlobalMean(sz.Operator):
    """A toy two-pass operator: ``x - mean(x)``, tiled; the first pass sums each tile."""

    tiling = sz.Elementwise()

    def infer_output_shape(self, input_shapes):
        return tuple(input_shapes[0])

    def prepare(self, ctx, x):
        return float(np.sum(x)), int(np.size(x)), ctx.tile_box

    def combine(self, summaries):
        self._boxes = [box for _, _, box in summaries]
        self._mean = sum(s for s, _, _ in summaries) / sum(n for _, n, _ in summaries)

    def run(self, ctx, x):
        return x - self._mean


def test_two_pass_operators_prepare_every_tile_then_combine_then_run(tmp_path):
    x = np.arange(35, dtype=float).reshape(7, 5) ** 1.5
    wf = sz.Workflow("centred")
    node = wf.add(MinusGlobalMean(), wf.input("x"), name="centred")
    run = wf.run({"x": x}, store=tmp_path / "run", executor="local", tile_shape=3)
    assert run.node_record("centred").stats.tiles == 6
    assert np.allclose(run.output("centred"), x - x.mean())
    assert not hasattr(node.operator, "_boxes"), "the workflow's operator is left as the user built it"
    assert run.node("centred").operator._boxes == [t.box for t in sz.tiling.tile_grid((7, 5), (0, 1), 3)], \
        "summaries in tile order"
    again = sz.open_run(tmp_path / "run")  # what combine kept is stored with the operator
    assert again.node("centred").operator._mean == pytest.approx(x.mean())
    assert len(again.backward("centred", [(0, 0)], to="x")) == 35  # all-to-all


# -- the workflow stays a specification ------------------------------------------------------------------------------

def _as_built(wf: sz.Workflow) -> dict:
    """Each operator node's operator object and its parameters, as the workflow holds them."""
    return {n.name: (n.operator, repr(n.operator.params()), n.operator.output_shape, n.operator.input_shapes)
            for n in wf.nodes if not n.is_input}


def _unchanged(wf: sz.Workflow, before: dict, run) -> None:
    for name, (op, params, shape, shapes) in before.items():
        node = wf.node(name)
        assert node.operator is op, f"{name}: the run replaced the workflow's operator"
        assert (repr(op.params()), op.output_shape, op.input_shapes) == (params, shape, shapes), name
        assert op.output_shape is None and not op.input_shapes, f"{name}: the run bound the workflow's operator"
        if run is None:
            continue
        bound = run.node(name).operator  # the run holds its own graph, bound to its shapes
        assert bound is not op and bound.output_shape == run.shape(name)
    assert run is None or run.workflow is not wf and [n.name for n in run.workflow.nodes] == [n.name for n in wf.nodes]


def test_a_run_leaves_the_workflow_as_the_user_built_it(tmp_path, monkeypatch):
    """Plain, optimized, resumed and replayed runs bind their own graph: the workflow's nodes keep
    the very operator objects (and parameters) the workflow was built with, unbound."""
    from subzero.replay import Patch, replay

    wf = resumable()
    before = _as_built(wf)
    plain = wf.run({"x": field()}, store=tmp_path / "plain", executor="local", strategies=PINS, tile_shape=16)
    _unchanged(wf, before, plain)
    assert plain.node("stars").operator.output_shape == (40, 48)
    optimized = wf.run({"x": field()}, store=tmp_path / "opt", executor="local", tile_shape=16, max_disk="1000x",
                       workload=[{"direction": "backward", "node": "stars", "to": "x", "cells": [[20, 20]]}])
    _unchanged(wf, before, optimized)
    monkeypatch.setenv("SUBZERO_TEST_FAIL", "run")
    with pytest.raises(sz.WorkflowError, match="sensor overflow"):
        wf.run({"x": field()}, store=tmp_path / "resumed", executor="local", strategies=PINS, tile_shape=16)
    monkeypatch.delenv("SUBZERO_TEST_FAIL")
    _unchanged(wf, before, None)  # a failed run, too
    resumed = wf.run({"x": field()}, store=tmp_path / "resumed", executor="local", strategies=PINS, tile_shape=16,
                     resume=True)
    _unchanged(wf, before, resumed)
    again = wf.run({"x": field()}, store=tmp_path / "resumed", executor="local", strategies=PINS, tile_shape=16,
                   resume=True)  # finished: returned as it is
    _unchanged(wf, before, again)
    replayed = replay(plain, Patch("x", plain.frontier("x", box=[(0, 4), (0, 4)]), value=0.0), tmp_path / "re",
                      executor="local")
    _unchanged(wf, before, replayed.run)
    same_run(resumed, plain)


def test_workflow_run_hands_the_driver_one_frozen_record_of_its_keywords(monkeypatch):
    import dataclasses
    import inspect

    from subzero import driver

    seen = []
    monkeypatch.setattr(driver, "execute", lambda wf, inputs, options: seen.append((wf, inputs, options)))
    wf, data = small_workflow(), {"x": image()}
    keywords = [p for p in inspect.signature(sz.Workflow.run).parameters if p not in ("self", "inputs")]
    fields = [f.name for f in dataclasses.fields(driver.RunOptions)]
    assert keywords == [f for f in fields if f != "made_by"], "Workflow.run's keywords are the record's fields"
    wf.run(data, "somewhere", executor="local", tile_shape=4, max_disk="2x", resume=True)
    (got_wf, got_inputs, options), = seen
    assert got_wf is wf and got_inputs is data
    assert (options.store, options.executor, options.tile_shape, options.max_disk, options.resume, options.overwrite) \
        == ("somewhere", "local", 4, "2x", True, False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.store = "elsewhere"  # type: ignore[misc]


# -- resume ----------------------------------------------------------------------------------------------------------

class Flaky(ops.GaussianFilter):
    """Fails on its second row of tiles while ``SUBZERO_TEST_FAIL`` says so: the class's code and
    arguments, so the run's fingerprint, stay the same."""

    def run(self, ctx, x):
        when = os.environ.get("SUBZERO_TEST_FAIL")
        if when == "run" and ctx.tile_box[0][0] > 0:
            raise ArithmeticError("sensor overflow")
        return super().run(ctx, x)


def resumable() -> sz.Workflow:
    wf = sz.Workflow("resumable")
    x = wf.input("x")
    blur = wf.add(ops.GaussianFilter(1.0), x, name="blur")
    flaky = wf.add(Flaky(1.0), blur, name="flaky")
    bright = wf.add(ops.Threshold(0.5), flaky, name="bright")
    wf.add(ops.Label(), bright, name="stars")
    return wf


PINS = {"flaky": "FullMany", "stars": ["PayOne", "FullOne"], "bright": "FullOne/forward"}


def field(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((40, 48))


def mtimes(path) -> dict[str, int]:
    return {str(p.relative_to(path)): p.stat().st_mtime_ns for p in sorted(path.rglob("*")) if p.is_file()}


def same_run(run, clean) -> None:
    for name in ("x", "blur", "flaky", "bright", "stars"):
        np.testing.assert_array_equal(np.asarray(run.output(name)), np.asarray(clean.output(name)))
    cells = np.argwhere(np.asarray(clean.output("stars")) > 0)[:40]
    want = clean.backward("stars", cells, to="x", using={n: "BlackBox" for n in clean.strategies})
    for using in (None, {"stars": "PayOne", "flaky": "FullMany"}, {"stars": "FullOne"}):
        if using and not all(sz.modes.Strategy.parse(s).name in run.strategies[n] for n, s in using.items()):
            continue  # an optimized run chose other strategies
        assert np.array_equal(run.backward("stars", cells, to="x", using=using), want)
    using = {"bright": "FullOne/forward"} if "FullOne/forward" in run.strategies["bright"] else None
    assert np.array_equal(run.forward("x", [(20, 20)], to="stars", using=using),
                          clean.forward("x", [(20, 20)], to="stars"))


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory):
    return resumable().run({"x": field()}, store=tmp_path_factory.mktemp("clean") / "s", executor="local",
                           strategies=PINS, tile_shape=16)


def test_a_resumed_run_reads_its_unstored_committed_nodes_by_recomputing_them(tmp_path, monkeypatch, clean_run):
    """By default an intermediate is not stored: a run that failed after committing it resumes
    by recomputing it from the stored input for the nodes left, and answers as a clean run."""
    path = tmp_path / "s"
    failed_run(path, monkeypatch, strategies=PINS)
    catalog = FileStore.open(path).read_catalog()
    assert set(catalog.nodes) == {"x", "blur"} and not catalog.nodes["blur"].array.stored
    assert not (path / "arrays" / "blur").exists()
    run = resumable().run({"x": field()}, store=path, executor="local", strategies=PINS, tile_shape=16, resume=True)
    assert run.catalog.status == "done"
    same_run(run, clean_run)
    assert np.array_equal(np.asarray(run.output("blur")), np.asarray(clean_run.output("blur")))


def failed_run(path, monkeypatch, when="run", **options):
    monkeypatch.setenv("SUBZERO_TEST_FAIL", when)
    with pytest.raises(sz.WorkflowError, match="sensor overflow"):
        resumable().run({"x": field()}, store=path, executor="local", tile_shape=16, **options)
    monkeypatch.delenv("SUBZERO_TEST_FAIL")


def test_resume_keeps_the_committed_nodes_and_runs_the_rest(tmp_path, monkeypatch, clean_run):
    path = tmp_path / "s"
    failed_run(path, monkeypatch, strategies=PINS, keep="all")
    catalog = FileStore.open(path).read_catalog()
    assert catalog.status == "failed" and set(catalog.nodes) == {"x", "blur"}
    kept = {k: v for k, v in mtimes(path).items() if k.startswith(("arrays/x/", "arrays/blur/"))}
    (path / "lineage" / "flaky" / "FullMany-backward" / "t000099-dead.mdb").parent.mkdir(parents=True, exist_ok=True)
    (path / "lineage" / "flaky" / "FullMany-backward" / "t000099-dead.mdb").write_bytes(b"half")  # a killed task's
    (path / "arrays" / "blur" / "c" / "0" / "0.ab12.tmp").write_bytes(b"half")  # a killed writer's temporary
    run = resumable().run({"x": field()}, store=path, executor="local", strategies=PINS, tile_shape=16, resume=True,
                          keep="all").wait()  # its files, once written
    assert run.catalog.status == "done" and len(run.catalog.resumed) == 1
    assert {k: v for k, v in mtimes(path).items() if k in kept} == kept  # committed arrays were not rewritten
    assert not list(path.rglob("*.tmp")) and not (path / "lineage" / "flaky" / "FullMany-backward" /
                                                  "t000099-dead.mdb").exists()
    same_run(run, clean_run)
    same_run(sz.open_run(path), clean_run)  # and from another process's point of view


def test_resume_refuses_another_workflow_settings_or_inputs_naming_what_differs(tmp_path, monkeypatch):
    path = tmp_path / "s"
    failed_run(path, monkeypatch, strategies=PINS)
    before = mtimes(path)
    other_sigma = resumable()
    other_sigma.node("blur").operator.sigma = 2.0
    cases = [
        (resumable(), {"x": field(1)}, {"strategies": PINS, "tile_shape": 16}, "input 'x' (its values"),
        (resumable(), {"x": field()[:, :40]}, {"strategies": PINS, "tile_shape": 16}, "input 'x'"),
        (other_sigma, {"x": field()}, {"strategies": PINS, "tile_shape": 16}, "the operator of node 'blur'"),
        (resumable(), {"x": field()}, {"strategies": PINS, "tile_shape": 8}, "the run's settings"),
        (resumable(), {"x": field()}, {"strategies": {"stars": "PayOne"}, "tile_shape": 16}, "the run's settings"),
        (small_workflow(), {"x": field()}, {}, "node 'crd' (not in the stored run)"),
    ]
    for wf, data, options, fragment in cases:
        with pytest.raises(sz.StoreError, match="cannot resume the run in") as err:
            wf.run(data, store=path, executor="local", resume=True, **options)
        assert fragment in str(err.value) and "--overwrite" in str(err.value), str(err.value)
    assert mtimes(path) == before  # a refused resume changes nothing
    assert not (path / ".writer").exists()


def test_resume_of_a_finished_run_returns_it_untouched(tmp_path, clean_run):
    path = tmp_path / "s"
    resumable().run({"x": field()}, store=path, executor="local", strategies=PINS, tile_shape=16).wait()
    before = {k: (p.read_bytes(), p.stat().st_mtime_ns) for k, p in ((str(p), p) for p in path.rglob("*"))
              if p.is_file()}
    run = resumable().run({"x": field()}, store=path, executor="local", strategies=PINS, tile_shape=16, resume=True)
    same_run(run, clean_run)
    after = {k: (p.read_bytes(), p.stat().st_mtime_ns) for k, p in ((str(p), p) for p in path.rglob("*"))
             if p.is_file()}
    assert after == before


def test_resume_without_a_store_starts_one(tmp_path, clean_run):
    run = resumable().run({"x": field()}, store=tmp_path / "new", executor="local", strategies=PINS, tile_shape=16,
                          resume=True)
    assert run.catalog.resumed == []
    same_run(run, clean_run)
    (tmp_path / "lock-only").mkdir()
    (tmp_path / "lock-only" / ".writer").write_text('{"pid": 999999, "host": "nowhere", "started": "x"}')
    resumable().run({"x": field()}, store=tmp_path / "lock-only", executor="local", strategies=PINS, tile_shape=16,
                    resume=True)  # killed as it began: nothing to keep


def test_resume_refuses_what_it_cannot_continue(tmp_path):
    wf = resumable()
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "notes.txt").write_text("mine")
    with pytest.raises(sz.StoreError, match="is not a store subzero made"):
        wf.run({"x": field()}, store=tmp_path / "theirs", executor="local", resume=True)
    with pytest.raises(sz.WorkflowError, match="not both"):
        wf.run({"x": field()}, store=tmp_path / "s", executor="local", resume=True, overwrite=True)
    live = FileStore.create(tmp_path / "live", sz.catalog.RunRecord(workflow={"name": "r", "nodes": []},
                                                                    created="now", executor="local"))
    with pytest.raises(sz.StoreError, match="being written by another run"):
        wf.run({"x": field()}, store=tmp_path / "live", executor="local", resume=True)
    live.close()
    with pytest.raises(sz.StoreError, match="no fingerprint"):  # a store of an older subzero
        wf.run({"x": field()}, store=tmp_path / "live", executor="local", resume=True)


def test_resume_a_one_pass_run_killed_mid_way(tmp_path, monkeypatch, clean_run):
    """A node failed after others were planned, computed and committed with their lineage: the
    resumed run keeps those (arrays untouched), plans and computes the rest, and answers alike."""
    path = tmp_path / "s"
    options = {"strategies": {"stars": "PayOne", "flaky": "FullMany"}, "max_disk": "1000x",
               "workload": [{"direction": "backward", "node": "stars", "to": "x", "cells": [[20, 20]]}]}
    from subzero import driver

    real, computed = driver._Execution.compute, []

    def compute_then_die(self, node, strategies, *rest):
        computed.append(node.name)
        if node.name == "flaky":
            raise RuntimeError("killed mid-way")
        return real(self, node, strategies, *rest)

    monkeypatch.setattr(driver._Execution, "compute", compute_then_die)
    with pytest.raises(RuntimeError, match="killed mid-way"):
        resumable().run({"x": field()}, store=path, executor="local", tile_shape=16, **options)
    monkeypatch.setattr(driver._Execution, "compute", real)
    catalog = FileStore.open(path).read_catalog()
    assert catalog.status == "failed" and catalog.optimizer["one_pass"] and computed[0] in catalog.nodes
    assert "flaky" not in catalog.nodes and "pending" not in catalog.optimizer
    arrays = {k: v for k, v in mtimes(path).items() if k.startswith("arrays/") and k.split("/")[1] in catalog.nodes}
    run = resumable().run({"x": field()}, store=path, executor="local", tile_shape=16, resume=True, **options)
    assert {k: v for k, v in mtimes(path).items() if k in arrays} == arrays  # committed nodes kept
    assert run.catalog.status == "done" and run.catalog.optimizer["status"]
    assert run.strategies["flaky"] == ("FullMany/backward",)
    assert run.catalog.nodes["flaky"].reason == "pinned" and run.catalog.nodes["flaky"].profile
    same_run(run, clean_run)


def test_resume_a_one_pass_run_that_failed_before_its_first_node(tmp_path, monkeypatch, clean_run):
    path = tmp_path / "s"
    options = {"strategies": {"stars": "PayOne"}, "max_disk": "20x"}
    failed_run(path, monkeypatch, **options)
    run = resumable().run({"x": field()}, store=path, executor="local", tile_shape=16, resume=True, **options)
    assert run.catalog.optimizer["status"] and "pending" not in run.catalog.optimizer
    same_run(run, clean_run)


def test_resume_checks_zarr_inputs_through_the_tasks(tmp_path, monkeypatch, clean_run):
    import zarr

    source = zarr.create_array(str(tmp_path / "x.zarr"), shape=(40, 48), chunks=(16, 16), dtype="float64")
    source[:] = field()
    path = tmp_path / "s"
    monkeypatch.setenv("SUBZERO_TEST_FAIL", "run")
    with pytest.raises(sz.WorkflowError):
        resumable().run({"x": zarr.open_array(str(tmp_path / "x.zarr"), mode="r")}, store=path, executor="local",
                        tile_shape=16, strategies=PINS)
    monkeypatch.delenv("SUBZERO_TEST_FAIL")
    stored = FileStore.open(path).read_catalog().fingerprint["input:x"]
    from subzero.fingerprint import array_digest
    from subzero.tiling import default_chunks

    assert stored == array_digest(field(), default_chunks((40, 48)))  # a Zarr input digests like numpy
    changed = zarr.open_array(str(tmp_path / "x.zarr"), mode="r+")
    changed[3, 3] = -1.0
    with pytest.raises(sz.StoreError, match="input 'x'"):
        resumable().run({"x": zarr.open_array(str(tmp_path / "x.zarr"), mode="r")}, store=path, executor="local",
                        tile_shape=16, strategies=PINS, resume=True)
    changed[3, 3] = field()[3, 3]
    run = resumable().run({"x": zarr.open_array(str(tmp_path / "x.zarr"), mode="r")}, store=path, executor="local",
                          tile_shape=16, strategies=PINS, resume=True)
    same_run(run, clean_run)


def test_resume_leaves_the_shards_of_a_damaged_manifest_alone(tmp_path, monkeypatch, clean_run):
    path = tmp_path / "s"
    failed_run(path, monkeypatch, strategies={**PINS, "blur": "FullOne"})
    shards = sorted(p.name for p in (path / "lineage" / "blur").rglob("*.mdb"))
    assert shards
    manifest = path / "manifests" / "blur.json"
    manifest.write_bytes(manifest.read_bytes()[:-1])  # damaged after it was committed
    run = resumable().run({"x": field()}, store=path, executor="local", strategies={**PINS, "blur": "FullOne"},
                          tile_shape=16, resume=True)
    assert sorted(p.name for p in (path / "lineage" / "blur").rglob("*.mdb")) == shards
    same_run(run, clean_run)  # the damaged lineage is re-executed


def test_commit_keeps_one_attempt_per_tile_and_removes_the_others(tmp_path):
    """A tile computed twice (a retried or speculative attempt whose result the driver never
    received) leaves a second shard; the manifest names the attempt the driver got, the other
    is removed, and the lineage is that of a clean run."""
    from subzero.catalog import RunRecord
    from subzero.driver import _Execution
    from subzero.modes import Strategy
    from subzero.progress import Reporter
    from subzero.worker import run_tile
    from subzero.store import FileStore

    wf = small_workflow()
    record = RunRecord(workflow=wf.to_dict(), created="now", executor="local")
    store = FileStore.create(tmp_path / "s", record)
    run = _Execution(wf, store, record, LocalExecutor(threads=1), 4, None, Reporter())
    run.save_input(wf.node("x"), image())
    node = wf.node("blur")
    chosen = (Strategy.parse("FullOne/backward"),)
    metas, wall = run.compute(node, chosen)
    stage = run.stage(node)
    duplicate = run_tile(stage.task(chosen, write_output=False), stage.tiles[0])
    directory = tmp_path / "s" / "lineage" / "blur" / "FullOne-backward"
    assert duplicate.shards["FullOne/backward"].name + ".mdb" in {p.name for p in directory.iterdir()}
    run.commit(node, chosen, metas, wall)
    store.close()
    names = {p.name.split(".")[0] for p in directory.iterdir()}
    assert names == {m.shards["FullOne/backward"].name for m in metas}  # the duplicate is gone
    clean = small_workflow().run({"x": image()}, store=tmp_path / "clean", executor="local", tile_shape=4,
                                 strategies={"blur": "FullOne"})
    reopened = FileStore.open(tmp_path / "s")
    manifest = reopened.read_manifest("blur")
    assert [r.tile for r in manifest.shards["FullOne/backward"]] == list(range(len(metas)))
    ref = clean.store.read_manifest("blur").shards["FullOne/backward"]
    assert [(r.keys, r.nbytes, r.pairs) for r in manifest.shards["FullOne/backward"]] == \
        [(r.keys, r.nbytes, r.pairs) for r in ref]


def test_calibration_skips_what_the_workload_never_asks(tmp_path):
    """Candidates the integer program would prune for the workload are not measured: a node
    no query steps through is BlackBox without calibration, a direction no query takes there
    keeps no candidate indexed for it (composites answer both and stay)."""
    from subzero.driver import _candidates
    from subzero.optimizer.workload import parse_workload, step_sizes

    wf = small_workflow()
    crd = wf.node("crd")
    every = _candidates(crd, {})
    backward = [{"direction": "backward", "node": "hits", "to": "x", "cells": [[3, 3]]}]
    for workload, want in ((backward, {d: d == "backward" for d in ("backward", "forward")}), ([], None)):
        access, _ = step_sizes(wf, parse_workload(wf, workload), lambda node, direction, cells: cells)
        got = _candidates(crd, {}, access)
        if want is None:
            assert got == ["BlackBox"]
            continue
        assert set(got) <= set(every) and "CompOne/backward" in got and "FullRange" in got
        assert not any(c.endswith("/forward") for c in got) and "FullOne/backward" in got
    assert "FullOne/forward" in _candidates(crd, {"crd": ("FullOne/forward",)}, {})  # pins are kept
    run = wf.run({"x": image()}, store=tmp_path / "o", workload=backward, executor="local")
    assert run.catalog.nodes["crd"].profile["strategies"].keys() <= set(every) - {"FullOne/forward"}


def test_a_second_run_of_the_same_operators_on_the_same_inputs_reuses_their_calibration(tmp_path, monkeypatch):
    """Calibration depends only on the node's operators and inputs upstream, tiles and candidates:
    the same run again in this process plans from the profiles the first measured (same plan,
    same answers); other input values, or the ``reuse_calibration`` setting off, measure anew."""
    from subzero.optimizer import calibrate

    calibrate.forget()
    measured = []
    real = calibrate.profile_node

    def profile(task, *args, **kwargs):
        if not (measured and measured[-1] == task.node and not kwargs.get("bound")):  # not a counted node's encoding
            measured.append(task.node)
        return real(task, *args, **kwargs)

    monkeypatch.setattr(calibrate, "profile_node", profile)

    def go(name, x, **settings):
        with sz.config.set(**settings):
            return small_workflow().run({"x": x}, store=tmp_path / name, workload=WORKLOAD, max_runtime="3x",
                                        executor="local")

    first = go("a", image())
    calibrated = list(measured)
    assert {"crd", "blur"} <= set(calibrated)
    again = go("b", image())
    assert measured == calibrated  # nothing measured again
    for name in ("crd", "blur", "hits"):
        assert again.catalog.nodes[name].strategies == first.catalog.nodes[name].strategies
        assert again.catalog.nodes[name].profile["strategies"] == first.catalog.nodes[name].profile["strategies"]
    assert again.catalog.optimizer["calibration_seconds"] < first.catalog.optimizer["calibration_seconds"]
    np.testing.assert_array_equal(again.backward("hits", [[3, 3]], to="x"), first.backward("hits", [[3, 3]], to="x"))
    other = image()
    other[5, 6] = 300.0
    go("c", other)
    assert measured == calibrated * 2  # other values: measured
    go("d", image(), reuse_calibration=False)
    assert measured == calibrated * 3
    calibrate.forget()


def test_tiny_inputs_run_in_process_when_spark_would_have_to_start(tmp_path, monkeypatch):
    import subzero.executors.spark as spark_mod
    from subzero import driver

    monkeypatch.setattr(spark_mod, "would_start_embedded", lambda: True)
    wf = sz.Workflow("tiny")
    blur = wf.add(ops.Convolve(np.ones((3, 3)) / 9.0), wf.input("x"), name="blur")
    wf.add(ops.Threshold(0.5), blur, name="mask")
    x = np.arange(12, dtype=np.float32).reshape(3, 4) / 12
    notes: list[str] = []
    reporter = driver.Reporter()
    monkeypatch.setattr(reporter, "note", notes.append)
    tiny = wf.run({"x": x}, store=str(tmp_path / "tiny"), executor="spark", progress=reporter)
    local = wf.run({"x": x}, store=str(tmp_path / "local"), executor="local")
    assert tiny.catalog.executor == "local" and tiny.catalog.master is None
    assert any("in-process" in n for n in notes)
    assert np.array_equal(np.asarray(tiny.output("mask")), np.asarray(local.output("mask")))
    assert np.array_equal(tiny.backward("mask", [(1, 1)], to="x"), local.backward("mask", [(1, 1)], to="x"))
    # above the threshold, or with a session running already, Spark runs it
    assert driver._in_process_if_tiny("spark", None, sz.config.get("in_process_bytes") + 1, reporter) == "spark"
    monkeypatch.setattr(spark_mod, "would_start_embedded", lambda: False)
    assert driver._in_process_if_tiny("spark", None, 48, reporter) == "spark"
    assert driver._in_process_if_tiny("local", None, 48, reporter) == "local"


def test_an_optimized_run_computes_each_node_once_with_its_lineage(tmp_path, monkeypatch):
    """One pass: each node is planned once its inputs are committed and computed once, with the
    lineage chosen (nothing re-runs to capture it); a whole-array node is calibrated from its one
    tile, computed once, its FULL and PAY candidates counted on a crop of its inputs, not the whole
    array; the answers are the pinned reference's."""
    from subzero import driver
    from subzero.optimizer import calibrate

    wf = sz.Workflow("stars")
    x = wf.input("x")
    smooth = wf.add(ops.Convolve(np.ones((3, 3)) / 9, mode="constant"), x, name="smooth")
    wf.add(ops.DetectStars(threshold=3.0, minarea=3), smooth, name="stars")
    rng = np.random.default_rng(3)
    sky = rng.normal(size=(300, 300))
    sky[rng.integers(5, 295, 40), rng.integers(5, 295, 40)] = 40.0
    workload = [{"direction": "backward", "node": "stars", "to": "x", "cells": [[150, 150]]}]
    computed, captured, sampled = [], [], {}
    real_compute, real_capture, real_profile = driver._Execution.compute, driver._Execution.capture, \
        calibrate.profile_node
    real_first = calibrate.profile_first

    def compute(self, node, strategies, *rest):
        computed.append(node.name)
        return real_compute(self, node, strategies, *rest)

    def capture(self, node, strategies):
        captured.append(node.name)
        return real_capture(self, node, strategies)

    def profile(task, tiles, *args, **kwargs):
        sampled[task.node] = task.input_shapes
        return real_profile(task, tiles, *args, **kwargs)

    monkeypatch.setattr(driver._Execution, "compute", compute)
    monkeypatch.setattr(driver._Execution, "capture", capture)
    def first(task, tiles, probe, *args, **kwargs):
        sampled[task.node] = probe.input_shapes
        got = real_first(task, tiles, probe, *args, **kwargs)
        ran.extend(m.tile.index for m in got[1].metas)
        return got

    ran: list[int] = []
    monkeypatch.setattr(calibrate, "profile_node", profile)
    monkeypatch.setattr(calibrate, "profile_first", first)
    run = wf.run({"x": sky}, store=tmp_path / "o", workload=workload, max_runtime="1.15x", executor="local",
                 tile_shape=100)
    assert computed == ["smooth", "stars"] and captured == [] and ran == [0]
    assert sampled["stars"][0] != (300, 300) and np.prod(sampled["stars"][0]) < 300 * 300 / 1.2  # a crop
    opt = run.catalog.optimizer
    assert opt["one_pass"] and opt["status"] == "optimal" and "pending" not in opt
    assert opt["max_runtime_seconds"] == pytest.approx(0.15 * opt["base_seconds"])
    stars = run.catalog.nodes["stars"]
    assert stars.profile["one_pass"] and stars.predicted and stars.reason
    assert stars.profile["tiles"] == 1 and stars.profile["out_size"] == 300 * 300  # scaled to the node
    reference = wf.run({"x": sky}, store=tmp_path / "r", executor="local", tile_shape=100,
                       strategies={"stars": "FullOne", "smooth": "Map"})
    for cell in ([150, 150], [0, 0], [40, 200]):
        np.testing.assert_array_equal(run.backward("stars", [cell], to="x"), reference.backward("stars", [cell], to="x"))
    np.testing.assert_array_equal(run.output("stars"), reference.output("stars"))


def test_a_one_pass_run_keeps_the_measured_operator_time_in_the_profiles_queries_plan_with(tmp_path):
    # a mapping node planned from its mapping functions alone has no operator time before it runs;
    # its committed profile carries the run's, so queries map through it rather than re-run it
    wf = sz.Workflow("chain")
    x = wf.input("x")
    sub = wf.add(ops.Subtract(), x, wf.input("dark"), name="sub")
    blur = wf.add(ops.Convolve(np.ones((3, 3)) / 9.0), sub, name="blur")
    wf.add(ops.Label(), wf.add(ops.Threshold(0.5), blur, name="mask"), name="label")
    rng = np.random.default_rng(3)
    inputs = {"x": rng.normal(size=(256, 256)).astype(np.float32), "dark": np.zeros((256, 256), np.float32)}
    workload = [{"direction": "backward", "node": "label", "to": "x", "cells": [[128, 128]]},
                {"direction": "forward", "node": "x", "to": "label", "cells": [[128, 128]]}]
    run = wf.run(inputs, store=tmp_path / "o", workload=workload, max_runtime="1.3x", executor="local")
    for name in ("sub", "blur", "mask"):
        record = run.catalog.nodes[name]
        assert record.strategies == ("Map",)
        assert record.profile["op_seconds"] == pytest.approx(record.stats.op_seconds) and record.stats.op_seconds > 0
        assert record.profile["trace_seconds"] == record.profile["op_seconds"]
    plain = wf.run(inputs, store=tmp_path / "p", executor="local")
    for direction, (node, to) in {"backward": ("label", "x"), "forward": ("x", "label")}.items():
        got = getattr(run, direction)(node, [[128, 128]], to=to)
        steps = {s["node"]: s["strategy"] for s in run.last_query}
        assert all(steps[n] == "Map" for n in ("sub", "blur", "mask")), steps
        assert np.array_equal(np.asarray(got), np.asarray(getattr(plain, direction)(node, [[128, 128]], to=to)))


class Tanh(ops.ElementwiseOperator):
    """A user's elementwise operator (defined outside subzero, pickled by value)."""

    fn = np.tanh


#: per-tile steps a fused chain may hold, and two that end a fusion (two passes, stored lineage)
_STEPS = {"sub": lambda: ops.Subtract(), "conv": lambda: ops.Convolve(np.ones((3, 3)) / 9.0),
          "gauss": lambda: ops.GaussianFilter(1.0), "thresh": lambda: ops.Threshold(0.1), "tanh": Tanh,
          "label": lambda: ops.Label()}


def _chain(steps):
    wf = sz.Workflow("chain")
    x, dark = wf.input("x"), wf.input("dark")
    prev = x
    for k, step in enumerate(steps):
        args = (prev, dark) if step == "sub" else (prev,)
        prev = wf.add(_STEPS[step](), *args, name=f"n{k}-{step}")
    return wf


class _StagesSeen(Reporter):
    """A progress reporter that keeps the name of every stage started (fused: ``a+b+c``)."""

    def __init__(self):
        super().__init__()
        self.names = []

    def node_started(self, name, n_tiles):
        self.names.append(name)


def _stored_arrays(root) -> dict:
    """Every array file of a store (chunks and zarr.json) by path."""
    import hashlib

    out = {}
    for dirpath, _, files in os.walk(os.path.join(root, "arrays")):
        for f in files:
            path = os.path.join(dirpath, f)
            out[os.path.relpath(path, root)] = hashlib.sha1(open(path, "rb").read()).hexdigest()
    return out


@settings(max_examples=12, deadline=None)
@given(steps=st.lists(st.sampled_from(sorted(_STEPS)), min_size=1, max_size=5),
       side=st.integers(5, 17), tile=st.integers(2, 7), pin=st.integers(-1, 4))
@example(steps=["sub", "conv", "thresh", "label"], side=13, tile=4, pin=-1)  # the scale workflow
@example(steps=["gauss", "thresh", "label", "tanh", "conv"], side=9, tile=3, pin=4)
def test_fused_nodes_store_and_answer_exactly_what_nodes_run_one_by_one(steps, side, tile, pin):
    """Per-tile nodes run as one stage (SUBZERO_FUSE) write the same bytes (chunks and
    metadata) and answer the same lineage queries as the same nodes run one stage each; a
    two-pass node (Label) and one storing lineage (pinned FullOne) run on their own, a Label's
    first pass in the stage of the per-tile nodes before it."""
    import tempfile

    import subzero.driver as driver
    rng = np.random.default_rng(side)
    inputs = {"x": rng.normal(size=(side, side + 2)), "dark": rng.normal(size=(side, side + 2)) * 0.1}
    pins = {f"n{pin}-{steps[pin]}": "FullOne"} if 0 <= pin < len(steps) else None
    last = f"n{len(steps) - 1}-{steps[-1]}"
    got = {}
    prepares = []  # the first passes run as their own job
    import subzero.stage as stage_mod

    map_prepare = stage_mod.map_prepare

    def spied(executor, task, tiles):
        prepares.append(task.node)
        return map_prepare(executor, task, tiles)

    with tempfile.TemporaryDirectory() as root:
        for fuse in (True, False):
            seen = _StagesSeen()
            stage_mod.map_prepare = spied
            try:
                with sz.config.set(fuse=fuse):
                    run = _chain(steps).run(inputs, store=os.path.join(root, str(fuse)), executor="local",
                                            tile_shape=tile, strategies=pins, progress=seen).wait()
            finally:
                stage_mod.map_prepare = map_prepare
            got[fuse] = (_stored_arrays(os.path.join(root, str(fuse))),
                         {n: r.strategies for n, r in run.catalog.nodes.items()},
                         run.backward(last, [(side // 2, 1)], to="x").tolist(),
                         run.forward("x", [(0, side // 2)], to=last).tolist(), seen.names, list(prepares))
            prepares.clear()
    fused, alone = got[True], got[False]
    assert fused[:4] == alone[:4]
    assert all("+" not in n for n in alone[4])
    assert alone[5] == [f"n{k}-label" for k, s in enumerate(steps) if s == "label"]
    # a Label right after a per-tile node without stored lineage has its first pass in that node's stage
    assert fused[5] == [f"n{k}-label" for k, s in enumerate(steps) if s == "label" and not (
        k and steps[k - 1] != "label" and (pins is None or f"n{k - 1}-{steps[k - 1]}" not in pins))]
    groups = [n.split("+") for n in fused[4] if "+" in n]
    for group in groups:  # only consecutive per-tile nodes without stored lineage were fused
        assert all(not n.endswith("label") and (pins is None or n not in pins) for n in group)
    eligible = [not s.endswith("label") and (pins is None or f"n{k}-{s}" not in pins) for k, s in enumerate(steps)]
    runs_of_two = any(a and b for a, b in zip(eligible, eligible[1:]))
    assert bool(groups) == runs_of_two


def test_a_chain_longer_than_the_nodes_looked_ahead_at_first_is_fused_whole(tmp_path, monkeypatch):
    """The run loop offers a fused stage a few nodes ahead at first, more while the stage takes
    them all: the stages, the first passes they run and the arrays are those of every node offered
    at once (a chain longer than the first look, a Label's first pass at its end)."""
    import subzero.driver as driver

    steps = ["tanh"] * 9 + ["label", "tanh", "tanh"]
    rng = np.random.default_rng(3)
    inputs = {"x": rng.normal(size=(6, 7)), "dark": rng.normal(size=(6, 7))}
    got = {}
    for ahead in (2, 3, 1000):
        monkeypatch.setattr(driver, "_FUSE_AHEAD", ahead)
        seen = _StagesSeen()
        _chain(steps).run(inputs, store=str(tmp_path / str(ahead)), executor="local", tile_shape=3,
                          progress=seen).wait()
        got[ahead] = (seen.names, _stored_arrays(str(tmp_path / str(ahead))))
    assert got[2] == got[3] == got[1000]
    assert "+".join(f"n{k}-tanh" for k in range(9)) in got[2][0]  # one stage, its Label's first pass in it


def test_an_optimized_run_fuses_the_nodes_whose_candidates_store_nothing():
    """With a workload and budgets, the per-tile nodes every candidate of which stores nothing
    (Map, BlackBox) run as one fused stage, as in a run without an optimizer; the plan, the
    stored bytes and the answers are those of the same run one stage per node."""
    import tempfile

    import subzero.driver as driver
    wf = _chain(["sub", "conv", "thresh", "label", "tanh", "conv"])
    rng = np.random.default_rng(7)
    inputs = {"x": rng.normal(size=(24, 26)), "dark": rng.normal(size=(24, 26)) * 0.1}
    workload = [{"direction": "backward", "node": "n5-conv", "to": "x", "cells": [[12, 13]]},
                {"direction": "forward", "node": "x", "to": "n3-label", "cells": [[3, 4]]}]
    got = {}
    chosen = set()  # intermediates the program chose to store (or not) after the Label's timed plan
    with tempfile.TemporaryDirectory() as root:
        for fuse in (True, False):
            seen = _StagesSeen()
            with sz.config.set(fuse=fuse):
                run = wf.run(inputs, store=os.path.join(root, str(fuse)), executor="local", tile_shape=8,
                             workload=workload, max_runtime="1.5x", progress=seen).wait()
            chosen |= {n for n, r in run.catalog.nodes.items() if "optimizer's choice" in r.array.why}
            got[fuse] = (_stored_arrays(os.path.join(root, str(fuse))),
                         {n: r.strategies for n, r in run.catalog.nodes.items()},
                         run.backward("n5-conv", [(12, 13)], to="x").tolist(),
                         run.forward("x", [(3, 4)], to="n3-label").tolist(), seen.names)
            assert run.catalog.optimizer["one_pass"]
    fused, alone = got[True], got[False]
    for arrays in (fused[0], alone[0]):
        for path in [p for p in arrays if p.split("/")[1] in chosen]:
            del arrays[path]
    assert fused[0] == alone[0] and fused[2:4] == alone[2:4]  # the same arrays, the same answers
    # the nodes fused chose as alone (the Label's plan may differ: timed budgets; its answers may not)
    assert {n: s for n, s in fused[1].items() if n != "n3-label"} == \
        {n: s for n, s in alone[1].items() if n != "n3-label"}
    assert "n0-sub+n1-conv+n2-thresh" in fused[4] and all("+" not in n for n in alone[4])


# -- which arrays a run stores ---------------------------------------------------------------------------
def _branchy(steps):
    """`_chain` with a side branch read by the last node: an unstored intermediate read both inside
    and outside a fused stage."""
    wf = _chain(steps)
    first = wf.node(f"n0-{steps[0]}")
    side = wf.add(ops.GaussianFilter(1.0), first, name="side")
    wf.add(ops.Add(), wf.node(f"n{len(steps) - 1}-{steps[-1]}"), side, name="sum")
    return wf


def test_a_run_stores_its_inputs_and_outputs_and_recomputes_the_rest(tmp_path):
    wf = _branchy(["sub", "conv", "thresh", "tanh"])
    rng = np.random.default_rng(3)
    inputs = {"x": rng.normal(size=(20, 22)), "dark": rng.normal(size=(20, 22)) * 0.1}
    lean = wf.run(inputs, store=tmp_path / "lean", executor="local", tile_shape=8).wait()  # its files as written
    full = wf.run(inputs, store=tmp_path / "full", executor="local", tile_shape=8, keep="all").wait()
    picked = wf.run(inputs, store=tmp_path / "picked", executor="local", tile_shape=8, keep=["n1-conv"]).wait()
    assert sorted(os.listdir(tmp_path / "lean" / "arrays")) == ["dark", "sum", "x"]
    assert sorted(os.listdir(tmp_path / "full" / "arrays")) == sorted(n.name for n in wf.nodes)
    assert sorted(os.listdir(tmp_path / "picked" / "arrays")) == ["dark", "n1-conv", "sum", "x"]
    for run in (lean, picked):
        for node in wf.nodes:
            record = run.catalog.nodes[node.name].array
            assert record.stored == (node.name in os.listdir(run.path + "/arrays")) and record.why
            np.testing.assert_array_equal(np.asarray(run.output(node.name)), np.asarray(full.output(node.name)))
            np.testing.assert_array_equal(run.output(node.name)[3:9, 2], np.asarray(full.output(node.name))[3:9, 2])
            assert run.shape(node.name) == full.shape(node.name)
    assert not lean.catalog.nodes["n2-thresh"].array.stored
    assert "not stored" in lean.catalog.nodes["n2-thresh"].array.why
    assert lean.catalog.nodes["sum"].array.why == "stored: an output of the workflow"
    with pytest.raises(sz.WorkflowError, match="keep="):
        wf.run(inputs, store=tmp_path / "bad", executor="local", keep=3.5)
    with pytest.raises(sz.WorkflowError, match="unknown node"):
        wf.run(inputs, store=tmp_path / "bad2", executor="local", keep=["nope"])


@settings(max_examples=8, deadline=None)
@given(steps=st.lists(st.sampled_from(sorted(_STEPS)), min_size=0, max_size=3),
       side=st.integers(6, 14), tile=st.integers(3, 7), pin=st.integers(-1, 3), data=st.data())
def test_queries_through_unstored_intermediates_answer_as_with_every_array_stored(steps, side, tile, pin, data):
    """Every strategy answers the same cells whether or not the intermediates were stored (a
    query re-running a node over an unstored input recomputes that input's tiles)."""
    import tempfile

    rng = np.random.default_rng(side)
    inputs = {"x": rng.normal(size=(side, side + 1)), "dark": rng.normal(size=(side, side + 1)) * 0.1}
    steps = ["sub", *steps]  # both inputs reach the output
    pins = {f"n{pin}-{steps[pin]}": "FullOne"} if 0 <= pin < len(steps) else None
    cell = [data.draw(st.integers(0, side - 1)), data.draw(st.integers(0, side))]
    wf = _branchy(steps)
    with tempfile.TemporaryDirectory() as root:
        runs = {keep: wf.run(inputs, store=os.path.join(root, keep), executor="local", tile_shape=tile,
                             strategies=pins, keep=keep) for keep in ("needed", "all")}
        lean, full = runs["needed"], runs["all"]
        for node in wf.nodes:
            np.testing.assert_array_equal(np.asarray(lean.output(node.name)), np.asarray(full.output(node.name)))
        blackbox = {n.name: "BlackBox" for n in wf.nodes if not n.is_input}
        for using in (None, blackbox):
            for to in ("x", "dark"):
                want = full.backward("sum", [cell], to=to, using=using)
                assert np.array_equal(lean.backward("sum", [cell], to=to, using=using), want)
            assert np.array_equal(lean.forward("x", [cell], to="sum", using=using),
                                  full.forward("x", [cell], to="sum", using=using))
        assert np.array_equal(lean.backward("sum", [cell], to="x", using=blackbox),
                              lean.backward("sum", [cell], to="x"))


def test_a_label_whose_stored_lineage_reads_its_output_back_has_it_stored(tmp_path):
    """Label's stored payloads name components of its own output: an intermediate Label that
    stores them has its output stored (queries read it, not recompute it), and answers as a
    run storing every array."""
    wf = sz.Workflow("labelled")
    bright = wf.add(ops.Threshold(0.5), wf.input("x"), name="bright")
    stars = wf.add(ops.Label(), bright, name="stars")
    wf.add(ops.GaussianFilter(1.0), stars, name="smooth")
    x = np.random.default_rng(4).random((30, 34))
    pins = {"stars": "CompOne"}
    lean = wf.run({"x": x}, store=tmp_path / "lean", executor="local", tile_shape=8, strategies=pins)
    full = wf.run({"x": x}, store=tmp_path / "full", executor="local", tile_shape=8, strategies=pins, keep="all")
    record = lean.catalog.nodes["stars"].array
    assert record.stored and "reads it back" in record.why and not lean.catalog.nodes["bright"].array.stored
    lean.wait()  # written behind the run's return
    assert (tmp_path / "lean" / "arrays" / "stars" / "zarr.json").is_file()
    for cell in ([3, 4], [15, 20], [29, 33]):
        assert np.array_equal(lean.backward("smooth", [cell], to="x"), full.backward("smooth", [cell], to="x"))
        assert np.array_equal(lean.forward("x", [cell], to="smooth"), full.forward("x", [cell], to="smooth"))


# -- storing an intermediate is the optimizer's decision --------------------------------------------------
class SlowTanh(ops.ElementwiseOperator):
    """An elementwise step that takes its time (what recomputing it at query time costs)."""

    @staticmethod
    def fn(a):
        import time

        time.sleep(0.03)
        return np.tanh(a)


class Flip(sz.Operator):
    """A whole-array step without mapping functions: its queries re-run it over its input."""

    def supported_modes(self):
        return {sz.Mode.FULL}

    def infer_output_shape(self, input_shapes):
        return tuple(input_shapes[0])

    def run(self, ctx, x):
        if sz.Mode.FULL in ctx.modes:
            cells = np.argwhere(np.ones(x.shape, bool))
            ctx.lwrite_many(cells, np.c_[x.shape[0] - 1 - cells[:, 0], cells[:, 1]],
                            out_pair=np.arange(len(cells)), in_pair=[np.arange(len(cells))])
        return x[::-1]


def _slow_then_flip():
    wf = sz.Workflow("reread")
    slow = wf.add(SlowTanh(), wf.input("x"), name="slow")
    wf.add(Flip(), slow, name="flip")
    return wf


def _same_answers(run, full, cells=((0, 0), (5, 7), (15, 15))):
    blackbox = {"slow": "BlackBox", "flip": "BlackBox"}
    for using in (None, blackbox, {"flip": "FullMany"} if "FullMany" in full.strategies["flip"] else None):
        for cell in cells:
            assert np.array_equal(run.backward("flip", [cell], to="x", using=using),
                                  full.backward("flip", [cell], to="x", using=using))
            assert np.array_equal(run.forward("x", [cell], to="flip", using=using),
                                  full.forward("x", [cell], to="flip", using=using))
    np.testing.assert_array_equal(np.asarray(run.output("slow")), np.asarray(full.output("slow")))


def test_a_default_run_stores_what_a_rerun_step_would_recompute_past_the_threshold(tmp_path):
    """Without budgets, an input a query's re-run step (Flip: BlackBox) would recompute for
    longer than ``recompute_seconds`` is stored, with why; under the threshold it is not; the
    answers are those of a run storing every array."""
    x = np.random.default_rng(1).normal(size=(16, 16))
    wf = _slow_then_flip()
    full = wf.run({"x": x}, store=tmp_path / "full", executor="local", keep="all",
                  strategies={"flip": ["FullMany", "BlackBox"], "slow": "Map"})
    with sz.config.set(recompute_seconds=0.005):
        stored = wf.run({"x": x}, store=tmp_path / "stored", executor="local")
    with sz.config.set(recompute_seconds=60.0):
        lean = wf.run({"x": x}, store=tmp_path / "lean", executor="local")
    record = stored.catalog.nodes["slow"].array
    assert record.stored and "re-running flip" in record.why and "recompute_seconds" in record.why
    stored.wait(), lean.wait()  # written behind the runs' return
    assert (tmp_path / "stored" / "arrays" / "slow" / "zarr.json").is_file()
    assert not lean.catalog.nodes["slow"].array.stored and not (tmp_path / "lean" / "arrays" / "slow").exists()
    for run in (stored, lean):
        _same_answers(run, full)


@pytest.mark.parametrize("max_disk, stored", [(10**6, True), (100, False)])
def test_an_optimized_run_stores_an_intermediate_or_recomputes_it_within_the_disk_budget(tmp_path, max_disk,
                                                                                          stored):
    """With a workload and a disk budget, whether ``slow`` (2 KB, about 30 ms to recompute for
    every query re-running ``flip``) is stored is the integer program's choice: stored while
    the budget has room, recomputed once it has not; `explain`'s why says which; queries
    through it answer as with every array stored, by every strategy."""
    from subzero.tools.explain import explain

    x = np.random.default_rng(2).normal(size=(16, 16))
    wf = _slow_then_flip()
    workload = [{"direction": "backward", "node": "flip", "to": "x", "cells": [[3, 4]]}]
    pins = {"flip": "BlackBox"}
    run = wf.run({"x": x}, store=tmp_path / "o", executor="local", workload=workload, max_disk=max_disk,
                 strategies=pins)
    full = wf.run({"x": x}, store=tmp_path / "full", executor="local", keep="all",
                  strategies={"flip": ["FullMany", "BlackBox"], "slow": "Map"})
    record = run.catalog.nodes["slow"].array
    assert record.stored is stored and record.why.startswith("stored: the optimizer's choice" if stored else
                                                             "not stored: its")
    assert record.why in explain(run)
    _same_answers(run, full)


def test_intermediates_keep_stores_over_the_disk_budget_are_a_clear_error(tmp_path):
    x = np.random.default_rng(3).normal(size=(16, 16))
    workload = [{"direction": "backward", "node": "flip", "to": "x", "cells": [[3, 4]]}]
    with pytest.raises(sz.WorkflowError, match=r"keep= stores need 2048 bytes .*'slow'.*raise max_disk"):
        _slow_then_flip().run({"x": x}, store=tmp_path / "o", executor="local", workload=workload, max_disk=1000,
                              keep=["slow"])


def test_a_relative_budgets_base_counts_a_one_pass_nodes_operator_without_its_capture():
    # a node planned before it ran and run once storing lineage measured its operator making
    # that lineage: the budget's base takes calibration's estimate of the operator alone, so a
    # capture does not raise the budget of the nodes after it
    from subzero import driver
    from subzero.modes import Strategy
    from subzero.optimizer.cost_model import NodeProfile

    full, bare = (Strategy.parse("FullRange"),), (Strategy.parse("Map"),)
    one_pass = NodeProfile(node="clean", op_seconds=0.3, one_pass=True)
    assert driver._plain_op_seconds(one_pass, full, 4.2) == pytest.approx(0.3)
    assert driver._plain_op_seconds(one_pass, full, 0.2) == pytest.approx(0.2)  # never above what ran
    assert driver._plain_op_seconds(one_pass, bare, 4.2) == pytest.approx(4.2)  # no lineage made: as measured
    computed_first = NodeProfile(node="clean", op_seconds=0.3, one_pass=False)
    assert driver._plain_op_seconds(computed_first, full, 0.5) == pytest.approx(0.5)
    unsampled = NodeProfile(node="clean", op_seconds=0.0, one_pass=True)
    assert driver._plain_op_seconds(unsampled, full, 0.5) == pytest.approx(0.5)


def test_held_arrays_past_hold_mb_are_stored_counting_every_held_byte(tmp_path, monkeypatch):
    """Unstored intermediates are held for their readers up to the ``hold_mb`` setting; the bytes
    held are summed as arrays are written (not over every held array per node), always the sum
    of what is held."""
    from subzero import driver

    wf = sz.Workflow("held")
    x = wf.input("x")
    a = wf.add(ops.AddScalar(1.0), x, name="a")
    b = wf.add(ops.MultiplyScalar(2.0), a, name="b")
    c = wf.add(ops.AddScalar(-3.0), b, name="c")
    d = wf.add(ops.Add(), a, c, name="d")
    wf.add(ops.Add(), b, d, name="out")
    asked = []
    real = driver._Execution._unkept_held_bytes

    def counted(self):
        got = real(self)
        asked.append((got, sum(h.nbytes for n, h in self.held.items() if n not in self.kept)))
        return got

    monkeypatch.setattr(driver._Execution, "_unkept_held_bytes", counted)
    value = image(64)
    with sz.config.set(hold_mb=1.5 * value.nbytes / 2**20, fuse=False):  # one array and a half
        run = wf.run({"x": value}, tmp_path / "s", executor="local")
    assert asked and all(got == want for got, want in asked)
    why = {n: run.catalog.nodes[n].array.why for n in ("a", "b", "c", "d")}
    assert why["a"] == why["b"] == driver.UNSTORED and why["c"] == why["d"] == \
        "stored: over the in-memory limit (hold_mb)", why
    plus = value + 1.0
    np.testing.assert_array_equal(np.asarray(run.output("out")), plus * 2.0 + (plus + (plus * 2.0 - 3.0)))


def test_candidates_the_program_would_not_choose_at_their_lowest_costs_are_not_encoded(tmp_path, monkeypatch):
    """Calibration counts a node's FULL and PAY candidates first and encodes them only when the
    integer program, given their lowest possible costs, could choose one: the plan and the
    answers are those of a calibration that encodes every candidate; the record says why the
    others were not calibrated.  A kept profile is checked again under the next run's workload."""
    from subzero.optimizer import calibrate, plan as plan_mod

    calibrate.forget()
    x = image(200)
    x[10:14, 20:23] = 300.0
    workload = [{"direction": "backward", "node": "crd", "to": "x", "cells": [[3, 3]]}]
    encoded = []
    real_node = calibrate.profile_node

    real_first = calibrate.profile_first

    def profile(task, *args, **kwargs):
        encoded.append((task.node, tuple(kwargs.get("bound", ()))))
        return real_node(task, *args, **kwargs)

    def first(task, *args, **kwargs):  # from the node's first tiles: its FULL and PAY candidates counted
        encoded.append((task.node, "first tiles"))
        return real_first(task, *args, **kwargs)

    monkeypatch.setattr(calibrate, "profile_node", profile)
    monkeypatch.setattr(calibrate, "profile_first", first)

    def go(name, **settings):
        with sz.config.set(**settings):
            return small_workflow().run({"x": x}, store=tmp_path / name, workload=workload, executor="local",
                                        tile_shape=100)  # no runtime budget: nothing skipped by timings

    counted = go("counted", reuse_calibration=False)
    record = counted.catalog.nodes["crd"]
    assert [b for n, b in encoded if n == "crd"] != [()] and len([n for n, _ in encoded if n == "crd"]) == 1
    assert record.profile["bounds"] and all(why == plan_mod.BOUND_REASON for n, why in record.pruned.items()
                                            if n in record.profile["bounds"])
    monkeypatch.setattr(plan_mod, "bounds_matter", lambda *args, **kwargs: True)  # every candidate encoded
    every = go("every", reuse_calibration=False)
    assert not every.catalog.nodes["crd"].profile["bounds"]
    for name in ("crd", "blur", "hits"):
        assert counted.catalog.nodes[name].strategies == every.catalog.nodes[name].strategies
    np.testing.assert_array_equal(counted.backward("crd", [[11, 21]], to="x"), every.backward("crd", [[11, 21]], to="x"))
    # kept, then recalled: the recalled bounds matter now (as forced), so the node is encoded again
    monkeypatch.undo()
    monkeypatch.setattr(calibrate, "profile_node", profile)
    monkeypatch.setattr(calibrate, "profile_first", first)
    encoded.clear()
    go("kept")
    monkeypatch.setattr(plan_mod, "bounds_matter", lambda *args, **kwargs: True)
    again = go("again")
    assert [b for n, b in encoded if n == "crd"][-1] == () and not again.catalog.nodes["crd"].profile["bounds"]
    calibrate.forget()


def scaled(x):
    """A traced function of elementwise steps: its trace computes every value, so a local run
    written behind returns at once and continues behind its return."""
    y = x * 2.0
    return {"z": (y - 1.0) / (y + 3.0), "w": y + x}


def test_a_run_failing_behind_its_return_says_so_on_wait_and_queries_and_leaves_a_resumable_store(tmp_path):
    """The disk budget, which keep="all" charges node by node, runs out behind the return: the
    failure is raised by `Run.wait` and by the next query (naming the store, the cause and how to
    resume), the catalog says failed and names the nodes committed before, and a resume over the
    same settings continues the store (and runs out again: the budget is the same)."""
    x = image(40)
    pins = {n.name: "Map" for n in sz.workflow(scaled).trace({"x": x}).nodes if not n.is_input}
    options = dict(executor="local", keep="all", max_disk=int(1.5 * x.nbytes), strategies=pins)
    run = sz.workflow(scaled).run({"x": x}, tmp_path / "s", **options)
    assert run._finishing is not None  # returned before the failure
    with pytest.raises(sz.StoreError, match=r"failed behind its return \(WorkflowError: .*max_disk.*resume"):
        run.wait()
    with pytest.raises(sz.StoreError, match="failed behind its return"):
        run.backward("z", [(0, 0)], to="x")
    with pytest.raises(sz.StoreError, match="did not finish"):
        sz.open_run(tmp_path / "s")
    partial = sz.open_run(tmp_path / "s", partial=True)
    assert partial.catalog.status == "failed" and partial.committed[:2] == ["x", "multiply"]
    with pytest.raises(sz.WorkflowError, match="max_disk"):  # resumed (in the caller's thread), it runs out again
        sz.workflow(scaled).run({"x": x}, tmp_path / "s", resume=True, **options)
    assert set(partial.committed) < set(sz.open_run(tmp_path / "s", partial=True).committed)  # it went on


def test_a_new_run_into_the_store_waits_for_the_run_continuing_behind_its_return(tmp_path):
    """A second run into the store (overwrite), `open_run` and a resume in this process wait until
    the run behind the first return finished and its writes are done."""
    x = image(40)
    first = sz.workflow(scaled).run({"x": x}, tmp_path / "s", executor="local")
    assert first._finishing is not None
    assert sz.open_run(tmp_path / "s").catalog.status == "done"  # waited for it
    with pytest.raises(sz.StoreError):  # refused at once, on the caller's thread: a store is never overwritten
        sz.workflow(scaled).run({"x": x}, tmp_path / "s", executor="local")
    second = sz.workflow(scaled).run({"x": x + 1.0}, tmp_path / "s", executor="local", overwrite=True)
    resumed = sz.workflow(scaled).run({"x": x + 1.0}, tmp_path / "s", executor="local", resume=True)
    assert resumed.catalog.status == "done" and second.wait().catalog.status == "done"
    np.testing.assert_array_equal(np.asarray(resumed.output("w")), scaled(x + 1.0)["w"])
    np.testing.assert_array_equal(np.asarray(first.output("w")), scaled(x + 1.0)["w"])  # the store, as it is now


def test_a_node_calibrated_from_its_first_tiles_computes_each_tile_once(tmp_path, monkeypatch):
    """Run in this process, a one-pass node is calibrated from its own first tiles: they run for
    real (their chunks and the chosen strategy's lineage are the node's), the run computes only
    the others, the store holds no shard of a candidate not chosen, and the answers are those of
    the plan pinned; a plan storing lineage the first tiles do not hold (FULL) runs every tile again."""
    from subzero.executors import tasks
    from subzero import worker
    from subzero.modes import Strategy
    from subzero.optimizer import calibrate

    ran: list[tuple[str, int]] = []

    def counted(task, tile):
        ran.append((task.node, tile.index))
        return worker.run_tile(task, tile)

    monkeypatch.setattr(tasks, "run_tile", counted)
    monkeypatch.setattr(calibrate, "run_tile", counted)
    x = image(200)
    x[10:14, 20:23] = 300.0
    workload = [{"direction": "backward", "node": "crd", "to": "x", "cells": [[3, 3]]},
                {"direction": "backward", "node": "hits", "to": "x", "cells": [[11, 21]]}]
    with sz.config.set(reuse_calibration=False):
        run = small_workflow().run({"x": x}, store=tmp_path / "o", workload=workload, executor="local",
                                   tile_shape=100)
    record = run.catalog.nodes["crd"]
    assert record.strategies == ("CompOne/backward",) and record.profile["one_pass"], record.strategies
    assert sorted(i for n, i in ran if n == "crd") == [0, 1, 2, 3] and record.stats.tiles == 4  # each once
    assert sorted(p.name for p in (tmp_path / "o" / "lineage" / "crd").iterdir()) == ["CompOne-backward"]
    assert record.stats.pairs["CompOne/backward"][0] > 0 and 0 <= run.catalog.optimizer["calibration_seconds"]
    pinned = small_workflow().run({"x": x}, store=tmp_path / "p", executor="local", tile_shape=100,
                                  strategies={"crd": "CompOne/backward"})
    np.testing.assert_array_equal(run.output("crd"), pinned.output("crd"))
    for cell in ([11, 21], [3, 3], [150, 150], [99, 100]):
        np.testing.assert_array_equal(run.backward("crd", [cell], to="x", using={"crd": "CompOne/backward"}),
                                      pinned.backward("crd", [cell], to="x"))
    # a plan whose lineage the first tiles do not hold (FULL) runs every tile again; one storing none keeps them
    from subzero.optimizer import plan as plan_mod

    real = plan_mod.node_choice
    for forced, again_ran, shards in (("FullOne/backward", [0, 0, 1, 2, 2, 3], ["FullOne-backward"]),
                                      ("BlackBox", [0, 1, 2, 3], [])):
        def choice(plan, problem, pinned_, profile, name, forced=forced):
            chosen, extra = real(plan, problem, pinned_, profile, name)
            return ((Strategy.parse(forced),) if name == "crd" else chosen), extra

        monkeypatch.setattr(plan_mod, "node_choice", choice)
        ran.clear()
        with sz.config.set(reuse_calibration=False):
            again = small_workflow().run({"x": x}, store=tmp_path / forced[:4], workload=workload, executor="local",
                                         tile_shape=100)
        assert again.catalog.nodes["crd"].strategies == (forced,)
        assert sorted(i for n, i in ran if n == "crd") == again_ran
        crd = tmp_path / forced[:4] / "lineage" / "crd"
        assert sorted(p.name for p in crd.iterdir() if any(f.is_file() for f in p.iterdir())) == shards \
            if crd.exists() else shards == []
        np.testing.assert_array_equal(again.output("crd"), pinned.output("crd"))
        np.testing.assert_array_equal(again.backward("crd", [[11, 21]], to="x"),
                                      pinned.backward("crd", [[11, 21]], to="x"))


@given(st.data())
@settings(max_examples=60, deadline=None)
def test_a_view_of_an_input_becomes_the_same_view_of_its_copy(data):
    """`_same_view`: a reshape, slice, flip or transpose of the caller's array is rebuilt over the
    copy the run holds: the same values, read-only, no cell of the caller's array; another dtype
    is not one (the run copies it)."""
    from subzero.driver import _same_view

    shape = data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3))
    x = np.arange(int(np.prod(shape)), dtype=float).reshape(shape)
    copy = x.copy()
    flat = x.reshape(-1)
    views = [x.T, x[::-1], flat[::data.draw(st.integers(1, 3))], flat[data.draw(st.integers(0, flat.size - 1)):],
             x[..., ::-2], x.reshape(-1, 1)]
    for view in views:
        same = _same_view(view, x, copy)
        assert same is not None and np.array_equal(same, view) and not same.flags.writeable
        assert np.shares_memory(same, copy) and not np.shares_memory(same, x)
    assert _same_view(x.view(np.int64), x, copy) is None

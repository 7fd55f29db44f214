"""Queries over finished runs: every strategy agrees, lineage is exact, reopened runs answer alike."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import subzero as sz
from subzero import operators as ops
from subzero.strategies import supported_strategies

# -- random workflows ---------------------------------------------------------------------

UNARY = ["transpose", "convolve_const", "convolve_reflect", "gauss", "median", "uniform_wrap", "flip", "crd", "label"]
BINARY = ["add", "multiply", "subtract", "matmul"]
VALUE_DEPENDENT = {"crd", "label"}  # lineage by the developer's semantics: no sentinel re-run


def make_op(kind: str) -> sz.Operator:
    kernel = np.array([[0.0, 1.0, 0.0], [1.0, 2.0, 1.0], [0.0, 1.0, 3.0]])
    return {
        "transpose": lambda: ops.Transpose(),
        "convolve_const": lambda: ops.Convolve(kernel, mode="constant"),
        "convolve_reflect": lambda: ops.Convolve(kernel, mode="reflect"),
        "crd": lambda: ops.CosmicRayDetect(threshold=20.0, radius=1),
        "gauss": lambda: ops.GaussianFilter(sigma=0.6, mode="nearest"),
        "median": lambda: ops.MedianFilter(size=3, mode="mirror"),
        "uniform_wrap": lambda: ops.UniformFilter(size=3, mode="wrap"),
        "flip": lambda: ops.Flip(axis=0),
        "label": lambda: ops.Label(),
        "subtract": lambda: ops.Subtract(),
        "add": lambda: ops.Add(),
        "multiply": lambda: ops.Multiply(),
        "matmul": lambda: ops.MatMul(),
        "sum": lambda: ops.Sum(axis=1),
    }[kind]()


@st.composite
def workflows(draw, allow_crd: bool = True):
    """(spec, n): a DAG over two n x n inputs with >= 3 operators, >= 1 with two inputs."""
    n = draw(st.integers(3, 6))
    unary = UNARY if allow_crd else [k for k in UNARY if k not in VALUE_DEPENDENT]
    names = ["x", "y"]
    spec = []
    count = draw(st.integers(3, 5))
    binary_at = draw(st.integers(0, count - 1))
    for k in range(count):
        kind = draw(st.sampled_from(BINARY if k == binary_at else unary + BINARY))
        arity = 2 if kind in BINARY else 1
        inputs = [draw(st.sampled_from(names)) for _ in range(arity)]
        spec.append((f"n{k}", kind, inputs))
        names.append(f"n{k}")
    if draw(st.booleans()):
        spec.append(("total", "sum", [names[-1]]))
    return spec, n


def build(spec) -> sz.Workflow:
    wf = sz.Workflow("random")
    nodes = {"x": wf.input("x"), "y": wf.input("y")}
    for name, kind, inputs in spec:
        sources = [nodes[i] for i in inputs]
        if kind == "label":  # components of the bright cells
            sources = [wf.add(ops.Threshold(1.0), *sources, name=f"{name}_bright")]
        nodes[name] = wf.add(make_op(kind), *sources, name=name)
    return wf


def inputs_for(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, n)) * 5
    x[rng.integers(0, n), rng.integers(0, n)] = 400.0  # a cosmic ray for CRD
    return {"x": x, "y": rng.normal(size=(n, n))}


def run_all_strategies(tmp_path, spec, n, seed, tile_shape):
    wf = build(spec)
    pins = {node.name: supported_strategies(node.operator) for node in wf.nodes if not node.is_input}
    store = tmp_path / f"run{seed}-{abs(hash(str(spec))) % 10**8}-{tile_shape}"
    return wf.run(inputs_for(n, seed), store=store, strategies=pins, executor="local", tile_shape=tile_shape)


def reachable_inputs(run, last: str) -> list[str]:
    ancestors = {n.name for n in run.workflow.ancestors(run.node(last))}
    return [name for name in ("x", "y") if name in ancestors]


def strategy_choices(run):
    """One `using` map per strategy name: that strategy wherever a node has it, FullOne elsewhere."""
    names = sorted({s for stored in run.strategies.values() for s in stored} | {"Map"})
    choices = {}
    for name in names:
        using = {}
        for node, stored in run.strategies.items():
            op = run.node(node).operator
            ok = name in stored or (name == "Map" and sz.Mode.MAP in op.supported_modes())
            using[node] = name if ok else "FullOne/backward"
        choices[name] = using
    return choices


@settings(max_examples=30)
@given(data=st.data(), wf=workflows())
def test_every_strategy_agrees_with_full_lineage(tmp_path_factory, data, wf):
    spec, n = wf
    tile_shape = data.draw(st.sampled_from([2, 3, None]))
    run = run_all_strategies(tmp_path_factory.mktemp("wf"), spec, n, data.draw(st.integers(0, 5)), tile_shape)
    reference = {node: "FullOne/backward" for node in run.strategies}
    last = spec[-1][0]
    out_shape = run.shape(last)
    cells = data.draw(st.lists(st.tuples(*[st.integers(0, s - 1) for s in out_shape]), min_size=1, max_size=4))
    in_cells = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), min_size=1, max_size=4))
    targets = reachable_inputs(run, last)
    expected = {to: (run.backward(last, cells, to=to, using=reference),
                     run.forward(to, in_cells, to=last, using=reference)) for to in targets}
    for name, using in strategy_choices(run).items():
        for to in targets:
            back = run.backward(last, cells, to=to, using=using)
            fwd = run.forward(to, in_cells, to=last, using=using)
            np.testing.assert_array_equal(back, expected[to][0], err_msg=f"backward via {name}")
            np.testing.assert_array_equal(fwd, expected[to][1], err_msg=f"forward via {name}")
    for to in targets:  # the query-time choice agrees too
        np.testing.assert_array_equal(run.backward(last, cells, to=to), expected[to][0])


@settings(max_examples=20)
@given(data=st.data(), wf=workflows())
def test_forward_and_backward_are_inverse(tmp_path_factory, data, wf):
    """o in forward(i) exactly when i in backward(o), for random single cells."""
    spec, n = wf
    run = run_all_strategies(tmp_path_factory.mktemp("inv"), spec, n, 1, 3)
    last = spec[-1][0]
    out_shape = run.shape(last)
    for _ in range(3):
        o = tuple(data.draw(st.integers(0, s - 1)) for s in out_shape)
        i = (data.draw(st.integers(0, n - 1)), data.draw(st.integers(0, n - 1)))
        for to in reachable_inputs(run, last):
            back = {tuple(c) for c in run.backward(last, [o], to=to).tolist()}
            fwd = {tuple(c) for c in run.forward(to, [i], to=last).tolist()}
            assert (o in fwd) == (i in back)


@settings(max_examples=20)
@given(data=st.data(), wf=workflows(allow_crd=False))
def test_rerunning_on_backward_lineage_reproduces_the_cell(tmp_path_factory, data, wf):
    """Mapping workflows: inputs outside the backward lineage set to a sentinel leave the cell unchanged."""
    spec, n = wf
    run = run_all_strategies(tmp_path_factory.mktemp("sent"), spec, n, 2, None)
    last = spec[-1][0]
    o = tuple(data.draw(st.integers(0, s - 1)) for s in run.shape(last))
    originals = {"x": np.array(run.output("x")), "y": np.array(run.output("y"))}
    masked = {}
    for name, arr in originals.items():
        if name not in reachable_inputs(run, last):
            masked[name] = arr
            continue
        keep = run.backward_mask(last, [o], to=name)
        # sentinels far from the data, yet small enough that moving-sum filters (scipy's
        # uniform_filter) keep their rounding error far below any change a missed cell makes
        masked[name] = np.where(keep, arr, 1e3 + np.arange(arr.size).reshape(arr.shape))
    rerun = build(spec).run(masked, store=tmp_path_factory.mktemp("rerun") / "r", executor="local")
    np.testing.assert_allclose(rerun.output(last)[o], run.output(last)[o], rtol=1e-7, atol=1e-7)


# -- the API contract ---------------------------------------------------------------------------

class Transpose(sz.Operator):
    def supported_modes(self):
        return {sz.Mode.MAP}

    def run(self, ctx, x):
        return x.T

    def map_b(self, cells, i):
        return cells[:, ::-1]

    def map_f(self, cells, i):
        return cells[:, ::-1]


@pytest.fixture
def demo(tmp_path):
    wf = sz.Workflow("demo")
    x = wf.input("x")
    t = wf.add(Transpose(), x)
    run = wf.run({"x": np.arange(12.0).reshape(3, 4)}, store=tmp_path / "demo", executor="local")
    return run, x, t


def test_design_contract_example(demo):
    run, x, t = demo
    np.testing.assert_array_equal(run.backward(t, [(1, 2)], to=x), [[2, 1]])
    np.testing.assert_array_equal(run.forward(x, [(2, 1)], to=t), [[1, 2]])
    np.testing.assert_array_equal(run.query([(1, 2)], path=[(t, 0)]), [[2, 1]])
    np.testing.assert_array_equal(run.query([(2, 1)], path=[(t, 0)], direction="forward"), [[1, 2]])
    np.testing.assert_array_equal(run.output(t), np.arange(12.0).reshape(3, 4).T)
    assert run.strategies == {"transpose": ("Map",)}
    reopened = sz.open_run(run.path)
    np.testing.assert_array_equal(reopened.backward("transpose", [(1, 2)], to="x"), [[2, 1]])


def test_results_are_sorted_unique_int64(demo):
    run, x, t = demo
    got = run.backward(t, [(1, 2), (1, 2), (0, 0)], to=x)
    assert got.dtype == np.int64 and got.tolist() == [[0, 0], [2, 1]]


@pytest.mark.parametrize("cells, fragment", [
    ([(4, 0)], "out of bounds"),
    ([(1, 2, 3)], "must have 2 coordinates"),
    ([(0.5, 1)], "integer coordinates"),
    ([(-1, 0)], "out of bounds"),
])
def test_bad_cells_raise_lineage_error_naming_node_and_shape(demo, cells, fragment):
    run, x, t = demo
    with pytest.raises(sz.LineageError, match=fragment) as err:
        run.backward(t, cells, to=x)
    assert "transpose" in str(err.value) and "(4, 3)" in str(err.value)


def test_unknown_node_and_missing_path(demo, tmp_path):
    run, x, t = demo
    with pytest.raises(sz.LineageError, match="unknown node 'nope'"):
        run.backward("nope", [(0, 0)], to=x)
    with pytest.raises(sz.LineageError, match="no path"):
        run.backward(x, [(0, 0)], to=t)
    with pytest.raises(sz.LineageError, match="has inputs 0..0"):
        run.query([(0, 0)], path=[(t, 3)])
    with pytest.raises(sz.LineageError, match="did not store"):
        run.backward(t, [(0, 0)], to=x, using={t: "FullMany"})


def test_multi_path_union_and_multi_input(tmp_path):
    """x feeds two branches that meet again: backward is the union over both paths."""
    wf = sz.Workflow("diamond")
    x = wf.input("x")
    a = wf.add(ops.Transpose(), x, name="a")
    b = wf.add(ops.Convolve(np.ones((1, 3)), mode="constant"), x, name="b")
    c = wf.add(ops.Add(), a, b, name="c")
    run = wf.run({"x": np.ones((4, 4))}, store=tmp_path / "d", executor="local")
    got = {tuple(v) for v in run.backward(c, [(1, 2)], to=x).tolist()}
    assert got == {(2, 1), (1, 1), (1, 2), (1, 3)}
    via_a = run.query([(1, 2)], path=[(c, 0), (a, 0)])
    assert via_a.tolist() == [[2, 1]]
    fwd = run.query([(2, 1)], path=[(a, 0), (c, 0)])
    assert fwd.tolist() == [[1, 2]]


def test_entire_array_optimization_only_for_safe_operators(tmp_path):
    wf = sz.Workflow("full")
    x = wf.input("x")
    t = wf.add(ops.Transpose(), x, name="t")
    run = wf.run({"x": np.ones((3, 5))}, store=tmp_path / "f", executor="local")
    everything = np.ones((3, 5), bool)
    full = run.forward(x, everything, to=t)
    slow = run.forward(x, everything, to=t, entire_array=False)
    np.testing.assert_array_equal(full, slow)
    assert len(full) == 15


def test_reopened_run_in_fresh_process_gives_same_answers(tmp_path):
    script = textwrap.dedent("""
        import numpy as np, subzero as sz
        class Flip(sz.Operator):
            tiling = None
            def supported_modes(self):
                return {sz.Mode.FULL}
            def run(self, ctx, x):
                cells = np.argwhere(np.ones(x.shape, bool))
                if sz.Mode.FULL in ctx.modes:
                    ctx.lwrite_many(cells, np.c_[x.shape[0] - 1 - cells[:, 0], cells[:, 1]],
                                    out_pair=np.arange(len(cells)), in_pair=[np.arange(len(cells))])
                return x[::-1]
        wf = sz.Workflow("fresh")
        x = wf.input("x")
        f = wf.add(Flip(), x, name="flip")
        s = wf.add(sz.operators.Convolve(np.ones((3, 3)), mode="nearest"), f, name="blur")
        run = wf.run({"x": np.arange(20.).reshape(4, 5)}, store=STORE,
                     strategies={"flip": ["FullMany", "BlackBox"], "blur": ["Map", "FullOne/forward"]},
                     executor="local", tile_shape=2)
        print(run.backward("blur", [(0, 0), (3, 4)], to="x").tolist())
        print(run.forward("x", [(1, 1)], to="blur").tolist())
    """).replace("STORE", repr(str(tmp_path / "fresh")))
    made = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    reopen = textwrap.dedent(f"""
        import subzero as sz
        run = sz.open_run({str(tmp_path / 'fresh')!r})
        print(run.backward("blur", [(0, 0), (3, 4)], to="x").tolist())
        print(run.forward("x", [(1, 1)], to="blur").tolist())
        for s in ("FullMany/backward", "BlackBox"):
            print(run.backward("blur", [(0, 0), (3, 4)], to="x", using={{"flip": s, "blur": "FullOne/forward"}}).tolist())
    """)
    again = subprocess.run([sys.executable, "-c", reopen], capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    first = made.stdout.splitlines()
    lines = again.stdout.splitlines()
    assert lines[:2] == first and lines[2] == first[0] and lines[3] == first[0]


def test_a_store_written_before_the_package_was_reshaped_answers_identically(tmp_path):
    """tests/data/store-16fd8d5 was written by 16fd8d5 (before the driver, executors, CLI and
    configuration were reshaped), with its answers recorded then: every strategy's store opens and
    answers exactly as it did."""
    import json
    import shutil
    from pathlib import Path

    data = Path(__file__).parent / "data"
    shutil.copytree(data / "store-16fd8d5", tmp_path / "old")
    recorded = json.loads((data / "store-16fd8d5-answers.json").read_text())
    run = sz.open_run(tmp_path / "old")
    assert {n: [str(s) for s in run.strategies[n]] for n in ("smooth", "label")} == {
        "smooth": ["FullMany/backward", "FullRange"], "label": ["CompOne/backward", "PayOne/backward"]}
    cells = [(0, 0), (5, 7), (23, 19), (11, 3)]
    for node in ("smooth", "mask", "label", "flip", "colsum"):
        shape = run.shape(node)
        pick = [tuple(min(c, n - 1) for c, n in zip(cell, shape)) for cell in cells]
        assert run.backward(node, pick, to="x").tolist() == recorded[f"backward {node}"], node
        assert run.forward("x", [cells[1]], to=node).tolist() == recorded[f"forward {node}"], node
    assert np.asarray(run.output("label")).tolist() == recorded["output label"]
    for node, strategies in (("smooth", ("FullMany/backward", "FullRange")), ("label", ("CompOne/backward",
                                                                                     "PayOne/backward"))):
        pick = [tuple(min(c, n - 1) for c, n in zip(cell, run.shape(node))) for cell in cells]
        for strategy in strategies:  # each stored encoding, read by today's code
            got = run.backward(node, pick, to="x", using={node: strategy}).tolist()
            assert got == recorded[f"backward {node}"], (node, strategy)


def test_a_run_shows_itself_in_a_notebook_escaped(demo):
    import dataclasses
    import html
    import re as re_

    from subzero.run import run_html

    run, x, t = demo
    assert repr(run) == f"<Run 'demo' at {run.path!r}: done, 2 nodes, local>"
    page = run._repr_html_()
    text = html.unescape(re_.sub(r"<[^>]+>", " ", page))
    for fact in (run.path, "done", "local", "Transpose", "3 \u00d7 4", "4 \u00d7 3", "float64", "Map"):
        assert fact in text, fact
    rows = re_.findall(r"<tr><td[^>]*>([^<]*)</td>", page)
    assert rows == ["x", "transpose"]
    assert re_.search(r">yes, [\d.]+ (B|KiB)<", page)  # both arrays are stored, with their size on disk
    # every value is escaped: a workflow name and a coarse step's reason with markup stay text
    record = run.catalog
    nodes = [dict(n, params={"coarse": True, "reason": "<b>np.foo</b> & co"}) if n["name"] == "transpose" else n
             for n in record.workflow["nodes"]]
    odd = dataclasses.replace(record, workflow={**record.workflow, "name": "<script>alert(1)</script>", "nodes": nodes})
    page = run_html(odd, "/tmp/<x>")
    assert "<script>" not in page and "<b>np.foo" not in page and "/tmp/<x>" not in page
    text = html.unescape(re_.sub(r"<[^>]+>", " ", page))
    assert "<script>alert(1)</script>" in text and "coarse: <b>np.foo</b> & co" in text and "/tmp/<x>" in text


def test_view_without_the_notebook_extra_says_what_to_install(demo, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "anywidget", None)  # as if it were not installed
    monkeypatch.delitem(sys.modules, "subzero.tools.view.widget", raising=False)
    with pytest.raises(sz.WorkflowError, match=r"anywidget is missing\): pip install 'subzero\[notebook\]'"):
        demo[0].view()

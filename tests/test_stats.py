"""Lineage statistics (subzero/stats): per-object tables and contamination counts are exactly
what one union query per object (per cell, for counts) gives, under every strategy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import subzero as sz
from subzero import operators as ops
from subzero.strategies import supported_strategies
from subzero.stats import contamination_count, contamination_mask, lineage_table

UNARY = ["transpose", "convolve", "gauss", "median", "flip", "crd", "label", "downsample"]
BINARY = ["add", "multiply", "matmul"]


def make_op(kind: str, n: int) -> sz.Operator:
    kernel = np.array([[0.0, 1.0, 0.0], [1.0, 2.0, 1.0], [0.0, 1.0, 3.0]])
    return {
        "transpose": lambda: ops.Transpose(),
        "convolve": lambda: ops.Convolve(kernel, mode="constant"),
        "gauss": lambda: ops.GaussianFilter(sigma=0.6, mode="nearest"),
        "median": lambda: ops.MedianFilter(size=3, mode="mirror"),
        "flip": lambda: ops.Flip(axis=0),
        "crd": lambda: ops.CosmicRayDetect(threshold=20.0, radius=1),
        "label": lambda: ops.Label(),
        "downsample": lambda: ops.Downsample(2, how="mean"),
        "add": lambda: ops.Add(),
        "multiply": lambda: ops.Multiply(),
        "matmul": lambda: ops.MatMul(),
    }[kind]()


@st.composite
def workflows(draw):
    """A DAG over two n x n inputs (n even) with 2-4 operators, one of them with two inputs."""
    n = draw(st.sampled_from([4, 6]))
    names, shapes, spec = ["x", "y"], {"x": n, "y": n}, []
    count = draw(st.integers(2, 4))
    binary_at = draw(st.integers(0, count - 1))
    for k in range(count):
        kind = draw(st.sampled_from(BINARY if k == binary_at else UNARY + BINARY))
        if kind in BINARY:
            first = draw(st.sampled_from(names))
            second = draw(st.sampled_from([m for m in names if shapes[m] == shapes[first]]))
            inputs = [first, second]
        else:
            inputs = [draw(st.sampled_from(names))]
            if kind == "downsample" and shapes[inputs[0]] % 2:
                kind = "flip"
        spec.append((f"n{k}", kind, inputs))
        shapes[f"n{k}"] = shapes[inputs[0]] // (2 if kind == "downsample" else 1)
        names.append(f"n{k}")
    return spec, n


def build(spec, n) -> sz.Workflow:
    wf = sz.Workflow("random")
    nodes = {"x": wf.input("x"), "y": wf.input("y")}
    for name, kind, inputs in spec:
        sources = [nodes[i] for i in inputs]
        if kind == "label":
            sources = [wf.add(ops.Threshold(1.0), *sources, name=f"{name}_bright")]
        nodes[name] = wf.add(make_op(kind, n), *sources, name=name)
    return wf


def run_all(tmp_path, spec, n, seed, tile_shape):
    wf = build(spec, n)
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, n)) * 5
    x[rng.integers(0, n), rng.integers(0, n)] = 400.0
    pins = {node.name: supported_strategies(node.operator) for node in wf.nodes if not node.is_input}
    return wf.run({"x": x, "y": rng.normal(size=(n, n))}, store=tmp_path / "run", strategies=pins,
                  executor="local", tile_shape=tile_shape)


def strategy_choices(run):
    """One ``using`` per strategy name: that strategy wherever a node has it, BlackBox elsewhere."""
    names = sorted({s for stored in run.strategies.values() for s in stored} | {"Map", "BlackBox"})
    out = {}
    for name in names:
        using = {}
        for node, stored in run.strategies.items():
            op = run.node(node).operator
            ok = name in stored or (name == "Map" and sz.Mode.MAP in op.supported_modes())
            using[node] = name if ok else "BlackBox"
        out[name] = using
    return out


def nested_labels(rng, shape, count: int) -> np.ndarray:
    """Rectangles painted in turn: later ones overwrite (touching, nested, holed objects);
    labels are large and not consecutive."""
    labels = np.zeros(shape, np.int64)
    for k in range(count):
        r0, c0 = rng.integers(0, shape[0]), rng.integers(0, shape[1])
        r1, c1 = rng.integers(r0 + 1, shape[0] + 1), rng.integers(c0 + 1, shape[1] + 1)
        labels[r0:r1, c0:c1] = 1000 + 7 * k
    return labels


def brute_table(run, node, over, labels, flags, values, using):
    rows = []
    for lab in np.unique(labels[labels > 0]):
        mask = run.backward_mask(node, labels == lab, to=over, using=using)
        v = values[mask]
        rows.append((lab, int(mask.sum()), int((mask & (flags != 0)).sum()), v.sum(), v.max()))
    return rows


def check_table(table, rows):
    assert list(table["label"]) == [r[0] for r in rows]
    assert list(table["n_lineage"]) == [r[1] for r in rows]
    assert list(table["n_flagged"]) == [r[2] for r in rows]
    np.testing.assert_allclose(table["values_sum"], [r[3] for r in rows])
    np.testing.assert_allclose(table["values_max"], [r[4] for r in rows])
    np.testing.assert_allclose(table["flagged_fraction"], np.array([r[2] for r in rows]) / [r[1] for r in rows])


@settings(max_examples=12)
@given(data=st.data(), wf=workflows())
def test_tables_and_counts_match_one_query_per_object_and_cell_for_every_strategy(tmp_path_factory, data, wf):
    spec, n = wf
    run = run_all(tmp_path_factory.mktemp("wf"), spec, n, data.draw(st.integers(0, 5)),
                  data.draw(st.sampled_from([2, 3, None])))
    last = spec[-1][0]
    over = [name for name in ("x", "y") if run.node(name) in run.workflow.ancestors(run.node(last))][0]
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    labels = nested_labels(rng, run.shape(last), data.draw(st.integers(1, 4)))
    flags = (rng.random((n, n)) < 0.2).astype(np.int8)
    values = rng.normal(size=(n, n))
    reference = {node: "FullOne/backward" for node in run.strategies}
    rows = brute_table(run, last, over, labels, flags, values, reference)
    expected_count = np.zeros(run.shape(last), np.int64)
    for cell in np.argwhere(np.ones(run.shape(last), bool)):
        expected_count[tuple(cell)] = (run.backward_mask(last, [tuple(cell)], to=over, using=reference) & (flags != 0)).sum()
    for name, using in strategy_choices(run).items():
        table = run.lineage_table(last, over=over, flags=flags, values=values, objects=labels, using=using)
        check_table(table, rows)
        got = contamination_count(run, over, flags, last, using=using)
        np.testing.assert_array_equal(got, expected_count, err_msg=f"count via {name}")
    np.testing.assert_array_equal(contamination_count(run, over, flags, last, batch_cells=2), expected_count)
    np.testing.assert_array_equal(contamination_mask(run, over, flags, last), expected_count > 0)
    check_table(run.lineage_table(last, over=over, flags=flags, values=values, objects=labels), rows)
    check_table(run.lineage_table(last, over=over, flags=flags, values=values, objects=labels, batch_objects=1), rows)


# -- a label node, geometry, stored flags -------------------------------------------------------
@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    """x -> blur (3x3) -> bright -> label: objects of a stored label array."""
    wf = sz.Workflow("objects")
    x = wf.input("x")
    blur = wf.add(ops.Convolve(np.ones((3, 3)) / 9, mode="constant"), x, name="blur")
    bright = wf.add(ops.Threshold(0.5), blur, name="bright")
    wf.add(ops.Label(), bright, name="objects")
    image = np.zeros((12, 16))
    image[2:5, 2:6] = 9.5
    image[8:10, 10:14] = 9.5
    image[0, 15] = 9.5
    run = wf.run({"x": image}, store=tmp_path_factory.mktemp("objects") / "run", executor="local", tile_shape=4)
    return run, image


def test_a_label_node_gives_one_row_per_object_with_its_geometry(labelled):
    run, image = labelled
    labels = np.asarray(run.output("objects"))
    table = run.lineage_table("objects", over="x", flags=image > 0, values="x")
    assert len(table) == len(np.unique(labels[labels > 0]))
    for row in table:
        cells = np.argwhere(labels == row["label"])
        assert row["area"] == len(cells)
        assert (row["bbox_r0"], row["bbox_c0"]) == tuple(cells.min(axis=0))
        assert (row["bbox_r1"], row["bbox_c1"]) == tuple(cells.max(axis=0) + 1)
        np.testing.assert_allclose((row["centroid_r"], row["centroid_c"]), cells.mean(axis=0))
        lineage = run.backward_mask("objects", labels == row["label"], to="x")
        assert row["n_lineage"] == lineage.sum() and row["n_flagged"] == (lineage & (image > 0)).sum()
        assert row["values_sum"] == pytest.approx(image[lineage].sum())
    assert table.meta["node"] == "objects" and table.meta["values"] == "x"
    assert list(table.to_pandas().columns)[:4] == ["label", "area", "bbox_r0", "bbox_r1"]
    assert list(run.lineage_table("objects")["n_lineage"]) == list(table["n_lineage"])  # over: the only input


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(node="nope", over="x"), "nope"),
    (dict(node="objects", over="nope"), "nope"),
    (dict(node="blur", over="x"), "not object labels"),
    (dict(node="x", over="objects"), "not an ancestor"),
    (dict(node="objects", over="x", flags=np.zeros((3, 3))), "flags= has shape"),
    (dict(node="objects", over="x", values=np.zeros((3, 3))), "values= has shape"),
    (dict(node="objects", over="x", objects=np.zeros((3, 3), int)), "objects= has shape"),
    (dict(node="objects", over="x", objects=-np.ones((12, 16), int)), "negative labels"),
    (dict(node="objects", over="x", flags="nope"), "nope"),
    (dict(node="objects", over="x", batch_objects=0), "batch_objects"),
])
def test_bad_arguments_are_lineage_errors(labelled, kwargs, fragment):
    run, _ = labelled
    with pytest.raises(sz.LineageError, match=fragment):
        run.lineage_table(**kwargs)


def test_counts_reject_a_target_the_flags_cannot_reach(labelled):
    run, image = labelled
    with pytest.raises(sz.LineageError, match="not computed from"):
        contamination_count(run, "objects", np.zeros((12, 16)), "x")


def test_lineage_table_function_and_method_agree(labelled):
    run, image = labelled
    a = lineage_table(run, "objects", "x", flags=image > 0)
    b = run.lineage_table("objects", over="x", flags=image > 0)
    assert a.colnames == b.colnames and all(np.array_equal(a[c], b[c]) for c in a.colnames)


# -- the star catalog of the page "Lineage statistics" ------------------------------------------
def test_statistics_page_star_catalog_numbers(tmp_path):
    """The example of docs/guide/statistics.md: the quick astronomy run, the injected cosmic rays
    of exposure 1 as flags; its printed rows and counts are what the table gives, and each shown
    row is what one backward query per star gives."""
    from doc_pages import page
    from subzero.workflows import astronomy

    wf, inputs = astronomy.build(quick=True)
    run = wf.run(inputs, store=tmp_path / "astro", executor="local")
    hits = astronomy.cosmic_ray_masks(run.shape("exposure_1"))["exposure_1"]
    table = run.lineage_table("stars", over="exposure_1", flags=hits, values="exposure_1")
    flagged = table[table["n_flagged"] > 0]
    flagged.sort(["n_flagged", "label"], reverse=True)
    flagged["flagged_fraction"].info.format = ".4f"
    shown = flagged[:5]["label", "area", "bbox_r0", "bbox_c0", "n_lineage", "n_flagged", "flagged_fraction"]
    text = page("guide/statistics.md")
    assert "\n".join(shown.pformat(max_lines=-1, max_width=-1)) in text
    assert f"{len(flagged)} of the {len(table)} stars have a cosmic-ray pixel" in text
    masked = int((hits & (np.asarray(run.output("crmask_1")) > 0)).sum())
    assert f"L.A.Cosmic flagged {masked} of the {int(hits.sum())} hits" in text
    assert f"{len(table)} object(s), {len(flagged)} with flagged cells" in text
    labels = np.asarray(run.output("stars"))
    for row in shown:
        lineage = run.backward_mask("stars", labels == row["label"], to="exposure_1")
        assert (lineage.sum(), (lineage & hits).sum()) == (row["n_lineage"], row["n_flagged"])
    counts = contamination_count(run, "exposure_1", hits, "stars")
    assert f"{int(hits.sum())} flagged cell(s) of exposure_1 (hits.npy); {int((counts > 0).sum())} cell(s) of stars " \
           f"depend on them, at most {int(counts.max())} each" in text


PAYLOAD_STRATEGIES = ["PayOne", "PayMany", "CompOne", "CompMany"]


@pytest.mark.parametrize("strategy", PAYLOAD_STRATEGIES + ["FullOne", "FullMany/forward", "FullRange", "BlackBox"])
def test_payload_and_component_steps_match_per_object_queries(tmp_path_factory, strategy):
    """Label and CosmicRayDetect read payloads per component (and per repaired pixel): objects
    overlapping several components, and components shared by several objects."""
    rng = np.random.default_rng(3)
    wf = sz.Workflow("components")
    x = wf.input("x")
    crd = wf.add(ops.CosmicRayDetect(threshold=20.0, radius=1), x, name="crd")
    blur = wf.add(ops.Convolve(np.ones((3, 3)) / 9, mode="constant"), x, name="blur")
    comp = wf.add(ops.Label(), wf.add(ops.Threshold(0.6), blur, name="bright"), name="comp")
    wf.add(ops.Add(), comp, crd, name="both")
    image = (rng.random((10, 12)) < 0.3) * 5.0
    image[4, 4] = 400.0
    stored = [strategy] if strategy != "BlackBox" else ["FullOne"]
    pins = {"crd": stored, "comp": stored}
    run = wf.run({"x": image}, store=tmp_path_factory.mktemp("pay") / "run", executor="local", tile_shape=4,
                 strategies=pins)
    using = {"crd": strategy, "comp": strategy} if strategy == "BlackBox" else None
    labels = nested_labels(rng, (10, 12), 4)
    flags = (rng.random((10, 12)) < 0.25).astype(np.int8)
    values = rng.normal(size=(10, 12))
    reference = {"crd": "BlackBox", "comp": "BlackBox"}
    rows = brute_table(run, "both", "x", labels, flags, values, reference)
    check_table(run.lineage_table("both", over="x", flags=flags, values=values, objects=labels, using=using), rows)
    expected = np.zeros((10, 12), np.int64)
    for cell in np.argwhere(np.ones((10, 12), bool)):
        expected[tuple(cell)] = (run.backward_mask("both", [tuple(cell)], to="x", using=reference) & (flags != 0)).sum()
    np.testing.assert_array_equal(contamination_count(run, "x", flags, "both", using=using), expected)


@pytest.mark.parametrize("strategy", ["PayOne", "CompMany"])
def test_payload_steps_call_map_p_per_object_when_cell_by_cell_would_cost_too_much(tmp_path_factory, strategy,
                                                                                   monkeypatch):
    """Payload steps expand every cell's lineage at once while a sample predicts few pairs, else
    call ``map_p`` once per (payload, object): both give the per-object queries' answers."""
    from subzero.stats import labelled

    monkeypatch.setattr(labelled, "PER_CELL_PAIRS", 0)
    test_payload_and_component_steps_match_per_object_queries(tmp_path_factory, strategy)


def test_over_must_be_named_when_there_are_several_inputs(tmp_path):
    wf = sz.Workflow("two")
    wf.add(ops.Add(), wf.input("x"), wf.input("y"), name="total")
    run = wf.run({"x": np.ones((3, 3)), "y": np.ones((3, 3))}, store=tmp_path / "run", executor="local")
    objects = np.arange(9).reshape(3, 3)
    with pytest.raises(sz.LineageError, match="give over=.*x, y"):
        run.lineage_table("total", objects=objects)
    assert list(run.lineage_table("total", over="y", objects=objects)["n_lineage"]) == [1] * 8


def test_batches_on_spark_executors_give_the_same_table(labelled, spark):
    run, image = labelled
    local = run.lineage_table("objects", over="x", flags=image > 0, values="x", batch_objects=None)
    on_spark = run.lineage_table("objects", over="x", flags=image > 0, values="x", batch_objects=1,
                                 executor="spark")
    assert on_spark.meta["executor"] == "spark" and on_spark.meta["batches"] == len(local)
    assert all(np.array_equal(local[c], on_spark[c], equal_nan=True) for c in local.colnames)
    with pytest.raises(sz.LineageError, match="executor='gpu'"):
        run.lineage_table("objects", over="x", executor="gpu")


def test_labelled_cells_walk_through_the_query_engine_by_its_step_choice(labelled):
    """Labelled cells are a `subzero.query.Carrier`: the engine's walk carries them, each step
    by the strategy the plan forces or `choose_step` picks, each labelled cell reaching exactly
    what a single query from that cell reaches."""
    from subzero.modes import Direction, Strategy
    from subzero.query import Carrier, QueryOptions
    from subzero.stats.labelled import LabelledCells

    run, _ = labelled
    src, dst = run.node("bright"), run.node("x")
    cells = np.array([0, 37, 38, 150], np.int64)
    start = LabelledCells.of(np.arange(len(cells)), cells, run.shape("bright"))
    assert isinstance(start, Carrier)
    forced = QueryOptions(Direction.BACKWARD, using={run.node("blur"): Strategy.parse("BlackBox")})
    for plan in (QueryOptions(Direction.BACKWARD), forced):
        got = run.lineage.walk(src, dst, start, plan)
        assert [e["node"] for e in plan.log] == ["bright", "blur"]
        assert plan.log[1]["strategy"] == ("BlackBox" if plan is forced else run.lineage.choose(
            run.node("blur"), QueryOptions(Direction.BACKWARD), plan.log[1]["cells_in"])[0].name)
        for label, cell in enumerate(cells):
            coord = tuple(int(c) for c in np.unravel_index(cell, run.shape("bright")))
            expected = np.flatnonzero(run.backward_mask("bright", [coord], to="x"))
            np.testing.assert_array_equal(np.sort(got.cells[got.labels == label]), expected)

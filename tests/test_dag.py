"""Workflow construction and validation."""

from __future__ import annotations

import numpy as np
import pytest

import subzero as sz
from subzero import operators as ops


def test_building_a_dag_with_several_inputs_and_outputs():
    wf = sz.Workflow("w")
    x, y = wf.input("x"), wf.input("y")
    s = wf.add(ops.Add(), x, y)
    t = wf.add(ops.Transpose(), s)
    m = wf.add(ops.Multiply(), s, y)
    assert [n.name for n in wf.nodes] == ["x", "y", "add", "transpose", "multiply"]
    assert wf.outputs == [t, m] and wf.inputs == [x, y]
    assert wf.node("add") is s and wf.node(s) is s
    assert wf.consumers(s) == [(t, 0), (m, 0)]
    assert wf.add(ops.Add(), x, x).name == "add_1"


def test_each_node_gets_its_own_operator_copy():
    op = ops.Transpose()
    wf = sz.Workflow("w")
    x = wf.input("x")
    a, b = wf.add(op, x, name="a"), wf.add(op, x, name="b")
    assert a.operator is not b.operator and a.operator is not op


@pytest.mark.parametrize("build, fragment", [
    (lambda wf, x: wf.add(np.add, x), "expects a subzero Operator"),
    (lambda wf, x: wf.add(ops.Add(), x), r"takes 2 input\(s\), got 1"),
    (lambda wf, x: wf.add(ops.Transpose(), "x"), "not a node of workflow"),
    (lambda wf, x: wf.add(ops.Transpose(), sz.Workflow("other").input("x")), "not a node of workflow"),
    (lambda wf, x: wf.add(ops.Transpose(), x, name="x"), "already has a node named 'x'"),
    (lambda wf, x: wf.add(ops.Transpose(), x, name="bad name"), "is invalid"),
    (lambda wf, x: wf.add(ops.Transpose()), "needs at least one input"),
    (lambda wf, x: wf.node("missing"), "unknown node 'missing'"),
])
def test_malformed_workflows_are_workflow_errors(build, fragment):
    wf = sz.Workflow("w")
    x = wf.input("x")
    with pytest.raises(sz.WorkflowError, match=fragment):
        build(wf, x)


def test_from_spec_rejects_cycles_and_unknown_inputs():
    operators = {"a": ops.Transpose(), "b": ops.Transpose()}
    with pytest.raises(sz.WorkflowError, match="cycle"):
        sz.Workflow.from_spec("c", [{"name": "x", "inputs": []}, {"name": "a", "inputs": ["b"]},
                                    {"name": "b", "inputs": ["a"]}], operators)
    with pytest.raises(sz.WorkflowError, match="unknown input node"):
        sz.Workflow.from_spec("u", [{"name": "a", "inputs": ["ghost"]}], operators)
    wf = sz.Workflow.from_spec("ok", [{"name": "b", "inputs": ["a"]}, {"name": "a", "inputs": ["x"]},
                                      {"name": "x", "inputs": []}], operators)
    assert [n.name for n in wf.nodes] == ["x", "a", "b"] and wf.node("a").operator is operators["a"]


def test_to_dict_names_operators_and_their_arguments():
    wf = sz.Workflow("w")
    x = wf.input("x")
    wf.add(ops.Sum(axis=1), x, name="s")
    spec = wf.to_dict()
    assert spec["nodes"][1]["operator"].endswith("Sum") and spec["nodes"][1]["params"]["axis"] == 1


def test_ancestors_descendants_and_the_nodes_between():
    wf = sz.Workflow("w")
    x, y = wf.input("x"), wf.input("y")
    a = wf.add(ops.Transpose(), x, name="a")
    b = wf.add(ops.Add(), a, y, name="b")
    c = wf.add(ops.Transpose(), y, name="c")
    assert wf.ancestors(b) == {b, a, x, y} and wf.descendants(y) == {y, b, c}
    assert wf.between(x, b) == [x, a, b] and wf.between(c, b) == []
    wf.between(x, b).append(c)  # a copy: the remembered path is not changed
    assert wf.between(x, b) == [x, a, b]
    d = wf.add(ops.Add(), b, c, name="d")  # a new node: paths are worked out again
    assert wf.between(x, d) == [x, a, b, d] and wf.between(y, d) == [y, b, c, d]


def test_ancestors_and_descendants_are_remembered_until_a_node_is_added():
    wf = sz.Workflow("w")
    x = wf.input("x")
    a = wf.add(ops.Transpose(), x)
    first = wf.descendants(x)
    first.add("scribble")  # the caller's own set: the remembered one is untouched
    assert wf.descendants(x) == {x, a} and wf.ancestors(a) == {x, a}
    b = wf.add(ops.Transpose(), a)
    assert wf.descendants(x) == {x, a, b} and wf.ancestors(b) == {x, a, b}

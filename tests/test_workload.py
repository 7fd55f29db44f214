"""Workloads: validation, and which steps the queries take with how many cells."""

from __future__ import annotations

import numpy as np
import pytest

import subzero as sz
from subzero import operators as ops
from subzero.optimizer.workload import parse_workload, step_sizes


def diamond():
    wf = sz.Workflow("w")
    x = wf.input("x")
    a = wf.add(ops.Transpose(), x, name="a")
    b = wf.add(ops.Convolve(np.ones((3, 3))), x, name="b")
    wf.add(ops.Add(), a, b, name="c")
    return wf


def test_parse_validates_every_query():
    wf = diamond()
    queries = parse_workload(wf, [{"direction": "backward", "node": "c", "to": "x", "cells": [[1, 1], [2, 2]]},
                                  {"direction": "forward", "node": "x", "to": "c"}])
    assert [(q.direction, q.node, q.to, q.n_cells) for q in queries] == [
        ("backward", "c", "x", 2), ("forward", "x", "c", 1)]
    assert parse_workload(wf, None) == []
    with pytest.raises(sz.WorkflowError, match="must be a list"):
        parse_workload(wf, {"direction": "backward"})
    with pytest.raises(sz.WorkflowError, match="direction must be 'backward' or 'forward'"):
        parse_workload(wf, [{"direction": "sideways", "node": "c", "to": "x"}])
    with pytest.raises(sz.WorkflowError, match="unknown node"):
        parse_workload(wf, [{"direction": "backward", "node": "zzz", "to": "x"}])


def test_step_sizes_follow_every_path_with_fans():
    wf = diamond()
    fans = {("c", "backward"): 2.0, ("a", "backward"): 1.0, ("b", "backward"): 9.0,
            ("a", "forward"): 1.0, ("b", "forward"): 9.0, ("c", "forward"): 1.0}
    queries = parse_workload(wf, [{"direction": "backward", "node": "c", "to": "x", "cells": [[0, 0]] * 4},
                                  {"direction": "forward", "node": "x", "to": "c"}])
    access, entering = step_sizes(wf, queries, lambda n, d, cells: cells * fans[(n, d)])
    assert access == {("c", "backward"): 1, ("a", "backward"): 1, ("b", "backward"): 1,
                      ("a", "forward"): 1, ("b", "forward"): 1, ("c", "forward"): 1}
    assert entering[("c", "backward")] == 4
    assert entering[("a", "backward")] == 8 and entering[("b", "backward")] == 8
    assert entering[("c", "forward")] == 10  # 1 via a plus 9 via b
    with pytest.raises(sz.WorkflowError, match="no path"):
        step_sizes(wf, parse_workload(wf, [{"direction": "backward", "node": "a", "to": "b"}]), lambda *a: 1.0)

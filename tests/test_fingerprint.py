"""Fingerprints of a run: the same in every process, and different for any change a resumed run must refuse."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import subzero as sz
from subzero import operators as ops
from subzero.fingerprint import array_digest, block_digest, combine_digests, differences, operator_digest, \
    run_fingerprint
from subzero.tiling import default_chunks
from subzero.trace.calls import ARG, NumpyCall

ROOT = Path(__file__).resolve().parents[1]

FLOW = textwrap.dedent("""
    import numpy as np
    import subzero as sz
    from subzero import operators as ops

    class Scaled(sz.Operator):
        tiling = sz.Elementwise()

        def __init__(self, factor):
            self.factor = factor

        def run(self, ctx, x):
            return x * self.factor

    def build():
        wf = sz.Workflow("flow")
        x = wf.input("x")
        s = wf.add(Scaled(FACTOR), x, name="scaled")
        wf.add(ops.Convolve(np.ones((3, 3)), mode="constant"), s, name="smooth")
        wf.add(ops.Label(), wf.add(ops.Threshold(0.5), s, name="bright"), name="stars")
        return wf
""")


def fingerprint_in_a_new_process(tmp_path, factor: str = "2.0", seed: str = "0") -> str:
    (tmp_path / "flow.py").write_text(FLOW.replace("FACTOR", factor))
    code = ("import runpy, json\nfrom subzero.fingerprint import run_fingerprint\n"
            f"wf = runpy.run_path({str(tmp_path / 'flow.py')!r}, run_name='subzero_workflow')['build']()\n"
            "print(json.dumps(run_fingerprint(wf, {'tile_shape': 16}), sort_keys=True))\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONHASHSEED=seed)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_workflow_file_has_the_same_fingerprint_in_every_process(tmp_path):
    first = fingerprint_in_a_new_process(tmp_path, seed="1")
    assert fingerprint_in_a_new_process(tmp_path, seed="2") == first  # no addresses, no set order
    assert fingerprint_in_a_new_process(tmp_path, factor="3.0") != first  # an argument changed


def test_an_operators_code_and_public_arguments_count_not_its_run_state():
    class A(ops.GaussianFilter):
        def run(self, ctx, x):
            return super().run(ctx, x)

    class B(ops.GaussianFilter):
        def run(self, ctx, x):
            return super().run(ctx, x) * 1.0

    a, a2, b = A(1.0), A(1.0), B(1.0)
    assert operator_digest(a) == operator_digest(a2)
    assert operator_digest(a) != operator_digest(b)  # the code differs
    assert operator_digest(a) != operator_digest(A(1.5))  # an argument differs
    a2.input_shapes, a2.output_shape, a2._seams = ((4, 4),), (4, 4), object()  # what a run binds and sets
    assert operator_digest(a) == operator_digest(a2)
    k1, k2 = ops.Convolve(np.ones((3, 3))), ops.Convolve(np.ones((3, 3)))
    assert operator_digest(k1) == operator_digest(k2)
    k2.kernel = k2.kernel.copy()
    k2.kernel[1, 1] = 2.0  # an array argument: its values count, not its repr
    assert operator_digest(k1) != operator_digest(k2)
    f1, f2 = ops.Apply(lambda v: v + 1), ops.Apply(lambda v: v + 2)
    assert operator_digest(f1) != operator_digest(f2)  # a function argument: its code counts


def test_run_fingerprint_and_differences():
    def wf(sigma=1.0, extra=False):
        w = sz.Workflow("w")
        b = w.add(ops.GaussianFilter(sigma), w.input("x"), name="blur")
        if extra:
            w.add(ops.Threshold(0.5), b, name="bright")
        return w

    base = run_fingerprint(wf(), {"tile_shape": 8})
    assert set(base) == {"workflow", "settings", "operator:blur"}
    assert differences(base, run_fingerprint(wf(), {"tile_shape": 8})) == []
    assert differences(base, run_fingerprint(wf(), {"tile_shape": 4})) == [
        "the run's settings (tile shape, pinned strategies, workload or budgets)"]
    got = differences(base, run_fingerprint(wf(2.0), {"tile_shape": 8}))
    assert "the operator of node 'blur' (its code or arguments)" in got
    assert "node 'bright' (not in the stored run)" in differences(base, run_fingerprint(wf(extra=True),
                                                                                       {"tile_shape": 8}))
    stored = run_fingerprint(wf(extra=True), {"tile_shape": 8})
    assert "node(s) 'bright' (in the stored run, not in this workflow)" in differences(stored, base)


def test_a_runs_fingerprint_is_the_digests_each_operator_has_alone():
    """run_fingerprint makes the bytes of functions and objects its nodes share once; each
    node's digest stays byte for byte the one it has alone (what stored runs compare with)."""
    shared = NumpyCall(np.maximum, (ARG, -0.0))  # one call in many nodes, as a trace shares them

    class Holder:  # an object met twice inside one operator: the second time a cycle mark
        def __init__(self):
            self.call, self.again = shared, shared

    def closure_over_the_class(v):  # a function whose bytes name the operator's own class
        return ops.Apply.run if v is None else v

    state = [Holder(), closure_over_the_class, [[[[[[[[[shared]]]]]]]]], [[[[[[[[[[[[[shared]]]]]]]]]]]]]]
    wf = sz.Workflow("shared")
    x = wf.input("x")
    nodes = [wf.add(ops.Apply(shared), x, name="first"), wf.add(ops.Apply(shared), x, name="second"),
             wf.add(ops.Apply(NumpyCall(np.maximum, (ARG, 0.0))), x, name="zero")]
    for i, extra in enumerate(state):  # the same objects at other depths and beside other state
        op = ops.Apply(shared)
        op.extra = extra
        nodes.append(wf.add(op, x, name=f"extra{i}"))
    op = ops.Apply(closure_over_the_class)
    op.also = (shared, state[0], shared)
    nodes.append(wf.add(op, x, name="both"))
    got = run_fingerprint(wf, {})
    for node in nodes:
        assert got[f"operator:{node.name}"] == operator_digest(node.operator), node.name
    assert got["operator:first"] == got["operator:second"] != got["operator:zero"]  # -0.0 is not 0.0


def test_traced_nodes_share_their_numpy_calls():
    @sz.workflow
    def logs(x):
        return np.log(x) + np.log(x * 2.0) + np.maximum(x, 0.0) + np.maximum(x, -0.0)

    wf = logs.trace({"x": np.ones(4)})
    calls = {n.name: n.operator.fn for n in wf.nodes if isinstance(n.operator, ops.Apply)}
    log_calls = [c for c in calls.values() if c.fn is np.log]
    assert len(log_calls) == 2 and log_calls[0] is log_calls[1]
    maximum = [c for c in calls.values() if c.fn is np.maximum]
    assert len(maximum) in (0, 2) and (not maximum or maximum[0] is not maximum[1])
    digests = run_fingerprint(wf, {})
    assert all(digests[f"operator:{n}"] == operator_digest(wf.node(n).operator) for n in calls)


@pytest.mark.parametrize("shape", [(7, 9), (100,), (), (0, 4), (3, 4, 5)])
def test_array_digests_are_over_tiles_and_do_not_depend_on_byte_order(shape):
    rng = np.random.default_rng(0)
    a = np.asarray(rng.random(shape))
    chunks = default_chunks(shape)
    assert array_digest(a, chunks) == array_digest(a.astype(">f8"), chunks)
    if a.ndim:
        assert array_digest(a, chunks) == array_digest(np.asfortranarray(a), chunks)
    assert array_digest(a, chunks) != array_digest(a.astype(np.float32), chunks)  # the dtype counts
    if a.size:
        b = a.copy()
        b.reshape(-1)[-1] += 1
        assert array_digest(a, chunks) != array_digest(b, chunks)
    assert combine_digests((2, 3), "f8", ["x"]) != combine_digests((3, 2), "f8", ["x"])  # the shape counts
    assert block_digest(np.arange(4, dtype="<i2")) == block_digest(np.arange(4, dtype=">i2"))

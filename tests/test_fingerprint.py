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

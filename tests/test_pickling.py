"""Operator pickling: a user's operator class travels by value, so a process that cannot import
the module it was defined in still maps and runs it."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
import threading

import cloudpickle
import numpy as np
import pytest

import subzero as sz
from subzero import operators as ops
from subzero.pickling import dump_operator, dumps_with_operator

OFFSET = 10  # module globals the class uses travel with it


def shift(cells: np.ndarray, by: int) -> np.ndarray:
    return cells + by


class Shifted(sz.Operator):
    """A user operator defined in this test module, using a module function and constant."""

    def __init__(self, by: int):
        self.by = by
        self.table = np.arange(4) * 2

    def supported_modes(self):
        return {sz.Mode.MAP}

    def run(self, ctx, x):
        return x + OFFSET + self.table[: len(x)]

    def map_b(self, cells, i):
        return shift(cells, -self.by)

    def map_f(self, cells, i):
        return shift(cells, self.by)


def load_in_fresh_process(tmp_path, payload: bytes, body: str) -> dict:
    """Unpickle ``payload`` as ``obj`` in a new interpreter that cannot import this module; run
    ``body`` and return the JSON it prints."""
    path = tmp_path / "op.pkl"
    path.write_bytes(payload)
    script = textwrap.dedent(f"""
        import importlib.util, json, pickle, sys
        import numpy as np
        import subzero as sz
        assert importlib.util.find_spec({__name__!r}) is None, "the test module must not be importable"
        with open({str(path)!r}, "rb") as fh:
            obj = pickle.load(fh)
    """) + textwrap.dedent(body)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # only the installed packages
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=60,
                          env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_user_operator_round_trips_into_a_process_without_its_module(tmp_path):
    op = Shifted(3)
    op.input_shapes, op.output_shape = ((4,),), (4,)
    got = load_in_fresh_process(tmp_path, dump_operator(op, "shifted"), """
        print(json.dumps({
            "name": type(obj).__name__,
            "is_operator": isinstance(obj, sz.Operator),
            "base_by_reference": type(obj).__mro__[1] is sz.Operator,
            "modes": [m.value for m in obj.supported_modes()],
            "map_b": obj.map_b(np.array([[5], [7]]), 0).tolist(),
            "map_f": obj.map_f(np.array([[1]]), 0).tolist(),
            "run": obj.run(None, np.zeros(3)).tolist(),
            "shapes": [obj.input_shapes, obj.output_shape],
            "params": obj.params()["by"],
        }))
    """)
    assert got == {"name": "Shifted", "is_operator": True, "base_by_reference": True, "modes": ["Map"],
                   "map_b": [[2], [4]], "map_f": [[4]], "run": [10.0, 12.0, 14.0], "shapes": [[[4]], [4]],
                   "params": 3}


def test_an_object_holding_the_operator_round_trips_too(tmp_path):
    op = Shifted(1)
    payload = dumps_with_operator({"operator": op, "node": "s", "boxes": ((0, 2),)}, op, "s")
    got = load_in_fresh_process(tmp_path, payload, """
        print(json.dumps([obj["node"], obj["operator"].map_f(np.array([[0, 1]]), 0).tolist()]))
    """)
    assert got == ["s", [[1, 2]]]


def test_subzero_operators_pickle_by_reference(tmp_path):
    op = ops.Convolve(np.ones((3, 3)), mode="constant")
    payload = dump_operator(op, "blur")
    assert type(pickle.loads(payload)) is ops.Convolve  # same class object: pickled by reference
    got = load_in_fresh_process(tmp_path, payload, """
        print(json.dumps([type(obj).__module__, type(obj).__name__, obj.mode]))
    """)
    assert got == [ops.Convolve.__module__, "Convolve", "constant"]


class Locked(sz.Operator):
    def __init__(self):
        self.lock = threading.Lock()


def test_an_unpicklable_attribute_is_a_workflow_error():
    with pytest.raises(sz.WorkflowError) as err:
        dump_operator(Locked(), "guarded")
    message = str(err.value)
    assert "'guarded'" in message and "Locked" in message and "cannot be pickled" in message
    assert "plain data" in message
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize("op", [Shifted(2), Locked()])
def test_by_value_registration_is_undone(op):
    before = set(cloudpickle.list_registry_pickle_by_value())
    try:
        dump_operator(op, "n")
    except sz.WorkflowError:
        pass
    assert set(cloudpickle.list_registry_pickle_by_value()) == before
    assert __name__ not in before


def test_a_callers_own_by_value_registration_survives():
    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)
    try:
        dump_operator(Shifted(1), "n")
        assert __name__ in cloudpickle.list_registry_pickle_by_value()
    finally:
        if __name__ in cloudpickle.list_registry_pickle_by_value():
            cloudpickle.unregister_pickle_by_value(module)


def test_a_fused_tasks_operators_all_travel_by_value(tmp_path):
    """A fused task holds several operators: every user operator's class is pickled by value."""
    payload = dumps_with_operator({"ops": [Shifted(1), ops.Add(), Shifted(2)]}, (Shifted(1), ops.Add(), Shifted(2)),
                                  "a+b+c")
    got = load_in_fresh_process(tmp_path, payload, """
        print(json.dumps([o.map_f(np.array([[0]]), 0).tolist() for o in (obj["ops"][0], obj["ops"][2])]))
    """)
    assert got == [[[1]], [[2]]]
    assert __name__ not in cloudpickle.list_registry_pickle_by_value()

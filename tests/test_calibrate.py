"""Calibration on sample tiles predicts what the real run stores."""

from __future__ import annotations

import numpy as np
import pytest

import subzero as sz
from subzero import operators as ops
from subzero.execution import node_tiles
from subzero.runtime import NodeTask
from subzero.optimizer.calibrate import profile_node
from subzero.planning import supported_strategies


def test_profile_scales_sample_tiles_to_the_node(tmp_path):
    wf = sz.Workflow("c")
    x = wf.input("x")
    wf.add(ops.Convolve(np.ones((3, 3)), mode="constant"), x, name="blur")
    names = ["FullOne/backward", "FullMany/backward", "FullOne/forward"]
    run = wf.run({"x": np.ones((40, 40))}, store=tmp_path / "c", executor="local", tile_shape=10,
                 strategies={"blur": names})
    node = run.node("blur")
    tiles = node_tiles(node.operator, 10)
    task = NodeTask("blur", node.operator, (run.store.array("x"),))
    profile = profile_node(task, tiles, supported_strategies(node.operator), op_seconds=0.01)
    assert profile.tiles == 16 and profile.mapping and not profile.all_to_all
    assert profile.fan_backward == pytest.approx(9, rel=0.15) and profile.fan_forward == pytest.approx(9, rel=0.35)  # halo cells of sampled tiles
    measured = run.catalog.nodes["blur"].stats.bytes
    for name in names:
        # the R-tree part is an upper bound (budgets rely on it), so within 2x
        assert measured[name] / 2 <= profile.strategies[name].bytes <= 2 * measured[name]
        assert profile.strategies[name].pairs == pytest.approx(1600, rel=0.05)

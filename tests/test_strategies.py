"""Which strategies a node may store."""

from __future__ import annotations

import pytest

import subzero as sz
from subzero import operators as ops
from subzero.strategies import check_strategy, default_strategies, resolve_pinned, supported_strategies


class Opaque(sz.Operator):
    def run(self, ctx, x):
        return x


def test_supported_strategies_follow_the_modes():
    assert supported_strategies(Opaque()) == ["BlackBox"]
    mapping = supported_strategies(ops.Transpose())
    assert mapping == ["BlackBox", "Map", "FullOne/backward", "FullOne/forward", "FullMany/backward", "FullMany/forward",
                       "FullRange"]  # range rules index both directions: no '/forward' twin
    crd = supported_strategies(ops.CosmicRayDetect())
    assert "CompOne/backward" in crd and "PayMany/backward" in crd and "Map" not in crd


def test_resolve_pinned_normalizes_names_and_checks_support():
    wf = sz.Workflow("w")
    x = wf.input("x")
    t = wf.add(ops.Transpose(), x, name="t")
    o = wf.add(Opaque(), t, name="o")
    assert resolve_pinned(wf, {t: ["FullOne", "FullOne/backward", "Map"], "o": "BlackBox"}) == {
        "t": ("FullOne/backward", "Map"), "o": ("BlackBox",)}
    with pytest.raises(sz.WorkflowError, match="cannot store 'FullOne/backward'"):
        check_strategy(o, "FullOne")
    with pytest.raises(sz.WorkflowError, match="is an input"):
        check_strategy(x, "Map")
    with pytest.raises(sz.WorkflowError, match="is empty"):
        resolve_pinned(wf, {"t": []})
    assert default_strategies(t) == ("Map",) and default_strategies(o) == ("BlackBox",)

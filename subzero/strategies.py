"""Which strategies each node stores: user pins, checked against what operators support."""

from __future__ import annotations

from subzero.errors import WorkflowError
from subzero.modes import Direction, Mode, Strategy
from subzero.operator import Operator
from subzero.dag import Node, Workflow

__all__ = ["supported_strategies", "check_strategy", "resolve_pinned", "default_strategies"]


def _modes_enabling(op: Operator) -> set[Mode]:
    modes = set(op.supported_modes()) | {Mode.BLACKBOX}
    if Mode.MAP in modes:
        modes.add(Mode.FULL)  # full pairs derive from the mapping functions
    return modes


def supported_strategies(op: Operator) -> list[str]:
    """Every strategy name the operator can store (both directions where they exist)."""
    names = []
    modes = _modes_enabling(op)
    for base in ("BlackBox", "Map", "FullOne", "FullMany", "FullRange", "PayOne", "PayMany", "CompOne", "CompMany"):
        s = Strategy(base)  # a valid base: its backward (or only) form
        if s.mode in modes:
            names.append(s.name)
            if s.mode is Mode.FULL and not s.both_directions:
                names.append(Strategy(base, Direction.FORWARD).name)
    return names


def check_strategy(node: Node, name: "str | Strategy") -> str:
    """The canonical name of ``name`` for ``node``, or a `WorkflowError` saying why not."""
    strategy = Strategy.parse(name)
    if node.is_input:
        raise WorkflowError(f"node {node.name!r} is an input: it has no lineage, so no strategy")
    if strategy.mode not in _modes_enabling(node.operator):
        raise WorkflowError(
            f"node {node.name!r} ({type(node.operator).__name__}) cannot store {strategy.name!r}: "
            f"it supports {', '.join(supported_strategies(node.operator))}")
    return strategy.name


def resolve_pinned(wf: Workflow, strategies: dict | None) -> dict[str, tuple[str, ...]]:
    """Normalize ``strategies`` (node or name -> name or list of names) to canonical names.

    This is where a user's strategies are parsed (`check_strategy`): the names it returns
    are canonical, so the driver's one parse of them per node (for its stage) and the
    catalog's copy agree.
    """
    if strategies is None:
        return {}
    if not isinstance(strategies, dict):
        raise WorkflowError(f"strategies must be a dict of node -> strategy, got {type(strategies).__name__}")
    pinned = {}
    for ref, names in strategies.items():
        node = wf.node(ref)
        names = [names] if isinstance(names, (str, Strategy)) else list(names)
        if not names:
            raise WorkflowError(f"strategies for node {node.name!r} is empty; give at least one, e.g. 'BlackBox'")
        pinned[node.name] = tuple(dict.fromkeys(check_strategy(node, n) for n in names))
    return pinned


def default_strategies(node: Node) -> tuple[str, ...]:
    """Mapping lineage where the operator supports it, else black-box."""
    return ("Map",) if Mode.MAP in node.operator.supported_modes() else ("BlackBox",)

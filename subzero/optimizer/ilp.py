"""The lineage strategy optimizer: the integer program of SubZero section VII.

Given, for every node of a workflow, candidate lineage strategies with their
predicted disk, runtime and query costs, and a workload summary saying how
often queries step through each node in each direction, choose for every node
a set of strategies that minimizes

    sum_(i,d) p_(i,d) * min_(j chosen) q_ij[d]
        + epsilon * sum_(j chosen) (disk_ij + beta * runtime_ij)

subject to the disk and runtime budgets, at least one strategy per node, and
the strategies the user pinned.

Storing an intermediate array is a choice of the same program.  A candidate that
answers by re-running its node (BlackBox) reads the node's inputs; an input the run
did not store is recomputed from its nearest stored ancestors, so such a step also
pays the recomputation of every unstored array on the way (`Candidate.reads`, the
`ArrayChoice` records and their ``inputs``).  A binary ``z_a`` per array that may
still be stored says whether it is: its bytes count against the disk budget (and its
writing against the runtime budget), and a continuous ``u_(i,d,a) >= 0`` says whether
serving (node i, direction d) recomputes array ``a``: ``u >= y_(i,d,j) - z_a`` for the
arrays candidate j reads, ``u_b >= u_a - z_b`` for each unstored input b of a.  The
objective adds ``p_(i,d) * share_(j,d) * seconds_a * u_(i,d,a)``; minimized, u is 1
exactly where a recomputation happens.  The ``min`` is linearized with assignment
variables ``y_(i,d,j) <= x_ij``, ``sum_j y_(i,d,j) = 1``: since query costs are
non-negative and the objective is minimized, each (node, direction) is served
by its cheapest chosen strategy.

Before the program is built, candidates that are clearly not optimal are
pruned (section VII): candidates that alone exceed a budget, candidates
indexed for a direction the workload never queries at that node, every
non-mapping candidate of a node that has a mapping ("Map"), and every
candidate but BlackBox (or Map) of a node the workload never queries.
Pinned candidates are never pruned.  After solving, chosen strategies that
serve no query and are not pinned are dropped (they can only tie).

This is the only module of subzero that imports :mod:`pulp`.
"""

from __future__ import annotations

import itertools
import math
import numbers
import time
import warnings
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Collection, Iterable, Mapping, Sequence

import numpy as np
import pulp

from subzero.errors import WorkflowError
from subzero.modes import Direction, Mode, Strategy
from subzero.optimizer.storage import ArrayChoice, recomputed

__all__ = ["Candidate", "ArrayChoice", "Problem", "Plan", "solve", "brute_force", "optimal", "objective_of"]

DIRECTIONS = tuple(Direction)
BLACKBOX = Strategy.parse("BlackBox")
FALLBACK_REASON = "fallback: no candidate fits the budget"
#: `optimal` enumerates an instance whose surviving candidates give at most this many choices
#: (the product over nodes of ``2**survivors - 1``) and stores at most `ENUMERATE_ARRAYS` arrays
#: (a node of a one-pass run whose BlackBox step re-reads a chain of unstored arrays: 64 sets of
#: them over its few choices take a few milliseconds, less than starting CBC)
ENUMERATE_CHOICES = 255
ENUMERATE_ARRAYS = 6    # each storable array doubles the enumeration

Key = tuple[str, Strategy]
Access = tuple[str, Direction]
Choice = dict[str, tuple[Strategy, ...]]


@dataclass(frozen=True)
class Candidate:
    """One lineage strategy the optimizer may choose for one node.

    Parameters
    ----------
    node : str
        Name of the workflow node.
    strategy : Strategy or str
        The strategy, e.g. ``"Map"``, ``"BlackBox"``, ``"FullOne/backward"``
        (a name is parsed once, here).  The direction a stored strategy is
        indexed for is used for pruning.
    disk : float
        Predicted bytes of lineage stored, >= 0.
    runtime : float
        Predicted seconds of runtime overhead added to the workflow run, >= 0.
    query_cost : Mapping[Direction or str, float]
        ``{"backward": seconds, "forward": seconds}``: predicted cost of one
        query step through the node with this strategy.  A direction may be
        left out only if the workload never queries the node that way.
    mapping : bool
        True for mapping functions ("Map"): no disk, no runtime.
    reads : tuple of str
        The unstored arrays (`ArrayChoice` nodes) one query step with this candidate
        recomputes: the node's inputs the run did not store, when the step re-runs the node.
    reread : Mapping[Direction or str, float]
        Per direction, the share of those arrays one step recomputes (the touched tiles);
        1 where left out.

    Examples
    --------
    >>> Candidate("crop", "FullOne/backward", disk=4e6, runtime=0.5,
    ...           query_cost={"backward": 0.01, "forward": 3.0}).strategy
    Strategy('FullOne/backward')
    """

    node: str
    strategy: Strategy
    disk: float
    runtime: float
    query_cost: Mapping[Direction, float]
    mapping: bool = False
    reads: tuple[str, ...] = ()
    reread: Mapping[Direction, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "strategy", Strategy.parse(self.strategy))
        object.__setattr__(self, "reads", tuple(self.reads))
        object.__setattr__(self, "reread", MappingProxyType({Direction.parse(d): float(v)
                                                             for d, v in self.reread.items()}))
        label = f"candidate {str(self.strategy)!r} of node {self.node!r}"
        _check_amount(f"disk of {label}", self.disk)
        _check_amount(f"runtime of {label}", self.runtime)
        unknown = sorted(set(self.query_cost) - set(DIRECTIONS))
        if unknown:
            raise WorkflowError(
                f"query_cost of {label} has unknown directions {unknown}; "
                f"expected keys among {list(DIRECTIONS)}"
            )
        for direction, cost in self.query_cost.items():
            _check_amount(f"{direction} query cost of {label}", cost)
        object.__setattr__(self, "disk", float(self.disk))
        object.__setattr__(self, "runtime", float(self.runtime))
        costs = {Direction.parse(d): float(q) for d, q in self.query_cost.items()}
        object.__setattr__(self, "query_cost", MappingProxyType(costs))

    @property
    def key(self) -> Key:
        """``(node, strategy)``, unique within a :class:`Problem`."""
        return (self.node, self.strategy)

    def share(self, direction: Direction) -> float:
        """The share of its `reads` one step in ``direction`` recomputes."""
        return self.reread.get(direction, 1.0)


Survivors = dict[str, list[Candidate]]


@dataclass(frozen=True)
class Problem:
    """An instance of the strategy-selection integer program.

    Every node without a ``"BlackBox"`` candidate gets one with disk 0,
    runtime 0 and, per direction, the highest query cost among the node's
    candidates; so a plan within the budgets always exists unless the pins
    break them.  Nodes are the nodes of ``candidates``: naming any other node
    in ``access`` or ``pinned`` raises :class:`WorkflowError`.

    Parameters
    ----------
    candidates : tuple of Candidate
        All strategies the optimizer may choose from.
    access : Mapping[tuple[str, str], float]
        ``(node, direction) -> p``: how often workload queries step through
        the node in that direction (weights >= 0, need not sum to 1).
    max_disk, max_runtime : float or None
        Budgets on the total bytes of lineage and on the total runtime
        overhead in seconds; None means unbounded.
    epsilon : float
        Weight of the disk/runtime penalty that breaks ties.  It is in units
        of query seconds per byte: with the default 1e-6, storing 1 MB costs
        as much as 1 s of expected query time.
    beta : float
        Weight of runtime seconds against disk bytes in the penalty.
    pinned : Mapping[str, tuple[Strategy, ...]]
        ``node -> strategies`` the user fixed; they are always chosen and never
        pruned.  Names are parsed; a single strategy is accepted as well as a tuple.
    arrays : tuple of ArrayChoice
        The unstored arrays candidates read (`Candidate.reads`) and their unstored
        inputs, recursively: whether each is stored is chosen with the strategies.

    Examples
    --------
    >>> p = Problem((Candidate("a", "Map", 0, 0, {"backward": 0.0}, mapping=True),),
    ...             access={("a", "backward"): 1.0})
    >>> sorted(c.strategy.name for c in p.candidates)
    ['BlackBox', 'Map']
    """

    candidates: tuple[Candidate, ...]
    access: Mapping[Access, float]
    max_disk: float | None = None
    max_runtime: float | None = None
    epsilon: float = 1e-6
    beta: float = 1.0
    pinned: Mapping[str, tuple[Strategy, ...]] = field(default_factory=dict)
    arrays: tuple[ArrayChoice, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "arrays", tuple(self.arrays))
        pinned = {n: tuple(Strategy.parse(x) for x in ((s,) if isinstance(s, (str, Strategy)) else s))
                  for n, s in self.pinned.items()}
        object.__setattr__(self, "candidates", _with_blackbox(tuple(self.candidates)))
        object.__setattr__(self, "access", MappingProxyType(
            {(n, d if d not in DIRECTIONS else Direction.parse(d)): w for (n, d), w in self.access.items()}))
        object.__setattr__(self, "pinned", MappingProxyType(pinned))
        _validate(self)

    def nodes(self) -> dict[str, list[Candidate]]:
        """Candidates grouped by node, nodes in order of first appearance."""
        return _group(self.candidates)

    def weight(self, node: str, direction: Direction) -> float:
        """Access weight ``p`` of ``(node, direction)``, 0 when absent."""
        return self.access.get((node, direction), 0.0)

    def queried(self, node: str) -> list[Direction]:
        """Directions in which the workload steps through ``node``."""
        return [d for d in DIRECTIONS if self.weight(node, d) > 0]

    def array(self, name: str) -> ArrayChoice:
        """The `ArrayChoice` of ``name``."""
        return {a.node: a for a in self.arrays}[name]

    def recomputed(self, reads: Iterable[str], stored: Collection[str] = ()) -> list[str]:
        """The arrays reading ``reads`` recomputes when ``stored`` are stored: each of ``reads``
        not stored and, recursively, their inputs not stored (each once, readers first)."""
        return recomputed({a.node: a for a in self.arrays}, reads, stored)

    def reread_cost(self, c: Candidate, direction: Direction, stored: Collection[str] = ()) -> float:
        """Seconds one step of ``c`` in ``direction`` spends recomputing unstored arrays."""
        if not c.reads:
            return 0.0
        table = {a.node: a for a in self.arrays}
        return c.share(direction) * sum(table[a].seconds for a in self.recomputed(c.reads, stored))


@dataclass(frozen=True)
class Plan:
    """The optimizer's choice.

    Attributes
    ----------
    chosen : Mapping[str, tuple[Strategy, ...]]
        ``node -> chosen strategies``, sorted: the pins, and per queried
        direction the strategy that serves it (for a node nobody queries,
        the one strategy with the smallest disk/runtime penalty).
    objective : float
        Objective value of ``chosen`` (see :func:`objective_of`).
    disk, runtime : float
        Total predicted bytes of lineage and seconds of runtime overhead.
    status : str
        ``"optimal"``, or ``"fallback"`` when no plan was found within the
        budgets (BlackBox everywhere, plus Map where available, plus pins).
    solve_seconds : float
        Wall-clock time spent solving (building and solving the program).
    reasons : Mapping[str, str]
        ``node -> short human reason`` for its choice.
    pruned : Mapping[tuple[str, Strategy], str]
        ``(node, strategy) -> why`` the candidate was pruned before solving.
    stored : tuple of str
        The arrays of ``problem.arrays`` chosen to be stored (their bytes are in ``disk``).
    array_reasons : Mapping[str, str]
        ``array -> why`` it is stored or not (every storable array of the problem).
    """

    chosen: Mapping[str, tuple[Strategy, ...]]
    objective: float
    disk: float
    runtime: float
    status: str
    solve_seconds: float
    reasons: Mapping[str, str]
    pruned: Mapping[Key, str]
    stored: tuple[str, ...] = ()
    array_reasons: Mapping[str, str] = field(default_factory=dict)

    def names(self) -> dict[str, tuple[str, ...]]:
        """``chosen`` with strategy names (as the catalog stores them)."""
        return {node: tuple(s.name for s in chosen) for node, chosen in self.chosen.items()}


def solve(problem: Problem) -> Plan:
    """Choose lineage strategies with the integer program (CBC via pulp).

    Parameters
    ----------
    problem : Problem
        Candidates, workload access weights, budgets and pins.

    Returns
    -------
    Plan
        The optimal plan over the candidates that survive pruning, or a
        ``"fallback"`` plan if the solver finds none (it never raises then).

    Raises
    ------
    WorkflowError
        If the pinned strategies alone exceed a budget.

    Examples
    --------
    >>> cands = (Candidate("udf", "FullOne/backward", 100.0, 1.0, {"backward": 1.0}),
    ...          Candidate("udf", "BlackBox", 0.0, 0.0, {"backward": 50.0}))
    >>> solve(Problem(cands, {("udf", "backward"): 1.0})).names()
    {'udf': ('FullOne/backward',)}
    >>> solve(Problem(cands, {("udf", "backward"): 1.0}, max_disk=10)).names()
    {'udf': ('BlackBox',)}
    >>> brute_force(Problem(cands, {("udf", "backward"): 1.0})).names()  # the same, by enumeration
    {'udf': ('FullOne/backward',)}
    """
    return _optimize(problem, _solve_ilp)


def brute_force(problem: Problem) -> Plan:
    """Like :func:`solve`, but enumerate every choice instead of using the ILP.

    Prunes exactly like :func:`solve`, then tries every non-empty subset of
    every node's surviving candidates that contains its pins (for small
    instances: the number of choices is the product over nodes of
    ``2**survivors - 1``).  Meant to check :func:`solve` in tests (see its examples).
    """
    return _optimize(problem, _enumerate)


def optimal(problem: Problem) -> Plan:
    """The optimal plan: :func:`brute_force`'s search where the candidates that survive pruning
    leave few choices (one node of a one-pass run planned at a time: enumerating them takes
    well under a millisecond, starting the CBC process several), :func:`solve`'s integer
    program otherwise.  Same pruning, same plan (up to ties between equal objectives).

    Examples
    --------
    >>> cands = (Candidate("udf", "FullOne/backward", 100.0, 1.0, {"backward": 1.0}),
    ...          Candidate("udf", "BlackBox", 0.0, 0.0, {"backward": 50.0}))
    >>> optimal(Problem(cands, {("udf", "backward"): 1.0}, max_disk=10)).names()
    {'udf': ('BlackBox',)}
    """
    return _optimize(problem, _small_first)


def _small_first(problem: Problem, survivors: Survivors) -> Found | None:
    choices = 1
    for cands in survivors.values():
        choices *= max(2 ** len(cands) - 1, 1)
    flat = [c for cands in survivors.values() for c in cands]
    storable = sum(problem.array(a).storable for a in problem.recomputed({r for c in flat for r in c.reads}))
    if choices <= ENUMERATE_CHOICES and storable <= ENUMERATE_ARRAYS:
        return _enumerate(problem, survivors)
    return _solve_ilp(problem, survivors)


def objective_of(problem: Problem, chosen: Mapping[str, Iterable[Strategy | str]],
                 stored: Collection[str] = ()) -> float:
    """Objective value of choosing ``chosen`` and storing the arrays ``stored`` (budgets and
    pins not checked).

    Parameters
    ----------
    problem : Problem
        The instance.
    chosen : Mapping[str, Iterable[Strategy or str]]
        ``node -> strategies`` (or their names); every node needs at least one.
    stored : collection of str
        Arrays of ``problem.arrays`` stored.

    Examples
    --------
    >>> cands = (Candidate("udf", "FullOne/backward", 100.0, 1.0, {"backward": 1.0}),)
    >>> p = Problem(cands, {("udf", "backward"): 2.0}, epsilon=0.01)
    >>> objective_of(p, {"udf": ["FullOne/backward"]})  # 2 * 1 + 0.01 * 101
    3.01
    """
    picked = _picked(problem, chosen)
    arrays = {a.node: a for a in problem.arrays}
    penalty = sum(arrays[a].disk + problem.beta * arrays[a].runtime for a in stored)
    return float(sum(_node_cost(problem, node, cands, stored) for node, cands in picked.items())
                 + problem.epsilon * penalty)


# -- validation ---------------------------------------------------------------


def _check_amount(what: str, value: object) -> None:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not (ok and math.isfinite(value) and value >= 0):
        raise WorkflowError(f"{what} must be a finite number >= 0, got {value!r}")


def _group(candidates: Iterable[Candidate]) -> dict[str, list[Candidate]]:
    groups: dict[str, list[Candidate]] = {}
    for c in candidates:
        groups.setdefault(c.node, []).append(c)
    return groups


def _with_blackbox(candidates: tuple[Candidate, ...]) -> tuple[Candidate, ...]:
    extra = []
    for node, cands in _group(candidates).items():
        if all(c.strategy != BLACKBOX for c in cands):
            worst: dict[Direction, float] = {}
            for d, q in itertools.chain.from_iterable(c.query_cost.items() for c in cands):
                worst[d] = max(q, worst.get(d, q))
            extra.append(Candidate(node, BLACKBOX, 0.0, 0.0, worst))
    return candidates + tuple(extra)


def _validate(problem: Problem) -> None:
    keys = [c.key for c in problem.candidates]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise WorkflowError(f"duplicate candidates (node, strategy): {duplicates}")
    for name in ("max_disk", "max_runtime"):
        if getattr(problem, name) is not None:
            _check_amount(name, getattr(problem, name))
    _check_amount("epsilon", problem.epsilon)
    _check_amount("beta", problem.beta)
    nodes = problem.nodes()
    for (node, direction), weight in problem.access.items():
        where = f"access[({node!r}, {str(direction)!r})]"
        if node not in nodes or direction not in DIRECTIONS:
            raise WorkflowError(
                f"{where}: expected a node with candidates (one of {sorted(nodes)}) "
                f"and a direction in {list(DIRECTIONS)}"
            )
        _check_amount(where, weight)
        missing = [c.strategy.name for c in nodes[node] if weight > 0 and direction not in c.query_cost]
        if missing:
            raise WorkflowError(f"{where} > 0 but {missing} lack a {direction} query cost")
    names = [a.node for a in problem.arrays]
    if len(set(names)) != len(names):
        raise WorkflowError(f"duplicate arrays: {sorted({n for n in names if names.count(n) > 1})}")
    read = {r for c in problem.candidates for r in c.reads} | {i for a in problem.arrays for i in a.inputs}
    unknown = sorted(read - set(names))
    if unknown:
        raise WorkflowError(f"candidates or arrays read the arrays {unknown}, which are not in arrays "
                            f"({sorted(names)}); give an ArrayChoice for each unstored array read")
    for node, strategies in problem.pinned.items():
        known = [c.strategy for c in nodes.get(node, [])]
        if not strategies or not set(strategies) <= set(known):
            raise WorkflowError(
                f"pinned[{node!r}] = {tuple(s.name for s in strategies)}: expected a non-empty subset of "
                f"the node's candidate strategies {[s.name for s in known]}"
            )


def _check_pins(problem: Problem) -> None:
    table = {c.key: c for c in problem.candidates}
    pins = [table[(n, s)] for n, strategies in problem.pinned.items() for s in strategies]
    for name, limit in (("disk", problem.max_disk), ("runtime", problem.max_runtime)):
        total = sum(getattr(c, name) for c in pins)
        if limit is not None and total > limit:
            raise WorkflowError(
                f"pinned strategies on nodes {sorted(problem.pinned)} need {name} {total:g} "
                f"on their own, over the budget max_{name}={limit:g}; "
                f"raise max_{name} or unpin some of them"
            )


# -- pruning ------------------------------------------------------------------


def _structural_reason(problem: Problem, c: Candidate, siblings: list[Candidate]) -> str | None:
    if any(s.mapping for s in siblings) and not c.mapping:
        return "mapping preferred: the node has a mapping function"
    if not problem.queried(c.node):
        return None if c.mapping or c.strategy == BLACKBOX else "not queried by the workload"
    s = c.strategy
    if s.mode is Mode.COMP:
        return None  # a mapping default answers both directions; only the overrides are keyed
    keyed = s.stored and not s.both_directions
    if keyed and problem.weight(c.node, s.direction) == 0:
        return f"{s.direction}-optimized but the workload has no {s.direction} queries on this node"
    return None


def _budget_reason(problem: Problem, c: Candidate) -> str | None:
    for name, limit in (("disk", problem.max_disk), ("runtime", problem.max_runtime)):
        if limit is not None and getattr(c, name) > limit:
            return f"{name} {getattr(c, name):g} alone exceeds max_{name}={limit:g}"
    return None


def _prune(problem: Problem) -> tuple[Survivors, dict[Key, str], Survivors]:
    """Split candidates into survivors per node, pruned reasons, and the
    candidates each node would keep without budgets (to explain choices)."""
    survivors: Survivors = {}
    unbudgeted: Survivors = {}
    pruned: dict[Key, str] = {}
    for node, cands in problem.nodes().items():
        survivors[node], unbudgeted[node] = [], []
        for c in cands:
            pinned = c.strategy in problem.pinned.get(node, ())
            structural = None if pinned else _structural_reason(problem, c, cands)
            reason = structural or (None if pinned else _budget_reason(problem, c))
            if structural is None:
                unbudgeted[node].append(c)
            if reason is None:
                survivors[node].append(c)
            else:
                pruned[c.key] = reason
    return survivors, pruned, unbudgeted


# -- solving ------------------------------------------------------------------


Found = tuple[Choice, tuple[str, ...]]


def _optimize(problem: Problem, search: Callable[[Problem, Survivors], Found | None]) -> Plan:
    _check_pins(problem)
    survivors, pruned, unbudgeted = _prune(problem)
    start = time.perf_counter()
    found = search(problem, survivors)
    seconds = time.perf_counter() - start
    status = "fallback" if found is None else "optimal"
    stored = () if found is None else found[1]
    chosen = _fallback(problem) if found is None else _trimmed(problem, found[0], stored)
    picked = _picked(problem, chosen)
    every = [c for cs in picked.values() for c in cs]
    arrays = {a.node: a for a in problem.arrays}
    totals = {name: sum(getattr(c, name) for c in every) + sum(getattr(arrays[a], name) for a in stored)
              for name in ("disk", "runtime")}
    reasons = {
        node: FALLBACK_REASON if found is None else _reason(problem, cs, totals, unbudgeted[node], stored)
        for node, cs in picked.items()
    }
    return Plan(
        chosen=chosen,
        objective=objective_of(problem, chosen, stored),
        disk=totals["disk"],
        runtime=totals["runtime"],
        status=status,
        solve_seconds=seconds,
        reasons=reasons,
        pruned=pruned,
        stored=tuple(sorted(stored)),
        array_reasons=_array_reasons(problem, picked, stored, totals),
    )


def _trimmed(problem: Problem, chosen: Choice, stored: Collection[str] = ()) -> Choice:
    """Drop chosen strategies that serve no query and are not pinned.

    Such strategies only add disk/runtime (possibly zero, which ties), so
    dropping them keeps the plan optimal and within budget.
    """
    trimmed = {}
    for node, picked in _picked(problem, chosen).items():
        pins = set(problem.pinned.get(node, ()))
        keep = {_cheapest(problem, picked, d, stored).strategy for d in problem.queried(node)}
        trimmed[node] = tuple(sorted(keep | pins or {_cheapest(problem, picked, None).strategy}))
    return trimmed


def _cheapest(problem: Problem, picked: list[Candidate], direction: Direction | None,
              stored: Collection[str] = ()) -> Candidate:
    """The candidate serving ``direction`` best (any direction if None), its re-reads of
    unstored arrays counted; ties go to pinned candidates, then to the smaller disk/runtime penalty."""
    pins = problem.pinned.get(picked[0].node, ())

    def rank(c: Candidate) -> tuple:
        query = c.query_cost[direction] + problem.reread_cost(c, direction, stored) if direction else 0.0
        return (query, c.strategy not in pins, c.disk + problem.beta * c.runtime, c.strategy)

    return min(picked, key=rank)


def _solve_ilp(problem: Problem, survivors: Survivors) -> Found | None:
    if not all(survivors.values()):
        return None
    model = pulp.LpProblem("subzero_strategies", pulp.LpMinimize)
    x, objective = {}, []
    flat = [c for cands in survivors.values() for c in cands]
    arrays = {a.node: a for a in problem.arrays}
    needed = problem.recomputed({r for c in flat for r in c.reads})  # the arrays a surviving candidate may recompute
    z: dict[str, Any] = {}  # array -> stored (a variable, or 0 for one that can no longer be stored)
    for k, name in enumerate(needed):
        a = arrays[name]
        if a.storable:
            z[name] = model.add_variable(f"z{k}", 0, 1, pulp.LpBinary)
            objective.append(problem.epsilon * (a.disk + problem.beta * a.runtime) * z[name])
        else:
            z[name] = 0
    for i, (node, cands) in enumerate(survivors.items()):
        for j, c in enumerate(cands):
            x[c.key] = model.add_variable(f"x{i}_{j}", 0, 1, pulp.LpBinary)
            objective.append(problem.epsilon * (c.disk + problem.beta * c.runtime) * x[c.key])
        model += pulp.lpSum(x[c.key] for c in cands) >= 1
        for strategy in problem.pinned.get(node, ()):
            model += x[(node, strategy)] == 1
        for direction in problem.queried(node):  # y: which chosen strategy serves (node, direction)
            y = [model.add_variable(f"y{i}_{j}_{direction}", 0) for j in range(len(cands))]
            model += pulp.lpSum(y) == 1
            u: dict[str, Any] = {}  # array -> recomputed to serve (node, direction)
            for j, (c, y_c) in enumerate(zip(cands, y)):
                model += y_c <= x[c.key]
                objective.append(problem.weight(node, direction) * c.query_cost[direction] * y_c)
                closure = problem.recomputed(c.reads)
                for name in closure:
                    if name not in u:
                        u[name] = model.add_variable(f"u{i}_{direction}_{len(u)}", 0)
                        share = c.share(direction)
                        objective.append(problem.weight(node, direction) * share * arrays[name].seconds * u[name])
                for name in c.reads:
                    model += u[name] >= y_c - z[name]
                for name in closure:
                    for b in arrays[name].inputs:
                        model += u[b] >= u[name] - z[b]
    for name, limit in (("disk", problem.max_disk), ("runtime", problem.max_runtime)):
        if limit is not None:  # scaled so the right-hand side is 1 (or 0)
            used = pulp.lpSum(getattr(c, name) / (limit or 1.0) * x[c.key] for c in flat) + \
                pulp.lpSum(getattr(arrays[a], name) / (limit or 1.0) * v for a, v in z.items() if not isinstance(v, int))
            model += used <= (1 if limit else 0)
    model += pulp.lpSum(objective)
    with warnings.catch_warnings():  # pulp 3.3 announces PULP_CBC_CMD's removal in pulp 4
        warnings.filterwarnings("ignore", "PULP_CBC_CMD is deprecated", DeprecationWarning)
        solver = pulp.PULP_CBC_CMD(msg=False)
    try:
        model.solve(solver)
    except pulp.PulpSolverError:
        return None
    if model.status != pulp.LpStatusOptimal:
        return None
    chosen = {
        node: tuple(sorted(c.strategy for c in cands if (x[c.key].value() or 0.0) > 0.5))
        for node, cands in survivors.items()
    }  # a variable in no constraint nor the objective has no value (CBC leaves it out): not chosen
    return chosen, tuple(sorted(a for a, v in z.items() if not isinstance(v, int) and (v.value() or 0.0) > 0.5))


def _enumerate(problem: Problem, survivors: Survivors) -> Found | None:
    options = {
        node: _Options(problem, node, _subsets(cands, problem.pinned.get(node, ())))
        for node, cands in survivors.items()
    }
    flat = [c for cands in survivors.values() for c in cands]
    storable = [a for a in problem.recomputed({r for c in flat for r in c.reads}) if problem.array(a).storable]
    best: tuple[float, Choice, tuple[str, ...]] | None = None
    for k in range(len(storable) + 1):  # every set of arrays stored, then every choice of strategies
        for stored in itertools.combinations(storable, k):
            found = _enumerate_choices(problem, options, stored)
            if found is not None and (best is None or found[0] < best[0]):
                best = (found[0], found[1], tuple(sorted(stored)))
    return None if best is None else (best[1], best[2])


class _Options:
    """One node's subsets of candidates as `_enumerate` tries them, with what does not depend on
    the arrays stored worked out once: which candidates each holds, and its disk, runtime and
    penalty (summed member by member, as `_node_cost` sums them)."""

    def __init__(self, problem: Problem, node: str, subsets: list[tuple[Candidate, ...]]):
        self.node, self.subsets = node, subsets
        self.cands = list({c.key: c for s in subsets for c in s}.values())
        where = {c.key: k for k, c in enumerate(self.cands)}
        self.member = np.zeros((len(subsets), len(self.cands)), bool)
        for i, s in enumerate(subsets):
            self.member[i, [where[c.key] for c in s]] = True
        self.penalty = np.array([sum(c.disk + problem.beta * c.runtime for c in s) for s in subsets], float)
        self.disk = np.array([sum(c.disk for c in s) for s in subsets], float)
        self.runtime = np.array([sum(c.runtime for c in s) for s in subsets], float)

    def costs(self, problem: Problem, stored: tuple[str, ...]) -> np.ndarray:
        """`_node_cost` of every subset with ``stored`` kept: per queried direction the cheapest
        member's query cost (re-reads included), weighted, plus the penalty."""
        query = np.zeros(len(self.subsets))
        if not self.subsets:  # no candidate survived: no choice
            return query
        for d in problem.queried(self.node):
            quoted = np.array([c.query_cost[d] + problem.reread_cost(c, d, stored) for c in self.cands])
            query = query + problem.weight(self.node, d) * np.where(self.member, quoted, np.inf).min(axis=1)
        return query + problem.epsilon * self.penalty


def _enumerate_choices(problem: Problem, options: dict[str, _Options],
                       stored: tuple[str, ...]) -> tuple[float, Choice] | None:
    arrays = [problem.array(a) for a in stored]
    cost = np.full(1, problem.epsilon * sum(a.disk + problem.beta * a.runtime for a in arrays))
    disk, runtime = np.full(1, sum(a.disk for a in arrays)), np.full(1, sum(a.runtime for a in arrays))
    for node, option in options.items():  # totals of every combination, first node slowest
        cost = np.add.outer(cost, option.costs(problem, stored)).ravel()
        disk = np.add.outer(disk, option.disk).ravel()
        runtime = np.add.outer(runtime, option.runtime).ravel()
    feasible = np.ones(cost.shape, dtype=bool)
    for totals, limit in ((disk, problem.max_disk), (runtime, problem.max_runtime)):
        if limit is not None:
            feasible &= totals <= limit
    if not feasible.any():
        return None
    best = np.flatnonzero(feasible)[np.argmin(cost[feasible])]
    index = np.unravel_index(best, [len(o.subsets) for o in options.values()])
    return float(cost[best]), {
        node: tuple(sorted(c.strategy for c in option.subsets[i]))
        for (node, option), i in zip(options.items(), index)
    }


def _subsets(cands: list[Candidate], pins: tuple[Strategy, ...]) -> list[tuple[Candidate, ...]]:
    sizes = range(1, len(cands) + 1)
    every = itertools.chain.from_iterable(itertools.combinations(cands, k) for k in sizes)
    return [s for s in every if set(pins) <= {c.strategy for c in s}]


def _fallback(problem: Problem) -> Choice:
    chosen = {}
    for node, cands in problem.nodes().items():
        maps = {c.strategy for c in cands if c.mapping}
        chosen[node] = tuple(sorted({BLACKBOX, *problem.pinned.get(node, ()), *maps}))
    return chosen


# -- costs and reasons --------------------------------------------------------


def _picked(problem: Problem, chosen: Mapping[str, Iterable[Strategy | str]]) -> Survivors:
    table = {c.key: c for c in problem.candidates}
    nodes = problem.nodes()
    unknown = sorted(set(chosen) - set(nodes))
    if unknown:
        raise WorkflowError(f"chosen names unknown nodes {unknown}; nodes are {sorted(nodes)}")
    picked = {}
    for node, cands in nodes.items():
        strategies = [Strategy.parse(s) for s in chosen.get(node, ())]
        if not strategies or any((node, s) not in table for s in strategies):
            raise WorkflowError(
                f"chosen[{node!r}] = {[s.name for s in strategies]}: expected a non-empty subset of "
                f"{[c.strategy.name for c in cands]}"
            )
        picked[node] = [table[(node, s)] for s in strategies]
    return picked


def _node_cost(problem: Problem, node: str, picked: Sequence[Candidate], stored: Collection[str] = ()) -> float:
    best = {d: min(c.query_cost[d] + problem.reread_cost(c, d, stored) for c in picked) for d in problem.queried(node)}
    query = sum(problem.weight(node, d) * q for d, q in best.items())
    return query + problem.epsilon * sum(c.disk + problem.beta * c.runtime for c in picked)


def _reason(
    problem: Problem, picked: list[Candidate], totals: dict[str, float], unbudgeted: list[Candidate],
    stored: Collection[str] = (),
) -> str:
    node = picked[0].node
    directions = problem.queried(node)
    if node in problem.pinned:
        return "pinned"
    if any(c.mapping for c in picked):
        return "mapping"
    if not directions:
        return "not queried by the workload"

    def query(c: Candidate, d: Direction) -> float:
        return c.query_cost[d] + problem.reread_cost(c, d, stored)

    best = {d: min(unbudgeted, key=lambda c: query(c, d)) for d in directions}
    if all(min(query(c, d) for c in picked) <= query(best[d], d) for d in directions):
        return "cheapest expected query cost"
    chosen = {c.key for c in picked}
    missing = {c.key: c for c in best.values() if c.key not in chosen}.values()
    for name, limit in (("disk", problem.max_disk), ("runtime", problem.max_runtime)):
        if limit is not None and totals[name] + sum(getattr(c, name) for c in missing) > limit:
            only_blackbox = [c.strategy for c in picked] == [BLACKBOX]
            return "only BlackBox fits the budget" if only_blackbox else "budget binding"
    return "disk/runtime penalty (epsilon) outweighs the query gain"


def _array_reasons(problem: Problem, picked: Survivors, stored: Collection[str],
                   totals: dict[str, float]) -> dict[str, str]:
    """Why each storable array of the problem is stored or not, under the chosen plan."""
    saves: dict[str, float] = {}  # array -> expected query seconds storing it saves (the others as chosen)
    readers: dict[str, set[str]] = {}
    for node, cands in picked.items():
        for d in problem.queried(node):
            serving = _cheapest(problem, cands, d, stored)
            for a in problem.recomputed(serving.reads):
                without = set(stored) - {a}
                gain = problem.reread_cost(serving, d, without) - problem.reread_cost(serving, d, set(without) | {a})
                if gain > 0:
                    saves[a] = saves.get(a, 0.0) + problem.weight(node, d) * gain
                    readers.setdefault(a, set()).add(node)
    out = {}
    for array in problem.arrays:
        if not array.storable:
            continue
        name, nbytes = array.node, array.disk
        who = ", ".join(sorted(readers.get(name, ()))) or "no query of the workload"
        gain = saves.get(name, 0.0)
        if name in stored:
            out[name] = (f"stored: the optimizer's choice: re-running {who} would recompute it, "
                         f"{gain:.3g} s of expected query time, more than its {nbytes:.3g} bytes cost")
        elif gain <= 0:
            out[name] = f"not stored: the optimizer's choice: {who} recomputes it at query time"
        elif problem.max_disk is not None and totals["disk"] + nbytes > problem.max_disk:
            out[name] = (f"not stored: its {nbytes:.3g} bytes do not fit in the disk budget left; "
                         f"queries through {who} recompute it ({gain:.3g} s of expected query time)")
        else:
            out[name] = (f"not stored: the optimizer's choice: recomputing it for {who} ({gain:.3g} s of "
                         f"expected query time) costs less than storing its {nbytes:.3g} bytes")
    return out

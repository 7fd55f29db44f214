"""The perturbation oracle: checks that stored lineage names every input cell an output depends on.

Lineage in subzero means *dependence*: output cell ``o`` depends on input cell ``c`` when
changing the value of ``c`` alone can change the value of ``o`` (or remove ``o``).  The
oracle tests that claim the way a new user would, without trusting any lineage code: it
changes one input cell at a time in several ways (`KINDS`: a tiny step, +-5 sigma, a
spike, NaN, zero), re-runs the plain computation (each operator's ``run`` with lineage
switched off, or a reference function such as the numpy/scipy/astroscrappy call), and
compares every output cell with the unperturbed run.  Then, through the public query API
of a run that stored lineage:

- every output cell that changed must be in ``run.forward(source, [c], to=target)``, and
  ``c`` must be in ``run.backward(target, [o], to=source)`` (checked on a sample of the
  changed cells); a changed cell that is not is a **miss**: the lineage is unsound;
- lineage cells that no perturbation changed are **extras**, reported as information
  (a perturbation may simply not have hit the value that matters, e.g. a median).

Output cells are compared by identity.  A cell's identity is its position, except for
operators that define ``output_identity(*inputs)`` (the selections, in their default
``lineage="source"`` reading): an int64 key per output cell naming the input cell it
copies, so a row that moves up because an earlier row was dropped is the same cell, and a
dropped row is a removed cell.  Through a workflow, such an output is re-aligned to the
unperturbed layout before the operators below it run (a removed cell becomes NaN, a row
kept only in the perturbed run is left out), so positions downstream stay comparable.

A re-run that raises (the operator refuses the perturbed value, e.g. a NaN index) counts
as *rejected*, not as a change.

Examples
--------
>>> import numpy as np
>>> from subzero import operators as ops
>>> report = check_operator(ops.MedianFilter(3), [np.arange(36.0).reshape(6, 6)], tile_shape=4)
>>> report.ok, report.misses
(True, [])
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, cast

import numpy as np

from subzero.errors import LineageError, WorkflowError
from subzero.operator import Operator
from subzero.dag import Workflow

if TYPE_CHECKING:
    from subzero.run import Run

__all__ = ["KINDS", "Miss", "OracleReport", "check_operator", "check_workflow", "evaluate_operator", "run_plain",
           "evaluate_workflow", "perturbations"]

#: the ways one input cell is changed: x + a tiny step, x +- 5 standard deviations of the
#: input, x + a spike of 1000 standard deviations, NaN, zero (booleans are flipped instead)
KINDS = ("tiny", "+5sigma", "-5sigma", "spike", "nan", "zero")
_RTOL, _ATOL = 1e-9, 1e-12
_KEEP_MISSES = 50


# =====================================================================================
# Plain re-execution: an operator's run with lineage switched off
# =====================================================================================
class _PlainContext:
    """The ``ctx`` of a plain run: no modes, writes ignored, whole arrays."""

    modes: frozenset = frozenset()

    def __init__(self, input_shapes, output_shape):
        self.input_boxes = tuple(tuple((0, int(n)) for n in s) for s in input_shapes)
        self.tile_box = None if output_shape is None else tuple((0, int(n)) for n in output_shape)

    def lwrite(self, *args, **kwargs) -> None:
        return None

    def lwrite_many(self, *args, **kwargs) -> None:
        return None


def _bound(op: Operator, arrays: Sequence[np.ndarray]) -> Operator:
    """A copy of ``op`` bound to the shapes of ``arrays``, as the runtime binds it."""
    shapes = tuple(tuple(int(n) for n in np.shape(a)) for a in arrays)
    return op.bound(shapes, op.infer_output_shape(shapes))


def evaluate_operator(op: Operator, arrays: Sequence[np.ndarray], bound: bool = False,
                      out: np.ndarray | None = None) -> np.ndarray:
    """The output of ``op`` on whole ``arrays``, computed by its ``run`` with no lineage;
    ``bound``: ``op`` is bound to the shapes of ``arrays`` and its output already (`Operator.bound`);
    ``out``: computed into that array by `Operator.run_into` (an operator that `Operator.fills_out`;
    ``out`` has the output's shape and the dtype ``run`` gives, and may be one of ``arrays``).

    Examples
    --------
    >>> from subzero import operators as ops
    >>> evaluate_operator(ops.AddScalar(1.0), [np.zeros(2)]).tolist()
    [1.0, 1.0]
    """
    ready = op if bound else _bound(op, arrays)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return run_plain(ready, arrays, out)


def run_plain(op: Operator, arrays: Sequence[np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
    """`evaluate_operator` of an operator bound to the shapes of ``arrays`` and its output, with
    numpy's error state and warnings as the caller set them (a caller evaluating many steps sets
    them once); ``out`` as there.

    Examples
    --------
    >>> from subzero import operators as ops
    >>> run_plain(ops.AddScalar(1.0).bound([(2,)], (2,)), [np.zeros(2)]).tolist()
    [1.0, 1.0]
    """
    ctx = _PlainContext(op.input_shapes, op.output_shape)
    return np.asarray(op.run(ctx, *arrays) if out is None else op.run_into(cast(Any, ctx), out, *arrays))


class _Rejected(Exception):
    """An operator (or reference) raised on perturbed inputs: the value was refused."""


def _rerun(fn: Callable[..., np.ndarray], *args) -> np.ndarray:
    """``fn(*args)``, any exception it raises turned into `_Rejected` (the oracle's own
    errors are not caught by that name, so they surface)."""
    try:
        return fn(*args)
    except Exception as exc:
        raise _Rejected(f"{type(exc).__name__}: {exc}") from exc


def _identity(op: Operator, arrays: Sequence[np.ndarray]) -> np.ndarray | None:
    """The operator's output identity keys on ``arrays`` (None: cells are their positions)."""
    fn = getattr(op, "output_identity", None)
    if fn is None:
        return None
    bound = _bound(op, arrays)
    with np.errstate(all="ignore"):
        keys = bound.output_identity(*arrays)
    return None if keys is None else np.asarray(keys, np.int64)


def _align(base_keys: np.ndarray, keys: np.ndarray, values: np.ndarray,
           fill: np.ndarray | None = None) -> np.ndarray:
    """``values`` (keyed by ``keys``) laid out like the unperturbed output (keyed by
    ``base_keys``): a cell whose key vanished becomes NaN (or its value in ``fill``); cells
    with new keys are left out."""
    flat_keys, flat_values = keys.reshape(-1), np.asarray(values).reshape(-1)
    order = np.argsort(flat_keys, kind="stable")
    sorted_keys = flat_keys[order]
    want = base_keys.reshape(-1)
    at = np.minimum(np.searchsorted(sorted_keys, want), max(len(sorted_keys) - 1, 0))
    found = (sorted_keys[at] == want) if len(sorted_keys) else np.zeros(len(want), bool)
    if fill is not None:
        out = np.array(fill, dtype=np.result_type(flat_values.dtype, np.asarray(fill).dtype)).reshape(-1)
    else:
        dtype = np.result_type(flat_values.dtype, np.float64) if not found.all() else flat_values.dtype
        out = np.full(len(want), np.nan, dtype=dtype)
    if len(sorted_keys):
        out[found] = flat_values[order[at[found]]]
    return out.reshape(base_keys.shape)


def evaluate_workflow(wf: Workflow, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every node's output, computed by plain re-execution in topological order."""
    return _Evaluator(wf, inputs).base


class _Evaluator:
    """Plain evaluation of a workflow, re-running only the nodes below a changed input."""

    def __init__(self, wf: Workflow, inputs: dict[str, np.ndarray]):
        inputs = {**wf.constants, **inputs}  # the arrays a traced function captured
        self.wf = wf
        self.base: dict[str, np.ndarray] = {}
        self.keys: dict[str, np.ndarray | None] = {}
        for node in wf.nodes:
            if node.is_input:
                self.base[node.name] = np.asarray(inputs[node.name])
                continue
            arrays = [self.base[n.name] for n in node.inputs]
            self.base[node.name] = evaluate_operator(node.operator, arrays)
            self.keys[node.name] = _identity(node.operator, arrays)

    def perturbed(self, source: str, array: np.ndarray, targets: Sequence[str]) -> dict[str, np.ndarray]:
        """The ``targets``' outputs with input ``source`` replaced by ``array``.

        A cell that a selection dropped is NaN for the operators below it; if one of them
        refuses the NaN, the run is repeated with the dropped cells at their unperturbed
        values (the drop itself is then compared at the selection only)."""
        try:
            return self._perturbed(source, array, targets, refill=False)
        except _Rejected:
            if not any(k is not None for k in self.keys.values()):
                raise
            return self._perturbed(source, array, targets, refill=True)

    def _perturbed(self, source: str, array: np.ndarray, targets: Sequence[str], refill: bool) -> dict[str, np.ndarray]:
        wf = self.wf
        below = wf.descendants(wf.node(source))
        needed = set()
        for t in targets:
            node = wf.node(t)
            needed |= {n for n in wf.ancestors(node) | {node} if n in below}
        values, shown = {source: array}, {}
        for node in wf.nodes:
            if node.is_input or node not in needed:
                continue
            arrays = [values.get(n.name, self.base[n.name]) for n in node.inputs]
            out = _rerun(evaluate_operator, node.operator, arrays)
            base_keys = self.keys[node.name]
            if base_keys is not None:
                keys = _rerun(_identity, node.operator, arrays)
                shown[node.name] = _align(base_keys, keys, out)
                out = _align(base_keys, keys, out, fill=self.base[node.name]) if refill else shown[node.name]
            values[node.name] = out
        return {t: shown.get(t, values.get(t, self.base[t])) for t in targets}


# =====================================================================================
# Perturbations and comparison
# =====================================================================================
def _scale(x: np.ndarray) -> float:
    """The standard deviation of the finite values of ``x`` (1 when there is none)."""
    values = np.asarray(x, np.float64)
    values = values[np.isfinite(values)]
    sigma = float(values.std()) if values.size else 0.0
    if sigma > 0:
        return sigma
    peak = float(np.abs(values).max()) if values.size else 0.0
    return peak if peak > 0 else 1.0


def perturbations(x: np.ndarray, index: int, kinds: Sequence[str] = KINDS,
                  scale: float | None = None) -> Iterator[tuple[str, np.ndarray]]:
    """Yield ``(kind, copy of x with flat cell index changed)`` for each kind that changes it.

    Floats: ``tiny`` adds ``1e-6 * max(|x|, sigma)``, ``+5sigma``/``-5sigma`` add or subtract
    five standard deviations of ``x``, ``spike`` adds 1000 of them, ``nan`` and ``zero`` set
    the value.  Integers take the steps rounded (at least 1) and clipped to their dtype;
    booleans are flipped once, whatever ``kinds`` says.

    Examples
    --------
    >>> [k for k, _ in perturbations(np.array([1.0, 2.0]), 0)]
    ['tiny', '+5sigma', '-5sigma', 'spike', 'nan', 'zero']
    """
    x = np.asarray(x)
    sigma = _scale(x) if scale is None else float(scale)
    old = x.reshape(-1)[index]
    if x.dtype == bool:
        y = x.copy()
        y.reshape(-1)[index] = not old
        yield "flip", y
        return
    for kind in kinds:
        if x.dtype.kind in "iu":
            step = {"tiny": 1, "+5sigma": max(1, round(5 * sigma)), "-5sigma": -max(1, round(5 * sigma)),
                    "spike": max(1, round(1000 * sigma))}
            if kind == "zero":
                new = 0
            elif kind in step:
                info = np.iinfo(x.dtype)
                new = int(np.clip(int(old) + step[kind], info.min, info.max))
            else:
                continue
        else:
            mag = float(np.abs(old)) if np.isfinite(old) else 0.0
            new = {"tiny": old + 1e-6 * max(mag, sigma), "+5sigma": old + 5 * sigma, "-5sigma": old - 5 * sigma,
                   "spike": old + 1000 * sigma, "nan": np.nan, "zero": 0.0}.get(kind)
            if new is None:
                raise LineageError(f"unknown perturbation kind {kind!r}; choose from {', '.join(KINDS)}")
        y = x.copy()
        y.reshape(-1)[index] = new
        after = y.reshape(-1)[index]
        if after == old or (x.dtype.kind in "fc" and np.isnan(after) and np.isnan(old)):
            continue
        yield kind, y


def _same(a: np.ndarray, b: np.ndarray, scale: float) -> np.ndarray:
    """Elementwise: are ``a`` and ``b`` the same value (floats within rounding, NaN == NaN)."""
    if a.dtype.kind in "fc" or b.dtype.kind in "fc":
        a, b = a.astype(np.float64), b.astype(np.float64)
        with np.errstate(invalid="ignore"):
            return np.isclose(a, b, rtol=_RTOL, atol=_ATOL * scale, equal_nan=True)
    return a == b


def _changed(base: np.ndarray, new: np.ndarray) -> np.ndarray:
    """A mask over ``base``: cells whose value differs in ``new`` or that ``new`` lacks."""
    base, new = np.asarray(base), np.asarray(new)
    finite = np.abs(base[np.isfinite(base)]) if base.dtype.kind in "fc" else np.abs(base.astype(np.float64))
    scale = max(float(finite.max()) if finite.size else 1.0, 1.0)
    if base.shape == new.shape:
        return ~_same(base, new, scale)
    if base.ndim != new.ndim:
        return np.ones(base.shape, bool)
    common = tuple(slice(0, min(a, b)) for a, b in zip(base.shape, new.shape))
    changed = np.ones(base.shape, bool)
    changed[common] = ~_same(base[common], new[common], scale)
    return changed


# =====================================================================================
# Reports
# =====================================================================================
@dataclass(frozen=True)
class Miss:
    """Output cells that changed when ``cell`` of ``source`` changed (``kinds``), although
    the lineage (``direction``: which query was asked) does not connect them."""

    source: str
    cell: tuple[int, ...]
    target: str
    direction: str
    kinds: tuple[str, ...]
    outputs: tuple[tuple[int, ...], ...]
    count: int

    def __str__(self) -> str:
        more = f" (+{self.count - len(self.outputs)} more)" if self.count > len(self.outputs) else ""
        return (f"{self.source}{self.cell} ({'/'.join(self.kinds)}) changed {self.target} "
                f"{', '.join(map(str, self.outputs))}{more}, not in its {self.direction} lineage")


@dataclass
class OracleReport:
    """What the oracle found.

    Attributes
    ----------
    subject : str
        The operator or workflow checked.
    cells : int
        Input cells perturbed (summed over sources).
    trials : int
        Re-runs (perturbed cells times the kinds that changed them).
    rejected : int
        Re-runs that raised (the operator refused the perturbed value).
    changed : int
        (input cell, output cell) pairs where the output changed.
    lineage : int
        (input cell, output cell) pairs in the forward lineage of the perturbed cells.
    missed : int
        Changed pairs missing from the lineage (forward and backward checks together).
    extras : int
        Lineage pairs no perturbation changed (information, not an error).
    forward_queries, backward_checked : int
        Lineage queries asked (forward per perturbed cell and target; backward per
        sampled changed cell).
    missed_by_target : dict
        ``missed`` per target node.
    misses : list of Miss
        The first misses, for the report.
    mismatches : list of str
        Targets whose stored output differs from the plain re-run (an inexact tiling).
    """

    subject: str
    cells: int = 0
    trials: int = 0
    rejected: int = 0
    changed: int = 0
    lineage: int = 0
    missed: int = 0
    extras: int = 0
    forward_queries: int = 0
    backward_checked: int = 0
    missed_by_target: dict[str, int] = field(default_factory=dict)
    misses: list[Miss] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no miss was found and every stored output matched the plain run."""
        return self.missed == 0 and not self.mismatches

    def summary(self) -> dict[str, Any]:
        """The counts as a JSON-able dict."""
        return {"subject": self.subject, "cells": self.cells, "trials": self.trials, "rejected": self.rejected,
                "changed_pairs": self.changed, "lineage_pairs": self.lineage, "misses": self.missed,
                "extras": self.extras, "forward_queries": self.forward_queries,
                "backward_queries": self.backward_checked,
                "misses_by_target": dict(self.missed_by_target),
                "output_mismatches": list(self.mismatches), "first_misses": [str(m) for m in self.misses[:5]]}

    def raise_if_unsound(self) -> None:
        """Raise `subzero.LineageError` listing the first misses, if any."""
        if not self.ok:
            raise LineageError(str(self))

    def __str__(self) -> str:
        head = (f"{self.subject}: {self.missed} missed pair(s) over {self.cells} cell(s), {self.trials} re-run(s) "
                f"({self.rejected} rejected); {self.changed} changed pair(s), {self.lineage} lineage pair(s), "
                f"{self.extras} extra(s)")
        lines = [head] + [f"  miss: {m}" for m in self.misses[:10]]
        lines += [f"  stored output differs from the plain re-run: {t}" for t in self.mismatches]
        return "\n".join(lines)


# =====================================================================================
# The oracle
# =====================================================================================
def _sample(shape: tuple[int, ...], cells, rng: np.random.Generator) -> np.ndarray:
    """Flat indices of the cells to perturb: all, a sample of ``cells``, or the coordinates given."""
    size = int(np.prod(shape))
    if cells is None:
        return np.arange(size)
    if isinstance(cells, (int, np.integer)):
        return np.arange(size) if size <= cells else np.sort(rng.choice(size, int(cells), replace=False))
    coords = np.asarray(cells, np.int64).reshape(-1, len(shape))
    return np.ravel_multi_index(tuple(coords.T), shape) if len(coords) else np.empty(0, np.int64)


def _mask(coords: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    mask = np.zeros(shape, bool)
    if len(coords):
        mask[tuple(np.asarray(coords, np.int64).T)] = True
    return mask


def _oracle(report: OracleReport, run, evaluator: Callable[[str, np.ndarray], dict[str, np.ndarray]],
            base: dict[str, np.ndarray], sources: dict[str, np.ndarray], targets: Sequence[str],
            cells, kinds: Sequence[str], usings: Sequence[dict | None], backward: int, seed: int,
            reaches: Callable[[str, str], bool] = lambda source, target: True) -> OracleReport:
    rng = np.random.default_rng(seed)
    for t in targets:
        stored = np.asarray(run.output(t))
        if stored.shape != base[t].shape or _changed(base[t], stored).any():
            report.mismatches.append(t)
    if report.mismatches:
        return report
    for source, x in sources.items():
        chosen = cells.get(source, ()) if isinstance(cells, dict) else cells  # not named: not perturbed
        indices = _sample(x.shape, chosen, rng)
        scale = _scale(x)
        pairs: dict[str, list[tuple[int, np.ndarray]]] = {t: [] for t in targets}
        for index in indices:
            coord = tuple(int(v) for v in np.unravel_index(int(index), x.shape))
            changed = {t: np.zeros(base[t].shape, bool) for t in targets}
            kinds_hit: dict[str, list[np.ndarray]] = {t: [] for t in targets}
            for kind, y in perturbations(x, int(index), kinds, scale):
                report.trials += 1
                try:
                    outs = evaluator(source, y)
                except _Rejected as exc:  # the operator refused the value: not a change
                    report.rejected += 1
                    if len(report.errors) < 5:
                        report.errors.append(f"{source}{coord} {kind}: {exc}")
                    continue
                for t in targets:
                    hit = _changed(base[t], outs[t])
                    changed[t] |= hit
                    kinds_hit[t].append((kind, hit))
            report.cells += 1
            for t in targets:
                report.changed += int(changed[t].sum())
                for using in usings:
                    got = run.forward(source, [coord], to=t, using=using) if reaches(source, t) else []
                    report.forward_queries += bool(reaches(source, t))
                    lineage = _mask(got, base[t].shape)
                    miss = changed[t] & ~lineage
                    report.lineage += int(lineage.sum())
                    report.extras += int((lineage & ~changed[t]).sum())
                    if miss.any():
                        report.missed += int(miss.sum())
                        report.missed_by_target[t] = report.missed_by_target.get(t, 0) + int(miss.sum())
                        if len(report.misses) < _KEEP_MISSES:
                            which = tuple(k for k, hit in kinds_hit[t] if (hit & miss).any())
                            outs_ = tuple(tuple(int(v) for v in c) for c in np.argwhere(miss)[:5])
                            report.misses.append(Miss(source, coord, t, "forward", which, outs_, int(miss.sum())))
                if changed[t].any():
                    pairs[t].append((int(index), np.flatnonzero(changed[t])))
        if backward:
            _check_backward(report, run, source, x.shape, [t for t in targets if reaches(source, t)], base, pairs,
                            usings, backward, rng)
    return report


def _check_backward(report, run, source, shape, targets, base, pairs, usings, budget, rng) -> None:
    """``c`` must be in ``backward(o)`` for changed outputs ``o`` (a sample of ``budget`` per target)."""
    for t in targets:
        if not pairs[t]:
            continue
        sources = np.concatenate([np.full(len(o), c) for c, o in pairs[t]])
        outs = np.concatenate([o for _, o in pairs[t]])
        distinct = np.unique(outs)
        if len(distinct) > budget:
            distinct = np.sort(rng.choice(distinct, budget, replace=False))
        for o in distinct:
            cell = tuple(int(v) for v in np.unravel_index(int(o), base[t].shape))
            needed = sources[outs == o]
            for using in usings:
                got = run.backward(t, [cell], to=source, using=using)
                have = np.ravel_multi_index(tuple(np.asarray(got, np.int64).T), shape) if len(got) else []
                lost = np.setdiff1d(needed, have)
                report.backward_checked += 1
                if len(lost):
                    report.missed += len(lost)
                    report.missed_by_target[t] = report.missed_by_target.get(t, 0) + len(lost)
                    if len(report.misses) < _KEEP_MISSES:
                        for c in lost[:3]:
                            coord = tuple(int(v) for v in np.unravel_index(int(c), shape))
                            report.misses.append(Miss(source, coord, t, "backward", (), (cell,), 1))


def _usings(using, node: str) -> list[dict | None]:
    if using is None:
        return [None]
    if isinstance(using, str):
        return [{node: using}]
    return [{node: u} for u in using]


def check_operator(op: Operator, inputs: Sequence[np.ndarray], *, tile_shape: int | tuple[int, ...] | None = None,
                   strategies: str | Sequence[str] | None = None, using: str | Sequence[str] | None = None,
                   kinds: Sequence[str] = KINDS, cells: int | dict | None = 256, backward: int = 64,
                   reference: Callable[..., np.ndarray] | None = None, seed: int = 0,
                   store: str | Path | None = None) -> OracleReport:
    """Check one operator's lineage against perturbation: the way to test a UDF.

    The operator runs once through the real runtime (``executor="local"``, tiles of
    ``tile_shape``, storing ``strategies``); then each input cell (or a sample of ``cells``
    per input) is perturbed in every way of ``kinds`` and the operator re-run plainly.

    Parameters
    ----------
    op : Operator
        The operator, unbound (as passed to ``wf.add``).
    inputs : sequence of arrays
        Its inputs; keep them small (every cell is perturbed several times).
    tile_shape : int or tuple, optional
        Tiles for the run; make them smaller than the halo so tiles straddle halos.
    strategies : str or list of str, optional
        What the node stores (default: the runtime's choice, ``Map`` or ``BlackBox``).
    using : str or list of str, optional
        Strategies to answer the queries with (each is checked); default: the run's choice.
    kinds : sequence of str
        Perturbations (`KINDS`).
    cells : int, dict or None
        At most this many cells per input (a seeded sample), or ``{"x0": coords or a count}`` (inputs
        not named are not perturbed); None: all.
    backward : int
        Changed output cells per input whose backward lineage is checked too (0: none).
    reference : callable, optional
        ``reference(*inputs) -> output``: the plain library call to re-run instead of
        ``op.run`` (its output must equal the operator's).
    seed : int
        Seeds the sample.
    store : path, optional
        Where to keep the run (default: a temporary directory, deleted afterwards).

    Returns
    -------
    OracleReport
        ``report.ok`` is True when nothing was missed; ``print(report)`` lists misses.

    Examples
    --------
    >>> from subzero import operators as ops
    >>> check_operator(ops.Transpose(), [np.arange(6.0).reshape(2, 3)]).missed
    0
    """
    arrays = [np.asarray(a) for a in inputs]
    names = [f"x{i}" for i in range(len(arrays))]
    wf = Workflow(f"oracle-{type(op).__name__}")
    wf.add(op, *[wf.input(n) for n in names], name="op")
    report = OracleReport(type(op).__name__)

    def evaluate(source: str, array: np.ndarray) -> dict[str, np.ndarray]:
        now = [array if n == source else a for n, a in zip(names, arrays)]
        out = _rerun(reference, *now) if reference is not None else _rerun(evaluate_operator, op, now)
        keys = _rerun(_identity, op, now) if base_keys is not None else None
        return {"op": np.asarray(out) if keys is None else _align(base_keys, keys, out)}

    base_keys = _identity(op, arrays)
    base = {"op": np.asarray(reference(*arrays) if reference is not None else evaluate_operator(op, arrays))}
    pinned = None if strategies is None else {"op": [strategies] if isinstance(strategies, str) else list(strategies)}
    with tempfile.TemporaryDirectory(prefix="subzero-oracle-") as tmp:
        run = wf.run(dict(zip(names, arrays)), store=store or Path(tmp) / "run", strategies=pinned,
                     executor="local", tile_shape=tile_shape)
        return _oracle(report, run, evaluate, base, dict(zip(names, arrays)), ["op"], cells, kinds,
                       _usings(using, "op"), backward, seed)


def check_workflow(run: "Run", wf: Workflow, inputs: dict[str, np.ndarray], *, sources: Sequence[str] | None = None,
                   targets: Sequence[str] | None = None, kinds: Sequence[str] = KINDS,
                   cells: int | dict | None = 64, backward: int = 32, using: dict | None = None,
                   seed: int = 0) -> OracleReport:
    """Check a finished run's lineage, end to end, against perturbation of its inputs.

    Each sampled cell of each source input is perturbed; the workflow is re-run plainly
    (only the nodes below that input); the ``targets``' outputs are compared with the
    stored ones and with ``run.forward(source, [cell], to=target)`` (and, for a sample of
    the changed cells, ``run.backward``).

    Parameters
    ----------
    run : Run
        The run to check (any strategies; ``using`` forces some per node).
    wf, inputs
        The workflow and the inputs it ran on.
    sources, targets : sequence of node names, optional
        Inputs to perturb (default: all) and nodes to compare (default: the outputs).
    cells : int, dict or None
        Cells per source: a seeded sample of this many, ``{source: coords or a count}`` (sources
        not named are not perturbed), or None (all).

    Returns
    -------
    OracleReport
    """
    inputs = {**wf.constants, **inputs}  # the arrays a traced function captured
    sources = list(sources) if sources is not None else [n.name for n in wf.inputs]
    targets = list(targets) if targets is not None else [n.name for n in wf.outputs]
    for name in list(sources) + list(targets):
        wf.node(name)
    for name in sources:
        if not wf.node(name).is_input:
            raise WorkflowError(f"check_workflow: source {name!r} is not an input of workflow {wf.name!r}")
    evaluator = _Evaluator(wf, inputs)
    base = {t: evaluator.base[t] for t in targets}
    report = OracleReport(f"workflow {wf.name!r}")
    arrays = {s: np.asarray(inputs[s]) for s in sources}
    below = {s: {n.name for n in wf.descendants(wf.node(s))} for s in sources}
    return _oracle(report, run, lambda s, a: evaluator.perturbed(s, a, targets), base, arrays, targets,
                   cells, kinds, [using], backward, seed, reaches=lambda s, t: t in below[s])

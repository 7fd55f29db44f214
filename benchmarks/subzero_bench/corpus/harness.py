"""Evaluate one corpus case at one size: does it trace, equal numpy, keep sound lineage, and at what cost.

`evaluate` answers, for a `subzero_bench.corpus.cases.Case`:

- **traced**: did ``@sz.workflow`` trace the function as written (else the exception's class
  and the first line of its message), and did the traced workflow run;
- **values**: are the run's outputs numpy's (the function called eagerly on the same arrays;
  NaN-aware, floats within rounding);
- **oracle**: `subzero.oracle.check_workflow` on the run (perturbation of the inputs through
  subzero's own plain evaluation): missed pairs;
- **eager**: the same perturbations through the ORIGINAL function, eagerly: every output cell
  that changes must be in the traced run's forward lineage of the perturbed cell (a miss is
  unsound lineage);
- **coarse**: the fraction of operator nodes whose lineage is labelled coarse
  (``getattr(op, "coarse", False)``, an operator's ``coarse_reason``, or ``coarse``/``reason`` in
  the node's catalog metadata);
- **cost**: (trace + run) time over the eager numpy time, and the store's bytes over the inputs'.

Only subzero's public API is used (``import subzero as sz``, `subzero.oracle`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

import numpy as np

import subzero as sz
from subzero.oracle import check_workflow, perturbations

__all__ = ["Result", "evaluate", "named_outputs", "eager_check", "short_error", "tilings"]

#: perturbation kinds of the eager check (the oracle's, less the ones that mostly repeat these)
EAGER_KINDS = ("tiny", "+5sigma", "spike", "nan", "zero")


@dataclass
class Result:
    """One case at one size and tiling on one executor (see the module docstring)."""

    case: str
    package: str
    call: str
    domain: str
    size: str
    executor: str
    shapes: dict[str, list[int]]
    cells: int
    tile_shape: list[int] | None
    traced: bool = False
    ran: bool = False
    error: str = ""
    values_equal: bool | None = None
    max_abs_diff: float | None = None
    oracle_misses: int | None = None
    oracle_cells: int = 0
    oracle_mismatches: list[str] = field(default_factory=list)
    eager_misses: int | None = None
    eager_trials: int = 0
    eager_rejected: int = 0
    nodes: int = 0
    coarse_nodes: int = 0
    numpy_seconds: float | None = None
    trace_seconds: float | None = None
    run_seconds: float | None = None
    store_bytes: int | None = None
    input_bytes: int = 0
    first_misses: list[str] = field(default_factory=list)

    @property
    def coarse_fraction(self) -> float | None:
        """Coarse operator nodes over all operator nodes (None when nothing ran)."""
        return self.coarse_nodes / self.nodes if self.nodes else None

    @property
    def time_ratio(self) -> float | None:
        """(trace + run) seconds over the eager numpy seconds."""
        if self.run_seconds is None or not self.numpy_seconds:
            return None
        return ((self.trace_seconds or 0.0) + self.run_seconds) / self.numpy_seconds

    @property
    def store_ratio(self) -> float | None:
        """Store bytes over input bytes."""
        return self.store_bytes / self.input_bytes if self.store_bytes is not None and self.input_bytes else None

    @property
    def ok(self) -> bool:
        """Traced, ran, numpy's values, no oracle miss and no eager miss."""
        return bool(self.ran and self.values_equal and self.oracle_misses == 0 and self.eager_misses == 0
                    and not self.oracle_mismatches)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (with the derived ratios)."""
        data = asdict(self)
        data.update(coarse_fraction=self.coarse_fraction, time_ratio=self.time_ratio, store_ratio=self.store_ratio,
                    ok=self.ok)
        return data


# =====================================================================================
# Helpers
# =====================================================================================
def short_error(exc: BaseException) -> str:
    """``Class: first line of the message``, library paths cut to the package (``astropy/...``)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = text.replace(os.getcwd() + os.sep, "")
    marker = "site-packages" + os.sep
    while marker in text:
        start = text.rfind(" ", 0, text.index(marker)) + 1
        text = text[:start] + text[text.index(marker) + len(marker):]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def named_outputs(result: Any) -> dict[str, np.ndarray]:
    """A function's return value as ``{output name: array}``, named as ``@sz.workflow`` names
    them (a dict's keys; ``out`` for one value; ``out0``, ``out1``... for a tuple)."""
    if isinstance(result, Mapping):
        items = list(result.items())
    elif isinstance(result, (tuple, list)):
        items = [(f"out{k}", v) for k, v in enumerate(result)]
    else:
        items = [("out", result)]
    return {str(k): _values(v) for k, v in items}


def _values(value: Any) -> np.ndarray:
    if isinstance(value, np.ma.MaskedArray):
        return np.ma.filled(value.astype(np.float64), np.nan)
    for attr in ("to_numpy", "values"):
        if hasattr(value, attr) and not isinstance(value, np.ndarray):
            got = getattr(value, attr)
            return np.asarray(got() if callable(got) else got)
    return np.asarray(value)


def _scale(a: np.ndarray) -> float:
    if a.dtype.kind not in "fc":
        return 1.0
    finite = np.abs(a[np.isfinite(a)])
    return max(float(finite.max()) if finite.size else 1.0, 1.0)


def _differs(base: np.ndarray, new: np.ndarray, rtol: float = 1e-9) -> np.ndarray:
    """Flat mask of the cells of ``base`` whose value ``new`` changed (NaN == NaN)."""
    base, new = np.asarray(base).reshape(-1), np.asarray(new).reshape(-1)
    if base.shape != new.shape:
        return np.ones(base.shape, bool)
    if base.dtype.kind in "fc" or new.dtype.kind in "fc":
        with np.errstate(invalid="ignore"):
            return ~np.isclose(base.astype(np.float64), new.astype(np.float64), rtol=rtol,
                               atol=1e-12 * _scale(base), equal_nan=True)
    return base != new


def _compare(eager: np.ndarray, traced: np.ndarray) -> tuple[bool, float]:
    """Are the run's values numpy's (floats within 1e-7 relative, NaN where numpy has NaN)?"""
    if traced.size != eager.size:
        return False, float("inf")
    traced = traced.reshape(eager.shape)
    if eager.dtype.kind not in "fc" and traced.dtype.kind not in "fc":
        return bool(np.array_equal(eager, traced)), float(np.abs(eager.astype(np.float64) -
                                                                 traced.astype(np.float64)).max(initial=0.0))
    a, b = eager.astype(np.float64), traced.astype(np.float64)
    same_nan = bool(np.array_equal(np.isnan(a), np.isnan(b)))
    finite = np.isfinite(a) & np.isfinite(b)
    diff = float(np.abs(a[finite] - b[finite]).max(initial=0.0))
    close = bool(np.allclose(a, b, rtol=1e-7, atol=1e-12 * _scale(a), equal_nan=True))
    return close and same_nan, diff


def _store_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


def _coarse(run: Any, node: Any) -> bool:
    op = node.operator
    if getattr(op, "coarse", False) or getattr(op, "coarse_reason", None):
        return True
    try:
        metadata = run.node_record(node.name).metadata or {}
    except Exception:  # noqa: BLE001 - a store without the record has no label either
        return False
    return bool(metadata.get("coarse") or metadata.get("reason"))


def tilings(shape: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    """Two tile shapes for ``shape``: ``whole`` (one tile) and ``split`` (about a third of
    every axis longer than 8, so tiles meet inside the array and the last ones are short)."""
    split = tuple(n if n <= 8 else -(-n // 3) for n in shape)
    return {"whole": tuple(shape), "split": split}


# =====================================================================================
# The eager perturbation check
# =====================================================================================
def eager_check(fn: Any, inputs: dict[str, np.ndarray], run: Any, outputs: dict[str, np.ndarray],
                cells: int, seed: int = 0, kinds: tuple[str, ...] = EAGER_KINDS) -> tuple[int, int, int, list[str]]:
    """Perturb ``cells`` sampled cells of each input, call the ORIGINAL function ``fn`` eagerly,
    and check that every output cell that changed is in ``run.forward(input, [cell], to=output)``.

    Returns
    -------
    (misses, trials, rejected, first misses)
        Changed (input cell, output cell) pairs outside the forward lineage; eager calls made;
        calls the function refused (raised on the perturbed value); up to 5 misses, described.
    """
    rng = np.random.default_rng(seed)
    misses = trials = rejected = 0
    described: list[str] = []
    for source, x in inputs.items():
        x = np.asarray(x)
        picks = rng.choice(x.size, size=min(cells, x.size), replace=False)
        for index in np.sort(picks):
            coord = tuple(int(v) for v in np.unravel_index(int(index), x.shape))
            changed = {name: np.zeros(v.size, bool) for name, v in outputs.items()}
            for _, y in perturbations(x, int(index), kinds):
                trials += 1
                try:
                    with warnings.catch_warnings(), np.errstate(all="ignore"):
                        warnings.simplefilter("ignore")
                        outs = named_outputs(fn(**{**inputs, source: y}))
                except Exception:  # noqa: BLE001 - the function refused the value: not a change
                    rejected += 1
                    continue
                for name, base in outputs.items():
                    changed[name] |= _differs(base, outs[name])
            for name, hit in changed.items():
                if not hit.any():
                    continue
                got = np.asarray(run.forward(source, [coord], to=name))
                lineage = np.zeros(hit.size, bool)
                if got.size:
                    shape = tuple(run.shape(name))
                    lineage[np.ravel_multi_index(tuple(got.reshape(-1, len(shape)).T), shape)] = True
                miss = hit & ~lineage
                if miss.any():
                    misses += int(miss.sum())
                    if len(described) < 5:
                        described.append(f"{source}{coord} changed {name} flat cells "
                                         f"{np.flatnonzero(miss)[:5].tolist()} ({int(miss.sum())}), not in its "
                                         "forward lineage")
    return misses, trials, rejected, described


# =====================================================================================
# One case
# =====================================================================================
def _timed_numpy(fn: Any, inputs: dict[str, np.ndarray], repeat: int) -> tuple[Any, float]:
    best, result = float("inf"), None
    for _ in range(max(1, repeat)):
        started = time.perf_counter()
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            result = fn(**inputs)
        best = min(best, time.perf_counter() - started)
    return result, best


def evaluate(case: Any, size: str, *, executor: str = "local", tile_shape: tuple[int, ...] | None = None,
             oracle_cells: int = 16, eager_cells: int = 16, seed: int = 0, repeat: int = 3,
             workdir: str | None = None, spark: Any = None) -> Result:
    """Evaluate ``case`` (a `Case`) at ``size`` on ``executor`` (see the module docstring).

    Parameters
    ----------
    case : Case
        The corpus entry.
    size : str
        ``"tiny"``, ``"small"`` or ``"large"``.
    executor : {"local", "spark"}
        Where the traced workflow runs.
    tile_shape : tuple, optional
        ``Workflow.run``'s tile shape (default: subzero's).
    oracle_cells, eager_cells : int
        Input cells perturbed per input by `check_workflow` and by the eager check.
    repeat : int
        Eager numpy calls timed (the best counts).
    workdir : str, optional
        Where the run's store goes (a temporary directory, removed after, by default).
    spark : SparkSession, optional
        The session for ``executor="spark"``.

    Returns
    -------
    Result
    """
    inputs = case.inputs(size, seed)
    result = Result(case.name, case.package, case.call, case.domain, size, executor,
                    {k: list(v.shape) for k, v in inputs.items()}, int(sum(v.size for v in inputs.values())),
                    list(tile_shape) if tile_shape is not None else None,
                    input_bytes=int(sum(v.nbytes for v in inputs.values())))
    try:
        eager, result.numpy_seconds = _timed_numpy(case.workflow, inputs, repeat)
        outputs = named_outputs(eager)
    except Exception as exc:  # noqa: BLE001 - a case numpy itself cannot run is a broken case
        result.error = f"numpy: {short_error(exc)}"
        return result
    try:
        started = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            wf = sz.workflow(case.workflow.fn, name=case.workflow.name).trace(inputs)  # a fresh trace, not cached
        result.trace_seconds = time.perf_counter() - started
    except Exception as exc:  # noqa: BLE001 - what the tracer refused is the measurement
        result.error = short_error(exc)
        return result
    result.traced = True
    base = workdir or tempfile.mkdtemp(prefix=f"corpus-{case.name}-")
    store = os.path.join(base, f"{case.name}-{size}-{executor}")
    try:
        started = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run = wf.run(inputs, store=store, executor=executor, tile_shape=tile_shape, spark=spark,
                         overwrite=True)
        result.run_seconds = time.perf_counter() - started
        result.ran = True
        if tile_shape is None:  # subzero's default: the first output's tiles, as the run chose them
            chosen = run.node_record(next(iter(outputs))).tile_shape
            result.tile_shape = list(chosen) if chosen is not None else None
        result.store_bytes = _store_bytes(store)
        operators = [n for n in wf.nodes if not n.is_input]
        result.nodes = len(operators)
        result.coarse_nodes = sum(_coarse(run, n) for n in operators)
        equal, worst = True, 0.0
        for name, expected in outputs.items():
            same, diff = _compare(expected, np.asarray(run.output(name)))
            equal, worst = equal and same, max(worst, diff)
        result.values_equal, result.max_abs_diff = equal, worst
        report = check_workflow(run, wf, inputs, targets=list(outputs), cells=oracle_cells, backward=8, seed=seed)
        result.oracle_misses, result.oracle_cells = report.missed, report.cells
        result.oracle_mismatches = list(report.mismatches)
        result.first_misses = [str(m) for m in report.misses[:5]]
        misses, trials, rejected, described = eager_check(case.workflow, inputs, run, outputs, eager_cells, seed)
        result.eager_misses, result.eager_trials, result.eager_rejected = misses, trials, rejected
        result.first_misses += described
    except Exception as exc:  # noqa: BLE001 - a traced workflow that fails to run is the measurement
        result.error = ("run: " if not result.ran else "check: ") + short_error(exc)
    finally:
        if workdir is None:
            shutil.rmtree(base, ignore_errors=True)
    return result

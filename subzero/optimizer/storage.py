"""Whether an intermediate array is stored: what recomputing an unstored array costs a query.

A query step that re-runs a node (BlackBox, or a whole-array step) reads the node's inputs;
an input the run did not store is recomputed from its nearest stored ancestors, and so are
its own unstored inputs, recursively.  This module describes the run's unstored arrays to
the optimizer (`array_choices`: one `ArrayChoice` each, as the integer program takes them), prices that
recomputation (`recompute_seconds`) and gives the rule of runs without budgets
(`default_stores`): an array such a step would recompute is stored when recomputing it costs
more than the ``recompute_seconds`` setting.  With budgets the integer program decides
(`subzero.optimizer.plan.build_problem` gives it the arrays).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Collection, Iterable, Mapping, Sequence

from subzero.errors import WorkflowError

__all__ = ["ArrayChoice", "WRITE_SECONDS_PER_BYTE", "array_choices", "recomputed", "recompute_seconds", "default_stores"]

#: seconds writing one byte of an array adds to a run (the cost model's figure for lineage bytes)
WRITE_SECONDS_PER_BYTE = 5e-9


@dataclass(frozen=True)
class ArrayChoice:
    """An intermediate array the run did not store, as the program sees it.

    Parameters
    ----------
    node : str
        The node whose output it is.
    disk : float
        Bytes it takes once stored, >= 0.
    runtime : float
        Seconds writing it adds to the run, >= 0.
    seconds : float
        Seconds recomputing the whole array from its inputs takes (its operator's time), >= 0.
    inputs : tuple of str
        Its inputs the run did not store either (other `ArrayChoice` nodes): recomputing it
        recomputes them, unless they are stored.
    storable : bool
        False when it can no longer be stored (its cells are gone): it stays unstored.

    Examples
    --------
    >>> ArrayChoice("mask", disk=1e6, runtime=0.005, seconds=0.2, inputs=("threshold",)).storable
    True
    """

    node: str
    disk: float
    runtime: float
    seconds: float
    inputs: tuple[str, ...] = ()
    storable: bool = True

    def __post_init__(self) -> None:
        for name in ("disk", "runtime", "seconds"):
            value = getattr(self, name)
            if not (isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
                    and float(value) >= 0):
                raise WorkflowError(f"{name} of array {self.node!r} must be a finite number >= 0, got {value!r}")
            object.__setattr__(self, name, float(value))
        object.__setattr__(self, "inputs", tuple(self.inputs))


def array_choices(inputs: Mapping[str, Sequence[str]], unstored: Mapping[str, float],
                  held: Mapping[str, int], reads: Iterable[str] | None = None) -> dict[str, ArrayChoice]:
    """The run's unstored arrays as the optimizer sees them.

    Parameters
    ----------
    inputs : Mapping[str, Sequence[str]]
        Node name -> the names of its inputs (every node of ``unstored``).
    unstored : Mapping[str, float]
        The committed nodes whose arrays are not stored -> seconds their operator took.
    held : Mapping[str, int]
        The unstored arrays still held in memory (they may be stored now) -> their bytes.
    reads : iterable of str, optional
        Only the arrays reading these recomputes (every unstored array by default).

    Examples
    --------
    >>> a = array_choices({"t": ["x"], "m": ["x", "t"]}, {"t": 0.5, "m": 0.01}, {"m": 1000})
    >>> a["m"].inputs, a["m"].storable, a["t"].storable
    (('t',), True, False)
    """
    names: Iterable[str] = unstored
    if reads is not None:  # the closure of ``reads`` over the unstored arrays
        seen: dict[str, None] = {}
        todo = [r for r in reads if r in unstored]
        while todo:
            name = todo.pop()
            if name not in seen:
                seen[name] = None
                todo.extend(i for i in inputs[name] if i in unstored and i not in seen)
        names = seen
    return {name: ArrayChoice(name, disk=float(held.get(name, 0)),
                              runtime=held.get(name, 0) * WRITE_SECONDS_PER_BYTE, seconds=max(float(unstored[name]), 0.0),
                              inputs=tuple(dict.fromkeys(i for i in inputs[name] if i in unstored)),
                              storable=name in held)
            for name in names}


def recomputed(arrays: Mapping[str, ArrayChoice], reads: Iterable[str], stored: Collection[str] = ()) -> list[str]:
    """The arrays reading ``reads`` recomputes: those of them in ``arrays`` (unstored) and not in
    ``stored``, and their unstored inputs, recursively (each once).

    Examples
    --------
    >>> a = array_choices({"t": [], "m": ["t"]}, {"t": 0.5, "m": 0.01}, {})
    >>> recomputed(a, ["m", "x"]), recomputed(a, ["m"], stored={"t"})
    (['m', 't'], ['m'])
    """
    out: dict[str, None] = {}
    todo = [r for r in reads if r in arrays and r not in stored]
    while todo:
        name = todo.pop()
        if name in out:
            continue
        out[name] = None
        todo.extend(i for i in arrays[name].inputs if i not in stored and i not in out)
    return list(out)


def recompute_seconds(arrays: Mapping[str, ArrayChoice], reads: Iterable[str], stored: Collection[str] = ()) -> float:
    """Seconds recomputing what reading ``reads`` recomputes (`recomputed`) takes, whole arrays."""
    return float(sum(arrays[a].seconds for a in recomputed(arrays, reads, stored)))


def default_stores(arrays: Mapping[str, ArrayChoice], reader: str, reads: Sequence[str], share: float,
                   threshold: float) -> dict[str, str]:
    """The arrays a run without budgets stores for ``reader``, a node whose queries re-run it
    reading ``reads``: while one step's recomputation (``share`` of `recompute_seconds`: the
    tiles it touches) costs more than ``threshold`` seconds, the array still held in memory
    whose storing saves the most seconds per byte is stored.  Returns name -> why.

    Examples
    --------
    >>> a = array_choices({"t": ["c"], "m": ["t"], "c": []}, {"c": 2.0, "t": 0.001, "m": 0.003},
    ...                   {"t": 8, "m": 10**6})
    >>> list(default_stores(a, "g", ["m"], 1.0, 0.05))  # the scalar cuts the chain
    ['t']
    """
    chosen: dict[str, str] = {}
    seconds = share * recompute_seconds(arrays, reads)
    while seconds > threshold:
        options = [a for a in recomputed(arrays, reads, chosen) if arrays[a].storable]
        gains = {a: seconds - share * recompute_seconds(arrays, reads, {*chosen, a}) for a in options}
        best = max(options, key=lambda a: (gains[a] / max(arrays[a].disk, 1.0), gains[a]), default=None)
        if best is None or gains[best] <= 0:
            break
        chosen[best] = (f"stored: a query re-running {reader} would recompute it and its unstored inputs "
                        f"({seconds:.3g} s, over the recompute_seconds setting, {threshold:g} s)")
        seconds -= gains[best]
    return chosen

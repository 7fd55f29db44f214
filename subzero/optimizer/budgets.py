"""Parse the disk and runtime budgets users give to the strategy optimizer.

Both budgets bound lineage *overhead*: the disk budget is the number of bytes
of lineage that may be stored, the runtime budget the number of seconds the
lineage may add to a workflow run.  ``None`` means no budget.

Examples
--------
>>> parse_disk_budget("1.5 KiB", input_bytes=0), parse_disk_budget("2x", input_bytes=8_000_000)
(1536.0, 16000000.0)
>>> parse_runtime_budget("2m", base_seconds=10.0), parse_runtime_budget("1.5x", base_seconds=10.0)
(120.0, 5.0)
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable
from dataclasses import dataclass

from subzero.errors import WorkflowError

__all__ = ["parse_disk_budget", "parse_runtime_budget"]

_DISK_UNITS = {
    "": 1,
    "b": 1,
    **{unit + "b": 1000**power for power, unit in enumerate("kmgt", start=1)},
    **{unit + "ib": 1024**power for power, unit in enumerate("kmgt", start=1)},
}
_RUNTIME_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600}
_AMOUNT = re.compile(r"\s*([0-9.]+(?:e[+-]?[0-9]+)?)\s*([a-z]*)\s*", re.IGNORECASE)


@dataclass(frozen=True)
class _Budget:
    """One kind of budget: its argument's name, units, and what a factor ``"<f>x"`` means."""

    name: str
    units: dict[str, float]
    expected: str
    factor: Callable[[float, float], float]  # (factor, base) -> budget
    min_factor: float = 0.0  # a smaller factor would mean a negative overhead

    def parse(self, value: str | int | float | None, base: float) -> float | None:
        if value is None:
            return None
        amount, unit = _amount_and_unit(value, self.name, self.expected)
        if unit == "x" and amount < self.min_factor:
            raise WorkflowError(f"{self.name}: got {value!r}, a run {amount:g} times as long as without lineage, "
                                f"i.e. a negative overhead; expected {self.expected}")
        if unit == "x":
            return self.factor(amount, base)
        if unit not in self.units:
            raise WorkflowError(f"{self.name}: got {value!r}, unknown unit {unit!r}; expected {self.expected}")
        return amount * self.units[unit]


_DISK = _Budget("max_disk", _DISK_UNITS, (
    "a number of bytes >= 0, or a string like '50MB', '1.5 GiB', '200kb', '123' "
    "(units B, KB, MB, GB, TB = powers of 1000; KiB, MiB, GiB, TiB = powers of 1024) "
    "or '2x' (a multiple of the input size)"), lambda f, base: f * base)
_RUNTIME = _Budget("max_runtime", _RUNTIME_UNITS, (
    "a number of seconds >= 0, or a string like '30s', '2m', '1h' "
    "or '1.5x' (the run may take 1.5 times as long as without lineage; factor >= 1)"),
    lambda f, base: (f - 1) * base, min_factor=1.0)


def parse_disk_budget(value: str | int | float | None, input_bytes: int) -> float | None:
    """Bytes of lineage the optimizer may store, from a user's ``max_disk``.

    Parameters
    ----------
    value : str, int, float or None
        A number of bytes, a string with a unit (``"50MB"``, ``"1.5 GiB"``;
        KB/MB/GB/TB are powers of 1000, KiB/MiB/GiB/TiB powers of 1024, case
        and spaces do not matter), or a multiple of the input size (``"2x"``).
        None means no budget.
    input_bytes : int
        Total size of the workflow's inputs, for ``"<factor>x"``.

    Returns
    -------
    float or None
        The budget in bytes, or None.

    Raises
    ------
    WorkflowError
        If ``value`` is not one of the forms above or is negative or NaN.
    """
    return _DISK.parse(value, input_bytes)


def parse_runtime_budget(value: str | int | float | None, base_seconds: float) -> float | None:
    """Seconds of runtime overhead lineage may add, from a user's ``max_runtime``.

    The result is an *overhead*, as the optimizer's runtime costs are: seconds
    (a number, or ``"30s"`` / ``"2m"`` / ``"1h"``) are the overhead itself,
    while a factor ``"1.5x"`` (at least 1) bounds the whole run to 1.5 times
    ``base_seconds``, the run without lineage: an overhead of
    ``(1.5 - 1) * base_seconds``.  None means no budget; a `WorkflowError`
    for any other form, a negative amount or NaN.
    """
    return _RUNTIME.parse(value, base_seconds)


def _amount_and_unit(value: object, name: str, expected: str) -> tuple[float, str]:
    """Split ``value`` into a finite amount >= 0 and a lower-case unit."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        amount, unit = float(value), ""
    else:
        match = _AMOUNT.fullmatch(value) if isinstance(value, str) else None
        amount = _to_float(match.group(1)) if match else math.nan
        unit = match.group(2).lower() if match else ""
    if not (math.isfinite(amount) and amount >= 0):
        raise WorkflowError(f"{name}: got {value!r}; expected {expected}")
    return amount, unit


def _to_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:  # e.g. "1.2.3"
        return math.nan

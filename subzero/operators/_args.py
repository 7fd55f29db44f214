"""Argument checks shared by the built-in operators.

Each check raises one `subzero.WorkflowError` whose message names the operator, the
argument, what was expected and what came.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from subzero.errors import WorkflowError

__all__ = ["normalize_axis", "normalize_axes", "per_axis", "check_choice"]


def normalize_axis(axis: Any, ndim: int, op: str, arg: str = "axis") -> int:
    """``axis`` as a non-negative int below ``ndim`` (negative counts from the end)."""
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise WorkflowError(f"{op}: {arg} must be an int, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise WorkflowError(f"{op}: {arg}={axis} is out of range for a {ndim}-D array "
                            f"(expected {-ndim} <= {arg} < {ndim})")
    return axis % ndim


def normalize_axes(axes: Any, ndim: int, op: str, arg: str = "axis") -> tuple[int, ...]:
    """``axes`` (an int or a sequence of ints) as sorted distinct non-negative axes."""
    items = [axes] if isinstance(axes, int) else list(axes)
    got = [normalize_axis(a, ndim, op, arg) for a in items]
    if len(set(got)) != len(got):
        raise WorkflowError(f"{op}: {arg} must not repeat an axis, got {axes!r}")
    return tuple(sorted(got))


def per_axis(value: Any, ndim: int, op: str, arg: str, kind: type = int, minimum: float | None = None) -> tuple:
    """``value`` broadcast to one entry per axis: a scalar, or a sequence of length ``ndim``."""
    items = list(value) if isinstance(value, Sequence) and not isinstance(value, str) else [value] * ndim
    if len(items) != ndim:
        raise WorkflowError(f"{op}: {arg} needs one entry per axis of the {ndim}-D input, got {value!r}")
    try:
        converted = tuple(kind(v) for v in items)
    except (TypeError, ValueError):
        raise WorkflowError(f"{op}: {arg} must be {kind.__name__} value(s), got {value!r}") from None
    if kind is int and any(c != v for c, v in zip(converted, items)):
        raise WorkflowError(f"{op}: {arg} must be integer(s), got {value!r}")
    if minimum is not None and any(c < minimum for c in converted):
        raise WorkflowError(f"{op}: {arg} must be >= {minimum} on every axis, got {value!r}")
    return converted


def check_choice(value: Any, choices: Sequence[str], op: str, arg: str) -> str:
    """``value`` if it is one of ``choices``."""
    if value not in choices:
        raise WorkflowError(f"{op}: {arg} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value

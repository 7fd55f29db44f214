"""Checking a workflow input before any operator runs: a numeric array, or a clear error.

`check_input_array` is what the executor calls on each input: it accepts numpy arrays of
booleans, integers, floats or complex numbers (in any byte order: FITS data is big-endian),
and pandas DataFrames or Series whose columns are all numeric (as a float64 array), and
raises `subzero.WorkflowError` for anything else (structured arrays, object, string or
datetime dtypes, DataFrames with text or categorical columns), naming the input, what
came and what to do.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from subzero.errors import WorkflowError

__all__ = ["check_input_array"]

_NUMERIC = "biufc"


def _describe(dtype) -> str:
    return str(dtype)


def _from_frame(name: str, frame) -> np.ndarray:
    """A DataFrame with numeric columns as a float64 array, or a WorkflowError."""
    bad = [(str(col), _describe(dt)) for col, dt in frame.dtypes.items()
           if getattr(dt, "kind", "O") not in _NUMERIC]
    if bad:
        listed = ", ".join(f"{c!r} ({d})" for c, d in bad[:6]) + (f" and {len(bad) - 6} more" if len(bad) > 6 else "")
        raise WorkflowError(
            f"input {name!r} is a DataFrame with non-numeric column(s) {listed}; encode them as numbers "
            f"first (e.g. df[col].cat.codes or a mapping to 0/1, with NaN for missing values) or drop them")
    return frame.to_numpy(dtype=np.float64, na_value=np.nan)


def check_input_array(name: str, value: Any) -> np.ndarray:
    """``value`` as a numeric numpy array in native byte order, or a `subzero.WorkflowError`.

    Parameters
    ----------
    name : str
        The input's name (used in the error message).
    value : array-like, pandas.DataFrame or pandas.Series
        What the caller bound to the input.

    Returns
    -------
    numpy.ndarray
        Booleans, integers, floats or complex numbers; a DataFrame or Series becomes a
        float64 array (missing values NaN).

    Raises
    ------
    subzero.WorkflowError
        For structured (record) arrays, object, string, bytes, datetime or timedelta
        dtypes, and DataFrames with non-numeric columns.

    Examples
    --------
    >>> check_input_array("x", [[1, 2], [3, 4]]).dtype
    dtype('int64')
    >>> check_input_array("y", np.zeros(2, dtype=[("a", "f8"), ("b", "?")]))
    Traceback (most recent call last):
    ...
    subzero.errors.WorkflowError: input 'y' is a structured array with fields 'a' (float64), 'b' (bool); \
pass one field (y['a']) or stack the fields into one numeric array \
(np.column_stack([y[f] for f in y.dtype.names]).astype(float))
    """
    if hasattr(value, "columns") and hasattr(value, "dtypes") and hasattr(value, "to_numpy"):
        return _from_frame(name, value)
    if hasattr(value, "to_numpy") and hasattr(value, "dtype") and not isinstance(value, np.ndarray):
        kind = getattr(value.dtype, "kind", "O")
        if kind not in _NUMERIC:
            raise WorkflowError(f"input {name!r} is a Series of dtype {_describe(value.dtype)}; encode it as "
                                f"numbers first (e.g. s.cat.codes or a mapping to 0/1, with NaN for missing values)")
        return value.to_numpy(dtype=np.float64, na_value=np.nan)
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise WorkflowError(f"input {name!r} cannot be read as an array ({exc}); pass a numeric numpy array") from None
    if arr.dtype.names is not None:
        fields = ", ".join(f"{f!r} ({_describe(arr.dtype.fields[f][0])})" for f in arr.dtype.names)
        raise WorkflowError(
            f"input {name!r} is a structured array with fields {fields}; pass one field "
            f"({name}[{arr.dtype.names[0]!r}]) or stack the fields into one numeric array "
            f"(np.column_stack([{name}[f] for f in {name}.dtype.names]).astype(float))")
    if arr.dtype.kind not in _NUMERIC:
        what = {"O": "object", "U": "string", "S": "bytes", "M": "datetime", "m": "timedelta",
                "V": "void"}.get(arr.dtype.kind, _describe(arr.dtype))
        raise WorkflowError(f"input {name!r} must be a numeric array (bool, int, float or complex), got dtype "
                            f"{_describe(arr.dtype)} ({what}); convert it first, e.g. np.asarray(value, dtype=float)")
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return arr

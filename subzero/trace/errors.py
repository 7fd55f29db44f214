"""Trace-time errors: what a symbolic array cannot do, with the user's line and the fix.

Each error names the line of the traced function that asked for it (the innermost frame
outside subzero, numpy and scipy), as JAX's ``TracerBoolConversionError`` does.
"""

from __future__ import annotations

import linecache
import os
import sys
from types import FrameType

from subzero.errors import WorkflowError

__all__ = ["TraceError", "ControlFlowError", "ConversionError", "InPlaceError", "UnsupportedCallError",
           "user_line"]

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../subzero
_LIBRARIES = tuple(os.sep + name + os.sep for name in ("numpy", "scipy"))


def _is_library(filename: str) -> bool:
    path = os.path.abspath(filename)
    if path.startswith(_HERE + os.sep) and os.sep + "workflows" + os.sep not in path:
        return True
    return any(part in path for part in _LIBRARIES) or filename.startswith("<frozen")


def user_line() -> str:
    """``file:line: code`` of the innermost frame outside subzero, numpy and scipy, or ''."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not _is_library(name):
            code = linecache.getline(name, frame.f_lineno).strip()
            return f"{name}:{frame.f_lineno}" + (f": {code}" if code else "")
        frame = frame.f_back
    return ""


class TraceError(WorkflowError):
    """The traced function did something a symbolic array cannot stand for."""

    def __init__(self, message: str, line: str | None = None):
        self.line = user_line() if line is None else line
        super().__init__(f"{self.line}: {message}" if self.line else message)


class ControlFlowError(TraceError, TypeError):
    """Python control flow (``if``, ``while``, ``and``, ``int()``) on a symbolic value."""


class ConversionError(TraceError, TypeError):
    """``np.asarray(symbolic)``: a symbolic array has no values at trace time."""


class InPlaceError(TraceError, TypeError):
    """``x[...] = v``, ``x += v``, ``out=``: workflows are built from new arrays only."""


class UnsupportedCallError(TraceError, TypeError):
    """A numpy or scipy function with no subzero operator behind it."""

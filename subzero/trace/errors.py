"""Trace-time errors: what a symbolic array cannot do, with the user's line and the fix.

Each error names the line of the traced function that asked for it (the innermost frame
outside subzero, numpy and scipy), as JAX's ``TracerBoolConversionError`` does.
"""

from __future__ import annotations

import contextlib
import functools
import contextvars
import linecache
import os
import sys
import sysconfig
from collections.abc import Iterator
from types import FrameType

from subzero.errors import WorkflowError

__all__ = ["TraceError", "ControlFlowError", "ConversionError", "InPlaceError", "UnsupportedCallError",
           "user_line", "is_user_frame", "user_files"]

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../subzero
_LIBRARIES = tuple(os.sep + name + os.sep for name in ("numpy", "scipy"))
_INSTALLED = tuple({os.path.abspath(p) + os.sep for p in (sysconfig.get_paths()["purelib"],
                                                          sysconfig.get_paths()["platlib"]) if p})
#: the files of the function being traced: its lines are the user's even inside an installed package
_USER_FILES: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("subzero_user_files",
                                                                            default=frozenset())


@contextlib.contextmanager
def user_files(*files: str) -> Iterator[None]:
    """Within this context, lines of ``files`` are the user's (the traced function's own file,
    when it is an installed package's function traced as published)."""
    token = _USER_FILES.set(frozenset(os.path.abspath(f) for f in files if f))
    try:
        yield
    finally:
        _USER_FILES.reset(token)


@functools.lru_cache(maxsize=8192)
def _abspath(filename: str) -> str:
    return os.path.abspath(filename)


@functools.lru_cache(maxsize=8192)
def _is_library(filename: str) -> bool:
    path = _abspath(filename)
    if path.startswith(_HERE + os.sep) and os.sep + "workflows" + os.sep not in path:
        return True
    return any(part in path for part in _LIBRARIES) or filename.startswith("<frozen")


def is_user_frame(frame: FrameType) -> bool:
    """True for a frame of the user's code: not subzero, numpy or scipy, and not an installed
    package (unless it is the traced function's own file)."""
    name = frame.f_code.co_filename
    if _is_library(name):
        return False
    path = _abspath(name)
    return path in _USER_FILES.get() or not path.startswith(_INSTALLED)


def user_line() -> str:
    """``file:line: code`` of the innermost frame of the user's code (`is_user_frame`): the
    user's call into a library rather than the library's own line; failing that, the
    innermost frame outside subzero, numpy and scipy; or ''."""
    frame: FrameType | None = sys._getframe(1)
    fallback: FrameType | None = None
    user_files = _USER_FILES.get()
    while frame is not None:  # `is_user_frame` inlined: every traced step walks a library's frames
        name = frame.f_code.co_filename
        if not _is_library(name):
            path = _abspath(name)
            if path in user_files or not path.startswith(_INSTALLED):
                break
            if fallback is None:
                fallback = frame
        frame = frame.f_back
    frame = frame or fallback
    if frame is None:
        return ""
    name = frame.f_code.co_filename
    code = linecache.getline(name, frame.f_lineno).strip()
    return f"{name}:{frame.f_lineno}" + (f": {code}" if code else "")


class TraceError(WorkflowError):
    """The traced function did something a symbolic array cannot stand for."""

    def __init__(self, message: str, line: str | None = None):
        self.line = user_line() if line is None else line
        self.reason = message
        super().__init__(f"{self.line}: {message}" if self.line else message)


class ControlFlowError(TraceError, TypeError):
    """Python control flow (``if``, ``while``, ``and``, ``int()``) on a symbolic value."""


class ConversionError(TraceError, TypeError):
    """``np.asarray(symbolic)``: a symbolic array has no values at trace time."""


class InPlaceError(TraceError, TypeError):
    """``x[...] = v``, ``x += v``, ``out=``: workflows are built from new arrays only."""


class UnsupportedCallError(TraceError, TypeError):
    """A numpy or scipy function with no subzero operator behind it."""

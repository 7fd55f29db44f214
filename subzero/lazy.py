"""Modules imported on first use: a query that never filters an image never pays for scipy.

``ndimage = LazyModule("scipy.ndimage")`` at the top of a module reads like an import;
the module is imported (through `importlib.import_module`, so under the import lock and
safe from any thread) the first time one of its attributes is used.

>>> special = LazyModule("math")
>>> special.sqrt(4.0)
2.0
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["LazyModule"]


class LazyModule:
    """A stand-in for the module ``name`` that imports it on first attribute access."""

    __slots__ = ("_name",)

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"

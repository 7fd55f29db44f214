"""subzero: fine-grained lineage for array workflows on Spark (after SubZero, ICDE 2013).

The public names are imported on first use (PEP 562), so ``import subzero`` loads
neither scipy, pyspark, astropy nor the operator modules: a cold ``subzero query``
only pays for the modules it touches.

>>> import subzero as sz
>>> wf = sz.Workflow("demo")
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "Context", "LineageError", "StoreError", "SubZeroError", "WorkflowError", "Mode", "Strategy",
    "Operator", "Run", "open_run", "Tiling", "Whole", "Elementwise", "Halo", "Permuted", "Reduced",
    "RowBlocks", "Node", "Workflow", "operators", "config", "ConfigError",
    # the numpy front end
    "workflow", "name", "apply", "udf", "Window", "Lines", "Reduce", "check_lineage", "ndimage",
]
__version__ = "0.1.0"

# public name -> the module that defines it
_LAZY = {
    "Context": "subzero.context",
    "LineageError": "subzero.errors", "StoreError": "subzero.errors", "SubZeroError": "subzero.errors",
    "WorkflowError": "subzero.errors", "ConfigError": "subzero.errors",
    "Mode": "subzero.modes", "Strategy": "subzero.modes",
    "Operator": "subzero.operator",
    "Run": "subzero.run", "open_run": "subzero.run",
    "Tiling": "subzero.tiling", "Whole": "subzero.tiling", "Elementwise": "subzero.tiling",
    "Halo": "subzero.tiling", "Permuted": "subzero.tiling", "Reduced": "subzero.tiling",
    "RowBlocks": "subzero.tiling",
    "Node": "subzero.dag", "Workflow": "subzero.dag",
    "workflow": "subzero.trace", "name": "subzero.trace", "apply": "subzero.trace",
    "udf": "subzero.udfs", "Window": "subzero.udfs", "Lines": "subzero.udfs", "Reduce": "subzero.udfs",
    "check_lineage": "subzero.udfs",
}

if TYPE_CHECKING:  # static analysers and IDEs see the eager imports
    from subzero import config, operators
    from subzero.context import Context
    from subzero.errors import ConfigError, LineageError, StoreError, SubZeroError, WorkflowError
    from subzero.modes import Mode, Strategy
    from subzero.operator import Operator
    from subzero.run import Run, open_run
    from subzero.tiling import Elementwise, Halo, Permuted, Reduced, RowBlocks, Tiling, Whole
    from subzero.dag import Node, Workflow


def __getattr__(name: str) -> Any:
    if name in ("operators", "ndimage", "config"):
        return importlib.import_module(f"subzero.{name}")
    if name == "inputs":  # deprecated: the older name of `subzero.input_files`
        import warnings

        warnings.warn("subzero.inputs is now subzero.input_files (reading input files): use that name",
                      DeprecationWarning, stacklevel=2)
        return importlib.import_module("subzero.input_files")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'subzero' has no attribute {name!r}")
    if name == "workflow":  # the composition root: traces route scipy.ndimage calls inside libraries to it
        importlib.import_module("subzero.ndimage")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

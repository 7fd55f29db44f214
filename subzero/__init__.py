"""subzero: fine-grained lineage for array workflows on Spark (after SubZero, ICDE 2013).

The public names are imported on first use (PEP 562), so ``import subzero`` loads
neither scipy, pyspark, astropy nor the operator modules: a cold ``subzero query``
only pays for the modules it touches.

>>> import subzero as sz
>>> wf = sz.Workflow("demo")
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from types import ModuleType
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

#: modules that moved, by their old name: importing the old name (``from subzero.execution import
#: execute``, the console script of an older install: ``subzero.cli``) warns and gives the new module
_MOVED = {"execution": "driver", "inputs": "input_files", "cli": "tools.cli", "brush": "tools.brush"}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``subzero.OLD`` for each name of `_MOVED` (first, so that no older copy of subzero
    on the path answers): the module is the new one itself (``subzero.inputs is
    subzero.input_files``)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname.partition(".")[0] != "subzero" or fullname[len("subzero."):] not in _MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: Any) -> ModuleType:
        new = f"subzero.{_MOVED[spec.name[len('subzero.'):]]}"
        warnings.warn(f"{spec.name} is now {new}: import it by that name", DeprecationWarning, stacklevel=2)
        module = importlib.import_module(new)
        self.spec = module.__spec__  # the import system writes the old name's spec over it
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.spec


if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
    sys.meta_path.insert(0, _MovedModules())

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
    if name in _MOVED:  # deprecated: an older name of a module
        return importlib.import_module(f"subzero.{name}")
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

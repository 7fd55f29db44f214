"""Built-in workflows, by name: each module's ``build(quick)`` returns (workflow, inputs)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from subzero.errors import WorkflowError

if TYPE_CHECKING:
    from subzero.dag import Workflow

__all__ = ["BUILTIN", "load_builtin"]

BUILTIN = {
    "demo": "subzero.workflows.demo",
    "astronomy": "subzero.workflows.astronomy",
    "astronomy-numpy": "subzero.workflows.astronomy_numpy",
    "genomics": "subzero.workflows.genomics",
}


def load_builtin(name: str, quick: bool = False) -> tuple[Workflow, dict[str, Any]]:
    """(workflow, inputs) of a built-in workflow."""
    if name not in BUILTIN:
        raise WorkflowError(f"unknown built-in workflow {name!r}; built-ins: {', '.join(sorted(BUILTIN))}, "
                            "or pass a Python file defining build() -> (workflow, inputs)")
    return importlib.import_module(BUILTIN[name]).build(quick=quick)

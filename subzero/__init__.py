"""subzero: fine-grained lineage for array workflows on Spark (after SubZero, ICDE 2013).

>>> import subzero as sz
>>> wf = sz.Workflow("demo")
"""

from __future__ import annotations

from subzero.context import Context
from subzero.errors import LineageError, StoreError, SubZeroError, WorkflowError
from subzero.modes import Mode, Strategy
from subzero.operator import Operator
from subzero.run import Run, open_run
from subzero.tiling import Elementwise, Halo, Permuted, Reduced, RowBlocks, Tiling, Whole
from subzero.workflow import Node, Workflow
from subzero import operators

__all__ = [
    "Context", "LineageError", "StoreError", "SubZeroError", "WorkflowError", "Mode", "Strategy",
    "Operator", "Run", "open_run", "Tiling", "Whole", "Elementwise", "Halo", "Permuted", "Reduced",
    "RowBlocks", "Node", "Workflow", "operators",
]
__version__ = "0.1.0"

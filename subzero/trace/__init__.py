"""The numpy front end: ``@sz.workflow`` traces plain numpy code into workflows.

- `subzero.trace.traced`: the decorator and the traced function (`TracedWorkflow`);
- `subzero.trace.symbolic`: the symbolic array (shape, dtype, the node it stands for);
- `subzero.trace.numpy_api`: numpy calls -> built-in operators (`building`: what its handlers
  share; `numpy_math`, `numpy_shapes`: the handlers by kind);
- `subzero.trace.errors`: what cannot be traced, with the user's line and the fix;
- `subzero.trace.naming`: ``sz.name(x, "clean")``.
"""

from __future__ import annotations

from numpy.typing import DTypeLike

from subzero.trace import numpy_api  # noqa: F401  (installs numpy's handlers on symbolic arrays)
from subzero.trace.errors import ControlFlowError, ConversionError, InPlaceError, TraceError, UnsupportedCallError
from subzero.trace.naming import name
from subzero.trace.symbolic import SymbolicArray
from subzero.operator import Operator
from subzero.trace.traced import TracedWorkflow, workflow

__all__ = ["workflow", "TracedWorkflow", "SymbolicArray", "name", "apply", "TraceError", "ControlFlowError",
           "ConversionError", "InPlaceError", "UnsupportedCallError"]


def apply(op: Operator, *arrays: SymbolicArray, name: str | None = None, dtype: DTypeLike | None = None) -> SymbolicArray:
    """Apply an operator instance (any `subzero.Operator`, built-in or your own) to symbolic
    arrays inside a traced function: the way to use an operator class from numpy code.

    ``dtype`` is the output dtype the trace reports (default: the inputs' result type).
    """
    return numpy_api.call_operator(op, arrays, name=name, dtype=dtype)

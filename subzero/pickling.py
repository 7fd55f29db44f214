"""Operators to bytes and back, so a reopened run can map and re-execute them.

Operators from subzero itself pickle by reference; a user's operator class is pickled
by value (cloudpickle), so the store works from a process that cannot import the
script or test module the class was defined in.
"""

from __future__ import annotations

import pickle
import sys
from typing import Sequence

import cloudpickle

from subzero.errors import WorkflowError
from subzero.operator import Operator

__all__ = ["dump_operator", "dumps_with_operator"]


def dump_operator(op: Operator, node: str) -> bytes:
    """Serialize ``op``, its class by value unless it belongs to subzero."""
    return dumps_with_operator(op, op, node)


def dumps_with_operator(obj: object, op: "Operator | Sequence[Operator]", node: str) -> bytes:
    """Serialize ``obj`` (``op`` or something holding it, e.g. a task), pickling the
    operator's class (each operator's, for a sequence: a fused task's) by value unless it
    belongs to subzero."""
    ops = tuple(op) if isinstance(op, (tuple, list)) else (op,)
    registered = []
    for one in ops:
        module = sys.modules.get(type(one).__module__)
        if (module is not None and not module.__name__.startswith("subzero") and module.__name__ != "__main__"
                and module.__name__ not in cloudpickle.list_registry_pickle_by_value()):
            cloudpickle.register_pickle_by_value(module)
            registered.append(module)
    try:
        return cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        names = ", ".join(type(one).__name__ for one in ops)
        raise WorkflowError(f"operator of node {node!r} ({names}) cannot be pickled ({exc}); "
                            "keep operator attributes to plain data (arrays, numbers, strings)") from exc
    finally:
        for module in registered:
            cloudpickle.unregister_pickle_by_value(module)

"""Operators to bytes and back, so a reopened run can map and re-execute them.

Operators from subzero itself pickle by reference; a user's operator class is pickled
by value (cloudpickle), so the store works from a process that cannot import the
script or test module the class was defined in.
"""

from __future__ import annotations

import pickle
import sys

import cloudpickle

from subzero.errors import WorkflowError
from subzero.operator import Operator

__all__ = ["dump_operator", "dumps_with_operator"]


def dump_operator(op: Operator, node: str) -> bytes:
    """Serialize ``op``, its class by value unless it belongs to subzero."""
    return dumps_with_operator(op, op, node)


def dumps_with_operator(obj, op: Operator, node: str) -> bytes:
    """Serialize ``obj`` (``op`` or something holding it, e.g. a task), pickling the
    operator's class by value unless it belongs to subzero."""
    module = sys.modules.get(type(op).__module__)
    by_value = (module is not None and not module.__name__.startswith("subzero") and module.__name__ != "__main__"
                and module.__name__ not in cloudpickle.list_registry_pickle_by_value())
    if by_value:
        cloudpickle.register_pickle_by_value(module)
    try:
        return cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise WorkflowError(f"operator of node {node!r} ({type(op).__name__}) cannot be pickled ({exc}); "
                            "keep operator attributes to plain data (arrays, numbers, strings)") from exc
    finally:
        if by_value:
            cloudpickle.unregister_pickle_by_value(module)

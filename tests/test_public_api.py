"""The public API has docstrings and type hints: every function and class `subzero` and
`subzero.operators` export, and every object the API reference (docs/reference/*.md) documents,
with the public methods each class defines (an override is described by the method it
overrides).  Listed by name, so the failure says what to write."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

import subzero
import subzero.operators

ROOT = Path(__file__).resolve().parents[1]


def _resolve(dotted: str) -> Any:
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        for part in parts[k:]:
            obj = getattr(obj, part)
        return obj
    raise AssertionError(f"{dotted} does not resolve")


def public_api() -> dict[str, Any]:
    """Qualified name -> function or class, for everything the package exports or documents."""
    found: dict[str, Any] = {}
    for name in subzero.__all__:
        if name not in ("operators", "ndimage", "config"):
            found[f"subzero.{name}"] = getattr(subzero, name)
    for name in subzero.operators.__all__:
        found[f"subzero.operators.{name}"] = getattr(subzero.operators, name)
    for page in sorted((ROOT / "docs" / "reference").glob("*.md")):
        for dotted in re.findall(r"^::: ([\w.]+)", page.read_text(), re.M):
            obj = _resolve(dotted)
            if not inspect.ismodule(obj):
                found[dotted] = obj
                continue
            for name in getattr(obj, "__all__", [n for n in vars(obj) if not n.startswith("_")]):
                member = getattr(obj, name)
                if (inspect.isfunction(member) or inspect.isclass(member)) and member.__module__ == obj.__name__:
                    found[f"{dotted}.{name}"] = member
    return {name: obj for name, obj in found.items() if inspect.isfunction(obj) or inspect.isclass(obj)}


def _function_gaps(fn: Any, name: str) -> list[str]:
    gaps = []
    if not inspect.getdoc(fn):
        gaps.append(f"{name}: no docstring")
    signature = inspect.signature(fn)
    untyped = [p.name for p in signature.parameters.values() if p.name not in ("self", "cls")
               and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.annotation is p.empty]
    if untyped:
        gaps.append(f"{name}: parameters without a type: {', '.join(untyped)}")
    if signature.return_annotation is signature.empty and fn.__name__ != "__init__":
        gaps.append(f"{name}: no return type")
    return gaps


def gaps(name: str, obj: Any) -> list[str]:
    """What ``obj`` lacks: its docstring, its parameters' and return types (its methods' too)."""
    if inspect.isfunction(obj):
        return _function_gaps(obj, name)
    found = [] if (obj.__doc__ or "").strip() else [f"{name}: no docstring"]
    for method_name, member in vars(obj).items():
        if method_name.startswith("_") and method_name != "__init__":
            continue
        fn = member.__func__ if isinstance(member, (staticmethod, classmethod)) else \
            member.fget if isinstance(member, property) else member
        overrides = any(method_name in vars(base) for base in obj.__mro__[1:] if base is not object)
        if not inspect.isfunction(fn) or fn.__module__ != obj.__module__ or (overrides and method_name != "__init__"):
            continue
        found += [g for g in _function_gaps(fn, f"{name}.{method_name}")
                  if method_name != "__init__" or "docstring" not in g]  # the class's docstring covers it
    return found


def test_the_public_api_has_docstrings_and_type_hints():
    api = public_api()
    assert {"subzero.Run", "subzero.Workflow", "subzero.udf", "subzero.operators.GaussianFilter",
            "subzero.stats.table.lineage_table"} <= set(api)
    missing = [gap for name, obj in sorted(api.items()) for gap in gaps(name, obj)]
    assert not missing, ("public functions need a numpydoc docstring and type hints (docs: docs/architecture.md, "
                         "\"Types\"):\n  " + "\n  ".join(missing))


def test_the_check_sees_what_is_missing():
    def untyped(x, y: int = 0):
        return x

    def typed(x: int) -> int:
        """Documented."""
        return x

    assert gaps("untyped", untyped) == ["untyped: no docstring", "untyped: parameters without a type: x",
                                        "untyped: no return type"]
    assert gaps("typed", typed) == []


@pytest.mark.parametrize("old", sorted(subzero._MOVED))
def test_a_moved_module_imports_by_its_older_name(old):
    """``subzero.execution``, ``subzero.inputs``, ``subzero.cli`` (an older install's console
    script) and ``subzero.brush`` still import: the new module itself, with a warning naming it."""
    import sys

    new = importlib.import_module(f"subzero.{subzero._MOVED[old]}")
    sys.modules.pop(f"subzero.{old}", None)
    with pytest.warns(DeprecationWarning, match=new.__name__):
        module = importlib.import_module(f"subzero.{old}")
    assert module is new and module.__spec__.name == new.__name__

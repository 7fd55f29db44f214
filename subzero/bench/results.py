"""The machine-readable results of a benchmark: figures, each with its unit and baseline.

A results document is a dict::

    {"bench": NAME, "quick": bool, "machine": {...}, "date": ISO, "command": str,
     "seconds": total bench time, "setup": {...},
     "figures": {FIGURE: {"unit": str, "baseline": str | None, "description": str,
                          "values": {...}}},
     "raw": {...}}

``baseline`` names what a ratio is relative to (None for absolute quantities).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["figure", "write_json", "read_json", "jsonable"]


def figure(unit: str, baseline: str | None, values: Any, description: str = "") -> dict[str, Any]:
    """One figure of a results document.

    Examples
    --------
    >>> figure("x", "NoLineage", {"FullOne": 6.0})["baseline"]
    'NoLineage'
    """
    return {"unit": unit, "baseline": baseline, "description": description, "values": jsonable(values)}


def jsonable(value: Any) -> Any:
    """``value`` with numpy scalars and arrays turned into plain Python."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    return value


def write_json(path: str | Path, results: dict[str, Any]) -> None:
    """Write ``results`` (numpy values made plain) as indented JSON to ``path``."""
    Path(path).write_text(json.dumps(jsonable(results), indent=1, sort_keys=False) + "\n")


def read_json(path: str | Path) -> dict[str, Any]:
    """The results `write_json` wrote to ``path``."""
    return json.loads(Path(path).read_text())

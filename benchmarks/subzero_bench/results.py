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

from subzero.tools.describe import jsonable

__all__ = ["figure", "write_json", "read_json", "jsonable"]


def figure(unit: str, baseline: str | None, values: Any, description: str = "") -> dict[str, Any]:
    """One figure of a results document.

    Examples
    --------
    >>> figure("x", "NoLineage", {"FullOne": 6.0})["baseline"]
    'NoLineage'
    """
    return {"unit": unit, "baseline": baseline, "description": description, "values": jsonable(values)}


def write_json(path: str | Path, results: dict[str, Any]) -> None:
    """Write ``results`` (numpy values made plain) as indented JSON to ``path``."""
    Path(path).write_text(json.dumps(jsonable(results), indent=1, sort_keys=False) + "\n")


def read_json(path: str | Path) -> dict[str, Any]:
    """The results `write_json` wrote to ``path``."""
    return json.loads(Path(path).read_text())

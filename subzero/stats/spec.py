"""Flags and values named on the command line: a file, a stored node, or a comparison.

``--flags`` takes a file (``dq.npy``, ``dq.fits``, ``dq.fits[DQ]``, a Zarr array), a
stored node's name (nonzero = flagged) or an expression ``NODE OP NUMBER`` with ``OP``
one of ``> >= < <= == !=`` (``raw>60000``: the saturated pixels of ``raw``), several
joined by ``|`` or ``&`` (``raw>60000 | raw<0``).  ``--values`` takes a file or a node.
"""

from __future__ import annotations

import operator
import re
from pathlib import Path
from typing import Any

import numpy as np

from subzero.errors import LineageError, WorkflowError
from subzero.stats.chunks import is_lazy

__all__ = ["read_array_spec", "parse_flags"]

_OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq,
        "!=": operator.ne}
_TERM = re.compile(r"^\s*(?P<node>[A-Za-z_][\w.\-]*)\s*(?P<op>>=|<=|==|!=|>|<)\s*"
                   r"(?P<num>[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?)\s*$")
_FILE = re.compile(r"\.(npy|fits?|fts|fits\.gz|zarr)(\[[^\]]*\])?$", re.IGNORECASE)


def _looks_like_file(spec: str) -> bool:
    return bool(_FILE.search(spec.strip())) or Path(spec).exists()


def read_array_spec(run: Any, spec: str, flag: str) -> Any:
    """A file's array (a Zarr array stays on disk, read chunk by chunk where the lineage lies) or
    a stored node's name (returned as the name: the table reads it)."""
    if _looks_like_file(spec):
        from subzero.input_files import read_input

        try:
            array, _ = read_input(spec)
        except WorkflowError as exc:
            raise LineageError(f"{flag}: {exc}".replace("in --input", f"in {flag}")) from None
        return array if is_lazy(array) else np.asarray(array)
    if spec in {n.name for n in run.workflow.nodes}:
        return spec
    raise LineageError(f"{flag} {spec!r} is neither a file (.npy, .fits, .fits[EXT], .zarr) nor a node of the run; "
                       f"nodes: {', '.join(n.name for n in run.workflow.nodes)}")


def parse_flags(run: Any, spec: str, over_shape: tuple[int, ...]) -> Any:
    """``--flags``: a file's array, a node's name, or the boolean mask an expression selects."""
    if _looks_like_file(spec) or spec.strip() in {n.name for n in run.workflow.nodes}:
        return read_array_spec(run, spec.strip(), "--flags")
    if not any(op in spec for op in _OPS):
        return read_array_spec(run, spec, "--flags")
    result = None
    for joiner, term in _split(spec):
        m = _TERM.match(term)
        if m is None:
            raise LineageError(f"--flags {spec!r}: cannot read {term.strip()!r}; write NODE OP NUMBER with OP one of "
                               f"{' '.join(_OPS)}, e.g. 'raw>60000', joined by | or &")
        node = run.node(m.group("node"))
        if tuple(run.shape(node)) != tuple(over_shape):
            raise LineageError(f"--flags {spec!r}: node {node.name!r} has shape {tuple(run.shape(node))}, the flags "
                               f"must have shape {tuple(over_shape)}")
        with np.errstate(invalid="ignore"):
            got = _OPS[m.group("op")](np.asarray(run.output(node)), float(m.group("num")))
        result = got if result is None else (result | got if joiner == "|" else result & got)
    return np.asarray(result, bool)


def _split(spec: str) -> list[tuple[str, str]]:
    parts = re.split(r"([|&])", spec)
    out = [("|", parts[0])]
    for k in range(1, len(parts), 2):
        out.append((parts[k], parts[k + 1]))
    return out

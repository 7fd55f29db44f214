"""``np.einsum`` for subscripts without a repeated index inside one operand (matrix and
outer products, sums over axes, transposes, their mixtures).

Output cell ``o`` fixes the indices named in the output; it reads, of each operand, every
cell that agrees with ``o`` on the operand's output indices (all values of its summed
ones).  A mapping operator: masks reduce over the indices one side lacks and broadcast
over the ones the other side adds.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from subzero.cells import mask_from_coords
from subzero.context import Context
from subzero.errors import WorkflowError
from subzero.modes import Mode
from subzero.operator import Operator
from subzero.operators._kernels import corner_offsets, unique_rows
from subzero.tiling import Box, Shape, Tiling

__all__ = ["Einsum", "EinsumTiling", "parse_subscripts"]

#: the output index of a 0-d result: an axis of length 1 no operand has
_SCALAR = "#"


def parse_subscripts(subscripts: str, n_operands: int) -> tuple[list[str], str]:
    """``(operand indices, output indices)`` of an einsum ``subscripts`` string (implicit
    output: the indices that appear once, sorted), checked.

    Examples
    --------
    >>> parse_subscripts("ij,jk", 2)
    (['ij', 'jk'], 'ik')
    """
    text = subscripts.replace(" ", "")
    if "." in text:
        raise WorkflowError(f"Einsum: subscripts {subscripts!r} use '...'; name every axis")
    left, arrow, right = text.partition("->")
    operands = left.split(",")
    if len(operands) != n_operands:
        raise WorkflowError(f"Einsum: subscripts {subscripts!r} name {len(operands)} operand(s), got {n_operands}")
    letters = "".join(operands)
    if not all(c.isalpha() for c in letters + right):
        raise WorkflowError(f"Einsum: subscripts {subscripts!r} must be letters, ',' and '->'")
    for part in operands:
        if len(set(part)) != len(part):
            raise WorkflowError(f"Einsum: operand {part!r} of {subscripts!r} repeats an index (a diagonal or a "
                                "trace); only products, sums and transposes are supported")
    if not arrow:
        right = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    if len(set(right)) != len(right) or not set(right) <= set(letters):
        raise WorkflowError(f"Einsum: the output {right!r} of {subscripts!r} must name distinct indices of the "
                            "operands")
    return operands, right


class EinsumTiling(Tiling):
    """Tiles split the output; an operand is read on the tile's range of its output indices
    and whole along its summed ones."""

    def input_box(self, op: Any, out_box: Box, i: int) -> Box:
        operands, out = op._parsed()
        return tuple(out_box[out.index(c)] if c in out else (0, n)
                     for c, n in zip(operands[i], op.input_shapes[i]))


class Einsum(Operator):
    """``np.einsum(subscripts, *operands)`` with no index repeated inside one operand.  A
    0-d result is the output ``(1,)`` (one cell).

    Examples
    --------
    >>> Einsum("ij,jk->ik").run(None, np.eye(2), np.array([[1.0, 2.0], [3.0, 4.0]]))
    array([[1., 2.],
           [3., 4.]])
    """

    entire_array_safe = True
    tiling = EinsumTiling()

    def __init__(self, subscripts: str):
        self.subscripts = str(subscripts)
        parse_subscripts(self.subscripts, self.subscripts.partition("->")[0].count(",") + 1)  # checked early

    def supported_modes(self) -> set[Mode]:
        return {Mode.MAP}

    def _parsed(self, n: int | None = None) -> tuple[list[str], str]:
        operands, out = parse_subscripts(self.subscripts, len(self.input_shapes) if n is None else n)
        return operands, out or _SCALAR

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        operands, out = self._parsed(len(input_shapes))
        sizes: dict[str, int] = {}
        for part, shape in zip(operands, input_shapes):
            if len(part) != len(shape):
                raise WorkflowError(f"Einsum: operand {part!r} names {len(part)} axes, the array has shape "
                                    f"{tuple(shape)}")
            for c, n in zip(part, shape):
                if sizes.setdefault(c, n) != n:
                    raise WorkflowError(f"Einsum: index {c!r} has lengths {sizes[c]} and {n}; every axis named "
                                        f"{c!r} must have the same length")
        return tuple(sizes.get(c, 1) for c in out)

    def run(self, ctx: Context, *inputs: np.ndarray) -> np.ndarray:
        out = np.asarray(np.einsum(self.subscripts, *inputs))
        return out.reshape(1) if out.ndim == 0 else out

    # -- lineage ------------------------------------------------------------------------
    def map_b_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        operands, out = self._parsed()
        return _project_mask(mask, out, operands[i], self.input_shapes[i])

    def map_f_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        assert self.output_shape is not None
        operands, out = self._parsed()
        return _project_mask(mask, operands[i], out, self.output_shape)

    @staticmethod
    def _expand(cells: np.ndarray, src: str, dst: str, shape: Shape) -> tuple[np.ndarray, np.ndarray]:
        """``(owner, coords)``: the cells of an array indexed ``dst`` (of ``shape``) that agree
        with each cell of an array indexed ``src`` on their shared indices."""
        cells = np.asarray(cells, np.int64).reshape(-1, len(src))
        free = [k for k, c in enumerate(dst) if c not in src]
        sub = corner_offsets(tuple(shape[k] for k in free)) if free else np.zeros((1, 0), np.int64)
        coords = np.empty((len(cells), len(sub), len(dst)), np.int64)
        for k, c in enumerate(dst):  # a loop over the axes, not the cells
            if c in src:
                coords[:, :, k] = cells[:, src.index(c)][:, None]
        if free:
            coords[:, :, free] = sub[None, :, :]
        return np.repeat(np.arange(len(cells), dtype=np.int64), len(sub)), coords.reshape(-1, len(dst))

    def map_b_pairs(self, cells: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        operands, out = self._parsed()
        return self._expand(cells, out, operands[i], self.input_shapes[i])

    def _fan(self, n_cells: int, src: str, dst: str, shape: Shape) -> int:
        return n_cells * int(np.prod([n for c, n in zip(dst, shape) if c not in src]))

    def map_b(self, cells: np.ndarray, i: int) -> np.ndarray:
        """Few cells: their pairs (cost follows the answer); many: through the mask form."""
        assert self.output_shape is not None
        operands, out = self._parsed()
        shape = self.input_shapes[i]
        if self._fan(len(cells), out, operands[i], shape) <= int(np.prod(shape)):
            return unique_rows(self._expand(cells, out, operands[i], shape)[1])
        return np.argwhere(np.asarray(self.map_b_mask(mask_from_coords(cells, self.output_shape), i)))

    def map_f(self, cells: np.ndarray, i: int) -> np.ndarray:
        assert self.output_shape is not None
        operands, out = self._parsed()
        if self._fan(len(cells), operands[i], out, self.output_shape) <= int(np.prod(self.output_shape)):
            return unique_rows(self._expand(cells, operands[i], out, self.output_shape)[1])
        return np.argwhere(np.asarray(self.map_f_mask(mask_from_coords(cells, self.input_shapes[i]), i)))


def _project_mask(mask: np.ndarray, labels: str, target: str, shape: tuple[int, ...]) -> np.ndarray:
    """The cells of an array labelled ``target`` (of ``shape``) that share an index with a cell of
    ``mask`` (labelled ``labels``) on every label the two have in common: ``mask`` reduced over its
    own labels, put in ``target``'s order, and broadcast over ``target``'s other labels."""
    reduced = np.any(mask, axis=tuple(k for k, c in enumerate(labels) if c not in target))
    shared = [c for c in labels if c in target]
    order = [shared.index(c) for c in target if c in shared]
    reduced = np.transpose(reduced, order) if order else reduced
    expanded = np.expand_dims(reduced, tuple(k for k, c in enumerate(target) if c not in shared))
    return np.broadcast_to(expanded, shape).copy()

"""The one-to-one mapping default of composite operators: a cell depends on itself."""

from __future__ import annotations

import numpy as np

__all__ = ["IdentityMapping"]


class IdentityMapping:
    """Mixin: the mapping functions of a cell that reads only the same cell of input 0.

    Composite operators (COMP mode) use it as their default and store payload overrides
    for the cells that read more (cosmic rays, labelled components).
    """

    def map_b(self, cells: np.ndarray, i: int) -> np.ndarray:
        """The same cells (each output cell reads itself)."""
        return np.asarray(cells, np.int64)

    def map_f(self, cells: np.ndarray, i: int) -> np.ndarray:
        """The same cells (each input cell is read by itself)."""
        return np.asarray(cells, np.int64)

    def map_b_pairs(self, cells: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Each cell paired with itself."""
        return np.arange(len(cells), dtype=np.int64), np.asarray(cells, np.int64)

    def map_b_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        """A copy of the mask."""
        return mask.copy()

    def map_f_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        """A copy of the mask."""
        return mask.copy()

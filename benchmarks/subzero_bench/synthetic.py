"""The microbenchmark's synthetic operator (SubZero VIII-C): lineage with tunable fanin/fanout.

Region pairs cover ``fraction`` of the output cells.  Pair ``k``'s out cells are the first
``fanout`` cells (raster order) of a ``s x s`` block (``s = ceil(sqrt(fanout))``) of a
block grid; its in cells are the first ``fanin`` cells of a ``w x w`` square
(``w = ceil(sqrt(fanin))``) near the block.  Blocks are drawn without replacement, so
out cells never repeat.  Everything derives from ``seed``: re-running the operator (in
any mode, at query time too) yields the same pairs.

The payload of a pair is its in cells' flat offsets into the input (``fanin`` int32,
i.e. ``fanin * 4`` bytes), so `map_p` recovers them exactly.
"""

from __future__ import annotations

import math

import numpy as np

from subzero.errors import WorkflowError
from subzero.modes import Mode
from subzero.operator import Operator
from subzero.tiling import Shape

__all__ = ["SyntheticLineage"]


class SyntheticLineage(Operator):
    """Copies its 2-D input; writes synthetic region pairs with ``fanin`` in cells and
    ``fanout`` out cells each, for ``fraction`` of the output cells.

    Examples
    --------
    >>> op = SyntheticLineage(fanin=4, fanout=2)
    >>> out, ins = op.pairs((20, 20))
    >>> out.shape, ins.shape   # 40 out cells in 20 pairs, 4 in cells each
    ((40, 2), (80, 2))
    """

    def __init__(self, fanin: int, fanout: int, fraction: float = 0.1, seed: int = 0):
        if fanin < 1 or fanout < 1:
            raise WorkflowError(f"SyntheticLineage needs fanin >= 1 and fanout >= 1, got {fanin}, {fanout}")
        if not 0 < fraction <= 0.25:
            raise WorkflowError(f"SyntheticLineage fraction must be in (0, 0.25], got {fraction}")
        self.fanin, self.fanout, self.fraction, self.seed = int(fanin), int(fanout), float(fraction), int(seed)

    def supported_modes(self) -> set[Mode]:
        return {Mode.FULL, Mode.PAY}

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        shape = tuple(input_shapes[0])
        if len(shape) != 2:
            raise WorkflowError(f"SyntheticLineage takes a 2-D array, got shape {shape}")
        return shape

    # -- the pairs ---------------------------------------------------------------------
    def n_pairs(self, shape: tuple[int, int]) -> int:
        """Number of region pairs for an array of ``shape``."""
        return max(1, int(round(self.fraction * shape[0] * shape[1] / self.fanout)))

    def pairs(self, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        """(out cells, in cells) of every pair: ``(n * fanout, 2)`` and ``(n * fanin, 2)``
        coordinates, pair ``k`` owning rows ``k * fanout ...`` and ``k * fanin ...``."""
        rng = np.random.default_rng(self.seed)
        s, w = math.ceil(math.sqrt(self.fanout)), math.ceil(math.sqrt(self.fanin))
        grid = (shape[0] // s, shape[1] // s)
        n = self.n_pairs(shape)
        if n > grid[0] * grid[1] or w > min(shape):
            raise WorkflowError(f"array {shape} is too small for {n} pairs of fanout {self.fanout}, "
                                f"fanin {self.fanin}")
        blocks = np.sort(rng.choice(grid[0] * grid[1], size=n, replace=False))
        origin = np.stack([blocks // grid[1], blocks % grid[1]], axis=1) * s
        out = (origin[:, None, :] + _raster(s, self.fanout)[None]).reshape(-1, 2)
        jitter = rng.integers(-s, s + 1, size=(n, 2))
        corner = np.clip(origin + s // 2 - w // 2 + jitter, 0, np.asarray(shape) - w)
        ins = (corner[:, None, :] + _raster(w, self.fanin)[None]).reshape(-1, 2)
        return out.astype(np.int64), ins.astype(np.int64)

    def run(self, ctx, x) -> np.ndarray:
        if ctx.modes & {Mode.FULL, Mode.PAY}:
            out, ins = self.pairs(x.shape)
            n = len(out) // self.fanout
            if Mode.FULL in ctx.modes:
                ctx.lwrite_many(out, ins, out_pair=np.repeat(np.arange(n), self.fanout),
                                in_pair=[np.repeat(np.arange(n), self.fanin)])
            if Mode.PAY in ctx.modes:
                payload = np.ravel_multi_index(tuple(ins.T), x.shape).astype("<i4").reshape(n, self.fanin)
                ctx.lwrite_many(out, out_pair=np.repeat(np.arange(n), self.fanout), payload=payload)
        return np.array(x, copy=True)

    # -- payload function ----------------------------------------------------------------
    def map_p_pairs(self, cells: np.ndarray, payload: bytes, i: int) -> tuple[np.ndarray, np.ndarray]:
        ins = np.stack(np.unravel_index(np.frombuffer(payload, "<i4").astype(np.int64), self.input_shapes[0]),
                       axis=1)
        owner = np.repeat(np.arange(len(cells), dtype=np.int64), len(ins))
        return owner, np.tile(ins, (len(cells), 1))

    def map_p(self, cells: np.ndarray, payload: bytes, i: int) -> np.ndarray:
        return np.unique(self.map_p_pairs(np.asarray(cells)[:1], payload, i)[1], axis=0)


def _raster(side: int, count: int) -> np.ndarray:
    """The first ``count`` cells of a ``side x side`` square, in raster order."""
    return np.argwhere(np.ones((side, side), bool))[:count].astype(np.int64)

"""CellPairs: the cell-level lineage baseline (Trio-style), as compressed columnar Parquet.

Every ``(out, in)`` cell pair of a run's FULL lineage is written to one Parquet file per
(node, input) with two int columns, sorted by ``out`` (zstd, row-group statistics, so a
backward lookup skips row groups).  The pairs come from re-running every tile of every
node in tracing mode, which is the FULL lineage the strategies store.  A query walks the
workflow one step at a time like `subzero.Run`, each step a pyarrow dataset scan
filtered on the frontier's cell ids; it knows nothing of operators (no mapping
functions, no entire-array shortcut).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from subzero.frontier import Frontier
from subzero.errors import LineageError
from subzero.pairs import FullPairs, owners
from subzero.run import Run
from subzero.modes import Direction
from subzero.query import QueryEngine, QueryOptions
from subzero.worker import trace_tile
from subzero.dag import Node

__all__ = ["write_cellpairs", "estimate_cellpairs", "CellPairs", "expand_cell_pairs", "MAX_PAIRS"]

ROW_GROUP = 1 << 20
MAX_ALL_TO_ALL = 1 << 27
#: the benches skip this baseline when a run's lineage has more cell pairs (memory, minutes)
MAX_PAIRS = 200_000_000


def expand_cell_pairs(pairs: FullPairs, i: int) -> tuple[np.ndarray, np.ndarray]:
    """Every (out id, in id) cell pair of the region pairs' input ``i``, vectorized.

    Examples
    --------
    >>> z = np.array
    >>> p = FullPairs(z([0, 1]), z([0, 2]), (z([5, 6, 7]),), (z([0, 3]),))
    >>> [a.tolist() for a in expand_cell_pairs(p, 0)]
    [[0, 0, 0, 1, 1, 1], [5, 6, 7, 5, 6, 7]]
    """
    n_out, n_in = np.diff(pairs.out_ptr), np.diff(pairs.in_ptr[i])
    rows = n_out * n_in
    total = int(rows.sum())
    if total == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    pair = owners(np.concatenate([[0], np.cumsum(rows)]))
    start = np.repeat(np.cumsum(rows) - rows, rows)
    r = np.arange(total, dtype=np.int64) - start
    width = n_in[pair]
    out = pairs.out_ids[pairs.out_ptr[:-1][pair] + r // width]
    inn = pairs.in_ids[i][pairs.in_ptr[i][:-1][pair] + r % width]
    return out, inn


def _node_pairs(run: Run, node: Node) -> FullPairs:
    """The FULL lineage of one node: re-run every tile in tracing mode (an all-to-all node
    is one pair of every output cell and every input cell)."""
    op = node.operator
    if op.all_to_all:
        sizes = [int(np.prod(s)) for s in op.input_shapes]
        n_out = int(np.prod(op.output_shape))
        if n_out * sum(sizes) > MAX_ALL_TO_ALL:
            raise LineageError(f"CellPairs: node {node.name!r} is all-to-all with {n_out} x {sum(sizes)} "
                               f"cell pairs, more than this baseline stores ({MAX_ALL_TO_ALL})")
        one = np.array([0, 1], np.int64)
        ins = tuple(np.arange(n, dtype=np.int64) for n in sizes)
        return FullPairs(np.arange(n_out, dtype=np.int64), one * n_out, ins, tuple(one * n for n in sizes))
    task = run.lineage.tile_task(node)
    return FullPairs.concat([trace_tile(task, tile) for tile in run.lineage.grid(node).tiles], len(node.inputs))


def _path(root: Path, node: str, i: int) -> Path:
    return root / f"{node}.{i}.parquet"


def estimate_cellpairs(run: Run) -> int:
    """About how many cell pairs `write_cellpairs` would write: each node's first tile,
    traced, scaled to the node's output."""
    total = 0
    for node in run.workflow.nodes:
        if node.is_input:
            continue
        op = node.operator
        n_out = int(np.prod(op.output_shape))
        if op.all_to_all:
            total += n_out * sum(int(np.prod(s)) for s in op.input_shapes)
            continue
        tile = run.lineage.grid(node).tiles[0]
        pairs = trace_tile(run.lineage.tile_task(node), tile)
        cells = max(int(np.prod([hi - lo for lo, hi in tile.box])), 1) if tile.box is not None else n_out
        per_tile = sum(int((np.diff(pairs.out_ptr) * np.diff(pairs.in_ptr[i])).sum()) for i in range(len(node.inputs)))
        total += per_tile * n_out // cells
    return total


def write_cellpairs(run: Run, root: str | Path) -> dict[str, int]:
    """Write every cell pair of ``run``'s FULL lineage under ``root``; return rows per file."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=False)
    rows = {}
    for node in run.workflow.nodes:
        if node.is_input:
            continue
        pairs = _node_pairs(run, node)
        for i in range(len(node.inputs)):
            out, inn = expand_cell_pairs(pairs, i)
            order = np.lexsort((inn, out))
            width = np.int32 if max(np.prod(node.operator.output_shape),
                                    np.prod(node.operator.input_shapes[i])) < 2**31 else np.int64
            table = pa.table({"out": out[order].astype(width), "in": inn[order].astype(width)})
            pq.write_table(table, _path(root, node.name, i), compression="zstd", row_group_size=ROW_GROUP)
            rows[f"{node.name}.{i}"] = len(out)
    return rows


class CellPairs:
    """Lineage queries over the Parquet files that `write_cellpairs` wrote for ``run``."""

    def __init__(self, run: Run, root: str | Path):
        self.run, self.root = run, Path(root)

    def backward(self, node, cells, to) -> np.ndarray:
        """Coordinates of ``to``'s cells that ``cells`` of ``node`` depend on, through the cell-pair baseline."""
        return self._walk(node, cells, to, "backward").coords()

    def forward(self, node, cells, to) -> np.ndarray:
        """Coordinates of ``to``'s cells that depend on ``cells`` of ``node``, through the cell-pair baseline."""
        return self._walk(node, cells, to, "forward").coords()

    def step(self, node: Node, frontier: Frontier, i: int, direction: str) -> Frontier:
        """One step: the cells of the other side of ``node``'s pairs whose key side meets ``frontier``."""
        op = node.operator
        key, other = ("out", "in") if direction == "backward" else ("in", "out")
        target = tuple(op.input_shapes[i]) if direction == "backward" else tuple(op.output_shape)
        ids = frontier.ids()
        if not len(ids):
            return Frontier.empty(target)
        dataset = ds.dataset(_path(self.root, node.name, i), format="parquet")
        wanted = pa.array(ids.astype(dataset.schema.field(key).type.to_pandas_dtype()))
        got = dataset.to_table(columns=[other], filter=pc.field(key).isin(wanted))
        return Frontier.of_ids(got.column(other).to_numpy().astype(np.int64), target)

    def _walk(self, src, cells, dst, direction: str) -> Frontier:
        src, dst = self.run.node(src), self.run.node(dst)
        start = Frontier.of_coords(np.asarray(cells, np.int64).reshape(-1, len(self.run.shape(src))),
                                   self.run.shape(src))
        return _ParquetSteps(self).walk(src, dst, start, QueryOptions(Direction.parse(direction)))


class _ParquetSteps(QueryEngine):
    """`QueryEngine`'s walk, each step answered from the Parquet files of `CellPairs`."""

    def __init__(self, pairs: CellPairs):
        super().__init__(pairs.run.store, pairs.run.workflow, pairs.run.catalog)
        self.pairs = pairs

    def advance(self, node, frontier: Frontier, i: int, plan: QueryOptions) -> Frontier:
        return self.pairs.step(node, frontier, i, plan.direction)


"""Value-dependent operators: which input cells an output cell depends on is decided by
the data, so no mapping function can say it.  They write FULL lineage (region pairs) and
PAY lineage (small payloads from which ``map_p`` recomputes the input cells), and run on
whole arrays.

Their lineage is the set of cells that produced an output value: re-running the operator
with every other input cell replaced by a neutral value (background for `Label`, a value
outside every bin for `Histogram`, one the predicate rejects for `Filter`, False for
`Compress`'s condition) reproduces that value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from subzero.errors import WorkflowError
from subzero.modes import Mode
from subzero.operator import Operator
from subzero.operators._args import normalize_axis
from subzero.operators._kernels import corner_offsets, decode_region, encode_region, repeat_pairs
from subzero.operators.label import Label  # moved to label.py (tiled, two passes); re-exported here

__all__ = ["Label", "Histogram", "Filter", "Compress"]


def _all_cells(shape: tuple[int, ...]) -> np.ndarray:
    return np.argwhere(np.ones(shape, bool)).astype(np.int64)


class Histogram(Operator):
    """``np.histogram(x, bins, range)`` counts, ignoring NaN and infinite values.

    ``bins`` is a number of equal bins (over ``range``, or over the finite data's min and
    max when ``range`` is None) or a sequence of edges; the last bin includes its right
    edge, as in numpy.  Output: ``(n_bins,)`` int64 counts.

    Lineage: bin ``b`` depends on the cells that fell in it, and, when the edges come
    from the data (``range=None`` with a number of bins), on the cells holding the
    minimum and maximum too.  Cells in no bin have no forward lineage, and empty bins no
    backward lineage, so the entire-array optimization is unsafe.  Modes: ``FULL`` (one
    pair per bin) and ``PAY`` (a bin's cells encoded as bounding box + bitmask).
    """

    def __init__(self, bins: int | Sequence[float] = 10, range: tuple[float, float] | None = None):
        if isinstance(bins, (int, np.integer)):
            if bins < 1:
                raise WorkflowError(f"Histogram: bins must be a positive number of bins or a sequence of edges, "
                                    f"got {bins!r}")
            self.bins = int(bins)
        else:
            edges = np.asarray(bins, dtype=np.float64)
            if edges.ndim != 1 or len(edges) < 2 or np.any(np.diff(edges) < 0):
                raise WorkflowError(f"Histogram: bins as edges must be an increasing 1-D sequence of at least 2 "
                                    f"values, got {bins!r}")
            self.bins = tuple(edges.tolist())
        if range is not None and (len(range) != 2 or not range[0] <= range[1]):
            raise WorkflowError(f"Histogram: range must be a (lo, hi) pair with lo <= hi, got {range!r}")
        self.range = None if range is None else (float(range[0]), float(range[1]))

    @property
    def n_bins(self) -> int:
        return self.bins if isinstance(self.bins, int) else len(self.bins) - 1

    def supported_modes(self):
        return {Mode.FULL, Mode.PAY}

    def infer_output_shape(self, input_shapes):
        return (self.n_bins,)

    def assign(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the bin of each cell, flat, or -1 for none; which cells fix the edges)."""
        v = np.asarray(x, dtype=np.float64).reshape(-1)
        finite = np.isfinite(v)
        edges = np.histogram_bin_edges(v[finite], bins=self.bins, range=self.range)
        index = np.searchsorted(edges, v, side="right") - 1
        index[v == edges[-1]] = self.n_bins - 1
        index = np.where(finite & (v >= edges[0]) & (v <= edges[-1]), index, -1)
        extremes = np.zeros(len(v), bool)
        if isinstance(self.bins, int) and self.range is None and finite.any():
            extremes = finite & ((v == v[finite].min()) | (v == v[finite].max()))
        return index, extremes

    def run(self, ctx, x):
        index, extremes = self.assign(x)
        nb = self.n_bins
        if Mode.FULL in ctx.modes:
            binned, fixed = np.flatnonzero(index >= 0), np.flatnonzero(extremes)
            ids = np.concatenate([binned, np.tile(fixed, nb)])
            pair = np.concatenate([index[binned], np.repeat(np.arange(nb, dtype=np.int64), len(fixed))])
            cells = np.stack(np.unravel_index(ids, np.shape(x)), axis=1).reshape(len(ids), np.ndim(x))
            ctx.lwrite_many(np.arange(nb, dtype=np.int64)[:, None], cells,
                            out_pair=np.arange(nb, dtype=np.int64), in_pair=[pair])
        if Mode.PAY in ctx.modes:
            for b in range(nb):
                ids = np.flatnonzero((index == b) | extremes)
                cells = np.stack(np.unravel_index(ids, np.shape(x)), axis=1).reshape(len(ids), np.ndim(x))
                ctx.lwrite(np.array([[b]], np.int64), payload=encode_region(cells, np.ndim(x)))
        return np.bincount(index[index >= 0], minlength=nb).astype(np.int64)

    def map_p(self, cells, payload, i):
        ndim = len(self.input_shapes[0])
        return decode_region(payload, ndim) if len(cells) else np.empty((0, ndim), np.int64)

    def map_p_pairs(self, cells, payload, i):
        return repeat_pairs(len(cells), decode_region(payload, len(self.input_shapes[0])))


class _Selection(Operator):
    """Base of operators keeping the slices along ``axis`` where a condition holds.

    The output shape depends on values, so they run on whole arrays.  Output slice ``r``
    comes from input slice ``src[r]``; the payload of its cells is ``src[r]`` (8 bytes).
    Slices not kept have no forward lineage: not entire-array safe.
    """

    def __init__(self, axis: int = 0):
        self.axis = axis

    def supported_modes(self):
        return {Mode.FULL, Mode.PAY}

    def _axis(self) -> int:
        return normalize_axis(self.axis, len(self.input_shapes[-1]), type(self).__name__)

    def _select(self, ctx, x: np.ndarray, keep: np.ndarray) -> np.ndarray:
        a = self._axis()
        src = np.flatnonzero(keep)
        out = np.take(x, src, axis=a)
        cells = _all_cells(out.shape)
        origin = src[cells[:, a]]
        if Mode.FULL in ctx.modes:
            self.write_full(ctx, cells, origin)
        if Mode.PAY in ctx.modes:
            ctx.lwrite(cells, payload=origin.astype("<i8").reshape(-1, 1))
        return out

    def write_full(self, ctx, cells: np.ndarray, origin: np.ndarray) -> None:
        raise NotImplementedError

    @staticmethod
    def _origin(payload: bytes) -> int:
        return int(np.frombuffer(payload, "<i8")[0])

    def _moved(self, cells: np.ndarray, origin) -> np.ndarray:
        """``cells`` with their coordinate along the axis replaced by ``origin``."""
        moved = np.array(cells, np.int64)
        moved[:, self._axis()] = origin
        return moved


class Filter(_Selection):
    """Keep the slices along ``axis`` (rows, by default) that ``predicate`` accepts.

    ``predicate(x)`` returns one bool per slice (shape ``(x.shape[axis],)``) and must
    decide each slice from that slice's values alone, e.g.
    ``Filter(lambda x: x.max(axis=1) > 3)``.  Output slice ``r`` depends on the whole
    input slice it came from (the predicate read all of it).

    Examples
    --------
    >>> import subzero as sz
    >>> wf = sz.Workflow("f")
    >>> node = wf.add(Filter(lambda x: x.sum(axis=1) > 0), wf.input("x"))
    """

    def __init__(self, predicate: Callable[[np.ndarray], np.ndarray], axis: int = 0):
        if not callable(predicate):
            raise WorkflowError(f"Filter: predicate must be a callable returning one bool per slice, got {predicate!r}")
        super().__init__(axis)
        self.predicate = predicate

    def infer_output_shape(self, input_shapes):
        normalize_axis(self.axis, len(input_shapes[0]), "Filter")
        return None

    def run(self, ctx, x):
        keep = np.asarray(self.predicate(x))
        n = x.shape[self._axis()]
        if keep.shape != (n,):
            raise WorkflowError(f"Filter: predicate returned an array of shape {keep.shape}, expected ({n},): "
                                f"one bool per slice along axis {self.axis}")
        return self._select(ctx, x, keep.astype(bool))

    def write_full(self, ctx, cells, origin):
        r = cells[:, self._axis()]
        ctx.lwrite_many(cells, self._moved(cells, origin), out_pair=r, in_pair=[r])

    def _slice(self, s: int) -> np.ndarray:
        shape = list(self.input_shapes[0])
        shape[self._axis()] = 1
        return self._moved(corner_offsets(tuple(shape)), s)

    def map_p(self, cells, payload, i):
        return self._slice(self._origin(payload)) if len(cells) else np.empty((0, cells.shape[1]), np.int64)

    def map_p_pairs(self, cells, payload, i):
        return repeat_pairs(len(cells), self._slice(self._origin(payload)))


class Compress(_Selection):
    """``np.compress(condition, x, axis)``: keep the slices of ``x`` where the 1-D
    ``condition`` (the first input, one value per slice) is non-zero.

    Output cell ``(..., r, ...)`` depends on ``condition[src[r]]`` and on the one cell of
    ``x`` it copies.
    """

    def infer_output_shape(self, input_shapes):
        condition, shape = (tuple(s) for s in input_shapes)
        a = normalize_axis(self.axis, len(shape), "Compress")
        if condition != (shape[a],):
            raise WorkflowError(f"Compress: condition has shape {condition}, expected ({shape[a]},): one value "
                                f"per slice of x (shape {shape}) along axis {self.axis}")
        return None

    def run(self, ctx, condition, x):
        return self._select(ctx, x, np.asarray(condition) != 0)

    def write_full(self, ctx, cells, origin):
        pair = np.arange(len(cells), dtype=np.int64)
        ctx.lwrite_many(cells, origin[:, None], self._moved(cells, origin), out_pair=pair, in_pair=[pair, pair])

    def map_p(self, cells, payload, i):
        return np.unique(self.map_p_pairs(cells, payload, i)[1], axis=0)

    def map_p_pairs(self, cells, payload, i):
        s = self._origin(payload)
        owner = np.arange(len(cells), dtype=np.int64)
        if i == 0:
            return owner, np.full((len(cells), 1), s, np.int64)
        return owner, self._moved(cells, s)

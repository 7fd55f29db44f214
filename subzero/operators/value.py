"""Value-dependent operators: which input cells an output cell depends on is decided by
the data, so no mapping function can say it.  They write FULL lineage (region pairs) and
PAY lineage (small payloads from which ``map_p`` recomputes the input cells), and run on
whole arrays.

Lineage is *dependence* (docs/guide/lineage.md, "What lineage means"): an output cell depends on the
input cells whose change can change its value or remove it, with output cells
identified by what they are.  That makes two readings explicit here:

- selections (`Filter`, `Compress`): by default (``lineage="source"``) an output slice
  *is* the input slice it copies (its identity, `output_identity`), so it depends on the
  cells it copies and on every cell its own keep-decision read, not on the decisions that
  dropped slices before it (they move it, they do not change it);
  ``lineage="positional"`` identifies output cells by position instead: slice ``r`` also
  depends on the decisions of every input slice up to its source, and the last output
  slice on every decision (they decide whether more slices follow);
- `Histogram`: a bin's count changes when any cell moves into or out of it, so by default
  (``lineage="dependence"``) every bin depends on every cell (all-to-all);
  ``lineage="members"`` is the provenance reading (the cells counted in the bin), which
  the perturbation oracle does not hold it to.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
import numpy as np

from subzero.context import Context
from subzero.errors import WorkflowError
from subzero.modes import Mode
from subzero.operator import Operator
from subzero.operators._args import check_choice, normalize_axis
from subzero.operators._kernels import corner_offsets, decode_region, encode_region, repeat_pairs
from subzero.operators.label import Label  # moved to label.py (tiled, two passes); re-exported here
from subzero.tiling import Shape

__all__ = ["Label", "Histogram", "Filter", "Compress", "SELECTION_LINEAGES", "HISTOGRAM_LINEAGES"]

#: the readings of a selection's lineage: output slices identified by source, or by position
SELECTION_LINEAGES = ("source", "positional")
#: the readings of a histogram's lineage: every cell (dependence), or the cells of the bin
HISTOGRAM_LINEAGES = ("dependence", "members")


def _all_cells(shape: tuple[int, ...]) -> np.ndarray:
    return np.argwhere(np.ones(shape, bool)).astype(np.int64)


def _bins_of(v: np.ndarray, edges: np.ndarray, inside: np.ndarray) -> np.ndarray:
    """``np.searchsorted(edges, v, side="right") - 1`` (the last edge at or below each value)
    for the values ``inside`` the edges (the others get any index): a guess from the value's
    place between the first and last edge (exact for most values of evenly spaced edges, as
    ``np.histogram`` finds its bins), checked against the edges, and searched for only where
    it is not ``edges[i] <= v < edges[i + 1]``.  The same answer, without a binary search per cell."""
    nb = len(edges) - 1
    first, last = float(edges[0]), float(edges[-1])
    if nb < 1 or not last > first:
        return np.searchsorted(edges, v, side="right") - 1
    with np.errstate(invalid="ignore", over="ignore"):
        guess = np.where(inside, (v - first) * (nb / (last - first)), 0.0)
    index = guess.astype(np.intp)
    np.clip(index, 0, nb - 1, out=index)
    missed = inside & ~((edges[index] <= v) & (v < edges[index + 1]))
    index[missed] = np.searchsorted(edges, v[missed], side="right") - 1
    return index


class Histogram(Operator):
    """``np.histogram(x, bins, range)`` counts, ignoring NaN and infinite values.

    ``bins`` is a number of equal bins (over ``range``, or over the finite data's min and
    max when ``range`` is None) or a sequence of edges; the last bin includes its right
    edge, as in numpy.  Output: ``(n_bins,)`` int64 counts.

    Lineage (``lineage``):

    - ``"dependence"`` (default): any cell can move into any bin, so every bin depends on
      every cell: all-to-all (``BLACKBOX`` only, entire-array safe).
    - ``"members"``: the provenance reading: bin ``b`` depends on the cells that fell in
      it and, when the edges come from the data (``range=None`` with a number of bins), on
      the cells holding the minimum and maximum too.  Cells in no bin have no forward
      lineage, and empty bins no backward lineage, so the entire-array optimization is
      unsafe.  Modes: ``FULL`` (one pair per bin) and ``PAY`` (a bin's cells encoded as
      bounding box + bitmask).  Re-running on a bin's lineage reproduces its count, but a
      cell moved into the bin changes it: not a dependence reading.
    """

    def __init__(self, bins: int | Sequence[float] = 10, range: tuple[float, float] | None = None,
                 lineage: str = "dependence"):
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
        self.lineage = check_choice(lineage, HISTOGRAM_LINEAGES, "Histogram", "lineage")

    @property
    def entire_array_safe(self) -> bool:
        """`Operator.entire_array_safe`: true for the dependence lineage (every bin reads every cell)."""
        return self.lineage == "dependence"

    @property
    def n_bins(self) -> int:
        """The number of bins."""
        return self.bins if isinstance(self.bins, int) else len(self.bins) - 1

    def supported_modes(self) -> set[Mode]:
        return {Mode.BLACKBOX} if self.lineage == "dependence" else {Mode.FULL, Mode.PAY}

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        return (self.n_bins,)

    def assign(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the bin of each cell, flat, or -1 for none; which cells fix the edges)."""
        v = np.asarray(x, dtype=np.float64).reshape(-1)
        finite = np.isfinite(v)
        edges = np.histogram_bin_edges(v[finite], bins=self.bins, range=self.range)
        inside = finite & (v >= edges[0]) & (v <= edges[-1])
        index = _bins_of(v, edges, inside)
        index[v == edges[-1]] = self.n_bins - 1
        index = np.where(inside, index, -1)
        extremes = np.zeros(len(v), bool)
        if isinstance(self.bins, int) and self.range is None and finite.any():
            extremes = finite & ((v == v[finite].min()) | (v == v[finite].max()))
        return index, extremes

    def counts(self, x: np.ndarray) -> np.ndarray | None:
        """The counts alone, as ``np.histogram`` counts them (blocked, without each cell's bin or
        the extremes `assign` gives): equal bins over a range given, or over the data's min and
        max when every value is finite.  None when that does not hold (NaN or infinite values
        with no range, edges given, no cells): `assign` then decides."""
        v = np.asarray(x, dtype=np.float64).reshape(-1)
        if not isinstance(self.bins, int) or not v.size:
            return None
        span = self.range
        if span is None:
            lo, hi = float(v.min()), float(v.max())
            if not (np.isfinite(lo) and np.isfinite(hi)):  # NaN or infinite values: ignored by `assign`
                return None
            span = (lo, hi)
        return np.histogram(v, bins=self.bins, range=span)[0].astype(np.int64)

    def run(self, ctx: Context, x: np.ndarray) -> np.ndarray:
        if not ctx.modes & {Mode.FULL, Mode.PAY}:  # no lineage asked: numpy's own counting
            counted = self.counts(x)
            if counted is not None:
                return counted
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
            binned = np.flatnonzero(index >= 0)
            order = binned[np.argsort(index[binned], kind="stable")]  # every bin's cells, in id order
            bounds = np.searchsorted(index[order], np.arange(nb + 1))
            fixed = np.flatnonzero(extremes)
            for b in range(nb):  # one payload per bin: O(cells + bins), not O(cells x bins)
                ids = np.union1d(order[bounds[b]:bounds[b + 1]], fixed)
                cells = np.stack(np.unravel_index(ids, np.shape(x)), axis=1).reshape(len(ids), np.ndim(x))
                ctx.lwrite(np.array([[b]], np.int64), payload=encode_region(cells, np.ndim(x)))
        return np.bincount(index[index >= 0], minlength=nb).astype(np.int64)

    def map_p(self, cells: np.ndarray, payload: bytes, i: int) -> np.ndarray:
        ndim = len(self.input_shapes[0])
        return decode_region(payload, ndim) if len(cells) else np.empty((0, ndim), np.int64)

    def map_p_pairs(self, cells: np.ndarray, payload: bytes, i: int) -> tuple[np.ndarray, np.ndarray]:
        return repeat_pairs(len(cells), decode_region(payload, len(self.input_shapes[0])))


def _prefix_cells(bounds: np.ndarray, slice_cells: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """For each ``k``, the cells of input slices ``0..bounds[k]`` (``slice_cells`` are the
    cells of one slice, axis coordinate 0): returns ``(owner, coords)``."""
    bounds = np.asarray(bounds, np.int64)
    counts = bounds + 1
    owner_slice = np.repeat(np.arange(len(bounds), dtype=np.int64), counts)
    index = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    coords = np.repeat(slice_cells[None], len(index), axis=0)
    coords[:, :, axis] = index[:, None]
    owner = np.repeat(owner_slice, len(slice_cells))
    return owner, coords.reshape(-1, slice_cells.shape[1])


class _Selection(Operator):
    """Base of operators keeping the slices along ``axis`` where a condition holds.

    The output shape depends on values, so they run on whole arrays.  Output slice ``r``
    comes from input slice ``src[r]``.  With ``lineage="source"`` the payload of its
    cells is ``src[r]`` and output cells are identified by the input cell they copy
    (`output_identity`); with ``lineage="positional"`` the payload also holds the last
    input slice whose decision the slice depends on (``src[r]``, or the last slice for
    the last output slice).  Slices not kept have no forward lineage under ``"source"``:
    not entire-array safe.
    """

    def __init__(self, axis: int = 0, lineage: str = "source"):
        self.axis = axis
        self.lineage = check_choice(lineage, SELECTION_LINEAGES, type(self).__name__, "lineage")

    def supported_modes(self) -> set[Mode]:
        return {Mode.FULL, Mode.PAY}

    def _axis(self) -> int:
        return normalize_axis(self.axis, len(self.input_shapes[-1]), type(self).__name__)

    @property
    def positional(self) -> bool:
        return self.lineage == "positional"

    def keep(self, *inputs: np.ndarray) -> np.ndarray:
        """One bool per input slice: is it kept."""
        raise NotImplementedError

    def output_identity(self, *inputs: np.ndarray) -> np.ndarray | None:
        """The flat id (in ``x``'s shape) of the input cell each output cell copies, or None
        under ``lineage="positional"`` (output cells are their positions)."""
        if self.positional:
            return None
        x = np.asarray(inputs[-1])
        a = self._axis()
        src = np.flatnonzero(self.keep(*inputs))
        shape = list(x.shape)
        shape[a] = len(src)
        cells = _all_cells(tuple(shape))
        cells[:, a] = src[cells[:, a]]
        return np.ravel_multi_index(tuple(cells.T), x.shape).reshape(shape) if len(cells) else \
            np.zeros(shape, np.int64)

    def _bounds(self, src: np.ndarray, n: int) -> np.ndarray:
        """The last input slice whose keep-decision each output slice depends on."""
        bounds = src.copy()
        if self.positional and len(bounds):
            bounds[-1] = n - 1
        return bounds

    def _select(self, ctx, x: np.ndarray, keep: np.ndarray) -> np.ndarray:
        a = self._axis()
        src = np.flatnonzero(keep)
        out = np.take(x, src, axis=a)
        cells = _all_cells(out.shape)
        origin = src[cells[:, a]]
        bound = self._bounds(src, x.shape[a])[cells[:, a]]
        if Mode.FULL in ctx.modes:
            self.write_full(ctx, cells, origin, bound, x.shape)
        if Mode.PAY in ctx.modes:
            columns = [origin, bound] if self.positional else [origin]
            ctx.lwrite(cells, payload=np.column_stack(columns).astype("<i8"))
        return out

    def write_full(self, ctx, cells: np.ndarray, origin: np.ndarray, bound: np.ndarray, shape) -> None:
        raise NotImplementedError

    def _decode(self, payload: bytes) -> tuple[int, int]:
        """(source slice, last slice whose decision counts) of a payload."""
        values = np.frombuffer(payload, "<i8")
        return int(values[0]), int(values[-1])

    def _moved(self, cells: np.ndarray, origin) -> np.ndarray:
        """``cells`` with their coordinate along the axis replaced by ``origin``."""
        moved = np.array(cells, np.int64)
        moved[:, self._axis()] = origin
        return moved

    def _slice_cells(self, shape) -> np.ndarray:
        shape = list(shape)
        shape[self._axis()] = 1
        return corner_offsets(tuple(shape))


class Filter(_Selection):
    """Keep the slices along ``axis`` (rows, by default) that ``predicate`` accepts.

    ``predicate(x)`` returns one bool per slice (shape ``(x.shape[axis],)``) and must
    decide each slice from that slice's values alone, e.g.
    ``Filter(lambda x: x.max(axis=1) > 3)``.

    Lineage: output slice ``r`` depends on the whole input slice it came from (the
    predicate read all of it).  With ``lineage="positional"`` it also depends on every
    input slice before that one (their decisions fix where it lands), and the last output
    slice on every input slice.

    Examples
    --------
    >>> import subzero as sz
    >>> wf = sz.Workflow("f")
    >>> node = wf.add(Filter(lambda x: x.sum(axis=1) > 0), wf.input("x"))
    """

    def __init__(self, predicate: Callable[[np.ndarray], np.ndarray], axis: int = 0, lineage: str = "source"):
        if not callable(predicate):
            raise WorkflowError(f"Filter: predicate must be a callable returning one bool per slice, got {predicate!r}")
        super().__init__(axis, lineage)
        self.predicate = predicate

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        normalize_axis(self.axis, len(input_shapes[0]), "Filter")
        return None

    def keep(self, x: np.ndarray) -> np.ndarray:
        keep = np.asarray(self.predicate(x))
        n = np.shape(x)[self._axis()]
        if keep.shape != (n,):
            raise WorkflowError(f"Filter: predicate returned an array of shape {keep.shape}, expected ({n},): "
                                f"one bool per slice along axis {self.axis}")
        return keep.astype(bool)

    def run(self, ctx: Context, x: np.ndarray) -> np.ndarray:
        return self._select(ctx, x, self.keep(x))

    def write_full(self, ctx: Context, cells: np.ndarray, origin: np.ndarray, bound: np.ndarray,
                   shape: tuple[int, ...]) -> None:
        """Write the FULL lineage of the kept ``cells`` (pairs of each kept cell and its source)."""
        a = self._axis()
        r = cells[:, a]
        if not self.positional:
            ctx.lwrite_many(cells, self._moved(cells, origin), out_pair=r, in_pair=[r])
            return
        slices, first = np.unique(r, return_index=True)
        owner, coords = _prefix_cells(bound[first], self._slice_cells(shape), a)
        ctx.lwrite_many(cells, coords, out_pair=r, in_pair=[slices[owner]])

    def _region(self, payload: bytes) -> np.ndarray:
        source, bound = self._decode(payload)
        first = 0 if self.positional else source
        return _prefix_cells(np.array([bound - first]), self._slice_cells(self.input_shapes[0]),
                             self._axis())[1] + self._offset(first)

    def _offset(self, first: int) -> np.ndarray:
        offset = np.zeros(len(self.input_shapes[0]), np.int64)
        offset[self._axis()] = first
        return offset

    def map_p(self, cells: np.ndarray, payload: bytes, i: int) -> np.ndarray:
        return self._region(payload) if len(cells) else np.empty((0, cells.shape[1]), np.int64)

    def map_p_pairs(self, cells: np.ndarray, payload: bytes, i: int) -> tuple[np.ndarray, np.ndarray]:
        return repeat_pairs(len(cells), self._region(payload))


class Compress(_Selection):
    """``np.compress(condition, x, axis)``: keep the slices of ``x`` where the 1-D
    ``condition`` (the first input, one value per slice) is non-zero.

    Lineage: output cell ``(..., r, ...)`` depends on ``condition[src[r]]`` and on the one
    cell of ``x`` it copies; with ``lineage="positional"`` also on ``condition[0..src[r]]``
    (every entry, for the last output slice).
    """

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        condition, shape = (tuple(s) for s in input_shapes)
        a = normalize_axis(self.axis, len(shape), "Compress")
        if condition != (shape[a],):
            raise WorkflowError(f"Compress: condition has shape {condition}, expected ({shape[a]},): one value "
                                f"per slice of x (shape {shape}) along axis {self.axis}")
        return None

    def keep(self, condition: np.ndarray, x: np.ndarray) -> np.ndarray:
        return np.asarray(condition) != 0

    def run(self, ctx: Context, condition: np.ndarray, x: np.ndarray) -> np.ndarray:
        return self._select(ctx, x, self.keep(condition, x))

    def write_full(self, ctx: Context, cells: np.ndarray, origin: np.ndarray, bound: np.ndarray,
                   shape: tuple[int, ...]) -> None:
        """Write the FULL lineage of the kept ``cells`` (pairs of each kept cell and its source)."""
        n = len(cells)
        pair = np.arange(n, dtype=np.int64)
        copied = self._moved(cells, origin)
        if not self.positional:
            ctx.lwrite_many(cells, origin[:, None], copied, out_pair=pair, in_pair=[pair, pair])
            return
        a = self._axis()
        r = cells[:, a]
        slices, first = np.unique(r, return_index=True)
        owner, conditions = _prefix_cells(bound[first], np.zeros((1, 1), np.int64), 0)
        out = np.concatenate([cells, cells])  # pairs 0..n-1: the copied cell; n + k: slice k's decisions
        out_pair = np.concatenate([pair, n + np.searchsorted(slices, r)])
        ctx.lwrite_many(out, conditions, copied, out_pair=out_pair, in_pair=[n + owner, pair])

    def map_p(self, cells: np.ndarray, payload: bytes, i: int) -> np.ndarray:
        coords = self.map_p_pairs(cells, payload, i)[1]
        return np.unique(coords, axis=0) if len(coords) else coords

    def map_p_pairs(self, cells: np.ndarray, payload: bytes, i: int) -> tuple[np.ndarray, np.ndarray]:
        source, bound = self._decode(payload)
        cells = np.asarray(cells, np.int64)
        if i == 0:
            first = 0 if self.positional else source
            return repeat_pairs(len(cells), np.arange(first, bound + 1, dtype=np.int64)[:, None])
        return np.arange(len(cells), dtype=np.int64), self._moved(cells, source)

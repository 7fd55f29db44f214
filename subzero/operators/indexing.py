"""Indexing whose cells were fixed when a numpy function was traced on real values.

``x[mask]``, ``x[idx]``, ``x[:, keep]`` (`Gather`) and ``x[mask] = v``, ``out[i, :] = row``,
``x[idx] += 1`` (`Scatter`) select cells by values.  The numpy front end traces a function
on this run's values, so which cells they touch is known when the node is made: each
operator carries that map (computed by numpy itself on the traced values, so every key numpy
accepts is covered with numpy's rules, duplicates included) and its lineage is a mapping.

Lineage follows the package's reading of dependence (`subzero.operators.value`): a gathered
cell *is* the cell it copies (its identity, `Gather.output_identity`) and depends on that cell
and on the selecting cell of each index input (a guide); a scattered array's written cell
depends on the value written and on its guides, an untouched cell on the old value and on its
guides (whether it was written is their decision).

Guides say which index-input cell decides an output cell:

- ``"src:A:N"``: the guide's cell is the source cell's coordinates ``A..A+N`` (a boolean mask
  over the indexed array, ``x[mask]``: ``src:0:ndim``; over one axis, ``x[:, keep]``: ``src:1:1``);
- ``"out:A:N"``: the guide's cell is the output cell's coordinates ``A..A+N`` (an integer index
  array, ``sizes[labels]``: ``out:0:labels.ndim``);
- ``"one"``: a one-cell guide every output cell depends on (a summary standing for an index
  array whose cells cannot be told apart: all of them).

`Opaque` is the coarse step: any numpy call run on whole arrays, every output cell depending
on every input cell (sound by construction), with the reason recorded.
"""

from __future__ import annotations

import copy
import math
import threading
import uuid
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import xxhash

from subzero.context import Context
from subzero.errors import WorkflowError
from subzero.modes import Mode
from subzero.operator import Operator
from subzero.operators._kernels import unique_rows
from subzero.tiling import Box, Shape, Tiling, box_shape

__all__ = ["Gather", "Scatter", "Opaque", "Coordinates", "digest"]


def digest(array: np.ndarray) -> str:
    """A short content digest of ``array`` (recorded in the catalog instead of the array)."""
    array = np.ascontiguousarray(array)
    h = xxhash.xxh3_64()  # streamed: the digest of the bytes then the description, with no copy of them
    h.update(array.data.cast("B") if array.size else b"")
    h.update(repr((array.shape, array.dtype.str)).encode())
    return h.hexdigest()


def _check_guides(guides: Sequence[str]) -> tuple[str, ...]:
    out = []
    for g in guides:
        parts = g.split(":")
        ok = parts == ["one"] or (len(parts) == 3 and parts[0] in ("src", "out") and all(p.isdigit() for p in parts[1:]))
        if not ok:
            raise WorkflowError(f"unknown guide {g!r}: expected 'src:A:N', 'out:A:N' or 'one'")
        out.append(g)
    return tuple(out)


def _guide_parts(g: str) -> tuple[str, int, int]:
    if g == "one":
        return "one", 0, 0
    kind, a, n = g.split(":")
    return kind, int(a), int(n)


def _flat(cells: np.ndarray, shape: Shape) -> np.ndarray:
    cells = np.asarray(cells, np.int64).reshape(-1, len(shape))
    if not len(shape):
        return np.zeros(len(cells), np.int64)
    return np.asarray(np.ravel_multi_index(tuple(cells.T), shape), np.int64)


def _coords(flat: np.ndarray, shape: Shape) -> np.ndarray:
    flat = np.asarray(flat, np.int64)
    if not len(shape):
        return np.zeros((len(flat), 0), np.int64)
    return np.stack(np.unravel_index(flat, shape), axis=1).astype(np.int64)


def _region(box: Box, origin: Box | None = None) -> tuple[slice, ...]:
    if origin is None:
        return tuple(slice(lo, hi) for lo, hi in box)
    return tuple(slice(lo - o, hi - o) for (lo, hi), (o, _) in zip(box, origin))


def _meet(a: Box, b: Box) -> Box:
    """The intersection of two boxes (empty ranges where they do not meet)."""
    out = []
    for (alo, ahi), (blo, bhi) in zip(a, b):
        lo = max(alo, blo)
        out.append((lo, max(lo, min(ahi, bhi))))
    return tuple(out)


def _written_block(written: np.ndarray, source: np.ndarray | None) -> Box | None:
    """The box ``written`` covers when it is exactly one box whose cells receive ``v``'s cells in
    C order (``source`` is 0, 1, 2, ...), else None."""
    if source is None or not written.ndim or not len(source):
        return None
    ranges = []
    for axis in range(written.ndim):
        hit: np.ndarray = np.asarray(written.any(axis=tuple(k for k in range(written.ndim) if k != axis)))
        ranges.append((int(np.argmax(hit)), len(hit) - int(np.argmax(hit[::-1]))))
    box = tuple(ranges)
    if math.prod(hi - lo for lo, hi in box) != len(source):
        return None
    if source[0] != 0 or source[-1] != len(source) - 1 or (len(source) > 1 and not bool((np.diff(source) == 1).all())):
        return None
    return box


def _flat_bounding(flat: np.ndarray, shape: Shape) -> Box:
    """The bounding box of the cells at flat positions ``flat`` in an array of ``shape`` (as
    ``_bounding(_coords(flat, shape))``, without making the coordinates)."""
    if not len(flat):
        return tuple((0, 0) for _ in shape)
    if not len(shape):
        return ()
    inner = math.prod(int(n) for n in shape[1:])
    first = (int(flat.min()) // inner, int(flat.max()) // inner + 1)
    if len(shape) == 1:
        return (first,)
    rest = flat % inner
    if int(rest.min()) == 0 and int(rest.max()) == inner - 1:  # (0, .., 0) and (n-1, .., n-1): every later axis whole
        return (first,) + tuple((0, int(n)) for n in shape[1:])
    out, stride = [first], inner
    for n in shape[1:]:
        stride //= max(int(n), 1)
        along = (rest // stride) % n
        out.append((int(along.min()), int(along.max()) + 1))
    return tuple(out)


def _bounding(coords: np.ndarray, ndim: int) -> Box:
    if not len(coords):
        return tuple((0, 0) for _ in range(ndim))
    return tuple((int(lo), int(hi) + 1) for lo, hi in zip(coords.min(axis=0), coords.max(axis=0)))


class _GuidedTiling(Tiling):
    """Output tiles of a `Gather`/`Scatter`: each input read over the bounding box of what the tile needs."""

    def input_box(self, op, out_box: Box, i: int) -> Box:
        return op.input_box(out_box, i)


class _Guided(Operator):
    """What `Gather` and `Scatter` share: guides and their lineage."""

    tiling = _GuidedTiling()
    guides: tuple[str, ...] = ()

    def supported_modes(self) -> set[Mode]:
        return {Mode.MAP}

    def _source_cells(self, out_cells: np.ndarray) -> np.ndarray:
        """Cells of the indexed array (input 0's shape) deciding each output cell."""
        raise NotImplementedError

    def _source_box(self, out_box: Box) -> Box:
        """The box of the indexed array that output box ``out_box`` reads."""
        raise NotImplementedError

    @property
    def _out(self) -> Shape:
        """The bound output shape."""
        if self.output_shape is None:
            raise WorkflowError(f"{type(self).__name__} is not bound to shapes yet")
        return tuple(int(n) for n in self.output_shape)

    def _guide_b(self, cells: np.ndarray, g: str, shape: Shape) -> np.ndarray:
        """The guide cell deciding each of ``cells`` (one row per cell; the guide has ``shape``)."""
        kind, a, n = _guide_parts(g)
        cells = np.asarray(cells, np.int64)
        if kind == "one":
            return np.zeros((len(cells), len(shape)), np.int64)
        if kind == "out":
            return cells[:, a:a + n]
        return self._source_cells(cells)[:, a:a + n]

    def _guide_box(self, out_box: Box, g: str, shape: Shape) -> Box:
        """The box of a guide (of ``shape``) that output box ``out_box`` needs."""
        kind, a, n = _guide_parts(g)
        if kind == "one":
            return tuple((0, int(m)) for m in shape)
        if kind == "out":
            return tuple(out_box[a:a + n])
        return self._source_box(out_box)[a:a + n]

    def _guide_f(self, cells: np.ndarray, g: str, shape: Shape) -> np.ndarray:
        """Output cells decided by guide cells ``cells`` (the guide of ``shape``): one vectorized
        pass over the output's cells."""
        out_shape = self._out
        every = _coords(np.arange(int(np.prod(out_shape))), out_shape)
        if g == "one":
            return every if len(cells) else every[:0]
        decided = self._guide_b(every, g, shape)
        keep = np.isin(_flat(decided, shape), _flat(cells, shape))
        return every[keep]


class Gather(_Guided):
    """``x[key]`` for a key fixed when traced: output cell ``k`` copies ``x.flat[source[k]]``.

    Parameters
    ----------
    source : int array, optional
        The flat position in ``x`` of each output cell, laid out in the output's shape
        (``np.arange(x.size).reshape(x.shape)[key]``).
    guides : sequence of str
        How each further input (mask or index arrays) decides the output cells (module docstring).
    mask : bool array, optional
        Instead of ``source``, for ``x[mask]`` with a mask of ``x``'s shape: the output is the
        mask's cells in C order.
    count : int, optional
        With ``mask``: its number of True cells, when the caller has it already (a trace that
        selected them); counted otherwise.

    Notes
    -----
    Increasing positions (a selection in C order) are held as the bits of a mask over ``x``
    (``np.packbits``) whenever those take fewer bytes, and listed again, once per copy, only
    when a tile or a query needs them: a mask over a large image ships and stores an eighth
    of a byte per cell of ``x`` instead of eight bytes per selected cell.

    Examples
    --------
    >>> x = np.array([5.0, -1.0, 7.0])
    >>> Gather(mask=x > 0).bound([(3,)], (2,)).map_b(np.array([[1]]), 0).tolist()
    [[2]]
    >>> op = Gather(np.array([0, 2]))
    >>> op.bound([(3,)], (2,)).map_b(np.array([[1]]), 0).tolist()
    [[2]]
    """

    _positions: np.ndarray | None
    _bits: np.ndarray | None
    _source_shape: tuple[int, ...]

    def __init__(self, source: np.ndarray | None = None, guides: Sequence[str] = (), *,
                 mask: np.ndarray | None = None, count: int | None = None):
        self._selection: bool | None = None
        self.guides = _check_guides(guides)
        if mask is not None:  # x[mask]: the mask's cells in C order, kept as the mask's bits
            if source is not None:
                raise WorkflowError("Gather takes source positions or a mask, not both")
            flat_mask = np.asarray(mask, bool).reshape(-1)
            count = int(np.count_nonzero(flat_mask)) if count is None else int(count)
            bits = np.packbits(flat_mask)
            self._set_bits(bits, flat_mask.size, (count,))
            if count:  # the first and last selected cell, from the bytes holding them
                held: np.ndarray = np.not_equal(bits, 0)
                lo, hi = int(held.argmax()), held.size - 1 - int(held[::-1].argmax())
                ends: np.ndarray = np.not_equal(np.unpackbits(bits[[lo, hi]]).reshape(2, 8), 0)
                self._span = (lo * 8 + int(ends[0].argmax()), hi * 8 + 7 - int(ends[1][::-1].argmax()))
            self.source_digest = "bits:" + digest(bits)
            self.output_cells = count
            return
        if source is None:
            raise WorkflowError("Gather needs the source positions (source=) or a boolean mask (mask=)")
        positions = np.asarray(source, np.int64)
        self.source_digest = digest(positions)
        self.output_cells = int(positions.size)
        self._positions = positions
        self._bits = None
        self._source_shape = tuple(int(n) for n in positions.shape)
        flat = positions.reshape(-1)
        if flat.size > 1 and int(flat[0]) >= 0:
            # increasing positions (a selection in C order): their bits, when fewer bytes than the positions
            extent = int(flat[-1]) + 1
            # n strictly increasing positions span at least n - 1 (a look-up of a few values into many cells
            # never does: no comparison of every pair)
            if (extent + 7) // 8 < flat.nbytes and extent - int(flat[0]) >= flat.size and \
                    bool(np.all(flat[1:] > flat[:-1])):
                selected = np.zeros(extent, bool)
                selected[flat] = True
                self._set_bits(np.packbits(selected), extent, tuple(int(n) for n in positions.shape))
                self._positions = positions  # kept in this copy; copies shipped or stored carry the bits

    def _set_bits(self, bits: np.ndarray, extent: int, shape: tuple[int, ...]) -> None:
        """Hold the selected positions as bits over flat positions ``0..extent`` (C order)."""
        self._bits, self._extent, self._source_shape = bits, int(extent), shape
        self._positions = None
        self._selection = True  # increasing positions: each source cell copied once

    @property
    def _source(self) -> np.ndarray:
        """The flat source position of each output cell (output-shaped, read-only), listed from the
        bits once per copy of the operator when they are held as bits."""
        got, bits = self._positions, self._bits
        if got is None and bits is not None:
            got = np.flatnonzero(np.unpackbits(bits, count=self._extent)).reshape(self._source_shape)
            got.flags.writeable = False
            self._positions = got
        if got is None:
            raise WorkflowError("Gather holds neither positions nor bits (a damaged operator); re-run the workflow")
        return got

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "_source" in state:  # an operator pickled before the bits form: its positions as they were
            positions = state["_positions"] = state.pop("_source")
            state.setdefault("_bits", None)
            state.setdefault("_source_shape", tuple(int(n) for n in positions.shape))
        self.__dict__.update(state)

    @property
    def n_inputs(self) -> int | None:
        return 1 + len(self.guides)

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        if len(input_shapes) != 1 + len(self.guides):
            raise WorkflowError(f"Gather takes {1 + len(self.guides)} inputs (the array and its guides), got "
                                f"{len(input_shapes)}")
        size = int(np.prod(input_shapes[0]))
        span = self.__dict__.get("_span")
        if span is None and self.output_cells:  # every bind asks: found once per copy
            span = self._span = (int(self._source.min()), int(self._source.max()))
        if span is not None and (span[0] < 0 or span[1] >= size):
            raise WorkflowError(f"Gather: a source position is outside the input of shape {input_shapes[0]}")
        return self._source_shape

    def output_identity(self, *inputs: np.ndarray) -> np.ndarray | None:
        """Each output cell is the input cell it copies (when each is copied once: a selection);
        otherwise cells are their positions."""
        if self._selection is None:  # each source copied once? computed once, not per call
            flat = self._source.ravel()
            self._selection = bool(np.unique(flat).size == flat.size)
        return self._source.ravel() if type(self) is Gather and self._selection else None

    def _source_cells(self, out_cells: np.ndarray) -> np.ndarray:
        flat = self._source.ravel()[_flat(out_cells, self._out)]
        return _coords(flat, self.input_shapes[0])

    def _source_box(self, out_box: Box) -> Box:
        memo = self.__dict__.setdefault("_box_memo", {})  # every input of a tile asks: found once
        got = memo.get(out_box)
        if got is None:
            if len(memo) > 64:
                memo.clear()
            got = memo[out_box] = _flat_bounding(self._source[_region(out_box)].ravel(), self.input_shapes[0])
        return got

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_box_memo", None)  # rebuilt where it is needed, never shipped or stored
        if state.get("_bits") is not None:
            state["_positions"] = None  # the bits travel; positions are listed again where needed
        return state

    def input_box(self, out_box: Box, i: int) -> Box:
        """The box of input ``i`` a tile of ``out_box`` reads: the source's cells the guides point at
        (input 0), or the guides' own box."""
        if i == 0:
            return self._source_box(out_box)
        return self._guide_box(out_box, self.guides[i - 1], self.input_shapes[i])

    def run(self, ctx: Context, *inputs: np.ndarray) -> np.ndarray:
        x = inputs[0]
        shape, read = tuple(self.input_shapes[0]), ctx.input_boxes[0]
        flat = self._source[_region(ctx.tile_box)].ravel()
        if len(flat) and all(box == (0, n) for box, n in zip(read[1:], shape[1:])) and x.flags.c_contiguous:
            # the box read is whole rows: a slab of x's flat order, indexed by flat position directly
            start = read[0][0] * math.prod(shape[1:])
            return np.take(x.reshape(-1), flat - start).reshape(box_shape(ctx.tile_box))
        src = _coords(flat, self.input_shapes[0])
        lo = np.asarray([b[0] for b in ctx.input_boxes[0]], np.int64)
        out = x[tuple((src - lo).T)] if len(src) else np.empty(0, x.dtype)
        return out.reshape(tuple(hi - lo for lo, hi in ctx.tile_box))

    def map_b_pairs(self, cells: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        cells = np.asarray(cells, np.int64).reshape(-1, len(self._out))
        owner = np.arange(len(cells), dtype=np.int64)
        if i == 0:
            return owner, self._source_cells(cells)
        return owner, self._guide_b(cells, self.guides[i - 1], self.input_shapes[i])

    def map_b(self, cells: np.ndarray, i: int) -> np.ndarray:
        return unique_rows(self.map_b_pairs(cells, i)[1])

    def map_f(self, cells: np.ndarray, i: int) -> np.ndarray:
        if i:
            return unique_rows(self._guide_f(cells, self.guides[i - 1], self.input_shapes[i]))
        flat = _flat(cells, self.input_shapes[0])
        hit = np.flatnonzero(np.isin(self._source.ravel(), flat))
        return _coords(hit, self._out)

    def map_b_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        # dense frontiers (a whole output read by a reduction): a flat scatter, no coordinates
        shape, source_shape = tuple(self.input_shapes[i]), tuple(self.input_shapes[0])
        picked = self._source.ravel()[np.asarray(mask, bool).ravel()]
        kind, a, n = _guide_parts(self.guides[i - 1]) if i else ("src", 0, len(source_shape))
        # the source itself, or a mask of its shape (x[m]): the cells are the source cells, a flat scatter
        flat = kind == "src" and a == 0 and n == len(source_shape) and shape == source_shape
        if kind == "out":  # the guide cells are output coordinates a..a+n: the mask projected
            other = tuple(k for k in range(len(self._out)) if not a <= k < a + n)
            projected = np.asarray(np.asarray(mask, bool).any(axis=other)) if other else np.array(mask, bool)
            return projected if projected.shape == shape else None
        got = np.zeros(shape, bool)
        if kind == "one":
            got.reshape(-1)[:1] = bool(len(picked))
        elif flat:
            got.reshape(-1)[picked] = True
        elif source_shape:
            at = np.unravel_index(picked, source_shape)[a:a + n]
            got[tuple(at)] = True
        else:
            return None  # a 0-d source: the cell form answers
        return got

    def map_f_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        if i:
            return None
        return np.asarray(mask, bool).reshape(-1)[self._source.ravel()].reshape(self._out)


class Coordinates(Gather):
    """``np.nonzero(x)[axis]`` / ``np.argwhere`` / ``np.flatnonzero`` for the cells fixed when
    traced: the output holds coordinates of the selected cells of ``x`` (each depends on the
    cell it locates).

    ``axis`` is an axis of ``x`` (one coordinate per output cell), ``"all"`` (argwhere: the
    output has one more axis, one column per axis of ``x``) or ``"flat"`` (flat positions).
    """

    def __init__(self, source: np.ndarray, input_shape: Shape, axis: int | str):
        src = np.asarray(source, np.int64).ravel()
        if axis == "all":
            src = np.repeat(src[:, None], max(len(input_shape), 1), axis=1)
        super().__init__(src)
        self.axis = axis
        self.input_shape = tuple(int(n) for n in input_shape)

    def run(self, ctx: Context, *inputs: np.ndarray) -> np.ndarray:
        flat = self._source[_region(ctx.tile_box)]
        if self.axis == "flat":
            return flat.astype(np.intp)
        coords = np.unravel_index(flat, self.input_shape)
        if self.axis == "all":
            cols = np.arange(*ctx.tile_box[1])
            return np.stack([coords[c][:, k] for k, c in enumerate(cols)], axis=1).astype(np.intp)
        return coords[int(self.axis)].astype(np.intp)


class Scatter(_Guided):
    """``x[key] = v`` for a key fixed when traced: a new array, ``x`` with the written cells
    replaced by cells of ``v`` (numpy's casting and last-write-wins rules), or by the scalar
    ``fill`` when the value is a number.

    Inputs: ``x``, then ``v`` (unless ``fill`` is given), then the guides.

    Parameters
    ----------
    written : bool array of x's shape
        Which cells the assignment writes.
    source : int array or None
        For each written cell (C order), the flat position in ``v`` of the value it receives;
        None when every written cell receives ``v``'s one cell (or ``fill``).
    guides : sequence of str
        How each further input (mask or index arrays) decides the output cells.
    fill : scalar, optional
        The value written, when it is a number rather than an array of the workflow.

    Examples
    --------
    >>> op = Scatter(np.array([False, True, False]), None, fill=0.0).bound([(3,)], (3,))
    >>> op.map_b(np.array([[0], [1]]), 0).tolist()
    [[0]]
    """

    reads_only = True  # ``run`` writes a copy of ``x``, never its inputs

    def __init__(self, written: np.ndarray, source: np.ndarray | None, guides: Sequence[str] = (),
                 fill: Any = None):
        written = np.asarray(written, bool)
        self._shape = tuple(int(n) for n in written.shape)
        self._bits = np.packbits(written.ravel())
        self._source = None if source is None else np.asarray(source, np.int64).ravel()
        self.guides = _check_guides(guides)
        self.fill = fill.item() if isinstance(fill, np.generic) else fill
        self.has_values = fill is None
        self.written_cells = int(written.sum())
        self.map_digest = digest(self._bits) + ("" if self._source is None else digest(self._source))
        self._rank_cache: np.ndarray | None = None
        if self._source is not None and len(self._source) != self.written_cells:
            raise WorkflowError(f"Scatter: {len(self._source)} sources for {self.written_cells} written cells")
        self._block = _written_block(written, self._source)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_rank_cache"] = None  # rebuilt where it is needed, never shipped
        state.pop("_written_cache", None)
        return state

    @property
    def _first_guide(self) -> int:
        return 2 if self.has_values else 1

    @property
    def n_inputs(self) -> int | None:
        return self._first_guide + len(self.guides)

    @property
    def _written(self) -> np.ndarray:
        """Which cells are written (read-only), unpacked once per copy of the operator: every
        tile asks, several times."""
        got = self.__dict__.get("_written_cache")
        if got is None:
            size = int(np.prod(self._shape))
            got = np.unpackbits(self._bits, count=size).view(bool).reshape(self._shape)
            got.flags.writeable = False
            self._written_cache = got
        return got

    def _rank(self) -> np.ndarray:
        """For every cell, the index of its write among the written cells (C order)."""
        if self._rank_cache is None:
            self._rank_cache = np.cumsum(self._written.ravel(), dtype=np.int64) - 1
        return self._rank_cache

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        expected = self._first_guide + len(self.guides)
        if len(input_shapes) != expected:
            raise WorkflowError(f"Scatter takes {expected} inputs (the array, {'the values, ' * self.has_values}"
                                f"the guides), got {len(input_shapes)}")
        if tuple(input_shapes[0]) != self._shape:
            raise WorkflowError(f"Scatter: the array has shape {input_shapes[0]}, the assignment was traced on "
                                f"{self._shape}")
        return self._shape

    def _value_flat(self, out_cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(which of ``out_cells`` are written, the flat position in v of each written one)."""
        flat = _flat(out_cells, self._shape)
        written = self._written.ravel()[flat]
        if self._source is None:
            return written, np.zeros(int(written.sum()), np.int64)
        return written, self._source[self._rank()[flat[written]]]

    def _source_cells(self, out_cells: np.ndarray) -> np.ndarray:
        return np.asarray(out_cells, np.int64)

    def _source_box(self, out_box: Box) -> Box:
        return out_box

    def _block_of(self) -> Box | None:
        """The box written when the assignment copies ``v`` whole into it in C order (``v`` has
        the box's shape, ``x[a:b, c:d] = v``), else None: then a tile's values are a box of
        ``v``, found without looking at cells."""
        block = getattr(self, "_block", None)  # operators stored before it was kept: none
        if block is None or not self.has_values or tuple(self.input_shapes[1]) != box_shape(block):
            return None
        return block

    def _sources_in(self, out_box: Box) -> tuple[np.ndarray, np.ndarray]:
        """(the written cells of ``out_box``, as a mask over it; the cells of v they receive)."""
        written = self._written[_region(out_box)]
        cells = np.argwhere(written) + np.asarray([lo for lo, _ in out_box], np.int64)
        _, at = self._value_flat(cells)
        return written, _coords(at, self.input_shapes[1])

    def input_box(self, out_box: Box, i: int) -> Box:
        """The box of input ``i`` a tile of ``out_box`` reads: the tile itself of the array written
        into (input 0), the written values' bounding box, or the guides' box."""
        if i == 0:
            return out_box
        if i == 1 and self.has_values:  # the values the tile's written cells receive: their bounding box
            block = self._block_of()
            if block is not None:
                part = _meet(out_box, block)
                if any(lo == hi for lo, hi in part):
                    return tuple((0, 0) for _ in part)
                return tuple((lo - b, hi - b) for (lo, hi), (b, _) in zip(part, block))
            return _bounding(self._sources_in(out_box)[1], len(self.input_shapes[1]))
        return self._guide_box(out_box, self.guides[i - self._first_guide], self.input_shapes[i])

    fills_out = True  # `run_into`: ``x`` copied into the given array, then the written cells

    def run(self, ctx: Context, *inputs: np.ndarray) -> np.ndarray:
        return self._write(ctx, np.array(inputs[0], copy=True), inputs[1:])

    def run_into(self, ctx: Context, out: np.ndarray, *inputs: np.ndarray) -> np.ndarray:
        if any(np.may_share_memory(out, v) for v in inputs[1:]):  # the values or guides would be overwritten
            np.copyto(out, self.run(ctx, *inputs), casting="no")
            return out
        np.copyto(out, inputs[0], casting="no")
        return self._write(ctx, out, inputs[1:])

    def _write(self, ctx: Context, out: np.ndarray, rest: tuple[np.ndarray, ...]) -> np.ndarray:
        """``out`` (the tile's cells of ``x``) with the tile's written cells replaced."""
        box = ctx.tile_box
        if out.shape != box_shape(box):  # a probe of the output's dtype (one cell each input): x's own
            return out
        if not self._written[_region(box)].any():
            return out
        if not self.has_values:
            out[self._written[_region(box)]] = self.fill
            return out
        block = self._block_of()
        if block is not None:  # the tile's part of the block receives the values read, as they are
            part = _meet(box, block)
            with np.errstate(all="ignore"):
                out[_region(part, box)] = np.asarray(rest[0]).astype(out.dtype, copy=False)
            return out
        written, sources = self._sources_in(box)
        lo = np.asarray([b[0] for b in ctx.input_boxes[1]], np.int64)
        values = np.asarray(rest[0])
        with np.errstate(all="ignore"):
            out[written] = values[tuple((sources - lo).T)].astype(out.dtype, copy=False)
        return out

    def map_b_pairs(self, cells: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        cells = np.asarray(cells, np.int64).reshape(-1, len(self._shape))
        if i == 0:
            written, _ = self._value_flat(cells)
            return np.flatnonzero(~written), cells[~written]
        if i == 1 and self.has_values:
            written, at = self._value_flat(cells)
            return np.flatnonzero(written), _coords(at, self.input_shapes[1])
        guide = self._guide_b(cells, self.guides[i - self._first_guide], self.input_shapes[i])
        return np.arange(len(cells), dtype=np.int64), guide

    def map_b(self, cells: np.ndarray, i: int) -> np.ndarray:
        return unique_rows(self.map_b_pairs(cells, i)[1])

    def map_f(self, cells: np.ndarray, i: int) -> np.ndarray:
        cells = np.asarray(cells, np.int64).reshape(-1, len(self.input_shapes[i]))
        if i == 0:
            written = self._written.ravel()[_flat(cells, self._shape)]
            return unique_rows(cells[~written])
        if i == 1 and self.has_values:
            sources = self._source if self._source is not None else np.zeros(self.written_cells, np.int64)
            hit = np.isin(sources, _flat(cells, self.input_shapes[1]))
            return _coords(np.flatnonzero(self._written.ravel())[hit], self._shape)
        return unique_rows(self._guide_f(cells, self.guides[i - self._first_guide], self.input_shapes[i]))


class Opaque(Operator):
    """A coarse step: ``call(*inputs)`` on whole arrays, every output cell depending on every
    input cell (sound by construction), for code with no operator of its own.

    Parameters
    ----------
    call : callable
        Computes the output from the inputs (a `subzero.trace.calls.NumpyCall` in traces).
    output_shape : tuple of int
        The node's shape (the call's result is reshaped to it: 0-d results are one cell).
    reason : str
        Why the step is coarse, for ``info``, ``explain`` and the trace report.
    pick : int, str or None
        For a call returning a tuple (a dict), which element (key) this node is.
    nin : int
        The number of inputs.
    coarse : bool
        False when all-to-all is the exact lineage (a count or a sort of values: any cell can
        change any output).
    """

    def __init__(self, call: Callable[..., Any], output_shape: Shape, reason: str, pick: int | str | None = None,
                 nin: int = 1, coarse: bool = True):
        self.coarse = bool(coarse)
        self.call = call
        # the nodes picking elements of one call's result share its key: the first to run computes
        # the call, the others take their element (`_shared_result`)
        self._call_key = _call_key(call) if pick is not None else None
        self.shape = tuple(int(n) for n in output_shape)
        self.reason = str(reason)
        self.pick = pick
        self.nin = int(nin)

    @property
    def n_inputs(self) -> int | None:
        return self.nin

    def supported_modes(self) -> set[Mode]:
        return {Mode.BLACKBOX}

    @property
    def reads_only(self) -> bool:
        """Whether the call never writes its inputs: one that says so (``reads_only``), as the values
        an array had when traced, which read nothing (its tiles then get views, not copies)."""
        return bool(getattr(self.call, "reads_only", False))

    @reads_only.setter
    def reads_only(self, value: bool) -> None:
        raise AttributeError("Opaque.reads_only follows its call (a call that reads nothing says so)")

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        if len(input_shapes) != self.nin:
            raise WorkflowError(f"Opaque({self.call!r}) takes {self.nin} input(s), got {len(input_shapes)}")
        return self.shape

    def run(self, ctx: Context, *inputs: np.ndarray) -> np.ndarray:
        key = getattr(self, "_call_key", None)  # operators stored before it was kept: none
        if key is not None:
            out = np.array(_shared_result(key, self.call, inputs, self.pick), copy=True)
        else:
            with warnings.catch_warnings():  # the trace ran the call once already and showed its warnings
                warnings.simplefilter("ignore")
                out = self.call(*inputs)
            if self.pick is not None:
                out = out[self.pick]
        out = np.asarray(out)
        if out.size != int(np.prod(self.shape)):
            raise WorkflowError(f"{self.call!r} returned {out.size} values where the trace saw "
                                f"{int(np.prod(self.shape))}: the step depends on values that changed")
        return out.reshape(self.shape)

    def stored_form(self) -> "Opaque":
        """The operator as a run saves it when its output array is stored: a call that holds
        its result (the values an array had when traced) is saved without them, and
        `restored` reads them back from that array (one copy in the store, not two)."""
        strip = getattr(self.call, "without_value", None)
        if strip is None:
            return self
        out = copy.copy(self)
        out.call = strip()
        return out

    def restored(self, read_output: Callable[[], np.ndarray]) -> "Opaque":
        """The operator a store loaded, its held result read (on first use) by ``read_output``
        from its node's stored array (see `stored_form`)."""
        bind = getattr(self.call, "reading", None)
        if bind is None:
            return self
        out = copy.copy(self)
        out.call = bind(read_output)
        return out

    def __repr__(self) -> str:
        return f"Opaque({self.call!r}{'' if self.pick is None else f'[{self.pick}]'})"


# -- one call, several nodes: an Opaque per element of a call's result -------------------------
_KEYS: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()
#: call key -> (the inputs' digest, the call's result, the picks not served yet); a few at most
_RESULTS: "OrderedDict[str, tuple[str, Any, set[Any]]]" = OrderedDict()
_RESULTS_LOCK = threading.Lock()
_RESULTS_KEPT = 2


def _call_key(call: Any) -> str | None:
    """A key the call object keeps while traced (the Opaque nodes of one call share it, and it
    travels with them when pickled), None for a call that cannot be weakly referenced."""
    try:
        key = _KEYS.get(call)
        if key is None:
            key = _KEYS[call] = uuid.uuid4().hex
        return key
    except TypeError:
        return None


def _inputs_digest(inputs: Sequence[Any]) -> str:
    h = xxhash.xxh3_64()
    for a in inputs:
        a = np.ascontiguousarray(a)
        h.update(repr((a.shape, a.dtype.str)).encode())
        h.update(a.data if a.dtype != object else repr(a.tolist()).encode())
    return h.hexdigest()


def _shared_result(key: str, call: Callable[..., Any], inputs: Sequence[Any], pick: Any) -> Any:
    """Element ``pick`` of ``call(*inputs)``, computing the call once for all the nodes that pick
    from it in this process (the same key, inputs of the same values): each node takes its own
    element and the result is dropped once every element that is an array was taken."""
    digest_in = _inputs_digest(inputs)
    with _RESULTS_LOCK:
        kept = _RESULTS.get(key)
        if kept is not None and kept[0] == digest_in and pick in kept[2]:
            kept[2].discard(pick)
            if not kept[2]:
                del _RESULTS[key]
            return kept[1][pick]
    with warnings.catch_warnings():  # the trace ran the call once already and showed its warnings
        warnings.simplefilter("ignore")
        result = call(*inputs)
    items = result.items() if isinstance(result, dict) else \
        enumerate(result) if isinstance(result, (tuple, list)) else ()
    left = {k for k, v in items if isinstance(v, (np.ndarray, np.generic)) and k != pick}
    if left:
        with _RESULTS_LOCK:
            _RESULTS[key] = (digest_in, result, left)
            _RESULTS.move_to_end(key)
            while len(_RESULTS) > _RESULTS_KEPT:
                _RESULTS.popitem(last=False)
    return result[pick]


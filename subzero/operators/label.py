"""Label: connected components with canonical ids, tiled in two passes.

A component's id is ``1 +`` the flat (C order) index of its first cell, so it depends
on that component alone and every tile can name it.  The operator runs as one task per
tile in two passes (`subzero.Operator.prepare` / `subzero.Operator.combine`):

1. ``prepare`` labels a tile locally and returns what its neighbours need: the
   foreground cells on the faces it shares with other tiles, each with the canonical id
   of its local component, and the bounding box of every such *boundary* component;
   O(tile perimeter).
2. ``combine`` (in the driver) joins the faces: two boundary cells adjacent under the
   structure, in different tiles, unite their components (a graph over the boundary
   components, scipy's ``connected_components``).  It keeps, for the *seam components*
   (global components made of several local parts), the map local id -> global id, their
   bounding boxes, and per tile the box its lineage may reach (`Label.lineage_box`).
3. ``run`` labels its tile again, renames the parts of seam components, and writes
   lineage; FULL lineage lists a seam component's input cells, which lie partly in other
   tiles, so the task reads them from the store (`subzero.context.Context.read_input`);
   PAY and COMP lineage is one record per component, read nothing beyond the tile.

Run untiled (one tile covering the array), nothing crosses a seam and ``run`` is the
whole-array operator.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
import numpy as np
from numpy.typing import ArrayLike

from subzero.context import Context
from subzero.errors import LineageError, WorkflowError
from subzero.lazy import LazyModule
from subzero.modes import Mode
from subzero.operator import Operator
from subzero.operators.identity import IdentityMapping
from subzero.operators._kernels import (cell_set_boxes, decode_region, group_boxes, region_envelopes,
                                       repeat_pairs)
from subzero.tiling import Box, Elementwise, Shape, full_box

# imported on first use: a query answered from stored lineage needs no scipy
ndimage = LazyModule("scipy.ndimage")
sparse = LazyModule("scipy.sparse")
csgraph = LazyModule("scipy.sparse.csgraph")

_START, _STOP = attrgetter("start"), attrgetter("stop")

__all__ = ["Label", "TileSummary", "SeamIndex", "canonical_ids", "first_cells", "component_boxes",
           "first_cells_in_boxes", "component_table", "read_component_table"]


@dataclass(frozen=True)
class TileSummary:
    """What `Label.prepare` sends to the driver for one tile: O(its perimeter).

    ``cells`` are the global flat ids of the tile's foreground cells on faces it shares
    with another tile, ``comp`` the canonical id of each one's local component;
    ``parts`` are those components (canonical ids, unique), ``lo``/``hi`` their
    half-open bounding boxes in global coordinates.
    """

    box: Box
    cells: np.ndarray
    comp: np.ndarray
    parts: np.ndarray
    lo: np.ndarray
    hi: np.ndarray


@dataclass(frozen=True)
class SeamIndex:
    """What `Label.combine` keeps for the tiles: O(seam components + tiles).

    ``part_ids`` (sorted) are the local canonical ids of the parts of components that
    cross a seam, ``part_global`` the global canonical id of each; ``global_ids``
    (sorted) are those components, ``global_lo``/``global_hi`` their half-open bounding
    boxes, and ``span_tiles[span_ptr[k]:span_ptr[k + 1]]`` the tiles component ``k``
    has parts in.  ``tiles`` maps every tile box of the first pass to its index in
    ``tile_lo``/``tile_hi``; ``reach_lo``/``reach_hi`` are the boxes holding each tile's
    lineage (its box grown by the seam components it has parts of).
    """

    shape: tuple[int, ...]
    tiles: dict
    tile_lo: np.ndarray
    tile_hi: np.ndarray
    reach_lo: np.ndarray
    reach_hi: np.ndarray
    part_ids: np.ndarray
    part_global: np.ndarray
    global_ids: np.ndarray
    global_lo: np.ndarray
    global_hi: np.ndarray
    span_ptr: np.ndarray
    span_tiles: np.ndarray


class Label(IdentityMapping, Operator):
    """Connected components of the non-zero cells (``scipy.ndimage.label``), with canonical ids.

    A cell of a component is labelled ``1 +`` the flat (C order) index of the component's
    first cell; background cells are 0.  Unlike scipy's 1..n numbering, which counts the
    components before it, a component's id depends on that component alone, so it is
    reproduced from the component's cells, and tiles agree on it.

    ``structure`` is scipy's: a symmetric ``(3,) * ndim`` boolean array (default: the
    cross, `scipy.ndimage.generate_binary_structure` ``(ndim, 1)``).

    Tiled in two passes (see the module docstring): the driver holds only the cells on
    the tiles' shared faces, and a task its tile (grown by at most half a tile per side
    when it stores the lineage of components crossing its seams), plus the lineage it
    writes.

    Lineage: a labelled cell depends on every cell of its component and of its *ring*
    (the background cells adjacent to it under the structure: one of them turned on joins
    the component, perhaps to another, and can change its first cell, so its id); a
    background cell on itself.  Modes:

    - ``FULL``: one region pair per component per tile (the component's cells in the
      tile on the out side, all its cells and its ring on the in side), one per
      background cell;
    - ``PAY`` and ``COMP``: one payload over every cell of the tile
      (`subzero.context.Context.lwrite_tile`), the table of its components' records
      (`component_table`: each one's canonical id and the box holding it and its ring,
      ``8 * (1 + 2 * ndim)`` bytes per component whatever its size); ``map_p`` reads a
      cell's label back from the stored label array (attached by the run,
      `attach_output`): a background cell reads itself, a labelled cell its component
      (the cells with its id in its box) grown by the structure.  Payloads of stores
      written before (a component's bounding box and bitmask; the empty payload,
      "itself") are still read.

    Examples
    --------
    >>> import subzero as sz
    >>> wf = sz.Workflow("blobs")
    >>> node = wf.add(Label(), wf.input("mask"))
    """

    tiling = Elementwise()
    entire_array_safe = True
    #: set by `combine` (None: no first pass yet, or an operator pickled before Label was tiled)
    _seams: SeamIndex | None = None

    def __init__(self, structure: ArrayLike | None = None):
        self.structure = None if structure is None else np.asarray(structure, dtype=bool)

    def supported_modes(self) -> set[Mode]:
        return {Mode.FULL, Mode.PAY, Mode.COMP}

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        shape = tuple(input_shapes[0])
        s = self.structure
        if s is not None:
            if s.ndim != len(shape):
                raise WorkflowError(f"Label: structure is {s.ndim}-D (shape {s.shape}), the input is {len(shape)}-D "
                                    f"(shape {shape}); they must match")
            if s.shape != (3,) * s.ndim or not np.array_equal(s, s[(slice(None, None, -1),) * s.ndim]):
                raise WorkflowError(f"Label: structure must be a symmetric {(3,) * s.ndim} array "
                                    f"(scipy.ndimage.label's rule), got shape {s.shape}; e.g. "
                                    f"ndimage.generate_binary_structure({s.ndim}, 1)")
        return shape

    def _structure(self, ndim: int) -> np.ndarray:
        return ndimage.generate_binary_structure(ndim, 1) if self.structure is None else self.structure

    # -- pass 1: each tile's faces ----------------------------------------------------------
    def prepare(self, ctx: Context, x: np.ndarray) -> TileSummary:
        """Label the tile; return its boundary components (`TileSummary`, O(perimeter))."""
        shape = tuple(self.input_shapes[0])
        box = tuple(ctx.input_boxes[0])
        ndim = len(shape)
        if box == full_box(shape):  # one tile: no faces shared, nothing to label yet
            none = np.zeros(0, np.int64)
            return TileSummary(box, none, none, none, np.zeros((0, ndim), np.int64), np.zeros((0, ndim), np.int64))
        origin = np.array([lo for lo, _ in box], np.int64)
        labels, n = ndimage.label(np.asarray(x) != 0, self._structure(ndim))
        canon = canonical_ids(labels, n, origin, shape)
        flat = labels.reshape(-1)
        face = _inner_face_cells(labels, box, shape)
        comp = flat[face].astype(np.int64) - 1
        parts = np.unique(comp)
        boundary = np.zeros(n, bool)
        boundary[parts] = True
        fg = np.flatnonzero(flat)
        lab = flat[fg].astype(np.int64) - 1
        keep = boundary[lab]
        lo, hi = group_boxes(np.stack(np.unravel_index(fg[keep], labels.shape), axis=1).reshape(-1, len(shape)),
                             lab[keep], n)
        cells = np.ravel_multi_index(tuple((np.stack(np.unravel_index(face, labels.shape), axis=1) + origin).T),
                                     shape) if len(face) else np.zeros(0, np.int64)
        return TileSummary(box, np.asarray(cells, np.int64), canon[comp], canon[parts], lo[parts] + origin,
                           hi[parts] + origin)

    def combine(self, summaries: list) -> None:
        """Unite boundary components across the tiles' shared faces; keep a `SeamIndex`."""
        shape = tuple(self.input_shapes[0])
        ndim = len(shape)
        tiles = [tuple(tuple(int(v) for v in r) for r in s.box) for s in summaries]
        cells = np.concatenate([s.cells for s in summaries] + [np.zeros(0, np.int64)])
        comp = np.concatenate([s.comp for s in summaries] + [np.zeros(0, np.int64)])
        parts = np.concatenate([s.parts for s in summaries] + [np.zeros(0, np.int64)])
        part_lo = np.concatenate([s.lo.reshape(-1, ndim) for s in summaries] + [np.zeros((0, ndim), np.int64)])
        part_hi = np.concatenate([s.hi.reshape(-1, ndim) for s in summaries] + [np.zeros((0, ndim), np.int64)])
        part_tile = np.repeat(np.arange(len(summaries)), [len(s.parts) for s in summaries])
        # edges: boundary cells that are neighbours under the structure (one offset of each
        # symmetric pair, since the graph is undirected)
        order = np.argsort(cells, kind="stable")
        cells, comp = cells[order], comp[order]
        coords = np.stack(np.unravel_index(cells, shape), axis=1).reshape(-1, ndim) if len(cells) \
            else np.zeros((0, ndim), np.int64)
        us, vs = [], []
        for d in _half_offsets(self._structure(ndim)):
            near = coords + d
            ok = np.all((near >= 0) & (near < np.asarray(shape)), axis=1)
            ids = np.ravel_multi_index(tuple(near[ok].T), shape) if ok.any() else np.zeros(0, np.int64)
            pos = np.minimum(np.searchsorted(cells, ids), max(len(cells) - 1, 0))
            hit = cells[pos] == ids if len(cells) else np.zeros(0, bool)
            us.append(comp[ok][hit])
            vs.append(comp[pos[hit]])
        u, v = np.concatenate(us + [np.zeros(0, np.int64)]), np.concatenate(vs + [np.zeros(0, np.int64)])
        # components of the graph over boundary components (canonical ids are unique across tiles)
        porder = np.argsort(parts, kind="stable")
        parts, part_lo, part_hi, part_tile = parts[porder], part_lo[porder], part_hi[porder], part_tile[porder]
        n_parts = len(parts)
        graph = sparse.coo_matrix((np.ones(len(u), np.int8), (np.searchsorted(parts, u), np.searchsorted(parts, v))),
                           shape=(n_parts, n_parts)).tocsr()
        n_groups, group = csgraph.connected_components(graph, directed=False) if n_parts else (0, np.zeros(0, np.int64))
        size = np.bincount(group, minlength=n_groups)
        crossing = size[group] > 1
        # the global canonical id is the smallest part id (its first cell comes first)
        by_group = np.lexsort((parts, group))
        first = np.flatnonzero(np.r_[True, group[by_group][1:] != group[by_group][:-1]]) if n_parts \
            else np.zeros(0, np.int64)
        gmin = np.zeros(n_groups, np.int64)
        gmin[group[by_group][first]] = parts[by_group][first]
        glo = np.full((n_groups, ndim), np.iinfo(np.int64).max)
        ghi = np.full((n_groups, ndim), np.iinfo(np.int64).min)
        np.minimum.at(glo, group, part_lo)
        np.maximum.at(ghi, group, part_hi)
        multi = np.flatnonzero(size > 1)
        multi = multi[np.argsort(gmin[multi])]
        rank = np.full(n_groups, -1, np.int64)
        rank[multi] = np.arange(len(multi))
        # the tiles each seam component has parts in (CSR, in global_ids order)
        span = np.unique(np.stack([rank[group[crossing]], part_tile[crossing]], axis=1), axis=0) \
            if crossing.any() else np.zeros((0, 2), np.int64)
        self._seams = _seam_index(shape, tiles, parts[crossing], gmin[group[crossing]], gmin[multi], glo[multi],
                                  ghi[multi], span)

    def combine_output(self, labels: np.ndarray, boxes: Sequence[Box]) -> bool:
        """Keep the `SeamIndex` `combine` keeps over tiles of ``boxes`` (in tile order), made from
        this (bound) operator's whole output ``labels`` instead of every tile's first pass: a
        traced run computed it already, and canonical ids do not depend on the tiling.

        The components crossing a seam are the labels on both sides of one (a pair of cells
        adjacent under the structure); their parts (a tile's first pass labels them apart) are
        the connected sets of their cells within a tile, found over those cells alone.  The
        index is the one the first pass and `combine` give, array for array.

        Returns
        -------
        bool
            False (nothing kept: run the first pass) when ``labels`` is not an integer array of
            the bound input's shape with ids in ``0..size``, or ``boxes`` are not a full grid.

        Examples
        --------
        >>> labels = np.array([[1, 1, 0, 0], [0, 0, 0, 8], [0, 0, 0, 8]])
        >>> op = Label().bound(((3, 4),), (3, 4))
        >>> op.combine_output(labels, [((0, 3), (0, 2)), ((0, 3), (2, 4))])
        True
        >>> op._seams.global_ids.tolist()
        []
        """
        shape = tuple(int(n) for n in self.input_shapes[0])
        labels = np.asarray(labels)
        ndim = len(shape)
        tiles = [tuple((int(lo), int(hi)) for lo, hi in box) for box in boxes]
        spans = [sorted({t[a] for t in tiles}) for a in range(ndim)]
        if not ndim or labels.shape != shape or labels.dtype.kind not in "iu" or not tiles or \
                len(set(tiles)) != len(tiles) or int(np.prod([len(s) for s in spans])) != len(tiles) or \
                any(s[0][0] != 0 or s[-1][1] != n or any(a[1] != b[0] for a, b in zip(s, s[1:]))
                    for s, n in zip(spans, shape)):
            return False
        starts = [np.array([lo for lo, _ in s], np.int64) for s in spans]
        grid = np.empty(tuple(len(s) for s in spans), np.int64)  # grid position -> tile index
        grid[tuple(np.array([[s.index(t[a]) for t in tiles] for a, s in enumerate(spans)]).reshape(ndim, -1))] = \
            np.arange(len(tiles))
        structure = self._structure(ndim)
        offsets = np.argwhere(structure) - 1
        # the components with cells adjacent across a seam (O(the seams' cells))
        found = [np.zeros(0, np.int64)]
        for a in range(ndim):
            for b in starts[a][1:].tolist():
                before, after = np.take(labels, b - 1, axis=a), np.take(labels, b, axis=a)
                for d in offsets[offsets[:, a] == 1]:
                    rest = np.delete(d, a).tolist()
                    x = before[tuple(slice(max(0, -r), n - max(0, r)) for r, n in zip(rest, before.shape))]
                    y = after[tuple(slice(max(0, r), n - max(0, -r)) for r, n in zip(rest, after.shape))]
                    found.append(x[(x != 0) & (y != 0)].astype(np.int64))
        global_ids = np.unique(np.concatenate(found))
        if len(global_ids) and (global_ids[0] < 0 or global_ids[-1] > labels.size):
            return False
        table = np.zeros(labels.size + 1, bool)
        table[global_ids] = True
        # their cells, in raster order (labels are canonical ids, in 0..size: clipping changes none)
        flat = np.flatnonzero(np.take(table, labels.reshape(-1), mode="clip"))
        coords = np.stack(np.unravel_index(flat, shape), axis=1).reshape(-1, ndim).astype(np.int64)
        gid = labels.reshape(-1)[flat].astype(np.int64)
        tile_of = grid[tuple(np.searchsorted(starts[a], coords[:, a], side="right") - 1 for a in range(ndim))]
        # their parts: the graph of those cells adjacent under the structure within a tile; a
        # part's id is 1 + its first cell's flat index (its first in raster order)
        us, vs = [], []
        for d in _half_offsets(structure):
            near = coords + d
            ok = np.flatnonzero(np.all((near >= 0) & (near < np.asarray(shape)), axis=1))
            ids = np.ravel_multi_index(tuple(near[ok].T), shape) if len(ok) else np.zeros(0, np.int64)
            pos = np.minimum(np.searchsorted(flat, ids), max(len(flat) - 1, 0))
            hit = (flat[pos] == ids) & (tile_of[pos] == tile_of[ok]) if len(flat) else np.zeros(0, bool)
            us.append(ok[hit])
            vs.append(pos[hit])
        u, v = np.concatenate(us + [np.zeros(0, np.int64)]), np.concatenate(vs + [np.zeros(0, np.int64)])
        graph = sparse.coo_matrix((np.ones(len(u), np.int8), (u, v)), shape=(len(flat), len(flat))).tocsr()
        _, part = csgraph.connected_components(graph, directed=False) if len(flat) else (0, np.zeros(0, np.int64))
        _, first = np.unique(part, return_index=True)
        ids, owners = flat[first] + 1, gid[first]
        by_id = np.argsort(ids, kind="stable")
        rank = np.searchsorted(global_ids, gid)
        glo, ghi = group_boxes(coords, rank, len(global_ids))
        span = np.unique(np.stack([rank[first], tile_of[first]], axis=1), axis=0) if len(first) \
            else np.zeros((0, 2), np.int64)
        self._seams = _seam_index(shape, tiles, ids[by_id].astype(np.int64), owners[by_id], global_ids,
                                  glo.reshape(-1, ndim), ghi.reshape(-1, ndim), span.astype(np.int64))
        return True

    def lineage_box(self, out_box: Box, i: int) -> Box:
        """The tile's box grown by the bounding boxes of the seam components it holds parts of,
        and by one cell for the components' rings."""
        seams = self._seams
        shape = np.asarray(self.input_shapes[0], np.int64)
        lo = np.array([a for a, _ in out_box], np.int64)
        hi = np.array([b for _, b in out_box], np.int64)
        if seams is not None and seams.shape == tuple(self.input_shapes[0]):
            key = tuple((int(a), int(b)) for a, b in out_box)
            if key in seams.tiles:
                t = seams.tiles[key]
                lo, hi = seams.reach_lo[t].copy(), seams.reach_hi[t].copy()
            else:  # a box the first pass did not see: the reach of every tile it meets
                meets = np.all((seams.tile_lo < hi) & (seams.tile_hi > lo), axis=1)
                if meets.any():
                    lo = np.minimum(lo, seams.reach_lo[meets].min(axis=0))
                    hi = np.maximum(hi, seams.reach_hi[meets].max(axis=0))
        lo, hi = np.maximum(lo - 1, 0), np.minimum(hi + 1, shape)
        return tuple(zip(lo.tolist(), hi.tolist()))

    # -- pass 2: relabel the tile and write its lineage ---------------------------------------
    def run(self, ctx: Context, x: np.ndarray) -> np.ndarray:
        """Label the tile, rename the parts of seam components with their global ids, and
        write the lineage ``ctx.modes`` asks for; a whole-array call needs no first pass."""
        shape = tuple(self.input_shapes[0]) if self.input_shapes else tuple(np.shape(x))
        box = tuple(ctx.input_boxes[0]) if ctx is not None and ctx.input_boxes else full_box(np.shape(x))
        origin = np.array([lo for lo, _ in box], np.int64)
        seams = self._seams_for(box, shape)
        labels, n = ndimage.label(np.asarray(x) != 0, self._structure(len(shape)))
        # PAY/COMP records need every component's box; its first cell is then found inside it
        boxes = component_boxes(labels, n) if ctx is not None and ctx.modes & {Mode.PAY, Mode.COMP} else None
        canon = canonical_ids(labels, n, origin, shape, boxes)
        crossing = np.zeros(n, bool)
        if seams is not None and n and len(seams.part_ids):
            pos = np.minimum(np.searchsorted(seams.part_ids, canon), len(seams.part_ids) - 1)
            crossing = seams.part_ids[pos] == canon
            canon[crossing] = seams.part_global[pos[crossing]]
        if ctx is not None and ctx.modes & {Mode.FULL, Mode.PAY, Mode.COMP}:
            self._write_lineage(ctx, labels, canon, crossing, origin, shape, boxes)
        return np.concatenate([np.zeros(1, np.int64), canon])[labels]

    def whole(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """``(ids, numbers, n)`` over the whole array ``x`` from one labelling: ``ids`` as `run`
        gives them on it, ``numbers`` scipy's own 1..n labels (int32), which
        `subzero.operators.numeric.Relabel` gives from ``ids`` (canonical ids keep the raster order
        of the components' first cells, which is scipy's numbering), and ``n`` (a trace evaluating
        ``scipy.ndimage.label`` labels once for both nodes).

        Examples
        --------
        >>> ids, numbers, n = Label().whole(np.array([[0, 1, 0, 1], [1, 1, 0, 0]]))
        >>> ids.tolist(), numbers.tolist(), n
        ([[0, 2, 0, 4], [2, 2, 0, 0]], [[0, 1, 0, 2], [1, 1, 0, 0]], 2)
        """
        shape = tuple(int(k) for k in np.shape(x))
        labels, n = ndimage.label(np.asarray(x) != 0, self._structure(len(shape)))
        canon = canonical_ids(labels, n, np.zeros(len(shape), np.int64), shape)
        return np.concatenate([np.zeros(1, np.int64), canon])[labels], labels.astype(np.int32, copy=False), int(n)

    def _seams_for(self, box: Box, shape: tuple[int, ...]) -> SeamIndex | None:
        """The first pass's seam index for this tile, or None for a whole-array call."""
        if box == full_box(shape):
            return None
        seams = self._seams
        key = tuple((int(lo), int(hi)) for lo, hi in box)
        if seams is None or seams.shape != shape or key not in seams.tiles:
            raise WorkflowError(
                f"Label: tile {key} of an input of shape {shape} was not in the first pass; Label runs in two "
                "passes (prepare on every tile, then combine in the driver) before its tiles run, as the executor "
                "does; run it on the whole array or call prepare/combine over the same tiles first")
        return seams

    def _write_lineage(self, ctx, labels: np.ndarray, canon: np.ndarray, crossing: np.ndarray, origin: np.ndarray,
                       shape: tuple[int, ...], boxes: "tuple[np.ndarray, np.ndarray] | None" = None) -> None:
        """Every mode in ``ctx.modes``, with no loop per component.  ``FULL``: the cells of
        components inside the tile and their rings from the tile, seam components from the
        store (`_seam_reads`).  ``PAY``/``COMP``: one payload over the tile, the table of
        its components' records (`component_records`, from the tile's ``boxes`` when
        `component_boxes` gave them already), nothing read beyond the tile."""
        ndim = labels.ndim
        n = len(canon)
        if Mode.FULL in ctx.modes:
            flat = labels.reshape(-1)
            fg = np.flatnonzero(flat)
            lab = flat[fg].astype(np.int64) - 1
            fg_cells = np.stack(np.unravel_index(fg, labels.shape), axis=1).reshape(-1, ndim)  # raster order
            inner = ~crossing[lab]
            in_lab = lab[inner]
            in_cells = fg_cells[inner]
            # each inner component and its ring, in global coordinates (its reads): the tile's labels
            # are the raster of the inner components already
            inner_label = np.r_[False, ~crossing]
            ring, ring_lab = raster_rings(np.where(inner_label[labels], labels, 0), labels == 0, origin, shape,
                                          self._structure(ndim))
            reads = np.concatenate([in_cells + origin, ring])
            reads_lab = np.concatenate([in_lab, ring_lab])
            # seam components: one pair per global component (its parts in this tile merge)
            seam_ids = np.unique(canon[crossing])
            seam_pair = np.searchsorted(seam_ids, canon[lab[~inner]])
            seam_reads, seam_owner = self._seam_reads(ctx, seam_ids, shape) if len(seam_ids) else \
                (np.zeros((0, ndim), np.int64), np.zeros(0, np.int64))
            bg = np.flatnonzero(flat == 0)
            bg_cells = np.stack(np.unravel_index(bg, labels.shape), axis=1).reshape(-1, ndim)
            bg_pair = n + np.arange(len(bg), dtype=np.int64)
            ctx.lwrite_many(np.concatenate([in_cells, bg_cells]), np.concatenate([reads, bg_cells + origin]),
                            out_pair=np.concatenate([in_lab, bg_pair]), in_pair=[np.concatenate([reads_lab, bg_pair])],
                            in_global=True)
            if len(seam_ids):
                ctx.lwrite_many(fg_cells[~inner], seam_reads, out_pair=seam_pair, in_pair=[seam_owner],
                                in_global=True)
        if ctx.modes & {Mode.PAY, Mode.COMP}:  # one payload over the tile: its components' records
            ids, lo, hi = self.component_records(labels, canon, crossing, origin, shape, boxes)
            ctx.lwrite_tile(component_table(ids, lo, hi), lo, hi)

    def component_records(self, labels: np.ndarray, canon: np.ndarray, crossing: np.ndarray, origin: np.ndarray,
                          shape: tuple[int, ...], boxes: "tuple[np.ndarray, np.ndarray] | None" = None
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One record per component with cells in the tile: its canonical id (sorted) and the
        half-open box holding its cells and its ring (its bounding box grown by one cell,
        clipped to the array).

        A component inside the tile takes its bounding box from the tile (``boxes``, the
        tile's `component_boxes`, computed here when not given), a seam component its global
        box from the first pass (`SeamIndex`): nothing is read beyond the tile.
        """
        ndim = labels.ndim
        n = len(canon)
        if not n:
            return np.zeros(0, np.int64), np.zeros((0, ndim), np.int64), np.zeros((0, ndim), np.int64)
        lo, hi = component_boxes(labels, n) if boxes is None else boxes
        lo, hi = lo + origin, hi + origin
        if not crossing.any():  # local components in raster order of their first cells: ids already sorted
            return canon, np.maximum(lo - 1, 0), np.minimum(hi + 1, np.asarray(shape, np.int64))
        seams = self._seams
        k = np.searchsorted(seams.global_ids, canon[crossing])
        lo[crossing], hi[crossing] = seams.global_lo[k], seams.global_hi[k]
        ids, first = np.unique(canon, return_index=True)  # the parts of a seam component share its record
        return ids, np.maximum(lo[first] - 1, 0), np.minimum(hi[first] + 1, np.asarray(shape, np.int64))

    def _seam_reads(self, ctx, seam_ids: np.ndarray, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """The cells of each seam component and of its ring (global coordinates), and the
        component (index into ``seam_ids``) each belongs to.

        Components near the tile (boxes within the tile grown by half its size per side)
        come from one box ``R`` read from the store around them: label ``R`` alone and keep
        the crop component containing the component's first cell (canonical id - 1).  That
        is exactly the global component ``C``: ``C`` lies in its bounding box, within ``R``,
        and is connected through its own cells, so the crop component holds all of ``C``;
        a path inside ``R`` is a path in the whole array, so it holds nothing more.  One
        lookup table over the crop's labels picks every near component's cells at once.

        A component reaching further (up to the whole array) is assembled tile by tile
        from the tiles it spans instead, so no task holds more than a tile of the input:
        each such tile is read and labelled once, its parts renamed through the seam index,
        and the cells named by the component's global id kept.  Those parts are all of
        ``C`` (every part of a component crossing a seam touches a shared face, so the
        first pass saw it, and ``combine`` united exactly the parts of ``C``).
        """
        seams = self._seams
        ndim = len(shape)
        k = np.searchsorted(seams.global_ids, seam_ids)
        glo, ghi = seams.global_lo[k], seams.global_hi[k]
        tlo = np.array([lo for lo, _ in ctx.input_boxes[0]], np.int64)
        thi = np.array([hi for _, hi in ctx.input_boxes[0]], np.int64)
        grow = np.maximum((thi - tlo) // 2, 1)
        near = np.all((glo >= tlo - grow) & (ghi <= thi + grow), axis=1)
        structure = self._structure(ndim)
        found: list[np.ndarray] = []
        owners: list[np.ndarray] = []
        if near.any():
            g = np.flatnonzero(near)
            rlo, rhi = glo[g].min(axis=0), ghi[g].max(axis=0)
            crop, n_crop = ndimage.label(ctx.read_input(0, tuple(zip(rlo.tolist(), rhi.tolist()))) != 0, structure)
            seeds = np.stack(np.unravel_index(seam_ids[g] - 1, shape), axis=1).reshape(-1, ndim) - rlo
            seed_label = crop[tuple(seeds.T)]
            if np.any(seed_label == 0) or len(np.unique(seed_label)) != len(g):
                bad = seeds[np.argmax(seed_label == 0)] + rlo if np.any(seed_label == 0) else seeds[0] + rlo
                raise LineageError(f"Label: the stored input does not hold the components of the first pass "
                                   f"(near cell {tuple(int(v) for v in bad)}); the input changed between the passes")
            table = np.zeros(n_crop + 1, np.int64)
            table[seed_label] = g + 1
            raster = table[crop]  # component + 1 on its cells, 0 elsewhere
            at = np.flatnonzero(raster)
            found.append(np.stack(np.unravel_index(at, crop.shape), axis=1).reshape(-1, ndim) + rlo)
            owners.append(raster.reshape(-1)[at] - 1)
            near_ring, near_owner = raster_rings(raster, crop == 0, rlo, shape, structure)
        far = np.flatnonzero(~near)
        if len(far):
            spans = [seams.span_tiles[seams.span_ptr[c]:seams.span_ptr[c + 1]] for c in k[far].tolist()]
            spanned = np.unique(np.concatenate(spans))
            wanted = seam_ids[far]  # sorted, as seam_ids is
            for t in spanned.tolist():
                box = tuple(zip(seams.tile_lo[t].tolist(), seams.tile_hi[t].tolist()))
                labels, n = ndimage.label(ctx.read_input(0, box) != 0, structure)
                canon = canonical_ids(labels, n, seams.tile_lo[t], shape)
                pos = np.minimum(np.searchsorted(seams.part_ids, canon), len(seams.part_ids) - 1)
                named = np.where(seams.part_ids[pos] == canon, seams.part_global[pos], canon)
                hit = np.minimum(np.searchsorted(wanted, named), len(wanted) - 1)
                table = np.concatenate([[-1], np.where(wanted[hit] == named, far[hit], -1)])
                owner = table[labels].reshape(-1)
                at = np.flatnonzero(owner >= 0)
                found.append(np.stack(np.unravel_index(at, labels.shape), axis=1).reshape(-1, ndim)
                             + seams.tile_lo[t])
                owners.append(owner[at])
        cells = np.concatenate(found + [np.zeros((0, ndim), np.int64)])
        owner = np.concatenate(owners + [np.zeros(0, np.int64)])
        rings, ring_owners = [np.zeros((0, ndim), np.int64)], [np.zeros(0, np.int64)]
        if near.any():  # found from the crop's raster above
            rings.append(near_ring)
            ring_owners.append(near_owner)
        if len(far):  # every cell next to a component but not in it is background: its ring
            gathered = np.isin(owner, far)
            ring, ring_owner = ring_cells(cells[gathered], owner[gathered], structure, shape, ordered=False)
            rings.append(ring)
            ring_owners.append(ring_owner)
        return np.concatenate([cells] + rings), np.concatenate([owner] + ring_owners)

    # -- the mapping default of COMP (a background cell reads itself) and payloads --------
    def attach_output(self, read: "Callable[[Box], np.ndarray]") -> None:
        """Give this (bound) operator its run's stored label array: ``read(box)`` returns its
        cells in ``box`` (global coordinates).  A run attaches it to the operators its
        queries use; component tables (`component_table`) are read back from it.  It
        is not pickled: a process opening the run attaches its own."""
        self._output = read

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_output", None)
        return state

    def _read_labels(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """The stored label array's cells in ``[lo, hi)``, through the attached reader."""
        read = getattr(self, "_output", None)
        if read is None:
            raise LineageError("Label: this lineage names components of the stored label array, and no label "
                               "array is attached to the operator; query it through its run (subzero.open_run), "
                               "which attaches it")
        return np.asarray(read(tuple(zip(lo.tolist(), hi.tolist()))))

    def _resolve(self, cells: np.ndarray, payload: bytes) -> tuple[np.ndarray, np.ndarray]:
        """``(owner, coords)``: the lineage of each of ``cells`` under a component table
        (`component_table`), read back from the stored label array: a background cell reads
        itself, a labelled cell its component and the component's ring.

        One read (the cells' box grown by the records' boxes that meet it) and no loop per
        cell or component: the components are painted on that box by one table look-up and
        their rings found by one shifted comparison per neighbour offset (`raster_rings`; a
        record's box holds its component and its ring)."""
        ndim = len(self.input_shapes[0])
        shape = tuple(self.input_shapes[0])
        cells = np.asarray(cells, np.int64).reshape(-1, ndim)
        ids, rlo, rhi = read_component_table(payload, ndim)
        if not len(cells):
            return np.zeros(0, np.int64), np.zeros((0, ndim), np.int64)
        # one read: the cells' box and the boxes of the records that meet it (every component
        # holding one of the cells is among them, with its ring)
        lo, hi = cells.min(axis=0), cells.max(axis=0) + 1
        meet = np.all((rlo < hi) & (rhi > lo), axis=1)
        wlo = np.concatenate([lo[None], rlo[meet]]).min(axis=0)
        whi = np.concatenate([hi[None], rhi[meet]]).max(axis=0)
        window = self._read_labels(wlo, whi)
        value = window[tuple((cells - wlo).T)].astype(np.int64)
        fg = np.flatnonzero(value)
        comps, which = np.unique(value[fg], return_inverse=True)
        k = np.minimum(np.searchsorted(ids, comps), max(len(ids) - 1, 0))
        if len(comps) and (not len(ids) or np.any(ids[k] != comps)):
            bad = comps[ids[k] != comps][0] if len(ids) else comps[0]
            raise LineageError(f"Label: the stored label array holds component {int(bad)}, which the tile's lineage "
                               "does not name; the label array does not match its lineage: re-run the workflow")
        background = np.flatnonzero(value == 0)
        known = np.r_[comps, -1]  # a sentinel no label equals: no branch for no components
        at = np.searchsorted(comps, window)
        raster = np.where(known[at] == window, at + 1, 0).astype(np.int32)  # component index + 1
        inside = np.flatnonzero(raster)
        ring, ring_group = raster_rings(raster, window == 0, wlo, shape, self._structure(ndim))
        region = np.concatenate([np.stack(np.unravel_index(inside, raster.shape), axis=1).reshape(-1, ndim) + wlo, ring])
        group = np.concatenate([raster.reshape(-1)[inside].astype(np.int64) - 1, ring_group])
        order = np.argsort(group, kind="stable")
        region = region[order]
        count = np.bincount(group, minlength=len(comps))
        start = np.cumsum(count) - count
        n = count[which]  # the reads of each labelled cell
        owner = np.repeat(fg, n)
        first = np.repeat(start[which] - (np.cumsum(n) - n), n)
        reads = region[first + np.arange(int(n.sum()), dtype=np.int64)]
        return np.concatenate([background, owner]), np.concatenate([cells[background], reads]).reshape(-1, ndim)

    def map_p(self, cells: np.ndarray, payload: bytes, i: int) -> np.ndarray:
        if not payload or not len(cells):
            return np.asarray(cells, np.int64)
        ndim = len(self.input_shapes[0])
        if _is_table(payload):
            return np.unique(self._resolve(cells, payload)[1], axis=0)
        return decode_region(payload, ndim)

    def map_p_pairs(self, cells: np.ndarray, payload: bytes, i: int) -> tuple[np.ndarray, np.ndarray]:
        if not payload:
            return self.map_b_pairs(cells, i)
        if _is_table(payload):
            return self._resolve(cells, payload)
        return repeat_pairs(len(cells), decode_region(payload, len(self.input_shapes[0])))

    def map_p_envelope(self, payloads: list[bytes], i: int,
                       cells: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The component boxes, read from the payloads' headers at once (region payloads: their
        bounding box; a component table: its records' boxes and the box of its pair's
        ``cells``, or the whole input without them); the empty payload ("the cell itself")
        gets the box of its pair's ``cells``, or the whole input when ``cells`` is not given."""
        shape = tuple(self.input_shapes[0])
        ndim = len(shape)
        table = np.fromiter(map(_is_table, payloads), bool, len(payloads))
        lo, hi = np.zeros((len(payloads), ndim), np.int64), np.zeros((len(payloads), ndim), np.int64)
        empty = np.zeros(len(payloads), bool)
        try:
            if not table.all():
                rest = np.flatnonzero(~table)
                lo[rest], hi[rest], empty[rest] = region_envelopes([payloads[k] for k in rest.tolist()], ndim)
        except ValueError as exc:
            raise LineageError(f"Label.map_p_envelope: {exc}; these are not Label payloads of a "
                               f"{ndim}-D input") from None
        whole = np.flatnonzero(table | empty)
        if len(whole):
            if cells is None:
                lo[whole], hi[whole] = 0, shape
            else:
                lo[whole], hi[whole] = cell_set_boxes(cells, whole, ndim)
        if cells is not None:
            for k in np.flatnonzero(table).tolist():  # a covered tile: one table per tile
                _, rlo, rhi = read_component_table(payloads[k], ndim)
                if len(rlo):
                    lo[k] = np.minimum(lo[k], rlo.min(axis=0))
                    hi[k] = np.maximum(hi[k], rhi.max(axis=0))
        return lo, hi


# =====================================================================================
# Component tables: a tile's components named, their cells read back from the label array
# =====================================================================================
#: the first word of a component table; a region payload starts with its box's first
#: coordinate, never negative
TABLE = -2


def component_table(ids: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> bytes:
    """The payload of a covered tile: ``<i8`` words `TABLE`, the number of components ``m``,
    their canonical ids (sorted), then the half-open boxes ``[lo, hi)`` holding each one's
    cells and ring: ``16 + 8 * m * (1 + 2 * ndim)`` bytes, whatever the components' sizes.

    Examples
    --------
    >>> p = component_table(np.array([5]), np.array([[0, 3]]), np.array([[2, 6]]))
    >>> len(p), read_component_table(p, 2)[0].tolist()
    (56, [5])
    """
    m = len(ids)
    return np.concatenate([[TABLE, m], np.asarray(ids, np.int64), np.asarray(lo, np.int64).reshape(-1),
                           np.asarray(hi, np.int64).reshape(-1)]).astype("<i8").tobytes()


def read_component_table(payload: bytes, ndim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ids and boxes of a `component_table` payload."""
    words = np.frombuffer(payload, "<i8") if len(payload) % 8 == 0 else np.zeros(0, np.int64)
    m = int(words[1]) if len(words) >= 2 else -1
    if len(words) < 2 or words[0] != TABLE or m < 0 or len(words) != 2 + m * (1 + 2 * ndim):
        raise LineageError(f"Label: a lineage payload of {len(payload)} bytes is not a component table of a "
                           f"{ndim}-D label array; the store is damaged: re-run the workflow")
    ids = words[2:2 + m].astype(np.int64)
    lo = words[2 + m:2 + m + m * ndim].reshape(m, ndim).astype(np.int64)
    return ids, lo, words[2 + m + m * ndim:].reshape(m, ndim).astype(np.int64)


def _is_table(payload: bytes) -> bool:
    return len(payload) >= 8 and payload[7] >= 0x80  # a negative first word: TABLE


def _seam_index(shape: tuple[int, ...], tiles: list, part_ids: np.ndarray, part_global: np.ndarray,
                global_ids: np.ndarray, glo: np.ndarray, ghi: np.ndarray, span: np.ndarray) -> SeamIndex:
    """The `SeamIndex` of ``tiles`` (boxes, in tile order) and the seam components' parts
    (sorted local ids, each one's global id), ids (sorted), boxes, and (component rank, tile)
    pairs ``span`` (sorted): `Label.combine` and `Label.combine_output` make it alike."""
    ndim = len(shape)
    span_ptr = np.concatenate([[0], np.cumsum(np.bincount(span[:, 0], minlength=len(global_ids)))]).astype(np.int64)
    # per tile: its box grown by the boxes of the seam components it holds parts of
    tile_lo = np.array([[lo for lo, _ in t] for t in tiles], np.int64).reshape(len(tiles), ndim)
    tile_hi = np.array([[hi for _, hi in t] for t in tiles], np.int64).reshape(len(tiles), ndim)
    reach_lo, reach_hi = tile_lo.copy(), tile_hi.copy()
    np.minimum.at(reach_lo, span[:, 1], glo[span[:, 0]])
    np.maximum.at(reach_hi, span[:, 1], ghi[span[:, 0]])
    return SeamIndex(shape, {t: k for k, t in enumerate(tiles)}, tile_lo, tile_hi, reach_lo, reach_hi,
                     part_ids, part_global, global_ids, glo, ghi, span_ptr, span[:, 1].astype(np.int64))


# =====================================================================================
# Kernels (vectorized over cells; loops only over axes, offsets or tiles)
# =====================================================================================
def first_cells(flat: np.ndarray, n: int) -> np.ndarray:
    """The flat index of the first cell of each label ``1..n`` in ``flat`` (0 = background).

    scipy numbers components in raster order of their first cell (a component's first
    cell gets a new provisional label, smaller than every later one, and the final
    numbering keeps that order), so the first cells are where the running maximum grows.
    This is checked: when the record positions are not exactly ``n``, a sort answers.

    Examples
    --------
    >>> first_cells(np.array([0, 1, 1, 2, 0, 3, 2]), 3).tolist()
    [1, 3, 5]
    """
    if n == 0:
        return np.zeros(0, np.int64)
    running = np.maximum.accumulate(flat)
    grows = np.empty(flat.size, bool)
    grows[0] = flat[0] > 0
    np.greater(flat[1:], running[:-1], out=grows[1:])
    first = np.flatnonzero(grows)
    if len(first) == n:  # n records, strictly increasing values in 1..n: exactly 1, 2, ..., n
        return first
    values, index = np.unique(flat, return_index=True)
    return index[values > 0]


def canonical_ids(labels: np.ndarray, n: int, origin: "Sequence[int] | np.ndarray",
                  shape: "Sequence[int] | np.ndarray",
                  boxes: "tuple[np.ndarray, np.ndarray] | None" = None) -> np.ndarray:
    """``1 +`` the global flat index of each local component's first cell, for labels ``1..n``
    of a tile at ``origin`` in an array of ``shape`` (raster order is the same in the tile
    and in the array, so the tile's first cell is the component's first cell in the tile).
    With the components' ``boxes`` (`component_boxes`), the first cells are searched for
    in them (`first_cells_in_boxes`), not over the whole tile.

    Examples
    --------
    >>> canonical_ids(np.array([[0, 1], [2, 2]]), 2, origin=(3, 4), shape=(10, 10)).tolist()
    [36, 45]
    """
    first = first_cells(labels.reshape(-1), n) if boxes is None else first_cells_in_boxes(labels, *boxes)
    coords = np.unravel_index(first, labels.shape)
    return np.ravel_multi_index(tuple(c + int(o) for c, o in zip(coords, origin)), tuple(shape)).astype(np.int64) + 1


def component_boxes(labels: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The half-open bounding box ``[lo, hi)`` (two ``(n, ndim)`` arrays, the array's own
    coordinates) of each label ``1..n`` in ``labels`` (`scipy.ndimage.find_objects`: one
    pass in C); every label must have cells, as `scipy.ndimage.label`'s do.

    Examples
    --------
    >>> lo, hi = component_boxes(np.array([[0, 1, 1], [2, 0, 1]]), 2)
    >>> lo.tolist(), hi.tolist()
    ([[0, 1], [1, 0]], [[2, 3], [2, 1]])
    """
    ndim = labels.ndim
    axes = [s for box in ndimage.find_objects(labels, n) for s in box]  # n * ndim slices
    lo = np.fromiter(map(_START, axes), np.int64, len(axes)).reshape(n, ndim)
    hi = np.fromiter(map(_STOP, axes), np.int64, len(axes)).reshape(n, ndim)
    return lo, hi


def first_cells_in_boxes(labels: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                         max_cells: int | None = None) -> np.ndarray:
    """`first_cells` of labels ``1..n`` whose bounding boxes are ``[lo, hi)`` (`component_boxes`).

    A label's first cell in C order lies on the first slice of its box along axis 0
    (``lo[k, 0]``), so only those slices are read, in C order, and the first cell of each
    that holds the label is kept: for a 2-D tile, one row segment per component instead
    of a pass over the tile.  When those slices hold more than ``max_cells`` cells (default:
    a quarter of the array's, so this never takes more memory than `first_cells`; boxes of
    components spread wide), `first_cells` answers instead.

    Examples
    --------
    >>> labels = np.array([[0, 1, 1], [2, 0, 1], [2, 2, 0]])
    >>> first_cells_in_boxes(labels, *component_boxes(labels, 2)).tolist()
    [1, 3]
    """
    n, ndim = lo.shape
    if n == 0:
        return np.zeros(0, np.int64)
    extent = (hi - lo).astype(np.int64)
    extent[:, 0] = 1
    size = np.prod(extent, axis=1)
    total = int(size.sum())
    if total > (labels.size // 4 if max_cells is None else max_cells):
        return first_cells(labels.reshape(-1), n)
    owner = np.repeat(np.arange(n, dtype=np.int64), size)
    rest = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(size) - size, size)  # C order in the slice
    flat = np.zeros(total, np.int64)
    stride = 1
    for a in range(ndim - 1, -1, -1):
        e = extent[owner, a]
        flat += (rest % e + lo[owner, a]) * stride
        rest //= e
        stride *= labels.shape[a]
    at = np.flatnonzero(labels.reshape(-1)[flat] == owner + 1)
    keep = np.empty(len(at), bool)  # each label's first hit (every label has one: its box's first slice)
    keep[:1] = True
    np.not_equal(owner[at[1:]], owner[at[:-1]], out=keep[1:])
    return flat[at[keep]]


def _inner_face_cells(labels: np.ndarray, box: Box, shape: tuple[int, ...]) -> np.ndarray:
    """Local flat indices (sorted, unique) of the foreground cells on the faces the tile
    ``box`` shares with other tiles (faces on the array's border are left out)."""
    found = []
    for a, ((lo, hi), n) in enumerate(zip(box, shape)):
        for shared, at in ((lo > 0, 0), (hi < n, labels.shape[a] - 1)):
            if not shared or labels.shape[a] == 0:
                continue
            index = [slice(None)] * labels.ndim
            index[a] = slice(at, at + 1)
            hit = list(np.nonzero(labels[tuple(index)]))
            hit[a] = hit[a] + at
            found.append(np.ravel_multi_index(tuple(hit), labels.shape))
    return np.unique(np.concatenate(found)) if found else np.zeros(0, np.int64)


def _half_offsets(structure: np.ndarray) -> np.ndarray:
    """The neighbour offsets of a symmetric structure after its centre in raster order (one
    of each pair ``d``, ``-d``)."""
    offsets = np.argwhere(structure) - 1
    after = np.array([tuple(d) > (0,) * structure.ndim for d in offsets.tolist()], bool)
    return offsets[after] if len(offsets) else offsets


def raster_rings(raster: np.ndarray, free: np.ndarray, origin: np.ndarray, shape: tuple[int, ...],
                 structure: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ring of every group painted on ``raster`` (group + 1 on its cells, 0 elsewhere; a box
    of the array at ``origin``): the cells next to a group's cells under ``structure``, inside
    the array, that are ``free`` (background) within the box or lie just outside it (which the
    caller knows to be background: a group is a whole component and the box holds it).
    Returns the ring cells (global coordinates) and their groups, unique, in no particular order.

    One shifted comparison of the raster (grown by one cell) per neighbour offset: no painting,
    no sort; a cell reached from one group through two offsets is kept once.

    Examples
    --------
    >>> ring, g = raster_rings(np.array([[0, 1, 0]]), np.array([[True, False, True]]), (1, 0), (3, 3),
    ...                        ndimage.generate_binary_structure(2, 1))
    >>> sorted(map(tuple, ring.tolist())), g.tolist()
    ([(0, 1), (1, 0), (1, 2), (2, 1)], [0, 0, 0, 0])
    """
    ndim = raster.ndim
    origin = np.asarray(origin, np.int64)
    offsets = np.argwhere(structure) - np.asarray(structure.shape) // 2
    offsets = offsets[np.any(offsets != 0, axis=1)]
    extent = tuple(n + 2 for n in raster.shape)
    inner = (slice(1, -1),) * ndim
    padded = np.zeros(extent, np.int32)
    padded[inner] = raster
    ok = np.ones(extent, bool)
    ok[inner] = free
    for a in range(ndim):  # the grown border outside the array holds no cell
        edge = [slice(None)] * ndim
        if origin[a] == 0:
            edge[a] = slice(0, 1)
            ok[tuple(edge)] = False
        if origin[a] + raster.shape[a] >= shape[a]:
            edge[a] = slice(extent[a] - 1, extent[a])
            ok[tuple(edge)] = False
    cells: list[np.ndarray] = []
    groups: list[np.ndarray] = []
    seen: list[np.ndarray] = []
    for d in offsets.tolist():
        near = np.zeros(extent, np.int32)  # near[c] = padded[c + d], 0 outside
        dst = tuple(slice(max(0, -o), n - max(0, o)) for o, n in zip(d, extent))
        src = tuple(slice(max(0, o), n - max(0, -o)) for o, n in zip(d, extent))
        near[dst] = padded[src]
        hit = (near != 0) & ok
        for before in seen:  # already found for this group through an earlier offset
            hit &= near != before
        seen.append(near)
        at = np.flatnonzero(hit)
        cells.append(np.stack(np.unravel_index(at, extent), axis=1).reshape(-1, ndim))
        groups.append(near.reshape(-1)[at].astype(np.int64) - 1)
    return (np.concatenate(cells + [np.zeros((0, ndim), np.int64)]).astype(np.int64) + origin - 1,
            np.concatenate(groups + [np.zeros(0, np.int64)]))


def ring_cells(cells: np.ndarray, group: np.ndarray, structure: np.ndarray, shape: tuple[int, ...],
               labels: np.ndarray | None = None,
               origin: np.ndarray | None = None, ordered: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The ring of each group of component cells: the cells next to it under ``structure``,
    inside the array, that are not in it (so background: a foreground neighbour would be in
    the component).  ``cells`` are global coordinates; with ``labels`` (a tile labelled
    from ``origin``), a neighbour inside the tile is a ring cell only where the tile holds
    background (it may hold another group's cells, never the same component's neighbour).
    Returns the ring cells and their groups, unique, sorted by group then cell (in no
    particular order when not ``ordered``: the encoders group them anyway).

    The groups are painted on a raster of their bounding box (grown by one cell) when it
    is small next to the cells, and each neighbour offset is one shifted comparison of
    that raster; scattered groups (a box far larger than their cells) take one sort of
    their neighbours instead.

    Examples
    --------
    >>> ring, g = ring_cells(np.array([[1, 1]]), np.array([0]), np.ones((3, 3), bool) & [[0, 1, 0], [1, 1, 1], [0, 1, 0]],
    ...                      (3, 3))
    >>> ring.tolist(), g.tolist()
    ([[0, 1], [1, 0], [1, 2], [2, 1]], [0, 0, 0, 0])
    """
    ndim = len(shape)
    cells = np.asarray(cells, np.int64).reshape(-1, ndim)
    group = np.asarray(group, np.int64)
    offsets = np.argwhere(structure) - np.asarray(structure.shape) // 2
    offsets = offsets[np.any(offsets != 0, axis=1)]
    if not len(cells) or not len(offsets):
        return np.zeros((0, ndim), np.int64), np.zeros(0, np.int64)
    limit = np.asarray(shape, np.int64)
    lo = np.maximum(cells.min(axis=0) - 1, 0)
    hi = np.minimum(cells.max(axis=0) + 2, limit)
    extent = tuple((hi - lo).tolist())
    area = int(np.prod(extent, dtype=np.int64))
    if area <= max(64 * len(cells), 1 << 16) and int(group.max(initial=0)) < (1 << 31) - 1:
        raster = np.zeros(extent, np.int32)
        raster[tuple((cells - lo).T)] = group + 1
        if np.count_nonzero(raster) == len(cells):  # each cell in one group: the raster holds them all
            return _ring_raster(raster, offsets, lo, labels, origin, ordered)
    return _ring_sorted(cells, group, offsets, shape, labels, origin)


def _ring_raster(raster: np.ndarray, offsets: np.ndarray, lo: np.ndarray, labels: np.ndarray | None,
                 origin: np.ndarray | None, ordered: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """`ring_cells` on ``raster`` (group + 1 per cell of the box at ``lo``, 0 elsewhere): for
    every offset ``d``, the box cells whose neighbour at ``d`` is in a group they are not in."""
    extent = raster.shape
    area = raster.size
    free = None
    if labels is not None:  # inside the tile a ring cell must be background
        free = np.ones(extent, bool)
        t0 = np.clip(np.asarray(origin, np.int64) - lo, 0, extent)
        t1 = np.clip(np.asarray(origin, np.int64) + np.asarray(labels.shape) - lo, 0, extent)
        if np.all(t1 > t0):
            inner = tuple(slice(a, b) for a, b in zip(t0.tolist(), t1.tolist()))
            src = tuple(slice(a, b) for a, b in zip((lo + t0 - origin).tolist(), (lo + t1 - origin).tolist()))
            free[inner] = labels[src] == 0
    keys: list[np.ndarray] = []
    seen: list[np.ndarray] = []
    for d in offsets.tolist():
        near = np.zeros(extent, np.int32)  # near[c] = raster[c + d], 0 outside the box
        dst = tuple(slice(max(0, -o), n - max(0, o)) for o, n in zip(d, extent))
        src = tuple(slice(max(0, o), n - max(0, -o)) for o, n in zip(d, extent))
        near[dst] = raster[src]
        hit = (near != 0) & (near != raster)
        if free is not None:
            hit &= free
        for before in seen:  # a cell already found for this group through an earlier offset
            hit &= near != before
        seen.append(near)
        at = np.flatnonzero(hit)
        keys.append((near.reshape(-1)[at].astype(np.int64) - 1) * area + at)
    key = np.concatenate(keys)  # unique: each (group, cell) kept at its first offset only
    if ordered:
        key.sort()
    g, at = np.divmod(key, area)
    return np.stack(np.unravel_index(at, extent), axis=1).astype(np.int64).reshape(-1, len(extent)) + lo, g


def _ring_sorted(cells: np.ndarray, group: np.ndarray, offsets: np.ndarray, shape, labels: np.ndarray | None,
                 origin: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """`ring_cells` by one sort of every cell's neighbours (for groups scattered over a large box)."""
    ndim = len(shape)
    size = int(np.prod(shape, dtype=np.int64))
    own = group * size + np.ravel_multi_index(tuple(cells.T), shape)
    found, found_group = [], []
    for d in offsets:
        near = cells + d
        ok = np.all((near >= 0) & (near < np.asarray(shape)), axis=1)
        near, g = near[ok], group[ok]
        if labels is not None and len(near):
            local = near - origin
            inside = np.all((local >= 0) & (local < np.asarray(labels.shape)), axis=1)
            free = np.ones(len(near), bool)
            free[inside] = labels[tuple(local[inside].T)] == 0
            near, g = near[free], g[free]
        found.append(near)
        found_group.append(g)
    near = np.concatenate(found + [np.zeros((0, ndim), np.int64)])
    g = np.concatenate(found_group + [np.zeros(0, np.int64)])
    if not len(near):
        return near, g
    key = g * size + np.ravel_multi_index(tuple(near.T), shape)
    key, first = np.unique(key, return_index=True)
    keep = ~np.isin(key, own)
    return near[first][keep], g[first][keep]

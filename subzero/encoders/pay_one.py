"""PayOne (paper Fig. 4.4): every output cell holding a copy of its pair's payload.

The cells are stored as runs: a run is consecutive cells (flat ids ``first .. first +
length - 1`` within one last-axis row) that carry the same payloads.  Layout 3 (written
now) packs up to `RUNS_PER_ENTRY` runs of one row into one entry, keyed by the first cell
of its first run; its value (``<i8``) is the number of runs ``n``, their first cells,
lengths and payload-group counts (``n`` each), then the group ids.  A lookup finds the run
holding a cell by a floor search: it scans the entry keys from ``cell - span + 1`` (the
widest span of an entry, first cell to last cell covered, is stored with the layout
version), decodes them and keeps the last run starting at or before the cell.  Layout 2
kept one entry per run (its length, then the group ids, ``<u8``; the span is then the
longest run); layout 1 (written before runs) one entry per cell and no layout key.  Both
are still read.

For forward queries, each distinct payload of a tile also gets one entry (the bounding
box of the out cells carrying it, then the payload) and, per input, the bounding box of
what it computes (its envelope): a forward step finds the payloads whose envelope meets
its frontier, reads the out cells in their boxes (key ranges, as keys sort by cell) and
expands only those payloads.  Layout 3 (written now) keeps a tile's envelopes as one table
entry per input (``ENVELOPE``: group ids, then the half-open boxes, ``<i8``), met against
the frontier's boxes in numpy (`subzero.boxes.boxes_intersect`); a tile holds a few hundred
payloads, and building an R-tree file per tile cost more than the rest of the shard.
Layout 2 kept them in an R-tree per input beside the shard; its shards are still read.

Layout 4 stores a *covered tile* (`subzero.context.Context.lwrite_tile`: one payload over
every cell of the tile, which the operator's ``map_p`` resolves cell by cell, as Label
reads each cell's component back from its stored label array): no cells at all, only the
payload entry (the tile box, then the payload) and, per input, the table of the boxes of
the records the payload names (``ENVELOPE``, as in layout 3).  A lookup pairs the
frontier's cells in the tile box with the payload; a forward step's candidates are the
out cells in the record boxes its frontier meets and the frontier's own cells (an out
cell in no record's box reads only itself).
"""

from __future__ import annotations

import numpy as np

from subzero.boxes import boxes_intersect
from subzero.cells import box_ids, to_coords, to_ids
from subzero.encoders.base import EncodedTile, Shapes, PayloadEncoder, Reader, scan, envelope_boxes, frontier_boxes
from subzero.encoders.codec import CELL, ENVELOPE, LAYOUT, OUT, PAIR, RUN, make_keys, pair_id_base, split_keys
from subzero.errors import StoreError
from subzero.frontier import Frontier
from subzero.pairs import PayloadPairs, owners


__all__ = ["PayOne", "DecodedTile", "LAYOUT_VERSION"]

_ONE, _MANY = b"\x00", b"\x01"
#: the layout PayOne writes: 3 = runs of cells, envelope tables in the shard (2 = runs of cells,
#: envelopes in R-trees; 1 = one entry per cell, no layout key); covered tiles are layout 4
LAYOUT_VERSION = 3
#: the layout of a covered tile: its payload and record boxes, no cells
COVERED_LAYOUT = 4
#: the layouts with a layout key this code reads (layout 1 has none)
READ_LAYOUTS = (2, 3, 4)
#: runs per entry at most (layout 3): a lookup decodes at most this many runs per entry it reads
RUNS_PER_ENTRY = 128


class PayOne(PayloadEncoder):
    base = "PayOne"

    def encode(self, pairs: PayloadPairs, tile_index: int, shapes: Shapes) -> EncodedTile:
        if pairs.cover is not None:
            return _encode_covered(pairs, tile_index)
        distinct, code = pairs.groups()
        group_keys, group_values, boxes = _payload_groups(pairs, tile_index, shapes[0], distinct, code)
        run_keys, run_values, longest = _encode_runs(pairs, pair_id_base(tile_index) + code, shapes[0])  # span
        if not len(run_keys) and not len(group_keys):
            return EncodedTile(n_pairs=pairs.n_pairs)
        layout = np.array([LAYOUT_VERSION, max(longest, 1)], "<u4").tobytes()
        layout_key = make_keys(LAYOUT, 0, np.array([tile_index], np.int64))  # one per tile: batches may merge tiles
        table_keys = make_keys(ENVELOPE, 0, np.zeros(0, np.int64))
        tables = []
        for i, (ids, mins, maxs) in sorted(boxes.items()):  # one table per input, in place of an R-tree
            table_keys = np.concatenate([table_keys, make_keys(ENVELOPE, i, np.array([tile_index], np.int64))])
            tables.append(_envelope_table(ids, mins.astype(np.int64), maxs.astype(np.int64) + 1))
        return EncodedTile(keys=np.concatenate([run_keys, group_keys, table_keys, layout_key]),
                           values=run_values + group_values + tables + [layout], n_pairs=pairs.n_pairs)

    def lookup(self, reader: Reader, frontier: Frontier, shapes: Shapes) -> PayloadPairs:
        version, longest = _layout(reader)
        if version == COVERED_LAYOUT:
            return PayloadPairs.concat([PayloadPairs.of_cells(frontier.within(lo, hi).ids(), payload)
                                        for _, lo, hi, payload in _covers(reader, len(shapes[0]))])
        ids = np.unique(np.asarray(frontier.ids(), np.int64))
        if longest is None:  # layout 1: one entry per cell
            keys, values = reader.get_many(make_keys(CELL, OUT, ids))
            return _one_cell_pairs(keys, values)
        if not len(ids):
            return PayloadPairs.empty()
        breaks = np.flatnonzero(np.diff(ids) != 1) + 1
        starts, stops = ids[np.r_[0, breaks]], ids[np.r_[breaks - 1, len(ids) - 1]] + 1
        runs = _scan_runs(reader, starts - longest + 1, stops, version)
        run = np.searchsorted(runs.first, ids, "right") - 1
        hit = run >= 0
        hit[hit] = ids[hit] < runs.first[run[hit]] + runs.length[run[hit]]
        used = np.unique(run[hit])  # the payloads of the runs holding the cells, not of every run scanned
        pids = runs.pids[_ranges(runs.ptr[used], runs.ptr[used + 1] - runs.ptr[used])]
        return runs.pairs(ids[hit], run[hit], _group_payloads(reader, pids, len(shapes[0])))

    def decode_tile(self, reader: Reader, shapes: Shapes) -> "DecodedTile | None":
        """The whole tile's runs and payloads, decoded once, for `lookup_decoded` (a shard never
        changes: a walk keeps it for the next brushes, `subzero.query.QueryEngine.payload_lookup`).
        None for the layouts without runs (1: one entry per cell; 4: a covered tile): look those up."""
        version, longest = _layout(reader)
        if longest is None or version == COVERED_LAYOUT:
            return None
        runs = _Runs.decode(*scan(reader, RUN), version)
        keys, values = scan(reader, PAIR)
        width = 16 * len(shapes[0])
        return DecodedTile(runs, dict(zip(split_keys(keys)[2].tolist(), (v[width:] for v in values))))

    def lookup_decoded(self, tile: "DecodedTile", frontier: Frontier) -> PayloadPairs:
        """`lookup` from a tile decoded by `decode_tile`: the runs holding the frontier's cells
        found by one floor search over every run, no shard read."""
        ids = frontier.ids()  # sorted unique
        runs = tile.runs
        if not len(ids) or not len(runs.first):
            return PayloadPairs.empty()
        run = np.searchsorted(runs.first, ids, "right") - 1
        hit = run >= 0
        hit[hit] = ids[hit] < runs.first[run[hit]] + runs.length[run[hit]]
        return runs.pairs(ids[hit], run[hit], tile.payloads)

    def load(self, reader: Reader, shapes: Shapes) -> PayloadPairs:
        version, longest = _layout(reader)
        if version == COVERED_LAYOUT:
            return PayloadPairs.concat([PayloadPairs.of_cells(box_ids(tuple(zip(lo.tolist(), hi.tolist())), shapes[0]),
                                                              payload) for _, lo, hi, payload in _covers(reader, len(shapes[0]))])
        if longest is None:
            return _one_cell_pairs(*scan(reader, CELL))
        runs = _Runs.decode(*scan(reader, RUN), version)
        return runs.all_pairs(_group_payloads(reader, runs.pids, len(shapes[0])))

    def forward_candidates(self, reader: Reader, frontier: Frontier, i: int, shapes: Shapes) -> PayloadPairs:
        """The cells carrying a payload whose envelope meets ``frontier``: the payload groups from
        the envelope tables (an R-tree in layouts 1 and 2), their out cells from key ranges over
        each group's out box."""
        if frontier.is_empty:
            return PayloadPairs.empty()
        out_shape = shapes[0]
        mins, maxs = frontier_boxes(frontier)
        version, longest = _layout(reader)
        if version == COVERED_LAYOUT:
            return _covered_candidates(reader, frontier, i, mins.astype(np.int64), maxs.astype(np.int64) + 1, shapes)
        if version < 3:  # envelopes in an R-tree
            ids = np.unique(reader.intersect(i, mins, maxs))
        else:
            ids = _envelope_hits(reader, i, mins.astype(np.int64), maxs.astype(np.int64) + 1)
        group_keys, values = reader.get_many(make_keys(PAIR, 0, ids))
        if not values:
            return PayloadPairs.empty()
        ndim, width = len(out_shape), 16 * len(out_shape)
        boxes = np.frombuffer(b"".join(v[:width] for v in values), "<i8").reshape(len(values), 2, ndim) \
            if ndim else np.zeros((len(values), 2, 0), np.int64)
        starts, stops = _row_ranges(boxes[:, 0], boxes[:, 1], out_shape)
        if longest is None:  # layout 1
            wanted = {v[width:] for v in values}
            keys, cell_values = reader.scan_ranges(make_keys(CELL, OUT, starts), make_keys(CELL, OUT, stops))
            found = _one_cell_pairs(keys, cell_values)
            keep = np.fromiter((p in wanted for p in found.payloads), bool, found.n_pairs)
            return found.select(keep)
        # every cell of a run naming a wanted group lies in that group's box, so whole runs are found
        runs = _scan_runs(reader, starts - longest + 1, stops, version)
        group_ids = split_keys(group_keys)[2]
        return runs.all_pairs(dict(zip(group_ids.tolist(), (v[width:] for v in values))), only=group_ids)


def _layout(reader: Reader) -> tuple[int, int | None]:
    """The layout of a shard and the widest span of its run entries (layout 2: the longest
    run): ``(1, None)`` for layout 1 (no layout key).  Each tile in the shard has a layout
    entry (key: its tile index) with the version and its span; an unknown version is a
    `StoreError`."""
    _, values = scan(reader, LAYOUT)
    if not values:
        return 1, None
    longest, versions = 1, set()
    for value in values:
        version = int.from_bytes(value[:4], "little")
        if version not in READ_LAYOUTS or len(value) != 8:
            raise StoreError(f"a PayOne/CompOne lineage shard has layout version {version}, which this subzero "
                             f"(layout {LAYOUT_VERSION}) cannot read; it was written by a newer subzero: "
                             "upgrade subzero, or re-run the workflow with this one")
        versions.add(version)
        longest = max(longest, int.from_bytes(value[4:8], "little"))
    if len(versions) > 1:
        raise StoreError(f"a PayOne/CompOne lineage shard mixes layouts {sorted(versions)}; the store is damaged: "
                         "re-run the workflow")
    return versions.pop(), longest


def _encode_covered(pairs: PayloadPairs, tile_index: int) -> EncodedTile:
    """Layout 4 entries of a covered tile: its payload entry (the tile box, then the payload),
    one table of record boxes per input, the layout key."""
    box = np.array(pairs.cover, np.int64).reshape(-1, 2)
    group = pair_id_base(tile_index)
    head = np.concatenate([box[:, 0], box[:, 1]]).astype("<i8").tobytes()
    keys = [make_keys(PAIR, 0, np.array([group], np.int64))]
    values = [head + pairs.payloads[0]]
    for i, (lo, hi) in enumerate(pairs.records or ()):
        keys.append(make_keys(ENVELOPE, i, np.array([tile_index], np.int64)))
        values.append(_envelope_table(np.full(len(lo), group, np.int64), lo.astype(np.int64), hi.astype(np.int64)))
    keys.append(make_keys(LAYOUT, 0, np.array([tile_index], np.int64)))
    values.append(np.array([COVERED_LAYOUT, 1], "<u4").tobytes())
    return EncodedTile(keys=np.concatenate(keys), values=values, n_pairs=1)


def _covers(reader: Reader, ndim: int) -> list[tuple[int, np.ndarray, np.ndarray, bytes]]:
    """The covered tiles of a layout 4 shard: group id, tile box (half-open) and payload each."""
    keys, values = scan(reader, PAIR)
    width = 16 * ndim
    out = []
    for key, value in zip(split_keys(keys)[2].tolist(), values):
        if len(value) < width:
            raise StoreError("a PayOne/CompOne lineage shard has a damaged covered-tile entry; re-run the workflow")
        head = np.frombuffer(value[:width], "<i8").astype(np.int64)
        out.append((int(key), head[:ndim], head[ndim:], value[width:]))
    return out


def _covered_candidates(reader: Reader, frontier, i: int, lo: np.ndarray, hi: np.ndarray, shapes) -> PayloadPairs:
    """A forward step's candidates in a layout 4 shard: per covered tile, its out cells in the
    record boxes (over input ``i``) that meet one of the frontier's boxes ``[lo, hi)``, and the
    frontier's own cells in the tile (an out cell in no record box reads only itself); every
    cell of the tile when the input's frame is not the output's."""
    out_shape = tuple(shapes[0])
    ndim = len(out_shape)
    same_frame = tuple(shapes[1][i]) == out_shape
    _, tables = reader.scan_ranges(make_keys(ENVELOPE, i, np.zeros(1, np.int64)),
                                   make_keys(ENVELOPE, i + 1, np.zeros(1, np.int64)))
    boxes: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for value in tables:
        table = np.frombuffer(value, "<i8")
        n = int(table[0]) if len(table) else -1
        if n < 0 or len(table) != 1 + n * (1 + 2 * ndim):
            raise StoreError("a PayOne/CompOne lineage shard has a damaged envelope table; re-run the workflow")
        rlo = table[1 + n:1 + n + n * ndim].reshape(n, ndim).astype(np.int64)
        rhi = table[1 + n + n * ndim:].reshape(n, ndim).astype(np.int64)
        hit = boxes_intersect(rlo, rhi, lo, hi)[0] if n and len(lo) else np.zeros(0, np.int64)
        for group in np.unique(table[1:1 + n][hit]).tolist():
            mine = hit[table[1:1 + n][hit] == group]
            boxes[int(group)] = (rlo[mine], rhi[mine])
    parts = []
    for group, tlo, thi, payload in _covers(reader, ndim):
        extent = tuple((thi - tlo).tolist())
        if not same_frame:
            parts.append(PayloadPairs.of_cells(box_ids(tuple(zip(tlo.tolist(), thi.tolist())), out_shape), payload))
            continue
        raster = np.zeros(extent, bool)
        for a, b in zip(*boxes.get(group, (np.zeros((0, ndim), np.int64),) * 2)):
            a, b = np.maximum(a, tlo) - tlo, np.minimum(b, thi) - tlo
            if np.all(b > a):
                raster[tuple(slice(x, y) for x, y in zip(a.tolist(), b.tolist()))] = True
        own = frontier.within(tlo, thi).coords()
        if len(own):
            raster[tuple((own - tlo).T)] = True
        at = np.argwhere(raster).astype(np.int64)
        if len(at):
            parts.append(PayloadPairs.of_cells(to_ids(at + tlo, out_shape), payload))
    return PayloadPairs.concat(parts)


def _envelope_table(ids: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> bytes:
    """One tile's envelopes over one input: the count, the group ids, then the half-open boxes (``<i8``)."""
    return np.concatenate([[len(ids)], np.asarray(ids, np.int64), lo.reshape(-1), hi.reshape(-1)]).astype("<i8") \
        .tobytes()


def _envelope_hits(reader: Reader, i: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The payload groups (sorted, unique) whose envelope over input ``i`` meets one of the
    half-open boxes ``[lo, hi)``, from the shard's envelope tables (layout 3)."""
    ndim = lo.shape[1]
    _, values = reader.scan_ranges(make_keys(ENVELOPE, i, np.zeros(1, np.int64)),
                                   make_keys(ENVELOPE, i + 1, np.zeros(1, np.int64)))
    found = [np.empty(0, np.int64)]
    for value in values:
        table = np.frombuffer(value, "<i8")
        n = int(table[0]) if len(table) else -1
        if n < 0 or len(table) != 1 + n * (1 + 2 * ndim):
            raise StoreError("a PayOne/CompOne lineage shard has a damaged envelope table; re-run the workflow")
        ids = table[1:1 + n]
        glo = table[1 + n:1 + n + n * ndim].reshape(n, ndim)
        ghi = table[1 + n + n * ndim:].reshape(n, ndim)
        hit = boxes_intersect(glo, ghi, lo, hi)[0] if ndim else np.arange(n)
        found.append(ids[hit])
    return np.unique(np.concatenate(found))


def _encode_runs(pairs: PayloadPairs, pair_group: np.ndarray, out_shape) -> tuple[np.ndarray, list[bytes], int]:
    """The run entries of a tile (layout 3): keys (the first cell of each entry's first run),
    values (``<i8``: the number of runs, their first cells, lengths and group counts, then
    their payload group ids) and the widest span of an entry.  A cell in one pair joins a
    run with its neighbours in the same last-axis row carrying the same payload; a cell in
    several pairs is a run of its own; an entry holds up to `RUNS_PER_ENTRY` runs of one row."""
    pair_of = owners(pairs.out_ptr)
    order = np.argsort(pairs.out_ids, kind="stable")
    ids, cell_group = pairs.out_ids[order], pair_group[pair_of[order]]
    if not len(ids):
        return np.empty(0, np.uint64), [], 0
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    n_groups = np.diff(np.r_[starts, len(ids)])
    cells = ids[starts]
    code = np.where(n_groups == 1, cell_group[starts], -1)
    width = int(out_shape[-1]) if len(out_shape) else 1
    brk = np.ones(len(cells), bool)
    brk[1:] = (cells[1:] != cells[:-1] + 1) | (code[1:] != code[:-1]) | (code[1:] < 0)
    brk |= cells % width == 0  # a run stays within one last-axis row
    first = np.flatnonzero(brk)
    lengths = np.diff(np.r_[first, len(cells)])
    k = n_groups[first]  # groups per run (a run of several cells has one)
    groups = cell_group[_ranges(starts[first], k)]
    run_first = cells[first]
    # entries: runs of one row, at most RUNS_PER_ENTRY each
    row = run_first // width
    new_row = np.r_[True, row[1:] != row[:-1]]
    row_start = np.flatnonzero(new_row)
    within = np.arange(len(run_first)) - np.repeat(row_start, np.diff(np.r_[row_start, len(run_first)]))
    head = np.flatnonzero(new_row | (within % RUNS_PER_ENTRY == 0))
    n = np.diff(np.r_[head, len(run_first)])
    end = np.r_[head[1:], len(run_first)] - 1
    span = int((run_first[end] + lengths[end] - run_first[head]).max())
    entry = np.repeat(np.arange(len(head)), n)
    k_sum = np.bincount(entry, weights=k, minlength=len(head)).astype(np.int64)
    size = 1 + 3 * n + k_sum
    stop = np.cumsum(size)
    begin = stop - size
    flat = np.empty(int(stop[-1]), np.int64)
    flat[begin] = n
    pos = np.arange(len(run_first)) - np.repeat(head, n)  # a run's place in its entry
    base = np.repeat(begin, n) + 1 + pos
    nn = np.repeat(n, n)
    flat[base] = run_first
    flat[base + nn] = lengths
    flat[base + 2 * nn] = k
    group_start = np.repeat(begin + 1 + 3 * n, n) + (np.cumsum(k) - k) - np.repeat((np.cumsum(k) - k)[head], n)
    flat[_ranges(group_start, k)] = groups
    raw = flat.astype("<i8", copy=False).tobytes()
    bounds = np.r_[0, stop * 8].tolist()
    values = [raw[a:b] for a, b in zip(bounds, bounds[1:])]
    return make_keys(RUN, OUT, run_first[head]), values, span


class DecodedTile:
    """A PayOne tile's runs (`_Runs`) and its payload of each group id, decoded whole
    (`PayOne.decode_tile`); ``nbytes``: what keeping it costs."""

    def __init__(self, runs: "_Runs", payloads: dict[int, bytes]):
        self.runs, self.payloads = runs, payloads
        self.nbytes = sum(int(a.nbytes) for a in (runs.first, runs.length, runs.ptr, runs.pids)) + \
            sum(len(p) + 64 for p in payloads.values())


class _Runs:
    """Decoded run entries: first cell, length and the payload group ids of each run (CSR)."""

    def __init__(self, first: np.ndarray, length: np.ndarray, ptr: np.ndarray, pids: np.ndarray):
        self.first, self.length, self.ptr, self.pids = first, length, ptr, pids

    @classmethod
    def decode(cls, keys: np.ndarray, values: list[bytes], version: int) -> "_Runs":
        """Runs from entries of ``version`` 3 (runs packed per entry) or 2 (one run per entry)."""
        if not values:
            empty = np.empty(0, np.int64)
            return cls(empty, empty, np.zeros(1, np.int64), empty)
        if version == 2:
            flat = np.frombuffer(b"".join(values), "<u8").astype(np.int64)
            width = np.fromiter(map(len, values), np.int64, len(values)) // 8
            head = np.cumsum(width) - width
            k = width - 1
            ptr = np.zeros(len(values) + 1, np.int64)
            np.cumsum(k, out=ptr[1:])
            return cls(split_keys(keys)[2], flat[head], ptr, flat[_ranges(head + 1, k)])
        firsts, lengths, counts, groups = [], [], [], []
        for value in values:
            entry = np.frombuffer(value, "<i8")
            n = int(entry[0])
            k = entry[1 + 2 * n:1 + 3 * n]
            if n <= 0 or len(entry) != 1 + 3 * n + int(k.sum()):
                raise StoreError("a PayOne/CompOne lineage shard has a damaged run entry; re-run the workflow")
            firsts.append(entry[1:1 + n])
            lengths.append(entry[1 + n:1 + 2 * n])
            counts.append(k)
            groups.append(entry[1 + 3 * n:])
        first = np.concatenate(firsts).astype(np.int64)
        length = np.concatenate(lengths).astype(np.int64)
        k = np.concatenate(counts).astype(np.int64)
        pids = np.concatenate(groups).astype(np.int64)
        if np.any(first[1:] < first[:-1]):  # entries of several tiles on one row (a merged batch)
            order = np.argsort(first, kind="stable")
            pids = pids[_ranges((np.cumsum(k) - k)[order], k[order])]
            first, length, k = first[order], length[order], k[order]
        ptr = np.zeros(len(k) + 1, np.int64)
        np.cumsum(k, out=ptr[1:])
        return cls(first, length, ptr, pids)

    def pairs(self, cells: np.ndarray, run: np.ndarray, payload: dict[int, bytes],
              only: np.ndarray | None = None) -> PayloadPairs:
        """Pairs of ``cells`` (sorted) lying in runs ``run`` (non-decreasing): one per run and
        payload group (of the groups ``only``, if given), holding the run's given cells."""
        if not len(cells):
            return PayloadPairs.empty()
        begin = np.flatnonzero(np.concatenate(([True], run[1:] != run[:-1])))  # not np.r_: a walk's hot path
        count = np.diff(begin, append=len(cells))
        r = run[begin]
        k = self.ptr[r + 1] - self.ptr[r]
        pids = self.pids[_ranges(self.ptr[r], k)]
        pair_begin, pair_count = np.repeat(begin, k), np.repeat(count, k)
        if only is not None:
            keep = np.isin(pids, only)
            pids, pair_begin, pair_count = pids[keep], pair_begin[keep], pair_count[keep]
        ptr = np.zeros(len(pids) + 1, np.int64)
        np.cumsum(pair_count, out=ptr[1:])
        return PayloadPairs(cells[_ranges(pair_begin, pair_count)], ptr, [payload[p] for p in pids.tolist()])

    def all_pairs(self, payload: dict[int, bytes], only: np.ndarray | None = None) -> PayloadPairs:
        """Pairs of every cell of every run."""
        return self.pairs(_ranges(self.first, self.length), np.repeat(np.arange(len(self.first)), self.length),
                          payload, only)


def _group_payloads(reader: Reader, pids: np.ndarray, ndim: int) -> dict[int, bytes]:
    """The payload of each payload group ``pids`` (its entry: the out box, then the payload)."""
    wanted = np.unique(pids)
    keys, values = reader.get_many(make_keys(PAIR, 0, wanted))
    if len(keys) != len(wanted):
        raise StoreError("a PayOne/CompOne lineage shard names payload groups it does not hold; the store is "
                         "damaged: re-run the workflow")
    width = 16 * ndim
    return dict(zip(split_keys(keys)[2].tolist(), (v[width:] for v in values)))


def _scan_runs(reader: Reader, lo: np.ndarray, hi: np.ndarray, version: int) -> _Runs:
    """The runs whose first cell lies in one of the id ranges ``[lo, hi)`` (merged first, so
    every run comes once), sorted by first cell."""
    lo = np.maximum(np.asarray(lo, np.int64), 0)
    hi = np.asarray(hi, np.int64)
    keep = hi > lo
    lo, hi = lo[keep], hi[keep]
    if not len(lo):
        return _Runs.decode(np.empty(0, np.uint64), [], version)
    order = np.argsort(lo, kind="stable")
    lo, hi = lo[order], hi[order]
    reach = np.maximum.accumulate(hi)
    new = np.r_[True, lo[1:] > reach[:-1]]
    group = np.cumsum(new) - 1
    m_hi = np.full(int(group[-1]) + 1, np.iinfo(np.int64).min, np.int64)
    np.maximum.at(m_hi, group, hi)
    return _Runs.decode(*reader.scan_ranges(make_keys(RUN, OUT, lo[new]), make_keys(RUN, OUT, m_hi)), version)


def _ranges(first: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``first[k] .. first[k] + lengths[k] - 1`` for every k, concatenated."""
    lengths = np.asarray(lengths, np.int64)
    total = int(lengths.sum())
    if not total:
        return np.empty(0, np.int64)
    offset = np.repeat(np.asarray(first, np.int64) - (np.cumsum(lengths) - lengths), lengths)
    return offset + np.arange(total, dtype=np.int64)


def _payload_groups(pairs: PayloadPairs, tile_index: int, out_shape, distinct: list[bytes], code: np.ndarray):
    """One entry per distinct payload (the bounding box of its out cells, then the payload) and
    the R-tree boxes of each group's input envelope (the union of its pairs' envelopes)."""
    if not distinct:
        return np.empty(0, np.uint64), [], {}
    ndim = len(out_shape)
    cell_code = code[owners(pairs.out_ptr)]
    coords = to_coords(pairs.out_ids, out_shape)
    olo, ohi = _group_bounds(cell_code, coords, coords + 1, len(distinct))
    none = (ohi[:, 0] < olo[:, 0]) if ndim else np.zeros(len(distinct), bool)
    olo[none], ohi[none] = 0, 0
    heads = np.concatenate([olo, ohi], axis=1).astype("<i8").tobytes()
    width = 16 * ndim
    values = [heads[k * width:(k + 1) * width] + p for k, p in enumerate(distinct)]
    group_ids = pair_id_base(tile_index) + np.arange(len(distinct), dtype=np.int64)
    envelopes = None
    if pairs.envelopes is not None:
        envelopes = []
        for lo, hi in pairs.envelopes:
            d = lo.shape[1]
            full = np.all(hi > lo, axis=1) if d else np.ones(len(lo), bool)
            glo, ghi = _group_bounds(code[full], lo[full], hi[full], len(distinct))
            empty = ghi[:, 0] < glo[:, 0] if d else np.zeros(len(distinct), bool)
            glo[empty], ghi[empty] = 0, 0
            envelopes.append((glo, ghi))
    return make_keys(PAIR, 0, group_ids), values, envelope_boxes(group_ids, envelopes)


def _group_bounds(group: np.ndarray, lo: np.ndarray, hi: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per group ``0..n-1``: the minimum of ``lo`` and the maximum of ``hi`` over its rows (int64
    max and min for a group without rows); one 1-D ``ufunc.at`` per axis (numpy's fast path)."""
    d = lo.shape[1]
    glo = np.full((d, n), np.iinfo(np.int64).max, np.int64)
    ghi = np.full((d, n), np.iinfo(np.int64).min, np.int64)
    group = np.ascontiguousarray(group, np.intp)
    for a in range(d):
        np.minimum.at(glo[a], group, np.ascontiguousarray(lo[:, a], np.int64))
        np.maximum.at(ghi[a], group, np.ascontiguousarray(hi[:, a], np.int64))
    return glo.T.copy(), ghi.T.copy()


def _row_ranges(lo: np.ndarray, hi: np.ndarray, shape) -> tuple[np.ndarray, np.ndarray]:
    """Flat id ranges ``[start, stop)`` of the last-axis rows of boxes (keys sort by flat id)."""
    if not len(shape):
        return np.zeros(len(lo), np.int64), np.ones(len(lo), np.int64)
    keep = np.all(hi > lo, axis=1)
    lo, hi = lo[keep], hi[keep]
    starts = []
    for a, b in zip(lo, hi):
        rows = [np.arange(x, y) for x, y in zip(a[:-1], b[:-1])]
        grid = np.stack(np.meshgrid(*rows, indexing="ij"), -1).reshape(-1, len(shape) - 1) if rows else \
            np.zeros((1, 0), np.int64)
        first = np.concatenate([grid, np.full((len(grid), 1), a[-1])], axis=1)
        starts.append((to_ids(first, shape), b[-1] - a[-1]))
    if not starts:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    begin = np.concatenate([s for s, _ in starts])
    length = np.concatenate([np.full(len(s), n) for s, n in starts])
    return begin, begin + length


def _pack(payloads: list[bytes]) -> bytes:
    lengths = np.array([len(p) for p in payloads], "<u4")
    return _MANY + np.uint32(len(payloads)).tobytes() + lengths.tobytes() + b"".join(payloads)


def _unpack(value: bytes) -> list[bytes]:
    if value[:1] == _ONE:
        return [value[1:]]
    n = int(np.frombuffer(value, "<u4", 1, 1)[0])
    lengths = np.frombuffer(value, "<u4", n, 5).tolist()
    out, pos = [], 5 + 4 * n
    for length in lengths:
        out.append(value[pos : pos + length])
        pos += length
    return out


def _one_cell_pairs(keys: np.ndarray, values: list[bytes]) -> PayloadPairs:
    """One pair per (cell, payload)."""
    ids = split_keys(keys)[2]
    payloads = [_unpack(v) for v in values]
    counts = np.array([len(p) for p in payloads], np.int64)
    flat = [p for group in payloads for p in group]
    return PayloadPairs(np.repeat(ids, counts), np.arange(len(flat) + 1, dtype=np.int64), flat)

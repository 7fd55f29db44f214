"""Vectorized coordinate and mask kernels shared by the built-in operators' lineage code.

No kernel loops over cells: loops run over axes or stencil offsets only.
"""

from __future__ import annotations

import itertools

import numpy as np

from subzero.cells import unique_ids

__all__ = [
    "BOUNDARY_MODES", "unique_rows", "corner_offsets", "box_offsets", "boundary_map", "boundary_index",
    "boundary_preimages", "shift_or", "stencil_pairs", "gather_axis", "scatter_or", "repeat_pairs",
    "encode_region", "decode_region",
    "encode_regions", "region_envelopes", "group_boxes", "cell_set_boxes",
]


#: the scipy.ndimage boundary modes `boundary_map` understands
BOUNDARY_MODES = ("reflect", "constant", "nearest", "mirror", "wrap", "grid-mirror", "grid-constant", "grid-wrap")


def unique_rows(coords: np.ndarray) -> np.ndarray:
    """Sorted distinct rows of an ``(N, ndim)`` coordinate array.

    Rows are packed into one int64 key each (row-major over their bounding box, so keys sort
    as the rows do), deduplicated by a sort, and unpacked: ``numpy.unique(axis=0)`` costs
    10-100x more.

    Examples
    --------
    >>> unique_rows(np.array([[2, 1], [0, 5], [2, 1], [0, -3]])).tolist()
    [[0, -3], [0, 5], [2, 1]]
    """
    coords = np.asarray(coords, np.int64)
    if not len(coords) or coords.ndim != 2 or coords.shape[1] == 0:
        return np.unique(coords, axis=0) if len(coords) else coords
    lo = coords.min(axis=0)
    span = tuple(int(v) for v in coords.max(axis=0) - lo + 1)
    if float(np.prod(np.asarray(span, float))) >= 2.0 ** 62:
        return np.unique(coords, axis=0)
    keys = np.ravel_multi_index(tuple((coords - lo).T), span)
    keys = unique_ids(keys, int(np.prod(span, dtype=np.int64)))
    return np.stack(np.unravel_index(keys, span), axis=1).astype(np.int64, copy=False) + lo


def corner_offsets(extent: tuple[int, ...]) -> np.ndarray:
    """All offsets of the box ``[0, e)`` per axis, ``(prod(e), ndim)``."""
    return np.array(list(itertools.product(*[range(e) for e in extent])), np.int64).reshape(-1, len(extent))


def box_offsets(radius: tuple[int, ...]) -> np.ndarray:
    """All offsets of the box ``[-r, r]`` per axis, ``(prod(2r+1), ndim)``."""
    return corner_offsets(tuple(2 * r + 1 for r in radius)) - np.array(radius, np.int64)


def boundary_map(coords: np.ndarray, shape: tuple[int, ...], mode: str) -> tuple[np.ndarray, np.ndarray]:
    """Map virtual coordinates (possibly outside the array) to the cells scipy.ndimage reads
    for boundary ``mode``; returns (coords, valid) where ``valid`` is False for cells a
    constant boundary supplies (they read no input)."""
    n = np.asarray(shape, np.int64)
    c = coords.copy()
    valid = np.ones(len(c), bool)
    if mode in ("constant", "grid-constant"):
        valid = np.all((c >= 0) & (c < n), axis=1)
    elif mode == "nearest":
        c = np.clip(c, 0, n - 1)
    elif mode in ("reflect", "grid-mirror"):
        period = 2 * n
        c = np.mod(c, period)
        c = np.where(c >= n, period - 1 - c, c)
    elif mode == "mirror":
        period = np.maximum(2 * n - 2, 1)
        c = np.mod(c, period)
        c = np.where(c >= n, period - c, c)
        c = np.where(n == 1, 0, c)
    elif mode in ("wrap", "grid-wrap"):
        c = np.mod(c, n)
    else:
        raise ValueError(f"unknown boundary mode {mode!r}")
    return c, valid


def boundary_index(positions: np.ndarray, n: int, mode: str) -> np.ndarray:
    """Along one axis of length ``n``: the index each virtual position reads through the
    boundary ``mode``, or -1 where a constant boundary supplies the value."""
    coords, valid = boundary_map(np.asarray(positions, np.int64).reshape(-1, 1), (n,), mode)
    return np.where(valid, coords[:, 0], -1)


def shift_or(mask: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Cells ``c + d`` for every set cell ``c`` and offset ``d`` (inside the array)."""
    out = np.zeros_like(mask, dtype=bool)
    for d in offsets:
        src = tuple(slice(max(0, -int(o)), n - max(0, int(o))) for o, n in zip(d, mask.shape))
        dst = tuple(slice(max(0, int(o)), n - max(0, -int(o))) for o, n in zip(d, mask.shape))
        out[dst] |= mask[src]
    return out


def stencil_pairs(cells: np.ndarray, offsets: np.ndarray, shape, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-cell lineage of a stencil: each cell reads ``cell + offset`` for every offset,
    through the boundary ``mode``.  Returns (owner, coords)."""
    n, k = len(cells), len(offsets)
    virtual = (cells[:, None, :] + offsets[None, :, :]).reshape(-1, cells.shape[1])
    owner = np.repeat(np.arange(n, dtype=np.int64), k)
    coords, valid = boundary_map(virtual, shape, mode)
    return owner[valid], coords[valid]


def boundary_preimages(n: int, radius: int, mode: str) -> np.ndarray:
    """The inverse of `boundary_index` over the grown axis ``[-radius, n + radius)``:
    row ``t`` lists the virtual positions that read index ``t``, padded with a position
    so far outside that any stencil offset keeps it outside.  Shape ``(n, m)``."""
    positions = np.arange(-radius, n + radius, dtype=np.int64)
    index = boundary_index(positions, n, mode)
    keep = index >= 0
    order = np.argsort(index[keep], kind="stable")
    index, positions = index[keep][order], positions[keep][order]
    counts = np.bincount(index, minlength=n)
    table = np.full((n, max(int(counts.max(initial=0)), 1)), -(n + 2 * radius + 1) * 4, np.int64)
    table[index, np.arange(len(index)) - np.repeat(np.cumsum(counts) - counts, counts)] = positions
    return table


def gather_axis(mask: np.ndarray, axis: int, index: np.ndarray) -> np.ndarray:
    """``mask`` re-indexed along ``axis``: slot ``j`` holds slice ``index[j]``, or False
    where ``index[j]`` is -1."""
    ok = index >= 0
    shape = list(mask.shape)
    shape[axis] = len(index)
    if mask.shape[axis] == 0 or not ok.any():
        return np.zeros(shape, bool)
    got = np.take(mask, np.where(ok, index, 0), axis=axis)
    along = [1] * mask.ndim
    along[axis] = len(index)
    return got & ok.reshape(along)


def scatter_or(mask: np.ndarray, axis: int, index: np.ndarray, n: int) -> np.ndarray:
    """The inverse of `gather_axis`: an axis of length ``n`` where slot ``i`` is the OR of
    the slices ``j`` of ``mask`` with ``index[j] == i`` (slices with -1 are dropped)."""
    moved = np.moveaxis(mask, axis, 0)
    out = np.zeros((n,) + moved.shape[1:], bool)
    ok = index >= 0
    np.logical_or.at(out, index[ok], moved[ok])
    return np.moveaxis(out, 0, axis)


def repeat_pairs(n_cells: int, region: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-cell lineage where each of ``n_cells`` cells depends on every cell of ``region``."""
    owner = np.repeat(np.arange(n_cells, dtype=np.int64), len(region))
    return owner, np.tile(np.asarray(region, np.int64), (n_cells, 1))


def encode_region(coords: np.ndarray, ndim: int) -> bytes:
    """A cell set as bytes: its bounding box (lo, extent) and a packed bitmask over the box.

    The size is ``16 * ndim`` bytes plus one bit per cell of the bounding box, so compact
    regions (a connected component, the cells of one histogram bin of a smooth image)
    stay small.  `decode_region` inverts it.
    """
    coords = np.asarray(coords, np.int64).reshape(-1, ndim)
    if len(coords) == 0:
        return np.zeros(2 * ndim, "<i8").tobytes()
    lo = coords.min(axis=0)
    extent = coords.max(axis=0) - lo + 1
    bits = np.zeros(tuple(extent), bool)
    bits[tuple((coords - lo).T)] = True
    return np.concatenate([lo, extent]).astype("<i8").tobytes() + np.packbits(bits.reshape(-1)).tobytes()


def decode_region(payload: bytes, ndim: int) -> np.ndarray:
    """The sorted ``(N, ndim)`` coordinates of a cell set encoded by `encode_region`."""
    head = np.frombuffer(payload[: 16 * ndim], "<i8").astype(np.int64)
    lo, extent = head[:ndim], head[ndim:]
    count = int(np.prod(extent))
    if count == 0:
        return np.empty((0, ndim), np.int64)
    bits = np.unpackbits(np.frombuffer(payload[16 * ndim:], np.uint8), count=count).astype(bool)
    return np.argwhere(bits.reshape(tuple(extent))).astype(np.int64) + lo


def encode_regions(coords: np.ndarray, region: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> list[bytes]:
    """`encode_region` of many cell sets at once, byte for byte: no Python loop per cell.

    Parameters
    ----------
    coords : (N, ndim) int64
        The cells of every set, in any order.
    region : (N,) int64
        The set (``0 .. m-1``) each cell belongs to; every set has at least one cell.
    lo, hi : (m, ndim) int64
        Each set's bounding box, half-open (``hi = max + 1``).

    Returns
    -------
    list of bytes
        ``m`` payloads.  All are laid out in one buffer, each starting on a byte boundary,
        so a single `numpy.packbits` packs every bitmask.

    Examples
    --------
    >>> cells = np.array([[0, 0], [1, 1], [5, 5]])
    >>> got = encode_regions(cells, np.array([0, 0, 1]), np.array([[0, 0], [5, 5]]), np.array([[2, 2], [6, 6]]))
    >>> got == [encode_region(cells[:2], 2), encode_region(cells[2:], 2)]
    True
    """
    coords = np.asarray(coords, np.int64)
    region = np.asarray(region, np.int64)
    lo, hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
    m, ndim = lo.shape
    if m == 0:
        return []
    extent = hi - lo
    head = 16 * ndim
    nbytes = head + (np.prod(extent, axis=1) + 7) // 8
    start = np.cumsum(nbytes) - nbytes
    # C-order strides inside each set's box: the bit of a cell is its flat index in the box
    strides = np.ones((m, ndim), np.int64)
    if ndim > 1:
        strides[:, :-1] = np.cumprod(extent[:, :0:-1], axis=1)[:, ::-1]
    position = (start[region] + head) * 8
    for a in range(ndim):
        position += (coords[:, a] - lo[region, a]) * strides[region, a]
    bits = np.zeros(int(nbytes.sum()) * 8, bool)
    bits[position] = True
    buf = np.packbits(bits)
    buf[start[:, None] + np.arange(head)] = np.concatenate([lo, extent], axis=1).astype("<i8").view(np.uint8) \
        .reshape(m, head)
    data = buf.tobytes()
    return [data[a:b] for a, b in zip(start.tolist(), (start + nbytes).tolist())]


def region_envelopes(payloads: "list[bytes]", ndim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The bounding boxes of many `encode_region` payloads, read from their headers at once.

    Returns ``(lo, hi, empty)``: half-open boxes ``(P, ndim)`` and a mask of the payloads
    that hold no header at all (``b""``, which an operator may give a meaning of its own,
    e.g. Label's "the cell itself"); their rows are zero.  One join and one gather, no
    Python work per payload.

    Examples
    --------
    >>> lo, hi, empty = region_envelopes([encode_region(np.array([[2, 3], [4, 1]]), 2), b""], 2)
    >>> lo.tolist(), hi.tolist(), empty.tolist()
    ([[2, 1], [0, 0]], [[5, 4], [0, 0]], [False, True])
    """
    n = len(payloads)
    head = 16 * ndim
    lengths = np.fromiter(map(len, payloads), np.int64, count=n)
    lo, hi = np.zeros((n, ndim), np.int64), np.zeros((n, ndim), np.int64)
    empty = lengths == 0
    if n == 0 or empty.all():
        return lo, hi, empty
    if np.any(lengths[~empty] < head):
        raise ValueError(f"a region payload is shorter than its {head}-byte header")
    buf = np.frombuffer(b"".join(payloads), np.uint8)
    start = (np.cumsum(lengths) - lengths)[~empty]
    header = buf[start[:, None] + np.arange(head)].view("<i8").reshape(-1, 2 * ndim).astype(np.int64)
    lo[~empty] = header[:, :ndim]
    hi[~empty] = header[:, :ndim] + header[:, ndim:]
    return lo, hi, empty


def group_boxes(coords: np.ndarray, group: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Half-open bounding boxes of ``n`` groups of cells (rows of groups without cells: empty)."""
    ndim = coords.shape[1]
    lo = np.full((ndim, n), np.iinfo(np.int64).max)
    hi = np.full((ndim, n), -1, np.int64)
    group = np.ascontiguousarray(group, np.intp)
    for a in range(ndim):  # 1-D ufunc.at: numpy >= 1.25 runs it as a fast indexed loop, no sort
        axis = np.ascontiguousarray(coords[:, a], np.int64)
        np.minimum.at(lo[a], group, axis)
        np.maximum.at(hi[a], group, axis)
    return lo.T.copy(), hi.T + 1


def cell_set_boxes(cells, which: np.ndarray, ndim: int) -> tuple[np.ndarray, np.ndarray]:
    """Half-open boxes of the cell sets ``cells[k]`` for ``k`` in ``which``; ``cells`` is
    one ``(N_k, ndim)`` array per payload, or an ``(P, ndim)`` array of one cell each."""
    if isinstance(cells, np.ndarray) and cells.ndim == 2:
        own = cells[which].astype(np.int64)
        return own, own + 1
    sets = [np.asarray(cells[k], np.int64).reshape(-1, ndim) for k in which.tolist()]
    owner = np.repeat(np.arange(len(sets)), [len(s) for s in sets])
    lo, hi = group_boxes(np.concatenate(sets + [np.zeros((0, ndim), np.int64)]), owner, len(sets))
    none = hi[:, 0] <= 0
    lo[none], hi[none] = 0, 0
    return lo, hi

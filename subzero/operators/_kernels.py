"""Vectorized coordinate kernels shared by the built-in operators' mapping functions."""

from __future__ import annotations

import itertools

import numpy as np

__all__ = ["unique_rows", "box_offsets", "boundary_map", "shift_or", "stencil_pairs", "invert_pairs"]


def unique_rows(coords: np.ndarray) -> np.ndarray:
    coords = np.asarray(coords, np.int64)
    return np.unique(coords, axis=0) if len(coords) else coords


def box_offsets(radius: tuple[int, ...]) -> np.ndarray:
    """All offsets of the box ``[-r, r]`` per axis, ``(prod(2r+1), ndim)``."""
    return np.array(list(itertools.product(*[range(-r, r + 1) for r in radius])), np.int64).reshape(-1, len(radius))


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


def stencil_pairs(cells: np.ndarray, offsets: np.ndarray, shape, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-cell lineage of a stencil: each cell reads ``cell + offset`` for every offset,
    through the boundary ``mode``.  Returns (owner, coords)."""
    n, k = len(cells), len(offsets)
    virtual = (cells[:, None, :] + offsets[None, :, :]).reshape(-1, cells.shape[1])
    owner = np.repeat(np.arange(n, dtype=np.int64), k)
    coords, valid = boundary_map(virtual, shape, mode)
    return owner[valid], coords[valid]


def shift_or(mask: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Cells ``c + d`` for every set cell ``c`` and offset ``d`` (inside the array)."""
    out = np.zeros_like(mask, dtype=bool)
    for d in offsets:
        src = tuple(slice(max(0, -int(o)), n - max(0, int(o))) for o, n in zip(d, mask.shape))
        dst = tuple(slice(max(0, int(o)), n - max(0, -int(o))) for o, n in zip(d, mask.shape))
        out[dst] |= mask[src]
    return out


def invert_pairs(in_cells: np.ndarray, candidates: np.ndarray, pairs_fn, in_shape) -> np.ndarray:
    """Forward lineage by inverting backward lineage: the ``candidates`` (output cells)
    whose per-cell backward lineage ``pairs_fn(candidates) -> (owner, coords)`` meets
    ``in_cells``."""
    if len(candidates) == 0 or len(in_cells) == 0:
        return np.empty((0, candidates.shape[1] if candidates.ndim == 2 else 0), np.int64)
    hit = np.zeros(in_shape, bool)
    hit[tuple(in_cells.T)] = True
    owner, coords = pairs_fn(candidates)
    if len(owner) == 0:
        return np.empty((0, candidates.shape[1]), np.int64)
    good = hit[tuple(np.asarray(coords, np.int64).T)]
    return candidates[np.unique(owner[good])]

"""Image tiles of a stored 2-D array, made lazily, as a pyramid, from the stored chunks.

Level 0 is the array itself; level ``z`` halves level ``z - 1`` along both axes (a NaN-aware
mean for images, the maximum for labels, any for masks: a star or a flagged pixel stays
visible zoomed out). Each level is cut into `TILE` x `TILE` tiles. A tile is made from one
read of the array where its footprint is at most `DIRECT_READ` cells on a side (only the
chunks it covers are read), else from its four children, so no more than a tile's footprint
of one of those reads is ever in memory, however large the array.

An array the run did not store is read by re-running it from its stored ancestors
(`subzero.worker.RecomputedArray`: only the tile's footprint, and its halo, where the node and
the unstored nodes before it are elementwise or stencils; else the run's tiles under it whole),
which may take minutes for a whole array: its tiles are made only when asked for, and every one
of them is cached, level 0 included.

Rendered PNGs, and the values of the tiles made from their children (and of every tile of
an array the run did not store), are cached under a directory of the caller's choosing
(`cache_root`: ``view`` under the ``cache`` setting's directory, ``~/.cache/subzero/view``),
never in the store, keyed by the store's location, its run's creation time and each array's
metadata checksum. Files appear by atomic rename, so concurrent requests never read half a
tile; a tile being made is locked (a file lock next to it: threads and the processes of
``subzero view --workers`` alike), so it is made once however many ask for it at once, the
others waiting for it and reading the cached values.

>>> pyramid = TilePyramid(run, "raw", cache_root())          # doctest: +SKIP
>>> png = pyramid.png(pyramid.top, 0, 0)                      # the whole array in one tile
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from subzero.errors import LineageError
from subzero.tools.export import MASK_RGB, atomic_path, NAN_RGB, label_colors

if TYPE_CHECKING:
    from subzero.run import Run

__all__ = ["TILE", "DIRECT_READ", "TilePyramid", "cache_root", "run_cache_dir", "render", "label_colors", "MASK_RGB",
           "NAN_RGB"]

TILE = 256
DIRECT_READ = 2048


def cache_root() -> Path:
    """``view`` under the user's cache (the ``cache`` setting, else ``~/.cache/subzero``)."""
    from subzero import config

    return Path(config.cache_root()) / "view"


def run_cache_dir(run: "Run", root: Path | None = None) -> Path:
    """The cache directory of one stored run: its location and creation time, hashed."""
    import xxhash

    key = f"{os.path.realpath(run.path) if '://' not in run.path else run.path}|{run.catalog.created}"
    return (root or cache_root()) / xxhash.xxh3_64_hexdigest(key.encode())


def render(values: np.ndarray, display: str, limits: tuple[float, float] | None) -> np.ndarray:
    """Tile values as ``uint8`` RGB: masks in two colours, labels categorical, images grey
    between ``limits`` (zscale) with an asinh stretch, NaN in `NAN_RGB`."""
    if display == "mask":
        return np.asarray(MASK_RGB, np.uint8)[values.astype(bool).astype(np.intp)]
    if display == "labels":
        return label_colors(values)
    from astropy.visualization import AsinhStretch

    lo, hi = limits if limits is not None else (0.0, 1.0)
    v = values.astype(np.float32, copy=False)
    with np.errstate(invalid="ignore", divide="ignore"):
        scaled = np.clip((v - lo) / (hi - lo if hi > lo else 1.0), 0.0, 1.0)
    finite = np.isfinite(scaled)
    scaled = np.where(finite, scaled, 0.0)
    grey = (AsinhStretch(0.5)(scaled, clip=True) * 255 + 0.5).astype(np.uint8)
    rgb = np.repeat(grey[..., None], 3, axis=-1)
    rgb[~finite] = NAN_RGB
    return rgb


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def _reduce(block: np.ndarray, factor: int, display: str) -> np.ndarray:
    """Downsample a 2-D block by ``factor`` on both axes (edges padded)."""
    if factor == 1:
        return block
    h, w = block.shape
    H, W = -(-h // factor) * factor, -(-w // factor) * factor
    if display == "image":
        padded = np.full((H, W), np.nan, np.float32)
        padded[:h, :w] = block
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN blocks stay NaN
            return np.asarray(np.nanmean(padded.reshape(H // factor, factor, W // factor, factor), axis=(1, 3),
                                         dtype=np.float64), dtype=np.float32)
    padded = np.zeros((H, W), block.dtype)
    padded[:h, :w] = block
    return padded.reshape(H // factor, factor, W // factor, factor).max(axis=(1, 3))


@contextmanager
def one_maker(path: Path) -> Iterator[None]:
    """Held while the file at ``path`` is made: an exclusive lock on ``path`` + ``.lock``
    (`fcntl.flock`, so both the threads of this process and other processes wait for it);
    where there is no `fcntl`, no lock (the same tile may then be made twice, each written
    atomically)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover  (not POSIX)
        yield
        return
    lock = path.with_name(path.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released when the descriptor closes
        yield
    finally:
        os.close(fd)


def _load_values(path: Path) -> np.ndarray | None:
    """The cached values at ``path``, or None (absent, or damaged: made again)."""
    try:
        return np.load(path)
    except (OSError, ValueError):
        return None


class TilePyramid:
    """The tiles of one 2-D node (see the module's docstring).

    Parameters
    ----------
    run
        The stored run (read-only).
    name
        A committed 2-D node.
    root
        The run's cache directory (`run_cache_dir`).
    display
        ``"image"``, ``"labels"`` or ``"mask"`` (`subzero.tools.view.lineage.display_kind`).
    """

    def __init__(self, run: "Run", name: str, root: Path, display: str):
        self.name = name
        self.array = run.output(name)
        if self.array.ndim != 2:
            raise LineageError(f"node {name!r} has shape {self.array.shape}; only 2-D nodes have tiles")
        self.shape = tuple(int(n) for n in self.array.shape)
        self.display = display
        record = run.catalog.node(name).array
        #: False: the run did not store the array; its tiles re-run the node's tiles from its stored ancestors
        self.stored = bool(record.stored)
        meta = record.meta_xxh3 or "nometa"
        self.dir = root / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}-{meta[:16]}-{display}"
        self.top = max(0, math.ceil(math.log2(max(self.shape) / TILE))) if max(self.shape) > TILE else 0
        self._limits: tuple[float, float] | None = None
        self._lock = threading.Lock()

    # -- geometry ---------------------------------------------------------------------------
    def level_shape(self, z: int) -> tuple[int, int]:
        """The array's shape at level ``z``."""
        return tuple(-(-n // (1 << z)) for n in self.shape)  # type: ignore[return-value]

    def grid(self, z: int) -> tuple[int, int]:
        """Tiles along each axis at level ``z``."""
        return tuple(-(-n // TILE) for n in self.level_shape(z))  # type: ignore[return-value]

    def check(self, z: int, ty: int, tx: int) -> None:
        """A `LineageError` unless tile ``(z, ty, tx)`` exists."""
        if not 0 <= z <= self.top:
            raise LineageError(f"node {self.name!r} has tile levels 0..{self.top}, not {z}")
        gy, gx = self.grid(z)
        if not (0 <= ty < gy and 0 <= tx < gx):
            raise LineageError(f"node {self.name!r} level {z} has tiles 0..{gy - 1} x 0..{gx - 1}, not ({ty}, {tx})")

    # -- values -----------------------------------------------------------------------------
    def values_path(self, z: int, ty: int, tx: int) -> Path:
        """The file caching tile ``(z, ty, tx)``'s values (`values` says which tiles it keeps)."""
        return self.dir / "values" / str(z) / f"{ty}_{tx}.npy"

    def cached(self, z: int, ty: int, tx: int) -> bool:
        """Whether tile ``(z, ty, tx)``'s values are read without computing anything: a tile of a
        stored array read in one read, or one cached."""
        return (self.stored and TILE * (1 << z) <= DIRECT_READ) or self.values_path(z, ty, tx).exists()

    def values(self, z: int, ty: int, tx: int) -> np.ndarray:
        """The values of tile ``(z, ty, tx)``: one read of the array when its footprint is
        small, else its four children. Cached as ``.npy``: the tiles made from their children,
        and every tile of an array the run did not store (its reads re-run the node); each made
        once (`one_maker`) however many ask at once."""
        self.check(z, ty, tx)
        direct = TILE * (1 << z) <= DIRECT_READ
        if direct and self.stored:
            return self._read(z, ty, tx)
        path = self.values_path(z, ty, tx)
        cached = _load_values(path)
        if cached is not None:
            return cached
        with one_maker(path):
            cached = _load_values(path)  # made by another thread or process while this one waited
            if cached is not None:
                return cached
            out = self._read(z, ty, tx) if direct else self._from_children(z, ty, tx)
            buf = io.BytesIO()
            np.save(buf, out)
            _atomic_write(path, buf.getvalue())
            return out

    def _read(self, z: int, ty: int, tx: int) -> np.ndarray:
        """Tile ``(z, ty, tx)`` from one read of its footprint in the array."""
        f = 1 << z
        r0, c0 = ty * TILE * f, tx * TILE * f
        block = self.array[r0:min(r0 + TILE * f, self.shape[0]), c0:min(c0 + TILE * f, self.shape[1])]
        if self.display == "image":
            block = block.astype(np.float32, copy=False)
        return _reduce(block, f, self.display)

    def _from_children(self, z: int, ty: int, tx: int) -> np.ndarray:
        """Tile ``(z, ty, tx)`` made from its four children."""
        hz, wz = self.level_shape(z)
        h, w = min(TILE, hz - ty * TILE), min(TILE, wz - tx * TILE)
        gy, gx = self.grid(z - 1)
        parts = []
        for cy in (2 * ty, 2 * ty + 1):
            row = [self.values(z - 1, cy, cx) for cx in (2 * tx, 2 * tx + 1) if cy < gy and cx < gx]
            if cy < gy and row:
                parts.append(np.concatenate(row, axis=1))
        return _reduce(np.concatenate(parts, axis=0), 2, self.display)[:h, :w]

    # -- pictures ---------------------------------------------------------------------------
    def limits(self) -> tuple[float, float] | None:
        """The zscale limits of an image node, from up to nine level-0 tiles spread over the
        array (cached); None for labels and masks."""
        if self.display != "image":
            return None
        with self._lock:
            if self._limits is not None:
                return self._limits
            path = self.dir / "stretch.json"
            if path.exists():
                try:
                    self._limits = tuple(json.loads(path.read_text())["zscale"])
                    return self._limits
                except (OSError, ValueError, KeyError):
                    pass
            from astropy.visualization import ZScaleInterval

            gy, gx = self.grid(0)
            ys = sorted({int(round(v)) for v in np.linspace(0, gy - 1, min(3, gy))})
            xs = sorted({int(round(v)) for v in np.linspace(0, gx - 1, min(3, gx))})
            sample = np.concatenate([self.values(0, y, x).reshape(-1) for y in ys for x in xs])
            sample = sample[np.isfinite(sample)]
            lo, hi = (0.0, 1.0) if not sample.size else (float(sample.min()), float(sample.max()))
            if sample.size > 16:
                zlo, zhi = ZScaleInterval().get_limits(sample)
                if zhi > zlo:
                    lo, hi = float(zlo), float(zhi)
            self._limits = (lo, hi if hi > lo else lo + 1.0)
            _atomic_write(path, json.dumps({"zscale": list(self._limits)}).encode())
            return self._limits

    def limits_cached(self) -> bool:
        """Whether `limits` answers without reading any tile (known, cached, or not an image)."""
        return self.display != "image" or self._limits is not None or (self.dir / "stretch.json").exists()

    def png_path(self, z: int, ty: int, tx: int) -> Path:
        """The PNG file of tile ``(ty, tx)`` at zoom ``z``."""
        return self.dir / "png" / str(z) / f"{ty}_{tx}.png"

    def png(self, z: int, ty: int, tx: int) -> bytes:
        """The PNG of tile ``(z, ty, tx)``, from the cache or made now (and cached)."""
        self.check(z, ty, tx)
        path = self.png_path(z, ty, tx)
        try:
            return path.read_bytes()
        except OSError:
            pass
        from PIL import Image

        rgb = render(self.values(z, ty, tx), self.display, self.limits())
        buf = io.BytesIO()
        Image.fromarray(rgb, "RGB").save(buf, format="PNG", compress_level=1)
        data = buf.getvalue()
        _atomic_write(path, data)
        return data

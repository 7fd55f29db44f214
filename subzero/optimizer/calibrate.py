"""Calibration: measure a node on a sample of its tiles under every candidate strategy.

After the node's output is computed (so its inputs exist), a few tiles spread over the
array run again, as executor tasks (`profile_tile`), with every mode the candidates need
(a node of one tile is measured by two tasks, its FULL and its payload candidates apart);
each task encodes its tile's lineage under its candidates and returns measurements only
(bytes, encode seconds, pairs, keys, fans).  The driver (`profile_node`) scales them to
the whole node: no lineage and no tile reaches it.  This is how the first run of a
workflow already gets a good plan.

Calibration costs a few percent of the node: an operator whose tiles may be any box
(`Elementwise` and `Halo` tilings, one pass) is measured on a window of each sample
tile holding about `SAMPLE_FRACTION` of the node's cells (at least `MIN_SAMPLE_CELLS`),
not on whole tiles, and its FULL candidates (whose pairs cost many times the operator to
make) and fans on a centred quarter of that window (`fans_window`), scaled up.  The
capture time a strategy adds is predicted from what it stores (`capture_seconds`: links,
cells, pairs), not from the sample's timings, so the same
data gives the same plan whatever the machine's load; and it counts making the lineage
inside the operator (a FULL strategy's pairs, a payload's cells), not only encoding it.

Since that prediction needs only the sample's pairs and cells, a candidate whose
capture alone would exceed the runtime budget left (a `CaptureLimit`, with the node's
operator time taken `LIMIT_MARGIN` times as measured) is not encoded at all: the integer
program would prune it anyway (a candidate that alone exceeds a budget, section VII), and
the profile names it in ``skipped`` with the reason.  And the FULL and PAY candidates (whose
encodings, envelopes and sizes are most of a node's calibration) can be only counted
(``bound``): their pairs and cells give their lowest possible costs (`lower_bound`: the same
predicted capture, the fewest bytes and keys their encoding could count, `least_sizes`), and
the caller encodes them only when the integer program, given those, would choose one
(`subzero.optimizer.plan.bounds_matter`).

A profile depends only on the node's operator, the operators and inputs upstream of it,
the tiles and the candidates: a later run in the same process over the same of these
(a re-run, a benchmark's rounds, a notebook cell run again) reuses it instead of
measuring again (`reuse_key`, `recall`, `remember`; the ``reuse_calibration`` setting),
as long as the candidates calibration skipped then would be skipped under the runtime
budget left now (within `REUSE_SLACK`).  A profile is also kept on disk, one small JSON file
under the ``calibration`` directory of the user's cache (the ``cache`` setting; the
``keep_calibration`` setting turns it off), so the first run of a new process over the same
(a script run again) reuses it too; its key adds the digest of subzero's own code
(`code_digest`), so a profile measured by other code is never read.
"""

from __future__ import annotations

import copy
import json
import math
import os
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import numpy as np
import xxhash

from subzero import config
from subzero.catalog import NodeMetrics
from subzero.encoders import encoder_for
from subzero.encoders.base import EncodedTile, index_bytes_bound
from subzero.errors import WorkflowError
from subzero.executors import Executor
from subzero.executors.tasks import map_calls
from subzero.modes import Direction, Mode, Strategy
from subzero.operator import Operator
from subzero.optimizer.cost_model import NodeProfile, StrategyProfile
from subzero.cells import box_cells, to_ids, unique_ids
from subzero.worker import NodeTask, TileMeta, capture_tile, merge_inline, run_tile, with_envelopes
from subzero.tiling import Box, Elementwise, Halo, Tile

__all__ = ["profile_node", "profile_tile", "profile_part", "sample_tiles", "sample_windows", "capture_seconds",
           "TileProfile", "profile_from_run", "crop_box", "fans_crop", "CroppedInput", "CaptureLimit", "fans_window", "fans_corner",
           "reuse_key", "recall", "remember", "forget", "code_digest", "profile_path", "entry_sizes",
           "lower_bound", "least_sizes", "kept_mapping_fans", "first_part", "profile_first", "FirstTiles"]

MAX_MAPPED_CELLS = 1 << 17   # input cells a mapping node's fans are counted over (else: sizes' ratio)
MAX_MAPPED_LINKS = 1 << 16   # links a mapping node's fans are counted over at most (`fans_corner`)
MAX_PAIRS = 4_000   # pairs per sample tile a candidate encodes (the sizes scale with the count)
_FANS = Strategy("FullOne")  # the full pairs whose fans a sample tile measures
SAMPLE_FRACTION = 0.02   # of a node's cells, measured when its tiles may be cut into windows
MIN_SAMPLE_CELLS = 16_384   # per sample window (so a window is not all edge)
CROP_FRACTION = 0.05        # of a whole-array node's cells, measured on a centred crop of its inputs
MIN_CROP_CELLS = 65_536     # per crop (a whole-array operator's lineage is less regular than a tile's)
# seconds a strategy adds to a run per thing it stores (making the lineage in the operator, encoding
# and writing it), estimated on the project machine from the lineage seconds of Label storing CompOne
# (2000 x 2000) and of the astronomy workflow's repair node storing FullRange, over their cells and links
LINK_SECONDS = 1.0e-7      # one (out pair, in cell) link of a FULL strategy
OUT_CELL_SECONDS = 2.0e-7  # one out cell carried by a pair
PAIR_SECONDS = 2.0e-6      # one region pair (a payload, a group)
FANS_FRACTION = 0.25       # of a sample window, where the FULL candidates and the fans are measured
MIN_FANS_CELLS = 4_096     # per such fans window
LIMIT_MARGIN = 2.0         # a `CaptureLimit` takes the node's operator time this many times as measured on a sample
REGULAR_RULES = 32         # a sample's range-rule table of at most this many rules is taken as size-invariant
KEEP_PROFILES = 1024       # profiles kept for reuse (`remember`), in a process and on disk; least recently used go
REUSE_SLACK = 1.25         # a skipped candidate is calibrated anew only once the limit exceeds its capture by this


@dataclass(frozen=True)
class CaptureLimit:
    """The runtime overhead one candidate's capture may add to a node, at most: the budget
    left, ``fixed + per_op_second * op_seconds`` for the node's operator time ``op_seconds``
    (linear: an absolute budget has ``per_op_second`` 0, a factor ``"1.5x"`` 0.5).

    Calibration encodes no candidate whose capture (`capture_seconds`, predicted from the
    sample's pairs scaled to the node's ``cells``) exceeds it with the operator time taken
    `LIMIT_MARGIN` times as the sample measured it; the ``keep`` candidates (pinned) are
    always encoded.

    Examples
    --------
    >>> CaptureLimit(0.1, 0.15, 1000).seconds(2.0)
    0.7
    """

    fixed: float
    per_op_second: float
    cells: float
    keep: tuple[str, ...] = ()

    def seconds(self, op_seconds: float) -> float:
        """The budget left for a node whose operator takes ``op_seconds`` (`LIMIT_MARGIN` applied)."""
        return self.fixed + self.per_op_second * LIMIT_MARGIN * op_seconds


@dataclass
class TileProfile:
    """What one sample tile measured: small, sent from the task to the driver.

    ``strategies[name]`` holds (bytes, encode seconds, pairs, out cells, in cells, keys,
    R-tree entries) scaled to the tile's pairs; ``inline`` the tile's FullRange table when
    small (the driver merges them as the commit would).
    """

    cells: int
    seconds: float
    plain_seconds: float = 0.0   # the operator alone on the tile (no lineage), when the fans are measured
    fanout: float = 0.0       # out cells summed over pairs
    links: float = 0.0        # sum over pairs of out cells x in cells
    distinct_in: int = 0
    strategies: dict[str, tuple] = field(default_factory=dict)
    inline: dict[str, bytes] = field(default_factory=dict)
    #: the factor from the window an inline table was measured on (a quarter) to the tile's cells
    grow: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)   # over the `CaptureLimit`: not encoded, and why
    #: those candidates' (predicted capture seconds, the operator seconds the limit was taken at)
    skipped_at: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: the ``(output, inputs)`` shapes the inline tables were encoded for, when not the task's (`fans_crop`)
    inline_shapes: tuple | None = None
    #: the candidates only counted, not encoded (``part[4]``): their (pairs, out cells, in cells, least bytes,
    #: least keys), scaled as above (`least_sizes`)
    bounds: dict[str, tuple[float, float, float, float, float]] = field(default_factory=dict)


def _cells(tile: Tile) -> int:
    return math.prod(hi - lo for lo, hi in tile.box) if tile.box is not None else 1  # per tile of every node: not np.prod


def sample_tiles(tiles: list[Tile], sample: int = 2) -> list[Tile]:
    """The tiles calibration measures: the first and one from the middle of the array."""
    return [tiles[k] for k in sorted({0, len(tiles) // 2, len(tiles) - 1})[:sample]]


def sample_windows(op: Operator, tiles: list[Tile], sample: int = 2, fraction: float = SAMPLE_FRACTION,
                   min_cells: int = MIN_SAMPLE_CELLS) -> list[Tile]:
    """The boxes calibration measures: `sample_tiles`, each cut to a centred window when
    the operator's tiles may be any box (one pass, `Elementwise` or `Halo` tiling), so the
    windows together hold about ``fraction`` of the node's cells (at least ``min_cells``
    each); whole tiles otherwise (a two-pass or whole-array operator)."""
    chosen = sample_tiles(tiles, sample)
    if op.two_pass or not isinstance(op.effective_tiling(), (Elementwise, Halo)) or \
            any(t.box is None or not len(t.box) for t in chosen):
        return chosen
    total = sum(_cells(t) for t in tiles)
    want = max(fraction * total / len(chosen), float(min_cells))
    out = []
    for t in chosen:
        lens = np.array([hi - lo for lo, hi in t.box], np.int64)
        if want >= _cells(t):
            out.append(t)
            continue
        ratio = (want / _cells(t)) ** (1.0 / len(lens))  # every axis cut by the same ratio
        cut = np.clip(np.ceil(lens * ratio), 1, lens).astype(np.int64)
        lo = np.array([a for a, _ in t.box], np.int64) + (lens - cut) // 2
        out.append(Tile(t.index, tuple(zip(lo.tolist(), (lo + cut).tolist()))))
    return out


def fans_window(op: Operator, tile: Tile, fraction: float = FANS_FRACTION,
                min_cells: int = MIN_FANS_CELLS) -> Tile | None:
    """A centred window of ``tile`` holding ``fraction`` of its cells (at least ``min_cells``),
    where calibration measures the FULL candidates and the fans: None when the operator's tiles may not be
    any box (see `sample_windows`) or the tile is too small to cut.

    Examples
    --------
    >>> from subzero.operators import Convolve
    >>> op = Convolve(np.ones((3, 3))).bound(((400, 400),), (400, 400))
    >>> fans_window(op, Tile(0, ((0, 128), (0, 128))))
    Tile(index=0, box=((32, 96), (32, 96)))
    """
    if op.two_pass or not isinstance(op.effective_tiling(), (Elementwise, Halo)) or tile.box is None or \
            not len(tile.box) or _cells(tile) < 2 * min_cells:
        return None
    box = crop_box(tuple(hi - lo for lo, hi in tile.box), fraction, min_cells)
    if box is None:
        return None
    return Tile(tile.index, tuple((lo + a, lo + b) for (lo, _), (a, b) in zip(tile.box, box)))


def fans_crop(task: NodeTask, tile: Tile, fraction: float = FANS_FRACTION,
              min_cells: int = MIN_FANS_CELLS) -> tuple[NodeTask, Tile] | None:
    """Where a whole-array operator measured on one tile (a crop of its inputs, see
    `CroppedInput`) has its FULL candidates and fans measured: a centred crop of those inputs
    holding ``fraction`` of the tile's cells (at least ``min_cells``), as a task over that
    crop and its one tile; None when `fans_window` applies (tiles that may be any box), the
    operator's inputs and output differ in shape, the tile is not the whole output, it is too
    small to cut, or the operator refuses the crop's shapes.  A FULL capture costs many times
    the operator, so on a quarter of the crop (the Halo operators' `fans_window`, for an
    operator that must see whole arrays): its counts scale by the cells, as a window's do.

    Examples
    --------
    >>> from subzero.operators import DetectStars
    >>> op = DetectStars().bound(((200, 200),), (200, 200))
    >>> sub, t = fans_crop(NodeTask("s", op, (None,), ((200, 200),), (200, 200)), Tile(0, ((0, 200), (0, 200))))
    >>> sub.output_shape, t.box
    ((100, 100), ((0, 100), (0, 100)))
    """
    from subzero.tiling import Whole

    op, shape = task.operator, task.output_shape
    if shape is None or op.all_to_all or op.two_pass or not isinstance(op.effective_tiling(), Whole) or \
            any(tuple(s) != tuple(shape) for s in task.input_shapes) or \
            tuple(tile.box or ()) != tuple((0, n) for n in shape) or _cells(tile) < 2 * min_cells:
        return None
    box = crop_box(tuple(shape), fraction, min_cells)
    if box is None:
        return None
    lens = tuple(hi - lo for lo, hi in box)
    offset = tuple(lo for lo, _ in box)
    try:
        out = op.infer_output_shape(tuple(lens for _ in task.input_shapes))
    except WorkflowError:  # the operator refuses the crop's shapes: measured on the whole tile
        return None
    if out is None or tuple(out) != lens:
        return None
    sub = replace(task, operator=op.bound([lens] * len(task.input_shapes), lens), output=None,
                  inputs=tuple(CroppedInput(ref, offset) for ref in task.inputs),
                  input_shapes=tuple(lens for _ in task.input_shapes), output_shape=lens, chunks=None)
    return sub, Tile(tile.index, tuple((0, n) for n in lens))


def crop_box(shape: tuple[int, ...], fraction: float = CROP_FRACTION,
             min_cells: int = MIN_CROP_CELLS) -> tuple[tuple[int, int], ...] | None:
    """A centred box of ``shape`` holding about ``fraction`` of its cells (at least
    ``min_cells``), every axis cut by the same ratio; None when that is the whole array.

    Examples
    --------
    >>> crop_box((2000, 2000))
    ((776, 1224), (776, 1224))
    >>> crop_box((100, 100)) is None
    True
    """
    lens = np.array(shape, np.int64)
    total = int(np.prod(lens)) if len(lens) else 0
    want = max(fraction * total, float(min_cells))
    if not len(lens) or want >= total:
        return None
    cut = np.clip(np.ceil(lens * (want / total) ** (1.0 / len(lens))), 1, lens).astype(np.int64)
    lo = (lens - cut) // 2
    return tuple(zip(lo.tolist(), (lo + cut).tolist()))


@dataclass(frozen=True)
class CroppedInput:
    """A window of a stored array (``ref``, from ``offset``) read as if it were a whole
    array: calibration runs a whole-array operator on crops of its inputs."""

    ref: Any
    offset: tuple[int, ...]

    def read(self, box: Box) -> np.ndarray:
        """The window's cells in ``box`` (coordinates within the window)."""
        return self.ref.read(tuple((lo + o, hi + o) for (lo, hi), o in zip(box, self.offset)))


def capture_seconds(strategy: Strategy, pairs: float, out_cells: float, in_cells: float) -> float:
    """Seconds a strategy's lineage adds to the run, predicted from what it stores: a FULL
    strategy's links (pairs x input cells) and a payload strategy's carried cells, plus a
    cost per pair; LMDB bytes and keys are charged by `subzero.optimizer.cost_model.runtime_cost`.

    Examples
    --------
    >>> round(capture_seconds(Strategy.parse("FullRange"), 10, 10, 90), 9)
    3.1e-05
    """
    per = LINK_SECONDS * in_cells if strategy.mode is Mode.FULL else 0.0
    return per + OUT_CELL_SECONDS * out_cells + PAIR_SECONDS * pairs


def profile_tile(task: NodeTask, tile: Tile) -> TileProfile:
    """Measure one tile under every strategy of ``task`` (task side: run by the executor).

    The tile runs once with every mode the strategies need, plus FULL (its pairs give the
    fans, and re-execution in tracing mode produces them); each strategy encodes at most
    `MAX_PAIRS` of those pairs and its sizes are scaled to the tile's pairs (FullRange
    encodes them all: regular lineage must not be subsampled).
    """
    return profile_part(task, (tile, task.strategies, True))


def profile_part(task: NodeTask, part: tuple) -> TileProfile:
    """`profile_tile` of the tile ``part[0]`` under the strategies ``part[1]`` only; the fans
    (and the tracing and operator times) are measured when ``part[2]`` says so.

    Where the operator's tiles may be any box (`fans_window`), the FULL and PAY candidates and
    the fans are measured on a centred quarter of the tile, in one operator call, not on all of
    it, and scaled to the tile: making a FULL strategy's pairs, or a payload for every cell,
    costs many times the operator, and FullOne, FullMany, PayOne and PayMany encode at most
    `MAX_PAIRS` pairs whatever the window (a quarter holds as many), while a range table's rules
    are size-invariant or grow with the cells (`_merged_table`).  The COMP candidates (a few
    overrides, sparse: a quarter would hold too few) are measured on the whole tile.

    A fourth item, a `CaptureLimit`, skips encoding the strategies whose predicted capture
    exceeds it (only where the operator time was measured: ``part[2]``); when that rules out
    every FULL strategy, the quarter's pairs give the fans alone.  A fifth, names of FULL and
    PAY strategies, has those counted only (their pairs and cells, in ``bounds``), not encoded:
    what their lowest possible costs need (`profile_node`).  A sixth, False, runs no plain
    operator call (the operator's time is measured on the node's own first tiles, `profile_first`;
    no ``limit`` then)."""
    tile, strategies, fans = part[:3]
    limit: CaptureLimit | None = part[3] if len(part) > 3 else None
    counted: tuple[str, ...] = tuple(part[4]) if len(part) > 4 else ()
    plain_run = bool(part[5]) if len(part) > 5 else True
    op = task.operator
    stored = tuple(s for s in strategies if s.stored)
    full = tuple(s for s in stored if s.mode is Mode.FULL)
    paid = tuple(s for s in stored if s.mode is Mode.PAY)  # a payload per cell: measured beside FULL
    quarter = fans_window(op, tile) if fans else None
    probe_task = task  # where the quarter runs: this task's tile, or a crop of a whole-array operator's inputs
    if fans and quarter is None:
        cropped = fans_crop(task, tile)
        if cropped is not None:
            probe_task, quarter = cropped
    out = TileProfile(0, 0.0)
    probe, grow, predicted = None, 1.0, {}
    if fans and plain_run:  # the operator's own time: the tile without lineage (the limit needs it)
        plain = capture_tile(replace(task, strategies=()), tile)
        out.cells, out.plain_seconds = _cells(plain.tile), plain.op_seconds
    elif fans:  # its time measured elsewhere (the node's first tiles, `profile_first`)
        out.cells = _cells(tile)
    if quarter is not None:  # the FULL and PAY candidates and the fans, on the quarter (one operator call)
        start = time.perf_counter()
        probe = capture_tile(replace(probe_task, strategies=full + paid + (() if _FANS in full else (_FANS,))),
                             quarter)
        if probe_task is not task:  # a crop of its own shapes: its inline tables merge over them
            out.inline_shapes = probe.shapes
        out.seconds = time.perf_counter() - start
        grow = out.cells / max(_cells(probe.tile), 1)  # the quarter's counts to the tile's
        stored = tuple(s for s in stored if s.mode not in (Mode.FULL, Mode.PAY))
        if limit is not None and full:
            share = limit.cells / max(out.cells, 1)
            at = out.plain_seconds * share  # the node's operator time, as this tile predicts it
            cap = limit.seconds(at)
            ratio = share * grow  # the quarter's cells to the node's
            n_in = sum(len(a) for a in probe.full.in_ids)
            predicted = {s.name: capture_seconds(s, probe.full.n_pairs * ratio, len(probe.full.out_ids) * ratio,
                                                 n_in * ratio) for s in full}
            if all(v > cap for v in predicted.values()) and not any(s.name in limit.keep for s in full):
                full = ()
                for name, seconds in predicted.items():
                    out.skipped[name] = _over_limit(seconds, cap)
                    out.skipped_at[name] = (seconds, at)
    capture = None
    if stored or probe is None:
        start = time.perf_counter()
        capture = capture_tile(replace(task, strategies=stored + ((_FANS,) if fans and probe is None else ())), tile)
        out.cells = _cells(capture.tile)
        if probe is None and fans:
            out.seconds = time.perf_counter() - start
    if fans:
        full_pairs = (probe or capture).full
        fanout = np.diff(full_pairs.out_ptr)
        fanin = sum(np.diff(ptr) for ptr in full_pairs.in_ptr) if full_pairs.in_ptr else np.zeros(full_pairs.n_pairs)
        out.fanout, out.links = float(fanout.sum()) * grow, float(np.sum(fanout * fanin)) * grow
        out.distinct_in = int(round(grow * sum(distinct_count(a, int(np.prod(shape)))
                                               for a, shape in zip(full_pairs.in_ids, op.input_shapes))))
    enveloped = {}  # sampled payload pairs with their envelopes, once per mode (PayOne and PayMany share them)
    subsampled: dict[int, Any] = {}  # id of a mode's pairs (held by the captures) -> their `_subsample`
    share = limit.cells / max(out.cells, 1) if limit is not None else 0.0  # this part's cells scaled to the node's
    most = limit.seconds(out.plain_seconds * share) if limit is not None and fans else None
    for strategy in (full + paid if probe is not None else ()) + stored:
        name = strategy.name
        on_quarter = probe is not None and strategy.mode in (Mode.FULL, Mode.PAY)
        source, g = (probe, grow) if on_quarter else (capture, 1.0)
        assert source is not None
        encoder = encoder_for(strategy)
        pairs = source.pairs_for(strategy)
        n_in = sum(len(a) for a in pairs.in_ids) if strategy.mode is Mode.FULL else 0
        if most is not None and limit is not None and name not in limit.keep:
            alone = capture_seconds(strategy, pairs.n_pairs * g * share, len(pairs.out_ids) * g * share,
                                    n_in * g * share)
            if alone > most:
                out.skipped[name] = _over_limit(alone, most)
                out.skipped_at[name] = (alone, out.plain_seconds * share)
                continue
        if strategy.both_directions:
            sample = pairs
        else:  # one subsample of a mode's pairs for all its encodings (the same pairs: the same sample)
            sample = subsampled.get(id(pairs))
            if sample is None:
                sample = subsampled[id(pairs)] = _subsample(pairs, MAX_PAIRS)
        factor = pairs.n_pairs / max(sample.n_pairs, 1) * g  # the sample's sizes to the tile's
        if name in counted and strategy.mode in (Mode.FULL, Mode.PAY):  # sizes only: no encoding, no envelopes
            least, least_keys = least_sizes(strategy, sample)
            out.bounds[name] = (pairs.n_pairs * g, len(pairs.out_ids) * g, n_in * g, least * factor,
                                least_keys * factor)
            continue
        if strategy.mode is not Mode.FULL:  # envelopes (map_p calls) of the sampled pairs only
            key = (strategy.mode, strategy.both_directions)
            if key not in enveloped:  # by the operator as the sample ran (a crop's: its own shapes)
                enveloped[key] = with_envelopes(source.operator, sample)
            sample = enveloped[key]
        t0 = time.perf_counter()
        encoded = encoder.encode(sample, source.tile.index, source.shapes)
        seconds = time.perf_counter() - t0
        if encoded.inline is not None:
            out.inline[name] = encoded.inline
            out.grow[name] = g
        nbytes, keys, boxes = entry_sizes(encoded)
        out.strategies[name] = (nbytes * factor, seconds * factor, pairs.n_pairs * g, len(pairs.out_ids) * g,
                                n_in * g, keys * factor, boxes * factor)
    return out


def lower_bound(strategy: Strategy, pairs: float, out_cells: float, in_cells: float, nbytes: float = 0.0,
                keys: float = 0.0) -> StrategyProfile:
    """The lowest costs a strategy that stores ``pairs`` pairs over these cells can have, as
    the cost model prices them: its capture time as calibration predicts it from the same counts
    (`capture_seconds`), and the least bytes and keys its encoding could count (`least_sizes`,
    scaled as its sizes would be; disk, runtime and query cost all grow with them).

    Examples
    --------
    >>> lower_bound(Strategy.parse("PayOne/backward"), 10, 10, 0).bytes
    0.0
    """
    return StrategyProfile(bytes=float(nbytes), encode_seconds=capture_seconds(strategy, pairs, out_cells, in_cells),
                           pairs=pairs, out_cells=out_cells, in_cells=in_cells, keys=float(keys))


def least_sizes(strategy: Strategy, sample: Any) -> tuple[int, int]:
    """The fewest ``(bytes, keys)`` `entry_sizes` could count for ``strategy``'s encoding of the
    pairs ``sample``, from their counts alone: a key (8 bytes) per pair and at least 4 bytes per
    cell id its values pack (FullMany: every side; FullOne: the other side, plus 8 bytes per keyed
    cell; PayMany: the out cells); 0 for the encodings that compress (FullRange, PayOne).

    Examples
    --------
    >>> from subzero.pairs import PayloadPairs
    >>> pairs = PayloadPairs(np.arange(6), np.array([0, 2, 6]), [b"a", b"b"])
    >>> least_sizes(Strategy.parse("PayMany/backward"), pairs)
    (40, 2)
    """
    n = sample.n_pairs
    outs = len(sample.out_ids)
    ins = sum(len(a) for a in sample.in_ids) if strategy.mode is Mode.FULL else 0
    if strategy.mode is Mode.FULL and strategy.encoding == "Many":
        return 8 * n + 4 * (outs + ins), n
    if strategy.mode is Mode.FULL and strategy.encoding == "One":
        keyed, packed = (outs, ins) if strategy.direction is Direction.BACKWARD else (ins, outs)
        return 8 * n + 4 * packed + 8 * keyed, n
    if strategy.mode is Mode.PAY and strategy.encoding == "Many":
        return 8 * n + 4 * outs, n
    return 0, 0


def entry_sizes(encoded: EncodedTile) -> tuple[int, int, int]:
    """``(bytes, keys, R-tree boxes)`` of the shard one tile's encoding makes: what
    `subzero.encoders.merge_tiles` of it would hold (`Batch.nbytes`, its keys and boxes),
    counted without building the sorted entries (calibration needs only their sizes).

    Examples
    --------
    >>> entry_sizes(EncodedTile(keys=np.array([1, 2], np.uint64), values=[b"ab", b"c"],
    ...                         cell_keys=np.array([5, 5, 7], np.uint64), cell_pairs=np.array([0, 1, 0])))
    (59, 4, 0)
    """
    cells = len(np.unique(encoded.cell_keys)) if len(encoded.cell_keys) else 0  # one entry per key cell
    keys = len(encoded.keys) + cells
    nbytes = 8 * keys + sum(map(len, encoded.values)) + 8 * len(encoded.cell_pairs)
    return nbytes, keys, sum(len(ids) for ids, _, _ in encoded.boxes.values())


def _over_limit(seconds: float, most: float) -> str:
    """Why calibration did not encode a candidate (`CaptureLimit`), as its node's record says."""
    return (f"capture {seconds:.3g} s (predicted from a sample) alone exceeds the runtime budget left, "
            f"{most:.3g} s: not calibrated")


def profile_node(task: NodeTask, tiles: list[Tile], candidates: list[str], op_seconds: float | None,
                 runner: Executor, sample: int = 2, scale: float = 1.0,
                 limit: CaptureLimit | None = None, bound: Sequence[str] = (),
                 fans: dict | None = None) -> NodeProfile:
    """Profile ``task``'s node (a `subzero.stage.NodeStage` task) from ``sample`` of its ``tiles``,
    measured by ``runner``'s tasks (`profile_part`; a `LocalExecutor`: in this process),
    scaled to the node; ``candidates`` are the optimizer's strategy names.

    ``op_seconds`` is the node's measured operator time; None before the node is computed
    (a one-pass run plans a node before it runs it): then it is estimated from the sample's
    tiles run without lineage, scaled (0 when no sample runs), and the
    profile is a one-pass one (`subzero.optimizer.cost_model.runtime_cost`).  ``scale``
    multiplies what is measured (a task on a crop of the node's inputs: the node's cells over
    the crop's; the caller then sets the profile's sizes).  With a ``limit`` (its ``cells``
    are set here), the candidates a sample predicts over it are not encoded: the profile
    lists them in ``skipped``, not in ``strategies``.  The FULL and PAY candidates named in
    ``bound`` are counted, not encoded: the profile holds their lowest possible costs in
    ``bounds`` (`lower_bound`), for the caller to ask the integer program whether any of them
    could be chosen (`subzero.optimizer.plan.bounds_matter`) before paying for their encoding.
    ``fans``: where a mapping node's fans are kept for the run's other nodes (`kept_mapping_fans`)."""
    op = task.operator
    one_pass = op_seconds is None
    op_seconds = op_seconds or 0.0
    chosen = sample_windows(op, tiles, sample)
    scale *= (sum(_cells(t) for t in tiles) or 1) / (sum(_cells(t) for t in chosen) or 1)
    stored = tuple(s for s in map(Strategy.parse, candidates) if s.stored)
    profile = NodeProfile(
        node=task.node, tiles=len(tiles), op_seconds=op_seconds,
        out_size=int(np.prod(op.output_shape)), in_sizes=[int(np.prod(s)) for s in op.input_shapes],
        mapping=Mode.MAP in op.supported_modes(), all_to_all=op.all_to_all, measured=False, one_pass=one_pass)
    if op.all_to_all:
        return profile
    if not stored and profile.mapping:  # fans from the mapping functions on a corner of a tile
        corner = tuple((lo, min(hi, lo + 32)) for lo, hi in chosen[0].box)
        profile.trace_seconds = op_seconds
        spread = max(profile.in_sizes, default=1) / max(profile.out_size, 1)  # input cells per output cell
        if _cells(Tile(0, corner)) * spread > MAX_MAPPED_CELLS:  # a reduction: one cell maps to many
            profile.fan_backward, profile.fan_forward = max(spread, 1.0), 1.0
        else:
            profile.fan_backward, profile.fan_forward = kept_mapping_fans(op, chosen[0].box, fans)
        return profile
    if limit is not None:
        limit = replace(limit, cells=scale * sum(_cells(t) for t in chosen))  # the node's cells
    counted = tuple(s.name for s in stored if s.name in set(bound) and s.mode in (Mode.FULL, Mode.PAY))
    parts = [(t, group, k == 0, limit, counted) for t in chosen
             for k, group in enumerate(_groups(stored, len(chosen)))]
    measured = map_calls(runner, profile_part, replace(task, strategies=stored), parts)
    for m in measured:  # skipped by any part: the integer program prunes it anyway
        for name, why in m.skipped.items():
            profile.skipped.setdefault(name, why)
            profile.skipped_at.setdefault(name, [float(v) for v in m.skipped_at.get(name, (np.inf, 0.0))])
    fanout, links, distinct = (sum(getattr(m, k) for m in measured) for k in ("fanout", "links", "distinct_in"))
    # re-execution's lineage, predicted from its size as a capture is (`capture_seconds`), not timed
    profile.trace_seconds = (LINK_SECONDS * links + OUT_CELL_SECONDS * fanout) * scale
    profile.fan_backward = max(links / fanout, 1.0) if fanout else 1.0
    profile.fan_forward = max(links / distinct, 1.0) if distinct else 1.0
    if one_pass:  # the operator's time without lineage on the sample, scaled
        profile.op_seconds = sum(m.plain_seconds for m in measured) * scale
    for strategy in stored:
        name = strategy.name
        if name in profile.skipped:
            continue
        if name in counted:
            pairs, outs, ins, least, least_keys = np.array([m.bounds[name] for m in measured
                                                            if name in m.bounds]).sum(axis=0)
            profile.bounds[name] = lower_bound(strategy, pairs * scale, outs * scale, ins * scale, least * scale,
                                               least_keys * scale)
            continue
        tiles_of = [m for m in measured if name in m.strategies]  # one part per sample tile measured it
        nbytes, _, pairs, outs, ins, keys, boxes = np.array([m.strategies[name] for m in tiles_of]).sum(axis=0)
        predicted = capture_seconds(strategy, pairs * scale, outs * scale, ins * scale)
        shapes = {m.inline_shapes for m in tiles_of if name in m.inline}  # encoded over a crop (`fans_crop`)
        cropped = len(shapes) == 1 and None not in shapes
        merged = merge_inline(strategy, [m.inline.get(name) for m in tiles_of],
                              next(iter(shapes)) if cropped else task.shapes)
        if merged is not None:  # measured on quarters (`profile_part`): the table grows from their cells
            grown = sum(m.cells for m in tiles_of) / (sum(m.cells / m.grow.get(name, 1.0) for m in tiles_of) or 1.0)
            profile.strategies[name] = _merged_table(merged, scale * grown, predicted, pairs * scale, outs * scale,
                                                     ins * scale, regular=not cropped)
            continue
        profile.strategies[name] = StrategyProfile(
            bytes=nbytes * scale + index_bytes_bound(boxes * scale), encode_seconds=predicted, pairs=pairs * scale,
            out_cells=outs * scale, in_cells=ins * scale, keys=keys * scale)
    return profile


# -- calibrating from the node's own first tiles --------------------------------------------------

@dataclass
class FirstTiles:
    """A node's first tiles, run for real by its calibration (`profile_first`): their metadata
    (each tile's output chunk written, its lineage under every COMP candidate encoded and held
    unwritten in `subzero.worker.TileMeta.pending`, counted under ``task.pending_key``), the task
    that ran them and the part of the calibration's wall they took (the node's own computing)."""

    task: NodeTask
    metas: list[TileMeta]
    wall: float

    @property
    def encoded(self) -> frozenset[str]:
        """The strategies whose lineage the tiles hold."""
        return frozenset(s.name for s in self.task.strategies)

    def wrote(self) -> bool:
        """Whether a tile wrote a shard of its own (more lineage than the process holds unwritten)."""
        return any(r.name for m in self.metas for r in m.shards.values())

    def keep(self, strategies: Sequence[Strategy]) -> list[TileMeta]:
        """The tiles' metadata holding only ``strategies``' lineage, for the node's run to write
        with its other tiles' (`subzero.stage.NodeStage.run`'s ``done``); empty (the node runs
        every tile again) when the tiles do not hold a stored one of ``strategies`` or wrote a
        shard of their own."""
        names = {s.name for s in strategies if s.stored}
        if not names <= self.encoded or self.wrote():
            return []
        return [replace(m, shards={k: v for k, v in m.shards.items() if k in names},
                        pending={k: v for k, v in m.pending.items() if k in names},
                        inline={k: v for k, v in m.inline.items() if k in names}) for m in self.metas]


def first_part(task: NodeTask, part: tuple) -> Any:
    """One item of a node's first batch (`profile_first`), task side: ``("tile", tile)`` runs
    the tile for real (`subzero.worker.run_tile`: its chunk written, its lineage under
    ``task.strategies`` held unwritten); ``("probe", probe, window, names)`` counts the FULL and
    PAY candidates ``names`` and the fans on a quarter of ``window`` with the task ``probe``
    (`profile_part` without its plain operator call: the tiles give the operator's time)."""
    if part[0] == "tile":
        return run_tile(task, part[1])
    _, probe, window, names = part
    counted = tuple(Strategy.parse(n) for n in names)
    return profile_part(replace(probe, strategies=counted), (window, counted, True, None, tuple(names), False))


def profile_first(task: NodeTask, tiles: list[Tile], probe: NodeTask, probe_tiles: list[Tile],
                  candidates: Sequence[str], runner: Executor, scale: float = 1.0,
                  limit: CaptureLimit | None = None, sample: int = 2) -> tuple[NodeProfile, FirstTiles]:
    """Profile a node planned before it runs from its own first tiles: `sample_tiles` of
    ``tiles`` (the first and one from the middle) run for real with ``task`` (the node's, writing
    its output; in this process: their lineage is held unwritten, ``task.pending_key``), under
    every COMP candidate, while the FULL and PAY candidates are only counted, and the fans
    measured, on quarters of the sample windows `profile_node` would measure (``probe``'s task
    over ``probe_tiles``, ``scale`` as `profile_node`'s: a whole-array operator's crop), all in one
    batch of the executor's.  The tiles' outputs are the node's (the run computes only the other
    tiles); their operator time (COMP lineage included), shard sizes and counts, scaled to the
    node, are the profile's; no operator runs on a sample window without lineage.  ``task`` is
    the node's task writing its output, over its stored candidates; only its COMP ones are kept.

    A candidate whose predicted capture exceeds ``limit`` at the operator time the tiles
    measured is listed in ``skipped``; the FULL and PAY candidates are in ``bounds`` only (their
    lowest costs, `lower_bound`): the caller encodes them, as `profile_node` does, when they
    matter (`subzero.optimizer.plan.bounds_matter`).  Returns the profile and the tiles.
    """
    op = task.operator
    stored = tuple(s for s in map(Strategy.parse, candidates) if s.stored)
    counted = tuple(s.name for s in stored if s.mode in (Mode.FULL, Mode.PAY))
    comp = tuple(s for s in stored if s.mode is Mode.COMP)
    first = sample_tiles(tiles, sample)
    windows = sample_windows(probe.operator, probe_tiles, sample)
    scale *= (sum(_cells(t) for t in probe_tiles) or 1) / (sum(_cells(t) for t in windows) or 1)
    task = replace(task, strategies=comp, pending_key=uuid.uuid4().hex,
                   shard_dirs=tuple((n, d) for n, d in task.shard_dirs if n in {s.name for s in comp}))
    items: list[tuple] = [("tile", t) for t in first] + [("probe", probe, w, counted) for w in windows]
    start = time.perf_counter()
    got = map_calls(runner, first_part, task, items)
    wall = time.perf_counter() - start
    metas: list[TileMeta] = got[:len(first)]
    measured: list[TileProfile] = got[len(first):]
    grow = (sum(_cells(t) for t in tiles) or 1) / (sum(_cells(m.tile) for m in metas) or 1)  # the tiles to the node
    profile = NodeProfile(
        node=task.node, tiles=len(tiles), op_seconds=sum(m.op_seconds for m in metas) * grow,
        out_size=int(np.prod(op.output_shape)), in_sizes=[int(np.prod(s)) for s in op.input_shapes],
        mapping=Mode.MAP in op.supported_modes(), all_to_all=op.all_to_all, measured=False, one_pass=True)
    fanout, links, distinct = (sum(getattr(m, k) for m in measured) for k in ("fanout", "links", "distinct_in"))
    profile.trace_seconds = (LINK_SECONDS * links + OUT_CELL_SECONDS * fanout) * scale
    profile.fan_backward = max(links / fanout, 1.0) if fanout else 1.0
    profile.fan_forward = max(links / distinct, 1.0) if distinct else 1.0
    most = limit.seconds(profile.op_seconds) if limit is not None else None

    def over(strategy: Strategy, pairs: float, outs: float, ins: float) -> bool:
        alone = capture_seconds(strategy, pairs, outs, ins)
        if most is None or limit is None or strategy.name in limit.keep or alone <= most:
            return False
        profile.skipped[strategy.name] = _over_limit(alone, most)
        profile.skipped_at[strategy.name] = [float(alone), float(profile.op_seconds)]
        return True

    for name in counted:
        strategy = Strategy.parse(name)
        rows = [m.bounds[name] for m in measured if name in m.bounds]
        pairs, outs, ins, least, least_keys = (np.array(rows).sum(axis=0) * scale).tolist() if rows else [0.0] * 5
        if not over(strategy, pairs, outs, ins):
            profile.bounds[name] = lower_bound(strategy, pairs, outs, ins, least, least_keys)
    for strategy in comp:
        records = [m.shards[strategy.name] for m in metas]
        pairs, outs, ins = (sum(getattr(r, k) for r in records) * grow for k in ("pairs", "out_cells", "in_cells"))
        if over(strategy, pairs, outs, ins):
            continue
        boxes = sum(len(ids) for m in metas if strategy.name in m.pending
                    for ids, _, _ in m.pending[strategy.name].boxes.values())
        written = sum(r.index_bytes for r in records)  # a tile that wrote its shard itself: its index's bytes
        profile.strategies[strategy.name] = StrategyProfile(
            bytes=sum(r.nbytes for r in records) * grow + (written * grow if written else index_bytes_bound(boxes * grow)),
            encode_seconds=capture_seconds(strategy, pairs, outs, ins), pairs=pairs, out_cells=outs,
            in_cells=ins, keys=sum(r.keys for r in records) * grow)
    # the tiles' part of the batch's wall: their own seconds over the threads they ran on (the probes beside them)
    own = sum(m.op_seconds + m.write_seconds + m.lineage_seconds for m in metas)
    threads = max(1, min(int(getattr(runner, "threads", 1) or 1), len(metas)))
    return profile, FirstTiles(task, metas, min(wall, own / threads))


# -- reusing a profile ---------------------------------------------------------------------------

_KEPT: OrderedDict[str, NodeProfile] = OrderedDict()
_KEPT_LOCK = threading.Lock()


def reuse_key(parts: Sequence[Any]) -> str:
    """The key a profile is kept under: a digest of what it depends on, ``parts`` (JSON-able:
    the digests of the node's operator and of every operator and input upstream of it, the
    tiles, the candidates and pins, whether the node was computed first), and of subzero's
    own code (`code_digest`).

    Examples
    --------
    >>> reuse_key(["op:abc", [64, 64], ["CompOne/backward"]]) == reuse_key(["op:abc", [64, 64], ["CompOne/backward"]])
    True
    """
    return xxhash.xxh3_64_hexdigest(json.dumps([code_digest(), *parts], sort_keys=True, default=repr).encode())


_CODE: list[str] = []


def code_digest() -> str:
    """A digest of subzero's source files (their paths, sizes and modification times), taken
    once per process: a profile kept on disk by other code (a new version, an edited operator
    or encoder) is never recalled."""
    if not _CODE:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        seen = []
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")))
            for name in sorted(f for f in files if f.endswith(".py")):
                st = os.stat(os.path.join(folder, name))
                seen.append(f"{os.path.relpath(os.path.join(folder, name), root)}:{st.st_size}:{st.st_mtime_ns}")
        _CODE.append(xxhash.xxh3_64_hexdigest("\n".join(seen).encode()))
    return _CODE[0]


def profile_path(key: str) -> str | None:
    """Where ``key``'s profile is kept on disk (the ``calibration`` directory of the user's cache,
    `subzero.config.cache_root`), or None when the ``keep_calibration`` setting is off."""
    if not config.get("keep_calibration"):
        return None
    return os.path.join(config.cache_root(), "calibration", key + ".json")


def remember(key: str, profile: NodeProfile) -> None:
    """Keep ``profile`` (as measured, before the run's own sizes are set) for `recall` under
    ``key``: in this process, and on disk (`profile_path`; written whole or not at all, and a
    file that cannot be written is only not kept)."""
    with _KEPT_LOCK:
        _KEPT[key] = copy.deepcopy(profile)
        _KEPT.move_to_end(key)
        while len(_KEPT) > KEEP_PROFILES:
            _KEPT.popitem(last=False)
    path = profile_path(key)
    if path is None:
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        part = f"{path}.{os.getpid()}.{threading.get_ident()}.part"
        with open(part, "w") as f:
            json.dump({"key": key, "profile": profile.to_dict()}, f, default=lambda v: v.item())  # numpy scalars
        os.replace(part, path)
        _trim(os.path.dirname(path))
    except (OSError, TypeError, ValueError, AttributeError):
        pass


def _trim(folder: str, keep: int = KEEP_PROFILES) -> None:
    """Remove the least recently used profiles on disk beyond ``keep`` (a recall marks its file used)."""
    names = [n for n in os.listdir(folder) if n.endswith(".json")]
    if len(names) <= keep:
        return
    used = sorted(names, key=lambda n: os.stat(os.path.join(folder, n)).st_mtime_ns)
    for name in used[:len(names) - keep]:
        try:
            os.remove(os.path.join(folder, name))
        except OSError:
            pass


def _read_kept(key: str) -> NodeProfile | None:
    """The profile kept on disk under ``key``, or None (none kept, or a file that does not read
    back as a profile under that key: it is removed, and the node calibrated anew)."""
    path = profile_path(key)
    if path is None or not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            doc = json.load(f)
        if doc.get("key") != key:
            raise ValueError(f"{path} holds the profile of {doc.get('key')!r}")
        profile = NodeProfile.from_dict(doc["profile"])
        os.utime(path)  # used now: `_trim` removes the least recently used
        return profile
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        try:
            os.remove(path)
        except OSError:
            pass
        return None


def recall(key: str, limit: CaptureLimit | None, op_seconds: float | None) -> NodeProfile | None:
    """The profile `remember` kept under ``key`` (in this process, else on disk), if calibrating
    now would measure the same:
    every candidate it skipped is still over ``limit``, or within `REUSE_SLACK` of it (its
    predicted capture against the limit at the operator time it was taken at: the limit itself
    moves that much with the operator times a run measures, and the integer program's budget
    is tighter still); None otherwise.  ``op_seconds``: the node's operator time measured by
    this run (a node computed first), which the profile takes instead of the one it was
    measured with, as `profile_node` would."""
    with _KEPT_LOCK:
        kept = _KEPT.get(key)
        if kept is not None:
            _KEPT.move_to_end(key)
    profile = copy.deepcopy(kept) if kept is not None else _read_kept(key)
    if profile is None:
        return None
    if kept is None:  # read from disk: kept in this process from now on
        with _KEPT_LOCK:
            _KEPT[key] = copy.deepcopy(profile)
    if profile.skipped and (limit is None or any(seconds * REUSE_SLACK <= limit.seconds(at) for seconds, at in
                                                 profile.skipped_at.values()) or
                            len(profile.skipped_at) < len(profile.skipped)):
        return None  # a candidate skipped then may be encoded now
    if op_seconds is not None and not profile.one_pass:
        mapped = profile.mapping and not profile.strategies and profile.trace_seconds == profile.op_seconds
        profile = replace(profile, op_seconds=op_seconds, trace_seconds=op_seconds if mapped else
                          profile.trace_seconds)
    return profile


def forget(disk: bool = True) -> None:
    """Drop every kept profile (the next runs calibrate anew): this process's, and with ``disk``
    those kept on disk too (`profile_path`)."""
    with _KEPT_LOCK:
        _KEPT.clear()
    path = profile_path("x")
    if disk and path is not None and os.path.isdir(os.path.dirname(path)):
        for name in os.listdir(os.path.dirname(path)):
            if name.endswith(".json"):
                try:
                    os.remove(os.path.join(os.path.dirname(path), name))
                except OSError:
                    pass


def _merged_table(merged: bytes, scale: float, predicted: float, pairs: float, outs: float,
                  ins: float, regular: bool = True) -> StrategyProfile:
    """The node's range-rule table as the samples' merged table ``merged`` predicts it.

    A table of at most `REGULAR_RULES` rules is regular lineage (a stencil's interior and
    edges, a transpose, a crop): the node keeps one such table, about this size whatever its
    size.  A larger one holds rules per region of the data (a source's pixels, cells that
    fall back to explicit ids): it grows with the node's cells (``scale``), and past
    `subzero.encoders.full_range.INLINE_BYTES` it is stored in chunks of
    `subzero.encoders.full_range.CHUNK_RULES` rules (``keys``) a query reads and decodes.
    ``regular=False``: the table was measured on a crop of a whole-array operator's inputs
    (`fans_crop`), too small a sample to tell regular lineage: it grows with the cells."""
    from subzero.encoders.full_range import CHUNK_RULES, INLINE_BYTES
    from subzero.encoders.ranges import deserialize

    rules = deserialize(merged).n_rules
    if regular and rules <= REGULAR_RULES:
        return StrategyProfile(bytes=float(len(merged)), encode_seconds=predicted, pairs=pairs, out_cells=outs,
                               in_cells=ins)
    nbytes = len(merged) * scale
    keys = 0.0 if nbytes <= INLINE_BYTES else float(np.ceil(rules * scale / CHUNK_RULES))
    return StrategyProfile(bytes=nbytes, encode_seconds=predicted, pairs=pairs, out_cells=outs, in_cells=ins,
                           keys=keys)


def _groups(stored: tuple[Strategy, ...], n_tiles: int) -> list[tuple[Strategy, ...]]:
    """The strategies each task of a sample tile measures: all in one task, except for a
    node sampled on one tile (a whole-array operator), whose FULL and PAY strategies (measured
    on a quarter with the fans, `profile_part`) and its other ones (COMP, on the whole tile) are
    measured by two tasks at once, so that a second core does not idle."""
    dear = tuple(s for s in stored if s.mode in (Mode.FULL, Mode.PAY))
    rest = tuple(s for s in stored if s not in dear)
    return [dear, rest] if n_tiles == 1 and dear and rest else [stored]


def _subsample(pairs, max_pairs: int):
    """At most ``max_pairs`` of the pairs, evenly spread."""
    if pairs.n_pairs <= max_pairs:
        return pairs
    keep = np.zeros(pairs.n_pairs, bool)
    keep[np.linspace(0, pairs.n_pairs - 1, max_pairs).astype(np.int64)] = True
    return pairs.select(keep)


def fans_corner(op: Operator, box: Box, side: int = 32,
                max_links: int = MAX_MAPPED_LINKS) -> tuple[tuple[int, int], ...]:
    """The corner of ``box`` whose mapping fans calibration counts: ``side`` cells along each
    axis, fewer when the first cell's input cells say the corner would map to more than
    ``max_links`` (a wide window, such as a cosmic-ray mask's)."""
    corner = tuple((lo, min(hi, lo + side)) for lo, hi in box)
    first = box_cells(tuple(lo for lo, _ in corner), tuple(lo + 1 for lo, _ in corner))
    per_cell = sum(len(op.map_b_pairs(first, i)[0]) for i in range(len(op.input_shapes)))
    cells = _cells(Tile(0, corner))
    if per_cell * cells <= max_links:
        return corner
    ratio = (max_links / (per_cell * cells)) ** (1.0 / len(corner))
    return tuple((lo, lo + max(1, int(np.ceil((hi - lo) * ratio)))) for lo, hi in corner)


def kept_mapping_fans(op: Operator, box: Box, kept: dict | None = None) -> tuple[float, float]:
    """`mapping_fans` of ``op`` over `fans_corner` of ``box``, counted once per ``kept`` (a run's:
    `profile_node`'s ``fans``) for an operator of the same code and arguments
    (`subzero.fingerprint.operator_digest`), bound to the same shapes, over the same box: a
    workflow's nodes of one kind (a step repeated per exposure) share them, as the mapping
    functions are functions of those alone.

    Examples
    --------
    >>> from subzero.operators import Convolve
    >>> op, kept = Convolve(np.ones((3, 3))).bound(((64, 64),), (64, 64)), {}
    >>> kept_mapping_fans(op, ((0, 64), (0, 64)), kept) == mapping_fans(op, fans_corner(op, ((0, 64), (0, 64))))
    True
    >>> len(kept)
    1
    """
    if kept is None:
        return mapping_fans(op, fans_corner(op, box))
    from subzero.fingerprint import operator_digest

    key = (operator_digest(op), tuple(map(tuple, op.input_shapes)), tuple(op.output_shape or ()), tuple(box))
    fans = kept.get(key)
    if fans is None:
        fans = kept[key] = mapping_fans(op, fans_corner(op, box))
    return fans


def mapping_fans(op: Operator, box: Box) -> tuple[float, float]:
    """Mean input cells per output cell, and output cells per distinct input cell, of a
    mapping operator's cells in ``box`` (from ``map_b_pairs``: counted, never sorted)."""
    cells = box_cells(tuple(lo for lo, _ in box), tuple(hi for _, hi in box))
    links = distinct = 0
    for i, shape in enumerate(op.input_shapes):
        owner, coords = op.map_b_pairs(cells, i)
        links += len(owner)
        distinct += distinct_count(to_ids(np.asarray(coords, np.int64).reshape(len(owner), len(shape)), shape),
                                   int(np.prod(shape)))
    back = links / len(cells) if len(cells) else 1.0
    fwd = links / distinct if distinct else 1.0
    return max(back, 1.0), max(fwd, 1.0)


def distinct_count(ids: np.ndarray, size: int) -> int:
    """How many distinct values ``ids`` (cell ids below ``size``) holds."""
    return len(unique_ids(ids, size))


def profile_from_run(node: str, op: Operator, stats: NodeMetrics | None) -> NodeProfile:
    """A profile from a finished node's measured statistics (`subzero.catalog.NodeMetrics`),
    which is what queries plan with."""
    stats = stats or NodeMetrics()
    profile = NodeProfile(
        node=node, tiles=stats.tiles, op_seconds=stats.op_seconds, trace_seconds=stats.lineage_seconds,
        out_size=int(np.prod(op.output_shape)), in_sizes=[int(np.prod(s)) for s in op.input_shapes],
        mapping=Mode.MAP in op.supported_modes(), all_to_all=op.all_to_all, measured=True)
    for name, nbytes in stats.bytes.items():
        pairs, outs, ins = stats.pairs.get(name, (0, 0, 0))
        profile.strategies[name] = StrategyProfile(
            bytes=nbytes, encode_seconds=stats.encode_seconds.get(name, 0.0),
            pairs=pairs, out_cells=outs, in_cells=ins, keys=stats.keys.get(name, 0))
    return profile

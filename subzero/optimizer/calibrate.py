"""Calibration: measure a node on a sample of its tiles under every candidate strategy.

Runs in the driver after the node's output is computed (so its inputs exist), on at
most ``sample`` tiles spread over the array, and scales the measurements to the whole
node.  This is how the first run of a workflow already gets a good plan.
"""

from __future__ import annotations

import time

import numpy as np

from subzero.encoders import encoder_for, merge_tiles
from subzero.encoders.base import index_bytes_bound
from subzero.modes import Mode, Strategy
from subzero.optimizer.cost_model import NodeProfile, StrategyProfile
from subzero.runtime import NodeTask, capture_tile, derived_full, with_envelopes
from subzero.tiling import Tile

__all__ = ["profile_node", "profile_from_run"]


def _cells(tile: Tile) -> int:
    return int(np.prod([hi - lo for lo, hi in tile.box])) if tile.box is not None else 1


def profile_node(task: NodeTask, tiles: list[Tile], candidates: list[str], op_seconds: float,
                 sample: int = 2, max_pairs: int = 20_000) -> NodeProfile:
    """Profile ``task``'s node on ``sample`` tiles spread over it.

    The tiles run once with every mode the stored candidates need; each candidate then
    encodes at most ``max_pairs`` of those pairs, and bytes and encode time are scaled to
    the whole node (pairs are alike within a node: sizes scale with their count).
    """
    op = task.operator
    picks = sorted({0, len(tiles) // 2, len(tiles) - 1})[:sample]
    chosen = [tiles[k] for k in picks]
    scale = (sum(_cells(t) for t in tiles) or 1) / (sum(_cells(t) for t in chosen) or 1)
    stored = tuple(c for c in candidates if Strategy.parse(c).stored)
    profile = NodeProfile(
        node=task.node, tiles=len(tiles), op_seconds=op_seconds,
        out_size=int(np.prod(op.output_shape)), in_sizes=[int(np.prod(s)) for s in op.input_shapes],
        mapping=Mode.MAP in op.supported_modes(), all_to_all=op.all_to_all, measured=False)
    if op.all_to_all:
        return profile
    if not stored and profile.mapping:  # fans from the mapping functions on a corner of a tile
        corner = tuple((lo, min(hi, lo + 32)) for lo, hi in chosen[0].box)
        profile.trace_seconds = op_seconds
        profile.fan_backward, profile.fan_forward = _fans([derived_full(op, corner)])
        return profile
    start = time.perf_counter()
    # FULL always: its pairs give the fans, and re-execution in tracing mode produces them
    sampler = NodeTask(task.node, op, task.inputs, stored + ("FullOne",))
    captures = [capture_tile(sampler, t) for t in chosen]
    profile.trace_seconds = (time.perf_counter() - start) * scale
    profile.fan_backward, profile.fan_forward = _fans([c.full for c in captures])
    for name in stored:
        strategy = Strategy.parse(name)
        encoder = encoder_for(strategy)
        if strategy.both_directions:  # range rules: regular lineage must not be subsampled
            profile.strategies[name] = _profile_ranges(encoder, captures, task.shapes, scale)
            continue
        totals, boxes = np.zeros(6), {}
        for c in captures:
            pairs = c.pairs_for(strategy)
            if strategy.mode is not Mode.FULL:
                pairs = with_envelopes(op, pairs)
            part = _subsample(pairs, max_pairs)
            t0 = time.perf_counter()
            batch = merge_tiles([encoder.encode(part, c.tile.index, task.shapes)])
            seconds = time.perf_counter() - t0
            factor = pairs.n_pairs / max(part.n_pairs, 1)
            n_in = sum(len(a) for a in pairs.in_ids) if strategy.mode is Mode.FULL else 0
            totals += [batch.nbytes * factor, seconds * factor, pairs.n_pairs, len(pairs.out_ids), n_in,
                       len(batch.keys) * factor]
            for slot, (ids, _, _) in batch.boxes.items():
                boxes[slot] = boxes.get(slot, 0.0) + len(ids) * factor
        totals *= scale
        totals[0] += sum(index_bytes_bound(n * scale) for n in boxes.values())
        profile.strategies[name] = StrategyProfile(*totals.tolist())
    return profile


def _profile_ranges(encoder, captures, shapes, scale: float) -> StrategyProfile:
    """FullRange on whole sample tiles: when their tables are small the node keeps one merged
    table (about the size of the samples' merge, whatever the array size), else per-tile
    tables scale with the tiles."""
    encoded, seconds = [], 0.0
    for c in captures:
        t0 = time.perf_counter()
        encoded.append(encoder.encode(c.full, c.tile.index, shapes))
        seconds += time.perf_counter() - t0
    pairs = sum(c.full.n_pairs for c in captures)
    outs = sum(len(c.full.out_ids) for c in captures)
    ins = sum(sum(len(a) for a in c.full.in_ids) for c in captures)
    merged = encoder.merge_inline([e.inline for e in encoded], shapes) \
        if all(e.inline is not None for e in encoded) else None
    if merged is not None:
        nbytes, keys = float(len(merged)), 0.0
    else:
        batches = [merge_tiles([e]) for e in encoded]
        nbytes = scale * sum(b.nbytes + b.index_bytes_bound for b in batches)
        keys = scale * sum(len(b.keys) for b in batches)
    return StrategyProfile(nbytes, seconds * scale, pairs * scale, outs * scale, ins * scale, keys)


def _subsample(pairs, max_pairs: int):
    """At most ``max_pairs`` of the pairs, evenly spread."""
    if pairs.n_pairs <= max_pairs:
        return pairs
    keep = np.zeros(pairs.n_pairs, bool)
    keep[np.linspace(0, pairs.n_pairs - 1, max_pairs).astype(np.int64)] = True
    return pairs.select(keep)


def _fans(traced) -> tuple[float, float]:
    """Mean input cells per output cell, and output cells per distinct input cell, of full pairs."""
    if not traced:
        return 1.0, 1.0
    fanout = np.concatenate([np.diff(p.out_ptr) for p in traced])
    fanin = np.concatenate([sum(np.diff(ptr) for ptr in p.in_ptr) if p.in_ptr else np.zeros(p.n_pairs)
                            for p in traced])
    links = float(np.sum(fanout * fanin))
    distinct_in = sum(len(np.unique(np.concatenate([p.in_ids[i] for p in traced])))
                      for i in range(traced[0].n_inputs))
    back = links / fanout.sum() if fanout.sum() else 1.0
    fwd = links / distinct_in if distinct_in else 1.0
    return max(back, 1.0), max(fwd, 1.0)


def profile_from_run(node: str, op, stats) -> NodeProfile:
    """A profile from a finished node's measured statistics (`subzero.catalog.NodeStats`),
    which is what queries plan with."""
    from subzero.catalog import NodeStats

    stats = stats or NodeStats()
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

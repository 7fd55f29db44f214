"""Calibration: measure a node on a sample of its tiles under every candidate strategy.

Runs in the driver after the node's output is computed (so its inputs exist), on at
most ``sample`` tiles spread over the array, and scales the measurements to the whole
node.  This is how the first run of a workflow already gets a good plan.
"""

from __future__ import annotations

import time

import numpy as np

from subzero.encoders import merge_tiles
from subzero.modes import Mode
from subzero.optimizer.cost_model import NodeProfile, StrategyProfile
from subzero.runtime import NodeTask, run_tile, trace_tile
from subzero.tiling import Tile

__all__ = ["profile_node", "profile_from_run"]


def _cells(tile: Tile) -> int:
    return int(np.prod([hi - lo for lo, hi in tile.box])) if tile.box is not None else 1


def profile_node(task: NodeTask, tiles: list[Tile], candidates: list[str], op_seconds: float,
                 sample: int = 2) -> NodeProfile:
    """Profile ``task``'s node: run ``sample`` tiles with every stored candidate strategy."""
    op = task.operator
    picks = sorted({0, len(tiles) // 2, len(tiles) - 1})[:sample]
    chosen = [tiles[k] for k in picks]
    total_cells = sum(_cells(t) for t in tiles) or 1
    sampled_cells = sum(_cells(t) for t in chosen) or 1
    scale = total_cells / sampled_cells
    stored = tuple(c for c in candidates if c not in ("Map", "BlackBox"))
    sample_task = NodeTask(task.node, op, task.input_paths, stored)
    results = [run_tile(sample_task, t) for t in chosen]
    start = time.perf_counter()
    traced = [trace_tile(NodeTask(task.node, op, task.input_paths, ()), t) for t in chosen]
    trace_seconds = (time.perf_counter() - start) * scale
    profile = NodeProfile(
        node=task.node, tiles=len(tiles), op_seconds=op_seconds, trace_seconds=trace_seconds,
        out_size=int(np.prod(op.output_shape)), in_sizes=[int(np.prod(s)) for s in op.input_shapes],
        mapping=Mode.MAP in op.supported_modes(), all_to_all=op.all_to_all, measured=False)
    profile.fan_backward, profile.fan_forward = _fans(traced)
    for name in stored:
        batch = merge_tiles([r.encoded[name] for r in results])
        pairs, outs, ins = (sum(r.cells[name][k] for r in results) for k in range(3))
        profile.strategies[name] = StrategyProfile(
            bytes=(batch.nbytes + batch.index_bytes_bound) * scale,
            encode_seconds=sum(r.encode_seconds[name] for r in results) * scale,
            pairs=pairs * scale, out_cells=outs * scale, in_cells=ins * scale,
            keys=len(batch.keys) * scale)
    return profile


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


def profile_from_run(node: str, op, n_tiles: int, op_seconds: float, stats: dict) -> NodeProfile:
    """A profile from a finished node's measured statistics (what queries plan with)."""
    profile = NodeProfile(
        node=node, tiles=n_tiles, op_seconds=op_seconds, trace_seconds=stats.get("lineage_seconds", 0.0),
        out_size=int(np.prod(op.output_shape)), in_sizes=[int(np.prod(s)) for s in op.input_shapes],
        mapping=Mode.MAP in op.supported_modes(), all_to_all=op.all_to_all, measured=True)
    for name, nbytes in stats.get("bytes", {}).items():
        pairs, outs, ins = stats.get("pairs", {}).get(name, [0, 0, 0])
        profile.strategies[name] = StrategyProfile(
            bytes=nbytes, encode_seconds=stats.get("encode_seconds", {}).get(name, 0.0),
            pairs=pairs, out_cells=outs, in_cells=ins, keys=stats.get("keys", {}).get(name, 0))
    return profile

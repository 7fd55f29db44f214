"""The query executor: one lineage step through one node, from stored lineage or re-execution.

The frontier is a boolean mask over the array a step starts from; each step returns a
mask over the array it reaches, so duplicates vanish as they appear.  Stored lineage is
read in this process (no Spark job); black-box steps re-run only the tiles the frontier
touches, in tracing mode.
"""

from __future__ import annotations

import numpy as np

from subzero.cells import coords_from_mask, mask_from_coords
from subzero.encoders import encoder_for
from subzero.encoders.base import FullEncoder
from subzero.errors import LineageError
from subzero.modes import Mode, Strategy
from subzero.runtime import NodeTask, expand_payloads, trace_tile
from subzero.tiling import tile_grid

__all__ = ["step", "walk", "check_forced"]


def walk(wf, src, dst, direction: str, start: np.ndarray, step_fn, dst_shape) -> np.ndarray:
    """Carry the frontier ``start`` (a mask over ``src``) to ``dst`` along every path of ``wf``.

    ``step_fn(node, mask, i)`` is one step through ``node`` w.r.t. its input ``i``; masks
    arriving at a node by several paths are OR-ed before it steps, so each node steps once
    per input (lineage of a union is the union of lineages).
    """
    if src is dst:
        return start
    up, down = (dst, src) if direction == "backward" else (src, dst)
    order = wf.between(up, down)
    if up not in order:
        raise LineageError(f"no path from {src.name!r} {direction} to {dst.name!r}: "
                           f"{dst.name!r} is not {'an ancestor' if direction == 'backward' else 'a descendant'} "
                           f"of {src.name!r}")
    on_path = set(order)
    masks = {src: start}
    if direction == "backward":
        for node in reversed(order):
            if node is dst or node not in masks:
                continue
            for i, parent in enumerate(node.inputs):
                if parent in on_path:
                    got = step_fn(node, masks[node], i)
                    masks[parent] = masks[parent] | got if parent in masks else got
    else:
        for node in order:
            if node is src:
                continue
            for i, parent in enumerate(node.inputs):
                if parent in masks:
                    got = step_fn(node, masks[parent], i)
                    masks[node] = masks[node] | got if node in masks else got
    return masks.get(dst, np.zeros(dst_shape, bool))


def check_forced(node, stored: tuple[str, ...], using) -> str:
    """The canonical name of a strategy the caller forced for ``node``, if it can answer."""
    op = node.operator
    name = Strategy.parse(using).name
    available = set(stored) | {"BlackBox"} | ({"Map"} if Mode.MAP in op.supported_modes() else set())
    if name not in available:
        raise LineageError(f"node {node.name!r} did not store {name!r}; it stored {', '.join(stored)} "
                           "(BlackBox re-execution is always available)")
    return name


def step(run, node, mask: np.ndarray, i: int, direction: str, strategy: str,
         entire_array: bool = True, deadline: float | None = None) -> np.ndarray:
    """One lineage step through ``node`` with respect to its input ``i``.

    Backward: ``mask`` is over the node's output, the result over input ``i``.
    Forward: ``mask`` is over input ``i``, the result over the output.
    Stored lookups raise `subzero.errors.LookupTimeout` past ``deadline`` (perf_counter).
    """
    op = node.operator
    out_shape, in_shape = tuple(op.output_shape), tuple(op.input_shapes[i])
    target = in_shape if direction == "backward" else out_shape
    if not mask.any():
        return np.zeros(target, bool)
    if entire_array and op.entire_array_safe and mask.all():
        return np.ones(target, bool)
    if op.all_to_all:
        return np.ones(target, bool)
    s = Strategy.parse(strategy)
    flat = mask.reshape(-1)
    if s.mode is Mode.MAP:
        return _map_step(op, mask, i, direction, target)
    if s.mode is Mode.BLACKBOX:
        return _reexecute(run, node, mask, i, direction, target)
    reader = run.store.reader(node.name, s.name, run.ndims(node), deadline)
    enc = encoder_for(s)
    shapes = (out_shape, tuple(op.input_shapes))
    if isinstance(enc, FullEncoder):
        ids = enc.backward(reader, flat, i, shapes) if direction == "backward" else enc.forward(reader, flat, i, shapes)
        return _ids_mask(ids, target)
    if direction == "backward":
        pay = enc.lookup(reader, np.flatnonzero(flat), shapes)
        result = _ids_mask(expand_payloads(op, pay, deadline).backward(flat, i), target)
        if s.mode is Mode.COMP:
            rest = mask.copy()
            rest.reshape(-1)[pay.out_ids] = False
            result |= _map_step(op, rest, i, direction, target)
        return result
    pay = enc.load(reader, shapes)
    result = _ids_mask(expand_payloads(op, pay, deadline).forward(flat, i), target)
    if s.mode is Mode.COMP:
        default = _map_step(op, mask, i, direction, target)
        default.reshape(-1)[pay.out_ids] = False
        result |= default
    return result


def _ids_mask(ids: np.ndarray, shape) -> np.ndarray:
    mask = np.zeros(shape, bool)
    mask.reshape(-1)[ids] = True
    return mask


def _map_step(op, mask: np.ndarray, i: int, direction: str, target) -> np.ndarray:
    if not mask.any():
        return np.zeros(target, bool)
    masked = op.map_b_mask(mask, i) if direction == "backward" else op.map_f_mask(mask, i)
    if masked is not None:
        masked = np.asarray(masked, bool)
        if masked.shape != tuple(target):
            raise LineageError(f"{type(op).__name__}.map_{direction[0]}_mask returned shape {masked.shape}, "
                               f"expected {tuple(target)}")
        return masked
    cells = coords_from_mask(mask)
    got = op.map_b(cells, i) if direction == "backward" else op.map_f(cells, i)
    got = np.asarray(got, np.int64).reshape(-1, len(target))
    if len(got) and (got.min() < 0 or np.any(got.max(axis=0) >= np.asarray(target))):
        raise LineageError(f"{type(op).__name__}.map_{direction[0]} returned cells outside the array of "
                           f"shape {tuple(target)}; mapping functions must clip to the array")
    return mask_from_coords(got, target)


def _reexecute(run, node, mask: np.ndarray, i: int, direction: str, target) -> np.ndarray:
    """Black-box step: re-run, in tracing mode, only the tiles the frontier touches."""
    op = node.operator
    tiling = op.effective_tiling()
    tiles = tile_grid(op.output_shape, tiling.split_axes(op), run.tile_shape)
    cells = coords_from_mask(mask)
    lo, hi = cells.min(axis=0), cells.max(axis=0)
    touched = []
    for tile in tiles:
        box = tile.box if direction == "backward" else tiling.input_box(op, tile.box, i)
        if _box_hits(box, mask, lo, hi):
            touched.append(tile)
    task = NodeTask(node.name, op, tuple(run.store.array_path(n.name) for n in node.inputs), ())
    flat = mask.reshape(-1)
    result = np.zeros(target, bool)
    for tile in touched:
        pairs = trace_tile(task, tile)
        ids = pairs.backward(flat, i) if direction == "backward" else pairs.forward(flat, i)
        result.reshape(-1)[ids] = True
    return result


def _box_hits(box, mask: np.ndarray, lo, hi) -> bool:
    if any(b_hi <= l or b_lo > h for (b_lo, b_hi), l, h in zip(box, lo, hi)):
        return False
    return bool(mask[tuple(slice(a, b) for a, b in box)].any())

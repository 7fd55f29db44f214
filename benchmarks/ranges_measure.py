"""Measure range rules (subzero/encoders/ranges.py) against today's FullOne/FullMany.

Issue 10's five operations at 1000 x 1000 (matmul 300 x 300): the Full lineage of each
node (mapping-derived, one pair per out cell, as `subzero.worker.derived_full` makes
it) is produced per tile on a 4 x 4 grid of the output (250 x 250 tiles), compressed per
tile and merged.  Printed per operation: serialized bytes of the merged rules, compress
time (all tiles plus the merge), the median latency of a 1-cell and a 100 x 100-box
backward query (boxes out; and to sorted ids), and the bytes today's FullOne/FullMany
encodings of the same pairs take (8-byte keys + values, as `Batch.nbytes`).  The chain
crop -> transpose -> correlate counts its three nodes and queries through all three.
A second table shows irregular lineage (random pairs, Label components, CosmicRayDetect
radii) against the same baselines: where ranges do not pay, rules fall back to cells.

Not part of the test suite.  Run::

    PYTHONPATH=. python benchmarks/ranges_measure.py [--quick] [--no-baseline] [--no-irregular]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import numpy as np

from subzero import operators as ops
from subzero.encoders import FullMany, FullOne, merge_tiles
from subzero.encoders.ranges import RangeRules, compress, to_ids
from subzero.worker import derived_full
from subzero.tiling import tile_grid

#: issue 10's DSLog numbers: bytes, 100x100-box backward query (ms)
DSLOG = {"transpose": (10.4e3, 12), "3x3 correlate": (11.3e3, 9), "crop": (10.4e3, 9),
         "matmul": (21e3, 23), "crop -> transpose -> correlate": (32e3, 20)}


def bind(op, shapes):
    """A copy of ``op`` bound to input shapes, as the runtime binds it."""
    op = copy.copy(op)
    op.input_shapes = tuple(tuple(s) for s in shapes)
    op.output_shape = op.infer_output_shape(op.input_shapes)
    return op


def operations(n: int, m: int):
    """name -> list of bound operators (a chain when more than one)."""
    rng = np.random.default_rng(0)
    kernel = rng.uniform(0.5, 1.5, (3, 3))
    crop = ops.Slice((n // 4, n // 10), (3 * n // 4, 9 * n // 10))
    cropped = bind(crop, [(n, n)])
    transposed = bind(ops.Transpose(), [cropped.output_shape])
    return {
        "transpose": [bind(ops.Transpose(), [(n, n)])],
        "3x3 correlate": [bind(ops.Correlate(kernel, "reflect"), [(n, n)])],
        "crop": [bind(crop, [(n, n)])],
        "matmul": [bind(ops.MatMul(), [(m, m), (m, m)])],
        "crop -> transpose -> correlate": [cropped, transposed,
                                            bind(ops.Correlate(kernel, "reflect"), [transposed.output_shape])],
    }


def node_lineage(op, baseline: bool, tile_pairs=None) -> dict:
    """Per-tile pairs -> rules (timed: wall and CPU), merged; FullOne/FullMany bytes of
    the same pairs.  ``tile_pairs`` (a list of FullPairs) replaces the derived pairs."""
    shape = op.output_shape
    if tile_pairs is None:
        tiles = tile_grid(shape, tuple(range(len(shape))), tuple(-(-s // 4) for s in shape))
        tile_pairs = (derived_full(op, tile.box) for tile in tiles)
    parts, wall, cpu, one, many = [], 0.0, 0.0, [], []
    shapes = (op.output_shape, tuple(op.input_shapes))
    for index, pairs in enumerate(tile_pairs):
        t0, c0 = time.perf_counter(), time.process_time()
        parts.append(compress(pairs, op.output_shape, op.input_shapes))
        wall, cpu = wall + time.perf_counter() - t0, cpu + time.process_time() - c0
        if baseline:
            one.append(FullOne("backward").encode(pairs, index, shapes))
            many.append(FullMany("backward").encode(pairs, index, shapes))
    t0, c0 = time.perf_counter(), time.process_time()
    rules = RangeRules.merge(parts)
    wall, cpu = wall + time.perf_counter() - t0, cpu + time.process_time() - c0
    rules = RangeRules.from_bytes(rules.to_bytes())  # what a query would read
    return {"rules": rules, "seconds": wall, "cpu": cpu, "tile_rules": sum(p.n_rules for p in parts),
            "one": merge_tiles(one).nbytes if baseline else None,
            "many": merge_tiles(many).nbytes if baseline else None}


def chain_backward(nodes: list[dict], lo: np.ndarray, hi: np.ndarray, ids: bool):
    """Backward through the chain (last node first) to the first node's input 0."""
    for node in reversed(nodes):
        lo, hi = node["rules"].backward(lo, hi, 0)
    if ids:
        return to_ids(lo, hi, nodes[0]["rules"].in_shapes[0])
    return lo, hi


def median_ms(fn, repeats: int) -> float:
    fn()  # warm the lazily built indexes
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def check(chain, nodes, lo, hi) -> None:
    """The box query answers like the operators' own mapping functions."""
    from subzero.cells import box_cells

    cells = box_cells(tuple(lo[0]), tuple(hi[0]))
    for op in reversed(chain):
        cells = np.unique(op.map_b(cells, 0), axis=0)
    want = np.ravel_multi_index(tuple(cells.T), chain[0].input_shapes[0])
    got = chain_backward(nodes, lo, hi, ids=True)
    assert np.array_equal(np.sort(want), got), "range rules disagree with map_b"


def measure(n: int, m: int, repeats: int, baseline: bool) -> list[dict]:
    rows = []
    for name, chain in operations(n, m).items():
        nodes = [node_lineage(op, baseline) for op in chain]
        shape = np.array(chain[-1].output_shape)
        centre = shape // 2
        cell = (centre[None], centre[None] + 1)
        box = (np.maximum(centre - 50, 0)[None], np.minimum(centre + 50, shape)[None])
        check(chain, nodes, *box)
        rows.append({
            "name": name,
            "bytes": sum(x["rules"].nbytes for x in nodes),
            "rules": sum(x["rules"].n_rules for x in nodes),
            "tile_rules": sum(x["tile_rules"] for x in nodes),
            "compress_s": sum(x["seconds"] for x in nodes),
            "compress_cpu": sum(x["cpu"] for x in nodes),
            "cell_ms": median_ms(lambda: chain_backward(nodes, *cell, ids=False), repeats),
            "box_ms": median_ms(lambda: chain_backward(nodes, *box, ids=False), repeats),
            "box_ids_ms": median_ms(lambda: chain_backward(nodes, *box, ids=True), repeats),
            "one": sum(x["one"] for x in nodes) if baseline else None,
            "many": sum(x["many"] for x in nodes) if baseline else None,
        })
    return rows


def irregular(n: int, baseline: bool, repeats: int) -> list[dict]:
    """UDF-like lineage where ranges do not pay everywhere: random pairs per tile, Label
    components (its lwrite pairs), CosmicRayDetect's mixed radii (its lwrite pairs)."""
    from scipy import ndimage

    from subzero.context import Context
    from subzero.modes import Mode
    from subzero.pairs import FullPairs, ptr_from_counts
    from subzero.tiling import full_box

    rng = np.random.default_rng(7)
    shape = (n, n)

    def lwrite_pairs(op, x):
        box = full_box(shape)
        ctx = Context("op", frozenset({Mode.FULL}), box, (box,), op.input_shapes, op.output_shape)
        ctx.set_result_box(box)
        op.run(ctx, x)
        return ctx.full_pairs(box)

    def random_tiles(op):
        for tile in tile_grid(shape, (0, 1), tuple(-(-s // 4) for s in shape)):
            (r0, r1), (c0, c1) = tile.box
            cells = np.ravel_multi_index(np.mgrid[r0:r1, c0:c1].reshape(2, -1), shape)
            counts = rng.integers(1, 5, len(cells))
            ins = np.sort(rng.integers(0, n * n, int(counts.sum())))
            yield FullPairs(cells, np.arange(len(cells) + 1), (ins,), (ptr_from_counts(counts),))

    blobs = (ndimage.uniform_filter(rng.random(shape), 9) > 0.52).astype(np.int64)
    sky = rng.normal(0, 1, shape)
    sky.reshape(-1)[rng.random(n * n) < 0.01] = 200.0
    sky.reshape(-1)[rng.random(n * n) < 0.003] = 900.0
    label = bind(ops.Label(), [shape])
    crd = bind(ops.CosmicRayDetect(threshold=100.0, radius=3), [shape])
    cases = {"random pairs (fan-in 1-4)": (bind(ops.Transpose(), [shape]), None),
             "Label components": (label, [lwrite_pairs(label, blobs)]),
             "CosmicRayDetect radii": (crd, [lwrite_pairs(crd, sky)])}
    rows = []
    for name, (op, pairs) in cases.items():
        node = node_lineage(op, baseline, random_tiles(op) if pairs is None else pairs)
        centre = np.array(shape) // 2
        box = ((centre - 50)[None], (centre + 50)[None])
        rows.append({"name": name, "bytes": node["rules"].nbytes, "rules": node["rules"].n_rules,
                     "compress_s": node["seconds"], "compress_cpu": node["cpu"],
                     "box_ms": median_ms(lambda: node["rules"].backward(*box, 0), repeats),
                     "one": node["one"], "many": node["many"]})
    return rows


def fmt_bytes(b) -> str:
    if b is None:
        return "-"
    for unit, size in (("MB", 1e6), ("KB", 1e3)):
        if b >= size:
            return f"{b / size:.1f} {unit}"
    return f"{b} B"


def report_irregular(rows: list[dict], n: int) -> str:
    head = ("| lineage | rules | range rules bytes | FullOne bytes | FullMany bytes | rules / FullMany "
            "| compress wall / CPU (s) | 100x100 query, boxes (ms) |")
    lines = [f"Irregular lineage at {n} x {n} (fallback to explicit cells where ranges do not pay)", "", head,
             "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        ratio = f"{r['bytes'] / r['many']:.2f}" if r["many"] else "-"
        lines.append(f"| {r['name']} | {r['rules']} | {fmt_bytes(r['bytes'])} | {fmt_bytes(r['one'])} "
                     f"| {fmt_bytes(r['many'])} | {ratio} | {r['compress_s']:.2f} / {r['compress_cpu']:.2f} "
                     f"| {r['box_ms']:.2f} |")
    return "\n".join(lines)


def report(rows: list[dict], n: int, m: int) -> str:
    head = ("| operation | rules (tiles -> merged) | range rules bytes | FullOne bytes | FullMany bytes "
            "| FullOne / rules | DSLog bytes | compress wall / CPU (s) | 1-cell query (ms) "
            "| 100x100 query, boxes (ms) | ... to ids (ms) | DSLog 100x100 (ms) |")
    lines = [f"Range rules at {n} x {n} (matmul {m} x {m}), 4 x 4 tiles per node, merged", "", head,
             "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        dslog_b, dslog_ms = DSLOG[r["name"]]
        ratio = f"{r['one'] / r['bytes']:,.0f}x" if r["one"] else "-"
        lines.append(
            f"| {r['name']} | {r['tile_rules']} -> {r['rules']} | {r['bytes']} B | {fmt_bytes(r['one'])} "
            f"| {fmt_bytes(r['many'])} | {ratio} | {fmt_bytes(dslog_b)} | {r['compress_s']:.2f} / {r['compress_cpu']:.2f} "
            f"| {r['cell_ms']:.2f} | {r['box_ms']:.2f} | {r['box_ids_ms']:.2f} | {dslog_ms} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="200 x 200 arrays (matmul 60 x 60)")
    parser.add_argument("--no-baseline", action="store_true", help="skip the FullOne/FullMany encodings")
    parser.add_argument("--no-irregular", action="store_true", help="skip the irregular lineage table")
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    n, m = (200, 60) if args.quick else (1000, 300)
    print(report(measure(n, m, args.repeats, not args.no_baseline), n, m))
    if not args.no_irregular:
        print()
        print(report_irregular(irregular(n, not args.no_baseline, args.repeats), n))


if __name__ == "__main__":
    main()

"""Markdown reports: one per benchmark (REPORT.md, our numbers beside the paper's) and the
combined RESULTS.md over several benchmarks' results documents."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from subzero_bench import paper
from subzero_bench.notes import WHY

__all__ = ["render", "render_summary", "comparisons"]


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    value = float(value)
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _header(doc: dict[str, Any], title: str) -> list[str]:
    m = doc["machine"]
    return [f"# {title}", "",
            f"- date: {doc['date']}; mode: {'quick' if doc['quick'] else 'full'}; bench time: {doc['seconds']:.0f} s",
            f"- machine: {m['cpu']}, {m['nproc']} cores, {m['memory_gb']} GB, {m['os']}, Python {m['python']}",
            f"- command: `{doc['command']}`", ""]


# -- comparisons with the paper ------------------------------------------------------------
def comparisons(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows ``{metric, paper, ours, unit, verdict}`` for every number the paper states that
    this run measured; ``verdict`` is "behind" when ours is worse by more than 10%."""
    rows: list[dict[str, Any]] = []

    def add(metric: str, ref: float, ours: float | None, unit: str, lower_is_better: bool) -> None:
        if ours is None:
            return
        worse = ours > 1.1 * ref if lower_is_better else ours < ref / 1.1
        better = ours < ref / 1.1 if lower_is_better else ours > 1.1 * ref
        rows.append({"metric": metric, "paper": ref, "ours": ours, "unit": unit,
                     "verdict": "behind" if worse else "ahead" if better else "close"})

    figs = doc["figures"]
    if doc["bench"] == "astronomy":
        ref = paper.ASTRONOMY

        def ours(c: str) -> list[str]:  # the paper's SubZero is also our pinned paper plan
            return [c] + (["SubZeroPaper"] if c == "SubZero" and "SubZeroPaper" in figs["disk"]["values"] else [])

        for c, v in ref["disk_vs_input"].items():
            for o in ours(c):
                add(f"disk {o}", v, figs["disk"]["values"].get(o), "x input", True)
        for c, v in ref["runtime_vs_base"].items():
            for o in ours(c):
                add(f"runtime {o}", v, figs["runtime"]["values"].get(o), "x base", True)
        add("arrays", ref["arrays_vs_input"], figs["arrays"]["values"], "x input", True)
        for c, v in ref["backward_speedup_vs_blackbox"].items():
            for o in ours(c):
                add(f"backward speed-up {o}", v, figs["mean_backward_speedup"]["values"].get(o), "x BlackBox", False)
        for o in ours("SubZero"):
            add(f"entire-array speed-up ({o})", ref["entire_array_speedup"],
                figs["entire_array_speedup"]["values"].get(o), "x", False)
    elif doc["bench"] == "genomics":
        ref = paper.GENOMICS
        for c, v in ref["disk_vs_input"].items():
            add(f"disk {c}", v, figs["disk"]["values"].get(c), "x input", True)
        for c, v in ref["runtime_vs_base"].items():
            add(f"runtime {c}", v, figs["runtime"]["values"].get(c), "x base", True)
        add("FullForw backward slowdown (static)", ref["mismatched_backward_slowdown"]["FullForw"],
            figs["mismatched_slowdown"]["values"], "x BlackBox", True)
        best = figs["best_dynamic_speedup"]["values"]
        add("best dynamic backward speed-up", ref["dynamic_speedup"]["backward"], best["backward"], "x BlackBox", False)
        add("best dynamic forward speed-up", ref["dynamic_speedup"]["forward"], best["forward"], "x BlackBox", False)
    return rows


def _comparison_section(doc: dict[str, Any]) -> list[str]:
    rows = comparisons(doc)
    if not rows:
        return []
    out = ["## Beside the paper", "",
           _table(["metric", "paper", "ours", "unit", "verdict", "why (where we are behind)"],
                  [[r["metric"], r["paper"], r["ours"], r["unit"], r["verdict"],
                    WHY.get(doc["bench"], {}).get(r["metric"], "") if r["verdict"] == "behind" else ""]
                   for r in rows]), ""]
    return out


# -- per benchmark --------------------------------------------------------------------------
def _astronomy(doc: dict[str, Any]) -> list[str]:
    f, s = doc["figures"], doc["setup"]
    ref = paper.ASTRONOMY
    configs = list(f["disk"]["values"])
    out = [f"Two exposures and a flat field of {s['shape'][0]} x {s['shape'][1]} pixels "
           f"({s['input_bytes'] / 1e6:.1f} MB of input; the paper: {ref['input']}); {s['nodes']} operator nodes, "
           f"UDFs {', '.join(f'{v}={k}' for k, v in s['udfs'].items())}; SubZero = {s['subzero_plan']}.", "",
           "## Overheads (Fig. 5a)", "",
           _table(["configuration", "lineage disk (x input)", "paper", "whole store (x NoLineage)",
                   "runtime (x NoLineage)", "paper", "runtime (s)"],
                  [[c, f["disk"]["values"][c], ref["disk_vs_input"].get(c), f["store"]["values"][c],
                    f["runtime"]["values"][c], ref["runtime_vs_base"].get(c),
                    f["runtime"]["values"][c] * doc["raw"]["base_wall_seconds"]] for c in configs]), "",
           "SubZero's UDF strategies: " + "; ".join(f"{s['udfs'][u]} ({u}) {', '.join(v)}"
                                                    for u, v in s["subzero_strategies"].items()) + ".", "",
           f"Stored arrays are {_fmt(f['arrays']['values'])}x the input (paper: {ref['arrays_vs_input']}x). "
           f"NoLineage ran in {_fmt(doc['raw']['base_wall_seconds'])} s; " + _cellpairs_note(doc['raw']['cellpairs']), "",
           "## Queries (Fig. 5b)", ""]
    seconds = f["query_seconds"]["values"]
    qconfigs = list(next(iter(seconds.values())))
    out += [_table(["query", "what", "result cells"] + [f"{c} (s)" for c in qconfigs],
                   [[q, s["queries"][q]["description"], s["queries"][q]["result_cells"]] +
                    [seconds[q][c] for c in qconfigs] for q in seconds]), "",
            "Speed-up over BlackBox (BlackBox seconds / configuration seconds):", "",
            _table(["query"] + qconfigs, [[q] + [f["query_speedup"]["values"][q][c] for c in qconfigs]
                                          for q in seconds] +
                   [["mean BQ0-BQ4"] + [f["mean_backward_speedup"]["values"][c] for c in qconfigs],
                    ["paper mean"] + [ref["backward_speedup_vs_blackbox"].get(c) for c in qconfigs]]), "",
            "Entire-array optimization (FQ0Slow seconds / FQ0 seconds; paper: "
            f"{ref['entire_array_speedup']:.0f}x):", "",
            _table(qconfigs, [[f["entire_array_speedup"]["values"][c] for c in qconfigs]]), ""]
    return out


def _cellpairs_note(raw: dict[str, Any]) -> str:
    if raw.get("capture_seconds") is None:
        return (f"CellPairs was skipped: the run's exact lineage is about {raw.get('estimate', 0):,} cell pairs "
                "(A and B read 289 pixels per pixel), more than the baseline writes.")
    return (f"CellPairs captured {sum(raw['rows'].values()):,} cell pairs in {_fmt(raw['capture_seconds'])} s "
            "(its runtime is NoLineage plus that capture).")


def _oracle_section(doc: dict[str, Any]) -> list[str]:
    """The perturbation oracle's counts, for the synthetic and the real-data workflows."""
    found = [(name, o) for name, o in (("synthetic", doc.get("oracle")), ("real data", doc.get("real", {}).get("oracle")))
             if o]
    if not found:
        return []
    rows = [[name, o["what"], o["cells"], f"{o['trials']:,} ({o['rejected']:,})", o.get("forward_queries", 0),
             o.get("backward_queries", 0), o["changed_pairs"], o["lineage_pairs"], o["misses"],
             ", ".join(f"{k}: {v:,}" for k, v in o.get("misses_by_target", {}).items()) or "-", o["seconds"]]
            for name, o in found]
    return ["## Perturbation oracle", "",
            "Each sampled input cell is changed six ways (a tiny step, +-5 sigma, a spike, NaN, zero), the "
            "workflow below it re-run plainly, and every output cell that changed must be in the cell's forward "
            "lineage (and the cell in the changed cell's backward lineage, on a sample): a changed cell outside it "
            "is a miss (`subzero.oracle.check_workflow`).", "",
            _table(["workflow", "run", "cells perturbed", "re-runs (rejected)", "forward queries", "backward checks",
                    "changed pairs", "lineage pairs", "misses", "misses per node", "seconds"], rows), ""]


def _real_section(doc: dict[str, Any]) -> list[str]:
    """The real-data half of a benchmark: overheads and query times per configuration."""
    real = doc.get("real")
    if not real:
        return []
    f, s = real["figures"], real["setup"]
    configs = list(f["disk"]["values"])
    seconds = f["query_seconds"]["values"]
    qconfigs = list(next(iter(seconds.values()))) if seconds else []
    inputs = ", ".join(f"{k} {' x '.join(map(str, v))}" for k, v in s["inputs"].items())
    out = [f"## Real data: {real['title']}", "", f"{real['description']} (inputs: {inputs}; "
           f"{s['input_bytes'] / 1e6:.2f} MB; {s['nodes']} operator nodes).", "",
           _table(["configuration", "lineage disk (x input)", f"runtime (x {s['base']})", "runtime (s)"],
                  [[c, f["disk"]["values"][c], f["runtime"]["values"][c], f["runtime_seconds"]["values"][c]]
                   for c in configs]), ""]
    if "SubZero" in s["strategies"]:
        chosen = {k: v for k, v in s["strategies"]["SubZero"].items() if v != ["Map"]}
        out += ["SubZero stored: " + "; ".join(f"{k} {', '.join(v)}" for k, v in chosen.items()) + ".", ""]
    out += [_table(["query", "what", "result cells"] + [f"{c} (s)" for c in qconfigs],
                   [[q, s["queries"][q]["description"], s["queries"][q]["result_cells"]] +
                    [seconds[q][c] for c in qconfigs] for q in seconds]), ""]
    return out


def _genomics(doc: dict[str, Any]) -> list[str]:
    f, s = doc["figures"], doc["setup"]
    configs = list(f["disk"]["values"])
    out = [f"Training and test matrices of {s['patients']} patients x {s['columns']} columns "
           f"(96 patients replicated x{s['scale']}; {s['input_bytes'] / 1e6:.2f} MB of input); "
           f"{s['nodes']} operator nodes, UDFs {', '.join(f'{v}={k}' for k, v in s['udfs'].items())}.", "",
           "## Overheads (Fig. 6a)", "",
           _table(["configuration", "UDF strategies", "lineage disk (x input)", "runtime (x BlackBox run)"],
                  [[c, ", ".join(s["configs"].get(c, [])), f["disk"]["values"][c], f["runtime"]["values"][c]]
                   for c in configs]), ""]
    for key, title in (("static_seconds", "## Query costs, static (Fig. 6b): strategies forced with `using`"),
                       ("dynamic_seconds", "## Query costs, dynamic (Fig. 6c): the run picks per step")):
        seconds = f[key]["values"]
        qconfigs = list(next(iter(seconds.values())))
        out += [title, "", _table(["query", "what", "cells"] + [f"{c} (s)" for c in qconfigs],
                                  [[q, s["queries"][q]["description"], s["queries"][q]["result_cells"]] +
                                   [seconds[q][c] for c in qconfigs] for q in seconds]), ""]
    out += [f"Static query time relative to BlackBox: worst {_fmt(f['worst_static_ratio']['values'])}x; "
            f"dynamic: worst {_fmt(f['worst_dynamic_ratio']['values'])}x "
            "(the paper's query-time optimizer bounds this by 2x).", ""]
    sweep = f.get("sweep", {}).get("values") or {}
    out += ["## Disk-budget sweep (Fig. 7)", ""]
    if sweep:
        queries = list(next(iter(sweep.values()))["query_seconds"])
        out += [_table(["max_disk", "lineage MB", "UDF strategies chosen"] + [f"{q} (s)" for q in queries],
                       [[b, v["disk_mb"], "; ".join(f"{k}: {', '.join(x)}" for k, x in v["udf_strategies"].items())] +
                        [v["query_seconds"][q] for q in queries] for b, v in sweep.items()]), ""]
    else:
        out += [f"**TODO** {f['sweep']['description']}", ""]
    return out


def _micro(doc: dict[str, Any]) -> list[str]:
    f, s = doc["figures"], doc["setup"]
    ref = paper.MICRO
    fans = f["fans"]["values"]
    out = [f"A {s['size'][0]} x {s['size'][1]} array ({s['input_bytes'] / 1e6:.1f} MB; the paper's input: "
           f"{ref['input_mb']} MB), region pairs for {s['fraction']:.0%} of the output cells, queries of "
           f"{s['query_cells']} cells. Rows: fanout; columns: fanin.", ""]
    for key, title in (("runtime_overhead", "Runtime overhead over the BlackBox run (s), Fig. 8"),
                       ("disk", "Lineage disk (MB), Fig. 8"),
                       ("backward_query", "Backward query (s), Fig. 9 (FullOne/forward: mismatched index)"),
                       ("forward_query", "Forward query (s)"),
                       ("backward_speedup", "Backward speed-up over BlackBox (x)")):
        out += [f"## {title}", ""]
        for strategy, grid in f[key]["values"].items():
            out += [f"**{strategy}**", "",
                    _table(["fanout \\ fanin"] + [str(x) for x in fans["fanin"]],
                           [[fo] + list(row) for fo, row in zip(fans["fanout"], grid)]), ""]
    out += ["## Beside the paper", "", f"The paper (no exact table): {ref['source']}.", ""]
    out += [f"- {line}" for line in doc["figures"]["claims"]["values"]] + [""]
    if "dslog" in doc.get("raw", {}):
        from subzero_bench.dslog import dslog_section

        out += dslog_section(doc["raw"]["dslog"])
    return out


def _scale(doc: dict[str, Any]) -> list[str]:
    setup, raw, figs = doc["setup"], doc["raw"], doc["figures"]
    out = [f"Workflow: {setup['workflow']} on two float32 images per size; Spark with driver memory "
           f"{setup['driver_memory']}; every configuration in its own process"
           + (f"; {setup['rounds']} rounds, interleaved, the fastest kept" if setup.get("rounds", 1) > 1 else "")
           + (f"; +optimizer: max_runtime={setup['max_runtime']!r}, the two queries as the workload, calibration "
              "included" if any(c.endswith("+optimizer") for c in setup["configs"]) else "") + ".", ""]
    for note in setup.get("notes", []):  # how the runs were made or what else was measured
        out += [note, ""]
    if setup.get("env"):
        out += ["Environment: " + ", ".join(f"`{k}={v}`" for k, v in setup["env"].items()) + ".", ""]
    if raw.get("load_before"):
        out += [f"Load average (1/5/15 min) at the start: {', '.join(f'{v:.2f}' for v in raw['load_before'])}; at "
                f"the end: {', '.join(f'{v:.2f}' for v in raw.get('load_after') or [])} (2 cores shared with other "
                "jobs; each run's own load is in the table).", ""]
    rows = []
    for side, cells in zip(setup["sides"], setup["cells"]):
        for config in setup["configs"]:
            r = raw.get(f"{config}@{side}")
            if r is None:
                continue
            if "error" in r:
                rows.append([f"{cells:.1e}", config, "failed: " + r["error"].splitlines()[-1][:80]] + [""] * 11)
                continue
            ratio = figs["wall_vs_numpy"]["values"].get(config, {}).get(str(cells))
            base = figs.get("wall_vs_no_lineage", {}).get("values", {}).get(config, {}).get(str(cells))
            load = r.get("load_before")
            run_rss = r.get("driver_rss_run")
            rows.append([f"{cells:.1e}", config, r["wall"], ratio, base, run_rss / 1e9 if run_rss else None,
                         r["driver_rss"] / 1e9,
                         (r.get("executor_rss") or 0) / 1e9 or None, r.get("array_bytes", 0) / 1e9 or None,
                         r.get("lineage_bytes", 0) / 1e6 if "lineage_bytes" in r else None,
                         r.get("backward_seconds", 0) * 1e3 or None, r.get("forward_seconds", 0) * 1e3 or None,
                         f"{load[0]:.2f}" if load else None])
    out += [_table(["cells", "configuration", "wall (s)", "x numpy", "x no lineage", "driver peak RSS, run (GB)",
                    "driver peak RSS, with queries (GB)",
                    "executor peak RSS (GB)", "arrays (GB)", "lineage (MB)", "backward (ms)", "forward (ms)",
                    "load"], rows), ""]
    plans = []
    for side, cells in zip(setup["sides"], setup["cells"]):
        for config in setup["configs"]:
            r = raw.get(f"{config}@{side}") or {}
            opt = r.get("optimizer")
            if not opt:
                continue
            plan = ", ".join(f"{n}: {'+'.join(v)}" for n, v in r.get("plan", {}).items())
            walls = " / ".join(f"{x['wall']:.1f}" for x in r.get("rounds", []) if x.get("wall") is not None)
            base = raw.get(f"{config.partition('+')[0]}@{side}") or {}
            base_walls = " / ".join(f"{x['wall']:.1f}" for x in base.get("rounds", []) if x.get("wall") is not None)
            nodes = ", ".join(f"{n} {v['wall']:.1f} (op {v['op']:.1f}, lineage {v['lineage']:.1f})"
                              for n, v in r.get("nodes", {}).items())
            plans.append([f"{cells:.1e}", config, plan, opt.get("calibration_seconds"), opt.get("solve_seconds"),
                          opt.get("max_runtime_seconds"), walls, base_walls or None, nodes])
    if plans:
        out += ["The optimizer's runs: the plan it chose, calibration and solver seconds (inside the wall time), the "
                "lineage overhead it was allowed (seconds over the operators' measured time), every round's wall "
                "time, beside the same executor's without lineage (rounds interleaved), and each node's wall "
                "(operator, lineage) seconds in the kept round:", "",
                _table(["cells", "configuration", "plan", "calibration (s)", "solve (s)", "overhead budget (s)",
                        "rounds (s)", "without lineage, rounds (s)", "nodes (s)"], plans), ""]
    codecs = raw.get("codecs")
    if codecs:
        out += [f"Chunk compressors (local run without lineage, {setup.get('codec_cells', 0):.1e} cells):", "",
                _table(["compressor", "wall (s)", "arrays (GB)"],
                       [[c, r.get("wall"), (r.get("array_bytes") or 0) / 1e9] for c, r in codecs.items()]), ""]
    return out


def _own_render(doc: dict[str, Any]) -> list[str]:
    """The body of a bench that renders its own report: ``render_NAME`` of ``subzero_bench.NAME``."""
    import importlib

    return getattr(importlib.import_module(f"subzero_bench.{doc['bench']}"), f"render_{doc['bench']}")(doc)


def _store_stats(doc: dict[str, Any]) -> list[str]:
    """The table and the count of a built store (``SUBZERO_STATS_STORE``): a row each, with the
    driver's peak."""
    out = _store_table(doc) if "store_table" in doc["raw"] else []
    x = doc["raw"].get("store_count")
    if x is None:
        return out
    load = ", ".join(f"{v:.2f}" for v in x["load_before"]) + " -> " + ", ".join(f"{v:.2f}" for v in x["load_after"])
    executors = "-" if x.get("executor_rss") is None else x["executor_rss"] / 1e9
    return out + [
        f"Contamination count of the hits of `{x['flags']}` in `stars` ({x['cells']:.2e} cells), written chunk by "
        f"chunk into a Zarr array; {x['executor']} executor; load {load}.", "",
        _table(["cells", "cells counted", "sum of counts", "largest count", "count (s)", "driver peak RSS (GB)",
                "of it the JVM (GB)", "Python workers (GB)"],
               [[f"{x['cells']:.1e}", x["contaminated_cells"], x["count_total"], x["count_max"], x["seconds"],
                 x["driver_rss"] / 1e9, x["driver_jvm_rss"] / 1e9, executors]]), "",
        f"Counted cells checked against one backward query each: {x['sample'] - x['sample_mismatches']}/"
        f"{x['sample']} match. The union forward query of the same flags is not run here: its answer is a dense "
        "mask of `stars` (1 byte a cell), more than the driver's budget at 1e9 cells.", ""]


def _store_table(doc: dict[str, Any]) -> list[str]:
    """The table of a built store: one row, with the driver's peak."""
    x = doc["raw"]["store_table"]
    load = ", ".join(f"{v:.2f}" for v in x["load_before"]) + " -> " + ", ".join(f"{v:.2f}" for v in x["load_after"])
    executors = "-" if x.get("executor_rss") is None else x["executor_rss"] / 1e9
    return [f"Workflow: {doc['setup']['workflow']}; the store `{x['store']}` ({x['cells']:.2e} cells, "
            f"{x['side']} x {x['side']}), opened read-only; flags: the Zarr array `{x['flags']}`, values: `raw`; "
            f"{x['executor']} executor, driver memory {doc['setup'].get('driver_memory', '1g')}; load {load}.", "",
            _table(["cells", "objects", "(object, cell) pairs", "objects flagged", "batches", "table (s)",
                    "geometry pass (s)", "driver peak RSS (GB)", "of it the JVM (GB)", "Python workers (GB)"],
                   [[f"{x['cells']:.1e}", x["objects"], x["lineage_cells_total"], x["objects_flagged"], x["batches"],
                     x["seconds"], x.get("geometry_seconds"), x["driver_rss"] / 1e9, x["driver_jvm_rss"] / 1e9,
                     executors]]), "",
            "Driver peak RSS: this process's peak plus the driver JVM's (where local-mode executors live), each "
            "polled apart, so their sum bounds the joint peak from above."
            + (f" Rows checked against one backward query per object: {x['sample'] - x['sample_mismatches']}/"
               f"{x['sample']} match." if "sample" in x else ""), ""]


def _stats(doc: dict[str, Any]) -> list[str]:
    setup, r = doc["setup"], doc["raw"]
    if ("store_table" in r or "store_count" in r) and "table_seconds" not in r:
        return _store_stats(doc)
    load = ", ".join(f"{v:.2f}" for v in r["load_before"])
    out = [f"Workflow: {setup['workflow']}; {r['cells']:,} cells ({r['side']} x {r['side']}), {r['objects']:,} "
           f"objects, {r['flagged']:,} flagged pixels (cosmic-ray hits); {setup['executor']} executor, tiles of "
           f"{setup['tile']}; load average before the queries: {load} (other jobs shared the 2 cores).", "",
           _table(["question", "ours (s)", "baseline", "baseline (s)", "ratio", "target", "exact"], [
               ["lineage table of every object (best of 2)", r["table_seconds"], "one backward query per object "
                f"(mean of {r['sample']}, x {r['objects']:,})", r["per_object_all_seconds"],
                r["table_seconds"] / r["per_object_all_seconds"], "<= 10 s",
                f"{r['sample'] - r['table_mismatches']}/{r['sample']} objects match"],
               ["contamination count (--count)", r["count_seconds"], "union forward query of the same flags",
                r["forward_seconds"], r["count_seconds"] / r["forward_seconds"], "<= 2x forward",
                f"{r['sample'] - r['count_mismatches']}/{r['sample']} cells match; mask "
                f"{'agrees' if r['count_mask_agrees'] else 'DIFFERS'}"],
           ]), "",
           f"The objects' lineages hold {r['lineage_cells_total']:,} (object, cell) pairs in the raw exposure; "
           f"{r['objects_flagged']:,} objects have a flagged pixel in theirs; {r['contaminated_cells']:,} label "
           f"cells depend on a flagged pixel, at most {r['count_max']} distinct ones each.", ""]
    if "table_peak_bytes" in r:
        rows = [[f"table, batches of {r['batch_objects']:,} objects (the default)", r["table_seconds"],
                 r["table_peak_bytes"] / 1e6, r["table_peak_bytes"] / r["array_bytes"]],
                ["table, all objects in one pass", r["one_pass_seconds"], r["one_pass_peak_bytes"] / 1e6,
                 r["one_pass_peak_bytes"] / r["array_bytes"]],
                ["count", r["count_seconds"], r["count_peak_bytes"] / 1e6, r["count_peak_bytes"] / r["array_bytes"]]]
        if r.get("spark_seconds") is not None:
            rows.append([f"table, batches as Spark tasks ({'same table' if r.get('spark_same') else 'DIFFERENT'})",
                         r["spark_seconds"], None, None])
        out += [_table(["question", "seconds", "peak memory (MB)", "x the raw array"], rows), "",
                "Peak memory: what numpy and Python allocate in this process during the call (tracemalloc), "
                f"against the raw exposure's {r['array_bytes'] / 1e6:.0f} MB (float32); the one-pass table is "
                f"{'the same' if r.get('one_pass_same') else 'NOT the same'} as the batched one.", ""]
    if r.get("scaling"):
        rows = [[f"{r['cells']:.1e}", r["objects"], r["lineage_cells_total"], r["table_seconds"],
                 r.get("table_peak_bytes", 0) / 1e6, r["count_seconds"], r["forward_seconds"],
                 ", ".join(f"{v:.1f}" for v in r["load_before"])]]
        rows += [[f"{x['cells']:.1e}", x["objects"], x["lineage_cells_total"], x["table_seconds"],
                  x["table_peak_bytes"] / 1e6, x["count_seconds"], x["forward_seconds"],
                  ", ".join(f"{v:.1f}" for v in x["load_before"])] for x in r["scaling"]]
        out += ["Larger skies (same star density; no per-object baseline):", "",
                _table(["cells", "objects", "(object, cell) pairs", "table (s)", "table peak (MB)", "count (s)",
                        "forward query (s)", "load"], rows), ""]
    out += ["The 1e9-cell row is measured on a built store (`SUBZERO_STATS_STORE`, `SUBZERO_STATS_FLAGS`). The "
            "driver holds each object's geometry (a few numbers per object, added up from the label array's "
            "chunks by tasks) and each batch's result; a batch's cells and lineage are held by whoever runs it "
            "(this process or a Spark task).", ""]
    return out


def render(doc: dict[str, Any], plots: list[str]) -> str:
    """The REPORT.md of one results document."""
    title = {"astronomy": "Astronomy benchmark (SubZero VIII-A, Fig. 5)",
             "genomics": "Genomics benchmark (SubZero VIII-B, Figs. 6-7)",
             "micro": "Microbenchmark (SubZero VIII-C, Figs. 8-9)",
             "scale": "Scale benchmark: 1e6 to 1e9 cells (issue 9)",
             "trace": "Trace benchmark: numpy code traced into workflows (issue 18)",
             "stats": "Lineage statistics: per-object tables and contamination counts (issue 20)",
             "coldquery": "Cold query: a new `subzero query` process against `import numpy` (issue 23)",
             "capture": "Capture overhead: runs storing lineage over the same runs without (issue 23)",
             "dataplane": "Data plane: Spark and the local executor without stored lineage, the tiny workflow (issue 23)",
             "traced": "Traced code against numpy: the real-code corpus and the numpy astronomy workflow"}[
        doc["bench"]]
    body = {"astronomy": _astronomy, "genomics": _genomics, "micro": _micro, "scale": _scale,
            "stats": _stats}.get(doc["bench"], _own_render)(doc)
    figures = ["## Figures", ""] + [f"![{p}]({p})" for p in plots] + [""]
    notes = WHY.get(doc["bench"], {}).get("_general")
    general = ["## Notes", "", notes, ""] if notes else []
    extra = _real_section(doc) + _oracle_section(doc)
    return "\n".join(_header(doc, title) + body + _comparison_section(doc) + extra + general + figures)


def render_summary(docs: list[dict[str, Any]], reports: list[Path], base: Path, preface: str = "") -> str:
    """RESULTS.md (written in directory ``base``): the machine and the commands, then every
    benchmark's report, its figure links made relative to ``base``."""
    if not docs:
        return "# Benchmark results\n\nNo results documents given.\n"
    m = next(d["machine"] for d in docs if "machine" in d) if any("machine" in d for d in docs) else None
    out = ["# Benchmark results", ""]
    if m is not None:
        out += [f"- machine: {m['cpu']} ({m['nproc']} cores), {m['memory_gb']} GB memory, {m['os']}, "
                f"Python {m['python']}", ""]
    out += [_table(["bench", "mode", "date", "time (s)", "command"],
                   [[d["bench"], "quick" if d.get("quick") else "full", d.get("date", "-"), d.get("seconds", "-"),
                     f"`{d['command']}`" if d.get("command") else "-"] for d in docs]), ""]
    if preface:
        out += [preface, ""]
    for report in reports:
        text = report.read_text().split("\n")
        body = [ln for ln in text[1:] if not ln.startswith(("- date:", "- machine:", "- command:"))]
        rel = os.path.relpath(report.parent, base)
        body = [ln.replace("](fig", f"]({rel}/fig") if ln.startswith("![") else ln for ln in body]
        out += [f"## {text[0].lstrip('# ')}"] + [("#" + ln if ln.startswith("#") else ln) for ln in body]
    return "\n".join(out) + "\n"

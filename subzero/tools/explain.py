"""``subzero explain``: what each node stored, why, and predicted next to measured costs."""

from __future__ import annotations

from subzero.tools.describe import committed_summary, human_bytes, operator_name
from subzero.run import Run

__all__ = ["explain"]




def _fmt_s(x: float | None) -> str:
    return "-" if x is None else (f"{x * 1000:.2f} ms" if x < 1 else f"{x:.2f} s")


def explain(run: Run) -> str:
    """A plain-text report of a run's plan: one block per node."""
    cat = run.catalog
    where = f"executor {cat.executor}" + (f" ({cat.master})" if cat.master else "")
    lines = [f"run {run.workflow.name!r} in {run.path}: "
             f"{committed_summary(cat.status, run.committed, [n.name for n in run.workflow.nodes])}, "
             f"{where}, wall {_fmt_s(cat.wall_seconds)}"]
    opt = cat.optimizer
    if opt:
        lines.append(
            f"optimizer: {opt['status']}, solved in {_fmt_s(opt['solve_seconds'])}, objective "
            f"{opt['objective']:.6g}; budgets disk {human_bytes(opt.get('max_disk_bytes'))}, runtime "
            f"{_fmt_s(opt.get('max_runtime_seconds'))}; workflow alone {_fmt_s(opt['base_seconds'])}, "
            f"calibration {_fmt_s(opt['calibration_seconds'])}; predicted disk {human_bytes(opt['predicted_disk'])}, "
            f"runtime {_fmt_s(opt['predicted_runtime'])}")
    else:
        lines.append("optimizer: not used (strategies pinned or defaulted; give a workload or a budget)")
    measured_steps = _measured_steps(run)
    total_disk = 0.0
    for node in run.workflow.nodes:
        name, entry = node.name, cat.nodes.get(node.name)
        if entry is None and not node.is_input:
            lines.append(f"\n{name} ({operator_name(node)}): not committed")
            continue
        if entry is None or entry.kind != "operator":
            continue
        stats = entry.stats
        disk = sum(stats.bytes.values())
        total_disk += disk
        lines.append(f"\n{name} ({operator_name(node)}, shape {tuple(entry.shape)}): "
                     f"{', '.join(entry.strategies)}  [{entry.reason}]")
        if entry.array.why:
            lines.append(f"  array: {entry.array.why}")
        if getattr(node.operator, "coarse", False):
            lines.append(f"  coarse: {getattr(node.operator, 'reason', '')}")
        lines.append(f"  measured: disk {human_bytes(disk)}, operator {_fmt_s(stats.op_seconds)}, "
                     f"lineage {_fmt_s(stats.lineage_seconds)}, write {_fmt_s(stats.write_seconds)}, "
                     f"{stats.tiles} tile(s)")
        for strategy, pred in sorted(entry.predicted.items()):
            mark = "*" if strategy in entry.strategies else " "
            got = stats.bytes.get(strategy)
            q = ", ".join(f"{d} {_fmt_s(v)}" for d, v in sorted(pred["query"].items()))
            lines.append(f"  {mark} {strategy:<18} predicted disk {human_bytes(pred['disk']):>9} "
                         f"(measured {human_bytes(got) if got is not None else '-':>9}), runtime "
                         f"{_fmt_s(pred['runtime'])}, query step {q}")
        for strategy, why in sorted(entry.pruned.items()):
            lines.append(f"    pruned {strategy}: {why}")
        for strategy, why in sorted(entry.dropped.items()):
            lines.append(f"    dropped {strategy}: {why}")
        for (direction, strategy), (count, seconds) in sorted(measured_steps.get(name, {}).items()):
            lines.append(f"  queries: {count} {direction} step(s) via {strategy}, mean {_fmt_s(seconds / count)}")
    lines.append(f"\ntotal lineage stored: {human_bytes(total_disk)} "
                 f"({total_disk / max(cat.input_bytes or 1, 1):.2f}x the input size)")
    return "\n".join(lines)


def _measured_steps(run: Run) -> dict:
    out: dict = {}
    for query in run.query_log():
        for step in query.get("steps", []):
            key = (step["direction"], step["strategy"] + (" -> BlackBox" if step.get("switched_to_blackbox") else ""))
            count, seconds = out.setdefault(step["node"], {}).get(key, (0, 0.0))
            out[step["node"]][key] = (count + 1, seconds + step["seconds"])
    return out

"""PNG figures in the style of the paper's Figs. 5-9 (matplotlib, Agg backend).

Each ``plot_<bench>(doc, out_dir)`` draws from a results document and returns the file
names it wrote.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402

__all__ = ["plot", "plot_astronomy", "plot_genomics", "plot_micro", "plot_scale"]


def _bars(ax, groups: list[str], series: dict[str, list[float]], ylabel: str, log: bool = True) -> None:
    """Grouped bars: one group per ``groups`` entry, one bar per series."""
    width = 0.8 / max(len(series), 1)
    x = np.arange(len(groups))
    for k, (name, values) in enumerate(series.items()):
        vals = np.maximum(np.asarray(values, float), 1e-6) if log else values
        ax.bar(x + (k - (len(series) - 1) / 2) * width, vals, width, label=name)
    ax.set_xticks(x, groups, rotation=20, ha="right")
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")
    ax.grid(axis="y", alpha=0.3)


def _save(fig, out_dir: Path, name: str) -> str:
    fig.tight_layout()
    fig.savefig(out_dir / name, dpi=110)
    plt.close(fig)
    return name


def _overhead(figs: dict[str, Any], out_dir: Path, disk_label: str, runtime_label: str, name: str) -> str:
    """Figure (a): disk and runtime overhead per configuration, side by side."""
    configs = list(figs["disk"]["values"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    _bars(axes[0], configs, {disk_label: [figs["disk"]["values"][c] for c in configs]}, "lineage disk / input bytes")
    axes[0].set_title("(a) disk overhead")
    _bars(axes[1], configs, {"runtime": [figs["runtime"]["values"][c] for c in configs]}, runtime_label, log=False)
    axes[1].set_title("(a) runtime overhead")
    return _save(fig, out_dir, name)


def _query_costs(seconds: dict[str, dict[str, float]], out_dir: Path, title: str, name: str) -> str:
    """A figure of query seconds per query, one bar per configuration."""
    queries = list(seconds)
    fig, ax = plt.subplots(figsize=(11, 4))
    _bars(ax, queries, {c: [seconds[q][c] for q in queries] for c in next(iter(seconds.values()))},
          "query seconds (log)")
    ax.set_title(title)
    ax.legend(fontsize=8, ncol=3)
    return _save(fig, out_dir, name)


def plot_astronomy(doc: dict[str, Any], out_dir: Path) -> list[str]:
    """Draw the astronomy figures (disk, query time per configuration) into ``out_dir``; the file names."""
    figs = doc["figures"]
    return [_overhead(figs, out_dir, "disk (x input)", "wall time / NoLineage", "fig5a_overhead.png"),
            _query_costs(figs["query_seconds"]["values"], out_dir, "(b) query costs", "fig5b_queries.png")]


def plot_genomics(doc: dict[str, Any], out_dir: Path) -> list[str]:
    """Draw the genomics figures (disk, query time per configuration) into ``out_dir``; the file names."""
    figs = doc["figures"]
    names = [_overhead(figs, out_dir, "disk", "wall time / BlackBox run", "fig6a_overhead.png")]
    for key, tag, title in (("static_seconds", "fig6b_static.png", "(b) query costs (static)"),
                            ("dynamic_seconds", "fig6c_dynamic.png", "(c) query costs (dynamic)")):
        names.append(_query_costs(figs[key]["values"], out_dir, title, tag))
    sweep = figs.get("sweep", {}).get("values") or {}
    if sweep:
        budgets = list(sweep)
        queries = list(next(iter(sweep.values()))["query_seconds"])
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        _bars(axes[0], budgets, {"disk MB": [sweep[b]["disk_mb"] for b in budgets]}, "lineage MB", log=False)
        axes[0].set_title("disk used per budget")
        _bars(axes[1], budgets, {q: [sweep[b]["query_seconds"][q] for b in budgets] for q in queries},
              "query seconds (log)")
        axes[1].set_title("query costs per budget")
        axes[1].legend(fontsize=8)
        names.append(_save(fig, out_dir, "fig7_sweep.png"))
    return names


def _grid_panels(figs: dict[str, Any], key: str, strategies: list[str], ylabel: str, log: bool,
                 fans: dict[str, list[int]], axes) -> None:
    values = figs[key]["values"]
    for ax, s in zip(axes, strategies):
        for k, fanout in enumerate(fans["fanout"]):
            ys = np.asarray(values[s][k], float)
            ax.plot(fans["fanin"], np.maximum(ys, 1e-6) if log else ys, marker="o", label=f"fanout {fanout}")
        ax.set_xscale("log")
        if log:
            ax.set_yscale("log")
        ax.set_title(s, fontsize=9)
        ax.set_xlabel("fanin")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(ylabel)
    axes[0].legend(fontsize=7)


def plot_micro(doc: dict[str, Any], out_dir: Path) -> list[str]:
    """Draw the microbenchmark figures (costs against fan-in/out per strategy) into ``out_dir``; the file names."""
    figs = doc["figures"]
    fans = figs["fans"]["values"]
    stored = [s for s in figs["disk"]["values"] if s != "BlackBox"]
    fig, axes = plt.subplots(2, len(stored), figsize=(3.2 * len(stored), 6), squeeze=False)
    _grid_panels(figs, "runtime_overhead", stored, "runtime overhead (s)", False, fans, axes[0])
    _grid_panels(figs, "disk", stored, "disk (MB)", False, fans, axes[1])
    names = [_save(fig, out_dir, "fig8_overhead.png")]
    backward = list(figs["backward_query"]["values"])
    fig, axes = plt.subplots(1, len(backward), figsize=(3.2 * len(backward), 3.4), squeeze=False)
    _grid_panels(figs, "backward_query", backward, "backward query (s)", True, fans, axes[0])
    names.append(_save(fig, out_dir, "fig9_queries.png"))
    forward = list(figs["forward_query"]["values"])
    fig, axes = plt.subplots(1, len(forward), figsize=(3.2 * len(forward), 3.4), squeeze=False)
    _grid_panels(figs, "forward_query", forward, "forward query (s)", True, fans, axes[0])
    names.append(_save(fig, out_dir, "fig9_forward_queries.png"))
    return names


def plot_scale(doc: dict[str, Any], out_dir: Path) -> list[str]:
    """Wall time, driver memory and query latency against array size, one line per configuration."""
    figs = doc["figures"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, key, label in zip(axes, ("wall", "driver_rss", "backward_ms"),
                              ("run wall time (s)", "driver peak RSS (GB)", "1-cell backward query (ms)")):
        for config, values in figs[key]["values"].items():
            points = [(int(c), v) for c, v in values.items() if v is not None]
            if points:
                xs, ys = zip(*sorted(points))
                ax.plot(xs, ys, marker="o", label=config)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("cells")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    return [_save(fig, out_dir, "fig_scale.png")]


def plot(doc: dict[str, Any], out_dir: str | Path) -> list[str]:
    """Draw the figures of a results document into ``out_dir``; return the file names."""
    return {"astronomy": plot_astronomy, "genomics": plot_genomics, "micro": plot_micro,
            "scale": plot_scale, "trace": lambda doc, out: [], "stats": lambda doc, out: [],
            "coldquery": lambda doc, out: [], "capture": lambda doc, out: [],
            "dataplane": lambda doc, out: [], "traced": lambda doc, out: []}[doc["bench"]](doc, Path(out_dir))

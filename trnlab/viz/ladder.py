"""Pictures of the matmul optimization ladder (notebook 05): how each step uses the engines.

- `plot_ladder_progress`: per step, the simulated time and how busy DMA and the tensor engine were —
  the kernel going from DMA-bound to compute-bound;
- `plot_active_comparison`: engine active % of our steps next to the figures AWS's profiler gave for
  its versions of the same kernels (hatched bars);
- `plot_ladder_roofline`: every step as a point on one core's roofline;
- `plot_sbuf_budget`: what a kernel keeps in SBUF per partition against the capacity.

The functions take plain data: step results with ``.step`` (label), ``.latency_us``, ``.active``
(engine -> %), ``.mfu`` and ``.profile`` (see `trnlab.kernels.matmul_ladder.StepResult`), and AWS's
figures as a dict ``{kernel name: {engine: %}}``.

    plot_ladder_progress(results)
    plot_active_comparison(results, AWS_TRN2_ACTIVE)
"""
from __future__ import annotations

import textwrap
from typing import Any, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from trnlab.viz.roofline import RooflinePoint, plot_roofline

ENGINES = {"dma": "DMA (any queue)", "pe": "TensorE", "dve": "VectorE"}
COLOURS = {"dma": "#f28e2b", "pe": "#4e79a7", "dve": "#59a14f"}
KiB = 1024


def _step_labels(results: Sequence[Any]) -> list[str]:
    """Step names wrapped to two short lines ("4 blocked\nfree dims"), so that neighbours do not overlap."""
    return [textwrap.fill(r.step, 12) for r in results]


def plot_ladder_progress(results: Sequence[Any], title: str | None = None) -> Figure:
    """Left: simulated time per step. Right: DMA and TensorE active % and MFU per step."""
    if not results:
        raise ValueError("no ladder steps to plot")
    labels = _step_labels(results)
    x = np.arange(len(results))
    fig, (time_ax, active_ax) = plt.subplots(1, 2, figsize=(10, 3.4))
    latency = np.array([r.latency_us for r in results])
    unit, scale = ("ms", 1e3) if latency.max() >= 1e3 else ("µs", 1.0)
    bars = time_ax.bar(x, latency / scale, color="#9c755f")
    for bar, value in zip(bars, latency / scale):
        time_ax.text(bar.get_x() + bar.get_width() / 2, value, f"{value:.3g}", ha="center", va="bottom", fontsize=8)
    time_ax.set_ylim(0, 1.15 * latency.max() / scale)  # room for the value labels above the bars
    time_ax.set_ylabel(f"simulated time ({unit})")
    time_ax.set_title("time per step (lower is better)", fontsize=9)
    for engine in ("dma", "pe"):
        active_ax.plot(x, [r.active.get(engine, 0.0) for r in results], "o-", color=COLOURS[engine],
                       label=f"{ENGINES[engine]} active")
    active_ax.plot(x, [100 * r.mfu for r in results], "s--", color="#333333", label="MFU")
    active_ax.set_ylim(0, 105)
    active_ax.set_ylabel("% of the kernel's time")
    active_ax.set_title("DMA busy all the time → tensor engine busy all the time", fontsize=9)
    # beside the plot: inside, it would hide a point (the DMA share falls to the bottom right)
    active_ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    for ax in (time_ax, active_ax):
        ax.set_xticks(x)
        ax.set_xticklabels(labels, fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_active_comparison(results: Sequence[Any], aws: dict | None = None, title: str | None = None,
                           engines: Sequence[str] = ("dma", "pe", "dve")) -> Figure:
    """Engine active % per step, ours (solid) beside AWS's published profile (hatched, where given)."""
    if not results:
        raise ValueError("no ladder steps to plot")
    aws = aws or {}
    fig, axes = plt.subplots(1, len(engines), figsize=(4 * len(engines), 3.4), sharey=True)
    axes = np.atleast_1d(axes)
    x = np.arange(len(results))
    width = 0.38
    for ax, engine in zip(axes, engines):
        ours = [r.active.get(engine, 0.0) for r in results]
        theirs = [aws.get(r.name, {}).get(engine) for r in results]
        ax.bar(x - width / 2, ours, width, color=COLOURS.get(engine, "#999999"), label="trnlab (simulated)")
        published = [i for i, v in enumerate(theirs) if v is not None]
        ax.bar(x[published] + width / 2, [theirs[i] for i in published], width, facecolor="white",
               edgecolor=COLOURS.get(engine, "#999999"), hatch="///", label="AWS profiler (published)")
        for i in range(len(results)):
            ax.text(x[i] - width / 2, ours[i] + 1, f"{ours[i]:.0f}", ha="center", va="bottom", fontsize=7)
            if theirs[i] is not None:
                ax.text(x[i] + width / 2, theirs[i] + 1, f"{theirs[i]:.0f}", ha="center", va="bottom", fontsize=7)
            else:
                ax.text(x[i] + width / 2, 1, "n/a", ha="center", va="bottom", fontsize=6, color="#777777")
        ax.set_title(f"{ENGINES.get(engine, engine)} active", fontsize=9)
        ax.set_xticks(x)
        ax.set_xticklabels(_step_labels(results), fontsize=7)
        ax.set_ylim(0, 112)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("% of the kernel's time")
    axes[-1].legend(fontsize=7, loc="upper left")  # the last engine's bars are the lowest
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_ladder_roofline(results: Sequence[Any], title: str = "the ladder on the roofline") -> Figure:
    """Every step as a point (FLOPs per HBM byte, achieved FLOP/s) under the profile's own roof."""
    if not results:
        raise ValueError("no ladder steps to plot")
    first = results[0].profile
    points = [RooflinePoint(r.step, r.profile.arithmetic_intensity, r.profile.achieved_flops) for r in results]
    return plot_roofline(first.peak_flops, first.hbm_bandwidth, points, title=title)


def plot_sbuf_budget(parts: dict, capacity: int, title: str | None = None, ax: plt.Axes | None = None) -> Figure:
    """One horizontal bar: bytes per partition each group of tiles keeps in SBUF, against `capacity`.

    `parts` maps a label to bytes per partition (e.g. {"partial sums (fp32)": 131072, ...}).
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 1.7))
    left = 0.0
    palette = ["#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2"]
    for i, (label, nbytes) in enumerate(parts.items()):
        ax.barh(0, nbytes / KiB, left=left / KiB, color=palette[i % len(palette)], edgecolor="white",
                label=f"{label}: {nbytes / KiB:g} KiB")
        left += nbytes
    over = left > capacity
    ax.axvline(capacity / KiB, color="#e15759" if over else "#333333", lw=2)
    ax.text(capacity / KiB, 0.5, f" capacity {capacity / KiB:g} KiB", color="#e15759" if over else "#333333",
            fontsize=8, va="center")
    ax.set_xlim(0, max(left, capacity) / KiB * 1.25)
    ax.set_ylim(-0.6, 0.8)
    ax.set_yticks([])
    ax.set_xlabel("KiB per partition")
    verdict = f"overflow by {(left - capacity) / KiB:g} KiB" if over else f"{100 * left / capacity:.0f}% used"
    ax.set_title(title or f"SBUF per partition: {left / KiB:g} KiB needed — {verdict}", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    ax.figure.tight_layout()
    return ax.figure

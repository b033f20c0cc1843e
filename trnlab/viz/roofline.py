"""The roofline: how fast a kernel can possibly run given its arithmetic intensity.

Attainable FLOP/s = min(peak FLOP/s, bandwidth x intensity), where intensity = FLOPs / bytes moved
from the memory whose bandwidth is the roof (HBM here). Left of the ridge point (peak / bandwidth) a
kernel is memory-bound, right of it compute-bound — if it reaches the roof at all: a point below a
tenth of its roof is latency-bound (fixed costs dominate; `hardware.profile.roofline_bound`). A kernel is a point (its intensity, its achieved
FLOP/s); the gap between the point and the roof above it is what is left to win.

    plot_roofline(peak_flops=79e12, bandwidth=2.9e12 / 8, points=[("my kernel", 120.0, 20e12)])
    plot_profile_roofline(core.profile(), core.spec)     # the point from a Profile
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from trnlab.hardware.profile import LATENCY_FACTOR


@dataclass(frozen=True)
class RooflinePoint:
    label: str
    intensity: float  # FLOP per byte moved from the roof's memory
    achieved_flops: float  # FLOP/s


def attainable_flops(intensity: np.ndarray | float, peak_flops: float, bandwidth: float) -> np.ndarray:
    """The roof: min(peak, bandwidth * intensity) in FLOP/s."""
    return np.minimum(peak_flops, bandwidth * np.asarray(intensity, dtype=float))


def plot_roofline(peak_flops: float, bandwidth: float,
                  points: Sequence[RooflinePoint | tuple[str, float, float]] = (),
                  title: str = "roofline", ax: plt.Axes | None = None) -> Figure:
    """Log-log roofline for one peak (FLOP/s) and one bandwidth (bytes/s), with kernels as points."""
    if peak_flops <= 0 or bandwidth <= 0:
        raise ValueError(f"peak_flops and bandwidth must be positive, got {peak_flops} and {bandwidth}")
    points = [p if isinstance(p, RooflinePoint) else RooflinePoint(*p) for p in points]
    ridge = peak_flops / bandwidth  # FLOP/byte where the two roofs meet
    intensities = [p.intensity for p in points if p.intensity > 0]
    low = min([ridge / 100, *intensities]) / 2
    high = max([ridge * 100, *intensities]) * 2
    x = np.geomspace(low, high, 200)

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    ax.loglog(x, attainable_flops(x, peak_flops, bandwidth) / 1e12, color="#333333", lw=2)
    ax.axvline(ridge, color="#999999", ls=":", lw=1)
    # along the dotted line, at the bottom of the plot: kernels sit near the roof, not down there
    ax.text(ridge * 1.12, bandwidth * low * 1.5 / 1e12, f"ridge {ridge:.0f} FLOP/byte", fontsize=8,
            color="#555555", rotation=90, va="bottom")
    ax.text(low * 1.3, peak_flops / 1e12 * 1.15, f"peak {peak_flops / 1e12:.1f} TFLOPS", fontsize=8)
    ax.text(low * 1.3, bandwidth * low * 1.3 * 1.6 / 1e12,
            f"{bandwidth / 1e9:.0f} GB/s", fontsize=8, rotation=28, color="#555555")
    for point in points:
        roof = float(attainable_flops(point.intensity, peak_flops, bandwidth))
        share = point.achieved_flops / roof if roof else 0.0
        bound = "latency-bound" if share * LATENCY_FACTOR < 1 else \
            ("memory-bound" if point.intensity < ridge else "compute-bound")
        ax.plot(point.intensity, point.achieved_flops / 1e12, "o", ms=7, zorder=3,
                label=f"{point.label}: {point.achieved_flops / 1e12:.2f} TFLOPS at {point.intensity:.1f} FLOP/B "
                      f"({100 * point.achieved_flops / roof:.0f}% of the roof, {bound})")
    ax.set_xlabel("arithmetic intensity (FLOP per byte)")
    ax.set_ylabel("TFLOPS")
    ax.set_ylim(top=peak_flops / 1e12 * 3)
    ax.set_title(title, fontsize=10)
    if points:  # below the plot, where it covers neither the points nor the roof's labels
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False)
    ax.figure.tight_layout()
    return ax.figure


def plot_core_rooflines(cores: Sequence[Any], dtype: str = "bfloat16", ax: plt.Axes | None = None) -> Figure:
    """The roofs of several cores (`CoreSpec`s) on one plot: peak for `dtype` and the core's HBM share."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    ridges = [core.peak_flops(dtype) / core.hbm_bandwidth for core in cores]
    x = np.geomspace(min(ridges) / 50, max(ridges) * 20, 200)
    for core, ridge in zip(cores, ridges):
        peak = core.peak_flops(dtype)
        line, = ax.loglog(x, attainable_flops(x, peak, core.hbm_bandwidth) / 1e12, lw=2,
                          label=f"{core.name}: {peak / 1e12:.1f} TFLOPS {dtype}, "
                                f"{core.hbm_bandwidth / 1e9:.0f} GB/s HBM, ridge {ridge:.0f} FLOP/B")
        ax.plot(ridge, peak / 1e12, "o", color=line.get_color(), ms=5)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of HBM traffic)")
    ax.set_ylabel("TFLOPS (one core)")
    ax.set_title(f"one NeuronCore per generation ({dtype})", fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    ax.figure.tight_layout()
    return ax.figure


def plot_profile_roofline(profile: Any, spec: Any = None, label: str = "kernel",
                          ax: plt.Axes | None = None) -> Figure:
    """Roofline of one core with a kernel's point taken from its `Profile`.

    The roof is the profile's own peak (the core's peak for the profile's dtype) and the core's HBM
    bandwidth share; the point is the profile's arithmetic intensity (FLOPs per HBM byte) and
    achieved FLOP/s. So the point's height over the peak is exactly the profile's MFU.
    """
    if not profile.hbm_bytes:
        raise ValueError("the profile moved no HBM bytes: its arithmetic intensity is infinite")
    name = getattr(spec, "name", "one NeuronCore")
    title = (f"{name}: {label} at {profile.achieved_tflops:.2f} TFLOPS = "
             f"{100 * profile.mfu:.1f}% MFU, MBU {100 * profile.mbu:.0f}%")
    return plot_roofline(profile.peak_flops, profile.hbm_bandwidth,
                         [RooflinePoint(label, profile.arithmetic_intensity, profile.achieved_flops)],
                         title=title, ax=ax)

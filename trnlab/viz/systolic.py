"""Pictures of the systolic array: one cycle, an animation of all cycles, a slider, the PE utilisation.

Everything is drawn from a `SystolicTrace` (``trnlab.hardware.systolic.simulate_matmul``); nothing is
recomputed here. In one picture every moving value sits at x = t - k - n (its column in the array at
cycle t), so the values still waiting to enter appear to the left of the array, skewed row by row,
and march right one PE per cycle.

    trace = simulate_matmul(stationary, moving, tiny_spec)
    fig = draw_cycle(trace, 5)                       # one cycle
    HTML(animate(trace))                             # matplotlib animation as self-contained HTML
    cycle_slider(trace)                              # ipywidgets slider that steps the cycles
"""

from __future__ import annotations

import re

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.animation import FuncAnimation
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from trnlab.hardware.systolic import SystolicTrace

ACTIVE = "#f4a259"  # a PE doing a multiply-add this cycle
LOADED = "#cfe3f3"  # holds a weight, idle this cycle
UNUSED = "#eeeeee"  # outside the stationary tile: idle for the whole instruction
WAITING = "#8cb369"  # moving values queued at the left edge


def _fmt(value: float) -> str:
    return f"{value:g}" if abs(value) < 1000 else f"{value:.2g}"


def _figsize(trace: SystolicTrace) -> tuple[float, float]:
    width_units = (trace.N + trace.K - 1) + trace.pe_cols + 1 + max(trace.N, 2)
    return 0.62 * width_units + 0.8, 0.62 * trace.pe_rows + 1.3


def draw_cycle(trace: SystolicTrace, cycle: int, fig: Figure | None = None) -> Figure:
    """Draw the array at one cycle (0-based): weights, moving values, partial sums, and PSUM so far."""
    if not 0 <= cycle < trace.cycles:
        raise IndexError(f"cycle {cycle} out of range: this matmul takes {trace.cycles} cycles (0..{trace.cycles - 1})")
    rows, cols = trace.pe_rows, trace.pe_cols
    if fig is None:
        fig = plt.figure(figsize=_figsize(trace))
    fig.clear()
    array_ax, psum_ax = fig.subplots(1, 2, gridspec_kw={"width_ratios": [cols + trace.N + trace.K - 0.5, max(trace.N, 2)]})

    # The array: PE (k, m) is the unit square at x = m, y = -k.
    for k in range(rows):
        for m in range(cols):
            inside = k < trace.K and m < trace.M
            active = bool(trace.active[cycle, k, m])
            colour = ACTIVE if active else (LOADED if inside else UNUSED)
            array_ax.add_patch(Rectangle((m, -k), 0.94, 0.94, facecolor=colour, edgecolor="#555555", lw=0.8))
            if inside:
                array_ax.text(m + 0.06, -k + 0.8, f"w={_fmt(trace.stationary[k, m])}", fontsize=7, va="center")
            if active:
                array_ax.text(m + 0.47, -k + 0.5, f"x={_fmt(trace.moving_regs[cycle, k, m])}", fontsize=8,
                              ha="center", va="center", weight="bold")
                array_ax.text(m + 0.47, -k + 0.18, f"Σ={_fmt(trace.psum_regs[cycle, k, m])}", fontsize=7,
                              ha="center", va="center")

    # Moving values not yet entered: moving[k, n] enters column 0 at cycle n + k, so it is at x = t - k - n.
    for k in range(trace.K):
        for n in range(trace.N):
            x = cycle - k - n
            if x < 0:
                array_ax.add_patch(Rectangle((x + 0.15, -k + 0.2), 0.64, 0.54, facecolor=WAITING, edgecolor="none"))
                array_ax.text(x + 0.47, -k + 0.47, _fmt(trace.moving[k, n]), fontsize=7, ha="center", va="center")

    # Labels: rows are partitions k (the contraction), columns are output partitions m.
    for k in range(rows):
        array_ax.text(cols + 0.1, -k + 0.47, f"k={k}", fontsize=7, va="center", color="#555555")
    for m in range(cols):
        array_ax.text(m + 0.47, 1.08, f"m={m}", fontsize=7, ha="center", color="#555555")
    # Finished sums leave the last loaded row (K-1) and are written to PSUM.
    for m in range(trace.M):
        array_ax.annotate("", xy=(m + 0.47, -trace.K + 0.62), xytext=(m + 0.47, -trace.K + 0.98),
                          arrowprops={"arrowstyle": "->", "color": "#1f4e79", "lw": 1.2})
    array_ax.set_xlim(-(trace.N + trace.K - 2) - 0.2, cols + 0.7)
    array_ax.set_ylim(-rows + 0.6, 1.35)
    array_ax.set_aspect("equal")
    array_ax.axis("off")
    busy = int(trace.active[cycle].sum())
    array_ax.set_title(
        f"cycle {cycle + 1} of {trace.cycles}: {busy} of {rows * cols} PEs busy\n"
        "moving values → right, partial sums Σ ↓ down",
        fontsize=9,
    )

    # PSUM [M, N]: results appear when their partial sum leaves row K-1.
    written = trace.psum[cycle]
    psum_ax.imshow(np.where(np.isnan(written), 0.0, 1.0), cmap="Blues", vmin=0, vmax=3, aspect="equal")
    for m in range(trace.M):
        for n in range(trace.N):
            if not np.isnan(written[m, n]):
                psum_ax.text(n, m, _fmt(written[m, n]), ha="center", va="center", fontsize=7)
    psum_ax.set_xticks(range(trace.N))
    psum_ax.set_yticks(range(trace.M))
    psum_ax.tick_params(labelsize=7)
    psum_ax.set_xlabel("n (moving column)", fontsize=8)
    psum_ax.set_ylabel("m (PSUM partition)", fontsize=8)
    psum_ax.set_title(f"PSUM [M={trace.M}, N={trace.N}]", fontsize=9)
    fig.tight_layout()
    return fig


# matplotlib's to_jshtml draws its buttons with Font Awesome icons from a CDN stylesheet. The course
# must work offline, so the stylesheet link goes and each icon becomes a plain character.
_CDN_STYLESHEET = re.compile(r'<link rel="stylesheet"\s+href="https?://[^"]*"\s*/?>')
_BUTTON_ICONS = {
    "fa fa-minus": "−", "fa fa-fast-backward": "⇤", "fa fa-step-backward": "←",
    "fa fa-play fa-flip-horizontal": "◀", "fa fa-pause": "❚❚", "fa fa-play": "▶",
    "fa fa-step-forward": "→", "fa fa-fast-forward": "⇥", "fa fa-plus": "+",
}


def offline_jshtml(html: str) -> str:
    """`to_jshtml` output without its CDN stylesheet: the icons replaced by characters."""
    html = _CDN_STYLESHEET.sub("", html)
    for icon, character in _BUTTON_ICONS.items():
        html = html.replace(f'<i class="{icon}"></i>', character)
    if "<i class=\"fa " in html or "http://" in html or "https://" in html:
        raise ValueError("to_jshtml produced an icon or a link this function does not know: update _BUTTON_ICONS")
    return html


def animate(trace: SystolicTrace, max_frames: int = 24, dpi: int = 90, interval_ms: int = 700) -> str:
    """The whole instruction as a matplotlib animation, returned as self-contained HTML.

    `to_jshtml` with its CDN stylesheet removed (`offline_jshtml`), so it plays without a network.
    At most `max_frames` frames (evenly spaced cycles, always including the last), so that a stored
    notebook stays small.
    """
    frames = np.unique(np.linspace(0, trace.cycles - 1, min(max_frames, trace.cycles)).round().astype(int))
    fig = plt.figure(figsize=_figsize(trace), dpi=dpi)
    animation = FuncAnimation(fig, lambda cycle: draw_cycle(trace, int(cycle), fig), frames=frames,
                              interval=interval_ms, repeat=False)
    html = offline_jshtml(animation.to_jshtml(default_mode="once"))
    plt.close(fig)
    return html


def cycle_slider(trace: SystolicTrace):
    """An ipywidgets slider that draws the array at the chosen cycle."""
    import ipywidgets as widgets

    slider = widgets.IntSlider(value=1, min=1, max=trace.cycles, step=1, description="cycle",
                               continuous_update=False)

    def show(cycle: int) -> None:
        draw_cycle(trace, cycle - 1)
        plt.show()

    return widgets.interactive(show, cycle=slider)


def plot_utilisation(trace: SystolicTrace, ax: plt.Axes | None = None) -> Figure:
    """Fraction of PEs busy in each cycle: the fill ramp, the steady part, the drain."""
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 2.6))
    cycles = np.arange(1, trace.cycles + 1)
    ax.bar(cycles, 100 * trace.utilisation, color=ACTIVE, width=0.85)
    ax.set_xlabel("cycle")
    ax.set_ylabel("PEs busy (%)")
    ax.set_ylim(0, 100)
    mean = 100 * trace.utilisation.mean()
    ax.set_title(
        f"{trace.pe_rows}×{trace.pe_cols} array, K={trace.K} M={trace.M} N={trace.N}: "
        f"{trace.cycles} cycles, {mean:.0f}% busy on average",
        fontsize=9,
    )
    ax.figure.tight_layout()
    return ax.figure

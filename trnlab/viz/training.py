"""Pictures of training on the simulated Trainium (notebook 07): loss curves side by side, one
step's timeline coloured by phase (forward, backward, optimizer), and the time and cost of training
per generation."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from trnlab.viz.timeline import _engine_rank, engine_label

PHASE_COLOURS = {"forward": "#4e79a7", "backward": "#e15759", "optimizer": "#59a14f", "": "#bbbbbb"}


def plot_loss_curves(curves: dict, ax: plt.Axes | None = None, title: str = "training loss") -> Figure:
    """{label: [loss per step]} as lines against the step."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.2))
    styles = ["-", "--", ":", "-."]
    for i, (label, losses) in enumerate(curves.items()):
        ax.plot(np.arange(1, len(losses) + 1), losses, styles[i % len(styles)], label=label, linewidth=1.6)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return ax.figure


def plot_step_timeline(profile, ax: plt.Axes | None = None, title: str | None = None) -> Figure:
    """One training step's instructions per engine (rows) against time, coloured by phase."""
    timeline = profile.timeline
    c = timeline.columns()
    if c["n"] == 0:
        raise ValueError("the step's timeline is empty")
    t0 = c["start"].min()
    engines = sorted(set(c["engine"].tolist()), key=lambda e: _engine_rank(timeline.engines[e]))
    row_of = {e: r for r, e in enumerate(engines)}
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 0.32 * len(engines) + 1.6))
    rows = np.array([row_of[e] for e in c["engine"]])
    phases = np.array(profile.phases if profile.phases else [""] * c["n"])
    for phase, colour in PHASE_COLOURS.items():
        mask = phases == phase
        for row in np.unique(rows[mask]):
            sel = mask & (rows == row)
            ax.broken_barh(list(zip((c["start"][sel] - t0) / 1e3, (c["end"][sel] - c["start"][sel]) / 1e3)),
                           (row - 0.38, 0.76), facecolors=colour, edgecolors="none")
    ax.set_yticks(range(len(engines)))
    ax.set_yticklabels([engine_label(timeline.engines[e]) for e in engines], fontsize=7)
    ax.set_ylim(len(engines) - 0.5, -0.5)
    ax.set_xlabel("time (µs)")
    ax.set_title(title or f"one training step on {profile.target}: {profile.total_us:.0f} µs")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(handles=[Patch(color=PHASE_COLOURS[p], label=p) for p in ("forward", "backward", "optimizer")],
              fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return ax.figure


def plot_generation_costs(estimates: list, title: str = "training the checkpoint's recipe") -> Figure:
    """Core-hours and dollars per generation (a list of report.TrainingEstimate)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3))
    names = [e.target for e in estimates]
    left.bar(names, [e.core_hours for e in estimates], color="#4e79a7")
    left.set_ylabel("NeuronCore-hours")
    right.bar(names, [e.usd for e in estimates], color="#f28e2b")
    right.set_ylabel("USD (on-demand, per core share)")
    for ax in (left, right):
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    return fig

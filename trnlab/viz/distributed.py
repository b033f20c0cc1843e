"""Pictures of many chips: the ring all-reduce step by step, collective cost against size, a
collective's stages level by level, scaling curves, memory per chip against HBM.

Everything is drawn from the package's own results: the ring picture replays the `Schedule` that
`collectives.ring_all_reduce` recorded while it summed real arrays; the curves come from
`collectives.cost` and `scaling.estimate`. Nothing is re-computed here.

    plot_ring_all_reduce(4, step=3)        # after 3 of the 2(p-1) = 6 steps
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from trnlab.distributed import collectives, scaling
from trnlab.distributed.topology import Topology

COLOURS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f"]


def ring_contributions(p: int) -> tuple[collectives.Schedule, list[np.ndarray]]:
    """Run a ring all-reduce over p ranks and replay its schedule: ``states[s][rank, piece]`` is the
    set of ranks (a bit mask) whose input piece `piece` of `rank` holds after s steps."""
    schedule = collectives.Schedule("ring", p)
    inputs = [np.full(p, float(r)) for r in range(p)]
    outputs = collectives.ring_all_reduce(inputs, schedule)
    assert all(np.allclose(o, sum(range(p))) for o in outputs)  # the replay below is of a correct run
    state = np.array([[1 << r for _ in range(p)] for r in range(p)], dtype=np.int64)  # (rank, piece)
    states = [state.copy()]
    for step, phase in zip(schedule.steps, schedule.phases):
        new = state.copy()
        for src, dst, piece, _ in step:
            new[dst, piece] = (state[dst, piece] | state[src, piece]) if phase == "reduce" else state[src, piece]
        state = new
        states.append(state.copy())
    return schedule, states


def plot_ring_all_reduce(p: int = 4, step: int = 0, ax: tuple | None = None) -> Figure:
    """The ring after `step` of its 2(p-1) steps: ranks on a circle with this step's sends (left);
    which ranks' data each rank's pieces hold (right: the number is how many inputs are summed in)."""
    schedule, states = ring_contributions(p)
    if not 0 <= step <= len(schedule):
        raise ValueError(f"a ring all-reduce over {p} ranks has steps 0..{len(schedule)}, got {step}")
    if ax is None:
        fig, (ax_ring, ax_grid) = plt.subplots(1, 2, figsize=(10, 4.2), gridspec_kw={"width_ratios": [1, 1.2]})
    else:
        ax_ring, ax_grid = ax
        fig = ax_ring.figure
    angle = [math.pi / 2 - 2 * math.pi * r / p for r in range(p)]
    xy = [(math.cos(a), math.sin(a)) for a in angle]
    for r, (x, y) in enumerate(xy):
        ax_ring.add_patch(plt.Circle((x, y), 0.17, color="#dddddd", zorder=2))
        ax_ring.text(x, y, f"rank {r}", ha="center", va="center", fontsize=8, zorder=3)
    if step > 0:
        phase = schedule.phases[step - 1]
        for src, dst, piece, _ in schedule.steps[step - 1]:
            (x0, y0), (x1, y1) = xy[src], xy[dst]
            ax_ring.annotate("", xy=(x0 + 0.78 * (x1 - x0), y0 + 0.78 * (y1 - y0)),
                             xytext=(x0 + 0.22 * (x1 - x0), y0 + 0.22 * (y1 - y0)),
                             arrowprops={"arrowstyle": "->", "color": COLOURS[piece % len(COLOURS)], "lw": 2})
            ax_ring.text((x0 + x1) / 2 * 1.18, (y0 + y1) / 2 * 1.18, f"piece {piece}", fontsize=7,
                         ha="center", color=COLOURS[piece % len(COLOURS)])
        title = f"step {step} of {len(schedule)}: " + ("reduce-scatter (add)" if phase == "reduce" else "all-gather (copy)")
    else:
        title = f"before step 1 (2·(p-1) = {len(schedule)} steps in all)"
    ax_ring.set_title(title, fontsize=9)
    ax_ring.set_xlim(-1.5, 1.5), ax_ring.set_ylim(-1.5, 1.5)
    ax_ring.set_aspect("equal"), ax_ring.axis("off")

    counts = np.vectorize(lambda m: bin(int(m)).count("1"))(states[step])  # (rank, piece)
    ax_grid.imshow(counts, cmap="Blues", vmin=0, vmax=p)
    for r in range(p):
        for c in range(p):
            ax_grid.text(c, r, str(counts[r, c]), ha="center", va="center", fontsize=9,
                         color="white" if counts[r, c] > p / 2 else "black")
    ax_grid.set_xticks(range(p), [f"piece {c}" for c in range(p)], fontsize=8)
    ax_grid.set_yticks(range(p), [f"rank {r}" for r in range(p)], fontsize=8)
    sent = sum(n for s in schedule.steps[:step] for src, _, _, n in s if src == 0)
    ax_grid.set_title(f"inputs summed into each piece (done at {p})\nrank 0 has sent {sent} of "
                      f"{schedule.bytes_sent()[0]} bytes", fontsize=9)
    fig.tight_layout()
    return fig


def plot_collective_cost(topology: Topology, op: str = "all_reduce", sizes: np.ndarray | None = None,
                         algorithms: tuple[str, ...] = collectives.ALGORITHMS, ranks: int | None = None,
                         ax: plt.Axes | None = None) -> Figure:
    """Modelled time of one collective against its size, one line per algorithm the topology allows."""
    sizes = np.logspace(10, 33, 24, base=2) if sizes is None else sizes
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    for i, algorithm in enumerate(algorithms):
        try:
            times = [collectives.cost(op, s, topology, algorithm, ranks).time_ns / 1e3 for s in sizes]
        except ValueError:
            continue  # not possible on this topology (e.g. rdh on 12 ranks)
        ax.loglog(sizes, times, label=algorithm, color=COLOURS[i])
    ax.set_xlabel("size of the tensor (bytes)")
    ax.set_ylabel("time (µs)")
    ax.set_title(f"{op.replace('_', '-')} over {ranks or topology.ranks} ranks of {topology.name}", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    ax.figure.tight_layout()
    return ax.figure


def plot_levels(topology: Topology, op: str = "all_reduce", nbytes: float = 2**30,
                groups: tuple[int, ...] | None = None, algorithm: str = "ring") -> Figure:
    """Left: each level's link bandwidth per chip. Right: one bar per group size, split into the stages
    of the hierarchical collective (`collectives.level_costs`), the longest stage outlined."""
    levels = topology.levels()
    groups = groups or tuple(sorted({math.prod(size for _, size, _ in levels[:i + 1]) for i in range(len(levels))}))
    fig, (ax_bw, ax_t) = plt.subplots(1, 2, figsize=(10, 3.2), gridspec_kw={"width_ratios": [1, 2]})
    names = [name for name, _, _ in levels]
    ax_bw.bar([n.replace(" ", "\n", 1) for n in names], [link.bandwidth / 1e9 for _, _, link in levels],
              color=COLOURS[:len(levels)])
    ax_bw.set_ylabel("GB/s per chip")
    ax_bw.set_title(f"{topology.name}: the link of each level", fontsize=9)
    ax_bw.tick_params(axis="x", labelsize=8)
    for row, ranks in enumerate(groups):
        stages = collectives.level_costs(op, nbytes, topology, algorithm, ranks)
        slowest = max(stages, key=lambda s: s.time_ns)
        left = 0.0
        for stage in stages:
            width = stage.time_ns / 1e3
            ax_t.barh(row, width, left=left, color=COLOURS[names.index(stage.level)],
                      edgecolor="black" if stage is slowest else "none", linewidth=1.5,
                      label=stage.level if row == len(groups) - 1 else None)
            left += width
    ax_t.set_yticks(range(len(groups)), [f"{g} chips" for g in groups])
    ax_t.set_xlabel("time (µs)")
    size = f"{nbytes / 2**30:g} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:g} MiB"
    ax_t.set_title(f"{algorithm} {op.replace('_', '-')} of {size}, stage by stage (outlined: the longest)", fontsize=9)
    ax_t.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    return fig


def plot_scaling(curves: dict[str, list[scaling.StepEstimate]], axes: tuple | None = None) -> Figure:
    """Throughput against chips (left, with the perfect-scaling line) and the share of the step spent
    communicating (right), one line per label."""
    if axes is None:
        fig, (ax_tp, ax_comm) = plt.subplots(1, 2, figsize=(10, 3.8))
    else:
        ax_tp, ax_comm = axes
        fig = ax_tp.figure
    for i, (label, rows) in enumerate(curves.items()):
        if not rows:
            continue
        chips = [r.chips for r in rows]
        colour = COLOURS[i % len(COLOURS)]
        ax_tp.loglog(chips, [r.tokens_per_second for r in rows], "o-", color=colour, label=label, base=2)
        ax_tp.loglog(chips, [rows[0].tokens_per_second * c / chips[0] for c in chips], ":", color=colour, base=2)
        ax_comm.semilogx(chips, [100 * r.communication_share for r in rows], "o-", color=colour, label=label, base=2)
        ax_comm.semilogx(chips, [100 * r.collective_share for r in rows], ":", color=colour, base=2)
        for r in rows:
            if not r.fits:
                ax_tp.plot(r.chips, r.tokens_per_second, "x", color="black", ms=8)
    ax_tp.set_xlabel("chips"), ax_tp.set_ylabel("tokens / s")
    ax_tp.set_title("throughput (dotted: perfect scaling; ✕: does not fit in HBM)", fontsize=9)
    ax_comm.set_xlabel("chips"), ax_comm.set_ylabel("% of the step")
    ax_comm.set_title("time spent communicating (dotted: including what overlaps compute)", fontsize=9)
    for ax in (ax_tp, ax_comm):
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_memory(layouts: dict[str, scaling.Memory], hbm_bytes: float, ax: plt.Axes | None = None) -> Figure:
    """Memory per chip, stacked by kind, for each layout; the line is one chip's HBM."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.6))
    kinds = ("weights", "gradients", "optimizer", "activations")
    bottom = np.zeros(len(layouts))
    for i, kind in enumerate(kinds):
        values = np.array([getattr(m, kind) for m in layouts.values()]) / scaling.GiB
        ax.bar(list(layouts), values, bottom=bottom, color=COLOURS[i], label=kind)
        bottom += values
    ax.axhline(hbm_bytes / scaling.GiB, color="black", ls="--", lw=1, label="HBM of one chip")
    ax.set_ylabel("GiB per chip")
    ax.legend(fontsize=7, loc="upper right")
    ax.tick_params(axis="x", labelsize=8, rotation=20)
    ax.figure.tight_layout()
    return ax.figure

"""The engine timeline as a Gantt chart: one row per engine, one bar per instruction.

Rows are labelled as Neuron's profiler labels them (short name and long name, e.g.
"pe · Tensor (PE)", "dma0 · DMA queue 0"), in the order Tensor, Vector, Scalar, GpSimd, then DMA
queues. A bar spans [start, end) — the time the engine is busy. For a matmul, a thin tail shows
the systolic array's fill and drain until the result is ready in PSUM (`ready_ns`): the next matmul
may already start, but a reader of that PSUM tile waits for the tail. Everything comes from the
`Timeline` the core recorded; nothing is re-timed here.

    plot_timeline(core.timeline)
"""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from trnlab.hardware.timeline import engine_long_name

ENGINE_ORDER = ("pe", "dve", "act", "pool")
HOST_LINK_COLOUR, HOST_COLOUR = "#bab0ac", "#79706e"     # host fallback: transfers, compute
OPCODE_COLOURS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f"]


def _engine_rank(engine: str) -> tuple[int, int]:
    if engine in ENGINE_ORDER:
        return (ENGINE_ORDER.index(engine), 0)
    if engine.startswith("dma") and engine[3:].isdigit():
        return (len(ENGINE_ORDER), int(engine[3:]))
    return (len(ENGINE_ORDER) + 1, 0)


def _host_colour(opcode: str) -> str | None:
    """Greys for a host op's records (compiler.execute): its transfers and its compute."""
    if opcode in ("to_host", "to_device"):
        return HOST_LINK_COLOUR
    return HOST_COLOUR if opcode.startswith("host:") else None


def engine_label(engine: str) -> str:
    """Row label: the profiler's short name and the long name."""
    return f"{engine} · {engine_long_name(engine)}"


def plot_timeline(timeline: Any, ax: plt.Axes | None = None, title: str | None = None,
                  time_unit: str = "us") -> Figure:
    """Gantt chart of a `Timeline`: engines used (rows) against time; colour = opcode."""
    columns = timeline.columns()
    if columns["n"] == 0:
        raise ValueError("the timeline is empty: issue some instructions first")
    scale = {"ns": 1.0, "us": 1e3, "ms": 1e6}[time_unit]
    engine_ids = sorted(set(columns["engine"].tolist()), key=lambda e: _engine_rank(timeline.engines[e]))
    row_of = {eid: row for row, eid in enumerate(engine_ids)}
    opcodes = list(dict.fromkeys(columns["opcode"]))  # in order of first appearance
    device_ops = [op for op in opcodes if _host_colour(op) is None]
    colour_of = {op: OPCODE_COLOURS[i % len(OPCODE_COLOURS)] for i, op in enumerate(device_ops)}
    colour_of.update({op: _host_colour(op) for op in opcodes if op not in colour_of})

    if ax is None:
        _, ax = plt.subplots(figsize=(9, 0.45 * len(engine_ids) + 1.6))
    starts, ends, readies = columns["start"] / scale, columns["end"] / scale, columns["ready"] / scale
    rows = np.array([row_of[e] for e in columns["engine"]])
    for op in opcodes:
        mask = np.array([o == op for o in columns["opcode"]])
        for row in np.unique(rows[mask]):
            sel = mask & (rows == row)
            ax.broken_barh(list(zip(starts[sel], ends[sel] - starts[sel])), (row - 0.38, 0.76),
                           facecolors=colour_of[op], edgecolors="white", linewidth=0.3)
    tails = readies > ends
    if tails.any():  # matmul fill/drain until the result is in PSUM
        ax.hlines(rows[tails], ends[tails], readies[tails], colors="#333333", linewidth=1.0)
    ax.set_yticks(range(len(engine_ids)))
    ax.set_yticklabels([engine_label(timeline.engines[e]) for e in engine_ids], fontsize=8)
    ax.set_ylim(len(engine_ids) - 0.5, -0.5)  # Tensor engine on top
    ax.set_xlabel({"ns": "time (ns)", "us": "time (µs)", "ms": "time (ms)"}[time_unit])
    ax.set_xlim(0, max(readies.max(), ends.max()) * 1.01)
    ax.grid(axis="x", alpha=0.3)
    handles = [Patch(color=colour_of[op], label=op) for op in opcodes]
    if tails.any():
        handles.append(plt.Line2D([], [], color="#333333", lw=1.0, label="until result ready in PSUM"))
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    total = timeline.total_ns / scale
    ax.set_title(title or f"{columns['n']} instructions, {total:.3g} {time_unit.replace('us', 'µs')} in total",
                 fontsize=9)
    ax.figure.tight_layout()
    return ax.figure

"""Occupancy maps of SBUF and PSUM: which tensor holds which partitions and which bytes.

Both on-chip memories are 2-D: partitions (rows, 128) by bytes per partition (the free dimension).
The map draws that rectangle with partition 0 at the top and each live allocation as a block at its
byte offset, using the core's own allocation records (``core.sbuf.occupancy()``). The allocator
reserves a tensor's byte range on every partition (see ``trnlab/hardware/memory.py``), so the
partitions a tensor reserves but does not use are drawn hatched. PSUM's banks are marked.
`plot_allocation` draws a traced program's allocation over time instead: each tile's bytes from its first
to its last instruction.

    plot_memory_map(core.sbuf)
    plot_core_memory(core)          # SBUF and PSUM side by side
    plot_allocation(program)        # where each tile of a traced program lives, and when
"""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FuncFormatter, MultipleLocator

COLOURS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7"]

KiB = 1024


def _size(nbytes: float) -> str:
    if nbytes >= KiB * KiB:
        return f"{nbytes / KiB / KiB:.1f} MiB"
    if nbytes >= KiB:
        return f"{nbytes / KiB:.1f} KiB"
    return f"{int(nbytes)} B"


def plot_memory_map(memory: Any, ax: plt.Axes | None = None, title: str | None = None) -> Figure:
    """Draw one on-chip memory (`core.sbuf` or `core.psum`): partitions × bytes per partition."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3))
    partitions, width = memory.partitions, memory.partition_bytes
    ax.add_patch(Rectangle((0, 0), width, partitions, facecolor="#f3f3f3", edgecolor="#555555", lw=1))
    handles = []
    for i, block in enumerate(memory.occupancy()):
        colour = COLOURS[i % len(COLOURS)]
        shape = "×".join(str(s) for s in block["shape"])
        handles.append(Patch(color=colour, label=f"{block['name']}: {shape} {block['dtype']}, "
                                                 f"{_size(block['bytes'])}/partition on {block['partitions']}"))
        x, w, used = block["offset"], block["bytes"], block["partitions"]
        ax.add_patch(Rectangle((x, 0), w, used, facecolor=colour, edgecolor="white", lw=0.5, alpha=0.9))
        if used < partitions:  # reserved on the other partitions too, but unused
            ax.add_patch(Rectangle((x, used), w, partitions - used, facecolor="none", edgecolor=colour,
                                   hatch="///", lw=0.5))
        if w > width * 0.09:
            ax.text(x + w / 2, min(used, partitions) / 2, f"{block['name']}\n{shape} {block['dtype']}",
                    ha="center", va="center", fontsize=7, color="white" if used > 20 else "black")
    bank = getattr(memory, "bank_bytes", None)
    if bank:
        for edge in range(bank, width, bank):
            ax.axvline(edge, color="#333333", lw=0.6, ls="--")
        for b in range(width // bank):
            ax.text(b * bank + bank / 2, -2, f"bank {b}", ha="center", va="bottom", fontsize=6)
    if handles:
        ax.legend(handles=handles, fontsize=7, loc="lower right", framealpha=0.9)
    ax.set_xlim(0, width)
    ax.set_ylim(partitions, -8 if bank else 0)  # partition 0 at the top
    ax.xaxis.set_major_locator(MultipleLocator(bank or 32 * KiB))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value / KiB:g}"))
    ax.set_xlabel("KiB per partition (free dimension)")
    ax.set_ylabel("partition")
    used = memory.used_partition_bytes
    label = "SBUF" if memory.kind == "sbuf" else "PSUM"
    count = len(memory.occupancy())
    ax.set_title(title or f"{label}: {_size(used)} of {_size(width)} per partition reserved "
                          f"({100 * used / width:.0f}%), {count} tensor{'' if count == 1 else 's'}", fontsize=9)
    ax.figure.tight_layout()
    return ax.figure


def plot_core_memory(core: Any) -> Figure:
    """SBUF and PSUM of one core, one above the other, drawn to their own byte scales."""
    fig, (sbuf_ax, psum_ax) = plt.subplots(2, 1, figsize=(7.5, 5.2))
    plot_memory_map(core.sbuf, ax=sbuf_ax)
    plot_memory_map(core.psum, ax=psum_ax)
    fig.tight_layout()
    return fig


def plot_allocation(program: Any, memory: str = "sbuf", ax: plt.Axes | None = None,
                    title: str | None = None) -> Figure:
    """Where the allocator put each tile of a traced `program` in one memory ("sbuf" or "psum"), over the
    program: each tile a block from its first to its last instruction (x) at its bytes per partition (y, KiB).
    Blocks at one height reuse the same bytes; a staircase is a rotating allocator. A tile and its versions
    (`name~v2`, ...) share a colour."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3))
    tiles = [b for b in program.buffers if b.memory == memory and b.offset is not None and b.first >= 0]
    names = sorted({b.name.split("~")[0] for b in tiles})
    colour = {name: COLOURS[i % len(COLOURS)] for i, name in enumerate(names)}
    for b in tiles:
        ax.add_patch(Rectangle((b.first, b.offset / KiB), b.last + 1 - b.first, b.partition_bytes / KiB,
                               facecolor=colour[b.name.split("~")[0]], edgecolor="white", lw=0.5, alpha=0.9))
    top = max((b.offset + b.partition_bytes for b in tiles), default=0)
    ax.set_xlim(0, max(len(program.instructions), 1))
    ax.set_ylim(0, max(top / KiB, 0.001) * 1.05)
    ax.set_xlabel("instruction (in the order the engines run them)")
    ax.set_ylabel("KiB per partition")
    ax.set_title(title or f"{memory.upper()}: {len(tiles)} tiles, {_size(top)} per partition reached", fontsize=9)
    return ax.figure

"""Pictures of serving: the KV cache, continuous batching on a timeline, latency against batch size.

    plot_kv_cache(cache, requests)         slots × positions: which request holds which cached position
    plot_batching_timeline(engine)         one row per request (waiting, prefill, decode) over simulated time
    plot_batch_latency(rows)               TPOT and output tokens/s against batch size, per generation
    plot_context_sweep(models)             TTFT and TPOT against context length: where the KV cache wins
"""

from __future__ import annotations

from typing import Any, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

PREFILL, DECODE, WAIT = "#d95f02", "#1b9e77", "#dddddd"


def plot_kv_cache(cache: Any, requests: Sequence[Any] = (), ax: plt.Axes | None = None,
                  title: str | None = None) -> Figure:
    """The cache's slots (rows) by positions (columns): prompt positions, generated positions, free.

    `requests` (engine Requests with a slot) label the rows; a slot's filled length is cache.lengths."""
    slots, positions = cache.slots, cache.keys.shape[2]
    grid = np.zeros((slots, positions))                     # 0 free, 1 prompt, 2 generated
    labels = [f"slot {s}: free" for s in range(slots)]
    for s in range(slots):
        grid[s, :cache.lengths[s]] = 2
    for request in requests:
        if request.slot is not None:
            grid[request.slot, :min(len(request.prompt_ids), cache.lengths[request.slot])] = 1
            labels[request.slot] = f"slot {request.slot}: {request.id}"
    ax = ax or plt.subplots(figsize=(8, 0.45 * slots + 1.2))[1]
    colors = plt.matplotlib.colors.ListedColormap(["#f4f4f4", PREFILL, DECODE])
    ax.imshow(grid, cmap=colors, vmin=0, vmax=2, aspect="auto")
    ax.set_yticks(range(slots), labels, fontsize=8)
    ax.set_xlabel("position in the sequence")
    ax.set_xticks(range(0, positions, 4))
    n_layer, C = cache.keys.shape[1], cache.keys.shape[3]
    ax.set_title(title or f"KV cache: {slots} slots × {positions} positions × {n_layer} layers × (K, V) × {C} "
                          f"channels = {cache.nbytes / 1024:.0f} KiB", fontsize=9)
    ax.legend(handles=[Patch(color=PREFILL, label="prompt (written by prefill)"),
                       Patch(color=DECODE, label="generated (one per decode step)"),
                       Patch(color="#f4f4f4", label="free")], fontsize=7, loc="lower right")
    ax.figure.tight_layout()
    return ax.figure


def plot_batching_timeline(engine: Any, requests: Sequence[Any], ax: plt.Axes | None = None,
                           title: str = "continuous batching on the simulated timeline") -> Figure:
    """Each request's life on the engine's simulated clock: waiting (grey), its prefill (orange), the
    decode steps it was part of (green), each output token a tick. The top row is the device."""
    ax = ax or plt.subplots(figsize=(9, 0.4 * len(requests) + 1.6))[1]
    rows = {r.id: i + 1 for i, r in enumerate(requests)}
    for r in requests:
        start = r.token_ns[0] if r.token_ns else engine.clock_ns
        ax.barh(rows[r.id], start - r.arrival_ns, left=r.arrival_ns, color=WAIT, height=0.6)
    for step in engine.steps:
        color = PREFILL if step.kind == "prefill" else DECODE
        ax.barh(0, step.end_ns - step.start_ns, left=step.start_ns, color=color, height=0.6, edgecolor="white",
                linewidth=0.5)
        for rid in step.request_ids:
            if rid in rows:
                ax.barh(rows[rid], step.end_ns - step.start_ns, left=step.start_ns, color=color, height=0.6,
                        edgecolor="white", linewidth=0.5)
    for r in requests:
        ax.plot(r.token_ns, [rows[r.id]] * len(r.token_ns), "|", color="black", markersize=6)
        ax.plot([r.arrival_ns], [rows[r.id]], ">", color="black", markersize=4)
    ax.set_yticks(range(len(requests) + 1), ["device"] + [r.id for r in requests], fontsize=8)
    ax.invert_yaxis()
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda x, _: f"{x / 1e3:.0f}"))
    ax.set_xlabel("simulated time (µs)")
    ax.set_title(title, fontsize=10)
    ax.legend(handles=[Patch(color=WAIT, label="waiting"), Patch(color=PREFILL, label="prefill"),
                       Patch(color=DECODE, label="decode step")], fontsize=7, loc="lower right")
    ax.figure.tight_layout()
    return ax.figure


def plot_batch_latency(rows: Sequence[Any]) -> Figure:
    """TPOT (left) and output tokens/s (right) against batch size, one line per device."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    for device in dict.fromkeys(r.device for r in rows):
        mine = [r for r in rows if r.device == device]
        batches = [r.batch for r in mine]
        left.plot(batches, [r.tpot_ms * 1e3 for r in mine], "o-", label=device)
        right.plot(batches, [r.output_tokens_per_s for r in mine], "o-", label=device)
    for ax, label in ((left, "TPOT (µs per output token)"), (right, "output tokens / s (all requests)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size (requests decoded together)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    left.set_title("latency per token grows slowly with the batch", fontsize=9)
    right.set_title("throughput grows almost with the batch", fontsize=9)
    fig.tight_layout()
    return fig


def plot_context_sweep(sweeps: dict, ax: plt.Axes | None = None) -> Figure:
    """The prefill of L tokens (TTFT's device time) and one decode step against an L-position cache
    (TPOT's) against L, per model (`sweeps`: label -> [serve.latency.ContextPoint]). Without a cache
    every new token costs a prefill of the sequence so far: the cache wins wherever a model's
    decode line lies below its prefill line, by the ratio between them."""
    ax = ax or plt.subplots(figsize=(7, 3.6))[1]
    for (label, points), marker in zip(sweeps.items(), "os^D"):
        L = [p.positions for p in points]
        line, = ax.plot(L, [p.prefill_us for p in points], marker + "-",
                        label=f"{label}: prefill of L tokens (TTFT; a token without cache)")
        ax.plot(L, [p.decode_us for p in points], marker + "--", color=line.get_color(),
                label=f"{label}: decode step, L cached (TPOT)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context length L (tokens)")
    ax.set_ylabel("simulated µs per step")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title("what a token costs with the KV cache (dashed) and without (solid)", fontsize=9)
    ax.figure.tight_layout()
    return ax.figure

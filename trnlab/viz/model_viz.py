"""Pictures of the first stages of the chain: the chain itself, a training batch, the model's
architecture, where its parameters and FLOPs are, its loss curve and its attention.

Every function returns a matplotlib Figure (it never calls ``plt.show()``; the notebook does).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from trnlab import NOTEBOOKS_DIR
from trnlab.data.batches import IGNORE_INDEX
from trnlab.data.tokenizer import CharTokenizer
from trnlab.model.gpt import GPTConfig, LayerCost, is_matmul

# Each stage of the chain and the notebooks that cover it (planned numbering). The picture names only
# the notebooks that exist in notebooks/, so it never promises one that is not there yet.
CHAIN_TRAINING = [
    ("training data", ("01",), "data/corpus"),
    ("model (PyTorch)", ("02",), "data/checkpoint\n(trained on the CPU)"),
    ("compiler", ("06",), "trnlab.compiler"),
    ("Trainium\n(simulated)", ("03", "04", "05", "07", "08"), "trnlab.hardware\ntrnlab.nki"),
    ("trained model", ("07",), "data/checkpoint_trn2\n(fine-tuned on trn2)"),
]
CHAIN_SERVING = [
    ("user input", ("00",), "\"407+38\""),
    ("deployed model on\nsimulated Trainium", ("09", "10"), "trnlab.serve"),
    ("response", ("00",), "\"445\""),
]


def existing_notebooks(notebooks_dir: Path = NOTEBOOKS_DIR) -> set[str]:
    """The two-digit numbers of the course notebooks present (``notebooks/NN_*.ipynb``)."""
    return {path.name[:2] for path in Path(notebooks_dir).glob("[0-9][0-9]_*.ipynb")}


def notebook_label(numbers: Sequence[str], existing: set[str]) -> str:
    """"nb 03–05" for the existing notebooks among `numbers` (runs of consecutive ones joined), "" if none."""
    present = sorted(int(n) for n in numbers if n in existing)
    runs: list[list[int]] = []
    for n in present:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    parts = [f"{r[0]:02d}" if len(r) == 1 else f"{r[0]:02d}–{r[-1]:02d}" for r in runs]
    return "nb " + ", ".join(parts) if parts else ""


def _box(ax, x: float, y: float, w: float, h: float, text: str, color: str, sub: str = "") -> None:
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                                facecolor=color, edgecolor="#333333", linewidth=1.2))
    ax.text(x + w / 2, y + h * 0.62 if sub else y + h / 2, text, ha="center", va="center", fontsize=10, weight="bold")
    if sub:
        ax.text(x + w / 2, y + h * 0.22, sub, ha="center", va="center", fontsize=7.5, color="#333333", family="monospace")


def _arrow(ax, start: tuple[float, float], end: tuple[float, float]) -> None:
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=14, color="#333333", linewidth=1.3))


def plot_chain(highlight: Sequence[str] = (), notebooks_dir: Path = NOTEBOOKS_DIR) -> Figure:
    """The whole chain as two rows of boxes (training, then serving), with the existing notebooks of
    each stage; stages named in `highlight` (e.g. ``["training data"]``) are coloured."""
    existing = existing_notebooks(notebooks_dir)
    fig, ax = plt.subplots(figsize=(11, 3.6), dpi=80)
    w, h, gap = 1.7, 0.9, 0.45

    def colour(name: str) -> str:
        return "#f6c85f" if name.replace("\n", " ") in highlight else "#dce9f5"

    for row, (stages, y) in enumerate([(CHAIN_TRAINING, 1.6), (CHAIN_SERVING, 0.1)]):
        x0 = 0.0 if row == 0 else (w + gap) * 1
        for i, (name, notebooks, module) in enumerate(stages):
            x = x0 + i * (w + gap)
            label = notebook_label(notebooks, existing)
            _box(ax, x, y, w, h, name, colour(name), f"{label}\n{module}" if label else module)
            if i:
                _arrow(ax, (x - gap, y + h / 2), (x, y + h / 2))
    # the trained model's weights are what the deployed model runs
    _arrow(ax, (4 * (w + gap) + w / 2, 1.6), (2 * (w + gap) + w / 2 + 0.3, 0.1 + h))
    ax.text(0.0, 2.75, "training", fontsize=11, style="italic")
    ax.text(w + gap, 1.25, "serving", fontsize=11, style="italic")
    ax.set_xlim(-0.1, 5 * (w + gap))
    ax.set_ylim(0, 2.9)
    ax.axis("off")
    fig.tight_layout()
    return fig


def plot_batch(x, y, tokenizer: CharTokenizer, rows: int = 8) -> Figure:
    """A batch as two grids of characters: the inputs the model reads and the targets it is graded
    on. Colour says what each target position is: graded answer, ignored prompt, or padding."""
    x, y = np.asarray(x)[:rows], np.asarray(y)[:rows]
    kind = np.where(y == IGNORE_INDEX, 0, 2)  # 0 ignored, 1 padding, 2 graded
    kind[x == tokenizer.pad_id] = 1
    cmap = ListedColormap(["#e8e8e8", "#ffffff", "#9ad29a"])
    short = {"<pad>": "·", "<bos>": "B", "<sep>": "S", "<eos>": "E"}
    fig, axes = plt.subplots(1, 2, figsize=(2 + 0.62 * x.shape[1], 0.9 + 0.45 * len(x)), dpi=80)
    for ax, grid, title in [(axes[0], x, "inputs x (what the model reads)"), (axes[1], y, "targets y (the next token)")]:
        ax.imshow(kind, cmap=cmap, vmin=0, vmax=2, aspect="auto")
        for (r, c), token in np.ndenumerate(grid):
            text = "" if token == IGNORE_INDEX else short.get(tokenizer.vocab[token], tokenizer.vocab[token])
            if token == IGNORE_INDEX and x[r, c] != tokenizer.pad_id:
                text = "–"
            ax.text(c, r, text, ha="center", va="center", fontsize=9, family="monospace")
        ax.set_title(title, fontsize=10)
        ax.set_xticks(range(grid.shape[1]))
        ax.set_xticklabels(range(grid.shape[1]), fontsize=7)
        ax.set_yticks(range(len(grid)))
        ax.set_xlabel("position t")
        ax.set_ylabel("row b")
    fig.suptitle("green: graded target (answer, E = <eos>) · grey: ignored (prompt, –) · white: padding (·) "
                 "· B = <bos>, S = <sep>", fontsize=9)
    fig.tight_layout()
    return fig


def plot_architecture(config: GPTConfig) -> Figure:
    """The tiny GPT as a stack of boxes, bottom (token ids) to top (logits), with tensor shapes."""
    C, V, T = config.n_embd, config.vocab_size, config.block_size
    layers = [
        ("token ids", f"(B, T≤{T})", "#ffffff"),
        ("token embedding + position embedding", f"({V}×{C}) + ({T}×{C}) → (B, T, {C})", "#f9e0b0"),
        ("LayerNorm → causal self-attention (+ residual)",
         f"{config.n_head} heads × {config.head_size}: qkv {C}→{3 * C}, softmax(qkᵀ/√{config.head_size}), proj {C}→{C}", "#cfe3f7"),
        ("LayerNorm → MLP (+ residual)", f"{C}→{4 * C}, GELU, {4 * C}→{C}", "#cfe3f7"),
        ("final LayerNorm", f"(B, T, {C})", "#e6e6e6"),
        ("head (tied to the token embedding)", f"{C}→{V}: logits (B, T, {V})", "#f9e0b0"),
    ]
    fig, ax = plt.subplots(figsize=(7.5, 5.2), dpi=80)
    y, h = 0.0, 0.62
    for i, (name, shape, colour) in enumerate(layers):
        _box(ax, 0.5, y, 6.0, h, name, colour, shape)
        if i:
            _arrow(ax, (3.5, y - 0.28), (3.5, y))
        y += h + 0.28
    block_bottom, block_top = 2 * (h + 0.28) - 0.12, 4 * (h + 0.28) - 0.16
    ax.add_patch(plt.Rectangle((0.3, block_bottom), 6.4, block_top - block_bottom, fill=False, linestyle="--", edgecolor="#1f5f9f"))
    ax.text(6.8, (block_bottom + block_top) / 2, f"× {config.n_layer}\nblocks", va="center", fontsize=11, color="#1f5f9f")
    ax.set_xlim(0, 7.8)
    ax.set_ylim(-0.1, y)
    ax.axis("off")
    ax.set_title("the tiny GPT (pre-LayerNorm, decoder only)", fontsize=11)
    fig.tight_layout()
    return fig


KIND_COLOURS = {"matmul": "#1f77b4", "attention matmul": "#6baed6", "layernorm": "#ff7f0e",
                "softmax": "#d62728", "gelu": "#9467bd", "add": "#8c8c8c", "embedding": "#2ca02c"}


def plot_layer_costs(costs: Sequence[LayerCost], title: str = "") -> Figure:
    """Forward FLOPs and parameters of every layer (bars, coloured by kind), with the share of
    FLOPs spent in matrix multiplications."""
    names = [c.name for c in costs]
    flops = np.array([c.flops for c in costs], dtype=float)
    params = np.array([c.params for c in costs], dtype=float)
    colours = [KIND_COLOURS[c.kind] for c in costs]
    share = sum(c.flops for c in costs if is_matmul(c)) / max(1.0, flops.sum())
    fig, axes = plt.subplots(1, 2, figsize=(11, 0.2 * len(costs) + 1.6), dpi=80, sharey=True)
    ypos = np.arange(len(costs))
    axes[0].barh(ypos, flops / 1e6, color=colours)
    axes[0].set_xlabel("forward MFLOPs (one sequence)")
    axes[0].set_title(f"FLOPs: {100 * share:.1f} % in matrix multiplications", fontsize=10)
    axes[1].barh(ypos, params / 1e3, color=colours)
    axes[1].set_xlabel("parameters (thousands)")
    axes[1].set_title(f"parameters: {int(params.sum()):,} in total", fontsize=10)
    axes[0].set_yticks(ypos)
    axes[0].set_yticklabels(names, fontsize=7)
    axes[0].invert_yaxis()
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour) for colour in KIND_COLOURS.values()]
    # beside the plot, not on it: the bars reach both right-hand corners
    axes[1].legend(handles, list(KIND_COLOURS), fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                   frameon=False)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def plot_flops_by_kind(costs: Sequence[LayerCost]) -> Figure:
    """One bar per kind of operation: total forward FLOPs, on a log scale."""
    totals: dict[str, int] = {}
    for cost in costs:
        totals[cost.kind] = totals.get(cost.kind, 0) + cost.flops
    kinds = sorted((k for k in totals if totals[k] > 0), key=lambda k: -totals[k])
    fig, ax = plt.subplots(figsize=(6.5, 3), dpi=80)
    x = np.arange(len(kinds))
    ax.bar(x, [totals[k] for k in kinds], color=[KIND_COLOURS[k] for k in kinds])
    ax.set_xticks(x)
    ax.set_xticklabels([k.replace(" ", "\n") for k in kinds])  # "attention matmul" on two lines: no overlap
    ax.set_yscale("log")
    ax.set_ylabel("forward FLOPs (log scale)")
    ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    return fig


def plot_loss_curve(train_loss: Sequence[float], val_steps: Sequence[int] = (), val_loss: Sequence[float] = (),
                    smooth: int = 25, title: str = "training loss") -> Figure:
    """Training loss per step (faint), its moving average, and validation loss (dots), log scale."""
    train_loss = np.asarray(train_loss, dtype=float)
    steps = np.arange(1, len(train_loss) + 1)
    fig, ax = plt.subplots(figsize=(7, 3.4), dpi=80)
    ax.plot(steps, train_loss, color="#1f77b4", alpha=0.25, linewidth=0.8, label="train (each step)")
    if len(train_loss) >= smooth > 1:
        average = np.convolve(train_loss, np.ones(smooth) / smooth, mode="valid")
        ax.plot(steps[smooth - 1 :], average, color="#1f77b4", label=f"train ({smooth}-step average)")
    if len(val_steps):
        ax.plot(val_steps, val_loss, "o-", color="#d62728", markersize=4, label="validation")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy on answer tokens")
    ax.set_title(title, fontsize=11)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_attention(attention, tokens: Sequence[str], title: str = "") -> Figure:
    """One head's attention (T, T): row t shows how much position t reads from each earlier position."""
    attention = np.asarray(attention, dtype=float)
    T = attention.shape[0]
    masked = np.ma.masked_where(np.triu(np.ones((T, T), dtype=bool), k=1), attention)
    fig, ax = plt.subplots(figsize=(0.42 * T + 2.2, 0.42 * T + 1.2), dpi=80)
    image = ax.imshow(masked, cmap="viridis", vmin=0.0, vmax=1.0)
    ax.set_xticks(range(T))
    ax.set_xticklabels(tokens, fontsize=8, rotation=90)
    ax.set_yticks(range(T))
    ax.set_yticklabels(tokens, fontsize=8)
    ax.set_xlabel("attends to (key position)")
    ax.set_ylabel("query position")
    ax.set_title(title, fontsize=10)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    return fig


def plot_accuracy(accuracy: dict[str, float], target: float = 0.9) -> Figure:
    """Exact-match accuracy per task as bars, with the target as a dashed line."""
    tasks = list(accuracy)
    fig, ax = plt.subplots(figsize=(5.5, 2.8), dpi=80)
    bars = ax.bar(tasks, [100 * accuracy[t] for t in tasks], color="#2ca02c")
    for bar, task in zip(bars, tasks):
        ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height() - 8, f"{100 * accuracy[task]:.1f}%",
                ha="center", color="white", fontsize=9, weight="bold")
    ax.axhline(100 * target, linestyle="--", color="#333333", linewidth=1)
    ax.set_ylim(0, 100)
    ax.set_ylabel("exact match on test split (%)")
    fig.tight_layout()
    return fig

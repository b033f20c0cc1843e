"""Drawing a compiler graph (`trnlab.compiler.ir.Graph`): ops as boxes, tensors as arrows.

Layered layout: an op sits one row below the deepest op it reads (row = longest path from the
inputs), so the graph reads top to bottom like the model's forward. Colours say what kind of op it is
— matmul-class (the Tensor engine), norms and softmax, elementwise, free views, ops still in ATen
(not legalised), ops on the host CPU (a fallback partition, drawn inside a dashed boundary).
"""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import FancyBboxPatch, Rectangle

COLOURS = {
    "matmul": "#f4a261", "norm": "#90be6d", "elementwise": "#8ecae6", "view": "#e9ecef", "aten": "#e5989b",
    "host": "#ffd166", "const": "#ffffff",
}
MATMUL_OPS = ("linear", "matmul", "batch_matmul", "attention", "embedding")
NORM_OPS = ("layer_norm", "rms_norm", "softmax")
VIEW_OPS = ("reshape", "copy", "transpose", "broadcast", "slice")


def kind_of(node) -> str:
    if node.device == "host":
        return "host"
    if node.op.startswith("aten."):
        return "aten"
    if node.op in MATMUL_OPS:
        return "matmul"
    if node.op in NORM_OPS:
        return "norm"
    if node.op in VIEW_OPS:
        return "view"
    return "elementwise"


def layers(graph) -> dict:
    """node name -> row (longest path from the graph inputs)."""
    row = {}
    for n in graph.nodes:
        row[n.name] = 1 + max((row.get(i, -1) for i in n.inputs), default=-1)
    return row


def draw_graph(graph, title: str | None = None, ax=None, max_nodes: int = 400, labels: bool = True):
    """A figure of `graph` (the first `max_nodes` ops); returns the figure."""
    nodes = graph.nodes[:max_nodes]
    row = layers(graph)
    by_row: dict[int, list] = {}
    for n in nodes:
        by_row.setdefault(row[n.name], []).append(n)
    width = max((len(v) for v in by_row.values()), default=1)
    depth = max(by_row, default=0) + 1
    dx, box_w, box_h = 2.0, 1.8, 0.56          # column pitch, box size (data units; a row is 1 unit)
    own_figure = ax is None
    if own_figure:
        fig, ax = plt.subplots(figsize=(3.0 + 2.1 * width, min(1.2 + 0.62 * depth, 40)))
    else:
        fig = ax.figure
    pos = {}
    for r, ns in by_row.items():
        for k, n in enumerate(ns):
            pos[n.name] = ((k - (len(ns) - 1) / 2) * dx, -r)        # each row centred
    for n in nodes:
        x1, y1 = pos[n.name]
        for i in n.inputs:
            if i in pos:
                x0, y0 = pos[i]
                skip = y0 - y1 > 1                       # a residual / long edge: bend it around the column
                ax.annotate("", (x1, y1 + box_h / 2), (x0, y0 - box_h / 2),
                            arrowprops={"arrowstyle": "-|>", "lw": 0.7, "color": "#c1121f" if skip else "#555",
                                        "connectionstyle": f"arc3,rad={-0.5 if skip else 0}"})
    host = [pos[n.name] for n in nodes if n.device == "host"]
    if host:
        xs, ys = [p[0] for p in host], [p[1] for p in host]
        ax.add_patch(Rectangle((min(xs) - box_w / 2 - 0.2, min(ys) - 0.45), max(xs) - min(xs) + box_w + 0.4,
                               max(ys) - min(ys) + 0.9, fill=False, ls="--", lw=1.2, ec="#b5179e"))
        ax.text(max(xs) + box_w / 2 + 0.3, max(ys), "host CPU\npartition", fontsize=9, color="#b5179e", va="top")
    for n in nodes:
        x, y = pos[n.name]
        kind = kind_of(n)
        ax.add_patch(FancyBboxPatch((x - box_w / 2, y - box_h / 2), box_w, box_h, boxstyle="round,pad=0.02",
                                    fc=COLOURS[kind], ec="#333", lw=0.6))
        if labels:
            v = graph.values[n.name]
            text = n.op.replace("aten.", "").replace(".default", "")
            ax.text(x, y + 0.1, text[:18], ha="center", va="center", fontsize=10, weight="bold")
            ax.text(x, y - 0.13, v.type_str()[:24], ha="center", va="center", fontsize=8, family="monospace")
    half = (width - 1) / 2 * dx + box_w / 2
    ax.set_xlim(-half - 0.3, half + (1.6 if host else 0.3))
    ax.set_ylim(-depth + 0.4, 0.5)
    ax.axis("off")
    handles = [Rectangle((0, 0), 1, 1, fc=c, ec="#333") for c in COLOURS.values() if c != "#ffffff"]
    ax.legend(handles, [k for k, c in COLOURS.items() if c != "#ffffff"], loc="upper left", fontsize=9,
              ncol=1, frameon=False, bbox_to_anchor=(1.0, 1.0))
    ax.set_title(title or f"{graph.name}: {len(graph.nodes)} ops", fontsize=11)
    if own_figure:
        fig.tight_layout()                       # keeps the legend (outside the axes) in the saved figure
    return fig


def dump_pictures(compiled, directory: str) -> list[str]:
    """A picture of the graph after every pass of `compiled` (`NN_<pass>.png`) into `directory`, beside
    the text dumps `trnlab.compiler.dump` writes there; returns the file names."""
    import os
    os.makedirs(directory, exist_ok=True)
    written = []
    for i, record in enumerate(compiled.passes, start=1):
        name = f"{i:02d}_{record.name}.png"
        fig = draw_graph(record.graph, title=f"after {record.name}")
        fig.savefig(os.path.join(directory, name), dpi=80)
        plt.close(fig)
        written.append(name)
    return written

"""Tiling: the tile sizes each op's kernel runs with, chosen per op and recorded in `node.attrs["tiles"]`.

The tile limits are the NeuronCore's (nl.tile_size, [nki-tile-size] in HARDWARE.md): 128 partitions
(`pmax`) for the rows of a tile and the contraction depth K, 128 stationary columns (M rows per
matmul), 512 moving columns (`gemm_moving_fmax`: one 2 KiB PSUM bank of fp32 per partition).

- linear (and matmul): M in stripes of 128 rows, K in 128-deep slices accumulated in PSUM; N in
  `ceil(N / 512)` tiles of equal width rather than 512s and a short rest (N = 576 -> 2 x 288, not
  512 + 64: a short tile pays a whole matmul's fixed cost for a few columns). The width is passed to
  the kernel (`tile_n`) and shapes its instruction stream;
- norms, softmax, gelu, add, convert, embedding: 128 rows per tile, the whole row (or 2048 elements)
  on the free axis — fixed by those kernels, recorded here so that every op's tiling can be read in
  one place;
- attention: one (batch, head) at a time, 128 query rows per tile, key/value blocks of 128; for short
  sequences (T = 32 or 64, B >= 2) 128 // T sequences of one head per tile (`attention_packed`).

`pass_stats["tiling"]` counts ops per tiling; `table(graph)` prints one line per op.
"""
from __future__ import annotations

import math

from trnlab.compiler.ir import Graph

NAME = "tiling"
PMAX, STATIONARY_FMAX, MOVING_FMAX = 128, 128, 512      # nl.tile_size: pmax, gemm_stationary_fmax, gemm_moving_fmax
ROW_OPS = ("layer_norm", "rms_norm", "softmax", "gelu", "add", "convert", "embedding")


def balanced(extent: int, limit: int) -> int:
    """The tile width covering `extent` in the fewest tiles of at most `limit`, all of (nearly) one width."""
    return math.ceil(extent / math.ceil(extent / limit)) if extent else limit


def _rows(shape) -> int:
    r = 1
    for s in shape[:-1]:
        r *= s
    return r if len(shape) > 1 else 1


def run(g: Graph, options=None) -> Graph:
    counts: dict[str, int] = {}
    for node in g.nodes:
        v = g.values[node.name]
        if node.op in ("linear", "matmul"):
            M, N = v.shape[-2] if len(v.shape) == 2 else _rows(v.shape), v.shape[-1]
            K = g.values[node.inputs[0]].shape[-1]
            tiles = {"m": min(STATIONARY_FMAX, M), "n": balanced(N, MOVING_FMAX), "k": min(PMAX, K),
                     "grid": [math.ceil(M / STATIONARY_FMAX), math.ceil(N / balanced(N, MOVING_FMAX)),
                              math.ceil(K / PMAX)]}
        elif node.op in ROW_OPS:
            tiles = {"rows": PMAX, "free": min(v.shape[-1], 2048) if v.shape else 1}
        elif node.op == "attention":
            from trnlab.kernels.attention_packed import packable
            B, T = (v.shape[0], v.shape[1]) if len(v.shape) == 3 else (1, 0)
            if packable(B, T):                   # lower.py then picks attention_packed's kernel
                tiles = {"q_rows": min(PMAX // T, B) * T, "kv_block": min(PMAX // T, B) * T,
                         "per": f"head x {min(PMAX // T, B)} sequences"}
            else:
                tiles = {"q_rows": PMAX, "kv_block": PMAX, "per": "batch x head"}
        else:
            continue
        node.attrs["tiles"] = tiles
        key = node.op if "grid" not in tiles else f"{node.op} n={tiles['n']}"
        counts[key] = counts.get(key, 0) + 1
    g.meta.setdefault("pass_stats", {})[NAME] = counts
    return g


def table(g: Graph) -> str:
    """One line per tiled op: its output shape and tile sizes."""
    lines = []
    for node in g.nodes:
        t = node.attrs.get("tiles")
        if t:
            sizes = ", ".join(f"{k}={v}" for k, v in t.items())
            lines.append(f"  %{node.name:22s} {node.op:11s} {str(list(g.values[node.name].shape)):14s} {sizes}")
    return "\n".join(lines)

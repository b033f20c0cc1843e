"""A GEMM cut into tensor-engine tiles: the picture of how C[M, N] = A[M, K] @ B[K, N] becomes
``nc_matmul`` instructions.

One ``nc_matmul`` takes a stationary tile [K<=128, M<=128] (a block of Aᵀ, because the tensor engine
computes ``stationary.T @ moving``) and a moving tile [K<=128, N<=512] (a block of B) and adds their
product into one PSUM tile [M<=128, N<=512] (limits from `nki.isa.nc_matmul`, see HARDWARE.md).
So the GEMM needs ceil(M/128) x ceil(N/512) x ceil(K/128) instructions (``gemm.plan(...).matmuls``,
the same tiling the reference driver issues). Tiles at the edges of a shape that is not a multiple
of the tile are partly empty. Padding along K or M leaves rows or columns of the PE array idle for
the whole instruction: it is drawn hatched, as wasted work. A narrower moving tile along N simply
streams fewer columns and takes fewer cycles (down to the 64-cycle floor), so it is not padded.

    fig = plot_gemm_tiles(M=300, N=1000, K=384)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

TILE_M, TILE_N, TILE_K = 128, 512, 128  # gemm_stationary_fmax, gemm_moving_fmax, pmax

TILE_COLOURS = ["#cfe3f3", "#f6d8ae"]  # alternate so neighbouring tiles are distinguishable
HIGHLIGHT = "#f4a259"


def _edges(size: int, tile: int) -> list[tuple[int, int]]:
    """(start, length) of each tile along one dimension; the last may be partial."""
    return [(start, min(tile, size - start)) for start in range(0, size, tile)]


def tile_shapes(M: int, N: int, K: int, tile_m: int = TILE_M, tile_n: int = TILE_N,
                tile_k: int = TILE_K) -> Iterator[tuple[int, int, int]]:
    """(k, m, n) of each nc_matmul the tiled GEMM issues: stationary [k, m], moving [k, n]
    (the order differs from the driver's, the multiset of shapes is the same)."""
    for _, m in _edges(M, tile_m):
        for _, n in _edges(N, tile_n):
            for _, k in _edges(K, tile_k):
                yield k, m, n


@dataclass(frozen=True)
class TensorEngineWork:
    """What a tiled GEMM costs the tensor engine, instruction by instruction from the cost model."""

    instructions: int
    busy_cycles: int  # sum of each matmul's busy cycles (back to back, fill/drain overlapped)
    useful_macs: int  # M * N * K multiply-adds
    pe_count: int

    @property
    def utilisation(self) -> float:
        """Useful multiply-adds over what the PE array could do in the busy cycles."""
        return self.useful_macs / (self.pe_count * self.busy_cycles)


def tensor_engine_work(spec: Any, M: int, N: int, K: int, dtype: str = "bfloat16") -> TensorEngineWork:
    """Instructions, busy cycles and PE utilisation of a GEMM cut into the spec's largest tiles."""
    from trnlab.hardware import cost, gemm

    plan = gemm.plan(M, N, K, spec)
    tiles = list(tile_shapes(M, N, K, plan.tile_m, plan.tile_n, plan.tile_k))
    assert len(tiles) == plan.matmuls
    busy = sum(cost.matmul_cycles(spec, k, m, n, dtype)[0] for k, m, n in tiles)
    return TensorEngineWork(plan.matmuls, busy, M * N * K, spec.pe_rows * spec.pe_cols)


def plot_matmul_cost(spec: Any, n_values: Sequence[int] = tuple(range(1, 513)),
                     dtypes: Sequence[str] = ("bfloat16", "float32")) -> Figure:
    """Cycles of ONE full-size nc_matmul (K = M = 128) against the moving free size N, and the
    resulting share of the array's peak: the 64-cycle floor makes small N wasteful."""
    from trnlab.hardware import cost

    n_values = np.asarray(list(n_values))
    fig, (cycles_ax, share_ax) = plt.subplots(1, 2, figsize=(10, 3.4))
    K, M = spec.pe_rows, spec.pe_cols
    for dtype in dtypes:
        busy = np.array([cost.matmul_cycles(spec, K, M, int(n), dtype)[0] for n in n_values])
        latency = np.array([cost.matmul_cycles(spec, K, M, int(n), dtype)[1] for n in n_values])
        line, = cycles_ax.plot(n_values, busy, label=f"{dtype}: engine busy")
        cycles_ax.plot(n_values, latency, ls="--", color=line.get_color(), label=f"{dtype}: result ready")
        share_ax.plot(n_values, 100 * n_values / busy, color=line.get_color(), label=dtype)
    cycles_ax.set_xlabel("N (moving free size)")
    cycles_ax.set_ylabel("tensor-engine cycles")
    cycles_ax.set_title(f"one nc_matmul, K={K}, M={M} ({spec.name})", fontsize=9)
    cycles_ax.legend(fontsize=7)
    share_ax.set_xlabel("N (moving free size)")
    share_ax.set_ylabel("% of the array's peak (bf16)")
    share_ax.set_ylim(0, 105)
    share_ax.set_title("back-to-back throughput: N useful columns per busy cycle", fontsize=9)
    share_ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_utilisation_vs_size(spec: Any, sizes: Sequence[int], dtype: str = "bfloat16") -> Figure:
    """Tensor-engine utilisation of square GEMMs (M = N = K = size): the saw-tooth of padding."""
    sizes = list(sizes)
    shares = [100 * tensor_engine_work(spec, s, s, s, dtype).utilisation for s in sizes]
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.plot(sizes, shares, marker=".", lw=1)
    for multiple in range(spec.pe_rows, max(sizes) + 1, spec.pe_rows):
        ax.axvline(multiple, color="#cccccc", lw=0.6, zorder=0)
    ax.set_xlabel("M = N = K")
    ax.set_ylabel("PE utilisation (%)")
    ax.set_ylim(0, 105)
    ax.set_title(f"tensor-engine utilisation of a square {dtype} GEMM (grey: multiples of {spec.pe_rows})",
                 fontsize=9)
    fig.tight_layout()
    return fig


def _draw_matrix(ax: plt.Axes, rows: int, cols: int, row_tile: int, col_tile: int,
                 highlight: set[tuple[int, int]], title: str, row_name: str, col_name: str,
                 pad_cols: bool = True) -> None:
    """Draw a rows x cols matrix cut into tiles; hatched = padding that idles PEs.

    Rows are always K or M (padding idles PE rows or columns); columns are M (padded) or N
    (`pad_cols=False`: a narrower moving tile is just shorter, nothing is padded)."""
    for i, (row0, nrows) in enumerate(_edges(rows, row_tile)):
        for j, (col0, ncols) in enumerate(_edges(cols, col_tile)):
            colour = HIGHLIGHT if (i, j) in highlight else TILE_COLOURS[(i + j) % 2]
            paid_cols = col_tile if pad_cols else ncols
            ax.add_patch(Rectangle((col0, row0), paid_cols, row_tile, facecolor="white", edgecolor="#999999",
                                   hatch="///", lw=0.5))
            ax.add_patch(Rectangle((col0, row0), ncols, nrows, facecolor=colour, edgecolor="#333333", lw=0.8))
    padded_rows = math.ceil(rows / row_tile) * row_tile
    padded_cols = math.ceil(cols / col_tile) * col_tile if pad_cols else cols
    ax.set_xlim(0, padded_cols)
    ax.set_ylim(padded_rows, 0)  # row 0 at the top, as a matrix is written
    ax.set_aspect("equal")
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(col_name, fontsize=8)
    ax.set_ylabel(row_name, fontsize=8)
    ax.tick_params(labelsize=7)


def plot_gemm_tiles(M: int, N: int, K: int, spec: Any = None, output_tile: tuple[int, int] = (0, 0),
                    dtype: str = "bfloat16") -> Figure:
    """Draw Aᵀ [K, M] (stationary), B [K, N] (moving) and C [M, N] (PSUM) cut into the spec's tiles.

    `output_tile` = (i, j) picks one PSUM tile of C; it and the ceil(K/128) stationary and moving
    tiles that accumulate into it are highlighted: that chain is one PSUM accumulation group.
    The title gives the instruction count and the tensor engine's busy cycles and PE utilisation
    from the cost model (`tensor_engine_work`). `spec` defaults to the Trn2 core.
    """
    from trnlab.hardware import gemm, presets

    spec = spec or presets.TRN2.core
    if min(M, N, K) < 1:
        raise ValueError(f"GEMM dimensions must be positive, got M={M}, N={N}, K={K}")
    plan = gemm.plan(M, N, K, spec)
    tile_m, tile_n, tile_k = plan.tile_m, plan.tile_n, plan.tile_k
    i, j = output_tile
    if not (0 <= i < plan.m_tiles and 0 <= j < plan.n_tiles):
        raise IndexError(f"output_tile {output_tile} out of range: C has {plan.m_tiles} x {plan.n_tiles} tiles")
    work = tensor_engine_work(spec, M, N, K, dtype)

    fig, (stationary_ax, moving_ax, out_ax) = plt.subplots(
        1, 3, figsize=(11, 3.7),
        gridspec_kw={"width_ratios": [plan.m_tiles * tile_m, max(N, tile_m), max(N, tile_m)]},
    )
    _draw_matrix(stationary_ax, K, M, tile_k, tile_m, {(kk, i) for kk in range(plan.k_tiles)},
                 f"stationary = Aᵀ [K={K}, M={M}]\ntiles {tile_k}×{tile_m}", "K (partitions)", "M")
    _draw_matrix(moving_ax, K, N, tile_k, tile_n, {(kk, j) for kk in range(plan.k_tiles)},
                 f"moving = B [K={K}, N={N}]\ntiles {tile_k}×{tile_n}", "K (partitions)", "N", pad_cols=False)
    _draw_matrix(out_ax, M, N, tile_m, tile_n, {(i, j)},
                 f"C [M={M}, N={N}] in PSUM\ntiles {tile_m}×{tile_n}", "M (partitions)", "N", pad_cols=False)
    fig.suptitle(
        f"{plan.m_tiles} × {plan.n_tiles} × {plan.k_tiles} = {plan.matmuls} nc_matmul instructions, "
        f"{work.busy_cycles:,} tensor-engine cycles ({dtype}), PE utilisation {100 * work.utilisation:.0f}% "
        f"(hatched: padding that idles PEs)\n"
        f"Highlighted: the {plan.k_tiles} instruction(s) accumulating into C tile ({i}, {j}).",
        fontsize=9,
    )
    fig.tight_layout()
    return fig

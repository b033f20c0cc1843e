"""Kernels that keep an intermediate in SBUF between two ops: the compiler's memory plan asks for them.

    layer_norm_linear(x, gamma, beta, weight, bias, ...)   linear(layer_norm(x)) -> [M, N]

Layout: x [M, K] (rows = tokens), gamma/beta [K], weight [K, N] ("in_out") or [N, K] ("out_in"),
bias [N], residual [M, N]. For each stripe of 128 rows the kernel loads x once, normalises it on the
Vector/Scalar engines (norms._normalize: bn_stats / bn_aggr, fp32), writes the normalised rows
[128, K] into SBUF in the matmul's operand dtype (`dtype`: bf16 under autocast "matmult"), and feeds
those tiles straight to the Tensor engine (transposed to K on the partitions, as linear does). The
normalised activations never go to HBM: a separate layer_norm kernel would store M*K values and the
linear kernel would load them back — 2x their bytes of HBM traffic the fused kernel does not make.
The next stripe is normalised while this one's matmuls run (common.double_buffered).
"""
from __future__ import annotations

import trnlab.nki as nki
import trnlab.nki.language as nl
from trnlab.kernels.common import broadcast_rows, load_row, row_tiles
from trnlab.kernels.matmul import _weight_sizes, tiled_matmul
from trnlab.kernels.norms import _normalize


@nki.jit
def layer_norm_linear(x, gamma, beta, weight, bias=None, activation=None, weight_layout="in_out", residual=None,
                      eps=1e-5, dtype=None, tile_n=None):
    """activation(layer_norm(x) @ W + bias) (+ residual) -> [M, N]; the normalised x stays in SBUF.

    dtype: the dtype the normalised rows are written in for the matmul (default: weight's dtype).
    The output takes the residual's dtype if there is one, else `dtype`."""
    M, K, N = _weight_sizes("layer_norm_linear", x, weight, weight_layout)
    if tuple(gamma.shape) != (K,) or (beta is not None and tuple(beta.shape) != (K,)):
        raise ValueError(f"layer_norm_linear: gamma and beta must be [K] = [{K}], got {list(gamma.shape)}, "
                         f"{None if beta is None else list(beta.shape)}")
    operand = dtype or weight.dtype
    out_dtype = residual.dtype if residual is not None else operand
    result = nl.ndarray((M, N), dtype=out_dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    gamma_tile = broadcast_rows(load_row(gamma), P)                        # [128, K] fp32
    beta_tile = broadcast_rows(load_row(beta), P) if beta is not None else None

    def normalised_stripe(m0: int, rows: int):
        x_tile = nl.load(x[m0:m0 + rows, :])                               # [rows, K]
        xhat, _ = _normalize(x_tile, rows, K, eps, True)
        if beta_tile is None:
            y = nl.multiply(xhat, gamma_tile[:rows, :], dtype=operand)
        else:
            y = nl.add(nl.multiply(xhat, gamma_tile[:rows, :]), beta_tile[:rows, :], dtype=operand)   # [rows, K] SBUF
        return [y[:, k0:k0 + depth] for k0, depth in row_tiles(K)]       # [rows, <=128] blocks

    tiled_matmul(result, x, weight, b_is_nxk=weight_layout == "out_in", bias=bias, activation=activation,
                 residual=residual, tile_n=tile_n, load_stripe=normalised_stripe, K=K)
    return result

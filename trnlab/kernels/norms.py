"""Layer norm and RMS norm over the last axis, and their backward kernels.

Layout: x [R, C] (flatten (B, T, C) -> (B*T, C)), weight/bias [C]. Rows go on the partitions in tiles
of 128, the C features along the free axis: the mean and variance are free-axis reductions, and the
per-row scale 1/std is a [128, 1] operand that the Vector engine broadcasts along the row. Layer norm
takes its mean and variance from the Vector engine's bn_stats / bn_aggr (as AWS's layer-norm tutorial),
then centres and scales each row with one tensor_scalar. gamma and
beta are spread over the 128 partitions once per kernel (a ones-vector matmul). The next row tile
is loaded while this one is computed (common.double_buffered). Math is fp32 on chip; outputs are
rounded to x's dtype.

    layer_norm   y = (x - mean) * rstd * gamma + beta,      rstd = 1 / sqrt(var + eps)
    rms_norm     y = x * rstd * weight,                     rstd = 1 / sqrt(mean(x^2) + eps)

The backward kernels recompute mean and rstd from x (cheaper than storing them for a tiny model) and
return the weight gradients too; those are sums over rows, i.e. across partitions, so they run on the
Tensor engine as ones[rows, 1].T @ values[rows, C], accumulating over all row tiles in one PSUM tile.

    layer norm   g = dy * gamma
                 dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),   dgamma = sum(dy * xhat), dbeta = sum(dy)
    rms norm     dx = rstd * (g - xhat * mean(g * xhat)),             dweight = sum(dy * xhat)
"""
from __future__ import annotations

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.kernels.common import broadcast_rows, double_buffered, load_row, num_tiles, row_tiles, tile_extent


def _normalize(x_tile, rows: int, cols: int, eps: float, centered: bool):
    """(xhat [rows, C], rstd [rows, 1]) of a tile, in fp32: xhat = (x - mean) * rstd (or x * rstd for RMS)."""
    rstd = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
    if centered:
        # mean and variance with the Vector engine's statistics instructions, as AWS's layer-norm
        # tutorial does: one bn_stats per 512 features, one bn_aggr for the row
        mean, variance = _mean_variance(x_tile, rows, cols)                         # [rows, 1] each
        nisa.tensor_scalar(dst=rstd, data=variance, op0=nl.add, operand0=eps)
        nisa.activation(dst=rstd, op=nl.rsqrt, data=rstd)                           # 1 / sqrt(var + eps)
        xhat = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=xhat, data=x_tile, op0=nl.subtract, operand0=mean, op1=nl.multiply, operand1=rstd)
        return xhat, rstd
    squares = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.sbuf)
    sum_sq = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=squares, op=nl.square, data=x_tile, reduce_op=nl.add, reduce_res=sum_sq)
    nisa.tensor_scalar(dst=rstd, data=sum_sq, op0=nl.multiply, operand0=1.0 / cols, op1=nl.add, operand1=eps)
    nisa.activation(dst=rstd, op=nl.rsqrt, data=rstd)                               # 1 / sqrt(mean(x^2) + eps)
    xhat = nl.multiply(x_tile, rstd, dtype=nl.float32)                              # [rows, C]
    return xhat, rstd


def _mean_variance(x_tile, rows: int, cols: int):
    """Per-row mean and (population) variance of a [rows, C] tile: bn_stats on each 512-feature piece
    into one [rows, 6 * pieces] tile, then bn_aggr."""
    fmax = nl.tile_size.bn_stats_fmax
    pieces = num_tiles(cols, fmax)
    stats = nl.ndarray((rows, 6 * pieces), dtype=nl.float32, buffer=nl.sbuf)
    for j in nl.affine_range(pieces):
        c0, width = tile_extent(j, fmax, cols)
        nisa.bn_stats(dst=stats[:, 6 * j:6 * j + 6], data=x_tile[:, c0:c0 + width])
    mean_var = nl.ndarray((rows, 2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.bn_aggr(dst=mean_var, data=stats)
    return mean_var[:, 0:1], mean_var[:, 1:2]


def _norm_forward(out, x, weight, bias, eps: float, centered: bool) -> None:
    R, C = x.shape
    P = nl.tile_size.pmax
    weight_tile = broadcast_rows(load_row(weight), P)                                # [128, C] fp32
    bias_tile = broadcast_rows(load_row(bias), P) if bias is not None else None

    def load(tile):
        r0, rows = tile
        return nl.load(x[r0:r0 + rows, :])                                          # [rows, C]

    for (r0, rows), x_tile in double_buffered(row_tiles(R), load):
        xhat, _ = _normalize(x_tile, rows, C, eps, centered)
        if bias_tile is None:
            y = nl.multiply(xhat, weight_tile[:rows, :], dtype=out.dtype)
        else:
            scaled = nl.multiply(xhat, weight_tile[:rows, :])
            y = nl.add(scaled, bias_tile[:rows, :], dtype=out.dtype)
        nl.store(out[r0:r0 + rows, :], value=y)


def _norm_backward(grad_x, grad_weight, grad_bias, x, weight, grad_y, eps: float, centered: bool) -> None:
    R, C = x.shape
    P, TN = nl.tile_size.pmax, nl.tile_size.gemm_moving_fmax
    weight_tile = broadcast_rows(load_row(weight), P)
    chunks = [tile_extent(c, TN, C) for c in range(num_tiles(C, TN))]
    # weight (and bias) gradients: one PSUM accumulator per 512 features, filled by every row tile
    sum_dy_xhat = [nl.ndarray((1, width), dtype=nl.float32, buffer=nl.psum) for _, width in chunks]
    sum_dy = [nl.ndarray((1, width), dtype=nl.float32, buffer=nl.psum) for _, width in chunks] \
        if grad_bias is not None else None

    def load(tile):
        r0, rows = tile
        return nl.load(x[r0:r0 + rows, :]), nl.load(grad_y[r0:r0 + rows, :])

    for (r0, rows), (x_tile, dy) in double_buffered(row_tiles(R), load):
        xhat, rstd = _normalize(x_tile, rows, C, eps, centered)
        ones = nl.ones((rows, 1), dtype=nl.float32)                                  # [K=rows, M=1]
        dy_xhat = nl.multiply(dy, xhat, dtype=nl.float32)
        for c, (c0, width) in enumerate(chunks):
            nisa.nc_matmul(dst=sum_dy_xhat[c], stationary=ones, moving=dy_xhat[:, c0:c0 + width])
        if sum_dy is not None:
            ones_like_dy = nl.ones((rows, 1), dtype=dy.dtype)
            for c, (c0, width) in enumerate(chunks):
                nisa.nc_matmul(dst=sum_dy[c], stationary=ones_like_dy, moving=dy[:, c0:c0 + width])
        g = nl.multiply(dy, weight_tile[:rows, :], dtype=nl.float32)                # dy * gamma
        g_xhat = nl.multiply(g, xhat)
        mean_g_xhat = nl.mean(g_xhat, axis=1, keepdims=True)                       # [rows, 1]
        correction = nl.multiply(xhat, mean_g_xhat)
        if centered:
            mean_g = nl.mean(g, axis=1, keepdims=True)
            g = nl.subtract(g, mean_g)
        inner = nl.subtract(g, correction)                                          # fp32
        dx = nl.multiply(inner, rstd, dtype=grad_x.dtype)
        nl.store(grad_x[r0:r0 + rows, :], value=dx)
    for c, (c0, width) in enumerate(chunks):
        nisa.dma_copy(dst=grad_weight[c0:c0 + width], src=nl.copy(sum_dy_xhat[c], dtype=grad_weight.dtype))
        if sum_dy is not None:
            nisa.dma_copy(dst=grad_bias[c0:c0 + width], src=nl.copy(sum_dy[c], dtype=grad_bias.dtype))


# -- kernels ---------------------------------------------------------------------------------------
@nki.jit
def layer_norm(x, gamma, beta, eps=1e-5):
    """Layer norm of x [R, C] over the last axis with gamma, beta [C] (nn.LayerNorm) -> [R, C]."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    _norm_forward(out, x, gamma, beta, eps, centered=True)
    return out


@nki.jit
def layer_norm_backward(x, gamma, grad_y, eps=1e-5):
    """Gradients of layer_norm: (grad_x [R, C], grad_gamma [C], grad_beta [C])."""
    R, C = x.shape
    grad_x = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    grad_gamma = nl.ndarray((C,), dtype=gamma.dtype, buffer=nl.shared_hbm)
    grad_beta = nl.ndarray((C,), dtype=gamma.dtype, buffer=nl.shared_hbm)
    _norm_backward(grad_x, grad_gamma, grad_beta, x, gamma, grad_y, eps, centered=True)
    return grad_x, grad_gamma, grad_beta


@nki.jit
def rms_norm(x, weight, eps=1e-6):
    """RMS norm of x [R, C] over the last axis with weight [C] (F.rms_norm) -> [R, C]."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    _norm_forward(out, x, weight, None, eps, centered=False)
    return out


@nki.jit
def rms_norm_backward(x, weight, grad_y, eps=1e-6):
    """Gradients of rms_norm: (grad_x [R, C], grad_weight [C])."""
    R, C = x.shape
    grad_x = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    grad_weight = nl.ndarray((C,), dtype=weight.dtype, buffer=nl.shared_hbm)
    _norm_backward(grad_x, grad_weight, None, x, weight, grad_y, eps, centered=False)
    return grad_x, grad_weight

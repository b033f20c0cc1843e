"""Row-wise softmax, layer norm and RMS norm: one row per partition, the reduction along the free axis."""
import math

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl


@nki.jit
def softmax_rows(x_tensor):
    """softmax over the last axis of [rows, cols] (functional style, masked last tile)."""
    rows, cols = x_tensor.shape
    out_tensor = nl.ndarray((rows, cols), dtype=x_tensor.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(cols)[None, :]
    for t in nl.affine_range(math.ceil(rows / 128)):
        row = t * 128 + i_p
        x = nl.load(x_tensor[row, i_f], mask=(row < rows))
        row_max = nl.max(x, axis=1, keepdims=True, mask=(row < rows))          # [128, 1]
        shifted = nl.subtract(x, row_max, mask=(row < rows))
        e = nl.exp(shifted, mask=(row < rows))
        row_sum = nl.sum(e, axis=1, keepdims=True, mask=(row < rows))
        inverse = nl.reciprocal(row_sum, mask=(row < rows))
        y = nl.multiply(e, inverse, dtype=x_tensor.dtype, mask=(row < rows))
        nl.store(out_tensor[row, i_f], value=y, mask=(row < rows))
    return out_tensor


@nki.jit
def layernorm_rows(x_tensor, gamma, beta, eps=1e-5):
    """(x - mean) / sqrt(var + eps) * gamma + beta over the last axis; rows a multiple of 128."""
    rows, cols = x_tensor.shape
    out_tensor = nl.ndarray((rows, cols), dtype=x_tensor.dtype, buffer=nl.shared_hbm)
    # gamma and beta arrive as [1, cols]; spread them over the 128 partitions once
    gamma_row = nl.load(gamma)
    beta_row = nl.load(beta)
    gamma_tile = gamma_row.broadcast_to((128, cols))
    beta_tile = beta_row.broadcast_to((128, cols))
    for t in nl.affine_range(rows // 128):
        x = nl.load(x_tensor[t * 128:(t + 1) * 128, :])
        mean = nl.mean(x, axis=1, keepdims=True)                               # [128, 1]
        centered = nl.subtract(x, mean)
        variance = nl.mean(nl.square(centered), axis=1, keepdims=True)
        inv_std = nl.rsqrt(nl.add(variance, eps))
        normed = nl.multiply(centered, inv_std)
        scaled = nl.multiply(normed, gamma_tile)
        y = nl.add(scaled, beta_tile, dtype=x_tensor.dtype)
        nl.store(out_tensor[t * 128:(t + 1) * 128, :], value=y)
    return out_tensor


@nki.jit
def rmsnorm_rows(x_tensor, weight):
    """x / sqrt(mean(x^2)) * weight over the last axis (destination style for the heavy ops)."""
    rows, cols = x_tensor.shape
    out_tensor = nl.ndarray((rows, cols), dtype=x_tensor.dtype, buffer=nl.shared_hbm)
    weight_row = nl.ndarray((1, cols), dtype=weight.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=weight_row, src=weight)
    weight_tile = weight_row.broadcast_to((128, cols))
    for t in nl.affine_range(rows // 128):
        x = nl.ndarray((128, cols), dtype=x_tensor.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=x_tensor[t * 128:(t + 1) * 128, :])
        squares = nl.ndarray((128, cols), dtype=nl.float32, buffer=nl.sbuf)
        sum_sq = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        # square on the Scalar engine with the row sum in the same instruction
        nisa.activation(dst=squares, op=nl.square, data=x, reduce_op=nl.add, reduce_res=sum_sq)
        inv_rms = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=inv_rms, data=sum_sq, op0=nl.multiply, operand0=1.0 / cols,
                           op1=nl.add, operand1=1e-6)
        nisa.activation(dst=inv_rms, op=nl.rsqrt, data=inv_rms)
        y = nl.ndarray((128, cols), dtype=x_tensor.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y, data=x, op0=nl.multiply, operand0=inv_rms)
        nisa.tensor_tensor(dst=y, data1=y, data2=weight_tile, op=nl.multiply)
        nisa.dma_copy(dst=out_tensor[t * 128:(t + 1) * 128, :], src=y)
    return out_tensor


@nki.jit
def rmsnorm_masked(x_tensor, weight_vector):
    """RMS norm for any row count, older functional style: a 3-D mgrid with a size-1 axis, a 1-D weight
    reshaped to [1, cols], operators on tiles, masks on every instruction of the last partial tile."""
    rows, cols = x_tensor.shape
    out_tensor = nl.ndarray((rows, cols), dtype=x_tensor.dtype, buffer=nl.shared_hbm)
    i_row, i_one, i_col = nl.mgrid[0:128, 0:1, 0:cols]
    weight = nl.load(weight_vector.reshape((1, cols))[i_one, i_col]).broadcast_to((128, cols))
    for t in nl.affine_range(math.ceil(rows / 128)):
        live = (t * 128 + i_row < rows)
        x = nl.load(x_tensor[t * 128 + i_row, i_col], mask=live)
        mean_square = nl.mean(nl.square(x, mask=live), axis=[1], mask=live)       # [128]
        scale = nl.rsqrt(nl.add(mean_square, 1e-6, mask=live), mask=live)
        y = nl.ndarray((128, cols), dtype=x_tensor.dtype, buffer=nl.sbuf)
        y[...] = nl.multiply(nl.multiply(x, scale, mask=live), weight, mask=live)
        nl.store(out_tensor[t * 128 + i_row, i_col], value=y, mask=live)
    return out_tensor

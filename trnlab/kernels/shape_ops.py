"""The small kernels a training step needs besides the big ones: data movement, batched matmuls,
scaling, masking and sums — what the backward graph of a transformer is made of between its matmuls.

Layouts (HBM, row-major; the caller flattens leading axes where a kernel says [R, C]):

    transpose_2d(x [M, N])                 -> x.T [N, M]      nc_transpose per [128, 128] block (Tensor engine)
    batch_transpose(x [G, M, N])           -> [G, N, M]       the same per group
    swap_middle_axes(x [A, B, C, D])       -> [A, C, B, D]    (B, T, nh, hs) <-> (B, nh, T, hs): strided DMA only
    matmul_t(a, b, transpose_a, transpose_b)          op(a) @ op(b): the transposes read by the Tensor engine's
    batch_matmul(a [G, M, K], b [G, K, N], ...)       own layout (a.T is the stationary as it lies), no copies
    scale(x [R, C], factor)                -> x * factor      one Scalar-engine activation(copy, scale=)
    masked_fill(x [N, S], keep [S], value) -> where(keep, x, value); keep is a constant 0/1 row (the causal
                                              mask), spread over the partitions once
    column_sum(x [R, C])                   -> [C]            ones.T @ x on the Tensor engine (bias gradients)
    slice_columns(x [R, C], start, end)    -> x[:, start:end] (q, k, v out of the packed projection)
    concat_columns(*xs [R, Ci])            -> [R, sum Ci]    (their gradients packed again)
    repeat_rows(x [R, C], times)           -> [times, R, C]  (a position embedding added to every sequence)

Rows go on the partitions, 128 per tile, the last axis along the free dimension; math is fp32 on chip.
"""
from __future__ import annotations

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.kernels.common import broadcast_rows, num_tiles, row_tiles, tile_extent, transpose_to_sbuf
from trnlab.kernels.matmul import column_sums, tiled_matmul

FREE_TILE = 2048                       # elements per partition per instruction


def _transpose_into(out, x) -> None:
    """out [N, M] = x [M, N].T, block by [128, 128] block through PSUM."""
    M, N = x.shape
    for r0, rows in row_tiles(M):
        for c0, cols in row_tiles(N):
            block = nl.load(x[r0:r0 + rows, c0:c0 + cols])                       # [rows, cols]
            nl.store(out[c0:c0 + cols, r0:r0 + rows], value=transpose_to_sbuf(block))   # [cols, rows]


@nki.jit
def transpose_2d(x):
    """x [M, N] -> x.T [N, M] in x's dtype."""
    M, N = x.shape
    out = nl.ndarray((N, M), dtype=x.dtype, buffer=nl.shared_hbm)
    _transpose_into(out, x)
    return out


@nki.jit
def batch_transpose(x):
    """x [G, M, N] -> [G, N, M]: each group's matrix transposed."""
    G, M, N = x.shape
    out = nl.ndarray((G, N, M), dtype=x.dtype, buffer=nl.shared_hbm)
    for g in range(G):
        _transpose_into(out[g], x[g])
    return out


@nki.jit
def swap_middle_axes(x):
    """x [A, B, C, D] -> [A, C, B, D] (a permute(0, 2, 1, 3)): for each (a, c), the [B, D] slice with
    stride C*D between rows is loaded onto B partitions and stored contiguously."""
    A, B, C, D = x.shape
    out = nl.ndarray((A, C, B, D), dtype=x.dtype, buffer=nl.shared_hbm)
    for a in range(A):
        for c in range(C):
            for b0, rows in row_tiles(B):
                part = nl.load(x[a, b0:b0 + rows, c, :])                          # [rows, D], strided rows
                nl.store(out[a, c, b0:b0 + rows, :], value=part)
    return out


def _out_dtype(name, default):
    return default if name is None else getattr(nl, name)


@nki.jit
def matmul_t(a, b, bias=None, transpose_a=False, transpose_b=False, out_dtype=None):
    """op(a) @ op(b) (+ bias [N]) -> [M, N] in out_dtype (default a's dtype; PSUM accumulates fp32);
    op(a) = a.T if transpose_a (a stored [K, M]), op(b) = b.T if transpose_b (b stored [N, K], nn.Linear's
    weight). Neither transpose is materialised; the bias is added on the way out of PSUM."""
    M = a.shape[1] if transpose_a else a.shape[0]
    N = b.shape[0] if transpose_b else b.shape[1]
    result = nl.ndarray((M, N), dtype=_out_dtype(out_dtype, a.dtype), buffer=nl.shared_hbm)
    tiled_matmul(result, a, b, a_is_kxm=transpose_a, b_is_nxk=transpose_b, bias=bias)
    return result


@nki.jit
def batch_matmul(a, b, transpose_a=False, transpose_b=False, out_dtype=None):
    """op(a[g]) @ op(b[g]) for every group g: a [G, M, K] (or [G, K, M]), b [G, K, N] (or [G, N, K])."""
    G = a.shape[0]
    M = a.shape[2] if transpose_a else a.shape[1]
    N = b.shape[1] if transpose_b else b.shape[2]
    result = nl.ndarray((G, M, N), dtype=_out_dtype(out_dtype, a.dtype), buffer=nl.shared_hbm)
    for g in range(G):
        tiled_matmul(result[g], a[g], b[g], a_is_kxm=transpose_a, b_is_nxk=transpose_b)
    return result


def _tiles(R: int, C: int) -> list:
    return [(rows, cols) for rows in row_tiles(R) for cols in row_tiles(C, FREE_TILE)]


@nki.jit
def scale(x, factor):
    """x [R, C] * factor (a number) -> [R, C] in x's dtype, on the Scalar engine."""
    R, C = x.shape
    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    for (r0, rows), (c0, cols) in _tiles(R, C):
        tile = nl.load(x[r0:r0 + rows, c0:c0 + cols])
        scaled = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.activation(dst=scaled, op=nl.copy, data=tile, scale=float(factor))
        nl.store(out[r0:r0 + rows, c0:c0 + cols], value=scaled)
    return out


@nki.jit
def masked_fill(x, keep, value):
    """where(keep, x, value) for x [N, S] and a 0/1 row keep [S] that repeats over the N rows."""
    N, S = x.shape
    out = nl.ndarray((N, S), dtype=x.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    keep_row = nl.ndarray((1, S), dtype=keep.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=keep_row, src=keep)
    keep_tile = broadcast_rows(keep_row, min(P, N))                                 # [<=128, S] fp32
    predicate = nl.greater(keep_tile, 0.5)
    for r0, rows in row_tiles(N):
        tile = nl.load(x[r0:r0 + rows, :])
        filled = nl.where(predicate[:rows, :], tile, float(value), dtype=x.dtype)
        nl.store(out[r0:r0 + rows, :], value=filled)
    return out


@nki.jit
def column_sum(x):
    """x [R, C] summed over its rows -> [C] in x's dtype (ones.T @ x, accumulated in PSUM)."""
    R, C = x.shape
    out = nl.ndarray((C,), dtype=x.dtype, buffer=nl.shared_hbm)
    column_sums(out, x)
    return out


@nki.jit
def row_sum(x):
    """x [R, C] summed along each row -> [R] (a free-axis reduction on the Vector engine)."""
    R, C = x.shape
    out = nl.ndarray((R,), dtype=x.dtype, buffer=nl.shared_hbm)
    for r0, rows in row_tiles(R):
        total = nl.sum(nl.load(x[r0:r0 + rows, :]), axis=1, keepdims=True, dtype=nl.float32)   # [rows, 1]
        nisa.dma_copy(dst=out[r0:r0 + rows], src=nl.copy(total, dtype=x.dtype))
    return out


@nki.jit
def slice_columns(x, start, end):
    """x [R, C] -> x[:, start:end] (a strided DMA through SBUF)."""
    R, C = x.shape
    width = end - start
    out = nl.ndarray((R, width), dtype=x.dtype, buffer=nl.shared_hbm)
    for (r0, rows), (c0, cols) in _tiles(R, width):
        nl.store(out[r0:r0 + rows, c0:c0 + cols], value=nl.load(x[r0:r0 + rows, start + c0:start + c0 + cols]))
    return out


@nki.jit
def concat_columns(*xs):
    """[R, C0], [R, C1], ... -> [R, C0 + C1 + ...] side by side."""
    R = xs[0].shape[0]
    total = sum(x.shape[1] for x in xs)
    out = nl.ndarray((R, total), dtype=xs[0].dtype, buffer=nl.shared_hbm)
    offset = 0
    for x in xs:
        for (r0, rows), (c0, cols) in _tiles(R, x.shape[1]):
            nl.store(out[r0:r0 + rows, offset + c0:offset + c0 + cols], value=nl.load(x[r0:r0 + rows, c0:c0 + cols]))
        offset += x.shape[1]
    return out


@nki.jit
def repeat_rows(x, times):
    """x [R, C] -> [times, R, C]: each tile loaded once and stored `times` times."""
    R, C = x.shape
    out = nl.ndarray((times, R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    for (r0, rows), (c0, cols) in _tiles(R, C):
        tile = nl.load(x[r0:r0 + rows, c0:c0 + cols])
        for t in range(times):
            nl.store(out[t, r0:r0 + rows, c0:c0 + cols], value=tile)
    return out


@nki.jit
def multiply(a, b):
    """a * b for a, b [R, C] -> [R, C] in a's dtype."""
    R, C = a.shape
    out = nl.ndarray((R, C), dtype=a.dtype, buffer=nl.shared_hbm)
    for (r0, rows), (c0, cols) in _tiles(R, C):
        product = nl.ndarray((rows, cols), dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=product, data1=nl.load(a[r0:r0 + rows, c0:c0 + cols]),
                           data2=nl.load(b[r0:r0 + rows, c0:c0 + cols]), op=nl.multiply)
        nl.store(out[r0:r0 + rows, c0:c0 + cols], value=product)
    return out


__all__ = ["transpose_2d", "batch_transpose", "swap_middle_axes", "matmul_t", "batch_matmul", "scale", "masked_fill",
           "column_sum", "row_sum", "slice_columns", "concat_columns", "repeat_rows", "multiply", "num_tiles",
           "tile_extent"]

"""MX kernels that reach the operands through views: 3-D tiles sliced per step, and scale tiles whose
scale partitions alone are loaded (by DMA, from a dense host layout)."""
import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl

from .mx_matmul import mx_product_to_hbm


@nki.jit(target="trn3")
def quantize_slab_by_slab(x, x4_dtype):
    """(data [P, S, F/4], scales [P, S, F/4]) of x [P, S, F] bf16: one quantize_mx per slab s, each
    writing a [P, 1, F/4] slice of 3-D data and scale tiles."""
    P, S, F = x.shape
    src = nl.ndarray((P, S, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=src, src=x)
    data = nl.ndarray((P, S, F // 4), dtype=x4_dtype, buffer=nl.sbuf)
    scales = nl.ndarray((P, S, F // 4), dtype=nl.uint8, buffer=nl.sbuf)
    for s in range(S):
        nisa.quantize_mx(dst=data[:, s:s + 1, :], src=src[:, s:s + 1, :], dst_scale=scales[:, s:s + 1, :])
    data_out = nl.ndarray((P, S, F // 4), dtype=x4_dtype, buffer=nl.shared_hbm)
    scales_out = nl.ndarray((P, S, F // 4), dtype=nl.uint8, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=data_out, src=data)
    nisa.dma_copy(dst=scales_out, src=scales)
    return data_out, scales_out


def _scales_to_quadrants(dense):
    """An SBUF scale tile [128, 1, F] with the dense scales [16, F] on partitions 32q + r (r < 4): four
    DMAs, one per quadrant; the other 28 partitions of each quadrant are never written."""
    groups, F = dense.shape
    tile = nl.ndarray((128, 1, F), dtype=dense.dtype, buffer=nl.sbuf)
    for q in range(groups // 4):
        nisa.dma_copy(dst=tile[32 * q:32 * q + 4, 0, :], src=dense[4 * q:4 * q + 4, :])
    return tile


@nki.jit(target="trn3")
def matmul_with_dense_scales(stationary, stationary_scale, moving, moving_scale):
    """out[M, N] = MX product of stationary x4 [128, M] and moving x4 [128, N], their scales given dense
    ([16, M], [16, N]: group g on row g) and placed on the quadrant partitions on the way in."""
    K, M = stationary.shape
    N = moving.shape[1]
    st = nl.ndarray((K, M), dtype=stationary.dtype, buffer=nl.sbuf)
    mv = nl.ndarray((K, N), dtype=moving.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=st, src=stationary)
    nisa.dma_copy(dst=mv, src=moving)
    st_s, mv_s = _scales_to_quadrants(stationary_scale), _scales_to_quadrants(moving_scale)
    return mx_product_to_hbm(st, st_s[:, 0:1, :], mv, mv_s[:, 0:1, :], nl.float32)


@nki.jit(target="trn3")
def quantize_partly_loaded_then_multiply(x, stationary, stationary_scale, store_columns: int):
    """x [128, 16] bf16 with columns 8.. loaded on partitions 0..99 only (the rest never written),
    quantized whole (moving [128, 4] x4), multiplied by stationary x4 [128, M]; out = the result's first
    `store_columns` columns."""
    src = nl.ndarray((128, 16), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=src[:, 0:8], src=x[:, 0:8])
    nisa.dma_copy(dst=src[0:100, 8:16], src=x[0:100, 8:16])
    mv = nl.ndarray((128, 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    mv_s = nl.ndarray((128, 4), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.quantize_mx(dst=mv, src=src, dst_scale=mv_s)
    M = stationary.shape[1]
    st = nl.ndarray((128, M), dtype=stationary.dtype, buffer=nl.sbuf)
    st_s = nl.ndarray((128, M), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.dma_copy(dst=st, src=stationary)
    nisa.dma_copy(dst=st_s, src=stationary_scale)
    acc = nl.ndarray((M, 4), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul_mx(dst=acc, stationary=st, moving=mv, stationary_scale=st_s, moving_scale=mv_s)
    result = nl.ndarray((M, 4), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=result, src=acc)
    out = nl.ndarray((M, store_columns), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=result[:, 0:store_columns])
    return out


@nki.jit(target="trn3")
def quantize_words_read_as_bf16(x):
    """(data, scales) of x [128, F] bf16 moved into SBUF as fp32 words [128, F/2] (two values a word)
    and quantized from those words read back as bf16 (`.ap(dtype=nl.bfloat16)`)."""
    P, F = x.shape
    words = nl.ndarray((P, F // 2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=words, src=x.ap(pattern=[[F // 2, P], [1, F // 2]], dtype=nl.float32))
    data = nl.ndarray((P, F // 4), dtype=nl.float8_e5m2_x4, buffer=nl.sbuf)
    scales = nl.ndarray((P, F // 4), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.quantize_mx(dst=data, src=words.ap(pattern=[[F, P], [1, F]], dtype=nl.bfloat16), dst_scale=scales)
    data_out = nl.ndarray((P, F // 4), dtype=nl.float8_e5m2_x4, buffer=nl.shared_hbm)
    scales_out = nl.ndarray((P, F // 4), dtype=nl.uint8, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=data_out, src=data)
    nisa.dma_copy(dst=scales_out, src=scales)
    return data_out, scales_out


@nki.jit(target="trn3")
def wide_mx_product(stationary, stationary_scale, moving, moving_scale, psum_dtype):
    """out[M, N] = one nc_matmul_mx of stationary x4 [128, M] by moving x4 [128, N] (N up to one PSUM
    bank of psum_dtype: 1024 bf16), scales in the layout quantize_mx writes."""
    tiles = []
    for hbm in (stationary, stationary_scale, moving, moving_scale):
        t = nl.ndarray(hbm.shape, dtype=hbm.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=hbm)
        tiles.append(t)
    st, st_s, mv, mv_s = tiles
    M, N = stationary.shape[1], moving.shape[1]
    acc = nl.ndarray((M, N), dtype=psum_dtype, buffer=nl.psum)
    nisa.nc_matmul_mx(dst=acc, stationary=st, moving=mv, stationary_scale=st_s, moving_scale=mv_s)
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=result, src=acc)
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=result)
    return out

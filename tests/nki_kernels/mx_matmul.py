"""MX (microscaling) FP8 kernels for NeuronCore-v4: quantize on the Vector engine, multiply on the
Tensor engine with the block scales applied (nisa.quantize_mx, nisa.nc_matmul_mx)."""
import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl


def _in_sbuf(hbm):
    """An SBUF tile holding the whole HBM tensor `hbm` (one DMA)."""
    t = nl.ndarray(hbm.shape, dtype=hbm.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=hbm)
    return t


def mx_product_to_hbm(st, st_s, mv, mv_s, psum_dtype):
    """nc_matmul_mx of the SBUF tiles into a PSUM tile of `psum_dtype` [M, N], copied out as fp32."""
    M, N = st.shape[1], mv.shape[1]
    acc = nl.ndarray((M, N), dtype=psum_dtype, buffer=nl.psum)
    nisa.nc_matmul_mx(dst=acc, stationary=st, moving=mv, stationary_scale=st_s, moving_scale=mv_s)
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=result, src=acc)
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=result)
    return out


@nki.jit(target="trn3")
def quantize_to_mx(x, x4_dtype):
    """(packed data [P, F/4], scales) of x [P, F] bf16: the scale tile as quantize_mx lays it out."""
    P, F = x.shape
    src = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=src, src=x)
    data = nl.ndarray((P, F // 4), dtype=x4_dtype, buffer=nl.sbuf)
    scale_rows = P // 8 if P <= 32 else P
    scales = nl.ndarray((scale_rows, F // 4), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.memset(dst=scales, value=0)
    nisa.quantize_mx(dst=data, src=src, dst_scale=scales)
    data_out = nl.ndarray((P, F // 4), dtype=x4_dtype, buffer=nl.shared_hbm)
    scales_out = nl.ndarray((scale_rows, F // 4), dtype=nl.uint8, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=data_out, src=data)
    nisa.dma_copy(dst=scales_out, src=scales)
    return data_out, scales_out


@nki.jit(target="trn3")
def mx_matmul(stationary, stationary_scale, moving, moving_scale):
    """out[M, N] = MX product of packed stationary [K, M] and moving [K, N] (x4 FP8, scales in the
    layout nc_matmul_mx reads), accumulated in fp32 PSUM."""
    st, st_s, mv, mv_s = (_in_sbuf(t) for t in (stationary, stationary_scale, moving, moving_scale))
    return mx_product_to_hbm(st, st_s, mv, mv_s, nl.float32)


@nki.jit(target="trn3")
def quantize_and_multiply(stationary, moving):
    """out = stationary_bf16 [K, 4M] . moving_bf16 [K, 4N] contracted over K and each group of 4
    columns: both quantized on the device, then one nc_matmul_mx."""
    K, M4 = stationary.shape
    N4 = moving.shape[1]
    packed = []
    for hbm, f in ((stationary, M4 // 4), (moving, N4 // 4)):
        src = nl.ndarray(hbm.shape, dtype=hbm.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=src, src=hbm)
        data = nl.ndarray((K, f), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        scales = nl.ndarray((K, f), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.quantize_mx(dst=data, src=src, dst_scale=scales)
        packed.append((data, scales))
    (st, st_s), (mv, mv_s) = packed
    return mx_product_to_hbm(st, st_s, mv, mv_s, nl.float32)


@nki.jit(target="trn3")
def copy_through_pattern(x, as_pattern: bool, dtype=None):
    """out = x, the DMA reading x whole or through an .ap pattern that walks it row by row."""
    P, F = x.shape
    tile = nl.ndarray((P, F), dtype=dtype or x.dtype, buffer=nl.sbuf)
    src = x.ap(pattern=[[F, P], [1, F]], offset=0, dtype=dtype) if as_pattern else x
    nisa.dma_copy(dst=tile, src=src)
    out = nl.ndarray((P, F), dtype=dtype or x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out


@nki.jit(target="trn3")
def regroup_free_axes(x):
    """x [P, F, 4] loaded into a tile, read back through tile.reshape((P, 4F))."""
    P, F, Q = x.shape
    tile = nl.ndarray((P, F, Q), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x)
    flat = tile.reshape((P, F * Q))
    out_tile = nl.ndarray((P, F * Q), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=out_tile, src=flat)
    out = nl.ndarray((P, F * Q), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=out_tile)
    return out


@nki.jit(target="trn3")
def bytes_as_packed_fp4(x_bytes):
    """x_bytes uint8 [P, 2F] (two FP4 values a byte, as AWS's tutorial keeps them on the host) read
    through .ap(dtype=nl.float4_e2m1fn_x4) as [P, F] 4-packed FP4 words, loaded and stored back."""
    P, B = x_bytes.shape
    F = B // 2
    src = x_bytes.ap(dtype=nl.float4_e2m1fn_x4, pattern=[[F, P], [1, F]], offset=0)
    tile = nl.ndarray((P, F), dtype=nl.float4_e2m1fn_x4, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=src)
    out = nl.ndarray((P, F), dtype=nl.float4_e2m1fn_x4, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out


@nki.jit(target="trn3")
def fp4_bytes_matmul(stationary_bytes, stationary_scale, moving, moving_scale):
    """out[M, N] = MX product of an FP4 stationary given as uint8 bytes [K, 2M] (viewed as
    float4_e2m1fn_x4 [K, M]) and a moving x4 tile [K, N] (FP4 or FP8), scales in nc_matmul_mx's
    layout; the result in bf16 PSUM, as AWS's tutorial writes it."""
    K, B = stationary_bytes.shape
    M = B // 2
    st = nl.ndarray((K, M), dtype=nl.float4_e2m1fn_x4, buffer=nl.sbuf)
    nisa.dma_copy(dst=st, src=stationary_bytes.ap(dtype=nl.float4_e2m1fn_x4, pattern=[[M, K], [1, M]], offset=0))
    st_s, mv, mv_s = (_in_sbuf(t) for t in (stationary_scale, moving, moving_scale))
    return mx_product_to_hbm(st, st_s, mv, mv_s, nl.bfloat16)

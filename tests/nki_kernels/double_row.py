"""FP8 double-row matmuls (NeuronCore-v3+): a stationary [K, 2, M] by a moving [K, 2, N] per instruction."""
import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl


@nki.jit
def double_row_product(lhsT, rhs):
    """out[M, N] = sum over k, r of lhsT[k, r, m] * rhs[k, r, n] for fp8 lhsT [K, 2, M], rhs [K, 2, N]."""
    K, _, M = lhsT.shape
    N = rhs.shape[2]
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.load(lhsT)                                      # [K=128, 2, M]
    b = nl.load(rhs)                                       # [K=128, 2, N]
    product = nisa.nc_matmul(a, b, perf_mode="double_row_gen3")
    nl.store(out, value=product)
    return out


@nki.jit
def double_row_accumulated(lhsT, rhs):
    """out = lhs @ rhs for lhsT [K, M] and rhs [K, N] in fp8, K a multiple of 256: pairs of 128-row
    K-tiles contracted by one double-row matmul each, accumulated in PSUM (destination style)."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    i_k, i_r, i_m = nl.mgrid[0:128, 0:2, 0:M]
    j_k, j_r, j_n = nl.mgrid[0:128, 0:2, 0:N]
    for pair in nl.affine_range(K // 256):
        a = nl.ndarray((128, 2, M), dtype=lhsT.dtype, buffer=nl.sbuf)
        b = nl.ndarray((128, 2, N), dtype=rhs.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=lhsT[pair * 256 + i_r * 128 + i_k, i_m])
        nisa.dma_copy(dst=b, src=rhs[pair * 256 + j_r * 128 + j_k, j_n])
        nisa.nc_matmul(dst=acc, stationary=a, moving=b, perf_mode=nisa.matmul_perf_mode.double_row)
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=result, src=acc)
    nisa.dma_copy(dst=out, src=result)
    return out


@nki.jit
def plain_fp8_matmul(lhsT, rhs):
    """out = lhsT.T @ rhs for one [K=128, M] x [K=128, N] fp8 tile pair (no performance mode)."""
    M, N = lhsT.shape[1], rhs.shape[1]
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    product = nisa.nc_matmul(nl.load(lhsT), nl.load(rhs))
    nl.store(out, value=product)
    return out


@nki.jit
def scale_rows(x, scale):
    """out = x * scale, scale a [P, 1] column, with nisa.tensor_tensor (a per-partition operand)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nisa.tensor_tensor(nl.load(x), nl.load(scale), nl.multiply))
    return out

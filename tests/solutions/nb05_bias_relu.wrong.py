@nki.jit
def matmul_bias_relu(lhsT, rhs, bias):
    K, M = lhsT.shape
    _, N = rhs.shape
    TILE_K = nl.tile_size.pmax
    bias_tile = nl.ndarray((M, 1), dtype=bias.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=bias_tile, src=bias)
    psum_tile = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(K // TILE_K):
        lhsT_tile = nl.ndarray((TILE_K, M), dtype=lhsT.dtype, buffer=nl.sbuf)
        rhs_tile = nl.ndarray((TILE_K, N), dtype=rhs.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=lhsT_tile, src=lhsT[k * TILE_K:(k + 1) * TILE_K, :])
        nisa.dma_copy(dst=rhs_tile, src=rhs[k * TILE_K:(k + 1) * TILE_K, :])
        nisa.nc_matmul(dst=psum_tile, stationary=lhsT_tile, moving=rhs_tile)
    relu_tile = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=relu_tile, op=nl.relu, data=psum_tile)
    out_tile = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=out_tile, data=relu_tile, op0=nl.add, operand0=bias_tile)
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=result, src=out_tile)
    return result

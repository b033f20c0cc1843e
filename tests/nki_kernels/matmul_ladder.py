"""The matrix-multiplication optimization ladder of AWS's NKI matmul tutorial, in destination style.

result[M, N] = lhsT[K, M].T @ rhs[K, N]. Each step changes one thing:

1. basic            one [K=128, M<=128] x [128, N<=512] matmul
2. tiled            loop over 128 x 512 output tiles, accumulate over K tiles in PSUM
3. hoisted loads    load a row of lhsT tiles once per M tile, a column of rhs tiles once per N tile
4. blocked free     block M and N so each loaded tile is reused by several output tiles
5. fully blocked    block K as well, accumulate partial sums in SBUF, coalesce the stores
"""
import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl


@nki.jit
def matmul_basic(lhsT, rhs):
    K, M = lhsT.shape
    K_, N = rhs.shape
    assert K == K_ and K <= nl.tile_size.pmax and M <= nl.tile_size.gemm_stationary_fmax
    assert N <= nl.tile_size.gemm_moving_fmax
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    lhsT_tile = nl.ndarray((K, M), dtype=lhsT.dtype, buffer=nl.sbuf)
    rhs_tile = nl.ndarray((K, N), dtype=rhs.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=lhsT_tile, src=lhsT)
    nisa.dma_copy(dst=rhs_tile, src=rhs)
    product = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=product, stationary=lhsT_tile, moving=rhs_tile)
    product_sbuf = nl.ndarray((M, N), dtype=result.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=product_sbuf, src=product)          # PSUM -> SBUF (and cast)
    nisa.dma_copy(dst=result, src=product_sbuf)
    return result


@nki.jit
def matmul_tiled(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    TK, TM, TN = nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax, nl.tile_size.gemm_moving_fmax
    assert K % TK == 0 and M % TM == 0 and N % TN == 0
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        for n in nl.affine_range(N // TN):
            acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TK):
                lhsT_tile = nl.ndarray((TK, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
                rhs_tile = nl.ndarray((TK, TN), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=lhsT_tile, src=lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
                nisa.dma_copy(dst=rhs_tile, src=rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                nisa.nc_matmul(dst=acc, stationary=lhsT_tile, moving=rhs_tile)   # accumulates over k
            out_tile = nl.ndarray((TM, TN), dtype=result.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=out_tile, src=acc)
            nisa.dma_copy(dst=result[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], src=out_tile)
    return result


@nki.jit
def matmul_hoisted(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    TK, TM, TN = nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax, nl.tile_size.gemm_moving_fmax
    assert K % TK == 0 and M % TM == 0 and N % TN == 0
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        lhsT_row = []                                     # all K tiles of this M stripe, loaded once
        for k in nl.affine_range(K // TK):
            tile = nl.ndarray((TK, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=tile, src=lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
            lhsT_row.append(tile)
        for n in nl.affine_range(N // TN):
            rhs_column = []
            for k in nl.affine_range(K // TK):
                tile = nl.ndarray((TK, TN), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=tile, src=rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                rhs_column.append(tile)
            acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TK):
                nisa.nc_matmul(dst=acc, stationary=lhsT_row[k], moving=rhs_column[k])
            out_tile = nl.ndarray((TM, TN), dtype=result.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=out_tile, src=acc)
            nisa.dma_copy(dst=result[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], src=out_tile)
    return result


@nki.jit
def matmul_block_free(lhsT, rhs, TILES_IN_BLOCK_M=2, TILES_IN_BLOCK_N=2):
    K, M = lhsT.shape
    _, N = rhs.shape
    TK, TM, TN = nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax, nl.tile_size.gemm_moving_fmax
    BM, BN = TM * TILES_IN_BLOCK_M, TN * TILES_IN_BLOCK_N
    assert K % TK == 0 and M % BM == 0 and N % BN == 0
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // BM):
        lhsT_block = []                                   # [bm][k] tiles
        for bm in nl.affine_range(TILES_IN_BLOCK_M):
            stripe = []
            for k in nl.affine_range(K // TK):
                tile = nl.ndarray((TK, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
                col = (m * TILES_IN_BLOCK_M + bm) * TM
                nisa.dma_copy(dst=tile, src=lhsT[k * TK:(k + 1) * TK, col:col + TM])
                stripe.append(tile)
            lhsT_block.append(stripe)
        for n in nl.affine_range(N // BN):
            rhs_block = []                                # [bn][k] tiles
            for bn in nl.affine_range(TILES_IN_BLOCK_N):
                stripe = []
                for k in nl.affine_range(K // TK):
                    tile = nl.ndarray((TK, TN), dtype=rhs.dtype, buffer=nl.sbuf)
                    col = (n * TILES_IN_BLOCK_N + bn) * TN
                    nisa.dma_copy(dst=tile, src=rhs[k * TK:(k + 1) * TK, col:col + TN])
                    stripe.append(tile)
                rhs_block.append(stripe)
            for bm in nl.affine_range(TILES_IN_BLOCK_M):
                for bn in nl.affine_range(TILES_IN_BLOCK_N):
                    acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(K // TK):
                        nisa.nc_matmul(dst=acc, stationary=lhsT_block[bm][k], moving=rhs_block[bn][k])
                    out_tile = nl.ndarray((TM, TN), dtype=result.dtype, buffer=nl.sbuf)
                    nisa.tensor_copy(dst=out_tile, src=acc)
                    row, col = (m * TILES_IN_BLOCK_M + bm) * TM, (n * TILES_IN_BLOCK_N + bn) * TN
                    nisa.dma_copy(dst=result[row:row + TM, col:col + TN], src=out_tile)
    return result


@nki.jit
def matmul_fully_blocked(lhsT, rhs, TILES_IN_BLOCK_M=16, TILES_IN_BLOCK_N=2, TILES_IN_BLOCK_K=8):
    K, M = lhsT.shape
    _, N = rhs.shape
    TK, TM, TN = nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax, nl.tile_size.gemm_moving_fmax
    BM, BN, BK = TM * TILES_IN_BLOCK_M, TN * TILES_IN_BLOCK_N, TK * TILES_IN_BLOCK_K
    assert M % BM == 0 and N % BN == 0 and K % BK == 0, "shape must be a multiple of the block sizes"
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for n in nl.affine_range(N // BN):
        # partial sums of the whole [M, BN] column of the result, kept in SBUF across K blocks
        partial = []
        for m in range(M // BM):
            rows = []
            for bm in range(TILES_IN_BLOCK_M):
                tiles = []
                for bn in range(TILES_IN_BLOCK_N):
                    tile = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.sbuf)
                    nisa.memset(dst=tile, value=0.0)
                    tiles.append(tile)
                rows.append(tiles)
            partial.append(rows)
        for k in nl.sequential_range(K // BK):
            rhs_block = []                                # TILES_IN_BLOCK_K tiles of [TK, BN]: wide DMAs
            for bk in range(TILES_IN_BLOCK_K):
                tile = nl.ndarray((TK, BN), dtype=rhs.dtype, buffer=nl.sbuf)
                row = (k * TILES_IN_BLOCK_K + bk) * TK
                nisa.dma_copy(dst=tile, src=rhs[row:row + TK, n * BN:(n + 1) * BN])
                rhs_block.append(tile)
            for m in nl.affine_range(M // BM):
                lhsT_block = []                           # TILES_IN_BLOCK_K tiles of [TK, BM]
                for bk in nl.affine_range(TILES_IN_BLOCK_K):
                    tile = nl.ndarray((TK, BM), dtype=lhsT.dtype, buffer=nl.sbuf)
                    row = (k * TILES_IN_BLOCK_K + bk) * TK
                    nisa.dma_copy(dst=tile, src=lhsT[row:row + TK, m * BM:(m + 1) * BM])
                    lhsT_block.append(tile)
                for bn in nl.affine_range(TILES_IN_BLOCK_N):
                    for bm in nl.affine_range(TILES_IN_BLOCK_M):
                        acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
                        for bk in nl.affine_range(TILES_IN_BLOCK_K):
                            nisa.nc_matmul(dst=acc,
                                           stationary=lhsT_block[bk][:, bm * TM:(bm + 1) * TM],
                                           moving=rhs_block[bk][:, bn * TN:(bn + 1) * TN])
                        nisa.tensor_tensor(dst=partial[m][bm][bn], data1=partial[m][bm][bn], data2=acc,
                                           op=nl.add)
        for m in nl.affine_range(M // BM):
            for bm in nl.affine_range(TILES_IN_BLOCK_M):
                packed = nl.ndarray((TM, BN), dtype=result.dtype, buffer=nl.sbuf)   # one wide store
                for bn in nl.affine_range(TILES_IN_BLOCK_N):
                    nisa.tensor_copy(dst=packed[:, bn * TN:(bn + 1) * TN], src=partial[m][bm][bn])
                row = (m * TILES_IN_BLOCK_M + bm) * TM
                nisa.dma_copy(dst=result[row:row + TM, n * BN:(n + 1) * BN], src=packed)
    return result


LADDER = [matmul_basic, matmul_tiled, matmul_hoisted, matmul_block_free, matmul_fully_blocked]

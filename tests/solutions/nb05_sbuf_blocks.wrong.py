def choose_blocks(M, N, K):
    return dict(TILES_IN_BLOCK_M=16, TILES_IN_BLOCK_N=2, TILES_IN_BLOCK_K=8)

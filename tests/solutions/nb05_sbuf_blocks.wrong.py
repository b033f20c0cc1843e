def choose_blocks(M, N, K):
    # mistake: AWS's meta-parameters everywhere; they overflow SBUF at large M and do not divide odd tile counts
    return dict(TILES_IN_BLOCK_M=16, TILES_IN_BLOCK_N=2, TILES_IN_BLOCK_K=8)

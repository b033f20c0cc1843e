def matmul_instructions(M, N, K):
    # mistake: floor division drops the partial tiles at the edges
    return max(M // 128, 1) * max(N // 512, 1) * max(K // 128, 1)

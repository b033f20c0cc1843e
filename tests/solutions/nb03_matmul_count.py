def matmul_instructions(M, N, K):
    # one instruction per (M tile, N tile, K tile); partial tiles count as whole ones
    return math.ceil(M / 128) * math.ceil(N / 512) * math.ceil(K / 128)

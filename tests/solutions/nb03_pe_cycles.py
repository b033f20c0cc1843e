def tensor_engine_cycles(M, N, K):
    cycles = 0
    for m0 in range(0, M, 128):
        m = min(128, M - m0)
        for n0 in range(0, N, 512):
            n = min(512, N - n0)
            # one instruction per K tile, each busy max(n, min(64, m)) cycles in bf16
            cycles += math.ceil(K / 128) * max(n, min(64, m))
    return cycles

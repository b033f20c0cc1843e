def matmul_instructions(M: int, N: int, K: int) -> dict:
    # mistake: every tile counted as a full one, so the edge tiles' smaller shapes never appear
    count = math.ceil(M / 128) * math.ceil(N / 512) * math.ceil(K / 128)
    return {(128, 128, 512): count}

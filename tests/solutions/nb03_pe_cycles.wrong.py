def tensor_engine_cycles(M, N, K):
    # mistake: every instruction streams only its n columns; the 64-cycle floor is forgotten
    instructions_per_column_block = math.ceil(M / 128) * math.ceil(K / 128)
    return instructions_per_column_block * N

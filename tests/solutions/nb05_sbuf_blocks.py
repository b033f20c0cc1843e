def choose_blocks(M, N, K):
    capacity = 224 * 1024  # Trn2 SBUF bytes per partition

    def divisors_up_to(n, cap):
        return [d for d in range(1, cap + 1) if n % d == 0]

    best = None
    for tm in divisors_up_to(M // 128, 16):
        for tk in divisors_up_to(K // 128, 16):
            block_m, block_n = 128 * tm, 512                # N blocks of one tile: the partial sums stay small
            partial_sums = (M // 128) * block_n * 4          # fp32, the whole [M, BLOCK_N] stripe
            inputs = tk * (block_n + block_m) * 2            # one K block of bf16 rhs and lhsT rows
            # room for two K blocks of inputs: the next one loads while this one is multiplied
            if partial_sums + 2 * inputs > capacity:
                continue
            # each loaded rhs row feeds TILES_IN_BLOCK_M matmuls and each K block TILES_IN_BLOCK_K of them
            # per M tile: the larger tm * tk, the fewer bytes per matmul
            score = tm * tk, tm
            if best is None or score > best[0]:
                best = (score, dict(TILES_IN_BLOCK_M=tm, TILES_IN_BLOCK_N=1, TILES_IN_BLOCK_K=tk))
    return best[1]

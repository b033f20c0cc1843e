def choose_blocks(M, N, K):
    capacity = 224 * 1024  # Trn2 SBUF bytes per partition

    def divisors_up_to(n, cap):
        return [d for d in range(1, cap + 1) if n % d == 0]

    best = None
    for tm in divisors_up_to(M // 128, 4):
        for tn in divisors_up_to(N // 512, 1):
            for tk in divisors_up_to(K // 128, 4):
                block_m, block_n = 128 * tm, 512 * tn
                partial_sums = (M // 128) * block_n * 4          # fp32, the whole [M, BLOCK_N] stripe
                inputs = tk * (block_n + block_m) * 4            # one K block of rhs and lhsT rows
                # room for two K blocks of inputs: the next one loads while this one is multiplied
                if partial_sums + 2 * inputs > capacity:
                    continue
                # balanced blocks of a few tiles: each loaded byte feeds several matmuls, and the
                # pipeline still has many blocks to overlap loads with
                score = min(tm, tk), tm * tk
                if best is None or score > best[0]:
                    best = (score, dict(TILES_IN_BLOCK_M=tm, TILES_IN_BLOCK_N=tn, TILES_IN_BLOCK_K=tk))
    return best[1]

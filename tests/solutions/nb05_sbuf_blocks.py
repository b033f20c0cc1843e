def choose_blocks(M, N, K):
    capacity = 224 * 1024  # Trn2 SBUF bytes per partition
    best = None
    for tm in (16, 8, 4, 2, 1):
        for tn in (4, 2, 1):
            for tk in (16, 8, 4, 2, 1):
                if M % (128 * tm) or N % (512 * tn) or K % (128 * tk):
                    continue
                block_m, block_n = 128 * tm, 512 * tn
                partial_sums = (M // 128) * block_n * 4          # fp32, the whole [M, BLOCK_N] stripe
                inputs = tk * (block_n + block_m) * 4            # one K block of rhs and lhsT rows
                # room for two K blocks of inputs: the next one loads while this one is multiplied
                if partial_sums + 2 * inputs > capacity:
                    continue
                # bigger blocks: each loaded byte feeds more matmuls, fewer partial-sum adds
                score = (tk, tm * tn)
                if best is None or score > best[0]:
                    best = (score, dict(TILES_IN_BLOCK_M=tm, TILES_IN_BLOCK_N=tn, TILES_IN_BLOCK_K=tk))
    return best[1]

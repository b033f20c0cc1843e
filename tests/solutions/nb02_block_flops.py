def block_flops(T: int, n_embd: int, n_head: int) -> int:
    C = n_embd
    linear = 2 * T * (C * 3 * C + C * C + C * 4 * C + 4 * C * C)  # qkv, proj, fc, proj: 24·T·C²
    # per head: scores (T, hs) @ (hs, T) and weights (T, T) @ (T, hs); n_head · hs = C, so n_head cancels
    attention = n_head * (2 * T * T * (C // n_head) + 2 * T * T * (C // n_head))
    return linear + attention

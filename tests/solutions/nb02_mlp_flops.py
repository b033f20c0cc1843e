def mlp_flops(T: int, n_embd: int) -> int:
    up = 2 * T * n_embd * (4 * n_embd)  # (T, C) @ (C, 4C): a multiply and an add per term
    down = 2 * T * (4 * n_embd) * n_embd
    return up + down

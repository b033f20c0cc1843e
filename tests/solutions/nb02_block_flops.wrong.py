def block_flops(T: int, n_embd: int, n_head: int) -> int:
    # mistake: only the four linear layers; attention's q @ kᵀ and weights @ v, which grow with T², are missed
    C = n_embd
    return 2 * T * (C * 3 * C + C * C + C * 4 * C + 4 * C * C)

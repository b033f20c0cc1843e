def mlp_flops(T: int, n_embd: int) -> int:
    # mistake: counts a multiply-add as one FLOP
    return T * n_embd * 4 * n_embd * 2

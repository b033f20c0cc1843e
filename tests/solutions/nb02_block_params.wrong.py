def block_params(n_embd: int) -> int:
    # mistake: only the weight matrices, no biases and no LayerNorm parameters
    return 12 * n_embd * n_embd

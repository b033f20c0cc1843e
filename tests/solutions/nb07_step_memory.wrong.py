def train_state_bytes(n_layer, n_embd, vocab_size, block_size):
    C = n_embd
    params = vocab_size * C + block_size * C + n_layer * (12 * C * C + 13 * C) + 2 * C
    # a typical mistake: one moment per parameter, as if AdamW were momentum SGD
    return {"weights": 4 * params, "grads": 4 * params, "optimizer": 4 * params}

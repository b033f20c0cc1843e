def train_state_bytes(n_layer, n_embd, vocab_size, block_size):
    C = n_embd
    # token table (shared with the lm_head), position table, blocks (weights, biases, two layer norms), ln_f
    params = vocab_size * C + block_size * C + n_layer * (12 * C * C + 13 * C) + 2 * C
    return {"weights": 4 * params, "grads": 4 * params, "optimizer": 2 * 4 * params}

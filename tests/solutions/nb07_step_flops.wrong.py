def train_step_flops(n_layer, n_embd, vocab_size, batch, seq_len):
    # a typical mistake: the forward's FLOPs only (2 per parameter and token)
    n = n_layer * 12 * n_embd * n_embd + vocab_size * n_embd
    return 2 * n * batch * seq_len + 4 * n_layer * batch * seq_len * seq_len * n_embd

def train_step_flops(n_layer, n_embd, vocab_size, batch, seq_len):
    # N: the weights that multiply activations (12 C^2 per block, and the tied lm_head V x C)
    n = n_layer * 12 * n_embd * n_embd + vocab_size * n_embd
    tokens = batch * seq_len
    # q.k^T and attention.v: 2 * 2 * T * C per token and layer forward, x3 with the backward
    attention = 3 * 4 * n_layer * batch * seq_len * seq_len * n_embd
    return 6 * n * tokens + attention

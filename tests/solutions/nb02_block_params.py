def block_params(n_embd: int) -> int:
    C = n_embd
    layernorms = 2 * (2 * C)  # gain and shift, twice
    attention = (C * 3 * C + 3 * C) + (C * C + C)  # qkv and output projection, with biases
    mlp = (C * 4 * C + 4 * C) + (4 * C * C + C)  # up and down projection, with biases
    return layernorms + attention + mlp

def kv_cache_size(n_layer: int, n_embd: int, positions: int, batch: int, bytes_per_element: int) -> int:
    # every layer keeps one key and one value vector of n_embd numbers per position, per sequence
    return 2 * n_layer * positions * n_embd * batch * bytes_per_element

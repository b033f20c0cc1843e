def kv_cache_size(n_layer: int, n_embd: int, positions: int, batch: int, bytes_per_element: int) -> int:
    # mistake: counts the keys only, forgetting the values
    return n_layer * positions * n_embd * batch * bytes_per_element

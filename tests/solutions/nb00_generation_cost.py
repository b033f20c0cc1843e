def generation_cost(prompt_tokens: int, answer_tokens: int) -> dict:
    P, A = prompt_tokens, answer_tokens
    # without a cache, run i (i = 0 … A) reads the prompt and the i tokens written so far
    lengths = [P + i for i in range(A + 1)]
    # with a cache, the first run reads the prompt; each later run processes only the newest token,
    # whose query meets the keys of all P + i positions so far (its own included)
    return {
        "positions_without_cache": sum(lengths),
        "positions_with_cache": P + A,
        "scores_without_cache": sum(L * L for L in lengths),  # the whole L × L matrix, masked afterwards
        "scores_with_cache": P * P + sum(P + i for i in range(1, A + 1)),
    }

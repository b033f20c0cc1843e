def generation_cost(prompt_tokens: int, answer_tokens: int) -> dict:
    P, A = prompt_tokens, answer_tokens
    lengths = [P + i for i in range(A + 1)]
    return {
        "positions_without_cache": sum(lengths),
        "positions_with_cache": P + A,
        "scores_without_cache": sum(L * L for L in lengths),
        # mistake: with a cache each new token is compared with itself only, as if there were no past
        "scores_with_cache": P * P + A,
    }

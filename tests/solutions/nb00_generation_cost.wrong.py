def positions_processed(prompt_tokens: int, answer_tokens: int) -> int:
    # mistake: forgets that the sequence grows by one token every run
    return (answer_tokens + 1) * prompt_tokens

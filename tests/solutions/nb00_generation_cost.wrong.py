def positions_processed(prompt: str, answer: str) -> int:
    # mistake: forgets that the sequence grows by one token every step
    return (len(answer) + 1) * (len(prompt) + 2)

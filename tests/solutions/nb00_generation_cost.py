def positions_processed(prompt_tokens: int, answer_tokens: int) -> int:
    steps = answer_tokens + 1  # one run per answer token, then one that writes <eos>
    # run i reads the prompt and the i tokens written so far: the sequence grows by one each run
    return sum(prompt_tokens + i for i in range(steps))

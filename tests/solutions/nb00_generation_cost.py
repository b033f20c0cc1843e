def positions_processed(prompt: str, answer: str) -> int:
    start = len(prompt) + 2  # <bos> prompt <sep>
    steps = len(answer) + 1  # every answer character, then <eos>
    # step i runs the model on start + i positions: the sequence grows by one each step
    return sum(start + i for i in range(steps))

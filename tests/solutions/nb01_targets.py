def answer_targets(ids: list[int]) -> list[int]:
    targets = list(ids[1:])  # position t predicts the token at t + 1
    sep = ids.index(stoi["<sep>"])
    for t in range(sep):  # before <sep>, the next token is still part of the prompt
        targets[t] = -100
    return targets

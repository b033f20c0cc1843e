def answer_targets(ids: list[int]) -> list[int]:
    targets = list(ids[1:])
    sep = ids.index(stoi["<sep>"])
    for t in range(sep + 1):  # mistake: also hides the first answer token, predicted at <sep>
        targets[t] = -100
    return targets

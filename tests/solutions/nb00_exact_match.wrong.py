def exact_match(predictions: list[str], answers: list[str]) -> float:
    # mistake: "contains the answer" is not "is the answer" ("4456" would count for "445")
    correct = sum(answer in prediction for prediction, answer in zip(predictions, answers))
    return correct / len(answers)

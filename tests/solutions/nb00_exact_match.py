def exact_match(predictions: list[str], answers: list[str]) -> float:
    correct = sum(prediction == answer for prediction, answer in zip(predictions, answers))
    return correct / len(answers)

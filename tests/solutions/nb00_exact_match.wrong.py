def accuracy_by_task(prompts: list[str], written: list[str], answers: list[str]) -> dict[str, float]:
    def task(prompt):
        if prompt.startswith("reverse "):
            return "reverse"
        if prompt.startswith("sort "):
            return "sort"
        return "add" if "+" in prompt else "sub"

    right, total = {}, {}
    for prompt, text, answer in zip(prompts, written, answers):
        t = task(prompt)
        total[t] = total.get(t, 0) + 1
        # mistake: compares what the model wrote with the answer, forgetting the template (5440 is 445)
        right[t] = right.get(t, 0) + (text == answer)
    return {t: right[t] / total[t] for t in total}

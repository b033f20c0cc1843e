def accuracy_by_task(prompts: list[str], written: list[str], answers: list[str]) -> dict[str, float]:
    def task(prompt):
        if prompt.startswith("reverse "):
            return "reverse"
        if prompt.startswith("sort "):
            return "sort"
        return "add" if "+" in prompt else "sub"

    def read_back(task_name, text):
        if task_name in ("add", "sub"):  # units first and zero-padded: turn it round, drop the padding
            usual = text[::-1]
            return str(int(usual)) if usual.isdigit() else None
        return text

    right, total = {}, {}
    for prompt, text, answer in zip(prompts, written, answers):
        t = task(prompt)
        total[t] = total.get(t, 0) + 1
        right[t] = right.get(t, 0) + (read_back(t, text) == answer)
    return {t: right[t] / total[t] for t in total}

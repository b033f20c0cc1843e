def leaked_problems(train_prompts: list[str], test_prompts: list[str]) -> set[str]:
    def key(prompt):
        if "+" in prompt:  # a sum is the same problem in either order
            a, b = prompt.split("+")
            return ("add", *sorted((int(a), int(b))))
        return prompt  # differences, reversals and sorts change with the order

    seen = {key(p) for p in train_prompts}
    return {p for p in test_prompts if key(p) in seen}

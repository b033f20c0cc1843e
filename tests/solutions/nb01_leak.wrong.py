def leaked_problems(train_prompts: list[str], test_prompts: list[str]) -> set[str]:
    # mistake: compares the text only, so 5+3 slips into the test set when 3+5 is in training
    return set(test_prompts) & set(train_prompts)

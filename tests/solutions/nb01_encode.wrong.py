def encode_example(prompt: str, answer: str) -> list[int]:
    # mistake: no <eos>, so the model never learns when to stop
    return [stoi["<bos>"]] + [stoi[c] for c in prompt] + [stoi["<sep>"]] + [stoi[c] for c in answer]

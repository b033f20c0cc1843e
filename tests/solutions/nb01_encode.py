def encode_example(prompt: str, answer: str) -> list[int]:
    return [stoi["<bos>"]] + [stoi[c] for c in prompt] + [stoi["<sep>"]] + [stoi[c] for c in answer] + [stoi["<eos>"]]

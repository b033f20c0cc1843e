def encode_example(prompt: str, answer: str) -> list[int]:
    for text in (prompt, answer):
        for position, char in enumerate(text):
            if char not in stoi or len(char) != 1 or char.startswith("<"):
                raise ValueError(f"unknown character {char!r} at position {position} of {text!r}")
    for operator, width in (("+", 4), ("-", 3)):
        left, found, right = prompt.partition(operator)
        if found and left.isdigit() and right.isdigit() and not prompt.startswith(("reverse ", "sort ")):
            prompt = f"{int(left):03d}{operator}{int(right):03d}"  # operands padded to 3 digits
            answer = f"{int(answer):0{width}d}"[::-1]  # units first, 4 digits for a sum, 3 for a difference
            break
    return [stoi["<bos>"], *(stoi[c] for c in prompt), stoi["<sep>"], *(stoi[c] for c in answer), stoi["<eos>"]]

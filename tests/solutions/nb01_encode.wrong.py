def encode_example(prompt: str, answer: str) -> list[int]:
    # mistake: the template is forgotten (407+38 must become 407+038, and 445 must be written 5440);
    # an unknown character raises a bare KeyError that does not say where it is
    return [stoi["<bos>"], *(stoi[c] for c in prompt), stoi["<sep>"], *(stoi[c] for c in answer), stoi["<eos>"]]

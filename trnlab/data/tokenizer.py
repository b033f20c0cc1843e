"""A character-level tokenizer: every character is one token, plus four special tokens.

A training example becomes one sequence

    <bos> 4 0 7 + 3 8 <sep> 4 4 5 <eos>
    └──── prompt ────┘      └ answer ┘

``<bos>`` starts every sequence, ``<sep>`` says "the answer starts here", ``<eos>`` says "the answer
is finished" (generation stops there) and ``<pad>`` fills short sequences up to the batch length.
A character the tokenizer does not know raises an error that names it: silently mapping it to
something else would make the model answer a question the user did not ask.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PAD, BOS, SEP, EOS = "<pad>", "<bos>", "<sep>", "<eos>"
SPECIAL_TOKENS = (PAD, BOS, SEP, EOS)
CHARACTERS = " +-0123456789abcdefghijklmnopqrstuvwxyz"


class UnknownCharacterError(ValueError):
    """A character outside the tokenizer's vocabulary."""


@dataclass(frozen=True)
class CharTokenizer:
    characters: str = CHARACTERS
    vocab: tuple[str, ...] = field(init=False)
    stoi: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        vocab = SPECIAL_TOKENS + tuple(self.characters)
        object.__setattr__(self, "vocab", vocab)
        object.__setattr__(self, "stoi", {token: i for i, token in enumerate(vocab)})

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    @property
    def pad_id(self) -> int:
        return self.stoi[PAD]

    @property
    def bos_id(self) -> int:
        return self.stoi[BOS]

    @property
    def sep_id(self) -> int:
        return self.stoi[SEP]

    @property
    def eos_id(self) -> int:
        return self.stoi[EOS]

    def encode(self, text: str) -> list[int]:
        """Plain text → token ids, one per character (no special tokens)."""
        ids = []
        for position, char in enumerate(text):
            if char not in self.stoi or char in SPECIAL_TOKENS:
                raise UnknownCharacterError(
                    f"unknown character {char!r} at position {position} of {text!r}: "
                    f"the tokenizer knows only {self.characters!r}"
                )
            ids.append(self.stoi[char])
        return ids

    def decode(self, ids: list[int]) -> str:
        """Token ids → text; special tokens are written as their names, e.g. ``<sep>``."""
        for token_id in ids:
            if not 0 <= int(token_id) < self.vocab_size:
                raise ValueError(f"token id {int(token_id)} is outside the vocabulary of {self.vocab_size} tokens")
        return "".join(self.vocab[int(token_id)] for token_id in ids)

    def encode_prompt(self, prompt: str) -> list[int]:
        """What the model sees when asked a question: ``<bos> prompt <sep>``."""
        return [self.bos_id, *self.encode(prompt), self.sep_id]

    def encode_example(self, prompt: str, answer: str) -> list[int]:
        """A whole training example: ``<bos> prompt <sep> answer <eos>``."""
        return [*self.encode_prompt(prompt), *self.encode(answer), self.eos_id]

    def decode_answer(self, ids: list[int]) -> str:
        """The answer text in generated ids: everything after ``<sep>`` and before ``<eos>``."""
        ids = [int(i) for i in ids]
        if self.sep_id in ids:
            ids = ids[ids.index(self.sep_id) + 1 :]
        if self.eos_id in ids:
            ids = ids[: ids.index(self.eos_id)]
        return self.decode([i for i in ids if i not in (self.pad_id, self.bos_id)])

    def to_json(self) -> dict:
        return {"characters": self.characters, "special_tokens": list(SPECIAL_TOKENS)}

    @classmethod
    def from_json(cls, data: dict) -> "CharTokenizer":
        if tuple(data.get("special_tokens", SPECIAL_TOKENS)) != SPECIAL_TOKENS:
            raise ValueError(f"special tokens {data['special_tokens']} differ from this version's {list(SPECIAL_TOKENS)}")
        return cls(characters=data["characters"])

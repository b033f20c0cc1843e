"""Batches for next-token training.

A batch is two integer tensors of shape (B, T): the inputs ``x`` and the targets ``y``, where
``y[b, t]`` is the token that follows ``x[b, t]`` (the same sequence shifted left by one).
Targets the loss must skip hold ``IGNORE_INDEX`` (PyTorch's default for ``cross_entropy``):
the padding, and — with ``answer_only=True`` — every prompt token, so the model is graded only on
what it must produce (the answer and its ``<eos>``), not on guessing the user's question.
Examples are encoded in the model's template (`model_prompt`, `written_answer` in `tasks`).
"""

from __future__ import annotations

import torch

from trnlab.data.tasks import Example, model_prompt, written_answer
from trnlab.data.tokenizer import CharTokenizer

IGNORE_INDEX = -100


def example_targets(ids: list[int], sep_id: int, answer_only: bool = True) -> tuple[list[int], list[int]]:
    """One encoded example → (inputs, targets), both ``len(ids) - 1`` long."""
    inputs, targets = ids[:-1], list(ids[1:])
    if answer_only:
        answer_start = ids.index(sep_id) + 1  # index in `ids` of the first answer token
        # targets[t] is ids[t + 1]: it is a prompt token while t + 1 < answer_start
        for t in range(answer_start - 1):
            targets[t] = IGNORE_INDEX
    return inputs, targets


def encode_examples(
    examples: list[Example], tokenizer: CharTokenizer, answer_only: bool = True, length: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """All examples → padded (N, T) inputs and targets; T is the longest example unless given."""
    pairs = [
        example_targets(tokenizer.encode_example(model_prompt(e.task, e.prompt), written_answer(e.task, e.answer)),
                        tokenizer.sep_id, answer_only)
        for e in examples
    ]
    longest = max(len(inputs) for inputs, _ in pairs)
    length = longest if length is None else length
    if longest > length:
        raise ValueError(f"an example needs {longest} positions, more than the length {length} asked for")
    x = torch.full((len(pairs), length), tokenizer.pad_id, dtype=torch.long)  # (N, T)
    y = torch.full((len(pairs), length), IGNORE_INDEX, dtype=torch.long)  # (N, T)
    for row, (inputs, targets) in enumerate(pairs):
        x[row, : len(inputs)] = torch.tensor(inputs)
        y[row, : len(targets)] = torch.tensor(targets)
    return x, y


class BatchSampler:
    """Random batches drawn from an encoded split with its own seeded generator (reproducible)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, batch_size: int, seed: int = 0):
        self.x, self.y, self.batch_size = x, y, batch_size
        self.generator = torch.Generator().manual_seed(seed)

    def __iter__(self):
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        rows = torch.randint(len(self.x), (self.batch_size,), generator=self.generator)
        x, y = self.x[rows], self.y[rows]  # (B, T)
        # Trim columns that are padding in every row: shorter batches, less work, same loss.
        used = int((y != IGNORE_INDEX).any(dim=0).nonzero().max()) + 1
        return x[:, :used], y[:, :used]

"""Asking the model: greedy and sampled generation, and exact-match accuracy.

Generation feeds ``<bos> prompt <sep>`` to the model, takes the logits at the last position,
picks the next token — the most likely one (greedy, ``temperature=0``) or a random draw from the
softmax at a temperature — appends it and repeats until ``<eos>``. There is no KV cache here: each
step runs the whole sequence again (the serving stage of the course adds the cache).
The model reads and writes number problems in a template (`trnlab.data.tasks.model_prompt`,
`written_answer`: zero-padded, answers units first); `ask` returns answers in the usual form.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from trnlab.data.tasks import Example, model_prompt, read_answer, task_of
from trnlab.data.tokenizer import CharTokenizer
from trnlab.model.gpt import GPT


class PromptTooLongError(ValueError):
    """A prompt that does not fit in the model's context."""


def check_prompt_fits(model: GPT, prompt_ids: list[int], prompt: str) -> None:
    block_size = model.config.block_size
    if len(prompt_ids) >= block_size:  # at least one position must be left for the answer
        raise PromptTooLongError(
            f"prompt too long for the context: {prompt!r} is {len(prompt_ids)} tokens with <bos> and <sep>, "
            f"the model's context is {block_size} tokens (prompt at most {block_size - 1 - 2} characters)"
        )


@torch.no_grad()
def generate_ids(
    model: GPT,
    idx: torch.Tensor,
    max_new_tokens: int,
    eos_id: int,
    temperature: float = 0.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Extend each row of idx (B, T) by up to `max_new_tokens` tokens; stops when every row has
    produced `eos_id` or the context is full. Returns (B, T + generated)."""
    was_training = model.training
    model.eval()
    finished = torch.zeros(idx.size(0), dtype=torch.bool)
    for _ in range(max_new_tokens):
        if idx.size(1) >= model.config.block_size + 1 or bool(finished.all()):
            break
        context = idx[:, -model.config.block_size :]  # (B, ≤ block_size)
        logits, _ = model(context)
        logits = logits[:, -1, :]  # (B, vocab): only the last position predicts the next token
        if temperature == 0.0:
            next_id = logits.argmax(dim=-1, keepdim=True)  # (B, 1)
        else:
            logits = logits / temperature
            if top_k is not None:
                kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            next_id = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)  # (B, 1)
        idx = torch.cat([idx, next_id], dim=1)
        finished |= next_id.squeeze(1) == eos_id
        if idx.size(1) > model.config.block_size:
            break
    model.train(was_training)
    return idx


def ask(
    model: GPT,
    tokenizer: CharTokenizer,
    prompt: str,
    temperature: float = 0.0,
    top_k: int | None = None,
    seed: int | None = None,
) -> str:
    """The model's answer to one prompt (greedy unless a temperature > 0 is given)."""
    task = task_of(prompt)
    prompt_ids = tokenizer.encode_prompt(model_prompt(task, prompt))
    check_prompt_fits(model, prompt_ids, prompt)
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    idx = torch.tensor([prompt_ids], dtype=torch.long)  # (1, T)
    out = generate_ids(model, idx, model.config.block_size, tokenizer.eos_id, temperature, top_k, generator)
    written = tokenizer.decode_answer(out[0, len(prompt_ids) :].tolist())
    return read_answer(task, written)  # the model's template back to the usual form


def ask_many(model: GPT, tokenizer: CharTokenizer, prompts: list[str], batch_size: int = 512) -> list[str]:
    """Greedy answers to many prompts, batched: prompts of the same length run together."""
    by_length: dict[int, list[int]] = defaultdict(list)
    encoded = []
    for i, prompt in enumerate(prompts):
        ids = tokenizer.encode_prompt(model_prompt(task_of(prompt), prompt))
        check_prompt_fits(model, ids, prompt)
        encoded.append(ids)
        by_length[len(ids)].append(i)
    answers = [""] * len(prompts)
    for length, rows in by_length.items():
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            idx = torch.tensor([encoded[i] for i in chunk], dtype=torch.long)  # (B, length)
            out = generate_ids(model, idx, model.config.block_size, tokenizer.eos_id)
            for row, i in enumerate(chunk):
                written = tokenizer.decode_answer(out[row, length:].tolist())
                answers[i] = read_answer(task_of(prompts[i]), written)
    return answers


def exact_match(predictions: list[str], answers: list[str]) -> float:
    """Fraction of predictions identical to their answer, character for character."""
    if len(predictions) != len(answers):
        raise ValueError(f"{len(predictions)} predictions for {len(answers)} answers")
    if not answers:
        raise ValueError("exact match of an empty list is undefined")
    return sum(p == a for p, a in zip(predictions, answers)) / len(answers)


def accuracy_by_task(model: GPT, tokenizer: CharTokenizer, examples: list[Example]) -> dict[str, float]:
    """Exact-match accuracy of greedy answers, per task, in the order tasks first appear."""
    predictions = ask_many(model, tokenizer, [e.prompt for e in examples])
    grouped: dict[str, tuple[list[str], list[str]]] = {}
    for example, prediction in zip(examples, predictions):
        preds, golds = grouped.setdefault(example.task, ([], []))
        preds.append(prediction)
        golds.append(example.answer)
    return {task: exact_match(preds, golds) for task, (preds, golds) in grouped.items()}


@torch.no_grad()
def generation_steps(model: GPT, tokenizer: CharTokenizer, prompt: str) -> list[dict]:
    """Greedy generation one step at a time, for showing: at each step the sequence the model
    reads, the token it picks and the probability it gave that token."""
    ids = tokenizer.encode_prompt(model_prompt(task_of(prompt), prompt))
    check_prompt_fits(model, ids, prompt)
    steps = []
    while len(ids) <= model.config.block_size:
        logits, _ = model(torch.tensor([ids]))
        probabilities = torch.softmax(logits[0, -1], dim=-1)  # (vocab,)
        next_id = int(probabilities.argmax())
        steps.append({"reads": tokenizer.decode(ids), "positions": len(ids),
                      "next": tokenizer.vocab[next_id], "probability": float(probabilities[next_id])})
        ids.append(next_id)
        if next_id == tokenizer.eos_id:
            break
    return steps

"""Checks for notebook 00, the whole chain in one run."""

from __future__ import annotations

import torch

from trnlab.course.exercises import CheckFailed, exercise
from trnlab.model import ask, exact_match, load_checkpoint


@exercise("nb00_exact_match", notebook="00_the_whole_chain", points=2, answer="exact_match",
          title="Exact-match accuracy")
def check_exact_match(student_exact_match) -> None:
    cases = [
        (["445", "17", "olleh"], ["445", "17", "olleh"]),
        (["4456", "17"], ["445", "17"]),  # a longer answer that starts right is still wrong
        (["44", "17"], ["445", "17"]),  # so is a shorter one
        ([" 17", "ab"], ["17", "ab"]),  # a stray space is a different answer
        (["1", "2", "3", "4"], ["1", "0", "0", "0"]),
        (["0"], ["0"]),
    ]
    for predictions, answers in cases:
        expected = exact_match(predictions, answers)
        got = student_exact_match(list(predictions), list(answers))
        if not isinstance(got, (int, float)) or abs(float(got) - expected) > 1e-9:
            raise CheckFailed(
                f"expected {expected:.4g}, got {got!r} for predictions={predictions}, answers={answers} "
                "(exact match counts a prediction only if it is identical to the answer, character for character)"
            )


def _positions_the_model_processes(model, tokenizer, prompt: str) -> tuple[str, int]:
    """Ask the real model and count, with a forward hook, how many positions it runs."""
    positions = []
    hook = model.register_forward_pre_hook(lambda module, args: positions.append(args[0].shape[1]))
    try:
        answer = ask(model, tokenizer, prompt)
    finally:
        hook.remove()
    return answer, sum(positions)


@exercise("nb00_generation_cost", notebook="00_the_whole_chain", points=2, answer="positions_processed",
          title="What one answer costs without a KV cache")
def check_positions_processed(student_positions) -> None:
    model, tokenizer = load_checkpoint()
    for prompt in ["12+5", "407+38", "reverse kite", "sort 52819", "999-1", "0+0"]:
        answer, expected = _positions_the_model_processes(model, tokenizer, prompt)
        got = student_positions(prompt, answer)
        if got != expected:
            raise CheckFailed(
                f"expected {expected}, got {got!r} for prompt={prompt!r}, answer={answer!r} "
                f"(the model runs once per generated token, answer and <eos>, each time on the whole sequence so far, "
                f"which starts as <bos> prompt <sep>)"
            )

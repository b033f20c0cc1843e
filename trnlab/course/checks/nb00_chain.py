"""Checks for notebook 00, the whole chain in one run."""

from __future__ import annotations

from trnlab.course.exercises import CheckFailed, exercise
from trnlab.model import ask, exact_match, generation_steps, load_checkpoint


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


def _positions_the_model_processes(model, tokenizer, prompt: str) -> tuple[int, int, int]:
    """Ask the real model, counting with a forward hook how many positions it runs on; return
    (tokens it reads before answering, answer tokens it writes before <eos>, positions processed)."""
    positions = []
    hook = model.register_forward_pre_hook(lambda module, args: positions.append(args[0].shape[1]))
    try:
        ask(model, tokenizer, prompt)
    finally:
        hook.remove()
    steps = generation_steps(model, tokenizer, prompt)
    return steps[0]["positions"], len(steps) - 1, sum(positions)


@exercise("nb00_generation_cost", notebook="00_the_whole_chain", points=2, answer="positions_processed",
          title="What one answer costs without a KV cache")
def check_positions_processed(student_positions) -> None:
    model, tokenizer = load_checkpoint()
    for prompt in ["12+5", "407+38", "reverse kite", "sort 52819", "reverse ab", "sort 000"]:
        prompt_tokens, answer_tokens, expected = _positions_the_model_processes(model, tokenizer, prompt)
        got = student_positions(prompt_tokens, answer_tokens)
        if got != expected:
            raise CheckFailed(
                f"expected {expected}, got {got!r} for prompt_tokens={prompt_tokens}, answer_tokens={answer_tokens} "
                f"(the model runs once per answer token and once more for <eos>, each time on the whole sequence "
                f"so far, which starts with the prompt_tokens)"
            )

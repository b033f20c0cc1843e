"""Checks for notebook 01, the training data."""

from __future__ import annotations

from trnlab.course.exercises import CheckFailed, exercise
from trnlab.data import CharTokenizer, example_targets, problem_key

CASES = [("407+038", "5440"), ("000+000", "0000"), ("reverse kite", "etik"), ("sort 52819", "12589"), ("999-999", "000")]


@exercise("nb01_encode", notebook="01_training_data", points=2, answer="encode_example",
          title="Encode a training example")
def check_encode_example(student_encode) -> None:
    tokenizer = CharTokenizer()
    for prompt, answer in CASES:
        expected = tokenizer.encode_example(prompt, answer)
        got = student_encode(prompt, answer)
        if list(got) != expected:
            raise CheckFailed(
                f"expected {expected} ({tokenizer.decode(expected)}), got {list(got)} for prompt={prompt!r}, "
                f"answer={answer!r} (layout: <bos> prompt <sep> answer <eos>, one id per character from stoi)"
            )


@exercise("nb01_targets", notebook="01_training_data", points=2, answer="answer_targets",
          title="Targets graded on the answer only")
def check_answer_targets(student_targets) -> None:
    tokenizer = CharTokenizer()
    for prompt, answer in CASES:
        ids = tokenizer.encode_example(prompt, answer)
        _, expected = example_targets(ids, tokenizer.sep_id, answer_only=True)
        got = student_targets(list(ids))
        if list(got) != expected:
            raise CheckFailed(
                f"expected {expected}, got {list(got)} for ids {ids} ({tokenizer.decode(ids)}): targets are the ids "
                "shifted left by one, with -100 wherever the target is still part of the prompt; the prediction "
                "made at <sep> (the first answer token) is graded"
            )


LEAK_CASES = [
    (["3+5", "reverse kite", "sort 321"], ["5+3", "3+5", "reverse etik", "sort 123", "sort 321"]),
    (["12+7", "40-4"], ["7+12", "4-40", "40-4", "12+70"]),
    (["reverse ab", "reverse ba"], ["reverse ab", "reverse abc"]),
    (["1+1"], ["2+0", "0+2"]),
    ([], ["1+2"]),
]


@exercise("nb01_leak", notebook="01_training_data", points=2, answer="leaked_problems",
          title="Find test problems that leaked into training")
def check_leaked_problems(student_leaked) -> None:
    for train_prompts, test_prompts in LEAK_CASES:
        train_keys = {problem_key(p) for p in train_prompts}
        expected = {p for p in test_prompts if problem_key(p) in train_keys}
        got = student_leaked(list(train_prompts), list(test_prompts))
        if set(got) != expected:
            raise CheckFailed(
                f"expected {sorted(expected)}, got {sorted(got)} for train={train_prompts}, test={test_prompts} "
                "(a sum is the same problem in either order; a difference, a reversal or a sort is not: "
                "40-4 and 4-40 are different questions)"
            )

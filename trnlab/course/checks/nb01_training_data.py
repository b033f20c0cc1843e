"""Checks for notebook 01, the training data (cases / run beside the student / judge elsewhere)."""

from __future__ import annotations

from trnlab.course import plain
from trnlab.course.errors import CheckFailed
from trnlab.course.exercises import exercise
from trnlab.data import CharTokenizer, example_targets, problem_key
from trnlab.data.tasks import model_prompt, task_of, written_answer

NOTEBOOK = "01_training_data"
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _word(rng, low: int = 3, high: int = 7) -> str:
    return "".join(LETTERS[int(i)] for i in rng.integers(0, 26, int(rng.integers(low, high + 1))))


def _digits(rng, low: int = 3, high: int = 6) -> str:
    return "".join(str(int(d)) for d in rng.integers(0, 10, int(rng.integers(low, high + 1))))


def _problem(rng) -> tuple[str, str]:
    """A problem as a user types it, with its right answer."""
    task = int(rng.integers(0, 4))
    a, b = (int(rng.integers(0, 10 ** int(rng.integers(1, 4)))) for _ in range(2))
    if task == 0:
        return f"{a}+{b}", str(a + b)
    if task == 1:
        a, b = max(a, b), min(a, b)
        return f"{a}-{b}", str(a - b)
    if task == 2:
        word = _word(rng)
        return f"reverse {word}", word[::-1]
    digits = _digits(rng)
    return f"sort {digits}", "".join(sorted(digits))


# -- 1. leaked problems -----------------------------------------------------------------------------


def _leak_case(rng) -> list[list[str]]:
    train = [_problem(rng)[0] for _ in range(int(rng.integers(3, 9)))]
    test = [_problem(rng)[0] for _ in range(int(rng.integers(2, 6)))]
    for prompt in train[: int(rng.integers(1, 4))]:  # the traps: the same problem in another form
        if "+" in prompt:
            left, right = prompt.split("+")
            test.append(f"{right}+{left}")  # a sum in the other order: the same problem
        elif "-" in prompt:
            left, right = prompt.split("-")
            test.append(f"{right}-{left}")  # not the same problem
        else:
            command, _, argument = prompt.partition(" ")
            test.append(f"{command} {argument[::-1]}" if rng.integers(0, 2) else prompt)
    order = rng.permutation(len(test))
    return [train, [test[int(i)] for i in order]]


@exercise("nb01_leak", notebook=NOTEBOOK, points=2, answer="leaked_problems",
          title="Find test problems that leaked into training",
          asks_for=("trnlab.data.tasks.problem_key", "trnlab.data.tasks.unique_problems", "trnlab.data.tasks.make_corpus"))
class LeakedProblems:
    def cases(rng):
        fixed = [[["3+5", "reverse kite", "sort 321"], ["5+3", "3+5", "reverse etik", "sort 123", "sort 321"]],
                 [["12+7", "40-4"], ["7+12", "4-40", "40-4", "12+70"]], [[], ["1+2"]]]
        return fixed + [_leak_case(rng) for _ in range(5)]

    def run(leaked_problems, case):
        train, test = case
        return plain.texts(leaked_problems(list(train), list(test)), "leaked_problems' result")

    def judge(case, got):
        train, test = case
        train_keys = {problem_key(p) for p in train}
        expected = sorted({p for p in test if problem_key(p) in train_keys})
        if sorted(set(got)) != expected:
            raise CheckFailed(f"expected {expected}, got {sorted(set(got))} for train={train}, test={test} (a sum is the "
                              "same problem in either order; a difference, a reversal or a sort is not: 40-4 and 4-40 "
                              "are different questions)")


# -- 2. encode a training example ---------------------------------------------------------------------


def _unknown_case(rng) -> list:
    prompt, answer = _problem(rng)
    odd = "*/.,<>?!=ÉéXQ_#"[int(rng.integers(0, 15))]
    if rng.integers(0, 3) == 0:  # in the answer
        where = int(rng.integers(0, len(answer) + 1))
        return [prompt, answer[:where] + odd + answer[where:]]
    where = int(rng.integers(0, len(prompt) + 1))
    return [prompt[:where] + odd + prompt[where:], answer]


@exercise("nb01_encode", notebook=NOTEBOOK, points=3, answer="encode_example",
          title="Encode a training example, template and unknown characters included",
          asks_for=("trnlab.data.tokenizer.CharTokenizer", "trnlab.data.tasks.model_prompt",
                    "trnlab.data.tasks.written_answer", "trnlab.data.batches.encode_examples"))
class EncodeExample:
    def cases(rng):
        fixed = [["407+38", "445"], ["12+5", "17"], ["512-87", "425"], ["reverse kite", "etik"], ["sort 07", "07"],
                 ["0+0", "0"], ["999-999", "0"], ["12*3", "36"], ["reverse Kite", "etiK"]]
        return fixed + [list(_problem(rng)) for _ in range(4)] + [_unknown_case(rng) for _ in range(3)]

    def run(encode_example, case):
        try:
            ids = encode_example(*case)
        except ValueError as error:  # UnknownCharacterError is a ValueError
            return {"raised": type(error).__name__, "message": plain.text(str(error))}
        except KeyError as error:
            return {"raised": "KeyError", "message": str(error)}
        return {"ids": plain.integers(ids, "encode_example's result")}

    def judge(case, got):
        prompt, answer = case
        tokenizer = CharTokenizer()
        where = f"for prompt={prompt!r}, answer={answer!r}"
        unknown = [(text, i, c) for text in (prompt, answer) for i, c in enumerate(text) if c not in tokenizer.characters]
        if unknown:
            text, position, char = unknown[0]
            if "raised" not in got or got["raised"] == "KeyError":
                seen = f"a KeyError ({got['message']})" if "raised" in got else f"ids {got['ids']}"
                raise CheckFailed(f"expected a ValueError that names the unknown character {char!r} and its position "
                                  f"{position}, got {seen} {where}")
            message = got["message"]
            if char not in message or str(position) not in message:
                raise CheckFailed(f"expected the error message to name the unknown character {char!r} and its position "
                                  f"{position} in {text!r}, got {message!r} {where}")
            return
        task = task_of(prompt)
        expected = tokenizer.encode_example(model_prompt(task, prompt), written_answer(task, answer))
        if "raised" in got:
            raise CheckFailed(f"expected ids {expected}, but your function raised {got['raised']}: {got['message']} {where}")
        if got["ids"] != expected:
            try:
                shown = tokenizer.decode(got["ids"])
            except (ValueError, IndexError):
                shown = "ids outside the vocabulary"
            raise CheckFailed(f"expected {expected} ({tokenizer.decode(expected)}), got {got['ids']} ({shown}) {where} "
                              "(<bos> prompt <sep> answer <eos>, with the template applied: operands of a sum or a "
                              "difference padded to 3 digits, the answer units first, 4 digits for a sum, 3 for a difference)")


# -- 3. targets on the answer only ---------------------------------------------------------------------


@exercise("nb01_targets", notebook=NOTEBOOK, points=2, answer="answer_targets",
          title="Targets graded on the answer only",
          asks_for=("trnlab.data.batches.example_targets", "trnlab.data.batches.encode_examples",
                    "trnlab.data.batches.BatchSampler"))
class AnswerTargets:
    def cases(rng):
        tokenizer = CharTokenizer()
        problems = [("407+38", "445"), ("0+0", "0"), *(_problem(rng) for _ in range(5))]
        return [tokenizer.encode_example(model_prompt(task_of(p), p), written_answer(task_of(p), a)) for p, a in problems]

    def run(answer_targets, ids):
        return plain.integers(answer_targets(list(ids)), "answer_targets' result")

    def judge(ids, got):
        tokenizer = CharTokenizer()
        _, expected = example_targets(ids, tokenizer.sep_id, answer_only=True)
        if got != expected:
            raise CheckFailed(
                f"expected {expected}, got {got} for ids {ids} ({tokenizer.decode(ids)}): targets are the ids "
                "shifted left by one, with -100 wherever the target is still part of the prompt; the prediction "
                "made at <sep> (the first answer token) is graded")

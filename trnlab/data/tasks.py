"""The synthetic "assistant" corpus: prompt → answer pairs for four small tasks.

Every example is a question a user could type and the one right answer:

    task      prompt          answer
    add       "407+38"        "445"
    sub       "512-87"        "425"       (never negative: the first number is the larger)
    reverse   "reverse kite"  "etik"      (random lowercase "words", 3–7 letters)
    sort      "sort 52819"    "12589"     (3–6 digits)

The model does not see a number problem exactly as the user typed it. Like the chat template of a
real assistant, a fixed *template* turns it into the model's text (`model_prompt`, `written_answer`):

    user     "407+38"  → "445"
    model    "407+038" → "5440"

Operands are zero-padded to three digits, so every digit of a column sits at the same position in
every problem, and the answer is written **units first** (padded to 4 digits for a sum, 3 for a
difference) — the way column addition goes on paper: each digit then depends only on its column and
the carry from the digit just written, never on a carry not computed yet. A small transformer learns
addition far faster this way (Lee et al., "Teaching Arithmetic to Small Transformers", 2023). The
files and everything a user sees keep the usual form; `read_answer` turns the model's text back.

Each task draws problems from its own seeded random generator, drops repeats (`problem_key`: a
sum is the same problem whatever its order, so ``3+5`` and ``5+3`` count once), and deals the unique
problems out in order: the first ``test`` to the test split, the next ``val`` to validation, the
rest to training. No problem is in two splits, and the same seed always gives the same files.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Hashable

TASKS = ("add", "sub", "reverse", "sort")
SPLITS = ("train", "val", "test")

MAX_OPERAND_DIGITS = 3
WORD_LETTERS = (3, 7)
SORT_DIGITS = (3, 6)


@dataclass(frozen=True)
class Example:
    task: str
    prompt: str
    answer: str


NUMBER_TASKS = ("add", "sub")
ANSWER_DIGITS = {"add": MAX_OPERAND_DIGITS + 1, "sub": MAX_OPERAND_DIGITS}


def model_prompt(task: str | None, prompt: str) -> str:
    """The prompt as the model reads it: operands of a number task zero-padded to 3 digits."""
    if task in NUMBER_TASKS:
        operator = "+" if task == "add" else "-"
        left, _, right = prompt.partition(operator)
        if left.isdigit() and right.isdigit():
            return f"{int(left):0{MAX_OPERAND_DIGITS}d}{operator}{int(right):0{MAX_OPERAND_DIGITS}d}"
    return prompt  # anything else is read as typed


def written_answer(task: str, answer: str) -> str:
    """The answer as the model writes it: numbers zero-padded and units first; others unchanged."""
    if task in NUMBER_TASKS:
        return f"{int(answer):0{ANSWER_DIGITS[task]}d}"[::-1]
    return answer


def read_answer(task: str | None, written: str) -> str:
    """The model's written answer in the usual form (undoes `written_answer`)."""
    if task in NUMBER_TASKS:
        usual_order = written[::-1]
        return str(int(usual_order)) if usual_order.isdigit() else usual_order
    return written


@dataclass(frozen=True)
class CorpusConfig:
    seed: int = 1234
    train_per_task: int = 8000
    val_per_task: int = 250
    test_per_task: int = 500


def _number(rng: random.Random) -> int:
    # Pick the digit count first, so 1- and 2-digit numbers are not drowned out by 3-digit ones.
    digits = rng.randint(1, MAX_OPERAND_DIGITS)
    low = 0 if digits == 1 else 10 ** (digits - 1)
    return rng.randint(low, 10**digits - 1)


def draw_add(rng: random.Random) -> Example:
    a, b = _number(rng), _number(rng)
    return Example("add", f"{a}+{b}", str(a + b))


def draw_sub(rng: random.Random) -> Example:
    a, b = _number(rng), _number(rng)
    a, b = max(a, b), min(a, b)
    return Example("sub", f"{a}-{b}", str(a - b))


def draw_reverse(rng: random.Random) -> Example:
    word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(*WORD_LETTERS)))
    return Example("reverse", f"reverse {word}", word[::-1])


def draw_sort(rng: random.Random) -> Example:
    digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(*SORT_DIGITS)))
    return Example("sort", f"sort {digits}", "".join(sorted(digits)))


def problem_key(prompt: str) -> Hashable:
    """What makes two prompts the same problem: ``3+5`` and ``5+3`` are one addition."""
    task = task_of(prompt)
    if task == "add":
        a, b = (int(n) for n in prompt.split("+"))
        return ("add", min(a, b), max(a, b))
    return (task, prompt)


DRAW: dict[str, Callable[[random.Random], Example]] = {
    "add": draw_add,
    "sub": draw_sub,
    "reverse": draw_reverse,
    "sort": draw_sort,
}


def solve(task: str, prompt: str) -> str:
    """The right answer to a prompt of `task`, computed directly (used to check the corpus)."""
    if task == "add":
        a, b = prompt.split("+")
        return str(int(a) + int(b))
    if task == "sub":
        a, b = prompt.split("-")
        return str(int(a) - int(b))
    if task == "reverse":
        return prompt.removeprefix("reverse ")[::-1]
    if task == "sort":
        return "".join(sorted(prompt.removeprefix("sort ")))
    raise ValueError(f"unknown task {task!r}; tasks are {', '.join(TASKS)}")


def task_of(prompt: str) -> str | None:
    """Which task a prompt belongs to, from its shape (None if it matches none)."""
    if prompt.startswith("reverse "):
        return "reverse"
    if prompt.startswith("sort "):
        return "sort"
    if "+" in prompt:
        return "add"
    if "-" in prompt:
        return "sub"
    return None


def unique_problems(task: str, count: int, seed: int) -> list[Example]:
    """`count` distinct problems of `task`, always the same ones for the same seed."""
    rng = random.Random(f"{seed}-{task}")  # a str seed is hashed with SHA-512: stable across runs
    seen: set[Hashable] = set()
    examples: list[Example] = []
    attempts = 0
    while len(examples) < count:
        attempts += 1
        if attempts > 50 * count:
            raise RuntimeError(f"task {task!r} ran out of distinct problems after {len(examples)} of {count}")
        example = DRAW[task](rng)
        key = problem_key(example.prompt)
        if key not in seen:
            seen.add(key)
            examples.append(example)
    return examples


def make_corpus(config: CorpusConfig = CorpusConfig()) -> dict[str, list[Example]]:
    """The three splits: {"train": [...], "val": [...], "test": [...]} with tasks interleaved."""
    splits: dict[str, list[Example]] = {split: [] for split in SPLITS}
    for task in TASKS:
        total = config.test_per_task + config.val_per_task + config.train_per_task
        problems = unique_problems(task, total, config.seed)
        test_end = config.test_per_task
        val_end = test_end + config.val_per_task
        splits["test"] += problems[:test_end]
        splits["val"] += problems[test_end:val_end]
        splits["train"] += problems[val_end:]
    return splits

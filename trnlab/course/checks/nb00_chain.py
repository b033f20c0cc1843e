"""Checks for notebook 00, the whole chain in one run.

Each checker: ``cases`` (drawn from the check's seed), ``run`` (beside the student's code: call the
answer, keep plain data), ``judge`` (in the grader or the oracle: the expected value, the hint).
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch

from trnlab.course import plain
from trnlab.course.errors import CheckFailed
from trnlab.course.exercises import exercise
from trnlab.data.tasks import read_answer, task_of, written_answer
from trnlab.model import exact_match, load_checkpoint

NOTEBOOK = "00_the_whole_chain"
COST_KEYS = ("positions_without_cache", "positions_with_cache", "scores_without_cache", "scores_with_cache")


@lru_cache(maxsize=1)
def _model():
    return load_checkpoint()


@torch.no_grad()
def measured_cost_without_cache(prompt_tokens: int, answer_tokens: int) -> tuple[int, int]:
    """Run the real model as greedy generation does without a cache — once on the prompt, then once
    per token written, each time on the whole sequence — and count with forward hooks the positions
    it runs on and the attention scores one head of one layer computes."""
    model, tokenizer = _model()
    positions, scores = [], []  # (callers that judge in parallel threads serialise: kernel_run._JUDGE_LOCK)
    hooks = [model.register_forward_pre_hook(lambda module, args: positions.append(args[0].shape[1])),
             model.blocks[0].attn.register_forward_hook(lambda module, args, out: scores.append(args[0].shape[1] ** 2))]
    try:
        ids = [tokenizer.bos_id] * prompt_tokens
        for _ in range(answer_tokens + 1):  # one run per answer token, one more that writes <eos>
            model(torch.tensor([ids]))
            ids.append(tokenizer.stoi["0"])
    finally:
        for hook in hooks:
            hook.remove()
    return sum(positions), sum(scores)


def cost_with_cache(prompt_tokens: int, answer_tokens: int) -> tuple[int, int]:
    """With a KV cache: one run over the prompt, then each run processes only the newest token,
    whose query meets the keys of every position so far (its own included)."""
    P, A = prompt_tokens, answer_tokens
    return P + A, P * P + sum(P + i for i in range(1, A + 1))


# No asks_for: the package has no function that counts these (the judge measures them on the real
# model with hooks); running the model with hooks is itself a fair way to answer.
@exercise("nb00_generation_cost", notebook=NOTEBOOK, points=3, answer="generation_cost",
          title="What one answer costs, with and without a KV cache")
class GenerationCost:
    def cases(rng):
        # the committed model reads at most 32 positions: prompt + answer + <eos> stay within that
        drawn = [(int(rng.integers(4, 14)), int(rng.integers(1, 8))) for _ in range(4)]
        return [[9, 4], [5, 0], *map(list, drawn)]

    def run(generation_cost, case):
        got = plain.mapping(generation_cost(*case), "generation_cost's result")
        if sorted(got) != sorted(COST_KEYS):
            raise CheckFailed(f"expected a dict with the keys {', '.join(COST_KEYS)}, got keys {sorted(map(str, got))} "
                              f"for prompt_tokens={case[0]}, answer_tokens={case[1]}")
        return {key: plain.integer(got[key], key) for key in COST_KEYS}

    def judge(case, got):
        P, A = case
        (positions, scores), (cached_positions, cached_scores) = measured_cost_without_cache(P, A), cost_with_cache(P, A)
        expected = {"positions_without_cache": positions, "positions_with_cache": cached_positions,
                    "scores_without_cache": scores, "scores_with_cache": cached_scores}
        for key in COST_KEYS:
            if got[key] != expected[key]:
                why = {
                    "positions_without_cache": "one run per answer token plus one for <eos>, each on the whole "
                                               "sequence so far, which starts with the prompt_tokens",
                    "positions_with_cache": "the first run reads the prompt; every later run processes only the "
                                            "token written last",
                    "scores_without_cache": "a run on L positions computes the whole L × L score matrix "
                                            "(the mask is applied afterwards)",
                    "scores_with_cache": "the first run computes prompt_tokens × prompt_tokens scores; a later run "
                                         "compares its one query with the keys of every position so far, its own included",
                }[key]
                raise CheckFailed(f"{key}: expected {expected[key]}, got {got[key]} for prompt_tokens={P}, "
                                  f"answer_tokens={A} ({why})")


_WORD_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _draw_scored_problems(rng, count: int) -> tuple[list[str], list[str], list[str]]:
    """Prompts as a user types them, what a model wrote (in its template, right or with a typical
    slip), and the right answers."""
    prompts, written, answers = [], [], []
    for _ in range(count):
        task = ("add", "sub", "reverse", "sort")[int(rng.integers(0, 4))]
        a, b = sorted((int(rng.integers(0, 1000)), int(rng.integers(0, 1000))), reverse=True)
        if task == "add":
            prompt, answer = f"{b}+{a}", str(a + b)
        elif task == "sub":
            prompt, answer = f"{a}-{b}", str(a - b)
        elif task == "reverse":
            word = "".join(_WORD_LETTERS[int(i)] for i in rng.integers(0, 26, int(rng.integers(3, 8))))
            prompt, answer = f"reverse {word}", word[::-1]
        else:
            digits = "".join(str(int(d)) for d in rng.integers(0, 10, int(rng.integers(3, 7))))
            prompt, answer = f"sort {digits}", "".join(sorted(digits))
        text = written_answer(task, answer)
        slip = int(rng.integers(0, 6))
        if slip == 1:  # one character wrong
            i = int(rng.integers(0, len(text)))
            text = text[:i] + ("7" if text[i] != "7" else "3") + text[i + 1:]
        elif slip == 2 and task in ("add", "sub"):  # right digits, usual order: wrong in the template
            text = answer
        elif slip == 3:  # stopped one token early
            text = text[:-1]
        prompts.append(prompt)
        written.append(text)
        answers.append(answer)
    return prompts, written, answers


@exercise("nb00_exact_match", notebook=NOTEBOOK, points=3, answer="accuracy_by_task",
          title="Exact match of what the model wrote, per task",
          asks_for=("trnlab.model.generate.exact_match", "trnlab.model.generate.accuracy_by_task",
                    "trnlab.data.tasks.read_answer", "trnlab.data.tasks.task_of", "trnlab.data.tasks.written_answer",
                    "trnlab.data.tasks.solve"))
class AccuracyByTask:
    def cases(rng):
        fixed = [[["407+38", "512-87", "reverse kite", "sort 52819"], ["5440", "524", "etik", "12589"],
                  ["445", "425", "etik", "12589"]],
                 [["5+5", "10-9", "10-10"], ["0100", "100", "000"], ["10", "1", "0"]]]
        return fixed + [list(_draw_scored_problems(rng, int(rng.integers(6, 30)))) for _ in range(4)]

    def run(accuracy_by_task, case):
        prompts, written, answers = case
        got = plain.mapping(accuracy_by_task(list(prompts), list(written), list(answers)), "accuracy_by_task's result")
        return {plain.text(task, "each key"): plain.number(value, f"the accuracy of {task!r}") for task, value in got.items()}

    def judge(case, got):
        prompts, written, answers = case
        grouped: dict[str, tuple[list[str], list[str]]] = {}
        for prompt, text, answer in zip(prompts, written, answers):
            task = task_of(prompt)
            predictions, golds = grouped.setdefault(task, ([], []))
            predictions.append(read_answer(task, text))
            golds.append(answer)
        expected = {task: exact_match(p, g) for task, (p, g) in grouped.items()}
        shown = "\n".join(f"  {p!r:16} wrote {w!r:8} right answer {a!r}" for p, w, a in zip(prompts, written, answers))
        if sorted(got) != sorted(expected):
            raise CheckFailed(f"expected the tasks {sorted(expected)} as keys, got {sorted(got)} for\n{shown}")
        for task, value in expected.items():
            if not math.isclose(got[task], value, abs_tol=1e-9):
                raise CheckFailed(
                    f"{task}: expected an exact match of {value:.4g}, got {got[task]:.4g} for\n{shown}\n(a sum or a "
                    "difference is written units first and zero-padded: read it back before comparing; every "
                    "character must then be identical)")

"""Exercises of notebooks 00–02: the reference solutions earn full marks, the common mistakes and
the untouched stubs earn zero."""

from __future__ import annotations

import math

import pytest
import torch

from trnlab import REPO_ROOT
from trnlab.course.exercises import load_all, run_check
from trnlab.data import CharTokenizer

SOLUTIONS = REPO_ROOT / "tests" / "solutions"
IDS = ["nb00_exact_match", "nb00_generation_cost", "nb01_encode", "nb01_targets", "nb01_leak",
       "nb02_causal_mask", "nb02_block_params", "nb02_mlp_flops"]


def answer_from(source: str, name: str):
    # the names earlier notebook cells define, which solution cells may use
    namespace = {"stoi": CharTokenizer().stoi, "torch": torch, "math": math}
    exec(compile(source, name, "exec"), namespace)
    return namespace


@pytest.mark.parametrize("grade_id", IDS)
def test_reference_solution_earns_full_marks(grade_id):
    exercise = load_all()[grade_id]
    answer = answer_from((SOLUTIONS / f"{grade_id}.py").read_text(), grade_id)[exercise.answer]
    result = run_check(grade_id, answer)
    assert result.passed and result.points == exercise.points, result.message


@pytest.mark.parametrize("grade_id", IDS)
def test_common_mistake_earns_zero_with_a_hint(grade_id):
    exercise = load_all()[grade_id]
    answer = answer_from((SOLUTIONS / f"{grade_id}.wrong.py").read_text(), grade_id)[exercise.answer]
    result = run_check(grade_id, answer)
    assert not result.passed and result.points == 0
    assert "expected" in result.message or "difference" in result.message


@pytest.mark.parametrize("grade_id", IDS)
def test_stub_earns_zero(grade_id):
    def stub(*args, **kwargs):
        raise NotImplementedError

    result = run_check(grade_id, stub)
    assert result.points == 0 and "not attempted" in result.message

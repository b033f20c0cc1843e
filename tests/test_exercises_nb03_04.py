"""Exercises of notebooks 03–04: the reference solutions earn full marks, the common mistakes and
the untouched stubs earn zero."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trnlab import REPO_ROOT
from trnlab.course.exercises import load_all, run_check
from trnlab.hardware import presets

SOLUTIONS = REPO_ROOT / "tests" / "solutions"
IDS = ["nb03_matmul_count", "nb03_systolic_step", "nb03_pe_cycles",
       "nb04_sbuf_blocking", "nb04_dma_time", "nb04_psum_tiles"]


def answer_from(source: str, name: str):
    # the names the notebooks' first cells import, which solution cells may use
    namespace = {"np": np, "math": math, "presets": presets}
    exec(compile(source, name, "exec"), namespace)
    return namespace


def test_every_exercise_of_notebooks_03_and_04_is_listed_here():
    registered = {i for i, ex in load_all().items() if ex.notebook.startswith(("03_", "04_"))}
    assert registered == set(IDS)


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
    assert "expected" in result.message


@pytest.mark.parametrize("grade_id", IDS)
def test_stub_earns_zero(grade_id):
    def stub(*args, **kwargs):
        raise NotImplementedError

    result = run_check(grade_id, stub)
    assert result.points == 0 and "not attempted" in result.message

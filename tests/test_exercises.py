"""Every exercise's checker, without a kernel: the reference solution earns full marks, the common
mistake earns zero with a hint, and the untouched stub earns zero as "not attempted".

(tests/test_course_notebooks.py proves the same through the real grading command, in notebooks.)
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab import REPO_ROOT
from trnlab.course.exercises import load_all, run_check
from trnlab.data import CharTokenizer
from trnlab.hardware import presets

SOLUTIONS = REPO_ROOT / "tests" / "solutions"
IDS = sorted(load_all())


def answer_from(grade_id: str, suffix: str = ""):
    """The answer a solution file defines, run among the names the notebooks define before it."""
    namespace = {"np": np, "math": math, "torch": torch, "presets": presets, "stoi": CharTokenizer().stoi,
                 "nki": nki, "nl": nl, "nisa": nisa}
    source = (SOLUTIONS / f"{grade_id}{suffix}.py").read_text()
    exec(compile(source, f"{grade_id}{suffix}.py", "exec"), namespace)
    return namespace[load_all()[grade_id].answer]


def test_every_exercise_has_a_solution_and_a_common_mistake():
    assert len(IDS) >= 2 * len(list((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")))
    for grade_id in IDS:
        assert (SOLUTIONS / f"{grade_id}.py").is_file() and (SOLUTIONS / f"{grade_id}.wrong.py").is_file()


@pytest.mark.parametrize("grade_id", IDS)
def test_reference_solution_earns_full_marks(grade_id):
    result = run_check(grade_id, answer_from(grade_id))
    assert result.passed and result.points == load_all()[grade_id].points, result.message


@pytest.mark.parametrize("grade_id", IDS)
def test_common_mistake_earns_zero_with_a_hint(grade_id):
    result = run_check(grade_id, answer_from(grade_id, ".wrong"))
    assert result.status == "failed" and result.points == 0
    assert "expected" in result.message or "difference" in result.message


@pytest.mark.parametrize("grade_id", IDS)
def test_stub_earns_zero(grade_id):
    def stub(*args, **kwargs):
        raise NotImplementedError

    result = run_check(grade_id, stub)
    assert result.points == 0 and "not attempted" in result.message

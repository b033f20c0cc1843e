"""The student-facing `check` and the registry: ✓/✗ with a hint, never an exception."""

from __future__ import annotations

import pytest

from trnlab.course import exercises
from trnlab.course.exercises import CheckFailed, check, evaluate, exercise, extra_check, run_check


@pytest.fixture
def double_exercise():
    """A throwaway exercise: `double(x)` must return 2 * x; removed from the registry afterwards."""

    @exercise("test_double", notebook="test_notebook", points=2, answer="double", title="Double a number")
    def checker(double):
        for x in (0, 3, -4):
            if double(x) != 2 * x:
                raise CheckFailed(f"expected {2 * x}, got {double(x)} for input {x}")

    yield exercises.REGISTRY["test_double"]
    exercises.REGISTRY.pop("test_double")
    exercises.EXTRA_CHECKS.pop("test_double", None)


def stub(x):
    raise NotImplementedError


@pytest.mark.parametrize("answer,status,hint", [
    (lambda x: 2 * x, "passed", "correct"),
    (lambda x: x + 2, "failed", "expected 0, got 2 for input 0"),
    (stub, "not_attempted", "not attempted yet"),
    (lambda x: 1 / 0, "error", "your code raised ZeroDivisionError"),
])
def test_evaluate_classifies_each_outcome(double_exercise, answer, status, hint):
    result = evaluate(double_exercise, answer)
    assert result.status == status and hint in result.message
    assert result.points == (2 if status == "passed" else 0) and result.max_points == 2


def test_check_prints_a_mark_and_a_hint_and_never_raises(double_exercise, capsys):
    assert check("test_double", lambda x: 2 * x) is None  # a check cell shows only what it prints
    assert "✓ Double a number [2/2 points]" in capsys.readouterr().out
    check("test_double", lambda x: x)
    check("test_double", lambda x: exit())  # SystemExit from the answer
    check("no_such_exercise", lambda x: x)
    out = capsys.readouterr().out
    assert out.count("✗") == 3
    assert "hint: expected 6, got 3 for input 3" in out
    assert "SystemExit" in out
    assert "✗ no_such_exercise: could not be checked" in out


def test_run_check_without_an_answer_is_missing(double_exercise):
    assert run_check("test_double").status == "missing"


def test_extra_checks_must_also_pass(double_exercise):
    assert run_check("test_double", lambda x: 2 * x).passed

    @extra_check("test_double")
    def no_floats(double):
        if double(0.5) != 1.0:
            raise CheckFailed("hidden: expected 1.0 for 0.5")

    assert run_check("test_double", lambda x: 2 * x).passed
    result = run_check("test_double", lambda x: 2 * int(x))
    assert result.status == "failed" and "hidden" in result.message


def test_registering_one_id_twice_is_an_error(double_exercise):
    with pytest.raises(ValueError, match="registered twice"):
        exercise("test_double", notebook="test_notebook", points=1, answer="d", title="t")(lambda d: None)


def test_an_object_that_equals_everything_is_not_an_answer(double_exercise):
    class AlwaysEqual:
        def __eq__(self, other):
            return True

        def __ne__(self, other):
            return False

    result = run_check("test_double", lambda x: AlwaysEqual())
    assert result.status == "failed" and "AlwaysEqual" in result.message
    assert run_check("test_double", lambda x: [2 * x][0]).passed  # plain values inside containers are fine

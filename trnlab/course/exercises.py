"""The exercise registry and the student-facing `check`.

An exercise is a pair of notebook cells, marked in nbgrader's metadata format:

- the *solution* cell, ``{"nbgrader": {"grade_id": "nb01_encode", "solution": true, "grade": false}}``,
  holds a stub (``# YOUR CODE HERE`` / ``raise NotImplementedError``) that the student replaces and
  that defines the answer under a known name (``Exercise.answer``);
- the *check* cell, ``{"nbgrader": {"grade_id": "nb01_encode_check", "grade": true, "points": 2}}``,
  calls ``check("nb01_encode", encode)``.

Each exercise's checker lives in ``trnlab/course/checks/`` beside the other exercises of its notebook.
A checker receives the student's answer and raises `CheckFailed` (or ``AssertionError``) with a hint
that says what was expected, what came back and for which input. `check` turns that into ✓ / ✗ and
never raises, so a notebook with unsolved exercises still runs to the end.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import sys
import traceback
import types
from dataclasses import dataclass, field
from typing import Any, Callable

_UNSET = object()


class CheckFailed(Exception):
    """Raised by a checker: the message is the hint the student sees."""


@dataclass(frozen=True)
class Exercise:
    id: str  # nbgrader grade_id of the solution cell, e.g. "nb01_encode"
    notebook: str  # notebook stem, e.g. "01_training_data"
    points: int
    answer: str  # the name the solution cell defines, e.g. "encode"
    title: str
    checker: Callable[[Any], None] = field(compare=False, repr=False)

    @property
    def check_cell_id(self) -> str:
        return f"{self.id}_check"


@dataclass(frozen=True)
class CheckResult:
    exercise: str
    passed: bool
    points: int  # points earned
    max_points: int
    message: str
    # passed | failed (a checker said no) | not_attempted (the stub still raises
    # NotImplementedError) | error (the answer raised) | missing (no answer was given)
    status: str = "passed"


REGISTRY: dict[str, Exercise] = {}
# Instructors' private checks (`--extra-checks FILE` of the grader): more checkers for an exercise
# that is already registered; the answer must pass the public checker and every extra one.
EXTRA_CHECKS: dict[str, list[Callable[[Any], None]]] = {}


def exercise(id: str, *, notebook: str, points: int, answer: str, title: str) -> Callable:
    """Decorator that registers a checker function as exercise `id`."""

    def register(checker: Callable[[Any], None]) -> Callable[[Any], None]:
        if id in REGISTRY and REGISTRY[id].checker is not checker:
            raise ValueError(f"exercise id {id!r} is registered twice")
        REGISTRY[id] = Exercise(id, notebook, points, answer, title, checker)
        return checker

    return register


def extra_check(id: str) -> Callable:
    """Decorator for an instructor's private checker of exercise `id` (see `EXTRA_CHECKS`)."""

    def register(checker: Callable[[Any], None]) -> Callable[[Any], None]:
        EXTRA_CHECKS.setdefault(id, []).append(checker)
        return checker

    return register


def load_all(strict: bool = True) -> dict[str, Exercise]:
    """Import every module in trnlab.course.checks so that all exercises are registered.

    With ``strict=False`` (the grader) a checker module that fails to import is reported on stderr
    and skipped, so one broken notebook's checks do not stop the grading of the others."""
    from trnlab.course import checks

    for info in pkgutil.iter_modules(checks.__path__):
        try:
            importlib.import_module(f"{checks.__name__}.{info.name}")
        except Exception as error:
            if strict:
                raise
            print(f"warning: checks {info.name} not loaded: {type(error).__name__}: {error}", file=sys.stderr)
    return REGISTRY


def get(id: str) -> Exercise:
    if id not in REGISTRY:
        load_all()
    if id not in REGISTRY:
        known = ", ".join(sorted(REGISTRY)) or "none"
        raise KeyError(f"unknown exercise {id!r}; known exercises: {known}")
    return REGISTRY[id]


# What an answer function may return: values of these libraries, not objects of a class the notebook
# defined (whose `__eq__` could say True to anything the checker compares it with).
PLAIN_VALUE_PACKAGES = ("builtins", "numpy", "torch", "ml_dtypes", "trnlab", "collections", "fractions", "decimal")


def _reject_own_classes(value: Any, depth: int = 0) -> None:
    package = str(getattr(type(value), "__module__", "")).split(".")[0]
    if package not in PLAIN_VALUE_PACKAGES:
        raise CheckFailed(f"your function returned a {type(value).__name__} object defined outside NumPy/PyTorch/"
                          "trnlab; return plain values (numbers, lists, dicts, arrays, tensors)")
    if depth < 3 and isinstance(value, (list, tuple, set, frozenset)):
        for item in list(value)[:1000]:
            _reject_own_classes(item, depth + 1)
    elif depth < 3 and isinstance(value, dict):
        for item in [*list(value)[:1000], *list(value.values())[:1000]]:
            _reject_own_classes(item, depth + 1)


def _returning_plain_values(answer: Any) -> Any:
    """Wrap a plain answer function so that what it returns is screened by `_reject_own_classes`.
    Other callables (e.g. an `nki.jit` kernel, which checkers hand to the simulator) pass unchanged."""
    if type(answer) is not types.FunctionType:
        return answer

    @functools.wraps(answer)
    def screened(*args: Any, **kwargs: Any) -> Any:
        result = answer(*args, **kwargs)
        _reject_own_classes(result)
        return result

    return screened


def evaluate(ex: Exercise, answer: Any, extra: tuple[Callable[[Any], None], ...] = ()) -> CheckResult:
    """Run `ex`'s checker, then each `extra` checker, on `answer`; never raises for what the answer does."""
    if answer is _UNSET:
        return CheckResult(ex.id, False, 0, ex.points, "no answer was given", "missing")
    try:
        screened = _returning_plain_values(answer)
        for checker in (ex.checker, *extra):
            checker(screened)
    except NotImplementedError:
        return CheckResult(
            ex.id, False, 0, ex.points,
            "not attempted yet: replace `raise NotImplementedError` with your code", "not_attempted",
        )
    except (CheckFailed, AssertionError) as failure:
        return CheckResult(ex.id, False, 0, ex.points, str(failure) or "the answer is not right yet", "failed")
    except (Exception, SystemExit) as error:  # the student's code raised while being checked
        where = traceback.extract_tb(error.__traceback__)[-1]
        return CheckResult(
            ex.id, False, 0, ex.points,
            f"your code raised {type(error).__name__}: {error} (line {where.lineno} of {where.name})",
            "error",
        )
    return CheckResult(ex.id, True, ex.points, ex.points, "correct", "passed")


def run_check(id: str, answer: Any = _UNSET) -> CheckResult:
    """Run exercise `id`'s checker (and any registered extra checks) on `answer`; never raises
    for anything the answer does."""
    return evaluate(get(id), answer, tuple(EXTRA_CHECKS.get(id, ())))


def check(id: str, answer: Any = _UNSET) -> None:
    """Check a student's answer and print ✓ or ✗ with a hint. Never raises.

    Returns nothing, so that a check cell shows only the mark and the hint; code that needs the
    outcome calls `run_check`.
    """
    try:
        result = run_check(id, answer)
    except Exception as error:  # an unknown id, a broken registry: still never raise in a notebook
        print(f"✗ {id}: could not be checked ({type(error).__name__}: {error})")
        return
    ex = REGISTRY[id]
    mark = "✓" if result.passed else "✗"
    print(f"{mark} {ex.title} [{result.points}/{result.max_points} points]")
    if not result.passed:
        print(f"  hint: {result.message}")

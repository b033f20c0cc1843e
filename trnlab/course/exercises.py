"""The exercise registry, and how an answer is checked: run beside the student, judged elsewhere.

An exercise is a pair of notebook cells, marked in nbgrader's metadata format:

- the *solution* cell, ``{"nbgrader": {"grade_id": "nb01_encode", "solution": true, "grade": false}}``,
  holds a stub (``# YOUR CODE HERE`` / ``raise NotImplementedError``) that the student replaces and
  that defines the answer under a known name (``Exercise.answer``);
- the *check* cell, ``{"nbgrader": {"grade_id": "nb01_encode_check", "grade": true}}``, calls
  ``check("nb01_encode", encode_example)``. Points live here, in the registry, and nowhere else
  (``nbgrader-export`` writes them into the nbgrader source tree).

A checker (one class per exercise in ``trnlab/course/checks/``, registered with `exercise`) has three
parts, because the expected values must never exist where the student's code can reach them:

- ``cases(rng)``: inputs drawn from a seed chosen when the check runs (plain data);
- ``run(answer, case)``: runs *beside the student's code* — calls the answer on one case and turns
  the result into plain data (`trnlab.course.plain`), rejecting subclasses and foreign objects;
  while the answer runs, the package functions the exercise asks for (``asks_for``) and every
  checker are switched off (`trnlab.course.forbid`);
- ``judge(case, got)``: runs *in another process* — the grader's, or for a student's instant check
  the oracle (`trnlab.course.oracle`) — computes the expected value and raises `CheckFailed` with a
  hint that says what was expected, what came back and for which input.

`collect` is the student side, `judge` the other; `run_check` does both. `check` prints ✓ / ✗ and
never raises, so a notebook with unsolved exercises still runs to the end.
"""

from __future__ import annotations

import importlib
import pkgutil
import secrets
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trnlab.course import forbid, plain
from trnlab.course.errors import CheckFailed, Unavailable

_UNSET = object()
GRADING = False  # set by the grader in a submission's kernel: check() cells then only say so


@dataclass(frozen=True)
class Exercise:
    id: str  # nbgrader grade_id of the solution cell, e.g. "nb01_encode"
    notebook: str  # notebook stem, e.g. "01_training_data"
    points: int
    answer: str  # the name the solution cell defines, e.g. "encode_example"
    title: str
    spec: Any = field(compare=False, repr=False)  # the class with cases / run / judge
    asks_for: tuple[str, ...] = ()  # package functions the student writes here: off while the answer runs

    @property
    def check_cell_id(self) -> str:
        return f"{self.id}_check"

    @property
    def module(self) -> str:
        return self.spec.__module__


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
# Instructors' private checks (`--extra-checks FILE` of the grader): more checkers (cases / run /
# judge) for an exercise; the answer must pass the public checker and every extra one.
EXTRA_CHECKS: dict[str, list[Any]] = {}


def _require_parts(spec: Any) -> None:
    missing = [part for part in ("cases", "run", "judge") if not callable(getattr(spec, part, None))]
    if missing:
        raise TypeError(f"checker {getattr(spec, '__name__', spec)!r} lacks {', '.join(missing)}")


def exercise(id: str, *, notebook: str, points: int, answer: str, title: str, asks_for: tuple[str, ...] = ()):
    """Class decorator that registers a checker (with ``cases``, ``run``, ``judge``) as exercise `id`."""

    def register(spec: Any) -> Any:
        _require_parts(spec)
        if id in REGISTRY and REGISTRY[id].spec is not spec:
            raise ValueError(f"exercise id {id!r} is registered twice")
        REGISTRY[id] = Exercise(id, notebook, points, answer, title, spec, tuple(asks_for))
        return spec

    return register


def extra_check(id: str):
    """Class decorator for an instructor's private checker of exercise `id` (see `EXTRA_CHECKS`)."""

    def register(spec: Any) -> Any:
        _require_parts(spec)
        EXTRA_CHECKS.setdefault(id, []).append(spec)
        return spec

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


def new_seed() -> int:
    """A seed for one check: secret until the check runs, so no answer can be prepared for its cases."""
    return secrets.randbits(62)


def part_seed(seed: int, part: int) -> int:
    return (seed + 1_000_003 * part) % 2**62


def draw_cases(spec: Any, seed: int) -> list:
    return list(spec.cases(np.random.default_rng(seed)))


# ----------------------------------------------------------------------------- beside the student


_PACKAGE_DIR = str(__import__("pathlib").Path(__file__).resolve().parents[1])


def _where(error: BaseException) -> str:
    """Where in the student's code the error was raised (the last frame outside trnlab)."""
    frames = traceback.extract_tb(error.__traceback__)
    own = [f for f in frames if not f.filename.startswith(_PACKAGE_DIR)]
    frame = (own or frames)[-1] if frames else None
    return f" (line {frame.lineno} of {frame.name})" if frame else ""


def unavailable_message(name: str) -> str:
    return (f"your code called `{name}`, which is switched off while answers are checked: it is the "
            "package's own version of what this exercise asks you to write (or a checker, or a new "
            "process), so calling it earns nothing. Write the computation yourself.")


def collect(ex: Exercise, answer: Any, seed: int, extras: tuple = ()) -> str:
    """Run the answer on every case of the public checker and of each extra one; return the plain
    results as JSON text (`plain.encode`). Never raises for anything the answer does."""
    specs = (ex.spec, *extras)
    return collect_cases(ex, answer, [(spec, draw_cases(spec, part_seed(seed, index)))
                                      for index, spec in enumerate(specs)])


def collect_cases(ex: Exercise, answer: Any, parts_to_run: list[tuple[Any, list]]) -> str:
    """`collect` on cases given as data, one (checker with a ``run``, cases) pair per part: what the
    grader's kernel does with the inputs the grader drew in its own process."""
    parts: list[list[dict]] = []
    answer_in_window = forbid.windowed(answer, ex.asks_for) if callable(answer) else answer
    for spec, cases in parts_to_run:
        outcomes: list[dict] = []
        parts.append(outcomes)
        for case in cases:
            del forbid.called[:]
            outcome = _run_one(spec, answer_in_window, case)
            if forbid.called and "unavailable" not in outcome:
                outcome = {"unavailable": forbid.called[0]}
            outcomes.append(outcome)
            if "value" not in outcome:
                return plain.encode({"parts": parts})
    return plain.encode({"parts": parts})


def _run_one(spec: Any, answer: Any, case: Any) -> dict:
    try:
        value = spec.run(answer, case)
        plain.encode(value)  # only plain data leaves this process
        return {"value": value}
    except Unavailable as error:
        return {"unavailable": error.name}
    except NotImplementedError:
        return {"not_attempted": True}
    except (CheckFailed, AssertionError) as failure:
        return {"failed": str(failure) or "the answer is not right yet"}
    except TypeError as error:
        if "not plain data" in str(error):
            return {"failed": f"the checker could not read your answer as plain data ({error})"}
        return {"error": f"your code raised TypeError: {error}{_where(error)}"}
    except (Exception, SystemExit) as error:  # the student's code raised while being checked
        return {"error": f"your code raised {type(error).__name__}: {error}{_where(error)}"}


# ----------------------------------------------------------------------------- in another process


def judge(ex: Exercise, seed: int, payload: str, extras: tuple = ()) -> CheckResult:
    """Judge what `collect` returned: redraw the cases from the seed, compute the expected values
    here, compare. Never raises for anything in `payload`."""

    def result(status: str, message: str) -> CheckResult:
        passed = status == "passed"
        return CheckResult(ex.id, passed, ex.points if passed else 0, ex.points, message, status)

    try:
        parts = plain.decode(payload)["parts"]
    except Exception as error:
        return result("not_graded", f"the answers could not be read ({type(error).__name__}: {error})")
    for index, spec in enumerate((ex.spec, *extras)):
        cases = draw_cases(spec, part_seed(seed, index))
        outcomes = parts[index] if index < len(parts) and isinstance(parts[index], list) else []
        for number, case in enumerate(cases):
            outcome = outcomes[number] if number < len(outcomes) and isinstance(outcomes[number], dict) else {}
            if "not_attempted" in outcome:
                return result("not_attempted", "not attempted yet: replace `raise NotImplementedError` with your code")
            if "unavailable" in outcome:
                return result("failed", unavailable_message(str(outcome["unavailable"])))
            if "failed" in outcome:
                return result("failed", str(outcome["failed"]))
            if "error" in outcome:
                return result("error", str(outcome["error"]))
            if "value" not in outcome:
                return result("not_graded", "no result came back for a case (did the notebook interfere?)")
            try:
                spec.judge(case, outcome["value"])
            except (CheckFailed, AssertionError) as failure:
                return result("failed", str(failure) or "the answer is not right yet")
            except Exception as error:  # the answer's data broke the judge (a wrong shape, a wrong type)
                return result("failed", f"your answer could not be compared: {type(error).__name__}: {error}")
    return result("passed", "correct")


def run_check(id: str, answer: Any = _UNSET, *, seed: int | None = None, local: bool = False) -> CheckResult:
    """Check `answer` for exercise `id` (and any registered extra checks): cases drawn from `seed`
    (a fresh secret one by default), judged by the oracle process (``local=True``: here, for the
    grader and for tests). Never raises for anything the answer does."""
    ex = get(id)
    if answer is _UNSET:
        return CheckResult(ex.id, False, 0, ex.points, "no answer was given", "missing")
    seed = new_seed() if seed is None else seed
    extras = tuple(EXTRA_CHECKS.get(id, ()))
    payload = collect(ex, answer, seed, extras)
    if local:
        return judge(ex, seed, payload, extras)
    from trnlab.course import oracle

    return oracle.judge_remotely(ex, seed, payload)


def check(id: str, answer: Any = _UNSET) -> None:
    """Check a student's answer and print ✓ or ✗ with a hint. Never raises.

    Returns nothing, so that a check cell shows only the mark and the hint; code that needs the
    outcome calls `run_check`.
    """
    if GRADING:
        print(f"{id}: checked by the grader")
        return
    try:
        if id not in REGISTRY:
            load_all(strict=False)
        if id not in REGISTRY:
            print(f"• {id}: checked when your notebook is graded (no instant check for it in this notebook)")
            return
        result = run_check(id, answer)
    except Exception as error:  # a broken registry, a dead oracle: still never raise in a notebook
        print(f"✗ {id}: could not be checked ({type(error).__name__}: {error})")
        return
    ex = REGISTRY[id]
    mark = "✓" if result.passed else "✗"
    print(f"{mark} {ex.title} [{result.points}/{result.max_points} points]")
    if not result.passed:
        print(f"  hint: {result.message}")


def nbgrader_test(id: str, answer: Any = _UNSET) -> None:
    """The hidden test of an nbgrader autograder cell: raises AssertionError unless the answer passes.
    (Students never run it: nbgrader strips it from the release and puts it back when grading.)"""
    result = run_check(id, answer)
    if not result.passed:
        raise AssertionError(f"{id}: {result.status}: {result.message}")

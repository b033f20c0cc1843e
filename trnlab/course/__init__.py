"""Exercises, instant checks, student release and instructor grading.

In a notebook:  `from trnlab.course import check`  then  `check("nb01_encode", encode)`.
Instructors:    `python -m trnlab.course grade SUBMISSIONS... --out grades.csv` (see grade.py,
                 solve.py and docs/instructors.md).
"""

from trnlab.course.exercises import (
    REGISTRY,
    CheckFailed,
    Exercise,
    check,
    exercise,
    extra_check,
    run_check,
)

__all__ = ["REGISTRY", "CheckFailed", "Exercise", "check", "exercise", "extra_check", "run_check"]

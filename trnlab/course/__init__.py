"""Exercises, instant checks, student release and instructor grading.

In a notebook:  `from trnlab.course import check`  then  `check("nb01_encode", encode_example)`.
Instructors:    `python -m trnlab.course grade SUBMISSIONS... --out grades.csv` (see grade.py,
                 solve.py, nbgrader_export.py and docs/instructors.md).
"""

from trnlab.course.errors import CheckFailed, Unavailable
from trnlab.course.exercises import (
    REGISTRY,
    Exercise,
    check,
    exercise,
    extra_check,
    nbgrader_test,
    run_check,
)

__all__ = ["REGISTRY", "CheckFailed", "Exercise", "Unavailable", "check", "exercise", "extra_check",
           "nbgrader_test", "run_check"]

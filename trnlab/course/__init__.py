"""Exercises, instant checks, student release and instructor grading.

In a notebook:  `from trnlab.course import check`  then  `check("nb01_encode", encode_example)`.
Instructors:    `python -m trnlab.course grade SUBMISSIONS... --out grades.csv` (see grade.py,
                 solve.py, nbgrader_export.py and docs/instructors.md).
"""

import os
import sys

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

if "ipykernel" in sys.modules and not os.environ.get("TRNLAB_GRADING"):
    from trnlab.course import oracle

    oracle.prestart()  # a notebook's first check() then finds the judging process ready

__all__ = ["REGISTRY", "CheckFailed", "Exercise", "Unavailable", "check", "exercise", "extra_check",
           "nbgrader_test", "run_check"]

"""Exercises, instant checks, student release and instructor grading.

In a notebook:  `from trnlab.course import check`  then  `check("nb01_encode", encode)`.
Instructors:    `python -m trnlab.course grade SUBMISSIONS... --out grades.csv`.
"""

from trnlab.course.exercises import REGISTRY, CheckFailed, Exercise, check, exercise, run_check

__all__ = ["REGISTRY", "CheckFailed", "Exercise", "check", "exercise", "run_check"]

"""What grading produces, and how it is written out: a CSV, a JSON with every detail, feedback files.

`GradeConfig` holds the grader's limits; `ExerciseGrade`, `NotebookRun` and `StudentGrade` are the
results of `grade.py` and `kernel_run.py`; the writers turn a batch of `StudentGrade` into files.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from trnlab.course import exercises as registry


@dataclass
class GradeConfig:
    cell_timeout: float = 120.0  # seconds per cell (and per check)
    notebook_timeout: float = 900.0  # seconds per notebook, all kernel restarts included
    memory_limit_mb: int | None = 6144  # address-space limit of each kernel (RLIMIT_AS)
    jobs: int = 1
    extra_checks: Path | None = None
    max_restarts: int = 2  # new kernels after a crash, per notebook
    startup_timeout: float = 120.0
    separate_users: bool = False  # each kernel as a user of its own (needs root; sandbox.py)
    max_processes: int = 256  # processes per kernel user (only with separate_users)


@dataclass
class ExerciseGrade:
    exercise: str
    notebook: str
    points: int
    max_points: int
    # passed | failed | not_attempted | error | missing | timeout | crashed | not_run | not_graded
    status: str
    message: str
    tampered: list[str] = field(default_factory=list)  # library functions the notebook had patched


@dataclass
class NotebookRun:
    path: str
    notebook: str | None  # the course notebook it was identified as
    seconds: float = 0.0
    kernels: int = 0  # kernels started (1 + restarts)
    problems: list[str] = field(default_factory=list)  # hangs, crashes, lost cells: why points were lost
    cell_errors: list[str] = field(default_factory=list)  # exceptions raised by the student's cells


@dataclass
class StudentGrade:
    student: str
    source: str
    exercises: dict[str, ExerciseGrade]
    notebooks: list[NotebookRun] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(g.points for g in self.exercises.values())

    @property
    def max_total(self) -> int:
        return sum(g.max_points for g in self.exercises.values())


@functools.lru_cache(maxsize=None)
def _notebook_order(notebook: str) -> tuple[str, ...]:
    """Exercise ids in the order their cells appear in the released notebook (empty if it is not one)."""
    from trnlab import NOTEBOOKS_DIR
    from trnlab.course.notebook import NotANotebook, find_exercise_cells, read_notebook

    try:
        return tuple(find_exercise_cells(read_notebook(NOTEBOOKS_DIR / f"{notebook}.ipynb")))
    except (OSError, NotANotebook):
        return ()


def exercises_of(notebook: str) -> list[registry.Exercise]:
    """The notebook's exercises in notebook order (the CSV's columns, the feedback's lines)."""
    found = [ex for ex in registry.REGISTRY.values() if ex.notebook == notebook]
    order = {exercise_id: i for i, exercise_id in enumerate(_notebook_order(notebook))}
    return sorted(found, key=lambda ex: order.get(ex.id, len(order)))


def ungraded(notebooks: list[str], status: str, message: str) -> dict[str, ExerciseGrade]:
    """Zero points and the same reason for every exercise of `notebooks`."""
    return {ex.id: ExerciseGrade(ex.id, name, 0, ex.points, status, message)
            for name in notebooks for ex in exercises_of(name)}


def columns(assignment: list[str]) -> list[str]:
    return [ex.id for name in assignment for ex in exercises_of(name)]


def _write(path: Path, text: str) -> None:
    """Write a new file and move it into place: a link planted at `path` is replaced, not followed."""
    path = Path(path)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False,
                                     encoding="utf-8", newline="") as f:
        f.write(text)
    os.chmod(f.name, 0o644)
    os.replace(f.name, path)


def write_csv(grades: list[StudentGrade], assignment: list[str], path: Path) -> None:
    ids = columns(assignment)
    table = io.StringIO()
    writer = csv.writer(table)
    writer.writerow(["student", *ids, "total"])
    for g in grades:
        writer.writerow([g.student, *(g.exercises[i].points for i in ids), g.total])
    _write(path, table.getvalue())


def write_json(grades: list[StudentGrade], assignment: list[str], path: Path, config: GradeConfig) -> None:
    report = {
        "assignment": assignment,
        "exercises": {i: {"notebook": registry.REGISTRY[i].notebook, "title": registry.REGISTRY[i].title,
                          "points": registry.REGISTRY[i].points} for i in columns(assignment)},
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(config).items()},
        "students": [{**asdict(g), "total": g.total, "max_total": g.max_total} for g in grades],
    }
    _write(path, json.dumps(report, indent=1, ensure_ascii=False) + "\n")


_MARKS = {"passed": "✓"}


def feedback_markdown(grade: StudentGrade, assignment: list[str]) -> str:
    lines = [f"# Feedback for {grade.student}: {grade.total}/{grade.max_total} points", ""]
    for problem in grade.problems:
        lines.append(f"- note: {problem}")
    if grade.problems:
        lines.append("")
    runs = {run.notebook: run for run in grade.notebooks}
    for name in assignment:
        run = runs.get(name)
        lines.append(f"## {name}" + (f" ({Path(run.path).name})" if run else ""))
        lines.append("")
        for ex in exercises_of(name):
            g = grade.exercises[ex.id]
            mark = _MARKS.get(g.status, "✗")
            line = f"- {mark} **{ex.title}** (`{ex.id}`): {g.points}/{g.max_points}"
            if g.status != "passed":
                line += f" ({g.status.replace('_', ' ')}): {g.message}"
            lines.append(line)
            if g.tampered:
                lines.append(f"  - the notebook had replaced {', '.join(g.tampered[:5])}; "
                             "the check ran with the original library functions")
        if run and (run.problems or run.cell_errors):
            lines += ["", "What happened when your notebook ran:" if run.kernels else "About your notebook file:"]
            lines += [f"- {p}" for p in run.problems]
            lines += [f"- {e}" for e in run.cell_errors[:10]]
            if len(run.cell_errors) > 10:
                lines.append(f"- … and {len(run.cell_errors) - 10} more cells raised errors")
        lines.append("")
    return "\n".join(lines)


def _safe_filename(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.#" else "_" for c in name) or "student"


def write_feedback(grades: list[StudentGrade], assignment: list[str], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for g in grades:
        _write(folder / f"{_safe_filename(g.student)}.md", feedback_markdown(g, assignment))

"""The course works with the real nbgrader (0.9): export an nbgrader course directory, release it,
autograde a solved, a wrong and an untouched copy, and check the scores nbgrader records.

Runs on one notebook, 04_the_neuroncore — among the fastest to execute — to stay near two minutes on
two cores (three autograded kernels). `nbgrader-export` treats every notebook alike; the other
notebooks' source cells are checked without nbgrader below (every solution cell has its markers,
every check cell its hidden test and its points from the registry).
"""

from __future__ import annotations

import csv
import shutil
import os
import signal
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from trnlab import NOTEBOOKS_DIR
from trnlab.course import exercises as registry
from trnlab.course.nbgrader_export import source_notebook
from trnlab.course.notebook import find_exercise_cells, read_notebook
from trnlab.course.solve import solve_notebook

NOTEBOOK = "04_the_neuroncore"
NBGRADER = shutil.which("nbgrader")
registry.load_all()


def _run(args: list[str], cwd: Path, timeout: float = 600, retries: int = 0) -> str:
    """Run a command in a process group of its own; one that has not finished within `timeout` is
    killed with everything it started (kernels included) and, `retries` times, run again. (Once, in
    a full parallel test run, an autograde kernel and nbgrader were seen both idle, waiting for each
    other's message, in about one autograde in four on this machine; the same command passes when
    run again. Until the cause is found the test retries, and says so.)"""
    for attempt in range(retries + 1):
        process = subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   start_new_session=True)
        try:
            output, _ = process.communicate(timeout=timeout)
            break
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            if attempt == retries:
                raise
    assert process.returncode == 0, output[-4000:]
    return output


@pytest.mark.skipif(NBGRADER is None, reason="nbgrader is not installed (pip install -r requirements.txt)")
def test_nbgrader_releases_the_student_notebook_and_autogrades_solved_wrong_and_untouched(tmp_path):
    course = tmp_path / "course"
    _run([sys.executable, "-m", "trnlab.course", "nbgrader-export", str(course), "--notebook", NOTEBOOK], tmp_path)
    _run([NBGRADER, "generate_assignment", NOTEBOOK], course)

    release = course / "release" / NOTEBOOK / f"{NOTEBOOK}.ipynb"
    released, student = nbformat.read(release, 4), read_notebook(NOTEBOOKS_DIR / f"{NOTEBOOK}.ipynb")
    # the release is the student notebook: same cells, stubs with their def lines, outputs kept
    assert [c.source for c in released.cells] == [c.source for c in student.cells]
    assert any(c.get("outputs") for c in released.cells if c.cell_type == "code")

    for name, nb in {"solved": solve_notebook(released)[0], "wrong": solve_notebook(released, wrong=True)[0],
                     "untouched": released}.items():
        folder = course / "submitted" / name / NOTEBOOK
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{NOTEBOOK}.ipynb")
    for student in ("solved", "wrong", "untouched"):
        _run([NBGRADER, "autograde", NOTEBOOK, "--student", student, "--force"], course, timeout=150, retries=3)
    _run([NBGRADER, "export", "--to", str(tmp_path / "grades.csv")], course)
    with open(tmp_path / "grades.csv") as f:
        scores = {row["student_id"]: (float(row["score"]), float(row["max_score"])) for row in csv.DictReader(f)}
    full = float(sum(ex.points for ex in registry.REGISTRY.values() if ex.notebook == NOTEBOOK))
    assert scores == {"solved": (full, full), "wrong": (0.0, full), "untouched": (0.0, full)}


@pytest.mark.parametrize("path", sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.stem)
def test_every_notebook_exports_as_an_nbgrader_source(path):
    nb = read_notebook(path)
    source = source_notebook(nb)
    for exercise_id, cells in find_exercise_cells(source).items():
        ex = registry.REGISTRY[exercise_id]
        for index in cells.solution:
            text = source.cells[index].source
            assert "### BEGIN SOLUTION" in text and "### END SOLUTION" in text
            before = text.split("### BEGIN SOLUTION")[0]
            assert f"def {ex.answer}(" in before, "the def line stays outside the solution region"
            compile(text.replace("### BEGIN SOLUTION", "").replace("### END SOLUTION", ""), exercise_id, "exec")
        for index in cells.check:
            cell = source.cells[index]
            assert cell.metadata["nbgrader"]["points"] == ex.points
            assert f"nbgrader_test({exercise_id!r}, {ex.answer})" in cell.source
            assert cell.source.index("### BEGIN HIDDEN TESTS") > cell.source.index("check(")
    assert [c.source for c in nb.cells] == [c.source for c in read_notebook(path).cells]  # a copy

"""Every exercise in every course notebook is solvable, proven through the real grading command.

For each notebook in notebooks/ with exercises, `solve` writes a solved copy and a copy with the
deliberately wrong answers (tests/solutions/<id>.wrong.py); the unsolved notebook is the stored
one. One `python -m trnlab.course grade -j 2` run grades them all: solved copies must earn full
marks, unsolved ones zero ("not attempted"), wrong ones zero for each exercise because a checker
rejected the answer (not because something else broke). Notebooks are discovered when the tests
are collected, so a new notebook is covered as soon as it lands.

Set TRNLAB_GRADE_VARIANTS=solved,wrong to leave the unsolved run out when CI time is short
(test_stub_is_rejected_by_its_checker still shows, without a kernel, that every stub earns zero).
"""

from __future__ import annotations

import __future__
import ast
import json
import os
import re
import shutil
import subprocess
import sys

import nbformat
import pytest

from trnlab import NOTEBOOKS_DIR
from trnlab.course import exercises as registry
from trnlab.course.notebook import find_exercise_cells, read_notebook
from trnlab.course.solve import SOLUTIONS_DIR, solve_notebook

registry.load_all()


def _course_notebooks() -> dict[str, object]:
    found = {}
    for path in sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb")):
        nb = read_notebook(path)
        if any(c.solution for c in find_exercise_cells(nb).values()):
            found[path.stem] = nb
    return found


NOTEBOOKS = _course_notebooks()
VARIANTS = os.environ.get("TRNLAB_GRADE_VARIANTS", "solved,wrong,unsolved").split(",")
EXERCISES = [(name, ex.id) for name in NOTEBOOKS for ex in registry.REGISTRY.values() if ex.notebook == name]


def solution_cells(notebook: str) -> dict[str, int]:
    return {i: c.solution[-1] for i, c in find_exercise_cells(NOTEBOOKS[notebook]).items() if c.solution}


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict[str, dict]:
    """Grade every variant of every notebook in one batch; results keyed by "variant-notebook"."""
    if not NOTEBOOKS:
        pytest.skip("no notebook with exercises in notebooks/ yet")
    root = tmp_path_factory.mktemp("course")
    submissions = []
    for name, nb in NOTEBOOKS.items():
        for variant in VARIANTS:
            path = root / f"{variant}-{name}.ipynb"
            if variant == "unsolved":
                shutil.copyfile(NOTEBOOKS_DIR / f"{name}.ipynb", path)
            else:
                nbformat.write(solve_notebook(nb, wrong=variant == "wrong")[0], path)
            submissions.append(str(path))
    out = root / "out" / "grades.csv"
    finished = subprocess.run(
        [sys.executable, "-m", "trnlab.course", "grade", *submissions, "--out", str(out), "-j", "2",
         "--timeout-cell", "300", "--quiet"], capture_output=True, text=True, timeout=1800)
    assert finished.returncode == 0, finished.stderr[-3000:]
    report = json.loads(out.with_suffix(".json").read_text())
    return {s["student"]: s for s in report["students"]}


def _result(graded, variant: str, notebook: str, exercise_id: str) -> dict:
    if variant not in VARIANTS:
        pytest.skip(f"{variant} copies not graded (TRNLAB_GRADE_VARIANTS)")
    student = graded[f"{variant}-{notebook}"]
    for run in student["notebooks"]:
        assert not run["problems"], f"{variant}-{notebook}: {run['problems']}"
    return student["exercises"][exercise_id]


@pytest.mark.parametrize("notebook,exercise_id", EXERCISES)
def test_solved_copy_earns_full_marks(graded, notebook, exercise_id):
    result = _result(graded, "solved", notebook, exercise_id)
    assert result["status"] == "passed", result["message"]
    assert result["points"] == registry.REGISTRY[exercise_id].points


@pytest.mark.parametrize("notebook,exercise_id", EXERCISES)
def test_wrong_answer_earns_zero_because_the_checker_rejects_it(graded, notebook, exercise_id):
    result = _result(graded, "wrong", notebook, exercise_id)
    assert result["points"] == 0
    assert result["status"] in ("failed", "error"), result  # not "missing", "timeout", "not_graded"


@pytest.mark.parametrize("notebook,exercise_id", EXERCISES)
def test_unsolved_notebook_earns_zero(graded, notebook, exercise_id):
    result = _result(graded, "unsolved", notebook, exercise_id)
    assert (result["points"], result["status"]) == (0, "not_attempted"), result


@pytest.mark.parametrize("variant", ["solved", "unsolved", "wrong"])
def test_feedback_accuses_no_one_of_patching_libraries(graded, variant):
    if variant not in VARIANTS:
        pytest.skip(f"{variant} copies not graded (TRNLAB_GRADE_VARIANTS)")
    for notebook in NOTEBOOKS:
        for exercise_id, result in graded[f"{variant}-{notebook}"]["exercises"].items():
            assert result["tampered"] == [], f"{variant}-{notebook} {exercise_id}: {result['tampered']}"


def test_csv_columns_follow_the_notebooks_order(graded):
    from trnlab.course.results import columns

    order = [i for name in NOTEBOOKS for i in find_exercise_cells(NOTEBOOKS[name]) if i in registry.REGISTRY]
    assert columns(list(NOTEBOOKS)) == order


# ----------------------------------------------------------------------------- the format, without a kernel


@pytest.mark.parametrize("notebook,exercise_id", EXERCISES)
def test_exercise_cells_follow_the_course_format(notebook, exercise_id):
    ex = registry.REGISTRY[exercise_id]
    nb = NOTEBOOKS[notebook]
    cells = find_exercise_cells(nb).get(exercise_id)
    assert cells and len(cells.solution) == 1, f"{exercise_id}: exactly one solution cell expected"
    assert len(cells.check) == 1, f"{exercise_id}: exactly one check cell expected"
    solution, check = nb.cells[cells.solution[0]], nb.cells[cells.check[0]]
    assert "# YOUR CODE HERE" in solution.source and "raise NotImplementedError" in solution.source
    assert re.search(rf"\bdef {re.escape(ex.answer)}\(", solution.source), f"the stub must define `{ex.answer}`"
    assert "points" not in check.metadata["nbgrader"], "points live in the registry only (nbgrader-export writes them)"
    assert not re.search(r"\(\d+ points?\)", nb.cells[cells.solution[0] - 1].source), "no points in the statement text"
    assert re.search(rf"check\(\s*[\"']{exercise_id}[\"']\s*,\s*{re.escape(ex.answer)}\s*\)", check.source)
    assert cells.solution[0] < cells.check[0]
    for suffix in ("", ".wrong"):
        assert (SOLUTIONS_DIR / f"{exercise_id}{suffix}.py").is_file()


@pytest.mark.parametrize("notebook,exercise_id", EXERCISES)
def test_stub_is_rejected_by_its_checker(notebook, exercise_id):
    ex = registry.REGISTRY[exercise_id]
    nb, index = NOTEBOOKS[notebook], solution_cells(notebook)[exercise_id]
    namespace: dict = {}
    # The stub may use names the notebook imported above it (a decorator such as @nki.jit): run
    # those import statements, and nothing else of the notebook. Annotations are not evaluated.
    for cell in nb.cells[:index]:
        if cell.cell_type == "code":
            try:
                tree = ast.parse(cell.source)
            except SyntaxError:  # IPython magics
                continue
            imports = [node for node in tree.body if isinstance(node, ast.Import)
                       or isinstance(node, ast.ImportFrom) and node.module != "__future__"]
            exec(compile(ast.Module(body=imports, type_ignores=[]), "imports", "exec"), namespace)
    source = nb.cells[index].source
    exec(compile(source, exercise_id, "exec", flags=__future__.annotations.compiler_flag), namespace)
    result = registry.run_check(exercise_id, namespace[ex.answer])
    assert (result.points, result.status) == (0, "not_attempted"), result.message


@pytest.mark.parametrize("notebook", list(NOTEBOOKS))
def test_every_solution_cell_is_a_registered_exercise_of_its_notebook(notebook):
    for exercise_id in solution_cells(notebook):
        assert exercise_id in registry.REGISTRY, f"no checker registered for {exercise_id}"
        assert registry.REGISTRY[exercise_id].notebook == notebook

"""Write an nbgrader course directory from the course notebooks, for instructors who use nbgrader.

    python -m trnlab.course nbgrader-export COURSE_DIR [--notebook 01_training_data ...]
    cd COURSE_DIR && nbgrader generate_assignment 01_training_data && ...  (docs/instructors.md)

One assignment per notebook: ``COURSE_DIR/source/<notebook>/<notebook>.ipynb`` is the student
notebook with

- each solution cell's stub lines (``# YOUR CODE HERE`` / ``raise NotImplementedError``) replaced by
  ``### BEGIN SOLUTION`` … ``### END SOLUTION`` around the *body* of the reference solution
  (tests/solutions/<id>.py), so the def line, its decorators (``@nki.jit``) and the imports above
  stay in the release exactly as the student notebook has them;
- each check cell keeping its ``check(...)`` (✓/✗, never raises) and gaining a hidden test
  (``### BEGIN HIDDEN TESTS`` … ``nbgrader_test(...)`` …) that raises on an answer that does not
  pass. nbgrader strips it from the release and puts it back when it autogrades, so a student never
  runs it; the points are written into that cell's metadata from the registry, the one place
  points live.

``COURSE_DIR/nbgrader_config.py`` sets nbgrader's code stub to the course's, so the release's
solution cells are the student notebook's stubs, and keeps the notebooks' stored outputs (plots,
tables) in the release. The hidden tests judge through `trnlab.course.oracle`, in another process,
like a student's check; everything else runs in the student's kernel, as nbgrader always does.
"""

from __future__ import annotations

import argparse
import ast
import textwrap
from pathlib import Path

import nbformat

from trnlab import NOTEBOOKS_DIR
from trnlab.course import exercises as registry
from trnlab.course.notebook import find_exercise_cells, read_notebook
from trnlab.course.solve import SOLUTIONS_DIR, MissingSolution, solution_path

STUB = ("# YOUR CODE HERE", "raise NotImplementedError")
CONFIG = '''"""nbgrader configuration written by `python -m trnlab.course nbgrader-export`."""
from nbgrader.preprocessors import (CheckCellMetadata, ClearHiddenTests, ClearMarkScheme, ClearSolutions,
                                    ComputeChecksums, IncludeHeaderFooter, InstantiateTests, LockCells, SaveCells)

c = get_config()  # noqa: F821
c.CourseDirectory.root = {root!r}
# The release's solution cells are exactly the course notebooks' stubs.
c.ClearSolutions.code_stub = {{"python": "# YOUR CODE HERE\\nraise NotImplementedError"}}
# Keep the notebooks' stored outputs (plots, tables) in the release: nbgrader's ClearOutput is left out.
c.GenerateAssignment.preprocessors = [IncludeHeaderFooter, InstantiateTests, LockCells, ClearSolutions,
                                      CheckCellMetadata, ComputeChecksums, SaveCells, ClearHiddenTests,
                                      ClearMarkScheme, ComputeChecksums, CheckCellMetadata]
c.Execute.timeout = 600  # seconds per cell when autograding (a 05 check simulates kernels)
# Autograde with nbgrader's Execute minus nbclient's Output-widget message that can leave a widget
# cell waiting for a reply that already came (trnlab/course/quiet_widgets.py).
from nbgrader.converters.autograde import Autograde  # noqa: E402
from nbgrader.preprocessors import Execute  # noqa: E402
from trnlab.course.nbgrader_execute import QuietExecute  # noqa: E402

c.Autograde.autograde_preprocessors = [QuietExecute if p is Execute else p
                                       for p in Autograde.class_traits()["autograde_preprocessors"].default()]
'''


def solution_body(source: str, answer: str) -> str:
    """The reference solution as the body of its answer function: other top-level statements
    (imports, helpers) first, then the answer function's own body, unindented."""
    tree = ast.parse(source)
    lines = source.splitlines()
    head: list[str] = []
    body: list[str] | None = None
    for node in tree.body:
        start = (node.decorator_list[0].lineno if getattr(node, "decorator_list", None) else node.lineno) - 1
        chunk = lines[start:node.end_lineno]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == answer:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and len(node.body) > 1:
                first = node.body[1]  # the docstring stays with the stub's def
            body = textwrap.dedent("\n".join(lines[first.lineno - 1 - _comments_above(lines, first.lineno - 1):node.end_lineno])).splitlines()
        else:
            head += chunk
    if body is None:
        raise ValueError(f"the solution does not define `{answer}`")
    return "\n".join([*head, *body])


def _comments_above(lines: list[str], index: int) -> int:
    count = 0
    while index - count - 1 >= 0 and lines[index - count - 1].strip().startswith("#"):
        count += 1
    return count


def source_cell(stub: str, body: str) -> str:
    """The stub with its two stub lines replaced by the solution body between nbgrader's markers."""
    lines = stub.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == STUB[0] and i + 1 < len(lines) and lines[i + 1].strip().startswith(STUB[1]):
            indent = line[: len(line) - len(line.lstrip())]
            region = ["### BEGIN SOLUTION", *body.splitlines(), "### END SOLUTION"]
            return "\n".join([*lines[:i], *(indent + r if r else r for r in region), *lines[i + 2:]])
    raise ValueError("the stub has no '# YOUR CODE HERE' / 'raise NotImplementedError' lines")


def hidden_test(check_source: str, exercise_id: str, answer: str) -> str:
    return (f"{check_source.rstrip()}\n### BEGIN HIDDEN TESTS\n"
            f"from trnlab.course import nbgrader_test  # raises unless the answer passes\n"
            f"nbgrader_test({exercise_id!r}, {answer})\n### END HIDDEN TESTS")


def source_notebook(nb: nbformat.NotebookNode, solutions_dir: Path = SOLUTIONS_DIR) -> nbformat.NotebookNode:
    """The nbgrader source version of a course notebook (a copy)."""
    registry.load_all()
    source = nbformat.from_dict(nb)
    for exercise_id, cells in find_exercise_cells(source).items():
        ex = registry.get(exercise_id)
        path = solution_path(exercise_id, solutions_dir=solutions_dir)
        if not path.is_file():
            raise MissingSolution(f"no reference solution for {exercise_id}: missing {path}")
        body = solution_body(path.read_text(), ex.answer)
        for index in cells.solution:
            cell = source.cells[index]
            cell.source = source_cell(cell.source, body)
            cell.outputs, cell.execution_count = [], None
            cell.metadata["nbgrader"] = {"grade": False, "grade_id": exercise_id, "locked": False,
                                         "schema_version": 3, "solution": True}
        for index in cells.check:
            cell = source.cells[index]
            cell.source = hidden_test(cell.source, exercise_id, ex.answer)
            cell.metadata["nbgrader"] = {"grade": True, "grade_id": ex.check_cell_id, "locked": True,
                                         "points": ex.points, "schema_version": 3, "solution": False}
    return source


def export(root: Path, notebooks: list[Path], solutions_dir: Path = SOLUTIONS_DIR) -> list[Path]:
    root = Path(root).resolve()
    written = []
    for path in notebooks:
        target = root / "source" / path.stem / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(source_notebook(read_notebook(path), solutions_dir), target)
        written.append(target)
    (root / "nbgrader_config.py").write_text(CONFIG.format(root=str(root)))
    return written


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m trnlab.course nbgrader-export", description=__doc__.split("\n")[0])
    parser.add_argument("course_dir", type=Path, help="the nbgrader course directory to write (source/ and config)")
    parser.add_argument("--notebook", action="append", default=[], metavar="NAME",
                        help="export this course notebook (e.g. 01_training_data); repeatable; default: all with exercises")
    parser.add_argument("--solutions", type=Path, default=SOLUTIONS_DIR, help=f"default {SOLUTIONS_DIR}")
    args = parser.parse_args(argv)
    registry.load_all()
    if args.notebook:
        paths = [NOTEBOOKS_DIR / f"{name}.ipynb" for name in args.notebook]
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            parser.error(f"no such notebook: {', '.join(missing)}")
    else:
        paths = [p for p in sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))
                 if any(c.solution for c in find_exercise_cells(read_notebook(p)).values())]
    try:
        written = export(args.course_dir, paths, args.solutions)
    except (MissingSolution, ValueError) as error:
        print(f"error: {error}")
        return 1
    for path in written:
        print(f"wrote {path}")
    print(f"wrote {args.course_dir.resolve() / 'nbgrader_config.py'}; next: cd {args.course_dir} && "
          f"nbgrader generate_assignment {paths[0].stem if paths else 'NAME'}")
    return 0

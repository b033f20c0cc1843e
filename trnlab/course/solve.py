"""Write a solved (or deliberately wrong) copy of a notebook from the reference solutions.

    python -m trnlab.course solve notebooks/01_training_data.ipynb -o solved/01_training_data.ipynb
    python -m trnlab.course solve notebooks/01_training_data.ipynb -o wrong.ipynb --wrong

Every solution cell (nbgrader ``"solution": true``) gets the source of
``tests/solutions/<grade_id>.py`` (``<grade_id>.wrong.py`` with ``--wrong``: a plausible mistake
that must earn zero). If any exercise has no reference file, nothing is written and the missing
files are named. Outputs of replaced cells are cleared; the copy is not executed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import nbformat

from trnlab import REPO_ROOT
from trnlab.course.notebook import NotANotebook, find_exercise_cells, read_notebook

SOLUTIONS_DIR = REPO_ROOT / "tests" / "solutions"


class MissingSolution(Exception):
    """A solution cell has no reference file."""


def solution_path(grade_id: str, wrong: bool = False, solutions_dir: Path = SOLUTIONS_DIR) -> Path:
    return Path(solutions_dir) / f"{grade_id}{'.wrong' if wrong else ''}.py"


def solve_notebook(nb: nbformat.NotebookNode, wrong: bool = False,
                   solutions_dir: Path = SOLUTIONS_DIR) -> tuple[nbformat.NotebookNode, list[str]]:
    """Return a copy of `nb` with every solution cell replaced, and the exercise ids replaced."""
    solved = nbformat.from_dict(nb)  # a deep copy
    found = {i: c for i, c in find_exercise_cells(solved).items() if c.solution}
    missing = [str(solution_path(i, wrong, solutions_dir)) for i in found if not solution_path(i, wrong, solutions_dir).is_file()]
    if missing:
        raise MissingSolution(f"no reference {'wrong answer' if wrong else 'solution'} for "
                              f"{len(missing)} exercise(s): missing {', '.join(missing)}")
    for grade_id, cells in found.items():
        source = solution_path(grade_id, wrong, solutions_dir).read_text().rstrip("\n")
        for index in cells.solution:
            solved.cells[index].source = source
            solved.cells[index].outputs = []
            solved.cells[index].execution_count = None
    return solved, list(found)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m trnlab.course solve", description=__doc__.split("\n")[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("-o", "--out", type=Path, required=True,
                        help="the solved copy: a .ipynb file, or a folder to write it into")
    parser.add_argument("--wrong", action="store_true", help="insert the deliberately wrong answers instead")
    parser.add_argument("--solutions", type=Path, default=SOLUTIONS_DIR, help=f"default {SOLUTIONS_DIR}")
    args = parser.parse_args(argv)
    # -o key/ or -o key (no .ipynb): a folder that receives the notebook under its own name
    out = args.out / args.notebook.name if args.out.is_dir() or args.out.suffix != ".ipynb" else args.out
    if out.resolve() == args.notebook.resolve():
        parser.error("refusing to overwrite the notebook itself; choose another -o")
    try:
        solved, ids = solve_notebook(read_notebook(args.notebook), args.wrong, args.solutions)
    except (MissingSolution, NotANotebook, OSError) as error:
        print(f"error: {args.notebook}: {error}")
        return 1
    if not ids:
        print(f"error: {args.notebook} has no solution cells (nbgrader metadata 'solution': true)")
        return 1
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(solved, out)
    print(f"wrote {out}: {len(ids)} {'wrong answer' if args.wrong else 'solution'}(s) inserted ({', '.join(ids)})")
    return 0

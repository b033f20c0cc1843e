"""Find the exercises in a notebook by their nbgrader metadata, and read untrusted notebook files.

A solution cell carries ``{"nbgrader": {"grade_id": "nb01_encode", "solution": true}}``; its check
cell carries ``{"nbgrader": {"grade_id": "nb01_encode_check", "grade": true}}``. The grader and
`solve` locate exercises only through that metadata (never by position), so reordered cells are
found where they are. A solution cell whose metadata was lost (the student deleted the cell and
wrote a new one) can still be found by the name its answer defines: `cells_defining`.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path

import nbformat

MAX_NOTEBOOK_BYTES = 100 * 2**20  # a course notebook is a few MB; anything bigger is not a submission


class NotANotebook(Exception):
    """The file cannot be read as a Jupyter notebook; the message says why."""


def read_notebook(path: Path) -> nbformat.NotebookNode:
    """Read `path` as a v4 notebook, or raise `NotANotebook` naming what is wrong with it."""
    path = Path(path)
    size = path.stat().st_size
    if size > MAX_NOTEBOOK_BYTES:
        raise NotANotebook(f"file too large: {size / 2**20:.0f} MiB, at most {MAX_NOTEBOOK_BYTES // 2**20} MiB")
    return read_notebook_bytes(path.read_bytes())


def read_notebook_bytes(raw: bytes) -> nbformat.NotebookNode:
    """`read_notebook` of a file's content."""
    if len(raw) > MAX_NOTEBOOK_BYTES:
        raise NotANotebook(f"file too large: {len(raw) / 2**20:.0f} MiB, at most {MAX_NOTEBOOK_BYTES // 2**20} MiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise NotANotebook(f"not a text file (not UTF-8 at byte {error.start})") from None
    try:
        content = json.loads(text)
    except json.JSONDecodeError as error:
        raise NotANotebook(f"not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})") from None
    if not isinstance(content, dict) or not isinstance(content.get("cells"), list):
        raise NotANotebook("valid JSON but not a notebook: no list of 'cells'")
    try:
        nb = nbformat.reads(text, as_version=4)
    except Exception as error:  # nbformat raises several types for malformed notebooks
        raise NotANotebook(f"not a readable notebook: {type(error).__name__}: {error}") from None
    for index, cell in enumerate(nb.cells):
        if cell.get("cell_type") not in ("code", "markdown", "raw") or not isinstance(cell.get("source"), str):
            raise NotANotebook(f"cell {index} is malformed (cell_type {cell.get('cell_type')!r})")
    return nb


def nbgrader_meta(cell: nbformat.NotebookNode) -> dict:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta if isinstance(meta, dict) else {}


@dataclass(frozen=True)
class ExerciseCells:
    """Where one exercise's cells are in a notebook (indices into ``nb.cells``)."""

    id: str
    solution: list[int]  # solution cells with this grade_id (normally exactly one)
    check: list[int]  # check cells (grade_id + "_check")


def find_exercise_cells(nb: nbformat.NotebookNode) -> dict[str, ExerciseCells]:
    """Every exercise whose solution or check cell appears in `nb`, keyed by grade_id."""
    solutions: dict[str, list[int]] = {}
    checks: dict[str, list[int]] = {}
    for index, cell in enumerate(nb.cells):
        meta = nbgrader_meta(cell)
        grade_id = meta.get("grade_id")
        if cell.cell_type != "code" or not isinstance(grade_id, str):
            continue
        if meta.get("solution"):
            solutions.setdefault(grade_id, []).append(index)
        elif meta.get("grade") and grade_id.endswith("_check"):
            checks.setdefault(grade_id[: -len("_check")], []).append(index)
    ids = list(dict.fromkeys([*solutions, *checks]))
    return {i: ExerciseCells(i, solutions.get(i, []), checks.get(i, [])) for i in ids}


def defined_names(source: str) -> set[str]:
    """Top-level names a cell binds (def, class, assignment, import); empty if it does not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def cells_defining(nb: nbformat.NotebookNode, name: str) -> list[int]:
    """Indices of code cells that bind `name` at top level."""
    return [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code" and name in defined_names(cell.source)]

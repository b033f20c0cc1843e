"""The grading command against adversarial submissions, on a tiny fixture exercise set.

One real `python -m trnlab.course grade` run grades every case of
tests/fixtures/grading/notebooks.py (with -j 2 and short time limits); each test reads its
student's line of the results. The fixture exercises come in through `--extra-checks`, which
also exercises the instructor's private-checks path.
"""

from __future__ import annotations

import csv
import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from trnlab import REPO_ROOT
from trnlab.course.notebook import NotANotebook, cells_defining, defined_names, find_exercise_cells, read_notebook
from trnlab.course.solve import MissingSolution, solve_notebook

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "grading"
CHECKS = FIXTURES / "checks.py"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fixture = _load("grading_fixture_notebooks", FIXTURES / "notebooks.py")


def _digest(folder: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade every adversarial case in one batch; return (results by student, csv rows, output folder)."""
    root = tmp_path_factory.mktemp("grading")
    submissions = root / "submissions"
    submissions.mkdir()
    for student, content in fixture.adversarial_notebooks().items():
        path = submissions / f"{student}.ipynb"
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            nbformat.write(content, path)
    # a student who hands in a folder: the notebook, a scratch notebook, an editor checkpoint, notes
    folder = submissions / "folder_student"
    (folder / ".ipynb_checkpoints").mkdir(parents=True)
    nbformat.write(fixture.fixture_notebook({**fixture.SOLVED, "fx_vowels": fixture.STUBS["fx_vowels"]}),
                   folder / "fixture_grading.ipynb")
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")]), folder / "scratch.ipynb")
    nbformat.write(fixture.fixture_notebook(fixture.SOLVED), folder / ".ipynb_checkpoints" / "fixture_grading-checkpoint.ipynb")
    (folder / "notes.txt").write_text("my notes")
    (submissions / "empty_folder").mkdir()
    before = _digest(submissions)
    out = root / "out"
    command = [sys.executable, "-m", "trnlab.course", "grade", *sorted(map(str, submissions.iterdir())),
               "--extra-checks", str(CHECKS), "--out", str(out / "grades.csv"), "-j", "2",
               "--timeout-cell", "4", "--timeout-notebook", "60", "--memory-limit", "1300", "--quiet"]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=root)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert _digest(submissions) == before, "a submission file was modified by grading"
    report = json.loads((out / "grades.json").read_text())
    with open(out / "grades.csv") as f:
        rows = {row["student"]: row for row in csv.DictReader(f)}
    return {s["student"]: s for s in report["students"]}, rows, out


def points(graded, student: str) -> dict[str, int]:
    return {i: e["points"] for i, e in graded[0][student]["exercises"].items()}


def statuses(graded, student: str) -> dict[str, str]:
    return {i: e["status"] for i, e in graded[0][student]["exercises"].items()}


FULL = {"fx_square": 1, "fx_mean": 2, "fx_vowels": 3}
ZERO = {"fx_square": 0, "fx_mean": 0, "fx_vowels": 0}


def test_every_submission_gets_a_line_in_the_csv_with_one_column_per_exercise(graded):
    results, rows, out = graded
    assert set(rows) == {*fixture.adversarial_notebooks(), "folder_student", "empty_folder"}
    assert list(next(iter(rows.values()))) == ["student", "fx_square", "fx_mean", "fx_vowels", "total"]
    for student, row in rows.items():
        assert int(row["total"]) == sum(int(row[i]) for i in FULL) == results[student]["total"]
        assert (out / "feedback" / f"{student}.md").is_file()


def test_solved_notebook_earns_full_marks(graded):
    assert points(graded, "solved") == FULL


def test_unsolved_stubs_earn_zero_as_not_attempted(graded):
    assert points(graded, "unsolved") == ZERO
    assert set(statuses(graded, "unsolved").values()) == {"not_attempted"}


def test_wrong_answers_earn_zero_with_the_checkers_hint(graded):
    assert points(graded, "wrong") == ZERO
    assert set(statuses(graded, "wrong").values()) == {"failed"}
    feedback = (graded[2] / "feedback" / "wrong.md").read_text()
    assert "expected 5, got 0 for input 'AEIOU'" in feedback


def test_instructors_extra_check_can_fail_an_answer_the_public_check_accepts(graded):
    results = graded[0]["fails_hidden_check"]["exercises"]
    assert points(graded, "fails_hidden_check") == {**FULL, "fx_vowels": 0}
    assert "'y' is not a vowel" in results["fx_vowels"]["message"]


def test_infinite_loop_in_a_cell_is_interrupted_and_the_rest_is_graded(graded):
    assert points(graded, "loop_cell") == FULL
    assert any("did not finish within 4 s" in p for p in graded[0]["loop_cell"]["notebooks"][0]["problems"])


def test_endless_output_is_interrupted_and_the_rest_is_graded(graded):
    run = graded[0]["print_flood"]["notebooks"][0]
    assert points(graded, "print_flood") == FULL
    assert run["cell_errors"] == []  # the output cap drops text; printing itself never fails
    assert any("did not finish within 4 s" in p for p in run["problems"])


def test_answer_that_loops_when_checked_times_out_alone(graded):
    assert points(graded, "loop_answer") == {**FULL, "fx_mean": 0}
    assert statuses(graded, "loop_answer")["fx_mean"] == "timeout"


def test_loop_that_ignores_interrupts_gets_its_kernel_replaced(graded):
    run = graded[0]["loop_no_interrupt"]["notebooks"][0]
    assert points(graded, "loop_no_interrupt") == FULL
    assert run["kernels"] == 2


@pytest.mark.parametrize("student", ["os_exit", "segfault"])
def test_kernel_that_dies_is_restarted_without_that_cell(graded, student):
    run = graded[0][student]["notebooks"][0]
    assert points(graded, student) == FULL
    assert run["kernels"] == 2
    assert any("kernel died" in p for p in run["problems"])


def test_runaway_memory_hits_the_kernel_memory_limit_not_the_machine(graded):
    run = graded[0]["memory_hog"]["notebooks"][0]
    assert points(graded, "memory_hog") == FULL
    assert any("MemoryError" in e for e in run["cell_errors"])


@pytest.mark.parametrize("student", ["not_json", "json_not_notebook", "binary"])
def test_file_that_is_not_a_notebook_gets_zero_and_a_reason(graded, student):
    result = graded[0][student]
    assert points(graded, student) == ZERO
    assert set(statuses(graded, student).values()) == {"not_graded"}
    assert "could not be read" in result["notebooks"][0]["problems"][0]
    assert "could not be read" in result["exercises"]["fx_mean"]["message"]


def test_deleted_exercise_cells_lose_only_that_exercise(graded):
    assert points(graded, "deleted_cells") == {**FULL, "fx_mean": 0}
    assert statuses(graded, "deleted_cells")["fx_mean"] == "missing"


def test_solution_recreated_without_metadata_is_found_by_the_name_it_defines(graded):
    assert points(graded, "recreated_cell") == FULL
    assert any("lost its metadata" in p for p in graded[0]["recreated_cell"]["notebooks"][0]["problems"])


def test_reordered_cells_are_graded_where_they_are(graded):
    assert points(graded, "reordered") == FULL


def test_redefined_check_and_fake_grader_output_earn_nothing(graded):
    assert points(graded, "fake_check") == ZERO
    assert set(statuses(graded, "fake_check").values()) == {"not_attempted"}


def test_results_forged_with_a_nonce_from_history_are_not_counted(graded):
    assert points(graded, "forged_results") == ZERO
    assert set(statuses(graded, "forged_results").values()) == {"not_graded"}


def test_monkeypatched_numpy_and_checkers_are_undone_while_checking(graded):
    result = graded[0]["monkeypatch"]["exercises"]
    assert points(graded, "monkeypatch") == ZERO
    assert set(statuses(graded, "monkeypatch").values()) == {"failed"}
    tampered = result["fx_square"]["tampered"]
    assert "numpy.allclose" in tampered and "trnlab.course.exercises.collect_cases" in tampered
    assert any("plain.number (its code)" in t for t in tampered)


def test_reading_the_checkers_frames_finds_no_expected_value(graded):
    assert points(graded, "frame_reader") == ZERO
    assert set(statuses(graded, "frame_reader").values()) == {"failed"}


def test_objects_that_equal_everything_are_rejected_as_answers(graded):
    results = graded[0]["equals_everything"]["exercises"]
    assert points(graded, "equals_everything") == ZERO
    assert "subclass" in results["fx_square"]["message"] and "subclass" in results["fx_vowels"]["message"]


def test_the_checkers_are_switched_off_or_absent_while_the_answer_runs(graded):
    results = graded[0]["uses_checker"]["exercises"]
    assert points(graded, "uses_checker") == {**ZERO, "fx_vowels": 3}
    # the instructor's file is never loaded in the kernel; the public checkers are switched off
    assert "KeyError: 'trnlab_course_extra_checks'" in results["fx_square"]["message"]
    assert "switched off" in results["fx_mean"]["message"]


def test_feedback_accuses_no_one_of_patching_when_nothing_was_patched(graded):
    for student in ("solved", "unsolved", "wrong", "frame_reader", "equals_everything"):
        assert not any(e["tampered"] for e in graded[0][student]["exercises"].values()), student
        assert "had replaced" not in (graded[2] / "feedback" / f"{student}.md").read_text()


def test_folder_submission_grades_its_notebook_and_ignores_scratch_and_checkpoints(graded):
    assert points(graded, "folder_student") == {**FULL, "fx_vowels": 0}
    problems = graded[0]["folder_student"]["problems"]
    assert any("scratch.ipynb" in p and "ignored" in p for p in problems)
    assert len(graded[0]["folder_student"]["notebooks"]) == 1


def test_empty_folder_is_not_submitted(graded):
    assert points(graded, "empty_folder") == ZERO
    assert set(statuses(graded, "empty_folder").values()) == {"not_submitted"}


def test_feedback_tells_the_student_what_happened(graded):
    feedback = (graded[2] / "feedback" / "os_exit.md").read_text()
    assert feedback.startswith("# Feedback for os_exit: 6/6 points")
    assert "the kernel died while running cell" in feedback
    feedback = (graded[2] / "feedback" / "monkeypatch.md").read_text()
    assert "the notebook had replaced" in feedback and "numpy.allclose" in feedback


# ----------------------------------------------------------------------------- without a kernel


def test_read_notebook_names_what_is_wrong(tmp_path):
    cases = {"text.ipynb": b"hello", "list.ipynb": b"[1, 2]", "latin1.ipynb": "caf\xe9".encode("latin-1"),
             "cells.ipynb": b'{"cells": [{"cell_type": "bogus", "source": ""}], "metadata": {}, '
                            b'"nbformat": 4, "nbformat_minor": 5}'}
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(NotANotebook):
            read_notebook(tmp_path / name)


def test_exercise_cells_are_found_by_metadata_not_position():
    nb = fixture.fixture_notebook()
    nb.cells = nb.cells[::-1]
    found = find_exercise_cells(nb)
    assert set(found) == set(FULL)
    for grade_id, cells in found.items():
        assert len(cells.solution) == 1 and len(cells.check) == 1
        assert nb.cells[cells.solution[0]].metadata["nbgrader"]["grade_id"] == grade_id


def test_defined_names_sees_defs_assignments_and_imports():
    assert defined_names("def f():\n    x = 1\ng = lambda: 0\nimport numpy as np\na, (b, c) = 1, (2, 3)") == {
        "f", "g", "np", "a", "b", "c"}
    assert defined_names("def broken(:") == set()
    assert cells_defining(fixture.fixture_notebook(), "mean") == [
        fixture.solution_index(fixture.fixture_notebook(), "fx_mean")]


def test_solve_inserts_reference_solutions_and_names_missing_ones(tmp_path):
    for grade_id, source in fixture.SOLVED.items():
        (tmp_path / f"{grade_id}.py").write_text(source + "\n")
        (tmp_path / f"{grade_id}.wrong.py").write_text(fixture.WRONG[grade_id] + "\n")
    stub = fixture.fixture_notebook()
    solved, ids = solve_notebook(stub, solutions_dir=tmp_path)
    assert sorted(ids) == sorted(FULL)
    for grade_id in FULL:
        assert solved.cells[fixture.solution_index(solved, grade_id)].source == fixture.SOLVED[grade_id]
        assert stub.cells[fixture.solution_index(stub, grade_id)].source == fixture.STUBS[grade_id]  # a copy
    wrong, _ = solve_notebook(stub, wrong=True, solutions_dir=tmp_path)
    assert wrong.cells[fixture.solution_index(wrong, "fx_mean")].source == fixture.WRONG["fx_mean"]
    (tmp_path / "fx_mean.py").unlink()
    with pytest.raises(MissingSolution, match="fx_mean.py"):
        solve_notebook(stub, solutions_dir=tmp_path)


def test_solve_command_fails_clearly_when_a_solution_is_missing(tmp_path):
    nbformat.write(fixture.fixture_notebook(), tmp_path / "fixture.ipynb")
    finished = subprocess.run(
        [sys.executable, "-m", "trnlab.course", "solve", str(tmp_path / "fixture.ipynb"), "-o", str(tmp_path / "out.ipynb"),
         "--solutions", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert finished.returncode == 1
    assert "missing" in finished.stdout and "fx_square.py" in finished.stdout
    assert not (tmp_path / "out.ipynb").exists()


def test_results_replace_a_link_planted_in_the_output_folder_instead_of_following_it(tmp_path):
    from trnlab.course.results import write_csv

    target = tmp_path / "elsewhere.txt"
    target.write_text("untouched")
    (tmp_path / "grades.csv").symlink_to(target)
    write_csv([], [], tmp_path / "grades.csv")
    assert target.read_text() == "untouched"
    assert not (tmp_path / "grades.csv").is_symlink()
    assert (tmp_path / "grades.csv").read_text().startswith("student,")

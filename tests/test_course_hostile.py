"""The grading command against a hostile student who has read the grader's source (issue 24).

One real `python -m trnlab.course grade` run (with `-j 2` and the fixture exercises of
tests/fixtures/grading/checks.py as the instructor's private checks) grades the notebooks of
tests/fixtures/grading/hostile.py beside a solved, a wrong and an unsolved one. Each test names
the attack it defeats; docs/instructors.md ("What the grader protects against and what it does
not") cites these tests by name.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest

from trnlab import REPO_ROOT

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "grading"
sys.path.insert(0, str(FIXTURES))  # hostile.py builds on notebooks.py
spec = importlib.util.spec_from_file_location("grading_fixture_hostile", FIXTURES / "hostile.py")
hostile = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hostile)
sys.path.remove(str(FIXTURES))

FULL = {"fx_square": 1, "fx_mean": 2, "fx_vowels": 3}
ZERO = {"fx_square": 0, "fx_mean": 0, "fx_vowels": 0}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade the hostile batch; return (results by student, finished process, output folder, evidence)."""
    root = tmp_path_factory.mktemp("hostile")
    submissions, out = root / "submissions", root / "out"
    submissions.mkdir()
    # Where the attacks leave evidence: writable by a kernel that runs as a user of its own too.
    evidence = Path(tempfile.mkdtemp(prefix="trnlab-hostile-"))
    evidence.chmod(0o1777)
    for student, nb in hostile.hostile_notebooks().items():
        nbformat.write(nb, submissions / f"{student}.ipynb")
    command = [sys.executable, "-m", "trnlab.course", "grade", *sorted(map(str, submissions.iterdir())),
               "--extra-checks", str(FIXTURES / "checks.py"), "--out", str(out / "grades.csv"), "-j", "2",
               "--timeout-cell", "20", "--timeout-notebook", "120", "--memory-limit", "1300", "--quiet"]
    env = {**os.environ, "TRNLAB_TEST_HOSTILE_DIR": str(evidence)}
    finished = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=root, env=env)
    time.sleep(2)  # a detached process that survived would rewrite grades.csv by now
    yield {s["student"]: s for s in json.loads((out / "grades.json").read_text())["students"]}, finished, out, evidence
    pid_file = evidence / "detached.pid"
    if pid_file.exists():  # never leave a survivor behind, whatever the test found
        try:
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
        except (OSError, ValueError):
            pass
    shutil.rmtree(evidence, ignore_errors=True)


def points(graded, student: str) -> dict[str, int]:
    return {i: e["points"] for i, e in graded[0][student]["exercises"].items()}


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def test_grading_still_succeeds_and_well_behaved_students_are_graded_as_before(graded):
    assert graded[1].returncode == 0, graded[1].stderr[-3000:]
    assert points(graded, "solved") == FULL
    assert points(graded, "wrong") == ZERO and points(graded, "unsolved") == ZERO


def test_a_detached_process_of_a_notebook_does_not_outlive_grading(graded):
    pid = int((graded[3] / "detached.pid").read_text())  # the attack did start it
    assert not _alive(pid), "the detached process survived grading"
    with open(graded[2] / "grades.csv") as f:
        students = [row["student"] for row in csv.DictReader(f)]
    assert "forged" not in students and "solved" in students


def test_a_notebook_cannot_change_a_classmates_grade_by_rewriting_the_submission(graded):
    assert points(graded, "aaa_classmate") == FULL
    assert points(graded, "zzz_victim") == ZERO  # graded as handed in, before any kernel ran


def test_a_kernel_cannot_write_onto_the_graders_output(graded):
    assert "mallory" not in graded[1].stdout and "mallory" not in graded[1].stderr
    assert points(graded, "forged_summary") == FULL
    assert "  forged_summary: 6" in graded[1].stdout  # the grader's own line


def test_a_kernel_inherits_no_descriptor_of_the_grader(graded):
    assert (graded[3] / "descriptors").read_text() == "/dev/null /dev/null /dev/null"


def test_a_kernel_cannot_read_the_graders_memory(graded):
    assert (graded[3] / "grader_memory").read_text().startswith("refused"), (graded[3] / "grader_memory").read_text()


def test_the_instructors_private_checks_never_reach_the_kernel(graded):
    errors = " ".join(graded[0]["private_checks"]["notebooks"][0]["cell_errors"])
    assert "private checks seen: [] ''" in errors, errors  # the cell ran, and found nothing
    feedback = (graded[2] / "feedback" / "private_checks.md").read_text()
    assert "rhythm" not in feedback and "HiddenVowels" not in feedback
    assert points(graded, "private_checks") == FULL


def test_the_hidden_check_cell_holds_no_seed(graded):
    assert points(graded, "seed_from_cell")["fx_mean"] == 0


def test_calling_the_asked_for_function_plainly_earns_nothing(graded):
    result = graded[0]["calls_asked_for"]["exercises"]["fx_mean"]
    assert result["points"] == 0 and "statistics.mean" in result["message"], result


# The asked-for code is absent from the kernel for the whole hidden check cell (trnlab/course/absent.py):
# a saved reference to it, a pre_run_cell hook or a wrapper around the grader's hook finds nothing to run.
def test_an_answer_cannot_put_back_the_code_of_a_switched_off_function(graded):
    assert points(graded, "code_restore")["fx_mean"] == 0


def test_answers_worked_out_with_the_package_before_the_check_earn_nothing(graded):
    assert points(graded, "inputs_from_cell")["fx_mean"] == 0


def test_a_wrapped_grading_hook_learns_nothing_usable(graded):
    assert points(graded, "wrapped_hook")["fx_mean"] == 0


def test_code_kept_where_the_grader_cannot_replace_it_is_caught_when_it_runs(graded):
    result = graded[0]["code_restore_hidden"]["exercises"]["fx_mean"]
    assert result["points"] == 0 and "statistics.mean (a reference the notebook kept" in result["message"], result
    assert points(graded, "code_restore_hidden")["fx_vowels"] == FULL["fx_vowels"]  # that check only


def test_the_asked_for_code_is_back_for_the_notebooks_later_cells(graded):
    assert points(graded, "uses_mean_later") == FULL


def test_each_closed_attack_fails_for_want_of_the_package(graded):
    exercises = {student: graded[0][student]["exercises"]["fx_mean"]["message"]
                 for student in ("code_restore", "inputs_from_cell", "wrapped_hook")}
    assert "your code called `statistics.mean`" in exercises["code_restore"], exercises
    assert "KeyError" in exercises["inputs_from_cell"], exercises  # the hook memoised nothing
    assert "Unavailable: statistics.mean" in exercises["wrapped_hook"], exercises

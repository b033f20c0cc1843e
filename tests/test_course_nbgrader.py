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


AUTOGRADE_TIMEOUT_S = 300  # one autograde of 04 takes 15-100 s here; longer is a hang, and fails the test


def _run(args: list[str], cwd: Path, timeout: float = 600) -> str:
    """Run a command in a process group of its own; one that has not finished within `timeout` is
    killed with everything it started and fails the test with the end of its output. (nbclient's
    Output-widget stand-in made 4 of about 120 autogrades hang here, with the kernel idle and the
    reply unread; `trnlab.course.quiet_widgets` removes that race — see its docstring.)"""
    process = subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"{' '.join(map(str, args))} did not finish within {timeout:.0f} s (a hang):\n{output[-4000:]}")
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
        _run([NBGRADER, "autograde", NOTEBOOK, "--student", student, "--force"], course, timeout=AUTOGRADE_TIMEOUT_S)
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


def test_the_exported_config_autogrades_without_the_output_widget_message_race(tmp_path):
    from traitlets.config import Config

    from trnlab.course.nbgrader_export import main as export

    export([str(tmp_path), "--notebook", NOTEBOOK])
    config = Config()
    exec((tmp_path / "nbgrader_config.py").read_text(), {"get_config": lambda: config})
    names = [p.__name__ for p in config.Autograde.autograde_preprocessors]
    assert names[0] == "QuietExecute" and "Execute" not in names and "SaveAutoGrades" in names


def test_the_output_widget_stand_in_never_messages_the_shell_socket():
    from types import SimpleNamespace

    from trnlab.course.quiet_widgets import QuietOutputWidgets

    def refuse(msg):
        raise AssertionError(f"sent on the shell socket: {msg}")

    class Base:
        def on_comm_open_jupyter_widget(self, msg):
            return "other widget"

    class Client(QuietOutputWidgets, Base):
        kc = SimpleNamespace(shell_channel=SimpleNamespace(send=refuse), session=None)
        widget_state = {"c1": {}}

    def comm_open(module, model):
        return {"content": {"comm_id": "c1", "data": {"state": {"_model_module": module, "_model_name": model,
                                                                "outputs": []}}}}

    client = Client()
    stand_in = client.on_comm_open_jupyter_widget(comm_open("@jupyter-widgets/output", "OutputModel"))
    stream = {"msg_type": "stream", "header": {"msg_type": "stream"}, "parent_header": {}, "content": {"name": "stdout", "text": "printed\n"}}
    stand_in.output([], stream, None, 0)
    stand_in.clear_output([], {"parent_header": {}, "content": {"wait": False}}, 0)
    stand_in.output([], stream, None, 0)
    assert client.widget_state["c1"]["outputs"][0]["text"] == "printed\n"  # still recorded in the widget state
    assert client.on_comm_open_jupyter_widget(comm_open("@jupyter-widgets/controls", "IntSliderModel")) == "other widget"

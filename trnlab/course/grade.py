"""Grade student submissions: run each in a fresh kernel, check every exercise, write CSV/JSON/feedback.

    python -m trnlab.course grade submissions/* --out grades.csv -j 2

A submission is a notebook file or a folder of notebooks (one per student). For each notebook:

1. it is read as untrusted JSON (`notebook.read_notebook`) and copied into a temporary folder,
   which is the kernel's working directory; the submitted file is never written;
2. its exercises are found by nbgrader metadata (`notebook.find_exercise_cells`), so reordered
   cells are graded where they are; points come from the registry, never from the file;
3. a fresh kernel runs, in order: the grader's setup cell (`grader_kernel.install`: memory limit,
   checkers, pristine snapshot), then every code cell of the notebook, and after each solution
   cell a hidden cell that checks the answer and publishes an unforgeable result;
4. a cell that exceeds its time limit is interrupted (killed if it ignores the interrupt) and
   skipped; if the kernel dies (``os._exit``, a segfault), a new kernel re-runs the notebook
   without the cells that hung or crashed, so later exercises still earn their points;
5. whatever could not be graded gets zero and a reason.

Results: a CSV (student, one column per exercise, total), a JSON with every detail, and one
markdown feedback file per student.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import functools
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat
import zmq
import zmq.asyncio
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError

from trnlab import NOTEBOOKS_DIR, REPO_ROOT
from trnlab.course import exercises as registry
from trnlab.course.grader_kernel import GRADE_MIME
from trnlab.course.notebook import NotANotebook, cells_defining, find_exercise_cells, nbgrader_meta, read_notebook


@dataclass
class GradeConfig:
    cell_timeout: float = 120.0  # seconds per cell (and per check)
    notebook_timeout: float = 900.0  # seconds per notebook, all kernel restarts included
    memory_limit_mb: int | None = 6144  # address-space limit of each kernel (RLIMIT_AS)
    jobs: int = 1
    extra_checks: Path | None = None
    max_restarts: int = 2  # new kernels after a crash, per notebook
    startup_timeout: float = 120.0


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


# ----------------------------------------------------------------------------- submissions


@dataclass
class Submission:
    student: str
    source: Path
    notebooks: list[Path]  # files to grade (a folder's *.ipynb, or the file itself)


def collect_submissions(paths: list[Path]) -> list[Submission]:
    """One submission per path: a folder (its name is the student) or a file (its stem)."""
    submissions = []
    for path in map(Path, paths):
        if path.is_dir():
            files = sorted(p for p in path.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
            submissions.append(Submission(path.name, path, files))
        else:
            submissions.append(Submission(path.stem, path, [path]))
    counts = Counter(s.student for s in submissions)
    for submission in submissions:  # alice/01.ipynb and bob/01.ipynb: name them by their folder
        if counts[submission.student] > 1:
            submission.student = f"{submission.source.parent.name}/{submission.student}"
    seen: Counter = Counter()
    for submission in submissions:
        seen[submission.student] += 1
        if seen[submission.student] > 1:
            submission.student = f"{submission.student}#{seen[submission.student]}"
    return submissions


def identify_notebook(path: Path, nb: nbformat.NotebookNode | None, known: list[str]) -> str | None:
    """Which course notebook a file is: by the exercise ids in it, else by its file name."""
    if nb is not None:
        ids = [i for i in find_exercise_cells(nb) if i in registry.REGISTRY]
        if ids:
            return Counter(registry.REGISTRY[i].notebook for i in ids).most_common(1)[0][0]
    for name in known:
        if path.stem == name or path.stem.startswith(name):
            return name
    return None


def exercises_of(notebook: str) -> list[registry.Exercise]:
    return [ex for ex in registry.REGISTRY.values() if ex.notebook == notebook]


# ----------------------------------------------------------------------------- one notebook


def _snippet(source: str) -> str:
    first = next((line.strip() for line in source.splitlines() if line.strip()), "")
    return first[:60] + ("…" if len(first) > 60 else "")


def _released_sources(notebook: str) -> set[str]:
    """Code cells of the released notebook, so the fallback never grades the course's own code."""
    path = NOTEBOOKS_DIR / f"{notebook}.ipynb"
    try:
        return {cell.source.strip() for cell in read_notebook(path).cells if cell.cell_type == "code"}
    except (OSError, NotANotebook):
        return set()


@dataclass
class _Step:
    kind: str  # setup | cell | grade
    source: str
    cell: int | None = None  # index in the student's notebook
    exercise: str | None = None


def plan_steps(nb: nbformat.NotebookNode, notebook: str, exercises: list[registry.Exercise],
               results: dict[str, ExerciseGrade], notes: list[str]) -> list[_Step]:
    """The cells to run: the student's code cells, each solution cell followed by a hidden check."""
    found = find_exercise_cells(nb)
    released = None
    grade_after: dict[int, list[str]] = {}
    for ex in exercises:
        cells = found.get(ex.id)
        if cells and cells.solution:
            solution = cells.solution[-1]
            if len(cells.solution) > 1:
                notes.append(f"{ex.id}: {len(cells.solution)} cells carry its solution metadata; the last one was graded")
        else:
            released = _released_sources(notebook) if released is None else released
            candidates = [i for i in cells_defining(nb, ex.answer)
                          if not nbgrader_meta(nb.cells[i]) and nb.cells[i].source.strip() not in released]
            if not candidates:
                results[ex.id] = ExerciseGrade(
                    ex.id, notebook, 0, ex.points, "missing",
                    f"the solution cell of {ex.id} is not in the notebook (deleted?) and no other cell defines `{ex.answer}`")
                continue
            solution = candidates[-1]
            notes.append(f"{ex.id}: its solution cell lost its metadata (deleted and re-created?); graded `{ex.answer}` "
                         f"as defined by cell {solution + 1} ({_snippet(nb.cells[solution].source)})")
        grade_after.setdefault(solution, []).append(ex.id)
    steps: list[_Step] = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        steps.append(_Step("cell", cell.source, cell=index))
        for exercise_id in grade_after.get(index, []):
            steps.append(_Step("grade", "", cell=index, exercise=exercise_id))
    return steps


def _kernel_env(config: GradeConfig) -> dict[str, str]:
    env = dict(os.environ)
    threads = str(max(1, (os.cpu_count() or 1) // max(1, config.jobs)))
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env.setdefault(name, threads)
    env["MPLBACKEND"] = "Agg"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    return env


def _read_result(cell: nbformat.NotebookNode, nonce: str, exercise_id: str) -> dict | None:
    for output in cell.get("outputs", []):
        data = output.get("data", {}) if output.get("output_type") == "display_data" else {}
        result = data.get(GRADE_MIME)
        if isinstance(result, str):
            try:
                result = json.loads(result)
            except json.JSONDecodeError:
                continue
        if isinstance(result, dict) and result.get("nonce") == nonce and result.get("exercise") == exercise_id:
            return result
    return None


def _error_of(cell: nbformat.NotebookNode) -> str | None:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return f"{output.get('ename')}: {str(output.get('evalue'))[:200]}"
    return None


class _Client(NotebookClient):
    """nbclient leaves a timed-out cell's output reader running (it would steal the next cells'
    messages); this client tracks those readers so that they can be cancelled."""

    def __init__(self, *args, grade_cells: set[int] = frozenset(), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._pollers: set[asyncio.Task] = set()
        self.grade_cells = grade_cells  # indices of the grader's hidden cells

    def output(self, outs, msg, display_id, cell_index):
        # Only errors and the grader's own results are ever read. Dropping everything else keeps a
        # notebook that prints (or displays) without end from filling the grader's memory.
        kind = msg["msg_type"]
        if kind == "error" or (kind == "display_data" and cell_index in self.grade_cells
                               and GRADE_MIME in msg["content"].get("data", {})):
            return super().output(outs, msg, display_id, cell_index)
        return None

    async def _async_poll_output_msg(self, *args, **kwargs) -> None:
        task = asyncio.current_task()
        self._pollers.add(task)
        try:
            return await super()._async_poll_output_msg(*args, **kwargs)
        finally:
            self._pollers.discard(task)

    async def _async_poll_kernel_alive(self) -> None:
        task = asyncio.current_task()
        self._pollers.add(task)
        try:
            return await super()._async_poll_kernel_alive()
        finally:
            self._pollers.discard(task)

    async def cancel_pollers(self) -> None:
        for task in list(self._pollers):
            task.cancel()
        await asyncio.gather(*self._pollers, return_exceptions=True)


async def _recovered(client: _Client) -> bool:
    """After a timeout: interrupt the kernel and see whether it answers again within 5 s."""
    try:
        await client.cancel_pollers()
        await client.km.interrupt_kernel()
        probe = nbformat.v4.new_code_cell("pass")
        client.nb.cells.append(probe)
        client.timeout = 5
        await client.async_execute_cell(probe, len(client.nb.cells) - 1)
        return True
    except Exception:  # still stuck (the cell ignores SIGINT) or dead
        return False


async def _run_notebook(nb: nbformat.NotebookNode, notebook: str, workdir: Path, config: GradeConfig,
                        run: NotebookRun) -> dict[str, ExerciseGrade]:
    exercises = exercises_of(notebook)
    by_id = {ex.id: ex for ex in exercises}
    results: dict[str, ExerciseGrade] = {}
    steps = plan_steps(nb, notebook, exercises, results, run.problems)
    nonce, hook = secrets.token_hex(16), f"_trnlab_grade_{secrets.token_hex(6)}"
    setup = (
        "import trnlab.course.grader_kernel as _trnlab_grader_kernel\n"
        f"_trnlab_grader_kernel.install(nonce={nonce!r}, hook={hook!r}, exercise_ids={list(by_id)!r},\n"
        f"    checker_modules={sorted({ex.checker.__module__ for ex in exercises})!r},\n"
        f"    extra_checks={str(config.extra_checks) if config.extra_checks else None!r},\n"
        f"    memory_limit_mb={config.memory_limit_mb!r})\n"
        "del _trnlab_grader_kernel\n"
    )
    for step in steps:
        if step.kind == "grade":
            step.source = f"{hook}({step.exercise!r})"
    steps.insert(0, _Step("setup", setup))
    exec_nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s.source) for s in steps])
    skipped: dict[int, str] = {}  # student cell index -> "timeout" | "crashed"
    deadline = time.monotonic() + config.notebook_timeout
    env = _kernel_env(config)

    def fail(exercise_id: str, status: str, message: str) -> None:
        results.setdefault(exercise_id, ExerciseGrade(exercise_id, notebook, 0, by_id[exercise_id].points, status, message))

    for attempt in range(config.max_restarts + 1):
        client = _Client(
            exec_nb, timeout=config.cell_timeout, startup_timeout=int(config.startup_timeout), allow_errors=True,
            interrupt_on_timeout=False, kernel_name="python3", shutdown_kernel="immediate", record_timing=False,
            resources={"metadata": {"path": str(workdir)}},
            grade_cells={i for i, step in enumerate(steps) if step.kind == "grade"},
        )
        client.km = client.create_kernel_manager()
        # A short receive queue: when a notebook prints faster than the grader reads, ZeroMQ drops
        # output instead of buffering gigabytes of it in the grader.
        context = zmq.asyncio.Context()
        context.setsockopt(zmq.RCVHWM, 64)
        client.km.client = functools.partial(client.km.client, context=context)
        restart = False
        out_of_time = False
        try:
            run.kernels += 1
            await client.async_start_new_kernel(env=env, stderr=subprocess.DEVNULL)
            await client.async_start_new_kernel_client()
            for index, step in enumerate(steps):
                if step.kind == "grade" and step.exercise in results:
                    continue
                if step.kind == "cell" and step.cell in skipped:
                    continue
                if step.kind == "grade" and step.cell in skipped:
                    what = "did not finish in time" if skipped[step.cell] == "timeout" else "crashed the kernel"
                    fail(step.exercise, skipped[step.cell], f"your solution cell (cell {step.cell + 1}) {what}")
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 1:
                    out_of_time = True
                    break
                limit = config.startup_timeout if step.kind == "setup" else config.cell_timeout
                client.timeout = int(max(1, min(limit, remaining)))
                cell = exec_nb.cells[index]
                try:
                    # The grader's own cells stay out of IPython's history (In, _ih), so the notebook
                    # cannot read the setup cell's nonce back from it.
                    await client.async_execute_cell(cell, index, store_history=step.kind == "cell")
                except CellTimeoutError:
                    limit = client.timeout
                    if step.kind == "setup":
                        raise RuntimeError(f"the grader's setup cell timed out after {limit} s")
                    if step.kind == "grade":
                        fail(step.exercise, "timeout", f"checking your answer took more than {limit} s (an infinite loop?)")
                    else:
                        skipped[step.cell] = "timeout"
                        run.problems.append(f"cell {step.cell + 1} ({_snippet(step.source)}) did not finish within "
                                            f"{limit} s and was interrupted; it was skipped")
                    if not await _recovered(client):
                        restart = True
                        break
                    continue
                except DeadKernelError:
                    if step.kind == "setup":
                        raise RuntimeError("the kernel died during the grader's setup cell")
                    if step.kind == "grade":
                        fail(step.exercise, "crashed", "the kernel died while your answer was being checked "
                                                       "(os._exit, a crash, or out of memory)")
                    else:
                        skipped[step.cell] = "crashed"
                        run.problems.append(f"the kernel died while running cell {step.cell + 1} "
                                            f"({_snippet(step.source)}): os._exit, a crash or out of memory; "
                                            "the notebook was re-run in a new kernel without that cell")
                    restart = True
                    break
                error = _error_of(cell)
                if step.kind == "setup" and error:
                    raise RuntimeError(f"the grader's setup cell failed: {error}")
                if step.kind == "cell" and error and attempt == 0:
                    run.cell_errors.append(f"cell {step.cell + 1} ({_snippet(step.source)}) raised {error}")
                if step.kind == "grade":
                    result = _read_result(cell, nonce, step.exercise)
                    if result is None:
                        fail(step.exercise, "not_graded", "the grader's check produced no result"
                             + (f" ({error})" if error else "") + "; did the notebook interfere with the grader?")
                    else:  # points from the grader's registry, never from the kernel
                        max_points = by_id[step.exercise].points
                        status = str(result["status"])
                        results[step.exercise] = ExerciseGrade(
                            step.exercise, notebook, max_points if status == "passed" else 0, max_points,
                            status, str(result["message"]), [str(t) for t in result.get("tampered", [])])
        finally:
            try:
                await client._async_cleanup_kernel()
            except Exception:  # a kernel that is already gone
                pass
            context.destroy(linger=0)
        if out_of_time:
            run.problems.append(f"the notebook time limit ({config.notebook_timeout:.0f} s) was reached")
            break
        if not restart:
            break
    for ex in exercises:
        fail(ex.id, "not_run", "not checked: the notebook did not get this far "
                               "(time limit or repeated kernel crashes)")
    return results


def grade_notebook(path: Path, notebook: str, config: GradeConfig, run: NotebookRun) -> dict[str, ExerciseGrade]:
    """Grade one notebook file as course notebook `notebook`, on a temporary copy."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="trnlab-grade-") as tmp:
        copy = Path(tmp) / "notebooks" / path.name
        copy.parent.mkdir()
        shutil.copyfile(path, copy)
        data = Path(tmp) / "data"  # notebooks may read ../data as they do from notebooks/
        if (REPO_ROOT / "data").is_dir():
            data.symlink_to(REPO_ROOT / "data", target_is_directory=True)
        nb = read_notebook(copy)
        try:
            return asyncio.run(_run_notebook(nb, notebook, copy.parent, config, run))
        finally:
            run.seconds = time.perf_counter() - start


def _ungraded(notebooks: list[str], status: str, message: str) -> dict[str, ExerciseGrade]:
    return {ex.id: ExerciseGrade(ex.id, nbname, 0, ex.points, status, message)
            for nbname in notebooks for ex in exercises_of(nbname)}


def _rank(path: Path, nb: nbformat.NotebookNode | None, name: str) -> tuple:
    """Which of several files claiming to be notebook `name` to grade: readable, with exercise
    cells, named like the notebook, then the first in order."""
    has_exercises = nb is not None and any(i in registry.REGISTRY for i in find_exercise_cells(nb))
    return (nb is None, not has_exercises, path.stem != name)


def grade_submission(submission: Submission, assignment: list[str], config: GradeConfig) -> StudentGrade:
    """Grade every assignment notebook in one student's submission; never raises."""
    grade = StudentGrade(submission.student, str(submission.source),
                         _ungraded(assignment, "not_submitted", "no notebook for it was found in the submission"))
    if not submission.notebooks:
        grade.problems.append(f"{submission.source}: no .ipynb file in the submission")
    files: list[tuple[Path, nbformat.NotebookNode | None, str | None, str | None]] = []  # path, nb, name, error
    for path in submission.notebooks:
        try:
            nb, error = read_notebook(path), None
        except (NotANotebook, OSError) as problem:
            nb, error = None, str(problem)
        files.append((path, nb, identify_notebook(path, nb, assignment), error))
    if len(assignment) == 1 and not any(name for _, _, name, _ in files):
        # One notebook graded and nothing in this submission says which file it is: all are candidates.
        files = [(path, nb, assignment[0], error) for path, nb, _, error in files]
    candidates: dict[str, list[tuple]] = {}
    for path, nb, name, error in files:
        if name not in assignment:
            grade.problems.append(f"{path}: not one of the graded notebooks ({', '.join(assignment)}); ignored")
        else:
            candidates.setdefault(name, []).append((path, nb, error))
    for name, found in candidates.items():
        path, nb, error = min(found, key=lambda f: _rank(f[0], f[1], name))
        if len(found) > 1:
            others = ", ".join(str(f[0]) for f in found if f[0] != path)
            grade.problems.append(f"several files are {name}: graded {path}, ignored {others}")
        run = NotebookRun(str(path), name)
        grade.notebooks.append(run)
        if error:
            run.problems.append(f"{path.name} could not be read: {error}")
            grade.exercises.update(_ungraded([name], "not_graded", f"the file could not be read: {error}"))
            continue
        try:
            grade.exercises.update(grade_notebook(path, name, config, run))
        except Exception as error:  # the grader itself failed on this notebook: say so, keep going
            run.problems.append(f"could not be graded: {type(error).__name__}: {error}")
            grade.exercises.update(_ungraded([name], "not_graded", f"could not be graded: {error}"))
    return grade


# ----------------------------------------------------------------------------- the batch


def load_checkers(extra_checks: Path | None) -> None:
    """Register every exercise, and the instructor's extra checks (failing early if they are broken)."""
    registry.load_all(strict=False)
    if extra_checks:
        from trnlab.course.grader_kernel import load_extra_checks

        load_extra_checks(str(extra_checks))


def assignment_of(submissions: list[Submission], requested: list[str]) -> list[str]:
    """The notebooks graded: those requested, else every course notebook found in a submission."""
    known = list(dict.fromkeys(ex.notebook for ex in registry.REGISTRY.values()))
    if requested:
        unknown = [n for n in requested if n not in known]
        if unknown:
            raise SystemExit(f"unknown notebook(s) {unknown}; notebooks with exercises: {known}")
        return requested
    found = set()
    for submission in submissions:
        for path in submission.notebooks:
            try:
                nb = read_notebook(path)
            except (NotANotebook, OSError):
                nb = None
            name = identify_notebook(path, nb, known)
            if name:
                found.add(name)
    return [n for n in known if n in found]


def grade_all(submissions: list[Submission], assignment: list[str], config: GradeConfig,
              progress: bool = True) -> list[StudentGrade]:
    from tqdm import tqdm

    grades: dict[int, StudentGrade] = {}
    with ThreadPoolExecutor(max_workers=max(1, config.jobs)) as pool, \
            tqdm(total=len(submissions), desc="grading", unit="submission", disable=not progress) as bar:
        futures = {pool.submit(grade_submission, s, assignment, config): i for i, s in enumerate(submissions)}
        for future in as_completed(futures):
            i = futures[future]
            try:
                grades[i] = future.result()
            except Exception as error:  # grade_submission does not raise; belt and braces
                grades[i] = StudentGrade(submissions[i].student, str(submissions[i].source),
                                         _ungraded(assignment, "not_graded", f"grader error: {error}"))
            bar.update(1)
    return [grades[i] for i in range(len(submissions))]


def columns(assignment: list[str]) -> list[str]:
    return [ex.id for name in assignment for ex in exercises_of(name)]


def write_csv(grades: list[StudentGrade], assignment: list[str], path: Path) -> None:
    ids = columns(assignment)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["student", *ids, "total"])
        for g in grades:
            writer.writerow([g.student, *(g.exercises[i].points for i in ids), g.total])


def write_json(grades: list[StudentGrade], assignment: list[str], path: Path, config: GradeConfig) -> None:
    report = {
        "assignment": assignment,
        "exercises": {i: {"notebook": registry.REGISTRY[i].notebook, "title": registry.REGISTRY[i].title,
                          "points": registry.REGISTRY[i].points} for i in columns(assignment)},
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(config).items()},
        "students": [{**asdict(g), "total": g.total, "max_total": g.max_total} for g in grades],
    }
    path.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")


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
        (folder / f"{_safe_filename(g.student)}.md").write_text(feedback_markdown(g, assignment))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m trnlab.course grade", description=__doc__.split("\n")[0])
    parser.add_argument("submissions", nargs="+", type=Path, help="notebook files or folders, one per student")
    parser.add_argument("--out", type=Path, default=Path("grades.csv"), help="CSV of scores (default grades.csv); "
                        "the JSON details go beside it (.json) and feedback into feedback/ beside it")
    parser.add_argument("--feedback-dir", type=Path, help="where the per-student feedback files go")
    parser.add_argument("--notebook", action="append", default=[], metavar="NAME",
                        help="grade this course notebook (e.g. 01_training_data); repeatable; default: every "
                             "course notebook found in the submissions")
    parser.add_argument("--extra-checks", type=Path, metavar="FILE",
                        help="a Python file of private checks (@extra_check / @exercise)")
    parser.add_argument("-j", "--jobs", type=int, default=1, help="submissions graded in parallel (default 1)")
    parser.add_argument("--timeout-cell", type=float, default=GradeConfig.cell_timeout, metavar="S",
                        help="seconds a cell (or one check) may run before it is interrupted (default %(default)s)")
    parser.add_argument("--timeout-notebook", type=float, default=GradeConfig.notebook_timeout, metavar="S",
                        help="seconds for a whole notebook, restarts included (default %(default)s)")
    parser.add_argument("--memory-limit", type=int, default=GradeConfig.memory_limit_mb, metavar="MB",
                        help="address-space limit per kernel in MiB, 0 for none (default %(default)s)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)

    missing = [str(p) for p in args.submissions if not p.exists()]
    if missing:
        parser.error(f"no such file or folder: {', '.join(missing)}")
    if args.extra_checks and not args.extra_checks.is_file():
        parser.error(f"--extra-checks: no such file: {args.extra_checks}")
    config = GradeConfig(cell_timeout=args.timeout_cell, notebook_timeout=args.timeout_notebook,
                         memory_limit_mb=args.memory_limit or None, jobs=args.jobs,
                         extra_checks=args.extra_checks.resolve() if args.extra_checks else None)
    load_checkers(config.extra_checks)
    submissions = collect_submissions(args.submissions)
    assignment = assignment_of(submissions, args.notebook)
    if not assignment:
        print("no course notebook with exercises was found in the submissions; use --notebook NAME", file=sys.stderr)
        return 2
    start = time.perf_counter()
    grades = grade_all(submissions, assignment, config, progress=not args.quiet)
    elapsed = time.perf_counter() - start

    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_csv(grades, assignment, args.out)
    write_json(grades, assignment, args.out.with_suffix(".json"), config)
    feedback_dir = args.feedback_dir or args.out.parent / "feedback"
    write_feedback(grades, assignment, feedback_dir)
    full = sum(g.max_total for g in grades[:1])
    print(f"graded {len(grades)} submission(s) of {', '.join(assignment)} in {elapsed:.1f} s "
          f"(-j {config.jobs}); out of {full} points:")
    for g in grades:
        print(f"  {g.student}: {g.total}")
    print(f"wrote {args.out}, {args.out.with_suffix('.json')}, {feedback_dir}/")
    return 0

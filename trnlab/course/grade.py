"""Grade student submissions: run each in a fresh kernel, check every exercise, write CSV/JSON/feedback.

    python -m trnlab.course grade submissions/* --out grades.csv -j 2

A submission is a notebook file or a folder of notebooks (one per student). For each notebook:

1. it is read, before any kernel starts (`stage`), as untrusted JSON (`notebook.read_notebook`)
   and copied into the sandbox of its run (`sandbox.py`), whose folder is the kernel's working
   directory; the submitted file is never written;
2. its exercises are found by nbgrader metadata (`notebook.find_exercise_cells`), so reordered
   cells are graded where they are; points come from the registry, never from the file;
3. a fresh kernel runs, in order: the grader's setup cell (`grader_kernel.install`: memory limit,
   checkers, pristine snapshot), then every code cell of the notebook, and after each solution
   cell a hidden cell that runs the answer on inputs the grader drew and publishes the plain results
   with a nonce (the grader judges them in its own process);
4. a cell that exceeds its time limit is interrupted (killed if it ignores the interrupt) and
   skipped; if the kernel dies (``os._exit``, a segfault), a new kernel re-runs the notebook
   without the cells that hung or crashed, so later exercises still earn their points;
5. whatever could not be graded gets zero and a reason.

Results: a CSV (student, one column per exercise, total), a JSON with every detail, and one
markdown feedback file per student, written once every process the notebooks started is dead.
This module finds the submissions and runs the batch; `kernel_run.py` grades one notebook
(steps 1, 3-5), `results.py` writes the files.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import nbformat

from trnlab.course import exercises as registry
from trnlab.course.kernel_run import grade_notebook
from trnlab.course.notebook import (MAX_NOTEBOOK_BYTES, NotANotebook, find_exercise_cells, read_notebook,
                                   read_notebook_bytes)
from trnlab.course.results import (
    GradeConfig,
    NotebookRun,
    StudentGrade,
    ungraded,
    write_csv,
    write_feedback,
    write_json,
)
from trnlab.course.sandbox import kill_descendants, protect_grader, users_can_be_separated


# ----------------------------------------------------------------------------- submissions


@dataclass
class Submission:
    student: str
    source: Path
    notebooks: list[Path]  # files to grade (a folder's *.ipynb, or the file itself)
    # The files' bytes, read before any kernel starts (`stage`): a notebook graded earlier cannot
    # change what is graded later.
    contents: dict[Path, bytes | OSError] | None = None


def stage(submissions: list[Submission]) -> None:
    """Read every submitted notebook into memory, before the first kernel starts."""
    for submission in submissions:
        submission.contents = {}
        for path in submission.notebooks:
            try:
                size = path.stat().st_size
                submission.contents[path] = (path.read_bytes() if size <= MAX_NOTEBOOK_BYTES else
                                             OSError(f"file too large: {size / 2**20:.0f} MiB"))
            except OSError as error:
                submission.contents[path] = error


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


def _rank(path: Path, nb: nbformat.NotebookNode | None, name: str) -> tuple:
    """Which of several files claiming to be notebook `name` to grade: readable, with exercise
    cells, named like the notebook, then the first in order."""
    has_exercises = nb is not None and any(i in registry.REGISTRY for i in find_exercise_cells(nb))
    return (nb is None, not has_exercises, path.stem != name)


def grade_submission(submission: Submission, assignment: list[str], config: GradeConfig) -> StudentGrade:
    """Grade every assignment notebook in one student's submission; never raises."""
    grade = StudentGrade(submission.student, str(submission.source),
                         ungraded(assignment, "not_submitted", "no notebook for it was found in the submission"))
    if not submission.notebooks:
        grade.problems.append(f"{submission.source}: no .ipynb file in the submission")
    files: list[tuple[Path, nbformat.NotebookNode | None, str | None, str | None]] = []  # path, nb, name, error
    for path in submission.notebooks:
        staged = (submission.contents or {}).get(path)
        try:
            if isinstance(staged, OSError):
                raise staged
            nb, error = (read_notebook(path) if staged is None else read_notebook_bytes(staged)), None
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
            grade.exercises.update(ungraded([name], "not_graded", f"the file could not be read: {error}"))
            continue
        try:
            staged = (submission.contents or {}).get(path)
            grade.exercises.update(grade_notebook(path, name, config, run,
                                                  staged if isinstance(staged, bytes) else None))
        except Exception as error:  # the grader itself failed on this notebook: say so, keep going
            run.problems.append(f"could not be graded: {type(error).__name__}: {error}")
            grade.exercises.update(ungraded([name], "not_graded", f"could not be graded: {error}"))
    return grade


# ----------------------------------------------------------------------------- the batch


def load_checkers(extra_checks: Path | None) -> None:
    """Register every exercise, and the instructor's extra checks (failing early if they are broken,
    or if a private checker's `run` could not run alone in a kernel). The file is loaded here, in
    the grader, and never in a student's kernel."""
    registry.load_all(strict=False)
    if extra_checks:
        from trnlab.course.grader_kernel import kernel_has_checker, load_extra_checks, run_source

        load_extra_checks(str(extra_checks))
        private = [*(ex.spec for ex in registry.REGISTRY.values() if not kernel_has_checker(ex.spec)),
                   *(spec for specs in registry.EXTRA_CHECKS.values() for spec in specs)]
        for spec in private:
            try:
                run_source(spec)
            except (ValueError, OSError, TypeError) as error:
                raise SystemExit(f"--extra-checks {extra_checks}: {error}")


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
                                         ungraded(assignment, "not_graded", f"grader error: {error}"))
            bar.update(1)
    return [grades[i] for i in range(len(submissions))]


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
    parser.add_argument("--same-user", action="store_true",
                        help="run kernels as your own user even when the grader runs as root (see "
                             "docs/instructors.md: what the grader protects against)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)

    missing = [str(p) for p in args.submissions if not p.exists()]
    if missing:
        parser.error(f"no such file or folder: {', '.join(missing)}")
    if args.extra_checks and not args.extra_checks.is_file():
        parser.error(f"--extra-checks: no such file: {args.extra_checks}")
    protect_grader()
    why_not = "--same-user was given" if args.same_user else users_can_be_separated()
    if why_not:
        print(f"note: kernels run as your user ({why_not}); see docs/instructors.md for what that leaves "
              "open", file=sys.stderr)
    config = GradeConfig(cell_timeout=args.timeout_cell, notebook_timeout=args.timeout_notebook,
                         memory_limit_mb=args.memory_limit or None, jobs=args.jobs,
                         extra_checks=args.extra_checks.resolve() if args.extra_checks else None,
                         separate_users=why_not is None)
    load_checkers(config.extra_checks)
    submissions = collect_submissions(args.submissions)
    stage(submissions)
    assignment = assignment_of(submissions, args.notebook)
    if not assignment:
        print("no course notebook with exercises was found in the submissions; use --notebook NAME", file=sys.stderr)
        return 2
    start = time.perf_counter()
    grades = grade_all(submissions, assignment, config, progress=not args.quiet)
    elapsed = time.perf_counter() - start
    kill_descendants()  # nothing a notebook started is alive when the results are written

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

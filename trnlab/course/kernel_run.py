"""Grade one notebook in a fresh kernel: the student's cells, and after each solution cell the
grader's hidden check (see grader_kernel.py for what runs inside the kernel).

The kernel runs in a sandbox (`sandbox.py`: a folder of its own holding a copy of the notebook,
its own session, /dev/null streams and, as root, its own user), which is killed whole when the
notebook is done. The grader draws each check's cases here and sends the kernel only the inputs
(`grader_kernel.check_request`); the seeds stay in this process. A cell that exceeds its
time limit is interrupted, or, if it ignores the interrupt, its kernel is killed; if a kernel dies
(``os._exit``, a segfault), a new one re-runs the notebook without the cells that hung or crashed,
so later exercises still earn their points. Only errors and the grader's own results are kept
from the kernel's output.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
import zmq
import zmq.asyncio
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError

from trnlab import NOTEBOOKS_DIR, REPO_ROOT
from trnlab.course import exercises as registry
from trnlab.course.grader_kernel import GRADE_MIME, check_request
from trnlab.course.notebook import NotANotebook, cells_defining, find_exercise_cells, nbgrader_meta, read_notebook
from trnlab.course.quiet_widgets import QuietOutputWidgets
from trnlab.course.results import ExerciseGrade, GradeConfig, NotebookRun, exercises_of
from trnlab.course.sandbox import Sandbox


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


# Judging measures the real model and simulator (forward hooks, FLOP counters); submissions graded
# in parallel threads (-j) must not measure at the same time, or each would count the other's runs.
_JUDGE_LOCK = threading.Lock()


def _judged(ex: registry.Exercise, seed: int, result: dict, notebook: str) -> ExerciseGrade:
    """Judge the plain answers a grade cell sent back; expected values exist only in this process."""
    tampered = [str(t) for t in result.get("tampered", [])][:20]
    if "missing" in result:
        return ExerciseGrade(ex.id, notebook, 0, ex.points, "missing", str(result["missing"]), tampered)
    if not isinstance(result.get("payload"), str):
        return ExerciseGrade(ex.id, notebook, 0, ex.points, "not_graded", "the grader's check sent no answers back", tampered)
    with _JUDGE_LOCK:
        outcome = registry.judge(ex, seed, result["payload"], tuple(registry.EXTRA_CHECKS.get(ex.id, ())))
    return ExerciseGrade(ex.id, notebook, outcome.points, ex.points, outcome.status, outcome.message, tampered)


def _error_of(cell: nbformat.NotebookNode) -> str | None:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return f"{output.get('ename')}: {str(output.get('evalue'))[:200]}"
    return None


class _Client(QuietOutputWidgets, NotebookClient):
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
                        run: NotebookRun, sandbox: Sandbox) -> dict[str, ExerciseGrade]:
    exercises = exercises_of(notebook)
    by_id = {ex.id: ex for ex in exercises}
    results: dict[str, ExerciseGrade] = {}
    steps = plan_steps(nb, notebook, exercises, results, run.problems)
    nonce, hook = secrets.token_hex(16), f"_trnlab_grade_{secrets.token_hex(6)}"
    graded = [(ex.id, ex.answer, list(ex.asks_for)) for ex in exercises]
    max_processes = config.max_processes if sandbox.uid is not None else None  # a limit per user
    setup = (
        "import trnlab.course.grader_kernel as _trnlab_grader_kernel\n"
        f"_trnlab_grader_kernel.install(nonce={nonce!r}, hook={hook!r}, exercise_ids={graded!r},\n"
        f"    checker_modules={sorted({ex.module for ex in exercises})!r},\n"
        f"    memory_limit_mb={config.memory_limit_mb!r}, max_processes={max_processes!r})\n"
        "del _trnlab_grader_kernel\n"
    )
    # The seeds never leave this process: the kernel gets the inputs drawn from them, as data.
    seeds = {ex.id: registry.new_seed() for ex in exercises}
    for step in steps:
        if step.kind == "grade":
            request = check_request(by_id[step.exercise], seeds[step.exercise],
                                    tuple(registry.EXTRA_CHECKS.get(step.exercise, ())))
            step.source = f"{hook}({step.exercise!r}, {request!r})"
    steps.insert(0, _Step("setup", setup))
    exec_nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s.source) for s in steps])
    skipped: dict[int, str] = {}  # student cell index -> "timeout" | "crashed"
    deadline = time.monotonic() + config.notebook_timeout
    env = sandbox.env(_kernel_env(config))

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
        _connection_file_in(client.km, sandbox)
        # A short receive queue: when a notebook prints faster than the grader reads, ZeroMQ drops
        # output instead of buffering gigabytes of it in the grader.
        context = zmq.asyncio.Context()
        context.setsockopt(zmq.RCVHWM, 64)
        client.km.client = functools.partial(client.km.client, context=context)
        restart = False
        out_of_time = False
        try:
            run.kernels += 1
            await client.async_start_new_kernel(env=env, **sandbox.popen_kwargs())
            sandbox.started(getattr(getattr(client.km, "provisioner", None), "pid", None))
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
                    else:  # judged here, in the grader's process: points from the grader's registry
                        results[step.exercise] = _judged(by_id[step.exercise], seeds[step.exercise], result, notebook)
        finally:
            try:
                await client._async_cleanup_kernel()
            except Exception:  # a kernel that is already gone
                pass
            sandbox.kill_all()  # and whatever the notebook started, wherever it went
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


def _connection_file_in(km, sandbox: Sandbox) -> None:
    """Write the kernel's connection file into its sandbox, readable by the kernel's user only."""
    km.connection_file = str(sandbox.home / f"kernel-{secrets.token_hex(6)}.json")
    write = km.write_connection_file

    def write_and_give(*args, **kwargs):
        result = write(*args, **kwargs)
        sandbox.give(Path(km.connection_file))
        return result

    km.write_connection_file = write_and_give


def grade_notebook(path: Path, notebook: str, config: GradeConfig, run: NotebookRun,
                   content: bytes | None = None) -> dict[str, ExerciseGrade]:
    """Grade one notebook file as course notebook `notebook`, on a copy in a sandbox of its own.
    `content`: the file's bytes as read before any kernel started (else the file is read now)."""
    start = time.perf_counter()
    sandbox = Sandbox(config.separate_users)
    try:
        folder = sandbox.folder("notebooks")
        copy = folder / path.name
        copy.write_bytes(path.read_bytes() if content is None else content)
        sandbox.give(copy)
        data = sandbox.root / "data"  # notebooks may read ../data as they do from notebooks/
        if (REPO_ROOT / "data").is_dir():
            data.symlink_to(REPO_ROOT / "data", target_is_directory=True)
        nb = read_notebook(copy)
        return asyncio.run(_run_notebook(nb, notebook, folder, config, run, sandbox))
    finally:
        sandbox.close()
        run.seconds = time.perf_counter() - start



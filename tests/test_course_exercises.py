"""The student-facing `check`, the registry, and how an answer crosses into a comparison: plain data
only, judged in another process, with the package's own versions switched off while it runs."""

from __future__ import annotations

import pytest

from trnlab.course import exercises, plain
from trnlab.course.errors import CheckFailed
from trnlab.course.exercises import check, collect, exercise, extra_check, judge, run_check


@pytest.fixture
def double_exercise():
    """A throwaway exercise: `double(x)` must return 2 * x; removed from the registry afterwards."""

    @exercise("test_double", notebook="test_notebook", points=2, answer="double", title="Double a number",
              asks_for=("trnlab.data.tasks.problem_key",))
    class Double:
        def cases(rng):
            return [0, 3, -4, int(rng.integers(5, 100))]

        def run(double, x):
            return plain.integer(double(x))

        def judge(x, got):
            if got != 2 * x:
                raise CheckFailed(f"expected {2 * x}, got {got} for input {x}")

    yield exercises.REGISTRY["test_double"]
    exercises.REGISTRY.pop("test_double")
    exercises.EXTRA_CHECKS.pop("test_double", None)


def stub(x):
    raise NotImplementedError


@pytest.mark.parametrize("answer,status,hint", [
    (lambda x: 2 * x, "passed", "correct"),
    (lambda x: x + 2, "failed", "expected 0, got 2 for input 0"),
    (stub, "not_attempted", "not attempted yet"),
    (lambda x: 1 / 0, "error", "your code raised ZeroDivisionError"),
], ids=["passed", "failed", "not_attempted", "error"])    # plain ids: no "<lambda>" or spaces to quote
def test_judging_classifies_each_outcome(double_exercise, answer, status, hint):
    result = run_check("test_double", answer, local=True)
    assert result.status == status and hint in result.message
    assert result.points == (2 if status == "passed" else 0) and result.max_points == 2


def test_check_prints_a_mark_and_a_hint_and_never_raises(capsys):
    exercises.load_all()
    right = lambda n_embd: 12 * n_embd * n_embd + 13 * n_embd  # noqa: E731
    assert check("nb02_block_params", right) is None  # a check cell shows only what it prints
    assert "✓ Parameters of one transformer block [2/2 points]" in capsys.readouterr().out
    check("nb02_block_params", lambda n: 12 * n * n)
    check("nb02_block_params", lambda n: exit())  # SystemExit from the answer
    out = capsys.readouterr().out
    assert out.count("✗") == 2 and "hint: expected" in out and "SystemExit" in out


def test_an_exercise_known_only_to_the_grader_says_it_is_checked_at_grading(capsys):
    check("nb09_only_in_extra_checks", lambda x: x)
    out = capsys.readouterr().out
    assert "checked when your notebook is graded" in out and "✗" not in out


def test_the_oracle_judges_in_another_process_with_the_same_verdict_as_here(double_exercise):
    # the throwaway exercise exists only in this process; a course exercise goes to the oracle
    exercises.load_all()
    wrong = lambda n: 12 * n * n  # noqa: E731
    remote = run_check("nb02_block_params", wrong, seed=7)
    here = run_check("nb02_block_params", wrong, seed=7, local=True)
    assert (remote.status, remote.message) == (here.status, here.message) and "expected" in here.message


def test_run_check_without_an_answer_is_missing(double_exercise):
    assert run_check("test_double").status == "missing"


def test_extra_checks_must_also_pass(double_exercise):
    assert run_check("test_double", lambda x: 2 * x, local=True).passed

    @extra_check("test_double")
    class NoFloats:
        def cases(rng):
            return [0.5]

        def run(double, x):
            return plain.number(double(x))

        def judge(x, got):
            if got != 1.0:
                raise CheckFailed("hidden: expected 1.0 for 0.5")

    assert run_check("test_double", lambda x: 2 * x, local=True).passed
    result = run_check("test_double", lambda x: 2 * int(x), local=True)
    assert result.status == "failed" and "hidden" in result.message


def test_registering_one_id_twice_is_an_error(double_exercise):
    class Other:
        def cases(rng): return []  # noqa: E704
        def run(a, c): return 0  # noqa: E704
        def judge(c, g): pass  # noqa: E704

    with pytest.raises(ValueError, match="registered twice"):
        exercise("test_double", notebook="test_notebook", points=1, answer="d", title="t")(Other)


def test_cases_are_drawn_from_the_seed_so_a_fixed_table_of_answers_fails(double_exercise):
    table = {0: 0, 3: 6, -4: -8}  # the cases a student saw once
    result = run_check("test_double", lambda x: table.get(x, 0), local=True)
    assert result.status == "failed" and "expected" in result.message


# ----------------------------------------------------------------------------- answers as plain data


def test_an_object_that_equals_everything_is_not_an_answer(double_exercise):
    class AlwaysEqual:
        def __eq__(self, other):
            return True

    result = run_check("test_double", lambda x: AlwaysEqual(), local=True)
    assert result.status == "failed" and "AlwaysEqual" in result.message


def test_an_int_subclass_disguised_as_a_builtin_is_rejected(double_exercise):
    class Sneaky(int):
        __module__ = "builtins"
        __qualname__ = __name__ = "int"

        def __eq__(self, other):
            return True

        __hash__ = int.__hash__

    result = run_check("test_double", lambda x: Sneaky(0), local=True)
    assert result.status == "failed" and "subclass of int" in result.message


def test_plain_data_survives_the_trip_and_nothing_else_does():
    import numpy as np

    value = {"a": [1, 2.5, "x", None, True], "b": np.arange(6, dtype=np.float32).reshape(2, 3)}
    back = plain.decode(plain.encode(value))
    assert back["a"] == [1, 2.5, "x", None, True] and type(back["b"]) is np.ndarray
    assert np.array_equal(back["b"], value["b"])
    with pytest.raises(TypeError, match="not plain data"):
        plain.encode({"a": object()})


def test_collect_sends_only_data_and_judge_computes_the_expected_value(double_exercise):
    payload = collect(double_exercise, lambda x: 2 * x, seed=11)
    assert "expected" not in payload  # the student side never sees an expected value
    assert judge(double_exercise, 11, payload).passed
    assert not judge(double_exercise, 12, payload).passed  # other seed, other cases: the answers no longer fit


# ----------------------------------------------------------------------------- the oracle process


def test_importing_the_course_in_a_kernel_starts_no_process():
    import subprocess
    import sys

    code = ("import sys, types; sys.modules['ipykernel'] = types.ModuleType('ipykernel'); "
            "import trnlab.course, trnlab.course.oracle as o; print(o._process is None)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "True", out.stderr


def test_the_oracle_holds_nothing_of_the_kernel_and_ends_with_it(tmp_path):
    """Started on the first check: its own session (a signal to the kernel's process group does not
    reach it), only its three standard streams open (none of the kernel's sockets or pipes), and it
    ends as soon as the kernel closes its stdin."""
    import os
    import time

    from trnlab.course import oracle

    exercises.load_all()
    leaked = open(tmp_path / "a descriptor the kernel holds", "w")  # must not be inherited
    try:
        assert run_check("nb02_block_params", lambda n: 12 * n * n + 13 * n).passed
        process = oracle._process
        assert os.getsid(process.pid) == process.pid != os.getsid(0)
        assert sorted(int(fd) for fd in os.listdir(f"/proc/{process.pid}/fd")) == [0, 1, 2]
        targets = {os.readlink(f"/proc/{process.pid}/fd/{fd}") for fd in (0, 1, 2)}
        assert os.readlink(f"/proc/{process.pid}/fd/2") == "/dev/null" and len(targets) == 3
    finally:
        leaked.close()
    started = time.monotonic()
    oracle._stop()
    assert process.poll() is not None and time.monotonic() - started < oracle.STOP_WAIT_S


def test_a_private_checkers_run_travels_alone_to_the_kernel():
    """The kernel gets the source of a private checker's `run` (never its cases or judge); a `run`
    that leans on anything else of the instructor's file is refused when the grader loads it."""
    from trnlab.course.grader_kernel import _define_run, run_source

    class Standalone:
        @staticmethod
        def run(answer, case):
            return plain.integer(answer(case))

    helper = lambda x: x  # noqa: E731  (something of the instructor's file)

    class Leaning:
        def run(answer, case):
            return helper(answer(case))

    source = run_source(Standalone)
    assert "def run" in source and "cases" not in source
    assert _define_run(source).run(lambda x: 2 * x, 21) == 42
    with pytest.raises(ValueError, match="helper"):
        run_source(Leaning)

"""A trace that runs away stops with a named error at the kernel line (trnlab/nki/runaway.py, issue 24):
a loop of a billion iterations is refused before it is stamped, a kernel that issues instructions
without end stops at the instruction budget (with or without stamping), and a kernel that recurses
without end names the line that recurs (it used to point into contextlib.py)."""
from __future__ import annotations

import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.language as nl
from trnlab import config
from trnlab.nki.runaway import KernelRecursionError, TraceBudgetExceeded

X = np.ones((128, 64), np.float32)


@nki.jit
def billion_iterations(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(10**9):  # the line the error must name
        nl.store(out, value=nl.load(x))
    return out


@nki.jit
def endless(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    while True:
        t = nl.load(x)  # the line the error must name
        nl.store(out, value=t)
    return out


@nki.jit
def copy_four_times(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(4):
        nl.store(out, value=nl.load(x))
    return out


def _line_of(kernel, text: str) -> int:
    import inspect

    lines, start = inspect.getsourcelines(kernel.func)
    return start + next(i for i, line in enumerate(lines) if text in line)


@pytest.mark.parametrize("fast", [True, False], ids=["stamped", "concrete"])
def test_a_billion_iteration_loop_is_refused_at_its_line(fast):
    with config.override(fast=fast, trace_instructions=400), pytest.raises(TraceBudgetExceeded) as caught:
        nki.run(billion_iterations, X, timing_only=True)
    message = str(caught.value)
    assert "trace instruction budget exceeded" in message and "the budget is 400" in message
    assert "TRNLAB_TRACE_INSTRUCTIONS" in message
    assert caught.value.kernel_location == (__file__, _line_of(billion_iterations, "affine_range(10**9)" if fast
                                                               else "nl.store(out"))
    if fast:  # refused before anything is stamped: the count it would have reached is named
        assert "1,999,999,998 instructions after stamping 999,999,997 iterations" in message


def test_endless_emission_stops_at_the_budget_at_its_line():
    with config.override(trace_instructions=300), pytest.raises(TraceBudgetExceeded) as caught:
        nki.run(endless, X, timing_only=True)
    assert "301 instructions" in str(caught.value)
    assert caught.value.kernel_location == (__file__, _line_of(endless, "t = nl.load(x)"))


@pytest.mark.parametrize("fast", [True, False], ids=["stamped", "concrete"])
def test_a_kernel_within_the_budget_is_untouched(fast):
    with config.override(fast=fast):
        program = nki.trace(copy_four_times, X)
        count = len(program.instructions)
        with config.override(trace_instructions=count):
            out = nki.run(copy_four_times, X).outputs  # exactly at the budget: runs
        np.testing.assert_array_equal(out, X)


def test_the_default_budget_is_documented_and_far_above_the_largest_benchmark_program():
    from trnlab.nki import runaway

    assert config.get("trace_instructions") == 2_000_000 and "2,000,000" in runaway.__doc__
    assert config.get("trace_instructions") >= 10 * 198_656  # matmul_tiled at 8192³ (benchmarks/README.md)


def _load_store_forever(x, out, depth):
    nl.store(out, value=nl.load(x))
    return _load_store_forever(x, out, depth + 1)  # the line the error must name


@nki.jit
def recursive_helper(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    _load_store_forever(x, out, 0)
    return out


@nki.jit
def calls_itself(x):
    return calls_itself(x)  # the line the error must name


def test_a_recursive_helper_is_named_at_the_line_that_recurs():
    with pytest.raises(KernelRecursionError) as caught:
        nki.run(recursive_helper, X, timing_only=True)
    assert "kernel recursion" in str(caught.value) and "recursion limit" in str(caught.value)
    assert caught.value.kernel_location == (__file__, _line_of_function(_load_store_forever, "return _load_store"))
    assert "contextlib" not in str(caught.value)


def test_a_kernel_that_launches_itself_is_named_at_that_line():
    with pytest.raises(KernelRecursionError) as caught:
        nki.run(calls_itself, X, timing_only=True)
    assert caught.value.kernel_location == (__file__, _line_of(calls_itself, "return calls_itself"))


def _line_of_function(function, text: str) -> int:
    import inspect

    lines, start = inspect.getsourcelines(function)
    return start + next(i for i, line in enumerate(lines) if text in line)

"""NKI 0.7's virtual registers (nisa.register_alloc, register_move, register_load, register_store) and
the compiled loops they bound (nl.fori_loop, nl.while_loop, nl.dynamic_range): a register whose value
is known while the kernel is traced bounds a loop; a value loaded from data flows through the core's
registers at run time; a loop bounded by data is in the program and repeats as the data says
(tests/test_dynamic_loops.py); Python control flow on a run-time register is refused by name."""
import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab import config
from trnlab.hardware.system import RegisterError
from trnlab.nki.isa_registers import RegisterValueError


def _count_kernel(loop: str, keyword: bool):
    """out = how many times the loop body ran (a Vector add of 1 per iteration)."""
    @nki.jit
    def kernel(bound):
        out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(acc, 0.0)

        def add_one(*_):
            nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=1.0)

        if loop == "fori":
            n = nisa.register_alloc(5) if keyword else nisa.register_alloc()
            if not keyword:
                nisa.register_move(n, 5)
            nl.fori_loop(0, n, add_one)
        elif loop == "dynamic_range":
            n = nisa.register_alloc()
            nisa.register_load(n, nl.shared_constant(np.array([[4]], np.int32)))
            for _ in nl.dynamic_range(n):
                add_one()
        elif loop == "while":
            counter = nisa.register_alloc(3)

            def body(reg):
                add_one()
                nisa.register_move(dst=reg, imm=int(reg) - 1)
                return reg
            nl.while_loop(counter, body)
        elif loop == "copy":
            a = nisa.register_alloc(2)
            b = nisa.register_alloc(a)                 # initialised from another register
            nl.fori_loop(0, b, add_one)
        nl.store(out, value=acc)
        return out
    return kernel


@pytest.mark.parametrize("loop,expected", [("fori", 5), ("dynamic_range", 4), ("while", 3), ("copy", 2)])
def test_a_register_known_at_trace_time_bounds_a_compiled_loop(loop, expected):
    out = nki.run(_count_kernel(loop, True), np.zeros((1, 1), np.int32)).outputs
    assert out[0, 0] == expected


def test_register_alloc_then_register_move_is_the_same_register_positional_style():
    assert nki.run(_count_kernel("fori", False), np.zeros((1, 1), np.int32)).outputs[0, 0] == 5


def _round_trip_kernel():
    @nki.jit
    def kernel(value):
        out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
        twice = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
        r = nisa.register_alloc()
        nisa.register_load(r, value)                  # from HBM
        nisa.register_store(out, r)
        s = nisa.register_alloc()
        nisa.register_move(s, r)
        tile = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.register_store(tile, s)                  # to SBUF, then back through a register
        t = nisa.register_alloc()
        nisa.register_load(dst=t, src=tile)
        nisa.register_store(dst=twice, src=t)
        return out, twice
    return kernel


@pytest.mark.parametrize("value", [42, -7, 2 ** 31 - 1])
def test_a_value_loaded_at_run_time_is_stored_back(value, records):
    kernel = _round_trip_kernel()
    run = nki.run(kernel, np.array([[value]], np.int32))
    out, twice = run.outputs
    assert out[0, 0] == value and twice[0, 0] == value
    with config.override(fast=False):
        slow = nki.run(kernel, np.array([[value]], np.int32))
    assert records(run) == records(slow)
    assert [o for o in slow.outputs[0].ravel()] == [value]
    assert {r[0] for r in records(run) if r[1].startswith("register_")} == {"pool"}


def test_a_loop_bounded_by_data_runs_as_many_times_as_the_data_says():
    @nki.jit
    def kernel(bound):
        out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(acc, 0.0)
        n = nisa.register_alloc()
        nisa.register_load(n, bound)
        nl.fori_loop(0, n, lambda i: nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=1.0))
        nl.store(out, value=acc)
        return out
    for n in (0, 3, 7):                  # the loop is in the program; the device reads the register
        assert nki.run(kernel, np.array([[n]], np.int32)).outputs[0, 0] == n

    @nki.jit
    def branching(bound):
        n = nisa.register_alloc()
        nisa.register_load(n, bound)
        if n:                             # a Python if: its condition is needed while tracing
            pass
        return bound
    with pytest.raises(RegisterValueError, match="Python condition .* register .* known only when the program runs"):
        nki.run(branching, np.array([[3]], np.int32))


def test_register_load_takes_one_32_bit_element():
    @nki.jit
    def kernel(x):
        r = nisa.register_alloc()
        nisa.register_load(r, x)
        out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
        nisa.register_store(out, r)
        return out
    with pytest.raises(RegisterError, match="one element of at most 32 bits"):
        nki.run(kernel, np.zeros((2, 2), np.int32))


def test_register_store_of_a_register_that_holds_no_value_is_refused():
    @nki.jit
    def kernel(x):
        r = nisa.register_alloc()
        out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
        nisa.register_store(out, r)
        return out
    with pytest.raises(RegisterError, match="holds no value"):
        nki.run(kernel, np.zeros((1, 1), np.int32))


def test_register_move_takes_a_compile_time_integer():
    with pytest.raises(Exception, match="compile-time integer"):
        nki.run(_bad_move_kernel(), np.zeros((1, 1), np.int32))


def _bad_move_kernel():
    @nki.jit
    def kernel(x):
        r = nisa.register_alloc()
        nisa.register_move(r, 2.5)
        out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
        nisa.register_store(out, r)
        return out
    return kernel


def test_while_reg_and_range_reg_read_a_register_known_at_trace_time():
    @nki.jit
    def kernel(x):
        out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(acc, 0.0)
        n = nisa.register_alloc(2)
        for _ in range(n):                                   # 2 iterations
            nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=1.0)
        while n:                                             # 2 more, counting the register down
            nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=10.0)
            nisa.register_move(n, int(n) - 1)
        nl.store(out, value=acc)
        return out
    assert nki.run(kernel, np.zeros((1, 1), np.float32)).outputs[0, 0] == 22.0

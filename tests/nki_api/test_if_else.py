"""nl.if_else, NKI's compiled conditional: a condition known at trace time calls one callback and records
nothing; a run-time NkiScalar (a loaded flag, an arithmetic expression, a comparison) records both
callbacks once as branches the device takes (0- or 1-trip `program.Loop`s), the one its value selects
computed and costed when the program runs, plus one register instruction for the compare-and-jump
(ASSUMED). Values against NumPy with the fast paths on and off; the page's rules refused by name."""
import operator

import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.hardware.device import Device
from trnlab.hardware.dynamic_loops import TripCountError
from trnlab.hardware.errors import DtypeError
from trnlab.hardware.program import Program
from trnlab.nki.device_loops import BranchConditionError
from trnlab.nki.isa_scalars import ScalarComparisonError

from nki_isa_helpers import load_scalar, run_both
from nki_kernels.run_time_loops import register_from

DATA = np.arange(2 * 64, dtype=np.float32).reshape(2, 64) - 40.0


def _then(x):                        # what then_branch computes, in NumPy
    return np.maximum(x + 10.0, 0.0)


def _else(x):                        # what else_branch computes
    return x * 2.0


def _flag_kernel(condition_of, use_else: bool = True):
    """A kernel in the style of AWS's if_else page: the flag ([1, 1] int32) staged in SBUF, `data` loaded,
    then_branch adds 10 and clamps at 0 (two instructions), else_branch doubles (one); `condition_of(flag_sb)`
    gives the condition."""
    @nki.jit
    def if_else_kernel(flag, data):
        flag_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=flag_sb, src=flag)
        condition = condition_of(flag_sb)
        result = nl.ndarray(data.shape, dtype=data.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=result, src=data)

        def then_branch():
            nisa.tensor_scalar(result, result, op0=nl.add, operand0=10.0)
            nisa.tensor_scalar(result, result, op0=nl.maximum, operand0=0.0)

        def else_branch():
            nisa.tensor_scalar(result, result, op0=nl.multiply, operand0=2.0)

        nl.if_else(condition, then_branch, else_branch if use_else else None)
        out = nl.ndarray(data.shape, dtype=data.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=result)
        return out

    return if_else_kernel


loaded_flag = _flag_kernel(nisa.scalar_load)                              # cond: the flag itself
positive_flag = _flag_kernel(lambda t: nisa.scalar_load(t) > 0)          # cond: a comparison (the page's)
flag_without_else = _flag_kernel(nisa.scalar_load, use_else=False)


def _flag(value: int) -> np.ndarray:
    return np.array([[value]], np.int32)


# -- conditions known at trace time ---------------------------------------------------------------------
@pytest.mark.parametrize("cond", [True, False, 1, 0, -3, "known scalar 0", "known scalar -2"])
def test_a_condition_known_at_trace_time_calls_one_callback_and_records_no_branch(cond):
    called = []

    @nki.jit
    def kernel(data):
        c = nisa.NkiScalar(int(cond.split()[-1])) if isinstance(cond, str) else cond
        result = nl.ndarray(data.shape, dtype=data.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=result, src=data)

        def then_branch():
            called.append("then")
            nisa.tensor_scalar(result, result, op0=nl.add, operand0=10.0)

        def else_branch():
            called.append("else")
            nisa.tensor_scalar(result, result, op0=nl.multiply, operand0=2.0)

        nl.if_else(c, then_branch, else_branch)
        out = nl.ndarray(data.shape, dtype=data.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=result)
        return out

    value = int(cond.split()[-1]) if isinstance(cond, str) else int(cond)
    run = nki.run(kernel, DATA)
    assert called == ["then" if value != 0 else "else"]                  # "Only the selected callback is called"
    assert run.program.loops == []                                        # "no conditional control flow is emitted"
    assert "register_op" not in run.program.opcode_counts()
    np.testing.assert_array_equal(run.outputs, DATA + 10.0 if value != 0 else DATA * 2.0)


# -- a run-time condition -------------------------------------------------------------------------------
@pytest.mark.parametrize("flag", [1, 0, -3, 2**31 - 1])
def test_a_run_time_flag_selects_the_branch_its_value_says(flag):
    run = run_both(loaded_flag, _flag(flag), DATA)                        # "Any nonzero value, including a
    np.testing.assert_array_equal(run.outputs, _then(DATA) if flag != 0 else _else(DATA))   # negative value"


@pytest.mark.parametrize("flag", [5, 0, -3])
def test_a_scalar_comparison_is_passed_directly_as_the_condition(flag):
    run = run_both(positive_flag, _flag(flag), DATA)
    np.testing.assert_array_equal(run.outputs, _then(DATA) if flag > 0 else _else(DATA))


@pytest.mark.parametrize("flag", [4, 0])
def test_without_else_fn_a_zero_condition_runs_nothing(flag):
    run = run_both(flag_without_else, _flag(flag), DATA)
    np.testing.assert_array_equal(run.outputs, _then(DATA) if flag else DATA)
    assert [loop.kind for loop in run.program.loops] == ["if"]


COMPARISONS = {"less": operator.lt, "less_equal": operator.le, "greater": operator.gt, "greater_equal": operator.ge,
               "equal": operator.eq, "not_equal": operator.ne, "reflected": lambda a, b: 3 < a}   # 3 < x: x > 3


@nki.jit
def compare(a, b, op: str = "less"):
    """out = 1.0 if a <op> b else -1.0, decided on the device by an NkiScalar comparison."""
    cond = COMPARISONS[op](load_scalar(a), load_scalar(b))
    result = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    nl.if_else(cond, lambda: nisa.memset(dst=result, value=1.0), lambda: nisa.memset(dst=result, value=-1.0))
    out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=result)
    return out


@pytest.mark.parametrize("op", sorted(COMPARISONS))
def test_each_comparison_gives_the_branch_pythons_operator_gives(op):
    for a, b in [(-2, 3), (3, -2), (1, 1), (4, 4), (-(2**31), 2**31 - 1)]:
        out = nki.run(compare, _flag(a), _flag(b), op=op).outputs
        assert out[0, 0] == (1.0 if COMPARISONS[op](a, b) else -1.0), (a, b)


# -- the program and its time ---------------------------------------------------------------------------
def test_the_program_holds_both_branches_once_and_runs_them_saved_and_loaded():
    program = nki.trace(positive_flag, _flag(1), DATA)
    then_loop, else_loop = program.loops
    assert (then_loop.kind, else_loop.kind) == ("if", "else")
    assert [program.instructions[k].attrs["op0"] for k in range(then_loop.begin, then_loop.end)] == ["add", "maximum"]
    assert [program.instructions[k].attrs["op0"] for k in range(else_loop.begin, else_loop.end)] == ["multiply"]
    assert program.opcode_counts()["tensor_scalar"] == 3                  # each branch once
    listing = program.listing(limit=None)
    t = then_loop.stop["register"]
    assert f"L0 if reg{t} != 0: instructions" in listing and f"L1 else (reg{t} == 0): instructions" in listing
    loaded = Program.loads(program.dumps())
    assert loaded.loops == program.loops
    for flag in (3, -1):
        run = Device("trn2", cores=1).run(loaded, _flag(flag), DATA)
        np.testing.assert_array_equal(run.outputs, _then(DATA) if flag > 0 else _else(DATA))


def test_both_cores_of_an_lnc2_launch_take_the_branch():
    for flag in (2, -2):
        out = nki.cpu_simulate(positive_flag)[2](_flag(flag), DATA)
        np.testing.assert_array_equal(out, _then(DATA) if flag > 0 else _else(DATA))


def _durations(run) -> list:
    return sorted((r.engine, r.opcode, r.duration_ns) for r in (run.timeline[i] for i in range(len(run.timeline))))


@pytest.mark.parametrize("flag", [1, 0])
def test_the_time_is_the_selected_branchs_instructions_and_one_assumed_compare(flag):
    run_time = nki.run(loaded_flag, _flag(flag), DATA)
    at_trace_time = nki.run(_flag_kernel(lambda t: (nisa.scalar_load(t), flag)[1]), _flag(flag), DATA)
    assert at_trace_time.program.loops == []
    extra = _durations(run_time)
    for record in _durations(at_trace_time):
        extra.remove(record)                    # every instruction of the static run, the branch's included
    register_ns = next(d for engine, opcode, d in extra + _durations(at_trace_time) if opcode == "register_load")
    assert extra == [("pool", "register_op", register_ns)]     # the compare-and-jump: one register instruction
    opcodes = [r.opcode for r in (run_time.timeline[i] for i in range(len(run_time.timeline)))]
    assert opcodes.count("tensor_scalar") == (2 if flag else 1)            # then: 2 instructions, else: 1


def test_timing_only_with_the_condition_given_as_shape_dtype_is_refused_by_name():
    data = nki.ShapeDtype(DATA.shape, "float32")
    with pytest.raises(TripCountError, match="the branch of nl.if_else at .* is taken or not as argument 'flag' says"):
        nki.run(positive_flag, nki.ShapeDtype((1, 1), "int32"), data, timing_only=True)
    times = [nki.run(positive_flag, _flag(f), data, timing_only=True) for f in (1, 0)]   # the flag as an array
    assert times[0].outputs is None and times[0].latency_ns > times[1].latency_ns       # then: one more instruction


# -- nesting ---------------------------------------------------------------------------------------------
@nki.jit
def count_above(count, threshold):
    """out = sum over the run-time loop i in [0, count) of (1 if i > threshold else 100): a branch inside a
    loop the device runs, its condition a comparison of the loop's NkiScalar iterator."""
    n, t = load_scalar(count), load_scalar(threshold)
    acc = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)

    def body(i):
        nl.if_else(i > t, lambda: nisa.tensor_scalar(acc, acc, op0=nl.add, operand0=1.0),
                   lambda: nisa.tensor_scalar(acc, acc, op0=nl.add, operand0=100.0))

    nl.fori_loop(0, n, body)
    out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=acc)
    return out


@pytest.mark.parametrize("count,threshold", [(5, 2), (0, 0), (4, -1), (3, 7)])
def test_a_branch_inside_a_loop_the_device_runs_reads_each_iterations_condition(count, threshold):
    run = run_both(count_above, _flag(count), _flag(threshold))
    assert run.outputs[0, 0] == sum(1.0 if i > threshold else 100.0 for i in range(count))


@nki.jit
def loop_if_positive(flag, count):
    """out = count (a run-time loop adding 1 that many times) when flag > 0, else -1: a loop inside a branch."""
    f, n = load_scalar(flag), load_scalar(count)
    acc = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    nl.if_else(f > 0, lambda: nl.fori_loop(0, n, lambda i: nisa.tensor_scalar(acc, acc, op0=nl.add, operand0=1.0)),
               lambda: nisa.memset(dst=acc, value=-1.0))
    out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=acc)
    return out


@pytest.mark.parametrize("flag,count", [(1, 3), (0, 3), (2, 0)])
def test_a_loop_inside_a_branch_runs_only_when_the_branch_is_taken(flag, count):
    run = run_both(loop_if_positive, _flag(flag), _flag(count))
    assert run.outputs[0, 0] == (count if flag > 0 else -1.0)


# -- the page's rules ------------------------------------------------------------------------------------
def _kernel_with_condition(make):
    @nki.jit
    def kernel(flag):
        nl.if_else(make(flag), lambda: None)
        return flag
    return kernel


@pytest.mark.parametrize("make,error,message", [
    (register_from, BranchConditionError, "a value bound to one sequencer is rejected"),
    (lambda flag: nisa.register_alloc(1), BranchConditionError, "a value bound to one sequencer is rejected"),
    (lambda flag: nisa.NkiScalar(1, dtype="int64"), DtypeError, "a 32-bit NkiScalar"),
    (lambda flag: 1.0, BranchConditionError, r"cond = 1\.0 \(float\)"),
    (lambda flag: flag, BranchConditionError, "a Python bool or int, or a 32-bit NkiScalar"),
])
def test_a_condition_the_page_does_not_accept_is_refused_by_name(make, error, message):
    with pytest.raises(error, match=message):
        nki.run(_kernel_with_condition(make), _flag(1))


def test_a_comparison_is_usable_as_the_condition_only():
    @nki.jit
    def kernel(flag):
        nl.if_else((load_scalar(flag) < 3) + 1, lambda: None)             # arithmetic on a comparison
        return flag
    with pytest.raises(ScalarComparisonError, match="its one use is the condition of nl.if_else"):
        nki.run(kernel, _flag(1))


def test_the_callbacks_are_functions():
    @nki.jit
    def kernel(flag):
        nl.if_else(True, "then")
        return flag
    with pytest.raises(nki.NKIError, match="then_fn must be a function"):
        nki.run(kernel, _flag(1))


def test_nki_language_if_else_is_reachable_through_the_zero_edit_hook():
    from trnlab.nki import zero_edit
    zero_edit.install(force=True)
    try:
        import nki.language as aws_nl
        assert aws_nl.if_else is nl.if_else
    finally:
        zero_edit.uninstall()

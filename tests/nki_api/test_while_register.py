"""Python ``while reg:`` on a register known only at run time (AWS's parser-frontend form,
nki.isa.VirtualRegister) is a loop the device runs, recorded as nl.while_loop records one: the body
traced once, the device checking the register before each iteration (trnlab/nki/while_register.py)."""
import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab import config
from trnlab.hardware.dynamic_loops import TripCountError
from trnlab.hardware.program import Program
from trnlab.nki import while_register
from trnlab.nki.isa_registers import RegisterValueError

X = np.full((128, 64), 8.0, np.float32)


def _records(run) -> list:
    tl = run.timeline
    return [(r.engine, r.opcode, r.start_ns, r.end_ns, r.flops, r.hbm_bytes, r.sbuf_bytes, r.waited_for)
            for r in (tl[i] for i in range(len(tl)))]


def _times(n: int) -> np.ndarray:
    return np.array([[n]], np.int32)


@nki.jit
def halve_while_register(x, times):
    """x / 2**times: the condition register loaded from the input, reloaded by the body."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    cond_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=cond_sb, src=times)
    reg = nisa.register_alloc()
    nisa.register_load(reg, cond_sb)
    while reg:
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=0.5)
        nisa.tensor_scalar(dst=cond_sb, data=cond_sb, op0=nl.subtract, operand0=1)
        nisa.register_load(reg, cond_sb)
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def halve_while_loop(x, times):
    """halve_while_register written with nl.while_loop (the body returns the register it reloads)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    cond_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=cond_sb, src=times)
    reg = nisa.register_alloc()
    nisa.register_load(reg, cond_sb)

    def body(r):
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=0.5)
        nisa.tensor_scalar(dst=cond_sb, data=cond_sb, op0=nl.subtract, operand0=1)
        nisa.register_load(r, cond_sb)
        return r

    nl.while_loop(reg, body)
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def sum_while_flagged(x, flags):
    """The sum of the blocks x[j] [128, 512] for j = 0, 1, ... while flags[j] != 0 (flags [n + 1, 1]
    int32 ends with 0): the shape of AWS's MoE kernels' loop over dynamic blocks — each iteration
    loads its block at the index register's offset, steps the index in SBUF and loads the next
    condition from flags at that index."""
    n, P, F = x.shape
    out = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    index = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=index, value=0)
    j = nisa.register_alloc()
    nisa.register_load(j, index)            # from SBUF: the body reads the index when the program runs
    cond_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=cond_sb, src=flags[0:1, 0:1])
    reg = nisa.register_alloc()
    nisa.register_load(reg, cond_sb)
    while reg:
        block = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=block, src=x.ap(pattern=[[F, P], [1, F]], scalar_offset=j, indirect_dim=0))
        nisa.tensor_tensor(dst=acc, data1=acc, data2=block, op=nl.add)
        nisa.tensor_scalar(dst=index, data=index, op0=nl.add, operand0=1)
        nisa.register_load(j, index)
        nisa.dma_copy(dst=cond_sb, src=flags.ap(pattern=[[1, 1], [1, 1]], scalar_offset=j, indirect_dim=0))
        nisa.register_load(reg, cond_sb)
    nisa.dma_copy(dst=out, src=acc)
    return out


@pytest.mark.parametrize("times", [0, 1, 4])
def test_while_reg_runs_as_many_times_as_the_input_says(times):
    run = nki.run(halve_while_register, X, _times(times))
    np.testing.assert_array_equal(run.outputs, X / 2 ** times)        # a true while: 0 runs no body


@pytest.mark.parametrize("flags", [[0, 1, 1, 0], [1, 0, 1, 0], [1, 1, 1, 0]])
def test_a_condition_loaded_from_data_each_iteration_ends_the_loop(flags):
    x = np.random.default_rng(0).normal(size=(3, 128, 512)).astype(np.float32)
    k = flags.index(0)
    out = nki.run(sum_while_flagged, x, np.array(flags, np.int32).reshape(-1, 1)).outputs
    np.testing.assert_allclose(out, x[:k].sum(axis=0), rtol=1e-6, atol=1e-6)


def test_the_program_holds_the_body_once_as_a_while_loop():
    program = nki.trace(halve_while_register, X, _times(5))
    (loop,) = program.loops
    assert loop.kind == "while" and loop.next == loop.start["register"]       # the condition: reg itself
    body = [i.opcode for i in program.instructions[loop.begin:loop.end]]
    assert body == ["tensor_scalar", "tensor_scalar", "register_load"]
    listing = program.listing(limit=None)
    assert f"L0 while reg{loop.start['register']} != 0" in listing and "[L0] register_load" in listing
    assert Program.loads(program.dumps()).loops == program.loops               # saved with the program


@pytest.mark.parametrize("times", [0, 3])
def test_the_timeline_equals_the_nl_while_loop_kernels(times):
    run = nki.run(halve_while_register, X, _times(times))
    reference = nki.run(halve_while_loop, X, _times(times))
    assert _records(run) == _records(reference) and run.latency_ns == reference.latency_ns
    assert [i.opcode for i in run.program.instructions] == [i.opcode for i in reference.program.instructions]
    with config.override(fast=False):                                         # the reference replay agrees
        slow = nki.run(halve_while_register, X, _times(times))
    assert _records(slow) == _records(run)
    np.testing.assert_array_equal(slow.outputs, run.outputs)


def test_the_time_grows_with_the_iterations_the_data_asks_for():
    latencies = [nki.run(halve_while_register, X, _times(n), timing_only=True).latency_ns for n in range(4)]
    steps = np.diff(latencies)
    # every iteration adds time; after the first (which overlaps the code around it) each adds the same
    assert all(s > 0 for s in steps) and steps[1] == pytest.approx(steps[2], rel=1e-9)


@nki.jit
def python_whiles(x):
    """Python whiles on ints, with continue, break and else, and on a register known while tracing."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    n = 3
    while n > 0:
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
        n -= 1
    k = 0
    while True:
        k += 1
        if k == 2:
            continue
        if k > 4:
            break
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
    else:
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1000.0)      # never: the loop breaks
    m = 2
    while m:
        m -= 1
    else:
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=0.5)         # once: the loop ends
    r = nisa.register_alloc(2)                                              # known while tracing
    while r:
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=10.0)
        nisa.register_move(r, int(r) - 1)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_python_whiles_trace_to_the_identical_program_after_the_rewrite():
    x = np.ones((128, 64), np.float32)
    expected = x * 8 + 3 + 0.5 + 20
    before = nki.run(python_whiles, x)
    np.testing.assert_array_equal(before.outputs, expected)
    original = python_whiles.func.__code__
    python_whiles.func.__code__ = while_register.recompiled(python_whiles.func)
    try:
        nki._PROGRAMS.clear()
        after = nki.run(python_whiles, x)
    finally:
        python_whiles.func.__code__ = original
        nki._PROGRAMS.clear()
    import re                                   # (register ids count up over the whole session)
    assert re.sub(r'"register":\d+', "", after.program.dumps()) == re.sub(r'"register":\d+', "", before.program.dumps())
    assert _records(after) == _records(before)
    np.testing.assert_array_equal(after.outputs, expected)


def _scaler(factor: float):
    """A kernel made by a factory: `factor` is a closure variable of the kernel."""
    @nki.jit
    def scale_while(x, times):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        cond_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=cond_sb, src=times)
        reg = nisa.register_alloc()
        nisa.register_load(reg, cond_sb)
        while reg:
            nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=factor)
            nisa.tensor_scalar(dst=cond_sb, data=cond_sb, op0=nl.subtract, operand0=1)
            nisa.register_load(reg, cond_sb)
        nisa.dma_copy(dst=out, src=t)
        return out
    return scale_while


def _halve_in_a_helper(t, cond_sb):
    """A helper the kernel calls, holding the while (as AWS's process_dynamic_blocks does)."""
    reg = nisa.register_alloc()
    nisa.register_load(reg, cond_sb)
    while reg:
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=0.5)
        nisa.tensor_scalar(dst=cond_sb, data=cond_sb, op0=nl.subtract, operand0=1)
        nisa.register_load(reg, cond_sb)


@nki.jit
def halve_through_helpers(x, times):
    """x / 4**times: one while in a module-level helper, one in a function the kernel defines."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    cond_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)

    def halve_again():
        nisa.dma_copy(dst=cond_sb, src=times)
        again = nisa.register_alloc()
        nisa.register_load(again, cond_sb)
        while again:
            nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=0.5)
            nisa.tensor_scalar(dst=cond_sb, data=cond_sb, op0=nl.subtract, operand0=1)
            nisa.register_load(again, cond_sb)

    nisa.dma_copy(dst=cond_sb, src=times)
    _halve_in_a_helper(t, cond_sb)
    halve_again()
    nisa.dma_copy(dst=out, src=t)
    return out


@pytest.mark.parametrize("times", [0, 2])
def test_closures_helpers_and_nested_functions_hold_device_whiles(times):
    for factor in (3.0, 0.25):                     # two kernels from one factory: each its own closure
        out = nki.run(_scaler(factor), X, _times(times)).outputs
        np.testing.assert_array_equal(out, X * factor ** times)
    run = nki.run(halve_through_helpers, X, _times(times))
    np.testing.assert_array_equal(run.outputs, X / 4 ** times)
    assert len(run.program.loops) == 2


def _loaded_register_kernel(body: str, name: str = "kernel"):
    source = f'''
def {name}(flag):
    staged = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=staged, src=flag)
    reg = nisa.register_alloc()
    nisa.register_load(reg, staged)
{body}
    return flag
'''
    return source


def _from_file(tmp_path, source: str, name: str):
    """The kernel `name` defined in a module file (its source readable, as a kernel's is)."""
    import importlib.util
    path = tmp_path / f"{name}_module.py"
    path.write_text("import trnlab.nki.isa as nisa\nimport trnlab.nki.language as nl\n" + source)
    spec = importlib.util.spec_from_file_location(f"{name}_module", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return nki.jit(getattr(module, name))


def test_break_in_a_device_while_is_refused_by_name(tmp_path):
    kernel = _from_file(tmp_path, _loaded_register_kernel(
        "    while reg:\n        nisa.register_load(reg, staged)\n        break\n", "breaks"), "breaks")
    with pytest.raises(RegisterValueError, match="a `break` in the body of `while reg:` on a run-time register"):
        nki.run(kernel, _times(1))


@pytest.mark.parametrize("condition,rule", [("not reg", "is not a bare register"),
                                            ("reg and True", "is not a bare register")])
def test_a_condition_that_is_not_a_bare_register_is_refused_by_name(tmp_path, condition, rule):
    kernel = _from_file(tmp_path, _loaded_register_kernel(
        f"    while {condition}:\n        nisa.register_load(reg, staged)\n", "expression"), "expression")
    with pytest.raises(RegisterValueError, match=rule):
        nki.run(kernel, _times(1))


def test_if_on_a_run_time_register_is_refused_naming_the_compiled_conditional(tmp_path):
    kernel = _from_file(tmp_path, _loaded_register_kernel("    if reg:\n        pass\n", "branches"), "branches")
    with pytest.raises(RegisterValueError, match="(?s)Python condition.*nl.if_else, whose condition is an NkiScalar"):
        nki.run(kernel, _times(1))


def test_a_kernel_whose_source_is_unavailable_keeps_the_refusal():
    namespace = {"nl": nl, "nisa": nisa}
    source = _loaded_register_kernel("    while reg:\n        nisa.register_load(reg, staged)\n")
    exec(compile(source, "<generated>", "exec"), namespace)
    with pytest.raises(RegisterValueError, match="source of kernel is unavailable .*'<generated>'"):
        nki.run(nki.jit(namespace["kernel"]), _times(1))


def test_a_body_that_never_updates_its_register_is_refused_when_it_would_run(tmp_path):
    kernel = _from_file(tmp_path, _loaded_register_kernel("    while reg:\n        pass\n", "spins"), "spins")
    assert nki.run(kernel, _times(0)).outputs[0, 0] == 0          # never entered: fine
    with pytest.raises(TripCountError, match="never writes that register"):
        nki.run(kernel, _times(1))


def test_a_register_the_body_steps_must_not_be_known_while_tracing(tmp_path):
    # j = register_alloc(0) is known while tracing: the body, traced once, would read 0 in every
    # iteration while the device's second iteration reads what the first left
    kernel = _from_file(tmp_path, _loaded_register_kernel(
        "    j = nisa.register_alloc(0)\n"
        "    while reg:\n"
        "        nisa.dma_copy(dst=staged, src=flag.ap(pattern=[[1, 1], [1, 1]], scalar_offset=j, indirect_dim=0))\n"
        "        nisa.register_load(j, staged)\n"
        "        nisa.register_load(reg, staged)\n", "steps"), "steps")
    with pytest.raises(RegisterValueError, match=r"used the trace-time value of register\(s\) \[\d+\] and also writes"):
        nki.run(kernel, _times(0))
    # a register the body sets before using it holds the same value in every iteration: fine
    local = _from_file(tmp_path, _loaded_register_kernel(
        "    while reg:\n"
        "        j = nisa.register_alloc(0)\n"
        "        first = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)\n"
        "        nisa.dma_copy(dst=first, src=flag.ap(pattern=[[1, 1], [1, 1]], scalar_offset=j, indirect_dim=0))\n"
        "        nisa.register_move(j, 0)\n"
        "        nisa.tensor_scalar(dst=staged, data=staged, op0=nl.subtract, operand0=1)\n"
        "        nisa.register_load(reg, staged)\n", "local"), "local")
    assert len(nki.trace(local, _times(3)).loops) == 1
    assert nki.run(local, _times(3)).outputs[0, 0] == 3          # the kernel returns its input


@pytest.mark.parametrize("second,rule", [("    while again and True:\n        nisa.register_load(again, staged)\n",
                                          "is not a bare register"),
                                         ("    while again:\n        nisa.register_load(again, staged)\n        continue\n",
                                          "a `continue` in the body of `while again:`")])
def test_the_rules_hold_for_every_while_of_a_recompiled_function(tmp_path, second, rule):
    # the first while makes the function recompiled; the second meets the rule in the recompiled code
    kernel = _from_file(tmp_path, _loaded_register_kernel(
        "    while reg:\n        nisa.register_load(reg, staged)\n"
        "    again = nisa.register_alloc()\n    nisa.register_load(again, staged)\n" + second, "second"), "second")
    with pytest.raises(RegisterValueError, match=rule):
        nki.run(kernel, _times(0))


def test_a_source_edited_since_the_kernel_was_loaded_is_not_recompiled(tmp_path):
    import linecache
    body = "    while reg:\n        nisa.register_load(reg, staged)\n"
    kernel = _from_file(tmp_path, _loaded_register_kernel(body, "edited"), "edited")
    path = tmp_path / "edited_module.py"
    # the file changes (a local name more, the while where it was), the function does not
    path.write_text(path.read_text().replace("reg = nisa.register_alloc()", "reg = nisa.register_alloc(); extra = 0"))
    linecache.checkcache(str(path))
    with pytest.raises(RegisterValueError, match=r"does not compile to the running function \(edited since"):
        nki.run(kernel, _times(0))

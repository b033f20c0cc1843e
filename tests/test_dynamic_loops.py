"""Loops the device runs: a loop bounded by a register loaded from data is in the program once (its
body traced once, a `program.Loop`) and repeats, when the program runs, as many times as the register
says (trnlab/hardware/dynamic_loops.py), each repetition costed and computed."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import trnlab.nki as nki
from trnlab import config
from trnlab.hardware.dynamic_loops import TripCountError
from trnlab.hardware.program import Program

from nki_kernels.run_time_loops import add_first_rows, add_n_times, count_nested, halve_until_zero, sum_of_active_blocks


def _records(run) -> list:
    tl = run.timeline
    return [(r.engine, r.opcode, r.start_ns, r.end_ns, r.ready_ns, r.flops, r.hbm_bytes, r.sbuf_bytes,
             r.psum_bytes, r.waited_for) for r in (tl[i] for i in range(len(tl)))]


def _rows(a, b, tiles: int) -> np.ndarray:
    expected = np.zeros_like(a)
    expected[:tiles * 128] = a[:tiles * 128] + b[:tiles * 128]
    return expected


A = np.random.default_rng(0).normal(size=(512, 1024)).astype(np.float32)
B = np.random.default_rng(1).normal(size=(512, 1024)).astype(np.float32)


@settings(max_examples=5, deadline=None)
@given(tiles=st.integers(0, 4))
def test_a_loop_bounded_by_an_input_runs_as_many_times_as_the_input_says(tiles):
    run = nki.run(add_first_rows, A, B, np.array([[tiles * 128]], np.int32))
    np.testing.assert_array_equal(run.outputs, _rows(A, B, tiles))


def test_the_loop_is_in_the_program_once_and_prints_as_a_loop():
    program = nki.trace(add_first_rows, A, B, np.array([[128]], np.int32))
    (loop,) = program.loops
    body = program.instructions[loop.begin:loop.end]
    # one row tile: per column tile (a Python loop inside, unrolled), two loads, an add, a store
    assert [i.opcode for i in body].count("tensor_tensor") == 1024 // 512
    assert loop.step == 128 and isinstance(loop.stop, dict)
    listing = program.listing(limit=None)
    assert "loops (run by the device" in listing and f"L0 for reg{loop.index} in range(0, reg" in listing
    assert f"[L0] dma_copy_register_offset" in listing
    # a program is plain data: saved and loaded, it runs the same
    loaded = Program.loads(program.dumps())
    assert loaded.loops == program.loops


def test_the_loop_index_register_addresses_the_dma_in_every_repetition():
    # the index register is the row offset each DMA reads (.ap(scalar_offset=i)), inside a Python loop
    # over column tiles: a wrong offset would add the wrong rows
    run = nki.run(add_first_rows, A, B, np.array([[384]], np.int32), h_tile=256)
    np.testing.assert_array_equal(run.outputs, _rows(A, B, 3))


@pytest.mark.parametrize("outer,inner", [(0, 5), (3, 0), (2, 3), (4, 1)])
def test_nested_run_time_loops_each_read_their_own_bound(outer, inner):
    out = nki.run(count_nested, np.array([[outer]], np.int32), np.array([[inner]], np.int32)).outputs
    assert out[0, 0] == outer * inner + 1000 * sum(range(outer))


def test_a_trip_count_computed_on_the_chip():
    x = np.random.default_rng(2).normal(size=(5, 128, 512)).astype(np.float32)
    for flags in ([1, 1, 0, 1, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]):
        k = sum(flags)
        out = nki.run(sum_of_active_blocks, x, np.array([flags], np.int32)).outputs
        np.testing.assert_allclose(out, x[:k].sum(axis=0), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("times", [0, 1, 5])
def test_tiles_carried_across_the_loop_keep_their_bytes_over_every_iteration(times):
    # a block tensor's tiles live before, inside and after the loop; the body's own tiles must not
    # take their bytes in between (the loop's back edge keeps them live: close_live_ranges)
    x = np.random.default_rng(3).normal(size=(2, 128, 512)).astype(np.float32)
    out = nki.run(add_n_times, x, np.array([[times]], np.int32)).outputs
    np.testing.assert_allclose(out, (times + 1) * x, rtol=1e-5)


def test_a_tile_the_body_shares_with_the_code_before_it_is_live_over_the_whole_loop():
    from trnlab.hardware.dynamic_loops import close_live_ranges
    from trnlab.hardware.program import Access, Buffer, Instruction, Loop

    def tile(i):
        return Buffer(i, f"t{i}", "sbuf", (128, 512), "float32", partition_axis=0)
    carried, local, after = tile(0), tile(1), tile(2)
    ops = [{"dst": Access(0)}, {"dst": Access(0)}, {"dst": Access(1)}, {"dst": Access(1)}, {"dst": Access(2)}]
    program = Program("p", "trn2", buffers=[carried, local, after],
                      instructions=[Instruction("memset", "dve", o, {"value": 0.0}) for o in ops],
                      loops=[Loop(1, 4, 0, {"register": 7})])
    for b, (first, last) in zip(program.buffers, [(0, 1), (2, 3), (4, 4)]):
        b.first, b.last = first, last
    close_live_ranges(program)
    # read by iteration k+1 after the body's last use in iteration k: live to the body's end
    assert [(b.first, b.last) for b in program.buffers] == [(0, 3), (2, 3), (4, 4)]


def test_the_time_grows_with_the_trip_count_read_from_the_data():
    runs = [nki.run(add_first_rows, A, B, np.array([[t * 128]], np.int32), timing_only=True) for t in range(4)]
    assert all(r.outputs is None for r in runs)
    body = len(runs[1].timeline.records) - len(runs[0].timeline.records)
    # each repetition: the iterator update (a register move) and per column tile 2 loads, 1 add, 1 store
    assert body == 1 + 2 * 4
    assert [len(r.timeline.records) for r in runs] == [len(runs[0].timeline.records) + t * body for t in range(4)]
    latencies = [r.latency_ns for r in runs]
    assert latencies == sorted(latencies) and latencies[3] - latencies[0] > 2 * (latencies[1] - latencies[0]) * 0.9


def test_timing_only_without_the_trip_counts_values_is_refused_by_name():
    with pytest.raises(TripCountError, match="run-time trip count: .* argument 'rows' .* without values"):
        nki.run(add_first_rows, nki.ShapeDtype(A.shape, "float32"), nki.ShapeDtype(B.shape, "float32"),
                nki.ShapeDtype((1, 1), "int32"), timing_only=True)
    # only the argument the trip count reads needs values
    run = nki.run(add_first_rows, nki.ShapeDtype(A.shape, "float32"), nki.ShapeDtype(B.shape, "float32"),
                  np.array([[256]], np.int32), timing_only=True)
    assert run.latency_ns > 0


@pytest.mark.parametrize("timing_only", [False, True])
def test_the_fast_paths_agree_with_the_reference_on_every_repetition(timing_only):
    args = (A, B, np.array([[384]], np.int32))
    fast = nki.run(add_first_rows, *args, timing_only=timing_only)
    with config.override(fast=False):
        reference = nki.run(add_first_rows, *args, timing_only=timing_only)
    assert _records(fast) == _records(reference)
    if not timing_only:
        np.testing.assert_array_equal(fast.outputs, reference.outputs)


def test_a_register_holding_garbage_does_not_hang_the_run():
    with pytest.raises(TripCountError, match="would run .* times"):
        nki.run(count_nested, np.array([[2 ** 31 - 1]], np.int32), np.array([[1]], np.int32))


def test_the_list_schedule_reorders_within_the_body_never_across_it():
    program = nki.trace(add_first_rows, A, B, np.array([[128]], np.int32))
    (loop,) = program.loops
    assert program.schedule == "list"
    inside = [i.region for i in program.instructions[loop.begin:loop.end]]
    outside = [i.region for i in program.instructions[:loop.begin] + program.instructions[loop.end:]]
    assert all(r.startswith("dynamic_range@") for r in inside) and not any(r.startswith("dynamic_range@") for r in outside)


def test_both_cores_of_an_lnc2_launch_run_the_loop():
    out = nki.cpu_simulate(add_first_rows)[2](A, B, np.array([[256]], np.int32))
    np.testing.assert_array_equal(out, _rows(A, B, 2))
    import trnlab.nki.language as nl                 # timing-only: the trip count's argument as an array
    one, two = (nki.run(add_first_rows[nl.nc(2)], A, B, np.array([[t * 128]], np.int32), timing_only=True)
                for t in (1, 2))
    assert two.latency_ns > one.latency_ns


@pytest.mark.parametrize("times", [0, 1, 3])
def test_a_while_loop_checks_its_run_time_condition_before_each_iteration(times):
    x = np.full((128, 64), 8.0, np.float32)
    run = nki.run(halve_until_zero, x, np.array([[times]], np.int32))
    np.testing.assert_array_equal(run.outputs, x / 2 ** times)          # a true while: 0 runs no body
    with config.override(fast=False):
        reference = nki.run(halve_until_zero, x, np.array([[times]], np.int32))
    assert _records(run) == _records(reference)
    assert "while reg" in run.program.listing()


def test_python_control_flow_on_a_run_time_register_is_refused_by_name():
    import trnlab.nki.isa as nisa
    import trnlab.nki.language as nl
    from trnlab.nki.isa_registers import RegisterValueError

    @nki.jit
    def kernel(flag):
        staged = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=staged, src=flag)
        condition = nisa.register_alloc()
        nisa.register_load(condition, staged)
        if condition:                     # Python runs while tracing: the value is not there yet
            pass
        return flag
    with pytest.raises(RegisterValueError, match="Python condition .* register .* known only when the program runs"):
        nki.run(kernel, np.array([[1]], np.int32))


def test_a_trip_count_from_the_random_generators_is_refused_by_name():
    import trnlab.nki.isa as nisa
    import trnlab.nki.language as nl

    @nki.jit
    def kernel(x):
        bits = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.rng(dst=bits)
        count = nisa.register_alloc()
        nisa.register_load(count, bits)
        for _ in nl.dynamic_range(count):
            nisa.dma_copy(dst=x, src=x)
        return x
    with pytest.raises(TripCountError, match="run-time trip count: the loop bound depends on rng"):
        nki.run(kernel, np.zeros((1, 1), np.float32))

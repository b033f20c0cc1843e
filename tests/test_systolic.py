"""Cycle-level systolic array: its numbers equal NumPy's and its cycle count equals the fast model's."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trnlab.hardware import cost, presets
from trnlab.hardware.errors import MatmulShapeError
from trnlab.hardware.systolic import SystolicShapeError, simulate_matmul, systolic_step

# A 4x4 array whose matmul has no 64-cycle floor, so that busy = N and the fast model's latency is
# exactly the time for the data to stream through: N + (K - 1) + (M - 1).
TINY = presets.TRN2.core.derive(pe_rows=4, pe_cols=4, matmul_min_cycles=1)


def fast_model_latency(K: int, M: int, N: int) -> int:
    busy, latency = cost.matmul_cycles(TINY, K, M, N, "bfloat16")
    return latency


shapes = st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 12))


@settings(max_examples=60, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**31 - 1))
def test_systolic_result_equals_numpy_matmul_exactly_on_integers(shape, seed):
    K, M, N = shape
    rng = np.random.default_rng(seed)
    stationary = rng.integers(-8, 9, (K, M)).astype(np.float32)  # small integers: fp32 sums are exact
    moving = rng.integers(-8, 9, (K, N)).astype(np.float32)
    trace = simulate_matmul(stationary, moving, TINY)
    assert trace.result.dtype == np.float32
    np.testing.assert_array_equal(trace.result, stationary.T @ moving)


@settings(max_examples=30, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**31 - 1))
def test_systolic_result_matches_float64_reference_on_random_floats(shape, seed):
    K, M, N = shape
    rng = np.random.default_rng(seed)
    stationary = rng.standard_normal((K, M)).astype(np.float32)
    moving = rng.standard_normal((K, N)).astype(np.float32)
    trace = simulate_matmul(stationary, moving, TINY)
    reference = stationary.astype(np.float64).T @ moving.astype(np.float64)
    np.testing.assert_allclose(trace.result, reference, rtol=1e-5, atol=1e-5)


@settings(max_examples=80, deadline=None)
@given(shape=shapes)
def test_systolic_cycle_count_equals_fast_cost_model_latency(shape):
    K, M, N = shape
    trace = simulate_matmul(np.ones((K, M), np.float32), np.ones((K, N), np.float32), TINY)
    assert trace.cycles == fast_model_latency(K, M, N) == N + K + M - 2


def test_partial_sums_flow_down_one_row_per_cycle():
    # K=3, M=1, N=1: the single column's partial sum after row k is the sum of the first k+1 products.
    stationary = np.array([[1.0], [10.0], [100.0]], np.float32)
    moving = np.array([[2.0], [3.0], [4.0]], np.float32)
    trace = simulate_matmul(stationary, moving, TINY)
    # moving[k, 0] reaches PE (k, 0) at cycle k (the skew), so row k holds the running sum at cycle k.
    assert [trace.psum_regs[k, k, 0] for k in range(3)] == [2.0, 32.0, 432.0]
    assert trace.result[0, 0] == 432.0


def test_moving_values_enter_skewed_and_move_right_one_pe_per_cycle():
    K, M, N = 2, 3, 2
    moving = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    trace = simulate_matmul(np.ones((K, M), np.float32), moving, TINY)
    for t in range(trace.cycles):
        for k in range(K):
            for m in range(M):
                n = t - k - m  # column n is at PE (k, m) at cycle n + k + m
                expected = moving[k, n] if 0 <= n < N else np.nan
                np.testing.assert_equal(trace.moving_regs[t, k, m], expected)


def test_idle_pes_outside_the_stationary_tile_stay_empty():
    trace = simulate_matmul(np.ones((2, 3), np.float32), np.ones((2, 5), np.float32), TINY)
    assert not trace.active[:, 2:, :].any() and not trace.active[:, :, 3:].any()
    assert np.isnan(trace.moving_regs[:, 2:, :]).all()
    # Every useful multiply-add happens exactly once: K * M * N of them.
    assert trace.active.sum() == 2 * 3 * 5


def test_psum_results_land_in_order_of_n_plus_m():
    K, M, N = 2, 2, 3
    trace = simulate_matmul(np.ones((K, M), np.float32), np.ones((K, N), np.float32), TINY)
    first_written = np.argmax(~np.isnan(trace.psum), axis=0)  # [M, N] cycle each result appears
    expected = np.add.outer(np.arange(M), np.arange(N)) + (K - 1)
    np.testing.assert_array_equal(first_written, expected)


def test_step_reads_neighbours_from_the_previous_cycle():
    stationary = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    moving_regs = np.array([[5.0, 6.0], [7.0, 8.0]], np.float32)
    psum_regs = np.array([[10.0, 20.0], [30.0, 40.0]], np.float32)
    new_moving, new_psum = systolic_step(stationary, moving_regs, psum_regs, np.array([1.0, 2.0], np.float32))
    np.testing.assert_array_equal(new_moving, [[1.0, 5.0], [2.0, 7.0]])
    # row 0 starts from 0; row 1 adds to what row 0 held in the previous cycle
    np.testing.assert_array_equal(new_psum, [[1.0 * 1, 2.0 * 5], [10 + 3.0 * 2, 20 + 4.0 * 7]])


def test_bf16_inputs_accumulate_in_fp32():
    import ml_dtypes

    rng = np.random.default_rng(0)
    stationary = rng.standard_normal((4, 4)).astype(ml_dtypes.bfloat16)
    moving = rng.standard_normal((4, 6)).astype(ml_dtypes.bfloat16)
    trace = simulate_matmul(stationary, moving, TINY)
    assert trace.result.dtype == np.float32
    reference = stationary.astype(np.float64).T @ moving.astype(np.float64)
    np.testing.assert_allclose(trace.result, reference, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "stationary_shape, moving_shape, rule",
    [
        ((5, 2), (5, 3), "exceeds the array's 4 PE rows"),
        ((2, 5), (2, 3), "exceeds the array's 4 PE columns"),
        ((2, 2), (3, 3), "contraction mismatch"),
    ],
)
def test_tiles_that_do_not_fit_the_array_are_refused_with_the_rule(stationary_shape, moving_shape, rule):
    with pytest.raises(MatmulShapeError, match=rule):
        simulate_matmul(np.ones(stationary_shape), np.ones(moving_shape), TINY)


def test_recording_too_large_for_cycle_level_mode_is_refused():
    big = presets.TRN2.core
    with pytest.raises(SystolicShapeError, match="recording too large"):
        simulate_matmul(np.ones((128, 128)), np.ones((128, 512)), big)


@settings(max_examples=25, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**31 - 1))
def test_neuroncore_full_mode_agrees_with_the_cycle_level_array(shape, seed):
    """The same instruction on the simulated core (full mode): same PSUM values, and the timeline's
    start-to-ready time is the cycle-level run's cycle count."""
    from trnlab.hardware import NeuronCore

    K, M, N = shape
    rng = np.random.default_rng(seed)
    stationary = rng.integers(-8, 9, (K, M)).astype(np.float32)  # exact in bf16
    moving = rng.integers(-8, 9, (K, N)).astype(np.float32)
    core = NeuronCore(TINY, mode="full")
    stationary_sbuf = core.sbuf.allocate((K, M), "bfloat16", name="stationary")
    moving_sbuf = core.sbuf.allocate((K, N), "bfloat16", name="moving")
    result_psum = core.psum.allocate((M, N), "float32", name="result")
    core.dma_copy(dst=stationary_sbuf, src=core.hbm.tensor(stationary, dtype="bfloat16"))
    core.dma_copy(dst=moving_sbuf, src=core.hbm.tensor(moving, dtype="bfloat16"))
    matmul = core.timeline[core.nc_matmul(dst=result_psum, stationary=stationary_sbuf, moving=moving_sbuf)]

    trace = simulate_matmul(stationary, moving, TINY)
    np.testing.assert_array_equal(result_psum.numpy(), trace.result)
    cycles = (matmul.ready_ns - matmul.start_ns) * TINY.pe_clock_hz / 1e9
    assert cycles == pytest.approx(trace.cycles)


@settings(max_examples=30, deadline=None)
@given(shape=shapes)
def test_systolic_cycles_equal_the_pure_cost_models_answer_for_the_instruction(shape):
    K, M, N = shape
    stationary, moving = np.ones((K, M), np.float32), np.ones((K, N), np.float32)
    trace = simulate_matmul(stationary, moving, TINY)
    instr = cost.Instruction("nc_matmul", "pe",
                             (cost.Operand("sbuf", (K, M), "bfloat16", K, M, 2 * K * M),
                              cost.Operand("sbuf", (K, N), "bfloat16", K, N, 2 * K * N)),
                             (cost.Operand("psum", (M, N), "float32", M, N, 4 * M * N),))
    asked = cost.cost(instr, TINY)
    assert trace.cycles == asked.latency_cycles
    assert asked.cycles == max(min(TINY.matmul_min_cycles, M), N)

"""Checks for notebook 03, matrix multiplication and the systolic array."""

from __future__ import annotations

import numpy as np

from trnlab.course.exercises import CheckFailed, exercise
from trnlab.hardware import gemm, presets
from trnlab.hardware.systolic import systolic_step
from trnlab.viz.tiles import tensor_engine_work

NOTEBOOK = "03_matmul_and_the_systolic_array"
# exact multiples, one element over, tiny shapes, K < 128, M < 64 (the floor becomes min(64, M))
GEMM_SHAPES = [(128, 512, 128), (256, 1024, 384), (129, 512, 128), (128, 513, 128), (128, 512, 129),
               (300, 1000, 384), (1, 1, 1), (128, 40, 128), (100, 700, 50), (10, 5, 300), (2048, 2048, 2048)]


def _as_int(value, what: str, shape) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) and not (
            isinstance(value, float) and value.is_integer()):
        raise CheckFailed(f"{what} should be a whole number, got {value!r} for (M, N, K) = {shape}")
    return int(value)


@exercise("nb03_matmul_count", notebook=NOTEBOOK, points=1, answer="matmul_instructions",
          title="How many nc_matmul instructions does a GEMM take?")
def check_matmul_count(matmul_instructions) -> None:
    for shape in GEMM_SHAPES:
        expected = gemm.plan(*shape, presets.TRN2.core).matmuls
        got = _as_int(matmul_instructions(*shape), "the instruction count", shape)
        if got != expected:
            raise CheckFailed(f"expected {expected} instructions, got {got} for (M, N, K) = {shape} "
                              "(every dimension is cut into tiles; a partial tile is still a tile)")


@exercise("nb03_pe_cycles", notebook=NOTEBOOK, points=2, answer="tensor_engine_cycles",
          title="How many cycles does the tensor engine spend on a GEMM?")
def check_pe_cycles(tensor_engine_cycles) -> None:
    for shape in GEMM_SHAPES:
        expected = tensor_engine_work(presets.TRN2.core, *shape, dtype="bfloat16").busy_cycles
        got = _as_int(tensor_engine_cycles(*shape), "the cycle count", shape)
        if got != expected:
            raise CheckFailed(f"expected {expected:,} cycles, got {got:,} for (M, N, K) = {shape} "
                              "(sum max(n, min(64, m)) over the instructions, n and m the tile's own sizes)")


@exercise("nb03_systolic_step", notebook=NOTEBOOK, points=3,
          answer="systolic_step", title="One clock cycle of the systolic array")
def check_systolic_step(student_step) -> None:
    rng = np.random.default_rng(3)
    # square and rectangular arrays, a single PE, a single row and a single column
    for rows, cols in [(3, 3), (2, 4), (4, 2), (1, 1), (1, 3), (3, 1)]:
        stationary = rng.integers(-4, 5, (rows, cols)).astype(np.float32)
        moving_regs = rng.integers(-4, 5, (rows, cols)).astype(np.float32)
        psum_regs = rng.integers(-20, 21, (rows, cols)).astype(np.float32)
        left_inputs = rng.integers(-4, 5, rows).astype(np.float32)
        expected_moving, expected_psum = systolic_step(stationary, moving_regs, psum_regs, left_inputs)
        inputs = [a.copy() for a in (stationary, moving_regs, psum_regs, left_inputs)]
        answer = student_step(*inputs)
        if not isinstance(answer, tuple) or len(answer) != 2:
            raise CheckFailed(f"return a pair (new_moving_regs, new_psum_regs), got {type(answer).__name__}")
        got_moving, got_psum = (np.asarray(a, dtype=np.float32) for a in answer)
        where = f"for a {rows}x{cols} array with moving_regs=\n{moving_regs}\npsum_regs=\n{psum_regs}\nleft_inputs={left_inputs}"
        if got_moving.shape != (rows, cols) or not np.array_equal(got_moving, expected_moving):
            raise CheckFailed(
                f"moving registers: expected\n{expected_moving}\ngot\n{got_moving}\n{where}\n"
                "(each value moves one PE to the right; column 0 takes left_inputs)"
            )
        if got_psum.shape != (rows, cols) or not np.allclose(got_psum, expected_psum):
            raise CheckFailed(
                f"partial sums: expected\n{expected_psum}\ngot\n{got_psum}\n{where}\n"
                "(each PE adds weight x its NEW moving value to what the PE above held in the PREVIOUS cycle)"
            )

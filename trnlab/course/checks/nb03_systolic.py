"""Checks for notebook 03, matrix multiplication and the systolic array."""

from __future__ import annotations

import numpy as np

from trnlab.course.exercises import CheckFailed, exercise
from trnlab.hardware.systolic import systolic_step


@exercise("nb03_systolic_step", notebook="03_matmul_and_the_systolic_array", points=3,
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

"""Checks for notebook 03, matrix multiplication and the systolic array (cases / run / judge)."""

from __future__ import annotations

from collections import Counter

import numpy as np

from trnlab.course import plain
from trnlab.course.errors import CheckFailed
from trnlab.course.exercises import exercise
from trnlab.hardware import presets
from trnlab.hardware.systolic import systolic_step
from trnlab.viz.tiles import tensor_engine_work, tile_shapes

NOTEBOOK = "03_matmul_and_the_systolic_array"
# What the GEMM exercises ask for: the package's tiler and cost model must not answer for the student.
GEMM_HELPERS = ("trnlab.hardware.gemm", "trnlab.viz.tiles.tile_shapes", "trnlab.viz.tiles._edges",
                "trnlab.viz.tiles.tensor_engine_work", "trnlab.hardware.cost.matmul_cycles")


def _gemm_shapes(rng, count: int) -> list[list[int]]:
    """Exact multiples, one over, tiny and big shapes, and random ones with partial edge tiles."""
    fixed = [[300, 1000, 384], [128, 512, 128], [129, 513, 129], [1, 1, 1], [10, 5, 300]]
    drawn = [[int(rng.integers(1, 1200)), int(rng.integers(1, 2600)), int(rng.integers(1, 1200))] for _ in range(count)]
    return fixed + drawn


@exercise("nb03_matmul_count", notebook=NOTEBOOK, points=2, answer="matmul_instructions",
          title="Which nc_matmul instructions does a GEMM take?", asks_for=GEMM_HELPERS)
class MatmulInstructions:
    def cases(rng):
        return _gemm_shapes(rng, 5)

    def run(matmul_instructions, shape):
        got = plain.mapping(matmul_instructions(*shape), "matmul_instructions' result")
        rows = []
        for key, count in got.items():
            if type(key) is not tuple or len(key) != 3:
                raise CheckFailed(f"expected keys that are (k, m, n) tuples, got the key {key!r} for (M, N, K) = {tuple(shape)}")
            rows.append([*(plain.integer(v, "each size in a key") for v in key), plain.integer(count, "each count")])
        return sorted(rows)

    def judge(shape, got):
        M, N, K = shape
        expected = sorted([*key, count] for key, count in Counter(tile_shapes(M, N, K)).items())
        if got != expected:
            total = sum(row[3] for row in got)
            want = {tuple(row[:3]): row[3] for row in expected}
            have = {tuple(row[:3]): row[3] for row in got}
            raise CheckFailed(
                f"expected {want} ({sum(want.values())} instructions), got {have} ({total}) for (M, N, K) = {(M, N, K)} "
                "(every dimension is cut into tiles of at most 128 (K), 128 (M), 512 (N); the last tile of a "
                "dimension holds what is left over, and every combination of tiles is one instruction)")


@exercise("nb03_pe_cycles", notebook=NOTEBOOK, points=2, answer="tensor_engine_cycles",
          title="How many cycles does the tensor engine spend on a GEMM?", asks_for=GEMM_HELPERS)
class TensorEngineCycles:
    def cases(rng):
        return _gemm_shapes(rng, 4) + [[2048, 2048, 2048]]

    def run(tensor_engine_cycles, shape):
        return plain.integer(tensor_engine_cycles(*shape), "the cycle count")

    def judge(shape, got):
        expected = tensor_engine_work(presets.TRN2.core, *shape, dtype="bfloat16").busy_cycles
        if got != expected:
            raise CheckFailed(f"expected {expected:,} cycles, got {got:,} for (M, N, K) = {tuple(shape)} "
                              "(sum max(n, min(64, m)) over the instructions, n and m the tile's own sizes)")


@exercise("nb03_systolic_step", notebook=NOTEBOOK, points=3, answer="systolic_step",
          title="One clock cycle of the systolic array",
          asks_for=("trnlab.hardware.systolic",))
class SystolicStep:
    def cases(rng):
        sizes = [(3, 3), (2, 4), (4, 2), (1, 1), (1, 3), (3, 1),
                 *((int(rng.integers(1, 7)), int(rng.integers(1, 7))) for _ in range(2))]
        return [{"rows": r, "cols": c, "seed": int(rng.integers(0, 2**31))} for r, c in sizes]

    def _inputs(case):
        rng = np.random.default_rng(case["seed"])
        rows, cols = case["rows"], case["cols"]
        return [rng.integers(-4, 5, (rows, cols)).astype(np.float32), rng.integers(-4, 5, (rows, cols)).astype(np.float32),
                rng.integers(-20, 21, (rows, cols)).astype(np.float32), rng.integers(-4, 5, rows).astype(np.float32)]

    def run(student_step, case):
        answer = student_step(*SystolicStep._inputs(case))
        if type(answer) is not tuple or len(answer) != 2:
            raise CheckFailed(f"return a pair (new_moving_regs, new_psum_regs), got {type(answer).__name__}")
        return [plain.array(answer[0], "new_moving_regs"), plain.array(answer[1], "new_psum_regs")]

    def judge(case, got):
        stationary, moving_regs, psum_regs, left_inputs = SystolicStep._inputs(case)
        expected_moving, expected_psum = systolic_step(stationary, moving_regs, psum_regs, left_inputs)
        rows, cols = case["rows"], case["cols"]
        got_moving, got_psum = got
        where = f"for a {rows}x{cols} array with moving_regs=\n{moving_regs}\npsum_regs=\n{psum_regs}\nleft_inputs={left_inputs}"
        if got_moving.shape != (rows, cols) or not np.array_equal(got_moving, expected_moving):
            raise CheckFailed(f"moving registers: expected\n{expected_moving}\ngot\n{got_moving}\n{where}\n"
                              "(each value moves one PE to the right; column 0 takes left_inputs)")
        if got_psum.shape != (rows, cols) or not np.allclose(got_psum, expected_psum):
            raise CheckFailed(f"partial sums: expected\n{expected_psum}\ngot\n{got_psum}\n{where}\n"
                              "(each PE adds weight x its NEW moving value to what the PE above held in the PREVIOUS cycle)")



"""Notebook 05's block-size exercise (`nb05_sbuf_blocks`): bf16 blocks within 120 % of the reference's
simulated time. Reasoned answers that differ from the reference pass; lazy and capped answers fail
with feedback that names the cause (DMA-bound through little reuse, or no room to prefetch)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trnlab.course.exercises import run_check
from trnlab.course.solve import SOLUTIONS_DIR

pytestmark = pytest.mark.slow


def _divisors(n, cap):
    return [d for d in range(1, min(n, cap) + 1) if n % d == 0]


def _rule(cap, key, double_buffer=True):
    def choose_blocks(M, N, K):
        mt, kt = M // 128, K // 128
        fits = [(tm, tk) for tm in _divisors(mt, cap) for tk in _divisors(kt, cap)
                if mt * 512 * 4 + (2 if double_buffer else 1) * tk * (512 + 128 * tm) * 2 <= 224 * 1024]
        tm, tk = max(fits, key=lambda b: key(*b))
        return dict(TILES_IN_BLOCK_M=tm, TILES_IN_BLOCK_N=1, TILES_IN_BLOCK_K=tk)
    return choose_blocks


def _solution(wrong=False):
    namespace: dict = {}
    exec(Path(SOLUTIONS_DIR, f"nb05_sbuf_blocks{'.wrong' if wrong else ''}.py").read_text(), namespace)
    return namespace["choose_blocks"]


def test_reference_solution_meets_the_120_percent_target():
    result = run_check("nb05_sbuf_blocks", _solution(), seed=11, local=True)
    assert result.passed, result.message


@pytest.mark.parametrize("key", [lambda m, k: (min(m, k), m * k), lambda m, k: (k, m)], ids=["balanced", "largest-K"])
def test_reasoned_but_different_blocks_pass(key):
    # seed 1 draws 27 x 3 x 9 tiles, where a block of 3 tiles is 131 % of the reference
    result = run_check("nb05_sbuf_blocks", _rule(16, key), seed=1, local=True)
    assert result.passed, result.message


def test_blocks_capped_at_eight_tiles_are_told_they_reuse_too_little():
    result = run_check("nb05_sbuf_blocks", _rule(8, lambda m, k: (min(m, k), m * k)), seed=1, local=True)
    assert result.status == "failed"
    assert "with (3, 1, 3)" in result.message and "within 120%" in result.message
    assert "DMA queues were busy" in result.message and "KiB per partition for every matmul" in result.message


def test_blocks_that_fill_sbuf_are_told_there_is_no_room_to_prefetch():
    # seed 1 draws 32 x 2 x 32 tiles: blocks of (32, 1, 16) leave no room for a second K block, 129 %
    result = run_check("nb05_sbuf_blocks", _rule(32, lambda m, k: (m * k, m), double_buffer=False), seed=1,
                       local=True)
    assert result.status == "failed" and "has no room to load while this one is multiplied" in result.message


def test_tiny_blocks_are_dma_bound():
    result = run_check("nb05_sbuf_blocks", lambda M, N, K: dict(TILES_IN_BLOCK_M=1, TILES_IN_BLOCK_N=1,
                                                                  TILES_IN_BLOCK_K=1), seed=11, local=True)
    assert result.status == "failed" and "DMA queues were busy" in result.message


def test_copying_aws_blocks_overflows_or_does_not_divide():
    result = run_check("nb05_sbuf_blocks", _solution(wrong=True), seed=2, local=True)
    assert result.status == "failed"
    assert "fit in SBUF" in result.message or "divide the shape" in result.message

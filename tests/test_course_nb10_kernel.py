"""Notebook 10's kernel exercise: a residual add whose time on a simulated Trn3 core must be within
120 % of the library add's, measured in the same run — a kernel of 1 KiB per partition is paced by the
core's one DMA issuer (478 ns per DMA on both generations), gains 1.00× from Trn2 to Trn3 and is told
so; the verdicts of the reference, reasoned-but-different kernels (whole rows, 8 KiB and AWS's 2 KiB
tiles), a lazy, a small-tile, a single-buffered and a wrong-values kernel."""

from __future__ import annotations

import pytest

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.course.exercises import draw_cases, get, part_seed, run_check
from test_exercises import answer_from

GRADE_ID = "nb10_trn3_add"
SEED = 0   # draws the timed shapes [1024, 4096] fp32 and [2048, 2048] bf16


@pytest.fixture(scope="module", autouse=True)
def reference_measured():
    """The library add on every timed case, measured once before any answer runs (the judge's cache)."""
    from trnlab.course.checks import nb10_kernel

    for case in draw_cases(get(GRADE_ID).spec, part_seed(SEED, 0)):
        if case["mode"] == "time":
            nb10_kernel.reference_run(case, "trn3"), nb10_kernel.reference_run(case, "trn2")


def _tiled_add(free_bytes: int | None = None, partitions: int = 128, one_buffer: bool = False):
    """nl.load / nl.add / nl.store over tiles [partitions, free_bytes per partition] (None: whole rows)."""
    @nki.jit
    def residual_add(x, y):
        R, C = x.shape
        P, F = partitions, min(C, free_bytes // x.dtype.itemsize if free_bytes else C)
        out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
        if one_buffer:
            a, b = (nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf) for _ in range(2))
        for i in nl.affine_range(R // P):
            for j in nl.affine_range(C // F):
                rows, cols = slice(i * P, (i + 1) * P), slice(j * F, (j + 1) * F)
                if one_buffer:
                    nisa.dma_copy(dst=a, src=x[rows, cols])
                    nisa.dma_copy(dst=b, src=y[rows, cols])
                    nisa.tensor_tensor(dst=a, data1=a, data2=b, op=nl.add)
                    nisa.dma_copy(dst=out[rows, cols], src=a)
                else:
                    nl.store(out[rows, cols], value=nl.add(nl.load(x[rows, cols]), nl.load(y[rows, cols])))
        return out

    return residual_add


def test_reference_kernel_passes():
    result = run_check(GRADE_ID, answer_from(GRADE_ID), seed=SEED, local=True)
    assert result.passed, result.message


def test_whole_rows_in_column_order_with_isa_instructions_pass():
    # reasoned but different: one tile per 128 rows holding the whole row (8-32 KiB per partition), the
    # loop over columns outside, nisa.dma_copy and nisa.tensor_tensor into tiles allocated per step
    @nki.jit
    def residual_add(x, y):
        R, C = x.shape
        P = nl.tile_size.pmax
        out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(R // P):
            a = nl.ndarray((P, C), dtype=x.dtype, buffer=nl.sbuf)
            b = nl.ndarray((P, C), dtype=x.dtype, buffer=nl.sbuf)
            total = nl.ndarray((P, C), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=a, src=x[i * P:(i + 1) * P, :])
            nisa.dma_copy(dst=b, src=y[i * P:(i + 1) * P, :])
            nisa.tensor_tensor(dst=total, data1=a, data2=b, op=nl.add)
            nisa.dma_copy(dst=out[i * P:(i + 1) * P, :], src=total)
        return out

    result = run_check(GRADE_ID, residual_add, seed=SEED, local=True)
    assert result.passed, result.message


def test_eight_kib_tiles_pass():
    result = run_check(GRADE_ID, _tiled_add(8192), seed=SEED, local=True)
    assert result.passed, result.message


def test_aws_two_kib_tiles_pass_just_over_the_line():
    # AWS's "at least 2 KiB per partition": a 2 KiB descriptor's 64 ns just covers its bytes on Trn3
    result = run_check(GRADE_ID, _tiled_add(2048), seed=SEED, local=True)
    assert result.passed, result.message


def test_one_kib_tiles_are_told_the_dma_issuer_sets_the_time():
    from trnlab.course.checks import nb10_kernel
    from trnlab.hardware import presets

    result = run_check(GRADE_ID, answer_from(GRADE_ID, ".wrong"), seed=SEED, local=True)
    assert result.status == "failed" and result.points == 0
    case = {"R": 1024, "C": 4096, "dtype": "float32"}
    reference, reference_old = nb10_kernel.reference_run(case, "trn3"), nb10_kernel.reference_run(case, "trn2")
    kernel = answer_from(GRADE_ID, ".wrong")
    yours, yours_old = (nki.run(kernel, *[nki.ShapeDtype((1024, 4096), "float32")] * 2, target=target,
                                timing_only=True).latency_us for target in ("trn3", "trn2"))
    issue_ns = presets.CORES["trn3"].dma_issue_ns
    transfers = 3 * (1024 // 128) * (4096 // 256)      # a load of x, a load of y and a store per tile
    message = result.message
    assert f"got {yours:.1f} µs ({100 * yours / reference['us']:.0f}%) for x, y [1024, 4096] float32" in message
    assert f"on trn2 yours takes {yours_old:.1f} µs ({100 * yours_old / reference_old['us']:.0f}% of the reference's " \
           f"{reference_old['us']:.1f})" in message
    assert f"your kernel issues {transfers} DMAs of 1 KiB per partition (128 KiB each)" in message
    assert f"{transfers} × {issue_ns:.0f} ns = {transfers * issue_ns / 1e3:.1f} µs" in message
    assert "the issuer, not bandwidth, sets the time" in message
    assert f"your kernel gains {yours_old / yours:.2f}× where the reference gains " \
           f"{reference_old['us'] / reference['us']:.2f}×" in message and f"{yours_old / yours:.2f}" == "1.00"


def test_lazy_fixed_512_element_tiles_fail_on_the_issuer_in_bf16():
    # [128, 512] whatever the dtype: 2 KiB per partition in fp32 (which passes) and 1 KiB in bf16
    @nki.jit
    def residual_add(x, y):
        R, C = x.shape
        out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(R // 128):
            for j in nl.affine_range(C // 512):
                rows, cols = slice(i * 128, (i + 1) * 128), slice(j * 512, (j + 1) * 512)
                nl.store(out[rows, cols], value=nl.add(nl.load(x[rows, cols]), nl.load(y[rows, cols])))
        return out

    result = run_check(GRADE_ID, residual_add, seed=SEED, local=True)
    assert result.status == "failed" and "x, y [2048, 2048] bfloat16" in result.message
    assert "DMAs of 1 KiB per partition" in result.message and "the issuer, not bandwidth, sets the time" in result.message


def test_tiles_allocated_once_under_nki_allocation_are_told_too_few_transfers_are_in_flight():
    # NKI allocation keeps the kernel's storage: each tile's loads wait for the previous tile's add
    kept = nki.jit(_tiled_add(4096, one_buffer=True).func,
                   compile_config=nki.compiler.CompileConfig(allocation=nki.compiler.Allocation.LINEAR))
    result = run_check(GRADE_ID, kept, seed=SEED, local=True)
    assert result.status == "failed" and "too few transfers in flight" in result.message, result.message
    assert "split_reused_buffers=True" in result.message


def test_tiles_allocated_once_pass_where_the_compiler_rotates_their_addresses():
    # neuronx-cc's default flow (address rotation), and NKI allocation with split_reused_buffers: the grader
    # runs the kernel with the configuration the student gave it
    split = nki.jit(_tiled_add(4096, one_buffer=True).func, compile_config=nki.compiler.CompileConfig(
        allocation=nki.compiler.Allocation.LINEAR, split_reused_buffers=True))
    for kernel in (_tiled_add(4096, one_buffer=True), split):
        result = run_check(GRADE_ID, kernel, seed=SEED, local=True)
        assert result.passed, result.message


def test_wrong_values_fail_before_any_timing():
    @nki.jit
    def residual_add(x, y):   # x + x: the second input never read
        R, C = x.shape
        out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(R // 128):
            a = nl.load(x[i * 128:(i + 1) * 128, :])
            nl.store(out[i * 128:(i + 1) * 128, :], value=nl.add(a, a))
        return out

    result = run_check(GRADE_ID, residual_add, seed=SEED, local=True)
    assert result.status == "failed" and "expected x + y; the largest difference" in result.message


def test_a_kernel_that_skips_the_work_on_the_timed_shapes_is_refused():
    # right on the small shapes the values are checked on, and nothing at all on the large ones
    reference = answer_from(GRADE_ID)

    @nki.jit
    def residual_add(x, y):
        if x.shape[0] > 512:
            return nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        return reference.func(x, y)

    result = run_check(GRADE_ID, residual_add, seed=SEED, local=True)
    assert result.status == "failed" and "expected your kernel to read x and y and write x + y" in result.message

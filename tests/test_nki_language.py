"""The nki / nki.language / nki.isa surface: launch, SPMD, indexing, masks, both call styles, measurement."""
import json
import os

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.hardware import dtypes, presets
from trnlab.nki import indexing


def _opcodes(run):
    return [run.timeline[i].opcode for i in range(len(run.timeline))]


# -- index expressions and masks ------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(size=st.integers(1, 40), coef=st.integers(-3, 3).filter(bool), const=st.integers(-50, 50),
       bound=st.integers(-60, 60), op=st.sampled_from(["<", "<=", ">", ">="]))
def test_mask_restricts_an_iterator_exactly_where_the_predicate_holds(size, coef, const, bound, op):
    i = nl.arange(size)
    expr = i * coef + const
    predicate = {"<": expr < bound, "<=": expr <= bound, ">": expr > bound, ">=": expr >= bound}[op]
    ranges = indexing.restrict(predicate)
    (it,) = [t for t, _ in expr.terms]
    lo, hi = ranges[it]
    values = np.arange(size) * coef + const
    holds = {"<": values < bound, "<=": values <= bound, ">": values > bound, ">=": values >= bound}[op]
    assert np.array_equal(np.flatnonzero(holds), np.arange(lo, hi))


def test_access_pattern_shape_follows_iterator_axes_so_swapping_them_transposes():
    i_p, i_f = nl.arange(4)[:, None], nl.arange(6)[None, :]
    index, shape = indexing.resolve((i_p, i_f), (10, 10), None, "a")
    assert shape == (4, 6) and index == (slice(0, 4, 1), slice(0, 6, 1))
    index, shape = indexing.resolve((i_f, i_p), (10, 10), None, "a")
    a = np.arange(100).reshape(10, 10)
    assert shape == (4, 6) and np.array_equal(a[index], a[:6, :4].T)


def test_strided_and_offset_access_patterns_become_slices():
    i_p, i_f = nl.mgrid[0:8, 0:5]
    index, shape = indexing.resolve((2 * i_p + 1, 3 + i_f), (20, 10), None, "a")
    assert index == (slice(1, 16, 2), slice(3, 8, 1)) and shape == (8, 5)


def test_mask_between_two_iterators_is_refused():
    i_p, i_f = nl.mgrid[0:4, 0:4]
    with pytest.raises(nki.MaskError):
        indexing.restrict(i_f < i_p)


# -- constants, dtypes, ranges ------------------------------------------------------------------------
# every attribute of AWS's nki.language.tile_size page (v2.33 and the latest page)
TILE_SIZE_ATTRIBUTES = ("pmax", "psum_fmax", "psum_fmax_bytes", "psum_bank_fmax", "psum_bank_fmax_bytes",
                        "psum_num_banks", "sbuf_size_bytes", "sbuf_fmax", "sbuf_fmax_bytes", "gemm_stationary_fmax",
                        "gemm_moving_fmax", "bn_stats_fmax", "psum_min_align", "sbuf_min_align",
                        "total_available_sbuf_size")


def test_tile_size_has_every_attribute_of_aws_page_with_its_units():
    spec = presets.TRN2.core
    ts = nl.tile_size
    missing = [name for name in TILE_SIZE_ATTRIBUTES if not hasattr(ts, name)]
    assert not missing
    # "in FP32 elements" and "in bytes" name the same per-partition capacity
    assert ts.sbuf_fmax * 4 == ts.sbuf_fmax_bytes == spec.sbuf_partition_bytes
    assert ts.psum_bank_fmax * 4 == ts.psum_bank_fmax_bytes == spec.psum_bank_bytes
    assert ts.sbuf_size_bytes == spec.partitions * spec.sbuf_partition_bytes


def test_tile_size_comes_from_the_preset():
    spec = presets.TRN2.core
    assert nl.tile_size.pmax == spec.partitions == 128
    assert nl.tile_size.gemm_stationary_fmax == 128 and nl.tile_size.gemm_moving_fmax == 512
    assert nl.tile_size.psum_fmax == 512 and nl.tile_size.psum_num_banks == 8
    assert nl.tile_size.total_available_sbuf_size == spec.sbuf_partition_bytes

    seen = {}

    @nki.jit(target="trn1")
    def kernel(x):
        seen["sbuf"] = nl.tile_size.total_available_sbuf_size
        return x

    kernel(np.zeros((1, 1), np.float32))
    assert seen["sbuf"] == presets.TRN1.core.sbuf_partition_bytes


def test_language_dtypes_are_the_hardware_dtypes():
    assert nl.bfloat16 == dtypes.bfloat16 and nl.float32 == np.float32 and nl.float8_e4m3 == dtypes.float8_e4m3


def test_ranges_iterate_like_range_and_keep_their_kind():
    assert list(nl.affine_range(3)) == [0, 1, 2]
    assert list(nl.sequential_range(1, 7, 2)) == [1, 3, 5]
    assert nl.static_range(4).kind == "static" and len(nl.affine_range(5)) == 5


def test_language_calls_outside_a_kernel_say_so():
    with pytest.raises(nki.NKIError, match="running kernel"):
        nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)


# -- launch ----------------------------------------------------------------------------------------
def test_spmd_program_ids_and_counts():
    @nki.jit
    def kernel(x):
        out = nl.ndarray((3, 2), dtype=nl.float32, buffer=nl.shared_hbm)
        tile = nl.full((1, 1), nl.program_id(0) * 10 + nl.program_id(1) + nl.num_programs() * 100,
                       dtype=nl.float32)
        nl.store(out[nl.program_id(0):nl.program_id(0) + 1, nl.program_id(1):nl.program_id(1) + 1], value=tile)
        return out

    out = kernel[3, 2](np.zeros((1, 1), np.float32))
    expected = np.array([[r * 10 + c + 600 for c in range(2)] for r in range(3)], np.float32)
    np.testing.assert_array_equal(out, expected)


def test_kernels_can_call_kernels():
    @nki.jit
    def double(tile):
        return nl.multiply(tile, 2.0)

    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=double(nl.load(x)))
        return out

    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(kernel(x), 2 * x)


def test_simulate_kernel_and_simulate_return_outputs():
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.exp(nl.load(x)))
        return out

    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
    np.testing.assert_allclose(nki.simulate_kernel(kernel, x), np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(nki.simulate(kernel)(x), np.exp(x), rtol=1e-6)


def test_timing_only_runs_cost_everything_and_return_no_values():
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.exp(nl.load(x)))
        return out

    x = np.ones((128, 256), np.float32)
    full = nki.run(kernel, x)
    timing = nki.run(kernel, nki.ShapeDtype((128, 256), nl.float32), timing_only=True)
    assert timing.outputs is None
    assert timing.latency_ns == pytest.approx(full.latency_ns)
    assert _opcodes(timing) == _opcodes(full) == ["dma_copy", "activation", "dma_copy"]


def test_shape_only_arguments_need_timing_only():
    @nki.jit
    def kernel(x):
        return x

    with pytest.raises(nki.NKIError, match="timing_only"):
        kernel(nki.ShapeDtype((4, 4), nl.float32))


def test_benchmark_and_profile_report_simulated_latency_and_write_a_trace(tmp_path):
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.add(nl.load(x), 1.0))
        return out

    x = np.zeros((128, 512), np.float32)
    bench = nki.benchmark(warmup=2, iters=5)(nki.jit(kernel))
    np.testing.assert_array_equal(bench(x), x + 1)
    latency_us = bench.benchmark_result.nc_latency.get_latency_percentile(50)
    assert latency_us == pytest.approx(bench.benchmark_result.latency_ns / 1e3) and latency_us > 0

    prof = nki.profile(working_directory=str(tmp_path), save_trace_name="add.ntff")(kernel)
    prof(x)
    with open(prof.profile_result["trace"]) as f:
        trace = json.load(f)
    assert os.path.basename(prof.profile_result["trace"]) == "add.json"
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    assert any("dma_copy" in json.dumps(e) for e in events)
    assert os.path.exists(prof.profile_result["summary"])


def test_profile_mfu_is_against_the_peak_of_the_dtype_the_kernel_multiplies():
    @nki.jit
    def matmul(lhsT, rhs):                                     # [K, M] x [K, N] -> [M, N]
        K, M = lhsT.shape
        N = rhs.shape[1]
        stationary = nl.ndarray((K, M), dtype=lhsT.dtype, buffer=nl.sbuf)
        moving = nl.ndarray((K, N), dtype=rhs.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=stationary, src=lhsT)
        nisa.dma_copy(dst=moving, src=rhs)
        product = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=product, stationary=stationary, moving=moving)
        result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=result, src=product)
        out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=result)
        return out

    spec = presets.TRN2.core
    for dtype, peak in [(nl.float32, spec.peak_flops("float32")), (nl.bfloat16, spec.peak_flops("bfloat16"))]:
        args = (nki.ShapeDtype((128, 128), dtype), nki.ShapeDtype((128, 512), dtype))
        run = nki.run(matmul, *args, timing_only=True)
        assert run.core.matmul_dtype == dtypes.as_dtype(dtype)
        expected = 2.0 * 128 * 128 * 512 / (run.latency_ns * 1e-9) / peak
        assert run.profile().mfu == pytest.approx(expected, rel=1e-9)
    assert spec.peak_flops("float32") < spec.peak_flops("bfloat16")
    assert run.profile("float32").mfu > run.profile().mfu        # an explicit dtype still wins


def test_timeline_records_the_kernel_source_line():
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        tile = nl.load(x)
        nl.store(out, value=tile)
        return out

    run = nki.run(kernel, np.zeros((4, 4), np.float32))
    notes = [run.timeline[i].note for i in range(len(run.timeline))]
    assert notes[0].startswith("test_nki_language.py:") and "(kernel)" in notes[0]
    assert notes[0] != notes[1]


# -- the two call styles ----------------------------------------------------------------------------
def test_functional_and_destination_styles_issue_the_same_instructions():
    @nki.jit
    def functional(a, b):
        out = nl.ndarray((64, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        a_tile, b_tile = nl.load(a), nl.load(b)
        product = nisa.nc_matmul(a_tile, b_tile)
        result = nisa.tensor_copy(product)
        doubled = nisa.tensor_scalar(result, nl.multiply, 2.0)
        shifted = nisa.activation(nl.exp, doubled, bias=None, scale=0.5)
        total = nisa.tensor_tensor(shifted, doubled, nl.add)
        nl.store(out, value=total)
        return out

    @nki.jit
    def destination(a, b):
        out = nl.ndarray((64, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        a_tile = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        b_tile = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a_tile, src=a)
        nisa.dma_copy(dst=b_tile, src=b)
        product = nl.ndarray((64, 512), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(product, a_tile, b_tile)
        result = nl.ndarray((64, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=result, src=product)
        doubled = nl.ndarray((64, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=doubled, data=result, op0=nl.multiply, operand0=2.0)
        shifted = nl.ndarray((64, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=shifted, op=nl.exp, data=doubled, scale=0.5)
        total = nl.ndarray((64, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=total, data1=shifted, data2=doubled, op=nl.add)
        nisa.dma_copy(dst=out, src=total)
        return out

    rng = np.random.default_rng(0)
    a = rng.standard_normal((128, 64)).astype(np.float32) / 8
    b = rng.standard_normal((128, 512)).astype(np.float32) / 8
    first, second = nki.run(functional, a, b), nki.run(destination, a, b)
    product = a.T.astype(np.float64) @ b
    expected = np.exp(product) + 2 * product
    # the fp32 matmul is within its true tolerance of the exact product (the summation order is
    # the BLAS kernel's, which differs between CPUs); exp(p) + 2p moves by at most (e^p + 2) times it
    tolerance = (np.exp(product) + 2) * dtypes.fp32_matmul_tolerance(a.T, b)
    np.testing.assert_allclose(first.outputs, expected, rtol=1e-6, atol=tolerance.max())
    np.testing.assert_array_equal(first.outputs, second.outputs)
    assert _opcodes(first) == _opcodes(second)


def test_assigning_a_result_writes_the_destination_directly():
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        tile = nl.load(x)
        result = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        result[...] = nl.exp(tile)                  # one activation into `result`, no extra copy
        nl.store(out, value=result)
        return out

    x = np.zeros((4, 8), np.float32)
    run = nki.run(kernel, x)
    np.testing.assert_array_equal(run.outputs, np.ones_like(x))
    assert _opcodes(run) == ["dma_copy", "activation", "dma_copy"]


def test_psum_plus_equals_matmul_accumulates_on_the_tensor_engine():
    @nki.jit
    def kernel(lhsT, rhs):
        out = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((128, 256), dtype=nl.float32, buffer=nl.psum)
        for k in nl.affine_range(3):
            acc += nl.matmul(nl.load(lhsT[k * 128:(k + 1) * 128, :]), nl.load(rhs[k * 128:(k + 1) * 128, :]),
                             transpose_x=True)
        nl.store(out, value=nl.copy(acc))
        return out

    rng = np.random.default_rng(1)
    lhsT = rng.standard_normal((384, 128)).astype(np.float32)
    rhs = rng.standard_normal((384, 256)).astype(np.float32)
    run = nki.run(kernel, lhsT, rhs)
    np.testing.assert_allclose(run.outputs, lhsT.T @ rhs, rtol=1e-4, atol=1e-3)
    assert _opcodes(run).count("nc_matmul") == 3 and "tensor_tensor" not in _opcodes(run)


def test_matmul_without_transpose_x_transposes_on_the_tensor_engine():
    @nki.jit
    def kernel(x, y):
        out = nl.ndarray((x.shape[0], y.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.copy(nl.matmul(nl.load(x), nl.load(y))))
        return out

    rng = np.random.default_rng(2)
    x = rng.standard_normal((96, 128)).astype(np.float32)
    y = rng.standard_normal((128, 200)).astype(np.float32)
    run = nki.run(kernel, x, y)
    np.testing.assert_allclose(run.outputs, x @ y, rtol=1e-4, atol=1e-3)
    assert "nc_transpose" in _opcodes(run)


# -- language math ------------------------------------------------------------------------------
def test_elementwise_reductions_where_and_broadcast():
    @nki.jit
    def kernel(x, row):
        out = nl.ndarray((128, 6), dtype=nl.float32, buffer=nl.shared_hbm)
        tile = nl.load(x)                                            # [128, 64]
        spread = nl.load(row).broadcast_to((128, 64))                # [1, 64] -> [128, 64]
        total = nl.sum(tile, axis=1, keepdims=True)
        biggest = nl.max(tile, axis=1, keepdims=True)
        average = nl.mean(tile, axis=1, keepdims=True)
        clipped = nl.where(nl.greater(tile, 0.0), tile, 0.0)
        clipped_sum = nl.sum(clipped, axis=1, keepdims=True)
        scaled = nl.sum(nl.multiply(tile, spread), axis=1, keepdims=True)
        centered = nl.sum(nl.subtract(tile, average), axis=1, keepdims=True)
        for column, value in enumerate((total, biggest, average, clipped_sum, scaled, centered)):
            nl.store(out[:, column:column + 1], value=value)
        return out

    rng = np.random.default_rng(3)
    x = rng.standard_normal((128, 64)).astype(np.float32)
    row = rng.standard_normal((1, 64)).astype(np.float32)
    out = kernel(x, row)
    expected = np.stack([x.sum(1), x.max(1), x.mean(1), np.maximum(x, 0).sum(1), (x * row).sum(1),
                         (x - x.mean(1, keepdims=True)).sum(1)], axis=1)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-4)


def test_iota_writes_the_index_expression():
    @nki.jit
    def kernel(x):
        out = nl.ndarray((128, 16), dtype=nl.int32, buffer=nl.shared_hbm)
        i_p, i_f = nl.mgrid[0:128, 0:16]
        nl.store(out, value=nisa.iota(i_p * 16 + i_f, dtype=nl.int32))
        return out

    np.testing.assert_array_equal(kernel(np.zeros(1, np.float32)), np.arange(128 * 16).reshape(128, 16))


def test_par_dim_blocks_hold_independent_tiles():
    @nki.jit
    def kernel(x):
        out = nl.ndarray((4, 128, 32), dtype=x.dtype, buffer=nl.shared_hbm)
        blocks = nl.ndarray((4, nl.par_dim(128), 32), dtype=x.dtype, buffer=nl.sbuf)
        for b in nl.affine_range(4):
            nisa.dma_copy(dst=blocks[b], src=x[b])
            blocks[b] = nl.multiply(blocks[b], float(b + 1))
            nisa.dma_copy(dst=out[b], src=blocks[b])
        return out

    x = np.ones((4, 128, 32), np.float32)
    np.testing.assert_array_equal(kernel(x), x * np.arange(1, 5, dtype=np.float32)[:, None, None])


def test_torch_float32_in_and_out():
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.tanh(nl.load(x)))
        return out

    x = torch.linspace(-2, 2, 32).reshape(4, 8)
    out = kernel(x)
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, torch.tanh(x))


def test_reshape_of_an_input_and_transposing_load():
    @nki.jit
    def kernel(x, g):
        transposed = nl.ndarray((64, 96), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(transposed, value=nl.load_transpose2d(x[0:96, 0:64]))
        row = nl.ndarray((1, 16), dtype=g.dtype, buffer=nl.shared_hbm)
        nl.store(row, value=nl.load(g.reshape((1, 16))))
        return transposed, row

    rng = np.random.default_rng(4)
    x, g = rng.standard_normal((100, 70)).astype(np.float32), np.arange(16, dtype=np.float32)
    transposed, row = kernel(x, g)
    np.testing.assert_array_equal(transposed, x[:96, :64].T)
    np.testing.assert_array_equal(row[0], g)


def test_ap_stride_count_access_pattern_pools_windows():
    @nki.jit
    def kernel(x):
        c, h, w = x.shape
        out = nl.ndarray((c, h // 2, w // 2), dtype=x.dtype, buffer=nl.shared_hbm)
        tile = nl.load(x)
        windows = tile.ap([[h * w, c], [2 * w, h // 2], [2, w // 2], [w, 2], [1, 2]])
        nl.store(out, value=nl.multiply(nl.sum(windows, axis=[3, 4]), 0.25))
        return out

    x = np.random.default_rng(5).standard_normal((8, 6, 10)).astype(np.float32)
    np.testing.assert_allclose(kernel(x), x.reshape(8, 3, 2, 5, 2).mean(axis=(2, 4)), rtol=1e-6, atol=1e-6)


def test_affine_select_builds_a_causal_mask():
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        i_q, i_k = nl.mgrid[0:64, 0:64]
        masked = nisa.affine_select(i_q >= i_k, nl.load(x[i_q, i_k]), -9984.0)
        nl.store(out, value=masked)
        return out

    x = np.random.default_rng(6).standard_normal((64, 64)).astype(np.float32)
    np.testing.assert_allclose(kernel(x), np.where(np.tril(np.ones((64, 64), bool)), x, -9984.0), rtol=1e-6)


def test_unmasked_math_on_a_masked_load_runs_on_the_rows_it_loaded():
    """As in AWS's tutorials: mask the load and the store of the last partial tile, not the math."""
    @nki.jit
    def kernel(x):
        rows, cols = x.shape
        out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.mgrid[0:128, 0:cols]
        for t in nl.affine_range((rows + 127) // 128):
            tile = nl.load(x[t * 128 + i_p, i_f], mask=(t * 128 + i_p < rows))
            row_max = nl.max(tile, axis=1)                       # [128]: only the loaded rows
            shifted = nl.exp(tile - row_max)
            normalised = shifted / nl.sum(shifted, axis=1)
            nl.store(out[t * 128 + i_p, i_f], value=normalised, mask=(t * 128 + i_p < rows))
        return out

    x = np.random.default_rng(7).standard_normal((200, 24)).astype(np.float32)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(kernel(x), e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_mgrid_access_spreads_a_row_over_the_partitions_it_does_not_use():
    @nki.jit
    def kernel(x, bias):
        rows, cols = x.shape
        out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
        i_p, i_f, i_one = nl.mgrid[0:rows, 0:cols, 0:1]
        bias_tile = nl.load(bias.reshape((1, cols))[i_one, i_f])        # [rows, cols]: row 0 on every partition
        nl.store(out[i_p, i_f], value=nl.add(nl.load(x[i_p, i_f]), bias_tile))
        return out

    rng = np.random.default_rng(8)
    x, bias = rng.standard_normal((32, 16)).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    np.testing.assert_array_equal(kernel(x, bias), x + bias)


def test_identity_matrix_and_typing_names():
    from trnlab.nki.typing import tensor

    @nki.jit
    def kernel(x: tensor):
        out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        eye = nl.shared_identity_matrix(n=128, dtype=nl.float32)
        nl.store(out, value=nl.copy(nl.transpose(eye)))
        return out

    np.testing.assert_array_equal(kernel(np.zeros(1, np.float32)), np.eye(128, dtype=np.float32))


def test_positional_dst_with_keyword_operands_is_destination_style():
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        tile = nl.load(x)
        doubled = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(doubled, data=tile, op0=nl.multiply, operand0=2.0)
        copied = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(copied, src=doubled)
        nl.store(out, value=copied)
        return out

    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(kernel(x), 2 * x)

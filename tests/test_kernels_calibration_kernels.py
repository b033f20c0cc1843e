"""The kernels of the calibration table compute what their lessons say: vector add (CS149's three
tilings, one buffer or rotating), the fused Mamba layer (AWS's v1, v2, v3) and the PSUM-pipelining
matmuls of [AUTOTUNE] (one accumulator, two in turn, the hand-blocked kernel) against NumPy."""
from __future__ import annotations

import numpy as np
import pytest

import trnlab.nki as nki
from trnlab.kernels import mamba, vector_add
from trnlab.kernels import matmul_psum_pipeline as psum_pipeline


def _output(run):
    out = run.outputs
    return np.asarray(out[0] if isinstance(out, (list, tuple)) else out)


@pytest.mark.parametrize("kernel, options", [
    (vector_add.vector_add_rows, {"ROW_CHUNK": 1}),
    (vector_add.vector_add_rows, {"ROW_CHUNK": 128}),
    (vector_add.vector_add_rows, {"ROW_CHUNK": 64, "ONE_BUFFER": True}),
    (vector_add.vector_add_stream, {"FREE_DIM": 2}),
    (vector_add.vector_add_stream, {"FREE_DIM": 4, "ONE_BUFFER": True}),
])
def test_vector_add_tilings_all_compute_a_plus_b(kernel, options):
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal(512).astype(np.float32) for _ in range(2))
    run = nki.run(kernel, a, b, target="trn2", **options)
    np.testing.assert_allclose(_output(run), a + b, rtol=1e-6)


def test_vector_add_refuses_a_chunk_wider_than_the_partitions():
    vec = nki.ShapeDtype((512,), np.float32)
    with pytest.raises(Exception, match="ROW_CHUNK=256 > 128 partitions"):
        nki.run(vector_add.vector_add_rows, vec, vec, target="trn2", timing_only=True, ROW_CHUNK=256)


def test_one_buffer_per_tile_serialises_the_steps_when_the_storage_is_kept():
    # one-element steps: rotating tiles let many steps' DMAs be in flight at once; with one buffer kept at
    # one address a step's loads wait until the previous step's add has read the tiles (a DMA latency per
    # step). Without the issue cost, which limits the rotating tiles too (478 ns a transfer: 1.4 µs a step).
    # In the default flow the compiler's address rotation gives each step's tiles new bytes anyway
    from trnlab import config
    from trnlab.hardware import presets
    vec = nki.ShapeDtype((256,), np.float32)
    for target, factor in ((presets.TRN2.core.derive(dma_issue_ns=0.0), 3), ("trn2", 1.5)):
        rotating = nki.run(vector_add.vector_add_rows, vec, vec, target=target, timing_only=True, ROW_CHUNK=1)
        rotated = nki.run(vector_add.vector_add_rows, vec, vec, target=target, timing_only=True, ROW_CHUNK=1,
                          ONE_BUFFER=True)
        with config.override(versions=False):
            single = nki.run(vector_add.vector_add_rows, vec, vec, target=target, timing_only=True, ROW_CHUNK=1,
                             ONE_BUFFER=True)
        assert single.latency_us > factor * rotating.latency_us
        assert rotated.latency_us == pytest.approx(rotating.latency_us, rel=0.02)


@pytest.mark.parametrize("kernel, options", [(mamba.mamba_v1, {}), (mamba.mamba_v2, {}),
                                             (mamba.mamba_v2, {"HOIST_DELTA_U": True}), (mamba.mamba_v3, {})])
def test_mamba_versions_compute_the_selective_scan(kernel, options):
    rng = np.random.default_rng(0)
    batch, channels, seq, state = 1, 256, 1024, 3        # v3: two 512-column chunks carry the scan
    delta = rng.uniform(0.01, 0.1, (batch, channels, seq)).astype(np.float32)
    u = rng.standard_normal((batch, channels, seq)).astype(np.float32)
    A = -rng.uniform(0.5, 1.5, (channels, state)).astype(np.float32)
    B, C = (rng.standard_normal((batch, state, seq)).astype(np.float32) for _ in range(2))
    run = nki.run(kernel, delta, u, A, B, C, target="trn1", **options)
    expected = mamba.reference(delta, u, A, B, C)
    np.testing.assert_allclose(_output(run), expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


@pytest.mark.parametrize("kernel, options", [
    (psum_pipeline.matmul_psum_single, {}),
    (psum_pipeline.matmul_psum_rotating, {}),
    (psum_pipeline.matmul_hand_blocked, {"BLOCK_M": 256, "BLOCK_K": 256, "RESULT_BUFFERS": 2}),
])
def test_psum_pipelining_matmuls_compute_lhsT_transposed_times_rhs(kernel, options):
    rng = np.random.default_rng(2)
    K, M, N = 512, 256, 1024
    lhsT = rng.standard_normal((K, M)).astype(np.float32)
    rhs = rng.standard_normal((K, N)).astype(np.float32)
    run = nki.run(kernel, lhsT, rhs, target="trn2", **options)
    np.testing.assert_allclose(_output(run), lhsT.T @ rhs, rtol=1e-4, atol=1e-3)


def test_a_second_psum_accumulator_lets_the_next_m_tile_start_during_the_copy_out():
    # [AUTOTUNE]'s lesson 59.6 -> 83.4 % MFU: with one accumulator the next M tile's zeroing waits for
    # this tile's PSUM -> SBUF copy; with two in turn the Tensor engine keeps going
    one, mfu_one = psum_pipeline.run(psum_pipeline.matmul_psum_single)
    two, mfu_two = psum_pipeline.run(psum_pipeline.matmul_psum_rotating)
    assert two.latency_us < one.latency_us and mfu_two > mfu_one


def test_the_tuners_mfu_is_flops_over_the_trn2_bf16_peak():
    # 2 x 2048^3 FLOPs at 78.6 TFLOPS (2 x 128 x 128 x 2.4 GHz) take 218.5 us: 100 %
    assert psum_pipeline.mfu(2 * 2048 ** 3 / (2 * 128 * 128 * 2.4e9) * 1e6, 2048, 2048, 2048) == pytest.approx(100.0)

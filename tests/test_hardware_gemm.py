"""The reference tiled GEMM: any M, N, K (masked edge tiles), checked against NumPy."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trnlab.hardware import dtypes, gemm, presets


def reference(A, B, dtype):
    a = dtypes.cast(A, dtype).astype(np.float64)
    b = dtypes.cast(B, dtype).astype(np.float64)
    return a @ b


@settings(max_examples=25, deadline=None)
@given(M=st.integers(1, 300), N=st.integers(1, 1100), K=st.integers(1, 300),
       seed=st.integers(0, 2 ** 16))
def test_gemm_matches_numpy_for_any_shape(M, N, K, seed):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((M, K)).astype(np.float32)
    B = rng.standard_normal((K, N)).astype(np.float32)
    C, core = gemm.run_gemm(A, B, dtype="bfloat16")
    # bf16 products are exact in fp32; only the fp32 accumulation order differs from float64
    np.testing.assert_allclose(C, reference(A, B, "bfloat16"), rtol=1e-4, atol=1e-4 * np.sqrt(K))
    p = gemm.plan(M, N, K)
    assert core.profile().instructions["nc_matmul"] == p.matmuls
    assert len(core.timeline) == p.instructions
    assert 0 < p.utilisation <= 1
    # every tile was freed again
    assert not core.sbuf.tensors and not core.psum.tensors


@settings(max_examples=10, deadline=None)
@given(M=st.integers(1, 260), N=st.integers(1, 600), K=st.integers(1, 260))
def test_timing_only_gemm_has_the_same_timeline(M, N, K):
    rng = np.random.default_rng(0)
    _, full = gemm.run_gemm(rng.standard_normal((M, K)), rng.standard_normal((K, N)), mode="full")
    _, timing = gemm.run_gemm(shape=(M, N, K), mode="timing")
    assert full.timeline.same_schedule(timing.timeline)


@pytest.mark.parametrize("dtype", ["float32", "float16", "float8_e4m3"])
def test_gemm_dtypes(dtype):
    rng = np.random.default_rng(1)
    A = rng.standard_normal((130, 140)).astype(np.float32)
    B = rng.standard_normal((140, 520)).astype(np.float32)
    C, core = gemm.run_gemm(A, B, dtype=dtype, spec=presets.TRN1.core)
    np.testing.assert_allclose(C, reference(A, B, dtype), rtol=1e-4, atol=2e-3)


def test_fp32_gemm_takes_four_times_the_tensor_engine_time():
    _, bf = gemm.run_gemm(shape=(256, 1024, 256), mode="timing", dtype="bfloat16")
    _, fp = gemm.run_gemm(shape=(256, 1024, 256), mode="timing", dtype="float32")
    assert fp.timeline.busy_ns()["pe"] == pytest.approx(4 * bf.timeline.busy_ns()["pe"])


def test_plan_counts_and_utilisation():
    p = gemm.plan(2048, 2048, 2048)
    assert (p.m_tiles, p.n_tiles, p.k_tiles) == (16, 4, 16)
    assert p.matmuls == 1024 and p.utilisation == 1.0
    edge = gemm.plan(129, 513, 129)
    assert edge.matmuls == 2 * 2 * 2
    assert edge.utilisation == pytest.approx(129 * 513 * 129 / (8 * 128 * 512 * 128))


def test_tiles_follow_a_derived_core():
    tiny = presets.derive(pe_rows=8, pe_cols=8, partitions=8, moving_fmax=16)
    p = gemm.plan(20, 40, 20, tiny)
    assert (p.tile_m, p.tile_n, p.tile_k) == (8, 16, 8)
    rng = np.random.default_rng(2)
    A, B = rng.standard_normal((20, 20)), rng.standard_normal((20, 40))
    C, core = gemm.run_gemm(A, B, spec=tiny, dtype="float32")
    np.testing.assert_allclose(C, A.astype(np.float32) @ B.astype(np.float32), rtol=1e-5, atol=1e-5)


def test_run_lhsT_takes_inputs_in_the_hbm_layout_and_gives_run_gemms_bits():
    """gemm.run_lhsT: the GEMM from bf16 lhsT [K, M] and rhs [K, N] as a kernel receives them —
    the same program, times and bits as run_gemm from the fp32 A and B they came from."""
    rng = np.random.default_rng(3)
    A = rng.standard_normal((300, 200)).astype(np.float32)
    B = rng.standard_normal((200, 700)).astype(np.float32)
    C, core = gemm.run_gemm(A, B, dtype="bfloat16")
    lhsT = dtypes.cast(A, "bfloat16").T.copy()
    C2, core2 = gemm.run_lhsT(lhsT, dtypes.cast(B, "bfloat16"))
    np.testing.assert_array_equal(C, C2)
    assert core.now == core2.now and len(core.timeline) == len(core2.timeline)
    with pytest.raises(ValueError, match="gemm inputs"):
        gemm.run_lhsT(lhsT, B)                       # fp32 rhs beside a bf16 lhsT

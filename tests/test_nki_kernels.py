"""NKI-style kernels (tests/nki_kernels, and the matmul ladder of trnlab.kernels) run on trnlab.nki and match NumPy."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
from trnlab.hardware import dtypes
from trnlab.kernels import matmul_ladder  # one ladder, in the package: notebook 05 shows it
from nki_kernels import attention, avgpool, norms, tensor_add, transpose2d


def _rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def test_tensor_add_single_tile_matches_numpy():
    rng = np.random.default_rng(0)
    a, b = _rand(rng, 128, 512), _rand(rng, 128, 512)
    np.testing.assert_array_equal(tensor_add.add_single_tile(a, b), a + b)


@settings(max_examples=8, deadline=None)
@given(rows=st.integers(1, 300), cols=st.integers(1, 96))
def test_tensor_add_masked_tiles_any_row_count(rows, cols):
    rng = np.random.default_rng(rows * 1000 + cols)
    a, b = _rand(rng, rows, cols), _rand(rng, rows, cols)
    np.testing.assert_array_equal(tensor_add.add_tiled(a, b), a + b)


def test_tensor_add_spmd_grid_covers_every_tile():
    rng = np.random.default_rng(1)
    a, b = _rand(rng, 384, 1024), _rand(rng, 384, 1024)
    np.testing.assert_array_equal(tensor_add.add_spmd[3, 2](a, b), a + b)


def test_tensor_add_torch_in_torch_out_bfloat16():
    a = torch.randn(128, 512, dtype=torch.bfloat16)
    b = torch.randn(128, 512, dtype=torch.bfloat16)
    out = tensor_add.add_single_tile(a, b)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    # the engines add in fp32 and round once to bf16, as torch does for bf16 + bf16
    torch.testing.assert_close(out, a + b, rtol=0, atol=0)


def test_transpose_tile_and_tiled_transpose_match_numpy():
    rng = np.random.default_rng(2)
    x = _rand(rng, 96, 40)
    np.testing.assert_array_equal(transpose2d.transpose_tile(x), x.T)
    y = _rand(rng, 256, 384)
    np.testing.assert_array_equal(transpose2d.transpose_tiled(y), y.T)


@pytest.mark.parametrize("pool", [1, 2, 3])
def test_avgpool_access_pattern_matches_numpy(pool):
    rng = np.random.default_rng(pool)
    c, h, w = 16, 6 * pool, 4 * pool
    x = _rand(rng, c, h, w)
    expected = x.reshape(c, h // pool, pool, w // pool, pool).mean(axis=(2, 4))
    np.testing.assert_allclose(avgpool.avgpool2d(x, pool), expected, rtol=1e-6, atol=1e-6)


LADDER_CASES = [
    (matmul_ladder.matmul_basic, (128, 64, 512), {}),
    (matmul_ladder.matmul_tiled, (256, 256, 1024), {}),
    (matmul_ladder.matmul_hoisted, (256, 256, 1024), {}),
    (matmul_ladder.matmul_block_free, (256, 256, 1024), {}),
    (matmul_ladder.matmul_fully_blocked, (512, 256, 1024),
     dict(TILES_IN_BLOCK_M=2, TILES_IN_BLOCK_N=1, TILES_IN_BLOCK_K=2)),
]


@pytest.mark.parametrize("kernel,shape,options", LADDER_CASES, ids=[c[0].__name__ for c in LADDER_CASES])
def test_matmul_ladder_step_matches_numpy_fp32(kernel, shape, options):
    K, M, N = shape
    rng = np.random.default_rng(K + M + N)
    lhsT, rhs = _rand(rng, K, M), _rand(rng, K, N)
    np.testing.assert_allclose(kernel(lhsT, rhs, **options), lhsT.T @ rhs, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("kernel,shape,options", LADDER_CASES[1:], ids=[c[0].__name__ for c in LADDER_CASES[1:]])
def test_matmul_ladder_step_bfloat16_inputs_accumulate_in_fp32(kernel, shape, options):
    K, M, N = shape
    rng = np.random.default_rng(7)
    lhsT = _rand(rng, K, M).astype(dtypes.bfloat16)
    rhs = _rand(rng, K, N).astype(dtypes.bfloat16)
    exact = lhsT.astype(np.float32).T @ rhs.astype(np.float32)
    out = kernel(lhsT, rhs, **options)
    assert out.dtype == dtypes.bfloat16
    # fp32 accumulation then one rounding to bf16: within bf16's half-ulp of the exact product
    np.testing.assert_allclose(out.astype(np.float32), exact, rtol=2 ** -8, atol=1e-2)


def test_every_ladder_step_computes_the_same_product():
    rng = np.random.default_rng(3)
    lhsT, rhs = _rand(rng, 256, 256), _rand(rng, 256, 1024)
    results = [matmul_ladder.matmul_tiled(lhsT, rhs), matmul_ladder.matmul_hoisted(lhsT, rhs),
               matmul_ladder.matmul_block_free(lhsT, rhs),
               matmul_ladder.matmul_fully_blocked(lhsT, rhs, TILES_IN_BLOCK_M=2, TILES_IN_BLOCK_N=1,
                                                  TILES_IN_BLOCK_K=1)]
    for other in results[1:]:
        np.testing.assert_allclose(other, results[0], rtol=1e-5, atol=1e-4)


def test_ladder_gets_faster_step_by_step_on_trn2():
    """Same product, less simulated time: what the optimization ladder is for (timing-only run)."""
    lhsT = nki.ShapeDtype((2048, 2048), dtypes.bfloat16)
    rhs = nki.ShapeDtype((2048, 4096), dtypes.bfloat16)
    tiled, hoisted, block_free = (nki.run(k, lhsT, rhs, timing_only=True).latency_ns for k in
                                  (matmul_ladder.matmul_tiled, matmul_ladder.matmul_hoisted,
                                   matmul_ladder.matmul_block_free))
    blocked = nki.run(matmul_ladder.matmul_fully_blocked, lhsT, rhs, timing_only=True,
                      TILES_IN_BLOCK_M=4, TILES_IN_BLOCK_N=2, TILES_IN_BLOCK_K=4).latency_ns
    assert tiled > hoisted > block_free
    assert blocked < tiled


@settings(max_examples=6, deadline=None)
@given(rows=st.integers(1, 260), cols=st.sampled_from([1, 7, 64, 300]))
def test_softmax_rows_matches_numpy(rows, cols):
    rng = np.random.default_rng(rows + cols)
    x = _rand(rng, rows, cols) * 4
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(norms.softmax_rows(x), e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_layernorm_matches_torch():
    rng = np.random.default_rng(5)
    x, gamma, beta = _rand(rng, 256, 192), _rand(rng, 1, 192), _rand(rng, 1, 192)
    expected = torch.nn.functional.layer_norm(torch.from_numpy(x), (192,), torch.from_numpy(gamma[0]),
                                              torch.from_numpy(beta[0]), eps=1e-5).numpy()
    np.testing.assert_allclose(norms.layernorm_rows(x, gamma, beta), expected, rtol=1e-4, atol=1e-4)


def test_rmsnorm_matches_numpy():
    rng = np.random.default_rng(6)
    x, weight = _rand(rng, 128, 320), _rand(rng, 1, 320)
    expected = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-6) * weight
    np.testing.assert_allclose(norms.rmsnorm_rows(x, weight), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("d,seq_q,seq_k", [(64, 128, 128), (32, 256, 512), (128, 128, 256)])
def test_fused_attention_matches_numpy(d, seq_q, seq_k):
    rng = np.random.default_rng(d + seq_q + seq_k)
    q, k, v = _rand(rng, seq_q, d), _rand(rng, seq_k, d), _rand(rng, seq_k, d)
    scores = q @ k.T / np.sqrt(d)
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    expected = (p / p.sum(axis=1, keepdims=True)) @ v
    out = attention.attention_fwd(np.ascontiguousarray(q.T), np.ascontiguousarray(k.T), v)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows", [128, 200, 300])
def test_rmsnorm_masked_functional_style_matches_numpy(rows):
    rng = np.random.default_rng(rows)
    x, weight = _rand(rng, rows, 96), _rand(rng, 96)
    expected = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-6) * weight
    np.testing.assert_allclose(norms.rmsnorm_masked(x, weight), expected, rtol=1e-4, atol=1e-4)

"""The small kernels of a training step (trnlab.kernels.shape_ops) against NumPy, for drawn shapes."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from trnlab.kernels import shape_ops

dims = st.integers(1, 150)


def _rand(seed, *shape):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@settings(max_examples=8, deadline=None)
@given(m=dims, n=dims, seed=st.integers(0, 99))
def test_transpose_2d_moves_every_element(m, n, seed):
    x = _rand(seed, m, n)
    np.testing.assert_array_equal(shape_ops.transpose_2d(x), x.T)


@settings(max_examples=6, deadline=None)
@given(a=st.integers(1, 3), b=st.integers(1, 140), c=st.integers(1, 4), d=st.integers(1, 40))
def test_swap_middle_axes_is_permute_0213(a, b, c, d):
    x = _rand(0, a, b, c, d)
    np.testing.assert_array_equal(shape_ops.swap_middle_axes(x), x.transpose(0, 2, 1, 3))


@settings(max_examples=8, deadline=None)
@given(m=dims, k=dims, n=dims, ta=st.booleans(), tb=st.booleans(), bias=st.booleans())
def test_matmul_t_reads_transposed_operands_without_copies(m, k, n, ta, tb, bias):
    a = _rand(1, k, m) if ta else _rand(1, m, k)
    b = _rand(2, n, k) if tb else _rand(2, k, n)
    c = _rand(3, n) if bias else None
    want = (a.T if ta else a) @ (b.T if tb else b) + (c if bias else 0)
    got = shape_ops.matmul_t(a, b, c, transpose_a=ta, transpose_b=tb)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(k))


@settings(max_examples=5, deadline=None)
@given(g=st.integers(1, 5), m=st.integers(1, 40), k=st.integers(1, 40), n=st.integers(1, 40),
       ta=st.booleans(), tb=st.booleans())
def test_batch_matmul_is_one_matmul_per_group(g, m, k, n, ta, tb):
    a = _rand(4, g, k, m) if ta else _rand(4, g, m, k)
    b = _rand(5, g, n, k) if tb else _rand(5, g, k, n)
    want = (a.transpose(0, 2, 1) if ta else a) @ (b.transpose(0, 2, 1) if tb else b)
    np.testing.assert_allclose(shape_ops.batch_matmul(a, b, transpose_a=ta, transpose_b=tb), want, rtol=1e-4,
                               atol=1e-4)


def test_masked_fill_keeps_where_the_mask_is_one_and_fills_elsewhere():
    x = _rand(6, 130, 64)
    keep = np.tril(np.ones((8, 8), np.float32)).reshape(-1)
    got = shape_ops.masked_fill(x, keep, float("-inf"))
    np.testing.assert_array_equal(got, np.where(keep > 0, x, -np.inf))
    np.testing.assert_array_equal(shape_ops.masked_fill(x, keep, 0.0), x * keep)


@settings(max_examples=6, deadline=None)
@given(r=st.integers(1, 300), c=st.integers(1, 600))
def test_column_and_row_sums(r, c):
    x = _rand(7, r, c)
    np.testing.assert_allclose(shape_ops.column_sum(x), x.sum(0), rtol=1e-4, atol=1e-4 * np.sqrt(r))
    np.testing.assert_allclose(shape_ops.row_sum(x), x.sum(1), rtol=1e-4, atol=1e-4 * np.sqrt(c))


def test_slice_concat_repeat_scale_multiply_are_exact():
    x = _rand(8, 70, 96)
    np.testing.assert_array_equal(shape_ops.slice_columns(x, 32, 64), x[:, 32:64])
    parts = [np.ascontiguousarray(x[:, i:i + 32]) for i in (0, 32, 64)]
    np.testing.assert_array_equal(shape_ops.concat_columns(*parts), x)
    np.testing.assert_array_equal(shape_ops.repeat_rows(x, 3), np.stack([x] * 3))
    np.testing.assert_array_equal(shape_ops.scale(x, 0.25), x * 0.25)
    np.testing.assert_array_equal(shape_ops.multiply(x, x), x * x)

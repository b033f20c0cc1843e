"""Kernels in the style of neuronxcc.nki ("beta 1") using the names AWS's tutorials and reference kernels
use (tests/nki_kernels/beta1_names.py, scan.py) run unchanged and match NumPy."""
import numpy as np

from nki_kernels import beta1_names, scan


def _recurrence(a, b):
    h, carry = np.zeros_like(a), np.zeros(a.shape[0], np.float32)
    for t in range(a.shape[1]):
        carry = a[:, t] * carry + b[:, t]
        h[:, t] = carry
    return h


def test_linear_recurrence_by_tensor_tensor_scan_in_both_call_styles():
    rng = np.random.default_rng(0)
    a = rng.uniform(0.5, 1.0, (128, 1024)).astype(np.float32)
    b = rng.normal(size=(128, 1024)).astype(np.float32)
    expected = _recurrence(a, b)
    np.testing.assert_allclose(scan.linear_scan_functional(a, b), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(scan.linear_scan_destination(a, b), expected, rtol=1e-5, atol=1e-5)


def test_spmd_dim_over_two_cores_covers_every_tile():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(512, 1024)).astype(np.float32), rng.normal(size=(512, 1024)).astype(np.float32)
    np.testing.assert_array_equal(beta1_names.add_two_cores(a, b), a + b)


def test_tensor_scalar_reduce_gives_the_row_max_in_the_same_instruction():
    x = np.random.default_rng(2).normal(size=(128, 700)).astype(np.float32)
    row_max, row_sum = beta1_names.row_softmax_stats(x)
    np.testing.assert_array_equal(row_max[:, 0], x.max(axis=1))
    np.testing.assert_allclose(row_sum[:, 0], np.exp(x - x.max(axis=1, keepdims=True)).sum(axis=1), rtol=1e-5)


def test_tensor_partition_reduce_sums_across_partitions():
    x = np.random.default_rng(3).normal(size=(128, 96)).astype(np.float32)
    np.testing.assert_allclose(beta1_names.column_sums(x), x.sum(axis=0, keepdims=True), rtol=1e-5, atol=1e-5)


def test_loop_reduce_keeps_a_running_max_over_block_tiles():
    x = np.random.default_rng(4).normal(size=(512, 256)).astype(np.float32)
    np.testing.assert_array_equal(beta1_names.running_max_of_blocks(x), x.reshape(4, 128, 256).max(axis=0))


def test_floor_is_exact_for_negative_values_and_shared_constant_is_loadable():
    x = (np.random.default_rng(5).normal(size=(128, 128)) * 3).astype(np.float32)
    floors, transposed = beta1_names.floor_and_identity(x)
    np.testing.assert_array_equal(floors, np.floor(x).astype(np.int32))
    np.testing.assert_array_equal(transposed, x.T)


def test_zeros_of_a_block_tensor_fills_every_block():
    x = np.random.default_rng(6).normal(size=(384, 64)).astype(np.float32)
    out = beta1_names.zeros_block_tensor_then_fill(x)
    np.testing.assert_array_equal(out[:128], x[:128])
    np.testing.assert_array_equal(out[128:], 0)


def test_dropout_is_seeded_and_deterministic():
    x = np.random.default_rng(7).normal(size=(128, 512)).astype(np.float32) + 10.0   # no zeros
    first = beta1_names.dropout_rows(x, np.array([[7]], np.int32))
    again = beta1_names.dropout_rows(x, np.array([[7]], np.int32))
    other = beta1_names.dropout_rows(x, np.array([[8]], np.int32))
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    dropped = first == 0
    assert 0.45 < dropped.mean() < 0.55                   # rate 0.5 over 65536 elements
    np.testing.assert_array_equal(first[~dropped], x[~dropped])   # no rescaling

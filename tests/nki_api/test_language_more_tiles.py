"""NKI 0.7's further nki.language reductions, normalisation, gathers, views, predicates and directives
(language_more.py), against NumPy with the fast paths on and off: all, var, rms_norm, gather_flattened,
expand_dims, is_hbm / is_sbuf / is_psum / is_on_chip, nl.prelu in nisa.activate2, nl.no_reorder."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.nki.errors import NKIError

from nki_isa_helpers import run_both


def _reduce_kernel(fn, **kwargs):
    @nki.jit
    def reduce(x):
        out = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=fn(nl.load(x), axis=1, dtype=nl.float32, keepdims=True, **kwargs))
        return out

    return reduce


@settings(max_examples=8, deadline=None)
@given(rows=st.sampled_from([1, 7, 128]), cols=st.integers(1, 96), seed=st.integers(0, 2**16),
       zeros=st.floats(0, 1))
def test_all_is_one_where_every_element_of_the_row_is_nonzero(rows, cols, seed, zeros):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, cols)).astype(np.float32) * (rng.random((rows, cols)) >= zeros / 4)
    out = run_both(_reduce_kernel(nl.all), x).outputs
    np.testing.assert_array_equal(out[:, 0], np.all(x != 0, axis=1).astype(np.float32))


@settings(max_examples=8, deadline=None)
@given(rows=st.sampled_from([1, 32, 128]), cols=st.integers(1, 300), seed=st.integers(0, 2**16),
       offset=st.floats(-100, 100))
def test_var_is_numpy_s_population_variance(rows, cols, seed, offset):
    x = (np.random.default_rng(seed).normal(size=(rows, cols)) + offset).astype(np.float32)
    out = run_both(_reduce_kernel(nl.var), x).outputs
    np.testing.assert_allclose(out[:, 0], np.var(x.astype(np.float64), axis=1), rtol=1e-4, atol=1e-4)


def test_all_and_var_without_keepdims_drop_the_axis():
    @nki.jit
    def kernel(x):
        out = nl.ndarray((x.shape[0], 2), dtype=nl.float32, buffer=nl.shared_hbm)
        tile = nl.load(x)
        both = nl.ndarray((x.shape[0], 2), dtype=nl.float32, buffer=nl.sbuf)
        every, spread = nl.all(tile, axis=1), nl.var(tile, axis=1)
        assert every.shape == (x.shape[0],) and spread.shape == (x.shape[0],)
        assert every.dtype == nl.bool_
        both[:, 0:1] = nl.copy(every, dtype=nl.float32)
        both[:, 1:2] = nl.copy(spread, dtype=nl.float32)
        nl.store(out, value=both)
        return out

    x = np.arange(1, 33, dtype=np.float32).reshape(4, 8)
    out = nki.run(kernel, x).outputs
    np.testing.assert_array_equal(out[:, 0], 1.0)
    np.testing.assert_allclose(out[:, 1], np.var(x, axis=1), rtol=1e-6)


def _rms_norm_kernel(n=None, epsilon=1e-6):
    @nki.jit
    def rms(x, w):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.rms_norm(nl.load(x), nl.load(w), axis=1, n=n or x.shape[1], epsilon=epsilon))
        return out

    return rms


@settings(max_examples=8, deadline=None)
@given(rows=st.sampled_from([1, 64, 128]), cols=st.integers(1, 512), seed=st.integers(0, 2**16))
def test_rms_norm_is_x_over_its_root_mean_square_times_w(rows, cols, seed):
    rng = np.random.default_rng(seed)
    x, w = rng.normal(size=(rows, cols)).astype(np.float32), rng.normal(size=(rows, cols)).astype(np.float32)
    out = run_both(_rms_norm_kernel(), x, w).outputs
    expect = x / np.sqrt(np.mean(x.astype(np.float64) ** 2, axis=1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(out, expect, rtol=1e-4, atol=1e-5)


def test_rms_norm_of_aws_example_and_its_instructions():
    x, w = np.full((128, 512), 2.0, np.float32), np.ones((128, 512), np.float32)
    run = run_both(_rms_norm_kernel(), x, w)
    np.testing.assert_allclose(run.outputs, 1.0, rtol=1e-5)        # 2 / sqrt(4 + eps)
    compute = [(r.engine, r.opcode) for r in (run.timeline[i] for i in range(len(run.timeline)))
               if not r.engine.startswith("dma")]
    assert compute == [("act", "activation"), ("dve", "tensor_reduce"), ("dve", "tensor_scalar"),
                       ("act", "activation"), ("dve", "scalar_tensor_tensor")]


def test_rms_norm_refuses_a_weight_of_another_shape():
    with pytest.raises(NKIError, match="must have x's shape"):
        nki.run(_rms_norm_kernel(), np.ones((4, 8), np.float32), np.ones((4, 4), np.float32))


@settings(max_examples=8, deadline=None)
@given(rows=st.sampled_from([1, 16, 128]), a=st.integers(1, 8), b=st.integers(1, 8), k=st.integers(1, 40),
       seed=st.integers(0, 2**16))
def test_gather_flattened_takes_along_the_flattened_free_axes(rows, a, b, k, seed):
    rng = np.random.default_rng(seed)
    data = rng.normal(size=(rows, a, b)).astype(np.float32)
    indices = rng.integers(0, a * b, size=(rows, k)).astype(np.uint32)

    @nki.jit
    def kernel(data, indices):
        out = nl.ndarray(indices.shape, dtype=data.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.gather_flattened(nl.load(data), nl.load(indices)))
        return out

    out = run_both(kernel, data, indices).outputs
    np.testing.assert_array_equal(out, np.take_along_axis(data.reshape(rows, -1), indices.astype(np.int64), axis=1))


def test_gather_flattened_of_aws_page_example():
    data = np.array([[[1., 2.], [3., 4.]], [[5., 6.], [7., 8.]]], np.float32)
    indices = np.array([[[0, 1], [1, 3]], [[3, 3], [1, 0]]], np.uint32)

    @nki.jit
    def kernel(data, indices):
        out = nl.ndarray(indices.shape, dtype=data.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.gather_flattened(nl.load(data), nl.load(indices)))
        return out

    np.testing.assert_array_equal(nki.run(kernel, data, indices).outputs,
                                  [[[1., 2.], [2., 4.]], [[8., 8.], [6., 5.]]])


def test_expand_dims_adds_size_one_axes_after_the_last_only():
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape + (1, 1), dtype=x.dtype, buffer=nl.shared_hbm)
        tile = nl.load(x)
        assert nl.expand_dims(tile, 2).shape == x.shape + (1,)
        with pytest.raises(NKIError, match="only new axes after the last index"):
            nl.expand_dims(tile, 1)
        nl.store(out, value=nl.expand_dims(tile, [2, 3]))
        return out

    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    np.testing.assert_array_equal(nki.run(kernel, x).outputs, x[:, :, None, None])


def test_buffer_predicates_name_hbm_sbuf_and_psum():
    assert nl.is_hbm(nl.hbm) and nl.is_hbm(nl.shared_hbm) and nl.is_hbm(nl.private_hbm)
    assert nl.is_sbuf(nl.sbuf) and not nl.is_sbuf(nl.psum) and not nl.is_sbuf(nl.hbm)
    assert nl.is_psum(nl.psum) and not nl.is_psum(nl.sbuf)
    assert nl.is_on_chip(nl.sbuf) and nl.is_on_chip(nl.psum) and not nl.is_on_chip(nl.shared_hbm)

    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        tile = nl.load(x)
        assert nl.is_hbm(x) and nl.is_sbuf(tile) and nl.is_on_chip(tile) and not nl.is_psum(tile)
        nl.store(out, value=tile)
        return out

    nki.run(kernel, np.ones((4, 8), np.float32))
    with pytest.raises(NKIError, match="expected a buffer"):
        nl.is_sbuf(3)


def test_prelu_is_an_activate2_op_whose_negative_slope_is_relu_param():
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        result = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.activate2(dst=result, op=nl.prelu, data=nl.load(x), imm0=1.0, imm1=0.0, op0=nl.multiply,
                       op1=nl.add, relu_param=0.25)
        nl.store(out, value=result)
        return out

    x = np.linspace(-4, 4, 64, dtype=np.float32).reshape(4, 16)
    np.testing.assert_array_equal(run_both(kernel, x, target="trn3").outputs, np.where(x >= 0, x, 0.25 * x))
    with pytest.raises(NKIError, match="not a function to call"):
        nl.prelu(x)


def test_no_reorder_block_keeps_the_program_in_traced_order():
    def make(block):
        @nki.jit
        def kernel(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            if block:
                with nl.no_reorder():
                    nl.store(out, value=nl.exp(nl.load(x)))
            else:
                nl.store(out, value=nl.exp(nl.load(x)))
            return out
        return kernel

    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(4, 16)
    kept, free = nki.run(make(True), x), nki.run(make(False), x)
    assert kept.program.no_reorder and not free.program.no_reorder
    np.testing.assert_array_equal(kept.outputs, free.outputs)


def test_var_all_and_rms_norm_reduce_over_two_free_axes_of_a_3d_tile():
    @nki.jit
    def kernel(x, w):
        stats = nl.ndarray((x.shape[0], 2), dtype=nl.float32, buffer=nl.shared_hbm)
        normed = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        tile = nl.load(x)
        both = nl.ndarray((x.shape[0], 2), dtype=nl.float32, buffer=nl.sbuf)
        both[:, 0:1] = nl.var(tile, axis=(1, 2), dtype=nl.float32, keepdims=True).reshape((x.shape[0], 1))
        both[:, 1:2] = nl.all(tile, axis=[1, 2], dtype=nl.float32, keepdims=True).reshape((x.shape[0], 1))
        nl.store(stats, value=both)
        nl.store(normed, value=nl.rms_norm(tile, nl.load(w), axis=(1, 2), n=x.shape[1] * x.shape[2]))
        return stats, normed

    rng = np.random.default_rng(5)
    x, w = rng.normal(size=(8, 3, 5)).astype(np.float32), rng.normal(size=(8, 3, 5)).astype(np.float32)
    x[2, 1, 4] = 0.0                                                  # one row not all non-zero
    stats, normed = run_both(kernel, x, w).outputs
    rows = x.reshape(8, -1).astype(np.float64)
    np.testing.assert_allclose(stats[:, 0], rows.var(axis=1), rtol=1e-5)
    np.testing.assert_array_equal(stats[:, 1], np.all(rows != 0, axis=1))
    np.testing.assert_allclose(normed, x / np.sqrt((rows ** 2).mean(axis=1) + 1e-6)[:, None, None] * w,
                               rtol=1e-5, atol=1e-6)

"""MX operands as views (nisa.quantize_mx, nisa.nc_matmul_mx on Trn3): slices of 3-D tiles, scale
tiles whose padding partitions a kernel never loads, and quantize_mx's whole scale layout (the scales
on the first 4 partitions of each 32-partition quadrant, zero on the other 28); and the host's MX casts
(`neuron_dtypes.static_cast` packs four values a word and unpacks them)."""
import ml_dtypes
import numpy as np
from hypothesis import given, settings, strategies as st

import trnlab.nki as nki
import trnlab.nki.language as nl
from trnlab.hardware import mx
from trnlab.nki import neuron_dtypes as dt

import pytest

from trnlab.hardware import errors
from trnlab.hardware.errors import UninitializedReadError
from nki_kernels.mx_views import (matmul_with_dense_scales, quantize_partly_loaded_then_multiply, quantize_slab_by_slab,
                                  quantize_words_read_as_bf16, wide_mx_product)


def test_quantize_mx_of_3d_slices_matches_one_quantize_per_slab_and_zeroes_the_padding():
    x = np.random.default_rng(0).normal(size=(128, 3, 32)).astype(ml_dtypes.bfloat16)
    data, scales = quantize_slab_by_slab(x, nl.float8_e4m3fn_x4)
    quadrant_rows = mx.scale_partitions(128)
    padding = np.setdiff1d(np.arange(128), quadrant_rows)
    for s in range(3):
        words, dense = mx.quantize(x[:, s, :].astype(np.float32), nl.float8_e4m3fn_x4)
        assert data[:, s, :].view(np.uint32).tolist() == words.view(np.uint32).tolist()
        assert scales[quadrant_rows, s, :].tolist() == dense.tolist()
    assert np.all(scales[padding] == 0)


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**16))
def test_nc_matmul_mx_reads_only_the_scale_partitions_of_a_3d_scale_view(seed):
    rng = np.random.default_rng(seed)
    K, M, N = 128, 16, 32
    st_vals = rng.normal(size=(K, M, 4)).astype(ml_dtypes.float8_e4m3fn)
    mv_vals = rng.normal(size=(K, N, 4)).astype(ml_dtypes.float8_e5m2)
    st_dense = rng.integers(122, 132, size=(K // 8, M)).astype(np.uint8)      # group g on row g
    mv_dense = rng.integers(122, 132, size=(K // 8, N)).astype(np.uint8)
    out = matmul_with_dense_scales(mx.pack(st_vals, nl.float8_e4m3fn_x4), st_dense,
                                   mx.pack(mv_vals, nl.float8_e5m2_x4), mv_dense)
    a = st_vals.astype(np.float32) * np.repeat(np.exp2(st_dense - 127.0), 8, axis=0)[..., None]
    b = mv_vals.astype(np.float32) * np.repeat(np.exp2(mv_dense - 127.0), 8, axis=0)[..., None]
    bound = np.einsum("kmq,knq->mn", np.abs(a), np.abs(b)) * 1e-5     # fp32 sums in any order
    np.testing.assert_array_less(np.abs(out - np.einsum("kmq,knq->mn", a, b)), bound + 1e-30)


def test_garbage_goes_through_quantize_mx_and_nc_matmul_mx_by_group_and_column():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(128, 16)).astype(ml_dtypes.bfloat16)
    st_words, st_dense = mx.quantize(rng.normal(size=(128, 32)).astype(np.float32), nl.float8_e4m3fn_x4)
    st_scale = np.zeros((128, 8), np.uint8)
    st_scale[mx.scale_partitions(128)] = st_dense
    out = quantize_partly_loaded_then_multiply(x, st_words, st_scale, 2)      # the clean columns only
    mv_words, mv_dense = mx.quantize(x[:, 0:8].astype(np.float32), nl.float8_e4m3fn_x4)
    a = mx.dequantize(st_words, st_dense, nl.float8_e4m3fn_x4).reshape(128, 8, 4)
    b = mx.dequantize(mv_words, mv_dense, nl.float8_e4m3fn_x4).reshape(128, 2, 4)
    np.testing.assert_allclose(out, np.einsum("kmq,knq->mn", a, b), rtol=1e-5, atol=1e-5)
    with pytest.raises(UninitializedReadError, match="garbage"):           # columns 2..3 are garbage
        quantize_partly_loaded_then_multiply(x, st_words, st_scale, 4)


def test_quantize_mx_reads_an_fp32_tile_as_the_bf16_values_its_bytes_hold_at_the_bf16_rate():
    x = np.random.default_rng(6).normal(size=(128, 64)).astype(ml_dtypes.bfloat16)
    data, scales = quantize_words_read_as_bf16(x)
    words, dense = mx.quantize(x.astype(np.float32), nl.float8_e5m2_x4)
    assert data.view(np.uint32).tolist() == words.view(np.uint32).tolist()
    assert scales[mx.scale_partitions(128)].tolist() == dense.tolist()
    def quantize_ns(run):
        record = next(r for r in run.timeline if r.opcode == "quantize_mx")
        return record.end_ns - record.start_ns
    plain = nki.run(quantize_slab_by_slab, x.reshape(128, 1, 64), nl.float8_e5m2_x4)   # from a bf16 tile
    assert quantize_ns(nki.run(quantize_words_read_as_bf16, x)) == quantize_ns(plain)  # 64 values a partition


def _quantized(rng, columns):
    words, dense = mx.quantize(rng.normal(size=(128, 4 * columns)).astype(np.float32), nl.float8_e4m3fn_x4)
    scales = np.zeros((128, columns), np.uint8)
    scales[mx.scale_partitions(128)] = dense
    return words, scales, mx.dequantize(words, dense, nl.float8_e4m3fn_x4).reshape(128, columns, 4)


def test_nc_matmul_mx_moves_as_many_columns_as_a_psum_bank_holds_of_its_result_type():
    rng = np.random.default_rng(7)
    st_words, st_scales, a = _quantized(rng, 16)
    mv_words, mv_scales, b = _quantized(rng, 1024)
    out = wide_mx_product(st_words, st_scales, mv_words, mv_scales, nl.bfloat16)     # 1024 bf16: 2 KiB
    expected = np.einsum("kmq,knq->mn", a, b).astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_allclose(out, expected, rtol=1e-2, atol=1e-2)
    with pytest.raises(errors.HardwareError, match="PSUM bank"):                     # 4 KiB of fp32
        wide_mx_product(st_words, st_scales, mv_words, mv_scales, nl.float32)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**16), x4=st.sampled_from(["float8_e4m3fn_x4", "float8_e5m2_x4", "float4_e2m1fn_x4"]))
def test_static_cast_packs_four_values_a_word_and_unpacks_them(seed, x4):
    x4_dtype = getattr(nl, x4)
    element = mx.ELEMENT_OF[np.dtype(x4_dtype)]
    rng = np.random.default_rng(seed)
    values = rng.normal(size=(2, 3, 8)).astype(np.float32).astype(element).astype(np.float32)  # representable
    words = dt.static_cast(values, x4_dtype)
    assert words.shape == (2, 3, 2) and words.dtype == np.dtype(x4_dtype)
    np.testing.assert_array_equal(dt.static_cast(words, np.float32), values)
    if x4 != "float4_e2m1fn_x4":                                               # FP4 is no NKI dtype of its own
        assert dt.static_cast(words, element).dtype == element                 # unpacked to the element type
    first = mx.unpack(words[..., :1], x4_dtype)[..., 0, :]                      # value q of word 0 ...
    np.testing.assert_array_equal(first, values[..., :4])                       # ... is value q of the row

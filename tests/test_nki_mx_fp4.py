"""MXFP4 on NeuronCore-v4: OCP E2M1 values packed four to a 16-bit float4_e2m1fn_x4 word, one E8M0
scale per 8 partitions x 4 values; nc_matmul_mx multiplies FP4 (alone or with FP8) at the MXFP8 rate;
quantize_mx produces MXFP8 only, so FP4 data is quantized on the host (OCP sample conversion)."""
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import trnlab.nki as nki
import trnlab.nki.language as nl
from trnlab.hardware import cost, mx

from nki_kernels.mx_matmul import bytes_as_packed_fp4, fp4_bytes_matmul, mx_matmul

FP4 = nl.float4_e2m1fn_x4
# OCP MX v1.0, E2M1: codes 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32)


def _values_of_words(words):
    """float32 [P, F, 4] of FP4 words by the OCP table (independent of mx.unpack)."""
    w = np.ascontiguousarray(words).view(np.uint16).astype(np.int64)
    return E2M1[np.stack([(w >> (4 * q)) & 0xF for q in range(4)], axis=-1)]


def _representable(rng, P, F):
    """(words [P, F/4], scales [P/8, F/4]) whose dequantized values quantize back to themselves:
    every group holds one value of exponent emax (4 or 6 in magnitude), as AWS's tutorial generates."""
    codes = rng.integers(0, 16, size=(P, F)).astype(np.uint16)
    for gp in range(P // 8):
        for gf in range(F // 4):
            codes[8 * gp + rng.integers(8), 4 * gf + rng.integers(4)] = rng.choice([6, 7, 14, 15])
    c = codes.reshape(P, F // 4, 4)
    words = (c[..., 0] | c[..., 1] << 4 | c[..., 2] << 8 | c[..., 3] << 12).astype(np.uint16).view(FP4)
    scales = rng.integers(110, 140, size=(P // 8, F // 4)).astype(np.uint8)
    return words, scales


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_fp4_pack_of_unpack_gives_back_every_16_bit_word(seed):
    words = np.random.default_rng(seed).integers(0, 2**16, size=(8, 64)).astype(np.uint16).view(FP4)
    values = mx.unpack(words, FP4)
    np.testing.assert_array_equal(values, _values_of_words(words))      # nibble q holds value q
    np.testing.assert_array_equal(mx.pack(values, FP4).view(np.uint16), words.view(np.uint16))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), groups=st.sampled_from([(1, 1), (2, 4), (16, 8)]))
def test_fp4_quantize_of_dequantize_is_exact_on_representable_data(seed, groups):
    P, F = 8 * groups[0], 16 * groups[1]
    words, scales = _representable(np.random.default_rng(seed), P, F)
    x = mx.dequantize(words, scales, FP4)                                # [P, 4 * F/4]
    np.testing.assert_array_equal(x, (_values_of_words(words) * np.exp2(
        np.repeat(scales.astype(np.float32) - 127, 8, axis=0))[..., None]).reshape(P, F))
    again, again_scales = mx.quantize(x, FP4)
    np.testing.assert_array_equal(again_scales, scales)
    np.testing.assert_array_equal(again.view(np.uint16), words.view(np.uint16))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), magnitude=st.integers(-20, 20))
def test_fp4_quantize_rounds_to_the_nearest_e2m1_step_or_saturates_at_six(seed, magnitude):
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(16, 32)) * 2.0 ** magnitude).astype(np.float32)
    words, scales = mx.quantize(x, FP4)
    amax = np.abs(x).reshape(2, 8, 8, 4).max(axis=(1, 3))
    # OCP sample conversion: shared exponent = floor(log2 amax) - emax(E2M1) = floor(log2 amax) - 2
    np.testing.assert_array_equal(scales.astype(int) - 127, np.floor(np.log2(amax)).astype(int) - 2)
    X = np.repeat(np.repeat(np.exp2(scales.astype(np.float64) - 127), 8, axis=0), 4, axis=1)
    v = np.abs(x) / X                                                    # in [0, 8)
    back = mx.dequantize(words, scales, FP4)
    step = np.where(v < 2, 0.5, np.where(v < 4, 1.0, 2.0))
    inside = v <= 6
    assert np.all(np.abs(back - x)[inside] <= (step / 2 * X)[inside])
    np.testing.assert_array_equal(back[~inside], (np.sign(x) * 6 * X)[~inside])


def test_fp4_host_quantization_matches_the_ocp_bytes_aws_keeps_on_the_host():
    x = np.random.default_rng(4).normal(size=(32, 16)).astype(np.float32)
    words, _ = mx.quantize(x, FP4)
    raw = mx.pack_fp4_bytes(words)                                       # [32, 8] uint8
    codes = np.stack([raw & 0xF, raw >> 4], axis=-1).reshape(32, 16)     # first value in the low nibble
    np.testing.assert_array_equal(E2M1[codes], _values_of_words(words).reshape(32, 16))


def test_ap_dtype_reads_uint8_bytes_as_packed_fp4_words():
    words, _ = _representable(np.random.default_rng(5), 128, 64)       # [128, 16] words
    out = bytes_as_packed_fp4(mx.pack_fp4_bytes(words))
    np.testing.assert_array_equal(out.view(np.uint16), words.view(np.uint16))


def test_ap_dtype_of_another_size_needs_rows_of_whole_elements():
    with pytest.raises(nki.NKIError, match="whole 2-byte elements"):
        bytes_as_packed_fp4(np.zeros((32, 3), np.uint8))


@pytest.mark.parametrize("moving_dtype", ["fp4", "fp8"])
def test_nc_matmul_mx_multiplies_fp4_alone_or_with_fp8(moving_dtype):
    rng = np.random.default_rng(6)
    K, M, N = 128, 64, 128
    st_words, st_scales = _representable(rng, K, 4 * M)
    if moving_dtype == "fp4":
        mv_words, mv_scales = _representable(rng, K, 4 * N)
        b = _values_of_words(mv_words)
    else:
        mv_vals = rng.normal(size=(K, N, 4)).astype(ml_dtypes.float8_e5m2)
        mv_words, mv_scales = mx.pack(mv_vals, nl.float8_e5m2_x4), rng.integers(120, 134, size=(K // 8, N)).astype(np.uint8)
        b = mv_vals.astype(np.float32)
    out = fp4_bytes_matmul(mx.pack_fp4_bytes(st_words), _scatter(st_scales, K), mv_words, _scatter(mv_scales, K))
    a = _values_of_words(st_words) * np.exp2(np.repeat(st_scales.astype(np.float32) - 127, 8, axis=0))[..., None]
    b = b * np.exp2(np.repeat(mv_scales.astype(np.float32) - 127, 8, axis=0))[..., None]
    exact = np.einsum("kmq,knq->mn", a.astype(np.float64), b.astype(np.float64))
    # the PSUM result is bf16 (8 bits of mantissa): within half a bf16 ulp of the exact sum
    np.testing.assert_allclose(out, exact, rtol=2.0 ** -8, atol=1e-30)


def _scatter(scales, P):
    """Scales [P/8, F] into nc_matmul_mx's layout: group g on partition 32 (g // 4) + g % 4."""
    tile = np.zeros((P, scales.shape[1]), np.uint8)
    tile[mx.scale_partitions(P)] = scales
    return tile


def test_fp4_matmul_costs_one_pass_like_fp8():
    K, M, N = 128, 128, 512
    sd = nki.ShapeDtype
    busy = {}
    for dt in (nl.float8_e5m2_x4, FP4):
        run = nki.run(mx_matmul, sd((K, M), dt), sd((K, M), nl.uint8), sd((K, N), dt), sd((K, N), nl.uint8),
                      timing_only=True)
        (rec,) = [r for r in run.core.timeline.records if r[1] == "nc_matmul_mx"]
        busy[dt] = rec[3] - rec[2]
        assert rec[5] == 2.0 * 4 * K * M * N                             # 4 values per packed element
    cycles, _ = cost.matmul_cycles(run.core.spec, K, M, N)
    assert busy[FP4] == busy[nl.float8_e5m2_x4] == pytest.approx(cycles * run.core._pe_ns)


def test_quantize_mx_refuses_fp4_naming_the_mxfp8_only_rule():
    from nki_kernels.mx_matmul import quantize_to_mx
    with pytest.raises(mx.MXError, match="MXFP8 only.*on the host"):
        quantize_to_mx(np.zeros((32, 16), ml_dtypes.bfloat16), FP4)

"""MX FP8 on NeuronCore-v4 (nisa.quantize_mx, nisa.nc_matmul_mx), per AWS's API pages: groups of
8 partitions x 4 values share one E8M0 scale, the block scale is the OCP sample conversion's (as AWS's
NKI Library's hardware tests of the instruction expect; see trnlab/hardware/mx.py), the matmul contracts 4 values per packed element and costs one pass of N columns."""
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import trnlab.nki as nki
import trnlab.nki.language as nl
from trnlab.hardware import dtypes, mx

from nki_kernels.mx_matmul import mx_matmul, quantize_and_multiply, quantize_to_mx


def _groups_max(x, P, F):
    return np.abs(x.astype(np.float32)).reshape(P // 8, 8, F // 4, 4).max(axis=(1, 3))


def _dequantize(data, scales, P, x4_dtype):
    values = mx.unpack(data, x4_dtype)                                    # [P, F/4, 4]
    return (values * mx.scale_factors(scales, P, data.shape[1])[..., None]).reshape(P, -1)


@pytest.mark.parametrize("x4_dtype, emax", [(nl.float8_e5m2_x4, 15), (nl.float8_e4m3fn_x4, 8)])
def test_quantize_mx_scale_is_the_ocp_block_scale(x4_dtype, emax):
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(32, 64)) * 10).astype(ml_dtypes.bfloat16)
    data, scales = quantize_to_mx(x, x4_dtype)
    amax = _groups_max(x, 32, 64)
    ocp = np.floor(np.log2(amax)).astype(int) - emax                    # OCP's shared exponent
    np.testing.assert_array_equal(scales.astype(int) - 127, ocp)
    assert scales.shape == (4, 16)                                        # P <= 32: [P/8, F/4]


def test_quantize_mx_round_trips_within_fp8_precision():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(128, 256)).astype(ml_dtypes.bfloat16)
    data, scales = quantize_to_mx(x, nl.float8_e4m3fn_x4)
    back = _dequantize(data, scales, 128, nl.float8_e4m3fn_x4)
    amax = np.repeat(np.repeat(_groups_max(x, 128, 256), 8, axis=0), 4, axis=1)
    # e4m3 keeps 3 mantissa bits: error <= 2^-4 of the group's max, and a group's largest values above
    # 1.75 * 2^floor(log2 amax) saturate to it (at most 1 - 1.75/2 = 1/8 of amax)
    assert np.all(np.abs(back - x.astype(np.float32)) <= amax * 2.0 ** -3)


def test_quantize_mx_saturates_a_group_maximum_above_the_types_largest_normal():
    """amax 1.9 in e4m3fn: OCP exponent floor(log2 1.9) - 8 = -8 (E8M0 byte 119); 1.9 * 2^8 = 486.4 is
    past e4m3fn's 448 and saturates there (the page's doubled scale would give byte 120 and 240)."""
    x = np.zeros((32, 4), np.float32)
    x[0, 0], x[1, 1] = 1.9, 0.5
    data, scales = quantize_to_mx(x.astype(ml_dtypes.bfloat16), nl.float8_e4m3fn_x4)
    assert scales[0, 0] == 119
    values = mx.unpack(data, nl.float8_e4m3fn_x4)                         # [32, 1, 4]
    assert values[0, 0, 0] == 448.0 and values[1, 0, 1] == 128.0


def test_scales_of_a_128_partition_tile_sit_in_the_first_rows_of_each_quadrant():
    assert list(mx.scale_partitions(128)) == [0, 1, 2, 3, 32, 33, 34, 35, 64, 65, 66, 67, 96, 97, 98, 99]
    x = np.random.default_rng(2).normal(size=(128, 16)).astype(ml_dtypes.bfloat16)
    _, scales = quantize_to_mx(x, nl.float8_e5m2_x4)
    others = np.setdiff1d(np.arange(128), mx.scale_partitions(128))
    assert scales.shape == (128, 4) and np.all(scales[others] == 0)      # quantize_mx zeroes them


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**16), scale_shift=st.integers(-4, 4))
def test_nc_matmul_mx_applies_both_scales_to_each_group(seed, scale_shift):
    rng = np.random.default_rng(seed)
    K, M, N = 64, 32, 64
    st_vals = rng.normal(size=(K, M, 4)).astype(ml_dtypes.float8_e5m2)
    mv_vals = rng.normal(size=(K, N, 4)).astype(ml_dtypes.float8_e5m2)
    st_scale = rng.integers(120, 134, size=(K, M)).astype(np.uint8)       # groups on rows 0..3, 32..35
    mv_scale = (rng.integers(120, 134, size=(K, N)) + scale_shift).astype(np.uint8)
    st_x4, mv_x4 = mx.pack(st_vals, nl.float8_e5m2_x4), mx.pack(mv_vals, nl.float8_e5m2_x4)
    out = mx_matmul(st_x4, st_scale, mv_x4, mv_scale)
    a = st_vals.astype(np.float32) * mx.scale_factors(st_scale, K, M)[..., None]
    b = mv_vals.astype(np.float32) * mx.scale_factors(mv_scale, K, N)[..., None]
    np.testing.assert_allclose(out, np.einsum("kmq,knq->mn", a, b), rtol=1e-5, atol=1e-30)


def test_quantize_then_multiply_approximates_the_bf16_product():
    rng = np.random.default_rng(3)
    a = rng.normal(size=(128, 4 * 128)).astype(ml_dtypes.bfloat16)
    b = rng.normal(size=(128, 4 * 256)).astype(ml_dtypes.bfloat16)
    out = quantize_and_multiply(a, b)
    ref = np.einsum("kmq,knq->mn", a.astype(np.float32).reshape(128, 128, 4), b.astype(np.float32).reshape(128, 256, 4))
    assert np.max(np.abs(out - ref)) / np.max(np.abs(ref)) < 0.06


def test_nc_matmul_mx_costs_one_pass_and_does_four_times_the_work():
    K, M, N = 128, 128, 512
    sd = lambda shape, dt: nki.ShapeDtype(shape, dt)  # noqa: E731
    run = nki.run(mx_matmul, sd((K, M), nl.float8_e5m2_x4), sd((K, M), nl.uint8),
                  sd((K, N), nl.float8_e5m2_x4), sd((K, N), nl.uint8), timing_only=True)
    (rec,) = [r for r in run.core.timeline.records if r[1] == "nc_matmul_mx"]
    
    assert rec[5] == 2.0 * 4 * K * M * N
    from trnlab.hardware import cost
    busy, _ = cost.matmul_cycles(run.core.spec, K, M, N)
    assert rec[3] - rec[2] == pytest.approx(busy * run.core._pe_ns)


def test_mx_rules_are_named():
    x = np.zeros((32, 16), ml_dtypes.bfloat16)
    with pytest.raises(mx.MXError, match="NeuronCore-v4"):
        nki.run(quantize_to_mx, x, nl.float8_e5m2_x4, target="trn2")
    with pytest.raises(mx.MXError, match="MXFP8 only"):
        quantize_to_mx(x, nl.float4_e2m1fn_x4)
    with pytest.raises(mx.MXError, match="multiple of 32"):
        quantize_to_mx(np.zeros((16, 16), ml_dtypes.bfloat16), nl.float8_e5m2_x4)
    assert dtypes.float8_e5m2_x4.itemsize == 4 and dtypes.float4_e2m1fn_x4.itemsize == 2


def test_an_ap_pattern_that_is_a_box_moves_like_the_plain_tensor():
    from nki_kernels.mx_matmul import copy_through_pattern
    sd = nki.ShapeDtype((128, 2048), "uint32")
    plain = nki.run(copy_through_pattern, sd, False, timing_only=True).latency_ns
    pattern = nki.run(copy_through_pattern, sd, True, timing_only=True).latency_ns
    assert pattern == pytest.approx(plain)          # contiguous rows, not one descriptor per element


def test_ap_dtype_reads_uint32_words_as_packed_mx_data():
    from nki_kernels.mx_matmul import copy_through_pattern
    words = np.arange(128 * 16, dtype=np.uint32).reshape(128, 16)
    out = copy_through_pattern(words, True, nl.float8_e5m2_x4)
    np.testing.assert_array_equal(out.view(np.uint32).reshape(128, 16), words)


def test_reshape_of_an_on_chip_tile_regroups_its_free_axes():
    from nki_kernels.mx_matmul import regroup_free_axes
    x = np.random.default_rng(6).normal(size=(64, 32, 4)).astype(np.float32)
    np.testing.assert_array_equal(regroup_free_axes(x), x.reshape(64, 128))


def test_quantize_mx_streams_four_source_values_per_partition_per_cycle():
    # [ARCH-v4] "MX data-type Quantization": "four input elements per partition, per cycle"
    from trnlab.hardware import cost, presets
    spec = presets.core_spec("trn3")
    src = cost.Operand("sbuf", (128, 2048), "bfloat16", 128, 2048, 128 * 2048 * 2)
    dst = cost.Operand("sbuf", (128, 512), "float8_e5m2_x4", 128, 512, 128 * 512 * 4)
    c = cost.cost(cost.Instruction("quantize_mx", "dve", (src,), (dst,)), spec)
    assert c.cycles == spec.vector_static_cycles + 2048 // 4


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), x4_dtype=st.sampled_from([nl.float8_e5m2_x4, nl.float8_e4m3fn_x4]))
def test_host_quantize_of_dequantize_is_exact_on_representable_fp8_data(seed, x4_dtype):
    """Data whose every group holds one value of exponent emax quantizes back to the same words and
    scales."""
    element = mx.ELEMENT_OF[np.dtype(x4_dtype)]
    emax = mx.EMAX[element]
    rng = np.random.default_rng(seed)
    P, F = 16, 32
    values = (rng.normal(size=(P, F)) * 2.0 ** (emax - 3)).astype(np.float32).astype(element).astype(np.float32)
    values = np.clip(values, -2.0 ** emax, 2.0 ** emax)       # below the group's largest value
    for gp in range(P // 8):
        for gf in range(F // 4):
            values[8 * gp + rng.integers(8), 4 * gf + rng.integers(4)] = rng.choice([-1, 1]) * 1.5 * 2.0 ** emax
    words = mx.pack(values.reshape(P, F // 4, 4), x4_dtype)
    scales = rng.integers(110, 140, size=(P // 8, F // 4)).astype(np.uint8)
    x = mx.dequantize(words, scales, x4_dtype)
    again, again_scales = mx.quantize(x, x4_dtype)
    np.testing.assert_array_equal(again_scales, scales)
    np.testing.assert_array_equal(again.view(np.uint32), words.view(np.uint32))

"""NKI 0.7's further nki.language element-wise math and bitwise / logical operators (language_more.py),
each against NumPy with the fast paths on and off, the engine each lowers to, and the rules' errors:
abs_max, abs_min, tan, arctan, ceil, trunc, invert, left_shift, right_shift, logical_not, logical_xor."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
import trnlab.nki.language as nl
from trnlab.hardware.errors import GenerationError
from trnlab.nki.errors import NKIError

from nki_isa_helpers import compute_records, run_both


def _unary_kernel(fn):
    @nki.jit
    def unary(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=fn(nl.load(x)))
        return out

    return unary


def _binary_kernel(fn, scalar=None, scalar_first=False):
    @nki.jit
    def binary(x, y):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        a, b = nl.load(x), nl.load(y)
        if scalar is None:
            result = fn(a, b)
        else:
            result = fn(scalar, a) if scalar_first else fn(a, scalar)
        nl.store(out, value=result)
        return out

    return binary


FLOATS = st.floats(-50, 50, width=32, allow_subnormal=False)


def _tile(draw_list, shape=(4, 16)):
    return np.array(draw_list, dtype=np.float32).reshape(shape)


@settings(max_examples=8, deadline=None)
@given(values=st.lists(FLOATS, min_size=64, max_size=64))
def test_ceil_and_trunc_round_up_and_toward_zero_as_numpy(values):
    x = _tile(values)
    x[0, :4] = [2.5, -2.5, 3.0, -0.0]                     # halves, integers, signed zero
    np.testing.assert_array_equal(run_both(_unary_kernel(nl.ceil), x).outputs, np.ceil(x))
    np.testing.assert_array_equal(run_both(_unary_kernel(nl.trunc), x).outputs, np.trunc(x))


@settings(max_examples=6, deadline=None)
@given(values=st.lists(st.floats(-1.375, 1.375, width=32), min_size=64, max_size=64))
def test_tan_and_arctan_are_numpy_s_within_fp32(values):
    x = _tile(values)
    np.testing.assert_allclose(run_both(_unary_kernel(nl.tan), x).outputs, np.tan(x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(run_both(_unary_kernel(nl.arctan), x).outputs, np.arctan(x), rtol=1e-5, atol=1e-6)


def test_tan_and_arctan_are_scalar_engine_activations_and_ceil_runs_on_the_vector_engine():
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(4, 16)
    for fn in (nl.tan, nl.arctan):
        assert [(e, op) for e, op, _ in compute_records(nki.run(_unary_kernel(fn), x))] == [("act", "activation")]
    ceil_ops = [(e, op) for e, op, _ in compute_records(nki.run(_unary_kernel(nl.ceil), x))]
    assert ceil_ops == [("dve", "tensor_scalar"), ("dve", "tensor_tensor")]


@settings(max_examples=8, deadline=None)
@given(a=st.lists(FLOATS, min_size=64, max_size=64), b=st.lists(FLOATS, min_size=64, max_size=64),
       ties=st.booleans())
def test_abs_max_and_abs_min_keep_the_sign_of_the_larger_or_smaller_magnitude(a, b, ties):
    x, y = _tile(a), _tile(b)
    if ties:
        y = -x                                           # |x| == |y|: y wins
    expect_max = np.where(np.abs(x) > np.abs(y), x, y)
    expect_min = np.where(np.abs(x) < np.abs(y), x, y)
    np.testing.assert_array_equal(run_both(_binary_kernel(nl.abs_max), x, y, target="trn3").outputs, expect_max)
    np.testing.assert_array_equal(run_both(_binary_kernel(nl.abs_min), x, y, target="trn3").outputs, expect_min)


def test_abs_max_with_a_number_keeps_operand_order_for_ties():
    x = np.full((4, 16), 1.0, np.float32)
    tile_first = run_both(_binary_kernel(nl.abs_max, scalar=-1.0), x, x, target="trn3").outputs
    number_first = run_both(_binary_kernel(nl.abs_max, scalar=-1.0, scalar_first=True), x, x, target="trn3").outputs
    np.testing.assert_array_equal(tile_first, np.full_like(x, -1.0))     # |1| == |-1|: y = -1
    np.testing.assert_array_equal(number_first, x)                       # y is the tile: 1


def test_abs_max_needs_neuroncore_v4():
    x = np.ones((4, 16), np.float32)
    with pytest.raises(GenerationError, match="abs_max needs NeuronCore-v4"):
        nki.run(_binary_kernel(nl.abs_max), x, x, target="trn2")


@settings(max_examples=8, deadline=None)
@given(a=st.lists(st.integers(-2**20, 2**20), min_size=64, max_size=64),
       b=st.lists(st.integers(0, 8), min_size=64, max_size=64))
def test_shifts_and_invert_work_on_bit_patterns_as_numpy(a, b):
    x, s = np.array(a, np.int32).reshape(4, 16), np.array(b, np.int32).reshape(4, 16)
    np.testing.assert_array_equal(run_both(_binary_kernel(nl.left_shift), x, s).outputs, np.left_shift(x, s))
    np.testing.assert_array_equal(run_both(_binary_kernel(nl.right_shift), x, s).outputs, np.right_shift(x, s))
    np.testing.assert_array_equal(run_both(_binary_kernel(nl.right_shift, scalar=3), x, s).outputs,
                                  np.right_shift(x, 3))
    np.testing.assert_array_equal(run_both(_unary_kernel(nl.invert), x).outputs, np.invert(x))


def test_invert_of_unsigned_flips_every_bit():
    x = np.array([0, 1, 2**32 - 1, 12345] * 16, np.uint32).reshape(4, 16)
    np.testing.assert_array_equal(run_both(_unary_kernel(nl.invert), x).outputs, np.invert(x))


def test_bitwise_operators_refuse_float_tiles():
    x = np.ones((4, 16), np.float32)
    with pytest.raises(NKIError, match="needs an integer tile"):
        nki.run(_unary_kernel(nl.invert), x)


@settings(max_examples=8, deadline=None)
@given(a=st.lists(st.sampled_from([0.0, 1.0, -2.5, 3.0]), min_size=64, max_size=64),
       b=st.lists(st.sampled_from([0.0, 1.0, -2.5, 3.0]), min_size=64, max_size=64))
def test_logical_not_and_logical_xor_give_zero_one_tiles(a, b):
    x, y = _tile(a), _tile(b)
    np.testing.assert_array_equal(run_both(_unary_kernel(nl.logical_not), x).outputs,
                                  np.logical_not(x).astype(np.float32))
    np.testing.assert_array_equal(run_both(_binary_kernel(nl.logical_xor), x, y).outputs,
                                  np.logical_xor(x, y).astype(np.float32))

"""NKI 0.7's register-accumulating instructions against NumPy references, both call styles, the fast
paths on and off, and their named errors: tensor_scalar_cumulative, exponential, activate2; and
nl.abs as an ALU operator (op0=nl.abs, as AWS's NKI Library writes an absolute max)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.hardware.errors import DtypeError, GenerationError, UnknownOpError

from nki_isa_helpers import compute_records, run_both


# -- tensor_scalar_cumulative ------------------------------------------------------------------------------
_CUMULATIVE = {"add": np.cumsum, "multiply": np.cumprod, "maximum": np.maximum.accumulate,
               "minimum": np.minimum.accumulate}


def _cumulative_kernel(op1, style, command="reset_reduce", imm1=None, dtype=None):
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        data = nl.load(x)
        if dtype is not None:
            cast = nl.ndarray(x.shape, dtype=dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=cast, src=data)
            data = cast
        if style == "destination":
            running = nl.ndarray(x.shape, dtype=data.dtype, buffer=nl.sbuf)
            nisa.tensor_scalar_cumulative(dst=running, src=data, op0=nl.multiply, op1=getattr(nl, op1),
                                          imm0=2.0, imm1=imm1, reduce_cmd=getattr(nisa.reduce_cmd, command))
        else:
            running = nisa.tensor_scalar_cumulative(data, nl.multiply, getattr(nl, op1), 2.0, imm1,
                                                    getattr(nisa.reduce_cmd, command))
        nl.store(out, value=running)
        return out

    return kernel


@settings(max_examples=10, deadline=None)
@given(op1=st.sampled_from(sorted(_CUMULATIVE)), cols=st.integers(1, 64), seed=st.integers(0, 2**16),
       style=st.sampled_from(["destination", "functional"]))
def test_tensor_scalar_cumulative_is_a_running_reduction_of_data_op0_imm0(op1, cols, seed, style):
    x = np.random.default_rng(seed).uniform(0.5, 1.5, size=(32, cols)).astype(np.float32)
    out = run_both(_cumulative_kernel(op1, style), x).outputs
    np.testing.assert_allclose(out, _CUMULATIVE[op1](x * 2.0, axis=1), rtol=1e-5)


def test_tensor_scalar_cumulative_load_reduce_starts_from_imm1():
    x = np.ones((8, 5), np.float32)
    out = run_both(_cumulative_kernel("add", "destination", "load_reduce", imm1=10.0), x).outputs
    np.testing.assert_array_equal(out, 10.0 + np.cumsum(x * 2.0, axis=1))


def test_tensor_scalar_cumulative_rules():
    with pytest.raises(DtypeError):                   # INT32 is not an input / output dtype
        nki.run(_cumulative_kernel("add", "destination", dtype=nl.int32), np.ones((8, 4), np.float32))

    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nisa.tensor_scalar_cumulative(nl.load(x), nl.add, nl.divide, 1.0))
        return out

    with pytest.raises(UnknownOpError):                # the reduction is add/subtract/multiply/max/min
        nki.run(kernel, np.ones((8, 4), np.float32))


# -- exponential (NeuronCore-v4) -----------------------------------------------------------------------------
def _softmax_parts_kernel(style):
    @nki.jit
    def kernel(x, row_max):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        sums = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
        total = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        if style == "destination":
            numerator = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.exponential(dst=numerator, src=nl.load(x), max_value=nl.load(row_max), reduce_res=total,
                             reduce_cmd=nisa.reduce_cmd.reset_reduce)
        else:
            numerator = nisa.exponential(nl.load(x), nl.load(row_max), total, nisa.reduce_cmd.reset_reduce)
        nl.store(out, value=numerator)
        nl.store(sums, value=total)
        return out, sums

    return kernel


@pytest.mark.parametrize("style", ["destination", "functional"])
def test_exponential_gives_a_softmax_numerator_and_its_row_sum(style):
    x = np.random.default_rng(6).normal(size=(128, 200)).astype(np.float32)
    row_max = x.max(axis=1, keepdims=True)
    run = run_both(_softmax_parts_kernel(style), x, row_max, target="trn3")
    numerator, sums = run.outputs
    np.testing.assert_allclose(numerator, np.exp(x - row_max), rtol=1e-6)
    np.testing.assert_allclose(sums[:, 0], np.exp(x - row_max).sum(axis=1), rtol=1e-5)
    assert compute_records(run)[0][:2] == ("dve", "exponential")


def test_exponential_is_neuroncore_v4_and_newer():
    with pytest.raises(GenerationError):
        nki.run(_softmax_parts_kernel("destination"), np.zeros((8, 8), np.float32), np.zeros((8, 1), np.float32),
                target="trn2")


# -- activate2 (NeuronCore-v4) --------------------------------------------------------------------------------
def _activate2_kernel(op0, op1, reduce_op=None, engine=None):
    @nki.jit
    def kernel(x, scale):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        reduced = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
        result = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        row = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        kwargs = {} if engine is None else {"engine": engine}
        nisa.activate2(dst=result, op=nl.exp, data=nl.load(x), imm0=nl.load(scale), imm1=0.5, op0=op0, op1=op1,
                       reduce_op=reduce_op, reduce_res=row if reduce_op is not None else None,
                       reduce_cmd=nisa.reduce_cmd.reset_reduce if reduce_op is not None else nisa.reduce_cmd.idle,
                       **kwargs)
        if reduce_op is None:
            nisa.memset(dst=row, value=0.0)
        nl.store(out, value=result)
        nl.store(reduced, value=row)
        return out, reduced

    return kernel


def test_activate2_scales_biases_activates_and_reduces_with_max_in_one_scalar_instruction():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(64, 48)).astype(np.float32)
    scale = rng.uniform(0.5, 2, size=(64, 1)).astype(np.float32)
    run = run_both(_activate2_kernel(nl.multiply, nl.subtract, reduce_op=nl.maximum), x, scale, target="trn3")
    out, reduced = run.outputs
    expected = np.exp(x * scale - 0.5)
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    np.testing.assert_allclose(reduced[:, 0], expected.max(axis=1), rtol=1e-6)
    assert compute_records(run)[0][:2] == ("act", "activate2")


def test_activate2_bypass_pair_and_gpsimd_engine():
    x = np.random.default_rng(8).normal(size=(16, 8)).astype(np.float32)
    run = run_both(_activate2_kernel(nl.bypass, nl.bypass, engine=nisa.gpsimd_engine), x, np.ones((16, 1),
                   np.float32), target="trn3")
    np.testing.assert_allclose(run.outputs[0], np.exp(x), rtol=1e-6)
    assert ("pool", "activate2") in [r[:2] for r in compute_records(run)]


def test_activate2_rules():
    args = (np.zeros((8, 8), np.float32), np.ones((8, 1), np.float32))
    with pytest.raises(GenerationError):
        nki.run(_activate2_kernel(nl.multiply, nl.add), *args, target="trn2")
    with pytest.raises(UnknownOpError):                 # not one of AWS's six (op0, op1) pairs
        nki.run(_activate2_kernel(nl.add, nl.add), *args, target="trn3")


# -- nl.abs as an ALU operator ---------------------------------------------------------------------------------
def test_nl_abs_as_op0_of_tensor_scalar_reduce_gives_the_absolute_max_as_aws_rmsnorm_quant_writes_it():
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        absmax = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
        magnitude = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        scales = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_reduce(dst=magnitude, data=nl.load(x), op0=nl.abs, operand0=0.0, reduce_op=nl.maximum,
                                  reduce_res=scales)
        nl.store(out, value=magnitude)
        nl.store(absmax, value=scales)
        return out, absmax

    x = np.random.default_rng(9).normal(size=(128, 64)).astype(np.float32)
    magnitude, absmax = run_both(kernel, x).outputs
    np.testing.assert_array_equal(magnitude, np.abs(x))
    np.testing.assert_array_equal(absmax[:, 0], np.abs(x).max(axis=1))


def test_nl_abs_as_op_of_tensor_scalar_and_tensor_tensor_takes_the_first_operand():
    @nki.jit
    def kernel(x, y):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        a = nisa.tensor_scalar(nl.load(x), nl.abs, 0.0, op1=nl.multiply, operand1=3.0)
        b = nisa.tensor_tensor(nl.load(x), nl.load(y), nl.abs)
        nl.store(out, value=nisa.tensor_tensor(a, b, nl.add))
        return out

    rng = np.random.default_rng(10)
    x, y = rng.normal(size=(2, 32, 16)).astype(np.float32)
    np.testing.assert_allclose(run_both(kernel, x, y).outputs, 4 * np.abs(x), rtol=1e-6)

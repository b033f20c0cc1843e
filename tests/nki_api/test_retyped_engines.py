"""A tile retyped by ``tile.view(dtype)`` (NKI 0.7: views "share the same underlying storage"; "Return a new view
of the tensor, reinterpret to a specified type") read and written by the element-wise engines and the Tensor engine
(trnlab/hardware/retype.py `typed`): tensor_tensor, tensor_scalar, activation, nc_matmul and its transpose see
the tile's bytes as the new type of the same element size — NumPy's ``.view`` — and write the bytes of what they
compute. Values against NumPy with the fast paths on and off, timing-only the same timeline, each operand costed
as the type it is read as, and a retype across element sizes still refused by name."""
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.hardware.errors import DtypeError

from nki_isa_helpers import hbm_copy as _out, run_both, sbuf_copy as _sbuf

RNG = np.random.default_rng(33)
BF16 = ml_dtypes.bfloat16


@nki.jit
def float_bit_tricks(x):
    """(|x| by clearing the sign bit of x's fp32 tile read as int32 (tensor_scalar), x + its own bits read back
    as fp32 (tensor_tensor, data2 retyped), exp of the words read as fp32 written into an int32 tile retyped to
    fp32 (activation))."""
    P, F = x.shape
    xs = _sbuf(x)                                                     # fp32 [P, F]
    bits = xs.view(nl.int32)
    cleared = nl.ndarray((P, F), dtype=nl.int32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=cleared, data=bits, op0=nl.bitwise_and, operand0=0x7FFFFFFF)
    words = nl.ndarray((P, F), dtype=nl.int32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=words, src=bits)                             # x's bits, held as int32
    doubled = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=doubled, data1=xs, data2=words.view(nl.float32), op=nl.add)
    exped = nl.ndarray((P, F), dtype=nl.int32, buffer=nl.sbuf)
    nisa.activation(dst=exped.view(nl.float32), op=nl.exp, data=words.view(nl.float32))
    return _out(cleared), _out(doubled), _out(exped)


@pytest.mark.parametrize("target", ["trn2", "trn3"])
def test_elementwise_engines_read_and_write_a_retyped_tile_as_its_bytes(target, records):
    x = RNG.normal(size=(32, 16)).astype(np.float32)
    run = run_both(float_bit_tricks, x, target=target)
    cleared, doubled, exped = run.outputs
    np.testing.assert_array_equal(cleared.view(np.float32), np.abs(x))
    np.testing.assert_array_equal(doubled, x + x)
    np.testing.assert_allclose(exped.view(np.float32), np.exp(x), rtol=1e-6)
    assert records(nki.run(float_bit_tricks, x, target=target, timing_only=True)) == records(run)


def _bit_transpose_and_broadcast(P: int, F: int, R: int):
    @nki.jit
    def kernel(words, row):
        """(words [P, F] uint32 transposed bit for bit by the Tensor engine, the words read as fp32;
        row [1, F] int32 broadcast to R partitions by a matmul with a ones stationary, read as fp32)."""
        w = _sbuf(words)
        flipped = nl.ndarray((F, P), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_transpose(dst=flipped, data=w.view(nl.float32))
        out_t = nl.ndarray((F, P), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=out_t.view(nl.float32), src=flipped)
        r = _sbuf(row)
        ones = nl.ndarray((1, R), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=ones, value=1.0)
        spread = nl.ndarray((R, F), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=spread, stationary=ones, moving=r.view(nl.float32), is_stationary_onezero=True)
        out_b = nl.ndarray((R, F), dtype=nl.int32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=out_b.view(nl.float32), src=spread)
        return _out(out_t), _out(out_b)

    return kernel


@settings(max_examples=6, deadline=None)
@given(P=st.integers(1, 128), F=st.integers(1, 128), R=st.integers(1, 128), seed=st.integers(0, 2**16))
def test_the_tensor_engine_reads_a_retyped_tile_as_its_bytes(P, F, R, seed):
    """A broadcast of bits through the PE array (AWS-style `broadcast_partition_with_PE`: int32 words read as
    fp32, times a ones stationary) and a transpose keep every finite fp32's bits."""
    rng = np.random.default_rng(seed)
    words = rng.normal(size=(P, F)).astype(np.float32).view(np.uint32)
    row = rng.normal(size=(1, F)).astype(np.float32).view(np.int32)
    transposed, spread = run_both(_bit_transpose_and_broadcast(P, F, R), words, row).outputs
    np.testing.assert_array_equal(transposed, words.T)
    np.testing.assert_array_equal(spread, np.repeat(row, R, axis=0))


@nki.jit(target="trn2")
def add_bf16(x, y, retype: bool):
    """x + y on the Vector engine from bf16 tiles, held as bf16 or as int16 words retyped to bf16."""
    a = _sbuf(x.view(nl.int16) if retype else x)
    b = _sbuf(y.view(nl.int16) if retype else y)
    out = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=out, data1=a.view(nl.bfloat16) if retype else a,
                       data2=b.view(nl.bfloat16) if retype else b, op=nl.add)
    return _out(out)


def test_a_retyped_operand_is_costed_as_the_type_it_is_read_as(records):
    """bf16 tensor_tensor with both inputs in SBUF runs in the Vector engine's 2x performance mode on
    NeuronCore-v3 ([ARCH-v3]); int16 words read as bf16 qualify as bf16 does."""
    x, y = (RNG.normal(size=(128, 512)).astype(BF16) for _ in range(2))
    native, retyped = nki.run(add_bf16, x, y, False), nki.run(add_bf16, x, y, True)
    np.testing.assert_array_equal(retyped.outputs.view(np.uint16), native.outputs.view(np.uint16))
    assert [r[1:] for r in records(retyped)] == [r[1:] for r in records(native)]


def test_an_engine_reading_a_retyped_tile_across_element_sizes_is_refused_by_name():
    @nki.jit
    def halves(x):                  # an fp32 tile [P, F] read as bf16 [P, 2F] by tensor_tensor: not modelled
        xs = _sbuf(x)
        out = nl.ndarray((x.shape[0], 2 * x.shape[1]), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=out, data1=xs.view(nl.bfloat16), data2=xs.view(nl.bfloat16), op=nl.add)
        return _out(out)

    with pytest.raises(DtypeError, match="same element size only"):
        nki.run(halves, np.zeros((8, 4), np.float32))

"""``tile.view(dtype)`` of an SBUF tile (nki.language.NkiTensor: views share the tile's storage; AWS's MoE
kernels load MX weights as uint32 words and retype the SBUF tile to float8_e4m3fn_x4, its mxfp_load
quantizes an fp32 tile read as bf16): each partition keeps its bytes, the last axis scales by the size
ratio, and the retyped tile indexes, reshapes and ``.ap()``s as a tile of its own type. DMAs move it;
nc_matmul_mx and quantize_mx read it, tensor_copy reads and writes it in the new type's elements, of any size. Values against NumPy's ``.view``; what is refused, refused by name;
full and timing-only; fast paths on and off."""
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab import config
from trnlab.hardware import mx
from trnlab.hardware.errors import DtypeError, ShapeMismatchError, UninitializedReadError
from trnlab.nki.errors import ViewError

from nki_kernels.mx_matmul import mx_product_to_hbm

RNG = np.random.default_rng(21)


@nki.jit
def retyped_slices(words):
    """A uint32 tile [P, F] read as bf16 [P, 2F]: a slice, and a reshape's middle row, DMA'd out."""
    P, F = words.shape
    tile = nl.ndarray((P, F), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=words)
    halves = tile.view(nl.bfloat16)                              # [P, 2F] bf16
    sliced = nl.ndarray((P, F), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=sliced, src=halves[:, 2:2 + F])
    second = nl.ndarray((P, F), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=second, src=halves.reshape((P, 2, F))[:, 1, :])
    return sliced, second


@nki.jit(target="trn3")
def words_as_mx_weights(stationary_words, scale, moving, moving_scale):
    """out[M, N] = MX product of uint32 weight words [K, 2, M] retyped to float8_e4m3fn_x4 in SBUF (the
    second slab: `.view(...)[:, 1, :]`) by moving x4 [K, N]; scales given [K, M] / [K, N] on the quadrants."""
    K, _, M = stationary_words.shape
    N = moving.shape[1]
    words = nl.ndarray((K, 2, M), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=words, src=stationary_words)
    weights = words.view(nl.float8_e4m3fn_x4)                    # [K, 2, M] x4, the same bytes
    mv = nl.ndarray((K, N), dtype=moving.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=mv, src=moving)
    st_s = nl.ndarray((K, M), dtype=nl.uint8, buffer=nl.sbuf)
    mv_s = nl.ndarray((K, N), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.dma_copy(dst=st_s, src=scale)
    nisa.dma_copy(dst=mv_s, src=moving_scale)
    return mx_product_to_hbm(weights[:, 1, :], st_s, mv, mv_s, nl.float32)


@nki.jit(target="trn3")
def quantize_fp32_tile_viewed_as_bf16(x):
    """(data, scales) of x [128, F] bf16 brought in as fp32 words [128, F/2] and quantized from
    `words.view(nl.bfloat16)` (AWS's mxfp_load style)."""
    P, F = x.shape
    words = nl.ndarray((P, F // 2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=words, src=x.ap(pattern=[[F // 2, P], [1, F // 2]], dtype=nl.float32))
    data = nl.ndarray((P, F // 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    scales = nl.ndarray((P, F // 4), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.quantize_mx(dst=data, src=words.view(nl.bfloat16), dst_scale=scales)
    data_out = nl.ndarray((P, F // 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.shared_hbm)
    scales_out = nl.ndarray((P, F // 4), dtype=nl.uint8, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=data_out, src=data)
    nisa.dma_copy(dst=scales_out, src=scales)
    return data_out, scales_out


@pytest.mark.parametrize("fast", [True, False])
def test_a_retyped_sbuf_tile_slices_and_reshapes_as_numpy_view(fast):
    words = RNG.integers(0, 2**32, size=(16, 4), dtype=np.uint32)
    with config.override(fast=fast):
        sliced, second = nki.run(retyped_slices, words).outputs
    halves = words.view(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(sliced.view(np.uint16), halves[:, 2:6].view(np.uint16))
    np.testing.assert_array_equal(second.view(np.uint16), halves.reshape(16, 2, 4)[:, 1, :].view(np.uint16))


def _mx_operands(K=128, M=16, N=32):
    st_vals = RNG.normal(size=(K, 2, M, 4)).astype(ml_dtypes.float8_e4m3fn)
    mv_vals = RNG.normal(size=(K, N, 4)).astype(ml_dtypes.float8_e4m3fn)
    st_words = mx.pack(st_vals.reshape(K, 2 * M, 4), nl.float8_e4m3fn_x4).view(np.uint32).reshape(K, 2, M)
    scale = RNG.integers(122, 132, size=(K, M)).astype(np.uint8)
    mv_scale = RNG.integers(122, 132, size=(K, N)).astype(np.uint8)
    return st_vals, st_words, scale, mx.pack(mv_vals, nl.float8_e4m3fn_x4), mv_vals, mv_scale


@pytest.mark.parametrize("fast", [True, False])
def test_nc_matmul_mx_reads_uint32_words_retyped_to_fp8_x4_as_the_packed_values(fast, records):
    st_vals, st_words, scale, moving, mv_vals, mv_scale = _mx_operands()
    with config.override(fast=fast):
        run = nki.run(words_as_mx_weights, st_words, scale, moving, mv_scale)
        timing = nki.run(words_as_mx_weights, st_words, scale, moving, mv_scale, timing_only=True)
    quadrants = mx.scale_partitions(128)
    st_f = np.repeat(np.exp2(scale[quadrants].astype(np.float32) - 127.0), 8, axis=0)
    mv_f = np.repeat(np.exp2(mv_scale[quadrants].astype(np.float32) - 127.0), 8, axis=0)
    a = st_vals[:, 1].astype(np.float32) * st_f[..., None]
    b = mv_vals.astype(np.float32) * mv_f[..., None]
    expected = np.einsum("kmq,knq->mn", a, b)
    bound = np.einsum("kmq,knq->mn", np.abs(a), np.abs(b)) * 1e-5
    np.testing.assert_array_less(np.abs(run.outputs - expected), bound + 1e-30)
    assert records(timing) == records(run)          # timing-only: the same instructions, the same times


@pytest.mark.parametrize("fast", [True, False])
def test_quantize_mx_of_an_fp32_tile_viewed_as_bf16_quantizes_its_bytes(fast):
    x = RNG.normal(size=(128, 32)).astype(ml_dtypes.bfloat16)
    with config.override(fast=fast):
        data, scales = nki.run(quantize_fp32_tile_viewed_as_bf16, x).outputs
    words, dense = mx.quantize(x.astype(np.float32), nl.float8_e4m3fn_x4)
    assert data.view(np.uint32).tolist() == words.view(np.uint32).tolist()
    assert scales[mx.scale_partitions(128)].tolist() == dense.tolist()


@nki.jit(target="trn3")
def quantize_words_into_words(x_bits):
    """quantize_mx from an int16 tile read as bf16 into a uint32 tile written as float8_e4m3fn_x4 (the same
    element sizes): (data words as uint32, scales)."""
    P, F = x_bits.shape
    bits = nl.ndarray((P, F), dtype=nl.int16, buffer=nl.sbuf)
    nisa.dma_copy(dst=bits, src=x_bits)
    words = nl.ndarray((P, F // 4), dtype=nl.uint32, buffer=nl.sbuf)
    scales = nl.ndarray((P, F // 4), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.quantize_mx(dst=words.view(nl.float8_e4m3fn_x4), src=bits.view(nl.bfloat16), dst_scale=scales)
    words_out = nl.ndarray((P, F // 4), dtype=nl.uint32, buffer=nl.shared_hbm)
    scales_out = nl.ndarray((P, F // 4), dtype=nl.uint8, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=words_out, src=words)
    nisa.dma_copy(dst=scales_out, src=scales)
    return words_out, scales_out


@pytest.mark.parametrize("fast", [True, False])
def test_quantize_mx_reads_and_writes_tiles_retyped_to_the_same_size(fast, records):
    x = RNG.normal(size=(32, 16)).astype(ml_dtypes.bfloat16)
    with config.override(fast=fast):
        run = nki.run(quantize_words_into_words, x.view(np.int16))
        timing = nki.run(quantize_words_into_words, x.view(np.int16), timing_only=True)
    words, scales = run.outputs
    expected, dense = mx.quantize(x.astype(np.float32), nl.float8_e4m3fn_x4)
    assert words.tolist() == expected.view(np.uint32).tolist()
    assert scales[mx.scale_partitions(32)].tolist() == dense.tolist()
    assert records(timing) == records(run)


def test_what_aws_refuses_of_a_retyped_tile_is_refused_by_name():
    def odd_bytes(x):               # [P, 3] uint8: 3 bytes a partition hold no whole fp32
        tile = nl.ndarray((32, 3), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        tile.view(nl.float32)
        return x

    def other_engine_reads(x):      # a reduction reads a tile in its own type (tests/nki_api/test_retyped_engines.py)
        tile = nl.ndarray((32, 1), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        out = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=out, op=nl.add, data=tile.view(nl.float32), axis=1)
        return x

    def add_across_sizes(x):        # tensor_tensor reads a retyped tile of its own element size only
        tile = nl.ndarray((32, 4), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        out = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=out, data1=tile.view(nl.float32), data2=tile.view(nl.float32), op=nl.add)
        return x

    def copy_mismatched(x):         # 4 uint8 bytes are one fp32, not two
        tile = nl.ndarray((32, 4), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        out = nl.ndarray((32, 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=out, src=tile.view(nl.float32))
        return x

    with pytest.raises(ViewError, match="3 bytes, not a whole number of 4-byte elements"):
        nki.run(nki.jit(odd_bytes), np.zeros((32, 3), np.uint8))
    with pytest.raises(ViewError, match="only a DMA moves such a view, or the engine instructions"):
        nki.run(nki.jit(other_engine_reads), np.zeros((32, 1), np.uint32))
    with pytest.raises(DtypeError, match="same element size only"):
        nki.run(nki.jit(add_across_sizes), np.zeros((32, 4), np.uint8))
    with pytest.raises(ShapeMismatchError, match=r"elements per partition 2 vs 1, in the types read"):
        nki.run(nki.jit(copy_mismatched), np.zeros((32, 4), np.uint8))


@nki.jit
def copy_through_retyped_tiles(words, values):
    """(words [P, F] uint32 read as fp32 by tensor_copy, values [P, F] fp32 written by tensor_copy into a
    uint32 tile retyped to fp32, then DMA'd out as uint32)."""
    P, F = words.shape
    w = nl.ndarray((P, F), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=w, src=words)
    as_float = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=as_float, src=w.view(nl.float32))
    read = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=read, src=as_float)
    v = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=v, src=values)
    u = nl.ndarray((P, F), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=u.view(nl.float32), src=v)
    written = nl.ndarray((P, F), dtype=nl.uint32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=written, src=u)
    return read, written


@pytest.mark.parametrize("fast", [True, False])
def test_tensor_copy_reads_and_writes_a_retyped_tile_as_its_bytes(fast, records):
    words = RNG.normal(size=(32, 8)).astype(np.float32).view(np.uint32)
    values = RNG.normal(size=(32, 8)).astype(np.float32)
    with config.override(fast=fast):
        run = nki.run(copy_through_retyped_tiles, words, values)
        timing = nki.run(copy_through_retyped_tiles, words, values, timing_only=True)
    read, written = run.outputs
    np.testing.assert_array_equal(read, words.view(np.float32))
    np.testing.assert_array_equal(written, values.view(np.uint32))
    assert records(timing) == records(run)


@nki.jit
def copy_across_element_sizes(x, y, raw):
    """tensor_copy of retyped tiles of another element size: an fp32 tile's bytes read as bf16 [P, 2F], bf16
    pairs read as fp32 [P, F], bf16 values written into an fp32 tile's bytes, 4 uint8 bytes read as one fp32."""
    P, F = x.shape
    t = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    halves = nl.ndarray((P, 2 * F), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.tensor_copy(dst=halves, src=t.view(nl.bfloat16))
    u = nl.ndarray((P, 2 * F), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.dma_copy(dst=u, src=y)
    pairs = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=pairs, src=u.view(nl.float32))
    w = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=w.view(nl.bfloat16), src=u)
    b = nl.ndarray(raw.shape, dtype=nl.uint8, buffer=nl.sbuf)
    nisa.dma_copy(dst=b, src=raw)
    words = nl.ndarray((P, raw.shape[1] // 4), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=words, src=b.view(nl.float32))
    outs = []
    for tile in (halves, pairs, w, words):
        out = nl.ndarray(tile.shape, dtype=tile.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=tile)
        outs.append(out)
    return tuple(outs)


@pytest.mark.parametrize("fast", [True, False])
def test_tensor_copy_reads_and_writes_tiles_retyped_to_another_element_size(fast, records):
    x = RNG.normal(size=(32, 8)).astype(np.float32)
    y = RNG.normal(size=(32, 16)).astype(ml_dtypes.bfloat16)
    raw = RNG.normal(size=(32, 4)).astype(np.float32).view(np.uint8)
    with config.override(fast=fast):
        run = nki.run(copy_across_element_sizes, x, y, raw)
        timing = nki.run(copy_across_element_sizes, x, y, raw, timing_only=True)
    halves, pairs, w, words = run.outputs
    np.testing.assert_array_equal(halves.view(np.uint16), x.view(np.uint16))
    np.testing.assert_array_equal(pairs.view(np.uint32), y.view(np.uint32))
    np.testing.assert_array_equal(w.view(np.uint32), y.view(np.uint32))
    np.testing.assert_array_equal(words.view(np.uint32), raw.view(np.uint32))
    assert records(timing) == records(run)


@nki.jit
def copy_half_written(x):
    """An fp32 tile with only its first column written, read as bf16 [P, 4] by tensor_copy (the halves of the
    unwritten column are garbage), copied back into another fp32 tile's bytes (its second column garbage):
    the defined parts go out, then the whole second tile."""
    P = x.shape[0]
    t = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t[:, 0:1], src=x)
    halves = nl.ndarray((P, 4), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.tensor_copy(dst=halves, src=t.view(nl.bfloat16))
    first = nl.ndarray((P, 2), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=first, src=halves[:, 0:2])
    w = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=w.view(nl.bfloat16), src=halves)
    word = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=word, src=w[:, 0:1])
    every = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=every, src=w)
    return first, word, every


def test_a_retyped_read_of_never_written_bytes_is_garbage_in_the_elements_they_make():
    x = RNG.normal(size=(32, 1)).astype(np.float32)
    with pytest.raises(UninitializedReadError, match=r"32 of 64 elements .*first at view position \[0, 1\]") as err:
        nki.run(copy_half_written, x)
    assert "dma_copy(dst=every" in str(err.value)          # the defined columns went out


def test_a_tile_read_as_a_narrower_type_is_costed_as_that_types_elements(records):
    @nki.jit(target="trn2")
    def copy_bf16(x, retype: bool):
        P, F = x.shape
        tile = nl.ndarray((P, F // 2) if retype else (P, F), dtype=nl.float32 if retype else nl.bfloat16,
                          buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x.view(nl.float32) if retype else x)
        out = nl.ndarray((P, F), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.tensor_copy(dst=out, src=tile.view(nl.bfloat16) if retype else tile, engine=nisa.vector_engine)
        result = nl.ndarray((P, F), dtype=nl.bfloat16, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=result, src=out)
        return result
    x = RNG.normal(size=(128, 512)).astype(ml_dtypes.bfloat16)
    native, retyped = nki.run(copy_bf16, x, False), nki.run(copy_bf16, x, True)
    np.testing.assert_array_equal(retyped.outputs.view(np.uint16), x.view(np.uint16))
    assert [r[1:] for r in records(retyped)] == [r[1:] for r in records(native)]


@nki.jit(target="trn2")
def copy_bf16(x, retype: bool):
    """A bf16 tile copied by the Vector engine: held as bf16, or as int16 words retyped to bf16."""
    P, F = x.shape
    tile = nl.ndarray((P, F), dtype=nl.int16 if retype else nl.bfloat16, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x.view(nl.int16) if retype else x)
    out = nl.ndarray((P, F), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.tensor_copy(dst=out, src=tile.view(nl.bfloat16) if retype else tile, engine=nisa.vector_engine)
    result = nl.ndarray((P, F), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=result, src=out)
    return result


def test_a_retyped_operand_is_costed_as_its_read_type(records):
    x = RNG.normal(size=(128, 512)).astype(ml_dtypes.bfloat16)
    native, retyped = nki.run(copy_bf16, x, False), nki.run(copy_bf16, x, True)
    np.testing.assert_array_equal(retyped.outputs.view(np.uint16), x.view(np.uint16))
    assert [r[1:] for r in records(retyped)] == [r[1:] for r in records(native)]


def test_nc_matmul_mx_refuses_an_operand_retyped_across_element_sizes():
    @nki.jit(target="trn3")
    def bytes_as_x4(raw, moving, scale):
        K, F = raw.shape                                         # uint8 [K, 4M]
        tile = nl.ndarray((K, F), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=raw)
        mv = nl.ndarray(moving.shape, dtype=moving.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=mv, src=moving)
        s = nl.ndarray((K, F // 4), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.dma_copy(dst=s, src=scale)
        acc = nl.ndarray((F // 4, moving.shape[1]), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul_mx(dst=acc, stationary=tile.view(nl.float8_e4m3fn_x4), moving=mv,
                          stationary_scale=s, moving_scale=s)
        return raw
    moving = mx.pack(np.zeros((128, 4, 4), ml_dtypes.float8_e4m3fn), nl.float8_e4m3fn_x4)
    with pytest.raises(DtypeError, match="same element size only"):
        nki.run(bytes_as_x4, np.zeros((128, 16), np.uint8), moving, np.full((128, 4), 127, np.uint8))


_TYPES = [np.uint8, np.uint16, ml_dtypes.bfloat16, np.float32, np.int32]


@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_retyped_tiles_read_the_bytes_numpy_view_reads(data):
    """tile.view(a)[:, s] and tile.view(a).view(b), DMA'd out, equal NumPy's .view of the same bytes."""
    old, new, again = (data.draw(st.sampled_from(_TYPES)) for _ in range(3))
    row_bytes = 16
    P = data.draw(st.integers(1, 8))
    raw = RNG.integers(0, 256, size=(P, row_bytes), dtype=np.uint8)
    x = raw.view(old)
    n_new = row_bytes // np.dtype(new).itemsize
    group = max(np.dtype(old).itemsize // np.dtype(new).itemsize, 1)      # whole elements of the tile's type
    lo = data.draw(st.integers(0, n_new // group - 1)) * group
    hi = data.draw(st.integers(lo // group + 1, n_new // group)) * group

    @nki.jit
    def kernel(src):
        tile = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=src)
        part = nl.ndarray((P, hi - lo), dtype=new, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=part, src=tile.view(new)[:, lo:hi])
        twice = nl.ndarray((P, row_bytes // np.dtype(again).itemsize), dtype=again, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=twice, src=tile.view(new).view(again))
        return part, twice

    part, twice = nki.run(kernel, x).outputs
    np.testing.assert_array_equal(part.view(np.uint8), x.view(new)[:, lo:hi].view(np.uint8))
    np.testing.assert_array_equal(twice.view(np.uint8), raw)


@nki.jit
def psum_bits(x):
    """The fp32 bits of x as int32, read out of a PSUM tile retyped to int32 by a tensor_copy."""
    P, F = x.shape
    tile = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x)
    acc = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.psum)
    nisa.tensor_copy(dst=acc, src=tile)
    bits = nl.ndarray((P, F), dtype=nl.int32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=bits, src=acc.view(nl.int32))
    out = nl.ndarray((P, F), dtype=nl.int32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=bits)
    return out


def test_a_psum_tile_retyped_is_read_as_its_bits():
    x = RNG.normal(size=(8, 16)).astype(np.float32)
    np.testing.assert_array_equal(nki.run(psum_bits, x).outputs, x.view(np.int32))

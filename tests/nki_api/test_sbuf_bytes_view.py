"""``sbuf_tile.ap(pattern, dtype=...)`` of another element size (NKI Access Patterns: the pattern counts
elements of the new type over the tile's bytes): a DMA moves the tile's bytes unchanged — e.g. fp32
scales stored as the fp8 bytes of an HBM row, as a quantizing kernel appends its dequantization scales.
An engine instruction consumes such a view as any other access pattern (NkiTensor: "Views are consumed by NKI
ISA instructions (e.g., nisa.tensor_copy, nisa.dma_copy)"): tensor_copy reads the bytes as elements of the new
type. Values against NumPy's ``.view``; a pattern that splits an element, and an engine that reads a tile in
its own type only, are refused by name; fast paths on and off."""
import ml_dtypes
import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab import config
from trnlab.hardware.errors import DtypeError
from trnlab.nki.errors import ViewError

RNG = np.random.default_rng(3)


@nki.jit
def scales_as_fp8_bytes(scales):
    """out[p, 0:4] = the 4 bytes of the fp32 scale of row p, as float8_e4m3 elements."""
    P = scales.shape[0]
    tile = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=scales)
    out = nl.ndarray((P, 4), dtype=nl.float8_e4m3, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile.ap(pattern=[[4, P], [1, 4]], dtype=nl.float8_e4m3))
    return out


@nki.jit
def bf16_pairs_as_fp32(x):
    """out[p, j] = the fp32 word made of bf16 elements 2j, 2j + 1 of row p (x: [P, 8] bf16)."""
    P, F = x.shape
    tile = nl.ndarray((P, F), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x)
    out = nl.ndarray((P, F // 2), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile.ap([[F // 2, P], [1, F // 2]], dtype=nl.float32))
    return out


@nki.jit
def fp8_bytes_into_an_fp32_tile(raw):
    """The reverse direction: raw [P, 4] fp8 bytes land in an fp32 SBUF tile read as fp8, then go out as fp32."""
    P = raw.shape[0]
    tile = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile.ap([[4, P], [1, 4]], dtype=nl.float8_e4m3), src=raw)
    out = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out


@pytest.mark.parametrize("fast", [True, False])
def test_an_sbuf_tile_read_as_a_smaller_type_moves_its_bytes(fast, records):
    scales = RNG.uniform(0.01, 4.0, size=(128, 1)).astype(np.float32)
    with config.override(fast=fast):
        run = nki.run(scales_as_fp8_bytes, scales)
    assert run.outputs.dtype == np.dtype(nl.float8_e4m3)
    np.testing.assert_array_equal(run.outputs.view(np.uint8), scales.view(np.uint8).reshape(128, 4))


def test_an_sbuf_tile_read_as_a_larger_type_moves_its_bytes():
    x = RNG.normal(size=(64, 8)).astype(ml_dtypes.bfloat16)
    out = nki.run(bf16_pairs_as_fp32, x).outputs
    np.testing.assert_array_equal(out, x.view(np.float32))


def test_a_dma_writes_bytes_into_an_sbuf_tile_read_as_another_type():
    scales = RNG.uniform(0.01, 4.0, size=(32, 1)).astype(np.float32)
    raw = scales.view(np.uint8).reshape(32, 4).view(np.dtype(nl.float8_e4m3))
    np.testing.assert_array_equal(nki.run(fp8_bytes_into_an_fp32_tile, raw).outputs, scales)


@nki.jit
def engine_reads_scales_as_fp8(scales):
    """tensor_copy reads an fp32 tile [P, 1] through .ap(dtype=float8_e4m3) as fp8 [P, 4]; bf16 out."""
    P = scales.shape[0]
    tile = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=scales)
    fp8 = nl.ndarray((P, 4), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.tensor_copy(dst=fp8, src=tile.ap([[4, P], [1, 4]], dtype=nl.float8_e4m3))
    out = nl.ndarray((P, 4), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=fp8)
    return out


@pytest.mark.parametrize("fast", [True, False])
def test_an_engine_reads_a_bytes_view_as_elements_of_its_type(fast, records):
    scales = RNG.uniform(0.01, 4.0, size=(128, 1)).astype(np.float32)
    with config.override(fast=fast):
        run = nki.run(engine_reads_scales_as_fp8, scales)
        timing = nki.run(engine_reads_scales_as_fp8, scales, timing_only=True)
    fp8 = scales.view(np.uint8).reshape(128, 4).view(np.dtype(nl.float8_e4m3))
    np.testing.assert_array_equal(run.outputs.astype(np.float32), fp8.astype(ml_dtypes.bfloat16).astype(np.float32))
    assert records(timing) == records(run)


def test_a_pattern_splitting_an_element_and_an_engine_reading_in_its_own_type_are_refused():
    def engine_reads(x):            # tensor_tensor reads a tile in its own type (or one of its size)
        tile = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        out = nl.ndarray((128, 4), dtype=nl.float8_e4m3, buffer=nl.sbuf)
        view = tile.ap([[4, 128], [1, 4]], dtype=nl.float8_e4m3)
        nisa.tensor_tensor(dst=out, data1=view, data2=view, op=nl.add)
        return x

    def splits(x):
        tile = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        out = nl.ndarray((128, 2), dtype=nl.float8_e4m3, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=tile.ap([[4, 128], [1, 2]], dtype=nl.float8_e4m3))
        return out
    x = np.ones((128, 1), np.float32)
    with pytest.raises(DtypeError, match="same element size only"):
        nki.run(nki.jit(engine_reads), x)
    with pytest.raises(ViewError, match="reads part of a 4-byte element"):
        nki.run(nki.jit(splits), x)

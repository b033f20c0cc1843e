"""`nc_matmul(tile_position=, tile_size=)`: the Tensor engine's tiling mode (AWS NKI 0.7, nki.isa.nc_matmul,
"Tiling mode"): the same values as a whole-array matmul, several small matmuls on different row / column
tiles of the PE array at once, and the tiling rules named when broken."""
import ml_dtypes
import numpy as np
import pytest

import trnlab.nki as nki
from trnlab import config
from trnlab.hardware.errors import PETilingError

from nki_kernels.pe_tiling import column_tiled_matmul, row_tiled_matmuls, whole_array_matmuls

BF16 = ml_dtypes.bfloat16


def _operands(rows, seed=0):
    rng = np.random.default_rng(seed)
    T = 128 // rows
    return (rng.normal(size=(T, rows, 64)).astype(BF16), rng.normal(size=(T, rows, 512)).astype(BF16))


def _matmul_spans(run):
    return [(r[2], r[3]) for r in run.core.timeline.records if r[1] == "nc_matmul"]


@pytest.mark.parametrize("rows", [32, 64])
def test_row_tiled_matmuls_compute_each_product(rows):
    a, b = _operands(rows)
    out = nki.run(row_tiled_matmuls, a, b, rows=rows).outputs
    expected = np.einsum("tkm,tkn->tmn", a.astype(np.float32), b.astype(np.float32))
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("schedule", ["program", "list"])
def test_four_32_row_matmuls_run_at_once_on_their_row_tiles(schedule, monkeypatch):
    monkeypatch.setattr(nki, "SCHEDULE", schedule)
    a, b = _operands(32)
    tiled = _matmul_spans(nki.run(row_tiled_matmuls, a, b, rows=32, timing_only=True))
    whole = _matmul_spans(nki.run(whole_array_matmuls, a, b, timing_only=True))
    # whole array: one after another; tiling mode: each starts before the one before it ends
    assert all(later[0] >= earlier[1] for earlier, later in zip(whole, whole[1:]))
    assert all(later[0] < earlier[1] for earlier, later in zip(tiled, tiled[1:]))
    assert max(end for _, end in tiled) < max(end for _, end in whole)
    # each one is as long as on the whole array: tiling adds parallelism, not speed
    assert [e - s for s, e in tiled] == pytest.approx([e - s for s, e in whole])


def test_matmuls_on_the_same_row_tile_still_take_turns():
    a, b = _operands(32)
    spans = _matmul_spans(nki.run(row_tiled_matmuls, a, b, rows=32, same_tile=True, timing_only=True))
    assert all(later[0] >= earlier[1] for earlier, later in zip(spans, spans[1:]))


def test_tiling_mode_times_and_values_agree_with_the_fast_paths_off():
    a, b = _operands(32)
    with config.override(fast=False):
        reference = nki.run(row_tiled_matmuls, a, b, rows=32)
    fast = nki.run(row_tiled_matmuls, a, b, rows=32)
    assert _matmul_spans(reference) == _matmul_spans(fast)
    np.testing.assert_array_equal(reference.outputs, fast.outputs)


def test_a_column_tile_computes_the_product_of_a_narrow_stationary():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(128, 64)).astype(np.float32), rng.normal(size=(128, 256)).astype(np.float32)
    out = nki.run(column_tiled_matmul, a, b, column=64, cols=64).outputs
    np.testing.assert_allclose(out, a.T @ b, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("kwargs, match", [
    (dict(column=64, cols=64, rows=100), "row_size 100"),                      # not a tile size
    (dict(column=32, cols=64), "start_column 32 must be a multiple"),         # misaligned
    (dict(column=0, cols=32), r"M=64\] does not fit"),                         # stationary wider than the tile
])
def test_broken_tiling_rules_are_named(kwargs, match):
    a, b = np.ones((128, 64), np.float32), np.ones((128, 128), np.float32)
    with pytest.raises(PETilingError, match=match):
        nki.run(column_tiled_matmul, a, b, **kwargs)


def test_32_row_tiles_need_neuroncore_v3():
    a, b = _operands(32)
    with pytest.raises(PETilingError, match="tiles of 64, 128"):
        nki.run(row_tiled_matmuls, a, b, rows=32, target="trn1")


def _mx_operands(seed=3):
    from trnlab.hardware import mx
    import trnlab.nki.language as nl
    rng = np.random.default_rng(seed)
    K, M, N = 32, 32, 64
    st_vals = rng.normal(size=(K, M, 4)).astype(ml_dtypes.float8_e5m2)
    mv_vals = rng.normal(size=(K, N, 4)).astype(ml_dtypes.float8_e5m2)
    st_scale = rng.integers(120, 134, size=(K // 8, M)).astype(np.uint8)
    mv_scale = rng.integers(120, 134, size=(K // 8, N)).astype(np.uint8)
    return mx.pack(st_vals, nl.float8_e5m2_x4), st_scale, mx.pack(mv_vals, nl.float8_e5m2_x4), mv_scale


def test_nc_matmul_mx_on_a_row_tile_gives_the_whole_array_product():
    from nki_kernels.mx_matmul import mx_matmul
    from nki_kernels.pe_tiling import mx_matmul_on_row_tile
    operands = _mx_operands()
    whole = mx_matmul(*operands)
    np.testing.assert_array_equal(nki.run(mx_matmul_on_row_tile, *operands, start_row=96).outputs, whole)


def test_nc_matmul_mx_tiles_rows_only():
    from nki_kernels.pe_tiling import mx_matmul_on_row_tile
    with pytest.raises(PETilingError, match="tiles rows only"):
        nki.run(mx_matmul_on_row_tile, *_mx_operands(), columns=64)


def test_tiling_mode_with_a_transpose_is_refused():
    import trnlab.nki.isa as nisa
    import trnlab.nki.language as nl
    from trnlab.nki.errors import NKIError

    @nki.jit
    def kernel(x):
        a = nl.ndarray((32, 32), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x)
        t = nl.ndarray((32, 32), dtype=x.dtype, buffer=nl.psum)
        nisa.nc_matmul(dst=t, stationary=a, moving=a, is_transpose=True, tile_position=(0, 0), tile_size=(32, 32))
        return x

    with pytest.raises(NKIError, match="plain matmuls only"):
        nki.run(kernel, np.zeros((32, 32), np.float32))

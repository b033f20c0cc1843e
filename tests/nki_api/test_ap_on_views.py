""".ap() on a tensor that is already a view (AWS's "NKI Access Patterns" page, "Restriction on Nested
Indexing"; the NKI Library calls `.ap` on `t[i]` blocks and on reshaped tiles through its TensorView).

A view whose elements are one contiguous run of its owner (a block `t[i]`, a reshape of a whole tile)
is a tensor of its own bytes: its pattern and offset count from the view's first element. A view
that is not contiguous (a strided slice, the result of another `.ap`) is "an already indexed tensor":
refused, as AWS refuses it."""
import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.nki.errors import ViewError

from nki_isa_helpers import run_both

RNG = np.random.default_rng(11)


@nki.jit
def block_ap(table):
    # table [4, 64, 32] in HBM; block 2 is [64, 32], read transposed-by-halves with an offset
    block = table[2]
    view = block.ap(pattern=[[32, 64], [1, 16]], offset=16)       # [64 rows, columns 16..31]
    tile = nl.ndarray((64, 16), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=view)
    out = nl.ndarray((64, 16), dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out


@nki.jit
def sbuf_block_ap(x):
    # x [2, 64, 8, 4]: an SBUF block tile indexed by an int, then its free axes transposed by a pattern
    tile = nl.ndarray((64, 8, 4), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x[1])
    res = nl.ndarray((64, 4, 8), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=tile[0:64].ap(pattern=[[32, 64], [1, 4], [4, 8]], offset=0))
    out = nl.ndarray((64, 4, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=res)
    return out


def test_ap_of_a_block_counts_from_the_blocks_first_element():
    table = RNG.normal(size=(4, 64, 32)).astype(np.float32)
    out = run_both(block_ap, table).outputs
    np.testing.assert_array_equal(out, table[2][:, 16:32])


def test_ap_of_a_whole_tile_view_reads_the_tiles_elements():
    x = RNG.normal(size=(2, 64, 8, 4)).astype(np.float32)
    out = run_both(sbuf_block_ap, x).outputs
    np.testing.assert_array_equal(out, x[1].transpose(0, 2, 1))


def test_ap_past_the_end_of_a_block_is_out_of_bounds_of_the_block():
    @nki.jit
    def kernel(table):
        past = table[1].ap(pattern=[[32, 64], [1, 32]], offset=32)      # one row past block 1's 64 x 32
        tile = nl.ndarray((64, 32), dtype=table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=past)
        return table

    with pytest.raises(Exception, match="out-of-bounds access pattern"):
        nki.run(kernel, np.zeros((4, 64, 32), np.float32))


@pytest.mark.parametrize("view", ["strided slice", "ap of an ap"])
def test_ap_of_a_view_that_is_not_contiguous_is_refused(view):
    @nki.jit
    def kernel(table):
        if view == "strided slice":
            part = table[0, :, 0:16]                                 # [64, 16] of rows of 32: strided
        else:
            part = table.ap(pattern=[[32, 64], [1, 16]], offset=0)
        part.ap(pattern=[[16, 64], [1, 16]], offset=0)
        return table

    with pytest.raises(ViewError, match="already indexed"):
        nki.run(kernel, np.zeros((4, 64, 32), np.float32))


@nki.jit
def skipped_last_column(w, x):
    # w [64, 2, 12] (rows, heads, columns): a pattern per column h, built for h = 0..15 but used only
    # for h < 12 (a last tile that is "incomplete"), as the NKI Library's output projection loops
    w_sb = nl.ndarray((64, 2, 12), dtype=w.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=w_sb, src=w)
    x_sb = nl.ndarray((64, 4), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x_sb, src=x)
    out = nl.ndarray((12, 2, 4), dtype=x.dtype, buffer=nl.shared_hbm)
    for group in range(4):
        for h in range(4 * group, 4 * group + 4):
            for head in range(2):
                column = w_sb.ap(pattern=[[24, 64], [1, 1]], offset=head * 12 + h)   # [64, 1]; h = 12.. past the end
                if h < 12:
                    res = nl.ndarray((1, 4), dtype=nl.float32, buffer=nl.psum)
                    nisa.nc_matmul(dst=res, stationary=column, moving=x_sb)
                    res_sb = nl.ndarray((1, 4), dtype=x.dtype, buffer=nl.sbuf)
                    nisa.tensor_copy(dst=res_sb, src=res)
                    nisa.dma_copy(dst=out[h, head:head + 1, :], src=res_sb)
    return out


def test_ap_past_the_end_that_no_instruction_uses_is_not_an_error():
    w = RNG.normal(size=(64, 2, 12)).astype(np.float32)
    x = RNG.normal(size=(64, 4)).astype(np.float32)
    out = run_both(skipped_last_column, w, x).outputs
    np.testing.assert_allclose(out, np.einsum("khn,kb->nhb", w, x), rtol=1e-4, atol=1e-4)


def test_ap_past_the_end_fails_at_the_instruction_that_uses_it():
    @nki.jit
    def kernel(w):
        w_sb = nl.ndarray((64, 24), dtype=w.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=w_sb, src=w)
        column = w_sb.ap(pattern=[[24, 64], [1, 1]], offset=24)              # one row past the end
        copy = nl.ndarray((64, 1), dtype=w.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=copy, src=column)
        return w

    with pytest.raises(Exception, match=r"out-of-bounds access pattern on .* elements \[24, 1536\] of 1536"):
        nki.run(kernel, np.zeros((64, 24), np.float32))


@nki.jit
def copy_into_right_half(x):
    # x [128, 128]; written into columns 128..255 of a [128, 256] tile through a pattern whose last
    # pair is [0, 1] (as the NKI Library's output projection writes when B x S > one PSUM bank):
    # 16384 positions, more than NumPy 2.4's np.unravel_index gets right for a trailing size-1 axis
    src = nl.ndarray((128, 128), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=src, src=x)
    wide = nl.ndarray((128, 256), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=wide, value=0.0)
    nisa.tensor_copy(dst=wide.ap(pattern=[[256, 128], [1, 128], [0, 1]], offset=128),
                     src=src.ap(pattern=[[128, 128], [1, 128], [0, 1]], offset=0))
    out = nl.ndarray((128, 256), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=wide)
    return out


def test_pattern_ending_in_a_count_one_pair_walks_every_partition():
    x = RNG.normal(size=(128, 128)).astype(np.float32)
    out = run_both(copy_into_right_half, x).outputs
    np.testing.assert_array_equal(out[:, 128:], x)
    np.testing.assert_array_equal(out[:, :128], 0.0)

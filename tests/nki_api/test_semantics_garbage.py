"""A masked partial-partition load leaves a 128-partition tile whose last rows were never written; on
the chip later instructions compute on those rows anyway (garbage in, garbage out) and the kernel's
masked store drops them. Only garbage that reaches an output is an error (`UninitializedReadError`).

Kernels of our own in AWS's beta-1 style: the last, partial row tile masked on load and store
("mask the load and the store of the last partial tile, not the math"), with reductions, transposes,
partition reductions, selects and on-chip DMAs between them."""
import numpy as np
import pytest

import trnlab.nki as nki
from trnlab import config
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.hardware.errors import UninitializedReadError

ROWS, COLS = 100, 64      # fewer rows than partitions: one partial tile


def _input(seed=0):
    return np.random.default_rng(seed).normal(size=(ROWS, COLS)).astype(np.float32)


@nki.jit
def row_max_through_two_transposes(a_tensor):
    n = a_tensor.shape[0]
    out = nl.ndarray((n, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p, i_f = nl.arange(128)[:, None], nl.arange(COLS)[None, :]
    tile = nl.load(a_tensor[i_p, i_f], mask=(i_p < n))           # [128, 64], rows n.. unwritten
    assert tile.shape == (128, COLS)                               # all partitions, as on the chip
    flipped = nl.transpose(tile)                                   # [64, 128]: garbage columns n..
    back = nl.transpose(flipped)                                   # [128, 64]: garbage rows again
    row_max = nl.max(back, axis=1, keepdims=True)                  # a reduction reads every row
    nl.store(out[i_p, 0], value=row_max, mask=(i_p < n))           # ... the store drops the garbage
    return out


@nki.jit
def column_sums_of_the_written_columns(a_tensor):
    rows, cols = a_tensor.shape
    out = nl.ndarray((1, cols), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p, i_f = nl.arange(rows)[:, None], nl.arange(128)[None, :]
    tile = nl.load(a_tensor[i_p, i_f], mask=(i_f < cols))         # [rows, 128], columns cols.. unwritten
    sums = nisa.tensor_partition_reduce(np.add, tile)              # [1, 128]: garbage in columns cols..
    i_one = nl.arange(1)[:, None]
    nl.store(out[i_one, i_f], value=sums, mask=(i_f < cols))
    return out


@nki.jit
def clipped_copy_through_an_on_chip_dma(a_tensor):
    n = a_tensor.shape[0]
    out = nl.ndarray((n, COLS), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p, i_f = nl.arange(128)[:, None], nl.arange(COLS)[None, :]
    tile = nl.ndarray((128, COLS), dtype=nl.float32, buffer=nl.sbuf)
    tile[i_p, i_f] = nl.load(a_tensor[i_p, i_f], mask=(i_p < n))
    clipped = nl.where(nl.greater(tile, 0.0), tile, 0.0)           # a select over all 128 rows
    moved = nl.ndarray((128, COLS), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=moved, src=clipped)                           # SBUF -> SBUF, garbage rows too
    nl.store(out[i_p, i_f], value=moved, mask=(i_p < n))
    return out


@nki.jit
def stores_the_garbage_rows(a_tensor):
    out = nl.ndarray((128, COLS), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p, i_f = nl.arange(128)[:, None], nl.arange(COLS)[None, :]
    tile = nl.load(a_tensor[i_p, i_f], mask=(i_p < a_tensor.shape[0]))
    nl.store(out, value=nl.transpose(nl.transpose(tile)))          # rows n.. reach the output
    return out


def test_a_masked_load_is_a_128_partition_tile_that_full_tile_instructions_read_whole():
    a = _input(0)
    np.testing.assert_array_equal(row_max_through_two_transposes(a), a.max(axis=1, keepdims=True))
    run = nki.run(row_max_through_two_transposes, a)
    transposes = [r for r in run.timeline if r.opcode == "nc_transpose"]
    assert len(transposes) == 2


def test_garbage_columns_a_partition_reduction_reads_are_dropped_by_the_store():
    a = np.random.default_rng(1).normal(size=(128, 96)).astype(np.float32)
    out = column_sums_of_the_written_columns(a)
    np.testing.assert_allclose(out[0], a.sum(axis=0), rtol=1e-5, atol=1e-4)


def test_garbage_rows_go_through_a_select_and_an_on_chip_dma():
    a = _input(2)
    np.testing.assert_array_equal(clipped_copy_through_an_on_chip_dma(a), np.maximum(a, 0.0))


def test_garbage_that_reaches_an_output_is_the_error_at_the_store():
    with pytest.raises(UninitializedReadError, match=r"garbage") as caught:
        stores_the_garbage_rows(_input(3))
    assert "nl.store(out, value=" in str(caught.value)


@nki.jit
def stores_the_tile_whole_then_zeros_over_its_padding(a_tensor):
    n = a_tensor.shape[0]
    out = nl.ndarray((128, COLS), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p, i_f = nl.arange(128)[:, None], nl.arange(COLS)[None, :]
    tile = nl.load(a_tensor[i_p, i_f], mask=(i_p < n))
    nl.store(out, value=nl.transpose(nl.transpose(tile)))          # rows n.. reach HBM as garbage ...
    nl.store(out[n:128, :], value=nl.zeros((128 - n, COLS), dtype=nl.float32))   # ... then zeros
    return out


def test_with_garbage_stores_on_a_store_of_garbage_that_a_later_store_overwrites_is_not_an_error():
    a = _input(4)
    with pytest.raises(UninitializedReadError, match="garbage"):
        stores_the_tile_whole_then_zeros_over_its_padding(a)           # default: the store is the error
    with config.override(garbage_stores=True):                         # TRNLAB_GARBAGE_STORES=1
        out = stores_the_tile_whole_then_zeros_over_its_padding(a)
        with pytest.raises(UninitializedReadError, match="read never-written.*stored into HBM"):
            stores_the_garbage_rows(_input(3))                          # still garbage when the output is read
    np.testing.assert_array_equal(out[:ROWS], a)
    assert np.all(out[ROWS:] == 0)

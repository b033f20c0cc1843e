"""Indexing a tensor by a value known only when the program runs: ``table[e]`` / ``tile[:, b, :]`` with ``e``
an ``nisa.NkiScalar`` ("A NkiScalar can be used almost anywhere a Python int literal is used", nki.isa.NkiScalar)
is the view at index 0 moved by e steps of that axis — ``.ap(pattern, offset, scalar_offset=e, indirect_dim=axis)``
— read by a DMA, or on chip by an engine that reads a register offset. Values against NumPy indexing, fast paths
on and off, full and timing-only; an index past the axis, and what is not modelled, refused by name."""
import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.hardware.errors import OutOfBoundsError
from trnlab.nki.errors import ViewError

from conftest import _records
from nki_isa_helpers import load_scalar, run_both

RNG = np.random.default_rng(5)


@nki.jit
def pick_expert(table, index):
    """out = table[index] of an HBM table [E, P, F], the expert chosen on the device."""
    _, P, F = table.shape
    e = load_scalar(index)
    tile = nl.ndarray((P, F), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=table[e])
    out = nl.ndarray((P, F), dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out


@nki.jit
def pick_block_on_chip(x, index):
    """out = x[:, index, :] of an SBUF tile [P, B, F], copied by the Vector engine at the run-time offset."""
    P, B, F = x.shape
    b = load_scalar(index)
    tile = nl.ndarray((P, B, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x)
    picked = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=picked, src=tile[:, b, :])
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=picked)
    return out


@pytest.mark.parametrize("e", [0, 3])
def test_an_hbm_table_indexed_by_a_run_time_scalar_is_numpy_indexing(e):
    table = RNG.normal(size=(4, 16, 32)).astype(np.float32)
    index = np.array([[e]], np.int32)
    run = run_both(pick_expert, table, index)
    np.testing.assert_array_equal(run.outputs, table[e])
    assert _records(nki.run(pick_expert, table, index, timing_only=True)) == _records(run)


def test_a_free_axis_of_an_sbuf_tile_indexed_by_a_run_time_scalar_is_numpy_indexing():
    x = RNG.normal(size=(8, 3, 16)).astype(np.float32)
    run = run_both(pick_block_on_chip, x, np.array([[2]], np.int32))
    np.testing.assert_array_equal(run.outputs, x[:, 2, :])


def test_a_run_time_index_past_its_axis_and_unmodelled_forms_are_refused_by_name():
    table = np.zeros((4, 16, 32), np.float32)
    with pytest.raises(OutOfBoundsError):
        nki.run(pick_expert, table, np.array([[4]], np.int32))

    def of_a_view(t, index):
        s = load_scalar(index)
        tile = nl.ndarray((16, 32), dtype=t.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=t[1:3][s])
        return t

    with pytest.raises(ViewError, match="a view, by a run-time scalar"):
        nki.run(nki.jit(of_a_view), table, np.array([[1]], np.int32))


@nki.jit
def copy_the_first_experts(table, count):
    """out[e] = table[e] for e < count (read on the device), zero after: a run-time loop whose iterator (an
    NkiScalar) indexes both the DMA's source and its destination."""
    E, P, F = table.shape
    n = load_scalar(count)
    out = nl.ndarray((E, P, F), dtype=table.dtype, buffer=nl.shared_hbm)
    zeros = nl.ndarray((P, F), dtype=table.dtype, buffer=nl.sbuf)
    nisa.memset(dst=zeros, value=0.0)
    for e in range(E):
        nisa.dma_copy(dst=out[e], src=zeros)

    def body(i):
        tile = nl.ndarray((P, F), dtype=table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=table[i])
        nisa.dma_copy(dst=out[i], src=tile)

    nl.fori_loop(0, n, body)
    return out


def test_a_run_time_loop_iterator_indexes_source_and_destination():
    table = RNG.normal(size=(4, 8, 16)).astype(np.float32)
    run = run_both(copy_the_first_experts, table, np.array([[3]], np.int32))
    expected = np.zeros_like(table)
    expected[:3] = table[:3]
    np.testing.assert_array_equal(run.outputs, expected)

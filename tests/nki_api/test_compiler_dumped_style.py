"""Kernels in the style neuronx-cc dumps them (beta 1, as the NKIBench kernels of AccelOpt are written):
every index and mask an `nl.arange` call of its own, PSUM accumulators declared with
`nl.zeros(..., lazy_initialization=True)` as block tensors larger than PSUM, and SBUF blocks written through
an access that folds two iterators into one free axis. docs/nki_compat.md has the NKIBench run."""
import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl

BLOCKS = 64          # 64 blocks of [128, 512] fp32 = 128 KiB per partition, eight times PSUM's 16 KiB


def _accumulate_per_block(lazy: bool):
    @nki.jit
    def kernel(a, b):
        out = nl.ndarray((BLOCKS, 128, 512), dtype=np.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((BLOCKS, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.psum,
                       lazy_initialization=lazy)
        a_tile, b_tile = nl.load(a), nl.load(b)
        for i in nl.affine_range(BLOCKS):
            for k in nl.affine_range(2):
                acc[i, nl.arange(128)[:, None], nl.arange(512)[None, :]] += nisa.nc_matmul(a_tile, b_tile)
            nl.store(out[i], value=nl.copy(acc[i, nl.arange(128)[:, None], nl.arange(512)[None, :]]))
        return out
    return kernel


def test_a_lazily_initialized_psum_block_is_zeroed_at_its_first_use():
    rng = np.random.default_rng(0)
    a, b = rng.random((128, 128), np.float32), rng.random((128, 512), np.float32)
    got = _accumulate_per_block(lazy=True)(a, b)
    np.testing.assert_allclose(got, np.broadcast_to(2 * a.T @ b, got.shape), rtol=1e-4)


@nki.jit
def read_before_write(a, b):
    out = nl.ndarray((2, 128, 512), dtype=np.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((2, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.psum, lazy_initialization=True)
    nl.store(out[0], value=nl.copy(acc[0, nl.arange(128)[:, None], nl.arange(512)[None, :]]))   # never written
    acc[1, nl.arange(128)[:, None], nl.arange(512)[None, :]] += nisa.nc_matmul(nl.load(a), nl.load(b))
    nl.store(out[1], value=nl.copy(acc[1, nl.arange(128)[:, None], nl.arange(512)[None, :]]))
    return out


def test_a_lazily_initialized_block_read_first_holds_zeros():
    rng = np.random.default_rng(2)
    a, b = rng.random((128, 128), np.float32), rng.random((128, 512), np.float32)
    got = read_before_write(a, b)
    np.testing.assert_array_equal(got[0], np.zeros((128, 512), np.float32))
    np.testing.assert_allclose(got[1], a.T @ b, rtol=1e-4)


@nki.jit
def folded_copy(x):          # x: (64, 128, 8, 128); 64 SBUF blocks of 4 KiB: 256 KiB, more than SBUF
    out = nl.ndarray((64, 128, 1024), dtype=np.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((64, nl.par_dim(128), 1024), dtype=np.float32, buffer=nl.sbuf)
    for i in nl.affine_range(64):
        t[i, nl.arange(128)[:, None, None], 128 * nl.arange(8)[None, :, None] + nl.arange(128)[None, None, :]] = \
            nl.load(x[i, nl.arange(128)[:, None, None], nl.arange(8)[None, :, None], nl.arange(128)[None, None, :]])
        nl.store(out[i, nl.arange(128)[:, None], nl.arange(1024)[None, :]],
                 value=t[i, nl.arange(128)[:, None], nl.arange(1024)[None, :]])
    return out


def test_a_block_written_through_a_folded_free_axis_is_one_block():
    x = np.random.default_rng(1).random((64, 128, 8, 128), np.float32)
    np.testing.assert_array_equal(folded_copy(x), x.reshape(64, 128, 1024))


def test_lazy_zeroing_comes_at_the_first_use_not_at_the_declaration(monkeypatch):
    monkeypatch.setattr(nki, "SCHEDULE", "program")          # the order the kernel's trace gives
    shapes = nki.ShapeDtype((128, 128), np.float32), nki.ShapeDtype((128, 512), np.float32)
    lazy = [i.opcode for i in nki.trace(_accumulate_per_block(lazy=True), *shapes).instructions]
    eager = [i.opcode for i in nki.trace(_accumulate_per_block(lazy=False), *shapes).instructions]
    assert eager[:3] == ["memset", "dma_copy", "dma_copy"]    # zeroed where declared, before the loads
    assert lazy[:4] == ["dma_copy", "dma_copy", "memset", "nc_matmul"]   # block 0 zeroed just before its use
    assert lazy.count("memset") == BLOCKS


@nki.jit
def plain_copy(x):           # the same copy as folded_copy, its tile written as a plain box
    out = nl.ndarray((64, 128, 1024), dtype=np.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((64, nl.par_dim(128), 1024), dtype=np.float32, buffer=nl.sbuf)
    for i in nl.affine_range(64):
        t[i, nl.arange(128)[:, None], nl.arange(1024)[None, :]] = \
            nl.load(x[i, nl.arange(128)[:, None], nl.arange(1024)[None, :]])
        nl.store(out[i, nl.arange(128)[:, None], nl.arange(1024)[None, :]],
                 value=t[i, nl.arange(128)[:, None], nl.arange(1024)[None, :]])
    return out


def test_a_folded_free_axis_moves_whole_rows_as_a_plain_box_does():
    # the folded access resolves as index arrays; its DMA still moves 4 KiB runs, not one element at a time
    folded = nki.run(folded_copy, nki.ShapeDtype((64, 128, 8, 128), np.float32), timing_only=True)
    plain = nki.run(plain_copy, nki.ShapeDtype((64, 128, 1024), np.float32), timing_only=True)
    assert folded.latency_us == pytest.approx(plain.latency_us)


def test_a_real_gather_is_still_costed_element_by_element():
    from trnlab.hardware import cost

    class View:                                 # a transposed read: no two adjacent elements in a row
        class tensor:
            shape, partition_axis = (128, 128), 0
        index = (np.arange(128)[None, :], np.arange(128)[:, None])
        shape = (128, 128)
    assert cost._gathered_run(View, 4) == 4
    View.index = (np.arange(128)[:, None], np.arange(128)[None, :])     # the same arrays, in order: rows
    assert cost._gathered_run(View, 4) == 128 * 4

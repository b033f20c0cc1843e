"""NKI 0.7's on-chip gathers and shuffles against NumPy references, both call styles, the fast paths
on and off, and their named errors: nc_n_gather, local_gather, nc_stream_shuffle."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.hardware.errors import (DtypeError, IndexError_, MemoryPlacementError, PartitionLimitError,
                                    ShapeMismatchError, StartPartitionError)

from nki_isa_helpers import compute_records, run_both


# -- nc_n_gather: within each partition -----------------------------------------------------------------
def _n_gather_kernel(style, index_dtype=nl.uint32):
    @nki.jit
    def kernel(data, indices):
        out = nl.ndarray(indices.shape, dtype=data.dtype, buffer=nl.shared_hbm)
        table = nl.load(data)
        where = nl.ndarray(indices.shape, dtype=index_dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=where, src=nl.load(indices))
        if style == "destination":
            gathered = nl.ndarray(indices.shape, dtype=data.dtype, buffer=nl.sbuf)
            nisa.nc_n_gather(dst=gathered, data=table, indices=where)
        else:
            gathered = nisa.nc_n_gather(table, where)
        nl.store(out, value=gathered)
        return out

    return kernel


@settings(max_examples=8, deadline=None)
@given(rows=st.sampled_from([1, 16, 128]), cols=st.integers(1, 700), picks=st.integers(1, 40),
       seed=st.integers(0, 2**16), style=st.sampled_from(["destination", "functional"]))
def test_nc_n_gather_picks_each_partitions_elements_by_flat_index(rows, cols, picks, seed, style):
    rng = np.random.default_rng(seed)
    data = rng.normal(size=(rows, cols)).astype(np.float32)
    indices = rng.integers(0, cols, size=(rows, picks)).astype(np.uint32)
    out = run_both(_n_gather_kernel(style), data, indices).outputs
    np.testing.assert_array_equal(out, np.take_along_axis(data, indices.astype(np.int64), axis=1))


def test_nc_n_gather_rules():
    data = np.zeros((8, 16), np.float32)
    with pytest.raises(DtypeError):                     # indices are uint32
        nki.run(_n_gather_kernel("destination", nl.int32), data, np.zeros((8, 4), np.uint32))
    with pytest.raises(IndexError_):                    # an index past the partition's elements
        nki.run(_n_gather_kernel("destination"), data, np.full((8, 4), 16, np.uint32))


def test_nc_n_gather_reads_sbuf_only():
    @nki.jit
    def kernel(data):
        out = nl.ndarray((8, 4), dtype=data.dtype, buffer=nl.shared_hbm)
        table = nl.ndarray(data.shape, dtype=data.dtype, buffer=nl.psum)
        nisa.tensor_copy(dst=table, src=nl.load(data))
        where = nl.ndarray((8, 4), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.memset(dst=where, value=0)
        nl.store(out, value=nisa.nc_n_gather(table, where))
        return out

    with pytest.raises(MemoryPlacementError):
        nki.run(kernel, np.zeros((8, 16), np.float32))


# -- local_gather: within the 16 partitions of a GpSimd core ----------------------------------------------
def _local_gather_reference(src, index, per_index, valid):
    out = []
    for core in range(src.shape[0] // 16):
        rows = slice(core * 16, core * 16 + 16)
        starts = index[rows].reshape(-1, order="F")[:valid]          # partition first
        picks = (starts[:, None] + np.arange(per_index)[None, :]).reshape(-1)
        out.append(src[rows][:, picks])                               # each partition from its own row
    return np.concatenate(out)


@pytest.mark.parametrize("style", ["destination", "functional"])
@pytest.mark.parametrize("per_index, valid", [(1, 64), (4, 64), (2, 20)])
def test_local_gather_gathers_within_each_gpsimd_cores_partitions(style, per_index, valid):
    rng = np.random.default_rng(5)
    src = rng.normal(size=(128, 32)).astype(np.float32)
    index = rng.integers(0, 32 - per_index + 1, size=(128, 4)).astype(np.uint16)

    @nki.jit
    def kernel(src_buffer, idx):
        out = nl.ndarray((128, valid * per_index), dtype=src_buffer.dtype, buffer=nl.shared_hbm)
        if style == "destination":
            gathered = nl.ndarray((128, valid * per_index), dtype=src_buffer.dtype, buffer=nl.sbuf)
            nisa.local_gather(dst=gathered, src_buffer=nl.load(src_buffer), index=nl.load(idx),
                              num_elem_per_idx=per_index, num_valid_indices=valid)
        else:
            gathered = nisa.local_gather(nl.load(src_buffer), nl.load(idx), per_index, valid)
        nl.store(out, value=gathered)
        return out

    run = run_both(kernel, src, index)
    np.testing.assert_array_equal(run.outputs, _local_gather_reference(src, index, per_index, valid))
    assert compute_records(run)[-1][:2] == ("pool", "local_gather")


def test_local_gather_of_expert_affinities_puts_each_tokens_picks_on_its_partition():
    """As AWS's MoE token-generation kernel uses it: index[k, t] = expert k of token t (16 tokens), so
    index i = 16 t + k, and token t's row of affinities lands on its own partition at [t, k]."""
    rng = np.random.default_rng(11)
    affinities = rng.random((128, 8)).astype(np.float32)          # [tokens, experts]
    experts = rng.integers(0, 8, size=(16, 16)).astype(np.uint16)  # [token, k]
    index = np.zeros((128, 16), np.uint16)
    index[:16, :16] = experts.T

    @nki.jit
    def kernel(src_buffer, idx):
        out = nl.ndarray((128, 256), dtype=src_buffer.dtype, buffer=nl.shared_hbm)
        gathered = nl.ndarray((128, 256), dtype=src_buffer.dtype, buffer=nl.sbuf)
        nisa.local_gather(dst=gathered, src_buffer=nl.load(src_buffer), index=nl.load(idx), num_elem_per_idx=1,
                          num_valid_indices=256)
        nl.store(out, value=gathered)
        return out

    gathered = run_both(kernel, affinities, index).outputs.reshape(128, 16, 16)
    for t in range(16):
        np.testing.assert_array_equal(gathered[t, t], affinities[t, experts[t]])


def test_local_gather_works_on_whole_gpsimd_cores():
    @nki.jit
    def kernel(src_buffer, idx):
        out = nl.ndarray((8, 4), dtype=src_buffer.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nisa.local_gather(nl.load(src_buffer), nl.load(idx)))
        return out

    with pytest.raises(PartitionLimitError):
        nki.run(kernel, np.zeros((8, 16), np.float32), np.zeros((8, 4), np.uint16))


# -- nc_stream_shuffle: within 32-partition quadrants -------------------------------------------------------
def test_nc_stream_shuffle_broadcasts_one_partition_as_aws_stream_shuffle_broadcast_does():
    @nki.jit
    def kernel(row):
        out = nl.ndarray((96, row.shape[1]), dtype=row.dtype, buffer=nl.shared_hbm)
        src = nl.load(row)                                   # [1, F]
        dst = nl.ndarray((96, row.shape[1]), dtype=row.dtype, buffer=nl.sbuf)
        for q in nl.static_range(3):
            nisa.nc_stream_shuffle(src=src[0:1, :], dst=dst[q * 32:(q + 1) * 32, :], shuffle_mask=[0] * 32)
        nl.store(out, value=dst)
        return out

    row = np.arange(40, dtype=np.float32)[None, :]
    np.testing.assert_array_equal(run_both(kernel, row).outputs, np.repeat(row, 96, axis=0))


@settings(max_examples=8, deadline=None)
@given(mask=st.lists(st.one_of(st.integers(0, 31), st.just(255)), min_size=32, max_size=32),
       quadrants=st.integers(1, 4))
def test_nc_stream_shuffle_moves_partitions_within_each_quadrant_and_255_keeps(mask, quadrants):
    P = 32 * quadrants

    @nki.jit
    def kernel(x, before):
        out = nl.ndarray((P, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        dst = nl.ndarray((P, 8), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=dst, src=nl.load(before))
        nisa.nc_stream_shuffle(dst, nl.load(x), mask)       # positional: (dst, src, shuffle_mask)
        nl.store(out, value=dst)
        return out

    x = np.arange(P * 8, dtype=np.float32).reshape(P, 8)
    before = -np.ones((P, 8), np.float32)
    expected = before.copy()
    for p in range(P):
        m = mask[p % 32]
        if m != 255:
            expected[p] = x[(p // 32) * 32 + m]
    np.testing.assert_array_equal(run_both(kernel, x, before).outputs, expected)


@pytest.mark.parametrize("case, error", [("short mask", ShapeMismatchError), ("dtype", DtypeError),
                                         ("free size", ShapeMismatchError), ("outside src", IndexError_),
                                         ("start", StartPartitionError)])
def test_nc_stream_shuffle_rules(case, error):
    @nki.jit
    def kernel(x):
        out = nl.ndarray((32, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        dst = nl.ndarray((32, 8 if case != "free size" else 4),
                         dtype=nl.bfloat16 if case == "dtype" else x.dtype, buffer=nl.sbuf)
        src = nl.load(x)
        mask = [0] * 16 if case == "short mask" else ([5] * 32 if case == "outside src" else list(range(32)))
        rows = slice(0, 4) if case == "outside src" else (slice(8, 24) if case == "start" else slice(0, 32))
        nisa.nc_stream_shuffle(dst=dst, src=src[rows, :], shuffle_mask=mask)
        nl.store(out, value=dst)
        return out

    with pytest.raises(error):
        nki.run(kernel, np.zeros((32, 8), np.float32))


def test_instructions_in_an_affine_loop_are_stamped_to_the_same_program_as_traced_one_by_one():
    """With the fast paths on, iterations 2 .. n-2 of an affine_range loop are stamped from the first
    two (nki/loops.py); the run must equal the reference's, which traces every iteration."""
    @nki.jit
    def kernel(x, low, high):
        out = nl.ndarray((128, 6 * 64), dtype=x.dtype, buffer=nl.shared_hbm)
        bounds_lo, bounds_hi = nl.load(low), nl.load(high)
        for i in nl.affine_range(6):
            tile = nl.load(x[:, i * 64:(i + 1) * 64])
            masked = nisa.range_select(tile, nl.greater_equal, nl.less, bounds_lo, bounds_hi,
                                       range_start=i * 64, on_false_value=0.0)
            shuffled = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
            nisa.nc_stream_shuffle(dst=shuffled, src=masked, shuffle_mask=[31 - p for p in range(32)])
            nl.store(out[:, i * 64:(i + 1) * 64], value=shuffled)
        return out

    rng = np.random.default_rng(14)
    x = rng.normal(size=(128, 384)).astype(np.float32)
    low = rng.integers(0, 200, size=(128, 1)).astype(np.float32)
    high = low + 100
    out = run_both(kernel, x, low, high).outputs
    position = np.arange(384)[None, :]
    masked = np.where((position >= low) & (position < high), x, 0.0)
    reversed_in_quadrants = np.concatenate([masked[q * 32:(q + 1) * 32][::-1] for q in range(4)])
    np.testing.assert_array_equal(out, reversed_in_quadrants)

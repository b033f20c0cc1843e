"""Shared HBM at LNC=2 (`kernel[nl.nc(2)]`): a kernel's outputs and its `nl.shared_hbm` tensors are one
HBM tensor that both physical cores read and write, ordered by `nisa.core_barrier` ("both cores can
perform the write to data in HBM using nisa.dma_copy, and then signal to each other when the write
operation is complete using nisa.core_barrier", nki.isa.core_barrier); `nl.private_hbm` stays per core.
Each property is checked on the fast path and the reference path (the same records and values) and in
timing-only mode (the same records as full mode)."""
import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab import config
from trnlab.hardware.errors import UninitializedReadError

ROWS = 128                                                          # rows per core


@nki.jit
def scale_halves(x):
    """x [2 * 128, 64]: core c writes out[c's rows] = 2 * x[c's rows]; no barrier (disjoint halves)."""
    core = nl.program_id(0)
    rows = nl.ds(core * ROWS, ROWS)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out[rows, :], value=nl.multiply(nl.load(x[rows, :]), 2.0))   # [128 partitions, 64]
    return out


@nki.jit
def zero_fill_then_accumulate(x, barrier: bool = True):
    """Both cores zero-fill the whole output, meet at a core_barrier, then each adds x to its own rows:
    the zeros of the later core must not cover the earlier core's rows."""
    core = nl.program_id(0)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    zeros = nl.zeros((ROWS, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    for half in nl.affine_range(2):
        nl.store(out[nl.ds(half * ROWS, ROWS), :], value=zeros)
    if barrier:
        nisa.core_barrier(out, (0, 1))
    rows = nl.ds(core * ROWS, ROWS)
    nl.store(out[rows, :], value=nl.add(nl.load(out[rows, :]), nl.load(x[rows, :])))
    return out


@nki.jit
def swap_through_shared(x, extra: int = 0):
    """Each core writes exp(its rows) into a kernel-internal shared_hbm tensor, meets the peer at a
    core_barrier and copies the peer's rows to its own rows of the output (core 1 arrives later)."""
    core = nl.program_id(0)
    mine, theirs = nl.ds(core * ROWS, ROWS), nl.ds((1 - core) * ROWS, ROWS)
    scratch = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    tile = nl.exp(nl.load(x[mine, :]))
    for _ in range(1 + extra * core):
        nl.store(scratch[mine, :], value=tile)
    nisa.core_barrier(scratch, (0, 1))
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out[mine, :], value=nl.load(scratch[theirs, :]))
    return out


@nki.jit
def private_scratch(x):
    """Each core writes its own rows of x, times (core + 1), into the whole of a private_hbm scratch
    (one per core: no race) and reads it back into its rows of the output."""
    core = nl.program_id(0)
    rows = nl.ds(core * ROWS, ROWS)
    scratch = nl.ndarray((ROWS, x.shape[1]), dtype=x.dtype, buffer=nl.private_hbm)
    nl.store(scratch, value=nl.multiply(nl.load(x[rows, :]), core + 1.0))
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out[rows, :], value=nl.load(scratch))
    return out


@nki.jit
def read_unwritten_peer_rows(x):
    """Each core writes its rows of a shared tensor [3 * 128, 64], meets the peer, and reads the last
    128 rows, which nobody wrote."""
    core = nl.program_id(0)
    scratch = nl.ndarray((3 * ROWS, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(scratch[nl.ds(core * ROWS, ROWS), :], value=nl.load(x[nl.ds(core * ROWS, ROWS), :]))
    nisa.core_barrier(scratch, (0, 1))
    out = nl.ndarray((ROWS, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(scratch[nl.ds(2 * ROWS, ROWS), :]))
    return out


def _x(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((2 * ROWS, 64)).astype(np.float32)


def _records(run) -> list:
    return [list(r.core.timeline.records[r.first:r.end]) for r in run.launch.runs]


def _both_paths(kernel, *args, **kwargs):
    """{fast: run} of the kernel at nl.nc(2), fast path and reference path; their records and values agree."""
    runs = {}
    for fast in (True, False):
        with config.override(fast=fast):
            runs[fast] = nki.run(kernel[nl.nc(2)], *args, **kwargs)
    assert _records(runs[True]) == _records(runs[False])
    np.testing.assert_array_equal(runs[True].outputs, runs[False].outputs)
    timing = nki.run(kernel[nl.nc(2)], *args, timing_only=True, **kwargs)
    assert [[r[:10] for r in recs] for recs in _records(timing)] == \
        [[r[:10] for r in recs] for recs in _records(runs[True])]
    return runs


def test_two_cores_write_disjoint_halves_of_one_output():
    x = _x()
    runs = _both_paths(scale_halves, x)
    np.testing.assert_array_equal(runs[True].outputs, 2 * x)


def test_zero_fill_on_both_cores_then_barrier_keeps_each_cores_rows():
    x = _x(1)
    runs = _both_paths(zero_fill_then_accumulate, x)
    np.testing.assert_array_equal(runs[True].outputs, x)     # 0 + x on every row: no core's zeros win late


def test_data_passes_between_the_cores_through_shared_hbm_behind_a_barrier():
    x = _x(2)
    runs = _both_paths(swap_through_shared, x, extra=6)
    e = np.exp(x)
    np.testing.assert_allclose(runs[True].outputs, np.concatenate([e[ROWS:], e[:ROWS]]), rtol=1e-6)
    (b0,), (b1,) = [[r for r in recs if r[1] == "core_barrier"] for recs in _records(runs[True])]
    for core, barrier in ((0, b0), (1, b1)):
        recs = _records(runs[True])[core]
        peer = _records(runs[True])[1 - core]
        peer_stores = [r for r in peer if r[1] == "dma_copy" and r[3] <= (b0 if core else b1)[2]]
        after = [r for r in recs if r[2] >= barrier[3]]                # the core's reads after the barrier
        assert after and min(r[2] for r in after) >= max(r[3] for r in peer_stores)


def test_private_hbm_stays_one_tensor_per_core():
    x = _x(3)
    runs = _both_paths(private_scratch, x)
    np.testing.assert_array_equal(runs[True].outputs, np.concatenate([x[:ROWS], 2 * x[ROWS:]]))


def test_a_row_nobody_wrote_is_still_an_uninitialized_read():
    with pytest.raises(UninitializedReadError, match="never written"):
        nki.run(read_unwritten_peer_rows[nl.nc(2)], _x(4))


@pytest.mark.parametrize("late", [0, 1])
def test_without_a_barrier_the_write_that_ends_later_wins(late):
    """No barrier between the zero-fill and the accumulation: core `late` issues extra work first, so its
    zero-fill ends after the other core's accumulated rows are written (the zeros win there), while the
    other core's zero-fill of the late core's rows ends before the late core accumulates (x wins)."""
    x = _x(5)
    runs = _both_paths(zero_fill_late, x, late=late)
    early = 1 - late
    expect = np.array(x)
    expect[early * ROWS:(early + 1) * ROWS] = 0.0
    np.testing.assert_array_equal(runs[True].outputs, expect)


@nki.jit
def zero_fill_late(x, late: int = 1):
    """Core `late` loads x 40 times before its zero-fill; the other core zero-fills and accumulates at once."""
    core = nl.program_id(0)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    zeros = nl.zeros((ROWS, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    busy = nl.load(x[0:ROWS, :])
    for _ in range(40 * (core == late)):
        busy = nl.add(busy, nl.load(x[0:ROWS, :]))
    zeros = nl.add(zeros, nl.multiply(busy, 0.0))                # the zero-fill waits for the busy work
    for half in nl.affine_range(2):
        nl.store(out[nl.ds(half * ROWS, ROWS), :], value=zeros)
    rows = nl.ds(core * ROWS, ROWS)
    nl.store(out[rows, :], value=nl.add(nl.load(out[rows, :]), nl.load(x[rows, :])))
    return out


def test_only_launches_whose_cores_may_write_the_same_elements_are_timed():
    """Disjoint halves keep the fast path (nothing to time); a zero-fill of the whole output by both
    cores does not (its writes are timed on the reference path)."""
    from trnlab.hardware.device import _shared_buffers
    from trnlab.hardware.shared_hbm import disjoint_writes
    for kernel, disjoint in ((scale_halves, True), (swap_through_shared, True), (zero_fill_then_accumulate, False)):
        programs = nki.run(kernel[nl.nc(2)], _x(), timing_only=True).programs
        assert disjoint_writes(programs, _shared_buffers(programs)) is disjoint


@nki.jit
def scale_in_tiles(x):
    """Core c scales its rows of x in 8 tiles of 16 rows each, through a loop the trace stamps."""
    core = nl.program_id(0)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(8):
        rows = nl.ds(core * ROWS + t * 16, 16)
        nl.store(out[rows, :], value=nl.multiply(nl.load(x[rows, :]), 3.0))   # [16 partitions, 64]
    return out


def test_a_loop_of_a_shared_hbm_kernel_is_still_stamped():
    """The buffer table's `shared` flag is a field loop stamping carries (a buffer with a field it does not
    know would make every loop trace concretely: the same program, much slower)."""
    from trnlab.nki import loops
    x = _x(6)
    with config.override(fast=True):
        np.testing.assert_array_equal(nki.run(scale_in_tiles[nl.nc(2)], x).outputs, 3 * x)
    assert loops.fallbacks == []


@pytest.mark.parametrize("name", ["tile", "tile3"])
def test_loop_stamping_counts_every_field_of_a_buffer(name):
    """A stamped buffer's builder reads as many constants and integers as flattening it wrote (the
    `shared` field included; one short, every loop allocating tiles fell back to a concrete trace)."""
    from trnlab.hardware.program import Buffer
    from trnlab.nki import loop_records
    buffer = Buffer(id=7, name=name, memory="hbm", shape=(4, 8), dtype="float32", shared=True)
    ints, consts = [], []
    node = loop_records._buffer_node(buffer, ints, consts)
    assert (len(ints), len(consts)) == (loop_records._ints(node), loop_records._nconsts(node))


@nki.jit
def core0_scratch(x):
    """Only core 0 allocates a shared scratch (under `if`): it stays core 0's; the output is shared."""
    core = nl.program_id(0)
    rows = nl.ds(core * ROWS, ROWS)
    tile = nl.load(x[rows, :])
    if core == 0:
        scratch = nl.ndarray((ROWS, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(scratch, value=tile)
        tile = nl.load(scratch)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out[rows, :], value=nl.negative(tile))
    return out


def test_shared_tensors_only_one_core_allocates_stay_its_own():
    x = _x(7)
    runs = _both_paths(core0_scratch, x)
    np.testing.assert_array_equal(runs[True].outputs, -x)

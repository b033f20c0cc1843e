"""nisa.sendrecv and nisa.core_barrier between the two physical cores of one LNC2 launch
(`nki.cpu_simulate(kernel)[2]`, `kernel[nl.nc(2)]`): the two programs run together on one device,
the Nth sendrecv of core 0 meeting the Nth of core 1 in program order, each waiting for the other
[nki.isa.sendrecv: the cores of a logical core exchange SBUF tiles]."""
import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab import config


@nki.jit
def swap_and_sum(x, extra_loads: int = 0):
    """x [2 * 128, 64]: core c owns rows c*128 ... ; out[c's rows] = c's tile + the peer's tile."""
    core = nl.program_id(0)
    rows = nl.ds(core * 128, 128)
    mine = nl.load(x[rows, :])                                   # [128 partitions, 64]
    for _ in range(extra_loads * core):                          # core 1 arrives later
        mine = nl.add(mine, nl.load(x[rows, :]))
        mine = nl.subtract(mine, nl.load(x[rows, :]))
    theirs = nl.ndarray(mine.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - core, recv_from_rank=1 - core, pipe_id=0)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out[rows, :], value=nl.add(mine, theirs))
    return out


def _records(run) -> list:
    return [list(r.core.timeline.records[r.first:r.end]) for r in run.launch.runs]


def test_lnc2_sendrecv_swaps_tiles_and_the_cores_sum_them():
    x = np.random.default_rng(0).standard_normal((256, 64)).astype(np.float32)
    both = x[:128] + x[128:]                                     # what each core computes, in NumPy
    np.testing.assert_allclose(nki.cpu_simulate(swap_and_sum)[2](x), np.concatenate([both, both]), rtol=1e-6)
    np.testing.assert_allclose(swap_and_sum[nl.nc(2)](x, extra_loads=2), np.concatenate([both, both]), rtol=1e-6)


def test_lnc2_sendrecv_waits_for_the_peer_and_fast_matches_reference():
    x = np.random.default_rng(1).standard_normal((256, 64)).astype(np.float32)
    runs = {}
    for fast in (True, False):
        with config.override(fast=fast):
            runs[fast] = nki.run(swap_and_sum[nl.nc(2)], x, extra_loads=8)
    assert _records(runs[True]) == _records(runs[False])
    np.testing.assert_array_equal(runs[True].outputs, runs[False].outputs)
    run = runs[True]
    (s0,), (s1,) = [[r for r in recs if r[1] == "sendrecv"] for recs in _records(run)]
    for mine, peer in ((s0, s1), (s1, s0)):                      # record: (engine, opcode, start, end, ...)
        assert mine[3] >= peer[2]                                # ends no earlier than the peer's starts
    first_load_1 = min(r[2] for r in _records(run)[1])
    assert s0[2] > first_load_1 and s0[2] == s1[2]               # core 0 waited for the later core 1


@nki.jit
def barrier_then_read(x):
    """Each core writes its half of a shared tensor, meets the peer at a core_barrier, reads it whole."""
    core = nl.program_id(0)
    shared = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    mine = nl.load(x[nl.ds(core * 128, 128), :])
    for _ in range(1 + 8 * core):                                # core 1 reaches the barrier later
        nl.store(shared[nl.ds(core * 128, 128), :], value=mine)
    nisa.core_barrier(shared, (0, 1))
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out[nl.ds(core * 128, 128), :], value=nl.load(x[nl.ds(core * 128, 128), :]))
    return out


def test_lnc2_core_barrier_meets_the_peer_core():
    x = np.ones((256, 64), np.float32)
    run = nki.run(barrier_then_read[nl.nc(2)], x)
    (b0,), (b1,) = [[r for r in recs if r[1] == "core_barrier"] for recs in _records(run)]
    last_store_1 = max(r[3] for r in _records(run)[1] if r[2] < b1[2])
    assert b0[2] == b1[2] >= last_store_1                        # both start when the later core arrives
    np.testing.assert_array_equal(run.outputs, x)


@nki.jit
def padded_max_exchange(x, store_padding: bool = False):
    """x [2 * 20, 8]: each core's 20 rows' maxima in a tile padded to 32 partitions (an extended
    instruction wants multiples of 16), exchanged whole; only the 20 written rows are used."""
    core = nl.program_id(0)
    rows = nl.ds(core * 20, 20)
    tile = nl.ndarray((20, 8), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x[rows, :])
    both = nl.ndarray((32, 2), dtype=x.dtype, buffer=nl.sbuf)      # rows 20..31: never written
    nisa.tensor_reduce(dst=both[0:20, 0:1], op=nl.maximum, data=tile, axis=1, keepdims=True)
    nisa.sendrecv(src=both[:, 0:1], dst=both[:, 1:2], send_to_rank=1 - core, recv_from_rank=1 - core, pipe_id=0)
    best = nl.ndarray((32, 1), dtype=x.dtype, buffer=nl.sbuf)
    used = 32 if store_padding else 20
    nisa.tensor_reduce(dst=best[0:used], op=nl.maximum, data=both[0:used, :], axis=1, keepdims=True)
    out = nl.ndarray((2 * used, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[nl.ds(core * used, used), :], src=best[0:used])
    return out


def test_lnc2_sendrecv_moves_never_written_padding_as_garbage_and_only_a_store_of_it_fails():
    # the exchange is a DMA between the cores' SBUFs: like a dma_copy within the chip it carries the
    # padding partitions' garbage along; storing the padding to HBM is the error, naming its origin
    x = np.random.default_rng(2).standard_normal((40, 8)).astype(np.float32)
    both = np.maximum(x[:20].max(axis=1), x[20:].max(axis=1))[:, None]
    np.testing.assert_array_equal(nki.run(padded_max_exchange[nl.nc(2)], x).outputs, np.concatenate([both, both]))
    with pytest.raises(Exception, match=r"uninitialized read: .*garbage.*sendrecv from core"):
        nki.run(padded_max_exchange[nl.nc(2)], x, store_padding=True)

"""NKI 0.7's synchronisation and DMA-compute names: nisa.core_barrier (waits for this core's writes to the
shared tensor, and on a cluster for the peer core), nisa.sendrecv (the two cores of a pair swap tiles),
nisa.dma_compute (an fp32 sum inside a DMA engine), nisa.dma_engine; values against NumPy, both call
styles, named errors, fast on/off."""
import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab import config
from trnlab.hardware.errors import MemoryPlacementError
from trnlab.hardware.system import GenerationError
from trnlab.nki.errors import NKIError
from trnlab.distributed import topology
from trnlab.distributed.cluster import Cluster
from trnlab.hardware.collective import CollectiveError


def _sum_kernel(style: str, out_dtype=nl.float32):
    @nki.jit
    def kernel(a, b, c):
        out = nl.ndarray(a.shape, dtype=out_dtype, buffer=nl.shared_hbm)
        on_chip = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=on_chip, src=c)
        if style == "keyword":
            nisa.dma_compute(dst=out, srcs=[a, b, on_chip], reduce_op=nl.add, scales=[1.0, 1.0, 1.0])
        elif style == "positional":
            nisa.dma_compute(out, [a, b, on_chip], nl.add)
        else:                                   # the page's other order: (dst, srcs, scales, reduce_op)
            nisa.dma_compute(out, [a, b, on_chip], [1.0, 1.0, 1.0], nl.add)
        return out
    return kernel


@pytest.mark.parametrize("style", ["keyword", "positional", "scales_first"])
def test_dma_compute_adds_its_sources_in_fp32(style):
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal((16, 64)).astype(np.float32) for _ in range(3))
    run = nki.run(_sum_kernel(style), a, b, c)
    np.testing.assert_allclose(run.outputs, a + b + c, rtol=1e-6)
    assert [(r.engine.startswith("dma"), r.opcode) for r in (run.timeline[i] for i in range(len(run.timeline)))] \
        == [(True, "dma_copy"), (True, "dma_compute")]


def test_dma_compute_converts_the_fp32_sum_to_dst(records):
    a = np.full((8, 32), 1.0 + 2 ** -9, np.float32)
    kernel = _sum_kernel("keyword", nl.bfloat16)
    run = nki.run(kernel, a, a, a)
    want = (3 * a).astype(nl.bfloat16)
    np.testing.assert_array_equal(run.outputs, want)
    with config.override(fast=False):
        slow = nki.run(kernel, a, a, a)
    np.testing.assert_array_equal(run.outputs, slow.outputs)
    assert records(run) == records(slow)


def test_dma_compute_rules():
    a = np.zeros((8, 32), np.float32)
    with pytest.raises(GenerationError, match="NeuronCore-v3"):
        nki.run(_sum_kernel("keyword"), a, a, a, target="trn1")

    @nki.jit
    def multiply(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_compute(out, [x, x], nl.multiply)
        return out
    with pytest.raises(NKIError, match="must be nl.add"):
        nki.run(multiply, a)

    @nki.jit
    def to_psum(x):
        p = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.psum)
        nisa.dma_compute(p, [x, x], nl.add)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=p)
        return out
    with pytest.raises(MemoryPlacementError, match="PSUM"):
        nki.run(to_psum, a)


def _barrier_kernel(cores=(0, 1)):
    @nki.jit
    def kernel(x):
        shared = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(shared, value=nl.load(x))
        nisa.core_barrier(shared, cores)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(shared))
        return out
    return kernel


def test_core_barrier_waits_for_the_writes_to_the_shared_tensor():
    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    run = nki.run(_barrier_kernel(), x)
    np.testing.assert_array_equal(run.outputs, x)
    recs = [run.timeline[i] for i in range(len(run.timeline))]
    (barrier,) = [r for r in recs if r.opcode == "core_barrier"]
    store = recs[1]                                     # load, store into shared, barrier, load, store
    assert barrier.engine == "pool" and barrier.start_ns >= store.end_ns


def test_core_barrier_takes_cores_0_and_1_only():
    with pytest.raises(NKIError, match=r"only cores=\(0, 1\)"):
        nki.run(_barrier_kernel((0, 2)), np.zeros((8, 8), np.float32))


def _exchange(x, peer: int):
    t = nl.load(x)
    got = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=t, dst=got, send_to_rank=1 - peer, recv_from_rank=1 - peer, pipe_id=0,
                  dma_engine=nisa.dma_engine.dma)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=got)
    return out


def _cluster_run(kernel, per_rank):
    """Each rank's program (kernel traced with its keyword arguments) on a cluster of len(per_rank) ranks."""
    programs = [nki.trace(nki.jit(kernel), *args, **kwargs) for args, kwargs in per_rank]
    cluster = Cluster(topology.TRN2_48XLARGE, ranks=len(per_rank))
    return cluster, cluster.run(programs, [args for args, _ in per_rank])


def test_sendrecv_swaps_tiles_between_the_two_cores_of_each_pair(records):
    xs = [np.full((4, 8), float(r), np.float32) for r in range(4)]
    cluster, runs = _cluster_run(_exchange, [((x,), {"peer": r % 2}) for r, x in enumerate(xs)])
    assert [run.outputs[0, 0] for run in runs] == [1.0, 0.0, 3.0, 2.0]
    assert [row["ranks"] for row in cluster.log] == [[0, 1], [2, 3]]
    with config.override(fast=False):
        _, slow = _cluster_run(_exchange, [((x,), {"peer": r % 2}) for r, x in enumerate(xs)])
    assert all(records(a) == records(b) for a, b in zip(runs, slow))


def test_sendrecv_needs_its_peer_and_its_rules():
    x = np.zeros((4, 8), np.float32)
    with pytest.raises(CollectiveError, match="belongs to no cluster"):
        nki.run(nki.jit(_exchange), x, peer=0)
    with pytest.raises(CollectiveError, match="NeuronCore-v3"):
        nki.run(nki.jit(_exchange), x, peer=0, target="trn1")

    def both_send_to_one(x, peer):
        t = nl.load(x)
        got = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.sendrecv(t, got, 1, 1 - peer, 0)
        return x
    with pytest.raises(CollectiveError, match="receives from core"):
        _cluster_run(both_send_to_one, [((x,), {"peer": 0}), ((x,), {"peer": 1})])
    assert [m.name for m in nisa.dma_engine] == ["dma", "gpsimd_dma"]


def _slow_writer(x, stores: int):
    shared = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    for _ in range(stores):
        nl.store(shared, value=t)
    nisa.core_barrier(shared, (0, 1))
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(shared))
    return out


def test_core_barrier_waits_for_the_peer_core_of_the_pair():
    x = np.ones((128, 512), np.float32)
    cluster, runs = _cluster_run(_slow_writer, [((x,), {"stores": 1}), ((x,), {"stores": 20})])
    barriers = [[r for r in cluster.core(k).timeline.records if r[1] == "core_barrier"][0] for k in range(2)]
    last_store_of_the_slow_core = max(r[3] for r in cluster.core(1).timeline.records
                                      if r[1] == "dma_copy" and r[3] <= barriers[1][2])
    assert barriers[0][2] == barriers[1][2] > last_store_of_the_slow_core     # both start after the slow core
    for k in range(2):                                # the loads after the barrier wait for it
        after = [r for r in cluster.core(k).timeline.records if r[2] >= barriers[k][3]]
        assert len(after) == 2

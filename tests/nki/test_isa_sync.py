"""NKI 0.7's synchronisation and DMA-compute names: nisa.core_barrier (waits for this core's writes to the
shared tensor), nisa.dma_compute (an fp32 sum inside a DMA engine), nisa.dma_engine, and nisa.sendrecv
refused by name; values against NumPy, both call styles, named errors, fast on/off."""
import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab import config
from trnlab.hardware.errors import MemoryPlacementError
from trnlab.hardware.system import GenerationError
from trnlab.nki.errors import NKIError
from trnlab.nki.isa_sync import NotSimulatedError


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


def test_sendrecv_is_refused_by_name_and_dma_engine_has_aws_members():
    @nki.jit
    def kernel(x):
        t = nl.load(x)
        d = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.sendrecv(src=t, dst=d, send_to_rank=1, recv_from_rank=1, pipe_id=0,
                      dma_engine=nisa.dma_engine.gpsimd_dma)
        return x
    with pytest.raises(NotSimulatedError, match="sendrecv is not simulated"):
        nki.run(kernel, np.zeros((8, 8), np.float32))
    assert [m.name for m in nisa.dma_engine] == ["dma", "gpsimd_dma"]

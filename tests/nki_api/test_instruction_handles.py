"""nki.isa.NkiInstruction (NKI 0.7, awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/nki/api/generated/
nki.isa.NkiInstruction.html): a destination-style nki.isa call returns a handle; ``c.depends_on(p, kind=...)``
returns c and puts c after p — a schedule edge constrains the list schedule, a runtime edge is honoured
where the replay waits and refused by name where it cannot; the same timeline with TRNLAB_FAST=0."""
import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab import config
from trnlab.nki.instruction_handles import DependencyError

BIG, SMALL = np.full((128, 2048), 2.0, np.float32), np.ones((128, 8), np.float32)


def two_adds(edge=None, kind=nisa.dependency.schedule, loop=1):
    """A late reciprocal (its input is the big load) and an early add; `edge` puts the add after it."""
    def kernel(big, small):
        out1 = nl.ndarray(big.shape, big.dtype, buffer=nl.shared_hbm)
        out2 = nl.ndarray(small.shape, small.dtype, buffer=nl.shared_hbm)
        for _ in nl.sequential_range(loop):
            y = nl.ndarray(small.shape, small.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=y, src=small)
            x = nl.ndarray(big.shape, big.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=x, src=big)
            a = nl.ndarray(big.shape, big.dtype, buffer=nl.sbuf)
            b = nl.ndarray(small.shape, small.dtype, buffer=nl.sbuf)
            recip = nisa.reciprocal(dst=a, data=x)
            plus1 = nisa.tensor_scalar(dst=b, data=y, op0=nl.add, operand0=1.0)
            if edge == "plus1 after recip":
                assert plus1.depends_on(recip, kind=kind) is plus1
            elif edge == "recip after plus1":
                recip.depends_on(plus1, kind=kind)
            store = nisa.dma_copy(dst=out2, src=b)
            if edge == "store after recip":
                store.depends_on(recip, kind=kind)
            nisa.dma_copy(dst=out1, src=a)
        return out1, out2
    return nki.jit(kernel)


def _vector_order(run):
    recs = sorted((run.timeline[i] for i in range(len(run.timeline)) if run.timeline[i].engine == "dve"),
                  key=lambda r: r.start_ns)
    return ["recip" if r.sbuf_bytes > 100_000 else "plus1" for r in recs]


def test_destination_style_calls_return_handles_and_functional_calls_their_tile():
    seen = {}

    def kernel(x):
        t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        seen["copy"] = nisa.dma_copy(dst=t, src=x)
        seen["functional"] = nisa.reciprocal(t)
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=seen["functional"])
        return out
    nki.run(nki.jit(kernel), SMALL)
    assert isinstance(seen["copy"], nisa.NkiInstruction) and len(seen["copy"].instructions) == 1
    assert not isinstance(seen["functional"], nisa.NkiInstruction)


@pytest.mark.parametrize("kind", [nisa.dependency.schedule, nisa.dependency.runtime])
def test_depends_on_puts_its_consumer_after_its_producer(kind, records):
    assert _vector_order(nki.run(two_adds(), BIG, SMALL)) == ["plus1", "recip"]     # the ready one first
    run = nki.run(two_adds("plus1 after recip", kind), BIG, SMALL)                 # one engine: runtime holds
    assert _vector_order(run) == ["recip", "plus1"]
    np.testing.assert_allclose(run.outputs[0], 0.5)
    np.testing.assert_allclose(run.outputs[1], 2.0)
    with config.override(fast=False):
        assert records(nki.run(two_adds("plus1 after recip", kind), BIG, SMALL)) == records(run)


def test_edges_in_a_loop_hold_in_every_iteration_fast_on_and_off(records):
    run = nki.run(two_adds("plus1 after recip", loop=3), BIG, SMALL)
    assert _vector_order(run) == ["recip", "plus1"] * 3
    with config.override(fast=False):
        assert records(nki.run(two_adds("plus1 after recip", loop=3), BIG, SMALL)) == records(run)


def test_a_runtime_edge_across_engines_without_shared_data_is_refused_a_schedule_edge_is_not():
    with pytest.raises(DependencyError, match="semaphore"):
        nki.run(two_adds("store after recip", nisa.dependency.runtime), BIG, SMALL)
    run = nki.run(two_adds("store after recip", nisa.dependency.schedule), BIG, SMALL)
    np.testing.assert_allclose(run.outputs[1], 2.0)


def test_an_edge_against_the_kernels_order_is_refused():
    with pytest.raises(DependencyError, match="comes before its producer"):
        nki.run(two_adds("recip after plus1"), BIG, SMALL)


def test_depends_on_without_kind_is_deprecated_and_taken_as_runtime():
    with pytest.warns(DeprecationWarning, match="kind="):
        run = nki.run(two_adds("plus1 after recip", kind=None), BIG, SMALL)
    assert _vector_order(run) == ["recip", "plus1"]

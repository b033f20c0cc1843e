"""kernel.with_schedule(edges) (NKI 0.7, AWS's "How to Use the NKI Scheduling APIs"): an edge between
named instructions constrains the list schedule's order; unknown names and edges against the kernel's
order are refused by name; the same timeline with TRNLAB_FAST=0."""
import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab import config
from trnlab.nki.errors import NKIError


@nki.jit
def two_adds(big, small):
    y = nl.ndarray(small.shape, small.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=y, src=small)
    x = nl.ndarray(big.shape, big.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=big)
    a = nl.ndarray(big.shape, big.dtype, buffer=nl.sbuf)
    b = nl.ndarray(small.shape, small.dtype, buffer=nl.sbuf)
    nisa.reciprocal(dst=a, data=x, name="recip")                              # its input arrives late
    nisa.tensor_scalar(dst=b, data=y, op0=nl.add, operand0=1.0, name="plus1")  # its input early
    out1 = nl.ndarray(big.shape, big.dtype, buffer=nl.shared_hbm)
    out2 = nl.ndarray(small.shape, small.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out1, src=a)
    nisa.dma_copy(dst=out2, src=b)
    return out1, out2


BIG, SMALL = np.full((128, 2048), 2.0, np.float32), np.ones((128, 8), np.float32)


def _vector_order(run):
    """The Vector engine's instructions in issue order, by their SBUF bytes (big: recip, small: plus1)."""
    recs = sorted((run.timeline[i] for i in range(len(run.timeline)) if run.timeline[i].engine == "dve"),
                  key=lambda r: r.start_ns)
    return ["recip" if r.sbuf_bytes > 100_000 else "plus1" for r in recs]


def test_without_edges_the_list_schedule_runs_the_ready_instruction_first():
    assert _vector_order(nki.run(two_adds, BIG, SMALL)) == ["plus1", "recip"]


@pytest.mark.parametrize("edges", [[("plus1", "recip")], [("plus1", ["recip"])]])
def test_an_edge_puts_its_consumer_after_its_producer(edges, records):
    scheduled = two_adds.with_schedule(edges)
    run = nki.run(scheduled, BIG, SMALL)
    assert _vector_order(run) == ["recip", "plus1"]
    np.testing.assert_allclose(run.outputs[0], 0.5)
    np.testing.assert_allclose(run.outputs[1], 2.0)
    with config.override(fast=False):
        assert records(nki.run(scheduled, BIG, SMALL)) == records(run)
    assert _vector_order(nki.run(two_adds, BIG, SMALL)) == ["plus1", "recip"]   # the kernel itself unchanged


def test_an_edge_naming_no_instruction_is_refused():
    with pytest.raises(NKIError, match="no instruction of the kernel is named 'nope'"):
        nki.run(two_adds.with_schedule([("plus1", "nope")]), BIG, SMALL)


def test_an_edge_against_the_kernels_order_is_refused():
    with pytest.raises(NKIError, match="comes before 'plus1'"):
        nki.run(two_adds.with_schedule([("recip", "plus1")]), BIG, SMALL)


def test_edges_are_pairs_of_names():
    with pytest.raises(NKIError, match="each edge is a pair"):
        two_adds.with_schedule([("plus1",)])

"""nki.collectives.collective_permute_implicit_current_processing_rank_id (NKI 0.7): in ring iteration i
of an implicit ring permute, the rank whose data a rank holds — its own at iteration 0, then its
predecessors' in turn — as a register known when the program runs. Checked against the data the ring
permutes actually move, on a cluster of ranks, fast on and off."""
import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.collectives as ncc
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab import config
from trnlab.distributed import topology
from trnlab.distributed.cluster import Cluster
from trnlab.nki.errors import NKIError
from trnlab.nki.isa_registers import RegisterValueError

RANKS = 4


def run_on(kernel, per_rank_args, ranks=RANKS):
    program = nki.trace(nki.jit(kernel), *per_rank_args[0])
    cluster = Cluster(topology.TRN2_48XLARGE, ranks=ranks)
    return cluster.run(program, [tuple(a) for a in per_rank_args])


def ring_steps(groups):
    """Each rank's data goes around its rank list; row i of `held` is the data held after i steps and row i
    of `ids` the processing rank id of iteration i."""
    steps = max(len(g) for g in groups)

    def kernel(x):
        held = nl.ndarray((steps, 1), dtype=x.dtype, buffer=nl.shared_hbm)
        ids = nl.ndarray((steps, 1), dtype=nl.int32, buffer=nl.shared_hbm)
        buffers = [x] + [nl.ndarray((1, 1), dtype=x.dtype, buffer=nl.shared_hbm) for _ in range(steps - 1)]
        for i in range(steps):
            if i:
                ncc.collective_permute_implicit(srcs_by_channel=[[buffers[i - 1]]], dsts_by_channel=[[buffers[i]]],
                                                replica_group=ncc.ReplicaGroup(groups))
            nisa.dma_copy(dst=held[i:i + 1, :], src=buffers[i])
            nisa.register_store(ids[i:i + 1, :], ncc.collective_permute_implicit_current_processing_rank_id(
                iteration_id=i, replica_group=ncc.ReplicaGroup(groups), channel_id=0))
        return held, ids
    return kernel


@pytest.mark.parametrize("groups", [[[0, 1, 2, 3]], [[0, 2], [1, 3]], [[3, 1, 0, 2]]])
@pytest.mark.parametrize("fast", [True, False])
def test_processing_rank_id_names_the_rank_whose_data_the_ring_brought(groups, fast):
    data = [np.full((1, 1), 10.0 * (r + 1), np.float32) for r in range(RANKS)]
    with config.override(fast=fast):
        runs = run_on(ring_steps(groups), [(d,) for d in data])
    for r, run in enumerate(runs):
        held, ids = run.outputs
        group = next(g for g in groups if r in g)
        for i in range(len(group)):
            expected = group[(group.index(r) - i) % len(group)]      # own at 0, then the predecessors'
            assert int(ids[i, 0]) == expected
            assert held[i, 0] == data[int(ids[i, 0])][0, 0]           # the register names the data's owner


def test_processing_rank_id_is_known_only_at_run_time_and_counts_from_zero():
    def bounded(x):                      # a loop the device runs, as many times as the register says
        out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        count = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=count, value=0.0)
        nl.fori_loop(0, ncc.collective_permute_implicit_current_processing_rank_id(1, ncc.ReplicaGroup([[0, 1]])),
                     lambda i: nisa.tensor_scalar(dst=count, data=count, op0=nl.add, operand0=1.0))
        nisa.dma_copy(dst=out, src=count)
        return out
    x = np.zeros((1, 1), np.float32)
    # rank 0 of the ring [0, 1] holds its predecessor's (rank 1's) data after one step
    assert nki.run(nki.jit(bounded), x).outputs[0, 0] == 1
    with pytest.raises(RegisterValueError, match="ring iteration 1"):   # Python cannot branch on it
        nki.run(nki.jit(lambda x: x if ncc.collective_permute_implicit_current_processing_rank_id(
            1, ncc.ReplicaGroup([[0, 1]])) else x), x)

    def negative(x):
        ncc.collective_permute_implicit_current_processing_rank_id(-1, ncc.ReplicaGroup([[0, 1]]))
        return x
    with pytest.raises(NKIError, match="counts ring steps from 0"):
        nki.run(nki.jit(negative), x)


def ring_all_gather(x):
    """Each rank's [1, 8] chunk goes around the ring; in iteration i the chunk held is written into row
    `processing rank id` of the result through ``.ap(scalar_offset=register)`` (AWS's documented use)."""
    group = ncc.ReplicaGroup([list(range(RANKS))])
    result = nl.ndarray((RANKS, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    held = x
    for i in range(RANKS):
        if i:
            received = nl.ndarray((1, 8), dtype=x.dtype, buffer=nl.shared_hbm)
            ncc.collective_permute_implicit(srcs_by_channel=[[held]], dsts_by_channel=[[received]],
                                            replica_group=group)
            held = received
        owner = ncc.collective_permute_implicit_current_processing_rank_id(iteration_id=i, replica_group=group)
        nisa.dma_copy(dst=result.ap([[8, 1], [1, 8]], scalar_offset=owner, indirect_dim=0), src=held)
    return result


@pytest.mark.parametrize("fast", [True, False])
def test_a_ring_all_gather_places_each_chunk_by_the_processing_rank_register(fast):
    chunks = [np.full((1, 8), float(r), np.float32) + np.arange(8, dtype=np.float32) for r in range(RANKS)]
    with config.override(fast=fast):
        runs = run_on(ring_all_gather, [(c,) for c in chunks])
    for run in runs:
        np.testing.assert_array_equal(run.outputs, np.concatenate(chunks))

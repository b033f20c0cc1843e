"""NKI 0.7's fixed-size all-to-all (nki.collectives.all_to_all) and the implicit ring permute with a
reduction (collective_permute_implicit_reduce), on a cluster of ranks: values against NumPy, the named
errors, the timelines with the fast paths on and off."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
import trnlab.nki.collectives as ncc
import trnlab.nki.language as nl
from trnlab import config
from trnlab.distributed import topology
from trnlab.distributed.cluster import Cluster
from trnlab.hardware.collective import CollectiveError

RANKS = 4
GROUP = [list(range(RANKS))]


def run_on(kernel, per_rank_args, ranks=RANKS, **kwargs):
    program = nki.trace(nki.jit(kernel), *per_rank_args[0], **kwargs)
    cluster = Cluster(topology.TRN2_48XLARGE, ranks=ranks)
    return cluster, cluster.run(program, [tuple(a) for a in per_rank_args])


def to_all(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ncc.all_to_all(srcs=[x], dsts=[out], replica_group=ncc.ReplicaGroup(GROUP), collective_dim=0)
    return out


@settings(max_examples=5, deadline=None)
@given(rows=st.sampled_from([4, 8, 16]), cols=st.integers(1, 12), seed=st.integers(0, 2**16),
       dtype=st.sampled_from([np.float32, np.int32]))
def test_all_to_all_sends_piece_j_of_each_rank_to_rank_j(rows, cols, seed, dtype):
    rng = np.random.default_rng(seed)
    xs = [rng.integers(-2**30, 2**30, size=(rows, cols)).astype(dtype) for _ in range(RANKS)]
    _, runs = run_on(to_all, [(x,) for x in xs])
    piece = rows // RANKS
    for j, run in enumerate(runs):
        want = np.concatenate([xs[i][j * piece:(j + 1) * piece] for i in range(RANKS)], axis=0)
        np.testing.assert_array_equal(run.outputs, want)            # moved, not computed: int32 exactly


def test_all_to_all_is_one_cc_instruction_and_fast_paths_agree(records):
    xs = [np.full((8, 4), float(r), np.float32) for r in range(RANKS)]
    cluster, runs = run_on(to_all, [(x,) for x in xs])
    assert cluster.log[0]["op"] == "all_to_all"
    with config.override(fast=False):
        _, slow = run_on(to_all, [(x,) for x in xs])
    assert all(records(a) == records(b) for a, b in zip(runs, slow))


def test_all_to_all_needs_dim_0_divisible_by_the_ranks():
    with pytest.raises(CollectiveError, match="divisible by 4"):
        run_on(to_all, [(np.ones((6, 4), np.float32),) for _ in range(RANKS)])


def test_all_to_all_on_sbuf_is_refused():
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        tile = nl.load(x)
        moved = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        ncc.all_to_all([tile], [moved], ncc.ReplicaGroup(GROUP), 0)
        nl.store(out, value=moved)
        return out

    with pytest.raises(CollectiveError, match="all_to_all moves HBM tensors only"):
        run_on(kernel, [(np.ones((8, 4), np.float32),) for _ in range(RANKS)])


def ring_reduce(a, b, op):
    def kernel(a, b):
        out0 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        out1 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ncc.collective_permute_implicit_reduce(srcs0_by_channel=[[a], [b]], srcs1_by_channel=[[b], [b]],
                                               dsts_by_channel=[[out0], [out1]],
                                               replica_group=ncc.ReplicaGroup(GROUP), op=op, channel_ids=[0, 1])
        return out0, out1
    return kernel


@pytest.mark.parametrize("op, reduce", [(nl.add, np.add), (nl.maximum, np.maximum), (nl.minimum, np.minimum)])
def test_permute_implicit_reduce_sends_the_reduction_to_the_next_rank(op, reduce, records):
    rng = np.random.default_rng(3)
    a = [rng.standard_normal((2, 8)).astype(np.float32) for _ in range(RANKS)]
    b = [rng.standard_normal((2, 8)).astype(np.float32) for _ in range(RANKS)]
    cluster, runs = run_on(ring_reduce(a, b, op), list(zip(a, b)))
    for r, run in enumerate(runs):
        prev = (r - 1) % RANKS
        out0, out1 = run.outputs
        np.testing.assert_array_equal(out0, reduce(a[prev], b[prev]))
        np.testing.assert_array_equal(out1, reduce(b[prev], b[prev]))
    engines = {cluster.core(0).timeline.engines[rec[0]] for rec in cluster.core(0).timeline.records
               if rec[1] == "collective_permute_reduce"}
    assert engines == {"cc0", "cc1"}                      # one instruction per channel, on the two CC cores
    with config.override(fast=False):
        _, slow = run_on(ring_reduce(a, b, op), list(zip(a, b)))
    assert all(records(x) == records(y) for x, y in zip(runs, slow))


def test_permute_implicit_reduce_refuses_other_ops_and_mismatched_channels():
    a = [np.ones((2, 8), np.float32)] * RANKS
    with pytest.raises(CollectiveError, match="reduces with one of"):
        run_on(ring_reduce(a, a, nl.multiply), list(zip(a, a)))

    def short(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ncc.collective_permute_implicit_reduce([[a]], [[b], [b]], [[out]], ncc.ReplicaGroup(GROUP), op=nl.add)
        return out

    with pytest.raises(Exception, match="same non-zero length"):
        run_on(short, list(zip(a, a)))


def test_permute_implicit_reduce_on_one_rank_reduces_into_its_own_dst():
    @nki.jit
    def kernel(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ncc.collective_permute_implicit_reduce([[a]], [[b]], [[out]], ncc.ReplicaGroup([[0]]), op=nl.add)
        return out

    a, b = np.arange(8, dtype=np.float32).reshape(1, 8), np.ones((1, 8), np.float32)
    np.testing.assert_array_equal(nki.run(kernel, a, b).outputs, a + b)

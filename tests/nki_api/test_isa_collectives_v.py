"""NKI 0.7's variable-length collectives (nki.collectives.all_gather_v, all_to_all_v: counts read from a
metadata tensor when the program runs) and the implicit ring permute (collective_permute_implicit), on a
cluster of ranks: values against NumPy, named errors, fast on/off."""
import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.collectives as ncc
import trnlab.nki.language as nl
from trnlab import config
from trnlab.distributed import topology
from trnlab.distributed.cluster import Cluster
from trnlab.hardware.collective import CollectiveError
from trnlab.hardware.errors import UninitializedReadError

RANKS = 4
GROUP = [list(range(RANKS))]


def gather_v(x, meta, rdispls=False):
    out = nl.ndarray((RANKS, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    ncc.all_gather_v(srcs=[x], dsts=[out], replica_group=ncc.ReplicaGroup(GROUP), metadata_tensor=meta,
                     recv_counts_known=rdispls, has_rdispls=rdispls)
    return out


def to_all_v(x, meta):
    out = nl.ndarray((RANKS, 4), dtype=x.dtype, buffer=nl.shared_hbm)
    ncc.all_to_all_v([x], [out], ncc.ReplicaGroup(GROUP), meta)          # AWS's positional order
    return out


def ring(x, y):
    out0 = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    out1 = nl.ndarray(y.shape, dtype=y.dtype, buffer=nl.shared_hbm)
    ncc.collective_permute_implicit(srcs_by_channel=[[x], [y]], dsts_by_channel=[[out0], [out1]],
                                    replica_group=ncc.ReplicaGroup(GROUP), channel_ids=[0, 1])
    return out0, out1


def run_on(kernel, per_rank_args, **kwargs):
    program = nki.trace(nki.jit(kernel), *per_rank_args[0], **kwargs)
    cluster = Cluster(topology.TRN2_48XLARGE, ranks=len(per_rank_args))
    return cluster, cluster.run(program, [tuple(a) for a in per_rank_args])


def test_all_gather_v_puts_each_ranks_chunk_in_its_slot():
    xs = [np.arange(16, dtype=np.float32).reshape(2, 8) + 100 * r for r in range(RANKS)]
    metas = [np.array([[8] * RANKS, [r] * RANKS], np.uint32) for r in range(RANKS)]     # 8 from offset r
    cluster, runs = run_on(gather_v, list(zip(xs, metas)))
    want = np.stack([xs[s].reshape(-1)[s:s + 8] for s in range(RANKS)])
    for run in runs:
        np.testing.assert_array_equal(run.outputs, want)
    assert cluster.log[0]["op"] == "all_gather_v"


def test_all_gather_v_with_receive_displacements():
    xs = [np.full((1, 8), float(r), np.float32) for r in range(RANKS)]
    rdispl = [(RANKS - 1 - s) * 8 for s in range(RANKS)]                # slots in reverse order
    metas = [np.array([[8] * RANKS, [0] * RANKS, [8] * RANKS, rdispl], np.uint32) for _ in range(RANKS)]
    _, runs = run_on(gather_v, list(zip(xs, metas)), rdispls=True)
    np.testing.assert_array_equal(runs[2].outputs[:, 0], [3.0, 2.0, 1.0, 0.0])


def test_all_gather_v_elements_no_chunk_reaches_stay_garbage():
    xs = [np.ones((2, 8), np.float32) for _ in range(RANKS)]
    metas = [np.array([[3] * RANKS, [0] * RANKS], np.uint32) for _ in range(RANKS)]     # 3 of 8 per slot
    with pytest.raises(UninitializedReadError, match="no chunk reached"):
        run_on(gather_v, list(zip(xs, metas)))


def test_all_to_all_v_sends_each_destination_its_chunk():
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((1, 16)).astype(np.float32) for _ in range(RANKS)]
    displs = [4 * d for d in range(RANKS)]                                # rank r's chunk for rank d
    metas = [np.array([[4] * RANKS, displs], np.uint32) for _ in range(RANKS)]
    _, runs = run_on(to_all_v, list(zip(xs, metas)))
    for j, run in enumerate(runs):
        want = np.stack([xs[i].reshape(-1)[4 * j:4 * j + 4] for i in range(RANKS)])
        np.testing.assert_array_equal(run.outputs, want)
    short = [np.array([[1 + (r + d) % 4 for d in range(RANKS)], displs], np.uint32) for r in range(RANKS)]
    with pytest.raises(UninitializedReadError):          # short chunks leave garbage that is then read
        run_on(to_all_v, list(zip(xs, short)))


def test_a_receive_count_that_differs_from_the_send_count_is_refused():
    xs = [np.ones((1, 8), np.float32) for _ in range(RANKS)]
    metas = [np.array([[8] * RANKS, [0] * RANKS, [7] * RANKS, [8 * s for s in range(RANKS)]], np.uint32)
             for _ in range(RANKS)]
    with pytest.raises(CollectiveError, match="expects 7 elements"):
        run_on(gather_v, list(zip(xs, metas)), rdispls=True)


def test_the_metadata_is_uint32_with_a_row_per_field():
    xs = [np.ones((1, 8), np.float32) for _ in range(RANKS)]
    with pytest.raises(CollectiveError, match="uint32"):
        run_on(gather_v, [(x, np.zeros((2, RANKS), np.int32)) for x in xs])
    with pytest.raises(CollectiveError, match="needs 4 rows"):
        run_on(gather_v, [(x, np.zeros((2, RANKS), np.uint32)) for x in xs], rdispls=True)


def test_collective_permute_implicit_sends_to_the_next_rank_on_each_channel(records):
    xs = [np.full((2, 4), float(r), np.float32) for r in range(RANKS)]
    ys = [np.full((2, 4), 10.0 + r, np.float32) for r in range(RANKS)]
    cluster, runs = run_on(ring, list(zip(xs, ys)))
    for r, run in enumerate(runs):
        out0, out1 = run.outputs
        assert out0[0, 0] == (r - 1) % RANKS and out1[0, 0] == 10 + (r - 1) % RANKS
    engines = {cluster.core(0).timeline.engines[rec[0]] for rec in cluster.core(0).timeline.records
               if rec[1] == "collective_permute"}
    assert engines == {"cc0", "cc1"}                      # the two channels on the two CC cores
    with config.override(fast=False):
        _, slow = run_on(ring, list(zip(xs, ys)))
    assert all(records(a) == records(b) for a, b in zip(runs, slow))


def test_one_rank_all_gather_v_runs_on_a_lone_core():
    x = np.arange(8, dtype=np.float32).reshape(1, 8)

    @nki.jit
    def kernel(x, meta):
        out = nl.ndarray((1, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        ncc.all_gather_v([x], [out], ncc.ReplicaGroup([[0]]), meta)
        return out
    out = nki.run(kernel, x, np.array([[8], [0]], np.uint32)).outputs
    np.testing.assert_array_equal(out, x)


def test_rank_id_is_a_register_holding_each_ranks_id():
    import trnlab.nki.isa as nisa
    from trnlab.nki.isa_registers import RegisterValueError

    def kernel(x):
        out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
        nisa.register_store(out, ncc.rank_id())
        return out
    x = np.zeros((1, 1), np.float32)
    _, runs = run_on(kernel, [(x,)] * 3)
    assert [int(r.outputs[0, 0]) for r in runs] == [0, 1, 2]
    with config.override(fast=False):
        _, slow = run_on(kernel, [(x,)] * 3)
    assert [int(r.outputs[0, 0]) for r in slow] == [0, 1, 2]
    assert nki.run(nki.jit(kernel), x).outputs[0, 0] == 0                    # a core of no cluster: rank 0

    def bounded(x):                      # a loop the device runs, as many times as the rank says
        import trnlab.nki.isa as nisa
        out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        count = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=count, value=0.0)
        nl.fori_loop(0, ncc.rank_id(), lambda i: nisa.tensor_scalar(dst=count, data=count, op0=nl.add, operand0=1.0))
        nisa.dma_copy(dst=out, src=count)
        return out
    _, runs = run_on(bounded, [(x,)] * 3)
    assert [int(r.outputs[0, 0]) for r in runs] == [0, 1, 2]
    with pytest.raises(RegisterValueError, match="rank id"):          # Python cannot branch on it
        nki.run(nki.jit(lambda x: x if ncc.rank_id() else x), x)

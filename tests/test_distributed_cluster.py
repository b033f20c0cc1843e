"""Collectives as instructions on the CC engines, run by a Cluster of simulated chips."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import trnlab.nki as nki
import trnlab.nki.collectives as ncc
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.distributed import collectives, topology
from trnlab.distributed.cluster import Cluster
from trnlab.distributed.overlap import both_busy_ns, run_overlap_demo
from trnlab.hardware.collective import CollectiveError
from trnlab.hardware.device import Device
from trnlab.hardware.program import Program

TRN2 = topology.TRN2_48XLARGE


def all_reduce_kernel(x, ranks=2):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ncc.all_reduce(srcs=[x], dsts=[out], replica_group=ncc.ReplicaGroup([list(range(ranks))]), op=nl.add)
    return out


def all_gather_kernel(x, ranks=2):
    out = nl.ndarray((x.shape[0] * ranks,) + tuple(x.shape[1:]), dtype=x.dtype, buffer=nl.shared_hbm)
    ncc.all_gather(srcs=[x], dsts=[out], replica_group=ncc.ReplicaGroup([list(range(ranks))]), collective_dim=0)
    return out


def reduce_scatter_kernel(x, ranks=2):
    out = nl.ndarray((x.shape[0] // ranks,) + tuple(x.shape[1:]), dtype=x.dtype, buffer=nl.shared_hbm)
    ncc.reduce_scatter(srcs=[x], dsts=[out], replica_group=ncc.ReplicaGroup([list(range(ranks))]),
                       collective_dim=0, op=nl.add)
    return out


def ring_permute_kernel(x, ranks=2):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ncc.collective_permute(srcs=[x], dsts=[out], source_target_pairs=[(r, (r + 1) % ranks) for r in range(ranks)])
    return out


def busy_then_all_reduce_kernel(w, repeats=1):
    """`repeats` accumulating matmuls w.T @ w on the Tensor engine, then an all-reduce of the result
    over ranks 0 and 1 (the collective reads what the matmuls wrote)."""
    acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
    wt = nl.load(w)                                                     # [128, 512]
    for _ in range(repeats):
        acc += nisa.nc_matmul(wt[:, 0:128], wt)                         # [128, 512]
    y = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.hbm)
    nl.store(y, nl.copy(acc, dtype=nl.float32))
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    ncc.all_reduce(srcs=[y], dsts=[out], replica_group=ncc.ReplicaGroup([[0, 1]]), op=nl.add)
    return out


def run_on(kernel, arrays, topo=TRN2, **kwargs):
    program = nki.trace(nki.jit(kernel), arrays[0], ranks=len(arrays), **kwargs)
    cluster = Cluster(topo, ranks=len(arrays))
    return program, cluster, cluster.run(program, [(a,) for a in arrays])


def test_gradient_all_reduce_overlaps_the_next_layers_backward():
    demo = run_overlap_demo(ranks=2, layers=3, tokens=256)
    assert demo.max_error < 1e-5                       # the summed gradients are right
    t = demo.cluster.core(0).timeline
    reduces = [r for r in t.records if r[1] == "all_reduce"]
    matmuls = [r for r in t.records if r[1] == "nc_matmul"]
    assert {t.engines[r[0]] for r in reduces} == {"cc0"} and {t.engines[r[0]] for r in matmuls} == {"pe"}
    # every layer's all-reduce but the last runs while the Tensor engine computes the next layer's gradient
    for r in reduces[:-1]:
        assert any(m[2] < r[3] and r[2] < m[3] for m in matmuls), f"all-reduce at {r[2]:.0f} ns overlaps no matmul"
    assert demo.overlap_ns > 0 and both_busy_ns(demo.timeline, "rank1 pe", "rank1 cc0") > 0
    # the step (less the runtime's tear-down after its last result) is shorter than compute, then all
    # communication
    spec = demo.cluster.core(0).spec
    assert demo.step_ns - spec.launch_end_ns < max(m[3] for m in matmuls) + demo.collective_ns


def test_collective_is_an_instruction_of_the_program_on_the_cc_engine_and_survives_json():
    x = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)
    program = nki.trace(nki.jit(all_reduce_kernel), x, ranks=2)
    ops = [(i.opcode, i.engine) for i in program.instructions]
    assert ("all_reduce", "cc0") in ops
    loaded = Program.loads(program.dumps())
    runs = Cluster(TRN2, ranks=2).run(loaded, [(x,), (2 * x,)])
    np.testing.assert_array_equal(runs[0].outputs, 3 * x)
    np.testing.assert_array_equal(runs[1].outputs, 3 * x)


@settings(max_examples=12, deadline=None)
@given(ranks=st.sampled_from([2, 4]), rows=st.sampled_from([4, 8, 12]), seed=st.integers(0, 2**16))
def test_all_reduce_all_gather_reduce_scatter_equal_numpy(ranks, rows, seed):
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal((rows * ranks, 8)).astype(np.float32) for _ in range(ranks)]
    total = np.sum(np.stack(xs).astype(np.float64), axis=0)
    _, _, runs = run_on(all_reduce_kernel, xs)
    for r in runs:
        np.testing.assert_allclose(r.outputs, total, rtol=1e-5, atol=1e-5)
    _, _, runs = run_on(reduce_scatter_kernel, xs)
    for i, r in enumerate(runs):
        np.testing.assert_allclose(r.outputs, total[i * rows:(i + 1) * rows], rtol=1e-5, atol=1e-5)
    _, _, runs = run_on(all_gather_kernel, xs)
    for r in runs:
        np.testing.assert_array_equal(r.outputs, np.concatenate(xs))


def test_collective_permute_is_send_recv_around_a_ring():
    xs = [np.full((4, 8), float(r), np.float32) for r in range(4)]
    _, cluster, runs = run_on(ring_permute_kernel, xs)
    for r, run in enumerate(runs):
        np.testing.assert_array_equal(run.outputs, xs[(r - 1) % 4])
    c = collectives.cost("send_recv", xs[0].nbytes, TRN2, ranks=2)
    assert cluster.log[0]["end_ns"] - cluster.log[0]["start_ns"] == pytest.approx(c.time_ns)


def test_collective_time_is_the_topology_cost_and_starts_when_the_last_rank_is_ready():
    w = np.full((128, 512), 0.5, np.float32)
    quick = nki.trace(nki.jit(busy_then_all_reduce_kernel), w, repeats=1)
    slow = nki.trace(nki.jit(busy_then_all_reduce_kernel), w, repeats=40)
    cluster = Cluster(TRN2, ranks=2)
    runs = cluster.run([quick, slow], [(w,), (w,)])
    one = w[:, :128].T @ w
    np.testing.assert_allclose(runs[0].outputs, one + 40 * one, rtol=1e-6)
    (entry,) = cluster.log
    expected = collectives.best_algorithm("all_reduce", 128 * 512 * 4, TRN2, 2)
    assert entry["end_ns"] - entry["start_ns"] == pytest.approx(expected.time_ns)
    starts = [[rec[2] for rec in cluster.core(r).timeline.records if rec[1] == "all_reduce"][0] for r in range(2)]
    matmuls_end = [max(rec[3] for rec in cluster.core(r).timeline.records if rec[1] == "nc_matmul")
                   for r in range(2)]
    assert starts[0] == starts[1] == entry["start_ns"]   # a collective starts together on every rank
    assert starts[0] > matmuls_end[1] > matmuls_end[0]    # after the slow rank's matmuls: the quick one waits


def test_a_rank_that_never_issues_the_collective_fails_clearly_instead_of_hanging():
    x = np.ones((4, 8), np.float32)
    with_collective = nki.trace(nki.jit(all_reduce_kernel), x, ranks=2)
    without = nki.trace(nki.jit(lambda x: x), x)
    with pytest.raises(CollectiveError, match="never met.*rank 0 waits.*ranks \\[1\\] have not issued"):
        Cluster(TRN2, ranks=2).run([with_collective, without], [(x,), (x,)])


def test_ranks_meeting_in_different_collectives_is_an_error():
    a = nki.trace(nki.jit(all_reduce_kernel), np.ones((4, 8), np.float32), ranks=2)
    b = nki.trace(nki.jit(all_reduce_kernel), np.ones((8, 8), np.float32), ranks=2)
    with pytest.raises(CollectiveError, match="different collectives"):
        Cluster(TRN2, ranks=2).run([a, b], [(np.ones((4, 8), np.float32),), (np.ones((8, 8), np.float32),)])


def test_collective_rules_of_nki_collectives():
    x = np.ones((6, 8), np.float32)
    with pytest.raises(CollectiveError, match="divisible"):
        nki.trace(nki.jit(reduce_scatter_kernel), x, ranks=4)

    def psum_kernel(x):
        t = nl.zeros((4, 8), dtype=nl.float32, buffer=nl.psum)
        out = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.sbuf)
        ncc.all_reduce(srcs=[t], dsts=[out], replica_group=[[0, 1]], op=nl.add)
        return x
    with pytest.raises(CollectiveError, match="HBM or both in SBUF"):
        nki.trace(nki.jit(psum_kernel), x)
    with pytest.raises(CollectiveError, match="must not overlap"):
        nki.trace(nki.jit(lambda x: (ncc.all_reduce([x], [x], [[0, 1], [1, 2]], nl.add), x)[1]), x)
    # a program over 2 ranks on a lone device is refused, naming the fix
    program = nki.trace(nki.jit(all_reduce_kernel), x, ranks=2)
    with pytest.raises(CollectiveError, match="Cluster"):
        Device("trn2", cores=1).run(program, x)


def test_cores_of_one_chip_as_ranks():
    chip = topology.chip_cores(topology.presets.TRN1)
    xs = [np.full((4, 8), r + 1.0, np.float32) for r in range(2)]
    _, cluster, runs = run_on(all_reduce_kernel, xs, topo=chip, target="trn1")
    np.testing.assert_array_equal(runs[1].outputs, np.full((4, 8), 3.0, np.float32))
    assert cluster.log[0]["end_ns"] > cluster.log[0]["start_ns"]


def pairwise_all_reduce_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    group = ncc.ReplicaGroup.from_partition_op(4, ncc.rg_partition_op.mod, 2)   # [[0, 2], [1, 3]]
    ncc.all_reduce(srcs=[x], dsts=[out], replica_group=group, op=nl.maximum)
    return out


def test_replica_groups_reduce_independently_within_each_rank_list():
    assert ncc.ReplicaGroup.from_partition_op(8, ncc.rg_partition_op.div, 4).groups == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert ncc.ReplicaGroup.from_partition_op(4, ncc.rg_partition_op.mod, 2).groups == [[0, 2], [1, 3]]
    xs = [np.full((4, 8), float(r), np.float32) for r in range(4)]
    program = nki.trace(nki.jit(pairwise_all_reduce_kernel), xs[0])
    cluster = Cluster(TRN2, ranks=4)
    runs = cluster.run(program, [(x,) for x in xs])
    assert [float(r.outputs[0, 0]) for r in runs] == [2.0, 3.0, 2.0, 3.0]   # max within {0, 2} and {1, 3}
    assert sorted(tuple(e["ranks"]) for e in cluster.log) == [(0, 2), (1, 3)]


def test_timing_mode_cluster_gives_the_same_timeline_as_full_mode():
    # three layers: with two, the DMA issue cost delays the first gradient's copy-out past the second
    # layer's matmuls, and nothing is left to overlap
    full = run_overlap_demo(ranks=2, layers=3, tokens=256, mode="full")
    timing = run_overlap_demo(ranks=2, layers=3, tokens=256, mode="timing")
    strip = lambda t: [r[:10] for r in t.records]   # noqa: E731 (times, bytes, engines; notes aside)
    assert strip(timing.timeline) == strip(full.timeline)
    assert timing.overlap_ns == full.overlap_ns > 0

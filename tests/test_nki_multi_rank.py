"""Multi-rank kernels: one kernel with collectives on every rank at once, each rank its own inputs.

Kernels of our own in AWS's style, written with AWS's module names (the zero-edit hook) and run through
``nki.multi_rank_simulate`` / `trnlab.nki.multi_rank_run` — the entry point the NKI Library harness
stand-in uses (benchmarks/nki_library_plugin.py) — values checked against NumPy.
"""
import numpy as np
import pytest

from trnlab.nki import zero_edit
from trnlab.nki.multi_rank import MultiRankInputError


@pytest.fixture(scope="module")
def aws():
    """AWS's names (nki, nki.language, nki.isa, nki.collectives), served by trnlab."""
    zero_edit.install(force=True)
    import nki
    import nki.collectives as ncc
    import nki.isa as nisa
    import nki.language as nl
    yield nki, nl, nisa, ncc
    zero_edit.uninstall()


def _all_reduce_kernel(aws):
    nki, nl, nisa, ncc = aws

    @nki.jit
    def all_reduce_kernel(x, replica_group):
        src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.private_hbm, name="src")
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=src, src=x)
        ncc.all_reduce(srcs=[src], dsts=[out], replica_group=replica_group, op=nl.add)
        return out
    return all_reduce_kernel


@pytest.mark.parametrize("ranks", [2, 4])
def test_all_reduce_sums_each_ranks_own_input(aws, ranks):
    nki, nl, nisa, ncc = aws
    xs = [np.random.default_rng(r).standard_normal((128, 64)).astype(np.float32) for r in range(ranks)]
    group = ncc.ReplicaGroup([list(range(ranks))])
    outs = nki.multi_rank_simulate(_all_reduce_kernel(aws), world_size=ranks,
                                   per_rank_inputs=[((x, group), {}) for x in xs])
    assert len(outs) == ranks
    for out in outs:
        np.testing.assert_allclose(out, np.sum(xs, axis=0), rtol=1e-5, atol=1e-5)


def test_per_rank_inputs_as_a_mapping_and_replica_groups_reduce_within_each_list(aws):
    nki, nl, nisa, ncc = aws
    xs = {r: np.full((128, 8), float(r + 1), np.float32) for r in range(4)}
    group = ncc.ReplicaGroup([[0, 2], [1, 3]])
    outs = nki.multi_rank_simulate(_all_reduce_kernel(aws), world_size=4,
                                   per_rank_inputs={r: ((), {"x": xs[r], "replica_group": group}) for r in xs})
    assert [float(o[0, 0]) for o in outs] == [4.0, 6.0, 4.0, 6.0]     # 1 + 3 and 2 + 4


def test_lnc2_all_gather_of_sbuf_tiles_along_the_free_dim(aws):
    """Each rank is a logical core of two physical cores (kernel[nl.nc(2)]); core c gathers row tile c of
    every rank's input along dim 1 (SBUF tiles: collective_dim 0 or 1, AWS's all_gather page)."""
    nki, nl, nisa, ncc = aws
    ranks, rows, cols = 2, 256, 32

    @nki.jit
    def gather_columns(x, replica_group):
        out = nl.ndarray((rows, cols * ranks), dtype=x.dtype, buffer=nl.shared_hbm)
        core = nl.program_id(0)
        tile = nl.ndarray((128, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x[core * 128:(core + 1) * 128, 0:cols])
        gathered = nl.ndarray((128, cols * ranks), dtype=x.dtype, buffer=nl.sbuf)
        ncc.all_gather(srcs=[tile], dsts=[gathered], replica_group=replica_group, collective_dim=1)
        nisa.dma_copy(dst=out[core * 128:(core + 1) * 128, 0:cols * ranks], src=gathered)
        return out

    xs = [np.random.default_rng(10 + r).standard_normal((rows, cols)).astype(np.float32) for r in range(ranks)]
    run = nki.multi_rank_run(gather_columns[nl.nc(2)], world_size=ranks,
                             per_rank_inputs=[((x, ncc.ReplicaGroup([[0, 1]])), {}) for x in xs])
    for out in run.outputs:
        np.testing.assert_array_equal(out, np.concatenate(xs, axis=1))
    # the two cores of each rank met the same-numbered core of the other rank: one all_gather per core
    assert sorted((e["core"], tuple(e["ranks"])) for e in run.cluster.log) == [(0, (0, 1)), (1, (0, 1))]


def test_ring_of_collective_permutes_and_sendrecv_between_the_cores_of_a_rank(aws):
    """A ring: every rank sends its input to the next rank (collective_permute, HBM); then inside each
    LNC=2 rank the two physical cores swap halves of what arrived (nisa.sendrecv, SBUF)."""
    nki, nl, nisa, ncc = aws
    ranks = 3

    @nki.jit
    def ring_then_swap(x):
        core = nl.program_id(0)
        src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.private_hbm, name="src")
        received = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.private_hbm, name="received")
        nisa.dma_copy(dst=src, src=x)
        ncc.collective_permute(srcs=[src], dsts=[received],
                               source_target_pairs=[(r, (r + 1) % ranks) for r in range(ranks)])
        mine = nl.ndarray((128, 16), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=mine, src=received[core * 128:(core + 1) * 128, 0:16])
        theirs = nl.ndarray((128, 16), dtype=x.dtype, buffer=nl.sbuf)
        nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - core, recv_from_rank=1 - core)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[core * 128:(core + 1) * 128, 0:16], src=theirs)
        return out

    xs = [np.random.default_rng(20 + r).standard_normal((256, 16)).astype(np.float32) for r in range(ranks)]
    outs = nki.multi_rank_simulate(ring_then_swap[nl.nc(2)], world_size=ranks,
                                   per_rank_inputs=[((x,), {}) for x in xs])
    for r, out in enumerate(outs):
        before = xs[(r - 1) % ranks]                            # what the ring brought to rank r
        np.testing.assert_array_equal(out, np.concatenate([before[128:], before[:128]]))


def test_rank_id_selects_each_ranks_slice(aws):
    nki, nl, nisa, ncc = aws

    @nki.jit
    def my_slice(table):
        _, rows, cols = table.shape
        out = nl.ndarray((rows, cols), dtype=table.dtype, buffer=nl.shared_hbm)
        rank = ncc.rank_id()
        nisa.dma_copy(dst=out, src=table.ap(pattern=[[cols, rows], [1, cols]], scalar_offset=rank, indirect_dim=0))
        return out

    table = np.arange(4 * 128 * 8, dtype=np.float32).reshape(4, 128, 8)
    outs = nki.multi_rank_simulate(my_slice, world_size=4, per_rank_inputs=[((table,), {})] * 4)
    for r, out in enumerate(outs):
        np.testing.assert_array_equal(out, table[r])


def test_the_timeline_has_a_track_per_rank_and_the_collective_is_costed_by_the_model(aws):
    nki, nl, nisa, ncc = aws
    from trnlab.distributed import collectives
    xs = [np.ones((128, 512), np.float32) * r for r in range(4)]
    run = nki.multi_rank_run(_all_reduce_kernel(aws), world_size=4,
                             per_rank_inputs=[((x, ncc.ReplicaGroup([[0, 1, 2, 3]])), {}) for x in xs])
    engines = run.timeline().engines
    for r in range(4):
        assert f"rank{r} cc0" in engines and f"rank{r} dma" in engines
    (entry,) = run.cluster.log
    model = collectives.best_algorithm("all_reduce", entry["bytes"], run.cluster.topology, 4)
    assert entry["end_ns"] - entry["start_ns"] == pytest.approx(model.time_ns)
    assert run.latency_ns >= entry["end_ns"] > 0


def test_more_ranks_than_one_chip_holds_run_one_rank_per_chip(aws):
    nki, nl, nisa, ncc = aws
    xs = [np.full((128, 4), float(r), np.float32) for r in range(16)]
    run = nki.multi_rank_run(_all_reduce_kernel(aws), world_size=16,
                             per_rank_inputs=[((x, ncc.ReplicaGroup([list(range(16))])), {}) for x in xs])
    assert run.cluster.topology.name == "trn2.48xlarge"
    assert float(run.outputs[15][0, 0]) == sum(range(16))


def test_every_rank_runs_the_same_specialization(aws):
    nki, nl, nisa, ncc = aws
    kernel = _all_reduce_kernel(aws)
    group = ncc.ReplicaGroup([[0, 1]])
    with pytest.raises(MultiRankInputError, match="same shape and dtype"):
        nki.multi_rank_simulate(kernel, world_size=2, per_rank_inputs=[
            ((np.ones((128, 4), np.float32), group), {}), ((np.ones((128, 8), np.float32), group), {})])
    with pytest.raises(MultiRankInputError, match="static and equal"):
        nki.multi_rank_simulate(kernel, world_size=2, per_rank_inputs=[
            ((np.ones((128, 4), np.float32), group), {}),
            ((np.ones((128, 4), np.float32), ncc.ReplicaGroup([[1, 0]])), {})])
    with pytest.raises(MultiRankInputError, match="needs 2"):
        nki.multi_rank_simulate(kernel, world_size=2, per_rank_inputs=[((np.ones((128, 4), np.float32), group), {})])


def test_a_write_at_the_ranks_offset_costs_the_bytes_it_moves_not_the_whole_tensor(aws):
    """out.ap(scalar_offset=rank) as a DMA's dst: where it lands is known at run time (it claims the whole
    tensor for ordering) but it moves one tile, costed as a plain write of that tile."""
    nki, nl, nisa, ncc = aws

    @nki.jit
    def place_at_rank(x):
        rows, cols = x.shape
        big = nl.ndarray((64 * rows, cols), dtype=x.dtype, buffer=nl.private_hbm)       # 64 ranks' places
        out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
        tile = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        at_rank = [[cols, rows], [1, cols]]
        nisa.dma_copy(dst=big.ap(pattern=at_rank, scalar_offset=ncc.rank_id(), indirect_dim=0), src=tile)
        back = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=back, src=big.ap(pattern=at_rank, scalar_offset=ncc.rank_id(), indirect_dim=0))
        nisa.dma_copy(dst=out, src=back)                                                   # a plain write
        return out

    xs = [np.full((128, 512), float(r + 1), np.float32) for r in range(2)]
    run = nki.multi_rank_run(place_at_rank, world_size=2, per_rank_inputs=[((x,), {}) for x in xs])
    np.testing.assert_array_equal(run.outputs[1], xs[1])
    c = run.cores[1].timeline.columns()
    took = [(op, e - s, h) for op, s, e, h in zip(c["opcode"], c["start"], c["end"], c["hbm"])
            if op.startswith("dma_copy")]
    scatter, gather = [t for t in took if t[0] == "dma_copy_register_offset"]
    plain = took[-1]                                               # SBUF -> the [128, 512] output
    assert scatter[2] == gather[2] == plain[2] == 128 * 512 * 4   # HBM bytes: one tile each
    assert scatter[1] == pytest.approx(plain[1], rel=0.01)


def test_timing_only_gives_the_full_runs_timeline_without_values(aws):
    nki, nl, nisa, ncc = aws
    xs = [np.full((128, 64), float(r), np.float32) for r in range(2)]
    inputs = [((x, ncc.ReplicaGroup([[0, 1]])), {}) for x in xs]
    full = nki.multi_rank_run(_all_reduce_kernel(aws), world_size=2, per_rank_inputs=inputs)
    timing = nki.multi_rank_run(_all_reduce_kernel(aws), world_size=2, per_rank_inputs=inputs, timing_only=True)
    assert timing.outputs == [None, None] and full.outputs[0] is not None
    assert [r[:4] for r in timing.timeline().records] == [r[:4] for r in full.timeline().records]


def test_a_kernel_with_collectives_on_one_core_names_the_multi_rank_entry_point(aws):
    nki, nl, nisa, ncc = aws
    from trnlab.hardware.collective import CollectiveError
    with pytest.raises(CollectiveError, match="multi_rank_simulate"):
        nki.simulate(_all_reduce_kernel(aws))(np.ones((128, 4), np.float32), ncc.ReplicaGroup([[0, 1]]))

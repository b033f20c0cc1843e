"""Scheduling, the cost model and the profile: engines overlap, dependencies hold, figures trace
back to the timeline, and timing-only mode gives the same timeline as full mode."""
import json

import numpy as np
import pytest

from trnlab.hardware import NeuronCore, cost, gemm, presets
from trnlab.hardware.dependencies import MAX_RECORDS

SPEC = presets.TRN2.core
PE_NS = 1e9 / SPEC.pe_clock_hz


def loaded(core, shape, dtype="bfloat16", name=None):
    h = core.hbm.tensor(np.ones(shape, np.float32), dtype=dtype)
    s = core.sbuf.allocate(shape, dtype, name=name)
    i = core.dma_copy(s, h)
    return s, i


def test_matmul_cycles_formula():
    assert cost.matmul_cycles(SPEC, 128, 128, 512, "bfloat16") == (512, 512 + 127 + 127)
    assert cost.matmul_cycles(SPEC, 128, 128, 16, "bfloat16") == (64, 64 + 254)      # max(N, 64)
    assert cost.matmul_cycles(SPEC, 128, 128, 512, "float32")[0] == 4 * 512          # fp32 4x
    assert cost.matmul_cycles(SPEC, 128, 32, 16, "bfloat16")[0] == 32                # max(min(64, M), N)
    tiny = presets.derive(pe_rows=4, pe_cols=4, matmul_min_cycles=1)
    K, M, N = 4, 4, 7
    assert cost.matmul_cycles(tiny, K, M, N)[1] == N + K + M - 2


def test_matmul_waits_for_its_dma_and_records_why():
    core = NeuronCore(SPEC, mode="timing")
    st, i_st = loaded(core, (128, 128))
    mv, i_mv = loaded(core, (128, 512))
    acc = core.psum.allocate((128, 512), "float32")
    i = core.nc_matmul(acc, st, mv)
    ins = core.timeline[i]
    last_dma = max(core.timeline[i_st].end_ns, core.timeline[i_mv].end_ns)
    # RAW: the matmul cannot start before both inputs arrived (+ the exposed stationary load)
    assert ins.start_ns >= last_dma
    assert ins.waited_for in (i_st, i_mv)
    assert ins.end_ns - ins.start_ns == pytest.approx(512 * PE_NS)
    assert ins.ready_ns - ins.start_ns == pytest.approx((512 + 254) * PE_NS)


def test_independent_engines_overlap():
    core = NeuronCore(SPEC, mode="timing")
    st, _ = loaded(core, (128, 128))
    mv, _ = loaded(core, (128, 512))
    acc = core.psum.allocate((128, 512), "float32")
    mm = core.timeline[core.nc_matmul(acc, st, mv)]
    # a DMA of unrelated data issued after the matmul runs at the same time on a DMA queue
    other = core.sbuf.allocate((128, 512), "bfloat16")
    d = core.timeline[core.dma_copy(other, core.hbm.tensor(np.ones((128, 512), np.float32), dtype="bfloat16"))]
    assert d.start_ns < mm.end_ns
    # a vector op on other data does not wait for the tensor engine either
    x = core.sbuf.allocate((128, 64), "float32")
    v = core.timeline[core.memset(x, 0.0)]
    assert v.start_ns == 0.0


def test_write_after_read_waits_for_the_reader():
    core = NeuronCore(SPEC, mode="timing")
    st, _ = loaded(core, (128, 128))
    mv, _ = loaded(core, (128, 512))
    acc = core.psum.allocate((128, 512), "float32")
    mm = core.timeline[core.nc_matmul(acc, st, mv)]
    # overwrite the moving tile while the matmul reads it: the DMA must wait (WAR)
    src = core.hbm.tensor(np.ones((128, 512), np.float32), dtype="bfloat16")
    d = core.timeline[core.dma_copy(mv, src)]
    assert d.start_ns == pytest.approx(mm.end_ns) and d.waited_for == mm.index


def test_write_after_write_and_disjoint_regions():
    core = NeuronCore(SPEC, mode="timing")
    x = core.sbuf.allocate((128, 1024), "float32")
    a = core.timeline[core.memset(x[:, 0:512], 1.0, engine="vector")]
    b = core.timeline[core.memset(x[:, 512:1024], 2.0, engine="scalar")]
    assert b.start_ns == 0.0                                  # disjoint halves: no dependency
    c = core.timeline[core.memset(x[:, 256:768], 3.0, engine="scalar")]
    assert c.start_ns == pytest.approx(max(a.end_ns, b.end_ns))   # overlaps both: WAW
    assert c.waited_for in (a.index, b.index)


def test_vector_and_gpsimd_share_the_sbuf_port_vector_and_scalar_the_psum_port():
    core = NeuronCore(presets.TRN1.core, mode="timing")     # NeuronCore-v2 shares both ports
    x = core.sbuf.allocate((128, 512), "float32")
    y = core.sbuf.allocate((128, 512), "float32")
    p = core.psum.allocate((128, 512), "float32")
    q = core.psum.allocate((128, 512), "float32")
    v = core.timeline[core.memset(x, 0.0, engine="vector")]
    g = core.timeline[core.memset(y, 0.0, engine="gpsimd")]      # other data, but same SBUF port
    assert g.start_ns == pytest.approx(v.end_ns) and g.waited_for == v.index
    s = core.timeline[core.memset(p, 0.0, engine="scalar")]      # PSUM: free of the SBUF port
    assert s.start_ns == 0.0
    v2 = core.timeline[core.memset(q, 0.0, engine="vector")]     # PSUM port held by the scalar op
    assert v2.start_ns >= s.end_ns


def test_accumulating_matmuls_do_not_wait_for_each_other_but_readers_wait_for_all():
    core = NeuronCore(SPEC, mode="timing")
    st, _ = loaded(core, (128, 128))
    mv, _ = loaded(core, (128, 512))
    acc = core.psum.allocate((128, 512), "float32")
    mms = [core.timeline[core.nc_matmul(acc, st, mv, accumulate=k > 0)] for k in range(4)]
    for prev, nxt in zip(mms, mms[1:]):
        assert nxt.start_ns == pytest.approx(prev.end_ns)         # back to back: busy only
    out = core.sbuf.allocate((128, 512), "float32")
    cp = core.timeline[core.tensor_copy(out, acc)]
    assert cp.start_ns == pytest.approx(mms[-1].ready_ns)          # the reader waits for the drain
    assert cp.waited_for == mms[-1].index


def test_stationary_load_is_hidden_behind_the_previous_matmul():
    core = NeuronCore(SPEC, mode="timing")
    st, _ = loaded(core, (128, 256))
    mv, _ = loaded(core, (128, 512))
    acc = [core.psum.allocate((128, 512), "float32") for _ in range(2)]
    m1 = core.timeline[core.nc_matmul(acc[0], st[:, 0:128], mv)]
    m2 = core.timeline[core.nc_matmul(acc[1], st[:, 128:256], mv)]   # new weights: 32-cycle load
    assert m2.start_ns == pytest.approx(m1.end_ns)                   # ... hidden (512 > 32 cycles)
    # the first load is exposed: its data came late, so the matmul starts load-time after it
    load = cost.stationary_load_cycles(SPEC, 128, 128) * PE_NS
    st_arrived, mv_arrived = core.timeline[0].end_ns, core.timeline[1].end_ns
    assert m1.start_ns == pytest.approx(max(mv_arrived, st_arrived + load))
    # with the stationary arriving last, the load is exposed
    core2 = NeuronCore(SPEC, mode="timing")
    mv2, _ = loaded(core2, (128, 512))
    st2, i_st2 = loaded(core2, (128, 128))
    m = core2.timeline[core2.nc_matmul(core2.psum.allocate((128, 512), "float32"), st2, mv2)]
    assert m.start_ns == pytest.approx(core2.timeline[i_st2].end_ns + load)


def test_vector_activation_and_dma_costs():
    core = NeuronCore(SPEC, mode="timing")
    x = core.sbuf.allocate((128, 512), "float32")
    y = core.sbuf.allocate((128, 512), "float32")
    v = core.timeline[core.memset(x, 0.0)]
    assert v.end_ns - v.start_ns == pytest.approx((SPEC.vector_static_cycles + 512) * 1e9 / SPEC.dve_clock_hz)
    t = core.timeline[core.tensor_tensor(y, x, x, "add")]
    assert t.end_ns - t.start_ns == pytest.approx((SPEC.vector_static_cycles + 2 * 512) * 1e9 / SPEC.dve_clock_hz)
    a = core.timeline[core.activation(y[:, 0:16], x[:, 0:16], "exp")]
    assert a.end_ns - a.start_ns == pytest.approx(SPEC.activation_min_cycles * 1e9 / SPEC.act_clock_hz)
    src = core.hbm.tensor(np.ones((128, 512), np.float32))
    d = core.timeline[core.dma_copy(x, src)]
    nbytes = 128 * 512 * 4
    # alone on the HBM channel: latency + bytes at the slower of 16 DMA engines and the HBM share
    assert d.end_ns - d.start_ns == pytest.approx(cost.dma_ns(SPEC, nbytes, 128))


def test_concurrent_dmas_share_the_hbm_bandwidth():
    core = NeuronCore(SPEC, mode="timing")
    n, size = 8, (128, 4096)
    dmas = []
    for _ in range(n):
        s = core.sbuf.allocate(size, "bfloat16")
        dmas.append(core.timeline[core.dma_copy(s, core.hbm.allocate(size, "bfloat16"))])
    assert len({d.engine for d in dmas}) == n                   # each on a queue free first
    total_bytes = n * 128 * 4096 * 2
    span = max(d.end_ns for d in dmas) - SPEC.dma_latency_ns
    assert total_bytes / (span * 1e-9) == pytest.approx(SPEC.hbm_bandwidth, rel=1e-6)


def test_concurrent_sbuf_to_sbuf_dmas_share_the_dma_engines():
    core = NeuronCore(SPEC, mode="timing")
    src = core.sbuf.allocate((128, 8192), "bfloat16")
    core.memset(src, 0.0)
    t0 = core.now
    dmas = []
    for _ in range(4):
        dst = core.sbuf.allocate((128, 8192), "bfloat16")
        dmas.append(core.timeline[core.dma_copy(dst, src)])
    assert all(d.hbm_bytes == 0 for d in dmas)
    span = max(d.end_ns for d in dmas) - t0 - SPEC.dma_latency_ns
    aggregate = SPEC.dma_engines * SPEC.dma_engine_bandwidth
    assert 4 * 128 * 8192 * 2 / (span * 1e-9) == pytest.approx(aggregate, rel=1e-6)


def _stored_result(core, matmuls: int):
    """`matmuls` accumulating matmuls, their result copied to SBUF and stored to HBM: the store."""
    st, _ = loaded(core, (128, 128))
    mv, _ = loaded(core, (128, 512))
    acc = core.psum.allocate((128, 512), "float32")
    for _ in range(matmuls):
        core.nc_matmul(acc, st, mv)
    res = core.sbuf.allocate((128, 512), "float32")
    core.tensor_copy(res, acc)
    return core.timeline[core.dma_copy(core.hbm.allocate((128, 512), "float32"), res)]


def test_hbm_channel_gives_a_ready_load_the_gap_before_a_waiting_store():
    # a store that waits for its matmuls must not hold back an independent load issued after it
    core = NeuronCore(SPEC, mode="timing")
    store = _stored_result(core, 100)
    load_dst = core.sbuf.allocate((128, 512), "bfloat16")       # 128 KiB
    load = core.timeline[core.dma_copy(load_dst, core.hbm.allocate((128, 512), "bfloat16"))]
    assert store.start_ns > 20_000
    assert load.end_ns < store.start_ns
    # alone, but behind the two loads of the matmul operands on the shared DMA engines
    alone = cost.dma_ns(SPEC, 128 * 512 * 2, 128)
    assert load.end_ns - load.start_ns <= alone + 2 * (alone - SPEC.dma_latency_ns) + 1e-6


def test_hbm_channel_still_shares_bandwidth_when_transfers_overlap():
    # filling a gap never lets two transfers use the channel at the same time
    from trnlab.hardware.engines import Channel
    channel = Channel()
    assert channel.reserve(100.0, 50.0) == 100.0        # [100, 150)
    assert channel.reserve(0.0, 40.0) == 0.0            # fits before it: [0, 40)
    assert channel.reserve(0.0, 70.0) == 150.0          # the gap [40, 100) is too short
    assert channel.reserve(30.0, 60.0) == 40.0          # exactly fills [40, 100)
    assert channel.starts == [0.0] and channel.ends == [220.0]


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 200), st.integers(1, 40)), min_size=1, max_size=25))
def test_channel_books_the_earliest_gap_and_never_overlaps(requests):
    from trnlab.hardware.engines import Channel
    channel = Channel()
    booked = []
    for ready, duration in requests:
        start = channel.reserve(float(ready), float(duration))
        assert start >= ready
        # earliest: every earlier candidate start (the ready time, or the end of a booking) collides
        for candidate in [c for c in [ready] + [end for _, end in booked] if ready <= c < start]:
            assert any(s < candidate + duration and candidate < e for s, e in booked)
        booked.append((start, start + duration))
    booked.sort()
    assert all(a[1] <= b[0] for a, b in zip(booked, booked[1:]))
    # the channel's merged intervals cover exactly the booked time
    assert sum(e - s for s, e in zip(channel.starts, channel.ends)) == sum(e - s for s, e in booked)


def test_dma_queue_is_chosen_so_loads_do_not_queue_behind_a_waiting_store():
    # queue=None picks the queue that is free first: a full round of loads issued after a store
    # that waits for its matmuls never lands behind it on the store's queue
    core = NeuronCore(SPEC, mode="timing")
    store = _stored_result(core, 100)
    loads = []
    for _ in range(SPEC.dma_queues):
        dst = core.sbuf.allocate((128, 64), "bfloat16")
        loads.append(core.timeline[core.dma_copy(dst, core.hbm.allocate((128, 64), "bfloat16"))])
    assert all(d.engine != store.engine for d in loads)
    assert max(d.end_ns for d in loads) < store.start_ns


def test_reusing_freed_bytes_waits_for_the_freed_tiles_last_reader():
    # dependencies follow the memory: a tile placed on a freed tile's bytes is not written before
    # the last instruction reading those bytes has finished (WAR through the allocator)
    core = NeuronCore(SPEC, mode="timing")
    st, _ = loaded(core, (128, 128))
    mv, _ = loaded(core, (128, 512))
    acc = core.psum.allocate((128, 512), "float32")
    last_read = max(core.timeline[core.nc_matmul(acc, st, mv)].end_ns for _ in range(50))
    rest = core.sbuf.partition_bytes - mv.offset - mv.partition_bytes
    core.sbuf.allocate((128, rest), "uint8")                   # the rest of SBUF is taken
    offset = mv.offset
    core.sbuf.free(mv)
    reused = core.sbuf.allocate((128, 512), "bfloat16")
    assert reused.offset == offset                             # the only place left: the same bytes
    load = core.timeline[core.dma_copy(reused, core.hbm.allocate((128, 512), "bfloat16"))]
    assert last_read > 10_000
    assert load.start_ns >= last_read
    # a tile on bytes never used before does not wait
    fresh = NeuronCore(SPEC, mode="timing")
    tile = fresh.sbuf.allocate((128, 512), "bfloat16")
    assert fresh.timeline[fresh.dma_copy(tile, fresh.hbm.allocate((128, 512), "bfloat16"))].start_ns == 0.0


def test_per_iteration_tiles_rotate_over_buffers_so_loads_run_ahead_within_sbuf():
    # a loop that allocates its input tile each iteration: next-fit placement gives each iteration
    # fresh bytes until SBUF wraps, so loads prefetch ahead of the matmuls — but never by more than
    # SBUF holds, because a wrapped tile waits for the matmul that read the old bytes
    core = NeuronCore(SPEC, mode="timing")
    st, _ = loaded(core, (128, 128))
    acc = core.psum.allocate((128, 512), "float32")
    tile_bytes = 512 * 4
    fits = (core.sbuf.partition_bytes - st.partition_bytes) // tile_bytes
    offsets, loads, matmuls = [], [], []
    for _ in range(3 * fits):
        mv = core.sbuf.allocate((128, 512), "float32")
        offsets.append(mv.offset)
        loads.append(core.timeline[core.dma_copy(mv, core.hbm.allocate((128, 512), "float32"))])
        matmuls.append(core.timeline[core.nc_matmul(acc, st, mv)])
        core.sbuf.free(mv)
    assert len(set(offsets[:fits])) == fits                     # every iteration on new bytes
    assert offsets[fits] == offsets[0]                          # then the rotation wraps
    for i in range(fits, 3 * fits):                             # a load into reused bytes waits for
        previous = max(k for k in range(i) if offsets[k] == offsets[i])   # the matmul that read
        assert loads[i].start_ns >= matmuls[previous].end_ns           # them last


def test_record_lists_stay_small_and_merging_is_conservative():
    core = NeuronCore(SPEC, mode="timing")
    x = core.sbuf.allocate((128, 4096), "float32")
    core.memset(x, 0.0)
    ends = []
    for i in range(4 * MAX_RECORDS):
        y = core.sbuf.allocate((128, 16), "float32") if i == 0 else y
        ends.append(core.timeline[core.tensor_copy(y, x[:, 16 * i:16 * i + 16], engine="gpsimd")].end_ns)
    assert len(x._reads) <= MAX_RECORDS
    w = core.timeline[core.memset(x, 1.0)]                      # WAR on every earlier reader
    assert w.start_ns >= max(ends)


def _small_program(mode):
    core = NeuronCore(SPEC, mode=mode)
    a = core.hbm.tensor(np.ones((256, 128), np.float32), dtype="bfloat16") if mode == "full" else \
        core.hbm.allocate((256, 128), "bfloat16")
    s = core.sbuf.allocate((2, 128, 128), "bfloat16", partition_axis=1)
    core.dma_copy(s[0], a[0:128])
    core.dma_copy(s[1], a[128:256])
    acc = core.psum.allocate((128, 128), "float32")
    core.nc_matmul(acc, s[0], s[1])
    core.nc_transpose(acc, s[1])
    f = core.sbuf.allocate((128, 128), "float32")
    core.activation(f, acc, "gelu", scale=2.0)
    core.tensor_scalar(f, f, "multiply", 3.0, engine="scalar")
    r = core.sbuf.allocate((128, 1), "float32")
    core.tensor_reduce(r, f, "maximum", axis=1)
    return core


def test_timing_mode_gives_the_same_timeline_as_full_mode():
    full, timing = _small_program("full"), _small_program("timing")
    assert full.timeline.same_schedule(timing.timeline)
    _, g_full = gemm.run_gemm(np.ones((200, 130)), np.ones((130, 600)), mode="full")
    _, g_time = gemm.run_gemm(shape=(200, 600, 130), mode="timing")
    assert g_full.timeline.same_schedule(g_time.timeline)


def test_profile_figures_come_from_the_timeline(tmp_path):
    _, core = gemm.run_gemm(shape=(512, 1024, 512), mode="timing")
    prof = core.profile()
    tl = core.timeline
    recs = list(tl)
    total = max(r.ready_ns for r in recs)
    assert prof.total_ns == total
    pe_busy = sum(r.end_ns - r.start_ns for r in recs if r.engine == "pe")
    assert prof.active["pe"] == pytest.approx(pe_busy / total)
    flops = sum(r.flops for r in recs)
    assert flops == 2 * 512 * 1024 * 512
    assert prof.mfu == pytest.approx(flops / (total * 1e-9) / SPEC.peak_flops("bfloat16"))
    hbm = sum(r.hbm_bytes for r in recs)
    assert prof.mbu == pytest.approx(hbm / (total * 1e-9) / SPEC.hbm_bandwidth)
    assert prof.arithmetic_intensity == pytest.approx(flops / hbm)
    assert prof.achieved_tflops == pytest.approx(flops / (total * 1e-9) / 1e12)
    assert prof.instructions["nc_matmul"] == gemm.plan(512, 1024, 512).matmuls
    assert 0 < prof.active["dma (any queue)"] <= 1
    assert "MFU" in prof.summary()
    trace = tl.to_chrome_trace(tmp_path / "trace.json")
    loaded_trace = json.loads((tmp_path / "trace.json").read_text())
    assert len([e for e in loaded_trace["traceEvents"] if e["ph"] == "X"]) == len(tl)
    assert trace == loaded_trace

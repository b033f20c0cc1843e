"""DMA cost rules behind docs/calibration.md: strided rows, the hardware DMA transpose, and the
calibrated cases staying within their stated tolerance (no wall-clock timing here)."""
import numpy as np
import pytest

from trnlab.hardware import NeuronCore, cost, dtypes, presets


def _operand(memory, shape, dtype="bfloat16", partitions=None, contiguous=0):
    itemsize = dtypes.as_dtype(dtype).itemsize
    size = int(np.prod(shape))
    p = shape[0] if partitions is None else partitions
    return cost.Operand(memory, shape, dtype, p, size // p, size * itemsize, contiguous)


def test_a_strided_row_is_one_descriptor_whose_short_runs_move_a_whole_burst():
    # adaptive_avg_pool2d's window load: [128, 11, 11] fp32, 44-byte runs in HBM (a row of the image)
    spec = presets.TRN2.core
    row_bytes = 11 * 11 * 4
    c = cost.dma_cost(spec, 128 * row_bytes, 128, chunk_bytes=44)
    assert c.descriptors == 128                                   # one per partition row, not per run
    moved = 11 * max(44, spec.dma_min_burst_bytes)                # 11 runs, each at least a burst
    per_row = max(moved / (spec.dma_engine_bandwidth / 1e9), spec.dma_descriptor_ns)
    assert c.cycles == pytest.approx(8 * per_row)                 # 8 rows per engine
    # a row of 2-byte elements each in its own burst costs 32x its bytes
    elements = cost.dma_cost(spec, 128 * 4096 * 2, 128, chunk_bytes=2)
    assert elements.cycles == pytest.approx(8 * 4096 * 64 / (spec.dma_engine_bandwidth / 1e9))


def test_contiguous_rows_keep_the_calibrated_descriptor_cost():
    spec = presets.TRN1.core
    rows_1k = cost.dma_cost(spec, 128 * 1024, 128, 1024)         # hoisted kernel's rhs [128, 512] bf16
    assert rows_1k.descriptors == 128
    assert rows_1k.cycles == pytest.approx(8 * spec.dma_descriptor_ns)


def _transpose(spec, src_memory, shape=(128, 128), dtype="bfloat16"):
    a, b = shape
    src = _operand(src_memory, shape, dtype, partitions=1 if src_memory == "hbm" else a, contiguous=b * 2)
    dst = _operand("sbuf", (b, a), dtype, contiguous=a * 2)
    return cost.cost(cost.Instruction("dma_transpose", "dma", (src,), (dst,)), spec)


def test_dma_transpose_runs_on_the_hardware_transpose_from_neuroncore_v3():
    # Trainium2 architecture guide, "DMA Transpose": all 16 engines write [128, 16] SBUF blocks
    # together; up to 90 % of DMA throughput from HBM, 50 % SBUF -> SBUF
    spec = presets.TRN2.core
    rate = 16 * spec.dma_engine_bandwidth / 1e9                   # bytes per ns, all engines
    from_hbm = _transpose(spec, "hbm")
    assert from_hbm.engines == 16 and from_hbm.descriptors == 8  # 128 x 128 -> 8 blocks of 16 columns
    assert from_hbm.cycles == pytest.approx(128 * 128 * 2 / (0.9 * rate))
    assert _transpose(spec, "sbuf").cycles == pytest.approx(128 * 128 * 2 / (0.5 * rate))
    assert from_hbm.fixed_ns == spec.dma_latency_ns


def test_a_partial_transpose_block_costs_a_full_one():
    spec = presets.TRN2.core
    assert _transpose(spec, "hbm", (8, 64)).cycles == pytest.approx(_transpose(spec, "hbm", (16, 128)).cycles)


def test_neuroncore_v2_has_no_dma_transpose_and_moves_element_by_element():
    trn1 = presets.TRN1.core
    assert trn1.dma_transpose_efficiency_hbm == 0.0
    c = _transpose(trn1, "hbm")
    # 128 rows of 128 two-byte elements, each element its own burst
    assert c.descriptors == 128
    assert c.cycles == pytest.approx(8 * 128 * trn1.dma_min_burst_bytes / (trn1.dma_engine_bandwidth / 1e9))
    assert c.cycles > 20 * _transpose(presets.TRN2.core, "hbm").cycles


@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_core_dma_transpose_writes_the_transpose_and_is_timed_as_one(target):
    core = NeuronCore(target, mode="full")
    values = np.arange(64 * 128, dtype=np.float32).reshape(64, 128)
    src = core.hbm.tensor(values)
    dst = core.sbuf.allocate((128, 64), "float32")
    record = core.timeline[core.dma_transpose(dst.full, src.full)]
    assert np.array_equal(dst.numpy(), values.T)
    assert record.opcode == "dma_transpose"
    src_op = cost.operand(src.full, True)
    dst_op = cost.operand(dst.full, True)
    asked = cost.cost(cost.Instruction("dma_transpose", "dma", (src_op,), (dst_op,)), core.spec)
    assert record.end_ns - record.start_ns == pytest.approx(asked.ns)


def test_nl_load_transpose2d_issues_one_dma_transpose():
    import trnlab.nki as nki
    import trnlab.nki.language as nl

    @nki.jit
    def kernel(k):
        out = nl.ndarray((128, 128), dtype=k.dtype, buffer=nl.shared_hbm)
        kt = nl.load_transpose2d(k[nl.arange(128)[:, None], nl.arange(128)[None, :]])   # [d, seq]
        nl.store(out, value=kt)
        return out

    k = np.random.default_rng(0).standard_normal((128, 128)).astype(np.float32)
    r = nki.run(kernel, k, target="trn2")
    assert np.array_equal(np.asarray(r.outputs), k.T)
    opcodes = [r.timeline[i].opcode for i in range(len(r.timeline))]
    assert opcodes.count("dma_transpose") == 1


def test_psum_tile_plus_equals_matmul_with_arange_indices_adds_no_copy():
    # `psum[ip, jf] += nisa.nc_matmul(...)` accumulates in place: Python's write-back of the same
    # region must not become a PSUM -> PSUM tensor_copy (it did before: 2 x 1,024 extra Vector
    # copies in AWS's SD attention kernel)
    import trnlab.nki as nki
    import trnlab.nki.isa as nisa
    import trnlab.nki.language as nl

    @nki.jit
    def kernel(a, b):
        out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        at, bt = nl.load(a), nl.load(b)
        acc = nl.zeros((nl.par_dim(128), 128), dtype=np.float32, buffer=nl.psum)
        ip, jf = nl.arange(128)[:, None], nl.arange(128)[None, :]
        acc[ip, jf] += nisa.nc_matmul(moving=bt, stationary=at)
        acc[ip, jf] += nisa.nc_matmul(moving=bt, stationary=at)
        nl.store(out, value=nl.copy(acc))
        return out

    g = np.random.default_rng(0)
    a, b = (g.standard_normal((128, 128)).astype(np.float32) for _ in range(2))
    r = nki.run(kernel, a, b, target="trn2")
    opcodes = [r.timeline[i].opcode for i in range(len(r.timeline))]
    assert opcodes.count("tensor_copy") == 1                     # only nl.copy (PSUM -> SBUF)
    expected = 2 * (a.astype(np.float64).T @ b)
    assert np.allclose(np.asarray(r.outputs), expected, rtol=2e-2, atol=2e-1)


def test_calibrated_cases_stay_within_their_stated_tolerance():
    # docs/calibration.md: dma_descriptor_ns was fitted on the hoisted-loads kernel ([MM-trn1],
    # 42.96 ms on trn1, bf16) and bounded by its trn2 profile (TensorE 99.85 % active, fp32). The
    # kernel's time grows with M block by block, so 1/16 of AWS's M (same N, K) times 16 is the
    # full-shape figure (docs: 42.87 ms at the full shape).
    from trnlab.kernels import matmul_ladder as ladder
    shape = dict(M=ladder.AWS_SHAPE["M"] // 16, N=ladder.AWS_SHAPE["N"], K=ladder.AWS_SHAPE["K"])
    trn1 = ladder.run_step(ladder.matmul_hoisted, dtype="bfloat16", target="trn1", **shape)
    assert trn1.latency_us * 16 / 1e3 == pytest.approx(42.96, rel=0.05)
    trn2 = ladder.run_step(ladder.matmul_hoisted, dtype="float32", target="trn2", **shape)
    assert trn2.active["pe"] > 95.0                               # AWS: 99.85 % (a bound: loads keep up)


def test_loading_an_image_window_is_one_descriptor_per_partition_on_the_core():
    # the window load of AWS's adaptive_avg_pool2d: [128, 11, 11] of a [128, 32, 32] fp32 image
    core = NeuronCore("trn2", mode="timing")
    image = core.hbm.allocate((128, 32, 32), "float32")
    window = core.sbuf.allocate((128, 11, 11), "float32")
    src = image[0:128, 0:11, 0:11]
    assert cost.contiguous_bytes(src) == 44                       # 11 fp32 of one image row
    record = core.timeline[core.dma_copy(window.full, src)]
    spec = core.spec
    asked = cost.dma_cost(spec, 128 * 11 * 11 * 4, 128, 44)
    assert asked.descriptors == 128
    assert record.end_ns - record.start_ns == pytest.approx(spec.dma_latency_ns + asked.cycles)
    assert asked.cycles == pytest.approx(8 * spec.dma_descriptor_ns)   # descriptor-bound: 8 rows per engine


def _tiny_loads(spec, n: int):
    """n one-element loads into n different SBUF tiles, all ready at once: when the last one ends."""
    core = NeuronCore(spec, mode="timing")
    src = core.hbm.allocate((n, 1), "float32")
    tiles = [core.sbuf.allocate((1, 1), "float32") for _ in range(n)]
    ends = [core.timeline[core.dma_copy(t.full, src[i:i + 1, 0:1])].end_ns for i, t in enumerate(tiles)]
    return max(ends)


def test_a_dma_issue_cost_limits_how_many_tiny_transfers_start_per_second():
    # docs/calibration.md, candidate (b), part of the model: each transfer needs dma_issue_ns on the
    # core's one issuer (its descriptors generated by the engine that issues it); 0 is no issuer
    base = presets.TRN2.core.derive(dma_issue_ns=0.0)
    issuing = base.derive(dma_issue_ns=500.0)
    n = base.dma_queues
    assert presets.TRN2.core.dma_issue_ns == 478.0 == presets.TRN1.core.dma_issue_ns
    one = base.dma_latency_ns + base.dma_descriptor_ns    # a one-element transfer alone
    assert _tiny_loads(base, n) == pytest.approx(one)     # one per queue, all in flight at once
    limited = _tiny_loads(issuing, n)
    assert limited == pytest.approx((n - 1) * 500.0 + one)   # the issuer passes one per 500 ns
    # one transfer alone: its latency is unchanged (the issue slot is part of the trigger-to-start latency)
    assert _tiny_loads(issuing, 1) == pytest.approx(one)


def _load_engine_ns(spec, hbm_shape, tile_shape, dtype="bfloat16"):
    """Engine time (ns, trigger latency excluded) of one load of a tile cut out of an HBM tensor."""
    core = NeuronCore(spec, mode="timing")
    src = core.hbm.allocate(hbm_shape, dtype)
    tile = core.sbuf.allocate(tile_shape, dtype)
    record = core.timeline[core.dma_copy(tile.full, src[0:tile_shape[0], 0:tile_shape[1]])]
    return record.end_ns - record.start_ns - spec.dma_latency_ns


def test_runs_of_256_bytes_to_2_kib_gathered_from_hbm_move_at_the_gather_rate_when_it_is_set():
    # docs/calibration.md, candidate (d): a tile cut out of a wider HBM tensor in runs of 256 B up to
    # 2 KiB ([DMA-BW]'s middle band) moves its bytes at dma_hbm_gather_bandwidth (the core's 16
    # engines together) in place of the per-descriptor time; 0 is off (the presets' rates: the model)
    base = presets.TRN1.core.derive(dma_hbm_gather_bandwidth=0.0)
    gather = base.derive(dma_hbm_gather_bandwidth=100e9)
    assert presets.TRN1.core.dma_hbm_gather_bandwidth == 104.1e9
    rhs_tile = ((8192, 8192), (128, 512))                         # the tiled kernel's rhs load: 1 KiB runs
    assert _load_engine_ns(base, *rhs_tile) == pytest.approx(8 * base.dma_descriptor_ns)
    assert _load_engine_ns(gather, *rhs_tile) == pytest.approx(128 * 1024 / 100.0)   # bytes at 100 B/ns
    lhsT_tile = ((8192, 4096), (128, 128))                        # its lhsT load: 256 B runs, 4x fewer bytes
    assert _load_engine_ns(gather, *lhsT_tile) == pytest.approx(128 * 256 / 100.0)
    assert _load_engine_ns(base, *lhsT_tile) == pytest.approx(8 * base.dma_descriptor_ns)


def test_contiguous_wide_and_tiny_runs_keep_the_descriptor_cost_under_the_gather_rate():
    base = presets.TRN1.core.derive(dma_hbm_gather_bandwidth=0.0)
    gather = base.derive(dma_hbm_gather_bandwidth=100e9)
    for hbm_shape, tile_shape in [((128, 512), (128, 512)),      # the whole tensor: one contiguous run
                                  ((8192, 8192), (128, 1024)),   # 2 KiB runs: [DMA-BW] "approaches peak"
                                  ((8192, 8192), (128, 64))]:    # 128 B runs: "overhead-bound"
        assert _load_engine_ns(gather, hbm_shape, tile_shape) == pytest.approx(
            _load_engine_ns(base, hbm_shape, tile_shape))


def test_a_row_moved_element_by_element_keeps_its_bursts_under_the_gather_rate():
    # a v2 transpose reads whole 256-byte HBM rows but writes SBUF element by element: the gather
    # rate is for rows moved whole, so the element-wise bursts still set its time
    trn1 = presets.TRN1.core
    assert _transpose(trn1, "hbm").cycles == pytest.approx(_transpose(trn1.derive(dma_hbm_gather_bandwidth=0.0), "hbm").cycles)

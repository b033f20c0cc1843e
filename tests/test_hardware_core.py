"""Instructions compute what NumPy computes (with the hardware's dtypes and fp32 engines)."""
import ml_dtypes
import numpy as np
import pytest

from trnlab.hardware import NeuronCore, dtypes, presets

rng = np.random.default_rng(0)


@pytest.fixture
def core():
    return NeuronCore(presets.TRN2.core, mode="full")


def to_sbuf(core, array, dtype="float32", name=None):
    """HBM tensor -> SBUF tile through a DMA."""
    h = core.hbm.tensor(array, dtype=dtype)
    s = core.sbuf.allocate(array.shape, dtype, name=name)
    core.dma_copy(s, h)
    return s


def bf16(x):
    return x.astype(ml_dtypes.bfloat16).astype(np.float32)


def test_dma_round_trip_keeps_bf16_values(core):
    x = rng.standard_normal((128, 300)).astype(np.float32)
    s = to_sbuf(core, x, "bfloat16")
    out = core.hbm.allocate((128, 300), "bfloat16")
    core.dma_copy(out, s)
    np.testing.assert_array_equal(out.numpy().astype(np.float32), bf16(x))


def test_dma_fills_the_blocks_of_a_tensor_with_partition_axis_1(core):
    x = rng.standard_normal((256, 64)).astype(np.float32)
    h = core.hbm.tensor(x)
    s = core.sbuf.allocate((2, 128, 64), "float32", partition_axis=1)
    core.dma_copy(s[0], h[0:128])
    core.dma_copy(s[1], h[128:256])
    np.testing.assert_array_equal(s.numpy().reshape(256, 64), x)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "float8_e4m3", "float8_e5m2"])
def test_nc_matmul_is_stationary_transposed_times_moving_in_fp32(core, dtype):
    K, M, N = 128, 96, 384
    a = rng.standard_normal((K, M)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    st, mv = to_sbuf(core, a, dtype), to_sbuf(core, b, dtype)
    acc = core.psum.allocate((M, N), "float32")
    core.nc_matmul(acc, st, mv)
    a_q = dtypes.cast(a, dtype).astype(np.float32)
    b_q = dtypes.cast(b, dtype).astype(np.float32)
    ref = a_q.astype(np.float64).T @ b_q.astype(np.float64)
    np.testing.assert_allclose(acc.numpy(), ref, rtol=1e-5, atol=1e-4)


def test_matmul_accumulates_over_k_in_psum(core):
    K, M, N = 384, 128, 512
    a = rng.standard_normal((K, M)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    acc = core.psum.allocate((M, N), "float32")
    for k0 in range(0, K, 128):
        st = to_sbuf(core, a[k0:k0 + 128], "bfloat16")
        mv = to_sbuf(core, b[k0:k0 + 128], "bfloat16")
        core.nc_matmul(acc, st, mv)                      # accumulate=None: first overwrites
    np.testing.assert_allclose(acc.numpy(), bf16(a).T @ bf16(b), rtol=1e-4, atol=1e-3)
    # accumulate=False starts a new sum; True adds
    core.nc_matmul(acc, st, mv, accumulate=False)
    np.testing.assert_allclose(acc.numpy(), bf16(a[256:]).T @ bf16(b[256:]), rtol=1e-5, atol=1e-4)
    core.nc_matmul(acc, st, mv, accumulate=True)
    np.testing.assert_allclose(acc.numpy(), 2 * bf16(a[256:]).T @ bf16(b[256:]), rtol=1e-5, atol=1e-4)


def test_nc_transpose(core):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    s = to_sbuf(core, x)
    t = core.psum.allocate((64, 128), "float32")
    core.nc_transpose(t, s)
    np.testing.assert_array_equal(t.numpy(), x.T)


def test_tensor_copy_casts_like_ml_dtypes(core):
    x = rng.standard_normal((128, 100)).astype(np.float32) * 100
    s = to_sbuf(core, x)
    for dtype in ("bfloat16", "float16", "float8_e4m3", "float8_e5m2", "int32"):
        d = core.sbuf.allocate((128, 100), dtype)
        core.tensor_copy(d, s)
        np.testing.assert_array_equal(d.numpy(), x.astype(dtypes.as_dtype(dtype)))


@pytest.mark.parametrize("op,fn", [("add", np.add), ("subtract", np.subtract),
                                   ("multiply", np.multiply), ("maximum", np.maximum),
                                   (np.divide, np.divide)])
def test_tensor_tensor(core, op, fn):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    b = rng.standard_normal((128, 64)).astype(np.float32) + 3
    out = core.sbuf.allocate((128, 64), "float32")
    core.tensor_tensor(out, to_sbuf(core, a), to_sbuf(core, b), op)
    np.testing.assert_allclose(out.numpy(), fn(a, b), rtol=1e-6)


def test_tensor_scalar_with_constants_vectors_and_reverse(core):
    x = rng.standard_normal((128, 32)).astype(np.float32)
    col = rng.standard_normal((128, 1)).astype(np.float32)
    sx, scol = to_sbuf(core, x), to_sbuf(core, col)
    out = core.sbuf.allocate((128, 32), "float32")
    core.tensor_scalar(out, sx, "subtract", scol, op1="multiply", operand1=2.0)
    np.testing.assert_allclose(out.numpy(), (x - col) * 2.0, rtol=1e-6)
    core.tensor_scalar(out, sx, "subtract", 1.0, reverse0=True)
    np.testing.assert_allclose(out.numpy(), 1.0 - x, rtol=1e-6)


def test_tensor_reduce_along_free_axes(core):
    x = rng.standard_normal((128, 4, 16)).astype(np.float32)
    sx = to_sbuf(core, x)
    out = core.sbuf.allocate((128, 1), "float32")
    core.tensor_reduce(out, sx, "add", axis=(1, 2))
    np.testing.assert_allclose(out.numpy()[:, 0], x.sum(axis=(1, 2)), rtol=1e-5)
    mx = core.sbuf.allocate((128, 4), "float32")
    core.tensor_reduce(mx, sx, np.max, axis=2, negate=True)
    np.testing.assert_allclose(mx.numpy(), -x.max(axis=2))


@pytest.mark.parametrize("op,fn", [
    ("exp", np.exp), ("tanh", np.tanh), ("relu", lambda v: np.maximum(v, 0)),
    ("sigmoid", lambda v: 1 / (1 + np.exp(-v))), ("rsqrt", lambda v: 1 / np.sqrt(v)),
    ("gelu_apprx_tanh", lambda v: 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3)))),
])
def test_activation_with_scale_and_bias(core, op, fn):
    x = np.abs(rng.standard_normal((128, 48)).astype(np.float32)) + 0.1
    bias = rng.standard_normal((128, 1)).astype(np.float32) * 0.1 + 1.0
    out = core.sbuf.allocate((128, 48), "float32")
    core.activation(out, to_sbuf(core, x), op, bias=to_sbuf(core, bias), scale=0.5)
    np.testing.assert_allclose(out.numpy(), fn(x * 0.5 + bias), rtol=2e-5, atol=1e-6)


def test_memset_and_iota(core):
    t = core.sbuf.allocate((128, 16), "int32")
    core.memset(t, 7, engine="gpsimd")
    assert (t.numpy() == 7).all()
    core.iota(t, np.arange(128)[:, None] * 16 + np.arange(16)[None, :])
    np.testing.assert_array_equal(t.numpy(), np.arange(128 * 16).reshape(128, 16))


def test_views_follow_numpy_indexing(core):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    s = to_sbuf(core, x)
    assert s[:, 10:20].shape == (128, 10)
    assert s[0:32, 3].shape == (32,)
    idx = s[np.arange(64)[:, None], np.arange(0, 64, 2)[None, :]]
    assert idx.shape == (64, 32) and idx.partitions == 64
    np.testing.assert_array_equal(idx.read(), x[:64, ::2])
    out = core.sbuf.allocate((64, 32), "float32")
    core.tensor_copy(out, idx)
    np.testing.assert_array_equal(out.numpy(), x[:64, ::2])


def test_new_on_chip_memory_is_nan_or_poison(core):
    assert np.isnan(core.sbuf.allocate((128, 4), "float32").data).all()
    assert np.isnan(core.psum.allocate((128, 4), "float32").data).all()
    assert (core.sbuf.allocate((128, 4), "int32").data == np.iinfo(np.int32).min).all()


def test_allocation_rotates_next_fit_reuses_freed_space_last_and_respects_banks(core):
    a = core.sbuf.allocate((128, 1024), "float32")            # 4 KiB per partition at 0
    b = core.sbuf.allocate((128, 1024), "float32")            # at 4 KiB
    assert (a.offset, b.offset) == (0, 4096)
    core.sbuf.free(a)
    c = core.sbuf.allocate((128, 512), "float32")
    assert c.offset == 8192                                   # next fit: after the last allocation
    rest = core.sbuf.partition_bytes - 8192 - 2048
    filler = core.sbuf.allocate((128, rest), "uint8")         # fills the memory to its end
    assert filler.offset == 8192 + 2048
    d = core.sbuf.allocate((128, 512), "float32")
    assert d.offset == 0                                      # nothing further on: wrap, reuse a's hole
    p1 = core.psum.allocate((128, 384), "float32")            # 1.5 KiB in bank 0
    p2 = core.psum.allocate((128, 256), "float32")            # 1 KiB would straddle: bank 1
    assert (p1.offset, p2.offset) == (0, 2048)
    assert [r["name"] for r in core.psum.occupancy()] == [p1.name, p2.name]


def test_timing_mode_keeps_no_values_but_checks_rules():
    core = NeuronCore("trn2", mode="timing")
    x = core.sbuf.allocate((128, 512), "bfloat16")
    assert x.data is None
    acc = core.psum.allocate((128, 512), "float32")
    core.nc_matmul(acc, x[:, 0:128], x)                        # no values: no uninitialised check
    assert len(core.timeline) == 1 and acc.data is None


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_bound = st.one_of(st.none(), st.integers(-300, 300))


@settings(max_examples=200, deadline=None)
@given(a=_bound, b=_bound, c=_bound, d=_bound, step=st.sampled_from([None, 1, 2, -1]))
def test_views_shapes_and_boxes_agree_with_numpy(a, b, c, d, step):
    core = NeuronCore("trn2", mode="timing")
    t = core.hbm.allocate((200, 150), "float32")
    index = (slice(a, b), slice(c, d, step))
    v = t[index]
    ref = np.arange(200 * 150).reshape(200, 150)[index]
    assert v.shape == ref.shape
    if ref.size:
        rows, cols = np.divmod(ref, 150)
        lo0, hi0, lo1, hi1 = v.box if v.box is not None else (0, 200, 0, 150)
        assert (rows.min(), rows.max() + 1, cols.min(), cols.max() + 1) == (lo0, hi0, lo1, hi1)


def test_lazy_matmuls_use_the_inputs_as_they_were_when_issued(core):
    """Matmul values are computed lazily (grouped per PSUM tile); overwriting an input tile
    before the PSUM tile is read must not change the result (copy on write)."""
    a = rng.standard_normal((128, 128)).astype(np.float32)
    b = rng.standard_normal((128, 512)).astype(np.float32)
    st, mv = to_sbuf(core, a, "bfloat16"), to_sbuf(core, b, "bfloat16")
    acc = core.psum.allocate((128, 512), "float32")
    core.nc_matmul(acc, st, mv)
    core.dma_copy(mv, core.hbm.tensor(np.zeros((128, 512)), dtype="bfloat16"))   # whole tile
    core.dma_copy(st[:, 0:64], core.hbm.tensor(np.zeros((128, 64)), dtype="bfloat16"))  # part
    core.nc_matmul(acc, st, mv)                                  # adds zeros
    np.testing.assert_allclose(acc.numpy(), bf16(a).T @ bf16(b), rtol=1e-5, atol=1e-4)
    assert not np.any(mv.numpy().astype(np.float32))            # the tile itself did change


def test_lazy_matmuls_on_two_regions_of_one_psum_tensor(core):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    b = rng.standard_normal((128, 256)).astype(np.float32)
    st, mv = to_sbuf(core, a), to_sbuf(core, b)
    acc = core.psum.allocate((64, 512), "float32")
    left, right = acc[:, 0:256], acc[:, 256:512]
    core.nc_matmul(left, st, mv)
    core.nc_matmul(right, st, mv)
    core.nc_matmul(left, st, mv, accumulate=True)
    core.nc_matmul(right, st, mv, accumulate=False)              # restart: drops the first
    ref = a.astype(np.float64).T @ b
    np.testing.assert_allclose(acc.numpy()[:, :256], 2 * ref, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(acc.numpy()[:, 256:], ref, rtol=1e-5, atol=1e-4)


def test_lazy_matmuls_on_overlapping_regions(core):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    b = rng.standard_normal((128, 512)).astype(np.float32)
    st, mv = to_sbuf(core, a), to_sbuf(core, b)
    acc = core.psum.allocate((64, 512), "float32")
    core.nc_matmul(acc[:, 0:256], st, mv[:, 0:256])
    core.nc_matmul(acc, st, mv, accumulate=False)                 # covers the first region
    core.nc_matmul(acc[:, 256:512], st, mv[:, 256:512], accumulate=True)
    ref = a.astype(np.float64).T @ b
    np.testing.assert_allclose(acc.numpy()[:, :256], ref[:, :256], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(acc.numpy()[:, 256:], 2 * ref[:, 256:], rtol=1e-5, atol=1e-4)


def test_fp32_matmul_tolerance_bounds_every_summation_order():
    a = rng.standard_normal((40, 300)).astype(np.float32)
    b = rng.standard_normal((300, 30)).astype(np.float32)
    exact = a.astype(np.float64) @ b
    tolerance = dtypes.fp32_matmul_tolerance(a, b)
    forward = np.zeros((40, 30), np.float32)
    for k in range(300):                                  # one order: k = 0, 1, 2, ...
        forward = forward + np.outer(a[:, k], b[k])
    backward = np.zeros((40, 30), np.float32)
    for k in reversed(range(300)):                        # and the reverse
        backward = backward + np.outer(a[:, k], b[k])
    for result in (a @ b, forward, backward):
        assert np.all(np.abs(result - exact) <= tolerance)
    assert not np.array_equal(forward, backward)          # the orders do differ
    assert tolerance.max() < 1e-3 * np.abs(exact).max()   # and the bound is tight enough to test


def test_trn3_accumulates_bf16_in_psum_keeping_the_group_sum_in_fp32():
    core = NeuronCore(presets.TRN3.core, mode="full")
    a = rng.standard_normal((256, 128)).astype(np.float32)
    b = rng.standard_normal((256, 512)).astype(np.float32)
    acc = core.psum.allocate((128, 512), "bfloat16")
    for k0 in (0, 128):
        core.nc_matmul(acc, to_sbuf(core, a[k0:k0 + 128], "bfloat16"),
                       to_sbuf(core, b[k0:k0 + 128], "bfloat16"))
    lhs, rhs = bf16(a).T.astype(np.float64), bf16(b).astype(np.float64)
    exact = lhs @ rhs
    # one bf16 rounding of the fp32 sum; the fp32 sum itself is within the true fp32 tolerance
    # of the exact one (its summation order is the BLAS kernel's, which differs between CPUs)
    tolerance = dtypes.fp32_matmul_tolerance(lhs, rhs)
    error = np.abs(acc.numpy().astype(np.float64) - exact)
    assert np.all(error <= 2 ** -8 * (np.abs(exact) + tolerance) + tolerance)
    assert np.mean(acc.numpy() == exact.astype(np.float32).astype(ml_dtypes.bfloat16)) > 0.99


# -- the pure cost model ---------------------------------------------------------------------------
from trnlab.hardware import cost  # noqa: E402


def _desc(memory, shape, dtype="bfloat16", partitions=None, contiguous=0):
    itemsize = dtypes.as_dtype(dtype).itemsize
    size = int(np.prod(shape))
    p = shape[0] if partitions is None else partitions
    return cost.Operand(memory, shape, dtype, p, size // p, size * itemsize, contiguous)


def test_cost_of_an_instruction_is_asked_without_issuing_it_and_matches_the_timeline():
    spec = presets.TRN2.core
    core = NeuronCore(spec, mode="timing")
    x = core.sbuf.allocate((128, 512), "float32")
    y = core.sbuf.allocate((128, 512), "float32")
    record = core.timeline[core.tensor_tensor(y, x, x, "add")]
    instr = cost.Instruction("tensor_tensor", "dve", (_desc("sbuf", (128, 512), "float32"),) * 2,
                             (_desc("sbuf", (128, 512), "float32"),))
    asked = cost.cost(instr, spec)
    assert asked.cycles == spec.vector_static_cycles + 2 * 512
    assert record.end_ns - record.start_ns == pytest.approx(asked.ns)
    mm = cost.cost(cost.Instruction("nc_matmul", "pe", (_desc("sbuf", (128, 128)), _desc("sbuf", (128, 512))),
                                    (_desc("psum", (128, 512), "float32"),)), spec)
    assert (mm.cycles, mm.latency_cycles) == cost.matmul_cycles(spec, 128, 128, 512)
    assert cost.cost(instr, spec) == asked                      # pure: same question, same answer


def test_dma_short_contiguous_rows_cost_the_descriptor_time_not_their_bytes():
    # the per-descriptor rule alone (the gather rate of runs cut out of a wider tensor off:
    # tests/test_hardware_dma_fidelity.py)
    spec = presets.TRN1.core.derive(dma_hbm_gather_bandwidth=0.0)
    hbm_row = _desc("hbm", (128, 128), partitions=1, contiguous=256)      # lhsT[k:k+128, m:m+128]
    sbuf = _desc("sbuf", (128, 128), contiguous=256)
    short = cost.cost(cost.Instruction("dma_copy", "dma", (hbm_row,), (sbuf,)), spec)
    long_rows = cost.cost(cost.Instruction("dma_copy", "dma", (_desc("hbm", (128, 2048), partitions=1, contiguous=4096),),
                                           (_desc("sbuf", (128, 2048), contiguous=4096),)), spec)
    assert short.descriptors == 128 and short.engines == 16
    assert short.cycles == pytest.approx(8 * spec.dma_descriptor_ns)      # 8 rows per engine
    assert spec.dma_descriptor_ns * spec.dma_engine_bandwidth / 1e9 > 2048   # the knee: > 2 KiB
    per_byte_short = short.cycles / (128 * 256)
    per_byte_long = long_rows.cycles / (128 * 4096)
    assert per_byte_short > 5 * per_byte_long                            # 256 B rows: ~1/6 of the rate
    assert long_rows.cycles == pytest.approx(128 * 4096 / 16 / (spec.dma_engine_bandwidth / 1e9))


def test_dma_efficiency_curve_follows_awss_bytes_per_partition_figure():
    # [DMA] figure "DMA Throughput varying Bytes per Partition for p_dim = 128" (read off the
    # plot, relative to the 32 KiB point): 1 KiB ~42 %, 2 KiB ~81 %, 4 KiB ~97 %. The figure does
    # not name its generation; the Trn1 rate (17 B/ns per engine) reproduces it.
    spec = presets.TRN1.core
    def relative(b):
        c = cost.dma_cost(spec, 128 * b, 128, b)
        return (128 * b / c.cycles) / (16 * spec.dma_engine_bandwidth / 1e9)
    assert relative(1024) == pytest.approx(0.42, abs=0.08)
    assert relative(2048) == pytest.approx(0.81, abs=0.12)
    assert relative(4096) == pytest.approx(0.97, abs=0.05)
    assert relative(256) < 0.15


def test_dma_uses_one_engine_per_eight_partitions_as_awss_measured_example():
    # [DMA] example 1: A[4, 4096] bf16 HBM -> SBUF runs on one DMA engine, 1,416 ns measured (trn2)
    spec = presets.TRN2.core
    core = NeuronCore(spec, mode="timing")
    src = core.hbm.allocate((4, 4096), "bfloat16")
    dst = core.sbuf.allocate((4, 4096), "bfloat16")
    d = core.timeline[core.dma_copy(dst, src)]
    engine_ns = d.end_ns - d.start_ns - spec.dma_latency_ns
    assert engine_ns == pytest.approx(1416, rel=0.05)
    assert cost.dma_engines_used(spec, 4) == 1 and cost.dma_engines_used(spec, 128) == 16


def test_contiguous_bytes_of_views():
    core = NeuronCore("trn2", mode="timing")
    a = core.hbm.allocate((256, 1024), "bfloat16")
    assert cost.contiguous_bytes(a[0:128, 0:128]) == 256           # part of a row
    assert cost.contiguous_bytes(a[0:128, :]) == 128 * 1024 * 2    # whole rows: one run
    assert cost.contiguous_bytes(a[:, 0:1024:2]) == 2              # strided
    t = core.sbuf.allocate((128, 512), "float32")
    assert cost.contiguous_bytes(t.full) == 2048                        # one partition's row
    blocks = core.sbuf.allocate((4, 128, 256), "bfloat16", partition_axis=1)
    assert cost.contiguous_bytes(blocks[1]) == 512


def test_vector_and_scalar_collide_only_on_the_same_psum_bank_from_v3():
    for spec, other_bank_waits in ((presets.TRN2.core, False), (presets.TRN1.core, True)):
        core = NeuronCore(spec, mode="timing")
        acc = [core.psum.allocate((128, 512), "float32") for _ in range(2)]   # two banks
        out = core.sbuf.allocate((128, 512), "bfloat16")
        read = core.timeline[core.activation(out, acc[0], "copy")]            # Scalar reads bank 0
        fill = core.timeline[core.memset(acc[1], 0.0, engine="vector")]        # Vector, bank 1
        assert (fill.start_ns >= read.end_ns) == other_bank_waits
        same = core.timeline[core.memset(acc[0], 0.0, engine="vector")]        # bank 0: waits
        assert same.start_ns >= read.end_ns


def test_a_port_is_arbitrated_in_time_not_in_issue_order():
    # NeuronCore-v2: Vector and GpSimd share the SBUF port. A GpSimd op issued after a Vector op
    # that must wait for its data takes the free port before it.
    core = NeuronCore(presets.TRN1.core, mode="timing")
    src = core.hbm.allocate((128, 512), "float32")
    late = core.sbuf.allocate((128, 512), "float32")
    core.dma_copy(late, src)                                     # late data (a DMA)
    a = core.sbuf.allocate((128, 512), "float32")
    b = core.sbuf.allocate((128, 512), "float32")
    waiting = core.timeline[core.tensor_copy(a, late, engine="vector")]
    ready = core.timeline[core.memset(b, 0.0, engine="gpsimd")]
    assert ready.start_ns == 0.0 and ready.end_ns <= waiting.start_ns

"""Instructions that are ONE instruction on the device are one instruction here, on the right
engine, with the published cost: activation with reduce_res / activation_reduce (Scalar engine),
scalar_tensor_tensor (Vector engine)."""
import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.hardware import NeuronCore, dtypes, presets
from trnlab.nki.errors import NKIError


def _compute(run):
    """(engine, opcode) of every instruction that is not a DMA."""
    return [(r.engine, r.opcode) for r in (run.timeline[i] for i in range(len(run.timeline)))
            if not r.engine.startswith("dma")]


def _row_sum_kernel(call_style):
    @nki.jit
    def kernel(x, bias):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        sums = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
        tile, bias_tile = nl.load(x), nl.load(bias)
        exps = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        row_sum = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        if call_style == "activation":
            nisa.activation(dst=exps, op=nl.exp, data=tile, bias=bias_tile, scale=0.5,
                            reduce_op=nl.add, reduce_res=row_sum)
        else:   # AWS's positional order: (dst, op, data, reduce_op, reduce_res, bias, scale)
            nisa.activation_reduce(exps, nl.exp, tile, nl.add, row_sum, bias_tile, 0.5)
        nl.store(out, value=exps)
        nl.store(sums, value=row_sum)
        return out, sums

    return kernel


@pytest.mark.parametrize("call_style", ["activation", "activation_reduce"])
def test_activation_with_reduction_is_one_scalar_engine_instruction(call_style):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(128, 300)).astype(np.float32)
    bias = rng.normal(size=(128, 1)).astype(np.float32)
    run = nki.run(_row_sum_kernel(call_style), x, bias)
    exps, sums = run.outputs
    expected = np.exp(x * 0.5 + bias)
    np.testing.assert_allclose(exps, expected, rtol=1e-5)
    np.testing.assert_allclose(sums[:, 0], expected.sum(axis=1), rtol=1e-5)
    assert _compute(run) == [("act", "activation")]
    # published cost: max(MIN_II, N) + MIN_II Scalar-engine cycles
    spec = presets.core_spec("trn2")
    (act,) = [run.timeline[i] for i in range(len(run.timeline)) if run.timeline[i].engine == "act"]
    cycles = spec.activation_static_cycles + max(spec.activation_min_cycles, 300) + spec.activation_min_cycles
    assert act.duration_ns == pytest.approx(cycles * 1e9 / spec.act_clock_hz)


def test_activation_reduce_refuses_a_reduction_the_scalar_engine_cannot_do():
    core = NeuronCore("trn2")
    x = core.sbuf.allocate((8, 16), dtypes.float32)
    res = core.sbuf.allocate((8, 1), dtypes.float32)
    core.memset(x, 1.0)
    with pytest.raises(Exception, match="only add"):
        core.activation(dst=x, data=x, op="exp", reduce_op="maximum", reduce_res=res)


def test_activation_with_reduction_in_timing_mode_costs_the_same():
    kernel = _row_sum_kernel("activation")
    x, bias = np.ones((128, 64), np.float32), np.zeros((128, 1), np.float32)
    full = nki.run(kernel, x, bias)
    timing = nki.run(kernel, nki.ShapeDtype((128, 64), nl.float32), nki.ShapeDtype((128, 1), nl.float32),
                     timing_only=True)
    assert timing.latency_ns == pytest.approx(full.latency_ns)


@pytest.mark.parametrize("reverse0,reverse1", [(False, False), (True, False), (False, True), (True, True)])
def test_scalar_tensor_tensor_is_one_vector_instruction(reverse0, reverse1):
    @nki.jit
    def kernel(x, scale, y):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        result = nisa.scalar_tensor_tensor(data=nl.load(x), op0=nl.subtract, operand0=nl.load(scale),
                                           op1=nl.divide, operand1=nl.load(y), reverse0=reverse0,
                                           reverse1=reverse1)
        nl.store(out, value=result)
        return out

    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(64, 40)).astype(np.float32), rng.uniform(1, 2, size=(64, 40)).astype(np.float32)
    scale = rng.normal(size=(64, 1)).astype(np.float32)
    run = nki.run(kernel, x, scale, y)
    first = scale - x if reverse0 else x - scale
    expected = y / first if reverse1 else first / y
    np.testing.assert_allclose(run.outputs, expected, rtol=1e-5)
    assert _compute(run) == [("dve", "scalar_tensor_tensor")]


@pytest.mark.parametrize("dtype,op0,expected_per_element", [
    (dtypes.bfloat16, "subtract", 1),      # the documented fast case
    (dtypes.bfloat16, "add", 2),
    (dtypes.float32, "subtract", 2),
])
def test_scalar_tensor_tensor_cost_follows_the_published_table(dtype, op0, expected_per_element):
    spec = presets.core_spec("trn2")
    core = NeuronCore(spec, mode="timing")
    x, y, out = (core.sbuf.allocate((128, 256), dtype) for _ in range(3))
    index = core.scalar_tensor_tensor(dst=out, data=x, op0=op0, operand0=1.0, op1="multiply", operand1=y)
    cycles = spec.vector_static_cycles + expected_per_element * 256
    assert core.timeline[index].duration_ns == pytest.approx(cycles * 1e9 / spec.dve_clock_hz)


# -- iota ---------------------------------------------------------------------------------------
def test_iota_keeps_an_axis_whose_coefficient_is_zero():
    @nki.jit
    def kernel(x):
        out = nl.ndarray((128, 16), dtype=nl.int32, buffer=nl.shared_hbm)
        i_p, i_f = nl.mgrid[0:128, 0:16]
        nl.store(out, value=nisa.iota(0 * i_p + i_f, dtype=nl.int32))
        return out

    run = nki.run(kernel, np.zeros(1, np.float32))
    np.testing.assert_array_equal(run.outputs, np.broadcast_to(np.arange(16), (128, 16)))
    assert _compute(run) == [("pool", "iota")]


def test_iota_of_cancelling_arange_terms_spans_both_axes():
    @nki.jit
    def kernel(x):
        out = nl.ndarray((8, 5), dtype=nl.float32, buffer=nl.shared_hbm)
        i_p, i_f = nl.arange(8)[:, None], nl.arange(5)[None, :]
        nl.store(out, value=nisa.iota(i_p - i_p + 3 * i_f + 1, dtype=nl.float32))
        return out

    np.testing.assert_array_equal(kernel(np.zeros(1, np.float32)), np.broadcast_to(3 * np.arange(5) + 1, (8, 5)))


def test_iota_pattern_form_follows_the_documented_formula():
    """Current NKI: dst[p, w, x] = offset + p * channel_multiplier + w * step_w + x * step_x."""
    @nki.jit
    def kernel(x):
        out = nl.ndarray((32, 4, 6), dtype=nl.int32, buffer=nl.shared_hbm)
        tile = nl.ndarray((32, 4, 6), dtype=nl.int32, buffer=nl.sbuf)
        nisa.iota(dst=tile, pattern=[[100, 4], [2, 6]], offset=7, channel_multiplier=-3)
        nl.store(out, value=tile)
        return out

    p, w, x = np.meshgrid(np.arange(32), np.arange(4), np.arange(6), indexing="ij")
    np.testing.assert_array_equal(kernel(np.zeros(1, np.float32)), 7 - 3 * p + 100 * w + 2 * x)


def test_iota_costs_150_plus_n_gpsimd_cycles():
    spec = presets.core_spec("trn2")
    core = NeuronCore(spec, mode="timing")
    tile = core.sbuf.allocate((128, 300), dtypes.int32)
    index = core.iota(tile, np.zeros((128, 300), np.int32))
    assert core.timeline[index].engine == "pool"
    assert core.timeline[index].duration_ns == pytest.approx((150 + 300) * 1e9 / spec.pool_clock_hz)


def test_iota_refuses_the_non_nki_dst_expr_form():
    @nki.jit
    def kernel(x):
        tile = nl.ndarray((8, 4), dtype=nl.int32, buffer=nl.sbuf)
        nisa.iota(dst=tile, expr=nl.arange(4)[None, :])
        return x

    with pytest.raises(NKIError, match="pattern"):
        kernel(np.zeros(1, np.float32))


# -- affine_select / nl.where: one instruction, exact for inf and NaN ------------------------------
def test_affine_select_is_one_gpsimd_instruction_and_passes_inf_and_nan_through():
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        i_q, i_k = nl.mgrid[0:64, 0:64]
        nl.store(out, value=nisa.affine_select(i_q >= i_k, nl.load(x[i_q, i_k]), -np.inf))
        return out

    x = np.random.default_rng(2).normal(size=(64, 64)).astype(np.float32)
    x[5, 2], x[7, 7], x[3, 9] = np.inf, np.nan, np.nan      # kept, kept, masked
    run = nki.run(kernel, x)
    expected = np.where(np.tril(np.ones((64, 64), bool)), x, -np.inf)
    np.testing.assert_array_equal(run.outputs, expected)     # NaN == NaN for assert_array_equal
    assert _compute(run) == [("pool", "affine_select")]
    spec = presets.core_spec("trn2")
    (select,) = [run.timeline[i] for i in range(len(run.timeline)) if run.timeline[i].engine == "pool"]
    assert select.duration_ns == pytest.approx((150 + 64) * 1e9 / spec.pool_clock_hz)


def test_affine_select_pattern_form_compares_the_iota_value_with_zero():
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        result = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        # keep where p - f >= 0 (the causal mask): value = p * 1 + f * (-1)
        nisa.affine_select(dst=result, pattern=[[-1, 32]], offset=0, channel_multiplier=1,
                           on_true_tile=nl.load(x), on_false_value=-5.0, cmp_op=nl.greater_equal)
        nl.store(out, value=result)
        return out

    x = np.arange(32 * 32, dtype=np.float32).reshape(32, 32)
    np.testing.assert_array_equal(kernel(x), np.where(np.tril(np.ones((32, 32), bool)), x, -5.0))


@pytest.mark.parametrize("y_kind", ["number", "tile", "column"])
def test_where_is_one_vector_select_exact_for_inf_and_nan(y_kind):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(32, 24)).astype(np.float32)
    x[0, :3] = [np.inf, -np.inf, np.nan]
    y = {"number": np.float32(-7.0), "tile": rng.normal(size=(32, 24)).astype(np.float32),
         "column": rng.normal(size=(32, 1)).astype(np.float32)}[y_kind]

    @nki.jit
    def kernel(x, y):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        tile = nl.load(x)
        condition = nl.greater(nl.load(x), 0.0)
        nl.store(out, value=nl.where(condition, tile, -7.0 if y_kind == "number" else nl.load(y)))
        return out

    run = nki.run(kernel, x, y if y_kind != "number" else np.zeros(1, np.float32))
    with np.errstate(invalid="ignore"):
        expected = np.where(x > 0, x, y)
    np.testing.assert_array_equal(run.outputs, expected)
    assert [op for _, op in _compute(run)] == ["tensor_scalar", "select"]
    assert _compute(run)[-1][0] == "dve"


def test_where_with_a_number_for_x_selects_the_tile_where_the_condition_is_false():
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        tile = nl.load(x)
        nl.store(out, value=nl.where(nl.greater(tile, 0.0), 1.5, tile))
        return out

    x = np.linspace(-2, 2, 40, dtype=np.float32).reshape(4, 10)
    np.testing.assert_array_equal(kernel(x), np.where(x > 0, np.float32(1.5), x))


# -- indirect DMA: nl.load(table[ids_tile, i_f]) -------------------------------------------------------
def test_indirect_load_gathers_rows_named_by_an_sbuf_index_tile_as_aws_documents():
    """AWS's nl.load example 1: indices loaded from HBM into a [64, 1] tile, then table[idx_tile[i_p, 0], i_f]."""
    @nki.jit
    def kernel(table, ids):
        out = nl.ndarray((64, 512), dtype=table.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.arange(64)[:, None], nl.arange(512)[None, :]
        idx_tile = nl.load(ids[i_p])
        nl.store(out, value=nl.load(table[idx_tile[i_p, 0], i_f]))
        return out

    rng = np.random.default_rng(4)
    table = rng.normal(size=(128, 512)).astype(np.float32)
    ids = rng.integers(0, 128, size=64).astype(np.int32)
    run = nki.run(kernel, table, ids)
    np.testing.assert_array_equal(run.outputs, table[ids])
    gathers = [run.timeline[i] for i in range(len(run.timeline)) if run.timeline[i].opcode == "dma_gather"]
    assert len(gathers) == 1 and gathers[0].engine.startswith("dma")
    assert gathers[0].hbm_bytes == 64 * 512 * 4
    assert gathers[0].start_ns >= run.timeline[0].end_ns          # it needs the indices on chip first


def test_indirect_load_with_iota_indices_and_a_cast():
    """AWS's example 2: idx_tile = nisa.iota(2 * nl.arange(64)[:, None], dtype=int32); table[idx_tile, i_f]."""
    @nki.jit
    def kernel(table):
        out = nl.ndarray((64, 32), dtype=nl.bfloat16, buffer=nl.shared_hbm)
        i_f = nl.arange(32)[None, :]
        idx_tile = nisa.iota(2 * nl.arange(64)[:, None], dtype=np.int32)
        nl.store(out, value=nl.load(table[idx_tile, i_f], dtype=nl.bfloat16))
        return out

    table = np.arange(128 * 32, dtype=np.float32).reshape(128, 32) / 7
    np.testing.assert_array_equal(np.asarray(kernel(table), np.float32),
                                  table[::2].astype(dtypes.bfloat16).astype(np.float32))


def test_indirect_load_out_of_bounds_and_indirect_store_are_named_errors():
    @nki.jit
    def gather(table, ids):
        out = nl.ndarray((4, 8), dtype=table.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(table[nl.load(ids.reshape((4, 1))), :]))
        return out

    @nki.jit
    def scatter(table, ids):
        out = nl.ndarray(table.shape, dtype=table.dtype, buffer=nl.shared_hbm)
        nl.store(out[nl.load(ids.reshape((4, 1))), :], value=nl.load(table[0:4, :]))
        return out

    table = np.zeros((6, 8), np.float32)
    with pytest.raises(Exception, match="out-of-bounds.*row 6"):
        gather(table, np.array([0, 6, 1, 2], np.int32))
    with pytest.raises(NKIError, match="scatter"):
        scatter(table, np.array([0, 1, 2, 3], np.int32))


def test_indirect_load_in_timing_mode_costs_the_same():
    @nki.jit
    def kernel(table, ids):
        out = nl.ndarray((128, 64), dtype=table.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(table[nl.load(ids.reshape((128, 1))), :]))
        return out

    table, ids = np.ones((300, 64), np.float32), np.zeros(128, np.int32)
    full = nki.run(kernel, table, ids)
    timing = nki.run(kernel, nki.ShapeDtype((300, 64), nl.float32), nki.ShapeDtype((128,), nl.int32),
                     timing_only=True)
    assert timing.latency_ns == pytest.approx(full.latency_ns)


# -- bn_stats / bn_aggr ------------------------------------------------------------------------------
def test_bn_stats_holds_count_mean_and_m2_of_the_even_and_the_odd_elements():
    @nki.jit
    def kernel(x):
        out = nl.ndarray((x.shape[0], 6), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nisa.bn_stats(nl.load(x), dtype=nl.float32))
        return out

    x = np.random.default_rng(5).normal(size=(16, 11)).astype(np.float32)
    stats = kernel(x)
    for half, columns in ((x[:, 0::2], slice(0, 3)), (x[:, 1::2], slice(3, 6))):
        expected = np.stack([np.full(16, half.shape[1]), half.mean(1), half.var(1) * half.shape[1]], axis=1)
        np.testing.assert_allclose(stats[:, columns], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cols", [1, 300, 512, 1300])
def test_bn_aggr_of_bn_stats_pieces_gives_mean_and_population_variance(cols):
    """AWS's layer-norm recipe: bn_stats per 512 features (the last piece masked), one bn_aggr."""
    @nki.jit
    def kernel(x):
        R, C = x.shape
        out = nl.ndarray((R, 2), dtype=nl.float32, buffer=nl.shared_hbm)
        i_p, i_c = nl.arange(R)[:, None], nl.arange(C)[None, :]
        tile = nl.load(x[i_p, i_c])
        fmax = nl.tile_size.bn_stats_fmax
        pieces = -(-C // fmax)
        i_f, i_six = nl.arange(fmax)[None, :], nl.arange(6)[None, :]
        stats = nl.ndarray((R, 6 * pieces), dtype=nl.float32, buffer=nl.sbuf)
        for j in nl.affine_range(pieces):
            stats[i_p, j * 6 + i_six] = nisa.bn_stats(tile[i_p, j * fmax + i_f], mask=(j * fmax + i_f < C))
        mean_var = nl.ndarray((R, 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.bn_aggr(dst=mean_var, data=stats)
        nl.store(out, value=mean_var)
        return out

    x = (np.random.default_rng(cols).normal(size=(128, cols)) * 3 + 5).astype(np.float32)
    run = nki.run(kernel, x)
    np.testing.assert_allclose(run.outputs[:, 0], x.mean(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(run.outputs[:, 1], x.var(1), rtol=1e-4, atol=1e-5)
    pieces = -(-cols // 512)
    assert _compute(run) == [("dve", "bn_stats")] * pieces + [("dve", "bn_aggr")]
    spec = presets.core_spec("trn2")
    (aggr,) = [run.timeline[i] for i in range(len(run.timeline)) if run.timeline[i].opcode == "bn_aggr"]
    cycles = spec.vector_static_cycles + max(64, 13 * (6 * pieces) // 3)
    assert aggr.duration_ns == pytest.approx(cycles * 1e9 / spec.dve_clock_hz)


def test_bn_stats_refuses_more_than_512_elements_per_partition():
    core = NeuronCore("trn2")
    x, stats = core.sbuf.allocate((8, 513), dtypes.float32), core.sbuf.allocate((8, 6), dtypes.float32)
    core.memset(x, 1.0)
    with pytest.raises(Exception, match="bn_stats_fmax"):
        core.bn_stats(stats, x)


def test_select_reduce_selects_with_a_per_partition_on_false_in_one_vector_instruction():
    @nki.jit
    def kernel(x, fill):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        tile = nl.load(x)
        result = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.select_reduce(dst=result, predicate=nl.greater(tile, 0.0), on_true=tile, on_false=nl.load(fill),
                           reverse_pred=True)
        nl.store(out, value=result)
        return out

    rng = np.random.default_rng(6)
    x, fill = rng.normal(size=(16, 9)).astype(np.float32), rng.normal(size=(16, 1)).astype(np.float32)
    run = nki.run(kernel, x, fill)
    np.testing.assert_array_equal(run.outputs, np.where(x > 0, fill, x))
    assert _compute(run)[-1] == ("dve", "select")


def test_activation_reduce_registers_accumulate_across_instructions_with_reduce_cmd():
    """reset_reduce, then reduce, then idle with reduce_res: the registers hold the running row sum."""
    @nki.jit
    def kernel(x):
        R, C = x.shape
        out = nl.ndarray((R, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        tile = nl.load(x)
        scratch = nl.ndarray((R, C // 2), dtype=nl.float32, buffer=nl.sbuf)
        total = nl.ndarray((R, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=scratch, op=nl.exp, data=tile[:, 0:C // 2], reduce_op=nl.add,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.activation(dst=scratch, op=nl.exp, data=tile[:, C // 2:C], reduce_op=nl.add,
                        reduce_cmd=nisa.reduce_cmd.reduce)
        nisa.activation(dst=scratch, op=nl.copy, data=tile[:, 0:C // 2], reduce_res=total,
                        reduce_cmd=nisa.reduce_cmd.idle)
        nl.store(out, value=total)
        return out

    x = np.random.default_rng(7).normal(size=(32, 20)).astype(np.float32)
    run = nki.run(kernel, x)
    np.testing.assert_allclose(run.outputs[:, 0], np.exp(x).sum(axis=1), rtol=1e-5)
    assert _compute(run) == [("act", "activation")] * 3


def test_tensor_scalar_reduce_is_one_vector_instruction_with_the_published_cost():
    @nki.jit
    def kernel(x):
        out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        row_sum = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        scaled = nl.ndarray((128, 300), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_reduce(dst=scaled, data=nl.load(x), op0=nl.multiply, operand0=2.0,
                                  reduce_op=nl.add, reduce_res=row_sum)
        nl.store(out, value=row_sum)
        return out

    x = np.random.default_rng(3).normal(size=(128, 300)).astype(np.float32)
    run = nki.run(kernel, x)
    np.testing.assert_allclose(run.outputs[:, 0], 2 * x.sum(axis=1), rtol=1e-5, atol=1e-4)
    assert _compute(run) == [("dve", "tensor_scalar_reduce")]
    # published cost [nki.isa.tensor_scalar_reduce]: max(MIN_II, N) + MIN_II Vector cycles (+ static)
    spec = presets.core_spec("trn2")
    (dve,) = [run.timeline[i] for i in range(len(run.timeline)) if run.timeline[i].engine == "dve"]
    cycles = spec.vector_static_cycles + max(spec.activation_min_cycles, 300) + spec.activation_min_cycles
    assert dve.duration_ns == pytest.approx(cycles * 1e9 / spec.dve_clock_hz)


def test_tensor_tensor_scan_is_one_vector_instruction_over_the_whole_row():
    @nki.jit
    def kernel(a, b):
        out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nisa.tensor_tensor_scan(nl.load(a), nl.load(b), 1.0, np.multiply, np.add))
        return out

    rng = np.random.default_rng(4)
    a, b = rng.uniform(0, 1, (64, 40)).astype(np.float32), rng.normal(size=(64, 40)).astype(np.float32)
    run = nki.run(kernel, a, b)
    expected, carry = np.empty_like(a), np.ones(64, np.float32)
    for t in range(40):
        carry = a[:, t] * carry + b[:, t]
        expected[:, t] = carry
    np.testing.assert_allclose(run.outputs, expected, rtol=1e-5, atol=1e-6)
    assert _compute(run) == [("dve", "tensor_tensor_scan")]

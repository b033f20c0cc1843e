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

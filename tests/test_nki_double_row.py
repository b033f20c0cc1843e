"""FP8 double-row matmul (`nc_matmul(perf_mode="double_row_gen3")` / `matmul_perf_mode.double_row`):
AWS's einsum semantics, twice the Tensor engine's throughput, and the generation rule."""
import ml_dtypes
import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.isa as nisa
from trnlab.hardware.double_row import PerfModeError

from nki_kernels.double_row import double_row_accumulated, double_row_product, plain_fp8_matmul, scale_rows

FP8 = ml_dtypes.float8_e4m3


def _fp8(rng, shape):
    return rng.normal(size=shape).astype(FP8)


def _pe_busy_ns(run, opcode):
    records = [r for r in run.core.timeline.records if r[1] == opcode]
    assert records, f"no {opcode} instruction ran"
    return sum(r[3] - r[2] for r in records)


@pytest.mark.parametrize("target", ["trn2", "trn3"])
def test_double_row_contracts_k_and_the_pair_axis(target):
    rng = np.random.default_rng(0)
    a, b = _fp8(rng, (128, 2, 96)), _fp8(rng, (128, 2, 512))
    out = nki.run(double_row_product, a, b, target=target).outputs
    expected = np.einsum("kri,krj->ij", a.astype(np.float32), b.astype(np.float32))
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-4)


def test_double_row_matmuls_accumulate_a_long_contraction_in_psum():
    rng = np.random.default_rng(1)
    lhsT, rhs = _fp8(rng, (1024, 128)), _fp8(rng, (1024, 256))
    out = double_row_accumulated(lhsT, rhs)
    expected = lhsT.astype(np.float32).T @ rhs.astype(np.float32)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-3)


def test_double_row_has_twice_the_throughput_of_a_plain_matmul():
    rng = np.random.default_rng(2)
    a, b = _fp8(rng, (128, 2, 128)), _fp8(rng, (128, 2, 512))
    double = nki.run(double_row_product, a, b)
    plain = nki.run(plain_fp8_matmul, a[:, 0, :].copy(), b[:, 0, :].copy())
    # one double-row instruction streams its N columns in the time of one plain pass ...
    assert _pe_busy_ns(double, "nc_matmul_double_row") == pytest.approx(_pe_busy_ns(plain, "nc_matmul"))
    # ... and does the FLOPs of two
    flops = [r[5] for r in double.core.timeline.records if r[1] == "nc_matmul_double_row"]
    assert flops == [2.0 * 256 * 128 * 512]


def test_double_row_is_refused_on_neuroncore_v2_with_the_rule_named():
    rng = np.random.default_rng(3)
    a, b = _fp8(rng, (128, 2, 64)), _fp8(rng, (128, 2, 64))
    with pytest.raises(PerfModeError, match="NeuronCore-v3 or newer"):
        nki.run(double_row_product, a, b, target="trn1")


def test_double_row_takes_fp8_inputs_only():
    rng = np.random.default_rng(4)
    a = rng.normal(size=(128, 2, 64)).astype(ml_dtypes.bfloat16)
    b = rng.normal(size=(128, 2, 64)).astype(ml_dtypes.bfloat16)
    with pytest.raises(PerfModeError, match="FP8 mode"):
        nki.run(double_row_product, a, b)


def test_an_unknown_perf_mode_is_refused_by_name():
    from trnlab.nki.perf_mode import is_double_row
    assert is_double_row(nisa.matmul_perf_mode.double_row) and not is_double_row(None)
    with pytest.raises(nki.NKIError, match="unknown performance mode"):
        is_double_row("quad_row")


def test_tensor_tensor_with_a_per_partition_column_broadcasts_it():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(128, 300)).astype(np.float32)
    scale = rng.uniform(1, 2, size=(128, 1)).astype(np.float32)
    np.testing.assert_allclose(scale_rows(x, scale), x * scale, rtol=1e-6)

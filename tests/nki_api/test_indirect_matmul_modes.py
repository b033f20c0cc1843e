"""Tensor indirection with nc_matmul's modes and hints, as AWS's pages allow them (trnlab/hardware/indirection.py):
perf_mode=double_row with a scattered dst (the FP8 double-row product written into the columns at the offsets;
a dst in bf16, as NeuronCore-v4 allows), a gathered double-row operand refused by the layout rule ([K, 2, F]
against the view's [P, num_elem]), the one/zero hints on an indirect matmul's dense float32 operands, and
``mask=`` with an ``.indirect()`` view refused by name (no NKI release has both)."""
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.hardware.errors import DtypeError, MatmulShapeError, OneZeroHintError
from trnlab.nki.tensor_indirection import IndirectionMaskError

from nki_isa_helpers import hbm_copy, run_both, sbuf_copy as _sbuf
from test_tensor_indirection_matmul import expected_offsets

BF16, FP8 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3


def _scattered(double_row: bool = False, hints: dict | None = None):
    @nki.jit
    def scattered(lhsT, rhs, dst_columns):
        """out = zeros [M, 2N] with the product (double-row: sum over k and the pair axis) written into the N
        columns at the offsets (a bf16 PSUM dst)."""
        M, N = lhsT.shape[-1], rhs.shape[-1]
        lhsT_tile, rhs_tile, idx = _sbuf(lhsT), _sbuf(rhs), _sbuf(dst_columns)
        acc = nl.ndarray((M, 2 * N), dtype=nl.bfloat16, buffer=nl.psum)
        nisa.memset(dst=acc, value=0.0)
        mode = {"perf_mode": nisa.matmul_perf_mode.double_row} if double_row else {}
        nisa.nc_matmul(dst=acc.indirect(idx, num_elem=N), stationary=lhsT_tile, moving=rhs_tile, **mode,
                       **(hints or {}))
        result = nl.ndarray((M, 2 * N), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=result, src=acc)
        return hbm_copy(result)

    return scattered


def _columns(rng, M: int, N: int) -> np.ndarray:
    """[M, ceil(N / 32)] uint16: each group of 32 partitions scatters into N distinct columns of 2N."""
    smallest = min(32, M - 32 * ((M - 1) // 32))             # the last group's partitions
    columns = np.zeros((M, -(-N // smallest)), np.uint16)
    for first in range(0, M, 32):
        rows = min(32, M - first)
        for i, column in enumerate(rng.permutation(2 * N)[:N]):
            columns[first + i % rows, i // rows] = column
    return columns


@settings(max_examples=6, deadline=None)
@given(K=st.integers(1, 128), M=st.sampled_from([8, 32, 48]), N=st.integers(1, 32), seed=st.integers(0, 2**16))
def test_double_row_scatters_its_pair_contracted_product(K, M, N, seed):
    rng = np.random.default_rng(seed)
    lhsT = rng.normal(size=(K, 2, M)).astype(FP8)
    rhs = rng.normal(size=(K, 2, N)).astype(FP8)
    columns = _columns(rng, M, N)
    run = run_both(_scattered(double_row=True), lhsT, rhs, columns, target="trn3")
    product = np.einsum("kri,krj->ij", lhsT.astype(np.float32), rhs.astype(np.float32))
    expected = np.zeros((M, 2 * N), np.float32)
    np.put_along_axis(expected, expected_offsets(columns, N), product.astype(BF16).astype(np.float32), axis=1)
    np.testing.assert_allclose(run.outputs, expected, rtol=1e-6)


def test_double_row_writes_a_bf16_dst_from_neuroncore_v4_only():
    """"Starting NeuronCore-v4, dst can either be a float32 or bfloat16 tile" (nki.isa.nc_matmul, "Data types")."""
    @nki.jit
    def dense(lhsT, rhs):
        acc = nl.ndarray((lhsT.shape[-1], rhs.shape[-1]), dtype=nl.bfloat16, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=_sbuf(lhsT), moving=_sbuf(rhs), perf_mode=nisa.matmul_perf_mode.double_row)
        result = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=result, src=acc)
        return hbm_copy(result)

    rng = np.random.default_rng(3)
    lhsT, rhs = rng.normal(size=(64, 2, 16)).astype(FP8), rng.normal(size=(64, 2, 24)).astype(FP8)
    run = run_both(dense, lhsT, rhs, target="trn3")
    product = np.einsum("kri,krj->ij", lhsT.astype(np.float32), rhs.astype(np.float32))
    np.testing.assert_allclose(run.outputs, product.astype(BF16).astype(np.float32), rtol=1e-6)
    with pytest.raises(DtypeError, match="bf16 also on NeuronCore-v4"):
        nki.run(dense, lhsT, rhs, target="trn2")


def test_a_gathered_double_row_operand_is_refused_by_the_layout_rule():
    @nki.jit
    def gathered(lhsT, rhs, columns):
        acc = nl.ndarray((16, rhs.shape[-1]), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=_sbuf(lhsT).indirect(_sbuf(columns), num_elem=16), moving=_sbuf(rhs),
                       perf_mode=nisa.matmul_perf_mode.double_row)
        return acc

    lhsT, rhs = np.zeros((32, 2, 16), FP8), np.zeros((32, 2, 8), FP8)
    with pytest.raises(MatmulShapeError, match=r"double_row's stationary is \[K, 2, F\]"):
        nki.run(gathered, lhsT, rhs, np.zeros((32, 1), np.uint16), target="trn3")


def test_the_hints_on_an_indirect_matmul_halve_its_float32_passes_and_check_its_operands():
    rng = np.random.default_rng(5)
    K, M, N = 64, 32, 16
    ones = rng.integers(0, 2, size=(K, M)).astype(np.float32)
    rhs = rng.normal(size=(K, N)).astype(np.float32)
    columns = _columns(rng, M, N)

    def matmul_ns(run):
        return [r.end_ns - r.start_ns for r in (run.timeline[i] for i in range(len(run.timeline)))
                if r.opcode == "nc_matmul"]
    hinted = run_both(_scattered(hints={"is_stationary_onezero": True}), ones, rhs, columns, target="trn3")
    plain = run_both(_scattered(), ones, rhs, columns, target="trn3")
    np.testing.assert_array_equal(hinted.outputs, plain.outputs)
    assert matmul_ns(hinted) == pytest.approx([matmul_ns(plain)[0] / 2])
    with pytest.raises(OneZeroHintError, match="is_moving_onezero=True"):
        nki.run(_scattered(hints={"is_moving_onezero": True}), ones, rhs, columns, target="trn3")


@pytest.mark.parametrize("instruction", ["tensor_copy", "nc_matmul"])
def test_a_mask_with_an_indirect_view_is_refused_by_name(instruction):
    @nki.jit
    def masked(data, columns):
        tile, idx = _sbuf(data), _sbuf(columns)
        i_p = nl.arange(32)[:, None]
        if instruction == "tensor_copy":
            out = nl.ndarray((32, 8), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=out, src=tile.indirect(idx, num_elem=8), mask=(i_p < 16))
        else:
            out = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=out, stationary=tile.indirect(idx, num_elem=8), moving=tile[:, 0:16],
                           mask=(i_p < 16))
        return out

    with pytest.raises(IndirectionMaskError, match="no mask="):
        nki.run(masked, np.zeros((32, 16), BF16), np.zeros((32, 1), np.uint16), target="trn3")

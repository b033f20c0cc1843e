"""Tensor Indirection on the Tensor engine (NeuronCore-v4 / Trn3): `nc_matmul` gathers the columns of its
stationary and moving, or scatters its result into the columns of dst, at offsets read from SBUF uint16 tiles
when it runs, 32 partitions sharing their offsets; `nc_matmul_mx` gathers an MX operand with its scales (one
index for the pair). Values against NumPy (fast paths on and off, the same timeline), and each of the rules of
AWS's "Tensor indirection" paragraphs (nki.isa.nc_matmul, nki.isa.nc_matmul_mx) refused by name."""
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.hardware import mx
from trnlab.hardware.errors import (DtypeError, GenerationError, MatmulShapeError, PETilingError, ShapeMismatchError,
                                   StartPartitionError)
from trnlab.hardware.indirection import IndirectionOperandError

from nki_isa_helpers import run_both

RNG = np.random.default_rng(2133)
BF16 = ml_dtypes.bfloat16


def expected_offsets(index: np.ndarray, count: int, group: int = 32) -> np.ndarray:
    """[P, count]: partition p's offsets as AWS's NkiTensor.indirect page states them, "offset i comes from
    index[i % G, i // G]" with G = 32 on the Tensor engine, each group of G partitions reading its own rows."""
    P = index.shape[0]
    out = np.empty((P, count), np.int64)
    for p in range(P):
        rows = index[group * (p // group): group * (p // group) + group]
        out[p] = [rows[i % rows.shape[0], i // rows.shape[0]] for i in range(count)]
    return out


def _sbuf(hbm, dtype=None):
    tile = nl.ndarray(hbm.shape, dtype=dtype or hbm.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=hbm)
    return tile


def _gathered_matmul(m, n, gather_stationary=True, gather_moving=True):
    @nki.jit
    def gathered_matmul(lhsT, rhs, stationary_columns, moving_columns):
        """out[m, n] = lhsT's m columns at its offsets .T @ rhs's n columns at its offsets."""
        lhsT_tile, rhs_tile = _sbuf(lhsT), _sbuf(rhs)
        st_idx, mv_idx = _sbuf(stationary_columns), _sbuf(moving_columns)
        stationary = lhsT_tile.indirect(st_idx, num_elem=m) if gather_stationary else lhsT_tile[:, 0:m]
        moving = rhs_tile.indirect(mv_idx, num_elem=n) if gather_moving else rhs_tile[:, 0:n]
        acc = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=stationary, moving=moving)
        result = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=result, src=acc)
        out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=result)
        return out

    return gathered_matmul


@settings(max_examples=8, deadline=None)
@given(K=st.sampled_from([8, 32, 64, 128]), k=st.integers(1, 2), seed=st.integers(0, 2**16), data=st.data(),
       which=st.sampled_from([(True, True), (True, False), (False, True)]))
def test_nc_matmul_gathers_its_operands_per_32_partition_group(K, k, seed, data, which):
    rng = np.random.default_rng(seed)
    M, N = data.draw(st.integers(1, 200)), data.draw(st.integers(1, 300))
    m = data.draw(st.integers(1, min(min(32, K) * k, 128, M if not which[0] else 128)))
    n = data.draw(st.integers(1, min(32, K) * k if which[1] else N))
    lhsT = rng.normal(size=(K, M)).astype(BF16)
    rhs = rng.normal(size=(K, N)).astype(BF16)
    st_cols = rng.integers(0, M, size=(K, k)).astype(np.uint16)
    mv_cols = rng.integers(0, N, size=(K, k)).astype(np.uint16)
    run = run_both(_gathered_matmul(m, n, *which), lhsT, rhs, st_cols, mv_cols, target="trn3")
    a = lhsT.astype(np.float32)
    b = rhs.astype(np.float32)
    a = np.take_along_axis(a, expected_offsets(st_cols, m), 1) if which[0] else a[:, :m]
    b = np.take_along_axis(b, expected_offsets(mv_cols, n), 1) if which[1] else b[:, :n]
    np.testing.assert_allclose(run.outputs, a.T @ b, rtol=1e-5, atol=1e-4)


@nki.jit
def scattered_matmul(lhsT, rhs, dst_columns):
    """out = zeros [M, 2N] with lhsT.T @ rhs written into the N columns at the offsets (a bf16 PSUM dst)."""
    M, N = lhsT.shape[1], rhs.shape[1]
    lhsT_tile, rhs_tile, idx = _sbuf(lhsT), _sbuf(rhs), _sbuf(dst_columns)
    acc = nl.ndarray((M, 2 * N), dtype=nl.bfloat16, buffer=nl.psum)
    nisa.memset(dst=acc, value=0.0)
    nisa.nc_matmul(dst=acc.indirect(idx, num_elem=N), stationary=lhsT_tile, moving=rhs_tile)
    result = nl.ndarray((M, 2 * N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=result, src=acc)
    out = nl.ndarray((M, 2 * N), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=result)
    return out


def test_nc_matmul_scatters_its_result_into_the_chosen_columns():
    K, M, N = 64, 48, 20
    lhsT, rhs = RNG.normal(size=(K, M)).astype(BF16), RNG.normal(size=(K, N)).astype(BF16)
    columns = np.zeros((M, 2), np.uint16)              # each group of 32 partitions: N distinct columns
    for first in range(0, M, 32):
        rows = min(32, M - first)
        for i, column in enumerate(RNG.permutation(2 * N)[:N]):
            columns[first + i % rows, i // rows] = column
    run = run_both(scattered_matmul, lhsT, rhs, columns, target="trn3")
    expected = np.zeros((M, 2 * N), np.float32)
    product = (lhsT.astype(np.float32).T @ rhs.astype(np.float32)).astype(BF16).astype(np.float32)
    np.put_along_axis(expected, expected_offsets(columns, N), product, axis=1)
    np.testing.assert_allclose(run.outputs, expected, rtol=1e-6)


@nki.jit
def gathered_transpose(x, columns):
    """out = (x's 8 columns at the offsets).T, through the PE array (nc_matmul is_transpose=True)."""
    P = x.shape[0]
    tile, idx = _sbuf(x), _sbuf(columns)
    identity = nl.ndarray((P, P), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=identity, value=0.0)
    acc = nl.ndarray((8, P), dtype=x.dtype, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=tile.indirect(idx, num_elem=8), moving=identity, is_transpose=True)
    out = nl.ndarray((8, P), dtype=x.dtype, buffer=nl.shared_hbm)
    staged = nl.ndarray((8, P), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=staged, src=acc)
    nisa.dma_copy(dst=out, src=staged)
    return out


def test_a_transposing_matmul_passes_the_gathered_stationary_through():
    x = RNG.normal(size=(64, 40)).astype(BF16)
    columns = RNG.integers(0, 40, size=(64, 1)).astype(np.uint16)
    run = run_both(gathered_transpose, x, columns, target="trn3")
    np.testing.assert_array_equal(run.outputs, np.take_along_axis(x, expected_offsets(columns, 8), 1).T)


def test_timing_mode_gives_the_same_timeline_and_the_matmul_waits_for_its_index():
    lhsT, rhs = RNG.normal(size=(32, 64)).astype(BF16), RNG.normal(size=(32, 64)).astype(BF16)
    cols = RNG.integers(0, 64, size=(32, 1)).astype(np.uint16)
    kernel = _gathered_matmul(16, 16)
    full = nki.run(kernel, lhsT, rhs, cols, cols, target="trn3")
    timed = nki.run(kernel, lhsT, rhs, cols, cols, target="trn3", timing_only=True)
    records = [full.timeline[i] for i in range(len(full.timeline))]
    assert [(r.opcode, r.start_ns, r.end_ns) for r in records] == \
        [(r.opcode, r.start_ns, r.end_ns) for r in (timed.timeline[i] for i in range(len(timed.timeline)))]
    matmul = next(r for r in records if r.opcode == "nc_matmul")
    index_dmas = [r for r in records if r.engine.startswith("dma")][2:4]
    assert matmul.start_ns >= max(r.end_ns for r in index_dmas)


# -- nc_matmul_mx ------------------------------------------------------------------------------------------
def _mx_operand(K, F, x4=nl.float8_e4m3fn_x4):
    """(packed words [K, F], a [K, F] scale tile holding the scales where nc_matmul_mx reads them)."""
    words, scales = mx.quantize(RNG.normal(size=(K, 4 * F)).astype(np.float32), x4)
    tile = np.zeros((K, F), np.uint8)
    tile[mx.scale_partitions(K)] = scales
    return words, tile


def _mx_gather(m, same_index=True, scale_indirect=True):
    @nki.jit
    def mx_gather(stationary, stationary_scale, moving, moving_scale, columns):
        """out[m, N] = the MX product of stationary's m columns at the offsets (its scales gathered with it)
        and moving."""
        st_tile, sts_tile, mv_tile, mvs_tile = (_sbuf(t) for t in (stationary, stationary_scale, moving,
                                                                   moving_scale))
        idx, other = _sbuf(columns), _sbuf(columns)
        scale = sts_tile.indirect(idx if same_index else other, num_elem=m) if scale_indirect else sts_tile
        N = moving.shape[1]
        acc = nl.ndarray((m, N), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul_mx(dst=acc, stationary=st_tile.indirect(idx, num_elem=m), moving=mv_tile,
                          stationary_scale=scale, moving_scale=mvs_tile)
        result = nl.ndarray((m, N), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=result, src=acc)
        out = nl.ndarray((m, N), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=result)
        return out

    return mx_gather


@pytest.mark.parametrize("K", [32, 64])
def test_nc_matmul_mx_gathers_a_stationary_with_its_scales(K):
    M, N, m = 24, 16, 10
    st_words, st_scales = _mx_operand(K, M)
    mv_words, mv_scales = _mx_operand(K, N)
    columns = RNG.integers(0, M, size=(K, 1)).astype(np.uint16)
    run = run_both(_mx_gather(m), st_words, st_scales, mv_words, mv_scales, columns, target="trn3")
    a = mx.dequantize(st_words, st_scales, st_words.dtype).reshape(K, M, 4)
    b = mx.dequantize(mv_words, mv_scales, mv_words.dtype).reshape(K, N, 4)
    a = np.take_along_axis(a, expected_offsets(columns, m)[..., None], axis=1)
    np.testing.assert_allclose(run.outputs, np.einsum("kmq,knq->mn", a, b), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("same_index, scale_indirect", [(False, True), (True, False)])
def test_mx_data_and_scale_are_indirect_together_with_one_index(same_index, scale_indirect):
    st_words, st_scales = _mx_operand(32, 24)
    mv_words, mv_scales = _mx_operand(32, 16)
    columns = RNG.integers(0, 24, size=(32, 1)).astype(np.uint16)
    with pytest.raises(IndirectionOperandError, match="must agree on tensor indirection"):
        nki.run(_mx_gather(8, same_index, scale_indirect), st_words, st_scales, mv_words, mv_scales, columns,
                target="trn3")


# -- refusals ----------------------------------------------------------------------------------------------
def _refused(dtype=nl.bfloat16, transpose_moving=False, tile_position=(), st_start=0, dst_index_start=0,
             count=8):
    @nki.jit
    def kernel(lhsT, rhs, columns):
        K = lhsT.shape[0]
        lhsT_tile = nl.ndarray((2 * K, lhsT.shape[1]), dtype=dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=lhsT_tile[st_start:st_start + K], src=lhsT)
        rhs_tile = _sbuf(rhs, dtype)
        idx = _sbuf(columns)
        acc = nl.ndarray((count, rhs.shape[1]), dtype=nl.float32, buffer=nl.psum)
        stationary = lhsT_tile[st_start:st_start + K]
        if transpose_moving:
            nisa.nc_matmul(dst=acc, stationary=stationary[:, 0:count], moving=rhs_tile.indirect(idx, num_elem=8),
                           is_transpose=True)
        elif dst_index_start:
            wide = nl.ndarray((64, rhs.shape[1]), dtype=nl.bfloat16, buffer=nl.psum)
            dst_idx = nl.ndarray((64, 1), dtype=nl.uint16, buffer=nl.sbuf)
            nisa.memset(dst=dst_idx, value=0)
            nisa.nc_matmul(dst=wide[32:32 + count].indirect(dst_idx[32:32 + count], num_elem=4),
                           stationary=stationary[:, 0:count], moving=rhs_tile[:, 0:4])
        else:
            nisa.nc_matmul(dst=acc, stationary=stationary.indirect(idx, num_elem=count), moving=rhs_tile,
                           tile_position=tile_position, tile_size=(32, 128) if tile_position else ())
        result = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=result, src=acc)
        out = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=result)
        return out

    return kernel


LHS_T, RHS = RNG.normal(size=(32, 16)).astype(np.float32), RNG.normal(size=(32, 8)).astype(np.float32)
COLUMNS = RNG.integers(0, 16, size=(32, 1)).astype(np.uint16)


def test_indirect_operands_are_a_tensor_engine_float_dtype():
    with pytest.raises(DtypeError, match="Tensor-Engine float dtype"):
        nki.run(_refused(dtype=nl.float32), LHS_T, RHS, COLUMNS, target="trn3")


def test_a_transposing_matmul_takes_no_indirect_moving():
    with pytest.raises(IndirectionOperandError, match="is_transpose=True takes no .indirect\\(\\) moving"):
        nki.run(_refused(transpose_moving=True), LHS_T, RHS, COLUMNS, target="trn3")


def test_indirection_is_incompatible_with_hardware_tiling():
    with pytest.raises(PETilingError, match="incompatible with hardware tiling"):
        nki.run(_refused(tile_position=(32, 0)), LHS_T, RHS, COLUMNS, target="trn3")
    nki.run(_refused(tile_position=(0, 0)), LHS_T, RHS, COLUMNS, target="trn3")   # (0, 0) is allowed


def test_a_gathered_stationary_starts_on_its_indexs_partition():
    with pytest.raises(StartPartitionError, match="starts on its index's partition"):
        nki.run(_refused(st_start=32), LHS_T, RHS, COLUMNS, target="trn3")


def test_a_scattered_dsts_index_starts_on_the_stationarys_partition():
    with pytest.raises(StartPartitionError, match="dst's index starts at partition 32, stationary at 0"):
        nki.run(_refused(dst_index_start=True), LHS_T, RHS, COLUMNS, target="trn3")


def test_thirty_two_partitions_share_the_tensor_engines_offsets():
    nki.run(_refused(count=32), LHS_T, RHS, COLUMNS, target="trn3")              # 32 offsets: one column of 32
    with pytest.raises(ShapeMismatchError, match="holds 32 offsets"):
        nki.run(_refused(count=33), LHS_T, RHS, COLUMNS, target="trn3")


def test_neuroncore_v3_refuses_an_indirect_matmul():
    with pytest.raises(GenerationError, match="needs NeuronCore-v4"):
        nki.run(_gathered_matmul(4, 4), LHS_T.astype(BF16), RHS.astype(BF16), COLUMNS, COLUMNS, target="trn2")


def _two_matmuls(perf_mode=None):
    @nki.jit
    def two_matmuls(lhsT, rhs, columns):
        """A dense [K, 8] x [K, 16] matmul, then one of the same shapes whose stationary is gathered."""
        lhsT_tile, other, rhs_tile, idx = _sbuf(lhsT), _sbuf(lhsT), _sbuf(rhs), _sbuf(columns)
        dense = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=dense, stationary=lhsT_tile[:, 0:8], moving=rhs_tile[:, 0:16])
        gathered = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.psum)
        extra = {} if perf_mode is None else {"perf_mode": perf_mode}
        nisa.nc_matmul(dst=gathered, stationary=other.indirect(idx, num_elem=8), moving=rhs_tile[:, 0:16], **extra)
        out = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.shared_hbm)
        staged = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=staged, src=gathered)
        nisa.tensor_tensor(dst=staged, data1=dense, data2=staged, op=nl.add)
        nisa.dma_copy(dst=out, src=staged)
        return out

    return two_matmuls


def test_an_indirect_matmul_costs_the_dense_matmul_of_its_gathered_shapes():
    run = nki.run(_two_matmuls(), LHS_T.astype(BF16), RHS.astype(BF16).repeat(2, axis=1), COLUMNS, target="trn3")
    dense, gathered = [r for r in (run.timeline[i] for i in range(len(run.timeline))) if r.opcode == "nc_matmul"]
    assert gathered.end_ns - gathered.start_ns == pytest.approx(dense.end_ns - dense.start_ns)


def test_a_gathered_operand_cannot_take_double_rows_pair_axis():
    """double_row's operands are [K, 2, F]; a gathered view is [P, num_elem] (the scattered dst is simulated:
    tests/nki_api/test_indirect_matmul_modes.py)."""
    with pytest.raises(MatmulShapeError, match="double_row stationary is an .indirect\\(\\) view"):
        nki.run(_two_matmuls(nisa.matmul_perf_mode.double_row), LHS_T.astype(BF16),
                RHS.astype(BF16).repeat(2, axis=1), COLUMNS, target="trn3")

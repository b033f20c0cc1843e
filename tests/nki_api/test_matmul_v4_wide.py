"""A wide nc_matmul on NeuronCore-v4 (Trn3): "On NeuronCore-v2 and -v3, the free dimension size of moving tile
must not exceed 512, matching the maximum number of float32 elements per PSUM bank. Starting NeuronCore-v4, the
free dimension size of moving tile can go up to 4096 for float32 dst or 8192 for bfloat16 dst, matching the
size of 8x PSUM banks (the entire PSUM)" (nki.isa.nc_matmul, v2.33, "Tile size"; trnlab/hardware/memory.py
`moving_fmax`). The values are the matmul's, accumulation groups work over the whole result, the Tensor engine
streams the N columns as it streams N/512 narrow matmuls, the fast paths agree with the reference, and
NeuronCore-v2/-v3 keep 512."""
import ml_dtypes
import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.hardware.errors import MatmulShapeError

from nki_isa_helpers import run_both
from nki_kernels.double_row import double_row_product
from nki_kernels.mx_matmul import mx_product_to_hbm

BF16 = ml_dtypes.bfloat16


def _wide_matmul(pieces: int = 1, evacuations: int = 1):
    """out[M, N] = lhsT.T @ rhs for lhsT [K, M], rhs [K, N], K a multiple of 128: one accumulation group in a
    PSUM tile of rhs's type, a matmul per K tile, each cut into `pieces` matmuls of N / pieces columns
    (1: one instruction streams all N); the result read out of PSUM in `evacuations` column blocks."""

    @nki.jit
    def wide_matmul(lhsT, rhs):
        K, M = lhsT.shape
        N = rhs.shape[1]
        out = nl.ndarray((M, N), dtype=rhs.dtype, buffer=nl.shared_hbm)
        acc = nl.ndarray((M, N), dtype=rhs.dtype, buffer=nl.psum)
        a = nl.ndarray((K // 128, nl.par_dim(128), M), dtype=lhsT.dtype, buffer=nl.sbuf)
        b = nl.ndarray((K // 128, nl.par_dim(128), N), dtype=rhs.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(K // 128):
            nisa.dma_copy(dst=a[k], src=lhsT[k * 128:(k + 1) * 128, :])
            nisa.dma_copy(dst=b[k], src=rhs[k * 128:(k + 1) * 128, :])
        width = N // pieces
        for k in nl.affine_range(K // 128):
            for j in nl.affine_range(pieces):
                nisa.nc_matmul(dst=acc[:, j * width:(j + 1) * width], stationary=a[k],
                               moving=b[k][:, j * width:(j + 1) * width])
        result = nl.ndarray((M, N), dtype=rhs.dtype, buffer=nl.sbuf)
        block = N // evacuations
        for j in nl.affine_range(evacuations):
            nisa.tensor_copy(dst=result[:, j * block:(j + 1) * block], src=acc[:, j * block:(j + 1) * block])
        nisa.dma_copy(dst=out, src=result)
        return out

    return wide_matmul


@nki.jit
def accumulate_flags(lhsT, rhs):
    """out = lhsT.T @ rhs over two K tiles with the flags written out: accumulate=False starts the group,
    accumulate=True adds the second tile (destination style)."""
    M, N = lhsT.shape[1], rhs.shape[1]
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(2):
        a = nl.ndarray((128, M), dtype=lhsT.dtype, buffer=nl.sbuf)
        b = nl.ndarray((128, N), dtype=rhs.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=lhsT[k * 128:(k + 1) * 128, :])
        nisa.dma_copy(dst=b, src=rhs[k * 128:(k + 1) * 128, :])
        nisa.nc_matmul(dst=acc, stationary=a, moving=b, accumulate=(k == 1))
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=result, src=acc)
    nisa.dma_copy(dst=out, src=result)
    return out


@nki.jit
def psum_plus_equals(lhsT, rhs):
    """out = lhsT.T @ rhs over two K tiles: `acc += nl.matmul(..., transpose_x=True)` (functional style)."""
    M, N = lhsT.shape[1], rhs.shape[1]
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((M, N), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(2):
        a = nl.load(lhsT[k * 128:(k + 1) * 128, :])
        b = nl.load(rhs[k * 128:(k + 1) * 128, :])
        acc += nl.matmul(a, b, transpose_x=True)
    nl.store(out, value=nl.copy(acc))
    return out


@nki.jit
def functional_matmul(lhsT, rhs):
    """out = lhsT.T @ rhs for one K tile: nisa.nc_matmul returns a new fp32 PSUM tile."""
    M, N = lhsT.shape[1], rhs.shape[1]
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    product = nisa.nc_matmul(nl.load(lhsT), nl.load(rhs))
    nl.store(out, value=nl.copy(product))
    return out


def _operands(seed: int, K: int, M: int, N: int, dtype):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((K, M)).astype(dtype), rng.standard_normal((K, N)).astype(dtype)


def _product(lhsT, rhs):
    return lhsT.astype(np.float64).T @ rhs.astype(np.float64)


# -- values ---------------------------------------------------------------------------------------
def test_a_2048_column_fp32_matmul_on_trn3_is_the_matmul():
    lhsT, rhs = _operands(0, 256, 128, 2048, np.float32)
    run = run_both(_wide_matmul(), lhsT, rhs, target="trn3")          # fast paths on and off agree
    assert [run.timeline[i].opcode for i in range(len(run.timeline))].count("nc_matmul") == 2
    np.testing.assert_allclose(run.outputs, _product(lhsT, rhs), rtol=1e-5, atol=1e-4)


def test_an_8192_column_bf16_matmul_on_trn3_is_the_matmul_rounded_to_bf16():
    lhsT, rhs = _operands(1, 256, 128, 8192, BF16)
    # the Vector engine reads at most 4096 elements per partition of PSUM (psum_free_max): two copies out
    run = run_both(_wide_matmul(evacuations=2), lhsT, rhs, target="trn3")
    assert [run.timeline[i].opcode for i in range(len(run.timeline))].count("nc_matmul") == 2
    out = np.asarray(run.outputs).astype(np.float64)
    expected = _product(lhsT, rhs)
    assert out.shape == (128, 8192)
    np.testing.assert_allclose(out, expected, rtol=2.0 ** -8, atol=1e-2)     # one bf16 rounding
    # every column block of the result, each PSUM bank's included, holds its own columns' products
    block_errors = np.abs(out - expected).reshape(128, 16, 512).max(axis=(0, 2))
    assert (block_errors < np.abs(expected).max() * 2.0 ** -7).all()


def test_explicit_accumulate_flags_work_over_a_wide_result():
    lhsT, rhs = _operands(2, 256, 128, 4096, np.float32)
    run = run_both(accumulate_flags, lhsT, rhs, target="trn3")
    np.testing.assert_allclose(run.outputs, _product(lhsT, rhs), rtol=1e-5, atol=1e-4)


def test_psum_plus_equals_nl_matmul_works_over_a_wide_result():
    lhsT, rhs = _operands(3, 256, 64, 1024, np.float32)
    run = run_both(psum_plus_equals, lhsT, rhs, target="trn3")
    np.testing.assert_allclose(run.outputs, _product(lhsT, rhs), rtol=1e-5, atol=1e-4)


# -- timing ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("N, dtype", [(2048, np.float32), (8192, BF16)])
def test_a_wide_matmul_costs_what_its_512_column_pieces_cost(N, dtype):
    """The Tensor engine streams N columns in N (fp32: 4N) cycles however they are cut into instructions, and
    the fill/drain ((K - 1) + (M - 1) cycles) of back-to-back matmuls on one stationary overlaps: one N-column
    matmul keeps the engine busy exactly as long as N / 512 matmuls of 512 columns and its result is ready at
    the same time (trnlab's Tensor engine has no other per-instruction cost; LoadStationary is paid once either
    way). A kernel that reads the result whole takes as long; one that reads it in blocks can start on the
    first block earlier when the matmuls are narrow (a wide matmul's columns are ready together)."""
    lhsT, rhs = _operands(4, 256, 128, N, dtype)
    pieces = N // 512
    runs = [nki.run(_wide_matmul(p, N // 4096 if dtype == BF16 else 1), lhsT, rhs, target="trn3", timing_only=True)
            for p in (1, pieces)]
    matmuls = [[r for r in (run.timeline[i] for i in range(len(run.timeline))) if r.opcode == "nc_matmul"]
               for run in runs]
    assert [len(m) for m in matmuls] == [2, 2 * pieces]
    wide, narrow = (sum(r.end_ns - r.start_ns for r in m) for m in matmuls)
    assert wide == pytest.approx(narrow, rel=1e-12)
    cycles_per_column = 4 if dtype == np.float32 else 1                    # fp32_matmul_factor
    assert matmuls[0][0].end_ns - matmuls[0][0].start_ns == pytest.approx(N * cycles_per_column / 2.4, rel=1e-12)
    assert matmuls[0][-1].ready_ns == pytest.approx(matmuls[1][-1].ready_ns, rel=1e-12)
    if dtype == np.float32:                                 # the result read whole
        assert runs[0].latency_ns == pytest.approx(runs[1].latency_ns, rel=1e-12)
    else:                                                   # read in two blocks: the first one earlier
        assert runs[1].latency_ns < runs[0].latency_ns


def test_the_fast_schedule_gives_the_reference_timeline_for_wide_matmuls(records):
    from trnlab import config
    lhsT, rhs = _operands(5, 256, 128, 4096, np.float32)
    runs = []
    for fast in (True, False):
        with config.override(fast=fast):
            runs.append(nki.run(_wide_matmul(), lhsT, rhs, target="trn3", timing_only=True))
    assert records(runs[0]) == records(runs[1])


# -- limits ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype, limit", [(np.float32, 4096), (BF16, 8192)])
def test_one_column_more_than_the_whole_psum_partition_is_refused_by_name(dtype, limit):
    lhsT, rhs = _operands(6, 128, 128, limit + 1, dtype)

    @nki.jit
    def one_too_wide(lhsT, rhs):
        out = nl.ndarray((128, limit), dtype=rhs.dtype, buffer=nl.shared_hbm)
        acc = nl.ndarray((128, limit), dtype=rhs.dtype, buffer=nl.psum)      # the entire PSUM
        a, b = nl.load(lhsT), nl.load(rhs)
        nisa.nc_matmul(dst=acc, stationary=a, moving=b)
        return out

    with pytest.raises(MatmulShapeError, match=rf"moving free size N={limit + 1}, the limit is {limit} "
                                               rf"\(the 16 KiB PSUM partition of \w+ dst\) on NeuronCore-v4"):
        nki.run(one_too_wide, lhsT, rhs, target="trn3", timing_only=True)


def test_the_limit_follows_the_result_type_not_the_inputs():
    """bf16 inputs into an fp32 result (nc_matmul's functional default): 4096 columns, not 8192."""
    lhsT, rhs = _operands(7, 128, 128, 8192, BF16)
    with pytest.raises(MatmulShapeError, match=r"N=8192; .* N <= 4096 \(the 16 KiB PSUM partition of float32 dst\)"):
        nki.run(functional_matmul, lhsT, rhs, target="trn3", timing_only=True)
    lhsT, rhs = _operands(7, 128, 128, 4096, BF16)
    run = nki.run(functional_matmul, lhsT, rhs, target="trn3")
    np.testing.assert_allclose(run.outputs, _product(lhsT, rhs), rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("target, name", [("trn2", "NeuronCore-v3"), ("trn1", "NeuronCore-v2")])
def test_neuroncore_v2_and_v3_keep_512_columns(target, name):
    lhsT, rhs = _operands(8, 256, 128, 1024, np.float32)
    with pytest.raises(MatmulShapeError, match=rf"N=1024, the limit is 512 \(gemm_moving_fmax\) on {name}"):
        nki.run(_wide_matmul(), lhsT, rhs, target=target, timing_only=True)
    with pytest.raises(MatmulShapeError, match=r"N <= 512 \(gemm_moving_fmax\)"):
        nki.run(functional_matmul, lhsT[:128], rhs[:128], target=target, timing_only=True)
    run = nki.run(_wide_matmul(pieces=2), lhsT, rhs, target=target)           # two 512-column matmuls do
    np.testing.assert_allclose(run.outputs, _product(lhsT, rhs), rtol=1e-5, atol=1e-4)


def test_the_fp8_double_row_mode_has_the_same_limit():
    """The "Tile size" paragraph holds for every performance mode: a double-row matmul of 1024 columns (per
    half) runs on Trn3 and is refused on Trn2."""
    rng = np.random.default_rng(9)
    a = rng.normal(size=(128, 2, 96)).astype(ml_dtypes.float8_e4m3)
    b = rng.normal(size=(128, 2, 1024)).astype(ml_dtypes.float8_e4m3)
    out = nki.run(double_row_product, a, b, target="trn3").outputs
    np.testing.assert_allclose(out, np.einsum("kri,krj->ij", a.astype(np.float32), b.astype(np.float32)),
                               rtol=1e-5, atol=1e-4)
    with pytest.raises(MatmulShapeError, match=r"double_row N \(gemm_moving_fmax\) = 1024, the limit is 512"):
        nki.run(double_row_product, a, b, target="trn2")


@nki.jit(target="trn3")
def mx_matmul_into(stationary, stationary_scale, moving, moving_scale, psum_dtype):
    """nc_matmul_mx of packed MXFP8 operands into a PSUM tile of `psum_dtype`."""
    tiles = []
    for hbm in (stationary, stationary_scale, moving, moving_scale):
        tile = nl.ndarray(hbm.shape, dtype=hbm.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=hbm)
        tiles.append(tile)
    return mx_product_to_hbm(*tiles, psum_dtype)


@pytest.mark.parametrize("psum_dtype, limit", [(nl.float32, 512), (nl.bfloat16, 1024)])
def test_nc_matmul_mx_keeps_one_psum_bank_on_trn3(psum_dtype, limit):
    """nki.isa.nc_matmul_mx, "Tile size": "The free dimension size of moving must not exceed 512 when dst is
    in float32 or 1024 when dst is in bfloat16" -- nc_matmul's whole-PSUM limit is not its."""
    def sd(shape, dt):
        return nki.ShapeDtype(shape, dt)

    for N in (limit, limit + 1):
        args = (sd((128, 128), nl.float8_e5m2_x4), sd((128, 128), nl.uint8), sd((128, N), nl.float8_e5m2_x4),
                sd((128, N), nl.uint8), psum_dtype)
        if N == limit:
            nki.run(mx_matmul_into, *args, timing_only=True)
        else:
            with pytest.raises(MatmulShapeError, match=rf"nc_matmul_mx M=128, N={N}; limits 128, {limit} "
                                                       rf"\(one PSUM bank"):
                nki.run(mx_matmul_into, *args, timing_only=True)


# -- tile_size ------------------------------------------------------------------------------------
@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_tile_size_keeps_its_per_bank_constants_on_every_generation(target):
    """gemm_moving_fmax stays 512 (AWS's tile_size page gives no number; a NeuronCore-v4 matmul's limit depends
    on dst's type); psum_bank_fmax is "per PSUM bank per partition, in FP32 elements" (v2.33)."""
    seen = {}

    @nki.jit
    def read_tile_size(x):
        ts = nl.tile_size
        seen.update(moving=ts.gemm_moving_fmax, bank=ts.psum_bank_fmax, bank_bytes=ts.psum_bank_fmax_bytes,
                    psum=ts.psum_fmax, banks=ts.psum_num_banks)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(x))
        return out

    nki.run(read_tile_size, np.zeros((1, 1), np.float32), target=target, timing_only=True)
    assert seen == {"moving": 512, "bank": 512, "bank_bytes": 2048, "psum": 512, "banks": 8}

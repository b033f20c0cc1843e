"""A 2048³ bf16 matmul on Trn2 in three steps of PSUM handling, as awslabs/nki-autotune measured them.

awslabs/nki-autotune (an AWS Labs autotuner for NKI kernels) notes three Trn2 profiles of
result[M, N] = lhsT[K, M].T @ rhs[K, N] at K = M = N = 2048, bf16, MFU 59.6 → 83.4 → 90.92 %
(docs/calibration.md, source [AUTOTUNE]). The kernels here are trnlab's own, written to the
structure its notes describe (not its code):

1. ``matmul_psum_single``    both operands loaded once and resident in SBUF; per 128-row M tile one
                             fp32 accumulator [128, N] in PSUM, allocated ONCE above the M loop: zeroed,
                             accumulated over N (512-wide) and K (innermost), copied out to a resident
                             SBUF result; the whole result stored at the end. The next M tile's zeroing
                             must wait for this tile's copy-out: the Tensor engine idles at every M tile.
2. ``matmul_psum_rotating``  the same with two accumulators used in turn (M tile m takes ``m % 2``):
                             tile m + 1 accumulates while tile m is copied out. (The tuner's
                             ``SoftwarePipeline`` transform: stages (0, 0, 1), two buffer versions.)
3. ``matmul_hand_blocked``   the hand-written kernel: N in blocks of 512, K in blocks of 1024, M in
                             blocks of 512; per block one [128, 512] PSUM tile per 128-row M tile,
                             fresh in each (m, n) iteration, its K-block partial copied to SBUF and
                             added into a bf16 result block (the K reduction in two levels); operand
                             buffers allocated per N block, rhs two (K blocks), lhsT two x four (K x M
                             blocks), taken in turn; four result stripes taken in turn per N block.

`run(kernel)` runs one at the tuner's shape, timing-only, and returns its latency and MFU the way
the tuner computed it: 2·M·N·K / (latency × 2 × 128 × 128 × 2.4 GHz).
"""
from __future__ import annotations

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.hardware import dtypes

SHAPE = dict(M=2048, N=2048, K=2048)          # the tuner's lhsT [K, M], rhs [K, N], bf16


def _tiles():
    # K tile = partitions (PE rows), M tile = PE columns, N tile = one PSUM bank of fp32
    return nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax, nl.tile_size.gemm_moving_fmax


def _resident(src, rows: int):
    """src [R, C] (a tensor or an HBM slice) loaded into SBUF as R / rows tiles [rows partitions, C],
    one DMA each."""
    R, C = src.shape
    tiles = []
    for r in nl.affine_range(R // rows):
        tile = nl.ndarray((rows, C), dtype=src.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=src[r * rows:(r + 1) * rows, :])
        tiles.append(tile)
    return tiles


def _psum_accumulated(lhsT, rhs, ACCUMULATORS: int):
    """Steps 1 and 2: resident operands, one [TILE_M, N] PSUM accumulator per M tile, taken in turn
    from ACCUMULATORS allocated above the M loop."""
    K, M = lhsT.shape
    K_, N = rhs.shape
    TILE_K, TILE_M, TILE_N = _tiles()
    assert K == K_, f"contraction dimensions differ: {K} vs {K_}"
    assert K % TILE_K == 0 and M % TILE_M == 0 and N % TILE_N == 0, \
        f"(K, M, N) = {(K, M, N)} must be multiples of ({TILE_K}, {TILE_M}, {TILE_N})"

    lhsT_rows = _resident(lhsT, TILE_K)              # K/128 tiles [TILE_K, M]
    rhs_rows = _resident(rhs, TILE_K)                # K/128 tiles [TILE_K, N]
    # an accumulator [TILE_M, N] fp32 is N / 512 PSUM banks: one [TILE_M, TILE_N] tile per bank
    accumulators = [[nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum) for _ in range(N // TILE_N)]
                    for _ in range(ACCUMULATORS)]
    result_rows = [nl.ndarray((TILE_M, N), dtype=lhsT.dtype, buffer=nl.sbuf) for _ in range(M // TILE_M)]
    for m in nl.affine_range(M // TILE_M):
        acc = accumulators[m % ACCUMULATORS]
        for bank in acc:
            nisa.memset(dst=bank, value=0.0)
        for n in nl.affine_range(N // TILE_N):
            for k in nl.affine_range(K // TILE_K):
                nisa.nc_matmul(dst=acc[n], stationary=lhsT_rows[k][:, m * TILE_M:(m + 1) * TILE_M],
                               moving=rhs_rows[k][:, n * TILE_N:(n + 1) * TILE_N])
        for n in nl.affine_range(N // TILE_N):     # PSUM -> SBUF, fp32 -> bf16
            nisa.tensor_copy(dst=result_rows[m][:, n * TILE_N:(n + 1) * TILE_N], src=acc[n])
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TILE_M):
        nisa.dma_copy(dst=result[m * TILE_M:(m + 1) * TILE_M, :], src=result_rows[m])
    return result


@nki.jit
def matmul_psum_single(lhsT, rhs):
    """Step 1: one PSUM accumulator for every M tile (zero, accumulate, copy out, in turn)."""
    return _psum_accumulated(lhsT, rhs, ACCUMULATORS=1)


@nki.jit
def matmul_psum_rotating(lhsT, rhs):
    """Step 2: two PSUM accumulators, M tile m takes m % 2."""
    return _psum_accumulated(lhsT, rhs, ACCUMULATORS=2)


def _block_tiles(count: int, free: int, dtype) -> list:
    """`count` SBUF tiles [128 partitions, free]: one operand block's buffer."""
    return [nl.ndarray((nl.tile_size.pmax, free), dtype=dtype, buffer=nl.sbuf) for _ in range(count)]


def _loaded(tiles: list, src) -> list:
    """src [len(tiles) x 128, C] (an HBM slice) DMA'd into `tiles`, 128 rows each; returns them."""
    rows = tiles[0].shape[0]
    for r, tile in enumerate(tiles):
        nisa.dma_copy(dst=tile, src=src[r * rows:(r + 1) * rows, :])
    return tiles


@nki.jit
def matmul_hand_blocked(lhsT, rhs, BLOCK_M: int = 512, BLOCK_N: int = 512, BLOCK_K: int = 1024,
                        RESULT_BUFFERS: int = 4):
    """Step 3: blocked over N (outermost), K, M; the K reduction in two levels (PSUM per K block,
    then bf16 adds in SBUF)."""
    K, M = lhsT.shape
    K_, N = rhs.shape
    TILE_K, TILE_M, TILE_N = _tiles()
    assert K == K_, f"contraction dimensions differ: {K} vs {K_}"
    assert BLOCK_N == TILE_N, f"BLOCK_N={BLOCK_N}: one PSUM tile wide ({TILE_N}) per M tile"
    assert M % BLOCK_M == 0 and N % BLOCK_N == 0 and K % BLOCK_K == 0, \
        f"(K, M, N) = {(K, M, N)} must be multiples of the blocks ({BLOCK_K}, {BLOCK_M}, {BLOCK_N})"
    assert BLOCK_M % TILE_M == 0 and BLOCK_K % TILE_K == 0

    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    # RESULT_BUFFERS result stripes [M, BLOCK_N] (M/128 tiles [128, BLOCK_N] each), taken in turn per N block
    stripes = [[nl.ndarray((TILE_M, BLOCK_N), dtype=lhsT.dtype, buffer=nl.sbuf) for _ in range(M // TILE_M)]
               for _ in range(RESULT_BUFFERS)]
    for nb in nl.affine_range(N // BLOCK_N):
        n_cols = slice(nb * BLOCK_N, (nb + 1) * BLOCK_N)
        stripe = stripes[nb % RESULT_BUFFERS]
        for tile in stripe:
            nisa.memset(dst=tile, value=0.0)
        # operand blocks of this N block: rhs double-buffered over K blocks, lhsT over K blocks x 4 M blocks
        rhs_bufs = [_block_tiles(BLOCK_K // TILE_K, BLOCK_N, rhs.dtype) for _ in range(2)]
        lhsT_bufs = [[_block_tiles(BLOCK_K // TILE_K, BLOCK_M, lhsT.dtype) for _ in range(4)] for _ in range(2)]
        for kb in nl.affine_range(K // BLOCK_K):
            k_rows = slice(kb * BLOCK_K, (kb + 1) * BLOCK_K)
            rhs_block = _loaded(rhs_bufs[kb % 2], rhs[k_rows, n_cols])                # [128, BLOCK_N] tiles
            for mb in nl.affine_range(M // BLOCK_M):
                lhsT_block = _loaded(lhsT_bufs[kb % 2][mb % 4], lhsT[k_rows, mb * BLOCK_M:(mb + 1) * BLOCK_M])
                for mt in nl.affine_range(BLOCK_M // TILE_M):
                    partial = nl.ndarray((TILE_M, BLOCK_N), dtype=nl.float32, buffer=nl.psum)
                    nisa.memset(dst=partial, value=0.0)
                    for k in nl.affine_range(BLOCK_K // TILE_K):
                        nisa.nc_matmul(dst=partial, stationary=lhsT_block[k][:, mt * TILE_M:(mt + 1) * TILE_M],
                                       moving=rhs_block[k])
                    partial_sbuf = nl.ndarray((TILE_M, BLOCK_N), dtype=lhsT.dtype, buffer=nl.sbuf)
                    nisa.tensor_copy(dst=partial_sbuf, src=partial)
                    row = stripe[mb * (BLOCK_M // TILE_M) + mt]
                    nisa.tensor_tensor(dst=row, data1=row, data2=partial_sbuf, op=nl.add)
        for mt in nl.affine_range(M // TILE_M):
            nisa.dma_copy(dst=result[mt * TILE_M:(mt + 1) * TILE_M, n_cols], src=stripe[mt])
    return result


LADDER = [matmul_psum_single, matmul_psum_rotating, matmul_hand_blocked]
PE_CLOCK_HZ = 2.4e9                    # the tuner's MFU clock (its runner's _PE_FREQ_HZ), = trnlab's Trn2 preset


def mfu(latency_us: float, M: int, N: int, K: int) -> float:
    """MFU % the tuner's way: 2·M·N·K FLOPs / (latency × 2 × 128 × 128 × 2.4 GHz)."""
    return 100.0 * 2.0 * M * N * K / (latency_us * 1e-6 * 2 * 128 * 128 * PE_CLOCK_HZ)


def run(kernel, M: int = SHAPE["M"], N: int = SHAPE["N"], K: int = SHAPE["K"], dtype="bfloat16", target="trn2",
        **options):
    """One kernel at lhsT [K, M], rhs [K, N], timing-only: (KernelRun, MFU %)."""
    dt = dtypes.as_dtype(dtype)
    out = nki.run(kernel, nki.ShapeDtype((K, M), dt), nki.ShapeDtype((K, N), dt), target=target,
                  timing_only=True, **options)
    return out, mfu(out.latency_us, M, N, K)

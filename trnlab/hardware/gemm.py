"""A reference tiled GEMM on one NeuronCore: C[M, N] = A[M, K] @ B[K, N] for any M, N, K.

The tensor engine computes ``stationary[K, M].T @ moving[K, N]`` with K <= 128 (partitions),
M <= 128 and N <= 512 (one PSUM bank of fp32), so a GEMM is cut into tiles [MM]:

    for each block of block_m × block_n output tiles (128 × 512 each):
        for each K tile (128 rows):
            DMA  lhsT[k, m-block] -> SBUF     (A is stored transposed, "lhsT", as in NKI's tutorials)
            DMA  rhs[k, n-block]  -> SBUF
            nc_matmul into each output tile's PSUM bank (accumulating over K)
        tensor_copy PSUM -> SBUF (casting), DMA SBUF -> HBM

SBUF input tiles rotate through `buffers` copies, so the DMA of the next K tile overlaps the
matmuls of this one (the scheduler finds the WAR dependencies by itself). Edge tiles — shapes
that are not multiples of the tile — are *masked*: the DMA, the matmul and the store touch only the
valid rows and columns (a matmul with K < 128, M < 128 or N < 512 is legal, it just leaves part
of the array idle; `plan(...).utilisation` says how much).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import config
from . import dtypes
from .core import NeuronCore
from .presets import TRN2_CORE, CoreSpec, core_spec
from .program import ProgramCache


@dataclass(frozen=True)
class GemmPlan:
    """How a GEMM is cut into tiles, and what that costs in instructions and utilisation."""
    M: int
    N: int
    K: int
    tile_m: int
    tile_n: int
    tile_k: int
    block_m: int
    block_n: int

    @property
    def m_tiles(self) -> int:
        return math.ceil(self.M / self.tile_m)

    @property
    def n_tiles(self) -> int:
        return math.ceil(self.N / self.tile_n)

    @property
    def k_tiles(self) -> int:
        return math.ceil(self.K / self.tile_k)

    @property
    def m_blocks(self) -> int:
        return math.ceil(self.M / (self.tile_m * self.block_m))

    @property
    def n_blocks(self) -> int:
        return math.ceil(self.N / (self.tile_n * self.block_n))

    @property
    def matmuls(self) -> int:
        return self.m_tiles * self.n_tiles * self.k_tiles

    @property
    def dma_loads(self) -> int:
        return 2 * self.m_blocks * self.n_blocks * self.k_tiles

    @property
    def stores(self) -> int:
        return self.m_tiles * self.n_tiles

    @property
    def instructions(self) -> int:
        """matmuls + loads + (copy + store) per output tile."""
        return self.matmuls + self.dma_loads + 2 * self.stores

    @property
    def flops(self) -> float:
        return 2.0 * self.M * self.N * self.K

    @property
    def utilisation(self) -> float:
        """Useful MACs / MACs of the same number of full 128×128×512 tile matmuls."""
        full = self.matmuls * self.tile_m * self.tile_n * self.tile_k
        return self.M * self.N * self.K / full

    @property
    def hbm_bytes_per_element(self) -> float:
        """Input elements loaded from HBM: A once per n-block, B once per m-block."""
        return self.M * self.K * self.n_blocks + self.K * self.N * self.m_blocks


def default_tiles(spec: CoreSpec) -> tuple[int, int, int]:
    """(tile_m, tile_n, tile_k): the largest tiles the tensor engine and one PSUM bank allow."""
    tile_k = min(spec.partitions, spec.pe_rows)
    tile_m = min(spec.stationary_fmax, spec.pe_cols)
    tile_n = min(spec.moving_fmax, spec.psum_bank_bytes // 4)
    return tile_m, tile_n, tile_k


def plan(M: int, N: int, K: int, spec: "CoreSpec | str" = TRN2_CORE, tile_m=None, tile_n=None,
         tile_k=None, block_m: int = 2, block_n: int = 2) -> GemmPlan:
    spec = core_spec(spec)
    dm, dn, dk = default_tiles(spec)
    return GemmPlan(M, N, K, tile_m or dm, tile_n or dn, tile_k or dk, block_m, block_n)


def tiled_gemm(core: NeuronCore, lhsT, rhs, out, *, tile_m=None, tile_n=None, tile_k=None,
               block_m: int = 2, block_n: int = 2, buffers: int = 2) -> GemmPlan:
    """Issue the instructions of out[M, N] = lhsT[K, M].T @ rhs[K, N] on `core`.

    lhsT, rhs, out: HBM tensors. Returns the plan. SBUF/PSUM tiles are allocated here and freed
    at the end.
    """
    K, M = lhsT.shape
    K2, N = rhs.shape
    if K2 != K or out.shape != (M, N):
        raise ValueError(f"gemm shapes: lhsT {lhsT.shape}, rhs {rhs.shape}, out {out.shape}")
    p = plan(M, N, K, core.spec, tile_m, tile_n, tile_k, block_m, block_n)
    tm, tn, tk, bm, bn = p.tile_m, p.tile_n, p.tile_k, p.block_m, p.block_n
    BM, BN = tm * bm, tn * bn
    sbuf, psum = core.sbuf, core.psum
    lhsT_bufs = [sbuf.allocate((tk, BM), lhsT.dtype, name=f"lhsT_sb{i}") for i in range(buffers)]
    rhs_bufs = [sbuf.allocate((tk, BN), rhs.dtype, name=f"rhs_sb{i}") for i in range(buffers)]
    tiles_per_block = bm * bn
    psum_sets = 2 if 2 * tiles_per_block <= core.spec.psum_banks else 1
    acc = [[psum.allocate((tm, tn), dtypes.float32, name=f"acc{s}_{t}")
            for t in range(tiles_per_block)] for s in range(psum_sets)]
    out_bufs = [sbuf.allocate((tm, tn), out.dtype, name=f"out_sb{i}") for i in range(2)]

    views = {}
    matmuls = {}

    def tile(t, rows, c0, cols):
        """The view t[:rows, c0:c0+cols], cached: the same tiles are used over and over."""
        key = (id(t), rows, c0, cols)
        v = views.get(key)
        if v is None:
            v = views[key] = t[:rows, c0:c0 + cols]
        return v

    step = 0
    block = 0
    stores = 0
    for m0 in range(0, M, BM):
        mm = min(BM, M - m0)
        for n0 in range(0, N, BN):
            nn = min(BN, N - n0)
            accs = acc[block % psum_sets]
            m_sub = [(mi, min(tm, mm - mi)) for mi in range(0, mm, tm)]
            n_sub = [(ni, min(tn, nn - ni)) for ni in range(0, nn, tn)]
            for kt, k0 in enumerate(range(0, K, tk)):
                kk = min(tk, K - k0)
                b = step % buffers
                step += 1
                lb, rb = lhsT_bufs[b], rhs_bufs[b]
                core.dma_copy(tile(lb, kk, 0, mm), lhsT[k0:k0 + kk, m0:m0 + mm])
                core.dma_copy(tile(rb, kk, 0, nn), rhs[k0:k0 + kk, n0:n0 + nn])
                accumulate = kt > 0
                # the matmuls of one K step: (dst, stationary, moving) views, built once per shape
                key = (b, block % psum_sets, kk, mm, nn)
                triples = matmuls.get(key)
                if triples is None:
                    triples = matmuls[key] = [
                        (tile(accs[i * bn + j], ms, 0, ns), tile(lb, kk, mi, ms), tile(rb, kk, ni, ns))
                        for i, (mi, ms) in enumerate(m_sub) for j, (ni, ns) in enumerate(n_sub)]
                for dst, stationary, moving in triples:
                    core.nc_matmul(dst, stationary, moving, accumulate)
            for i, (mi, ms) in enumerate(m_sub):
                for j, (ni, ns) in enumerate(n_sub):
                    ob = out_bufs[stores % 2]
                    stores += 1
                    o = tile(ob, ms, 0, ns)
                    core.tensor_copy(o, tile(accs[i * bn + j], ms, 0, ns))
                    core.dma_copy(out[m0 + mi:m0 + mi + ms, n0 + ni:n0 + ni + ns], o)
            block += 1
    for t in lhsT_bufs + rhs_bufs + out_bufs + [a for s in acc for a in s]:
        (sbuf if t.kind == "sbuf" else psum).free(t)
    return p


def _cast_transposed(A: np.ndarray, dt, out: np.ndarray | None = None) -> np.ndarray:
    """``dtypes.cast(A, dt).T`` as a C-contiguous array (written into `out` [K, M] if given).

    Cast first (a contiguous pass, the same rounding as ``dtypes.cast``), then transposed in
    blocks of 256 × 256 that stay in cache, moving the elements as raw bytes: a cast with the
    transpose's strides, or a transpose of the larger fp32 array, measured 1.5-2× slower.
    """
    A = np.asarray(A)
    cast = np.ascontiguousarray(dtypes.cast(A, dt) if A.dtype != dt else A)
    raw = np.dtype(f"u{cast.itemsize}") if cast.itemsize in (1, 2, 4, 8) else cast.dtype
    src = cast.view(raw)
    M, K = A.shape
    lhsT = np.empty((K, M), cast.dtype) if out is None else out     # [K, M]
    dst = lhsT.view(raw)
    for m0 in range(0, M, 256):
        for k0 in range(0, K, 256):
            dst[k0:k0 + 256, m0:m0 + 256] = src[m0:m0 + 256, k0:k0 + 256].T
    return lhsT


def _gemm_inputs(A: np.ndarray, B: np.ndarray, dt) -> tuple[np.ndarray, np.ndarray]:
    """(lhsT [K, M], rhs [K, N]): A transposed and both cast to `dt`, in three parallel parts (half
    of A each, and B: NumPy's casts and copies release the GIL), so a large GEMM's inputs are ready
    in about half the time (fast path; the reference makes them one after another)."""
    A, B = np.asarray(A), np.asarray(B)
    (M, K), h = A.shape, A.shape[0] // 2 // 256 * 256 or A.shape[0]
    lhsT = np.empty((K, M), dt)
    rhs = []
    calls = [lambda: _cast_transposed(A[:h], dt, lhsT[:, :h]),
             lambda: rhs.append(np.ascontiguousarray(dtypes.cast(B, dt)))]
    if h < M:
        calls.append(lambda: _cast_transposed(A[h:], dt, lhsT[:, h:]))
    if config.fast():
        from .fast.psum_pool import run_parallel
        run_parallel(calls)
    else:
        for call in calls:
            call()
    return lhsT, rhs[0]


_PROGRAMS = ProgramCache(16)            # (M, N, K, spec, dtypes, tiling) -> the traced GEMM


def gemm_program(M: int, N: int, K: int, spec: "CoreSpec | str" = TRN2_CORE, dtype="bfloat16",
                 out_dtype="float32", **tiling):
    """`tiled_gemm` traced into a program (inputs lhsT [K, M] and rhs [K, N], output [M, N]) and
    allocated, once per shape, dtypes, core and tiling (cached, as a compiled NEFF): the same
    instructions as `tiled_gemm` issues on a core, with the same buffers (its tiles rotate by hand)."""
    from .fusion import allocate
    from .trace import Recorder
    spec = core_spec(spec)
    dt, odt = dtypes.as_dtype(dtype), dtypes.as_dtype(out_dtype)
    key = (M, N, K, spec, dtypes.name(dt), dtypes.name(odt), tuple(sorted(tiling.items())))
    program = _PROGRAMS.get(key)
    if program is None:
        recorder = Recorder(spec, name="gemm")
        lhsT = recorder.input(np.empty((K, M), dt), "lhsT")
        rhs = recorder.input(np.empty((K, N), dt), "rhs")
        out = recorder.hbm.allocate((M, N), odt, name="out")
        tiled_gemm(recorder, lhsT, rhs, out, **tiling)
        program = allocate(recorder.finish({"buffer": recorder.buffer_of(out), "index": None}), spec)
        _PROGRAMS.put(key, program)
    return program


def run_gemm(A: np.ndarray | None = None, B: np.ndarray | None = None, *, shape=None,
             spec: "CoreSpec | str" = TRN2_CORE, dtype="bfloat16", out_dtype="float32",
             mode: str = "full", **tiling):
    """C = A @ B on a fresh simulated core. Returns (C or None in timing mode, core).

    A is placed in HBM transposed (lhsT [K, M]) and both inputs cast to `dtype`. In timing mode
    you may give ``shape=(M, N, K)`` instead of arrays: no values are created at all; the
    instructions are issued to the core as `tiled_gemm` calls them. Full mode runs them as a
    program (`gemm_program`, traced once per shape): the same instructions, times and values, but
    each tile's products compute in a worker thread while the next tiles' instructions run
    (the values replay, `fast/values_replay.py`), and a second call with the same shape traces nothing.
    """
    core = NeuronCore(spec, mode=mode)
    dt = dtypes.as_dtype(dtype)
    if A is not None:
        A = np.asarray(A)
        B = np.asarray(B)
        (M, K), (_, N) = A.shape, B.shape
        if B.shape[0] != K:
            raise ValueError(f"gemm shapes: A {A.shape} @ B {B.shape}")
    elif shape is not None:
        M, N, K = shape
    else:
        raise ValueError("give A and B, or shape=(M, N, K) in timing mode")
    if not core.full:
        lhsT = core.hbm.allocate((K, M), dt, name="lhsT")
        rhs = core.hbm.allocate((K, N), dt, name="rhs")
        out = core.hbm.allocate((M, N), out_dtype, name="out")
        tiled_gemm(core, lhsT, rhs, out, **tiling)
        return None, core
    if A is None:
        raise ValueError("full mode needs the arrays A and B")
    lhsT, rhs = _gemm_inputs(A, B, dt)
    return run_lhsT(lhsT, rhs, core=core, out_dtype=out_dtype, **tiling)


def run_lhsT(lhsT: np.ndarray, rhs: np.ndarray, *, spec: "CoreSpec | str" = TRN2_CORE, core=None,
             out_dtype="float32", **tiling):
    """out[M, N] = lhsT[K, M].T @ rhs[K, N] in full mode, from inputs already in the GEMM's HBM
    layout and dtype (as an NKI kernel receives them; nothing is cast or transposed): the GEMM's
    program (`gemm_program`) run on `core` (default: a fresh full-mode core of `spec`). The caller
    hands the arrays over and must not change them while this runs. Returns (out, core)."""
    from . import replay
    core = NeuronCore(spec, mode="full") if core is None else core
    (K, M), (_, N) = lhsT.shape, rhs.shape
    if rhs.shape[0] != K or lhsT.dtype != rhs.dtype:
        raise ValueError(f"gemm inputs: lhsT {lhsT.shape} {lhsT.dtype}, rhs {rhs.shape} {rhs.dtype}")
    program = gemm_program(M, N, K, core.spec, lhsT.dtype, out_dtype, **tiling)
    tensors = replay.execute(program, core, [lhsT, rhs])
    out = tensors[program.outputs["buffer"]]
    out.full.check_initialized()
    return out.data, core                   # the core's HBM buffer itself (no copy)

"""Checks for notebook 05, writing kernels: the student's kernels run through trnlab.nki on the
simulated Trn2 core and are compared with NumPy; their profiles are read from the simulator."""

from __future__ import annotations

import numpy as np

import trnlab.nki as nki
from trnlab.course.exercises import CheckFailed, exercise
from trnlab.hardware import dtypes, presets
from trnlab.hardware.errors import SBUFOverflowError
from trnlab.kernels import matmul_ladder

NOTEBOOK = "05_writing_kernels"


def _as_kernel(answer):
    # a plain function works too: nki.jit only marks it as a kernel
    return answer if isinstance(answer, nki.Kernel) else nki.jit(answer)


def _inputs(rng, *shapes, dtype=np.float32):
    return [rng.standard_normal(shape).astype(np.float32).astype(dtype) for shape in shapes]


def _compare(got, expected, what: str, shape_text: str, rtol=1e-4, atol=1e-3):
    if not isinstance(got, np.ndarray):
        raise CheckFailed(f"expected the kernel to return an HBM tensor (it comes back as a NumPy array), got "
                          f"{type(got).__name__} for {shape_text}; return the nl.shared_hbm tensor you stored into")
    if got.shape != expected.shape:
        raise CheckFailed(f"expected a result of shape {expected.shape}, got {got.shape} for {shape_text}")
    error = np.abs(got.astype(np.float32) - expected)
    if not np.all(error <= atol + rtol * np.abs(expected)):
        worst = np.unravel_index(np.argmax(error), error.shape)
        raise CheckFailed(f"expected {what}; the largest difference is {error[worst]:.3g} at {tuple(map(int, worst))} "
                          f"for {shape_text}")


# -- 1. a tiled matmul ------------------------------------------------------------------------------
TILED_SHAPES = [(128, 128, 512), (256, 128, 512), (128, 256, 1024), (384, 256, 1536)]   # (K, M, N)


@exercise("nb05_tiled_matmul", notebook=NOTEBOOK, points=3, answer="tiled_matmul",
          title="Write a tiled matmul kernel")
def check_tiled_matmul(tiled_matmul) -> None:
    kernel = _as_kernel(tiled_matmul)
    rng = np.random.default_rng(5)
    for K, M, N in TILED_SHAPES:
        lhsT, rhs = _inputs(rng, (K, M), (K, N))
        shape_text = f"lhsT [{K}, {M}] and rhs [{K}, {N}]"
        run = nki.run(kernel, lhsT, rhs)
        _compare(run.outputs, lhsT.T @ rhs, "lhsT.T @ rhs", shape_text)
        matmuls = run.profile().instructions.get("nc_matmul", 0)
        expected = (M // 128) * (N // 512) * (K // 128)
        if matmuls != expected:
            raise CheckFailed(f"expected {expected} nc_matmul instructions (one per [128, 128] x [128, 512] tile pair), "
                              f"got {matmuls} for {shape_text}")
    lhsT, rhs = _inputs(rng, (256, 128), (256, 512), dtype=dtypes.bfloat16)
    out = kernel(lhsT, rhs)
    if getattr(out, "dtype", None) != dtypes.bfloat16:
        raise CheckFailed(f"expected a bfloat16 result for bfloat16 inputs (the result has lhsT's dtype), got "
                          f"{getattr(out, 'dtype', type(out).__name__)}")


# -- 2. matmul + bias + ReLU, fused -----------------------------------------------------------------
BIAS_RELU_SHAPES = [(128, 128, 512), (256, 128, 512), (128, 128, 256), (512, 128, 384)]   # (K, M, N)


@exercise("nb05_bias_relu", notebook=NOTEBOOK, points=3, answer="matmul_bias_relu",
          title="Fuse bias and ReLU into the way out of PSUM")
def check_bias_relu(matmul_bias_relu) -> None:
    kernel = _as_kernel(matmul_bias_relu)
    rng = np.random.default_rng(6)
    for K, M, N in BIAS_RELU_SHAPES:
        lhsT, rhs, bias = _inputs(rng, (K, M), (K, N), (M, 1))
        bias *= 8.0                                      # big enough that both signs matter after the add
        shape_text = f"lhsT [{K}, {M}], rhs [{K}, {N}], bias [{M}, 1]"
        run = nki.run(kernel, lhsT, rhs, bias)
        expected = np.maximum(lhsT.T @ rhs + bias, 0.0)
        _compare(run.outputs, expected, "max(lhsT.T @ rhs + bias, 0) (bias added to row m of the result)",
                 shape_text)
        counts = run.profile().instructions
        others = {op: n for op, n in counts.items() if op in ("tensor_copy", "tensor_tensor", "tensor_scalar")}
        if counts.get("activation", 0) != 1 or others:
            raise CheckFailed(f"expected one nisa.activation that reads PSUM and writes SBUF (bias and ReLU on the way "
                              f"out), and no other Vector/Scalar instruction; got activation "
                              f"{counts.get('activation', 0)}, others {others or 'none'} for {shape_text}")


# -- 3. block sizes that fit SBUF and keep the tensor engine busy --------------------------------------
BLOCK_SHAPES = [(8192, 1024, 4096), (4096, 2048, 4096), (1024, 2048, 8192)]   # (M, N, K)
MIN_PE_ACTIVE = 90.0


@exercise("nb05_sbuf_blocks", notebook=NOTEBOOK, points=2, answer="choose_blocks",
          title="Repair an SBUF overflow: choose block sizes")
def check_sbuf_blocks(choose_blocks) -> None:
    capacity = presets.TRN2.core.sbuf_partition_bytes
    for M, N, K in BLOCK_SHAPES:
        blocks = choose_blocks(M, N, K)
        if not isinstance(blocks, dict) or set(blocks) != {"TILES_IN_BLOCK_M", "TILES_IN_BLOCK_N", "TILES_IN_BLOCK_K"}:
            raise CheckFailed(f"expected a dict with keys TILES_IN_BLOCK_M, TILES_IN_BLOCK_N, TILES_IN_BLOCK_K, got "
                              f"{blocks!r} for (M, N, K) = {(M, N, K)}")
        tm, tn, tk = (int(blocks[k]) for k in ("TILES_IN_BLOCK_M", "TILES_IN_BLOCK_N", "TILES_IN_BLOCK_K"))
        if min(tm, tn, tk) < 1 or M % (128 * tm) or N % (512 * tn) or K % (128 * tk):
            raise CheckFailed(f"expected blocks that divide the shape (M by 128·TILES_IN_BLOCK_M, N by 512·TILES_IN_BLOCK_N, "
                              f"K by 128·TILES_IN_BLOCK_K), got {blocks} for (M, N, K) = {(M, N, K)}")
        try:
            result = matmul_ladder.run_step(matmul_ladder.matmul_fully_blocked, M, N, K, dtype="float32",
                                            TILES_IN_BLOCK_M=tm, TILES_IN_BLOCK_N=tn, TILES_IN_BLOCK_K=tk)
        except SBUFOverflowError:
            need = matmul_ladder.fully_blocked_sbuf_bytes(M, N, K, "float32", TILES_IN_BLOCK_M=tm,
                                                          TILES_IN_BLOCK_N=tn, TILES_IN_BLOCK_K=tk)
            raise CheckFailed(f"expected the kernel to fit in SBUF ({capacity // 1024} KiB per partition), but {blocks} "
                              f"needs {need // 1024} KiB per partition for (M, N, K) = {(M, N, K)}: partial sums "
                              f"M/128 · BLOCK_N · 4 bytes plus TILES_IN_BLOCK_K · (BLOCK_N + BLOCK_M) · 4 bytes")
        if result.active["pe"] < MIN_PE_ACTIVE:
            raise CheckFailed(f"expected the tensor engine to be busy at least {MIN_PE_ACTIVE:.0f}% of the time, got "
                              f"{result.active['pe']:.1f}% (DMA {result.active['dma']:.0f}%, Vector engine "
                              f"{result.active['dve']:.0f}%) with {blocks} for (M, N, K) = {(M, N, K)}; small blocks "
                              "reload data more often and add partial sums on the Vector engine after every K block, "
                              "while blocks that fill SBUF leave no room to load the next block during the matmuls")

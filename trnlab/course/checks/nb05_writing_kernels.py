"""Checks for notebook 05, writing kernels (cases / run beside the student / judge elsewhere).

The student's kernels run through trnlab.nki on the simulated Trn2 core beside the student's code
(with the package's own matmul kernels switched off); what comes back — the output array and the
instruction counts — is compared with NumPy in the judging process. Block sizes (exercise 3) are
simulated in the judging process, next to reference blocks measured in the same run.
"""

from __future__ import annotations

import numpy as np

import trnlab.nki as nki
from trnlab.course import plain
from trnlab.course.errors import CheckFailed
from trnlab.course.exercises import exercise
from trnlab.hardware import dtypes, presets
from trnlab.hardware.errors import SBUFOverflowError
from trnlab.kernels import matmul_ladder

NOTEBOOK = "05_writing_kernels"
PACKAGE_KERNELS = ("trnlab.kernels.matmul_ladder", "trnlab.kernels.matmul", "trnlab.kernels.workload",
                   "trnlab.hardware.gemm")
VECTOR_AND_SCALAR = ("tensor_copy", "tensor_tensor", "tensor_scalar")


def _as_kernel(answer):
    # a plain function works too: nki.jit only marks it as a kernel
    return answer if isinstance(answer, nki.Kernel) else nki.jit(answer)


def _inputs(seed: int, *shapes, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32).astype(dtype) for shape in shapes]


def _kernel_result(kernel, *inputs) -> dict:
    """Run the kernel on the simulator; keep its output (as float32) and its instruction counts."""
    run = nki.run(kernel, *inputs)
    out = run.outputs
    if type(out) is not np.ndarray:
        raise CheckFailed(f"expected the kernel to return an HBM tensor (it comes back as a NumPy array), got "
                          f"{type(out).__name__}; return the nl.shared_hbm tensor you stored into")
    counts = run.profile().instructions
    return {"out": plain.array(out), "dtype": str(out.dtype),
            "counts": {str(op): plain.integer(n) for op, n in counts.items()}}


def _compare(got, expected, what: str, shape_text: str, rtol=1e-4, atol=1e-3):
    if got.shape != expected.shape:
        raise CheckFailed(f"expected a result of shape {expected.shape}, got {got.shape} for {shape_text}")
    error = np.abs(got.astype(np.float32) - expected)
    if not np.all(error <= atol + rtol * np.abs(expected)):
        worst = np.unravel_index(np.argmax(error), error.shape)
        raise CheckFailed(f"expected {what}; the largest difference is {error[worst]:.3g} at {tuple(map(int, worst))} "
                          f"for {shape_text}")


# -- 1. a tiled matmul ------------------------------------------------------------------------------


@exercise("nb05_tiled_matmul", notebook=NOTEBOOK, points=3, answer="tiled_matmul",
          title="Write a tiled matmul kernel", asks_for=PACKAGE_KERNELS)
class TiledMatmul:
    def cases(rng):
        shapes = [(128, 128, 512), (256, 256, 512)]
        shapes.append(tuple(int(v) for v in (128 * rng.integers(1, 4), 128 * rng.integers(1, 3), 512 * rng.integers(1, 3))))
        cases = [{"K": K, "M": M, "N": N, "seed": int(rng.integers(0, 2**31)), "dtype": "float32"} for K, M, N in shapes]
        cases.append({"K": 256, "M": 128, "N": 512, "seed": int(rng.integers(0, 2**31)), "dtype": "bfloat16"})
        return cases

    def _operands(case):
        dtype = dtypes.bfloat16 if case["dtype"] == "bfloat16" else np.float32
        return _inputs(case["seed"], (case["K"], case["M"]), (case["K"], case["N"]), dtype=dtype)

    def run(tiled_matmul, case):
        return _kernel_result(_as_kernel(tiled_matmul), *TiledMatmul._operands(case))

    def judge(case, got):
        K, M, N = case["K"], case["M"], case["N"]
        lhsT, rhs = TiledMatmul._operands(case)
        shape_text = f"lhsT [{K}, {M}] and rhs [{K}, {N}] ({case['dtype']})"
        if case["dtype"] == "bfloat16":
            if got["dtype"] != "bfloat16":
                raise CheckFailed(f"expected a bfloat16 result for bfloat16 inputs (the result has lhsT's dtype), got "
                                  f"{got['dtype']} for {shape_text}")
            _compare(got["out"], lhsT.astype(np.float32).T @ rhs.astype(np.float32), "lhsT.T @ rhs", shape_text,
                     rtol=2e-2, atol=0.25)
            return
        _compare(got["out"], lhsT.T @ rhs, "lhsT.T @ rhs", shape_text)
        expected = (M // 128) * (N // 512) * (K // 128)
        matmuls = got["counts"].get("nc_matmul", 0)
        if matmuls != expected:
            raise CheckFailed(f"expected {expected} nc_matmul instructions (one per [128, 128] x [128, 512] tile pair), "
                              f"got {matmuls} for {shape_text}")


# -- 2. matmul + bias + ReLU, fused -----------------------------------------------------------------


@exercise("nb05_bias_relu", notebook=NOTEBOOK, points=3, answer="matmul_bias_relu",
          title="Fuse bias and ReLU into the way out of PSUM", asks_for=PACKAGE_KERNELS + ("trnlab.kernels.activations",))
class BiasRelu:
    def cases(rng):
        shapes = [(128, 128, 512), (256, 128, 256), (int(128 * rng.integers(1, 5)), 128, int(128 * rng.integers(1, 5)))]
        return [{"K": K, "M": M, "N": N, "seed": int(rng.integers(0, 2**31))} for K, M, N in shapes]

    def _operands(case):
        lhsT, rhs, bias = _inputs(case["seed"], (case["K"], case["M"]), (case["K"], case["N"]), (case["M"], 1))
        return lhsT, rhs, bias * 8.0  # big enough that both signs matter after the add

    def run(matmul_bias_relu, case):
        return _kernel_result(_as_kernel(matmul_bias_relu), *BiasRelu._operands(case))

    def judge(case, got):
        lhsT, rhs, bias = BiasRelu._operands(case)
        K, M, N = case["K"], case["M"], case["N"]
        shape_text = f"lhsT [{K}, {M}], rhs [{K}, {N}], bias [{M}, 1]"
        _compare(got["out"], np.maximum(lhsT.T @ rhs + bias, 0.0),
                 "max(lhsT.T @ rhs + bias, 0) (bias added to row m of the result)", shape_text)
        counts = got["counts"]
        others = {op: n for op, n in counts.items() if op in VECTOR_AND_SCALAR}
        if counts.get("activation", 0) != 1 or others:
            raise CheckFailed(f"expected one nisa.activation that reads PSUM and writes SBUF (bias and ReLU on the way "
                              f"out), and no other Vector/Scalar instruction; got activation "
                              f"{counts.get('activation', 0)}, others {others or 'none'} for {shape_text}")


# -- 3. block sizes that fit SBUF and keep the tensor engine busy --------------------------------------
BLOCK_KEYS = ("TILES_IN_BLOCK_M", "TILES_IN_BLOCK_N", "TILES_IN_BLOCK_K")
DTYPE = "bfloat16"
# The target is relative, CS149 style: the student's kernel must run within 120 % of the time of the
# best reference blocks, simulated on the same shape in the same run, so a change of the cost model
# moves both sides. The inputs are bf16: in fp32 the tensor engine is four times slower and even
# (1, 1, 1) blocks keep it 90-98 % busy, so block sizes barely matter; in bf16 the DMA queues are
# the limit and (1, 1, 1) takes 1.7-2.8x the reference's time. Measured on every shape the cases can draw
# (python benchmarks/nb05_blocks.py): reasoned answers — M and K blocks of up to 16 tiles that leave
# room for a second K block, chosen by reuse (tm * tk), by balance or by the largest M block — run within
# 100-110 % of the reference; blocks capped at 8 tiles fail on 2 of the 34 shapes (15 and 27 M tiles get
# blocks of 5 and 3 beside 9 K tiles; up to 131 %); filling SBUF with no room to prefetch fails on 2 (up to 129 %);
# copying AWS's (16, 2, 8) overflows SBUF or does not divide the shape; no fixed answer divides every shape.
TIME_TARGET = 1.20


def _divisor_up_to(n: int, cap: int) -> int:
    return max(d for d in range(1, cap + 1) if n % d == 0)


def sbuf_bytes(M: int, N: int, K: int, blocks: tuple[int, int, int]) -> int:
    tm, tn, tk = blocks
    return matmul_ladder.fully_blocked_sbuf_bytes(M, N, K, DTYPE, TILES_IN_BLOCK_M=tm, TILES_IN_BLOCK_N=tn,
                                                  TILES_IN_BLOCK_K=tk)


def reference_blocks(M: int, N: int, K: int) -> list[tuple[int, int, int]]:
    """Candidate blocks for the reference (each is simulated; the fastest sets the target): balanced
    blocks of up to 4 and up to 8 tiles, and the largest M block (then K block) of up to 16 tiles
    that leaves room to double-buffer a K block."""
    m_tiles, n_tiles, k_tiles = M // 128, N // 512, K // 128
    candidates = [(_divisor_up_to(m_tiles, 4), 1, _divisor_up_to(k_tiles, 4)),
                  (_divisor_up_to(m_tiles, 8), 1, _divisor_up_to(k_tiles, 8))]
    capacity = presets.TRN2.core.sbuf_partition_bytes
    item = dtypes.itemsize(dtypes.as_dtype(DTYPE))
    roomy = [(tm, 1, tk) for tm in range(1, 17) for tk in range(1, 17)
             if m_tiles % tm == 0 and k_tiles % tk == 0 and k_tiles >= tk
             and m_tiles * 512 * 4 + 2 * tk * (512 + 128 * tm) * item <= capacity]
    if roomy:
        candidates.append(max(roomy, key=lambda b: (b[0], min(b[2], 8))))
    return list(dict.fromkeys(candidates))


def run_blocks(M: int, N: int, K: int, blocks: tuple[int, int, int]) -> matmul_ladder.StepResult:
    tm, tn, tk = blocks
    return matmul_ladder.run_step(matmul_ladder.matmul_fully_blocked, M, N, K, dtype=DTYPE,
                                  TILES_IN_BLOCK_M=tm, TILES_IN_BLOCK_N=tn, TILES_IN_BLOCK_K=tk)


def reference_run(M: int, N: int, K: int) -> tuple[matmul_ladder.StepResult, tuple[int, int, int]]:
    """The fastest of the reference blocks on this shape, simulated now."""
    measured = []
    for blocks in reference_blocks(M, N, K):
        try:
            measured.append((run_blocks(M, N, K, blocks), blocks))
        except SBUFOverflowError:
            continue
    return min(measured, key=lambda rb: rb[0].latency_us)


def _loaded_per_matmul(blocks: tuple[int, int, int]) -> float:
    """KiB per partition a K block loads (lhsT rows and rhs rows) per matmul it feeds."""
    tm, tn, tk = blocks
    item = dtypes.itemsize(dtypes.as_dtype(DTYPE))
    return tk * (512 * tn + 128 * tm) * item / (tm * tn * tk) / 1024


def why_slow(M: int, N: int, K: int, blocks, student, reference_blocks_, reference) -> str:
    """The cause, read off the two runs: DMA-bound through little reuse, or no room to prefetch."""
    capacity = presets.TRN2.core.sbuf_partition_bytes
    tm, tn, tk = blocks
    item = dtypes.itemsize(dtypes.as_dtype(DTYPE))
    used = sbuf_bytes(M, N, K, blocks)
    next_block = tk * (512 * tn + 128 * tm) * item
    if used + next_block > capacity:
        return (f"your blocks keep {used / 1024:.0f} KiB of SBUF per partition busy, so the next K block "
                f"({next_block / 1024:.0f} KiB) has no room to load while this one is multiplied — the tensor "
                f"engine waits for every load (busy {student.active['pe']:.0f}%, the reference "
                f"{reference.active['pe']:.0f}%); leave room for a second K block")
    return (f"the DMA queues were busy {student.active['dma']:.0f}% of the time and the tensor engine only "
            f"{student.active['pe']:.0f}% (the reference: {reference.active['pe']:.0f}%): each K block of yours "
            f"loads {_loaded_per_matmul(blocks):.2f} KiB per partition for every matmul it feeds, the "
            f"reference's {_loaded_per_matmul(reference_blocks_):.2f} KiB — larger M (and N) blocks reuse "
            "each loaded tile for more matmuls")


@exercise("nb05_sbuf_blocks", notebook=NOTEBOOK, points=2, answer="choose_blocks",
          title="Repair an SBUF overflow: choose block sizes",
          asks_for=("trnlab.kernels.matmul_ladder.run_step", "trnlab.kernels.matmul_ladder.run_ladder",
                    "trnlab.nki.run", "trnlab.nki.simulate", "trnlab.nki.benchmark", "trnlab.nki.profile"))
class SbufBlocks:
    def cases(rng):
        def pick(options):
            return int(options[int(rng.integers(0, len(options)))])

        big = (pick([32, 64]), 2, pick([16, 32]))  # M up to 8192: AWS's (16, 2, 8) overflows SBUF here
        odd = (pick([9, 15, 27]), pick([1, 3]), pick([9, 15]))  # tile counts with odd factors
        mixed = (pick([12, 20, 24]), pick([1, 2]), pick([10, 12, 20]))
        return [[128 * m, 512 * n, 128 * k] for m, n, k in (big, odd, mixed)]

    def run(choose_blocks, shape):
        blocks = plain.mapping(choose_blocks(*shape), "choose_blocks' result")
        if sorted(blocks) != sorted(BLOCK_KEYS):
            raise CheckFailed(f"expected a dict with keys {', '.join(BLOCK_KEYS)}, got the keys {sorted(map(str, blocks))} "
                              f"for (M, N, K) = {tuple(shape)}")
        return {key: plain.integer(blocks[key], key) for key in BLOCK_KEYS}

    def judge(shape, got):
        M, N, K = shape
        blocks = tuple(got[key] for key in BLOCK_KEYS)
        tm, tn, tk = blocks
        if min(blocks) < 1 or M % (128 * tm) or N % (512 * tn) or K % (128 * tk):
            raise CheckFailed(f"expected blocks that divide the shape (M by 128·TILES_IN_BLOCK_M, N by 512·TILES_IN_BLOCK_N, "
                              f"K by 128·TILES_IN_BLOCK_K), got {got} for (M, N, K) = {(M, N, K)}")
        try:
            student = run_blocks(M, N, K, blocks)
        except SBUFOverflowError:
            capacity = presets.TRN2.core.sbuf_partition_bytes
            raise CheckFailed(f"expected the kernel to fit in SBUF ({capacity // 1024} KiB per partition), but {got} "
                              f"needs {sbuf_bytes(M, N, K, blocks) // 1024} KiB per partition for (M, N, K) = "
                              f"{(M, N, K)}: fp32 partial sums M/128 · BLOCK_N · 4 bytes plus "
                              f"TILES_IN_BLOCK_K · (BLOCK_N + BLOCK_M) · 2 bytes of bf16 inputs")
        reference, best = reference_run(M, N, K)
        if student.latency_us > TIME_TARGET * reference.latency_us:
            ratio = student.latency_us / reference.latency_us
            raise CheckFailed(
                f"expected a time within {100 * TIME_TARGET:.0f}% of the reference blocks {best} "
                f"({reference.latency_us:.1f} µs, simulated in this run), got {student.latency_us:.1f} µs "
                f"({100 * ratio:.0f}%) with {blocks} for (M, N, K) = {(M, N, K)}: "
                + why_slow(M, N, K, blocks, student, best, reference))
"""The cost model: how many cycles (and nanoseconds) each instruction keeps its engine busy.

Grounded in the published NKI cost model [ARCH-v2], [PERF], [ISA]; every constant lives in the
`CoreSpec` (presets.py) with its source.

Tensor engine (a systolic array of pe_rows × pe_cols PEs, weights stationary):
- MultiplyMoving streams the N columns of `moving` through the array: the engine is busy for
  ``max(min(matmul_min_cycles, M), N)`` cycles (the ISA page's formula; = max(N, 64) for a full
  128-wide stationary), × `fp32_matmul_factor` (4) when an input is fp32.
- The last column leaves the array (K - 1) + (M - 1) cycles after it entered: data skews down the
  K rows and partial sums flow across the M columns. So the PSUM result is *ready*
  ``busy + (K - 1) + (M - 1)`` cycles after the start (``matmul_cycles`` returns both). Back-to-back
  matmuls overlap this fill/drain; a reader of the PSUM tile waits for it.
- LoadStationary (a new stationary tile) takes ``ceil(M / stationary_load_speedup)`` cycles and runs
  in the background into a shadow buffer while the previous matmul streams; it only delays a
  matmul when its stationary data arrives late or the previous matmul is shorter than the load.

Vector / GpSimd: ``vector_static_cycles + N × inputs`` (N = elements per partition), i.e. about N
for one input, 2N for two, plus the static overhead. Scalar (activation): ``activation_static_cycles
+ max(activation_min_cycles, N)``, + activation_min_cycles more when the same instruction also
sums its result along the free axis (activation with reduce_res). scalar_tensor_tensor: static + 2N
(N for bf16 subtract-then-multiply).

DMA: ``dma_latency_ns + bytes / rate`` where rate = min(dma_engines, rows) × dma_engine_bandwidth (a
transfer is spread over up to 16 DMA engines by its rows [DMA]). Transfers in flight on different
queues share the core's DMA engines (dma_engines × dma_engine_bandwidth in total) and, if they
touch HBM, the core's HBM bandwidth: the scheduler passes their bytes through one channel per
shared resource, each transfer in the earliest free gap at or after it can begin
(`scheduler.Channel`), not in issue order.
"""
from __future__ import annotations

from . import dtypes
from .presets import CoreSpec

_FP32 = dtypes.float32


def matmul_cycles(spec: CoreSpec, K: int, M: int, N: int, dtype="bfloat16") -> tuple[int, int]:
    """(busy_cycles, latency_cycles) of one nc_matmul of stationary [K, M] by moving [K, N].

    busy: how long the tensor engine is occupied (the next matmul may start after it);
    latency: from start until the result is complete in PSUM = busy + (K - 1) + (M - 1).
    """
    busy = max(min(spec.matmul_min_cycles, M), N)
    if dtypes.as_dtype(dtype) == _FP32:
        busy *= spec.fp32_matmul_factor
    return busy, busy + (K - 1) + (M - 1)


def stationary_load_cycles(spec: CoreSpec, K: int, M: int) -> int:
    """LoadStationary of a [K, M] tile: M columns, `stationary_load_speedup`× faster than streaming."""
    return -(-M // spec.stationary_load_speedup)


def vector_cycles(spec: CoreSpec, free_size: int, inputs: int = 1) -> int:
    """Vector (or GpSimd) engine: static overhead + N per input tensor."""
    return spec.vector_static_cycles + free_size * max(inputs, 1)


def activation_cycles(spec: CoreSpec, free_size: int) -> int:
    """Scalar engine activation: max(64, N) (+ static overhead, 0 by default)."""
    return spec.activation_static_cycles + max(spec.activation_min_cycles, free_size)


def scalar_tensor_tensor_cycles(spec: CoreSpec, free_size: int, bf16_subtract_multiply: bool) -> int:
    """scalar_tensor_tensor: 2N, or N when data and operand1 are bfloat16, op0 = subtract,
    op1 = multiply and N is even [nki.isa.scalar_tensor_tensor] (+ the static overhead)."""
    per_element = 1 if bf16_subtract_multiply and free_size % 2 == 0 else 2
    return spec.vector_static_cycles + per_element * free_size


def dma_rate(spec: CoreSpec, rows: int) -> float:
    """Bytes/s of one transfer spread over min(dma_engines, rows) DMA engines."""
    return min(spec.dma_engines, max(rows, 1)) * spec.dma_engine_bandwidth


def dma_ns(spec: CoreSpec, nbytes: int, rows: int) -> float:
    """One DMA alone (no other traffic): fixed latency + bytes / rate, capped by the HBM share."""
    rate = min(dma_rate(spec, rows), spec.hbm_bandwidth)
    return spec.dma_latency_ns + nbytes / rate * 1e9


def cycles_to_ns(cycles: float, clock_hz: float) -> float:
    return cycles * 1e9 / clock_hz


# -- instructions added for NKI coverage (tensor_tensor_scan, tensor_scalar_reduce, ...) ------------
def tensor_scalar_reduce_cycles(spec: CoreSpec, free_size: int) -> int:
    """tensor_scalar with one operator plus a reduction along the free axes: max(MIN_II, N) + MIN_II
    Vector cycles [nki.isa.tensor_scalar_reduce, "Estimated instruction cost", NKI beta-1 docs]
    (MIN_II = activation_min_cycles), plus the static overhead every Vector instruction pays here."""
    return spec.vector_static_cycles + max(spec.activation_min_cycles, free_size) + spec.activation_min_cycles


def tensor_tensor_scan_cycles(spec: CoreSpec, free_size: int) -> int:
    """tensor_tensor_scan: ASSUMED (no published figure) to stream its two inputs like tensor_tensor,
    static + 2N Vector cycles; the recurrence is carried in the engine's lane without extra passes."""
    return vector_cycles(spec, free_size, 2)


def tensor_partition_reduce_cycles(spec: CoreSpec, partitions: int, free_size: int) -> int:
    """tensor_partition_reduce on GpSimd: ASSUMED (no published figure). GpSimd's 8 cores each own 16
    partitions [ARCH-v2]; the model charges each core a pass over its partitions' N elements, then a
    combine across the 8 cores: static + N × (ceil(P / 8) + 8) cycles."""
    return spec.vector_static_cycles + free_size * (-(-partitions // 8) + 8)


def dropout_cycles(spec: CoreSpec, free_size: int) -> int:
    """dropout (Vector engine [nki.isa.dropout]): ASSUMED one pass, like a one-input tensor_scalar."""
    return vector_cycles(spec, free_size, 1)

"""The cost model: how long each instruction keeps its engine busy — one pure function.

    cost(instruction, spec) -> Cost        # Cost.cycles on the engine's clock, Cost.ns, ...

`Instruction` is a small plain-data description (opcode, engine, operand shapes / dtypes / bytes /
contiguity, attributes), so a compiler can ask what an instruction costs without issuing it;
`NeuronCore` builds one per instruction and asks the same function. Nothing here reads or keeps
state: waiting for data, queues and shared ports are the scheduler's business (core.py).

Grounded in the published NKI cost model [ARCH-v2], [PERF], [ISA] and the DMA pages [DMA],
[DMA-BW]; every constant lives in the `CoreSpec` (presets.py) with its source.

Tensor engine (a systolic array of pe_rows × pe_cols PEs, weights stationary):
- MultiplyMoving streams the N columns of `moving` through the array: the engine is busy for
  ``max(min(matmul_min_cycles, M), N)`` cycles (the ISA page's formula; = max(N, 64) for a full
  128-wide stationary), × `fp32_matmul_factor` (4) when an input is fp32 — halved for each fp32
  operand the kernel hints holds ones and zeros only (`onezero_passes`; trnlab/hardware/onezero.py).
- The last column leaves the array (K - 1) + (M - 1) cycles after it entered: data skews down the
  K rows and partial sums flow across the M columns. So the PSUM result is *ready*
  ``busy + (K - 1) + (M - 1)`` cycles after the start (`Cost.latency_cycles`). Back-to-back
  matmuls overlap this fill/drain; a reader of the PSUM tile waits for it. The cycle-level
  systolic model (systolic.py) counts the same cycles PE by PE.
- nc_transpose is an identity matmul (N = P columns); in fp32 from NeuronCore-v3 on it runs in the
  engine's transpose mode at half the fp32 matmul factor ("2x speedup in FP32 transpose" [ARCH-v3]).
- LoadStationary (a new stationary tile) takes ``ceil(M / stationary_load_speedup)`` cycles
  (`Cost.setup_cycles`) and runs in the background into a shadow buffer.

Vector / GpSimd: ``vector_static_cycles + N × inputs`` (N = elements per partition). On the
Vector engine two documented refinements (docs/calibration.md):
- the static overhead is paid only where [ARCH-v2] charges it — "many back-to-back instructions
  either with N << 128 or with every instruction depending on the output tile of the previous
  instruction". An instruction that follows an independent one on the engine without waiting,
  with N >= `vector_static_hidden_min_free`, issues while its predecessor streams and pays N only
  (`vector_hidden_static_cycles`, applied by the scheduler through `issue_busy_ns`: whether it
  waited is a matter of time, so `cost` itself returns the full figure, as for a lone instruction);
- the bf16/fp16 performance mode of NeuronCore-v3 [ARCH-v3]: tensor_copy / tensor_scalar 4× with
  every operand in SBUF and contiguous along the inner-most free axis, 2× otherwise (or with one
  operand in PSUM), tensor_tensor 2× with both inputs in SBUF (`vector_perf_mode_factor`). Scalar
(activation): ``activation_static_cycles + max(activation_min_cycles, N)``, + activation_min_cycles
when it also reduces into its registers. scalar_tensor_tensor: static + 2N (N for bf16
subtract-then-multiply). tensor_tensor: N, not 2N, with one input in PSUM and the other in SBUF, and
(NeuronCore-v2) with bf16 add / multiply / subtract in SBUF [TT-COST]; memset of zero into a
bf16/fp16 tile N/2 [MEMSET-COST] (`tensor_tensor_passes`, `memset_cycles`). bn_aggr: static + max(MIN_II, 13 N / 3) [ISA]. iota / affine_select
(GpSimd evaluates an affine pattern): affine_static_cycles + N [ISA].

DMA [DMA], [DMA-BW]: a transfer is cut into *descriptors*, one per contiguous chunk (at most one
partition row on the SBUF side, at most one contiguous run in HBM). An SBUF transfer uses one DMA
engine per 8 partitions (128 partitions / 16 engines [DMA]); each engine works through its
descriptors one after the other, each taking ``max(chunk / dma_engine_bandwidth,
dma_descriptor_ns)`` — a fixed time per descriptor that short chunks cannot amortise, which is
why AWS asks for ≥ 2 KiB (better 4 KiB) per partition [DMA-BW]. Before the first byte moves the
transfer waits `dma_latency_ns` (trigger to start, ≈1.3 µs [DMA-BW]); this latency is pipelined
across queues, the engine time is not. `Cost` also reports what the transfer asks of the two
resources all queues share (`dma_engine_ns` of the core's DMA engines, `hbm_bytes` of HBM); the
scheduler passes them through one channel each.

A row read or written with a stride (runs shorter than the row: a column of a row-major HBM
tensor, a window of an image) is *one* descriptor — a descriptor holds a stride pattern [DGE] —
whose engine time counts every run as at least `dma_min_burst_bytes` (ASSUMED). `dma_transpose`
into SBUF uses the DMA engines' hardware transpose from NeuronCore-v3 on (`dma_transpose_cost`,
[ARCH-v3]); without it (NeuronCore-v2) it is the strided DMA it amounts to. Sources and the
validation on AWS's published kernel latencies: docs/calibration.md.

[TT-COST] AWS Neuron docs, NKI API "nki.isa.tensor_tensor" (NKI beta-1 page, Inf2/Trn1/Trn2),
"Estimated instruction cost".
[MEMSET-COST] AWS Neuron docs, NKI API "nki.isa.memset" (NKI beta-1 page), "Estimated instruction cost".
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from . import dtypes
from .presets import CoreSpec

_FP32 = dtypes.float32
COMPUTE_ENGINES = ("pe", "act", "dve", "pool")
DMA_CLOCK_HZ = 1e9      # DMA costs are computed in ns; `Cost.cycles` of a DMA are ns (1 GHz)


@dataclass(frozen=True)
class Operand:
    """What the cost model needs to know of one operand (no values, no buffer)."""
    memory: str                     # "hbm" | "sbuf" | "psum"
    shape: tuple
    dtype: str                      # dtypes.name(...)
    partitions: int                 # rows on the partition axis (1 for HBM)
    free_size: int                  # elements per partition
    nbytes: int
    contiguous_bytes: int = 0       # longest contiguous run (per partition on chip); DMA only
    inner_contiguous: bool = True   # elements adjacent along the inner-most free axis (Vector perf mode)

    @property
    def itemsize(self) -> int:
        return dtypes.as_dtype(self.dtype).itemsize


@dataclass(frozen=True)
class Instruction:
    """An instruction as the cost model sees it. `engine`: "pe", "act", "dve", "pool" or "dma"."""
    opcode: str
    engine: str
    reads: tuple = ()               # Operands read (nc_matmul: (stationary, moving))
    writes: tuple = ()              # Operands written
    attrs: dict = field(default_factory=dict)   # e.g. {"reduce": True}, {"fast_mode": True}


@dataclass(frozen=True)
class Cost:
    """The answer: engine-busy cycles on `clock_hz`, and (DMA) what the shared resources carry."""
    cycles: float                   # the engine (or, for a DMA, its engines) is busy this long
    clock_hz: float
    latency_cycles: float = 0.0     # from start until the result is ready (>= cycles)
    setup_cycles: float = 0.0       # nc_matmul: LoadStationary, in the background
    fixed_ns: float = 0.0           # DMA: trigger-to-start latency before the engines begin
    engines: int = 0                # DMA: engines the transfer is spread over
    descriptors: int = 0            # DMA: descriptors (contiguous chunks)
    dma_engine_ns: float = 0.0      # DMA: engine-time it takes from the core's shared DMA engines
    hbm_bytes: int = 0              # DMA: bytes through HBM

    @property
    def ns(self) -> float:
        """Busy time in ns (a DMA: fixed latency + engine time)."""
        return self.fixed_ns + self.cycles * 1e9 / self.clock_hz

    @property
    def latency_ns(self) -> float:
        return self.fixed_ns + max(self.latency_cycles, self.cycles) * 1e9 / self.clock_hz


def engine_clock(spec: CoreSpec, engine: str) -> float:
    return DMA_CLOCK_HZ if engine.startswith("dma") else spec.engine_clocks[engine]


# -- the per-engine formulas (also used directly by the notebooks' pictures) -----------------------
def matmul_cycles(spec: CoreSpec, K: int, M: int, N: int, dtype="bfloat16") -> tuple[int, int]:
    """(busy_cycles, latency_cycles) of one nc_matmul of stationary [K, M] by moving [K, N]."""
    busy = max(min(spec.matmul_min_cycles, M), N)
    if dtypes.as_dtype(dtype) == _FP32:
        busy *= spec.fp32_matmul_factor
    return busy, busy + (K - 1) + (M - 1)


def onezero_passes(spec: CoreSpec, stationary_dtype: str, moving_dtype: str, attrs: dict) -> int:
    """How many times an nc_matmul streams its moving columns: 1, or for an fp32 matmul
    `fp32_matmul_factor` (4) halved for each fp32 operand hinted to hold ones and zeros only
    (``is_stationary_onezero`` / ``is_moving_onezero``: "could lead to 2x better performance if
    stationary tile is in float32; the field has no impact for non-float32 stationary", nki.isa.nc_matmul;
    both hints together halving it twice is ASSUMED; trnlab/hardware/onezero.py)."""
    if "float32" not in (stationary_dtype, moving_dtype):
        return 1
    passes = spec.fp32_matmul_factor
    for hint, dtype in (("is_stationary_onezero", stationary_dtype), ("is_moving_onezero", moving_dtype)):
        if dtype == "float32" and attrs.get(hint):
            passes //= 2
    return max(passes, 1)


def stationary_load_cycles(spec: CoreSpec, K: int, M: int) -> int:
    """LoadStationary of a [K, M] tile: M columns, `stationary_load_speedup`× faster than streaming."""
    return -(-M // spec.stationary_load_speedup)


def vector_cycles(spec: CoreSpec, free_size: int, inputs: int = 1) -> int:
    """Vector (or GpSimd) engine: static overhead + N per input tensor."""
    return spec.vector_static_cycles + free_size * max(inputs, 1)


_PERF_MODE_DTYPES = ("bfloat16", "float16")
_PERF_MODE_OPCODES = ("tensor_copy", "tensor_scalar", "tensor_tensor")


def vector_perf_mode_factor(spec: CoreSpec, opcode: str, reads: tuple, writes: tuple) -> int:
    """How much faster the Vector engine streams this instruction in its bf16/fp16 performance mode
    (1 where the core has none or the instruction does not qualify) [ARCH-v3], "Vector Engine
    Performance Mode" — the hardware enables it by itself when:
    - 4×: tensor_copy / tensor_scalar, every operand in SBUF, bf16/fp16 (need not match), elements
      contiguous along the inner-most free axis;
    - 2×: the same but not contiguous, or contiguous with one of input and output in PSUM;
      tensor_tensor with both inputs in SBUF and every operand bf16/fp16.
    The arithmetic is still fp32; only the throughput changes."""
    if not spec.vector_perf_mode or opcode not in _PERF_MODE_OPCODES:
        return 1
    operands = tuple(reads) + tuple(writes)
    if not operands or any(o.dtype not in _PERF_MODE_DTYPES for o in operands):
        return 1
    if opcode == "tensor_tensor":
        return 2 if all(o.memory == "sbuf" for o in reads) else 1
    contiguous = all(o.inner_contiguous for o in operands)
    in_psum = sum(o.memory == "psum" for o in operands)
    if in_psum == 0:
        return 4 if contiguous else 2
    return 2 if contiguous and in_psum == 1 else 1


_TT_FAST_OPS = ("add", "multiply", "subtract")


def tensor_tensor_passes(spec: CoreSpec, reads: tuple, writes: tuple, op: str | None) -> int:
    """N cycles per pass of a Vector tensor_tensor: 1 or 2 ([TT-COST], "Estimated instruction cost":
    "If one input tile is in PSUM and the other is in SBUF, N Vector Engine cycles"; also N when both
    inputs are in SBUF, every operand bfloat16, the operator add, multiply or subtract, and the data
    contiguous along the free dimension; "Otherwise, 2N"). From NeuronCore-v3 on, the bf16 case is
    the performance mode's instead (`vector_perf_mode_factor`, which covers fp16 and any operator
    too), so the second clause applies to NeuronCore-v2 only."""
    memories = [o.memory for o in reads]
    if sorted(memories) == ["psum", "sbuf"]:
        return 1
    if (not spec.vector_perf_mode and op in _TT_FAST_OPS and memories == ["sbuf", "sbuf"]
            and all(o.dtype == "bfloat16" and o.inner_contiguous for o in tuple(reads) + tuple(writes))):
        return 1
    return 2


def memset_cycles(spec: CoreSpec, free_size: int, dtype: str, zero: bool) -> int:
    """memset of N elements per partition: static + N, or static + N/2 when it writes zero into a
    bfloat16/float16 tile ([MEMSET-COST]: "If the initialized value is zero and output data type is
    bfloat16/float16, max(MIN_II, N/2) Vector Engine cycles; Otherwise, max(MIN_II, N)"; the static
    part is the Vector engine's, paid or hidden as for every Vector instruction)."""
    per_partition = -(-free_size // 2) if zero and dtype in _PERF_MODE_DTYPES else free_size
    return spec.vector_static_cycles + per_partition


def cost_depends_on_operands(spec: CoreSpec, engine: str, opcode: str) -> bool:
    """Do the operands' dtypes, memories or layout change this instruction's cost (not only its
    shape)? Schedulers that remember costs by shape key on the operands too when it is True."""
    return vector_perf_mode_possible(spec, engine, opcode) or (
        engine == "dve" and opcode in ("tensor_tensor", "memset"))


def vector_perf_mode_possible(spec: CoreSpec, engine: str, opcode: str) -> bool:
    """Can the operands' dtypes, memories and layout change this instruction's cost? (Schedulers
    that remember costs by shape use it to key on the operands too.)"""
    return spec.vector_perf_mode and engine == "dve" and opcode in _PERF_MODE_OPCODES


def vector_hidden_static_cycles(spec: CoreSpec, engine: str, free_size: int,
                                reads_previous_result: bool) -> int:
    """Cycles of the static overhead a Vector instruction does not pay *if* it is ready when the
    engine finishes its predecessor (`issue_busy_ns`); 0 where [ARCH-v2] charges the overhead.

    [ARCH-v2], Vector engine "Cost Model": roughly N (one input) or 2N (two) cycles "where N is
    sufficiently large (N > 128)"; "in the rare cases where VectorE is running many back-to-back
    instructions either with N << 128 or with every instruction depending on the output tile of
    the previous instruction", add a static overhead of 100 cycles. So it is charged when
    - N < `vector_static_hidden_min_free` (128; the boundary between "<< 128" and "> 128" is not
      published: ASSUMED at 128, not fitted),
    - the instruction reads what the engine's previous instruction wrote (`reads_previous_result`),
    - there is no predecessor to overlap (the first instruction of a launch: `issue_busy_ns`'s
      `follows`, a fact of the run, not of the instruction, so a loop's iterations describe alike).
    Other engines keep their own figures: GpSimd pays its static cost always (the rule is the
    Vector engine's), the Scalar engine has none (`activation_static_cycles`)."""
    if engine != "dve" or reads_previous_result:
        return 0
    if free_size < spec.vector_static_hidden_min_free:
        return 0
    return spec.vector_static_cycles


def issue_busy_ns(busy_ns: float, hidden_ns: float, ready_ns: float, engine_free_ns: float,
                  follows: bool = True) -> float:
    """The busy time of an instruction whose data is ready at `ready_ns` on an engine free at
    `engine_free_ns`: back to back (ready by then, and `follows` an instruction of the same launch
    on that engine) it overlaps its predecessor by `hidden_ns` (`vector_hidden_static_cycles`);
    first in its launch, or after the engine idled, waiting, it pays everything."""
    if hidden_ns and follows and ready_ns <= engine_free_ns:
        return busy_ns - hidden_ns
    return busy_ns


def activation_cycles(spec: CoreSpec, free_size: int) -> int:
    """Scalar engine activation: max(64, N) (+ static overhead, 0 by default)."""
    return spec.activation_static_cycles + max(spec.activation_min_cycles, free_size)


def scalar_tensor_tensor_cycles(spec: CoreSpec, free_size: int, bf16_subtract_multiply: bool) -> int:
    """scalar_tensor_tensor: 2N, or N when data and operand1 are bfloat16, op0 = subtract,
    op1 = multiply and N is even [nki.isa.scalar_tensor_tensor] (+ the static overhead)."""
    per_element = 1 if bf16_subtract_multiply and free_size % 2 == 0 else 2
    return spec.vector_static_cycles + per_element * free_size


def dma_engines_used(spec: CoreSpec, partitions: int) -> int:
    """DMA engines a transfer touching `partitions` SBUF partitions is spread over: one engine per
    partitions / dma_engines lanes (8 of 128 [DMA]: a [4, 4096] load runs on one engine)."""
    lanes = max(spec.partitions // spec.dma_engines, 1)
    return max(1, min(spec.dma_engines, -(-max(partitions, 1) // lanes)))


def dma_cost(spec: CoreSpec, nbytes: int, partitions: int, chunk_bytes: int | None = None,
             touches_hbm: bool = True, hbm_run_bytes: int = 0) -> Cost:
    """One DMA of `nbytes` over `partitions` SBUF rows (or HBM rows), in contiguous runs of
    `chunk_bytes` (default: one run per row).

    A descriptor carries "the source address, destination address, transfer shape, and stride
    pattern" [DGE], so a row read or written with a stride is one descriptor, not one per run:
    runs shorter than a row make a row's descriptor cost ``max(dma_descriptor_ns, runs ×
    max(run, dma_min_burst_bytes) / bandwidth + dma_descriptor_setup_ns)`` — a short run still moves a
    whole burst (ASSUMED, presets.py); `dma_descriptor_setup_ns` is 0 in every preset (a calibration
    candidate: a fixed part per descriptor on top of its bytes, docs/calibration.md). Runs of a row or longer are descriptors of their own (one per row on chip).
    `hbm_run_bytes`: the HBM side's contiguous run when it is not the whole transfer (a tile cut out
    of a wider tensor; 0 otherwise); with runs of `dma_hbm_gather_min_bytes` up to
    `dma_hbm_gather_below_bytes`, each row moved whole, the transfer moves its bytes at
    `dma_hbm_gather_bandwidth` for the whole core instead of the per-descriptor time (the presets' rates: presets.py, docs/calibration.md)."""
    rows = max(partitions, 1)
    row_bytes = max(nbytes // rows, 1)
    if not chunk_bytes or chunk_bytes <= 0:
        chunk_bytes = row_bytes
    chunk_bytes = min(chunk_bytes, max(nbytes, 1))
    bw_ns = spec.dma_engine_bandwidth / 1e9                  # bytes per ns per engine
    if chunk_bytes < row_bytes:                              # strided inside a row: one descriptor per row
        descriptors = rows
        runs = -(-row_bytes // chunk_bytes)
        moved = runs * max(chunk_bytes, spec.dma_min_burst_bytes)   # [bytes of engine time per row]
        per_descriptor = max(moved / bw_ns + spec.dma_descriptor_setup_ns, spec.dma_descriptor_ns)
    else:
        descriptors = max(1, -(-nbytes // chunk_bytes))
        per_descriptor = max(chunk_bytes / bw_ns + spec.dma_descriptor_setup_ns, spec.dma_descriptor_ns)
    engines = min(dma_engines_used(spec, rows), descriptors)
    per_engine = -(-descriptors // engines)
    # the busiest engine: whole descriptors, but never faster than its share of the bytes
    engine_ns = max(per_engine * per_descriptor, nbytes / engines / bw_ns) if nbytes else 0.0
    # whole rows only: a row strided inside (element by element, as a v2 transpose) keeps its bursts
    if spec.dma_hbm_gather_bandwidth > 0 and nbytes and chunk_bytes >= row_bytes and \
            spec.dma_hbm_gather_min_bytes <= hbm_run_bytes < spec.dma_hbm_gather_below_bytes:
        # bytes at its engines' share of the core's gather rate, in place of the per-descriptor time
        # (ASSUMED: the descriptors' fixed time overlaps the HBM side's slower runs)
        engine_ns = max(nbytes * spec.dma_engines / engines / spec.dma_hbm_gather_bandwidth * 1e9,
                        nbytes / engines / bw_ns)
    return Cost(cycles=engine_ns, clock_hz=DMA_CLOCK_HZ, latency_cycles=engine_ns,
                fixed_ns=spec.dma_latency_ns, engines=engines, descriptors=descriptors,
                dma_engine_ns=engine_ns * engines / spec.dma_engines,
                hbm_bytes=nbytes if touches_hbm else 0)


def dma_transpose_cost(spec: CoreSpec, nbytes: int, out_partitions: int, out_free: int,
                       itemsize: int, from_hbm: bool) -> Cost | None:
    """The DMA engines' hardware transpose into SBUF (NeuronCore-v3 on; None where the core has none).

    [ARCH-v3] "DMA Transpose": all 16 engines work together, writing one [128 partitions, 16
    elements] block of the SBUF result at a time; HBM -> SBUF reaches up to 90 % of the DMA
    throughput, SBUF -> SBUF up to 50 % (`dma_transpose_efficiency_hbm` / `_sbuf`), for 2- and 4-byte
    dtypes; other tile sizes are allowed "at the cost of DMA performance". ASSUMED how much: a
    partial block takes as long as a full one."""
    efficiency = spec.dma_transpose_efficiency_hbm if from_hbm else spec.dma_transpose_efficiency_sbuf
    if efficiency <= 0 or itemsize not in (2, 4) or nbytes <= 0:
        return None
    block_p, block_f = spec.partitions, 16
    blocks = -(-max(out_partitions, 1) // block_p) * -(-max(out_free, 1) // block_f)
    padded = blocks * block_p * block_f * itemsize             # [bytes the engines spend time on]
    rate = efficiency * spec.dma_engines * spec.dma_engine_bandwidth / 1e9   # bytes per ns, all engines
    engine_ns = padded / rate
    return Cost(cycles=engine_ns, clock_hz=DMA_CLOCK_HZ, latency_cycles=engine_ns,
                fixed_ns=spec.dma_latency_ns, engines=spec.dma_engines, descriptors=blocks,
                dma_engine_ns=engine_ns, hbm_bytes=nbytes if from_hbm else 0)


def dma_ns(spec: CoreSpec, nbytes: int, rows: int, chunk_bytes: int | None = None) -> float:
    """One HBM DMA alone (no other traffic): fixed latency + engine time, capped by the HBM share."""
    c = dma_cost(spec, nbytes, rows, chunk_bytes)
    return c.fixed_ns + max(c.cycles, nbytes / spec.hbm_bandwidth * 1e9)


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


# -- NKI 0.7's selections, gathers, shuffles and running reductions (select.py, gather.py, accumulate.py) --
SELECTION_OPCODES = frozenset(("max8", "nc_find_index8", "nc_match_replace8", "tensor_copy_predicated",
                               "range_select", "exponential", "tensor_scalar_cumulative", "nc_stream_shuffle",
                               "activate2", "nonzero_with_count", "sequence_bounds", "nc_n_gather",
                               "local_gather", "topk"))
GATHER_GROUP = 512          # nc_n_gather is ceil(elements per partition / 512) ISA instructions [nki.isa.nc_n_gather]


def selection_cycles(spec: CoreSpec, opcode: str, free_size: int, attrs: dict) -> int:
    """Engine cycles of NKI 0.7's selection / gather / shuffle instructions; N = elements per
    partition of the first operand read, MIN_II = activation_min_cycles; every figure plus the
    engine's static overhead, as for every Vector / GpSimd instruction here.

    Published [AWS NKI API pages, "Estimated instruction cost", NKI 2.26 docs]:
    - max8 (N = src), nc_find_index8 (N = data): N cycles;
    - tensor_copy_predicated: max(MIN_II, N) with one of src / predicate in PSUM and the other in
      SBUF, else max(MIN_II, 2N) (attr ``passes``).
    ASSUMED (no published figure): nc_match_replace8 N (one pass, like nc_find_index8);
    range_select, exponential, tensor_scalar_cumulative max(MIN_II, N), + MIN_II when they reduce into
    the registers (tensor_scalar_reduce's published shape); nc_stream_shuffle max(MIN_II, N);
    activate2 on GpSimd N; nonzero_with_count N (each GpSimd core scans its partition); sequence_bounds
    2N (a forward and a backward pass); nc_n_gather N plus the static overhead per ISA instruction of
    512 elements; local_gather N = the elements each GpSimd core gathers (attr ``elements``); topk n =
    the active elements of a 16-partition group's snake (attr ``elements``)."""
    static, min_ii = spec.vector_static_cycles, spec.activation_min_cycles
    n = free_size
    if opcode in ("max8", "nc_find_index8", "nc_match_replace8", "activate2", "nonzero_with_count"):
        return static + n
    if opcode == "tensor_copy_predicated":
        return static + max(min_ii, int(attrs.get("passes", 2)) * n)
    if opcode in ("range_select", "exponential", "tensor_scalar_cumulative", "nc_stream_shuffle"):
        return static + max(min_ii, n) + (min_ii if attrs.get("reduce") else 0)
    if opcode == "sequence_bounds":
        return static + 2 * n
    if opcode == "nc_n_gather":
        return static * max(1, -(-n // GATHER_GROUP)) + n
    if opcode in ("local_gather", "topk"):
        return static + int(attrs.get("elements", n))
    raise KeyError(opcode)


# -- the one entry point ----------------------------------------------------------------------------
def cost(instr: Instruction, spec: CoreSpec) -> Cost:
    """How long `instr` keeps its engine busy on a core of `spec` (pure: no state is read)."""
    op, engine = instr.opcode, instr.engine
    if engine.startswith("dma"):
        return _dma(instr, spec)
    clock = spec.engine_clocks[engine]
    if engine == "pe":
        return _tensor_engine(instr, spec, clock)
    data = instr.reads[0] if instr.reads else instr.writes[0]
    n = data.free_size
    a = instr.attrs
    if op in ("iota", "affine_select"):
        cycles = spec.affine_static_cycles + n
    elif op == "bn_aggr":
        cycles = spec.vector_static_cycles + max(spec.activation_min_cycles, 13 * n // 3)
    elif op == "scalar_tensor_tensor":
        cycles = scalar_tensor_tensor_cycles(spec, n, bool(a.get("fast_mode")))
    elif op in SELECTION_OPCODES and engine != "act":
        cycles = selection_cycles(spec, op, n, a)
    elif engine == "act":
        cycles = activation_cycles(spec, n)
        if a.get("reduce"):
            cycles += spec.activation_min_cycles
    elif op == "quantize_mx":
        # "four input elements per partition, per cycle (i.e., 4x Vector performance mode)"
        # [ARCH-v4], "MX data-type Quantization"; N = source (fp16/bf16) values per partition: four per
        # packed element written (a source tile of another type read as fp16/bf16 has fewer elements)
        cycles = spec.vector_static_cycles + -(-a.get("values", n) // 4)
    elif op == "memset" and engine == "dve":
        cycles = memset_cycles(spec, n, instr.writes[0].dtype, bool(a.get("zero")))
    elif op == "tensor_tensor" and engine == "dve":
        factor = vector_perf_mode_factor(spec, op, instr.reads, instr.writes)
        passes = tensor_tensor_passes(spec, instr.reads, instr.writes, a.get("op"))
        cycles = spec.vector_static_cycles + -(-n * passes // factor)
    else:
        inputs = max(a.get("inputs", len(instr.reads) or 1), 1)
        factor = vector_perf_mode_factor(spec, op, instr.reads, instr.writes) if engine == "dve" else 1
        cycles = spec.vector_static_cycles + -(-n * inputs // factor)
    return Cost(cycles=cycles, clock_hz=clock, latency_cycles=cycles)


def _tensor_engine(instr: Instruction, spec: CoreSpec, clock: float) -> Cost:
    """nc_matmul(stationary [K, M], moving [K, N]); nc_transpose(src [P, F]) is an identity
    matmul with src as the stationary [K=P, M=F] and N=P columns streamed."""
    if instr.opcode == "nc_transpose":
        src = instr.reads[0]
        K, M, N = src.partitions, src.free_size, src.partitions
        fp32 = src.dtype == "float32"
    else:
        st, mv = instr.reads[0], instr.reads[1]
        K, M, N = st.partitions, st.free_size, mv.free_size
        if instr.opcode == "nc_matmul_double_row":
            # FP8 double-row: [K, 2, M] x [K, 2, N] in one pass of N columns ("2x matmul
            # throughput", nki.isa.matmul_perf_mode; trnlab/hardware/double_row.py)
            M, N = M // 2, N // 2
        fp32 = "float32" in (st.dtype, mv.dtype)
    busy, latency = matmul_cycles(spec, K, M, N, _FP32 if fp32 else dtypes.bfloat16)
    if fp32 and instr.opcode == "nc_matmul" and instr.attrs:
        # the one/zero hints: fewer passes over the columns for a 0/1 fp32 operand (`onezero_passes`)
        busy, latency = matmul_cycles(spec, K, M, N, dtypes.bfloat16)
        busy *= onezero_passes(spec, st.dtype, mv.dtype, instr.attrs)
        latency = busy + (K - 1) + (M - 1)
    if instr.opcode == "nc_transpose" and fp32 and spec.generation >= "v3":
        # the Tensor engine's transpose mode (NeuronCore-v3 on): "2x speedup in FP32 transpose, vs.
        # no transpose mode enabled" [ARCH-v3], "Built-in Transpose Support"
        busy, latency = matmul_cycles(spec, K, M, N, dtypes.bfloat16)
        busy *= max(spec.fp32_matmul_factor // 2, 1)
        latency = busy + (K - 1) + (M - 1)
    return Cost(cycles=busy, clock_hz=clock, latency_cycles=latency,
                setup_cycles=stationary_load_cycles(spec, K, M))


def _dma(instr: Instruction, spec: CoreSpec) -> Cost:
    """dma_copy(dst, src) / dma_gather(dst, src rows) / dma_transpose(dst, src): see the module docstring."""
    dst = instr.writes[0]
    src = instr.reads[0]
    nbytes = dst.nbytes
    if dst.memory == "sbuf":
        rows = dst.partitions
    elif src.memory == "sbuf":
        rows = src.partitions
    else:
        rows = dst.shape[0] if dst.shape else 1
    if instr.opcode == "dma_transpose" and dst.memory == "sbuf" and src.memory in ("hbm", "sbuf"):
        hardware = dma_transpose_cost(spec, nbytes, dst.partitions, dst.free_size, dst.itemsize,
                                      src.memory == "hbm")
        if hardware is not None:
            return hardware
    # no hardware transpose (NeuronCore-v2, a store to HBM, 1-byte dtypes): a strided DMA
    if instr.opcode == "dma_transpose":
        chunk = min(src.itemsize, dst.itemsize)                     # element by element, both ways
    elif instr.opcode == "dma_gather":
        chunk = nbytes // max(dst.shape[0] if dst.shape else 1, 1)   # one descriptor per row
    else:
        runs = [o.contiguous_bytes for o in (src, dst) if o.contiguous_bytes]
        chunk = min(runs) if runs else None
    gathered = [o.contiguous_bytes for o in (src, dst) if o.memory == "hbm" and 0 < o.contiguous_bytes < o.nbytes]
    return dma_cost(spec, nbytes, rows, chunk, "hbm" in (src.memory, dst.memory), min(gathered, default=0))


def contiguous_bytes(view) -> int:
    """Bytes of the longest contiguous run of a `tensor.View` (on chip: within one partition).

    From the last axis inwards: a run grows over an axis taken whole; it stops at the partition
    axis, at a strided axis, or after an axis taken only in part."""
    t = view.tensor
    itemsize = t.itemsize
    shape = t.shape
    pa = t.partition_axis
    if view.box is None:                        # the whole tensor
        if pa is None:
            return t.nbytes
        return math.prod(shape[pa + 1:]) * itemsize
    if not view.basic:
        return _gathered_run(view, itemsize)
    index = view.index
    box = view.box
    run = itemsize
    for axis in range(len(shape) - 1, -1, -1):
        if axis == pa:
            break
        lo, hi = box[2 * axis], box[2 * axis + 1]
        i = index[axis] if axis < len(index) else slice(None)
        step = i.step if type(i) is slice and i.step is not None else 1
        extent = hi - lo
        if step != 1 and extent > 1:
            break
        run *= extent
        if extent != shape[axis]:
            break
    return run


def _gathered_run(view, itemsize: int) -> int:
    """The shortest run of adjacent elements (bytes; on chip within a partition) of a view indexed by
    arrays on every axis, in the view's element order: an access pattern that folds two iterators into one
    free axis (`t[i_p, 128 * i_j + i_k]`, NKIBench's style) moves whole rows though it resolves as arrays.
    One element for any other gather."""
    t = view.tensor
    index, shape, pa = view.index, t.shape, t.partition_axis
    if not (isinstance(index, tuple) and len(index) == len(shape) and all(type(i) is np.ndarray for i in index)):
        return itemsize
    stride, offset = 1, 0
    for axis in range(len(shape) - 1, -1, -1):     # element offsets within a partition (HBM: in the tensor)
        if axis == pa:
            continue
        offset = offset + index[axis].astype(np.int64) * stride
        stride *= shape[axis]
    flat = np.broadcast_to(offset, view.shape).reshape(-1)
    if flat.size < 2:
        return itemsize
    breaks = np.diff(flat) != 1
    if pa is not None:
        breaks |= np.diff(np.broadcast_to(index[pa], view.shape).reshape(-1)) != 0
    ends = np.flatnonzero(breaks)
    if not ends.size:
        return int(flat.size) * itemsize
    lengths = np.diff(np.concatenate(([-1], ends, [flat.size - 1])))
    return int(lengths.min()) * itemsize


def inner_contiguous(view) -> bool:
    """Are a view's elements adjacent along its inner-most free axis (a step-1 slice of the
    tensor's last axis, not a gather)? The condition of the Vector engine's 4× mode [ARCH-v3]."""
    if view.box is None:
        return True
    if not view.basic:
        return False
    t = view.tensor
    last = len(t.shape) - 1
    if last == t.partition_axis or last >= len(view.index):
        return True
    i = view.index[last]
    if type(i) is not slice:                    # one element of each row: strided by the row
        return view.free_size <= 1 or t.shape[last] == 1
    return i.step in (None, 1) or view.box[2 * last + 1] - view.box[2 * last] <= 1


def operand(view, contiguity: bool = False) -> Operand:
    """The `Operand` of a `tensor.View` (contiguous_bytes only when `contiguity`: DMAs)."""
    t = view.tensor
    dtype = getattr(view, "read_dtype", t.dtype)      # a tile retyped by .view(dtype) (retype.TypedView)
    return Operand(t.kind, view.shape, dtypes.name(dtype), view.partitions, view.free_size,
                   view.nbytes, contiguous_bytes(view) if contiguity else 0, inner_contiguous(view))

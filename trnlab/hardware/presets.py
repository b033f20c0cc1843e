"""Hardware presets: one NeuronCore, one chip, one server, for Trn1, Trn2 and Trn3.

Every number here comes from a public AWS page (the keys are those of ``shared/HARDWARE.md``):

- [ARCH-v2] NKI guide, "Trainium/Inferentia2 architecture" (nki/arch/trainium_inferentia2_arch)
- [ARCH-v3] NKI guide, "Trainium2 architecture"; [ARCH-v4] NKI guide, "Trainium3 architecture"
- [HW-trn1] general/arch/neuron-hardware/trainium; [HW-trn2] .../trainium2, .../trn2-arch;
  [HW-trn3] .../trainium3, .../trn3-arch
- [PERF] NKI performance guide; [MM] NKI matrix multiplication tutorial
- [DMA] NKI "Introduction to Direct Memory Access (DMA) with NKI" (nki/about/nki-dma-overview):
  16 DMA engines per NeuronCore (v2–v4), one engine per 8 SBUF partitions; one transfer is spread
  over up to 16 engines; a [4, 4096] bf16 load keeps one engine busy 1,416 ns (measured, trn2).
- [DMA-BW] NKI "Guideline to Avoid Under-Utilizing DMA Bandwidth" (nki/deep-dives/
  nki-dma-bandwidth-guide): effective 17 / 23 / 33 B/ns per engine on Trn1 / Trn2 / Trn3
  (272 / 368 / 528 GB/s per core), ≈1,300 ns from the semaphore trigger to the DMA start, per-packet
  overhead that needs ≥ 2 KiB (better 4 KiB) contiguous per partition to amortise.
  ⚠ [DMA] gives 27.2 GB/s theoretical per engine for v2/v3 and 38.4 for v4 (its table repeats
  [DMA-BW]'s 17 / 23 / 33). The model uses [DMA-BW]'s effective figures everywhere (what a
  transfer achieves); the theoretical ones are kept as `dma_engine_bandwidth_theoretical`.
- [ARCH-v3-PAR] NKI "Trainium2 architecture", memory hierarchy: on NeuronCore-v3 Vector and
  GpSimd access SBUF in parallel, and Vector and Scalar access PSUM in parallel "as long as their
  accesses do not collide on the same PSUM bank"; both were disallowed on NeuronCore-v2
  ([ARCH-v2]: "VectorE and GpSimdE cannot access SBUF in parallel", "VectorE and ScalarE cannot
  access PSUM in parallel").
- [ISA] NKI API pages (nki.isa.nc_matmul, nki.isa.tensor_scalar, ...)
- [DGE] NKI "Descriptor Generation Engine (DGE) Reference" (nki/deep-dives/nki-dge): a DMA
  descriptor holds the source and destination addresses, the transfer shape and stride pattern.
- [DMA-ISSUE] Neuron Explorer "How to identify and reduce inefficient DMA transfers"
  (tools/neuron-explorer/how-to-reduce-inefficient-dma-transfers, 2026-11): a transfer has a fixed
  cost independent of its size, part of it that "its descriptors have to be generated (by the
  compute engine that issues it)"; no figure.
- [LAUNCH] NKI "Fused Mamba" tutorial (nki/guides/tutorials/fused_mamba): "every NEFF execution
  involves certain start-up and tear-down overhead"; its profile of mamba_v1 (figure
  `mamba_v1_profile.png`, trn1, 172.93 µs in all) shows the kernel's first DMA ≈ 13.0 µs after the
  profile starts and its last DMA ending ≈ 4.3 µs before the end (read off the figure's axis, ±0.5 µs).

Numbers that are *not* published are marked ASSUMED with the reason for the value chosen.
Where two public pages disagree (⚠ in HARDWARE.md), the choice and the other figure are noted.

A custom machine is one line, and everything downstream (memories, limits, cost model, profile)
reads its numbers from the spec::

    tiny = presets.TRN2.core.derive(pe_rows=8, pe_cols=8, sbuf_partition_bytes=96 * 1024)
    tiny = presets.derive(pe_rows=4, pe_cols=4, matmul_min_cycles=1)     # from TRN2.core
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
TiB = 1024 * GiB
GB = 1e9
TB = 1e12


@dataclass(frozen=True)
class CoreSpec:
    """One NeuronCore. Units: bytes, bytes/s, Hz, cycles, ns.

    Memories [ARCH-v2]: SBUF and PSUM are 2-D, `partitions` rows by a free dimension of
    `sbuf_partition_bytes` / `psum_partition_bytes`; PSUM is cut into `psum_banks` banks per
    partition (2 KiB = 512 fp32 each on every generation).

    Cost-model constants [ARCH-v2], [PERF], [ISA]:
    - matmul (MultiplyMoving): max(N, `matmul_min_cycles`) tensor-engine cycles back to back,
      × `fp32_matmul_factor` for fp32 inputs; the result reaches PSUM (K-1)+(M-1) cycles later
      (the systolic array's fill and drain);
    - LoadStationary: M / `stationary_load_speedup` cycles, in the background;
    - Vector / GpSimd: `vector_static_cycles` + N cycles per input tensor; on the Vector engine
      the static part is hidden behind an independent predecessor when N >=
      `vector_static_hidden_min_free` [ARCH-v2], and the N part runs 2x / 4x faster for bf16/fp16
      copies, tensor_scalar and tensor_tensor where `vector_perf_mode` [ARCH-v3];
    - Scalar activation: `activation_static_cycles` + max(`activation_min_cycles`, N);
    - bn_aggr: `vector_static_cycles` + max(`activation_min_cycles` (MIN_II), 13 × N / 3) [ISA]
      (bn_stats has no published figure: the generic Vector model);
    - GpSimd iota / affine_select (an affine pattern evaluated in the engine): `affine_static_cycles` + N;
    - DMA: `dma_latency_ns` + per engine (one per 8 partitions) its descriptors (contiguous
      chunks) × max(chunk / `dma_engine_bandwidth`, `dma_descriptor_ns`), sharing the core's DMA
      engines and `hbm_bandwidth` with the other transfers in flight; a row with a stride is one
      descriptor, its runs counted as at least `dma_min_burst_bytes`; a hardware DMA transpose
      (v3+) runs at `dma_transpose_efficiency_hbm` / `_sbuf` of the 16 engines' rate; each transfer
      also takes `dma_issue_ns` on the core's one issuer;
      a tile cut out of a wider HBM tensor in runs of 256 B - 2 KiB moves its bytes at
      `dma_hbm_gather_bandwidth` instead of its descriptors' time;
      with `dma_queue_pipelined` a queue takes its next transfer during the previous one's data, in
      order (False in every preset: a candidate);
    - a program execution (one launch): `launch_start_ns` before its first instruction,
      `launch_end_ns` after its last result (the runtime's start-up and tear-down);
    - shared ports: `sbuf_port_shared` (Vector and GpSimd take turns on SBUF) and `psum_port`
      ("core": Vector and Scalar take turns on all of PSUM; "bank": only on the same bank).
    """

    name: str
    generation: str
    # Tensor engine: a pe_rows × pe_cols systolic array [ARCH-v2]
    pe_rows: int = 128
    pe_cols: int = 128
    partitions: int = 128
    sbuf_partition_bytes: int = 192 * KiB
    psum_partition_bytes: int = 16 * KiB
    psum_banks: int = 8
    # clocks in Hz
    pe_clock_hz: float = 2.8e9
    act_clock_hz: float = 1.4e9
    dve_clock_hz: float = 1.12e9
    pool_clock_hz: float = 1.4e9
    # HBM: this core's share of its chip's memory and bandwidth
    hbm_bytes: int = 16 * GiB
    hbm_bandwidth: float = 410e9
    # DMA [DMA]
    dma_engines: int = 16
    dma_engine_bandwidth: float = 17e9              # effective, per engine [DMA-BW]
    dma_engine_bandwidth_theoretical: float = 27.2e9   # [DMA] (for comparison only)
    dma_queues: int = 16
    # a queue takes its next transfer while the previous one moves its data: in order on the queue, the
    # fixed latency overlapped (engines.EngineTimes.dma). ASSUMED, False (a transfer holds its queue
    # from trigger to end) in every preset: a calibration candidate with one queue per trigger engine
    # (docs/calibration.md, "Mamba and the blocked-free kernel: the active figures": not kept)
    dma_queue_pipelined: bool = False
    dma_latency_ns: float = 1300.0
    dma_descriptor_ns: float = 150.0
    dma_min_burst_bytes: int = 64               # a strided run moves at least this (ASSUMED)
    # a fixed part of every descriptor's time on top of its bytes / bandwidth (ASSUMED). 0 in every
    # preset: a calibration candidate (docs/calibration.md, "What was tried for the largest misses")
    dma_descriptor_setup_ns: float = 0.0
    # a fixed time per transfer on the core's one issuer [DMA-ISSUE] (engines.EngineTimes.dma).
    # ASSUMED, 0 (none) by default; the presets' values and their fits are beside them below
    dma_issue_ns: float = 0.0
    # the rate (bytes/s, the core's 16 engines together) at which a transfer gathered from (or
    # scattered to) separate HBM runs of `dma_hbm_gather_min_bytes` up to (not including)
    # `dma_hbm_gather_below_bytes` moves its bytes, in place of the per-descriptor time: a tile cut
    # out of a wider HBM tensor, one such run per row. ASSUMED, 0 (off) by default; the presets' rates
    # below (docs/calibration.md, "The Trn1 tiled kernel, mechanism by mechanism"); the bounds are
    # [DMA-BW]'s bands: "< 256 B per partition: severely overhead-bound", "256 B -- 2 KiB: improving
    # but still below peak", "≥ 2 KiB (minimum recommended): approaches peak bandwidth"
    dma_hbm_gather_bandwidth: float = 0.0
    dma_hbm_gather_min_bytes: int = 256
    dma_hbm_gather_below_bytes: int = 2048
    # the runtime's start-up and tear-down of one program execution [LAUNCH] (core.start_launch /
    # end_launch, at every launch of Device.run and of an SPMD grid): nothing of the program starts
    # before `launch_start_ns` and the execution ends `launch_end_ns` after its last result. 0 by
    # default; Trn1 13.0 / 4.3 µs read off [LAUNCH]'s profile, Trn2 / Trn3 fitted (below)
    launch_start_ns: float = 0.0
    launch_end_ns: float = 0.0
    dma_transpose_efficiency_hbm: float = 0.0   # hardware DMA transpose HBM -> SBUF (0: none)
    dma_transpose_efficiency_sbuf: float = 0.0  # ... SBUF -> SBUF
    # shared memory ports [ARCH-v2], [ARCH-v3-PAR]
    sbuf_port_shared: bool = True
    psum_port: str = "core"
    # instruction limits [ISA]
    moving_fmax: int = 512          # nl.tile_size.gemm_moving_fmax; nc_matmul's N limit to NeuronCore-v3 (memory.moving_fmax)
    stationary_fmax: int = 128      # nl.tile_size.gemm_stationary_fmax
    bn_stats_fmax: int = 512        # nl.tile_size.bn_stats_fmax: elements per partition of one bn_stats [ISA]
    sbuf_free_max: int = 64 * 1024  # elements per partition an instruction may touch in SBUF [PERF]
    psum_free_max: int = 4 * 1024   # ... and in PSUM [PERF]
    # cost model [ARCH-v2], [PERF]
    matmul_min_cycles: int = 64
    fp32_matmul_factor: int = 4
    stationary_load_speedup: int = 4
    vector_static_cycles: int = 100
    # the static overhead is hidden behind the previous instruction for N >= this [ARCH-v2] (cost.py)
    vector_static_hidden_min_free: int = 128
    vector_perf_mode: bool = False      # bf16/fp16 Vector performance mode (2x / 4x) [ARCH-v3]
    activation_min_cycles: int = 64
    activation_static_cycles: int = 0
    affine_static_cycles: int = 150  # iota, affine_select: 150 + N GpSimd cycles [ISA] (NKI 2.26 docs)
    fp8_peak_factor: int = 1        # quoted fp8 peak / bf16 peak (fp8 fast modes are not simulated)
    # quoted figures, for comparison only (the simulator computes its own from the fields above)
    quoted_tflops_bf16: float = 92.0
    quoted_tflops_fp32: float = 23.0

    def __post_init__(self):
        if self.psum_partition_bytes % self.psum_banks:
            raise ValueError(f"psum_partition_bytes={self.psum_partition_bytes} is not a whole "
                             f"number of {self.psum_banks} banks")
        for name in ("pe_rows", "pe_cols", "partitions", "psum_banks", "matmul_min_cycles"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    # -- derived figures -------------------------------------------------------------------
    @property
    def sbuf_bytes(self) -> int:
        return self.partitions * self.sbuf_partition_bytes

    @property
    def psum_bytes(self) -> int:
        return self.partitions * self.psum_partition_bytes

    @property
    def psum_bank_bytes(self) -> int:
        """Bytes per partition in one PSUM bank (2 KiB = 512 fp32)."""
        return self.psum_partition_bytes // self.psum_banks

    @property
    def launch_ns(self) -> float:
        """What the runtime adds to each program execution: its start-up and tear-down."""
        return self.launch_start_ns + self.launch_end_ns

    @property
    def engine_clocks(self) -> dict:
        return {"pe": self.pe_clock_hz, "act": self.act_clock_hz,
                "dve": self.dve_clock_hz, "pool": self.pool_clock_hz}

    def peak_flops(self, dtype="bfloat16") -> float:
        """Tensor-engine peak FLOP/s: 2 × rows × cols × clock (÷4 for fp32, × fp8 factor)."""
        from . import dtypes
        dt = dtypes.as_dtype(dtype)
        flops = 2.0 * self.pe_rows * self.pe_cols * self.pe_clock_hz
        if dt == dtypes.float32:
            return flops / self.fp32_matmul_factor
        if dt in dtypes.FLOAT8:
            return flops * self.fp8_peak_factor
        return flops

    @property
    def ridge_flops_per_byte(self) -> float:
        """Roofline ridge point: bf16 peak FLOP/s over HBM bytes/s."""
        return self.peak_flops("bfloat16") / self.hbm_bandwidth

    def derive(self, name: str | None = None, **changes) -> "CoreSpec":
        """A copy with some fields changed, e.g. ``derive(pe_rows=8, pe_cols=8)``."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise TypeError(f"CoreSpec has no field(s) {sorted(unknown)}")
        if name is None:
            name = self.name + " (" + ", ".join(f"{k}={v}" for k, v in changes.items()) + ")"
        return dataclasses.replace(self, name=name, **changes)

    def summary(self) -> dict:
        """The headline numbers, for tables in the notebooks."""
        return {
            "core": self.name, "PE array": f"{self.pe_rows}×{self.pe_cols}",
            "tensor clock (GHz)": self.pe_clock_hz / 1e9,
            "SBUF (MiB)": self.sbuf_bytes / MiB, "PSUM (MiB)": self.psum_bytes / MiB,
            "bf16 peak (TFLOPS)": self.peak_flops("bfloat16") / 1e12,
            "fp32 peak (TFLOPS)": self.peak_flops("float32") / 1e12,
            "HBM share (GB/s)": self.hbm_bandwidth / 1e9,
            "ridge (FLOP/B)": self.ridge_flops_per_byte,
        }


def derive(base: CoreSpec | None = None, name: str | None = None, **changes) -> CoreSpec:
    """A custom core in one line: ``derive(pe_rows=4, pe_cols=4)`` (starts from TRN2.core)."""
    return (base or TRN2.core).derive(name=name, **changes)


@dataclass(frozen=True)
class ChipSpec:
    """One Trainium chip: `cores` NeuronCores sharing HBM, plus chip-to-chip links."""

    name: str
    core: CoreSpec
    cores: int
    hbm_bytes: int
    hbm_bandwidth: float
    link: str
    link_bandwidth: float           # bytes/s per chip
    dma_engines: int
    quoted_tflops: dict = field(default_factory=dict)   # chip peaks as published, by dtype
    # bytes/s per direction between the host CPU and the chip. ASSUMED (no AWS page gives the host
    # interface of a Trainium chip): PCIe Gen5 x16, 32 GT/s x 16 lanes with 128b/130b encoding
    # ~ 63 GB/s per direction (PCI-SIG, PCI Express Base Specification 5.0). Used by the compiler's
    # host fallback (trnlab/compiler/fallback.py) to cost the transfers around a host op.
    host_link_bandwidth: float = 63.0e9

    def derive(self, name: str | None = None, **core_changes) -> "ChipSpec":
        """The same chip built from a derived core."""
        return dataclasses.replace(self, name=name or self.name + " (custom)",
                                   core=self.core.derive(**core_changes))

    def peak_flops(self, dtype="bfloat16") -> float:
        return self.cores * self.core.peak_flops(dtype)


@dataclass(frozen=True)
class ServerSpec:
    """A server (instance) or UltraServer: `chips` chips joined by NeuronLink (and EFA/switch)."""

    name: str
    chip: ChipSpec
    chips: int
    topology: str
    hbm_bytes: int
    link_bandwidth: float           # bytes/s per chip, inside the server
    inter_server_bandwidth: float = 0.0   # bytes/s per chip between servers (0: one server)
    hbm_bandwidth_total: float = 0.0
    quoted_pflops: dict = field(default_factory=dict)

    @property
    def cores(self) -> int:
        return self.chips * self.chip.cores

    def peak_flops(self, dtype="bfloat16") -> float:
        return self.chips * self.chip.peak_flops(dtype)


# ---------------------------------------------------------------------------------------------
# Trn1: NeuronCore-v2
# ---------------------------------------------------------------------------------------------
TRN1_CORE = CoreSpec(
    name="NeuronCore-v2 (Trn1)", generation="v2",
    sbuf_partition_bytes=192 * KiB,           # 24 MiB = 128 × 192 KiB [ARCH-v2]
    psum_partition_bytes=16 * KiB,            # 2 MiB = 128 × 16 KiB, 8 banks × 2 KiB [ARCH-v2]
    psum_banks=8,
    # ⚠ 2.8 GHz is the *effective* rate that makes 128×128×2×f = 92 TFLOPS [ARCH-v2]
    pe_clock_hz=2.8e9,
    dve_clock_hz=1.12e9, act_clock_hz=1.4e9, pool_clock_hz=1.4e9,   # [ARCH-v2]
    hbm_bytes=16 * GiB, hbm_bandwidth=410e9,  # 32 GiB, 820 GB/s per chip ÷ 2 cores [HW-trn1]
    dma_engines=16, dma_queues=16,            # [DMA]
    dma_engine_bandwidth=17e9,                # 17 B/ns effective [DMA-BW] (⚠ 27.2 GB/s in [DMA])
    dma_engine_bandwidth_theoretical=27.2e9,  # [DMA]
    dma_latency_ns=1300.0,                    # ≈1.3 µs trigger to start [DMA-BW]
    # ASSUMED, calibrated: no published time per descriptor (one contiguous chunk). 150 ns fits
    # AWS's measured trn1 latencies of the matmul tutorial's "hoisted loads" kernel (calibrated
    # on: [128, 512] bf16 loads with 1 KiB rows) and puts the knee of [DMA]'s throughput-vs-bytes-
    # per-partition figure at 150 ns × 17 B/ns ≈ 2.5 KiB (39 / 78 / 100 % at 1 / 2 / 4 KiB; the
    # figure shows ≈42 / 81 / 97 %). Validation: docs/calibration.md.
    dma_descriptor_ns=150.0,
    # ASSUMED: a run shorter than 64 B (one HBM burst: a 64-bit pseudo-channel × burst length 8,
    # JEDEC HBM2E/HBM3) takes a DMA engine as long as 64 B would. Not fitted: the strided kernels
    # it matters for (AWS's adaptive_avg_pool2d, select_and_scatter, SD attention's transposed
    # store) are validation cases in docs/calibration.md.
    dma_min_burst_bytes=64,
    # ASSUMED, calibrated: a tile cut out of a wider HBM tensor in runs of 256 B - 2 KiB ([DMA-BW]'s
    # "improving but still below peak" band) moves its bytes at 104.1 GB/s for the core, in place of
    # its descriptors' time. Fitted on AWS's trn1 latency of the matmul tutorial's hoisted-loads
    # kernel (42.96 ms; its [128, 512] bf16 loads are 1 KiB runs): the calibration half of
    # docs/calibration.md, candidate (d); the held-back tiled kernel then +1 % (it was +54 %).
    dma_hbm_gather_bandwidth=104.1e9,
    # ASSUMED as Trn2's 478 ns (fitted there): every transfer also takes that long on the core's one
    # issuer, its descriptors generated by the engine that issues it [DMA-ISSUE]. No Trn1 row has the
    # tiny transfers to fit it on; with it every Trn1 row stays within 0.4 points of its error without
    # (docs/calibration.md, "The model"), and a program of many small transfers is not faster on Trn1
    # than on Trn2 for the lack of a figure.
    dma_issue_ns=478.0,
    # the runtime's start-up and tear-down of one program execution [LAUNCH]: AWS's profile of
    # mamba_v1 on trn1 shows the kernel's first DMA 13.0 µs after the profile starts and its last
    # DMA ending 4.3 µs before the end (read off the figure, ± 0.5 µs; not fitted)
    launch_start_ns=13_000.0, launch_end_ns=4_300.0,
    # NeuronCore-v2 has no hardware DMA transpose (introduced with Trainium2 [ARCH-v3], "DMA
    # Transpose"): dma_transpose / load_transpose2d are strided DMAs here.
    dma_transpose_efficiency_hbm=0.0, dma_transpose_efficiency_sbuf=0.0,
    sbuf_port_shared=True, psum_port="core",  # NeuronCore-v2: both ports shared [ARCH-v2]
    matmul_min_cycles=64, fp32_matmul_factor=4, stationary_load_speedup=4,   # [ARCH-v2], [ISA]
    # ≈100 cycles static overhead [PERF], charged as [ARCH-v2] "Cost Model" says: only when the
    # instruction cannot overlap its predecessor's stream — "many back-to-back instructions either
    # with N << 128 or with every instruction depending on the output tile of the previous
    # instruction" (cost.vector_hidden_static_cycles). The guide's plain N / 2N rule is stated
    # for N > 128; ASSUMED boundary: N >= 128 counts as large (not fitted).
    vector_static_cycles=100,
    vector_static_hidden_min_free=128,
    vector_perf_mode=False,                   # introduced with NeuronCore-v3 [ARCH-v3]
    activation_min_cycles=64,                 # max(≈64, N) [PERF]
    fp8_peak_factor=1,                        # v2: 92 TFLOPS for bf16/fp16/tf32/fp8 alike [ARCH-v2]
    quoted_tflops_bf16=92.0, quoted_tflops_fp32=23.0,   # per core [ARCH-v2]
)
TRN1 = ChipSpec(
    name="Trainium (Trn1)", core=TRN1_CORE, cores=2,
    hbm_bytes=32 * GiB, hbm_bandwidth=820e9,  # [HW-trn1]
    link="NeuronLink-v2", link_bandwidth=384e9,   # 384 GB/s per chip [HW-trn1]
    dma_engines=32,                           # 16 per core [HW-trn1], [DMA]
    quoted_tflops={"bfloat16": 190.0, "float32": 47.5},   # chip [HW-trn1]
)
TRN1_32XLARGE = ServerSpec(
    name="trn1.32xlarge", chip=TRN1, chips=16, topology="16 chips on NeuronLink-v2",
    hbm_bytes=512 * GiB,                      # [HW-trn1]
    link_bandwidth=384e9, hbm_bandwidth_total=16 * 820e9,
    quoted_pflops={"bfloat16": 16 * 190.0 / 1000},
)

# ---------------------------------------------------------------------------------------------
# Trn2: NeuronCore-v3
# ---------------------------------------------------------------------------------------------
TRN2_CORE = TRN1_CORE.derive(
    name="NeuronCore-v3 (Trn2)", generation="v3",
    sbuf_partition_bytes=224 * KiB,           # 28 MiB = 128 × 224 KiB [ARCH-v3]
    psum_partition_bytes=16 * KiB,            # 2 MiB [ARCH-v3]
    pe_clock_hz=2.4e9,                        # 2.4 GHz → 78.6 TFLOPS bf16 [ARCH-v3]
    dve_clock_hz=0.96e9, act_clock_hz=1.2e9, pool_clock_hz=1.2e9,   # [ARCH-v3]
    # 96 GiB, 2.9 TB/s per chip ÷ 8 cores [HW-trn2]  (⚠ [ARCH-v3] says 3 TB/s)
    hbm_bytes=12 * GiB, hbm_bandwidth=2.9e12 / 8,
    dma_engines=16,                           # [DMA]; 128 per chip [HW-trn2]
    dma_engine_bandwidth=23e9,                # 23 B/ns effective [DMA-BW] (⚠ 27.2 GB/s in [DMA])
    dma_engine_bandwidth_theoretical=27.2e9,  # [DMA]
    # v3: Vector/GpSimd share no SBUF port; Vector/Scalar collide only on the same PSUM bank
    sbuf_port_shared=False, psum_port="bank",   # [ARCH-v3-PAR]
    # ASSUMED, calibrated: 64 ns per descriptor, fitted with the issue cost below on CS149's
    # FREE_DIM 2 kernel (tiny rows). Bounded by AWS's trn2 profile of the hoisted-loads tutorial
    # kernel (fp32, [128, 512] loads with 2 KiB rows): the tensor engine 99.85 % active, so a load
    # takes no longer than its four fp32 matmuls (853 ns): 8 rows per engine × ≤ 107 ns; a 2 KiB row
    # takes 89 ns at 23 B/ns, so the floor binds only rows under 1.5 KiB. Validated on the other
    # kernels of that table (docs/calibration.md). Trn3 inherits it (no published figure).
    dma_descriptor_ns=64.0,
    # ASSUMED, calibrated: every transfer also takes 478 ns on the core's one issuer, where its
    # descriptors are generated "by the compute engine that issues it" [DMA-ISSUE] (the mechanism's
    # source; AWS publishes no time; Trn1 takes it over above). Fitted on CS149's ROW_CHUNK 1 kernel (three one-element
    # transfers per step, 1.458 µs per step on the chip), and with it 64 ns per descriptor on its
    # FREE_DIM 2 kernel (both in the calibration half, docs/calibration.md, candidate (b); the chip's
    # figures less the start-up below). 64 ns keeps the hoisted kernel's 2 KiB rows (89 ns of
    # bandwidth) under the 107 ns bound above. Trn3 inherits both (no published figure).
    dma_issue_ns=478.0,
    # ASSUMED: runs of 256 B - 2 KiB cut out of a wider HBM tensor move at the core's aggregate DMA
    # rate, 16 engines × 23 B/ns [DMA-BW] (not fitted; the Trn1 figure is). Trn3: its own engines' rate.
    dma_hbm_gather_bandwidth=16 * 23e9,
    # the start-up of one program execution: 12.7 µs in all, fitted on CS149's one-step FREE_DIM 2000
    # kernel (the profiler's total_time 28.0 µs, ours 15.3 µs without it: calibration half); the
    # tear-down ASSUMED as Trn1's 4.3 µs [LAUNCH]. Trn3 inherits it (no published figure).
    launch_start_ns=12_700.0 - 4_300.0, launch_end_ns=4_300.0,
    # [ARCH-v3] "DMA Transpose": the 16 engines transpose together into [128, 16] SBUF blocks, up
    # to 90 % of DMA throughput HBM -> SBUF and 50 % SBUF -> SBUF (2- and 4-byte dtypes). Trn3
    # inherits both (ASSUMED: the Trainium3 guide gives no figure).
    dma_transpose_efficiency_hbm=0.9, dma_transpose_efficiency_sbuf=0.5,
    # [ARCH-v3] "Vector Engine Performance Mode": bf16/fp16 tensor_copy / tensor_scalar 4x (all
    # SBUF, inner-most free axis contiguous) or 2x, tensor_tensor 2x (cost.vector_perf_mode_factor).
    # Trn3 inherits it (ASSUMED: the Trainium3 guide describes changes only).
    vector_perf_mode=True,
    fp8_peak_factor=2,                        # 158 fp8 vs 79 bf16 per core [ARCH-v3]
    quoted_tflops_bf16=79.0, quoted_tflops_fp32=20.0,
)
TRN2 = ChipSpec(
    name="Trainium2 (Trn2)", core=TRN2_CORE, cores=8,
    hbm_bytes=96 * GiB, hbm_bandwidth=2.9e12,  # [HW-trn2]
    link="NeuronLink-v3", link_bandwidth=1.28e12,   # [HW-trn2]
    dma_engines=128,                          # [HW-trn2]
    quoted_tflops={"bfloat16": 667.0, "float8_e4m3": 1299.0, "float32": 181.0},   # [HW-trn2]
)
TRN2_48XLARGE = ServerSpec(
    name="trn2.48xlarge", chip=TRN2, chips=16, topology="4×4 2-D torus",
    hbm_bytes=1536 * GiB,                     # 1.5 TiB [HW-trn2]
    link_bandwidth=1024e9,                    # NeuronLink 1,024 GB/s per chip in the instance
    hbm_bandwidth_total=46.4e12,
    quoted_pflops={"bfloat16": 10.7, "float8_e4m3": 20.8},   # [HW-trn2]
)
TRN2_ULTRASERVER = ServerSpec(
    name="Trn2 UltraServer", chip=TRN2, chips=64, topology="4 trn2.48xlarge on NeuronLink",
    hbm_bytes=4 * 1536 * GiB, link_bandwidth=1024e9,
    inter_server_bandwidth=256e9,             # 256 GB/s per chip between instances [HW-trn2]
    hbm_bandwidth_total=4 * 46.4e12,
    quoted_pflops={"bfloat16": 4 * 10.7, "float8_e4m3": 4 * 20.8},   # 4 × trn2.48xlarge
)

# ---------------------------------------------------------------------------------------------
# Trn3: NeuronCore-v4
# ---------------------------------------------------------------------------------------------
TRN3_CORE = TRN2_CORE.derive(
    name="NeuronCore-v4 (Trn3)", generation="v4",
    sbuf_partition_bytes=256 * KiB,           # 32 MiB = 128 × 256 KiB [ARCH-v4]
    psum_partition_bytes=16 * KiB,            # 2 MiB [ARCH-v4]
    pe_clock_hz=2.4e9,
    dve_clock_hz=1.2e9, act_clock_hz=1.2e9, pool_clock_hz=1.2e9,   # [ARCH-v4]
    # 144 GiB, 4.9 TB/s per chip ÷ 8 cores [HW-trn3]  (⚠ [ARCH-v4] says 4.7 TB/s)
    hbm_bytes=18 * GiB, hbm_bandwidth=4.9e12 / 8,
    dma_engines=16,                           # [DMA]
    dma_engine_bandwidth=33e9,                # 33 B/ns effective [DMA-BW] (⚠ 38.4 GB/s in [DMA])
    dma_engine_bandwidth_theoretical=38.4e9,  # [DMA]
    dma_hbm_gather_bandwidth=16 * 33e9,       # ASSUMED: as on Trn2, the 16 engines' rate [DMA-BW]
    # ports as on v3 (inherited): ASSUMED, the Trainium3 guide states no change
    fp8_peak_factor=4,                        # 315 MXFP8 vs 79 bf16 per core [ARCH-v4]
    quoted_tflops_bf16=79.0, quoted_tflops_fp32=20.0,
)
TRN3 = ChipSpec(
    name="Trainium3 (Trn3)", core=TRN3_CORE, cores=8,
    hbm_bytes=144 * GiB, hbm_bandwidth=4.9e12,    # [HW-trn3]
    # ⚠ 2.56 TB/s per chip [ARCH-v4]; [HW-trn3] says 2,048 GiB/s
    link="NeuronLink-v4", link_bandwidth=2.56e12,
    dma_engines=128,
    quoted_tflops={"bfloat16": 671.0, "mxfp8": 2517.0, "float32": 183.0},   # [HW-trn3]
)
TRN3_ULTRASERVER_GEN1 = ServerSpec(
    name="Trn3 UltraServer (Gen1)", chip=TRN3, chips=64, topology="NeuronLink",
    hbm_bytes=64 * 144 * GiB, link_bandwidth=2.56e12,   # [HW-trn3]
    hbm_bandwidth_total=64 * 4.9e12,
    quoted_pflops={"mxfp8": 64 * 2.517},
)
TRN3_ULTRASERVER_GEN2 = ServerSpec(
    name="Trn3 UltraServer (Gen2)", chip=TRN3, chips=144,
    topology="36 servers × 4 chips, NeuronSwitch",      # [HW-trn3]
    hbm_bytes=20736 * GiB, link_bandwidth=2.56e12,      # 20,736 GiB [HW-trn3]
    hbm_bandwidth_total=705.6e12,                       # 705.6 TB/s [HW-trn3]
    quoted_pflops={"mxfp8": 362.0},                     # [HW-trn3]
)

CORES = {"trn1": TRN1_CORE, "trn2": TRN2_CORE, "trn3": TRN3_CORE}
CHIPS = {"trn1": TRN1, "trn2": TRN2, "trn3": TRN3}
SERVERS = {s.name: s for s in (TRN1_32XLARGE, TRN2_48XLARGE, TRN2_ULTRASERVER,
                               TRN3_ULTRASERVER_GEN1, TRN3_ULTRASERVER_GEN2)}


def core_spec(target: "str | CoreSpec | ChipSpec") -> CoreSpec:
    """A CoreSpec from ``"trn1"|"trn2"|"trn3"``, a ChipSpec or a CoreSpec."""
    if isinstance(target, CoreSpec):
        return target
    if isinstance(target, ChipSpec):
        return target.core
    key = str(target).lower()
    if key not in CORES:
        raise ValueError(f"unknown target {target!r}; expected one of {sorted(CORES)}")
    return CORES[key]


def comparison_table() -> list[dict]:
    """Trn1 / Trn2 / Trn3 side by side (rows of dicts), for the notebooks."""
    return [c.core.summary() | {"cores/chip": c.cores, "HBM/chip (GiB)": c.hbm_bytes / GiB,
                                "HBM/chip (TB/s)": c.hbm_bandwidth / TB, "link": c.link}
            for c in (TRN1, TRN2, TRN3)]


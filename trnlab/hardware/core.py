"""The simulated NeuronCore: its memories, its engines, and how an instruction is issued to them.

Every instruction (names as in ``nki.isa``), as the hardware guide describes it:
1. **check its rules** — raising the specific `errors` class: rule, value, limit (`_onchip`,
   `_same_tile`, the instruction's own checks);
2. **compute its values** (full mode) — NumPy, fp32 inside the engines, rounded to the destination
   dtype with ml_dtypes; matmuls accumulate in fp32 in PSUM;
3. **cost it** — the pure cost model (`cost.py`);
4. **issue it** — its data is ready after the earlier accesses it depends on (RAW / WAR / WAW,
   `dependencies.py`); then the engines' timing model (`engines.EngineTimes`) gives its start and end;
   a record is appended to the timeline and its index returned.

Timing mode (``mode="timing"``) does 1, 3 and 4 only — no values, the same timeline.

This module holds the machinery (the memories, the engines' state, the shared checks and `_issue`);
the instructions are grouped by engine in modules of their own, composed into `NeuronCore` below:
`tensor_engine.py` (nc_matmul, nc_transpose), `vector.py` (element-wise Vector / Scalar / GpSimd),
`reductions.py` (reductions, statistics, scans), `dma.py`, `mx.py` (MX on NeuronCore-v4),
`double_row.py` (FP8 double-row matmul), `collective.py` (the collectives), `select.py`, `gather.py`,
`accumulate.py` (NKI 0.7's selections, gathers and shuffles, register-accumulating instructions),
`system.py` (random numbers, registers).

Engines (short names as in Neuron's profiler): ``pe`` Tensor, ``act`` Scalar, ``dve`` Vector,
``pool`` GpSimd, ``dma0..dma{Q-1}`` DMA queues.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from . import cost, dependencies, dtypes
from . import retype as _retype
from .collective import CollectiveInstructions
from .dma import DmaInstructions
from .double_row import DoubleRowInstructions
from .engines import ACT, DVE, PE, POOL, EngineTimes, port_keys, port_needs
from .errors import EngineError, FreeSizeError, MemoryPlacementError, PartitionAxisError, ShapeMismatchError, StartPartitionError
from .memory import HBM, OnChipMemory
from .mx import MxInstructions
from .operands import _bytes_by_memory, _free_byte_range, _view, start_partition_ok
from .presets import CoreSpec, core_spec
from .profile import Profile
from .reductions import ReductionInstructions
from .accumulate import AccumulateInstructions
from .gather import GatherInstructions
from .indirection import IndirectionInstructions
from .register_offsets import RegisterOffsetInstructions
from .select import SelectInstructions
from .system import SystemInstructions
from .tensor import View
from .tensor_engine import TensorEngineInstructions
from .timeline import COMPUTE_ENGINES, Timeline
from .vector import VectorInstructions

_ENGINE_NAMES = ("pe", "act", "dve", "pool")
_ENGINE_ALIASES = {
    "pe": PE, "tensor": PE, "act": ACT, "scalar": ACT, "activation": ACT,
    "dve": DVE, "vector": DVE, "pool": POOL, "gpsimd": POOL, None: DVE, "unknown": DVE,
}
_wait_reads = dependencies.wait_reads
_wait_write = dependencies.wait_write
_record_reads = dependencies.record_reads
_record_write = dependencies.record_write


class NeuronCore(TensorEngineInstructions, VectorInstructions, ReductionInstructions, DmaInstructions,
                 MxInstructions, DoubleRowInstructions, CollectiveInstructions,
                 SelectInstructions, GatherInstructions, AccumulateInstructions,
                 SystemInstructions, IndirectionInstructions, RegisterOffsetInstructions):
    """One simulated NeuronCore. ``mode="full"`` computes values and time, ``"timing"`` time only."""

    def __init__(self, spec: "CoreSpec | str" = "trn2", mode: str = "full", name: str = "core0",
                 hbm: HBM | None = None, hbm_channel=None, hbm_bandwidth: float | None = None):
        """`hbm`, `hbm_channel`, `hbm_bandwidth`: the chip's HBM, the channel its cores' DMAs
        share and its bandwidth, when the core is one of a `Device`'s; alone, a core has its
        own share of the chip's HBM (`CoreSpec.hbm_bytes`, `.hbm_bandwidth`)."""
        if mode not in ("full", "timing"):
            raise ValueError(f"mode must be 'full' or 'timing', got {mode!r}")
        self.spec = spec = core_spec(spec)
        self.mode = mode
        self.full = mode == "full"
        self.name = name
        self.hbm = hbm if hbm is not None else HBM(spec, self.full)
        self.sbuf = OnChipMemory("sbuf", spec, self.full)
        self.psum = OnChipMemory("psum", spec, self.full)
        self.engines = list(COMPUTE_ENGINES) + [f"dma{i}" for i in range(spec.dma_queues)]
        self.timeline = Timeline(self.engines, name=name)
        self._records = self.timeline.records
        # the engines' timing state: queues, DMA engines, the HBM channel (shared on a device),
        # shared ports, the Tensor engine's loads (engines.py: the one timing model)
        self.engine_times = EngineTimes(spec, len(self.engines), hbm_channel, hbm_bandwidth)
        self._free = self.engine_times.free         # when each engine (queue) is free
        self._costs = {}                            # remembered answers of the pure cost model
        self._now = 0.0
        # the Tensor engine's stationary tile: the view loaded, and its tensor's version then
        self._stationary = None
        self._stationary_version = -1
        self._matmul_checked = {}
        self._matmul_dtypes = set()                 # input dtypes of the matmuls issued (for MFU)
        # the Scalar engine's reduce registers, one fp32 per partition (nisa.activation reduce_cmd)
        self._act_regs = np.zeros(spec.partitions, np.float32) if self.full else None
        # the Vector engine's reduce registers (range_select, exponential, tensor_scalar_cumulative)
        self._dve_regs = np.zeros(spec.partitions, np.float32) if self.full else None
        self._dve_prev = None                       # what the Vector engine's last instruction wrote
        self._carried: list = []                    # (view, garbage mask) read by the running instruction (_carry_to)
        self.note = ""                              # recorded with each instruction (e.g. source)
        self._pe_ns = 1e9 / spec.pe_clock_hz
        self._clock_ns = [1e9 / spec.pe_clock_hz, 1e9 / spec.act_clock_hz,
                          1e9 / spec.dve_clock_hz, 1e9 / spec.pool_clock_hz]
        self._max_k = min(spec.partitions, spec.pe_rows)
        self._max_m = min(spec.stationary_fmax, spec.pe_cols)

    # -- time ------------------------------------------------------------------------------------
    @property
    def hbm_bandwidth(self) -> float:
        """Bytes/s of the HBM channel this core's DMAs use."""
        return self.engine_times.bandwidth

    @hbm_bandwidth.setter
    def hbm_bandwidth(self, bandwidth: float) -> None:
        self.engine_times.bandwidth = bandwidth

    @property
    def now(self) -> float:
        """ns: when the last result of the run so far is ready."""
        return self._now

    @property
    def matmul_dtype(self):
        """The dtype of the Tensor engine's matmul inputs so far (None before the first matmul); if
        several were used, the one with the highest peak, so MFU never exceeds 100 %."""
        if not self._matmul_dtypes:
            return None
        return max(sorted(self._matmul_dtypes, key=dtypes.name), key=self.spec.peak_flops)

    def profile(self, dtype=None) -> Profile:
        """The Profile of the run so far (computed from the timeline); MFU against `dtype`'s peak,
        by default the matmuls' input dtype (`matmul_dtype`; bfloat16 if there were none)."""
        if dtype is None:
            dtype = self.matmul_dtype or dtypes.bfloat16
        return Profile.from_timeline(self.timeline, self.spec, dtype=dtype)

    def barrier(self) -> None:
        """Every engine waits until everything issued so far is done: the next launch on this core
        starts after the previous one, as the runtime runs a core's programs one after another."""
        self.engine_times.barrier(self._now)
        self._dve_prev = None                       # the next launch starts a new instruction stream

    def start_launch(self) -> None:
        """A kernel execution begins: after everything issued so far (`barrier`) and the runtime's
        start-up, `spec.launch_start_ns` [LAUNCH] (with 0, exactly `barrier`)."""
        self.wait_until(self._now + self.spec.launch_start_ns)

    def end_launch(self) -> None:
        """A kernel execution ends `spec.launch_end_ns` after its last result (the runtime's
        tear-down [LAUNCH]); the timeline's total includes it (`Timeline.end_ns`)."""
        if self.spec.launch_end_ns:
            self._now += self.spec.launch_end_ns
            self.timeline.end_ns = self._now

    def wait_until(self, t_ns: float) -> None:
        """Nothing issued from now on starts before `t_ns`: the core waits for work off the device,
        e.g. a host op whose result comes back at `t_ns` (a barrier at max(now, t_ns))."""
        if t_ns > self._now:
            self._now = t_ns
        self.barrier()

    def device_print(self, prefix: str, src) -> int:
        """Print src's values (full mode; its shape in timing mode). Takes no engine time."""
        src = _view(src, "src")
        if self.full:
            src.check_initialized()
            print(prefix, src.read())
        else:
            print(prefix, f"<{src.shape} {dtypes.name(src.tensor.dtype)}, timing mode>")
        return -1

    def __repr__(self) -> str:
        return (f"NeuronCore({self.spec.name}, mode={self.mode!r}, {len(self.timeline)} "
                f"instructions, now={self._now:.0f} ns)")

    def _append(self, eid, opcode, start, end, ready, flops, hbm, sbuf, psum, waited):
        idx = len(self._records)
        self._records.append((eid, opcode, start, end, ready, flops, hbm, sbuf, psum, waited,
                              self.note))                   # a records.Record (a tuple: cheaper)
        if ready > self._now:
            self._now = ready
        return idx

    # -- checks shared by the compute engines --------------------------------------------------
    def _onchip(self, v: View, what: str, opcode: str, psum_ok: bool = True):
        kind = v.tensor.kind
        if kind == "hbm" or (kind == "psum" and not psum_ok):
            where = "SBUF" if not psum_ok else "SBUF or PSUM"
            raise MemoryPlacementError(
                f"operand memory: {opcode} {what} {v.tensor.name!r} is in {kind.upper()}; the "
                f"engine reads and writes {where} only" + (" (move HBM data with dma_copy)"
                                                           if kind == "hbm" else ""),
                value=kind, limit=where)
        if not v.part_first:
            raise PartitionAxisError(
                f"partition axis first: {opcode} {what} {v!r} does not have the partition axis "
                f"(axis {v.tensor.partition_axis} of the tensor) as its first axis",
                value=v.shape, limit="partition axis first")
        if v.part_start and not start_partition_ok(v.part_start, v.partitions,
                                                   self.spec.partitions):
            raise StartPartitionError(
                f"start partition: {opcode} {what} starts at partition {v.part_start} with "
                f"{v.partitions} partitions; allowed starts: 0 for >64 partitions, 0/64 for "
                f"33-64, 0/32/64/96 for <=32", value=v.part_start, limit=(0, 32, 64, 96))
        limit = self.spec.sbuf_free_max if kind == "sbuf" else self.spec.psum_free_max
        if v.free_size > limit:
            # the limit is on the memory an operand spans (AWS's nl.tile_size.psum_fmax / sbuf_fmax: "free
            # dimension of a tile on the PSUM / SBUF buffer"); a pattern that re-reads elements (a broadcast,
            # step 0) touches fewer than it walks, so count its distinct elements per partition
            footprint = v.free_size if v.basic else footprint_per_partition(v)
            if footprint > limit:
                raise FreeSizeError(
                    f"free size: {opcode} {what} has {footprint} elements per partition in "
                    f"{kind.upper()}, the limit is {limit}", value=footprint, limit=limit)

    @staticmethod
    def _one_psum_input(a: View, b: View, opcode: str, what: str, reference: str):
        """The Vector and GpSimd engines read at most one operand from PSUM."""
        if a.tensor.kind == "psum" and b.tensor.kind == "psum":
            raise MemoryPlacementError(
                f"operand memory: {opcode} {what} are both in PSUM; at most one input may be in PSUM "
                f"[{reference}]", value=("psum", "psum"), limit="at most one PSUM input")

    @staticmethod
    def _same_tile(a: View, b: View, opcode: str, what: str):
        if a.partitions != b.partitions or a.free_size != b.free_size:
            raise ShapeMismatchError(
                f"shape mismatch: {opcode} {what}: {a.shape} vs {b.shape} "
                f"(partitions {a.partitions} vs {b.partitions}, elements per partition "
                f"{a.free_size} vs {b.free_size})", value=(a.shape, b.shape), limit="same tile")

    def _engine(self, engine, opcode: str, allowed=(DVE, ACT, POOL)) -> int:
        key = getattr(engine, "name", engine)
        eid = _ENGINE_ALIASES.get(key)
        if eid is None or eid not in allowed:
            names = [self.engines[e] for e in allowed]
            raise EngineError(f"engine: {opcode} cannot run on {engine!r}; allowed: {names}",
                              value=engine, limit=names)
        return eid

    def _cost_ns(self, eid: int, opcode: str, reads, writes, read_as=None, **attrs) -> float:
        """ns a Vector / Scalar / GpSimd instruction keeps engine `eid` busy (`cost.cost`).
        ``read_as``: per operand (reads, then writes) the dtype it is read as, or None for its own (a
        tile retyped by ``.view(dtype)``: `retype.py`; of another element size, the operand counts that
        type's elements, `retype.typed_shape`).

        The answer depends only on the engine, opcode, elements per partition, operand count and
        attributes, so it is remembered per such key (the cost model is pure)."""
        first = reads[0] if reads else writes[0]
        key = (eid, opcode, first.free_size, len(reads), tuple(attrs.items()), read_as)
        if read_as is not None:                 # the same types read from elements of other sizes
            key += tuple(v.tensor.itemsize for v in reads + writes)
        operands = None
        if cost.cost_depends_on_operands(self.spec, _ENGINE_NAMES[eid], opcode):
            # the performance mode [ARCH-v3], tensor_tensor's PSUM rule and memset's bf16 rate
            # depend on dtypes, memories and layout too
            operands = self._operands(reads + writes, read_as)
            key += operands
        ns = self._costs.get(key)
        if ns is None:
            if operands is None:
                operands = self._operands(reads + writes, read_as)
            instr = cost.Instruction(opcode, _ENGINE_NAMES[eid], operands[:len(reads)], operands[len(reads):], attrs)
            ns = self._costs[key] = cost.cost(instr, self.spec).ns
        return ns

    @staticmethod
    def _operands(views, read_as) -> tuple:
        """The cost model's operands of `views`, each read as its ``read_as`` type (None: its own)."""
        operands = tuple(cost.operand(v) for v in views)
        if read_as is None:
            return operands
        out = []
        for o, v, d in zip(operands, views, read_as):
            if d is not None:
                shape = _retype.typed_shape(v, dtypes.as_dtype(d))
                o = dataclasses.replace(o, dtype=d, shape=shape,
                                        free_size=math.prod(shape) // max(v.partitions, 1))
            out.append(o)
        return tuple(out)

    def _vector_hidden_ns(self, reads, writes) -> float:
        """The part of a Vector instruction's static overhead it does not pay if it issues back to
        back (`cost.vector_hidden_static_cycles`), from what the engine's previous instruction wrote;
        remembers this one's writes for the next."""
        prev = self._dve_prev
        self._dve_prev = writes
        reads_previous = prev is not None and any(
            r.tensor is w.tensor and dependencies.overlap(r.box, w.box) for r in reads for w in prev)
        first = reads[0] if reads else writes[0]
        cycles = cost.vector_hidden_static_cycles(self.spec, "dve", first.free_size, reads_previous)
        return cycles * self._clock_ns[DVE]

    def _issue(self, eid, opcode, dur, reads, write, flops=0.0, also_write=None):
        """Schedule a Vector / Scalar / GpSimd instruction that reads `reads`, writes `write`
        (and `also_write`, e.g. the reduce_res of an activation with reduction): its data is ready
        after the earlier writes it reads (RAW) and the earlier accesses it overwrites (WAR, WAW);
        then `EngineTimes.compute` — its queue, the Vector engine's hidden static overhead, the
        shared SBUF / PSUM ports it needs (`_port_keys`)."""
        ready, waited = _wait_reads(reads, 0.0, -1)
        ready, waited, _ = _wait_write(write, ready, waited)
        writes = (write,)
        if also_write is not None:
            ready, waited, _ = _wait_write(also_write, ready, waited)
            writes = (write, also_write)
        hidden = self._vector_hidden_ns(reads, writes) if eid == DVE else 0.0
        sbuf, psum = _bytes_by_memory(reads + writes)
        idx = len(self._records)
        start, end, waited = self.engine_times.compute(eid, ready, waited, dur, hidden,
                                                self._port_keys(eid, reads + writes, sbuf, psum), idx)
        _record_reads(reads, end, idx)
        for v in writes:
            _record_write(v, end, idx)
        return self._append(eid, opcode, start, end, end, flops, 0, sbuf, psum, waited)

    def _port_keys(self, eid, views, sbuf: int, psum: int) -> tuple:
        """The shared memory ports an instruction of engine `eid` touching `views` needs
        (`engines.port_needs`; the PSUM banks from the bytes its PSUM views touch)."""
        sbuf_port, psum_port = port_needs(self.spec, eid, sbuf, psum)
        if not (sbuf_port or psum_port):
            return ()
        ranges = []
        if psum_port == "bank":
            for v in views:
                if v.tensor.kind == "psum":
                    lo, hi = _free_byte_range(v)
                    base = v.tensor.offset or 0
                    ranges.append((base + lo, base + hi))
        return port_keys(sbuf_port, psum_port, self.spec.psum_bank_bytes, ranges)

    def _inputs(self, *views, carry: bool = False):
        """Float32 values of the operands (full mode), checking they were written — or, with
        `carry`, noting where they hold garbage (memory never written) for `_carry_to`: an
        instruction whose result partition p depends only on its inputs' partition p computes
        garbage where its inputs held garbage, as on the chip, and only a later read of it that
        matters (a store, most of all) is an error."""
        out = []
        for v in views:
            if carry:
                bad = v.undefined()
                if bad is not None:
                    self._carried.append((v, bad.reshape(v.partitions, -1)))
            else:
                v.check_initialized()
            out.append(np.asarray(v.values(), dtype=np.float32).reshape(v.partitions, -1))
        return out

    def _carry_to(self, *dsts) -> None:
        """Mark as garbage what the carried inputs' garbage reaches in `dsts`: element on element
        when an input has dst's shape per partition, else the whole partition (a reduction along
        the free axes, a per-partition operand). An input whose partitions are not dst's cannot be
        followed: its read is the error it always was."""
        carried, self._carried = self._carried, []
        if not carried:
            return
        origin = next((v.tensor.poison_origin for v, _ in carried if v.tensor.poison_origin), "") or (
            f"{carried[0][0].tensor.name!r}[{carried[0][0]._index_str()}] read never-written"
            + (f" at {self.note}" if self.note else ""))
        for dst in dsts:
            if dst is None:
                continue
            mask = np.zeros((dst.partitions, dst.free_size), bool)
            for v, bad in carried:
                if v.partitions != dst.partitions:
                    v.check_initialized()
                if bad.shape[1] == dst.free_size:
                    mask |= bad
                else:
                    mask |= bad.any(axis=1)[:, None]
            dst.set_poison(mask.reshape(dst.shape), origin)

    def _garbage(self, v: View):
        """Full mode: the float32 values of `v` per partition and, where it holds garbage (memory
        never written, or computed from it), the [P, F] bool mask of those elements (else None)."""
        bad = v.undefined()
        vals = np.asarray(v.values(), dtype=np.float32).reshape(v.partitions, -1)
        return vals, None if bad is None else bad.reshape(v.partitions, -1)

    def _poison_from(self, dst: View, mask, *sources: View) -> None:
        """Mark the elements `mask` of dst (any shape of dst's size; None: none) as garbage computed
        from the garbage of `sources`, after dst was written: for instructions whose data flow is not
        partition on partition (a transpose, a reduction over partitions, a DMA, a select), which
        move garbage where they move data, as the chip does. Only a read that matters is an error:
        the final read of an output (`View.check_initialized`)."""
        if mask is None or not np.any(mask):
            return
        src = next((v for v in sources if v.tensor.poison_origin), sources[0])
        origin = src.tensor.poison_origin or (f"{src.tensor.name!r}[{src._index_str()}] read never-written"
                                              + (f" at {self.note}" if self.note else ""))
        if dst.tensor.kind == "hbm" and not dst.tensor.name.startswith("spill "):
            # TRNLAB_GARBAGE_STORES=1 (dma._garbage_moved): garbage stored into HBM defines nothing there;
            # a later store defines it (a padded tile stored whole, then its padding's zeros), else the
            # output's read raises
            origin += f"; stored into HBM by a DMA{f' at {self.note}' if self.note else ''}"
            dst.mark_unwritten(np.reshape(mask, dst.shape))
        dst.set_poison(np.reshape(mask, dst.shape), origin)

    @staticmethod
    def _store(dst: View, values: np.ndarray):
        dst.write(np.asarray(values).reshape(dst.shape).astype(_retype.dtype_of(dst), copy=False))


def footprint_per_partition(v: View) -> int:
    """Distinct elements per partition that view `v` touches (a broadcast's step-0 axes count once)."""
    distinct = np.unique(v.flat_positions()).size
    return distinct // v.partitions if v.partitions else distinct

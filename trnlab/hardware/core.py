"""The simulated NeuronCore: memories, engines, and the instructions (names as in ``nki.isa``).

Every instruction method
1. checks the hardware rules (raising the specific `errors` class: rule, value, limit),
2. in full mode computes the result with NumPy (fp32 inside the engines, rounded to the
   destination dtype with ml_dtypes; matmuls accumulate in fp32 in PSUM),
3. costs it (`cost.py`) and schedules it (`scheduler.py`) on its engine's in-order queue,
4. appends a record to the timeline and returns the record's index.

Timing mode (``mode="timing"``) does 1, 3 and 4 only — no values, the same timeline.

Engines (short names as in Neuron's profiler): ``pe`` Tensor, ``act`` Scalar, ``dve`` Vector,
``pool`` GpSimd, ``dma0..dma{Q-1}`` DMA queues.
"""
from __future__ import annotations

import numpy as np

from . import cost, dtypes, ops, scheduler
from .engines import ACT, DVE, PE, POOL, EngineTimes, port_keys, port_needs
from .errors import (DtypeError, EngineError, FreedTensorError, FreeSizeError, MatmulShapeError,
                     MemoryPlacementError, PartitionAxisError, PSUMToHBMError, ShapeMismatchError,
                     OutOfBoundsError, StartPartitionError, UnknownOpError)
from .memory import HBM, OnChipMemory
from .presets import CoreSpec, core_spec
from .profile import Profile
from .tensor import Tensor, View
from .timeline import COMPUTE_ENGINES, Timeline

_ENGINE_NAMES = ("pe", "act", "dve", "pool")
_ENGINE_ALIASES = {
    "pe": PE, "tensor": PE, "act": ACT, "scalar": ACT, "activation": ACT,
    "dve": DVE, "vector": DVE, "pool": POOL, "gpsimd": POOL, None: DVE, "unknown": DVE,
}
_wait_reads = scheduler.wait_reads
_wait_write = scheduler.wait_write
_record_reads = scheduler.record_reads
_record_write = scheduler.record_write


def _view(x, what: str) -> View:
    t = type(x)
    if t is View:
        v = x
    elif t is Tensor:
        v = x.full
    else:
        raise TypeError(f"{what}: expected a Tensor or View, got {type(x).__name__}")
    if v.tensor.freed:
        raise FreedTensorError(f"use after free: {what} tensor {v.tensor.name!r} was freed",
                               value=v.tensor.name, limit="live tensor")
    return v


def start_partition_ok(start: int, count: int, partitions: int = 128) -> bool:
    """[ARCH-v2]: > 64 partitions start at 0; 33–64 at 0 or 64; <= 32 at 0, 32, 64 or 96."""
    quarter = max(partitions // 4, 1)
    if count > 2 * quarter:
        return start == 0
    if count > quarter:
        return start % (2 * quarter) == 0
    return start % quarter == 0


def _free_byte_range(v: View) -> tuple[int, int]:
    """[lo, hi) bytes, within one partition, that view `v` of an on-chip tensor touches."""
    t = v.tensor
    if v.box is None or not v.basic:
        return 0, t.partition_bytes
    free_axes = [a for a in range(len(t.shape)) if a != t.partition_axis]
    lo = hi = 0
    for a in free_axes:
        lo = lo * t.shape[a] + v.box[2 * a]
        hi = hi * t.shape[a] + v.box[2 * a + 1] - 1
    return lo * t.itemsize, (hi + 1) * t.itemsize


def _bytes_by_memory(views) -> tuple[int, int]:
    """(SBUF bytes, PSUM bytes) that on-chip `views` touch."""
    sbuf = psum = 0
    for v in views:
        if v.tensor.kind == "sbuf":
            sbuf += v.nbytes
        else:
            psum += v.nbytes
    return sbuf, psum


class NeuronCore:
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
        self.times = EngineTimes(spec, len(self.engines), hbm_channel, hbm_bandwidth)
        self._free = self.times.free                # when each engine (queue) is free
        self._costs = {}                            # remembered answers of the pure cost model
        self._now = 0.0
        # the Tensor engine's stationary tile: the view loaded, and its tensor's version then
        self._stationary = None
        self._stationary_version = -1
        self._matmul_checked = {}
        self._matmul_dtypes = set()                 # input dtypes of the matmuls issued (for MFU)
        # the Scalar engine's reduce registers, one fp32 per partition (nisa.activation reduce_cmd)
        self._act_regs = np.zeros(spec.partitions, np.float32) if self.full else None
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
        return self.times.bandwidth

    @hbm_bandwidth.setter
    def hbm_bandwidth(self, bandwidth: float) -> None:
        self.times.bandwidth = bandwidth

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
        self.times.barrier(self._now)
        self._dve_prev = None                       # the next launch starts a new instruction stream

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
            raise FreeSizeError(
                f"free size: {opcode} {what} has {v.free_size} elements per partition in "
                f"{kind.upper()}, the limit is {limit}", value=v.free_size, limit=limit)

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

    def _cost_ns(self, eid: int, opcode: str, reads, writes, **attrs) -> float:
        """ns a Vector / Scalar / GpSimd instruction keeps engine `eid` busy (`cost.cost`).

        The answer depends only on the engine, opcode, elements per partition, operand count and
        attributes, so it is remembered per such key (the cost model is pure)."""
        first = reads[0] if reads else writes[0]
        key = (eid, opcode, first.free_size, len(reads), tuple(attrs.items()))
        if cost.cost_depends_on_operands(self.spec, _ENGINE_NAMES[eid], opcode):
            # the performance mode [ARCH-v3], tensor_tensor's PSUM rule and memset's bf16 rate
            # depend on dtypes, memories and layout too
            key += tuple(cost.operand(v) for v in reads + writes)
        ns = self._costs.get(key)
        if ns is None:
            instr = cost.Instruction(opcode, _ENGINE_NAMES[eid], tuple(cost.operand(v) for v in reads),
                                     tuple(cost.operand(v) for v in writes), attrs)
            ns = self._costs[key] = cost.cost(instr, self.spec).ns
        return ns

    def _vector_hidden_ns(self, reads, writes) -> float:
        """The part of a Vector instruction's static overhead it does not pay if it issues back to
        back (`cost.vector_hidden_static_cycles`), from what the engine's previous instruction wrote;
        remembers this one's writes for the next."""
        prev = self._dve_prev
        self._dve_prev = writes
        reads_previous = prev is not None and any(
            r.tensor is w.tensor and scheduler.overlap(r.box, w.box) for r in reads for w in prev)
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
        start, end, waited = self.times.compute(eid, ready, waited, dur, hidden,
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

    @staticmethod
    def _store(dst: View, values: np.ndarray):
        dst.write(np.asarray(values).reshape(dst.shape).astype(dst.tensor.dtype, copy=False))

    # ---------------------------------------------------------------------------------------------
    # Tensor engine
    # ---------------------------------------------------------------------------------------------
    def nc_matmul(self, dst, stationary, moving, accumulate=None) -> int:
        """dst[M, N] (+)= stationary[K, M].T @ moving[K, N] on the Tensor engine.

        Inputs in SBUF, output in PSUM (fp32; bf16 also on NeuronCore-v4), K <= 128 (partitions),
        M <= 128, N <= 512. ``accumulate``: True adds to dst, False overwrites it, None (default)
        adds if dst was already written and overwrites a fresh tile (NKI's PSUM accumulation).
        """
        # The rules depend only on the operands' shapes and places: check each triple of operand
        # objects once (tiled loops reuse the same views) — the hot path of every GEMM.
        key = (dst, stationary, moving)
        checked = self._matmul_checked.get(key)
        if checked is None:
            checked = self._check_matmul(dst, stationary, moving)
            if len(self._matmul_checked) > 1024:
                self._matmul_checked.clear()
            self._matmul_checked[key] = checked
        dst, st, mv, K, M, N, busy_ns, latency_ns, load_ns, flops, sbuf, psum = checked
        if st.tensor.freed or mv.tensor.freed or dst.tensor.freed:
            for v, what in ((st, "stationary"), (mv, "moving"), (dst, "dst")):
                _view(v, what)
        if self.full:
            self._matmul_values(dst, st, mv, K, M, N, accumulate)

        # --- time: LoadStationary in the background, MultiplyMoving busy, result after drain ---
        times = self.times
        start, waited = _wait_reads((mv,), 0.0, -1)        # RAW on the moving tile
        last = self._stationary
        st_tensor = st.tensor
        version = st_tensor.version
        new = last is not st and (last is None or last.tensor is not st_tensor or last.box != st.box) \
            or version != self._stationary_version
        if new:
            st_ready, st_waited = _wait_reads((st,), 0.0, -1)
            self._stationary = st
            self._stationary_version = version
        else:
            st_ready, st_waited = 0.0, -1
        start, waited = times.tensor_start(start, waited, new, st_ready, st_waited, load_ns)
        start, waited, group_ready = _wait_write(dst, start, waited, True)   # WAR / WAW on dst
        end, ready = times.tensor(start, busy_ns, latency_ns, group_ready)
        records = self._records
        idx = len(records)
        _record_reads((st, mv), end, idx)
        _record_write(dst, ready, idx, True)
        records.append((PE, "nc_matmul", start, end, ready, flops, 0, sbuf, psum, waited,
                        self.note))                                       # a records.Record
        if ready > self._now:
            self._now = ready
        return idx

    def _check_matmul(self, dst, stationary, moving):
        dst = _view(dst, "dst")
        st = _view(stationary, "stationary")
        mv = _view(moving, "moving")
        for v, what in ((st, "stationary"), (mv, "moving")):
            if v.tensor.kind != "sbuf":
                raise MemoryPlacementError(
                    f"operand memory: nc_matmul {what} {v.tensor.name!r} is in "
                    f"{v.tensor.kind.upper()}; the Tensor engine reads SBUF only",
                    value=v.tensor.kind, limit="sbuf")
        if dst.tensor.kind != "psum":
            raise MemoryPlacementError(
                f"operand memory: nc_matmul dst {dst.tensor.name!r} is in "
                f"{dst.tensor.kind.upper()}; the Tensor engine writes PSUM only",
                value=dst.tensor.kind, limit="psum")
        K, M, N = st.partitions, st.free_size, mv.free_size
        if mv.partitions != K:
            raise MatmulShapeError(
                f"matmul tile shape: contraction (partition) sizes differ: stationary {st.shape} "
                f"has K={K}, moving {mv.shape} has K={mv.partitions}", value=mv.partitions,
                limit=K)
        if K > self._max_k:
            raise MatmulShapeError(f"matmul tile shape: K={K} partitions, the limit is "
                                   f"{self._max_k} (PE rows)", value=K, limit=self._max_k)
        if M > self._max_m:
            raise MatmulShapeError(f"matmul tile shape: stationary free size M={M}, the limit is "
                                   f"{self._max_m} (gemm_stationary_fmax)", value=M,
                                   limit=self._max_m)
        if N > self.spec.moving_fmax:
            raise MatmulShapeError(f"matmul tile shape: moving free size N={N}, the limit is "
                                   f"{self.spec.moving_fmax} (gemm_moving_fmax)", value=N,
                                   limit=self.spec.moving_fmax)
        if dst.partitions != M or dst.free_size != N:
            raise ShapeMismatchError(
                f"shape mismatch: nc_matmul dst {dst.shape} should be [M={M}, N={N}] "
                f"(stationary {st.shape}, moving {mv.shape})", value=dst.shape, limit=(M, N))
        sdt, mdt = st.tensor.dtype, mv.tensor.dtype
        if sdt not in dtypes.MATMUL_INPUTS or mdt not in dtypes.MATMUL_INPUTS:
            raise DtypeError(f"data type: nc_matmul inputs {dtypes.name(sdt)} x {dtypes.name(mdt)}; "
                             f"the Tensor engine takes fp32, bf16, fp16 and fp8",
                             value=(sdt, mdt), limit=dtypes.MATMUL_INPUTS)
        ddt = dst.tensor.dtype
        if ddt != dtypes.float32 and not (ddt == dtypes.bfloat16 and self.spec.generation >= "v4"):
            raise DtypeError(f"data type: nc_matmul writes fp32 to PSUM, dst is {dtypes.name(ddt)}",
                             value=ddt, limit="float32")
        parts = self.spec.partitions
        for v, what in ((st, "stationary"), (mv, "moving"), (dst, "dst")):
            if not v.part_first:
                raise PartitionAxisError(
                    f"partition axis first: nc_matmul {what} {v!r} does not have the partition "
                    f"axis first", value=v.shape, limit="partition axis first")
            if v.part_start and not start_partition_ok(v.part_start, v.partitions, parts):
                raise StartPartitionError(
                    f"start partition: nc_matmul {what} starts at partition {v.part_start} with "
                    f"{v.partitions} partitions; allowed starts: 0 for >64 partitions, 0/64 for "
                    f"33-64, 0/32/64/96 for <=32", value=v.part_start, limit=(0, 32, 64, 96))
        matmul_dtype = dtypes.float32 if dtypes.float32 in (sdt, mdt) else sdt
        self._matmul_dtypes.add(matmul_dtype)
        c = cost.cost(cost.Instruction("nc_matmul", "pe", (cost.operand(st), cost.operand(mv)),
                                       (cost.operand(dst),)), self.spec)
        pe_ns = self._pe_ns
        return (dst, st, mv, K, M, N, c.cycles * pe_ns, c.latency_cycles * pe_ns,
                c.setup_cycles * pe_ns, 2.0 * K * M * N, st.nbytes + mv.nbytes, dst.nbytes)

    def _matmul_values(self, dst, st, mv, K, M, N, accumulate):
        """Full mode: fp32 products of the (exactly widened) inputs, accumulated in PSUM."""
        t = dst.tensor
        if accumulate is None:
            accumulate = t.written is None or bool(
                (t.written if dst.index is None else t.written[dst.index]).all())
        # garbage in (memory never written) lands where it goes, as on the chip: result row m
        # depends on stationary column m, result column n on moving column n (all of K)
        garbage = None
        bad_st, bad_mv = st.undefined(), mv.undefined()
        if bad_st is not None or bad_mv is not None:
            rows = np.zeros(M, bool) if bad_st is None else bad_st.reshape(K, M).any(axis=0)
            cols = np.zeros(N, bool) if bad_mv is None else bad_mv.reshape(K, N).any(axis=0)
            garbage = (rows[:, None] | cols[None, :]).reshape(dst.shape)
            source = st if bad_st is not None else mv
            origin = (f"nc_matmul read never-written {source.tensor.name!r}[{source._index_str()}]"
                      + (f" at {self.note}" if self.note else ""))
        if accumulate:                           # adding onto garbage keeps it garbage
            before = dst.undefined()
            if before is not None:
                garbage = before if garbage is None else garbage | before
                origin = dst.tensor.poison_origin or "accumulated onto garbage"
        if dst.basic and (t.dtype == dtypes.float32 or t.dtype == dtypes.bfloat16):
            # computed when the PSUM tile is next read, together with the rest of its group
            t.defer_matmul(dst, st.tensor.snapshot(st), mv.tensor.snapshot(mv), accumulate)
            dst.mark_written()
            if garbage is not None:
                dst.set_poison(garbage, origin)
            return
        product = (np.asarray(st.values(), np.float32).reshape(K, M).T
                   @ np.asarray(mv.values(), np.float32).reshape(K, N))
        if accumulate:
            dst.write((dst.values().astype(np.float32) + product.reshape(dst.shape))
                      .astype(t.dtype))
        else:
            self._store(dst, product)
        if garbage is not None:
            dst.set_poison(garbage, origin)

    def _pe_issue(self, opcode, st, reads, dst, flops, sbuf, psum):
        """Schedule a Tensor-engine instruction other than nc_matmul (nc_transpose): the array
        loads `st` as its stationary tile (in the background), then streams N columns."""
        busy_ns, latency_ns, load_ns = self._pe_cost(opcode, st, reads, dst)
        times = self.times
        start, waited = _wait_reads(reads, 0.0, -1)
        st_ready, st_waited = _wait_reads((st,), 0.0, -1)
        start, waited = times.tensor_start(start, waited, True, st_ready, st_waited, load_ns)
        self._stationary = None
        start, waited, _ = _wait_write(dst, start, waited)
        end, ready = times.tensor(start, busy_ns, latency_ns, 0.0)
        idx = len(self._records)
        _record_reads((st,) + reads, end, idx)
        _record_write(dst, ready, idx)
        return self._append(PE, opcode, start, end, ready, flops, 0, sbuf, psum, waited)

    def _transpose_values(self, dst: View, src: View) -> None:
        """Full mode: dst = src.T (nc_transpose on either engine)."""
        (x,) = self._inputs(src)
        self._store(dst, x.T)

    def _pe_cost(self, opcode, st, reads, dst) -> tuple[float, float, float]:
        """(busy, ready-after, LoadStationary) ns of a Tensor-engine instruction (`cost.cost`)."""
        c = cost.cost(cost.Instruction(opcode, "pe", (cost.operand(st),) + tuple(
            cost.operand(v) for v in reads), (cost.operand(dst),)), self.spec)
        pe_ns = self._pe_ns
        return c.cycles * pe_ns, c.latency_cycles * pe_ns, c.setup_cycles * pe_ns

    def nc_transpose(self, dst, src) -> int:
        """dst[F, P] = src[P, F].T through the Tensor engine (a matmul by the identity): SBUF → PSUM."""
        dst = _view(dst, "dst")
        src = _view(src, "src")
        if src.tensor.kind != "sbuf" or dst.tensor.kind != "psum":
            raise MemoryPlacementError(
                f"operand memory: nc_transpose on the Tensor engine reads SBUF and writes PSUM, "
                f"got {src.tensor.kind.upper()} -> {dst.tensor.kind.upper()}",
                value=(src.tensor.kind, dst.tensor.kind), limit=("sbuf", "psum"))
        self._onchip(src, "src", "nc_transpose")
        self._onchip(dst, "dst", "nc_transpose")
        P, F = src.partitions, src.free_size
        if P > self._max_k or F > self._max_m:
            raise MatmulShapeError(f"matmul tile shape: nc_transpose of [{P}, {F}]; both sides "
                                   f"must be <= {self._max_m}", value=(P, F), limit=self._max_m)
        if dst.partitions != F or dst.free_size != P:
            raise ShapeMismatchError(f"shape mismatch: nc_transpose dst {dst.shape}, expected "
                                     f"[{F}, {P}]", value=dst.shape, limit=(F, P))
        if self.full:
            self._transpose_values(dst, src)
        # an identity matmul: src is the stationary [K=P, M=F], the identity streams N=P columns
        return self._pe_issue("nc_transpose", src, (), dst, 2.0 * P * F * P, src.nbytes, dst.nbytes)

    # ---------------------------------------------------------------------------------------------
    # DMA
    # ---------------------------------------------------------------------------------------------
    def dma_copy(self, dst, src, queue: int | None = None) -> int:
        """Copy src to dst with a DMA queue (HBM <-> SBUF, SBUF <-> SBUF, HBM <-> HBM).

        PSUM is not reachable by DMA: results go PSUM -> SBUF (tensor_copy) -> HBM [MM].
        No dtype conversion (cast on an engine first). ``queue``: a DMA queue number, or None for
        the queue that can start the transfer earliest (the one free first; ties: lowest number).
        Each queue runs its transfers in order; the shared DMA engines and HBM channel give each
        transfer the earliest free slot at or after its start (not the issue order).
        """
        dst = _view(dst, "dst")
        src = _view(src, "src")
        sk, dk = src.tensor.kind, dst.tensor.kind
        if sk == "psum" or dk == "psum":
            cls = PSUMToHBMError if "hbm" in (sk, dk) else MemoryPlacementError
            raise cls(f"PSUM to HBM: dma_copy {sk.upper()} -> {dk.upper()} is refused; DMA does "
                      f"not reach PSUM. Copy PSUM -> SBUF with tensor_copy, then SBUF -> HBM",
                      value=(sk, dk), limit="SBUF/HBM endpoints")
        if src.size != dst.size or (src.shape != dst.shape and
                                    tuple(s for s in src.shape if s != 1)
                                    != tuple(s for s in dst.shape if s != 1)):
            raise ShapeMismatchError(f"shape mismatch: dma_copy src {src.shape} -> dst {dst.shape}",
                                     value=src.shape, limit=dst.shape)
        if src.tensor.dtype != dst.tensor.dtype:
            raise DtypeError(f"data type: dma_copy does not convert: src "
                             f"{dtypes.name(src.tensor.dtype)}, dst {dtypes.name(dst.tensor.dtype)}"
                             f"; cast with tensor_copy on an engine", value=src.tensor.dtype,
                             limit=dst.tensor.dtype)
        if self.full:
            self._dma_copy_values(dst, src)
        return self._schedule_dma(dst, src, (src,), src.nbytes, queue, "dma_copy")

    @staticmethod
    def _dma_copy_values(dst: View, src: View) -> None:
        """Full mode: dst = src's values, unchanged (a DMA does not convert)."""
        src.check_initialized()
        dst.write(np.reshape(src.values(), dst.shape))

    def dma_gather(self, dst, src, indices, queue: int | None = None) -> int:
        """Indirect DMA: dst[r, ...] = src[indices[r], ...] for the R rows of dst (a gather).

        `indices` is an integer [R, 1] view in SBUF, read at run time (NKI's ``nl.load(table[ids_tile,
        i_f])``; the DMA needs the index values on chip first). An index outside src's rows raises
        `OutOfBoundsError` (NKI's default oob_mode.error). Each row is one DMA descriptor of one
        row's bytes; the R rows are spread over the DMA engines like a dense transfer of R rows,
        and the transfer waits for the whole of src (its rows are known only at run time)."""
        dst = _view(dst, "dst")
        src = _view(src, "src")
        idx = _view(indices, "indices")
        if src.tensor.kind != "hbm" or dst.tensor.kind != "sbuf":
            raise MemoryPlacementError(
                f"operand memory: dma_gather reads rows of an HBM tensor into SBUF, got "
                f"{src.tensor.kind.upper()} -> {dst.tensor.kind.upper()}",
                value=(src.tensor.kind, dst.tensor.kind), limit=("hbm", "sbuf"))
        self._onchip(idx, "indices", "dma_gather", psum_ok=False)
        if dtypes.is_float(idx.tensor.dtype):
            raise DtypeError(f"data type: dma_gather indices must be integers, got "
                             f"{dtypes.name(idx.tensor.dtype)}", value=idx.tensor.dtype, limit="int32")
        R = dst.shape[0] if dst.shape else 1
        if idx.size != R or tuple(dst.shape[1:]) != tuple(src.shape[1:]):
            raise ShapeMismatchError(
                f"shape mismatch: dma_gather of {idx.size} indices from src {src.shape} into dst "
                f"{dst.shape}; dst must be [{idx.size}, {', '.join(map(str, src.shape[1:]))}]",
                value=dst.shape, limit=(idx.size,) + tuple(src.shape[1:]))
        if dst.tensor.dtype != src.tensor.dtype:
            raise DtypeError(f"data type: dma_gather does not convert: src "
                             f"{dtypes.name(src.tensor.dtype)}, dst {dtypes.name(dst.tensor.dtype)}",
                             value=src.tensor.dtype, limit=dst.tensor.dtype)
        if self.full:
            idx.check_initialized()
            rows = np.asarray(idx.values()).reshape(-1).astype(np.int64)
            n = src.shape[0]
            bad = rows[(rows < 0) | (rows >= n)]
            if bad.size:
                raise OutOfBoundsError(f"out-of-bounds index: dma_gather row {int(bad[0])} of a source "
                                       f"with {n} rows", value=int(bad[0]), limit=n)
            src.check_initialized()
            dst.write(np.asarray(src.values())[rows].reshape(dst.shape))
        whole = src.tensor.full                    # which rows is known only at run time
        nbytes = dst.nbytes
        return self._schedule_dma(dst, whole, (whole, idx), nbytes, queue, "dma_gather")

    def _schedule_dma(self, dst, src, reads, nbytes, queue, opcode) -> int:
        """Schedule a DMA of `nbytes` from src to dst (after `reads` are ready) on a queue."""
        sk, dk = src.tensor.kind, dst.tensor.kind
        ready, waited = _wait_reads(reads, 0.0, -1)
        ready, waited, _ = _wait_write(dst, ready, waited)
        c = self._dma_cost(dst, src, nbytes, opcode)
        hbm = c.hbm_bytes
        eid, start, end, waited = self.times.dma(self._dma_queue(queue), ready, waited, c.fixed_ns,
                                                 c.cycles, c.dma_engine_ns, hbm)
        idx = len(self._records)
        _record_reads(reads, end, idx)
        _record_write(dst, end, idx)
        sbuf = (nbytes if sk == "sbuf" else 0) + (nbytes if dk == "sbuf" else 0)
        return self._append(eid, opcode, start, end, end, 0.0, hbm, sbuf, 0, waited)

    def _dma_queue(self, queue) -> int | None:
        """The DMA queue a kernel named (checked), or None: the queue free first."""
        if queue is None:
            return None
        nq = self.spec.dma_queues
        if not 0 <= int(queue) < nq:
            raise EngineError(f"engine: DMA queue {queue} does not exist; the core has {nq}",
                              value=queue, limit=nq)
        return int(queue)

    def _dma_cost(self, dst: View, src: View, nbytes: int, opcode: str) -> "cost.Cost":
        """The pure cost model's answer for a DMA; it depends on these numbers only, so it is
        remembered per (opcode, bytes, rows, contiguous chunk, touches HBM, dst free size, itemsize)."""
        sk, dk = src.tensor.kind, dst.tensor.kind
        chunk = nbytes // max(dst.shape[0] if dst.shape else 1, 1) if opcode == "dma_gather" else \
            min(cost.contiguous_bytes(src), cost.contiguous_bytes(dst))
        rows = dst.partitions if dk == "sbuf" else (src.partitions if sk == "sbuf" else
                                                    (dst.shape[0] if dst.shape else 1))
        key = (opcode, nbytes, rows, chunk, "hbm" in (sk, dk), dst.free_size, dst.tensor.itemsize)
        c = self._costs.get(key)
        if c is None:
            c = self._costs[key] = cost.cost(cost.Instruction(
                opcode, "dma", (cost.operand(src, True),), (cost.operand(dst, True),)), self.spec)
        return c

    # ---------------------------------------------------------------------------------------------
    # Vector / Scalar / GpSimd
    # ---------------------------------------------------------------------------------------------
    def tensor_copy(self, dst, src, engine="vector") -> int:
        """dst = src, cast to dst's dtype, on any compute engine (e.g. PSUM -> SBUF)."""
        dst = _view(dst, "dst")
        src = _view(src, "src")
        eid = self._engine(engine, "tensor_copy")
        self._onchip(src, "src", "tensor_copy", psum_ok=eid != POOL)
        self._onchip(dst, "dst", "tensor_copy", psum_ok=eid != POOL)
        self._same_tile(dst, src, "tensor_copy", "dst vs src")
        if self.full:
            self._tensor_copy_values(dst, src)
        dur = self._cost_ns(eid, "tensor_copy", (src,), (dst,))
        return self._issue(eid, "tensor_copy", dur, (src,), dst)

    def _tensor_copy_values(self, dst: View, src: View) -> None:
        """Full mode: dst = src cast; garbage is copied element on element to where it goes."""
        garbage = src.undefined()
        dst.write(np.reshape(src.values(), dst.shape).astype(dst.tensor.dtype, copy=False))
        if garbage is not None:
            origin = src.tensor.poison_origin or (
                f"tensor_copy read never-written {src.tensor.name!r}[{src._index_str()}]"
                + (f" at {self.note}" if self.note else ""))
            dst.set_poison(garbage.reshape(dst.shape), origin)

    def tensor_tensor(self, dst, data1, data2, op, engine="vector") -> int:
        """dst = data1 <op> data2, element-wise (Vector or GpSimd engine)."""
        dst = _view(dst, "dst")
        a = _view(data1, "data1")
        b = _view(data2, "data2")
        eid = self._engine(engine, "tensor_tensor", (DVE, POOL))
        name, fn = ops.binary(op)
        for v, what in ((a, "data1"), (b, "data2"), (dst, "dst")):
            self._onchip(v, what, "tensor_tensor", psum_ok=eid != POOL)
        self._one_psum_input(a, b, "tensor_tensor", "data1 and data2", "nki.isa.tensor_tensor")
        self._same_tile(a, b, "tensor_tensor", "data1 vs data2")
        self._same_tile(dst, a, "tensor_tensor", "dst vs data1")
        if self.full:
            self._carried = []
            x, y = self._inputs(a, b, carry=True)
            if name in ops.BITVEC:
                x, y = a.values().reshape(x.shape), b.values().reshape(y.shape)
            with np.errstate(all="ignore"):
                self._store(dst, fn(x, y))
            self._carry_to(dst)
        dur = self._cost_ns(eid, "tensor_tensor", (a, b), (dst,), op=name)
        return self._issue(eid, "tensor_tensor", dur, (a, b), dst)

    def _operand(self, operand, P: int, opcode: str, what: str, carry: bool = False):
        """A scalar float or a [P, 1] view; returns (fp32 value or None, view or None)."""
        if isinstance(operand, (Tensor, View)):
            v = _view(operand, what)
            self._onchip(v, what, opcode)
            if v.partitions != P or v.free_size != 1:
                raise ShapeMismatchError(f"shape mismatch: {opcode} {what} {v.shape} must be "
                                         f"[{P}, 1] (one value per partition)", value=v.shape,
                                         limit=(P, 1))
            return (self._inputs(v, carry=carry)[0] if self.full else None), v
        return np.float32(operand), None

    def tensor_scalar(self, dst, data, op0, operand0, reverse0=False, op1=None, operand1=None,
                      reverse1=False, engine="vector") -> int:
        """dst = (data <op0> operand0) <op1> operand1; operands are scalars or [P, 1] views."""
        dst = _view(dst, "dst")
        x = _view(data, "data")
        eid = self._engine(engine, "tensor_scalar")
        self._onchip(x, "data", "tensor_scalar", psum_ok=eid != POOL)
        self._onchip(dst, "dst", "tensor_scalar", psum_ok=eid != POOL)
        self._same_tile(dst, x, "tensor_scalar", "dst vs data")
        n0, f0 = ops.binary(op0)
        self._carried = []
        c0, v0 = self._operand(operand0, x.partitions, "tensor_scalar", "operand0", carry=True)
        reads = (x,) if v0 is None else (x, v0)
        if op1 is not None:
            n1, f1 = ops.binary(op1)
            c1, v1 = self._operand(operand1, x.partitions, "tensor_scalar", "operand1", carry=True)
            if v1 is not None:
                reads = reads + (v1,)
        if self.full:
            (vals,) = self._inputs(x, carry=True)
            with np.errstate(all="ignore"):
                out = f0(c0, vals) if reverse0 else f0(vals, c0)
                if op1 is not None:
                    out = f1(c1, out) if reverse1 else f1(out, c1)
            self._store(dst, out)
            self._carry_to(dst)
        dur = self._cost_ns(eid, "tensor_scalar", (x,), (dst,))
        return self._issue(eid, "tensor_scalar", dur, reads, dst)

    def tensor_reduce(self, dst, data, op, axis=(1,), negate=False, keepdims=False,
                      engine="vector") -> int:
        """dst = reduce_op(data, free axes `axis`) (Vector engine); partitions stay."""
        dst = _view(dst, "dst")
        x = _view(data, "data")
        eid = self._engine(engine, "tensor_reduce", (DVE, POOL))
        name, fn = ops.reduce(op)
        self._onchip(x, "data", "tensor_reduce", psum_ok=eid != POOL)
        self._onchip(dst, "dst", "tensor_reduce", psum_ok=eid != POOL)
        axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
        axes = tuple(int(a) % x.ndim for a in axes)
        if 0 in axes:
            raise PartitionAxisError("partition axis first: tensor_reduce reduces free axes only; "
                                     "axis 0 is the partition axis (use a transpose or "
                                     "tensor_partition_reduce)", value=axes, limit="axes >= 1")
        kept = 1
        for i, s in enumerate(x.shape):
            if i not in axes:
                kept *= s
        if dst.size != kept:
            raise ShapeMismatchError(f"shape mismatch: tensor_reduce of {x.shape} over axes "
                                     f"{axes} gives {kept} elements, dst {dst.shape} has {dst.size}",
                                     value=dst.shape, limit=kept)
        if self.full:
            x.check_initialized()
            vals = np.asarray(x.values(), dtype=np.float32)
            out = fn(vals, axis=axes, keepdims=keepdims)
            if negate:
                out = -out
            self._store(dst, out)
        dur = self._cost_ns(eid, "tensor_reduce", (x,), (dst,))
        return self._issue(eid, "tensor_reduce", dur, (x,), dst)

    def activation(self, dst, data, op, bias=None, scale=1.0, reduce_op=None, reduce_res=None,
                   reduce_cmd=None) -> int:
        """dst = op(data * scale + bias) on the Scalar engine; bias/scale: scalar or [P, 1] view.

        The engine can also sum the activated values of each partition along the free axes into
        its reduce registers (one fp32 per partition) [nki.isa.activation]: `reduce_cmd` "reset"
        zeroes them, "reduce" adds this instruction's sums, "reset_reduce" stores them, "idle"
        leaves them; with `reduce_res` ([P, 1]) the registers are then read out into it. Without
        a reduce_cmd, reduce_res gets this instruction's sums (reset_reduce, i.e.
        nisa.activation_reduce). The registers can only add. Cost max(MIN_II, N), plus MIN_II when
        the registers are used [nki.isa.activation_reduce].
        """
        if reduce_cmd is None:
            reduce_cmd = "reset_reduce" if reduce_res is not None else "idle"
        if reduce_cmd not in ("idle", "reset", "reduce", "reset_reduce"):
            raise ValueError(f"activation reduce_cmd must be idle, reset, reduce or reset_reduce, "
                             f"got {reduce_cmd!r}")
        dst = _view(dst, "dst")
        x = _view(data, "data")
        name, fn = ops.activation(op)
        self._onchip(x, "data", "activation")
        self._onchip(dst, "dst", "activation")
        self._same_tile(dst, x, "activation", "dst vs data")
        reduce_view = None
        if reduce_res is not None or reduce_cmd in ("reduce", "reset_reduce"):
            reduce_name = ops.op_name(reduce_op if reduce_op is not None else "add")
            if reduce_name != "add":
                raise UnknownOpError(
                    f"activation reduce_op: the Scalar engine's reduce registers only add, got "
                    f"{reduce_name!r} (reduce with a separate tensor_reduce for max/min)",
                    value=reduce_name, limit="add")
        if reduce_res is not None:
            reduce_view = _view(reduce_res, "reduce_res")
            self._onchip(reduce_view, "reduce_res", "activation")
            if reduce_view.partitions != x.partitions or reduce_view.free_size != 1:
                raise ShapeMismatchError(
                    f"shape mismatch: activation reduce_res {reduce_view.shape} must be "
                    f"[{x.partitions}, 1] (one value per partition)", value=reduce_view.shape,
                    limit=(x.partitions, 1))
        reads = (x,)
        b = None
        self._carried = []
        if bias is not None:
            b, bv = self._operand(bias, x.partitions, "activation", "bias", carry=True)
            if bv is not None:
                reads = reads + (bv,)
        s, sv = self._operand(scale, x.partitions, "activation", "scale", carry=True)
        if sv is not None:
            reads = reads + (sv,)
        if self.full:
            (vals,) = self._inputs(x, carry=True)
            with np.errstate(all="ignore"):
                pre = vals * s
                if b is not None:
                    pre = pre + b
                out = fn(pre)
            self._store(dst, out)
            # the registers sum the fp32 activated values, before dst's rounding
            regs = self._act_regs[x.part_start:x.part_start + x.partitions]   # one per lane
            if reduce_cmd in ("reset", "reset_reduce"):
                regs[:] = 0.0
            if reduce_cmd in ("reduce", "reset_reduce"):
                regs += np.asarray(out, np.float32).sum(axis=1)
            if reduce_view is not None:
                self._store(reduce_view, regs[:, None].copy())
            self._carry_to(dst, reduce_view)           # the sums hold garbage where a row did
        dur = self._cost_ns(ACT, "activation", (x,), (dst,),
                            reduce=reduce_view is not None or reduce_cmd != "idle")
        return self._issue(ACT, "activation", dur, reads, dst, also_write=reduce_view)

    def scalar_tensor_tensor(self, dst, data, op0, operand0, op1, operand1, reverse0=False,
                             reverse1=False, engine="vector") -> int:
        """dst = (data <op0> operand0) <op1> operand1 in one instruction: operand0 a scalar or a
        [P, 1] view, operand1 a tile of data's shape [nki.isa.scalar_tensor_tensor]."""
        dst = _view(dst, "dst")
        x = _view(data, "data")
        other = _view(operand1, "operand1")
        eid = self._engine(engine, "scalar_tensor_tensor", (DVE, POOL))
        for v, what in ((x, "data"), (other, "operand1"), (dst, "dst")):
            self._onchip(v, what, "scalar_tensor_tensor", psum_ok=eid != POOL)
        self._one_psum_input(x, other, "scalar_tensor_tensor", "data and operand1",
                             "nki.isa.scalar_tensor_tensor")
        self._same_tile(other, x, "scalar_tensor_tensor", "operand1 vs data")
        self._same_tile(dst, x, "scalar_tensor_tensor", "dst vs data")
        name0, f0 = ops.binary(op0)
        name1, f1 = ops.binary(op1)
        c0, v0 = self._operand(operand0, x.partitions, "scalar_tensor_tensor", "operand0")
        reads = (x, other) if v0 is None else (x, v0, other)
        if self.full:
            vals, rhs = self._inputs(x, other)
            with np.errstate(all="ignore"):
                out = f0(c0, vals) if reverse0 else f0(vals, c0)
                out = f1(rhs, out) if reverse1 else f1(out, rhs)
            self._store(dst, out)
        fast = (x.tensor.dtype == dtypes.bfloat16 and other.tensor.dtype == dtypes.bfloat16
                and name0 == "subtract" and name1 == "multiply")
        dur = self._cost_ns(eid, "scalar_tensor_tensor", (x, other), (dst,), fast_mode=fast)
        return self._issue(eid, "scalar_tensor_tensor", dur, reads, dst)

    def memset(self, dst, value=0.0, engine="vector") -> int:
        """Fill dst with a constant."""
        dst = _view(dst, "dst")
        eid = self._engine(engine, "memset")
        self._onchip(dst, "dst", "memset", psum_ok=eid != POOL)
        if self.full:
            dst.write(np.full(dst.shape, value).astype(dst.tensor.dtype))
        dur = self._cost_ns(eid, "memset", (), (dst,), inputs=1, zero=bool(np.all(np.asarray(value) == 0)))
        return self._issue(eid, "memset", dur, (), dst)

    def iota(self, dst, expr) -> int:
        """Write the integer pattern `expr` (an array broadcastable to dst) on GpSimd: 150 + N cycles."""
        dst = _view(dst, "dst")
        self._onchip(dst, "dst", "iota", psum_ok=False)
        if self.full:
            pattern = np.broadcast_to(np.asarray(expr), dst.shape)
            dst.write(pattern.astype(dst.tensor.dtype))
        dur = self._cost_ns(POOL, "iota", (), (dst,))
        return self._issue(POOL, "iota", dur, (), dst)

    def affine_select(self, dst, predicate, on_true, on_false_value) -> int:
        """dst = on_true where `predicate` holds, else on_false_value, on GpSimd: 150 + N cycles.

        `predicate` is the boolean array (broadcastable to dst) of a compile-time affine condition
        over the tile's indices, which the engine evaluates as it goes [nki.isa.affine_select]; the
        selection copies values, so inf and NaN pass through exactly."""
        dst = _view(dst, "dst")
        x = _view(on_true, "on_true")
        self._onchip(x, "on_true", "affine_select", psum_ok=False)
        self._onchip(dst, "dst", "affine_select", psum_ok=False)
        self._same_tile(dst, x, "affine_select", "dst vs on_true")
        if self.full:
            (vals,) = self._inputs(x)
            holds = np.broadcast_to(np.asarray(predicate, bool), x.shape).reshape(vals.shape)
            self._store(dst, np.where(holds, vals, np.float32(on_false_value)))
        dur = self._cost_ns(POOL, "affine_select", (x,), (dst,))
        return self._issue(POOL, "affine_select", dur, (x,), dst)

    def select(self, dst, predicate, on_true, on_false, reverse_pred=False, engine="vector") -> int:
        """dst = on_true where predicate != 0 (== 0 with reverse_pred), else on_false: one Vector
        instruction (nki.isa.select_reduce without the reduction). on_false: a number, a [P, 1]
        view or a tile of on_true's shape. Values are copied, so inf and NaN pass through exactly.
        Cost: the Vector model, 100 + N per input tile."""
        dst = _view(dst, "dst")
        pred = _view(predicate, "predicate")
        x = _view(on_true, "on_true")
        eid = self._engine(engine, "select", (DVE, POOL))
        for v, what in ((pred, "predicate"), (x, "on_true"), (dst, "dst")):
            self._onchip(v, what, "select", psum_ok=eid != POOL)
        self._one_psum_input(pred, x, "select", "predicate and on_true", "nki.isa.select_reduce")
        self._same_tile(pred, x, "select", "predicate vs on_true")
        self._same_tile(dst, x, "select", "dst vs on_true")
        reads = (pred, x)
        other = None
        if isinstance(on_false, (Tensor, View)):
            other = _view(on_false, "on_false")
            if other.free_size != 1 or other.partitions != x.partitions:
                self._onchip(other, "on_false", "select", psum_ok=eid != POOL)
                self._same_tile(other, x, "select", "on_false vs on_true")
                reads = reads + (other,)
                false_value = None
            else:
                false_value, other = self._operand(on_false, x.partitions, "select", "on_false")
                reads = reads + (other,)
                other = None
        else:
            false_value = np.float32(on_false)
        if self.full:
            flags, vals = self._inputs(pred, x)
            holds = (flags == 0) if reverse_pred else (flags != 0)
            if other is not None:
                (false_value,) = self._inputs(other)
            self._store(dst, np.where(holds, vals, false_value))
        tiles = 3 if other is not None else 2
        dur = self._cost_ns(eid, "select", (pred, x), (dst,), inputs=tiles)
        return self._issue(eid, "select", dur, reads, dst)

    def bn_stats(self, dst, data) -> int:
        """Per partition, dst[P, 6] = (count, mean, variance * count) of the even- and then of the
        odd-indexed elements of data (free axes flattened, at most bn_stats_fmax = 512 of them), in
        fp32 on the Vector engine [nki.isa.bn_stats]; bn_aggr turns one or more of these into mean
        and variance."""
        dst = _view(dst, "dst")
        x = _view(data, "data")
        self._onchip(x, "data", "bn_stats")
        self._onchip(dst, "dst", "bn_stats")
        if x.free_size > self.spec.bn_stats_fmax:
            raise FreeSizeError(
                f"free size: bn_stats data has {x.free_size} elements per partition, the limit is "
                f"{self.spec.bn_stats_fmax} (nl.tile_size.bn_stats_fmax); split the row and aggregate "
                f"the pieces with one bn_aggr", value=x.free_size, limit=self.spec.bn_stats_fmax)
        if dst.partitions != x.partitions or dst.free_size != 6:
            raise ShapeMismatchError(f"shape mismatch: bn_stats dst {dst.shape} must be "
                                     f"[{x.partitions}, 6]", value=dst.shape, limit=(x.partitions, 6))
        if self.full:
            self._carried = []
            (vals,) = self._inputs(x, carry=True)
            stats = []
            for half in (vals[:, 0::2], vals[:, 1::2]):
                count = half.shape[1]
                mean = half.mean(axis=1) if count else np.zeros(len(half), np.float32)
                m2 = ((half - mean[:, None]) ** 2).sum(axis=1) if count else np.zeros(len(half), np.float32)
                stats += [np.full(len(half), count, np.float32), mean, m2]
            self._store(dst, np.stack(stats, axis=1))
            self._carry_to(dst)
        dur = self._cost_ns(DVE, "bn_stats", (x,), (dst,))
        return self._issue(DVE, "bn_stats", dur, (x,), dst)

    def bn_aggr(self, dst, data) -> int:
        """dst[P, 2] = (mean, variance) per partition from the (count, mean, variance * count)
        triples of one or more bn_stats results laid side by side in data [nki.isa.bn_aggr]."""
        dst = _view(dst, "dst")
        x = _view(data, "data")
        self._onchip(x, "data", "bn_aggr")
        self._onchip(dst, "dst", "bn_aggr")
        if x.free_size % 3:
            raise ShapeMismatchError(f"shape mismatch: bn_aggr data has {x.free_size} elements per "
                                     f"partition, not a whole number of (count, mean, variance * count) "
                                     f"triples", value=x.free_size, limit="multiple of 3")
        if dst.partitions != x.partitions or dst.free_size != 2:
            raise ShapeMismatchError(f"shape mismatch: bn_aggr dst {dst.shape} must be "
                                     f"[{x.partitions}, 2]", value=dst.shape, limit=(x.partitions, 2))
        if self.full:
            self._carried = []
            (vals,) = self._inputs(x, carry=True)
            triples = vals.reshape(len(vals), -1, 3).astype(np.float64)
            count, mean, m2 = triples[..., 0], triples[..., 1], triples[..., 2]
            total = count.sum(axis=1)
            with np.errstate(all="ignore"):
                grand = (count * mean).sum(axis=1) / total
                # Chan et al.: the pieces' M2 plus each piece's spread of its mean about the grand mean
                spread = (m2 + count * (mean - grand[:, None]) ** 2).sum(axis=1)
                variance = spread / total
            self._store(dst, np.stack([grand, variance], axis=1).astype(np.float32))
            self._carry_to(dst)
        dur = self._cost_ns(DVE, "bn_aggr", (x,), (dst,))
        return self._issue(DVE, "bn_aggr", dur, (x,), dst)

    # ---------------------------------------------------------------------------------------------
    # Instructions added for NKI coverage: scans, fused scalar-reduce, partition reduce, dropout
    # ---------------------------------------------------------------------------------------------
    def tensor_tensor_scan(self, dst, data0, data1, initial, op0, op1, reverse0=False,
                           reverse1=False) -> int:
        """Per partition, along the free axes (flattened) [nki.isa.tensor_tensor_scan]:
        dst[:, 0] = (data0[:, 0] <op0> initial) <op1> data1[:, 0];
        dst[:, i] = (data0[:, i] <op0> dst[:, i-1]) <op1> data1[:, i]  (Vector engine).
        `initial`: a number or a [P, 1] view; at most one of data0/data1 in PSUM."""
        dst = _view(dst, "dst")
        a = _view(data0, "data0")
        b = _view(data1, "data1")
        for v, what in ((a, "data0"), (b, "data1"), (dst, "dst")):
            self._onchip(v, what, "tensor_tensor_scan")
        self._one_psum_input(a, b, "tensor_tensor_scan", "data0 and data1", "nki.isa.tensor_tensor_scan")
        self._same_tile(a, b, "tensor_tensor_scan", "data0 vs data1")
        self._same_tile(dst, a, "tensor_tensor_scan", "dst vs data0")
        _, f0 = ops.binary(op0)
        _, f1 = ops.binary(op1)
        c0, v0 = self._operand(initial, a.partitions, "tensor_tensor_scan", "initial")
        reads = (a, b) if v0 is None else (a, b, v0)
        if self.full:
            x, y = self._inputs(a, b)
            carry = np.broadcast_to(np.asarray(c0, np.float32).reshape(-1, 1), (len(x), 1))[:, 0]
            out = np.empty_like(x)
            with np.errstate(all="ignore"):
                for i in range(x.shape[1]):
                    t = f0(carry, x[:, i]) if reverse0 else f0(x[:, i], carry)
                    carry = (f1(y[:, i], t) if reverse1 else f1(t, y[:, i])).astype(np.float32)
                    out[:, i] = carry
            self._store(dst, out)
        dur = cost.tensor_tensor_scan_cycles(self.spec, a.free_size) * self._clock_ns[DVE]
        return self._issue(DVE, "tensor_tensor_scan", dur, reads, dst)

    def tensor_scalar_reduce(self, dst, data, op0, operand0, reduce_op, reduce_res,
                             reverse0=False) -> int:
        """dst = data <op0> operand0 and reduce_res[P, 1] = reduce_op of it along all free axes, one
        Vector instruction [nki.isa.tensor_scalar_reduce]; reduce_op: add, multiply, maximum, minimum."""
        dst = _view(dst, "dst")
        x = _view(data, "data")
        r = _view(reduce_res, "reduce_res")
        for v, what in ((x, "data"), (dst, "dst"), (r, "reduce_res")):
            self._onchip(v, what, "tensor_scalar_reduce")
        self._same_tile(dst, x, "tensor_scalar_reduce", "dst vs data")
        if r.partitions != x.partitions or r.free_size != 1:
            raise ShapeMismatchError(f"shape mismatch: tensor_scalar_reduce reduce_res {r.shape} must be "
                                     f"[{x.partitions}, 1] (one value per partition)", value=r.shape,
                                     limit=(x.partitions, 1))
        _, f0 = ops.binary(op0)
        _, fr = ops.reduce(reduce_op)
        c0, v0 = self._operand(operand0, x.partitions, "tensor_scalar_reduce", "operand0")
        reads = (x,) if v0 is None else (x, v0)
        if self.full:
            (vals,) = self._inputs(x)
            with np.errstate(all="ignore"):
                out = f0(c0, vals) if reverse0 else f0(vals, c0)
            self._store(dst, out)
            self._store(r, fr(np.asarray(out, np.float32), axis=1, keepdims=True))
        dur = cost.tensor_scalar_reduce_cycles(self.spec, x.free_size) * self._clock_ns[DVE]
        return self._issue(DVE, "tensor_scalar_reduce", dur, reads, dst, also_write=r)

    def tensor_partition_reduce(self, dst, data, op) -> int:
        """dst[1, ...] = op over the partitions of data[P, ...] (GpSimd engine, SBUF only)
        [nki.isa.tensor_partition_reduce]; op: add, maximum, bitwise_or, bitwise_and."""
        dst = _view(dst, "dst")
        x = _view(data, "data")
        self._onchip(x, "data", "tensor_partition_reduce", psum_ok=False)
        self._onchip(dst, "dst", "tensor_partition_reduce", psum_ok=False)
        name, fn = ops.reduce(op)
        if dst.partitions != 1 or dst.free_size != x.free_size:
            raise ShapeMismatchError(f"shape mismatch: tensor_partition_reduce of {x.shape} gives one "
                                     f"partition of {x.free_size} elements, dst is {dst.shape}",
                                     value=dst.shape, limit=(1, x.free_size))
        if self.full:
            x.check_initialized()
            vals = np.asarray(x.values()).reshape(x.partitions, -1)
            if name not in ops.BITVEC:
                vals = vals.astype(np.float32)
            self._store(dst, fn(vals, axis=0, keepdims=True))
        cycles = cost.tensor_partition_reduce_cycles(self.spec, x.partitions, x.free_size)
        return self._issue(POOL, "tensor_partition_reduce", cycles * self._clock_ns[POOL], (x,), dst)

    def set_rng_seed(self, seed) -> int:
        """Seed the engines' random number generator with an int or a [1, 1] view (its value is read
        in full mode) [nki.language.random_seed]; a tiny Vector instruction (ASSUMED cost: static)."""
        reads = ()
        if isinstance(seed, (Tensor, View)):
            v = _view(seed, "seed")
            self._onchip(v, "seed", "random_seed")
            reads = (v,)
        if self.full:
            self._seed_values(seed)
        dur = self.spec.vector_static_cycles * self._clock_ns[DVE]
        idx = len(self._records)
        ready, waited = _wait_reads(reads, 0.0, -1)
        start, end, waited = self.times.queue(DVE, ready, waited, dur)
        _record_reads(reads, end, idx)
        return self._append(DVE, "random_seed", start, end, end, 0.0, 0, 0, 0, waited)

    def _seed_values(self, seed) -> None:
        """Full mode: seed the random stream with an int or the value of a [1, 1] view."""
        if isinstance(seed, (Tensor, View)):
            v = _view(seed, "seed")
            v.check_initialized()
            seed = int(np.asarray(v.values()).reshape(-1)[0])
        self._rng = np.random.default_rng(int(seed) & 0xFFFFFFFF)

    def dropout(self, dst, data, rate) -> int:
        """dst = data with each element set to 0 with probability `rate` (a number or a [P, 1] view),
        Vector engine [nki.isa.dropout]; no rescaling. The random stream is NumPy's PCG64 seeded by
        set_rng_seed (0 before any seed): deterministic, not the hardware's generator."""
        dst = _view(dst, "dst")
        x = _view(data, "data")
        self._onchip(x, "data", "dropout")
        self._onchip(dst, "dst", "dropout")
        self._same_tile(dst, x, "dropout", "dst vs data")
        p, pv = self._operand(rate, x.partitions, "dropout", "rate")
        reads = (x,) if pv is None else (x, pv)
        if self.full:
            (vals,) = self._inputs(x)
            rng = getattr(self, "_rng", None)
            if rng is None:
                rng = self._rng = np.random.default_rng(0)
            keep = rng.random(vals.shape, dtype=np.float32) >= np.asarray(p, np.float32).reshape(-1, 1)
            self._store(dst, np.where(keep, vals, np.float32(0)))
        dur = cost.dropout_cycles(self.spec, x.free_size) * self._clock_ns[DVE]
        return self._issue(DVE, "dropout", dur, reads, dst)

    def dma_copy_cast(self, dst, src, queue: int | None = None) -> int:
        """dma_copy that converts src's dtype to dst's on the way, which NeuronCore-v3/-v4 DMA engines
        can do (Trn2/Trn3: nisa.dma_copy with dst and src of different dtypes; ⚠ stated in AWS's
        Trainium2 architecture guide's DMA section, not on the dma_copy page). NeuronCore-v2 (Trn1)
        refuses it: cast on an engine there. Costed as a copy of the larger of the two byte counts."""
        dst = _view(dst, "dst")
        src = _view(src, "src")
        if str(self.spec.generation).lower().lstrip("v") == "2":
            raise DtypeError(f"data type: dma_copy does not convert on NeuronCore-v2 ({self.spec.name}): src "
                             f"{dtypes.name(src.tensor.dtype)}, dst {dtypes.name(dst.tensor.dtype)}; cast with "
                             f"tensor_copy on an engine (DMA casts from NeuronCore-v3 / Trn2 on)",
                             value=src.tensor.dtype, limit=dst.tensor.dtype)
        sk, dk = src.tensor.kind, dst.tensor.kind
        if sk == "psum" or dk == "psum":
            cls = PSUMToHBMError if "hbm" in (sk, dk) else MemoryPlacementError
            raise cls(f"PSUM to HBM: dma_copy {sk.upper()} -> {dk.upper()} is refused; DMA does "
                      f"not reach PSUM. Copy PSUM -> SBUF with tensor_copy, then SBUF -> HBM",
                      value=(sk, dk), limit="SBUF/HBM endpoints")
        if src.size != dst.size:
            raise ShapeMismatchError(f"shape mismatch: dma_copy src {src.shape} -> dst {dst.shape}",
                                     value=src.shape, limit=dst.shape)
        if self.full:
            src.check_initialized()
            values = np.asarray(src.values(), dtype=np.float32) if dtypes.is_float(src.tensor.dtype) \
                else np.asarray(src.values())
            dst.write(np.reshape(values, dst.shape).astype(dst.tensor.dtype))
        return self._schedule_dma(dst, src, (src,), max(src.nbytes, dst.nbytes), queue, "dma_copy")

    def dma_transpose(self, dst, src, queue: int | None = None) -> int:
        """dst[B, A] = src[A, B].T moved by a DMA (nisa.dma_transpose, nl.load_transpose2d): src in
        HBM or SBUF, dst in SBUF (or HBM). From NeuronCore-v3 on the DMA engines transpose in
        hardware into SBUF and may convert the dtype on the way; on NeuronCore-v2 it is a strided
        DMA of the same dtype (`cost.dma_transpose_cost`)."""
        dst = _view(dst, "dst")
        src = _view(src, "src")
        sk, dk = src.tensor.kind, dst.tensor.kind
        if sk == "psum" or dk == "psum":
            raise MemoryPlacementError(f"operand memory: dma_transpose {sk.upper()} -> {dk.upper()} is "
                                       f"refused; DMA does not reach PSUM", value=(sk, dk),
                                       limit="SBUF/HBM endpoints")
        if len(src.shape) != 2 or tuple(dst.shape) != tuple(src.shape[::-1]):
            raise ShapeMismatchError(f"shape mismatch: dma_transpose of src {src.shape} into dst "
                                     f"{dst.shape}; dst must be the 2-D src reversed",
                                     value=dst.shape, limit=tuple(src.shape[::-1]))
        if src.tensor.dtype != dst.tensor.dtype and str(self.spec.generation).lower().lstrip("v") == "2":
            raise DtypeError(f"data type: dma_transpose does not convert on NeuronCore-v2 ({self.spec.name}): "
                             f"src {dtypes.name(src.tensor.dtype)}, dst {dtypes.name(dst.tensor.dtype)}",
                             value=src.tensor.dtype, limit=dst.tensor.dtype)
        if self.full:
            src.check_initialized()
            values = np.asarray(src.values())
            if src.tensor.dtype != dst.tensor.dtype and dtypes.is_float(src.tensor.dtype):
                values = values.astype(np.float32)
            dst.write(np.ascontiguousarray(values.reshape(src.shape).T).astype(dst.tensor.dtype))
        return self._schedule_dma(dst, src, (src,), max(src.nbytes, dst.nbytes), queue, "dma_transpose")

    def vector_transpose(self, dst, src) -> int:
        """dst[F, P] = src[P, F].T on the Vector engine (nisa.nc_transpose(engine=nisa.vector_engine)):
        SBUF or PSUM operands, at most 32 x 32 [nki.isa.nc_transpose: "Vector Engine ... 32x32"].
        Cost: the Vector model for one input (static + N)."""
        dst = _view(dst, "dst")
        src = _view(src, "src")
        self._onchip(src, "src", "nc_transpose")
        self._onchip(dst, "dst", "nc_transpose")
        P, F = src.partitions, src.free_size
        if P > 32 or F > 32:
            raise MatmulShapeError(f"matmul tile shape: nc_transpose on the Vector engine of [{P}, {F}]; both "
                                   f"sides must be <= 32 (use the Tensor engine for larger tiles)",
                                   value=(P, F), limit=32)
        if dst.partitions != F or dst.free_size != P:
            raise ShapeMismatchError(f"shape mismatch: nc_transpose dst {dst.shape}, expected [{F}, {P}]",
                                     value=dst.shape, limit=(F, P))
        if self.full:
            self._transpose_values(dst, src)
        dur = self._cost_ns(DVE, "vector_transpose", (src,), (dst,))
        return self._issue(DVE, "nc_transpose", dur, (src,), dst)

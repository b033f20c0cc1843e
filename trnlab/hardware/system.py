"""System instructions: the engines' random number generators, their scalar registers, the core barrier
and the DMA engines' arithmetic (dma_compute).

NKI 0.7 names (AWS NKI API reference, awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/nki/api/
generated/nki.isa.<name>.html), as methods of `NeuronCore` (`SystemInstructions`, composed into it):

    rng(dst, engine)              dst = 32 random bits per element, the low bits kept     Vector | GpSimd
    rand2(dst, low, high)         dst = uniform in [low, high] (NeuronCore-v4+)             Vector
    rand(dst)                     dst = uniform in [0, 1) (nl.rand; any generation)        Vector
    rand_set_state(src, engine)   every lane's generator state = src's row (v3+)           GpSimd | Vector (v4+)
    rand_get_state(dst, engine)   dst's rows = every lane's generator state (v3+)          GpSimd | Vector (v4+)
    register_move(register, value, source)   register = value (or register `source`)      GpSimd (ASSUMED)
    register_load(register, src)  register = src's one 32-bit value (HBM or SBUF)           GpSimd (ASSUMED)
    register_store(dst, register) dst's one element = register                              GpSimd (ASSUMED)
    register_op(register, a, op, b, imm, reverse, bits)  register = a <op> (register b or imm), wrapping
                                  at `bits` (32 or 64): NkiScalar arithmetic (+, -, *); or 1 / 0,
                                  an int32 comparison (<, <=, >, >=, ==, !=)                  GpSimd (ASSUMED)
    register_rank(register, ring, iteration)  register = this core's rank, or (ring) the rank whose data
                                  it holds after `iteration` ring steps                  GpSimd (ASSUMED)
    core_barrier(data, engine)    wait for this core's writes to data and the peer core        GpSimd (default)
    dma_compute(dst, src0, ...)   dst = src0 + src1 + ... in fp32, cast to dst (v3+)             a DMA queue

(`set_rng_seed` — nl.random_seed, nisa.set_rng_seed — is the Vector engine's, in `vector.py`; it seeds
this module's Vector generators too.) The generators are `prng.py`'s XORWOW, one state per lane and
engine, kept on the core for the rest of the run as AWS says the engine keeps it; the registers are the
core's too (`_system_state`), so a register loaded from data at run time is stored back with that
value. The values core of the fast path shares the real core's state (`fast/values_core.bind`).

Costs: AWS publishes no cycle figure for any of these. ASSUMED: rng and rand2 are one pass over the
elements, like a one-input Vector instruction (static + N cycles, `cost.vector_cycles`); the state
moves are one pass over the state words; a register instruction is an engine's static overhead;
dma_compute is one DMA of dst's bytes (the sources stream through the engines' compute pipeline
together: "cast to the output data type in a pipelined fashion", nki.isa.dma_compute).
"""
from __future__ import annotations

import numpy as np

from . import cost, dtypes, prng
from .dependencies import record_reads, record_write, wait_reads, wait_write
from .engines import DVE, POOL, port_needs
from .errors import DtypeError, EngineError, HardwareError, MemoryPlacementError, ShapeMismatchError
from .operands import _bytes_by_memory, _free_byte_range, _view
from .records import ISSUE, ComputeIssue
from .shared_hbm import meet
from .tensor import View

_RNG_DTYPES = ("int8", "int16", "int32", "uint8", "uint16", "uint32")
_RAND2_DTYPES = ("float8_e4m3", "float8_e5m2", "float16", "bfloat16", "float32", "tfloat32") + _RNG_DTYPES
_ENGINE_NAMES = {None: None, "unknown": None, "vector": "dve", "dve": "dve", "gpsimd": "pool", "pool": "pool"}
# instructions with state beyond their operands (the generators, the registers): kept in program order
STATEFUL_OPCODES = ("rng", "rand2", "rand", "rand_set_state", "rand_get_state", "register_move", "register_load",
                    "register_store", "register_rank", "register_op", "core_barrier", "dma_copy_register_offset",
                    "tensor_register_offset")
# NkiScalar arithmetic ("At 64 bits only addition, subtraction and multiplication are available", nki.isa.NkiScalar)
REGISTER_OPS = {"add": lambda x, y: x + y, "subtract": lambda x, y: x - y, "multiply": lambda x, y: x * y}
# int32 NkiScalar comparisons: 1 or 0 (read by nl.if_else, the one use AWS's pages give their result)
REGISTER_COMPARISONS = {"less": lambda x, y: int(x < y), "less_equal": lambda x, y: int(x <= y),
                        "greater": lambda x, y: int(x > y), "greater_equal": lambda x, y: int(x >= y),
                        "equal": lambda x, y: int(x == y), "not_equal": lambda x, y: int(x != y)}


def register_value(state: dict, register: int) -> int:
    """The signed value register `register` holds (two's complement of its width: 32 bits, or 64 for an
    int64 NkiScalar), from a core's `_system_state()`."""
    bits = state.get("register_bits", {}).get(int(register), 32)
    word = state["registers"][int(register)] & ((1 << bits) - 1)
    return word - (1 << bits) if word >> (bits - 1) else word


class GenerationError(HardwareError):
    """An instruction that this NeuronCore generation does not have."""
    rule = "NeuronCore generation"


class RandomRangeError(HardwareError):
    """rand2's range is empty: min must be below max (nki.isa.rand2: "min < max for valid range")."""
    rule = "rand2 range"


class RegisterError(HardwareError):
    """A register instruction broke its rule (one 32-bit element, a register that holds a value)."""
    rule = "register"


def _generation(core) -> int:
    return int(str(core.spec.generation).lower().lstrip("v") or 3)


def _needs_generation(core, opcode: str, first: int) -> None:
    gen = _generation(core)
    if gen < first:
        raise GenerationError(f"NeuronCore generation: {opcode} needs NeuronCore-v{first} or newer, this core is "
                              f"NeuronCore-v{gen} ({core.spec.name})", value=f"v{gen}", limit=f"v{first}+")


class SystemInstructions:
    """NeuronCore's random number, register, barrier and DMA-compute instructions (composed into
    `core.NeuronCore`)."""

    # -- state kept on the core ----------------------------------------------------------------
    def _system_state(self) -> dict:
        """The engines' generator states and the registers, created on first use; the values core
        of the fast path binds the real core's (one dict, mutated in place)."""
        state = self.__dict__.get("_system")
        if state is None:
            state = self._system = {"prng": {}, "registers": {}}
        return state

    def _prng_state(self, engine: str) -> np.ndarray:
        states = self._system_state()["prng"]
        state = states.get(engine)
        if state is None:
            state = states[engine] = prng.seeded_state(0, self.spec.partitions, engine)
        return state

    def _seed_generators(self, seed: int) -> None:
        """nl.random_seed / nisa.set_rng_seed: the Vector engine's generators from a 32-bit seed."""
        self._system_state()["prng"]["dve"] = prng.seeded_state(seed, self.spec.partitions, "dve")

    # -- one issue path: operands in any memory, no write or one -------------------------------
    def _issue_system(self, eid: int, opcode: str, dur: float, reads: tuple, writes: tuple) -> int:
        """Schedule an instruction reading `reads` and writing `writes` (0 or 1 views; a register
        instruction may touch HBM) on engine `eid`: `_issue`'s steps, for the reference core, the
        trace-time describer (a `ComputeIssue`) and the values core (nothing to schedule) alike."""
        from .core import NeuronCore
        onchip = tuple(v for v in reads + writes if v.tensor.kind != "hbm")
        sbuf, psum = _bytes_by_memory(onchip)
        hidden = self._vector_hidden_ns(reads, writes) if eid == DVE and (reads or writes) else 0.0
        describe = getattr(self, "_describe", None)
        if describe is not None:                     # the trace-time describer (describe.py)
            sbuf_port, psum_port = port_needs(self.spec, eid, sbuf, psum)
            if psum_port == "bank":
                psum_port = tuple((self.buffer_of(v.tensor),) + _free_byte_range(v)
                                  for v in onchip if v.tensor.kind == "psum")
            return describe(ComputeIssue(ISSUE, eid, opcode, dur, tuple(self._ref(v) for v in reads),
                                         tuple(self._ref(v) for v in writes), 0.0, sbuf, psum, sbuf_port,
                                         psum_port, hidden))
        if type(self)._issue is not NeuronCore._issue:
            return -1                                # the values core: values only, no scheduling
        ready, waited = wait_reads(reads, 0.0, -1)
        for w in writes:
            ready, waited, _ = wait_write(w, ready, waited)
        idx = len(self._records)
        start, end, waited = self.engine_times.compute(eid, ready, waited, dur, hidden,
                                                       self._port_keys(eid, onchip, sbuf, psum), idx)
        record_reads(reads, end, idx)
        for w in writes:
            record_write(w, end, idx)
        return self._append(eid, opcode, start, end, end, 0.0, 0, sbuf, psum, waited)

    def _rng_engine(self, engine, opcode: str, default: str, gpsimd_from: int, vector_from: int) -> int:
        key = _ENGINE_NAMES.get(getattr(engine, "name", engine), "?")
        key = default if key is None else key
        gen = _generation(self)
        allowed = [name for name, first in (("dve", vector_from), ("pool", gpsimd_from)) if gen >= first]
        if key not in allowed:
            raise EngineError(f"engine: {opcode} cannot run on {engine!r} on NeuronCore-v{gen}; allowed: {allowed}",
                              value=engine, limit=allowed)
        return DVE if key == "dve" else POOL

    def _rng_operand(self, v: View, what: str, opcode: str, eid: int, allowed: tuple, psum_ok: bool = True) -> None:
        self._onchip(v, what, opcode, psum_ok=psum_ok and eid != POOL)
        name = dtypes.name(v.tensor.dtype)
        if name not in allowed:
            raise DtypeError(f"data type: {opcode} {what} must be one of {', '.join(allowed)}, got {name}",
                             value=name, limit=allowed)

    def _pass_ns(self, eid: int, free_size: int) -> float:
        """ASSUMED: one pass over `free_size` elements per lane, as a one-input Vector instruction."""
        return cost.vector_cycles(self.spec, free_size, 1) * self._clock_ns[eid]

    # -- random numbers --------------------------------------------------------------------------
    def rng(self, dst, engine="unknown") -> int:
        """dst = 32 random bits per element from the engine's generators, the least significant bits kept
        (an integer dst of 8, 16 or 32 bits) [nki.isa.rng]. Vector on NeuronCore-v2; GpSimd or Vector
        from v3 (default: Vector, ASSUMED "the best engine"); GpSimd cannot write PSUM."""
        dst = _view(dst, "dst")
        eid = self._rng_engine(engine, "rng", "dve", gpsimd_from=3, vector_from=2)
        self._rng_operand(dst, "dst", "rng", eid, _RNG_DTYPES)
        if self.full:
            bits = prng.draw(self._prng_state(_engine_key(eid)), dst.free_size)[:dst.partitions]
            dst.write(prng.truncate(bits, dst.tensor.dtype).reshape(dst.shape))
        return self._issue_system(eid, "rng", self._pass_ns(eid, dst.free_size), (), (dst,))

    def rand2(self, dst, low, high) -> int:
        """dst = uniform random values in [low, high] (numbers or [P, 1] views), computed in fp32 and
        converted to dst's dtype [nki.isa.rand2]; Vector engine, NeuronCore-v4 and newer; low < high."""
        dst = _view(dst, "dst")
        _needs_generation(self, "rand2", 4)
        self._rng_operand(dst, "dst", "rand2", DVE, _RAND2_DTYPES)
        lo, lo_view = self._operand(low, dst.partitions, "rand2", "min")
        hi, hi_view = self._operand(high, dst.partitions, "rand2", "max")
        reads = tuple(v for v in (lo_view, hi_view) if v is not None)
        if self.full:
            lo_v = np.asarray(lo, np.float32).reshape(-1, 1)
            hi_v = np.asarray(hi, np.float32).reshape(-1, 1)
            if np.any(lo_v >= hi_v):
                raise RandomRangeError(f"rand2 range: min must be below max, got min={lo_v.ravel()[:4]} "
                                         f"max={hi_v.ravel()[:4]}", value=(lo, hi), limit="min < max")
            bits = prng.draw(self._prng_state("dve"), dst.free_size)[:dst.partitions]
            self._store(dst, prng.uniform(bits, lo_v, hi_v))
        elif not reads and float(lo) >= float(hi):
            raise RandomRangeError(f"rand2 range: min must be below max, got min={lo}, max={hi}",
                                     value=(lo, hi), limit="min < max")
        return self._issue_system(DVE, "rand2", self._pass_ns(DVE, dst.free_size), reads, (dst,))

    def rand(self, dst) -> int:
        """dst = uniform random values in [0, 1), fp32 converted to dst's dtype [nki.language.rand], from the
        Vector engine's generators (those nl.random_seed seeds). ASSUMED: one Vector instruction, rand2's
        conversion with min 0, max 1, on every generation (AWS does not say how nl.rand is lowered)."""
        dst = _view(dst, "dst")
        self._rng_operand(dst, "dst", "rand", DVE, _RAND2_DTYPES)
        if self.full:
            bits = prng.draw(self._prng_state("dve"), dst.free_size)[:dst.partitions]
            self._store(dst, prng.uniform(bits, 0.0, 1.0))
        return self._issue_system(DVE, "rand", self._pass_ns(DVE, dst.free_size), (), (dst,))

    def _state_view(self, v, what: str, opcode: str, eid: int, sbuf_only: bool) -> View:
        v = _view(v, what)
        self._rng_operand(v, what, opcode, eid, ("uint32",), psum_ok=not sbuf_only)
        words = prng.WORDS[_engine_key(eid)]
        if v.free_size != words:
            raise ShapeMismatchError(f"shape mismatch: {opcode} {what} has {v.free_size} uint32 words per partition; "
                                     f"the {_engine_key(eid)} engine's XORWOW state is {words}",
                                     value=v.free_size, limit=words)
        return v

    def rand_set_state(self, src, engine="unknown") -> int:
        """Lane p's generator state = src's partition p (uint32, 6 words for GpSimd, 24 for Vector)
        [nki.isa.rand_set_state]; NeuronCore-v3+ (GpSimd), Vector from v4 (default: GpSimd)."""
        _needs_generation(self, "rand_set_state", 3)
        eid = self._rng_engine(engine, "rand_set_state", "pool", gpsimd_from=3, vector_from=4)
        src = self._state_view(src, "src_seeds", "rand_set_state", eid, sbuf_only=_generation(self) < 4)
        if self.full:
            src.check_initialized()
            values = np.asarray(src.values()).reshape(src.partitions, -1).astype(np.uint32)
            state = self._prng_state(_engine_key(eid))
            state[:src.partitions] = values
        return self._issue_system(eid, "rand_set_state", self._pass_ns(eid, src.free_size), (src,), ())

    def rand_get_state(self, dst, engine="unknown") -> int:
        """dst's partition p = lane p's generator state (uint32, 6 / 24 words) [nki.isa.rand_get_state];
        SBUF on NeuronCore-v3, SBUF or PSUM from v4 (GpSimd: SBUF only)."""
        _needs_generation(self, "rand_get_state", 3)
        eid = self._rng_engine(engine, "rand_get_state", "pool", gpsimd_from=3, vector_from=4)
        dst = self._state_view(dst, "dst", "rand_get_state", eid, sbuf_only=_generation(self) < 4)
        if self.full:
            state = self._prng_state(_engine_key(eid))
            dst.write(state[:dst.partitions].copy().reshape(dst.shape))
        return self._issue_system(eid, "rand_get_state", self._pass_ns(eid, dst.free_size), (), (dst,))

    # -- registers --------------------------------------------------------------------------------
    def _register_ns(self) -> float:
        """ASSUMED: a register instruction costs its engine's static overhead (GpSimd)."""
        return self.spec.vector_static_cycles * self._clock_ns[POOL]

    def register_move(self, register: int, value: int | None = None, source: int = -1) -> int:
        """register = value (a compile-time int) or the value of register `source` [nki.isa.register_move]."""
        if (value is None) == (source < 0):
            raise RegisterError("register: register_move takes either a constant value or a source register",
                                value=(value, source), limit="one of value, source")
        state = self._system_state()
        registers, widths = state["registers"], state.setdefault("register_bits", {})
        if value is not None:
            registers[int(register)] = int(value) & 0xFFFFFFFF
            widths.pop(int(register), None)
        elif int(source) in registers:
            registers[int(register)] = registers[int(source)]
            widths[int(register)] = widths.get(int(source), 32)
        return self._issue_system(POOL, "register_move", self._register_ns(), (), ())

    def register_op(self, register: int, a: int, op: str, b: int = -1, imm: int | None = None,
                    reverse: bool = False, bits: int = 32) -> int:
        """register = a <op> (register `b`, or the integer `imm`) — with `reverse`, (b or imm) <op> a — in
        `bits`-bit two's complement, wrapping ("arithmetic that outgrows 32 bits wraps rather than promoting",
        nki.isa.NkiScalar); op add, subtract or multiply, or a comparison (`REGISTER_COMPARISONS`, 32 bits
        only: 1 if it holds, else 0). A register instruction (GpSimd, ASSUMED)."""
        compute = REGISTER_OPS.get(op) or (REGISTER_COMPARISONS.get(op) if bits == 32 else None)
        if compute is None or (imm is None) == (int(b) < 0) or bits not in (32, 64):
            raise RegisterError(f"register: register_op {op!r} takes one of {sorted(REGISTER_OPS)} (32 or 64 "
                                f"bits) or {sorted(REGISTER_COMPARISONS)} (32 bits), a second register or an integer "
                                f"(not both); got b={b}, imm={imm}, bits={bits}", value=(op, b, imm, bits),
                                limit=tuple(REGISTER_OPS) + tuple(REGISTER_COMPARISONS))
        state = self._system_state()
        registers, widths = state["registers"], state.setdefault("register_bits", {})
        if int(a) in registers and (imm is not None or int(b) in registers):
            x = register_value(state, a)
            y = int(imm) if imm is not None else register_value(state, b)
            x, y = (y, x) if reverse else (x, y)
            registers[int(register)] = compute(x, y) & ((1 << bits) - 1)
            widths[int(register)] = bits
        return self._issue_system(POOL, "register_op", self._register_ns(), (), ())

    def _scalar_view(self, v, what: str, opcode: str, bits: int = 32) -> View:
        v = _view(v, what)
        if v.tensor.kind == "psum":
            raise MemoryPlacementError(f"operand memory: {opcode} {what} is in PSUM; registers move to and from "
                                       f"HBM or SBUF", value="psum", limit=("hbm", "sbuf"))
        if int(np.prod(v.shape)) != 1 or np.dtype(v.tensor.dtype).itemsize > bits // 8:
            raise RegisterError(f"register: {opcode} {what} must be one element of at most {bits} bits ([1] or "
                                f"[1, 1]), got {tuple(v.shape)} {np.dtype(v.tensor.dtype).name}",
                                value=tuple(v.shape), limit=f"one {bits}-bit element")
        return v

    def register_load(self, register: int, src, bits: int = 32) -> int:
        """register = src's one value (HBM or SBUF, at most 32 bits; `bits=64`: an int64 NkiScalar's)
        [nki.isa.register_load, nki.isa.scalar_load]."""
        src = self._scalar_view(src, "src", "register_load", bits)
        if self.full:
            src.check_initialized()
            value = np.asarray(src.values()).reshape(-1)[0]
            state = self._system_state()
            state["registers"][int(register)] = int(value) & ((1 << bits) - 1)
            state.setdefault("register_bits", {})[int(register)] = bits
        return self._issue_system(POOL, "register_load", self._register_ns(), (src,), ())

    def register_store(self, dst, register: int, bits: int = 32) -> int:
        """dst's one element = the register's value [nki.isa.register_store, nki.isa.scalar_store]."""
        dst = self._scalar_view(dst, "dst", "register_store", bits)
        if self.full:
            state = self._system_state()
            if int(register) not in state["registers"]:
                raise RegisterError(f"register: register_store of register {register}, which holds no value "
                                    f"(allocated without one and never moved or loaded)",
                                    value=register, limit="an initialised register")
            value = register_value(state, register)
            if np.dtype(dst.tensor.dtype).kind != "i":      # an unsigned dst holds the register's bits
                value &= (1 << 8 * np.dtype(dst.tensor.dtype).itemsize) - 1
            self._store(dst, np.array([value]).astype(dst.tensor.dtype))
        return self._issue_system(POOL, "register_store", self._register_ns(), (), (dst,))

    def register_rank(self, register: int, ring: tuple = (), iteration: int = 0) -> int:
        """register = this core's rank in its cluster (0 on a core of no cluster) [nki.collectives.rank_id];
        with `ring` (the rank lists of an implicit ring permute), the rank whose data this rank holds after
        `iteration` ring steps: its own at 0, then its predecessors' in turn
        [nki.collectives.collective_permute_implicit_current_processing_rank_id]."""
        rank = int(getattr(self, "_cc_rank", 0) or 0) // int(getattr(self, "_cc_lnc", 1) or 1)   # the logical rank
        for group in ring:
            if rank in group:                       # each step receives the predecessor's data
                rank = int(group[(list(group).index(rank) - int(iteration)) % len(group)])
                break
        self._system_state()["registers"][int(register)] = rank
        return self._issue_system(POOL, "register_rank", self._register_ns(), (), ())

    # -- synchronisation --------------------------------------------------------------------------
    def core_barrier(self, data, engine="pool") -> int:
        """The barrier of the two cores of a pair over the shared HBM tensor `data` [nki.isa.core_barrier],
        on `engine` (GpSimd by default): it waits for this core's earlier accesses to data (and later ones
        wait for it: it counts as a write of data, values unchanged) and, on a core of a
        `distributed.cluster.Cluster`, for the peer core (ranks 2k, 2k + 1) to reach its barrier — matched
        in program order like a collective, the peer's semaphore arriving a send/recv of 4 bytes later
        (ASSUMED). On a core alone it waits for nothing else. ASSUMED cost: the engine's static overhead.
        Like a collective it is described with no duration of its own: its program is replayed
        instruction by instruction (and keeps program order)."""
        data = _view(data, "data")
        eid = self._engine(engine, "core_barrier")
        dur = self.spec.vector_static_cycles * self._clock_ns[eid]
        describe = getattr(self, "_describe", None)
        if describe is not None:                     # duration 0: timed by the run (the peer), not the trace
            return describe(ComputeIssue(ISSUE, eid, "core_barrier", 0.0, (self._ref(data),), (self._ref(data),),
                                         0.0, 0, 0, False, None, 0.0))
        from .core import NeuronCore
        if type(self)._issue is not NeuronCore._issue:
            return -1                                # the values core (not used for such programs)
        ready, waited = wait_reads((data,), 0.0, -1)
        ready, waited, _ = wait_write(data, ready, waited)
        fabric = getattr(self, "_cc_fabric", None)
        if fabric is not None:
            from .collective import Request
            rank = self._cc_rank
            pair = (rank - rank % 2, rank - rank % 2 + 1)
            arrive = max(ready, self._free[eid])
            _, peer_ready = meet(self, fabric, Request("core_barrier", rank, pair, data, data, arrive, {}, self),
                                 barrier=True)
            if peer_ready > ready:
                ready = peer_ready
        idx = len(self._records)
        start, end, waited = self.engine_times.compute(eid, ready, waited, dur, 0.0, (), idx)
        record_reads((data,), end, idx)
        record_write(data, end, idx)                 # what reads data after the barrier waits for it
        return self._append(eid, "core_barrier", start, end, end, 0.0, 0, 0, 0, waited)

    # -- arithmetic in the DMA engines ------------------------------------------------------------
    def dma_compute(self, dst, src0, src1=None, src2=None, src3=None, queue: int | None = None) -> int:
        """dst = src0 + src1 + ... (up to four sources), each converted to fp32, the sum converted to dst's
        dtype, computed inside a DMA engine [nki.isa.dma_compute: reduce_op nl.add, scales 1.0]; sources and
        dst in HBM or SBUF, the same number of elements; NeuronCore-v3 and newer (the page is for Trn2, Trn3)."""
        dst = _view(dst, "dst")
        srcs = tuple(_view(s, f"src{i}") for i, s in enumerate((src0, src1, src2, src3)) if s is not None)
        _needs_generation(self, "dma_compute", 3)
        for name, v in (("dst", dst),) + tuple((f"src{i}", s) for i, s in enumerate(srcs)):
            if v.tensor.kind == "psum":
                raise MemoryPlacementError(f"operand memory: dma_compute {name} is in PSUM; the DMA engines read "
                                           f"and write HBM or SBUF", value="psum", limit=("hbm", "sbuf"))
        for i, s in enumerate(srcs):
            if s.size != dst.size:
                raise ShapeMismatchError(f"shape mismatch: dma_compute src{i} {s.shape} and dst {dst.shape} hold "
                                         f"different numbers of elements", value=s.shape, limit=dst.shape)
        if self.full:
            total = np.zeros(dst.size, np.float32)
            for s in srcs:
                s.check_initialized()
                total += np.asarray(s.values(), np.float32).reshape(-1)
            dst.write(total.reshape(dst.shape).astype(dst.tensor.dtype))
        return self._schedule_dma(dst, srcs[0], srcs, dst.nbytes, queue, "dma_compute")


def _engine_key(eid: int) -> str:
    return "dve" if eid == DVE else "pool"


"""The trace-time describer: an instruction checked and costed, then described instead of scheduled.

A program's timing replay (`replay_timing.py`) needs, per instruction, what it asks of the engines:
engine, duration, operands as (buffer id, box), bytes, the ports it needs — a description
(`records.ComputeIssue`, `MatmulIssue`, `TensorIssue`, `DmaIssue`, `SeedIssue`, `PrintIssue`).
`DescribingCore` is a timing-mode `NeuronCore` whose instruction methods run unchanged (the rule
checks, the pure cost model) but whose last step, scheduling, is replaced by a description of the
issue. The trace (`trace.Recorder`) records these as it goes, so a traced program needs no second
pass; `describe` describes a program loaded from JSON (or rewritten) once.
"""
from __future__ import annotations

from . import dtypes, onezero
from . import retype as _retype
from .core import NeuronCore, _bytes_by_memory, _free_byte_range, _view
from .dependencies import tracked
from .engines import DVE, FIRST_DMA, PE, port_needs
from .memory import check_pe_result
from .records import (DMA, ISSUE, MATMUL, PE_ISSUE, PRINT, SEED, ComputeIssue, DmaIssue, MatmulIssue,
                      PrintIssue, SeedIssue, TensorIssue)
from .tensor import Tensor, View
from .tensor_engine import pe_tiles


class DescribingCore(NeuronCore):
    """A timing-mode core that checks and costs each instruction, then describes its issue
    (`issued[-1]`) instead of scheduling it. `buffer_of(tensor)` names each operand's buffer."""

    def __init__(self, spec, buffer_of, name: str = "describe"):
        super().__init__(spec, mode="timing", name=name)
        self.buffer_of = buffer_of
        self.issued: list = []

    def _ref(self, v: View) -> tuple:
        tensor, box = tracked(v)                  # a reshaped alias's access is its base's
        return (self.buffer_of(tensor), box)

    def _describe(self, description) -> int:
        self.issued.append(description)
        return len(self.issued) - 1

    def _issue(self, eid, opcode, dur, reads, write, flops=0.0, also_write=None):
        writes = (write,) if also_write is None else (write, also_write)
        hidden = self._vector_hidden_ns(reads, writes) if eid == DVE else 0.0   # static facts
        sbuf, psum = _bytes_by_memory(reads + writes)
        sbuf_port, psum_port = port_needs(self.spec, eid, sbuf, psum)
        if psum_port == "bank":         # the banks are known once the tiles are placed (resolve)
            psum_port = tuple((self.buffer_of(v.tensor),) + _free_byte_range(v)
                              for v in reads + writes if v.tensor.kind == "psum")
        return self._describe(ComputeIssue(ISSUE, eid, opcode, dur, tuple(self._ref(v) for v in reads),
                                           tuple(self._ref(v) for v in writes), flops, sbuf, psum,
                                           sbuf_port, psum_port, hidden))

    def nc_matmul(self, dst, stationary, moving, accumulate=None, tile_position=None, tile_size=None,
                  is_stationary_onezero: bool = False, is_moving_onezero: bool = False, stationary_dtype=None,
                  moving_dtype=None) -> int:
        if stationary_dtype or moving_dtype:        # a tile retyped by .view(dtype) (retype.py)
            stationary, moving = _retype.typed_pair(stationary, stationary_dtype, moving, moving_dtype)
        # the rules and the cost depend only on the operands' shapes, places and dtypes (and the
        # one/zero hints): checked and costed once per such triple (a tiled loop issues the same
        # matmul thousands of times)
        views = (_view(dst, "dst"), _view(stationary, "stationary"), _view(moving, "moving"))
        key = tuple((v.shape, v.partitions, v.free_size, v.part_start, v.part_first, v.tensor.kind,
                     _retype.dtype_of(v)) for v in views)
        hints = None
        if is_stationary_onezero or is_moving_onezero:
            hints = onezero.hint_attrs(is_stationary_onezero, is_moving_onezero)
            key += (is_stationary_onezero, is_moving_onezero)
        checked = self._matmul_checked.get(key)
        if checked is None:
            checked = self._matmul_checked[key] = self._check_matmul(*views, hints)[6:]
        busy_ns, latency_ns, load_ns, flops, sbuf, psum = checked
        dst, st, mv = views
        check_pe_result(self.spec, dst, "nc_matmul")      # where in PSUM: not part of the cached key
        tiles = 0 if tile_position is None and tile_size is None else \
            pe_tiles(self.spec, tile_position, tile_size, st.partitions, st.free_size)
        return self._describe(MatmulIssue(MATMUL, self._ref(dst), self._ref(st), self._ref(mv), busy_ns,
                                          latency_ns, load_ns, flops, sbuf, psum, tiles))

    def _pe_issue(self, opcode, st, reads, dst, flops, sbuf, psum, tiles: int = 0, attrs: dict | None = None):
        busy_ns, latency_ns, load_ns = self._pe_cost(opcode, st, reads, dst, attrs)
        return self._describe(TensorIssue(PE_ISSUE, opcode, self._ref(st), tuple(self._ref(v) for v in reads),
                                          self._ref(dst), busy_ns, latency_ns, load_ns, flops, sbuf, psum, tiles))

    def _schedule_dma(self, dst, src, reads, nbytes, queue, opcode, costed_dst=None) -> int:
        c = self._dma_cost(dst if costed_dst is None else costed_dst, src, nbytes, opcode)
        sbuf = (nbytes if src.tensor.kind == "sbuf" else 0) + (nbytes if dst.tensor.kind == "sbuf" else 0)
        return self._describe(DmaIssue(DMA, opcode, self._ref(dst), tuple(self._ref(v) for v in reads),
                                       nbytes, self._dma_queue(queue), c.fixed_ns, c.cycles,
                                       c.dma_engine_ns, c.hbm_bytes, sbuf))

    def set_rng_seed(self, seed) -> int:
        reads = ()
        if isinstance(seed, (Tensor, View)):
            v = _view(seed, "seed")
            self._onchip(v, "seed", "random_seed")
            reads = (self._ref(v),)
        dur = self.spec.vector_static_cycles * self._clock_ns[DVE]
        return self._describe(SeedIssue(SEED, reads, dur))

    def device_print(self, prefix: str, src) -> int:
        src = _view(src, "src")
        return self._describe(PrintIssue(PRINT, prefix,
                                         f"<{src.shape} {dtypes.name(src.tensor.dtype)}, timing mode>"))


def engine_of(description, engines: list) -> str:
    """The engine a description names ("dma" when the queue is chosen at run time)."""
    kind = description.kind
    if kind == ISSUE:
        return engines[description.engine]
    if kind in (MATMUL, PE_ISSUE):
        return engines[PE]
    if kind == DMA:
        q = description.queue
        return "dma" if q is None else engines[FIRST_DMA + q]
    if kind == SEED:
        return engines[DVE]
    return ""


def describe(program, spec) -> list:
    """Descriptions of every instruction of an allocated `program` on `spec` (checks included)."""
    from .program import locate_instruction
    from .replay import plan
    p = plan(program)
    buffers = program.buffers
    tensors, bids = {}, {}
    core = DescribingCore(spec, lambda t: bids[id(t)])
    memories = {"sbuf": core.sbuf, "psum": core.psum}
    for b in buffers:
        if b.memory == "hbm" and b.alias_of is None:
            core.hbm.capacity += b.nbytes       # the device's capacity is checked at the launch
            t = core.hbm.allocate(b.shape, b.dtype, name=b.name)
            tensors[b.id], bids[id(t)] = t, b.id
    for b in buffers:                           # reshaped aliases: their accesses are their base's
        if b.memory == "hbm" and b.alias_of is not None:
            t = core.hbm.alias(tensors[b.alias_of], b.shape, name=b.name, dtype=b.dtype)
            tensors[b.id], bids[id(t)] = t, b.id
    out = []
    for k, (opcode, attrs, operands, line, _region, allocs, frees) in enumerate(p.steps):
        for bid in allocs:
            b = buffers[bid]
            t = memories[b.memory].allocate(b.shape, b.dtype, b.name, b.partition_axis, offset=b.offset)
            tensors[bid], bids[id(t)] = t, bid
        kwargs = dict(attrs)
        for name, bid, index in operands:
            t = tensors[bid]
            kwargs[name] = t.full if index is None else View(t, index)
        try:
            i = getattr(core, opcode)(**kwargs)
        except Exception as error:
            raise locate_instruction(error, program, k)
        out.append(core.issued[i])
        for bid in frees:
            memories[buffers[bid].memory].free(tensors.pop(bid))
    program.matmul_dtypes = set(core._matmul_dtypes)
    return out

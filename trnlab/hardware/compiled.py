"""Compiled timing replay: a checked program as flat lists, replayed timing-only in one tight loop.

A program that was traced was already checked: the trace ran every instruction through the core's
rule checks. What a timing replay still has to do is scheduling — and most of the scheduler's work
does not depend on time at all: which earlier accesses an instruction's operands overlap, which
records a write covers, when a record list is merged, which bytes a new tile inherits from a freed
one, which PSUM banks an instruction touches, what each instruction costs. Only the *values* (start,
end, ready times) and a few choices made on them (the DMA queue free first, the earliest free slot
of a shared port or channel) change from run to run.

So the program is compiled once (`compiled_for`, cached on the Program):

1. **describe**: each instruction is issued to a `DescribingCore` — a timing-mode `NeuronCore`
   whose instruction methods run unchanged (rule checks, the pure cost model) but whose last step,
   scheduling, is replaced by a description of the issue: engine, duration, operands as
   (buffer id, box), bytes, the ports it needs. The trace records these descriptions as it goes
   (`trace.Recorder`), so a traced program needs no second pass; a program loaded from JSON is
   described once here.
2. **resolve**: the scheduler's bookkeeping is run once on *nodes* instead of times: per
   instruction, the ordered list of the earlier results it must wait for — exactly the records
   the scheduler would have examined, in the order it would have (merged records and freed bytes
   becoming groups of nodes).
3. **replay** (`run_timing`): one loop over the flat list computes every time — hence the *same
   timeline*, record for record (tests/test_program.py compares both paths on several kernels,
   launches and cores, and on kernels hypothesis writes). The DMA queue choice, the shared ports
   (`core._Port`) and the HBM / DMA channels (`scheduler.Channel`) are the core's own objects, so
   launches on several cores of a device interleave as before.

**One implementation of the timing model.** The core and this replay call the same functions:
the cost model (`cost.py`, through `NeuronCore._dma_cost` / `_pe_cost` / `_cost_ns` and
`_check_matmul`), which shared ports an instruction needs (`core.port_needs`,
`scheduler.psum_banks`), the dependency rules and their bookkeeping (`scheduler.read_waits`,
`write_waits`, `add_read`, `add_write`, `compact` — on records of times in the core, of node groups
here), the freed-byte ranges a tile inherits (`memory.take_ranges`, `put_range`), a DMA's queue,
latency and passage through the DMA engines and HBM (`scheduler.first_free_queue`,
`dma_transfer`, `Channel.reserve`), LoadStationary (`scheduler.stationary_load`) and the ports'
arbitration (`_Port.slot` / `book`). What this loop writes out itself is the running maximum over
an instruction's dependency nodes, the queue free first kept in a heap (the same choice as
`first_free_queue`: the lowest-numbered of the earliest free), and the engine-queue / matmul-group
arithmetic of one line each (`start + busy`, the later of ready and the group's ready).

The structure depends on the core's on-chip state left by earlier launches (which byte ranges of
SBUF/PSUM were freed); it is compiled per such layout (a program replayed on the same core reaches
a steady layout after one or two launches). Where the compiled replay cannot be exact, `replay.py`
uses the checked path: full mode, a resident tensor the program writes, one with pending writes or
one passed as two arguments, tiles still live in the core's memories, an instruction of zero
duration.
"""
from __future__ import annotations

import threading
from heapq import heapify, heapreplace

import numpy as np

from . import _blas, cost, dtypes, scheduler
from .core import DVE, PE, NeuronCore, _bytes_by_memory, _free_byte_range, _Port, _view, port_needs
from .memory import put_range, take_ranges
from .scheduler import _union, add_read, add_write, psum_banks, read_waits, write_waits
from .tensor import Tensor, View

# descriptions (what an instruction asks of the scheduler)
ISSUE, MATMUL, PE_ISSUE, DMA, SEED, PRINT = range(6)


class DescribingCore(NeuronCore):
    """A timing-mode core that checks and costs each instruction, then describes its issue
    (`issued[-1]`) instead of scheduling it. `buffer_of(tensor)` names each operand's buffer."""

    def __init__(self, spec, buffer_of, name: str = "describe"):
        super().__init__(spec, mode="timing", name=name)
        self.buffer_of = buffer_of
        self.issued: list = []

    def _ref(self, v: View) -> tuple:
        return (self.buffer_of(v.tensor), v.box)

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
        return self._describe((ISSUE, eid, opcode, dur, tuple(self._ref(v) for v in reads),
                               tuple(self._ref(v) for v in writes), flops, sbuf, psum,
                               sbuf_port, psum_port, hidden))

    def nc_matmul(self, dst, stationary, moving, accumulate=None) -> int:
        # the rules and the cost depend only on the operands' shapes, places and dtypes: checked
        # and costed once per such triple (a tiled loop issues the same matmul thousands of times)
        views = (_view(dst, "dst"), _view(stationary, "stationary"), _view(moving, "moving"))
        key = tuple((v.shape, v.partitions, v.free_size, v.part_start, v.part_first, v.tensor.kind,
                     v.tensor.dtype) for v in views)
        checked = self._matmul_checked.get(key)
        if checked is None:
            checked = self._matmul_checked[key] = self._check_matmul(*views)[6:]
        busy_ns, latency_ns, load_ns, flops, sbuf, psum = checked
        dst, st, mv = views
        return self._describe((MATMUL, self._ref(dst), self._ref(st), self._ref(mv), busy_ns,
                               latency_ns, load_ns, flops, sbuf, psum))

    def _pe_issue(self, opcode, st, reads, dst, flops, sbuf, psum):
        busy_ns, latency_ns, load_ns = self._pe_cost(opcode, st, reads, dst)
        return self._describe((PE_ISSUE, opcode, self._ref(st), tuple(self._ref(v) for v in reads),
                               self._ref(dst), busy_ns, latency_ns, load_ns, flops, sbuf, psum))

    def _schedule_dma(self, dst, src, reads, nbytes, queue, opcode) -> int:
        c = self._dma_cost(dst, src, nbytes, opcode)
        sbuf = (nbytes if src.tensor.kind == "sbuf" else 0) + (nbytes if dst.tensor.kind == "sbuf" else 0)
        return self._describe((DMA, opcode, self._ref(dst), tuple(self._ref(v) for v in reads),
                               nbytes, self._dma_queue(queue), c.fixed_ns, c.cycles,
                               c.dma_engine_ns, c.hbm_bytes, sbuf))

    def set_rng_seed(self, seed) -> int:
        reads = ()
        if isinstance(seed, (Tensor, View)):
            v = _view(seed, "seed")
            self._onchip(v, "seed", "random_seed")
            reads = (self._ref(v),)
        dur = self.spec.vector_static_cycles * self._clock_ns[DVE]
        return self._describe((SEED, reads, dur))

    def device_print(self, prefix: str, src) -> int:
        src = _view(src, "src")
        return self._describe((PRINT, prefix, f"<{src.shape} {dtypes.name(src.tensor.dtype)}, timing mode>"))


def engine_of(description, engines: list) -> str:
    """The engine a description names ("dma" when the queue is chosen at run time)."""
    kind = description[0]
    if kind == ISSUE:
        return engines[description[1]]
    if kind in (MATMUL, PE_ISSUE):
        return engines[PE]
    if kind == DMA:
        q = description[5]
        return "dma" if q is None else engines[4 + q]
    if kind == SEED:
        return engines[DVE]
    return ""


def describe(program, spec) -> list:
    """Descriptions of every instruction of an allocated `program` on `spec` (checks included)."""
    from .replay import plan
    p = plan(program)
    buffers = program.buffers
    tensors, bids = {}, {}
    core = DescribingCore(spec, lambda t: bids[id(t)])
    memories = {"sbuf": core.sbuf, "psum": core.psum}
    for b in buffers:
        if b.memory == "hbm":
            core.hbm.capacity += b.nbytes       # the device's capacity is checked at the launch
            t = core.hbm.allocate(b.shape, b.dtype, name=b.name)
            tensors[b.id], bids[id(t)] = t, b.id
    out = []
    from .program import locate_instruction
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
    program._matmul_dtypes = set(core._matmul_dtypes)
    return out


# -- the resolved program ------------------------------------------------------------------------
# op kinds of the flat list
_V, _ISSUE, _MM, _DMA, _SEED, _PRINT = range(6)   # _MM: every Tensor-engine instruction
GROUP_MAX = 4       # a record waits for at most this many nodes before they become one "latest of"


class Resolved:
    """The flat program of one (program, spec, starting on-chip layout)."""
    __slots__ = ("ops", "nodes", "external", "retired", "resident_reads", "spans", "records",
                 "cursor", "allocations", "last_note")


def _static(program, written: set) -> tuple:
    """What resolving needs that does not depend on the layout (cached on the Compiled): the
    tiles each instruction allocates and frees, each tile's byte extent, the HBM buffers the
    program never writes (`written`: those it does), each instruction's line and region."""
    from .allocate import live_ranges
    starts, ends = live_ranges(program)
    sizes = {}              # Buffer.partition_bytes, computed once per tile shape
    extent = {}
    for group in starts.values():
        for b in group:
            key = (tuple(b.shape), b.dtype, b.partition_axis)
            size = sizes.get(key)
            if size is None:
                size = sizes[key] = b.partition_bytes
            extent[b.id] = (b.offset, b.offset + size)
    unwritten = {b.id for b in program.buffers if b.memory == "hbm" and b.id not in written}
    lines = [(ins.line, ins.region) for ins in program.instructions]
    return starts, ends, extent, unwritten, lines


def _resolve(program, issues, spec, layout, static) -> Resolved:
    """Run the scheduler's bookkeeping once on nodes instead of times (module docstring, step 2).

    `layout`: {"sbuf"/"psum": ((lo, hi), ...)} the freed ranges the core holds at the launch.

    A record (like the core's `(box, time, instruction)`) holds a *group*: the nodes whose latest
    time is its time. Where the core keeps the latest of several records (a merged record, a freed
    tile's last access, the bytes a new tile inherits), the groups are concatenated; a group of
    more than GROUP_MAX nodes becomes one "latest of" node. Exact: every time is > 0 (the compiled
    replay runs only programs of positive durations), so the running maximum an instruction waits
    for ends at the same time over the concatenation as over the nested maxima, and names the
    same first instruction reaching it."""
    starts, ends, extent, unwritten, lines = static
    buffers = program.buffers
    n_buffers = len(buffers)
    reads = [None] * n_buffers          # buffer id -> [[box, group]] (a live buffer's)
    writes = [None] * n_buffers         # buffer id -> [[box, group, by_matmul]]
    version = [0] * n_buffers
    for b in buffers:
        if b.memory == "hbm":
            reads[b.id], writes[b.id] = [], []
    ops = []
    n_nodes = 0
    external = {}           # memory -> [node of each initially retired range]
    retired = {}            # memory -> [[lo, hi, group]] sorted by lo
    for memory in ("sbuf", "psum"):
        ranges = []
        for lo, hi in layout[memory]:
            ranges.append([lo, hi, (n_nodes,)])
            n_nodes += 1
        external[memory] = [r[2][0] for r in ranges]
        retired[memory] = ranges
    rstarts = {m: [r[0] for r in retired[m]] for m in retired}

    def latest(nodes) -> tuple:
        """The group of `nodes` (in order, once each), or one node standing for them."""
        nonlocal n_nodes
        if len(nodes) == 1:
            return tuple(nodes)
        nodes = tuple(dict.fromkeys(nodes))
        if len(nodes) <= GROUP_MAX:
            return nodes
        ops.append((_V, n_nodes, nodes))
        n_nodes += 1
        return (n_nodes - 1,)

    def take_retired(memory, lo, hi):
        """OnChipMemory._inherit on groups: the overlapping freed ranges' nodes, in order."""
        return [n for r in take_ranges(retired[memory], rstarts[memory], lo, hi) for n in r[2]]

    def merged_read(old):           # scheduler.compact's merge, on groups
        return [_union([r[0] for r in old]), latest([n for r in old for n in r[1]])]

    def merged_write(old):
        return merged_read(old) + [False]

    def raw(refs, deps):
        for bid, vb in refs:
            records = writes[bid]
            if records:
                for r in read_waits(records, vb):
                    deps.extend(r[1])

    def war_waw(ref, deps, group_deps=None):
        bid, vb = ref
        if not (reads[bid] or writes[bid]):
            return
        waits, group = write_waits(reads[bid], writes[bid], vb, group_deps is not None)
        for r in waits:
            deps.extend(r[1])
        for r in group:
            group_deps.extend(r[1])

    def note_reads(refs, group):
        for bid, vb in refs:
            if bid not in unwritten:    # only a later write to it would wait for these reads
                add_read(reads[bid], [vb, group], merged_read)

    def note_write(ref, group, by_matmul=False):
        bid, vb = ref
        add_write(reads[bid], writes[bid], vb, [vb, group, by_matmul], merged_write)
        version[bid] += 1

    def dedupe(deps):
        return tuple(dict.fromkeys(deps)) if len(deps) > 1 else tuple(deps)

    bank_bytes = spec.psum_bank_bytes
    resident_reads = {b.id: [] for b in buffers if b.memory == "hbm"}
    stationary = None          # (bid, box, version) of the tile loaded as stationary
    spans, current, current_start = [], None, 0
    rec = 0
    cursor = {"sbuf": None, "psum": None}
    allocations = {"sbuf": 0, "psum": 0}
    for k, d in enumerate(issues):
        allocated = starts.get(k)
        if allocated:
            for b in allocated:
                lo, hi = extent[b.id]
                found = take_retired(b.memory, lo, hi)
                reads[b.id] = [[None, latest(found)]] if found else []
                writes[b.id], version[b.id] = [], 0
                cursor[b.memory] = hi
                allocations[b.memory] += 1
        note, region = lines[k]
        if region != current:
            if current:
                spans.append((current, current_start, rec))
            current, current_start = region, rec
        kind = d[0]
        if kind == DMA:
            _, opcode, dref, rrefs, nbytes, queue, fixed, cycles, engine_ns, hbm, sbuf = d
            deps = []
            raw(rrefs, deps)
            war_waw(dref, deps)
            node = n_nodes
            n_nodes += 1
            ops.append((_DMA, dedupe(deps), queue, fixed, cycles, engine_ns, hbm, node, opcode,
                        sbuf, note))
            group = (node,)
            note_reads(rrefs, group)
            note_write(dref, group)
            for r in rrefs:
                if r[0] in resident_reads:
                    resident_reads[r[0]].append((r[1], node))
        elif kind == MATMUL:
            _, dref, sref, mref, busy, lat, load, flops, sbuf, psum = d
            pre = []
            raw((mref,), pre)
            sv = (sref[0], sref[1], version[sref[0]])
            new = stationary is None or stationary != sv
            st_deps = []
            if new:
                raw((sref,), st_deps)
                stationary = sv
            post, group_deps = [], []
            war_waw(dref, post, group_deps)
            end_node, ready_node = n_nodes, n_nodes + 1
            n_nodes += 2
            ops.append((_MM, dedupe(pre), new, dedupe(st_deps), dedupe(post), dedupe(group_deps), busy,
                        lat, load, end_node, ready_node, "nc_matmul", flops, sbuf, psum, note))
            note_reads((sref, mref), (end_node,))
            note_write(dref, (ready_node,), True)
        elif kind == ISSUE:
            _, eid, opcode, dur, rrefs, wrefs, flops, sbuf, psum, sbuf_port, psum_port, hidden = d
            deps = []
            raw(rrefs, deps)
            for w in wrefs:
                war_waw(w, deps)
            ports = []
            if sbuf_port:
                ports.append("sbuf")
            if psum_port == "core":
                ports.append("psum")
            elif psum_port:
                ports.extend(("psum", x) for x in psum_banks(
                    bank_bytes, [((buffers[bid].offset or 0) + lo, (buffers[bid].offset or 0) + hi)
                                 for bid, lo, hi in psum_port]))
            node = n_nodes
            n_nodes += 1
            ops.append((_ISSUE, eid, dur, dedupe(deps), tuple(ports), node,
                        (eid, opcode, flops, sbuf, psum, note), hidden))
            group = (node,)
            note_reads(rrefs, group)
            for w in wrefs:
                note_write(w, group)
            for r in rrefs:
                if r[0] in resident_reads:
                    resident_reads[r[0]].append((r[1], node))
        elif kind == PE_ISSUE:
            _, opcode, sref, rrefs, dref, busy, lat, load, flops, sbuf, psum = d
            pre, st_deps, post = [], [], []
            raw(rrefs, pre)
            raw((sref,), st_deps)
            stationary = None
            war_waw(dref, post)
            end_node, ready_node = n_nodes, n_nodes + 1
            n_nodes += 2
            # (as a matmul that always loads its stationary tile and joins no accumulation group)
            ops.append((_MM, dedupe(pre), True, dedupe(st_deps), dedupe(post), (), busy, lat, load,
                        end_node, ready_node, opcode, flops, sbuf, psum, note))
            note_reads((sref,) + rrefs, (end_node,))
            note_write(dref, (ready_node,))
        elif kind == SEED:
            _, rrefs, dur = d
            deps = []
            raw(rrefs, deps)
            node = n_nodes
            n_nodes += 1
            ops.append((_SEED, dedupe(deps), dur, node, note))
            note_reads(rrefs, (node,))
        else:
            ops.append((_PRINT, d[1], d[2]))
            rec -= 1
        rec += 1
        freed = ends.get(k)
        if freed:
            for b in freed:
                # OnChipMemory._retire on groups: the latest of the freed tile's reads and writes
                nodes = [n for r in reads[b.id] for n in r[1]] + [n for r in writes[b.id] for n in r[1]]
                reads[b.id] = writes[b.id] = None
                if not nodes:
                    continue
                lo, hi = extent[b.id]
                put_range(retired[b.memory], rstarts[b.memory], [lo, hi, latest(nodes)])
    if current:
        spans.append((current, current_start, rec))
    # the freed ranges the launch leaves: one node each (their time and instruction go to the core)
    for memory in retired:
        for r in retired[memory]:
            group = r[2]
            if len(group) > 1:
                ops.append((_V, n_nodes, group))
                r[2] = (n_nodes,)
                n_nodes += 1
            r[2] = r[2][0]
    r = Resolved()
    r.ops, r.nodes, r.external, r.retired = ops, n_nodes, external, retired
    r.resident_reads = {bid: v for bid, v in resident_reads.items() if v}
    r.spans, r.records, r.cursor, r.allocations = spans, rec, cursor, allocations
    r.last_note = lines[-1][0] if lines else None
    return r


class Compiled:
    """A program's descriptions for one spec, and its resolved forms per starting layout."""

    def __init__(self, program, spec, issues, matmul_dtypes):
        self.program, self.spec, self.issues = program, spec, issues
        self.matmul_dtypes = set(matmul_dtypes)
        self.positive, self.written = _summary(issues)
        self._resolved: dict = {}
        self._static = None

    def resolved(self, layout) -> Resolved:
        key = (layout["sbuf"], layout["psum"])
        r = self._resolved.get(key)
        if r is None:
            if len(self._resolved) >= 4:                    # a few layouts at most are in use
                self._resolved.pop(next(iter(self._resolved)))
            if self._static is None:
                self._static = _static(self.program, self.written)
            r = self._resolved[key] = _resolve(self.program, self.issues, self.spec, layout,
                                               self._static)
        return r


def _summary(issues) -> tuple[bool, set]:
    """(does every instruction take time?, the buffer ids the program writes) — one pass."""
    written = set()
    positive = True
    for d in issues:
        kind = d[0]
        if kind == DMA:
            written.add(d[2][0])
            positive = positive and d[6] + d[7] > 0
        elif kind == MATMUL:
            written.add(d[1][0])
            positive = positive and d[4] > 0
        elif kind == ISSUE:
            written.update(bid for bid, _ in d[5])
            positive = positive and d[3] > 0
        elif kind == PE_ISSUE:
            written.add(d[4][0])
            positive = positive and d[5] > 0
        elif kind == SEED:
            positive = positive and d[2] > 0
    return positive, written


def compiled_for(program, spec) -> Compiled:
    """The program compiled for `spec` (cached on the program; described at trace time if the trace
    used the same spec)."""
    owner, cache = getattr(program, "_compiled", (None, None))
    if owner is not program:           # (a copy of a program, e.g. rescheduled, compiles anew)
        cache = {}
        program._compiled = (program, cache)
    for s, c in cache.items():
        if s is spec or s == spec:
            return c
    issues = None
    traced = getattr(program, "_issue_spec", None)
    if traced is not None and (traced is spec or traced == spec):
        issues = [i.issue for i in program.instructions]
        if any(i is None for i in issues):
            issues = None
    if issues is None:
        issues = describe(program, spec)
    c = cache[spec] = Compiled(program, spec, issues, getattr(program, "_matmul_dtypes", ()))
    return c


def layout_of(core) -> dict:
    return {m: tuple((r[0], r[1]) for r in getattr(core, m)._retired) for m in ("sbuf", "psum")}


def can_run(compiled: Compiled, core, resident: dict) -> bool:
    """Is the compiled replay exact here? (see the module docstring)"""
    if not compiled.positive:
        return False
    if core.sbuf.tensors or core.psum.tensors:
        return False
    if len({id(t) for t in resident.values()}) < len(resident):
        return False                    # one tensor passed as two arguments shares its records
    for bid, t in resident.items():
        if t._writes or bid in compiled.written:
            return False
    return True


def run_timing(compiled: Compiled, core, resident: dict, region: str = "") -> None:
    """Replay the compiled program on `core` (timing only): appends the records and regions the
    checked replay would, and leaves the core in the same state.

    The engines' rules are the scheduler's functions the core calls (`scheduler.dma_transfer`,
    `stationary_load`, `core._Port.slot`); what is written out here is only the
    running maximum over each instruction's dependency nodes."""
    r = compiled.resolved(layout_of(core))
    T = [0.0] * r.nodes
    W = [-1] * r.nodes
    for memory in ("sbuf", "psum"):
        for node, rng in zip(r.external[memory], getattr(core, memory)._retired):
            T[node], W[node] = rng[2], rng[3]
    timeline = core.timeline
    records = timeline.records
    append = records.append
    base = idx = len(records)
    free = core._free
    dma_latency = core.spec.dma_latency_ns
    dma_channel, hbm_channel = core._dma, core._hbm
    qfree = free[4:]              # the DMA queues' free times (written back at the end)
    # the queue free first (scheduler.first_free_queue) at hand: a heap of (free time, queue),
    # whose top is the lowest-numbered of the queues free first
    heap = [(f, q) for q, f in enumerate(qfree)]
    heapify(heap)
    bandwidth = core.hbm_bandwidth
    dma_transfer, stationary_load = scheduler.dma_transfer, scheduler.stationary_load
    port = core._port
    slot = _Port.slot
    now = core._now
    load_end = core._load_end
    dve_follows = core._dve_prev is not None     # the first Vector instruction of a launch pays in full
    last_mm_start = core._last_mm_start
    for op in r.ops:
        kind = op[0]
        if kind == _DMA:
            _, deps, queue, fixed, cycles, engine_ns, hbm, node, opcode, sbuf, note = op
            t = 0.0
            w = -1
            for n in deps:
                if T[n] > t:
                    t = T[n]
                    w = W[n]
            first, q = heap[0]
            if queue is not None:
                q = queue
            t, end, w = dma_transfer(t, w, qfree[q], fixed, cycles, engine_ns, hbm, bandwidth,
                                     dma_channel, hbm_channel, first + dma_latency)
            T[node] = end
            W[node] = idx
            append((4 + q, opcode, t, end, end, 0.0, hbm, sbuf, 0, w, note))
            qfree[q] = end
            if queue is None:
                heapreplace(heap, (end, q))
            else:
                heap = [(f, k) for k, f in enumerate(qfree)]
                heapify(heap)
            if end > now:
                now = end
        elif kind == _MM:
            (_, pre, new, st_deps, post, group, busy, lat, load, end_node, ready_node, opcode, flops,
             sbuf, psum, note) = op
            start = free[0]
            w = -1
            for n in pre:
                if T[n] > start:
                    start = T[n]
                    w = W[n]
            if new:
                st_ready = 0.0
                st_w = -1
                for n in st_deps:
                    if T[n] > st_ready:
                        st_ready = T[n]
                        st_w = W[n]
                start, w, load_end = stationary_load(start, w, st_ready, st_w, last_mm_start, load)
            elif load_end > start:
                start = load_end
            for n in post:
                if T[n] > start:
                    start = T[n]
                    w = W[n]
            group_ready = 0.0
            for n in group:
                if T[n] > group_ready:
                    group_ready = T[n]
            end = start + busy
            ready = start + lat
            if group_ready > ready:
                ready = group_ready
            last_mm_start = start
            T[end_node] = end
            T[ready_node] = ready
            W[end_node] = W[ready_node] = idx
            append((PE, opcode, start, end, ready, flops, 0, sbuf, psum, w, note))
            free[0] = end
            if ready > now:
                now = ready
        elif kind == _ISSUE:
            _, eid, dur, deps, ports, node, rec, hidden = op
            t = free[eid]
            w = -1
            for n in deps:
                if T[n] > t:
                    t = T[n]
                    w = W[n]
            if eid == DVE:
                if hidden:
                    dur = cost.issue_busy_ns(dur, hidden, t, free[eid], dve_follows)
                dve_follows = True
            if ports:
                objs = [port(p) for p in ports]
                t, w = slot(objs, t, dur, w)
                for p in objs:
                    p.book(t, t + dur, idx)
            end = t + dur
            T[node] = end
            W[node] = idx
            append((eid, rec[1], t, end, end, rec[2], 0, rec[3], rec[4], w, rec[5]))
            free[eid] = end
            if end > now:
                now = end
        elif kind == _V:
            _, node, inputs = op
            t, w = 0.0, -1
            for n in inputs:
                if T[n] > t:
                    t = T[n]
                    w = W[n]
            T[node], W[node] = t, w
            continue
        elif kind == _SEED:
            _, deps, dur, node, note = op
            t = free[DVE]
            w = -1
            for n in deps:
                if T[n] > t:
                    t = T[n]
                    w = W[n]
            end = t + dur
            T[node] = end
            W[node] = idx
            append((DVE, "random_seed", t, end, end, 0.0, 0, 0, 0, w, note))
            free[DVE] = end
            if end > now:
                now = end
        else:
            print(op[1], op[2])
            continue
        idx += 1
    # the state the checked replay leaves behind
    free[4:] = qfree
    core._now = now
    if dve_follows and core._dve_prev is None:
        core._dve_prev = ()                  # the Vector engine has issued in this launch (no views kept)
    core._load_end = load_end
    core._last_mm_start = last_mm_start
    core._stationary = None          # the next launch's tiles are new tensors: a new stationary
    core._matmul_dtypes.update(compiled.matmul_dtypes)
    if r.last_note is not None:
        core.note = r.last_note
    for memory in ("sbuf", "psum"):
        mem = getattr(core, memory)
        mem._retired = [[lo, hi, T[n], W[n]] for lo, hi, n in r.retired[memory]]
        mem._retired_starts = [x[0] for x in mem._retired]
        if r.cursor[memory] is not None:
            mem._cursor = r.cursor[memory]
        mem._count += r.allocations[memory]
    for bid, accesses in r.resident_reads.items():
        t = resident[bid] if bid in resident else None
        if t is None:
            continue
        for box, node in accesses:
            add_read(t._reads, (box, T[node], W[node]))
    prefix = region + "/" if region else ""
    timeline.regions.extend((prefix + name, base + a, base + b) for name, a, b in r.spans)
    if region:
        timeline.regions.append((region, base, base + r.records))


# -- full mode: the values of a compiled program ---------------------------------------------------
class ValuesCore(NeuronCore):
    """A full-mode core that only computes values: the instruction methods run (the same NumPy
    code as a checked replay), but their scheduling step is dropped — `run_timing` computes the
    times. Matmuls skip their rule checks and cost (done at trace) and go straight to the values.
    The Scalar engine's reduce registers and the random stream are the real core's (`bind`)."""

    def __init__(self, spec):
        super().__init__(spec, mode="full", name="values")
        self.alias_sources = frozenset()     # ids of the HBM tensors loads may view (run_values)

    def bind(self, core) -> None:
        self._act_regs = core._act_regs
        rng = getattr(core, "_rng", None)
        if rng is not None:
            self._rng = rng
        elif hasattr(self, "_rng"):
            del self._rng

    def _issue(self, eid, opcode, dur, reads, write, flops=0.0, also_write=None):
        return -1

    def _pe_issue(self, opcode, st, reads, dst, flops, sbuf, psum):
        return -1

    def _schedule_dma(self, dst, src, reads, nbytes, queue, opcode) -> int:
        return -1

    def _cost_ns(self, eid, opcode, reads, writes, **attrs) -> float:
        return 0.0

    def nc_matmul(self, dst, stationary, moving, accumulate=None) -> int:
        dst, st, mv = _view(dst, "dst"), _view(stationary, "stationary"), _view(moving, "moving")
        self._matmul_values(dst, st, mv, st.partitions, st.free_size, mv.free_size, accumulate)
        return -1

    def nc_matmul_starting(self, dst, stationary, moving, accumulate=None) -> int:
        """nc_matmul ending a run of matmuls into its PSUM tile that nothing adds to before the
        tile is read (`values_order`): its products start computing in a worker thread now."""
        self.nc_matmul(dst, stationary, moving, accumulate)
        t = dst.tensor if type(dst) is View else dst
        t.memory.start_pending(t)
        return -1

    def nc_matmul_ready(self, dst, stationary, moving, accumulate=None) -> int:
        """nc_matmul ending a run, followed by one ending another tile's run: its products start
        with that one's, merged with those that share their operands (`memory.start_pending`)."""
        self.nc_matmul(dst, stationary, moving, accumulate)
        t = dst.tensor if type(dst) is View else dst
        t.memory.ready(t)
        return -1

    # The three most frequent instructions of a tiled kernel, reduced to their values (the same
    # statements as NeuronCore's full-mode branch): their rules were checked at trace and do not
    # depend on values, and their operands are the views of a values plan (never freed tiles).
    def dma_copy(self, dst, src, queue=None) -> int:
        src.check_initialized()
        dst.write(np.reshape(src.values(), dst.shape))
        return -1

    def dma_load_aliasing(self, dst, src, queue=None) -> int:
        """dma_copy of a whole SBUF tile from an HBM tensor no instruction of the program writes,
        into a tile only matmuls read (`_aliasing_loads`): the tile holds a view of the HBM values
        (copy on write, as a deferred matmul's snapshot) instead of a copy, where this run allows."""
        source = src.tensor
        if source.written is not None or source.poison is not None:
            src.check_initialized()
        t = dst.tensor
        values = src.values()
        if values.shape != t.shape:
            values = values.reshape(t.shape)
        if values.dtype != t.dtype:             # (a resident tensor of another dtype)
            values = values.astype(t.dtype)
        if t._pending is not None:
            _reset(t)                           # (products of an earlier use still computing)
        if id(source) in self.alias_sources:
            _written_whole(t, values, shared=True)    # copy on write: the HBM values stay as they are
        else:
            _written_whole(t, np.array(values), shared=False)
        return -1

    def tensor_copy_moving(self, dst, src, engine="vector") -> int:
        """tensor_copy of a whole PSUM tile, at its last use, into a whole SBUF tile of the same
        dtype at its first (`_moving_copies`): the SBUF tile takes the PSUM tile's array (the PSUM
        tile is dropped right after) — unless some of it is garbage, then as tensor_copy."""
        t, s = dst.tensor, src.tensor
        values = s.data                         # (waits for its products)
        if s.written is not None or s.poison is not None:
            _reset(t)
            self._tensor_copy_values(dst, src)
            return -1
        if t._pending is not None:
            _reset(t)
        _written_whole(t, values, shared=False)
        s._data = None
        return -1

    def tensor_copy(self, dst, src, engine="vector") -> int:
        self._tensor_copy_values(dst, src)
        return -1

    def nc_transpose(self, dst, src) -> int:
        (x,) = self._inputs(src)
        self._store(dst, x.T)
        return -1

    def set_rng_seed(self, seed) -> int:
        if isinstance(seed, (Tensor, View)):
            v = _view(seed, "seed")
            v.check_initialized()
            seed = int(np.asarray(v.values()).reshape(-1)[0])
        self._rng = np.random.default_rng(int(seed) & 0xFFFFFFFF)
        return -1


def values_ok(program) -> bool:
    """Can full mode compute this program's values beside the compiled timing replay? Not with
    device_print (its output is printed by the instruction, in order)."""
    ok = getattr(program, "_values_ok", None)
    if ok is None:
        ok = program._values_ok = all(i.opcode != "device_print" for i in program.instructions)
    return ok


class _Kind:
    """The memory a prototype tensor claims to be in (prototypes hold no values)."""

    def __init__(self, kind: str):
        self.kind = kind


def values_plan(program) -> list:
    """The program's steps for `run_values`, resolved once (cached on the program): per step the
    opcode, attributes, operands as (name, buffer id, prototype view: the operand's index parsed
    once on a value-less tensor of the buffer's shape), the tiles it allocates (buffer id,
    prototype tensor, memory), the tiles it frees, the instruction's index in the program and the
    ValuesCore method computing it where not the opcode's (`_aliasing_loads`, `_moving_copies`, the
    matmuls ending a run in `values_order`). The steps come in `values_order` (program order, or
    program order with PSUM reads moved later)."""
    cached = getattr(program, "_values_plan", None)
    if cached is not None and cached[0] is program:
        return cached[1]
    from .replay import plan
    buffers = program.buffers
    protos = {}
    for b in buffers:
        kind = _Kind(b.memory)
        if b.memory == "hbm":
            protos[b.id] = Tensor(kind, b.shape, b.dtype, b.name, None, 0, False)
        else:
            protos[b.id] = Tensor(kind, b.shape, b.dtype, b.name, b.partition_axis, b.offset, False)
    steps = []
    for opcode, attrs, operands, _line, _region, allocs, frees in plan(program).steps:
        ops_ = tuple((name, bid, protos[bid].full if index is None else View(protos[bid], index))
                     for name, bid, index in operands)
        steps.append((opcode, attrs, ops_, tuple((bid, protos[bid], buffers[bid].memory) for bid in allocs),
                      tuple(frees)))
    variants = dict.fromkeys(_aliasing_loads(steps, buffers), "dma_load_aliasing")
    variants.update(dict.fromkeys(_moving_copies(steps, buffers), "tensor_copy_moving"))
    order, starts = values_order(steps, buffers, _reads_ahead())
    variants.update(dict.fromkeys(starts, "nc_matmul_starting"))
    steps = [step + (k, variants.get(k)) for k, step in enumerate(steps)]
    steps = [steps[k] for k in order]
    for p in _starting_together(steps):      # their products start with the next run's, merged
        steps[p] = steps[p][:-1] + ("nc_matmul_ready",)
    program._values_plan = (program, steps)
    return steps


_TOGETHER_WINDOW = 32       # steps between two runs' ends that may still start together
_TOGETHER_MAX = 8           # runs starting together


def _starting_together(steps) -> list[int]:
    """Positions of starting matmuls (`values_order`) whose products may wait for the next one's,
    to start with it (`memory.start_pending` merges the products of tiles that share operands, as a
    GEMM block's tiles that share rhs columns): the next run ends within _TOGETHER_WINDOW steps and
    no step in between touches the waiting tiles. All of a group but its last."""
    out = []
    group, waiting = [], set()              # the starts of the group so far; their PSUM buffers
    for p, step in enumerate(steps):
        if step[-1] == "nc_matmul_starting":
            if group and (p - group[-1] > _TOGETHER_WINDOW or len(group) >= _TOGETHER_MAX):
                group, waiting = [], set()  # too far or too many: the group's last starts as it is
            if group:
                out.append(group[-1])       # the previous waits for this one
            group.append(p)
            waiting.add(next(bid for name, bid, _ in step[2] if name == "dst"))
        elif group and (waiting.intersection(bid for _, bid, _ in step[2])
                        or waiting.intersection(bid for bid, _, _ in step[3]) or waiting.intersection(step[4])):
            group, waiting = [], set()      # a waiting tile is used here: the group ends before
    return out


# Full mode runs the values of a program in program order, with two exceptions that change when
# work is done, never what is computed (the bits are those of program order, tests/test_values_order.py):
#
# 1. **Later PSUM reads.** A matmul's product is computed when its PSUM tile is next read, together
#    with every other deferred product pending then (in parallel Python threads, BLAS on one thread
#    each: `memory.flush_pending`). A tiled kernel reads each PSUM tile right after its K loop, so
#    there is only ever one product pending: one core works, the other waits. `values_order` moves
#    such a read (and what depends on it) after the K loops of the next tiles (as many as there are
#    worker threads), and each tile's products start in a worker when its K loop ends
#    (`memory.start_pending`): the workers compute while the reader issues the next tiles. It
#    does so only where each product stays the same arithmetic: in a program where every read
#    finds the products it flushes complete ("clean": no read falls inside another tile's run of
#    accumulating matmuls, no group reaches GROUP_K_MAX), and only moving plain data
#    movement / elementwise steps (_MOVABLE) past steps they do not conflict with (by buffer: a
#    write conflicts with any access; allocation and freeing count as writes).
# 2. **Loads without a copy** (`_aliasing_loads`): a DMA of a whole SBUF tile from an HBM tensor the
#    program never writes may hand the tile a view of the HBM array instead of a copy, when that tile
#    is only ever an nc_matmul operand. NumPy hands such products to BLAS's gemm, which packs its
#    operands, so a row-strided view gives the bits of a contiguous copy — except in its
#    matrix-vector paths (M or N of 1), measured to differ, which are excluded.
_MOVABLE = frozenset({"dma_copy", "tensor_copy", "tensor_tensor", "tensor_scalar"})
_WINDOW_MAX = 1024          # steps a read may be moved past (bounds the planning work)
_WRITES = frozenset(("dst", "reduce_res", "dst_scale"))    # program.WRITES


def _roots(buffers) -> list:
    """Buffer id -> the buffer whose bytes it is (HBM aliases share their base's)."""
    root = list(range(len(buffers)))
    for b in buffers:
        r = b
        while r.alias_of is not None:
            r = buffers[r.alias_of]
        root[b.id] = r.id
    return root


def _accesses(steps, buffers) -> tuple[list, list]:
    """Per step the buffers (roots) it reads and those it writes, allocates or frees."""
    root = _roots(buffers)
    reads, writes = [], []
    for step in steps:
        r, w = set(), set()
        for name, bid, _ in step[2]:
            (w if name in _WRITES else r).add(root[bid])
        w.update(bid for bid, _, _ in step[3])
        w.update(step[4])
        reads.append(r)
        writes.append(w)
    return reads, writes


def _reads_ahead() -> int:
    """How many later tiles' K loops a PSUM read is moved past: as many as there are workers (so
    each worker has a product queued when the reader needs the oldest); none on one core."""
    workers = _blas.workers()
    return workers if workers > 1 else 0


def values_order(steps, buffers, ahead: int) -> tuple[list, set]:
    """The order `run_values` computes the steps in: program order, with each PSUM read moved after
    the K loops of up to `ahead` later tiles where that keeps every product the same (see above).
    Returns (the step indices in their new order, the matmul steps that end a run of matmuls a
    later step reads: there its products may start computing; none when `ahead` is 0)."""
    n = len(steps)
    identity = (list(range(n)), set())
    if ahead < 1:
        return identity
    from bisect import bisect_left, bisect_right
    from .tensor import GROUP_K_MAX
    psum_mm = set()                 # PSUM buffers nc_matmul accumulates into
    for opcode, _, ops_, _, _, *_ in steps:
        if opcode == "nc_matmul":
            dst = next(v for name, _, v in ops_ if name == "dst")
            if not (dst.basic and dst.tensor.dtype in (dtypes.float32, dtypes.bfloat16)):
                return identity     # computed at once (not deferred): it reads the tile itself
            psum_mm.add(next(bid for name, bid, _ in ops_ if name == "dst"))
    if not psum_mm:
        return identity
    # runs: per PSUM buffer, its matmuls between two other accesses ("touches") of it
    runs = []                       # [first step, last step, reader step or None]
    open_run = {}                   # bid -> [first, last, boxes {box: K}]
    touches = []
    for k, (opcode, _, ops_, _, _, *_) in enumerate(steps):
        if opcode == "nc_matmul":
            dst = next(v for name, _, v in ops_ if name == "dst")
            bid = next(b for name, b, _ in ops_ if name == "dst")
            st = next(v for name, _, v in ops_ if name == "stationary")
            run = open_run.setdefault(bid, [k, k, {}])
            run[1] = k
            boxes = run[2]
            box = dst.box
            if box not in boxes and any(b is None or box is None or scheduler.overlap(b, box) for b in boxes):
                return identity     # an overlapping region flushes every pending group
            boxes[box] = boxes.get(box, 0) + st.partitions
            if boxes[box] >= GROUP_K_MAX:
                return identity     # flushed in the middle of its K loop
            continue
        touched = {bid for _, bid, _ in ops_ if bid in psum_mm}
        if touched:
            touches.append(k)
            for bid in touched:
                run = open_run.pop(bid, None)
                if run is not None:
                    runs.append([run[0], run[1], k])
    runs.extend([r[0], r[1], None] for r in open_run.values())
    for first, last, _ in runs:     # clean: no touch inside a run
        if bisect_right(touches, first) < bisect_left(touches, last):
            return identity
    runs.sort()
    firsts = [r[0] for r in runs]
    lasts_max = []                  # the latest end of the runs starting up to here
    m = -1
    for r in runs:
        m = max(m, r[1])
        lasts_max.append(m)
    touch_set = set(touches)
    run_read_by = {r[2]: index for index, r in enumerate(runs) if r[2] is not None}
    reads, writes = _accesses(steps, buffers)
    order = []
    k = 0
    while k < n:
        move = None
        if k in run_read_by and steps[k][0] in _MOVABLE:
            move = _move(k, runs, firsts, lasts_max, ahead, steps, reads, writes, touch_set)
        if move is None:
            order.append(k)
            k += 1
            continue
        j, moved = move
        order.extend(x for x in range(k, j + 1) if x not in moved)
        order.extend(sorted(moved))
        k = j + 1
    return order, {r[1] for r in runs if r[2] is not None}


def _move(i, runs, firsts, lasts_max, ahead, steps, reads, writes, touches):
    """Where the read at step `i` may go: (j, the steps moved after step j), or None. j is the last
    matmul of the latest of up to `ahead` following runs such that no run starting in (i, j] ends
    after j; the moved steps are the read and every step of (i, j] that conflicts with a moved one
    — plain steps only, touching no PSUM matmul tile."""
    from bisect import bisect_right
    best = None
    moved = {i}
    d_reads, d_writes = set(reads[i]), set(writes[i])
    scanned = i                     # steps up to here are in `moved` or not, for good
    start = bisect_right(firsts, i)
    if start and lasts_max[start - 1] > i:
        return None                 # a run before the read ends after it (not clean)
    for end in range(start, min(start + ahead, len(runs))):
        j = runs[end][1]
        if lasts_max[end] > j or j - i > _WINDOW_MAX:
            break                   # a run in the window would still be open after j
        ok = True
        for x in range(scanned + 1, j + 1):
            if (writes[x] & (d_reads | d_writes)) or (reads[x] & d_writes):
                if steps[x][0] not in _MOVABLE or x in touches:
                    ok = False
                    break
                moved.add(x)
                d_reads |= reads[x]
                d_writes |= writes[x]
        if not ok:
            break
        scanned = j
        best = (j, set(moved))
    return best


def _aliasing_loads(steps, buffers) -> set:
    """Steps that are DMA loads of a whole SBUF tile from an HBM tensor the program never writes
    (nor any alias of it), when every write of the tile is such a load (one, as a tile allocated in
    a loop, or several, as a buffer a kernel rotates by hand) and every other use of the tile is as
    an nc_matmul operand of a product with M >= 2 and N >= 2 (see above). `run_values` checks at
    each run that the HBM tensor shares no memory with one the program writes."""
    root = _roots(buffers)
    aliased_roots = {root[b.id] for b in buffers if b.alias_of is not None}
    written = set()
    writers = {}
    uses = {}
    for k, (opcode, _, ops_, _, _, *_) in enumerate(steps):
        for name, bid, _ in ops_:
            if name in _WRITES:
                written.add(root[bid])
                writers.setdefault(bid, []).append(k)
            uses.setdefault(bid, []).append(k)
    loads = {}                                  # candidate step -> the tile it loads
    for k, (opcode, _, ops_, _, _, *_) in enumerate(steps):
        if opcode != "dma_copy" or len(ops_) != 2:
            continue
        named = {name: (bid, v) for name, bid, v in ops_}
        if set(named) != {"dst", "src"}:
            continue
        (d, dv), (s_, sv) = named["dst"], named["src"]
        bd, bs = buffers[d], buffers[s_]
        if bd.memory != "sbuf" or bs.memory != "hbm" or bd.dtype != bs.dtype or dv.shape != dv.tensor.shape:
            continue
        if root[s_] not in written and root[s_] not in aliased_roots:
            loads[k] = d
    aliasing = {d for d in set(loads.values())
                if all(loads.get(x) == d for x in writers[d])
                and all(x in loads or _matmul_operand(steps[x], d) for x in uses[d])}
    return {k for k, d in loads.items() if d in aliasing}


def _moving_copies(steps, buffers) -> set:
    """Steps that are a tensor_copy of a whole PSUM tile into a whole SBUF tile of the same dtype,
    the PSUM tile's last use and the SBUF tile's first: the SBUF tile may take the PSUM tile's array
    instead of copying it (`ValuesCore.tensor_copy_moving`)."""
    out = set()
    for k, (opcode, _, ops_, allocs, frees, *_) in enumerate(steps):
        if opcode != "tensor_copy":
            continue
        named = {name: (bid, v) for name, bid, v in ops_}
        if set(named) != {"dst", "src"}:
            continue
        (d, dv), (s_, sv) = named["dst"], named["src"]
        bd, bs = buffers[d], buffers[s_]
        if (bd.memory == "sbuf" and bs.memory == "psum" and bd.dtype == bs.dtype and s_ in frees
                and d in {bid for bid, _, _ in allocs} and dv.shape == dv.tensor.shape
                and sv.shape == sv.tensor.shape and dv.shape == sv.shape and d != s_):
            out.add(k)
    return out


def _matmul_operand(step, bid) -> bool:
    """Is `bid` only an operand (stationary or moving) of this nc_matmul, whose M and N are >= 2?"""
    opcode, _, ops_, _, _, *_ = step
    if opcode != "nc_matmul":
        return False
    named = {name: (b, v) for name, b, v in ops_}
    if named["dst"][0] == bid or not ({"stationary", "moving"} <= set(named)):
        return False
    return named["stationary"][1].free_size >= 2 and named["moving"][1].free_size >= 2


class _Prepared:
    """A program's values plan bound to one values core: a tile (Tensor) per on-chip buffer, made
    once and reset at each allocation, and per step the bound method and the operand views of its
    on-chip operands, built once; only HBM operands (each run's inputs and outputs) are bound per run."""
    __slots__ = ("program", "steps", "alias_sources", "written_hbm")

    def __init__(self, program, values, memories):
        from .tensor import fresh_like
        self.program = program
        tiles = {}
        steps = []
        alias_sources = set()
        for opcode, attrs, operands, allocs, frees, index, variant in values_plan(program):
            loaded = None                   # the tile a load or a moving copy fills: it sets every field itself
            if variant is not None:
                opcode = variant
                if variant not in ("nc_matmul_starting", "nc_matmul_ready"):
                    loaded = next(bid for name, bid, _ in operands if name == "dst")
                if variant == "dma_load_aliasing":
                    alias_sources.update(bid for name, bid, _ in operands if name == "src")
            for bid, proto, memory in allocs:
                if bid not in tiles:
                    tiles[bid] = fresh_like(proto, memories[memory])
                    _drop(tiles[bid])
            fixed = dict(attrs)
            per_run = []
            for name, bid, proto in operands:
                if bid in tiles:
                    fixed[name] = proto.on(tiles[bid])
                else:
                    per_run.append((name, bid, proto))
            steps.append((getattr(values, opcode), fixed, tuple(per_run),
                          tuple((tiles[bid], bid == loaded) for bid, _, _ in allocs),
                          tuple(tiles[bid] for bid in frees), index))
        self.steps = steps
        self.alias_sources = tuple(sorted(alias_sources))
        self.written_hbm = tuple(sorted({bid for _, _, operands, *_ in values_plan(program)
                                         for name, bid, _ in operands
                                         if name in _WRITES and program.buffers[bid].memory == "hbm"}))


_PREPARED_PER_CORE = 32       # programs whose bound plans a values core keeps (serving: prefill + decode buckets)


def _prepared(values, program, memories) -> _Prepared:
    """The program's bound plan on this values core (least recently used ones dropped beyond the limit)."""
    cache = values.__dict__.setdefault("_prepared", {})
    entry = cache.pop(id(program), None)
    if entry is None or entry.program is not program:
        if len(cache) >= _PREPARED_PER_CORE:
            cache.pop(next(iter(cache)))
        entry = _Prepared(program, values, memories)
    cache[id(program)] = entry                   # most recently used last
    return entry


_idle_values_cores: dict = {}       # id(spec) -> (spec, [idle ValuesCore, ...])
_values_cores_lock = threading.Lock()
_IDLE_PER_SPEC = 4


def _take_values_core(spec) -> ValuesCore:
    """An idle values core for `spec`, or a new one. Values cores are shared by every core of a spec
    (one run at a time each: concurrent runs take different ones), so a program's bound plan
    (`_Prepared`) outlives the device it first ran on: `nki.run` makes a fresh device per call, and
    rebinding the 1024^3 tiled matmul's plan each time was a tenth of its run (cProfile)."""
    with _values_cores_lock:
        entry = _idle_values_cores.get(id(spec))
        if entry is not None and entry[0] is spec and entry[1]:
            return entry[1].pop()
    return ValuesCore(spec)


def _give_back_values_core(values: ValuesCore) -> None:
    spec = values.spec
    with _values_cores_lock:
        entry = _idle_values_cores.get(id(spec))
        if entry is None or entry[0] is not spec:
            if len(_idle_values_cores) >= 8:
                _idle_values_cores.pop(next(iter(_idle_values_cores)))
            entry = _idle_values_cores[id(spec)] = (spec, [])
        if len(entry[1]) < _IDLE_PER_SPEC:
            entry[1].append(values)


def run_values(program, core, tensors: dict) -> None:
    """Compute the values of `program` on full-mode `core`: HBM tensors in `tensors` (buffer id ->
    Tensor, from `replay.bind_inputs`); on-chip tiles are a values core's tiles of the program
    (`_Prepared`), each reset to fresh memory (no values written, NaN poison where read unwritten)
    just before its first use and emptied after its last. The core's memories do not book them (the
    timing replay keeps the memories' state)."""
    from .program import locate_instruction
    values = _take_values_core(core.spec)
    try:
        _run_values(program, core, tensors, values, locate_instruction)
    finally:
        _give_back_values_core(values)


def _run_values(program, core, tensors, values, locate_instruction) -> None:
    values.bind(core)
    prepared = _prepared(values, program, {"sbuf": values.sbuf, "psum": values.psum})
    values.alias_sources = _safe_alias_sources(prepared, tensors)
    if values.alias_sources:                    # fp32 casts of the read-only inputs' regions
        arrays = [t._data for t in tensors.values() if id(t) in values.alias_sources]
        values.psum.start_widening({id(a if a.base is None else a.base): a for a in arrays})
    live = set()
    blas = _blas.single_threaded()              # one switch of BLAS's threads per run, not per PSUM read
    blas.__enter__()
    finished = False
    try:
        for method, fixed, per_run, allocs, frees, k in prepared.steps:
            for t, loaded in allocs:
                if not loaded:
                    _reset(t)
                live.add(t)
            if per_run:
                kwargs = dict(fixed)
                for name, bid, proto in per_run:
                    t = tensors[bid]
                    pt = proto.tensor
                    if t.shape == pt.shape and t.dtype == pt.dtype:
                        kwargs[name] = proto.on(t)
                    else:                                 # a resident tensor of another shape
                        kwargs[name] = View(t, proto.index)
            else:
                kwargs = fixed
            try:
                method(**kwargs)
            except Exception as error:
                raise locate_instruction(error, program, k)
            for t in frees:
                _drop(t)
                live.discard(t)
        values.psum.finish_started()
        finished = True
    finally:
        if not finished:
            values.psum.finish_started(raise_errors=False)
        blas.__exit__(None, None, None)             # after the last product: each ran on one thread
        values.alias_sources = frozenset()
        values.psum.end_widening()
        for t in live:
            _drop(t)
        rng = getattr(values, "_rng", None)
        if rng is not None:
            core._rng = rng


def _safe_alias_sources(prepared, tensors: dict) -> frozenset:
    """The HBM tensors this run's aliasing loads may view (ids): those sharing no memory with a
    tensor the program writes (e.g. a resident tensor and a reshaped alias of it passed as two
    arguments); the other loads copy."""
    if not prepared.alias_sources:
        return frozenset()
    written = [tensors[bid]._data for bid in prepared.written_hbm if tensors[bid]._data is not None]
    safe = set()
    for bid in prepared.alias_sources:
        t = tensors[bid]
        if t._data is not None and t.alias_of is None and not any(np.may_share_memory(t._data, w) for w in written):
            safe.add(id(t))
    return frozenset(safe)


def _written_whole(t: Tensor, data: np.ndarray, shared: bool) -> None:
    """A values tile placed (as `_reset`) and written whole (as `View.write`) with `data`; `shared`:
    the array is another tensor's (copy on write)."""
    t.freed = False
    t.version = 0
    t._data = data
    t._shared = shared
    t.poison = None
    t.written = None
    t._unpoisoned = False


def _reset(t: Tensor) -> None:
    """A values tile placed again: fresh memory, nothing written (as `tensor.fresh_like`)."""
    if t._pending is not None and type(t._pending) is not dict:
        t._pending.future.cancel() or t._pending.future.exception()   # never read: drop or let end
    t.freed = False
    t.version = 0
    t._shared = False
    t._pending = None
    t._data = np.empty(t.shape, dtype=t.dtype)
    t.written = np.zeros(t.shape, dtype=bool)
    t._unpoisoned = True


def _drop(t: Tensor) -> None:
    """A tile's end (OnChipMemory.free without the memory's bookkeeping): its values go; the tile
    object stays with the program's bound plan for the next run. (Fresh tile objects per run were
    reference cycles with their `full` views: at batch 64 ~90,000 objects of garbage per run for the
    cyclic collector, 0.1-0.25 s.)"""
    if t._pending is not None and type(t._pending) is not dict:
        t._pending.future.cancel() or t._pending.future.exception()   # never read: drop or let end
    t.freed = True
    t._pending = None
    t._shared = False
    t._data = None
    t.written = None

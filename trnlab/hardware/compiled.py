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
    program.matmul_dtypes = set(core._matmul_dtypes)
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
    derived = program.derived          # (a copy of a program, e.g. rescheduled, compiles anew)
    cache = derived.get("compiled")
    if cache is None:
        cache = derived.put("compiled", {})
    for s, c in cache.items():
        if s is spec or s == spec:
            return c
    issues = None
    traced = program.issue_spec
    if traced is not None and (traced is spec or traced == spec):
        issues = [i.issue for i in program.instructions]
        if any(i is None for i in issues):
            issues = None
    if issues is None:
        issues = describe(program, spec)
    c = cache[spec] = Compiled(program, spec, issues, program.matmul_dtypes)
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


# The values replay (values plans, their order, bound plans, run_values) is a fast path of its own:
# hardware/fast/values_replay.py. ValuesCore's variants reset or fill a values tile in one step:
class _Kind:
    """The memory a prototype tensor claims to be in (prototypes hold no values)."""

    def __init__(self, kind: str):
        self.kind = kind


def _reset(t: Tensor) -> None:
    t.reset()


def _written_whole(t: Tensor, data: np.ndarray, shared: bool) -> None:
    t.written_whole(data, shared)

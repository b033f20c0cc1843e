"""The timing replay of a traced program: its dependencies resolved once, its times in one loop.

A program that was traced was already checked: the trace ran every instruction through the core's
rule checks and described it (`describe.py`). What a timing replay still has to do is scheduling —
and most of the scheduler's work does not depend on time at all: which earlier accesses an
instruction's operands overlap, which records a write covers, when a record list is merged, which
bytes a new tile inherits from a freed one, which PSUM banks an instruction touches, what each
instruction costs. Only the *values* (start, end, ready times) and a few choices made on them (the
DMA queue free first, the earliest free slot of a shared port or channel) change from run to run.

So a program is compiled once per spec (`compiled_for`, cached on the Program):

1. **describe** (`describe.py`): each instruction's description (`records.ComputeIssue`, ...),
   recorded by the trace as it goes, or described once here for a program loaded from JSON.
2. **resolve** (`_resolve`): the scheduler's bookkeeping (`dependencies.py`: RAW / WAR / WAW on
   overlapping boxes, record merging, freed bytes) is run once on *nodes* instead of times: per
   instruction, the ordered list of the earlier results it must wait for — exactly the records
   the core would have examined, in the order it would have (merged records and freed bytes
   becoming groups of nodes). The result is a list of resolved ops: tuples of the fields of
   `records.EngineOp`, `PeOp`, `DmaOp`, ... (plain tuples: the replay's loop unpacks one per
   instruction, and Python unpacks an exact tuple fastest; `records.as_op` names one).
3. **replay** (`run_timing`): one loop over the ops computes every time — hence the *same
   timeline*, record for record (tests/test_program.py compares both paths on several kernels,
   launches and cores, and on kernels hypothesis writes). Once an op's data is ready, its times are
   the steps of the core's own `engines.EngineTimes` — the one timing model, which the directly
   driven core and the list schedule call too; so launches on several cores of a device interleave
   as before.

The structure depends on the core's on-chip state left by earlier launches (which byte ranges of
SBUF/PSUM were freed); it is resolved per such layout (a program replayed on the same core reaches
a steady layout after one or two launches). Where the replay cannot be exact, `replay.py` uses the
checked path: full mode, a resident tensor the program writes, one with pending writes or one
passed as two arguments, tiles still live in the core's memories, an instruction of zero duration.
"""
from __future__ import annotations

from .describe import describe
from .engines import DVE, PE, port_keys
from .memory import put_range, take_ranges
from .records import (DMA, DMA_OP, ENGINE_OP, ISSUE, LATEST_OP, MATMUL, PE_ISSUE, PE_OP, PRINT_OP,
                      SEED, SEED_OP)
from .dependencies import _union, add_read, add_write, read_waits, write_waits


# -- the resolved program ------------------------------------------------------------------------
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


def placed_ports(d, buffers, bank_bytes: int) -> tuple:
    """The shared ports (`engines.port_keys`) a compute description needs once its tiles are placed
    (`buffers`' offsets give its PSUM banks)."""
    psum_port = d[10]
    ranges = () if psum_port in (None, "core") else [
        ((buffers[bid].offset or 0) + lo, (buffers[bid].offset or 0) + hi) for bid, lo, hi in psum_port]
    return port_keys(d[9], psum_port, bank_bytes, ranges)


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
        ops.append((LATEST_OP, n_nodes, nodes))
        n_nodes += 1
        return (n_nodes - 1,)

    def take_retired(memory, lo, hi):
        """OnChipMemory._inherit on groups: the overlapping freed ranges' nodes, in order."""
        return [n for r in take_ranges(retired[memory], rstarts[memory], lo, hi) for n in r[2]]

    def merged_read(old):           # dependencies.compact's merge, on groups
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
            ops.append((DMA_OP, dedupe(deps), queue, fixed, cycles, engine_ns, hbm, node, opcode,
                             sbuf, note))
            group = (node,)
            note_reads(rrefs, group)
            note_write(dref, group)
            for r in rrefs:
                if r[0] in resident_reads:
                    resident_reads[r[0]].append((r[1], node))
        elif kind == MATMUL:
            _, dref, sref, mref, busy, lat, load, flops, sbuf, psum = d[:10]
            tiles = d[10] if len(d) > 10 else 0         # MatmulIssue.tiles (tiling mode)
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
            ops.append((PE_OP, dedupe(pre), new, dedupe(st_deps), dedupe(post), dedupe(group_deps),
                            busy, lat, load, end_node, ready_node, "nc_matmul", flops, sbuf, psum, note, tiles))
            note_reads((sref, mref), (end_node,))
            note_write(dref, (ready_node,), True)
        elif kind == ISSUE:
            _, eid, opcode, dur, rrefs, wrefs, flops, sbuf, psum, sbuf_port, psum_port, hidden = d
            deps = []
            raw(rrefs, deps)
            for w in wrefs:
                war_waw(w, deps)
            ports = placed_ports(d, buffers, bank_bytes)
            node = n_nodes
            n_nodes += 1
            ops.append((ENGINE_OP, eid, dur, dedupe(deps), ports, node, opcode, flops, sbuf,
                                psum, note, hidden))
            group = (node,)
            note_reads(rrefs, group)
            for w in wrefs:
                note_write(w, group)
            for r in rrefs:
                if r[0] in resident_reads:
                    resident_reads[r[0]].append((r[1], node))
        elif kind == PE_ISSUE:
            _, opcode, sref, rrefs, dref, busy, lat, load, flops, sbuf, psum = d[:11]
            tiles = d[11] if len(d) > 11 else 0         # TensorIssue.tiles (tiling mode)
            pre, st_deps, post = [], [], []
            raw(rrefs, pre)
            raw((sref,), st_deps)
            stationary = None
            war_waw(dref, post)
            end_node, ready_node = n_nodes, n_nodes + 1
            n_nodes += 2
            # (as a matmul that always loads its stationary tile and joins no accumulation group)
            ops.append((PE_OP, dedupe(pre), True, dedupe(st_deps), dedupe(post), (), busy, lat, load,
                            end_node, ready_node, opcode, flops, sbuf, psum, note, tiles))
            note_reads((sref,) + rrefs, (end_node,))
            note_write(dref, (ready_node,))
        elif kind == SEED:
            _, rrefs, dur = d
            deps = []
            raw(rrefs, deps)
            node = n_nodes
            n_nodes += 1
            ops.append((SEED_OP, dedupe(deps), dur, node, note))
            note_reads(rrefs, (node,))
        else:
            ops.append((PRINT_OP, d[1], d[2]))
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
                ops.append((LATEST_OP, n_nodes, group))
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
            from .. import config
            if config.fast():       # the same steps with the helpers written out (fast/resolve.py)
                from .fast.resolve import resolve
            else:
                resolve = _resolve
            r = self._resolved[key] = resolve(self.program, self.issues, self.spec, layout, self._static)
        return r


def _summary(issues) -> tuple[bool, set]:
    """(does every instruction take time?, the buffer ids the program writes) — one pass."""
    written = set()
    positive = True
    for d in issues:                    # (positions: a pass over every instruction at each compile)
        kind = d[0]
        if kind == DMA:
            written.add(d[2][0])                            # DmaIssue.dst
            positive = positive and d[6] + d[7] > 0         # fixed_ns + cycles
        elif kind == MATMUL:
            written.add(d[1][0])                            # MatmulIssue.dst
            positive = positive and d[4] > 0                # busy
        elif kind == ISSUE:
            written.update(bid for bid, _ in d[5])          # ComputeIssue.writes
            positive = positive and d[3] > 0                # duration
        elif kind == PE_ISSUE:
            written.add(d[4][0])                            # TensorIssue.dst
            positive = positive and d[5] > 0                # busy
        elif kind == SEED:
            positive = positive and d[2] > 0                # SeedIssue.duration
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
        issues = describe(program, spec)      # (the trace's are plain tuples of the same fields)
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

    Each instruction's data is ready at the latest of its dependency nodes (the running maximum
    written out here, the first node reaching it deciding); the rest is the core's own engine
    model (`engines.EngineTimes`): the same steps, on the same state, as the directly driven core."""
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
    times = core.engine_times
    compute, tensor, dma, queue = times.compute, times.tensor, times.dma, times.queue
    now = core._now
    for op in r.ops:
        kind = op[0]
        if kind == DMA_OP:
            _, deps, q, fixed, cycles, engine_ns, hbm, node, opcode, sbuf, note = op
            t = 0.0
            w = -1
            for n in deps:
                if T[n] > t:
                    t = T[n]
                    w = W[n]
            eid, t, end, w = dma(q, t, w, fixed, cycles, engine_ns, hbm)
            T[node] = end
            W[node] = idx
            append((eid, opcode, t, end, end, 0.0, hbm, sbuf, 0, w, note))     # a records.Record
            if end > now:
                now = end
        elif kind == PE_OP:
            (_, pre, new, st_deps, post, group, busy, lat, load, end_node, ready_node, opcode, flops,
             sbuf, psum, note, tiles) = op
            start = 0.0
            w = -1
            for n in pre:
                if T[n] > start:
                    start = T[n]
                    w = W[n]
            st_ready = 0.0
            st_w = -1
            for n in st_deps:
                if T[n] > st_ready:
                    st_ready = T[n]
                    st_w = W[n]
            dst_ready = 0.0
            dst_w = -1
            for n in post:
                if T[n] > dst_ready:
                    dst_ready = T[n]
                    dst_w = W[n]
            group_ready = 0.0
            for n in group:
                if T[n] > group_ready:
                    group_ready = T[n]
            start, end, ready, w = tensor(start, w, new, st_ready, st_w, load, dst_ready, dst_w, group_ready,
                                          busy, lat, tiles)
            T[end_node] = end
            T[ready_node] = ready
            W[end_node] = W[ready_node] = idx
            append((PE, opcode, start, end, ready, flops, 0, sbuf, psum, w, note))
            if ready > now:
                now = ready
        elif kind == ENGINE_OP:
            _, eid, dur, deps, ports, node, opcode, flops, sbuf, psum, note, hidden = op
            t = 0.0
            w = -1
            for n in deps:
                if T[n] > t:
                    t = T[n]
                    w = W[n]
            t, end, w = compute(eid, t, w, dur, hidden, ports, idx)
            T[node] = end
            W[node] = idx
            append((eid, opcode, t, end, end, flops, 0, sbuf, psum, w, note))
            if end > now:
                now = end
        elif kind == LATEST_OP:
            _, node, inputs = op
            t, w = 0.0, -1
            for n in inputs:
                if T[n] > t:
                    t = T[n]
                    w = W[n]
            T[node], W[node] = t, w
            continue
        elif kind == SEED_OP:
            _, deps, dur, node, note = op
            t = 0.0
            w = -1
            for n in deps:
                if T[n] > t:
                    t = T[n]
                    w = W[n]
            t, end, w = queue(DVE, t, w, dur)
            T[node] = end
            W[node] = idx
            append((DVE, "random_seed", t, end, end, 0.0, 0, 0, 0, w, note))
            if end > now:
                now = end
        else:
            print(op[1], op[2])
            continue
        idx += 1
    # the state the checked replay leaves behind
    core._now = now
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

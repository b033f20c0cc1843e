"""A dependency-aware list schedule: the order in which each engine's queue issues a program.

Every engine runs its own queue in order, waiting for other engines only through dependencies;
which order each queue gets is the compiler's choice. `list_order` chooses one the way a list
scheduler does: it simulates the engines on the allocated program and, whenever an engine can
issue, gives it the ready instruction with the highest priority —

1. the earliest time its inputs are ready (an engine never idles for an instruction whose inputs
   come later while another one could run now),
2. then program order (the oldest first; so a program whose instructions are already in a good
   order keeps it).

That is AWS's default heuristic, ASAP ("select the instruction that can start first";
`nki.compiler.SchedulingHeuristic`, `CompileConfig.experimental_scheduling_heuristic`, NKI docs of
2026-11-13). `list_order(..., heuristic=)` offers two more of AWS's (its fourth, TRIVIAL, keeps the
kernel's order: schedule "program"), each read as a change to rule 2 only — an engine still never
idles for an instruction whose inputs come later:

- ``"critical_path"`` ("prefer the instruction on the longest path to the kernel's outputs"): among
  the instructions of an engine whose inputs are ready, the one with the longest path to the end of
  the constraint graph first (`critical_paths`: the sum of the durations the resolved ops carry,
  its own included; then program order; engines issuing at the same time go by the same rank). It
  decides which ready instruction goes first, never holds an engine back for a longer path still
  waiting for its inputs;
- ``"dma_prefetch"`` ("prefer a DMA to an instruction that is not a DMA"): when engines can issue at
  the same time, the DMA queues first. In trnlab every queue class holds only DMAs or only
  compute, and each runs on its own: a DMA is never held back by compute but through a dependency,
  and DMAs share nothing with compute engines (the DMA engines and HBM channel are theirs alone). So
  this only breaks ties between engines whose next issue starts at the same time: the order lists
  such a DMA first, each engine's queue keeps its order and every time stays ASAP's.

The simulation uses the timing replay's own pieces (`replay_timing.py`): the same descriptions and
costs (the pure cost model), the same dependency nodes of every instruction (RAW, WAR, WAW on
overlapping bytes, PSUM accumulation groups, the bytes a tile inherits from a freed one), and the
one engine model (`engines.EngineTimes`: the queues, the DMA queues and channels, the shared ports,
LoadStationary). The order it returns is then replayed like any program; the times it predicted
(`list_order(..., times=[])`) are the replay's of that order (tests/test_hardware_engine_model.py,
tests/test_scheduling_heuristics.py).

What may not move (each a constraint of the graph, not a priority):

- every dependency the replay waits for (the resolved nodes of `replay_timing._resolve`);
- the matmuls of one PSUM accumulation group stay in order (they are dependencies of each other:
  values are summed in the same order, bit for bit);
- a matmul that reuses the stationary tile the previous Tensor-engine instruction loaded stays
  after it (the stationary's writer is that instruction's dependency);
- **memory**: the schedule keeps the program-order allocation. Two tiles that share bytes keep
  their order *and* their live ranges stay apart: every instruction of the later tile comes after
  every instruction of the earlier one. So each tile keeps its address, no two live tiles share a
  byte, and memory can never overflow — the list schedule overlaps what the allocation's rotation
  (multi-buffering) leaves independent, and no more;
- HBM tensors that alias each other (a reshaped output), and the random-number stream
  (`set_rng_seed`, `dropout`): kept in program order among themselves;
- regions (a compiled model's ops): each run of instructions of one region stays after the run
  before it — the schedule reorders within a region, so a per-region profile stays the region's.
  A kernel inlined into another (called while tracing) belongs to its caller's region here: AWS's
  compiler compiles the two as one kernel;
- a program with `device_print`, or with an instruction of no duration of its own (a collective,
  which the cluster times), is kept in program order as a whole.

Cost: O((n + e) log n) for n instructions and e dependency edges (heaps per engine queue and one
over the engines); the 8192³ matmul's 200,000 instructions schedule in a few seconds.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from heapq import heappop, heappush

from . import cost, dependencies
from .allocate import target_spec
from .engines import DVE, FIRST_DMA, EngineTimes
from .program import Program
from .records import (DMA_OP, ENGINE_OP, ISSUE, LATEST_OP, MATMUL, PE_OP, PRINT_OP, SEED_OP,
                      as_description, op_deps, op_nodes, write_refs)
from .replay_timing import Compiled, compiled_for
from .system import STATEFUL_OPCODES
from .tensor import PrototypeMemory, Tensor, View

_FRESH = {"sbuf": (), "psum": ()}     # the on-chip layout of a fresh core (nothing freed yet)
HEURISTICS = ("asap", "critical_path", "dma_prefetch")     # which ready instruction goes first
_RNG_OPCODES = ("set_rng_seed", "dropout") + STATEFUL_OPCODES


class _Graph:
    """The instructions' constraints as vertices: instructions 0..n-1, then "latest of" nodes of the
    resolve and the tiles' release / acquire points. `succ[v]`: vertices waiting for v; `npred[v]`:
    how many edges into v."""

    def __init__(self, n: int):
        self.n = n
        self.succ: list[list[int]] = [[] for _ in range(n)]
        self.npred: list[int] = [0] * n
        self.inputs: dict[int, tuple] = {}      # a "latest of" vertex -> the nodes it is the latest of
        self.defines: dict[int, int] = {}       # ... and the node it stands for

    def vertex(self) -> int:
        self.succ.append([])
        self.npred.append(0)
        return len(self.succ) - 1

    def edge(self, u: int, v: int) -> None:
        self.succ[u].append(v)
        self.npred[v] += 1


def _instruction_ops(resolved) -> tuple[list, list]:
    """(the op of each instruction in program order, the "latest of" ops)."""
    ins_ops, v_ops = [], []
    for op in resolved.ops:
        (v_ops if op[0] == LATEST_OP else ins_ops).append(op)
    return ins_ops, v_ops


# -- the one order-dependent fact of a description: a Vector instruction's hidden overhead ----------
def _reads_previous(d, previous_writes) -> bool:
    """Does Vector description `d` read what `previous_writes` (the engine's previous Vector
    instruction's written refs) wrote? (`NeuronCore._vector_hidden_ns`)"""
    return previous_writes is not None and any(
        r[0] == w[0] and dependencies.overlap(r[1], w[1]) for r in d.reads for w in previous_writes)


def _free_size(program: Program, k: int, ref) -> int:
    """The free size of the operand of instruction k that `ref` (buffer id, box) describes."""
    b = program.buffers[ref[0]]
    proto = Tensor(PrototypeMemory(b.memory), b.shape, b.dtype, b.name, b.partition_axis if b.on_chip else None,
                   b.offset or 0, False)
    views = [proto.full if a.index is None else View(proto, a.index)
             for a in program.instructions[k].operands.values() if a.buffer == ref[0]]
    return next((v.free_size for v in views if v.box == ref[1]), views[0].free_size)


def independent_hidden(program: Program, issues: list, spec) -> dict[int, float]:
    """Per Vector-engine issue (by program index): the static overhead it hides back to back if it
    does *not* read its predecessor's result (`cost.vector_hidden_static_cycles`). The trace
    described each instruction after its program-order predecessor; another order needs this."""
    clock_ns = 1e9 / spec.dve_clock_hz
    out, previous = {}, None
    for k, d in enumerate(issues):
        if d[0] != ISSUE or d[1] != DVE:
            continue
        d = as_description(d)
        hidden = d.hidden
        if hidden or not _reads_previous(d, previous):
            out[k] = hidden
        else:
            first = d.reads[0] if d.reads else d.writes[0]
            out[k] = cost.vector_hidden_static_cycles(spec, "dve", _free_size(program, k, first), False) * clock_ns
        previous = d.writes
    return out


def issues_in_order(program: Program, order: list[int], spec) -> list:
    """The descriptions of `program`'s instructions in `order`, each Vector issue's hidden overhead
    decided by its predecessor in that order (as the trace would have described them)."""
    issues = compiled_for(program, spec).issues
    free = independent_hidden(program, issues, spec)
    out, previous = [], None
    for k in order:
        d = issues[k]
        if d[0] == ISSUE and d[1] == DVE:
            d = as_description(d)
            hidden = 0.0 if _reads_previous(d, previous) else free[k]
            if hidden != d.hidden:
                d = d._replace(hidden=hidden)
            previous = d.writes
        out.append(d)
    return out


def compiled_in_order(new: Program, program: Program, order: list[int], spec) -> None:
    """Give `new` (program's instructions in `order`) its compiled form for `spec` from program's
    descriptions, without describing every instruction again."""
    issues = issues_in_order(program, order, spec)
    new.derived.put("compiled", {spec: Compiled(new, spec, issues, program.matmul_dtypes)})
    new.issue_spec = None              # (the instructions' own descriptions are program order's)


def tile_bytes(program: Program) -> list[int]:
    """Bytes per partition of every buffer (0 off chip), computed once per (shape, dtype, axis)."""
    known: dict = {}
    sizes = [0] * len(program.buffers)
    for b in program.buffers:
        if b.on_chip and b.first >= 0:
            key = (b.shape, b.dtype, b.partition_axis)
            size = known.get(key)
            if size is None:
                size = known[key] = b.partition_bytes
            sizes[b.id] = size
    return sizes


def _previous_owners(program: Program, sizes: list[int]) -> dict[int, set]:
    """Tile id -> the earlier tiles whose bytes it takes over (in program order, the latest tile
    placed on each of its bytes), per memory."""
    owners: dict[int, set] = {}
    for memory in ("sbuf", "psum"):
        tiles = sorted((b for b in program.buffers if b.memory == memory and b.first >= 0 and b.offset is not None),
                       key=lambda b: (b.first, not b.placement, b.id))
        starts: list[int] = []        # segments of bytes by their last owner: [lo, hi) -> tile id
        ends: list[int] = []
        who: list[int] = []
        for b in tiles:
            lo = b.offset
            hi = lo + sizes[b.id]
            if hi <= lo:
                continue
            i = bisect_right(ends, lo)            # first segment ending after lo
            j = bisect_left(starts, hi)           # first segment starting at or after hi
            if i < j:
                owners[b.id] = set(who[i:j])
                new_s, new_e, new_w = [lo], [hi], [b.id]
                if starts[i] < lo:                # the part of the first segment before lo stays
                    new_s.insert(0, starts[i])
                    new_e.insert(0, lo)
                    new_w.insert(0, who[i])
                if ends[j - 1] > hi:              # ... and of the last one after hi
                    new_s.append(hi)
                    new_e.append(ends[j - 1])
                    new_w.append(who[j - 1])
                starts[i:j], ends[i:j], who[i:j] = new_s, new_e, new_w
            else:
                starts.insert(i, lo)
                ends.insert(i, hi)
                who.insert(i, b.id)
    return owners


def build_graph(program: Program, resolved) -> tuple[_Graph, list, list]:
    """The constraint graph of an allocated program (module docstring), its instructions' ops and
    each node's vertex."""
    n = len(program.instructions)
    ins_ops, v_ops = _instruction_ops(resolved)
    if len(ins_ops) != n:
        raise AssertionError(f"resolved {len(ins_ops)} instructions of a program of {n}")
    g = _Graph(n)
    succ, npred = g.succ, g.npred
    vertex_of = [-1] * resolved.nodes
    for k, op in enumerate(ins_ops):
        for node in op_nodes(op):
            vertex_of[node] = k
    for op in v_ops:
        v = g.vertex()
        vertex_of[op[1]] = v
        g.inputs[v] = op[2]
        g.defines[v] = op[1]
    for op in v_ops:                     # a "latest of" node waits for its inputs
        v = vertex_of[op[1]]
        for node in op[2]:
            u = vertex_of[node]
            if u >= 0:
                succ[u].append(v)
                npred[v] += 1
    for k, op in enumerate(ins_ops):     # every node an instruction waits for
        nodes = op_deps(op)
        for u in {vertex_of[node] for node in nodes} if len(nodes) > 1 else [vertex_of[node] for node in nodes]:
            if u >= 0:
                succ[u].append(k)
                npred[k] += 1
    # a matmul reusing the stationary tile of the previous Tensor-engine instruction stays after it
    previous_pe = -1
    for k, op in enumerate(ins_ops):
        if op[0] == PE_OP:
            if not op[2] and previous_pe >= 0:          # (PeOp.new)
                g.edge(previous_pe, k)
            previous_pe = k
    # program order among the random-number stream's instructions and among aliased HBM tensors
    buffers = program.buffers

    def root(bid: int) -> int:
        while buffers[bid].alias_of is not None:
            bid = buffers[bid].alias_of
        return bid
    aliased = {root(b.id) for b in buffers if b.alias_of is not None}
    on_chip = [b.on_chip for b in buffers]
    last_rng, last_alias = -1, {}
    for producer, consumer in getattr(program, "schedule_edges", ()):   # kernel.with_schedule (nki/schedule.py)
        g.edge(producer, consumer)
    touches: dict[int, list[int]] = {}   # on-chip tile id -> the instructions touching it
    for k, ins in enumerate(program.instructions):
        if ins.opcode in _RNG_OPCODES:
            if last_rng >= 0:
                g.edge(last_rng, k)
            last_rng = k
        for bid in {a.buffer for a in ins.operands.values()}:
            if on_chip[bid]:
                t = touches.get(bid)
                if t is None:
                    touches[bid] = [k]
                else:
                    t.append(k)
            elif aliased:
                r = root(bid)
                if r in aliased:
                    if r in last_alias and last_alias[r] != k:
                        g.edge(last_alias[r], k)
                    last_alias[r] = k
    # regions (a compiled model's ops) keep their order: every instruction of a run of one region
    # comes after all of the run before it, so a per-region profile stays the region's (the
    # schedule reorders within each). The region of a kernel inlined into another (noted at trace)
    # is its caller's: AWS's compiler compiles a kernel and the kernels it calls as one
    inlined = program.inlined_regions
    keys = {}
    for ins in program.instructions:
        if ins.region not in keys:
            keys[ins.region] = "/".join(c for c in ins.region.split("/") if c not in inlined)
    key = [keys[ins.region] for ins in program.instructions]
    previous_run, run, barrier = [], [0] if n else [], None
    for k in range(1, n + 1):
        if k < n and key[k] == key[k - 1]:
            run.append(k)
            continue
        if previous_run:                 # run follows previous_run: a barrier vertex between them
            barrier = g.vertex()
            for j in previous_run:
                succ[j].append(barrier)
                npred[barrier] += 1
            for j in run:
                succ[barrier].append(j)
                npred[j] += 1
        previous_run, run = run, [k]
    # memory: a tile's instructions all come after every instruction of the tiles whose bytes it
    # takes over (their release -> its acquire; a single instruction or owner is its own point)
    release: dict[int, int] = {}

    def released(a: int) -> int:
        r = release.get(a)
        if r is None:
            ks = touches.get(a, ())
            if len(ks) == 1:
                r = ks[0]
            else:
                r = g.vertex()
                for k in ks:
                    succ[k].append(r)
                    npred[r] += 1
            release[a] = r
        return r
    for bid, earlier in _previous_owners(program, tile_bytes(program)).items():
        if len(earlier) == 1:
            acquire = released(next(iter(earlier)))
        else:
            acquire = g.vertex()
            for a in earlier:
                g.edge(released(a), acquire)
        for k in touches.get(bid, ()):
            if k != acquire:
                succ[acquire].append(k)
                npred[k] += 1
    return g, ins_ops, vertex_of


def _rewrites(issues: list, stationaries: set) -> list[tuple]:
    """Per description, the buffers it writes that some matmul loads as its stationary tile."""
    empty = ()
    if not stationaries:
        return [empty] * len(issues)
    out = []
    for d in issues:
        out.append(tuple(bid for bid, _ in write_refs(d) if bid in stationaries) or empty)
    return out


def check_heuristic(heuristic: str) -> str:
    """`heuristic` if it is one of HEURISTICS; else a ValueError naming them."""
    if heuristic not in HEURISTICS:
        raise ValueError(f"unknown scheduling heuristic {heuristic!r}; choose one of {HEURISTICS}")
    return heuristic


def _duration(op: tuple, bandwidth: float) -> float:
    """ns from an instruction's start until every node it produces is set, with nothing else in its
    way: the costs its resolved op carries (`engines.EngineTimes`'s steps without contention)."""
    kind = op[0]
    if kind == DMA_OP:          # the fixed latency, then the transfer, its DMA-engine and HBM shares
        _, _, _, fixed, cycles, engine_ns, hbm = op[:7]
        return fixed + max(cycles, engine_ns, hbm * 1e9 / bandwidth)
    if kind == PE_OP:           # the array busy; the result in PSUM `latency` after the start
        return max(op[6], op[7])  # (whether a LoadStationary precedes it depends on the order: left out)
    if kind == ENGINE_OP or kind == SEED_OP:
        return op[2]            # (the Vector engine's hidden overhead depends on the order: left out)
    return 0.0


def critical_paths(g: _Graph, ops: list, bandwidth: float) -> list[float]:
    """Per instruction of `g`: the longest sum of instruction durations (`_duration`) on a path from
    it to the graph's end, its own included (vertices >= g.n take no time)."""
    n, succ = g.n, g.succ
    npred = list(g.npred)
    stack = [v for v in range(len(succ)) if npred[v] == 0]
    topological = []
    while stack:
        u = stack.pop()
        topological.append(u)
        for w in succ[u]:
            npred[w] -= 1
            if npred[w] == 0:
                stack.append(w)
    path = [0.0] * len(succ)
    for v in reversed(topological):
        longest = 0.0
        for w in succ[v]:
            if path[w] > longest:
                longest = path[w]
        path[v] = longest + _duration(ops[v], bandwidth) if v < n else longest
    return path[:n]


def list_order(program: Program, spec=None, times: list | None = None, heuristic: str = "asap") -> list[int]:
    """The list schedule of an allocated `program` as an order of its instruction indices, choosing
    among ready instructions by `heuristic` (one of HEURISTICS; module docstring); with `times` (a
    list), also the times it predicts, per instruction in program order: (engine id, start, end,
    ready) — those of a fresh core replaying the order."""
    check_heuristic(heuristic)
    spec = target_spec(program, spec)
    n = len(program.instructions)
    if n == 0 or any(i.opcode == "device_print" for i in program.instructions):
        return list(range(n))
    compiled = compiled_for(program, spec)
    if not compiled.positive:            # an instruction of no duration of its own (a collective,
        return list(range(n))            # timed by the cluster): the replay's checked path, in order
    resolved = compiled.resolved(_FRESH)
    g, ops, _ = build_graph(program, resolved)
    issues = compiled.issues
    free_hidden = independent_hidden(program, issues, spec)
    dve_previous = None                   # the writes of the last Vector issue in the schedule
    engines = EngineTimes(spec, FIRST_DMA + spec.dma_queues)    # a fresh core's engines
    engines.barrier(spec.launch_start_ns)     # a launch begins after the runtime's start-up
    free = engines.free                   # PE, ACT, DVE, POOL, then the DMA queues
    version = [0] * len(program.buffers)  # writes so far per buffer (a rewritten stationary is new)
    stationary = None                     # (buffer id, box, version) the Tensor engine holds
    stationaries = {d[2][0] for d in issues if d[0] == MATMUL}       # MatmulIssue.stationary
    rewrites = _rewrites(issues, stationaries)
    deps_of = [op_deps(op) for op in ops]
    predicted = [None] * n if times is not None else None

    # the queue class of each instruction: 0-3 the compute engines, 4 any DMA queue, 5+q queue q
    cls = [0] * n
    for k, op in enumerate(ops):
        kind = op[0]
        if kind == ENGINE_OP:
            cls[k] = op[1]                                  # EngineOp.engine
        elif kind in (SEED_OP, PRINT_OP):
            cls[k] = DVE
        elif kind == DMA_OP:
            cls[k] = 4 if op[2] is None else 5 + op[2]      # DmaOp.queue
    n_cls = 5 + spec.dma_queues
    # the heaps hold each instruction's rank: program order, or (critical_path) the longest path
    # first, then program order; `by_rank` gives the instruction back
    if heuristic == "critical_path":
        path = critical_paths(g, ops, engines.bandwidth)
        by_rank = sorted(range(n), key=lambda k: (-path[k], k))
        rank = [0] * n
        for r, k in enumerate(by_rank):
            rank[k] = r
    else:
        rank = by_rank = list(range(n))
    # events at one start estimate: (dma_prefetch) the DMA queue classes first, else by rank
    tie = [int(heuristic == "dma_prefetch" and c < 4) for c in range(n_cls)]
    pending = [[] for _ in range(n_cls)]  # released, by (inputs ready, rank)
    ready = [[] for _ in range(n_cls)]    # released and ready by the queue's free time, by rank
    class_version = [0] * n_cls
    events: list = []                     # (start estimate, tie, rank, class, version)
    T = [0.0] * resolved.nodes
    est = [0.0] * n
    npred = g.npred
    succ = g.succ
    inputs, defines = g.inputs, g.defines
    named = sorted({cls[k] for k in range(n) if cls[k] > 4})     # DMA queues the program names

    queue_heap = engines.queue_heap       # its top: the DMA queue free first (EngineTimes keeps it)
    named_at = FIRST_DMA - 5              # class 5 + q is DMA queue q: engine FIRST_DMA + q

    def class_free(c: int) -> float:
        if c < 4:
            return free[c]
        if c == 4:
            return queue_heap[0][0]
        return free[named_at + c]

    def push_candidate(c: int) -> None:
        f = class_free(c)
        p, r = pending[c], ready[c]
        while p and p[0][0] <= f:
            _, k = heappop(p)
            heappush(r, k)
        class_version[c] += 1
        if r:
            heappush(events, (f, tie[c], r[0], c, class_version[c]))
        elif p:
            heappush(events, (p[0][0], tie[c], p[0][1], c, class_version[c]))

    def latest(nodes) -> float:
        t = 0.0
        for node in nodes:
            if T[node] > t:
                t = T[node]
        return t

    touched = set()

    def complete(v: int) -> None:
        """Vertex v is done: release what waited only for it."""
        stack = [v]
        while stack:
            u = stack.pop()
            for w in succ[u]:
                npred[w] -= 1
                if npred[w] == 0:
                    if w < n:
                        e = est[w] = latest(deps_of[w])
                        heappush(pending[cls[w]], (e, rank[w]))
                        touched.add(cls[w])
                    else:
                        nodes = inputs.get(w)
                        if nodes is not None:      # a "latest of" node: its time is theirs
                            T[defines[w]] = latest(nodes)
                        stack.append(w)

    order: list[int] = []
    for v in range(len(npred)):
        if npred[v] == 0:
            if v < n:
                heappush(pending[cls[v]], (0.0, rank[v]))
            else:
                complete(v)
    for c in range(n_cls):
        push_candidate(c)
    while events:
        _, _, _, c, ver = heappop(events)
        if ver != class_version[c]:
            continue
        r = ready[c]
        k = by_rank[heappop(r) if r else heappop(pending[c])[1]]
        op = ops[k]
        kind = op[0]
        t = est[k]                        # the latest of its dependencies (all done by now)
        if kind == DMA_OP:
            _, _, queue, fixed, cycles, engine_ns, hbm, node = op[:8]
            eid, start, end, _ = engines.dma(queue, t, -1, fixed, cycles, engine_ns, hbm)
            T[node] = done = end
        elif kind == PE_OP:
            _, pre, _, st_deps, post, group, busy, lat, load, end_node, ready_node = op[:11]
            d = issues[k]
            tiles = 0
            if d[0] == MATMUL:            # a new stationary tile: another, or rewritten since
                st = d[2]                 # MatmulIssue.stationary
                held = (st[0], st[1], version[st[0]])
                new, stationary = held != stationary, held
                tiles = d[10] if len(d) > 10 else 0          # MatmulIssue.tiles (tiling mode)
            else:
                new, stationary = True, None
                tiles = d[11] if len(d) > 11 else 0          # TensorIssue.tiles (tiling mode)
            ready_at = st_ready = dst_ready = group_ready = 0.0     # the latest of each node list
            for node in pre:
                if T[node] > ready_at:
                    ready_at = T[node]
            for node in st_deps:
                if T[node] > st_ready:
                    st_ready = T[node]
            for node in post:
                if T[node] > dst_ready:
                    dst_ready = T[node]
            for node in group:
                if T[node] > group_ready:
                    group_ready = T[node]
            start, end, done, _ = engines.tensor(ready_at, -1, new, st_ready, -1, load, dst_ready, -1,
                                                 group_ready, busy, lat, tiles)
            T[end_node], T[ready_node] = end, done
            eid = 0
        elif kind == ENGINE_OP:
            _, eid, dur, _, ports, node, _, _, _, _, _, hidden = op
            if eid == DVE:                # its hidden overhead depends on its predecessor here
                d = as_description(issues[k])
                hidden = 0.0 if _reads_previous(d, dve_previous) else free_hidden[k]
                dve_previous = d.writes
            start, end, _ = engines.compute(eid, t, -1, dur, hidden, ports, k)
            T[node] = done = end
        else:                             # SEED_OP
            eid = DVE
            start, end, _ = engines.queue(DVE, t, -1, op[2])
            T[op[3]] = done = end
        for bid in rewrites[k]:
            version[bid] += 1
        if predicted is not None:
            predicted[k] = (eid, start, end, done)
        order.append(k)
        touched.add(c)
        if kind == DMA_OP:                # every DMA queue class sees the queues' new free times
            touched.add(4)
            touched.update(named)
        complete(k)
        for cc in touched:
            push_candidate(cc)
        touched.clear()
    if len(order) != n:
        raise AssertionError(f"list schedule: {n - len(order)} instructions never became ready (a cycle)")
    if times is not None:
        times[:] = predicted
    return order

"""The list schedule's bookkeeping without its repeated work: the same order and program, sooner.

The reference is `instruction_order.list_schedule`: `list_schedule.list_order` (resolve the program,
build the constraint graph, simulate the engines), then `instruction_order.reorder(...,
keep_offsets=True)` (copy the program in the new order, recompute live ranges, check that no two
tiles sharing bytes are live at once, describe the instructions in the new order). Measured on
AWS's tiled matmul at 4096³ (25,088 instructions) these steps cost about as much each as the
whole trace; this module keeps every step but drops what is computed twice or cannot fail:

- `reorder_kept`: the buffer rows cloned without `copy.copy`'s generic protocol; each Vector
  issue's order-independent hidden overhead (`list_schedule.independent_hidden`) taken from the
  schedule instead of computed again; and no `check_disjoint`: the list schedule's graph orders
  every instruction of a tile after every instruction of the tiles whose bytes it takes over, so
  its order keeps the program-order allocation's disjointness by construction (the tests run the
  reference, which checks it, on the same kernels and compare);
- `list_order`: `list_schedule.list_order` with `build_graph` in one pass over the resolved ops
  (`_graph`) and the simulation's helpers written out; an event the event heap already holds is
  not pushed again; a scheduled instruction releases its successors in place (the order of
  releases is not the reference's, and nothing depends on it: each released instruction goes into
  a heap by its own unique key). The reordered program's compiled form takes the summary of the
  schedule's (`_reordered_compiled`: the same descriptions, so the same durations and writes). The graph differs in one exact way: it leaves out memory edges its dependency
  edges already imply. The reference gives every tile a "release" vertex (after all its
  instructions) and an edge from the release of each earlier owner of its bytes to each of its
  instructions. When the tile's last instruction already waits (a dependency edge) for each of its
  other instructions, that instruction *is* the release; when an instruction of the new tile
  already waits for the tile's first instruction, the edge to the first implies its own (the
  graph's first pass keeps each instruction's set of dependency vertices for these tests). An
  instruction is released by the schedule when its last predecessor is scheduled; an edge u -> w
  implied by a path u -> x -> w is never that last one (x is scheduled after u), so dropping it
  changes no release and no order — and on AWS's tiled matmul (a load writes the tile, one matmul
  reads it) it drops three of the four memory edges of each tile, and its release vertex.

Used by `instruction_order.list_schedule` while `config.fast()`; tests/test_fast_schedule.py
compares program, order and timeline with the reference's.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from heapq import heappop, heappush

from ..program import Buffer, Program


def _clone(b: Buffer) -> Buffer:
    """A shallow copy of a buffer row (what copy.copy makes, without its reduce protocol)."""
    new = object.__new__(Buffer)
    new.__dict__.update(b.__dict__)
    return new


def reorder_kept(program: Program, order: list[int], name: str, hidden: dict | None = None,
                 hidden_spec=None) -> Program:
    """`instruction_order.reorder(program, order, name, keep_offsets=True)` for a complete `order`
    that the list schedule made (its memory constraints keep every tile's bytes disjoint).
    `hidden`: the schedule's `independent_hidden` of `program` for `hidden_spec` (used if that is
    the spec the program was described for; else computed here)."""
    from ..engines import DVE
    from ..list_schedule import _reads_previous, independent_hidden
    from ..records import ISSUE, as_description
    from ..replay_timing import Compiled, compiled_for
    n = len(program.instructions)
    if len(order) != n or len(set(order)) != n or (n and (min(order) < 0 or max(order) >= n)):
        raise ValueError("a schedule must order every instruction exactly once")
    if not program.allocated:
        raise ValueError("reorder(keep_offsets=True) needs an allocated program")
    new = object.__new__(Program)
    new.__dict__.update(program.__dict__)
    new.__dict__.pop("_derived", None)
    instructions = program.instructions
    new.instructions = [instructions[k] for k in order]
    buffers = new.buffers = [_clone(b) for b in program.buffers]
    first = [-1] * len(buffers)
    last = [-1] * len(buffers)
    for k, ins in enumerate(new.instructions):
        for access in ins.operands.values():
            bid = access.buffer
            if first[bid] < 0:
                first[bid] = k
            last[bid] = k
    for b, f, l in zip(buffers, first, last):
        b.first, b.last = f, l
    new.schedule = name if program.schedule in (None, "program", name) else f"{program.schedule}+{name}"
    traced = program.issue_spec
    if traced is not None and all(i.issue is not None for i in instructions):
        compiled = compiled_for(program, traced)
        issues = compiled.issues
        same = hidden is not None and (hidden_spec is traced or hidden_spec == traced)
        free = hidden if same else independent_hidden(program, issues, traced)
        ordered, previous = [], None          # list_schedule.issues_in_order, with `free` given
        for k in order:
            d = issues[k]
            if d[0] == ISSUE and d[1] == DVE:
                d = as_description(d)
                h = 0.0 if _reads_previous(d, previous) else free[k]
                if h != d.hidden:
                    d = d._replace(hidden=h)
                previous = d.writes
            ordered.append(d)
        new.derived.put("compiled", {traced: _reordered_compiled(compiled, new, ordered, program.matmul_dtypes)})
        new.issue_spec = None
    new.allocated = True
    return new


def _reordered_compiled(compiled, new: Program, ordered: list, matmul_dtypes):
    """`Compiled(new, compiled.spec, ordered, ...)` for `ordered`, the descriptions of `compiled`
    in another order (a Vector issue's hidden overhead changed at most): its summary — does every
    instruction take time, which buffers are written — is `compiled`'s (the same descriptions, the
    same durations), so it is taken over instead of computed again."""
    from ..replay_timing import Compiled
    c = object.__new__(Compiled)
    c.program, c.spec, c.issues = new, compiled.spec, ordered
    c.matmul_dtypes = set(matmul_dtypes)
    c.positive, c.written = compiled.positive, set(compiled.written)
    c._resolved, c._static = {}, None
    return c


# -- the order: the reference's graph and simulation, its helpers written out ----------------------
def list_order(program: Program, spec=None) -> tuple[list[int], dict | None, object]:
    """(`list_schedule.list_order(program, spec)`, the `independent_hidden` it used or None, and
    the CoreSpec it scheduled for)."""
    from .. import list_schedule as reference
    from ..allocate import target_spec
    from ..engines import DVE, FIRST_DMA, EngineTimes
    from ..records import (DMA, DMA_OP, ENGINE_OP, ISSUE, MATMUL, PE_ISSUE, PE_OP, PRINT_OP, SEED_OP,
                           as_description)
    from ..replay_timing import compiled_for
    spec = target_spec(program, spec)
    instructions = program.instructions
    n = len(instructions)
    if n == 0 or any(i.opcode == "device_print" for i in instructions):
        return list(range(n)), None, spec
    compiled = compiled_for(program, spec)
    if not compiled.positive:
        return list(range(n)), None, spec
    resolved = compiled.resolved(reference._FRESH)
    succ, npred, inputs, defines, deps_of, ops = _graph(program, resolved)
    issues = compiled.issues
    free_hidden = reference.independent_hidden(program, issues, spec)
    reads_previous = reference._reads_previous
    dve_previous = None
    engines = EngineTimes(spec, FIRST_DMA + spec.dma_queues)
    engines.barrier(spec.launch_start_ns)     # a launch begins after the runtime's start-up
    free = engines.free
    version = [0] * len(program.buffers)
    stationary = None
    stationaries = {d[2][0] for d in issues if d[0] == MATMUL}
    rewrites = _rewrites(issues, stationaries, DMA, MATMUL, ISSUE, PE_ISSUE)

    cls = [0] * n
    for k, op in enumerate(ops):
        kind = op[0]
        if kind == ENGINE_OP:
            cls[k] = op[1]
        elif kind == SEED_OP or kind == PRINT_OP:
            cls[k] = DVE
        elif kind == DMA_OP:
            cls[k] = 4 if op[2] is None else 5 + op[2]
    n_cls = 5 + spec.dma_queues
    pending = [[] for _ in range(n_cls)]
    ready = [[] for _ in range(n_cls)]
    class_version = [0] * n_cls
    events: list = []
    T = [0.0] * resolved.nodes
    est = [0.0] * n
    named = sorted({cls[k] for k in range(n) if cls[k] > 4})
    queue_heap = engines.queue_heap
    named_at = FIRST_DMA - 5
    dma_classes = [4] + named

    posted = [None] * n_cls              # per class: (time, instruction) of its valid event, if any

    def push_candidate(c: int) -> None:
        """The reference's push_candidate, but an event the heap already holds is not pushed again
        (the same time and instruction: the same place in the heap; nothing else compares)."""
        f = free[c] if c < 4 else (queue_heap[0][0] if c == 4 else free[named_at + c])
        p, r = pending[c], ready[c]
        while p and p[0][0] <= f:
            heappush(r, heappop(p)[1])
        key = (f, r[0]) if r else (p[0] if p else None)
        if key == posted[c]:
            return
        class_version[c] += 1
        posted[c] = key
        if key is not None:
            heappush(events, (key[0], key[1], c, class_version[c]))

    touched = set()
    stack = []

    def complete(v: int) -> None:
        stack.append(v)
        while stack:
            for w in succ[stack.pop()]:
                left = npred[w] - 1
                npred[w] = left
                if left == 0:
                    if w < n:
                        e = 0.0
                        for node in deps_of[w]:
                            if T[node] > e:
                                e = T[node]
                        est[w] = e
                        c = cls[w]
                        heappush(pending[c], (e, w))
                        touched.add(c)
                    else:
                        nodes = inputs.get(w)
                        if nodes is not None:
                            t = 0.0
                            for node in nodes:
                                if T[node] > t:
                                    t = T[node]
                            T[defines[w]] = t
                        stack.append(w)

    order: list[int] = []
    for v in range(len(npred)):
        if npred[v] == 0:
            if v < n:
                heappush(pending[cls[v]], (0.0, v))
            else:
                complete(v)
    for c in range(n_cls):
        push_candidate(c)
    dma, tensor, compute, queue = engines.dma, engines.tensor, engines.compute, engines.queue
    while events:
        _, _, c, ver = heappop(events)
        if ver != class_version[c]:
            continue
        posted[c] = None
        r = ready[c]
        if r:
            k = heappop(r)
        else:
            k = heappop(pending[c])[1]
        op = ops[k]
        kind = op[0]
        if kind == DMA_OP:
            T[op[7]] = dma(op[2], est[k], -1, op[3], op[4], op[5], op[6])[2]
        elif kind == PE_OP:
            _, pre, _, st_deps, post, group, busy, lat, load, end_node, ready_node = op[:11]
            d = issues[k]
            if d[0] == MATMUL:
                st = d[2]
                held = (st[0], st[1], version[st[0]])
                new, stationary = held != stationary, held
                tiles = d[10] if len(d) > 10 else 0
            else:
                new, stationary = True, None
                tiles = d[11] if len(d) > 11 else 0
            ready_at = st_ready = dst_ready = group_ready = 0.0
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
            _, end, done, _ = tensor(ready_at, -1, new, st_ready, -1, load, dst_ready, -1, group_ready, busy,
                                     lat, tiles)
            T[end_node], T[ready_node] = end, done
        elif kind == ENGINE_OP:
            _, eid, dur, _, ports, node, _, _, _, _, _, hidden = op
            if eid == DVE:
                d = as_description(issues[k])
                hidden = 0.0 if reads_previous(d, dve_previous) else free_hidden[k]
                dve_previous = d.writes
            T[node] = compute(eid, est[k], -1, dur, hidden, ports, k)[1]
        else:
            T[op[3]] = queue(DVE, est[k], -1, op[2])[1]
        rw = rewrites[k]
        if rw:
            for bid in rw:
                version[bid] += 1
        order.append(k)
        touched.add(c)
        if kind == DMA_OP:
            touched.update(dma_classes)
        for w in succ[k]:                 # complete(k), its instructions released here in place
            left = npred[w] - 1
            npred[w] = left
            if left == 0:
                if w < n:
                    e = 0.0
                    for node in deps_of[w]:
                        if T[node] > e:
                            e = T[node]
                    est[w] = e
                    cw = cls[w]
                    heappush(pending[cw], (e, w))
                    touched.add(cw)
                else:                     # (the same releases in another order: nothing compares it)
                    nodes = inputs.get(w)
                    if nodes is not None:
                        t = 0.0
                        for node in nodes:
                            if T[node] > t:
                                t = T[node]
                        T[defines[w]] = t
                    complete(w)
        for cc in touched:
            push_candidate(cc)
        touched.clear()
    if len(order) != n:
        raise AssertionError(f"list schedule: {n - len(order)} instructions never became ready (a cycle)")
    return order, free_hidden, spec


def _rewrites(issues: list, stationaries: set, DMA, MATMUL, ISSUE, PE_ISSUE) -> list:
    """`list_schedule._rewrites` with `records.write_refs` written out."""
    empty = ()
    if not stationaries:
        return [empty] * len(issues)
    out = []
    append = out.append
    for d in issues:
        kind = d[0]
        if kind == DMA or kind == MATMUL:
            bid = d[2][0] if kind == DMA else d[1][0]
            append((bid,) if bid in stationaries else empty)
        elif kind == ISSUE:
            append(tuple(bid for bid, _ in d[5] if bid in stationaries) or empty)
        elif kind == PE_ISSUE:
            bid = d[4][0]
            append((bid,) if bid in stationaries else empty)
        else:
            append(empty)
    return out


def _owner_order(b) -> tuple:
    return b.first, not b.placement, b.id


def previous_owners(program: Program, sizes: list[int]) -> dict[int, set]:
    """`list_schedule._previous_owners`: tile id -> the earlier tiles whose bytes it takes over. A
    tile placed on exactly the bytes of one segment (the usual case of a loop's rotating tiles)
    takes that segment over in place; any other case is the reference's surgery on the segments."""
    owners: dict[int, set] = {}
    buffers = program.buffers
    for memory in ("sbuf", "psum"):
        tiles = [b for b in buffers if b.memory == memory and b.first >= 0 and b.offset is not None]
        tiles.sort(key=_owner_order)
        starts: list[int] = []        # segments of bytes by their last owner: [lo, hi) -> tile id
        ends: list[int] = []
        who: list[int] = []
        for b in tiles:
            bid = b.id
            lo = b.offset
            hi = lo + sizes[bid]
            if hi <= lo:
                continue
            i = bisect_right(ends, lo)            # first segment ending after lo
            if i < len(starts) and starts[i] == lo and ends[i] == hi:
                owners[bid] = {who[i]}            # (then the first segment starting at hi is i + 1)
                who[i] = bid
                continue
            j = bisect_left(starts, hi)           # first segment starting at or after hi
            if i < j:
                owners[bid] = set(who[i:j])
                new_s, new_e, new_w = [lo], [hi], [bid]
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
                who.insert(i, bid)
    return owners


def _graph(program: Program, resolved) -> tuple:
    """`list_schedule.build_graph` in one pass over the resolved ops: (succ, npred, inputs, defines,
    each instruction's dependency nodes, the instructions' ops). The same edges; the vertices that
    are not instructions (numbered from n) are numbered in another order, which nothing depends on:
    only instruction vertices are ever compared (by program order)."""
    from ..list_schedule import _RNG_OPCODES, tile_bytes
    from ..records import DMA_OP, ENGINE_OP, LATEST_OP, PE_OP, SEED_OP
    instructions = program.instructions
    n = len(instructions)
    succ: list = [[] for _ in range(n)]
    npred = [0] * n
    inputs, defines = {}, {}
    vertex_of = [-1] * resolved.nodes
    ins_ops, deps_of = [], []
    dep_vertices = []                    # per instruction: the vertices it has a dependency edge from
    vertex_of_node = vertex_of.__getitem__
    k = 0
    previous_pe = -1
    for op in resolved.ops:
        kind = op[0]
        if kind == LATEST_OP:
            v = len(succ)
            succ.append([])
            node, nodes = op[1], op[2]
            vertex_of[node] = v
            inputs[v], defines[v] = nodes, node
            count = 0
            for m in nodes:
                u = vertex_of[m]
                if u >= 0:
                    succ[u].append(v)
                    count += 1
            npred.append(count)
            continue
        if kind == DMA_OP:
            vertex_of[op[7]] = k
            deps = op[1]
        elif kind == PE_OP:
            vertex_of[op[9]] = vertex_of[op[10]] = k
            deps = op[1] + op[3] + op[4] + op[5]
            if not op[2] and previous_pe >= 0:       # reuses the stationary the previous PE op loaded
                succ[previous_pe].append(k)
                npred[k] += 1
            previous_pe = k
        elif kind == ENGINE_OP:
            vertex_of[op[5]] = k
            deps = op[3]
        elif kind == SEED_OP:
            vertex_of[op[3]] = k
            deps = op[1]
        else:
            deps = ()
        if len(deps) > 1:
            us = set(map(vertex_of_node, deps))
            for u in us:
                if u >= 0:
                    succ[u].append(k)
                    npred[k] += 1
            dep_vertices.append(us)
        elif deps:
            u = vertex_of[deps[0]]
            if u >= 0:
                succ[u].append(k)
                npred[k] += 1
            dep_vertices.append((u,))
        else:
            dep_vertices.append(())
        ins_ops.append(op)
        deps_of.append(deps)
        k += 1
    if k != n:
        raise AssertionError(f"resolved {k} instructions of a program of {n}")

    def edge(u: int, v: int) -> None:
        succ[u].append(v)
        npred[v] += 1

    def vertex() -> int:
        succ.append([])
        npred.append(0)
        return len(succ) - 1
    buffers = program.buffers

    def root(bid: int) -> int:
        while buffers[bid].alias_of is not None:
            bid = buffers[bid].alias_of
        return bid
    aliased = {root(b.id) for b in buffers if b.alias_of is not None}
    on_chip = [b.on_chip for b in buffers]
    last_rng, last_alias = -1, {}
    for producer, consumer in getattr(program, "schedule_edges", ()):
        edge(producer, consumer)
    touches: list = [None] * len(buffers)     # on-chip tile id -> the instructions touching it
    rng_opcodes = _RNG_OPCODES
    for k, ins in enumerate(instructions):
        if ins.opcode in rng_opcodes:
            if last_rng >= 0:
                edge(last_rng, k)
            last_rng = k
        for a in ins.operands.values():
            bid = a.buffer
            if on_chip[bid]:
                t = touches[bid]
                if t is None:
                    touches[bid] = [k]
                elif t[-1] != k:                  # (once per instruction, as build_graph's set)
                    t.append(k)
            elif aliased:
                r = root(bid)
                if r in aliased:
                    if r in last_alias and last_alias[r] != k:
                        edge(last_alias[r], k)
                    last_alias[r] = k
    # regions: as build_graph (a barrier vertex between consecutive runs of one region)
    inlined = program.inlined_regions
    regions = {ins.region for ins in instructions}
    if len(regions) > 1:
        keys = {r: "/".join(c for c in r.split("/") if c not in inlined) for r in regions}
        key = [keys[ins.region] for ins in instructions]
        previous_run, run = [], [0] if n else []
        for k in range(1, n + 1):
            if k < n and key[k] == key[k - 1]:
                run.append(k)
                continue
            if previous_run:
                barrier = vertex()
                for j in previous_run:
                    succ[j].append(barrier)
                npred[barrier] += len(previous_run)
                for j in run:
                    succ[barrier].append(j)
                    npred[j] += 1
            previous_run, run = run, [k]
    # memory: as build_graph (the earlier owners' release -> the tile's instructions), without the
    # edges the dependencies already imply (a transitive reduction, exact: module docstring)
    release: dict = {}

    def released(a: int) -> int:
        r = release.get(a)
        if r is None:
            ks = touches[a] or ()
            if len(ks) == 1:
                r = ks[0]
            elif not ks:
                r = vertex()
            else:
                r = last = ks[-1]
                for i in ks[:-1]:
                    if i not in dep_vertices[last]:      # (last has no dependency edge from i)
                        r = vertex()
                        for j in ks:
                            succ[j].append(r)
                        npred[r] += len(ks)
                        break
            release[a] = r
        return r
    for bid, earlier in previous_owners(program, tile_bytes(program)).items():
        if len(earlier) == 1:
            for a in earlier:
                acquire = released(a)
        else:
            acquire = vertex()
            for a in earlier:
                edge(released(a), acquire)
        ks = touches[bid]
        if not ks:
            continue
        f = ks[0]
        if f != acquire:
            succ[acquire].append(f)
            npred[f] += 1
        for j in ks[1:]:
            if j != acquire and f not in dep_vertices[j]:
                succ[acquire].append(j)
                npred[j] += 1
    return succ, npred, inputs, defines, deps_of, ins_ops

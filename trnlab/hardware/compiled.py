"""Full mode beside the timing replay: a traced program's values, computed by a `ValuesCore`.

The timing half of a compiled replay lives in its own modules: the trace-time describer
(`describe.py`), the resolved program and its timing loop (`replay_timing.py`), the values core
(`values_core.py`); their names are imported here for the values plans below.
"""
from __future__ import annotations

import threading

import numpy as np

from . import _blas, dependencies, dtypes
from .replay_timing import Compiled, can_run, compiled_for, layout_of, run_timing  # noqa: F401
from .tensor import Tensor, View
from .values_core import ValuesCore


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
            if box not in boxes and any(b is None or box is None or dependencies.overlap(b, box) for b in boxes):
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

"""The order a values replay computes a program's steps in, and which steps it may compute faster.

Fast path (`trnlab.config.fast()`), beside the reference: the reference computes a program's values
in program order, one instruction at a time (`replay.execute` with the core: check, compute, cost,
issue). The values replay (`values_replay.py`) computes the same values in the order chosen here —
program order, with PSUM reads moved later so that worker threads compute products beside the next
tiles' instructions — and with three variants of a step that skip a copy. None of them changes a
bit of any value: tests/test_values_order.py checks each rule, and tests/test_fast_paths.py checks
the library kernels' outputs against the reference's.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right

from .. import _blas, dependencies, dtypes
from ..tensor import GROUP_K_MAX

_TOGETHER_WINDOW = 32       # steps between two runs' ends that may still start together
_TOGETHER_MAX = 8           # runs starting together


def starting_together(steps) -> list[int]:
    """Positions of starting matmuls (`values_order`) whose products may wait for the next one's,
    to start with it (`psum_pool.Products.start` merges the products of tiles that share operands, as a
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
#    with every other deferred product pending then (`memory.flush_pending`; on this path in
#    parallel Python threads, BLAS on one thread each: `psum_pool.Products.flush`). A tiled kernel reads each PSUM tile right after its K loop, so
#    there is only ever one product pending: one core works, the other waits. `values_order` moves
#    such a read (and what depends on it) after the K loops of the next tiles (as many as there are
#    worker threads), and each tile's products start in a worker when its K loop ends
#    (`psum_pool.Products.start`): the workers compute while the reader issues the next tiles. It
#    does so only where each product stays the same arithmetic: in a program where every read
#    finds the products it flushes complete ("clean": no read falls inside another tile's run of
#    accumulating matmuls, no group reaches GROUP_K_MAX), and only moving plain data
#    movement / elementwise steps (_MOVABLE) past steps they do not conflict with (by buffer: a
#    write conflicts with any access; allocation and freeing count as writes).
# 2. **Loads without a copy** (`aliasing_loads`): a DMA of a whole SBUF tile from an HBM tensor the
#    program never writes may hand the tile a view of the HBM array instead of a copy, when that tile
#    is only ever an nc_matmul operand. NumPy hands such products to BLAS's gemm, which packs its
#    operands, so a row-strided view gives the bits of a contiguous copy — except in its
#    matrix-vector paths (M or N of 1), measured to differ, which are excluded.
_MOVABLE = frozenset({"dma_copy", "tensor_copy", "tensor_tensor", "tensor_scalar"})
_WINDOW_MAX = 1024          # steps a read may be moved past (bounds the planning work)
_WRITES = frozenset(("dst", "reduce_res", "dst_scale", "dst_idx"))    # program.WRITES


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


def reads_ahead() -> int:
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


def aliasing_loads(steps, buffers) -> set:
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


def moving_copies(steps, buffers) -> set:
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



"""Spilling: how a program whose SBUF tiles do not fit is still placed, as AWS's compiler places it.

A kernel can ask for more SBUF than a core has at some point of its program, in the order it is
written: AWS's matmul tutorial `block_free_dimension` at K = 8192 in fp32 keeps a block of `rhs`
tiles (2 x 64 tiles of [128, 512] fp32, 256 KiB per partition) live while every `lhsT` tile of its
row block is live too, where SBUF holds 192 KiB per partition (24 MiB per core, Trn1 and Trn2).
AWS's compiler compiles it (its allocator assigns every tile an address, "graph coloring after it
traces the kernel", nki.compiler.Allocation page); AWS does not document what it does when the
live tiles exceed SBUF. **ASSUMED** here: what register allocators do, a linear scan of the program
that, where the live tiles exceed the capacity, evicts the live tile whose next use is farthest
(Belady's rule) and brings it back just before that use:

- a tile whose one write is a DMA from a kernel input that nothing writes is *rematerialised*: the
  same DMA runs again before the next use (no store: its bytes are still in HBM);
- any other tile is stored to an HBM slot of its own after its last use before the gap and loaded
  back before the next one (two DMAs, costed as any DMA).

The accesses after a reload use a new tile (its own live range); the program is allocated again
(`allocate.allocate`), with a smaller target when fragmentation still leaves it short. The spill
DMAs carry the kernel line ``spill: ...`` naming the tile, so the profile counts them
(`Profile.spilled_bytes`, `Profile.warnings`) and `spill_to_fit` warns (`SpillWarning`) naming the
tensors. Only tiles the allocator places are spilled (never a direct allocation), SBUF only.

A program with loops the device runs (`program.Loop`: its body once, repeated when it runs) is
scanned as written, each body a region live across all its iterations: a tile used inside a loop
and outside it (its bytes carried over the back edge, `dynamic_loops.close_live_ranges`) counts as
used at every instruction of the loop, so it is spilled only before or after the loop — its store
after the loop's last instruction, its reload before the loop's first, outside the body; a tile of
the body alone is spilled within the body, its store and reload repeated every iteration.
"""
from __future__ import annotations

import bisect
import copy
import dataclasses
import warnings
from collections import defaultdict

from .allocate import allocate as allocate_in_order
from .dma import SPILL_SLOT
from .errors import SBUFOverflowError
from .program import WRITES, Access, Buffer, Instruction, Program

NOTE = "spill: "               # the kernel line of every spill DMA (what the profile counts)
_TARGETS = (1.0, 0.95, 0.9, 0.8, 0.7, 0.6)   # fractions of SBUF the scan aims at, in turn


class SpillWarning(UserWarning):
    """A program's SBUF tiles did not fit: some were spilled to HBM (ASSUMED, see trnlab.hardware.spill)."""


def spill_to_fit(program: Program, spec, error: SBUFOverflowError) -> Program | None:
    """The program with spill DMAs inserted, allocated; None if spilling cannot make it fit
    (e.g. the tiles one instruction touches exceed SBUF). `program` has been through a failed
    `allocate` (its block tensors split into tiles); it is not changed."""
    if any(b.placement for b in program.buffers if b.on_chip and b.first >= 0):
        return None                         # the kernel places bytes itself: moving tiles could clash
    capacity = spec.sbuf_partition_bytes
    for fraction in _TARGETS:
        cuts = _evictions(program, int(capacity * fraction))
        if cuts is None:
            return None
        if not cuts:
            continue
        spilled = _rewrite(program, cuts)
        try:
            placed = allocate_in_order(spilled, spec)
        except SBUFOverflowError:
            continue
        lines = sorted({program.instructions[program.buffers[b].first].line or "?" for b, _, _ in cuts})
        tiles = len({b for b, _, _ in cuts})
        warnings.warn(SpillWarning(
            f"{error.args[0].splitlines()[0][:200]}: {tiles} tiles spilled to HBM instead, {len(cuts)} times "
            f"(ASSUMED: AWS does not say what its compiler does), the tiles written at "
            f"{'; '.join(lines[:4])}{' ...' if len(lines) > 4 else ''}; profile().spilled_bytes counts the "
            f"spill DMAs"), stacklevel=2)
        return placed
    return None


def _evictions(program: Program, capacity: int) -> list[tuple[int, int, int]] | None:
    """Linear scan: [(tile buffer id, last use before the gap, next use after it)] that keep the
    SBUF bytes per partition live at every instruction within `capacity`; None if an instruction's
    own tiles exceed it. A use is a span of instructions (`_use_spans`: a loop the device runs counts
    as one use of the tiles it shares with the code around it), a gap the instructions between two."""
    buffers = program.buffers
    uses: dict[int, list[int]] = defaultdict(list)
    for k, ins in enumerate(program.instructions):
        for a in ins.operands.values():
            b = buffers[a.buffer]
            if b.memory == "sbuf" and (not uses[a.buffer] or uses[a.buffer][-1] != k):
                uses[a.buffer].append(k)
    spans = _use_spans(program, uses)
    spillable = {bid for bid in uses if not buffers[bid].placement and (buffers[bid].partition_axis or 0) == 0}
    starts: dict[int, list[int]] = defaultdict(list)      # instruction -> tiles becoming live there
    ends: dict[int, list[int]] = defaultdict(list)        # instruction -> tiles last used there
    for bid, (us, them) in spans.items():
        starts[us[0]].append(bid)
        ends[them[-1]].append(bid)
    size = {bid: buffers[bid].partition_bytes for bid in uses}
    live: dict[int, None] = {}
    pressure, cuts = 0, []
    for k, ins in enumerate(program.instructions):
        for bid in starts.pop(k, ()):
            live[bid] = None
            pressure += size[bid]
        if pressure > capacity:
            here = {a.buffer for a in ins.operands.values()}   # (the instruction's own tiles stay)
            while pressure > capacity:
                best, best_next, best_at = None, -1, 0
                for bid in live:
                    if bid in here or bid not in spillable:
                        continue
                    us, them = spans[bid]
                    at = bisect.bisect_right(us, k)
                    if at and them[at - 1] >= k:           # k lies in a span of its uses (a loop)
                        continue
                    nxt = us[at]
                    if nxt > best_next:
                        best, best_next, best_at = bid, nxt, at
                if best is None:
                    return None
                prev = spans[best][1][best_at - 1]
                cuts.append((best, prev, best_next))
                del live[best]
                pressure -= size[best]
                starts[best_next].append(best)
        for bid in ends.pop(k, ()):
            if bid in live:
                del live[bid]
                pressure -= size[bid]
    return cuts


def _use_spans(program: Program, uses: dict) -> dict[int, tuple[list, list]]:
    """Per tile: the first and the last instruction of each of its uses, in order ((starts, ends)).
    A use is one instruction, except that a tile used both inside a loop the device runs and outside
    it is in use at every instruction of the loop (the outermost such loop): its bytes must hold
    over every iteration, so no gap to spill it in opens within the body."""
    loops = sorted((loop for loop in program.loops if loop.begin < loop.end), key=lambda loop: (loop.begin, -loop.end))
    if not loops:
        return {bid: (us, us) for bid, us in uses.items()}
    spans = {}
    for bid, us in uses.items():
        first, last = us[0], us[-1]
        held = []                                  # the loops it is in use over, outermost, in order
        for loop in loops:
            if first < loop.end and last >= loop.begin and (first < loop.begin or last >= loop.end) \
                    and not (held and held[-1].begin <= loop.begin and loop.end <= held[-1].end) \
                    and bisect.bisect_left(us, loop.begin) < bisect.bisect_left(us, loop.end):
                held.append(loop)
        if not held:
            spans[bid] = (us, us)
            continue
        starts, ends = [], []
        i = 0
        for loop in held:
            while us[i] < loop.begin:
                starts.append(us[i])
                ends.append(us[i])
                i += 1
            starts.append(loop.begin)
            ends.append(loop.end - 1)
            i = bisect.bisect_left(us, loop.end)
        starts.extend(us[i:])
        ends.extend(us[i:])
        spans[bid] = (starts, ends)
    return spans


def _rematerialisable(program: Program, bid: int, writes: list, written_hbm: set) -> Instruction | None:
    """The one DMA that fills tile `bid` whole from a kernel input nothing writes (`writes`: the
    instructions writing the tile), or None."""
    if len(writes) != 1:
        return None
    ins = writes[0]
    src = ins.operands.get("src")
    if ins.opcode != "dma_copy" or ins.operands["dst"].index is not None or src is None:
        return None
    source = program.buffers[src.buffer]
    if source.memory != "hbm" or source.role != "input" or src.buffer in written_hbm or source.alias_of is not None:
        return None
    return ins


def _rewrite(program: Program, cuts: list) -> Program:
    """A copy of `program` with each cut's store (or nothing, if rematerialisable) after its last use
    before the gap and its reload before the next use; later accesses use the reloaded tile. A
    store after a loop's last instruction, or a reload before its first, lies outside the loop (a
    gap never ends inside a body it began outside: `_use_spans`), in the region around it."""
    new = copy.copy(program)
    n = len(program.instructions)
    last_of_loop = {loop.end - 1 for loop in program.loops if loop.begin < loop.end}
    first_of_loop = {loop.begin for loop in program.loops if loop.begin < loop.end}

    def region_after(k: int) -> str:
        at = k + 1 if k in last_of_loop and k + 1 < n else k
        return program.instructions[at].region

    def region_before(k: int, region: str) -> str:
        return program.instructions[k - 1].region if k in first_of_loop and k > 0 else region
    new.buffers = [copy.copy(b) for b in program.buffers]
    cut_tiles = {bid for bid, _, _ in cuts}
    written_hbm, writes = set(), defaultdict(list)
    for ins in program.instructions:
        for name, a in ins.operands.items():
            if name in WRITES:
                if a.buffer in cut_tiles:
                    writes[a.buffer].append(ins)
                elif program.buffers[a.buffer].memory == "hbm":
                    written_hbm.add(a.buffer)
    after: dict[int, list] = defaultdict(list)      # instruction index -> spill DMAs right after it
    before: dict[int, list] = defaultdict(list)     # ... right before it
    rename: dict[int, list] = defaultdict(list)     # tile id -> [(from instruction, new tile id)]
    current: dict[int, int] = {}
    remat: dict[int, Instruction | None] = {}
    for bid, prev, nxt in sorted(cuts, key=lambda c: c[2]):
        tile = new.buffers[bid]
        # the tensor, as the profile names it: the kernel line that first wrote the tile
        what = f"{tile.name!r} of {program.instructions[tile.first].line or '?'}"
        holder = current.get(bid, bid)
        if bid not in remat:
            remat[bid] = _rematerialisable(program, bid, writes[bid], written_hbm)
        reload = Buffer(id=len(new.buffers), name=f"{tile.name}~{len(rename[bid]) + 1}", memory="sbuf",
                        shape=tile.shape, dtype=tile.dtype, partition_axis=0, role="internal")
        new.buffers.append(reload)
        source = remat[bid]
        if source is not None:
            before[nxt].append(Instruction("dma_copy", "dma", {"dst": Access(reload.id), "src": source.operands["src"]},
                                           line=f"{NOTE}reload {what} (again from {program.buffers[source.operands['src'].buffer].name!r})",
                                           region=region_before(nxt, source.region)))
        else:
            slot = Buffer(id=len(new.buffers), name=f"{SPILL_SLOT}{tile.name}", memory="hbm", shape=tile.shape,
                          dtype=tile.dtype, role="internal")
            new.buffers.append(slot)
            after[prev].append(Instruction("dma_copy", "dma", {"dst": Access(slot.id), "src": Access(holder)},
                                           line=f"{NOTE}store {what}", region=region_after(prev)))
            before[nxt].append(Instruction("dma_copy", "dma", {"dst": Access(reload.id), "src": Access(slot.id)},
                                           line=f"{NOTE}reload {what}",
                                           region=region_before(nxt, program.instructions[nxt].region)))
        rename[bid].append((nxt, reload.id))
        current[bid] = reload.id
    instructions = []
    at = []                                          # old instruction index -> new
    for k, ins in enumerate(program.instructions):
        instructions.extend(before.get(k, ()))
        at.append(len(instructions))
        touched = [name for name, a in ins.operands.items() if a.buffer in rename]
        if touched:
            ins = copy.copy(ins)
            ins.operands = dict(ins.operands)
            for name in touched:
                a = ins.operands[name]
                target = a.buffer
                for start, tile in rename[a.buffer]:
                    if start <= k:
                        target = tile
                ins.operands[name] = Access(target, a.index)
            ins.issue = None                  # described again (its operands changed)
        instructions.append(ins)
        instructions.extend(after.get(k, ()))
    new.instructions = instructions
    # each loop's body: from its first instruction to its last (the spill DMAs around it stay out)
    new.loops = [dataclasses.replace(loop, begin=at[loop.begin], end=at[loop.end - 1] + 1) if loop.begin < loop.end
                 else dataclasses.replace(loop, begin=at[loop.begin] if loop.begin < n else len(instructions),
                                          end=at[loop.begin] if loop.begin < n else len(instructions))
                 for loop in program.loops]
    new.read_live_ranges()                                    # live ranges (every memory) in the new order
    new.allocated = False
    new.schedule = f"{program.schedule}+spill" if program.schedule not in (None, "program") else "spill"
    new.changed()
    if new.loops:                                    # tiles carried over a back edge: live over the loop
        from .dynamic_loops import close_live_ranges
        close_live_ranges(new)
    return new

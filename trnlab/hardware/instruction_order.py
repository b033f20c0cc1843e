"""Instruction order: the order of a program's instructions within each engine's queue.

Every engine runs its own queue in order and waits on the others only through dependencies (the
semaphores the compiler inserts); which order each queue gets is the compiler's choice. Three
choices are offered (`scheduled(program, schedule)`):

- ``"program"``: the order the kernel issued its instructions (what the kernel's author wrote);
- ``"list"``: a dependency-aware list schedule (`list_schedule.py`): the engines are simulated on
  the allocated program with the replay's own costs and dependencies, and each engine issues the
  ready instruction whose inputs are ready first (then the oldest). Independent iterations of a
  loop interleave — a Vector-engine memset of the next tile no longer waits in its queue behind a
  reduce of the previous one that waits for the Scalar engine. The program-order allocation is
  kept: tiles that share bytes keep their order and disjoint live ranges, so memory never
  overflows. Which ready instruction an engine issues first is the list schedule's heuristic
  (`list_schedule.HEURISTICS`, AWS's `SchedulingHeuristic`): ASAP by default, or CRITICAL_PATH /
  DMA_PREFETCH (``scheduled(program, "list", heuristic=...)``; the program's `schedule` then says
  so, "list:critical_path"). AWS's fourth, TRIVIAL, is ``"program"``;
- ``"hoist"``: only hoists each load from a read-only kernel input into a fresh tile up to
  `window` instructions earlier (a prefetch), then allocates again — refused with the overflow if
  the longer live ranges no longer fit. Kept as the simpler heuristic it is; the list schedule
  subsumes it.

Which one is the default was decided by comparing them against AWS's published figures — the
engine-active profile of its matmul ladder and the latencies of AWS's own kernels
(`python benchmarks/bench_program.py --schedules`; docs/programs.md "Scheduling" has the table).
"""
from __future__ import annotations

import copy
from bisect import bisect_left
from heapq import heappop, heappush

import numpy as np

from .. import config
from . import _gc
from .allocate import allocate
from .program import Program

SCHEDULES = ("program", "list", "hoist")
DEFAULT = "list"
# Above this many instructions a program keeps program order unless the list schedule is asked for:
# scheduling costs ≈ 25 µs per instruction (the simulation, the reorder and the new order's own
# resolve), several times the trace — 7 CPU s more on the 8192³ matmul's 198,656 instructions,
# whose trace takes 1.2 s (docs/programs.md, "Scheduling"). Every AWS kernel trnlab runs but the
# first two steps of AWS's matmul ladder at its published shape lies below it.
LIST_LIMIT = 60_000


def default_for(program: Program) -> str:
    """The schedule a program gets unless one is asked for: DEFAULT up to LIST_LIMIT instructions,
    program order above."""
    return DEFAULT if len(program.instructions) <= LIST_LIMIT else "program"


def _is_free_load(program: Program, k: int) -> bool:
    """A dma_copy from a read-only input into a tile it touches first: no earlier dependency. Not
    into a tile the kernel placed itself: its bytes may still hold the value before it."""
    ins = program.instructions[k]
    if ins.opcode != "dma_copy":
        return False
    src, dst = program.buffers[ins.operands["src"].buffer], program.buffers[ins.operands["dst"].buffer]
    return src.role == "input" and dst.on_chip and dst.first == k and not dst.placement


def list_schedule_name(heuristic: str = "asap") -> str:
    """The `schedule` a program list-scheduled with `heuristic` gets: "list" (ASAP, the default),
    else "list:<heuristic>"."""
    return "list" if heuristic == "asap" else f"list:{heuristic}"


def list_schedule(program: Program, spec=None, heuristic: str = "asap") -> Program:
    """A copy of `program` in the order of its dependency-aware list schedule (`list_schedule.py`)
    with `heuristic` (one of `list_schedule.HEURISTICS`), each tile at the address the
    program-order allocation gave it."""
    from .list_schedule import check_heuristic, list_order
    name = list_schedule_name(check_heuristic(heuristic))
    if not program.allocated:
        allocate(program, spec)
    # the fast path (the same program without the repeated work, fast/list_schedule.py) is ASAP's
    if config.fast() and heuristic == "asap":
        from .fast import list_schedule as fast
        order, hidden, used = fast.list_order(program, spec)
        return fast.reorder_kept(program, order, name, hidden, used)
    return reorder(program, list_order(program, spec, heuristic=heuristic), name, keep_offsets=True)


def hoist_loads(program: Program, window: int = 32) -> Program:
    """A copy of `program` with each free load hoisted up to `window` instructions earlier."""
    n = len(program.instructions)
    free = [_is_free_load(program, k) for k in range(n)]
    order, emitted, ahead = [], [False] * n, 0
    for i in range(n):
        ahead = max(ahead, i)
        while ahead < min(n, i + window):
            ahead += 1
            if ahead < n and free[ahead] and not emitted[ahead]:
                order.append(ahead)
                emitted[ahead] = True
        if not emitted[i]:
            order.append(i)
            emitted[i] = True
    return reorder(program, order, "hoist")


def reorder(program: Program, order: list[int], name: str, keep_offsets: bool = False,
            subset: bool = False, allocate_it: bool = True) -> Program:
    """A copy of `program` with its instructions in `order` and live ranges recomputed; allocated
    again, or (`keep_offsets`) with every tile at its address in `program` — then no two tiles
    that share a byte may be live at once in the new order (ValueError naming them if they are).
    `subset`: `order` may leave instructions out (each kept one at most once). `allocate_it=False`:
    returned unallocated (the caller allocates it, with its own fallbacks)."""
    n = len(program.instructions)
    unique = len(set(order)) == len(order) and (not order or (min(order) >= 0 and max(order) < n))
    if not unique or (not subset and len(order) != n):
        raise ValueError("a schedule must order every instruction exactly once")
    new = copy.copy(program)
    new.instructions = [program.instructions[k] for k in order]
    new.buffers = [copy.copy(b) for b in program.buffers]
    new.read_live_ranges(keep_offsets=keep_offsets)
    # steps compose: a fused program list-scheduled is "fused+list"
    new.schedule = name if program.schedule in (None, "program", name) else f"{program.schedule}+{name}"
    traced = program.issue_spec           # (new.derived is its own: a copy shares no cache)
    if traced is not None and all(i.issue is not None for i in program.instructions):
        from .list_schedule import compiled_in_order
        compiled_in_order(new, program, order, traced)     # the trace's descriptions, in this order
    if keep_offsets:
        if not program.allocated:
            raise ValueError("reorder(keep_offsets=True) needs an allocated program")
        check_disjoint(new)
        new.allocated = True
        return new
    new.allocated = False
    return allocate(new, program.spec) if allocate_it else new


def _whole(program: Program, access) -> bool:
    """Does `access` cover every element of its buffer?"""
    if access.index is None:
        return True
    b = program.buffers[access.buffer]
    mask = np.zeros(b.shape, bool)
    mask[access.index] = True
    return bool(mask.all())


def zeroing_memsets(program: Program) -> list[int]:
    """The memsets a compiler need not issue: a `memset` to 0 of a whole PSUM tile, its first
    instruction, whose next instruction on that tile is an `nc_matmul` writing all of it without
    `accumulate=True` — on a fresh tile that matmul writes instead of adding (``accumulate=None``,
    NKI's PSUM accumulation), so the zeros are never read. This is `nl.zeros(..., buffer=nl.psum)`
    followed by ``+= nisa.nc_matmul(...)``. ASSUMED: AWS does not document how its compiler lowers
    the pattern; a third party (trnsci/trnsparse v0.18.0 release notes) reports AWS's nc_matmul page
    calling a matmul that accumulates onto PSUM another instruction initialised undefined on
    NeuronCore-v3, which the pattern in AWS's own kernels would be if the memset were kept."""
    candidates = {}                      # PSUM buffer id -> the memset that starts it
    found = []
    for k, ins in enumerate(program.instructions):
        touched = {a.buffer for a in ins.operands.values()}
        for bid in touched & candidates.keys():
            m = candidates.pop(bid)
            dst = ins.operands.get("dst")
            if (ins.opcode == "nc_matmul" and dst is not None and dst.buffer == bid
                    and ins.attrs.get("accumulate") is not True and _whole(program, dst)
                    and sum(a.buffer == bid for a in ins.operands.values()) == 1):
                found.append(m)
        if ins.opcode == "memset" and not ins.attrs.get("value"):
            dst = ins.operands["dst"]
            b = program.buffers[dst.buffer]
            if b.memory == "psum" and b.first == k and _whole(program, dst):
                candidates[dst.buffer] = k
    return found


def drop_zeroing_memsets(program: Program) -> Program:
    """A copy of allocated `program` without its `zeroing_memsets` (every tile at its address: a
    tile's live range only gets shorter). Opt-in (`nki.DROP_PSUM_ZEROING`); docs/programs.md."""
    drop = set(zeroing_memsets(program))
    if not drop:
        return program
    kept = [k for k in range(len(program.instructions)) if k not in drop]
    return reorder(program, kept, program.schedule, keep_offsets=True, subset=True)


def check_disjoint(program: Program) -> None:
    """ValueError if two on-chip tiles that share a byte are live at the same instruction (the
    invariant of an allocation: `allocate` keeps it; a reorder keeping the offsets must too)."""
    from .list_schedule import tile_bytes
    sizes = tile_bytes(program)
    for memory in ("sbuf", "psum"):
        tiles = sorted((b for b in program.buffers if b.memory == memory and b.first >= 0 and sizes[b.id]),
                       key=lambda b: (b.first, b.id))
        live: list = []              # (offset, end, id) of the live tiles, by offset (disjoint)
        expiry: list = []            # (last instruction, (offset, end, id))
        for b in tiles:
            while expiry and expiry[0][0] < b.first:
                _, key = heappop(expiry)
                del live[bisect_left(live, key)]
            key = (b.offset, b.offset + sizes[b.id], b.id)
            i = bisect_left(live, key)
            for t in live[max(i - 1, 0):i + 1]:
                if t[0] < key[1] and key[0] < t[1]:
                    other = program.buffers[t[2]]
                    raise ValueError(
                        f"{memory.upper()} tiles {other.name!r} (bytes {t[0]}-{t[1]}, live at instructions "
                        f"{other.first}-{other.last}) and {b.name!r} (bytes {key[0]}-{key[1]}, live at "
                        f"{b.first}-{b.last}) share bytes while both are live")
            live.insert(i, key)
            heappush(expiry, (b.last, key))


def scheduled(program: Program, schedule: str = DEFAULT, heuristic: str = "asap", **options) -> Program:
    """`program` in the order `schedule` names (one of SCHEDULES; "program" returns it as is);
    `heuristic`: the list schedule's choice among ready instructions (`list_schedule.HEURISTICS`)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; choose one of {SCHEDULES}")
    if schedule != "list" and heuristic != "asap":      # only the list schedule chooses among ready ones
        raise ValueError(f"heuristic={heuristic!r} chooses within the list schedule; schedule={schedule!r} has none")
    if schedule == "program":
        return program
    # scheduling only creates objects that stay alive (a graph, an order, the new program's
    # records): the collector's scans of them free nothing (hardware/_gc.py; a fast path)
    with _gc.paused():
        if schedule == "list":
            return list_schedule(program, heuristic=heuristic, **options)
        return hoist_loads(program, **options)

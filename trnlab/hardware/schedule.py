"""Scheduling: the order of a program's instructions within each engine's queue.

Every engine runs its own queue in order and waits on the others only through dependencies (the
semaphores the compiler inserts); which order each queue gets is the compiler's choice. Two
choices are offered:

- ``"program"``: the order the kernel issued its instructions (what the kernel's author wrote);
- ``"list"``: a dependency-aware list schedule that hoists loads. A DMA from a read-only kernel
  input into a fresh tile depends on nothing earlier in the program, so it may be issued up to
  `window` instructions sooner — the prefetch a compiler does so that a load is in flight while the
  engines work on the previous tile. Hoisting lengthens those tiles' live ranges: the program is
  allocated again, and if it no longer fits, the list schedule is refused with the overflow.

Which one is the default was decided by comparing both against AWS's published engine-active profile
of its matmul ladder (`python benchmarks/bench_program.py --schedules`; figures in docs/programs.md):
**program order**. On the ladder the two agree within 0.3 % (the 16 DMA queues already let a load
start while an earlier store waits), so neither is closer to AWS's profile; and the list schedule
does not fit steps 4 and 5 as AWS wrote them (their blocks fill SBUF), where AWS's compiler still
compiles them — program order is the one that behaves like it on every step.
"""
from __future__ import annotations

import copy

from .allocate import allocate
from .program import Program

SCHEDULES = ("program", "list")
DEFAULT = "program"


def _is_free_load(program: Program, k: int) -> bool:
    """A dma_copy from a read-only input into a tile it touches first: no earlier dependency. Not
    into a tile the kernel placed itself: its bytes may still hold the value before it."""
    ins = program.instructions[k]
    if ins.opcode != "dma_copy":
        return False
    src, dst = program.buffers[ins.operands["src"].buffer], program.buffers[ins.operands["dst"].buffer]
    return src.role == "input" and dst.on_chip and dst.first == k and not dst.placement


def list_schedule(program: Program, window: int = 32) -> Program:
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
    return reorder(program, order, "list")


def reorder(program: Program, order: list[int], name: str) -> Program:
    """A copy of `program` with its instructions in `order`, live ranges recomputed, allocated."""
    if sorted(order) != list(range(len(program.instructions))):
        raise ValueError("a schedule must order every instruction exactly once")
    new = copy.copy(program)
    new.instructions = [program.instructions[k] for k in order]
    new.buffers = [copy.copy(b) for b in program.buffers]
    for b in new.buffers:
        b.first, b.last, b.offset = -1, -1, None
    for k, ins in enumerate(new.instructions):
        for access in ins.operands.values():
            b = new.buffers[access.buffer]
            if b.first < 0:
                b.first = k
            b.last = k
    new.allocated = False
    new.schedule = name
    if hasattr(new, "_plan"):
        del new._plan
    return allocate(new, getattr(program, "_spec", None))


def scheduled(program: Program, schedule: str = DEFAULT, **options) -> Program:
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; choose one of {SCHEDULES}")
    return program if schedule == "program" else list_schedule(program, **options)

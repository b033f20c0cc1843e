"""Allocation by liveness: give every SBUF and PSUM tile of a program its byte offset.

A tile is live from the first to the last instruction that touches it (`Buffer.first/last`), as
AWS's compiler sees it — not for as long as a Python name refers to it. Walking the program in
order, a tile is placed just before its first instruction and released just after its last, in a
rotating (next-fit) allocator (`memory.OnChipMemory`): a tile allocated inside a loop lands on a
new address each iteration until the memory wraps around, which is multi-buffering — the load of
iteration i+1 does not reuse the bytes iteration i is still reading (the scheduler then finds no
WAR hazard between them, and the two overlap).

A tile the kernel placed itself (``nki.compiler.sbuf.mod_alloc``: `Buffer.placement`) keeps its
address. A program whose live tiles do not fit raises SBUFOverflowError / PSUMOverflowError at the
first instruction where they do not, naming the tiles live there and their sizes.
"""
from __future__ import annotations

from collections import defaultdict

from .errors import PSUMOverflowError, SBUFOverflowError
from .memory import OnChipMemory, _fmt_bytes
from .presets import CORES, CoreSpec, core_spec
from .program import Program, locate_instruction


def live_ranges(program: Program) -> tuple[dict, dict]:
    """{instruction index: on-chip buffers first used there}, {index: buffers last used there}."""
    starts, ends = defaultdict(list), defaultdict(list)
    for b in program.buffers:
        if b.on_chip and b.first >= 0:
            starts[b.first].append(b)
            ends[b.last].append(b)
    return starts, ends


def target_spec(program: Program, spec=None) -> CoreSpec:
    """The CoreSpec a program is allocated for: `spec`, else the one it was traced with, else the
    preset its target names."""
    if spec is not None:
        return core_spec(spec)
    traced = getattr(program, "_spec", None)
    if traced is not None:
        return traced
    for preset in CORES.values():
        if preset.name == program.target:
            return preset
    return core_spec(program.target)


def allocate(program: Program, spec: "CoreSpec | str | None" = None) -> Program:
    """Set `offset` on every on-chip buffer of `program` (in place) and return it."""
    spec = target_spec(program, spec)
    memories = {"sbuf": OnChipMemory("sbuf", spec, with_data=False),
                "psum": OnChipMemory("psum", spec, with_data=False)}
    starts, ends = live_ranges(program)
    placed = {}
    # tiles the kernel placed itself hold their bytes for the whole program, so that the tiles the
    # allocator places never land on them (AWS's kernels with direct allocation place every tile)
    fixed = [b for b in program.buffers if b.on_chip and b.first >= 0 and b.placement]
    for b in fixed:
        try:
            t = memories[b.memory].allocate(b.shape, b.dtype, b.name, b.partition_axis,
                                            offset=int(b.placement["offset"]))
        except (SBUFOverflowError, PSUMOverflowError) as error:
            raise _overflow(error, program, b.first, b, memories[b.memory], placed) from None
        b.offset = t.offset
        placed[b.id] = t
    for k in sorted(set(starts) | set(ends)):
        for b in starts.get(k, ()):
            if b.placement:
                continue
            memory = memories[b.memory]
            offset = None
            try:
                t = memory.allocate(b.shape, b.dtype, b.name, b.partition_axis, offset=offset)
            except (SBUFOverflowError, PSUMOverflowError) as error:
                raise _overflow(error, program, k, b, memory, placed) from None
            b.offset = t.offset
            placed[b.id] = t
        for b in ends.get(k, ()):
            if not b.placement:
                memories[b.memory].free(placed.pop(b.id))
    program.allocated = True
    return program


def _overflow(error, program: Program, k: int, buffer, memory: OnChipMemory, placed: dict):
    """The overflow error again, saying where in the program and which tiles are live there."""
    live = [program.buffers[i] for i in placed if program.buffers[i].memory == buffer.memory]
    live.sort(key=lambda b: -b.partition_bytes)
    shown = ", ".join(f"{b.name} {_fmt_bytes(b.partition_bytes)}" for b in live[:8])
    more = f" and {len(live) - 8} more" if len(live) > 8 else ""
    message = (f"{error.args[0]}; live there: {len(live)} tiles, "
               f"{_fmt_bytes(sum(b.partition_bytes for b in live))} per partition: {shown}{more}")
    cls = type(error)
    new = cls(message, value=error.value, limit=error.limit)
    new.live = [(b.name, b.partition_bytes) for b in live]
    new.instruction = k
    return locate_instruction(new, program, k)

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

from bisect import bisect_left
from collections import defaultdict

from .errors import PSUMOverflowError, SBUFOverflowError
from .memory import OnChipMemory, _fmt_bytes, first_fit
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


class _Placement:
    """The byte ranges of one memory in use while the program is walked (what `OnChipMemory`
    places, without tensors: the tiles' shapes were checked when the program was traced)."""

    def __init__(self, memory: OnChipMemory):
        self.memory = memory
        self.occupied: list = []            # [(offset, bytes per partition)] sorted by offset
        self.owner: list = []               # the buffer id of each
        self.cursor = 0
        self.used = 0

    def place(self, b, offset: int | None) -> int:
        size = b.partition_bytes
        memory = self.memory
        if offset is None:
            offset = first_fit(self.occupied, size, self.cursor, memory.partition_bytes, memory.bank_bytes)
            if offset is None and self.cursor > 0:
                offset = first_fit(self.occupied, size, 0, memory.partition_bytes, memory.bank_bytes)
            if offset is None:
                raise memory.overflow(size, b.name, used=self.used)
        elif offset < 0 or offset + size > memory.partition_bytes or any(
                o < offset + size and offset < o + n for o, n in self.occupied):
            raise memory.overflow(size, b.name, f"; offset {offset} is taken or out of range", used=self.used)
        i = bisect_left(self.occupied, (offset, size))
        self.occupied.insert(i, (offset, size))
        self.owner.insert(i, b.id)
        self.cursor = offset + size
        self.used += size
        return offset

    def release(self, b) -> None:
        i = self.owner.index(b.id)
        del self.occupied[i], self.owner[i]
        self.used -= b.partition_bytes


def allocate(program: Program, spec: "CoreSpec | str | None" = None) -> Program:
    """Set `offset` on every on-chip buffer of `program` (in place) and return it."""
    spec = target_spec(program, spec)
    memories = {"sbuf": _Placement(OnChipMemory("sbuf", spec, with_data=False)),
                "psum": _Placement(OnChipMemory("psum", spec, with_data=False))}
    starts, ends = live_ranges(program)
    placed = {}
    # tiles the kernel placed itself hold their bytes for the whole program, so that the tiles the
    # allocator places never land on them (AWS's kernels with direct allocation place every tile)
    fixed = [b for b in program.buffers if b.on_chip and b.first >= 0 and b.placement]
    for b in fixed:
        placement = memories[b.memory]
        try:
            b.offset = placement.place(b, int(b.placement["offset"]))
        except (SBUFOverflowError, PSUMOverflowError) as error:
            raise _overflow(error, program, b.first, b, placement.memory, placed) from None
        placed[b.id] = True
    for k in sorted(set(starts) | set(ends)):
        for b in starts.get(k, ()):
            if b.placement:
                continue
            placement = memories[b.memory]
            try:
                b.offset = placement.place(b, None)
            except (SBUFOverflowError, PSUMOverflowError) as error:
                raise _overflow(error, program, k, b, placement.memory, placed) from None
            placed[b.id] = True
        for b in ends.get(k, ()):
            if not b.placement:
                memories[b.memory].release(b)
                del placed[b.id]
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

"""Loops the device runs: a program's `Loop`s, repeated as many times as their registers say.

NKI's compiled loops whose bound is a register known only when the kernel runs (`nl.dynamic_range`,
`nl.fori_loop`, `nl.while_loop` with a `VirtualRegister` loaded from a kernel input or from values
the chip computed) are not unrolled while tracing. As AWS's compiler does ("a single copy of the body is
generated and the hardware iterates over it at runtime", NKI Dynamic Loops deep dive,
awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/deep-dives/nki-dynamic-loops.html), the trace
puts the body in the program once and records a `program.Loop`: the body's instructions, its
bounds (ints or registers) and the register the body reads the iteration value from
(nki.language.fori_loop: "The body receives the current iteration value i as a VirtualRegister").

When a program runs (`replay.execute`, the one entry of the reference replay, the fast paths,
`Device.run` and `Device.run_spmd`), `concrete` turns it into the straight-line program the core
executes, one loop at a time in program order:

1. the trip count: the bound registers' values where the loop starts. They come from the
   instructions before the loop that the register depends on (`backward_slice`: the register_load,
   the instructions that wrote what it reads, and so on back to kernel inputs and constants), run
   on a scratch core by the reference replay — the values the real run computes, since those
   instructions read nothing else;
2. the body repeated that many times (`expand`), each repetition preceded by the iterator update
   (a `register_move` of the iteration value into the loop's index register, so DMA offsets read
   from it — ``.ap(scalar_offset=i)`` — see it; ASSUMED cost: one register instruction per iteration,
   the loop's increment-compare-branch, for which AWS publishes no figure). Tiles used only inside
   the body get a buffer per repetition at the body's address (the same bytes every iteration, as
   on the chip); tiles live across the loop keep theirs, live over the whole loop
   (`close_live_ranges`, applied before allocation: the loop's back edge keeps them alive).

A branch of `nl.if_else` (``kind`` "if" / "else") is such a loop of 0 or 1 trips without an iterator:
``range(0, t)`` / ``range(t, 1)``, t the register the branch's compare wrote (cond != 0), so exactly
one of the two bodies is kept (`trnlab/nki/device_loops.py`).

A while loop (``kind == "while"``) goes one iteration at a time: its condition register read where it
starts (1.), and if nonzero one repetition of the body, the register the body returned moved into the
condition (ASSUMED: one register instruction), and the loop again after it. A body that never
writes its condition register, entered with it nonzero, would never end: a `TripCountError`.

The result is an ordinary allocated program, cached per trip counts on the program, that every
backend runs as it runs any other: each repetition checked, costed and, in full mode, computed.

Timing-only mode: the trip count is data, so it still needs values. The instructions the register
depends on are run on the scratch core from the arguments' values whenever the caller passed them
as arrays (a timing-only `nki.run` with NumPy arguments). An argument given without values (a
`ShapeDtype`) that the trip count reads is a `TripCountError` naming it: AWS's profiler measures a
dynamic loop on the device with real inputs; there is no bound to time without the data (the
kernel states none: ``num_m_tiles`` is "0 <= num_m_tiles <= M // P_MAX" only in prose), and
guessing the maximum would report a latency the kernel never has.
"""
from __future__ import annotations

import copy
import dataclasses


from .collective import OPCODES as COLLECTIVE_OPCODES
from .errors import HardwareError
from .program import Access, Instruction, Loop, Program
from .system import register_value

MAX_TRIPS = 1 << 20          # a register holding garbage would repeat a body for hours: refused
_CACHED = 16                 # expanded programs kept per program (per trip counts)
# instructions a trip count may not depend on: their values come from another core or from the
# engines' random state, which a run of the slice alone would not reproduce
_NOT_REPLAYABLE = frozenset(COLLECTIVE_OPCODES + ("core_barrier", "rng", "rand", "rand2", "rand_set_state",
                                                  "rand_get_state", "set_rng_seed", "dropout"))
_REGISTER_WRITERS = frozenset(("register_move", "register_load", "register_rank", "register_op"))


class TripCountError(HardwareError):
    """A loop's trip count, read from data when the program runs, could not be found."""
    rule = "run-time trip count"


def _root(buffers: list, bid: int) -> int:
    while buffers[bid].alias_of is not None:
        bid = buffers[bid].alias_of
    return bid


# -- at trace time ------------------------------------------------------------------------------
def close_live_ranges(program: Program) -> None:
    """Sort the loops and make every on-chip buffer that a loop's body shares with the code
    around it live over the whole loop (the back edge: iteration k+1 reads what the code before
    the loop, or iteration k, left there). Called before allocation; the tiles the allocation splits
    (block tensors, direct allocations: `allocate.py`) are split first, so that theirs are closed too."""
    from .allocate import split_block_tensors, split_direct_allocations
    split_direct_allocations(program)
    split_block_tensors(program)
    program.loops.sort(key=lambda loop: (loop.begin, -loop.end))
    for loop in program.loops:
        if loop.begin >= loop.end:
            continue
        for b in program.buffers:
            if b.on_chip and b.first >= 0 and b.first < loop.end and b.last >= loop.begin \
                    and (b.first < loop.begin or b.last >= loop.end):
                b.first, b.last = min(b.first, loop.begin), max(b.last, loop.end - 1)
    program.changed()


# -- when the program runs ----------------------------------------------------------------------
def concrete(program: Program, core, args: list, hbm_tensors: dict | None = None) -> Program:
    """The straight-line program `core` runs for these arguments: every loop repeated as many
    times as its bounds' registers say (module docstring). Cached on `program` per trip counts."""
    cache = program.derived.get("concrete")
    if cache is None:
        cache = program.derived.put("concrete", {})
    current, counts, whiles = program, (), 0
    while current.loops:
        loop = current.loops[0]
        if loop.kind == "while":               # one iteration at a time: the condition, then the body
            condition = loop.start["register"]
            go = register_values(current, loop, [condition], core, args, hbm_tensors)[condition] != 0
            whiles += 1
            if go and loop.next in (None, condition) and not any(
                    ins.opcode in _REGISTER_WRITERS and ins.attrs.get("register") == condition
                    for ins in current.instructions[loop.begin:loop.end]):
                raise TripCountError(f"run-time trip count: the while loop at {loop.line or 'its kernel line'} starts "
                                     f"with its condition register {condition} nonzero and its body never writes "
                                     f"that register (register_load / register_move), so it would never end",
                                     value=condition, limit="a body that updates its condition register")
            if whiles > MAX_TRIPS:
                raise TripCountError(f"run-time trip count: the while loop at {loop.line or 'its kernel line'} "
                                     f"ran {MAX_TRIPS} times and its condition is still nonzero",
                                     value=whiles, limit=MAX_TRIPS)
            step, make = ("while", go), (lambda p, go=go: expand(p, [None] if go else [], keep=go))
        else:
            values = iteration_values(current, loop, core, args, hbm_tensors)
            step, make = (values.start, len(values)), (lambda p, values=values: expand(p, values))
        counts += (step,)
        expanded = cache.get(counts)
        if expanded is None:
            if len(cache) >= _CACHED:
                cache.pop(next(iter(cache)))
            expanded = cache[counts] = make(current)
        current = expanded
    return current


def iteration_values(program: Program, loop: Loop, core, args: list, hbm_tensors: dict | None = None) -> range:
    """The values `loop`'s index takes (their number: its trip count), its bounds' registers read
    where it starts (module docstring)."""
    registers = [b["register"] for b in (loop.start, loop.stop) if isinstance(b, dict)]
    values = register_values(program, loop, registers, core, args, hbm_tensors) if registers else {}

    def bound(b) -> int:
        return values[b["register"]] if isinstance(b, dict) else int(b)

    values = range(bound(loop.start), bound(loop.stop), loop.step)
    trips = len(values)
    if trips > MAX_TRIPS:
        raise TripCountError(f"run-time trip count: the loop at {loop.line or 'its kernel line'} would run "
                             f"{trips} times (range({bound(loop.start)}, {bound(loop.stop)}, {loop.step})), more "
                             f"than {MAX_TRIPS}", value=trips, limit=MAX_TRIPS)
    return values


def _what(loop: Loop) -> str:
    return "branch of nl.if_else" if loop.kind in ("if", "else") else "loop"


def backward_slice(program: Program, end: int, registers: list) -> list[int]:
    """The indices of the instructions before `end` that the values of `registers` there depend on."""
    buffers = program.buffers
    needed_registers, needed = set(registers), set()
    kept = []
    for k in range(end - 1, -1, -1):
        ins = program.instructions[k]
        sets = ins.opcode in _REGISTER_WRITERS and ins.attrs.get("register") in needed_registers
        if not sets and not any(_root(buffers, a.buffer) in needed for a in ins.writes()):
            continue
        if ins.opcode in _NOT_REPLAYABLE:
            raise TripCountError(f"run-time trip count: the loop bound depends on {ins.opcode} at instruction {k} "
                                 f"({ins.line}), whose values come from another core or the engines' random "
                                 f"state; trnlab finds a trip count from the kernel's inputs and constants only",
                                 value=ins.opcode, limit="inputs, constants and this core's instructions")
        kept.append(k)
        if sets:
            needed_registers.discard(ins.attrs["register"])
            source = ins.attrs.get("source", -1)
            if ins.opcode == "register_move" and source is not None and source >= 0:
                needed_registers.add(source)
            if ins.opcode == "register_op":         # NkiScalar arithmetic: its operand registers
                needed_registers.update(r for r in (ins.attrs["a"], ins.attrs.get("b", -1)) if r >= 0)
        if ins.opcode == "dma_copy_register_offset":
            needed_registers.add(ins.attrs["register"])
        if ins.opcode == "tensor_register_offset":  # an engine operand at a register offset
            needed_registers.update(r for r in (ins.attrs.get("dst_register", -1), ins.attrs.get("data_register", -1))
                                    if r >= 0)
            needed_registers.update(r for r, _ in (ins.attrs.get("registers") or {}).values())
        needed.update(_root(buffers, a.buffer) for a in ins.reads())
    if needed_registers:
        raise TripCountError(f"run-time trip count: register(s) {sorted(needed_registers)} bound a loop but no "
                             f"instruction before it sets them (register_alloc() without a value)",
                             value=sorted(needed_registers), limit="a register set before the loop")
    return kept[::-1]


def register_values(program: Program, loop: Loop, registers: list, core, args: list,
                    hbm_tensors: dict | None = None) -> dict:
    """{register: its signed 32-bit value where `loop` starts}: the backward slice run on a scratch
    full-mode core of the same spec, from the arguments' values."""
    from .core import NeuronCore
    from .replay import execute
    sub, inputs = _sub_program(program, backward_slice(program, loop.begin, registers))
    arrays = []
    for position, name, bid in inputs:             # (bid: the argument's buffer in `program`)
        value = args[position] if position < len(args) else None
        if value is None and hbm_tensors and bid in hbm_tensors:
            tensor = hbm_tensors[bid]
            value = tensor.full.read() if tensor.memory.with_data else None
        if value is None:
            decides = ("is taken or not as" if loop.kind in ("if", "else") else "repeats as many times as")
            raise TripCountError(
                f"run-time trip count: the {_what(loop)} at {loop.line or 'its kernel line'} {decides} "
                f"argument {name!r} says, and it was given without values (timing-only, a ShapeDtype or a "
                f"tensor without data); pass {name!r} as an array (the other arguments may stay ShapeDtype), "
                f"or run in full mode", value=name, limit="an argument with values")
        arrays.append(value)
    scratch = NeuronCore(core.spec, mode="full", name="trip_count")
    scratch._cc_rank = getattr(core, "_cc_rank", 0)      # register_rank reads it
    execute(sub, scratch, arrays, checked=True)
    return {r: register_value(scratch._system_state(), r) for r in registers}


def _sub_program(program: Program, indices: list) -> tuple[Program, list]:
    """The instructions `indices` of `program` as a program of their own (the buffers they touch,
    renumbered, at their addresses); and its inputs as (argument position, name, buffer id in `program`)."""
    buffers = program.buffers
    used: dict[int, int] = {}

    def keep(bid: int) -> int:
        if bid not in used:
            if buffers[bid].alias_of is not None:
                keep(buffers[bid].alias_of)
            used[bid] = len(used)
        return used[bid]

    instructions = [dataclasses.replace(program.instructions[k], issue=None,
                                        operands={n: Access(keep(a.buffer), a.index)
                                                  for n, a in program.instructions[k].operands.items()})
                    for k in indices]
    table = []
    for old, new in sorted(used.items(), key=lambda item: item[1]):
        b = copy.copy(buffers[old])
        b.id, b.first, b.last = new, -1, -1
        b.alias_of = None if b.alias_of is None else used[b.alias_of]
        table.append(b)
    _live_ranges(table, instructions)
    inputs = [(position, name, bid) for position, (name, bid) in enumerate(program.inputs) if bid in used]
    sub = Program(name=f"{program.name}.trip_count", target=program.target, buffers=table,
                  instructions=instructions, inputs=[(name, used[bid]) for _, name, bid in inputs], outputs=None,
                  allocated=True, spec=program.spec, matmul_dtypes=set(program.matmul_dtypes))
    return sub, inputs


def _live_ranges(buffers: list, instructions: list) -> None:
    for k, ins in enumerate(instructions):
        for a in ins.operands.values():
            b = buffers[a.buffer]
            if b.first < 0:
                b.first = k
            b.last = k


def expand(program: Program, values, keep: bool = False) -> Program:
    """`program` with its first loop replaced by a repetition of its body per iteration value in
    `values` (module docstring); the loops nested in it are repeated with it, the later ones move.
    `keep`: the loop stays after the repetitions, still to run (a while loop, one iteration at a time)."""
    loop = program.loops[0]
    begin, end = loop.begin, loop.end
    body = program.instructions[begin:end]
    buffers = [copy.copy(b) for b in program.buffers]
    # tiles of the body alone: a buffer per repetition (the loop's own copy keeps the body's)
    local = [b.id for b in program.buffers
             if b.on_chip and b.first >= 0 and begin <= b.first and b.last < end]
    blocks = dict(program.blocks)
    instructions = list(program.instructions[:begin])
    loops = []
    region = body[0].region if body else ""
    nested = [inner for inner in program.loops[1:] if inner.begin >= begin and inner.end <= end]

    def place_body(remap: dict):
        shift = len(instructions) - begin
        loops.extend(dataclasses.replace(inner, begin=inner.begin + shift, end=inner.end + shift) for inner in nested)
        for ins in body:
            if remap and any(a.buffer in remap for a in ins.operands.values()):
                ins = dataclasses.replace(ins, operands={n: Access(remap.get(a.buffer, a.buffer), a.index)
                                                         for n, a in ins.operands.items()})
            instructions.append(ins)

    for j, value in enumerate(values):
        remap = {}
        if j or keep:
            for bid in local:
                b = copy.copy(program.buffers[bid])
                b.id = remap[bid] = len(buffers)
                buffers.append(b)
            for bid in local:
                if bid in program.blocks:
                    tensor, index = program.blocks[bid]
                    blocks[remap[bid]] = (remap.get(tensor, tensor), index)
        if loop.index is not None:             # the iterator update: the index register holds this value
            instructions.append(Instruction("register_move", "pool", {}, {"register": loop.index, "value": value},
                                            loop.line, region, loop.source))
        place_body(remap)
        condition = loop.start["register"] if loop.kind == "while" else None
        if condition is not None and loop.next not in (None, condition):   # the next condition moves in
            instructions.append(Instruction("register_move", "pool", {}, {"register": condition, "source": loop.next},
                                            loop.line, region, loop.source))
    if keep:
        shift = len(instructions) - begin
        loops.append(dataclasses.replace(loop, begin=begin + shift, end=end + shift))
        place_body({})
    shift = len(instructions) - end
    for later in program.loops[1:]:
        if later.begin >= end:
            loops.append(dataclasses.replace(later, begin=later.begin + shift, end=later.end + shift))
    instructions += program.instructions[end:]
    instructions = [dataclasses.replace(ins, issue=None) for ins in instructions]
    for b in buffers:
        b.first = b.last = -1
    _live_ranges(buffers, instructions)
    new = copy.copy(program)
    new.__dict__.pop("_derived", None)
    new.instructions, new.buffers, new.blocks = instructions, buffers, blocks
    new.loops = sorted(loops, key=lambda inner: (inner.begin, -inner.end))
    new.issue_spec = None                     # described again when it first runs (as a loaded program)
    new.revision = 0
    return new


def scheduled_keeping_loops(program: Program, schedule: str) -> Program:
    """`program` in the order `schedule` names if that keeps every loop's body at its place (the
    list schedule keeps each run of one region whole, and a body is a region of its own); else in
    program order. Nothing may cross a loop's boundary: the chip's loop branches back over one copy
    of the body."""
    from .instruction_order import scheduled
    if schedule != "list":                     # "hoist" moves loads across the boundary
        return program
    new = scheduled(program, schedule)
    for loop in program.loops:
        if {id(i) for i in new.instructions[loop.begin:loop.end]} != \
                {id(i) for i in program.instructions[loop.begin:loop.end]}:
            return program
    return new

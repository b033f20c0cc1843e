"""Why each instruction started when it did: the question a student asks of a timeline.

Every timeline record names the instruction whose completion decided its start (`waited`, -1
when its own engine queue did; `engines.EngineTimes`). `why` turns that into a cause, using the
program's descriptions (`records.py`) to say *which* dependency:

- ``start``: nothing held it — it started when the launch did;
- ``queue``: its engine (or DMA queue) was busy until then with the instruction before it;
- ``RAW`` / ``WAR`` / ``WAW``: it read what an earlier instruction wrote / wrote what an earlier
  one read / wrote over an earlier write, on an overlapping region of a buffer (named);
- ``stationary``: a Tensor-engine instruction loading a new stationary tile waited for the tile's
  writer, then for LoadStationary;
- ``port``: a shared SBUF / PSUM port was busy with another engine's instruction [ARCH-v2];
- ``memory``: its tile reuses bytes of a freed tile the instruction last touched;
- ``dependency``: an earlier access the scheduler merged with others (conservative bookkeeping).

`listing(program)` prints one line per instruction: index, engine, start, end, the cause.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .records import DMA, END, ENGINE, ISSUE, MATMUL, OPCODE, PE_ISSUE, READY, START, WAITED, read_refs, write_refs
from .dependencies import overlap


@dataclass(frozen=True)
class Wait:
    """Why instruction `index` started at `start`: `cause` (module docstring), the instruction it
    waited for (`on`, -1 if none) and what it waited on (`detail`: a buffer, a port, a queue)."""
    index: int
    engine: str
    opcode: str
    start_ns: float
    end_ns: float
    cause: str
    on: int
    detail: str

    def __str__(self) -> str:
        after = f" #{self.on}" if self.on >= 0 else ""
        detail = f" {self.detail}" if self.detail else ""
        return (f"{self.index:>5} {self.engine:<5} {self.opcode:<22} {self.start_ns:>10.0f} {self.end_ns:>10.0f}  "
                f"{self.cause}{after}{detail}")


def _conflict(program, k: int, w: int) -> tuple[str, str]:
    """(RAW / WAR / WAW, buffer name) of the first operands of instructions k and w that overlap, or
    ("", "") if none do."""
    dk, dw = _description(program, k), _description(program, w)
    if dk is None or dw is None:
        return "", ""
    for kind, mine, theirs in (("RAW", read_refs(dk), write_refs(dw)), ("WAW", write_refs(dk), write_refs(dw)),
                               ("WAR", write_refs(dk), read_refs(dw))):
        for bid, box in mine:
            for other, other_box in theirs:
                if bid == other and overlap(box, other_box):
                    return kind, program.buffers[bid].name
    return "", ""


def _description(program, k: int):
    from .records import as_description
    issue = program.instructions[k].issue
    return None if issue is None else as_description(issue)


def _shares_bytes(program, k: int, w: int) -> str:
    """The name of a tile of instruction k placed on bytes a tile of instruction w held, or ""."""
    buffers = program.buffers
    mine = {a.buffer for a in program.instructions[k].operands.values()}
    theirs = {a.buffer for a in program.instructions[w].operands.values()}
    for a in mine:
        x = buffers[a]
        if not x.on_chip or x.offset is None:
            continue
        for b in theirs:
            y = buffers[b]
            if b != a and y.memory == x.memory and y.offset is not None and \
                    x.offset < y.offset + y.partition_bytes and y.offset < x.offset + x.partition_bytes:
                return f"{x.name} on bytes of {y.name}"
    return ""


def why(program, timeline, k: int, base: int = 0, bandwidth: float | None = None) -> Wait:
    """Why record `base + k` of `timeline` (instruction k of `program`) started when it did (and,
    for a DMA, whether the shared DMA engines or the HBM channel — `bandwidth` bytes/s, default the
    program's core's — made it end later than its transfer alone would)."""
    wait = _why_start(program, timeline, k, base)
    d = _description(program, k)
    if d is not None and d[0] == DMA:
        if bandwidth is None:
            from .allocate import target_spec
            bandwidth = target_spec(program).hbm_bandwidth
        alone = max(d.cycles, d.engine_ns, d.hbm_bytes * 1e9 / bandwidth)      # its own transfer time
        late = wait.end_ns - (wait.start_ns + d.fixed_ns + alone)
        if late > 1e-3:
            note = f"ended {late:.0f} ns late: the shared DMA engines / HBM channel were busy"
            wait = replace(wait, detail=f"{wait.detail}; {note}" if wait.detail else f"({note})")
    return wait


def _why_start(program, timeline, k: int, base: int) -> Wait:
    records = timeline.records
    r = records[base + k]
    engines = timeline.engines
    engine = engines[r[ENGINE]]
    w = r[WAITED]
    start = r[START]

    def wait(cause, on=-1, detail=""):
        return Wait(k, engine, r[OPCODE], start, r[END], cause, on, detail)
    if w < 0:
        previous = next((j for j in range(base + k - 1, base - 1, -1) if records[j][ENGINE] == r[ENGINE]), -1)
        if previous >= 0 and records[previous][END] == start:
            what = "DMA queue" if engine.startswith("dma") else "engine"
            return wait("queue", previous - base, f"({what} {engine} busy until {start:.0f} ns)")
        if _description(program, k) is not None and _description(program, k)[0] in (MATMUL, PE_ISSUE) and start > 0:
            return wait("stationary", -1, "(the stationary tile loaded before it: LoadStationary still running)")
        return wait("start")
    j = w - base
    other = records[w]
    kind, buffer = _conflict(program, k, j) if 0 <= j < len(program.instructions) else ("", "")
    d = _description(program, k)
    if d is not None and d[0] in (MATMUL, PE_ISSUE) and kind == "RAW" and start > other[READY]:
        return wait("stationary", j, f"(LoadStationary of {buffer} after its writer)")
    if kind:
        return wait(kind, j, f"on {buffer}")
    if d is not None and d[0] == ISSUE and (d[9] or d[10]) and other[END] == start:
        port = "SBUF" if d[9] else "PSUM"
        return wait("port", j, f"({port} port shared with {engines[other[ENGINE]]})")
    if 0 <= j < len(program.instructions):
        shared = _shares_bytes(program, k, j)
        if shared:
            return wait("memory", j, f"({shared})")
    return wait("dependency", j, "(an earlier access, merged)")


def listing(program, timeline=None, target=None, base: int = 0) -> str:
    """The timing listing of `program`: per instruction, its engine, start and end (ns) and why it
    started then. Without a `timeline`, the program is replayed timing-only on a fresh core of
    `target` (a preset name or CoreSpec; default: the program's own)."""
    if timeline is None:
        from .allocate import target_spec
        from .core import NeuronCore
        from .replay import execute
        core = NeuronCore(target_spec(program, target), mode="timing")
        execute(program, core, [None] * len(program.inputs))
        timeline = core.timeline
    head = f"{'#':>5} {'eng':<5} {'opcode':<22} {'start ns':>10} {'end ns':>10}  why it started then"
    n = min(len(program.instructions), len(timeline.records) - base)
    return "\n".join([head] + [str(why(program, timeline, k, base)) for k in range(n)])

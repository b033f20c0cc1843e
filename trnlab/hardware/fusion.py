"""Loop fusion by reordering: how a kernel whose block tensor outgrows SBUF/PSUM in the order its loops
are written still runs, as AWS's attention tutorial step 3 (``attn_fwd_v3``) runs on the chip.

A block tensor's tiles each live from their own first to their own last instruction (`allocate.
split_block_tensors`, after AWS's block-dimension migration guide). A kernel that writes every
``qk[i, j]`` in one ``affine_range`` loop over ``i`` and reads them in the next loop over ``i`` still
has them all live at the end of the first loop: ``attn_fwd_v3``'s `(32, 8, par_dim(128), 512)` fp32
PSUM tensor is 512 KiB per partition, PSUM 16 KiB. AWS's compiler runs it, so it transforms the
kernel; AWS does not document how. ASSUMED here: its middle end fuses the loops, so that each
``qk[i]`` is produced and consumed within one iteration (8 tiles x 2 KiB: all of PSUM). trnlab does
that on the traced program, by reordering whole iterations:

1. the block tensor is the one with the most bytes live where the allocation overflows; its tiles
   are grouped by their first block index (``qk[i, :]``: one group per ``i``), groups ranked in the
   order the program first touches them;
2. in the span from the first to the last instruction touching the block tensor, an instruction
   touching one group's tiles belongs to that group; any other belongs to the latest group it
   depends on (RAW, WAR or WAW on overlapping bytes of a buffer), or, depending on nothing there,
   to the earliest group that depends on it;
3. the fusion is legal only if no instruction depends on one of a later group (an instruction
   touching two groups' tiles, or a dependence against the group order, refuses it — the
   dependence-distance rule of loop fusion); then the span is sorted by group, program order
   kept within each group — the consumer loop's iteration ``i`` moves up to just after the producer
   loop's iteration ``i`` — and allocated again (`instruction_order.reorder`).

It runs only when the program in its own order does not fit (a program that fits keeps the order
its author wrote, as the migration guide's two-loop SBUF example keeps all blocks live), never for a
kernel marked ``@nki.compiler.skip_middle_end_transformations`` (documented as skipping all middle-end
transformations: the refusal names it), and not for kernels with direct allocations (they place
bytes themselves and, in AWS's samples, skip the middle end too). If the fused program does not fit
either, grouping by the first two block indices is tried, then the original refusal is raised,
saying why fusion did not help.

A program with loops the device runs (`program.Loop`, `dynamic_loops.py`) is not reordered — no
instruction may cross a loop's boundary, and a fused order would move them — so it gets neither
loop fusion nor the early PSUM evacuation; its SBUF tiles are spilled (`spill.py`) when the `spill`
switch is on, as any program's. The caller closes its live ranges over the loops first
(`dynamic_loops.close_live_ranges`).
"""
from __future__ import annotations

from collections import defaultdict

from .allocate import _box
from .allocate import allocate as allocate_in_order
from .errors import PSUMOverflowError, SBUFOverflowError
from .program import WRITES, Program
from .system import STATEFUL_OPCODES
from .instruction_order import reorder

SKIP = "skip_middle_end_transformations"
# instructions with state beyond their operands: a span holding one is not reordered
_ORDERED_OPCODES = ("barrier", "device_print", "random_seed", "set_rng_seed", "dropout") + STATEFUL_OPCODES


def allocate(program: Program, spec=None, *, fuse: bool = True) -> Program:
    """Allocate `program` (`allocate.allocate`); if its tiles do not fit in the order written and
    `fuse`, allocate the loop-fused order instead (module docstring). Returns the allocated program:
    `program` itself, or a reordered copy (``schedule == "fused"``)."""
    try:
        return allocate_in_order(program, spec)
    except (SBUFOverflowError, PSUMOverflowError) as error:
        if _block_tensor_live(program, error) is None:
            refusal = error                   # no block tensor involved: nothing to fuse
        elif program.loops:
            refusal = _noted(error, "the program has a loop the device runs (its body once), which trnlab's loop "
                                    "fusion does not reorder")
        elif not fuse:
            refusal = _noted(error, f"the kernel is marked nki.compiler.{SKIP}, so trnlab does not fuse its loops")
        else:
            fused, why = fuse_loops(program, error, spec)
            if fused is not None:
                return fused
            refusal = _noted(error, f"trnlab's loop fusion (trnlab.hardware.fusion) did not help: {why}")
    early = _evacuated_early(program, spec, refusal) if fuse and not program.loops else None   # (only what failed before)
    if early is not None:
        return early
    spilled = _spilled(program, spec, refusal)
    if spilled is None:
        raise refusal
    return spilled


def _evacuated_early(program: Program, spec, error: Exception) -> Program | None:
    """The program with PSUM accumulators copied out as soon as they are final (`psum_evacuation.py`,
    ASSUMED), allocated, if PSUM overflowed, the `psum_evacuation` switch is on
    (TRNLAB_PSUM_EVACUATION=1) and that makes it fit (its SBUF spilled if it then overflows SBUF and
    the `spill` switch is on); else None."""
    from trnlab import config
    from .psum_evacuation import evacuated_order
    if not isinstance(error, PSUMOverflowError) or not config.get("psum_evacuation") \
            or any(b.placement for b in program.buffers if b.on_chip):
        return None                       # (the refusal the course teaches: unchanged unless asked)
    order = evacuated_order(program, _ORDERED_OPCODES)
    if order is None:
        return None
    evacuated = reorder(program, order, "evacuated", allocate_it=False)
    try:
        return allocate_in_order(evacuated, spec)
    except PSUMOverflowError:
        return None
    except SBUFOverflowError as error:      # the copies' SBUF results now live earlier: spilled if asked
        return _spilled(evacuated, spec, error)


def _spilled(program: Program, spec, error: Exception) -> Program | None:
    """The program with SBUF tiles spilled to HBM where they do not fit (`spill.py`, ASSUMED) when
    the `spill` switch is on (TRNLAB_SPILL=1), else None: the last resort, after loop fusion."""
    from trnlab import config
    from .allocate import target_spec
    from .spill import spill_to_fit
    if not isinstance(error, SBUFOverflowError) or not config.get("spill"):
        return None                       # (the refusal the course teaches: unchanged unless asked)
    placed = spill_to_fit(program, target_spec(program, spec), error)
    if placed is None:
        raise _noted(error, "spilling tiles to HBM (TRNLAB_SPILL) cannot make it fit: the tiles one "
                            "instruction touches, or the kernel's direct allocations, leave no room")
    return placed


def fuse_loops(program: Program, error: Exception, spec=None) -> tuple[Program | None, str]:
    """(the fused, allocated program, "") or (None, why not) for a program whose allocation raised
    `error` (an SBUF/PSUM overflow at ``error.instruction``)."""
    if any(b.placement for b in program.buffers if b.on_chip and b.first >= 0):
        return None, "the kernel places tiles itself (direct allocation), whose bytes a reorder could clash"
    tensor = _block_tensor_live(program, error)
    if tensor is None:
        return None, "no block tensor's tiles are live where the allocation overflows"
    name = program.buffers[tensor].name
    reasons = []
    for depth in (1, 2):
        order, why = fused_order(program, tensor, depth)
        if order is None:
            reasons.append(why)
            continue
        try:
            return reorder(program, order, "fused"), ""     # (described again in its new order)
        except (SBUFOverflowError, PSUMOverflowError) as still:
            reasons.append(f"with the loops fused per {_groups(depth)} of {name!r} the tiles still do not fit: "
                           f"{still.args[0].splitlines()[0][:300]}")
    return None, reasons[0]                   # per first block index: the fusion a reader would try


def fused_order(program: Program, tensor: int, depth: int = 1) -> tuple[list[int] | None, str]:
    """The program's instruction order with the loops over block tensor `tensor` fused (groups: its
    tiles' first `depth` block indices), or (None, why it is not legal)."""
    blocks_of = program.blocks
    group_key = {tid: block[:depth] for tid, (parent, block) in blocks_of.items() if parent == tensor}
    if len({key for key in group_key.values()}) < 2:
        return None, f"{program.buffers[tensor].name!r} has a single group of tiles: nothing to fuse"
    instructions = program.instructions
    touching = [k for k, ins in enumerate(instructions) if any(a.buffer in group_key for a in ins.operands.values())]
    lo, hi = touching[0], touching[-1]
    span = range(lo, hi + 1)
    rank: dict = {}                           # group key -> its rank, in the order the program touches them
    own: dict[int, int] = {}                  # instruction -> its group, for those touching the tensor's tiles
    for k in touching:
        keys = {group_key[a.buffer] for a in instructions[k].operands.values() if a.buffer in group_key}
        if len(keys) > 1:
            return None, (f"instruction {k} ({instructions[k].opcode}) touches tiles of several groups "
                          f"({', '.join(map(str, sorted(keys)))})")
        key = keys.pop()
        own[k] = rank.setdefault(key, len(rank))
    for k in span:
        if instructions[k].opcode in _ORDERED_OPCODES:
            return None, f"instruction {k} ({instructions[k].opcode}) must stay in program order"
    accesses = {k: _accesses(program, instructions[k]) for k in span}
    group: dict[int, int] = {}
    # forward: each instruction after the latest group it depends on
    seen = _Hulls()
    floating = []
    for k in span:
        latest = seen.latest_conflict(accesses[k])
        if k in own:
            if latest > own[k]:
                return None, (f"instruction {k} ({instructions[k].opcode}, group {own[k]}) depends on one of "
                              f"group {latest}: fusing would run it before what it needs")
            group[k] = own[k]
        elif latest >= 0:
            group[k] = latest
        else:
            floating.append(k)
            continue
        seen.add(accesses[k], group[k])
    # backward: an instruction depending on nothing in the span joins the earliest group needing it
    if floating:
        needed = _Hulls()
        pending = set(floating)
        for k in reversed(span):
            if k in pending:
                first = needed.earliest_conflict(accesses[k])
                group[k] = first if first is not None else _previous_group(group, k, lo)
            needed.add(accesses[k], group[k])
    order = list(range(lo)) + sorted(span, key=lambda k: (group[k], k)) + list(range(hi + 1, len(instructions)))
    if order == list(range(len(instructions))):
        return None, f"the loops over {program.buffers[tensor].name!r} are already fused"
    return order, ""


# -- dependencies: regions of buffers, grouped ---------------------------------------------------------
def _accesses(program: Program, ins) -> list:
    """[(root buffer id, box or None (all of it), writes?)] of an instruction's operands."""
    out = []
    buffers = program.buffers
    for name, a in ins.operands.items():
        b = buffers[a.buffer]
        root = b
        while root.alias_of is not None:       # another shape of an HBM buffer's bytes: all of them
            root = buffers[root.alias_of]
        box = None
        index = a.index
        if root is b and not (isinstance(index, tuple) and any(e is Ellipsis or e is None for e in index)):
            box = [(lo, hi) for lo, hi, _ in _box(index if index is None or isinstance(index, tuple) else (index,),
                                                  b.shape)]
        out.append((root.id, box, name in WRITES))
    return out


def _overlap(a, b) -> bool:
    if a is None or b is None:
        return True
    return all(lo1 < hi2 and lo2 < hi1 for (lo1, hi1), (lo2, hi2) in zip(a, b))


def _merge(hull, box):
    if hull is None or box is None:
        return None
    return [(min(l1, l2), max(h1, h2)) for (l1, h1), (l2, h2) in zip(hull, box)]


class _Hulls:
    """Per buffer and group: the hull of the bytes read and of the bytes written (conservative: a
    dependence found where there is none only makes the fusion less eager or refused)."""

    _EMPTY = "empty"

    def __init__(self):
        self.by_buffer: dict = defaultdict(dict)   # buffer -> {group: [read hull, write hull]}

    def add(self, accesses: list, group: int) -> None:
        for bid, box, writes in accesses:
            hulls = self.by_buffer[bid].setdefault(group, [self._EMPTY, self._EMPTY])
            i = 1 if writes else 0
            hulls[i] = box if hulls[i] is self._EMPTY else _merge(hulls[i], box)

    def _conflicts(self, hulls, box, writes) -> bool:
        read, written = hulls
        if written is not self._EMPTY and _overlap(written, box):
            return True
        return writes and read is not self._EMPTY and _overlap(read, box)

    def latest_conflict(self, accesses: list) -> int:
        latest = -1
        for bid, box, writes in accesses:
            for g, hulls in self.by_buffer.get(bid, {}).items():
                if g > latest and self._conflicts(hulls, box, writes):
                    latest = g
        return latest

    def earliest_conflict(self, accesses: list):
        earliest = None
        for bid, box, writes in accesses:
            for g, hulls in self.by_buffer.get(bid, {}).items():
                if (earliest is None or g < earliest) and self._conflicts(hulls, box, writes):
                    earliest = g
        return earliest


def _previous_group(group: dict, k: int, lo: int) -> int:
    """The group of the nearest earlier instruction of the span that has one (0 if none)."""
    for j in range(k - 1, lo - 1, -1):
        if j in group:
            return group[j]
    return 0


# -- which block tensor, and the refusal -----------------------------------------------------------
def _block_tensor_live(program: Program, error: Exception) -> int | None:
    """The block tensor with the most bytes of its tiles live where `error` (an overflow of the
    allocation) arose, or None."""
    blocks_of = program.blocks
    k = getattr(error, "instruction", None)
    if not blocks_of or k is None:
        return None
    memory = "psum" if isinstance(error, PSUMOverflowError) else "sbuf"
    live = defaultdict(int)
    for b in program.buffers:
        if b.id in blocks_of and b.memory == memory and b.first <= k <= b.last:
            live[blocks_of[b.id][0]] += b.partition_bytes
    return max(live, key=live.get) if live else None


def _groups(depth: int) -> str:
    return "first block index" if depth == 1 else f"first {depth} block indices"


def _noted(error: Exception, note: str) -> Exception:
    """`error` again (same class and attributes) with `note` after its first line."""
    text = error.args[0] if error.args and isinstance(error.args[0], str) else str(error)
    first, _, rest = text.partition("\n")
    new = type(error)(f"{first}; {note}" + (f"\n{rest}" if rest else ""),
                      value=getattr(error, "value", None), limit=getattr(error, "limit", None))
    for attribute in ("live", "instruction", "tiles", "kernel_location", "_nki_located"):
        if hasattr(error, attribute):
            setattr(new, attribute, getattr(error, attribute))
    return new

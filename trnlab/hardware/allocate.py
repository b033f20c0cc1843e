"""Allocation by liveness: give every SBUF and PSUM tile of a program its byte offset.

A tile is live from the first to the last instruction that touches it (`Buffer.first/last`), as
AWS's compiler sees it — not for as long as a Python name refers to it. Walking the program in
order, a tile is placed just before its first instruction and released just after its last, in a
rotating (next-fit) allocator (`memory.OnChipMemory`): a tile allocated inside a loop lands on a
new address each iteration until the memory wraps around, which is multi-buffering — the load of
iteration i+1 does not reuse the bytes iteration i is still reading (the scheduler then finds no
WAR hazard between them, and the two overlap).

A tile the kernel placed itself (``nki.compiler.sbuf/psum.mod_alloc``: `Buffer.placement`) keeps its
address and, like every tile, holds it only while live: `split_direct_allocations` first gives each
physical tile of a direct allocation, and each value written over it, a buffer of its own, so two
direct allocations may share bytes when no instruction uses both (DirectAllocationOverlapError if
one does). A program whose live tiles do not fit raises SBUFOverflowError / PSUMOverflowError at the
first instruction where they do not, naming the tiles live there and their sizes (a block tensor
larger than the whole memory: SBUF/PSUMBlockTensorOverflowError). A program with loops the device
runs (its body once, each tile of the body at one address for every iteration; the tiles it shares
with the code around it live over the whole loop, `dynamic_loops.close_live_ranges`) whose SBUF
tiles next fit leaves without a gap is packed by size instead when that fits (`_pack_by_size`).

How a tile's bytes are chosen is the program's `allocation_mode` (NKI's ``AllocationMode``:
`allocation_modes.py`).

A block tensor ``(B..., par_dim(P), F...)`` the allocator places is, to AWS's compiler, a list of (P, F)
tiles whose addresses it chooses from their dependencies, so its tiles need not be live together
[NKI Block Dimension Migration Guide]: when every access selects one block, `split_block_tensors`
gives each logical tile a buffer of its own, live from its own first to its own last instruction.
"""
from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import defaultdict, deque
from itertools import repeat
from operator import attrgetter, itemgetter
from typing import NamedTuple

import numpy as np

from .. import config
from .errors import (DirectAllocationOverlapError, PSUMBlockTensorOverflowError, PSUMOverflowError,
                     SBUFBlockTensorOverflowError, SBUFOverflowError)
from .allocation_modes import MODES, best_fit, next_fit, stacked
from .memory import OnChipMemory, _fmt_bytes
from .presets import CORES, CoreSpec, core_spec
from .program import READS_DST, WRITES, Access, Buffer, Program, locate_instruction


def live_ranges(program: Program) -> tuple[dict, dict]:
    """{instruction index: on-chip buffers first used there}, {index: buffers last used there}."""
    starts, ends = defaultdict(list), defaultdict(list)
    for b in program.buffers:
        if b.on_chip and b.first >= 0:
            starts[b.first].append(b)
            ends[b.last].append(b)
    return starts, ends


def high_water(program: Program, memory: str = "sbuf") -> int:
    """Bytes per partition from offset 0 to the end of the highest tile the allocation placed in
    `memory` ("sbuf" or "psum"): how much of it the kernel's allocation reaches (0 if none)."""
    return max((b.offset + b.partition_bytes for b in program.buffers
                if b.memory == memory and b.offset is not None and b.first >= 0), default=0)


def target_spec(program: Program, spec=None) -> CoreSpec:
    """The CoreSpec a program is allocated for: `spec`, else the one it was traced with, else the
    preset its target names."""
    if spec is not None:
        return core_spec(spec)
    traced = program.spec
    if traced is not None:
        return traced
    for preset in CORES.values():
        if preset.name == program.target:
            return preset
    return core_spec(program.target)


def _block_tensor_overflow(b, memory: OnChipMemory, split: bool = False):
    """A block tensor larger than the whole memory: the error says what AWS's compiler would need.
    `split`: its tiles have live ranges of their own (`split_block_tensors`), too many live at once."""
    blocks = tuple(int(n) for n in b.shape[:b.partition_axis])
    tile = b.partition_bytes // max(math.prod(blocks), 1)
    label = memory.kind.upper()
    cls = PSUMBlockTensorOverflowError if memory.kind == "psum" else SBUFBlockTensorOverflowError
    lives = ("each tile is live from its own first to its own last instruction, but in the order the "
             "kernel's loops are written too many of them are live at once" if split else
             "an access spans several blocks, so trnlab keeps every tile of the block tensor from the first "
             "to the last instruction touching any of them")
    return cls(
        f"{label} block tensor too large: {b.name!r} has {' x '.join(map(str, blocks))} logical tiles of "
        f"{_fmt_bytes(tile)} = {_fmt_bytes(b.partition_bytes)} per partition, {label} holds "
        f"{_fmt_bytes(memory.partition_bytes)}, and {lives}. The allocation keeps the program's order: it "
        f"neither fuses loops nor moves {label} tiles elsewhere (trnlab.hardware.fusion may reorder the "
        f"program first: ASSUMED for AWS's neuronx-cc, whose middle end would fuse the affine_range loops; "
        f"skip_middle_end_transformations turns that off). Fuse the loops yourself (produce and consume "
        f"each block in one iteration) or allocate one block's tiles inside the loop",
        value=b.partition_bytes, limit=memory.partition_bytes)


# -- block tensors: one buffer per logical tile -------------------------------------------------------
def split_block_tensors(program: Program) -> bool:
    """Give each logical tile of a block tensor the allocator places (no direct allocation) a buffer of
    its own when every access selects one block (integer block indices) — rewriting the program in
    place; True if anything changed. A block dimension is a list of (P, F) tiles to AWS's compiler
    ("the physical tiles may not be alive in the memory simultaneously": NKI Block Dimension Migration
    Guide), so each tile lives from its own first to its own last instruction.
    ``program.blocks`` records {tile buffer id: (block tensor id, block index)}."""
    buffers = program.buffers
    candidates = {b.id for b in buffers if b.partition_axis and b.first >= 0 and b.on_chip and not b.placement}
    if not candidates:
        return False
    accesses = defaultdict(list)               # block tensor id -> [(instruction index, operand, index)]
    for k, ins in enumerate(program.instructions):
        for name, a in ins.operands.items():
            if a.buffer in candidates:
                accesses[a.buffer].append((k, name, a.index))
    blocks_of = program.blocks
    rewrites = defaultdict(dict)               # instruction index -> {operand: Access on a tile}
    split = {}                                 # block tensor id -> {block: tile}
    for bid, uses in accesses.items():
        b = buffers[bid]
        axis = b.partition_axis
        blocks = tuple(int(n) for n in b.shape[:axis])
        picked = [_one_block(index, axis, blocks) for _, _, index in uses]
        if any(p is None for p in picked):
            continue                           # an access spans blocks: the block tensor stays one buffer
        tiles = {}
        for (k, name, _), (block, index) in zip(uses, picked):
            t = tiles.get(block)
            if t is None:
                t = tiles[block] = Buffer(id=len(buffers), name=f"{b.name}[{', '.join(map(str, block))}]",
                                          memory=b.memory, shape=tuple(b.shape[axis:]), dtype=b.dtype,
                                          partition_axis=0, role=b.role, first=k)
                buffers.append(t)
                blocks_of[t.id] = (bid, block)
            t.last = k                         # uses come in program order
            rewrites[k][name] = Access(t.id, index)
        b.first = b.last = -1                  # no instruction touches the block tensor itself any more
        split[bid] = tiles
    if not rewrites:
        return False
    instructions = program.instructions
    for k, changed in rewrites.items():
        ins = instructions[k]                  # operands may be shared with other records: a new dict
        ins.operands = {**ins.operands, **changed}
        if ins.issue is not None:              # the trace's description, on the tiles (else: described again)
            ins.issue = _issue_on_tiles(ins.issue, buffers, split, changed)
    program.blocks = blocks_of
    program.changed()
    return True


def _one_block(index, axis: int, blocks: tuple):
    """(block, the index within that block's tile) if the access `index` selects one block of a block
    tensor with `blocks` before its partition axis `axis`, else None. A block index is an integer, or an
    index array holding one value throughout (an access pattern folding two iterators into one free axis,
    `t[i, i_p, 128 * i_j + i_k]`, is resolved as arrays on every axis) that the other axes' arrays do
    not need for their shape."""
    if not isinstance(index, tuple) or len(index) <= axis:
        return None
    block = []
    for e, n in zip(index[:axis], blocks):
        if isinstance(e, np.ndarray) and e.size and e.dtype.kind in "iu":
            first = e.flat[0]
            if not (e == first).all():
                return None
            e = int(first)
        if not isinstance(e, (int, np.integer)) or not -n <= e < n:
            return None
        block.append(int(e) % n)
    rest = index[axis:]
    if any(isinstance(e, np.ndarray) for e in index[:axis]):
        shapes = [e.shape for e in index if isinstance(e, np.ndarray)]
        kept = [e.shape for e in rest if isinstance(e, np.ndarray)]
        if not kept or np.broadcast_shapes(*kept) != np.broadcast_shapes(*shapes) or \
                any(isinstance(e, slice) for e in rest):
            return None                        # dropping the block arrays would change the access's shape
    return tuple(block), rest


def _issue_on_tiles(issue: tuple, buffers: list, split: dict, changed: dict):
    """The trace's description of an instruction (compiled.py: operands as (buffer id, box), PSUM
    bank ranges as (buffer id, first byte, end byte)) with a block tensor's operands named as the
    logical tiles `split_block_tensors` made — what describing the rewritten instruction would give;
    None (describe it again) where that cannot be told from the description alone."""
    from .records import DMA, ISSUE, MATMUL, PE_ISSUE, PRINT, SEED
    advanced = {a.buffer for a in changed.values()
                if isinstance(a.index, tuple) and any(isinstance(e, np.ndarray) for e in a.index)}

    def ref(r):
        bid, box = r
        tiles = split.get(bid)
        if tiles is None:
            return r
        b = buffers[bid]
        axis = b.partition_axis
        t = tiles.get((0,) * axis if box is None else tuple(box[2 * a] for a in range(axis)))
        if t is None:
            raise LookupError(bid)
        if box is None:
            return t.id, None
        tail = tuple(box[2 * axis:])
        if t.id not in advanced and all(tail[2 * a] == 0 and tail[2 * a + 1] == n for a, n in enumerate(t.shape)):
            return t.id, None                  # a basic view of a whole tile (View: box None)
        return t.id, tail

    def refs(rs):
        return tuple(ref(r) for r in rs)

    def banks(ranges):
        if not isinstance(ranges, tuple):
            return ranges
        out = []
        for entry in ranges:
            tiles = split.get(entry[0])
            if tiles is None:
                out.append(entry)
                continue
            b = buffers[entry[0]]
            blocks = tuple(int(n) for n in b.shape[:b.partition_axis])
            tile_bytes = b.partition_bytes // max(math.prod(blocks), 1)
            linear, lo, hi = entry[1] // tile_bytes, entry[1], entry[2]
            t = tiles.get(tuple(int(i) for i in np.unravel_index(linear, blocks)))
            if t is None or hi > (linear + 1) * tile_bytes:
                raise LookupError(entry)       # a range over several tiles (or a gather's): not one tile's
            out.append((t.id, lo - linear * tile_bytes, hi - linear * tile_bytes))
        return tuple(out)

    try:
        kind = issue[0]
        if kind == ISSUE:
            return issue[:4] + (refs(issue[4]), refs(issue[5])) + issue[6:10] + (banks(issue[10]),) + issue[11:]
        if kind == MATMUL:
            return (kind, ref(issue[1]), ref(issue[2]), ref(issue[3])) + issue[4:]
        if kind == PE_ISSUE:
            return issue[:2] + (ref(issue[2]), refs(issue[3]), ref(issue[4])) + issue[5:]
        if kind == DMA:
            return issue[:2] + (ref(issue[2]), refs(issue[3])) + issue[4:]
        if kind == SEED:
            return (kind, refs(issue[1])) + issue[2:]
        if kind == PRINT:
            return issue
    except LookupError:
        pass
    return None


def _split_block_tensor(program: Program, b: Buffer, capacity: int):
    """The block tensor larger than `capacity` that tile `b` is a logical tile of, or None."""
    whole = program.blocks.get(b.id)
    if whole is None:
        return None
    tensor = program.buffers[whole[0]]
    return tensor if tensor.partition_bytes > capacity else None


def _overlap(b, other, memory: OnChipMemory) -> DirectAllocationOverlapError:
    """Two direct allocations on the same bytes, both live at b's first instruction."""
    label = memory.kind.upper()
    start, end = int(b.placement["offset"]), int(b.placement["offset"]) + b.partition_bytes
    o_start = other.offset if other.offset is not None else int(other.placement["offset"])
    o_end = o_start + other.partition_bytes
    shared = (max(start, o_start), min(end, o_end))
    what = "a direct allocation" if other.placement else "a tile the allocator placed"
    error = DirectAllocationOverlapError(
        f"direct allocation overlap: {b.name!r} ({label} bytes {start}-{end} per partition, live at "
        f"instructions {b.first}-{b.last}) and {what} {other.name!r} (bytes {o_start}-{o_end}, live at "
        f"{other.first}-{other.last}) share bytes {shared[0]}-{shared[1]} while both are live; direct "
        f"allocations may share bytes only if no instruction falls in both live ranges",
        value=(b.name, other.name), limit=(shared[0], shared[1]))
    error.tiles = (b.name, other.name)
    return error


# -- direct allocations: one buffer per physical tile and per value ---------------------------------
def _box(index, shape) -> list:
    """Per axis (lo, hi, dense) of the elements an Access index touches (dense: every one of them)."""
    box = []
    entries = () if index is None else index
    for axis, n in enumerate(shape):
        e = entries[axis] if axis < len(entries) else slice(None)
        if isinstance(e, (int, np.integer)):
            box.append((int(e), int(e) + 1, True))
        elif isinstance(e, slice):
            start, stop, step = e.indices(int(n))
            count = len(range(start, stop, step))
            box.append((start, start + (count - 1) * step + 1 if count else start, step == 1 or count <= 1))
        else:                                   # a gather: anywhere on the axis
            box.append((0, int(n), False))
    return box


def _covers(write: list, hull: list) -> bool:
    return all(d and lo <= h_lo and hi >= h_hi for (lo, hi, d), (h_lo, h_hi, _) in zip(write, hull))


def _hull(a: list | None, b: list) -> list:
    return b if a is None else [(min(x[0], y[0]), max(x[1], y[1]), False) for x, y in zip(a, b)]


def split_direct_allocations(program: Program) -> bool:
    """Give each tile the kernel placed itself (``nki.compiler`` direct allocation) the live range of
    its values, as the chip sees them — rewriting the program in place; True if anything changed.

    1. A block tensor whose every access selects one block gets one buffer per physical tile, at the
       address the allocation gives that tile (``Buffer.placement["tiles"]``): its tiles live and die
       on their own (AWS's allocated attention reuses PSUM banks tile by tile).
    2. A direct-allocated tile written again over everything touched since its last such write, by an
       instruction that does not read it, holds a new value: from there on it is a new buffer. So the
       same bytes, declared again in a loop or shared by tiles of other shapes, are live only from each
       value's first write to its last read (an accumulating matmul reads its dst)."""
    direct = {b.id for b in program.buffers if b.placement and b.first >= 0 and b.on_chip}
    if not direct:
        return False
    touches = defaultdict(list)              # buffer id -> [(instruction index, operand name)]
    for k, ins in enumerate(program.instructions):
        for name, a in ins.operands.items():
            if a.buffer in direct:
                touches[a.buffer].append((k, name))
    changed = set()
    instructions = program.instructions

    def rewrite(k: int, name: str, bid: int, index) -> None:
        ins = instructions[k]
        if k not in changed:
            ins.operands = dict(ins.operands)
            changed.add(k)
        ins.operands[name] = Access(bid, index)

    def new_buffer(like: Buffer, shape, offset: int, name: str) -> Buffer:
        b = Buffer(id=len(program.buffers), name=name, memory=like.memory, shape=tuple(shape), dtype=like.dtype,
                   partition_axis=0, role=like.role,
                   placement={"offset": int(offset), "kind": like.placement.get("kind", "")})
        program.buffers.append(b)
        return b

    tiles = []                               # single-tile direct allocations, for step 2
    for bid in sorted(touches):
        b = program.buffers[bid]
        axis = b.partition_axis or 0
        if axis == 0:
            tiles.append(b)
            continue
        accesses = [(k, name, instructions[k].operands[name].index) for k, name in touches[bid]]
        if not all(isinstance(index, tuple) and len(index) > axis
                   and all(isinstance(e, (int, np.integer)) for e in index[:axis]) for _, _, index in accesses):
            continue                         # an access spans blocks: the block tensor stays one buffer
        blocks = tuple(int(n) for n in b.shape[:axis])
        tile_bytes = b.partition_bytes // max(math.prod(blocks), 1)
        offsets = b.placement.get("tiles")
        per_tile = {}
        for k, name, index in accesses:
            block = tuple(int(e) for e in index[:axis])
            t = per_tile.get(block)
            if t is None:
                linear = int(np.ravel_multi_index(block, blocks))
                offset = offsets[linear] if offsets else int(b.placement["offset"]) + linear * tile_bytes
                t = per_tile[block] = new_buffer(b, b.shape[axis:], offset,
                                                 f"{b.name}[{', '.join(map(str, block))}]")
                tiles.append(t)
            rest = index[axis:]
            rewrite(k, name, t.id, rest)
            touches[t.id].append((k, name))
        touches[bid] = []
    for t in tiles:
        events = touches[t.id]
        segment, hull, current = 0, None, t
        for i, (k, name) in enumerate(events):
            ins = instructions[k]
            box = _box(ins.operands[name].index, t.shape)
            reads_it = any(a.buffer in (t.id, current.id) and (n not in WRITES or (
                n == "dst" and ins.opcode == "nc_matmul" and ins.attrs.get("accumulate") is not False)
                or (n in WRITES and ins.opcode in READS_DST))
                for n, a in ins.operands.items())
            if (name in WRITES and hull is not None and not reads_it and _covers(box, hull)
                    and events[i - 1][0] != k):
                # a new value over all the old one's bytes: a new buffer on the same address
                segment += 1
                current = new_buffer(t, t.shape, t.placement["offset"], t.name)
                hull = None
            if current is not t:
                rewrite(k, name, current.id, ins.operands[name].index)
            hull = _hull(hull, box)
    if not changed:
        return False
    _live_range_from_scratch(program)
    for k in changed:
        instructions[k].issue = None         # described again on the first replay (buffer ids changed)
    program.changed()
    return True


def _live_range_from_scratch(program: Program) -> None:
    """first/last of every on-chip buffer from the instructions."""
    for b in program.buffers:
        if b.on_chip:
            b.first = b.last = -1
    buffers = program.buffers
    for k, ins in enumerate(program.instructions):
        for a in ins.operands.values():
            b = buffers[a.buffer]
            if b.on_chip:
                if b.first < 0:
                    b.first = k
                b.last = k


def allocate(program: Program, spec: "CoreSpec | str | None" = None) -> Program:
    """Set `offset` on every on-chip buffer of `program` (in place) and return it.

    Tiles the kernel placed itself (`Buffer.placement`) keep their address and, like every tile,
    hold it only while live: two of them may share bytes if their live ranges are disjoint (AWS's
    kernels with direct allocation reuse PSUM banks for tiles of different shapes, one after the
    other); sharing bytes while both are live is a DirectAllocationOverlapError. A tile the
    allocator places avoids the direct allocations live at any instruction of its own range.

    The walk, per memory: at each instruction, the tiles first used there are placed (direct
    allocations first, then in buffer-table order), then the tiles last used there are released
    (buffer-table order); a placed tile goes to the first gap at or after the end of the last
    placement (next fit), wrapping to offset 0 only when nothing fits further on — or, by the
    program's `allocation_mode`, best fit (module docstring). SBUF and PSUM do
    not interact, so each is walked on its own; an error is the one the joint walk meets first. A
    program with loops the device runs whose SBUF tiles next fit cannot place is packed by size
    instead (`_pack_by_size`), if that fits.
    Two shortcuts give the same offsets, on the fast path only (`trnlab.config.fast()`; tested
    against the event-by-event walk in tests/test_hardware_allocate_bump.py): runs of events between
    wrap-arounds placed at once (`_Bump`), and the rows of stamped buffers read from the loop
    stamper's notes (`note_stamped_tiles`) rather than from the buffer objects."""
    spec = target_spec(program, spec)
    notes = program.derived.pop("stamped_tiles")
    changed = split_direct_allocations(program)
    changed = split_block_tensors(program) or changed
    if notes and not changed:              # a rewritten buffer table no longer matches the notes
        program.derived.put("stamped_tiles", notes)
    buffers = program.buffers
    count = len(buffers)
    sizes, rows, direct = _tile_rows(buffers, _stamped_notes(program, buffers))
    failures = []
    for kind in ("sbuf", "psum"):
        ids, firsts, lasts, free = rows[kind]
        if not len(ids):
            continue
        # one event per first and per last use, in walk order: key (k, release?, allocator-placed?, id)
        keys = np.concatenate([(firsts * 4 + free) * count + ids, (lasts * 4 + 2) * count + ids])
        keys.sort()
        limit = min(f[0] for f in failures) if failures else None
        fixed = sorted(direct[kind], key=attrgetter("first"))
        memory = OnChipMemory(kind, spec, with_data=False)
        failure = _walk(program, memory, keys, sizes, count, fixed, limit)
        if failure is not None and program.loops and memory.bank_bytes is None and not fixed \
                and type(failure[1]) is SBUFOverflowError \
                and _pack_by_size(program, rows[kind], sizes, memory.partition_bytes):
            failure = None                 # a device loop's fixed addresses, packed (`_pack_by_size`)
        if failure is not None:
            failures.append(failure)
    if failures:
        raise min(failures, key=itemgetter(0))[1]
    program.allocated = True
    return program


_TILE_FIELDS = attrgetter("first", "last", "memory", "placement", "shape", "dtype", "partition_axis")
_MEMORY_CODES = {"sbuf": 1, "psum": 2}


class StampedTiles(NamedTuple):
    """Rows ``start .. end-1`` of a buffer table as the loop stamper made them (`nki/loops.py`):
    first and last uses, memory (1 SBUF, 2 PSUM, 0 elsewhere), bytes per partition and whether
    the kernel placed the tile itself, one entry per row. The stamper knows them as arrays; read
    back from 100,000 buffer objects they would cost a third of the allocation."""
    start: int
    end: int
    firsts: np.ndarray
    lasts: np.ndarray
    memories: np.ndarray
    sizes: np.ndarray
    placed: np.ndarray


def note_stamped_tiles(program: Program, rows: StampedTiles) -> None:
    """Hand the next `allocate(program)` the rows a loop stamper just appended. The note is
    dropped by that call (a later one reads every row), and only holds because nothing changes a
    stamped buffer's first or last use after it is made: no Python object of the kernel refers
    to the tiles of a stamped iteration, so no later instruction can use them."""
    derived = program.derived
    notes = derived.get("stamped_tiles")
    if notes is None:
        notes = derived.put("stamped_tiles", [])
    notes.append(rows)


def _stamped_notes(program: Program, buffers: list) -> list:
    """The notes of `note_stamped_tiles`, taken off the program; [] if they do not match the
    table (checked at both ends of each run of rows; in full under TRNLAB_CHECK_LOOPS=1) or the
    fast paths are off (the reference reads every row from the buffer objects)."""
    notes = program.derived.pop("stamped_tiles") or []
    if not config.fast():
        return []
    at = 0
    for rows in notes:
        if not at <= rows.start < rows.end <= len(buffers):
            return []
        for i in (rows.start, rows.end - 1):
            b = buffers[i]
            k = i - rows.start
            if (b.id != i or b.first != rows.firsts[k] or b.last != rows.lasts[k]
                    or _MEMORY_CODES.get(b.memory, 0) != rows.memories[k] or bool(b.placement) != rows.placed[k]):
                return []
        at = rows.end
    if notes and config.get("check_loops"):
        noted, rows_noted, direct_noted = _tile_rows(buffers, notes)
        read, rows_read, direct_read = _tile_rows(buffers)
        assert noted == read and direct_noted == direct_read and all(
            np.array_equal(a, b) for kind in rows_read for a, b in zip(rows_noted[kind], rows_read[kind])), \
            "the loop stamper's notes disagree with the buffer table"
    return notes


def _tile_rows(buffers: list, notes: list = ()) -> tuple:
    """One pass over the buffer table, reading each row's fields at once (by `map`: a large
    table's rows are far apart in memory, and one visit each is what costs), rows a loop stamper
    noted (`StampedTiles`) taken from its arrays instead: bytes per partition of every buffer (0
    off chip), per memory the ids, first and last uses and allocator-placed flags (1; 0 for a
    direct allocation) of its used tiles as int64 arrays, and per memory its direct allocations.
    Bytes per partition are computed once per (shape, dtype, partition axis)."""
    count = len(buffers)
    firsts = np.full(count, -1, dtype=np.int64)
    lasts = np.full(count, -1, dtype=np.int64)
    memories = np.zeros(count, dtype=np.int64)
    placed = np.zeros(count, dtype=bool)
    sizes = np.zeros(count, dtype=np.int64)
    rest, rest_ids, at = [], [], 0
    for rows in notes:
        rest.extend(buffers[at:rows.start])
        rest_ids.append(np.arange(at, rows.start, dtype=np.int64))
        firsts[rows.start:rows.end] = rows.firsts
        lasts[rows.start:rows.end] = rows.lasts
        memories[rows.start:rows.end] = rows.memories
        placed[rows.start:rows.end] = rows.placed
        sizes[rows.start:rows.end] = rows.sizes
        at = rows.end
    rest.extend(buffers[at:])
    rest_ids.append(np.arange(at, count, dtype=np.int64))
    rest_ids = np.concatenate(rest_ids)
    if rest:
        r_firsts, r_lasts, r_memories, r_placements, shapes, dts, axes = zip(*map(_TILE_FIELDS, rest))
        firsts[rest_ids] = r_firsts
        lasts[rest_ids] = r_lasts
        memories[rest_ids] = list(map(_MEMORY_CODES.get, r_memories, [0] * len(rest)))
        placed[rest_ids] = list(map(bool, r_placements))
        on_chip = np.flatnonzero(memories[rest_ids] != 0).tolist()
        keys = list(zip(shapes, dts, axes))
        table: dict = {}
        for key, i in dict(zip(map(keys.__getitem__, reversed(on_chip)), reversed(on_chip))).items():
            table[key] = rest[i].partition_bytes                 # key -> its first tile's bytes
        sizes[rest_ids[on_chip]] = list(map(table.__getitem__, map(keys.__getitem__, on_chip)))
    rows, direct = {}, {}
    used = firsts >= 0
    for kind, code in _MEMORY_CODES.items():
        ids = np.flatnonzero((memories == code) & used).astype(np.int64)
        by_kernel = placed[ids]
        rows[kind] = (ids, firsts[ids], lasts[ids], (~by_kernel).astype(np.int64))
        direct[kind] = [buffers[bid] for bid in ids[by_kernel].tolist()]
    return sizes.tolist(), rows, direct


_MIN_STRETCH = 16     # events: a shorter run of bump placements is walked one event at a time


def _walk(program: Program, memory: OnChipMemory, keys: np.ndarray, sizes: list, count: int, fixed: list,
          limit):
    """Place and release one memory's tiles in event order (see `allocate`); None, or
    (event key, error) for the first tile that cannot be placed (only events before `limit`).
    `fixed`: its direct allocations by first use — an allocator-placed tile must avoid the ones that
    become live while it is (those live when it is placed are in `occupied` already).

    Where no live tile lies at or above the cursor (the usual case between two wrap-arounds of a
    rotating allocator) and no bank rule applies, next fit places each tile at the cursor, so a run
    of events is placed at once (`_bump_stretch`) until a tile would pass the end of the memory."""
    buffers = program.buffers
    mode = program.allocation_mode
    if mode not in MODES:
        raise ValueError(f"allocation mode {mode!r}: trnlab's allocator has {', '.join(MODES)}")
    events = keys.tolist()
    stop = len(events) if limit is None else bisect_left(events, limit)
    capacity, bank = memory.partition_bytes, memory.bank_bytes
    fixed_firsts = [b.first for b in fixed]
    occupied: list = []          # [(offset, bytes per partition)] of the live tiles, by offset
    owners: list = []            # their buffer ids
    cursor = used = 0
    # fast path: runs of bump placements at once (the reference: each event walked on its own)
    bump = None if bank is not None or fixed or mode != "ring" or not config.fast() else _Bump(keys, sizes, count)
    live_order: dict = {}        # AllocationMode.FAST: the live tiles in the order they were placed
    retry = 0                    # the next event at which a bump run is worth trying
    e = 0
    while e < stop:
        key = events[e]
        bid = key % count
        rest = key // count
        size = sizes[bid]
        if rest & 2:                                          # released after its last instruction
            i = bisect_left(occupied, (buffers[bid].offset, size))
            while owners[i] != bid:
                i += 1
            del occupied[i], owners[i]
            live_order.pop(bid, None)
            used -= size
            e += 1
            continue
        if bump is not None and e >= retry and (not occupied or occupied[-1][0] + occupied[-1][1] <= cursor):
            end = bump.end(e, cursor, capacity, stop)
            if end - e >= _MIN_STRETCH:
                cursor, used = bump.place(buffers, e, end, cursor, used, occupied, owners)
                e = end
                continue
            retry = e + _MIN_STRETCH
        b = buffers[bid]
        try:
            if rest & 1:                                      # the allocator places it
                view = occupied
                if fixed_firsts:
                    k = rest >> 2
                    later = fixed[bisect_right(fixed_firsts, k):bisect_right(fixed_firsts, b.last)]
                    if later:
                        view = sorted(occupied + [(f.offset if f.offset is not None else int(f.placement["offset"]),
                                                   f.partition_bytes) for f in later])
                if mode == "ring":
                    offset = next_fit(view, size, cursor, capacity, bank)
                    if offset is None and cursor > 0:
                        offset = next_fit(view, size, 0, capacity, bank)
                else:
                    offset = None
                    if mode == "fast" and live_order:
                        top = buffers[next(reversed(live_order))]
                        if top.last >= b.last:            # its live range nests in the top tile's: stacked
                            offset = stacked(view, (top.offset, sizes[top.id]), size, capacity, bank)
                    if offset is None:
                        offset = best_fit(view, size, capacity, bank)
                if offset is None:
                    if size > capacity and b.partition_axis:
                        raise _block_tensor_overflow(b, memory)
                    whole = _split_block_tensor(program, b, capacity)
                    if whole is not None:
                        raise _block_tensor_overflow(whole, memory, split=True)
                    raise memory.overflow(size, b.name, used=used)
            else:                                             # a direct allocation
                offset = int(b.placement["offset"])
                if offset < 0 or offset + size > capacity:
                    raise memory.overflow(size, b.name, f"; offset {offset} is out of range", used=used)
                for (o, n), owner in zip(occupied, owners):
                    if o < offset + size and offset < o + n:
                        raise _overlap(b, buffers[owner], memory)
                    if o >= offset + size:
                        break
        except (SBUFOverflowError, PSUMOverflowError, DirectAllocationOverlapError) as error:
            # the live tiles in the order they were placed (the message lists them by size, then so)
            placed = dict.fromkeys(sorted(owners, key=lambda i: (buffers[i].first, not buffers[i].placement, i)))
            return key, _overflow(error, program, rest >> 2, b, memory, placed)
        i = bisect_left(occupied, (offset, size))
        occupied.insert(i, (offset, size))
        owners.insert(i, bid)
        cursor = offset + size
        used += size
        b.offset = offset
        if mode == "fast":
            live_order[bid] = None
        e += 1
    return None


def _pack_by_size(program: Program, rows: tuple, sizes: list, capacity: int) -> bool:
    """Place one memory's tiles by size, largest first, each at the lowest offset clear of the tiles
    already placed whose live ranges meet its own; True, offsets set, if every tile fits. The
    fallback `allocate` takes for a program with loops the device runs (and no direct allocation
    in that memory) when next fit leaves a tile no gap: a body's tiles have one address
    for every iteration, so the rotation that multi-buffers straight-line code buys nothing there,
    and its gaps between the tiles carried over the loop can leave a tile no room where the bytes
    live at once do fit (ASSUMED: AWS's allocator, "graph coloring after it traces the kernel",
    nki.compiler.Allocation, packs them; its order is not documented)."""
    ids, firsts, lasts, _ = rows
    buffers = program.buffers
    order = sorted(range(len(ids)), key=lambda i: (-sizes[ids[i]], firsts[i], ids[i]))
    # the tiles placed so far: live range, offset, bytes per partition
    p_first, p_last, p_offset, p_size = (np.empty(len(order), dtype=np.int64) for _ in range(4))
    n = 0
    offsets = {}
    for i in order:
        first, last, size = int(firsts[i]), int(lasts[i]), sizes[ids[i]]
        meet = np.flatnonzero((p_first[:n] <= last) & (p_last[:n] >= first))
        cursor, offset = 0, None
        for j in meet[np.argsort(p_offset[meet], kind="stable")].tolist():
            if cursor + size <= p_offset[j]:
                offset = cursor
                break
            cursor = max(cursor, int(p_offset[j] + p_size[j]))
        if offset is None:
            if cursor + size > capacity:
                return False
            offset = cursor
        p_first[n], p_last[n], p_offset[n], p_size[n] = first, last, offset, size
        n += 1
        offsets[int(ids[i])] = offset
    for bid, offset in offsets.items():
        buffers[bid].offset = offset
    return True


class _Bump:
    """Runs of events placed at once: from an event where every live tile lies below the cursor,
    each tile is placed at the cursor — the next fit answer when nothing is above it and no bank
    rule applies — so its offset is the cursor plus the bytes placed since, for as long as a tile
    ends within the memory. Releases in the run take tiles below the cursor, which next fit no
    longer looks at. (Only for a memory without direct allocations: `_walk`.)"""

    def __init__(self, keys: np.ndarray, sizes: list, count: int):
        self.bids = keys % count
        released = ((keys // count) & 2) != 0
        self.released = released
        size = np.array(sizes, dtype=np.int64)[self.bids]
        self.placed_bytes = np.concatenate([[0], np.cumsum(np.where(released, 0, size))])   # before event e
        self.released_bytes = np.concatenate([[0], np.cumsum(np.where(released, size, 0))])
        self.release_at = np.zeros(count, dtype=np.int64)      # per buffer id: its release event
        self.release_at[self.bids[released]] = np.flatnonzero(released)

    def end(self, e: int, cursor: int, capacity: int, stop: int) -> int:
        """The first event from e on that the run cannot take: a tile passing the memory's end."""
        p = self.placed_bytes
        # event x is placed at cursor + p[x] - p[e] and must end by capacity: p[x + 1] <= bound
        last = int(np.searchsorted(p, capacity - cursor + p[e], side="right")) - 1
        return min(last, stop)

    def place(self, buffers: list, e: int, end: int, cursor: int, used: int, occupied: list, owners: list):
        """Place the events e .. end-1; update `occupied`/`owners` to the tiles live after them."""
        p = self.placed_bytes
        bids, released = self.bids[e:end], self.released[e:end]
        placing = ~released
        offsets = (cursor - p[e]) + p[e:end][placing]
        placed = bids[placing]
        # b.offset = offset for each, the loop run by map
        deque(map(setattr, map(buffers.__getitem__, placed.tolist()), repeat("offset"), offsets.tolist()), maxlen=0)
        release_at = self.release_at
        # tiles live before the run (all below the cursor) that stay live, then the run's own
        kept = [i for i, bid in enumerate(owners) if release_at[bid] >= end]
        if len(kept) != len(owners):
            occupied[:] = [occupied[i] for i in kept]
            owners[:] = [owners[i] for i in kept]
        stays = release_at[placed] >= end
        if stays.any():
            sizes = (p[e + 1:end + 1] - p[e:end])[placing]
            occupied.extend(zip(offsets[stays].tolist(), sizes[stays].tolist()))
            owners.extend(placed[stays].tolist())
        used += int(p[end] - p[e]) - int(self.released_bytes[end] - self.released_bytes[e])
        return cursor + int(p[end] - p[e]), used


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
    if hasattr(error, "tiles"):
        new.tiles = error.tiles
    return locate_instruction(new, program, k)

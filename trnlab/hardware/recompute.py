"""Recomputation elimination: an instruction that computes again what an earlier one computed, from the
same unchanged inputs, is dropped, and its readers read the earlier result (a compiler's loop-invariant
code motion, seen on a traced loop).

A kernel may compute inside a loop a value that does not depend on the loop:

    delta_t = nl.load(delta[...]); u_t = nl.load(u[...])
    for s in nl.affine_range(16):
        delta_u = nisa.tensor_tensor(delta_t, u_t, op=nl.multiply)     # the same product, 16 times
        ...

Traced, the loop is 16 copies of its body, each with the same `tensor_tensor` on the same tiles. A
compiler that moves loop-invariant code out of the loop computes it once and keeps the result live across
the loop. Evidence that AWS's does, on one published kernel: AWS's fused-Mamba tutorial's v2 computes
delta × u inside its state loop, and its profile's Vector-engine time per step is 3.10 µs, where the
page's code costs 4.05 µs here with the product and 3.09 µs without it (docs/calibration.md, candidate
(e)). How neuronx-cc decides is not published; this rule is ASSUMED.

`eliminate_recomputation(program)`: walking the program in order, an instruction j is dropped when an
earlier instruction i is the same computation — same opcode, engine, attributes and read operands
(buffer and index; plain slices and integers only) with none of those buffers written between i and j
— and both write a whole SBUF tile that the kernel did not place, that nothing else writes, of the same
shape and dtype. Every instruction after j that reads j's tile reads i's instead, which stays live
until its last new reader. Only elementwise, copy and constant instructions (`tensor_tensor`,
`tensor_scalar`, `activation`, `tensor_copy`, `iota`, `memset`) are candidates: not DMAs (reloading is
another decision), not matmuls (PSUM accumulation), not instructions with state. Programs with loops
the device runs or with addresses the kernel placed are left alone.

Where the longer-lived tiles no longer fit SBUF without spilling, the kernel keeps its recomputation
(`nki.__init__._run_trace` allocates the program without it then): a compiler does not hoist under
memory pressure. The switch ``recompute`` (TRNLAB_RECOMPUTE) turns the pass on; it is a candidate
(docs/calibration.md, (l)), off by default.
"""
from __future__ import annotations

import copy
from collections import defaultdict
from operator import attrgetter

from .program import WRITES, Access, Program
from .versions import _covers, _writes_whole

CANDIDATES = frozenset({"tensor_tensor", "tensor_scalar", "activation", "tensor_copy", "iota", "memset"})
_OPCODE = attrgetter("opcode")


def _key(ins):
    """What `ins` computes, as a hashable key, or None if it is not a candidate: (opcode, engine,
    attributes, read operands)."""
    if ins.opcode not in CANDIDATES or not _writes_whole(ins):     # (every index plain slices and integers)
        return None
    reads = []
    for name, a in sorted(ins.operands.items()):
        if name in WRITES:
            if name != "dst":
                return None                       # a second result (a reduction's): not a candidate
            continue
        reads.append((name, a.buffer, repr(a.index)))
    try:
        attrs = repr(sorted(ins.attrs.items()))
    except TypeError:
        return None
    return (ins.opcode, ins.engine, attrs, tuple(reads))


def eliminate_recomputation(program: Program) -> Program:
    """`program` without the instructions that compute again what an earlier one computed (module
    docstring); `program` itself if none does. Not allocated."""
    if program.loops:
        return program
    instructions = program.instructions
    keys = {}
    seen = defaultdict(int)
    # one cheap pass (most programs repeat no computation): the candidates' positions by their opcodes alone
    candidates = [k for k, opcode in enumerate(map(_OPCODE, instructions)) if opcode in CANDIDATES]
    rough = defaultdict(list)                    # (opcode, the buffers read) -> positions: a key's necessary part
    for k in candidates:
        ins = instructions[k]
        rough[(ins.opcode, *(a.buffer for name, a in ins.operands.items() if name not in WRITES))].append(k)
    for group in rough.values():
        if len(group) < 2:
            continue
        for k in group:
            key = _key(instructions[k])
            if key is not None:
                keys[k] = key
                seen[key] += 1
    if not any(n > 1 for n in seen.values()) or any(b.placement for b in program.buffers):
        return program
    buffers = program.buffers
    writers = defaultdict(int)
    for ins in instructions:
        for name, a in ins.operands.items():
            if name in WRITES:
                writers[a.buffer] += 1

    def sole_whole_tile(ins) -> int | None:
        a = ins.operands.get("dst")
        if a is None:
            return None
        b = buffers[a.buffer]
        if (b.memory != "sbuf" or b.role != "internal" or writers[a.buffer] != 1 or b.placement
                or getattr(b, "kernel_slot", False) or not _covers(a, b.shape)):
            return None
        return a.buffer

    generation = defaultdict(int)               # buffer -> how many times it has been written so far
    earlier: dict = {}                          # key -> (its result tile, the generations of its inputs)
    replaced: dict[int, int] = {}               # a dropped instruction's tile -> the earlier result tile
    kept = []
    for k, ins in enumerate(instructions):
        if replaced and any(a.buffer in replaced for a in ins.operands.values()):
            ins = copy.copy(ins)
            ins.operands = {name: Access(replaced.get(a.buffer, a.buffer), a.index)
                            for name, a in ins.operands.items()}
            ins.issue = None                      # described again (its operands changed)
        # a candidate the first pass left out may still be repeated once its inputs are earlier results
        key = keys.get(k) if k in keys or ins.opcode not in CANDIDATES else _key(ins)
        if key is not None:
            tile = sole_whole_tile(ins)
            inputs = tuple(generation[bid] for _, bid, _ in key[3])
            found = earlier.get(key)
            if tile is not None and found is not None and found[1] == inputs \
                    and buffers[found[0]].shape == buffers[tile].shape \
                    and buffers[found[0]].dtype == buffers[tile].dtype:
                replaced[tile] = found[0]         # dropped: its readers read the earlier result
                continue
            if tile is not None:
                earlier[key] = (tile, inputs)
        for name, a in ins.operands.items():
            if name in WRITES:
                generation[a.buffer] += 1
        kept.append(ins)
    if not replaced:
        return program
    new = copy.copy(program)
    new.instructions = kept
    new.buffers = [copy.copy(b) for b in buffers]
    new.read_live_ranges()
    new.allocated = False
    new.changed()
    return new

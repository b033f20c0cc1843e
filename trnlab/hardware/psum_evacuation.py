"""Early PSUM evacuation: how a kernel that keeps more PSUM accumulators live than PSUM holds, in the
order it is written, still runs.

AWS's MoE kernels (NKI Library, ``compute_gate_and_up_projections_shard_on_intermediate``) allocate
one PSUM tile per (block column, intermediate tile), accumulate every one of them over the hidden
dimension in one loop nest, and copy them out of PSUM only in a second loop nest after it: in that
order all of them are live at once (at the production shape of the library's
``test_moe_cte_unified``, more 2 KiB tiles per partition than PSUM's 16 KiB hold). The kernels run on the chip, so AWS's compiler does not allocate them in that order; it does
not document what it does. ASSUMED here: it schedules before it allocates, and an instruction that
only reads a finished accumulator (one no later instruction writes) may issue right after the
accumulator's last write — each tile then lives from its first matmul to its copy out.

`evacuated_order` moves each such reader up to just after the last write of the PSUM tile it reads
(readers of one tile in their order), when that is legal: no instruction in between writes what it
reads or touches what it writes (the buffers' roots compared whole: conservative), none is an
instruction kept in program order (state beyond its operands: `fusion._ORDERED_OPCODES`), all of
them lie in its region, and the reader itself writes no PSUM tile. `fusion.allocate` tries it when
an allocation runs out of PSUM and loop fusion did not help, under the rules of its loop fusion (not
for ``skip_middle_end_transformations`` kernels nor for kernels with direct allocations), and only
when the ``psum_evacuation`` switch is on (TRNLAB_PSUM_EVACUATION=1; `benchmarks/nki_library.py`
sets it, as it sets TRNLAB_SPILL): off, nine live accumulators stay the PSUMOverflowError the course
and the known-bad corpus teach. A program that fits in its own order keeps it.
"""
from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict

from .program import READS_DST, Program


def evacuated_order(program: Program, ordered_opcodes: tuple) -> list[int] | None:
    """The instruction order with PSUM readers moved up (module docstring), or None if none moves."""
    instructions, buffers = program.instructions, program.buffers

    def root(bid: int) -> int:
        while buffers[bid].alias_of is not None:
            bid = buffers[bid].alias_of
        return bid

    n = len(instructions)
    reads, writes = [], []
    read_at, write_at = defaultdict(list), defaultdict(list)      # buffer -> instruction indices
    pinned = [0] * (n + 1)                                        # prefix count of ordered instructions
    region_start = [0] * n                                        # first index of each one's region run
    for k, ins in enumerate(instructions):
        w = {root(a.buffer) for a in ins.writes()}
        r = {root(a.buffer) for a in ins.reads()} | (w if ins.opcode in READS_DST else set())
        reads.append(r)
        writes.append(w)
        for b in r:
            read_at[b].append(k)
        for b in w:
            write_at[b].append(k)
        pinned[k + 1] = pinned[k] + (ins.opcode in ordered_opcodes)
        region_start[k] = region_start[k - 1] if k and instructions[k - 1].region == ins.region else k

    def touched_between(indices: list, lo: int, hi: int) -> bool:     # any index in (lo, hi)?
        i = bisect_right(indices, lo)
        return i < len(indices) and indices[i] < hi

    anchors: dict[int, list[int]] = defaultdict(list)
    moved = set()
    for k in range(n):
        if pinned[k + 1] != pinned[k] or any(buffers[b].memory == "psum" for b in writes[k]):
            continue
        done = [write_at[b][-1] for b in reads[k] if buffers[b].memory == "psum" and write_at.get(b)]
        anchor = max(done, default=k)              # the last write of the accumulators it reads
        if anchor >= k - 1 or region_start[k] > anchor + 1 or pinned[k] != pinned[anchor + 1]:
            continue
        if any(touched_between(write_at[b], anchor, k) for b in reads[k] | writes[k]) or \
                any(touched_between(read_at[b], anchor, k) for b in writes[k]):
            continue
        anchors[anchor].append(k)
        moved.add(k)
    if not moved:
        return None
    order = []
    for k in range(n):
        if k not in moved:
            order.append(k)
        order.extend(anchors.get(k, ()))
    return order

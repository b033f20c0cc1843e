"""The list schedule's bookkeeping without its repeated work: the same order and program, sooner.

The reference is `instruction_order.list_schedule`: `list_schedule.list_order` (resolve the program,
build the constraint graph, simulate the engines), then `instruction_order.reorder(...,
keep_offsets=True)` (copy the program in the new order, recompute live ranges, check that no two
tiles sharing bytes are live at once, describe the instructions in the new order). Measured on
AWS's tiled matmul at 4096³ (25,088 instructions) these steps cost about as much each as the
whole trace; this module keeps every step but drops what is computed twice or cannot fail:

- `reorder_kept`: the buffer rows cloned without `copy.copy`'s generic protocol; each Vector
  issue's order-independent hidden overhead (`list_schedule.independent_hidden`) taken from the
  schedule instead of computed again; the compiled summary (does every instruction take time,
  which buffers are written) carried over — it does not depend on the order; and no
  `check_disjoint`: the list schedule's graph orders every instruction of a tile after every
  instruction of the tiles whose bytes it takes over, so its order keeps the program-order
  allocation's disjointness by construction (the tests run the reference, which checks it, on the
  same kernels and compare).

Used by `instruction_order.list_schedule` while `config.fast()`; tests/test_fast_schedule.py
compares program, order and timeline with the reference's.
"""
from __future__ import annotations

from ..program import Buffer, Program


def _clone(b: Buffer) -> Buffer:
    """A shallow copy of a buffer row (what copy.copy makes, without its reduce protocol)."""
    new = object.__new__(Buffer)
    new.__dict__.update(b.__dict__)
    return new


def reorder_kept(program: Program, order: list[int], name: str, hidden: dict | None = None) -> Program:
    """`instruction_order.reorder(program, order, name, keep_offsets=True)` for a complete `order`
    that the list schedule made (its memory constraints keep every tile's bytes disjoint).
    `hidden`: the schedule's `independent_hidden` of `program` (computed here if None)."""
    from ..engines import DVE
    from ..list_schedule import _reads_previous, independent_hidden
    from ..records import ISSUE, as_description
    from ..replay_timing import Compiled, compiled_for
    n = len(program.instructions)
    if len(order) != n or len(set(order)) != n or (n and (min(order) < 0 or max(order) >= n)):
        raise ValueError("a schedule must order every instruction exactly once")
    if not program.allocated:
        raise ValueError("reorder(keep_offsets=True) needs an allocated program")
    new = object.__new__(Program)
    new.__dict__.update(program.__dict__)
    new.__dict__.pop("_derived", None)
    instructions = program.instructions
    new.instructions = [instructions[k] for k in order]
    buffers = new.buffers = [_clone(b) for b in program.buffers]
    first = [-1] * len(buffers)
    last = [-1] * len(buffers)
    for k, ins in enumerate(new.instructions):
        for access in ins.operands.values():
            bid = access.buffer
            if first[bid] < 0:
                first[bid] = k
            last[bid] = k
    for b, f, l in zip(buffers, first, last):
        b.first, b.last = f, l
    new.schedule = name if program.schedule in (None, "program", name) else f"{program.schedule}+{name}"
    traced = program.issue_spec
    if traced is not None and all(i.issue is not None for i in instructions):
        compiled = compiled_for(program, traced)
        issues = compiled.issues
        free = hidden if hidden is not None else independent_hidden(program, issues, traced)
        ordered, previous = [], None          # list_schedule.issues_in_order, with `free` given
        for k in order:
            d = issues[k]
            if d[0] == ISSUE and d[1] == DVE:
                d = as_description(d)
                h = 0.0 if _reads_previous(d, previous) else free[k]
                if h != d.hidden:
                    d = d._replace(hidden=h)
                previous = d.writes
            ordered.append(d)
        c = object.__new__(Compiled)          # Compiled(new, ...), its order-free summary carried over
        c.program, c.spec, c.issues = new, traced, ordered
        c.matmul_dtypes = set(program.matmul_dtypes)
        c.positive, c.written = compiled.positive, compiled.written
        c._resolved, c._static = {}, None
        new.derived.put("compiled", {traced: c})
        new.issue_spec = None
    new.allocated = True
    return new

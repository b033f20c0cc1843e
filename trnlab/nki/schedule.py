"""`kernel.with_schedule(edges)`: scheduling dependencies between named instructions (NKI 0.7).

AWS's "How to Use the NKI Scheduling APIs" (awsdocs-neuron.readthedocs-hosted.com/en/v2.33.1/nki/guides/
how-to-scheduling-apis.html): instructions get names (``nisa.reciprocal(dst=a, data=x, name="recip")``);
``kernel.with_schedule([("plus1", "recip")])`` — or ``("plus1", ["recip", ...])`` — returns the kernel
with extra dependency edges, "plus1" after "recip"; the edges "constrain the reordering that the
automatic scheduler will do" (a scheduling dependency: it orders issue, "instructions on different
engines may still overlap", nki.isa.dependency).

In trnlab the names are recorded while the kernel is traced (every instruction a named `nki.isa` call
issues) and each edge becomes an order constraint of the list schedule (`hardware/list_schedule.py`),
the default schedule; in program order (`skip_middle_end_transformations`, large programs) an edge from
an earlier to a later instruction already holds. A kernel with edges is traced without loop stamping,
so that every iteration's named instructions are recorded, fast on or off.

Refused by name: an edge naming no instruction of the kernel, and an edge whose consumer comes before
its producer in the kernel (AWS's scheduler would move it; trnlab's schedules never move an instruction
ahead of one it must follow in program order — not done).
"""
from __future__ import annotations

from trnlab.nki import launches
from trnlab.nki.errors import NKIError


def normalise(edges) -> tuple:
    """AWS's edge list as ((consumer, (producer, ...)), ...)."""
    out = []
    for edge in edges:
        if not isinstance(edge, (tuple, list)) or len(edge) != 2:
            raise NKIError(f"with_schedule: each edge is a pair (consumer, producer or [producers]), got {edge!r}")
        consumer, producers = edge
        producers = (producers,) if isinstance(producers, str) else tuple(producers)
        if not isinstance(consumer, str) or not producers or not all(isinstance(p, str) for p in producers):
            raise NKIError(f"with_schedule: instruction names are strings, got {edge!r}")
        out.append((consumer, producers))
    return tuple(out)


def named(name, issue):
    """Run `issue()` (one nki.isa call) and note the program instructions it appended under `name`."""
    launch = launches.active()
    program = getattr(getattr(launch, "core", None), "program", None)
    if not name or program is None:
        return issue()
    launch.flush()
    first = len(program.instructions)
    result = issue()
    names = launch.__dict__.setdefault("instruction_names", {})
    names.setdefault(name, []).extend(range(first, len(program.instructions)))
    return result


def resolve(edges: tuple, names: dict) -> tuple:
    """The edges as (producer instruction, consumer instruction) index pairs, checked."""
    pairs = []
    for consumer, producers in edges:
        for name in (consumer,) + producers:
            if not names.get(name):
                known = ", ".join(sorted(names)) or "none"
                raise NKIError(f"with_schedule: no instruction of the kernel is named {name!r} (named: {known}); "
                               f"name one with name=... on its nki.isa call")
        for producer in producers:
            for p in names[producer]:
                for c in names[consumer]:
                    if c < p:
                        raise NKIError(f"with_schedule: {consumer!r} (instruction {c}) comes before {producer!r} "
                                       f"(instruction {p}) in the kernel; trnlab's schedules keep such an "
                                       f"instruction where it is — write {producer!r} first")
                    if c != p:
                        pairs.append((p, c))
    return tuple(sorted(set(pairs)))

"""`nki.isa.NkiInstruction`: the handle an `nki.isa` call returns in NKI 0.7, and `nki.isa.dependency`.

AWS (awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/nki/api/generated/nki.isa.NkiInstruction.html):
"Opaque handle to a traced NKI instruction. Returned by nki.isa operations during tracing." Its one
method, ``consumer.depends_on(*producers, kind=...)``, returns the consumer (so calls chain) and runs
it after each producer:

- ``kind=nisa.dependency.schedule``: an ordering constraint for the scheduler, no hardware
  synchronization; "instructions on different engines may still overlap";
- ``kind=nisa.dependency.runtime``: a hardware semaphore wait, the consumer starts after the producer
  completes;
- no ``kind``: the previous release's behaviour (a runtime dependency), deprecated: a warning.

In trnlab every destination-style call of the signature table (``nisa.tensor_copy(dst=t, src=x)``,
`isa_binder.instruction`) returns a handle naming the program instructions it issued (functional-style
calls still return their tile). An edge becomes an order constraint of the list schedule
(`hardware/list_schedule.py`, as ``kernel.with_schedule``'s: `schedule.py`); in program order an edge
from an earlier to a later instruction already holds. A runtime edge is honoured where trnlab's replay
makes the consumer wait for the producer's completion: both on one compute engine (its queue runs one
instruction after another), or a buffer the producer writes that the consumer touches, or that the
producer reads and the consumer writes (the replay waits on the bytes; checked per buffer). Refused by
name (`DependencyError`): a runtime edge between two engines with no such buffer (trnlab's replay has no
semaphore to wait on), an edge whose consumer comes before its producer in the kernel, a handle of
another kernel. A kernel whose handles get edges is traced without loop stamping, so that every
iteration's edges are recorded (fast on or off: the same program).
"""
from __future__ import annotations

import enum
import warnings

from trnlab.nki import launches
from trnlab.nki.errors import NKIError

COMPUTE_ENGINES = ("pe", "act", "dve", "pool")    # in-order queues, one instruction at a time


class DependencyError(NKIError):
    """A dependency between instruction handles that trnlab cannot honour (see the module docstring)."""


class Unstamped(Exception):
    """Raised inside a loop-stamping trace at the first edge: the trace is run again with every loop
    iteration traced (`loops.trace` retraces concretely after an error), so every edge is recorded."""


class dependency(enum.Enum):
    """nki.isa.dependency: the kind of an instruction dependency."""
    runtime = "runtime"        # a hardware semaphore wait
    schedule = "schedule"      # a scheduling constraint, no hardware synchronization


class NkiInstruction:
    """nki.isa.NkiInstruction(handle): the program instructions one nki.isa call issued."""

    def __init__(self, handle):
        launch, first, last, name = handle
        self._launch = launch
        self.instructions = range(first, last)     # indices into the traced program
        self.name = name

    def depends_on(self, *producers: "NkiInstruction", kind: dependency | None = None) -> "NkiInstruction":
        """This instruction runs after each producer; returns self, so calls chain."""
        if kind is None:
            warnings.warn("NkiInstruction.depends_on without kind= is deprecated (nki.isa.NkiInstruction, v2.33): "
                          "pass kind=nisa.dependency.runtime or kind=nisa.dependency.schedule; taken as runtime",
                          DeprecationWarning, stacklevel=2)
            kind = dependency.runtime
        if not isinstance(kind, dependency):
            raise DependencyError(f"depends_on: kind is an nki.isa.dependency member (runtime, schedule), got {kind!r}")
        launch = launches.active()
        if launch is None or launch is not self._launch or not launch.active:
            raise DependencyError("depends_on: an instruction handle is used while its own kernel is traced")
        for producer in producers:
            if not isinstance(producer, NkiInstruction):
                raise DependencyError(f"depends_on: producers are instruction handles (what a destination-style "
                                      f"nki.isa call returns), got {type(producer).__name__}")
            if producer._launch is not launch:
                raise DependencyError("depends_on: the producer's handle belongs to another kernel's trace")
        if getattr(launch, "loop_tracer", None) is not None:
            raise Unstamped()
        edges = launch.__dict__.setdefault("dependency_edges", [])
        edges.extend((p.instructions, self.instructions, kind, launch.site) for p in producers)
        return self

    def __repr__(self) -> str:
        name = f" {self.name!r}" if self.name else ""
        return f"NkiInstruction({name.strip() or '-'}, instructions {self.instructions.start}..{self.instructions.stop - 1})"


def issued(call, name: str | None):
    """Run one destination-style nki.isa call and return its handle (the instructions it appended)."""
    launch = launches.active()
    program = getattr(getattr(launch, "core", None), "program", None)
    if program is None:
        return call()
    if launch.pending is not None:           # the call would issue it first anyway (issue.begin)
        launch.flush()
    first = len(program.instructions)
    result = call()
    if result is not None:
        return result
    return NkiInstruction((launch, first, len(program.instructions), name or None))


def resolve(edges: list, program) -> tuple:
    """The edges as (producer, consumer) instruction pairs, each checked (module docstring)."""
    instructions = program.instructions
    pairs = []
    for producers, consumers, kind, _ in edges:
        for p in producers:
            for c in consumers:
                if c == p:
                    continue
                if c < p:
                    raise DependencyError(
                        f"depends_on: instruction {c} ({instructions[c].opcode}) comes before its producer {p} "
                        f"({instructions[p].opcode}) in the kernel; trnlab's schedules keep such an instruction "
                        f"where it is — issue the producer first")
                if kind is dependency.runtime and not _replay_waits(instructions[p], instructions[c]):
                    raise DependencyError(
                        f"depends_on(kind=runtime): instruction {c} ({instructions[c].opcode} on "
                        f"{instructions[c].engine}) would wait on a semaphore for instruction {p} "
                        f"({instructions[p].opcode} on {instructions[p].engine}); they share no buffer and no "
                        f"engine, and trnlab's replay waits only for data and for an engine's own queue — use "
                        f"kind=nisa.dependency.schedule, or make the consumer read what the producer writes")
                pairs.append((p, c))
    return tuple(pairs)


def _replay_waits(producer, consumer) -> bool:
    """Does trnlab's replay start `consumer` only after `producer` has completed?"""
    if producer.engine == consumer.engine and producer.engine in COMPUTE_ENGINES:
        return True
    written = {a.buffer for a in producer.writes()}
    touched = {a.buffer for a in consumer.operands.values()}
    return bool(written & touched) or bool({a.buffer for a in producer.reads()} & {a.buffer for a in consumer.writes()})

"""The trace in progress: what a kernel's instructions are issued to, and its SPMD position.

Tracing a kernel creates one `Launch` whose ``core`` is a `trnlab.hardware.trace.Recorder` (it
checks each instruction against the hardware rules and appends it to the program) and makes it
current while the Python kernel function runs; every `nl.*` / `nisa.*` call issues its
instructions to `current().core`. The current launch is per context (a `contextvars` variable),
so threads — e.g. a server answering requests — trace independently. The launch also holds the one *pending* result (see `tensor.py`): the value of a
functional call such as `nl.exp(x)` is issued only when the program shows where it goes, so that
`out[...] = nl.exp(x)` writes `out` directly and `psum += nl.matmul(a, b)` accumulates in PSUM, as
NKI's compiler does; any other instruction issues it first, so program order is kept.
"""
from __future__ import annotations

import contextvars
from dataclasses import dataclass, field

from trnlab.nki.errors import NKIError


@dataclass
class Launch:
    core: object                                  # trnlab.hardware.NeuronCore
    grid: tuple[int, ...] = ()
    program_id: tuple[int, ...] = ()
    timing_only: bool = False
    pending: object = None                        # the NkiTensor whose instruction is not issued yet
    shared_hbm: list = field(default_factory=list)  # shared_hbm outputs, shared by all SPMD programs
    shared_cursor: int = 0
    active: bool = True
    names: dict = field(default_factory=dict)     # allocation name -> count, for readable timelines
    site: object = None                           # (code, line) of the kernel line being executed
    placed: dict = field(default_factory=dict)    # direct allocations: (memory, offset, shape, dtype) -> tensor
    budget: object = None                         # a trace's instruction budget (runaway.Budget), else None

    def flush(self) -> None:
        """Issue the pending instruction into a fresh tile of its own."""
        pending = self.pending
        if pending is not None:
            self.pending = None
            pending._materialize()

    def fresh_name(self, base: str) -> str:
        count = self.names.get(base, 0)
        self.names[base] = count + 1
        return f"{base}{count}" if count else base


_stack: contextvars.ContextVar[tuple] = contextvars.ContextVar("trnlab_nki_launches", default=())


def current() -> Launch:
    stack = _stack.get()
    if not stack:
        raise NKIError("this nki.language / nki.isa call needs a running kernel: call it inside an "
                       "@nki.jit function that you launch with NumPy arrays or torch tensors")
    return stack[-1]


def active() -> Launch | None:
    stack = _stack.get()
    return stack[-1] if stack else None


def push(launch: Launch) -> None:
    _stack.set(_stack.get() + (launch,))


def pop() -> None:
    stack = _stack.get()
    _stack.set(stack[:-1])
    stack[-1].active = False

"""The launch in progress: which simulated NeuronCore a kernel runs on, and its SPMD position.

A kernel call creates one `Launch` (a fresh `NeuronCore` for the chosen preset) and makes it current
while the Python kernel function runs; every `nl.*` / `nisa.*` call issues its instructions to
`current().core`. The launch also holds the one *pending* result (see `tensor.py`): the value of a
functional call such as `nl.exp(x)` is issued only when the program shows where it goes, so that
`out[...] = nl.exp(x)` writes `out` directly and `psum += nl.matmul(a, b)` accumulates in PSUM, as
NKI's compiler does; any other instruction issues it first, so program order is kept.
"""
from __future__ import annotations

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


_stack: list[Launch] = []


def current() -> Launch:
    if not _stack:
        raise NKIError("this nki.language / nki.isa call needs a running kernel: call it inside an "
                       "@nki.jit function that you launch with NumPy arrays or torch tensors")
    return _stack[-1]


def active() -> Launch | None:
    return _stack[-1] if _stack else None


def push(launch: Launch) -> None:
    _stack.append(launch)


def pop() -> None:
    launch = _stack.pop()
    launch.active = False

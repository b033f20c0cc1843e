"""How much one trace may record: a budget of instructions, so a runaway kernel stops with a name.

A kernel is ordinary Python, so nothing stops ``for i in nl.affine_range(10**9)`` or a ``while True``
that keeps issuing instructions: the trace would grow by tens of MB a second until the machine runs
out of memory, with no message. Each trace therefore has a budget (`config.get("trace_instructions")`,
``TRNLAB_TRACE_INSTRUCTIONS``, default 2,000,000): the instruction that would exceed it, or the loop
whose stamped iterations would, raises `TraceBudgetExceeded` at the kernel's line, before the records
exist. The default is 10 times the largest program the benchmarks trace (``matmul_tiled`` at 8192³,
198,656 instructions; benchmarks/README.md). Records traced one by one take about 1.8 KB per instruction (a ``while True``
load/store kernel on trn2: 150,000 instructions, 252 MB of RSS), so a runaway trace stops near
3.5 GB; set the variable lower on a small machine, higher for a bigger program. AWS's compiler has
a limit of its own — NCC_EBVF030 "The number of instructions generated exceeds the limit"
(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/compiler/error-codes/index.html) — whose
value AWS does not publish: this budget is ASSUMED, a guard for the laptop, not AWS's number.
"""
from __future__ import annotations

from trnlab import config
from trnlab.nki.errors import NKIError, locate


class TraceBudgetExceeded(NKIError):
    """A trace would record more instructions than its budget (`config` 'trace_instructions')."""


class Budget:
    """The budget of one trace: its program's instruction list and the most it may hold."""

    __slots__ = ("instructions", "limit")

    def __init__(self, instructions: list, limit: int | None = None) -> None:
        self.instructions = instructions
        self.limit = int(config.get("trace_instructions") if limit is None else limit)

    def exceeded(self, count: int, site=None, what: str = "") -> TraceBudgetExceeded:
        """The error for a trace about to hold `count` instructions, at kernel line `site` (code, line)."""
        error = TraceBudgetExceeded(
            f"trace instruction budget exceeded: {count:,} instructions{what}, the budget is "
            f"{self.limit:,} per trace (config 'trace_instructions', TRNLAB_TRACE_INSTRUCTIONS): a loop "
            "that never ends, or one far longer than intended?")
        return locate(error, site)

    def check(self, site) -> None:
        """Before one more instruction (issue.begin), issued from kernel line `site`."""
        if len(self.instructions) >= self.limit:
            raise self.exceeded(len(self.instructions) + 1, site)

    def check_loop(self, per_iteration: int, iterations: int, site) -> None:
        """Before a loop's `iterations` are stamped, `per_iteration` instructions each."""
        count = len(self.instructions) + per_iteration * iterations
        if count > self.limit:
            raise self.exceeded(count, site, f" after stamping {iterations:,} iterations of "
                                             f"{per_iteration:,} instructions")


"""Kernels whose trace runs away stop with a name at the kernel line: too many instructions, or recursion.

**An instruction budget.** A kernel is ordinary Python, so nothing stops ``nl.affine_range(10**9)``
or a ``while True`` that keeps issuing instructions: the trace would grow by 15–20 MB a second until
the machine runs out of memory, with no message. Each trace therefore has a budget (`config.get("trace_instructions")`,
``TRNLAB_TRACE_INSTRUCTIONS``, default 2,000,000): the instruction that would exceed it, or the loop
whose stamped iterations would, raises `TraceBudgetExceeded` at the kernel's line, before the records
exist. The default is 10 times the largest program the benchmarks trace (``matmul_tiled`` at 8192³,
198,656 instructions; benchmarks/README.md). Records traced one by one take about 1.8 KB per instruction (a ``while True``
load/store kernel on trn2: 150,000 instructions, 252 MB of RSS), so a runaway trace stops near
3.5 GB; set the variable lower on a small machine, higher for a bigger program. AWS's compiler has
a limit of its own — NCC_EBVF030 "The number of instructions generated exceeds the limit"
(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/compiler/error-codes/index.html) — whose
value AWS does not publish: this budget is ASSUMED, a guard for the laptop, not AWS's number.

**Recursion.** A kernel (or a helper it calls) that calls itself without end meets Python's recursion
limit somewhere inside the front end or the standard library (``contextlib.py``), where the
traceback's last line is of no use. `KernelRecursionError` names the kernel line that recurs.

Neither error is traced again concretely (loops.py): the second trace would only run away too.
"""
from __future__ import annotations

import os
import sys
import sysconfig

from trnlab import config
from trnlab.nki.errors import NKIError, _is_internal, locate


class RunawayTrace(NKIError):
    """A trace that cannot end well; never retried."""


class TraceBudgetExceeded(RunawayTrace):
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



class KernelRecursionError(RunawayTrace):
    """A kernel, or a function it calls, recursed until Python's recursion limit."""


def recursion_error(error: RecursionError) -> KernelRecursionError:
    """The named error for `error`, located at the kernel line that recurs: of the traceback's
    frames outside trnlab.nki / trnlab.hardware and the standard library, the line seen most often."""
    counts: dict = {}
    tb = error.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if not _is_internal(code.co_filename) and not _in_stdlib(code.co_filename):
            where = (code, tb.tb_lineno)
            counts[where] = counts.get(where, 0) + 1
        tb = tb.tb_next
    site = max(counts, key=counts.get) if counts else None  # first seen wins a tie: the outermost
    repeats = counts.get(site, 0)
    named = KernelRecursionError(
        f"kernel recursion: the trace reached Python's recursion limit ({sys.getrecursionlimit():,} frames); "
        + (f"this line was on the stack {repeats:,} times" if site else "no kernel line was found")
        + " — a kernel or helper that calls itself without a base case?")
    return locate(named, site)


def _in_stdlib(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_STDLIB)


_STDLIB = tuple({os.path.abspath(sysconfig.get_paths()[key]) + os.sep for key in ("stdlib", "platstdlib")})

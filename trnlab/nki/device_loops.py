"""NKI's compiled loops: `nl.fori_loop`, `nl.while_loop` (NKI 0.7) and `nl.dynamic_range` (beta 1).

On the chip these run as loops on the device (a compare-and-branch per iteration) instead of being
unrolled while the kernel is traced (AWS's "NKI Loops" / "NKI Control Flow" deep dives and the
nki.language.fori_loop, while_loop pages). trnlab traces each iteration, so a loop whose bounds are
known at trace time (Python ints) runs exactly as its unrolled body; the per-iteration branch costs
no time here (AWS publishes no figure for it — ASSUMED 0).

A bound or condition may be a register (`nisa.register_alloc`, `register_move`, `register_load`:
`isa_registers.py`) whose value is known while the kernel is traced — set from an int, or loaded
from a constant tensor. A register known only at run time (loaded from a kernel input or from values
the chip computes) is refused by name (`RegisterValueError`): the kernel is traced once per input
shapes, so a loop whose trip count depends on the data cannot be unrolled.
"""
from __future__ import annotations

import numbers

from trnlab.nki.errors import NKIError
from trnlab.nki.isa_registers import VirtualRegister

MAX_WHILE_ITERATIONS = 1 << 20   # a guard against a condition that never reaches 0 while tracing


def _static(value, what: str, call: str) -> int:
    if isinstance(value, VirtualRegister):
        return value.known(f"{call}: {what}")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise NKIError(f"{call}: {what} = {value!r} ({type(value).__name__}) is not known at trace time; "
                       f"pass a Python int, or a VirtualRegister for run-time bounds (nisa.register_alloc / "
                       f"register_load)")
    return int(value)


def fori_loop(lower, upper, body_fun, step: int = 1, unroll: bool = False) -> None:
    """nl.fori_loop(lower, upper, body_fun, step=1): body_fun(i) for i in range(lower, upper, step).

    `body_fun` returns nothing; loop state lives in SBUF/HBM (as on the chip). `step` must be a
    positive int. `unroll` (the compiler unrolls instead of looping) changes nothing here."""
    lower = _static(lower, "lower", "nl.fori_loop")
    upper = _static(upper, "upper", "nl.fori_loop")
    if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step <= 0:
        raise NKIError(f"nl.fori_loop: step must be a compile-time positive integer, got {step!r}")
    for i in range(lower, upper, int(step)):
        body_fun(i)


def while_loop(init, body_fun) -> None:
    """nl.while_loop(init, body_fun): r = init; while r != 0: r = body_fun(r).

    The condition is a Python int or a VirtualRegister whose value is known at trace time (the body
    may update it with register_move / register_load and return it); a run-time register is refused."""
    condition = init
    for _ in range(MAX_WHILE_ITERATIONS):
        if _static(condition, "the condition", "nl.while_loop") == 0:
            return
        condition = body_fun(condition)
    raise NKIError(f"nl.while_loop: the condition was still nonzero after {MAX_WHILE_ITERATIONS} iterations")


class dynamic_range:
    """nl.dynamic_range(start, stop, step): a loop the device runs (beta 1); traced per iteration here."""
    kind = "dynamic"

    def __init__(self, *args):
        self._range = range(*(_static(a, "bound", "nl.dynamic_range") for a in args))

    def __iter__(self):
        return iter(self._range)

    def __len__(self):
        return len(self._range)

    def __repr__(self) -> str:
        return f"nl.dynamic_range({self._range.start}, {self._range.stop}, {self._range.step})"

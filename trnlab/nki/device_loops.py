"""NKI's compiled loops: `nl.fori_loop`, `nl.while_loop` (NKI 0.7) and `nl.dynamic_range` (beta 1); and its
compiled conditional, `nl.if_else`.

On the chip these run as loops on the device (a compare-and-branch per iteration) instead of being
unrolled while the kernel is traced (AWS's "NKI Loops" / "NKI Dynamic Loops" deep dives and the
nki.language.fori_loop, while_loop pages). Two cases here:

- bounds known at trace time (Python ints, or registers whose value is known while tracing: set
  from an int, or loaded from a constant tensor — `isa_registers.py`): the body is traced once per
  iteration, exactly as its unrolled form; the per-iteration branch costs no time here (AWS
  publishes no figure for it — ASSUMED 0). Every kernel that ran before run-time loops existed keeps
  its program and timeline;
- a bound held in a register known only when the program runs (loaded from a kernel input or from
  values the chip computed): the loop is **in the program**, as AWS's compiler emits it ("a single
  copy of the body is generated and the hardware iterates over it at runtime"). The body is traced
  once, in a region of its own (so a reordering schedule keeps it whole), with the iterator a
  `VirtualRegister` ("The body receives the current iteration value i as a VirtualRegister",
  nki.language.fori_loop), and the trace records a `program.Loop`. The device reads the register
  and repeats the body when the program runs (`trnlab/hardware/dynamic_loops.py`).

`nl.if_else(cond, then_fn, else_fn=None)` (AWS's "compiled conditional": nki.language.if_else and the
"NKI Control Flow" deep dive) is two such bodies. A condition known at trace time (a Python bool or int,
or an NkiScalar whose value is known while tracing) calls only the selected callback and records
nothing ("A Python bool or int condition is resolved at compile time. Only the selected callback is
called, and no conditional control flow is emitted"). A run-time NkiScalar (a comparison, an arithmetic
expression or a loaded value) is compared with 0 on the device into a register t, 1 or 0 (one
``register_op``: the branch's compare-and-jump, ASSUMED to cost one register instruction, as the loops'
per-iteration update — AWS publishes no figure), and each callback is traced once as the body of a
`program.Loop` the device repeats t times (``kind="if"``: ``range(0, t)``) or 1 - t times
(``kind="else"``: ``range(t, 1)``), without an iterator. A branch is a loop of 0 or 1 trips rather
than a `Branch` record of its own because everything a loop's body needs a branch's needs too and
already exists once: the trip count read from data when the program runs (and refused by name in
timing-only mode when that data is a ``ShapeDtype``: `TripCountError`), the body kept whole by the
list schedule, its tiles' live ranges, its nesting inside loops (and theirs inside it), saving and
loading, every run path. A branch inside a loop's body reads the register its condition is computed
into in each repetition, as any nested loop does.

`nl.while_loop(init, body_fun)` with a run-time condition is such a loop too: the body traced once,
the register it returns moved into the condition after each iteration, the device checking the
condition before each. ``while reg:`` on a run-time register is refused by name
(`RegisterValueError`): a Python ``while`` runs while the kernel is traced (AWS's tracer frontend
raises TypeError there; its parser frontend is not Python).
"""
from __future__ import annotations

import numbers

import numpy as np

from trnlab.nki import launches
from trnlab.nki.errors import NKIError, site_note, user_site
from trnlab.hardware.errors import DtypeError
from trnlab.nki.isa_registers import RegisterValueError, VirtualRegister

MAX_WHILE_ITERATIONS = 1 << 20   # a guard against a condition that never reaches 0 while tracing


def _nki_scalar():
    from trnlab.nki.isa_scalars import NkiScalar    # (it imports the tile class, which this module's users load)
    return NkiScalar(dtype="int32")


def _static(value, what: str, call: str) -> int:
    if isinstance(value, VirtualRegister):
        return value.known(f"{call}: {what}")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise NKIError(f"{call}: {what} = {value!r} ({type(value).__name__}) is not known at trace time; "
                       f"pass a Python int, or a VirtualRegister for run-time bounds (nisa.register_alloc / "
                       f"register_load)")
    return int(value)


def _run_time(value) -> bool:
    return isinstance(value, VirtualRegister) and value.value is None


def _step(step, call: str) -> int:
    if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step <= 0:
        raise NKIError(f"{call}: step must be a compile-time positive integer, got {step!r}")
    return int(step)


def _device_loop(start, stop, step: int, call: str, kind: str = "for"):
    """Trace the body of a loop bounded by a run-time register once, as a `program.Loop`: yields the
    iterator (a VirtualRegister; for a while loop, the condition register; for a branch of nl.if_else,
    kind "if" / "else", None), records the loop when the body is done (a while loop's body sends the
    register it returned)."""
    from trnlab.hardware.program import Loop
    launch = launches.current()
    recorder = launch.core
    program = getattr(recorder, "program", None)
    if program is None or not hasattr(recorder, "region"):
        register = start if _run_time(start) else stop
        register.known(f"{call}: bound")          # raises: a kernel issued directly to a core
    launch.flush()
    tracer = getattr(launch, "loop_tracer", None)
    if tracer is not None and tracer.running:     # a stamped loop around it runs concretely instead
        from trnlab.nki.loops import run_concretely
        run_concretely(launch, f"the run-time loop {call}")
    site = user_site(2)
    line = site_note(site)
    source = None if site is None else (site[0].co_filename, site[1], site[0].co_name)
    begin = len(program.instructions)
    if kind == "while":
        with recorder.region(f"{call.split('.')[-1]}@{site[1] if site else '?'}"):
            returned = yield start
            launch.flush()
        if not isinstance(returned, VirtualRegister):
            raise NKIError(f"{call}: body_fun must return the next condition register (a VirtualRegister), got "
                           f"{type(returned).__name__}")
        program.loops.append(Loop(begin, len(program.instructions), {"register": start.id}, None, 1, None, line,
                                  source, kind="while", next=returned.id))
        return
    bounds = [{"register": b.id} if _run_time(b) else _static(b, "bound", call) for b in (start, stop)]
    index = None                                  # a branch ("if" / "else") has no iterator
    if kind == "for":
        # "i is a NkiScalar unless either lower or upper is a VirtualRegister" [nki.language.fori_loop, v2.33.0]
        plain_register = any(isinstance(b, VirtualRegister) and not hasattr(b, "usable") for b in (start, stop))
        index = VirtualRegister() if plain_register else _nki_scalar()
        index.origin = f"the iteration value of the run-time loop {call} at {line or 'its line'}"
    with recorder.region(f"{call.split('.')[-1]}@{site[1] if site else '?'}"):
        yield index
        launch.flush()
    if kind != "for" and begin == len(program.instructions):
        return                                    # an empty branch: nothing to jump over
    program.loops.append(Loop(begin, len(program.instructions), bounds[0], bounds[1], step,
                              None if index is None else index.id, line, source, kind=kind))


def fori_loop(lower, upper, body_fun, step: int = 1, unroll: bool = False) -> None:
    """nl.fori_loop(lower, upper, body_fun, step=1): body_fun(i) for i in range(lower, upper, step).

    `body_fun` returns nothing; loop state lives in SBUF/HBM (as on the chip). `step` must be a
    positive int. A bound held in a run-time register makes a loop the device runs (module
    docstring), `i` its iterator register. `unroll` (the compiler unrolls instead of looping)
    changes nothing here."""
    step = _step(step, "nl.fori_loop")
    for bound in (lower, upper):
        if hasattr(bound, "usable"):             # an NkiScalar: int32, and not a comparison's result
            bound.usable("a bound of nl.fori_loop")
            if bound.dtype != "int32":
                raise DtypeError(f"data type: nl.fori_loop bounded by an {bound.dtype} NkiScalar; \"A bound must be "
                                 f"32-bit: the loop compiles into a compare-and-branch that has no 64-bit form\" "
                                 f"[nki.language.fori_loop]", value=bound.dtype, limit="int32")
    if _run_time(lower) or _run_time(upper):
        for i in _device_loop(lower, upper, step, "nl.fori_loop"):
            body_fun(i)
        return
    lower = _static(lower, "lower", "nl.fori_loop")
    upper = _static(upper, "upper", "nl.fori_loop")
    for i in range(lower, upper, step):
        body_fun(i)


def while_loop(init, body_fun) -> None:
    """nl.while_loop(init, body_fun): r = init; while r != 0: r = body_fun(r).

    The condition is a Python int or a VirtualRegister whose value is known at trace time (the body
    may update it with register_move / register_load and return it): traced per iteration. A register
    known only at run time makes a loop the device runs (module docstring): the body is traced once
    with `init` as r, and the register it returns is moved into `init` after each iteration."""
    if _run_time(init):
        loop = _device_loop(init, None, 1, "nl.while_loop", kind="while")
        returned = body_fun(next(loop))
        try:
            loop.send(returned)
        except StopIteration:
            pass
        return
    condition = init
    for _ in range(MAX_WHILE_ITERATIONS):
        if _static(condition, "the condition", "nl.while_loop") == 0:
            return
        condition = body_fun(condition)
    raise NKIError(f"nl.while_loop: the condition was still nonzero after {MAX_WHILE_ITERATIONS} iterations")


class dynamic_range:
    """nl.dynamic_range(start, stop=None, step=1): a loop the device runs. Bounds known at trace time:
    traced per iteration; a bound in a run-time register: the body traced once, the loop in the
    program (module docstring)."""
    kind = "dynamic"

    def __init__(self, start, stop=None, step: int = 1):
        if stop is None:
            start, stop = 0, start
        self._bounds = (start, stop, _step(step, "nl.dynamic_range"))
        self._range = None
        if not (_run_time(start) or _run_time(stop)):
            self._range = range(_static(start, "start", "nl.dynamic_range"),
                                _static(stop, "stop", "nl.dynamic_range"), self._bounds[2])

    def __iter__(self):
        if self._range is None:
            return _device_loop(*self._bounds, "nl.dynamic_range")
        return iter(self._range)

    def __len__(self):
        if self._range is None:
            raise RegisterValueError("nl.dynamic_range: len() of a loop whose bound is a run-time register "
                                     "is known only when the program runs")
        return len(self._range)

    def __repr__(self) -> str:
        if self._range is None:
            return "nl.dynamic_range({}, {}, {})".format(*self._bounds)
        return f"nl.dynamic_range({self._range.start}, {self._range.stop}, {self._range.step})"


class BranchConditionError(NKIError):
    """nl.if_else's condition is not one its page accepts ("A Python bool or int, or a 32-bit NkiScalar")."""


def _branch_condition(cond):
    """The condition's value when it is known at trace time, else None (a run-time NkiScalar); refuses by
    name what nki.language.if_else does not accept."""
    from trnlab.nki.isa_scalars import NkiScalar
    if isinstance(cond, (bool, np.bool_, numbers.Integral)):
        return int(cond)
    if isinstance(cond, NkiScalar):
        if cond.dtype != "int32":
            raise DtypeError(f"data type: nl.if_else on an {cond.dtype} NkiScalar; cond is \"a Python bool or int, "
                             f"or a 32-bit NkiScalar\" [nki.language.if_else]", value=cond.dtype, limit="int32")
        return cond.value
    if isinstance(cond, VirtualRegister):
        raise BranchConditionError(
            f"nl.if_else: cond is a VirtualRegister (register {cond.id}, {cond.origin}); cond is \"a Python bool or "
            f"int, or a 32-bit NkiScalar\" that \"must be available on all engines: every sequencer runs the branch, "
            f"so a value bound to one sequencer is rejected\" [nki.language.if_else], and a VirtualRegister is \"a "
            f"virtual register on engine\" [nki.isa.VirtualRegister]: load the value with nisa.scalar_load instead "
            f"(an NkiScalar)")
    raise BranchConditionError(f"nl.if_else: cond = {cond!r} ({type(cond).__name__}); cond is \"a Python bool or int, "
                               f"or a 32-bit NkiScalar\" [nki.language.if_else]")


def if_else(cond, then_fn, else_fn=None) -> None:
    """nl.if_else(cond, then_fn, else_fn=None): "Runs then_fn() when cond is nonzero, otherwise else_fn() if
    provided. Scalar comparisons such as a < b can be passed directly. Any nonzero value, including a
    negative value, selects then_fn. The callbacks take no arguments and do not return anything"
    [nki.language.if_else].

    `cond`: "A Python bool or int, or a 32-bit NkiScalar. Arithmetic expressions and scalar comparison
    results are accepted" (an int64 NkiScalar: `DtypeError`; a VirtualRegister, "a value bound to one
    sequencer": `BranchConditionError`). Known at trace time, only the selected callback is called and no
    branch is recorded; a run-time value makes a branch the device takes (module docstring): both
    callbacks traced once, the one the value selects run when the program runs."""
    for name, fn in (("then_fn", then_fn), ("else_fn", else_fn)):
        if (fn is not None or name == "then_fn") and not callable(fn):
            raise NKIError(f"nl.if_else: {name} must be a function () -> None [nki.language.if_else], got "
                           f"{type(fn).__name__}")
    value = _branch_condition(cond)
    if value is not None:                      # "resolved at compile time": no branch in the program
        chosen = then_fn if value != 0 else else_fn
        if chosen is not None:
            chosen()
        return
    taken = cond.traced("not_equal", 0)        # the branch's compare: 1 takes then_fn, 0 else_fn
    taken.origin = f"the condition of nl.if_else, computed on the device (register {cond.id} != 0)"
    for _ in _device_loop(0, taken, 1, "nl.if_else", kind="if"):            # range(0, t): t trips
        then_fn()
    if else_fn is not None:
        for _ in _device_loop(taken, 1, 1, "nl.if_else", kind="else"):      # range(t, 1): 1 - t trips
            else_fn()

"""`nki.isa`'s virtual registers (NKI 0.7): `VirtualRegister`, `register_alloc`, `register_move`,
`register_load`, `register_store`.

AWS (awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/nki/api/generated/nki.isa.register_alloc.html,
.register_move.html, .register_load.html, .register_store.html, .VirtualRegister.html): each engine
sequencer has 64 32-bit registers; `register_alloc` allocates one in a virtual register space (the
compiler places it); registers are "primarily used to specify dynamic loop boundaries and while loop
conditions" (`nl.fori_loop`, `nl.while_loop`, `nl.dynamic_range`, `while reg:`).

In trnlab a register is two things:
- at run time, a register of the core (`hardware/system.py`): `register_move` / `register_load` /
  `register_store` are instructions, so a value loaded from data is stored back with that value;
- while the kernel is traced, the Python int it holds **when that is known at trace time**: set by
  `register_alloc(x)` or `register_move(reg, imm)`, copied by `register_move(reg, other)`, or loaded
  from a tensor whose contents the program fixes (a constant: `nl.shared_constant`, an `HBM` tensor
  made from an array inside the kernel). A loop bounded by such a register is traced per iteration
  (`device_loops.py`). A register loaded from a kernel input or from values computed on the chip is
  known only when the program runs: a loop it bounds (`nl.fori_loop`, `nl.dynamic_range`,
  `nl.while_loop`, and Python ``while reg:`` as AWS's parser frontend reads it: `while_register.py`)
  is put in the program once and repeated by the device (`trnlab/hardware/dynamic_loops.py`); other
  Python control flow on it (``if``, ``range(reg)``, ``int(reg)``), which runs while the kernel is
  traced, is refused by name (`RegisterValueError`) — AWS's tracer frontend raises TypeError there
  too (nki.isa.VirtualRegister, v2.32: "using a register in Python control flow (if/while) or
  converting it with int() / range() raises TypeError").
"""
from __future__ import annotations

import itertools
import numbers

import numpy as np

from trnlab.nki import issue, launches
from trnlab.nki.errors import NKIError
from trnlab.nki.tensor import NkiTensor

_ids = itertools.count()


class RegisterValueError(NKIError):
    """A register's value was needed while tracing (a Python condition, range(), int()) but is known only at run time."""


class VirtualRegister:
    """A virtual register on an engine (nki.isa.VirtualRegister): `nisa.register_alloc()` makes one."""

    def __init__(self, state=None, frozen: bool = False):
        self.id = next(_ids)
        self._value: int | None = None       # the value when known at trace time
        self.origin = "allocated without a value"
        self.frozen = frozen
        if state is not None:
            self.value = _int(state, "VirtualRegister(state)")
            self.origin = f"set to {self.value}"

    @property
    def value(self) -> int | None:
        """The value when known at trace time. Inside the body of a loop the device runs, reading a
        known value the body has not set yet, and setting one, are noted (`_body_notes`): the body
        is traced once, so it must not use the trace-time value of a register it then writes
        (device_loops._carried_registers)."""
        value = self._value
        if value is not None:
            notes = _body_notes()
            if notes is not None and self.id not in notes[1]:
                notes[0].add(self.id)
        return value

    @value.setter
    def value(self, value: int | None) -> None:
        notes = _body_notes()
        if notes is not None:
            notes[1].add(self.id)
        self._value = value

    def known(self, what: str) -> int:
        """The value, or RegisterValueError naming where it came from and what needed it."""
        if self.value is None:
            raise RegisterValueError(
                f"run-time register used while tracing: {what}: register {self.id} is {self.origin}, so its "
                f"value is known only when the program runs, and Python runs while the kernel is traced — "
                f"bound a loop the device runs with it (nl.fori_loop(lo, reg, body) / nl.dynamic_range(reg)), "
                f"or give a Python int (a shape, an int argument of the kernel)")
        return self.value

    def __bool__(self) -> bool:          # ``while reg:`` runs as a device loop (while_register.py)
        return self.known("a Python condition (while reg, if reg)") != 0

    def __index__(self) -> int:          # range(reg)
        return self.known("a loop bound")

    def __int__(self) -> int:
        return self.known("int(register)")

    def __repr__(self) -> str:
        held = "run-time value" if self.value is None else self.value
        return f"VirtualRegister({self.id}: {held})"


def _body_notes():
    """(registers read, registers set) while the innermost device loop body is traced, or None."""
    launch = launches.active()
    bodies = None if launch is None else launch.__dict__.get("register_reads")
    return bodies[-1] if bodies else None


def _int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)):
        raise NKIError(f"{what}: expected a compile-time integer, got {value!r} ({type(value).__name__})")
    v = int(value)
    if not -(1 << 31) <= v < (1 << 32):
        raise NKIError(f"{what}: {v} does not fit a 32-bit register")
    return v


def _register(reg, what: str) -> VirtualRegister:
    if not isinstance(reg, VirtualRegister):
        raise NKIError(f"{what} must be a VirtualRegister (from nisa.register_alloc()), got {type(reg).__name__}")
    return reg


def register_alloc(x=None) -> VirtualRegister:
    """Allocate a virtual register, initialised with the integer `x` (a register_move) or with
    another register's value if `x` is a VirtualRegister [nki.isa.register_alloc]."""
    reg = VirtualRegister()
    if isinstance(x, VirtualRegister):
        register_move(reg, x)
    elif x is not None:
        register_move(reg, _int(x, "register_alloc(x)"))
    return reg


def register_move(dst, imm) -> None:
    """dst = imm, a compile-time integer (or another register's value) [nki.isa.register_move]."""
    dst = _register(dst, "register_move dst")
    launch = issue.begin()
    if isinstance(imm, VirtualRegister):
        dst.value, dst.origin = imm.value, imm.origin
        launch.core.register_move(register=dst.id, source=imm.id)
    else:
        dst.value = _int(imm, "register_move imm")
        dst.origin = f"set to {dst.value}"
        launch.core.register_move(register=dst.id, value=dst.value)


def register_load(dst, src: NkiTensor) -> None:
    """dst = src's single value (a [1] or [1, 1] tensor in HBM or SBUF, at most 32 bits)
    [nki.isa.register_load]."""
    dst = _register(dst, "register_load dst")
    src = issue.tile(src, "src")
    launch = issue.begin()
    view = src.hw_view()
    launch.core.register_load(register=dst.id, src=view)
    dst.value = _constant_value(launch, view)
    dst.origin = (f"loaded from the constant {src._hw.name!r}" if dst.value is not None
                  else f"loaded from {src._hw.name!r}, whose values the program does not fix")


def register_store(dst: NkiTensor, src) -> None:
    """dst's single element (HBM or SBUF, at most 32 bits) = the register's value [nki.isa.register_store]."""
    dst = issue.tile(dst, "dst")
    src = _register(src, "register_store src")
    launch = issue.begin()
    launch.core.register_store(dst=dst.hw_view(), register=src.id)


def _constant_value(launch, view) -> int | None:
    """The value `view` holds if the program fixes it (a constant HBM buffer), else None."""
    core = launch.core
    program = getattr(core, "program", None)
    tensor = view.tensor
    if program is None:                       # a kernel issued to a real core: the values are there
        if getattr(core, "full", False) and tensor.kind != "psum":
            return int(np.asarray(view.values()).reshape(-1)[0])
        return None
    try:
        buffer = program.buffers[core.buffer_of(tensor)]
    except (ValueError, KeyError):
        return None
    if buffer.role != "constant" or buffer.data is None:
        return None
    whole = np.asarray(buffer.data).reshape(tensor.shape)
    return int(np.asarray(whole[view.index] if view.index is not None else whole).reshape(-1)[0])


"""`nki.isa.NkiScalar`, `scalar_load`, `scalar_store`: one integer computed on the device, its arithmetic
traced, used as an access pattern's ``scalar_offset``, as a loop bound or as a branch's condition.

AWS [nki.isa.NkiScalar, nki.isa.scalar_load, nki.isa.scalar_store and the "NKI Scalar Values" deep dive,
awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/...; nki.language.fori_loop, v2.33.0]:

- ``scalar_load(src)`` reads "a 1x1 tensor in SBUF or HBM with dtype nl.int32 or nl.int64" ("Unsigned dtypes
  are not accepted") into an NkiScalar of that dtype; ``scalar_store(dst, s)`` writes it back to a 1x1 tile;
- "Arithmetic on a scalar is traced, not evaluated": ``+``, ``-`` (binary and unary) and ``*`` with a Python
  int or an NkiScalar "so long as the dtypes match", each a new NkiScalar; "A 32-bit scalar is never widened,
  so arithmetic that outgrows 32 bits wraps";
- comparisons: int32 "Traced, but the result cannot be used"; int64 "Rejected at compile time". AWS's
  later nki.language.if_else page gives the traced result one use: "Scalar comparisons such as a < b can
  be passed directly" as its condition ("scalar comparison results are accepted"); no other page does
  (nki.language.fori_loop's bounds, while_loop's register, scalar_offset), so every other use is refused;
- a bound of ``nl.fori_loop``: int32 ("including an arithmetic expression"), not int64 ("the trip-count
  comparison has no 64-bit form");
- ``scalar_offset``: either dtype on an HBM access pattern; "on an SBUF or PSUM operand the offset must be
  nl.int32".

In trnlab an NkiScalar is a `VirtualRegister` (the register that holds it on the device) with a dtype:
`scalar_load` / `scalar_store` are the core's register_load / register_store at its width, each operator a
``register_op`` instruction (hardware/system.py; GpSimd, a register instruction's cost, ASSUMED: AWS
publishes none), a comparison too (1 or 0 in the register, as `nl.if_else` reads it). So everything a
run-time register does, an NkiScalar does: ``.ap(scalar_offset=s)`` read by the DMA that moves the view
when the program runs, a loop the device runs when it bounds ``nl.fori_loop``, a branch the device takes
when it is the condition of ``nl.if_else`` (`device_loops.py`).
Its value is known while tracing when the tile it was loaded from is a constant of the program (as for a
register), and then the loop is traced per iteration.
"""
from __future__ import annotations

import numbers

import numpy as np

from trnlab.hardware import dtypes as hw_dtypes
from trnlab.hardware.errors import DtypeError
from trnlab.hardware.system import REGISTER_COMPARISONS, REGISTER_OPS
from trnlab.nki import issue
from trnlab.nki.errors import NKIError
from trnlab.nki.isa_registers import VirtualRegister, _constant_value
from trnlab.nki.tensor import NkiTensor

WIDTHS = {"int32": 32, "int64": 64}


class ScalarComparisonError(NKIError):
    """The result of comparing an int32 NkiScalar was used ("Traced, but the result cannot be used")."""


class NkiScalar(VirtualRegister):
    """One integer computed on the device (nki.isa.NkiScalar): from `scalar_load`, or arithmetic on one."""

    def __init__(self, state=None, dtype: str = "int32", is_comparison: bool = False):
        if dtype not in WIDTHS:
            raise DtypeError(f"data type: an NkiScalar is nl.int32 or nl.int64, not {dtype} [nki.isa.NkiScalar]",
                             value=dtype, limit=tuple(WIDTHS))
        super().__init__(state)                 # `state`: a value known while tracing, as a register's
        self.dtype = dtype
        self.is_comparison = is_comparison

    @property
    def bits(self) -> int:
        return WIDTHS[self.dtype]

    def usable(self, what: str) -> "NkiScalar":
        """Self, or ScalarComparisonError if it is a comparison's result (usable only as nl.if_else's cond)."""
        if self.is_comparison:
            raise ScalarComparisonError(f"NkiScalar comparison used as {what}: the result of comparing int32 "
                                        f"scalars is \"traced, but the result cannot be used\" [nki.isa.NkiScalar]; "
                                        f"its one use is the condition of nl.if_else (\"scalar comparison results "
                                        f"are accepted\" [nki.language.if_else])")
        return self

    # -- arithmetic: each operator one register instruction ------------------------------------------
    def _op(self, op: str, other, reverse: bool = False) -> "NkiScalar":
        self.usable(f"an operand of {op}")
        if isinstance(other, NkiScalar):
            other.usable(f"an operand of {op}")
        return self.traced(op, other, reverse)

    def traced(self, op: str, other, reverse: bool = False) -> "NkiScalar":
        """A new NkiScalar = self <op> other (other <op> self with `reverse`), one ``register_op``
        instruction: arithmetic (`system.REGISTER_OPS`) or a comparison, 1 or 0 (`REGISTER_COMPARISONS`).
        Its value is known while tracing when both operands' are. NotImplemented if `other` is neither an
        int nor an NkiScalar."""
        if isinstance(other, NkiScalar):
            if other.dtype != self.dtype:
                raise DtypeError(f"data type: NkiScalar {op} of {self.dtype} and {other.dtype}; \"the other operand "
                                 f"... may be a Python int or another NkiScalar so long as the dtypes match\" "
                                 f"[nki.isa.NkiScalar]", value=other.dtype, limit=self.dtype)
        elif isinstance(other, VirtualRegister) or isinstance(other, bool) or \
                not isinstance(other, (numbers.Integral, np.integer)):
            return NotImplemented
        comparison = op in REGISTER_COMPARISONS
        result = NkiScalar(dtype=self.dtype, is_comparison=comparison)
        launch = issue.begin()
        if isinstance(other, NkiScalar):
            launch.core.register_op(register=result.id, a=self.id, op=op, b=other.id, reverse=reverse, bits=self.bits)
            known = other.value
        else:
            launch.core.register_op(register=result.id, a=self.id, op=op, imm=int(other), reverse=reverse,
                                    bits=self.bits)
            known = int(other)
        if self.value is not None and known is not None:      # both known while tracing: the wrapped value
            x, y = (known, self.value) if reverse else (self.value, known)
            compute = REGISTER_COMPARISONS[op] if comparison else REGISTER_OPS[op]
            word = compute(x, y) & ((1 << self.bits) - 1)
            result.value = word - (1 << self.bits) if word >> (self.bits - 1) else word
            result.origin = f"set to {result.value}"
        else:
            result.origin = f"computed on the device ({op} of register {self.id})"
        return result

    def __add__(self, other):
        return self._op("add", other)

    def __radd__(self, other):
        return self._op("add", other, reverse=True)

    def __sub__(self, other):
        return self._op("subtract", other)

    def __rsub__(self, other):
        return self._op("subtract", other, reverse=True)

    def __mul__(self, other):
        return self._op("multiply", other)

    def __rmul__(self, other):
        return self._op("multiply", other, reverse=True)

    def __neg__(self):
        return self._op("subtract", 0, reverse=True)           # 0 - s

    def __pos__(self):
        return self

    # -- comparisons: traced (1 or 0), their result usable only as nl.if_else's condition (int64: refused) --
    def _compare(self, other, name: str, op: str) -> "NkiScalar":
        if self.dtype == "int64" or getattr(other, "dtype", "int32") == "int64":
            raise DtypeError(f"data type: NkiScalar {name} of an int64 scalar is \"rejected at compile time\" "
                             f"[nki.isa.NkiScalar]", value="int64", limit="int32")
        return self._op(op, other)

    def __lt__(self, other):
        return self._compare(other, "<", "less")

    def __le__(self, other):
        return self._compare(other, "<=", "less_equal")

    def __gt__(self, other):
        return self._compare(other, ">", "greater")

    def __ge__(self, other):
        return self._compare(other, ">=", "greater_equal")

    def __eq__(self, other):
        return self._compare(other, "==", "equal")

    def __ne__(self, other):
        return self._compare(other, "!=", "not_equal")

    __hash__ = VirtualRegister.__hash__

    def __bool__(self) -> bool:
        self.usable("a Python condition")
        return super().__bool__()

    def __repr__(self) -> str:
        held = "comparison" if self.is_comparison else ("run-time value" if self.value is None else self.value)
        return f"NkiScalar({self.id}: {held}, {self.dtype})"


def _scalar_dtype(t: NkiTensor, call: str) -> str:
    name = hw_dtypes.name(hw_dtypes.as_dtype(t.dtype))
    if name not in WIDTHS:
        raise DtypeError(f"data type: nisa.{call} of {t.name!r} ({name}); \"The source tensor must use nl.int32 or "
                         f"nl.int64 dtype. Unsigned dtypes are not accepted\" [nki.isa.{call}]", value=name,
                         limit=tuple(WIDTHS))
    return name


def scalar_load(src: NkiTensor) -> NkiScalar:
    """An NkiScalar holding `src`'s one value (a 1x1 int32 / int64 tensor in SBUF or HBM) [nki.isa.scalar_load]."""
    src = issue.tile(src, "src")
    scalar = NkiScalar(dtype=_scalar_dtype(src, "scalar_load"))
    launch = issue.begin()
    view = src.hw_view()
    launch.core.register_load(register=scalar.id, src=view, bits=scalar.bits)
    scalar.value = _constant_value(launch, view)
    scalar.origin = (f"loaded from the constant {src._hw.name!r}" if scalar.value is not None
                     else f"loaded from {src._hw.name!r}, whose values the program does not fix")
    return scalar


def scalar_store(dst: NkiTensor, src: NkiScalar) -> None:
    """dst's one element (a 1x1 int32 / int64 tile) = the scalar's value [nki.isa.scalar_store]."""
    dst = issue.tile(dst, "dst")
    if not isinstance(src, NkiScalar):
        raise NKIError(f"nisa.scalar_store src must be an NkiScalar (from nisa.scalar_load), got {type(src).__name__}")
    src.usable("the value of scalar_store")
    bits = WIDTHS[_scalar_dtype(dst, "scalar_store")]
    launch = issue.begin()
    launch.core.register_store(dst=dst.hw_view(), register=src.id, bits=bits)

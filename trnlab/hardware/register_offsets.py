"""An engine instruction whose input or dst is an access pattern that starts further on by a register's value:
NKI's ``tile.ap(..., scalar_offset=register_or_NkiScalar, indirect_dim=d)`` on an SBUF / PSUM operand.

AWS: "A scalar of either dtype can be used as a scalar_offset argument to access-pattern methods for dynamic
addressing, with one restriction: on an SBUF or PSUM operand the offset must be nl.int32" [nki.isa.scalar_load];
"The start, the step, and the count can be fixed or read from a register at run time" ["NKI Tensor
Indirection", When to Use]. The DMA form is `dma.dma_copy_register_offset`; this is the compute engines'.

``tensor_register_offset(opcode, dst, data, dst_register=, data_register=, dst_stride=, data_stride=, ...)``
runs `opcode` — one of the instructions that take an `.indirect()` view (`indirection.ACCEPTS`, their dense
form `IndirectionInstructions._dense`) — with `data` (its input) and / or `dst` moved by the register's value
times `stride` elements (the elements per step of ``indirect_dim``) when it runs: the view given is the
pattern at offset 0. In full mode the register is read then (an element outside the tile raises
`OutOfBoundsError`); in timing mode the pattern at offset 0 is costed (the same cost). Which elements it
touches is known only when it runs: the instruction reads (or, writing, claims) the whole tile for its
dependencies, in both modes, and it is kept in program order with the register instructions
(`system.STATEFUL_OPCODES`). Cost: the dense instruction's (ASSUMED: AWS publishes no figure for a dynamic
start). Composed into `core.NeuronCore`.
"""
from __future__ import annotations

import math

from .errors import OutOfBoundsError
from .operands import _view
from .system import RegisterError, register_value
from .tensor import View, unravel


class RegisterOffsetInstructions:
    """NeuronCore's engine instructions at a register offset (`core.NeuronCore`): ``tensor_register_offset``."""

    def tensor_register_offset(self, opcode: str, dst, data, dst_register: int = -1, data_register: int = -1,
                               dst_stride: int = 0, data_stride: int = 0, data2=None, operand0=None, operand1=None,
                               bias=None, scale=1.0, reduce_res=None, src=None, attrs: dict | None = None) -> int:
        """Instruction `opcode` with `data` and / or `dst` moved by register `data_register` / `dst_register`
        times `data_stride` / `dst_stride` elements when it runs (see the module docstring); the other
        operands as `tensor_indirect` takes them."""
        dst, data = _view(dst, "dst"), _view(data, "data")
        read = self._at_register(data, data_register, data_stride, opcode, "data")
        write = self._at_register(dst, dst_register, dst_stride, opcode, "dst")
        base_issue = self._issue                 # this core's own scheduling step (described, or values only)

        def issue_on_tiles(eid, op, dur, reads, write_view, flops=0.0, also_write=None):
            # the dependencies: the whole tile on a side at a run-time offset
            reads = tuple(data.tensor.full if v is read and data_register >= 0 else v for v in reads)
            if write_view is write and dst_register >= 0:
                write_view = dst.tensor.full
            return base_issue(eid, op, dur, reads, write_view, flops, also_write)

        self._issue = issue_on_tiles             # for this one instruction (an instance attribute)
        try:
            return self._dense(opcode, write, read, data2, operand0, operand1, bias, scale, reduce_res, src,
                               dict(attrs or {}))
        finally:
            del self._issue

    def _at_register(self, view: View, register: int, stride: int, opcode: str, what: str) -> View:
        """`view` moved by the register's value x `stride` elements (full mode), or `view` (timing mode, or
        no register)."""
        if register < 0 or not self.full:
            return view
        state = self._system_state()
        if int(register) not in state["registers"]:
            raise RegisterError(f"register: {opcode} {what} is at the offset in register {register}, which holds no "
                                f"value", value=register, limit="an initialised register")
        shift = register_value(state, register) * int(stride)
        before = view.flat_positions().reshape(-1)
        flat = before + shift
        shape = tuple(view.tensor.shape)
        # the offset moves the pattern along the axis whose step is `stride` (indirect_dim), within its extent:
        # an element carried into the next row (the next partition, on chip) is outside the tile too
        extents = [math.prod(shape[d:]) for d in range(len(shape)) if math.prod(shape[d + 1:]) == int(stride)]
        block = extents[0] if extents else math.prod(shape)
        bad = (flat < 0) | (flat // block != before // block)
        if bad.any():
            first = int(flat[bad][0])
            raise OutOfBoundsError(f"out-of-bounds index: {opcode} {what} at a run-time offset of {shift} elements "
                                   f"reaches element {first} of {view.tensor.name!r} {shape}, past the axis the "
                                   f"offset moves along (indirect_dim)", value=first, limit=shape)
        return View(view.tensor, unravel(flat.reshape(view.shape), view.tensor.shape))

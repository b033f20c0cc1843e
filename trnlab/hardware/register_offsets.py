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
pattern at offset 0. Its other tile operands (``data2``, ``operand0`` / ``operand1`` as [P, 1] tiles, ``bias``,
``scale``, ``reduce_res``, ``src``) may be moved too (`registers`: operand name -> [register, stride]): AWS
states the offset of an access pattern, not of an operand of one instruction ("on an SBUF or PSUM operand the
offset must be nl.int32", nki.isa.scalar_load). In full mode the register is read then; an element moved out
of its partition's elements of the tile (into the next partition, or past the tile) raises `OutOfBoundsError`
(the engine's access pattern moves within each partition: ASSUMED, AWS's pages state no bound check on
chip); in timing mode the pattern at offset 0 is costed (the same cost). Which elements it touches is known
only when it runs: the instruction reads (or, writing, claims) each moved operand's whole tile for its
dependencies, in both modes, and it is kept in program order with the register instructions
(`system.STATEFUL_OPCODES`). Cost: the dense instruction's (ASSUMED: AWS publishes no figure for a dynamic
start). Composed into `core.NeuronCore`.
"""
from __future__ import annotations

import math

from .errors import OutOfBoundsError
from .indirection import IndirectionOperandError
from .operands import _view
from .system import RegisterError, register_value
from .tensor import View, unravel


class RegisterOffsetInstructions:
    """NeuronCore's engine instructions at a register offset (`core.NeuronCore`): ``tensor_register_offset``."""

    def tensor_register_offset(self, opcode: str, dst, data, dst_register: int = -1, data_register: int = -1,
                               dst_stride: int = 0, data_stride: int = 0, data2=None, operand0=None, operand1=None,
                               bias=None, scale=1.0, reduce_res=None, src=None, attrs: dict | None = None,
                               registers: dict | None = None) -> int:
        """Instruction `opcode` with `data` and / or `dst` moved by register `data_register` / `dst_register`
        times `data_stride` / `dst_stride` elements when it runs, and each other operand named in `registers`
        ({name: [register, stride]}) likewise (see the module docstring); the other operands as
        `tensor_indirect` takes them."""
        dst, data = _view(dst, "dst"), _view(data, "data")
        read = self._at_register(data, data_register, data_stride, opcode, "data")
        write = self._at_register(dst, dst_register, dst_stride, opcode, "dst")
        others = {"data2": data2, "operand0": operand0, "operand1": operand1, "bias": bias, "scale": scale,
                  "reduce_res": reduce_res, "src": src}
        whole = set()                            # the tiles of the other moved operands: their deps are whole
        for name, (register, stride) in (registers or {}).items():
            if name not in others or not isinstance(others[name], View):
                raise IndirectionOperandError(f"tensor indirection operand: {opcode} has no tile operand {name!r} "
                                              f"to move by register {register}", value=name, limit=tuple(others))
            view = _view(others[name], name)
            others[name] = self._at_register(view, int(register), int(stride), opcode, name)
            whole.add(id(view.tensor))
        base_issue = self._issue                 # this core's own scheduling step (described, or values only)

        def issue_on_tiles(eid, op, dur, reads, write_view, flops=0.0, also_write=None):
            # the dependencies: the whole tile on a side at a run-time offset
            reads = tuple(v.tensor.full if (v is read and data_register >= 0) or id(v.tensor) in whole else v
                          for v in reads)
            if write_view is write and dst_register >= 0:
                write_view = dst.tensor.full
            if also_write is not None and id(also_write.tensor) in whole:
                also_write = also_write.tensor.full
            return base_issue(eid, op, dur, reads, write_view, flops, also_write)

        self._issue = issue_on_tiles             # for this one instruction (an instance attribute)
        try:
            return self._dense(opcode, write, read, others["data2"], others["operand0"], others["operand1"],
                               others["bias"], others["scale"], others["reduce_res"], others["src"],
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
        # an engine's access pattern moves within each partition: an element carried into the next partition
        # (or, of a tile of blocks, the next block) or past the tile is outside it
        axis = view.tensor.partition_axis
        row = math.prod(shape[axis + 1:]) if axis is not None else math.prod(shape)
        bad = (flat < 0) | (flat >= math.prod(shape)) | (flat // row != before // row)
        if bad.any():
            first = int(flat[bad][0])
            raise OutOfBoundsError(f"out-of-bounds index: {opcode} {what} at a run-time offset of {shift} elements "
                                   f"reaches element {first} of {view.tensor.name!r} {shape}, outside the "
                                   f"{row} elements of its partition (a run-time offset moves an access pattern "
                                   f"within each partition)", value=first, limit=shape)
        return View(view.tensor, unravel(flat.reshape(view.shape), view.tensor.shape))

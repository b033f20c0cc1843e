"""Tensor indirection (NeuronCore-v4, Trn3): one compute instruction that reads (gather) or writes
(scatter) columns of an SBUF / PSUM tile chosen by offsets it reads from an SBUF index tile when it runs.

AWS's words [NkiTensor.indirect, v2.33.0; the "NKI Tensor Indirection" deep dive; the "Tensor indirection"
paragraphs of the nki.isa pages; the Trainium3 architecture guide, "SBUF/PSUM indirect access"]:

- the index tile is ``uint16`` in SBUF, shape ``(P, K)`` with ``P`` the data view's partitions; an offset
  is the position of one element along the free dimension of the data view;
- a *partition group* of 16 adjacent partitions shares its offsets, read "in a snake": offset ``i`` of
  group ``g`` is ``index[16 g + i % 16, i // 16]`` (32-partition groups on the Tensor engine, whose
  indirect matmul trnlab does not simulate);
- the view has ``num_elem`` columns (default: the offsets a group holds);
- which operand of which instruction may be indirect, and on which engines: `ACCEPTS` below; the index
  of every indirect view starts on a quadrant (a multiple of 32), a gathered input on its index's
  partition, a scattered dst's index on its input's (SBUF) or its input's index's (PSUM, indirect);
  on the Scalar engine a scattered dst cannot be in PSUM.

The instruction is the dense one (`vector.py`) run on the gathered / scattered elements: in full mode the
offsets are read from the index tile and an offset past the data view's free size raises
`IndirectionOffsetError` (ASSUMED: AWS's pages state no out-of-range behaviour; the hardware's is
undefined). When a scatter names one column twice, the last write wins (ASSUMED). Its dependencies are
the index tile (RAW on its producer) and the whole data view (which columns is known only when it runs:
a gather waits for every write to the view, a scatter claims the view), the same in timing mode.
Cost: ASSUMED the dense instruction's over the ``num_elem`` gathered elements per partition, the
gathered operand not contiguous (no Vector 2x/4x mode); AWS publishes no figure for indirection.
Composed into `core.NeuronCore` as the instruction ``tensor_indirect``.
"""
from __future__ import annotations

import numpy as np

from . import dtypes
from .engines import ACT, DVE, POOL
from .errors import (DtypeError, GenerationError, HardwareError, IndexError_, MemoryPlacementError,
                     ShapeMismatchError, StartPartitionError)
from .operands import _view
from .tensor import View, unravel

GROUP = 16                     # partitions sharing one list of offsets (Vector / Scalar / GpSimd)
QUADRANT = 32                  # an index tile starts on a quadrant boundary
INDEX_DTYPE = "uint16"

# instruction -> (its input that may be gathered, the engines that run it with indirection) [nki.isa.<name>,
# "Tensor indirection"]; dst may be scattered in each. Other operands (data2, operand0/1, bias, scale,
# reduce_res) may not be indirect.
ACCEPTS = {
    "tensor_copy": ("src", (DVE, ACT)),
    "tensor_tensor": ("data1", (DVE, POOL)),
    "tensor_scalar": ("data", (DVE, ACT, POOL)),
    "activation": ("data", (ACT,)),             # and activation_reduce (activation with reduce_res)
    "activate2": ("data", (ACT,)),
    "tensor_reduce": ("data", (DVE,)),
    "tensor_scalar_reduce": ("data", (DVE,)),
    "tensor_scalar_cumulative": ("src", (DVE,)),
    "exponential": ("src", (DVE,)),
}
SCALAR_ENGINE = ("activation", "activate2")     # their engine when none is named


class IndirectionOperandError(HardwareError):
    """An operand or instruction that does not take an indirect view (AWS's "Tensor indirection" rules)."""
    rule = "tensor indirection operand"


class IndirectionOffsetError(IndexError_):
    """An offset read from the index tile at run time that is past the data view's free elements."""
    rule = "tensor indirection offset"


def group_capacity(partitions: int, columns: int) -> int:
    """How many offsets each partition group of `partitions` holds in an index of `columns` columns: its
    rows x columns, the smallest group counting (a view of fewer than 16 partitions is one group of them)."""
    last = partitions % GROUP if partitions > GROUP and partitions % GROUP else min(GROUP, partitions)
    return min(GROUP, partitions, last) * columns


def offsets_of(index: np.ndarray, count: int) -> np.ndarray:
    """[P, count]: the offsets partition p reads, offset i of its group g at index[16 g + i % R, i // R]
    (R = the group's rows: 16, or fewer in a view of fewer partitions) — AWS's snake order."""
    P = index.shape[0]
    p = np.arange(P)[:, None]
    i = np.arange(count)[None, :]
    first = (p // GROUP) * GROUP
    rows = np.minimum(GROUP, P - first)
    return index[first + i % rows, i // rows]


class IndirectionInstructions:
    """NeuronCore's tensor indirection (`core.NeuronCore`): ``tensor_indirect``."""

    def tensor_indirect(self, opcode: str, dst, data, dst_index=None, data_index=None, dst_count: int = 0,
                        data_count: int = 0, data2=None, operand0=None, operand1=None, bias=None, scale=1.0,
                        reduce_res=None, attrs: dict | None = None) -> int:
        """Instruction `opcode` (one of `ACCEPTS`) with its input
        `data` gathered (`data_index`: the SBUF index tile, `data_count` columns) and / or its `dst`
        scattered (`dst_index`, `dst_count`); `data` and `dst` are the views `.indirect()` was called on.
        `attrs`: the instruction's other parameters (op, op0, reverse0, ..., engine); `operand0` / `operand1`
        its scalar-or-[P, 1] operands (operand0/1, imm0/1, max_value)."""
        attrs = dict(attrs or {})
        dst, data = _view(dst, "dst"), _view(data, "data")
        self._check_indirection(opcode, dst, data, dst_index, data_index, attrs.get("engine"))
        read = self._indirect_view(data, data_index, data_count, opcode, "data") if data_index is not None else data
        write = self._indirect_view(dst, dst_index, dst_count, opcode, "dst") if dst_index is not None else dst
        indices = tuple(_view(v, "index") for v in (data_index, dst_index) if v is not None)
        base_issue = self._issue                 # this core's own scheduling step (described, or values only)

        def issue_on_views(eid, op, dur, reads, write_view, flops=0.0, also_write=None):
            # the dependencies: the whole data view (its columns are known only at run time) and the index
            reads = tuple(data if v is read else v for v in reads) + indices
            return base_issue(eid, op, dur, reads, dst if write_view is write else write_view, flops, also_write)

        self._issue = issue_on_views             # for this one instruction (an instance attribute)
        try:
            return self._dense(opcode, write, read, data2, operand0, operand1, bias, scale, reduce_res, attrs)
        finally:
            del self._issue

    def _dense(self, opcode, dst, data, data2, operand0, operand1, bias, scale, reduce_res, attrs) -> int:
        """The dense instruction on the gathered / scattered views (operand0 / operand1: the instruction's
        scalar-or-[P, 1] operands, imm0 / imm1 / max_value by its own names)."""
        engine = attrs.pop("engine", None) or ("act" if opcode in SCALAR_ENGINE else "vector")
        if opcode == "tensor_copy":
            return self.tensor_copy(dst=dst, src=data, engine=engine)
        if opcode == "tensor_tensor":
            return self.tensor_tensor(dst=dst, data1=data, data2=data2, op=attrs["op"], engine=engine)
        if opcode == "tensor_scalar":
            return self.tensor_scalar(dst=dst, data=data, operand0=operand0, operand1=operand1, engine=engine,
                                      **attrs)
        if opcode == "activation":
            return self.activation(dst=dst, data=data, bias=bias, scale=scale, reduce_res=reduce_res, **attrs)
        if opcode == "activate2":
            return self.activate2(dst=dst, data=data, imm0=operand0, imm1=operand1, reduce_res=reduce_res,
                                  engine=engine, **attrs)
        if opcode == "tensor_reduce":           # the gathered view is [P, num_elem]: reduced along its columns
            return self.tensor_reduce(dst=dst, data=data, axis=(1,), keepdims=len(dst.shape) == 2, engine=engine,
                                      **attrs)
        if opcode == "tensor_scalar_reduce":
            return self.tensor_scalar_reduce(dst=dst, data=data, operand0=operand0, reduce_res=reduce_res, **attrs)
        if opcode == "tensor_scalar_cumulative":
            return self.tensor_scalar_cumulative(dst=dst, src=data, imm0=operand0, imm1=operand1, **attrs)
        return self.exponential(dst=dst, src=data, max_value=operand0, reduce_res=reduce_res, **attrs)

    def _check_indirection(self, opcode, dst, data, dst_index, data_index, engine) -> None:
        """The rules of AWS's "Tensor indirection" paragraphs that do not depend on the offsets' values."""
        if self.spec.generation < "v4":
            raise GenerationError(f"generation: tensor indirection (.indirect()) needs NeuronCore-v4 or newer "
                                  f"(Trn3); {self.spec.name} is NeuronCore-{self.spec.generation} "
                                  f"[nki.language.NkiTensor.indirect]", value=self.spec.generation, limit="v4")
        if opcode not in ACCEPTS:
            raise IndirectionOperandError(f"tensor indirection operand: {opcode} with an .indirect() view is not "
                                          f"simulated; trnlab simulates it on {', '.join(ACCEPTS)}",
                                          value=opcode, limit=tuple(ACCEPTS))
        what, engines = ACCEPTS[opcode]
        eid = self._engine(engine if engine is not None else ("act" if opcode in SCALAR_ENGINE else "vector"),
                           opcode, engines)
        for view, index, name in ((data, data_index, what), (dst, dst_index, "dst")):
            if index is None:
                continue
            index = _view(index, "index")
            self._onchip(view, name, opcode)
            if index.tensor.kind != "sbuf":
                raise MemoryPlacementError(f"operand memory: {opcode} {name}'s index {index.tensor.name!r} is in "
                                           f"{index.tensor.kind.upper()}; an index tile is in SBUF",
                                           value=index.tensor.kind, limit="sbuf")
            if dtypes.name(index.tensor.dtype) != INDEX_DTYPE:
                raise DtypeError(f"data type: {opcode} {name}'s index is {dtypes.name(index.tensor.dtype)}; an index "
                                 f"tile holds uint16 offsets [NKI Tensor Indirection]",
                                 value=dtypes.name(index.tensor.dtype), limit=INDEX_DTYPE)
            if len(index.shape) != 2 or index.partitions != view.partitions:
                raise ShapeMismatchError(f"shape mismatch: {opcode} {name}'s index {index.shape} must be (P, K) with "
                                         f"P = {view.partitions}, the partitions of the view it indexes "
                                         f"[NkiTensor.indirect]", value=index.shape, limit=(view.partitions, "K"))
            if index.part_start % QUADRANT:
                raise StartPartitionError(f"start partition: {opcode} {name}'s index starts at partition "
                                          f"{index.part_start}; an index starts on a quadrant boundary (a multiple "
                                          f"of 32) [nki.isa.{opcode}]", value=index.part_start, limit=QUADRANT)
        if data_index is not None and data.part_start != _view(data_index, "index").part_start:
            raise StartPartitionError(f"start partition: {opcode} {what} starts at partition {data.part_start}, its "
                                      f"index at {_view(data_index, 'index').part_start}; a gathered input starts on "
                                      f"its index's partition [nki.isa.{opcode}]", value=data.part_start,
                                      limit=_view(data_index, "index").part_start)
        if dst_index is not None:
            start = _view(dst_index, "index").part_start
            if data.tensor.kind == "sbuf" and start != data.part_start:
                raise StartPartitionError(f"start partition: {opcode} dst's index starts at partition {start}, "
                                          f"{what} (SBUF) at {data.part_start}; they must match [nki.isa.{opcode}]",
                                          value=start, limit=data.part_start)
            if data.tensor.kind == "psum" and data_index is not None and \
                    start != _view(data_index, "index").part_start:
                raise StartPartitionError(f"start partition: {opcode} dst's index starts at partition {start}, "
                                          f"{what}'s index at {_view(data_index, 'index').part_start}; they must "
                                          f"match [nki.isa.{opcode}]", value=start,
                                          limit=_view(data_index, "index").part_start)
            if eid == ACT and dst.tensor.kind == "psum":
                raise MemoryPlacementError(f"operand memory: {opcode} on the Scalar engine scatters into PSUM "
                                           f"{dst.tensor.name!r}; a scattered dst of the Scalar engine is in SBUF "
                                           f"[nki.isa.{opcode}]", value="psum", limit="sbuf")

    def _indirect_view(self, view: View, index, count: int, opcode: str, what: str) -> View:
        """The elements of `view` the instruction reads or writes: [P, count], the columns at the offsets
        (full mode: read from `index` now); in timing mode its first column, count times (the same cost)."""
        index = _view(index, "index")
        P, F = view.partitions, view.free_size
        capacity = group_capacity(P, index.free_size)
        if not 1 <= count <= capacity:
            raise ShapeMismatchError(f"shape mismatch: {opcode} {what} reads {count} offsets; each group of "
                                     f"{min(GROUP, P)} partitions holds {capacity} in an index of "
                                     f"{index.free_size} columns [NkiTensor.indirect]", value=count, limit=capacity)
        if self.full:
            index.check_initialized()
            table = np.asarray(index.values()).reshape(P, -1).astype(np.int64)
            columns = offsets_of(table, count)
            bad = columns >= F
            if bad.any():
                p, i = (int(k[0]) for k in np.nonzero(bad))
                raise IndirectionOffsetError(
                    f"tensor indirection offset: {opcode} {what} offset {int(columns[p, i])} (offset {i} of partition "
                    f"{p}'s group, read from the index at run time) is past the {F} elements per partition of "
                    f"{view.tensor.name!r}; an offset is a position along the free dimension, 0..{F - 1}",
                    value=int(columns[p, i]), limit=F)
        else:
            columns = np.zeros((P, count), np.int64)
        flat = np.take_along_axis(view.flat_positions().reshape(P, F), columns, axis=1)
        return View(view.tensor, unravel(flat, view.tensor.shape))

"""Tensor indirection (NeuronCore-v4, Trn3): one compute instruction that reads (gather) or writes
(scatter) columns of an SBUF / PSUM tile chosen by offsets it reads from an SBUF index tile when it runs.

AWS's words [NkiTensor.indirect, v2.33.0; the "NKI Tensor Indirection" deep dive; the "Tensor indirection"
paragraphs of the nki.isa pages; the Trainium3 architecture guide, "SBUF/PSUM indirect access"]:

- the index tile is ``uint16`` in SBUF, shape ``(P, K)`` with ``P`` the data view's partitions; an offset
  is the position of one element along the free dimension of the data view;
- a *partition group* of 16 adjacent partitions shares its offsets, read "in a snake": offset ``i`` of
  group ``g`` is ``index[16 g + i % 16, i // 16]``; on the Tensor engine a group is 32 partitions
  ("G is the group size (16 for vector/scalar/gpsimd engines, 32 for tensor engine)", NkiTensor.indirect);
- the view has ``num_elem`` columns (default: the offsets a group holds);
- which operand of which instruction may be indirect, and on which engines: `ACCEPTS` below; the index
  of every indirect view starts on a quadrant (a multiple of 32), a gathered input on its index's
  partition, a scattered dst's index on its input's (SBUF) or its input's index's (PSUM, indirect);
  on the Scalar engine a scattered dst cannot be in PSUM;
- the Tensor engine (`matmul_indirect`, [nki.isa.nc_matmul] / [nki.isa.nc_matmul_mx] "Tensor
  indirection"): nc_matmul's dst, stationary and moving may each be indirect, in a float dtype of the
  Tensor engine (`PE_INDIRECT_DTYPES`), moving not with is_transpose; nc_matmul_mx's dst, and its
  (stationary, stationary_scale) and (moving, moving_scale) pairs, each pair both indirect with the same
  index or neither ("the data bytes and scale exponents form a single logical tensor"); neither with a
  tile_position other than (0, 0) ("incompatible with hardware tiling"); a gathered operand on its index's
  partition, a scattered dst's index on stationary's.

The instruction is the dense one (`vector.py`) run on the gathered / scattered elements: in full mode the
offsets are read from the index tile and an offset past the data view's free size raises
`IndirectionOffsetError` (ASSUMED: AWS's pages state no out-of-range behaviour; the hardware's is
undefined). When a scatter names one column twice, the last write wins (ASSUMED). Its dependencies are
the index tile (RAW on its producer) and the whole data view (which columns is known only when it runs:
a gather waits for every write to the view, a scatter claims the view), the same in timing mode.
Cost: ASSUMED the dense instruction's over the ``num_elem`` gathered elements per partition, the
gathered operand not contiguous (no Vector 2x/4x mode); on the Tensor engine the dense matmul's over the
gathered [K, num_elem] operands, its stationary loaded again each time (no reuse of a loaded one) and a
result never merged into an accumulation group (it waits for the matmul before it to drain); AWS
publishes no figure for indirection.
Composed into `core.NeuronCore` as the instructions ``tensor_indirect`` and ``matmul_indirect``.
"""
from __future__ import annotations

import numpy as np

from . import dtypes
from .engines import ACT, DVE, POOL
from . import onezero as _onezero
from .errors import (DtypeError, GenerationError, HardwareError, IndexError_, MatmulShapeError,
                     MemoryPlacementError, PETilingError, ShapeMismatchError, StartPartitionError)
from .operands import _view
from .tensor import View, unravel
from .memory import check_pe_result
from .tensor_engine import pe_tiles

GROUP = 16                     # partitions sharing one list of offsets (Vector / Scalar / GpSimd)
PE_GROUP = 32                  # ... on the Tensor engine
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
    "tensor_copy_predicated": ("predicate", (DVE,)),   # src (a tile or a number) is never indirect
}
# the Tensor engine's instructions -> their operands that may be gathered (`matmul_indirect`)
PE_ACCEPTS = {"nc_matmul": ("stationary", "moving"), "nc_matmul_mx": ("stationary", "moving")}
# "The indirect operands must be a Tensor-Engine float dtype" [nki.isa.nc_matmul, "Tensor indirection"]
PE_INDIRECT_DTYPES = (dtypes.float16, dtypes.bfloat16, dtypes.float8_e4m3, dtypes.float8_e5m2,
                      dtypes.float8_e4m3fn)
SCALAR_ENGINE = ("activation", "activate2")     # their engine when none is named


class IndirectionOperandError(HardwareError):
    """An operand or instruction that does not take an indirect view (AWS's "Tensor indirection" rules)."""
    rule = "tensor indirection operand"


class IndirectionOffsetError(IndexError_):
    """An offset read from the index tile at run time that is past the data view's free elements."""
    rule = "tensor indirection offset"


def group_capacity(partitions: int, columns: int, group: int = GROUP) -> int:
    """How many offsets each partition group (of `group` partitions) of `partitions` holds in an index of
    `columns` columns: its rows x columns, the smallest group counting (a view of fewer than `group`
    partitions is one group of them)."""
    last = partitions % group if partitions > group and partitions % group else min(group, partitions)
    return min(group, partitions, last) * columns


def offsets_of(index: np.ndarray, count: int, group: int = GROUP) -> np.ndarray:
    """[P, count]: the offsets partition p reads, offset i of its group g at index[G g + i % R, i // R]
    (G = `group` partitions; R = the group's rows: G, or fewer in a view of fewer partitions) — AWS's
    snake order."""
    P = index.shape[0]
    p = np.arange(P)[:, None]
    i = np.arange(count)[None, :]
    first = (p // group) * group
    rows = np.minimum(group, P - first)
    return index[first + i % rows, i // rows]


class IndirectionInstructions:
    """NeuronCore's tensor indirection (`core.NeuronCore`): ``tensor_indirect``."""

    def tensor_indirect(self, opcode: str, dst, data, dst_index=None, data_index=None, dst_count: int = 0,
                        data_count: int = 0, data2=None, operand0=None, operand1=None, bias=None, scale=1.0,
                        reduce_res=None, src=None, attrs: dict | None = None) -> int:
        """Instruction `opcode` (one of `ACCEPTS`) with its input
        `data` gathered (`data_index`: the SBUF index tile, `data_count` columns) and / or its `dst`
        scattered (`dst_index`, `dst_count`); `data` and `dst` are the views `.indirect()` was called on.
        `attrs`: the instruction's other parameters (op, op0, reverse0, ..., engine); `operand0` / `operand1`
        its scalar-or-[P, 1] operands (operand0/1, imm0/1, max_value); `src`: tensor_copy_predicated's source
        (a view or a number; `data` is its predicate)."""
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
            return self._dense(opcode, write, read, data2, operand0, operand1, bias, scale, reduce_res, src, attrs)
        finally:
            del self._issue

    def _dense(self, opcode, dst, data, data2, operand0, operand1, bias, scale, reduce_res, src, attrs) -> int:
        """The dense instruction on the gathered / scattered views (operand0 / operand1: the instruction's
        scalar-or-[P, 1] operands, imm0 / imm1 / max_value by its own names)."""
        engine = attrs.pop("engine", None) or ("act" if opcode in SCALAR_ENGINE else "vector")
        if opcode == "tensor_copy_predicated":  # the Vector engine's only (`ACCEPTS`)
            return self.tensor_copy_predicated(dst=dst, src=src, predicate=data, **attrs)
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

    def _need_indirection(self) -> None:
        """Tensor indirection is a NeuronCore-v4 feature."""
        if self.spec.generation < "v4":
            raise GenerationError(f"generation: tensor indirection (.indirect()) needs NeuronCore-v4 or newer "
                                  f"(Trn3); {self.spec.name} is NeuronCore-{self.spec.generation} "
                                  f"[nki.language.NkiTensor.indirect]", value=self.spec.generation, limit="v4")

    def _check_indirection(self, opcode, dst, data, dst_index, data_index, engine) -> None:
        """The rules of AWS's "Tensor indirection" paragraphs that do not depend on the offsets' values."""
        self._need_indirection()
        if opcode not in ACCEPTS:
            raise IndirectionOperandError(f"tensor indirection operand: {opcode} with an .indirect() view is not "
                                          f"simulated; trnlab simulates it on {', '.join(ACCEPTS)}",
                                          value=opcode, limit=tuple(ACCEPTS))
        what, engines = ACCEPTS[opcode]
        eid = self._engine(engine if engine is not None else ("act" if opcode in SCALAR_ENGINE else "vector"),
                           opcode, engines)
        for view, index, name in ((data, data_index, what), (dst, dst_index, "dst")):
            if index is not None:
                self._onchip(view, name, opcode)
                self._check_index(opcode, view, index, name)
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

    def _check_index(self, opcode: str, view: View, index, name: str) -> None:
        """The rules of an index tile [NkiTensor.indirect; nki.isa.<opcode>, "Tensor indirection"]: in SBUF,
        uint16, (P, K) with P the partitions of the view it indexes, starting on a quadrant."""
        index = _view(index, "index")
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

    # -- the Tensor engine --------------------------------------------------------------------------
    def matmul_indirect(self, opcode: str, dst, stationary, moving, dst_index=None, stationary_index=None,
                        moving_index=None, dst_count: int = 0, stationary_count: int = 0, moving_count: int = 0,
                        stationary_scale=None, moving_scale=None, accumulate=None, is_transpose: bool = False,
                        tile_position=None, tile_size=None, is_stationary_onezero: bool = False,
                        is_moving_onezero: bool = False, double_row: bool = False) -> int:
        """Tensor-engine instruction `opcode` (``nc_matmul`` or ``nc_matmul_mx``, `PE_ACCEPTS`) with its
        stationary and / or moving gathered and / or its dst scattered: `dst`, `stationary`, `moving` are the
        views `.indirect()` was called on, `*_index` their SBUF uint16 index tiles (32 partitions share their
        offsets), `*_count` their num_elem. nc_matmul_mx's scales are gathered with their data, at the same
        offsets (`stationary_index` indexes stationary and stationary_scale). is_transpose (nc_matmul):
        dst = the gathered stationary, transposed. ``is_stationary_onezero`` / ``is_moving_onezero``: nc_matmul's
        one/zero hints, on the gathered operands (`onezero.py`). ``double_row``: nc_matmul's FP8 double-row
        mode (`double_row.py`) with its dst scattered; its [K, 2, F] operands cannot be gathered (a gathered
        view is [P, num_elem], `_check_pe_indirection`)."""
        dst, st, mv = _view(dst, "dst"), _view(stationary, "stationary"), _view(moving, "moving")
        scales = {"stationary": stationary_scale, "moving": moving_scale}
        scales = {k: None if v is None else _view(v, k + "_scale") for k, v in scales.items()}
        operands = {"dst": (dst, dst_index, dst_count), "stationary": (st, stationary_index, stationary_count),
                    "moving": (mv, moving_index, moving_count)}
        self._check_pe_indirection(opcode, operands, scales, is_transpose, tile_position, double_row)
        views = {}
        for name, (view, index, count) in operands.items():
            views[name] = view if index is None else self._pe_view(view, index, count, opcode, name)
            if index is not None and name != "dst" and scales[name] is not None:
                scales[name] = self._pe_view(scales[name], index, count, opcode, name + "_scale")
        indices = tuple(_view(i, "index") for i in (stationary_index, moving_index, dst_index) if i is not None)
        base_issue = self._pe_issue              # this core's own Tensor-engine scheduling step

        def issue_reading_the_indices(op, st_view, reads, dst_view, flops, sbuf, psum, tiles=0, attrs=None):
            # the dependencies: the index tiles too (RAW on their producers)
            return base_issue(op, st_view, tuple(reads) + indices, dst_view, flops, sbuf, psum, tiles, attrs)

        self._pe_issue = issue_reading_the_indices      # for this one instruction (an instance attribute)
        try:
            if opcode == "nc_matmul_mx":
                return self.nc_matmul_mx(dst=views["dst"], stationary=views["stationary"], moving=views["moving"],
                                         stationary_scale=scales["stationary"], moving_scale=scales["moving"],
                                         accumulate=accumulate, tile_position=tile_position, tile_size=tile_size)
            if is_transpose:                         # the PE array passes the stationary through
                return self.nc_transpose(dst=views["dst"], src=views["stationary"])
            if double_row:                           # the dense FP8 double-row matmul into the scattered dst
                return self.nc_matmul_double_row(dst=views["dst"], stationary=views["stationary"],
                                                 moving=views["moving"], accumulate=accumulate)
            return self._matmul_gathered(views["dst"], views["stationary"], views["moving"], accumulate,
                                         tile_position, tile_size,
                                         _onezero.hint_attrs(is_stationary_onezero, is_moving_onezero))
        finally:
            del self._pe_issue

    def _matmul_gathered(self, dst, st, mv, accumulate, tile_position, tile_size, hints: dict) -> int:
        """nc_matmul on gathered / scattered views: its rules, its values (computed now, not deferred into a
        PSUM accumulation group: the views are not boxes), and a Tensor-engine issue of its cost (`hints`: the
        one/zero hints, checked on the gathered elements and costed as a dense matmul's)."""
        dst, st, mv, K, M, N, _busy, _latency, _load, flops, sbuf, psum = self._check_matmul(dst, st, mv, hints)
        check_pe_result(self.spec, dst, "nc_matmul")
        tiles = 0 if tile_position is None and tile_size is None else \
            pe_tiles(self.spec, tile_position, tile_size, K, M)
        if self.full:
            if hints:
                self._check_onezero(st, mv, hints)
            self._matmul_values(dst, st, mv, K, M, N, accumulate, defer=False)
        return self._pe_issue("nc_matmul", st, (mv,), dst, flops, sbuf, psum, tiles, hints or None)

    def _check_pe_indirection(self, opcode, operands: dict, scales: dict, is_transpose, tile_position,
                              double_row: bool = False) -> None:
        """The rules of nc_matmul's and nc_matmul_mx's "Tensor indirection" paragraphs that do not depend on
        the offsets' values (`operands`: name -> (view, index or None, count)); with ``double_row``, the
        mode's layout: its stationary and moving are [K, 2, F] ("The first free dimension must be 2",
        nki.isa.nc_matmul, "Layout") and a gathered view is [P, num_elem] ("Output shape is (P, num_elem)",
        NkiTensor.indirect), so only its dst may be indirect."""
        self._need_indirection()
        if opcode not in PE_ACCEPTS:
            raise IndirectionOperandError(f"tensor indirection operand: {opcode} is not a Tensor-engine instruction "
                                          f"that takes an .indirect() view ({', '.join(PE_ACCEPTS)})",
                                          value=opcode, limit=tuple(PE_ACCEPTS))
        if tile_position not in (None, ()) and tuple(int(x) for x in tile_position) != (0, 0):
            raise PETilingError(f"PE array tiling: {opcode} with an .indirect() view at tile_position "
                                f"{tuple(tile_position)}; \"Tensor indirection is incompatible with hardware tiling, "
                                f"so tile_position must be (0, 0) (or unset)\" [nki.isa.{opcode}]",
                                value=tuple(tile_position), limit=(0, 0))
        for name in ("stationary", "moving"):
            if double_row and operands[name][1] is not None:
                raise MatmulShapeError(f"matmul tile shape: {opcode} perf_mode=double_row {name} is an .indirect() "
                                       f"view, [P, num_elem]; double_row's {name} is [K, 2, F] (\"The first free "
                                       f"dimension must be 2\" [nki.isa.nc_matmul]; \"Output shape is (P, num_elem)\" "
                                       f"[NkiTensor.indirect]): only dst may be indirect", value=name,
                                       limit="[K, 2, F]")
        if is_transpose and operands["moving"][1] is not None:
            raise IndirectionOperandError(f"tensor indirection operand: {opcode} with is_transpose=True takes no "
                                          f".indirect() moving [nki.isa.nc_matmul]", value="moving",
                                          limit=("dst", "stationary"))
        st = operands["stationary"][0]
        for name, (view, index, _count) in operands.items():
            if index is None:
                continue
            self._check_index(opcode, view, index, name)
            index = _view(index, "index")
            if opcode == "nc_matmul" and view.tensor.dtype not in PE_INDIRECT_DTYPES:
                names = tuple(dtypes.name(d) for d in PE_INDIRECT_DTYPES)
                raise DtypeError(f"data type: {opcode} {name} .indirect() is {dtypes.name(view.tensor.dtype)}; \"the "
                                 f"indirect operands must be a Tensor-Engine float dtype\" ({', '.join(names)}) "
                                 f"[nki.isa.nc_matmul]", value=dtypes.name(view.tensor.dtype), limit=names)
            if name != "dst" and view.part_start != index.part_start:
                raise StartPartitionError(f"start partition: {opcode} {name} starts at partition {view.part_start}, "
                                          f"its index at {index.part_start}; a gathered operand starts on its "
                                          f"index's partition [nki.isa.{opcode}]", value=view.part_start,
                                          limit=index.part_start)
            if name == "dst" and index.part_start != st.part_start:
                raise StartPartitionError(f"start partition: {opcode} dst's index starts at partition "
                                          f"{index.part_start}, stationary at {st.part_start}; they must match "
                                          f"[nki.isa.{opcode}]", value=index.part_start, limit=st.part_start)
            if name != "dst" and opcode == "nc_matmul_mx":
                scale = scales[name]
                if scale is None:
                    raise IndirectionOperandError(f"tensor indirection operand: {opcode} {name} is indirect and "
                                                  f"{name}_scale is missing", value=name, limit=name + "_scale")
                self._check_index(opcode, scale, index, name + "_scale")

    def _pe_view(self, view: View, index, count: int, opcode: str, what: str) -> View:
        """`_indirect_view` with the Tensor engine's 32-partition groups; its dependencies are the whole
        view's (which columns is known only when the instruction runs), in every mode."""
        gathered = self._indirect_view(view, index, count, opcode, what, PE_GROUP)
        gathered.box = view.box
        return gathered

    def _indirect_view(self, view: View, index, count: int, opcode: str, what: str, group: int = GROUP) -> View:
        """The elements of `view` the instruction reads or writes: [P, count], the columns at the offsets
        (full mode: read from `index` now; `group` partitions share them); in timing mode its first column,
        count times (the same cost)."""
        index = _view(index, "index")
        P, F = view.partitions, view.free_size
        capacity = group_capacity(P, index.free_size, group)
        if not 1 <= count <= capacity:
            raise ShapeMismatchError(f"shape mismatch: {opcode} {what} reads {count} offsets; each group of "
                                     f"{min(group, P)} partitions holds {capacity} offsets in an index of "
                                     f"{index.free_size} columns [NkiTensor.indirect]", value=count, limit=capacity)
        if self.full:
            index.check_initialized()
            table = np.asarray(index.values()).reshape(P, -1).astype(np.int64)
            columns = offsets_of(table, count, group)
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

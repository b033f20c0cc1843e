"""`nki.isa`'s Vector, Scalar (activation) and GpSimd instructions: elementwise tensor-tensor and
tensor-scalar ops, scans, reductions, activations, memset, iota, selects and batch-norm statistics.
"""
from __future__ import annotations

import math

import numpy as np

from trnlab.hardware import dtypes as hw_dtypes
from trnlab.hardware import ops as hw_ops
from trnlab.hardware.errors import ShapeMismatchError
from trnlab.nki import indexing, issue
from trnlab.nki import tensor_indirection as _ti
from trnlab.nki import tensor_views as _views
from trnlab.nki.errors import NKIError
from trnlab.nki.indexing import IndexExpr, Predicate
from trnlab.nki.isa_binder import (Dtype, Mask, Op, Operand, Shape, Tile, _engine, _finish, engine, instruction,
                                   op_name, reduce_cmd)
from trnlab.nki.isa_dma import _in_sbuf
from trnlab.nki.tensor import NkiTensor


# -- Vector / Scalar / GpSimd ----------------------------------------------------------------------------
def _promote(a, b):
    a, b = np.dtype(a), np.dtype(b)
    if a == b:
        return a
    if hw_dtypes.float32 in (a, b):
        return hw_dtypes.float32
    if hw_dtypes.is_float(a) and not hw_dtypes.is_float(b):
        return a
    if hw_dtypes.is_float(b) and not hw_dtypes.is_float(a):
        return b
    return hw_dtypes.float32


def _scalar_operand(x, ranges):
    """A number as float, a [P, 1] tile's view, or None."""
    if x is None or issue.is_number(x):
        return x if x is None else float(x)
    view = issue.tile(x, "operand").hw_view(ranges)
    if len(view.shape) < 1:
        raise ShapeMismatchError("a per-partition operand must be a [P, 1] tile", value=view.shape, limit="[P, 1]")
    return view


@instruction(functional=("data1", "data2", "op"))
def tensor_tensor(dst: Tile | None, data1: Tile, data2: Tile, op: Op, engine: engine = engine.unknown,
                  name: str = "", *, mask: Mask | None = None, dtype: Dtype | None = None) -> Tile | None:
    """dst = data1 <op> data2, element-wise (Vector engine by default, or GpSimd). A [P, 1] operand
    against a [P, F] one is a per-partition scalar (AWS's compiler accepts it, e.g. the dequantizing
    multiply of AWS's quantized_double_row_matmul): issued as tensor_scalar, as nl.multiply does."""
    data1, data2 = issue.tile(data1, "data1"), issue.tile(data2, "data2")
    opcode = op_name(op)
    for tile, other, reverse in ((data2, data1, False), (data1, data2, True)):
        if tile.shape[0] == other.shape[0] and math.prod(tile.shape[1:]) == 1 < math.prod(other.shape[1:]):
            return tensor_scalar(dst, other, op, tile, reverse0=reverse and opcode in ("subtract", "divide", "power"),
                                 engine=engine, mask=mask, dtype=dtype)
    ranges = issue.ranges(mask, data1, data2)
    engine_name = _engine(engine, "dve")
    launch = issue.begin()

    def emit(out, _accumulate):
        if _ti.uses(out, data1, data2):          # Tensor Indirection: the offsets are read when it runs
            return _ti.emit(launch, "tensor_tensor", out, data1, ranges, {"op": opcode, "engine": engine_name},
                            data2=data2)
        (d, k0), (a, k1), (b, k2) = (_views.engine_operand(name, t, ranges)   # a .view(dtype) tile: its bytes
                                     for name, t in (("dst", out), ("data1", data1), ("data2", data2)))
        launch.core.tensor_tensor(dst=d, data1=a, data2=b, op=opcode, engine=engine_name, **k0, **k1, **k2)

    return _finish(dst, emit, data1.shape, dtype or _promote(data1.dtype, data2.dtype), "sbuf", ranges)


@instruction(functional=("data0", "data1", "initial", "op0", "op1", "reverse0", "reverse1"))
def tensor_tensor_scan(dst: Tile | None, data0: Tile, data1: Tile, initial: Operand, op0: Op, op1: Op,
                       reverse0: bool = False, reverse1: bool = False, name: str = "", *,
                       mask: Mask | None = None, dtype: Dtype | None = None) -> Tile | None:
    """A scan along the free axis, per partition (Vector engine):
    ``dst[:, i] = (data0[:, i] <op0> dst[:, i-1]) <op1> data1[:, i]`` with ``dst[:, -1] = initial``
    (a number or a [P, 1] tile), e.g. the recurrence h = a * h + b of a state-space model."""
    data0, data1 = issue.tile(data0, "data0"), issue.tile(data1, "data1")
    first, second = op_name(op0), op_name(op1)
    ranges = issue.ranges(mask, data0, data1)
    launch = issue.begin()

    def emit(out, _accumulate):
        launch.core.tensor_tensor_scan(dst=out.hw_view(ranges), data0=data0.hw_view(ranges),
                                       data1=data1.hw_view(ranges), initial=_scalar_operand(initial, ranges),
                                       op0=first, op1=second, reverse0=bool(reverse0), reverse1=bool(reverse1))

    return _finish(dst, emit, data0.shape, dtype or _promote(data0.dtype, data1.dtype), "sbuf", ranges)


@instruction(functional=("data", "op0", "operand0", "reverse0", "op1", "operand1", "reverse1"))
def tensor_scalar(dst: Tile | None, data: Tile, op0: Op, operand0: Operand, reverse0: bool = False,
                  op1: Op | None = None, operand1: Operand | None = None, reverse1: bool = False,
                  engine: engine = engine.unknown, name: str = "", *, mask: Mask | None = None,
                  dtype: Dtype | None = None) -> Tile | None:
    """dst = (data <op0> operand0) <op1> operand1; operands are numbers or [P, 1] tiles."""
    data = issue.tile(data, "data")
    first, second = op_name(op0), op_name(op1)
    ranges = issue.ranges(mask, data, operand0, operand1)
    engine_name = _engine(engine, "dve")
    launch = issue.begin()

    def emit(out, _accumulate):
        if _ti.uses(out, data, operand0, operand1):   # Tensor Indirection: the offsets are read when it runs
            return _ti.emit(launch, "tensor_scalar", out, data, ranges,
                            {"op0": first, "reverse0": bool(reverse0), "op1": second, "reverse1": bool(reverse1),
                             "engine": engine_name}, operand0=operand0, operand1=operand1)
        (d, k0), (x, k1) = (_views.engine_operand(name, t, ranges) for name, t in (("dst", out), ("data", data)))
        launch.core.tensor_scalar(dst=d, data=x, op0=first,
                                  operand0=_scalar_operand(operand0, ranges), reverse0=bool(reverse0), op1=second,
                                  operand1=_scalar_operand(operand1, ranges), reverse1=bool(reverse1),
                                  engine=engine_name, **k0, **k1)

    return _finish(dst, emit, data.shape, dtype or data.dtype, "sbuf", ranges)


@instruction(functional=("data", "op0", "operand0", "reduce_op", "reduce_res", "reverse0"))
def tensor_scalar_reduce(dst: Tile | None, data: Tile, op0: Op, operand0: Operand, reduce_op: Op,
                         reduce_res: Tile, reverse0: bool = False, name: str = "", *,
                         mask: Mask | None = None, dtype: Dtype | None = None) -> Tile | None:
    """dst = data <op0> operand0, and reduce_res[P, 1] = reduce_op of dst along all its free axes, in one
    Vector-engine instruction (reduce_op: nl.add, nl.multiply, nl.maximum / nl.max, nl.minimum / nl.min)."""
    data, reduce_res = issue.tile(data, "data"), issue.tile(reduce_res, "reduce_res")
    first, reduction = op_name(op0), op_name(reduce_op)
    ranges = issue.ranges(mask, data, operand0)
    launch = issue.begin()

    def emit(out, _accumulate):
        if _ti.uses(out, data, operand0, reduce_res):   # Tensor Indirection: offsets read when it runs
            return _ti.emit(launch, "tensor_scalar_reduce", out, data, ranges,
                            {"op0": first, "reduce_op": reduction, "reverse0": bool(reverse0)},
                            operand0=operand0, reduce_res=reduce_res)
        launch.core.tensor_scalar_reduce(dst=out.hw_view(ranges), data=data.hw_view(ranges), op0=first,
                                         operand0=_scalar_operand(operand0, ranges), reduce_op=reduction,
                                         reduce_res=reduce_res.hw_view(ranges), reverse0=bool(reverse0))

    return _finish(dst, emit, data.shape, dtype or data.dtype, "sbuf", ranges)


@instruction(functional=("op", "data", "axis", "negate", "keepdims"))
def tensor_reduce(dst: Tile | None, op: Op, data: Tile, axis: int | tuple, negate: bool = False,
                  keepdims: bool = False, name: str = "", *, mask: Mask | None = None,
                  dtype: Dtype | None = None) -> Tile | None:
    """Reduce `data` along free axes with `op` (add, maximum, minimum, ...) on the Vector engine."""
    data = issue.tile(data, "data")
    opcode = op_name(op)
    axes = tuple(axis) if isinstance(axis, (list, tuple)) else (int(axis),)
    axes = tuple(int(a) % data.ndim if -data.ndim <= int(a) < 0 else int(a) for a in axes)  # axis=[-2, -1]
    if 0 in axes:
        raise NKIError("tensor_reduce: axis 0 is the partition axis; reductions run along free axes only "
                       "(use nisa.tensor_partition_reduce, nl.transpose or a matmul with a ones vector)")
    ranges = issue.ranges(mask, data)
    launch = issue.begin()

    # a mask clause on a reduced axis limits what is read, not the (size-1) result axis
    out_ranges = {it: r for it, r in ranges.items() if it.axis not in axes} if ranges else ranges

    def emit(out, _accumulate):
        if _ti.uses(out, data):                  # Tensor Indirection: the offsets are read when it runs
            return _ti.emit(launch, "tensor_reduce", out, data, ranges, {"op": opcode, "negate": bool(negate)})
        # trnlab keeps reduced axes as size-1 dims in memory, so [P] and [P, 1] results look alike
        view = out.hw_view(out_ranges)
        launch.core.tensor_reduce(dst=view, data=data.hw_view(ranges), op=opcode, axis=axes, negate=bool(negate),
                                  keepdims=len(view.shape) == data.ndim)

    kept = tuple(1 if a in axes else n for a, n in enumerate(data.shape))
    shape = kept if keepdims else tuple(n for a, n in enumerate(data.shape) if a not in axes)
    return _finish(dst, emit, shape, dtype or data.dtype, "sbuf", ranges, storage=kept)


@instruction(functional=("op", "data"))
def tensor_partition_reduce(dst: Tile | None, op: Op, data: Tile, name: str = "", *, mask: Mask | None = None,
                            dtype: Dtype | None = None) -> Tile | None:
    """Reduce across partitions: dst[1, ...] = op over data[P, ...] (GpSimd engine; op: add, maximum,
    bitwise_or, bitwise_and)."""
    data = _in_sbuf(data, "data")
    opcode = op_name(op)
    ranges = indexing.restrict(mask)
    launch = issue.begin()

    def emit(out, _accumulate):
        launch.core.tensor_partition_reduce(dst=out.hw_view(ranges), data=data.hw_view(ranges), op=opcode)

    return _finish(dst, emit, (1,) + tuple(data.shape[1:]), dtype or data.dtype, "sbuf")


@instruction(functional=("op", "data", "bias", "scale", "reduce_op", "reduce_res", "reduce_cmd"))
def activation(dst: Tile | None, op: Op, data: Tile, bias: Operand | None = None, scale: Operand = 1.0,
               reduce_op: Op | None = None, reduce_res: Tile | None = None, reduce_cmd: reduce_cmd | None = None,
               name: str = "", *, mask: Mask | None = None, dtype: Dtype | None = None) -> Tile | None:
    """dst = op(data * scale + bias) on the Scalar engine, optionally summing the result along the free
    axes in the engine's reduce registers (reduce_op must be nl.add): reduce_cmd = nisa.reduce_cmd.reset,
    reduce (accumulate over several instructions), reset_reduce or idle; a reduce_res [P, 1] tile
    receives the registers. With reduce_res and no reduce_cmd, reduce_res gets this instruction's own
    sums (as nisa.activation_reduce); AWS's default is idle, so pass reduce_cmd explicitly in code meant
    for the device."""
    return _activation(dst, op, data, bias, scale, reduce_op, reduce_res, reduce_cmd, mask, dtype)


@instruction(functional=("op", "data", "reduce_op", "reduce_res", "bias", "scale"))
def activation_reduce(dst: Tile | None, op: Op, data: Tile, reduce_op: Op, reduce_res: Tile,
                      bias: Operand | None = None, scale: Operand = 1.0, name: str = "", *,
                      mask: Mask | None = None, dtype: Dtype | None = None) -> Tile | None:
    """nisa.activation with reduce_cmd=reset_reduce: one Scalar-engine instruction that also sums the
    result along the free axes into reduce_res (AWS keeps it for older kernels)."""
    return _activation(dst, op, data, bias, scale, reduce_op, reduce_res, "reset_reduce", mask, dtype)


def _activation(dst, op, data, bias, scale, reduce_op, reduce_res, command, mask, dtype):
    data = issue.tile(data, "data")
    opcode = op_name(op)
    if isinstance(command, reduce_cmd):
        command = command.name
    if reduce_res is not None:
        reduce_res = issue.tile(reduce_res, "reduce_res")
    ranges = issue.ranges(mask, data, bias, scale)
    launch = issue.begin()

    def emit(out, _accumulate):
        if _ti.uses(out, data, bias, scale, reduce_res):   # Tensor Indirection: offsets read when it runs
            return _ti.emit(launch, "activation", out, data, ranges,
                            {"op": opcode, "reduce_op": op_name(reduce_op) if reduce_op is not None else None,
                             "reduce_cmd": command}, bias=bias, scale=scale, reduce_res=reduce_res)
        (d, k0), (x, k1) = (_views.engine_operand(name, t, ranges) for name, t in (("dst", out), ("data", data)))
        launch.core.activation(dst=d, data=x, op=opcode,
                               scale=_scalar_operand(scale, ranges),
                               bias=None if bias is None else _scalar_operand(bias, ranges),
                               reduce_op=op_name(reduce_op) if reduce_op is not None else None,
                               reduce_res=reduce_res.hw_view(ranges) if reduce_res is not None else None,
                               reduce_cmd=command, **k0, **k1)

    return _finish(dst, emit, data.shape, dtype or data.dtype, "sbuf", ranges)


@instruction(functional=("data",))
def reciprocal(dst: Tile | None, data: Tile, name: str = "", *, mask: Mask | None = None,
               dtype: Dtype | None = None) -> Tile | None:
    """dst = 1 / data (Vector engine)."""
    return tensor_scalar(dst=dst, data=data, op0="divide", operand0=1.0, reverse0=True, mask=mask, dtype=dtype)


@instruction(functional=("data", "prob"))
def dropout(dst: Tile | None, data: Tile, prob: Operand, name: str = "", *, mask: Mask | None = None,
            dtype: Dtype | None = None) -> Tile | None:
    """dst = data with each element replaced by 0 with probability `prob` (a number or a [P, 1] tile),
    Vector engine; no rescaling. Seed the generator with nl.random_seed."""
    data = issue.tile(data, "data")
    ranges = issue.ranges(mask, data)
    launch = issue.begin()

    def emit(out, _accumulate):
        launch.core.dropout(dst=out.hw_view(ranges), data=data.hw_view(ranges), rate=_scalar_operand(prob, ranges))

    return _finish(dst, emit, data.shape, dtype or data.dtype, "sbuf", ranges)


@instruction(functional=("shape", "value", "dtype"))
def memset(dst: Tile | None, value: float, engine: engine = engine.unknown, name: str = "", *,
           shape: Shape | None = None, dtype: Dtype | None = None, mask: Mask | None = None,
           buffer: object = None) -> Tile | None:
    """Fill a tile with one value. Functional style: memset(shape, value, dtype) returns the tile.
    A block tensor ``(n, par_dim(P), f)`` is filled one logical tile at a time, as AWS's compiler does."""
    ranges = indexing.restrict(mask)
    engine_name = _engine(engine, "dve")
    launch = issue.begin()
    fill = value if isinstance(value, bool) else float(value)

    def emit(out, _accumulate):
        for block in issue.blocks(out):
            launch.core.memset(dst=block.hw_view(ranges), value=fill, engine=engine_name)

    if dst is None and (shape is None or dtype is None):
        raise NKIError("nisa.memset (functional style) needs shape and dtype: memset(shape, value, dtype)")
    return _finish(dst, emit, tuple(shape or ()), dtype, getattr(buffer, "name", buffer) or "sbuf")


@instruction(functional=("expr", "dtype"))
def iota(dst: Tile | None, pattern: list | None = None, offset: int = 0, channel_multiplier: int = 0,
         name: str = "", *, expr: IndexExpr | None = None, dtype: Dtype | None = None,
         mask: Mask | None = None) -> Tile | None:
    """Write constant index values into SBUF with one GpSimd instruction. Both of AWS's signatures:

    - ``iota(expr, dtype, mask=None)`` (beta 1): the values of an affine expression of nl.arange /
      nl.mgrid iterators, e.g. ``nisa.iota(i_p * 512 + i_f, dtype=nl.int32)``, returned as a new tile
      spanning every iterator's axis (``0 * i_p + i_f`` is [P, F], the same row on every partition);
    - ``iota(dst, pattern, offset, channel_multiplier=0)`` (beta 2): dst[p, ...] = offset +
      p * channel_multiplier + sum(index_k * step_k) over ``pattern = [[step, num], ...]`` (outermost
      first; the nums multiply to dst's elements per partition).

    Values are computed in int32 and cast to the destination dtype.
    """
    if dst is not None:
        if expr is not None:
            raise NKIError("iota(dst=..., expr=...) is not an NKI signature: write iota(dst, pattern=[[step, num]], "
                           "offset=..., channel_multiplier=...) or tile = iota(expr, dtype)")
        dst = issue.tile(dst, "dst")
        values = _pattern_values(dst.shape, pattern, offset, channel_multiplier)
        ranges = {}
    else:
        ranges = indexing.restrict(mask)
        if not isinstance(expr, IndexExpr):
            raise NKIError(f"iota: expr must be an affine expression of nl.arange / nl.mgrid iterators, "
                           f"got {type(expr).__name__}")
        iterators = indexing.expr_iterators((expr,))
        sizes = [hi - lo for lo, hi in (ranges.get(it, (0, it.size)) for it in iterators)]
        values = np.broadcast_to(expr.values(iterators, ranges), sizes)
        if values.ndim == 1:
            values = values[None, :] if iterators and iterators[0].axis > 0 else values[:, None]
    launch = issue.begin()

    def emit(out, _accumulate):
        view = out.hw_view(ranges)
        launch.core.iota(dst=view, expr=np.asarray(values).reshape(view.shape))

    return _finish(dst, emit, values.shape, dtype or hw_dtypes.int32, "sbuf")


def _pattern_values(shape, pattern, offset, channel_multiplier) -> np.ndarray:
    """The values of iota's [[step, num], ...] access pattern over a [P, free...] destination."""
    if not pattern or any(len(entry) != 2 for entry in pattern) or len(pattern) > 4:
        raise NKIError(f"iota: pattern must be 1 to 4 [step, num] pairs (outermost first), got {pattern!r}")
    free = math.prod(shape[1:])
    nums = [int(num) for _, num in pattern]
    if math.prod(nums) != free:
        raise ShapeMismatchError(
            f"shape mismatch: iota pattern {pattern} gives {math.prod(nums)} elements per partition, "
            f"dst {tuple(shape)} has {free}", value=math.prod(nums), limit=free)
    values = np.full(nums, int(offset), dtype=np.int64)
    for k, (step, num) in enumerate(pattern):
        axis = [1] * len(nums)
        axis[k] = num
        values = values + int(step) * np.arange(num, dtype=np.int64).reshape(axis)
    partitions = int(channel_multiplier) * np.arange(shape[0], dtype=np.int64)[:, None]
    return (partitions + values.reshape(1, -1)).reshape(shape)


@instruction(functional=("pred", "on_true_tile", "on_false_value"))
def affine_select(dst: Tile | None, pattern: list | None = None, offset: int = 0, channel_multiplier: int = 0,
                  on_true_tile: Tile | None = None, on_false_value: float = 0.0, cmp_op: Op | None = None,
                  name: str = "", *, pred: Predicate | None = None, mask: Mask | None = None,
                  dtype: Dtype | None = None) -> Tile | None:
    """on_true_tile where an affine predicate over the tile's indices holds, else on_false_value: one
    GpSimd instruction that evaluates the predicate as it goes (exact for inf/NaN). Both of AWS's forms:

    - ``affine_select(pred, on_true_tile, on_false_value, mask=None, dtype=None)`` (beta 1), e.g.
      ``nisa.affine_select(i_q >= i_k, scores[i_q, i_k], -9984.0)`` for a causal mask;
    - ``affine_select(dst, pattern, offset, channel_multiplier, on_true_tile, on_false_value,
      cmp_op=nl.equal)`` (beta 2): the predicate is cmp_op(iota value, 0), with the iota value of
      `nisa.iota`'s pattern form.
    """
    on_true = _in_sbuf(on_true_tile, "on_true_tile")
    if pred is None:
        if dst is None:
            raise NKIError("affine_select needs pred= (beta 1) or dst, pattern, ... (beta 2)")
        affine = _pattern_values(issue.tile(dst, "dst").shape, pattern, offset, channel_multiplier)
        _, compare = hw_ops.binary(op_name(cmp_op or "equal"))
        holds = np.asarray(compare(affine, 0), dtype=bool)
        ranges = {}
    else:
        if not isinstance(pred, Predicate):
            raise NKIError("affine_select: pred must be an affine comparison of nl.arange/nl.mgrid iterators")
        ranges = indexing.restrict(mask)
        iterators = indexing.expr_iterators(tuple(e for clause in pred.clauses for e in (clause[0], clause[2])
                                                  if isinstance(e, IndexExpr)))
        holds = np.ones([hi - lo for lo, hi in (ranges.get(it, (0, it.size)) for it in iterators)], dtype=bool)
        compare = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal}
        for left, op, right in pred.clauses:
            difference = (left - right).values(iterators, ranges)
            holds &= compare[op](difference, 0)
    if holds.size != math.prod(on_true.shape):
        raise ShapeMismatchError(
            f"shape mismatch: affine_select predicate over {holds.shape} vs tile {on_true.shape}",
            value=holds.shape, limit=on_true.shape)
    on_false = float(on_false_value)
    launch = issue.begin()

    def emit(out, _accumulate):
        view = out.hw_view(ranges)
        launch.core.affine_select(dst=view, predicate=holds.reshape(view.shape), on_true=on_true.hw_view(ranges),
                                  on_false_value=on_false)

    return _finish(dst, emit, on_true.shape, dtype or on_true.dtype, "sbuf", ranges)


@instruction(functional=("predicate", "on_true", "on_false"))
def select_reduce(dst: Tile | None, predicate: Tile, on_true: Tile, on_false: Operand,
                  reduce_res: Tile | None = None, reduce_cmd: reduce_cmd = reduce_cmd.idle,
                  num_r_dim: int | None = None, reduce_op: Op | None = None, reverse_pred: bool = False,
                  name: str = "", *, mask: Mask | None = None, dtype: Dtype | None = None) -> Tile | None:
    """dst = on_true where predicate is nonzero (zero with reverse_pred), else on_false (a number or a
    [P, 1] tile): one Vector-engine instruction that copies values, exact for inf/NaN. The optional fused
    max-reduction into reduce_res is not simulated."""
    if isinstance(on_false, NkiTensor) and math.prod(on_false.shape[1:]) != 1:
        raise ShapeMismatchError(f"shape mismatch: select_reduce on_false must be a number or a [P, 1] tile, "
                                 f"got {on_false.shape}", value=on_false.shape, limit="[P, 1]")
    if reduce_res is not None:
        raise NKIError("select_reduce(reduce_res=...): the fused max-reduction is not simulated; "
                       "reduce the result with nisa.tensor_reduce")
    predicate, on_true = issue.tile(predicate, "predicate"), issue.tile(on_true, "on_true")
    ranges = issue.ranges(mask, predicate, on_true, on_false)
    launch = issue.begin()

    def emit(out, _accumulate):
        false = on_false.hw_view(ranges) if isinstance(on_false, NkiTensor) else float(on_false)
        launch.core.select(dst=out.hw_view(ranges), predicate=predicate.hw_view(ranges),
                           on_true=on_true.hw_view(ranges), on_false=false, reverse_pred=bool(reverse_pred))

    return _finish(dst, emit, on_true.shape, dtype or on_true.dtype, "sbuf", ranges)


@instruction(functional=("data", "op0", "operand0", "op1", "operand1", "reverse0", "reverse1"))
def scalar_tensor_tensor(dst: Tile | None, data: Tile, op0: Op, operand0: Operand, op1: Op, operand1: Tile,
                         reverse0: bool = False, reverse1: bool = False, name: str = "", *,
                         mask: Mask | None = None, dtype: Dtype | None = None,
                         engine: engine = engine.unknown) -> Tile | None:
    """dst = (data <op0> operand0) <op1> operand1: one Vector-engine instruction; operand0 is a number
    or a [P, 1] tile, operand1 a tile of data's shape."""
    data, other = issue.tile(data, "data"), issue.tile(operand1, "operand1")
    first, second = op_name(op0), op_name(op1)
    ranges = issue.ranges(mask, data, operand0, other)
    engine_name = _engine(engine, "dve")
    launch = issue.begin()

    def emit(out, _accumulate):
        launch.core.scalar_tensor_tensor(dst=out.hw_view(ranges), data=data.hw_view(ranges), op0=first,
                                         operand0=_scalar_operand(operand0, ranges), op1=second,
                                         operand1=other.hw_view(ranges), reverse0=bool(reverse0),
                                         reverse1=bool(reverse1), engine=engine_name)

    return _finish(dst, emit, data.shape, dtype or _promote(data.dtype, other.dtype), "sbuf", ranges)


@instruction(functional=("data",))
def bn_stats(dst: Tile | None, data: Tile, name: str = "", *, mask: Mask | None = None,
             dtype: Dtype | None = None) -> Tile | None:
    """Per partition, the (count, mean, variance * count) of the even and the odd elements of data: a
    [P, 6] fp32 tile (Vector engine; at most nl.tile_size.bn_stats_fmax = 512 elements per partition)."""
    return _statistics("bn_stats", 6, dst, data, mask, dtype)


@instruction(functional=("data",))
def bn_aggr(dst: Tile | None, data: Tile, name: str = "", *, mask: Mask | None = None,
            dtype: Dtype | None = None) -> Tile | None:
    """(mean, variance) per partition, a [P, 2] tile, from one or more bn_stats results side by side
    (Vector engine)."""
    return _statistics("bn_aggr", 2, dst, data, mask, dtype)


def _statistics(opcode: str, width: int, dst, data, mask, dtype):
    data = issue.tile(data, "data")
    ranges = issue.ranges(mask, data)
    launch = issue.begin()

    def emit(out, _accumulate):
        getattr(launch.core, opcode)(dst=out.hw_view(ranges), data=data.hw_view(ranges))

    return _finish(dst, emit, (data.shape[0], width), dtype or hw_dtypes.float32, "sbuf", ranges)

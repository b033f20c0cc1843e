"""`nki.isa`: one function per NeuronCore instruction, issued to the simulated core.

Both call styles of AWS's tutorials work:

- destination style (NKI 0.x "beta 2" and later): ``nisa.nc_matmul(dst=psum, stationary=a, moving=b)``,
  ``nisa.dma_copy(dst=t, src=x)``, ``nisa.tensor_copy(dst=sb, src=psum)``; positional ``(dst, ...)`` too;
- functional style (earlier releases): ``res = nisa.nc_matmul(a, b)``, ``t = nisa.tensor_copy(x)``,
  which return a new tile (see `tensor.NkiTensor.pending`).

A call is recognised as destination style when it names `dst` or passes a tile where the functional
signature has none. Argument names and defaults follow the NKI API reference (nki.isa.*); each function
maps onto the `trnlab.hardware.NeuronCore` method of the same name.
"""
from __future__ import annotations

import enum
import math

import numpy as np

from trnlab.hardware import dtypes as hw_dtypes
from trnlab.hardware import ops as _hw_ops
from trnlab.hardware.errors import MatmulShapeError, MemoryPlacementError, ShapeMismatchError
from trnlab.nki import indexing, runtime
from trnlab.nki.errors import NKIError, locate, site_note, user_site
from trnlab.nki.indexing import IndexExpr
from trnlab.nki.tensor import NkiTensor


class engine(enum.Enum):
    """nki.isa.engine: which engine runs an instruction that several engines can run."""
    unknown = None
    tensor = "pe"
    vector = "dve"
    scalar = "act"
    gpsimd = "pool"
    sync = "sp"


class reduce_cmd(enum.Enum):
    """nki.isa.reduce_cmd: what nisa.activation does with its reduce registers."""
    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3


class dge_mode(enum.Enum):
    """nki.isa.dge_mode: descriptor generation for DMAs (accepted, no effect on the simulation)."""
    unknown = 0
    none = 1
    swdge = 2
    hwdge = 3


class nc_version(enum.Enum):
    gen2 = 2
    gen3 = 3
    gen4 = 4


def get_nc_version() -> nc_version:
    """The NeuronCore generation of the running kernel's target (v2 = Trn1, v3 = Trn2, v4 = Trn3)."""
    gen = str(getattr(runtime.current().core.spec, "generation", "v3")).lower().lstrip("v")
    return {"2": nc_version.gen2, "3": nc_version.gen3, "4": nc_version.gen4}.get(gen, nc_version.gen3)


# -- operator names -----------------------------------------------------------------------
_OP_NAMES: dict = {}        # nl.add -> "add", filled by language.py


def op_name(op) -> str:
    if op is None:
        return None
    if isinstance(op, str):
        return op
    name = _OP_NAMES.get(op)
    if name is not None:
        return name
    if callable(op):
        return op            # NumPy functions: the hardware knows them by their NKI names (np.add -> add)
    raise NKIError(f"unknown operator {op!r}: use nl.add, nl.exp, np.add, ... or an op name")


def _engine(value, default=None):
    if value is None or value is engine.unknown:
        return default
    if isinstance(value, engine):
        return value.value
    return value


# -- shared plumbing ------------------------------------------------------------------------
def _launch():
    """The running launch, with the pending result issued and the caller's kernel line noted."""
    launch = runtime.current()
    if launch.pending is not None:
        launch.flush()
    launch.site = site = user_site(3)
    launch.core.note = site_note(site)   # shown with each instruction in the timeline / Chrome trace
    return launch


def _tile(x, what: str) -> NkiTensor:
    if not isinstance(x, NkiTensor):
        raise NKIError(f"{what} must be a tile (an NkiTensor), got {type(x).__name__}")
    return x


def _operand(x, ranges):
    """A tile's hardware view, a float, or None."""
    if x is None or isinstance(x, (int, float, np.integer, np.floating)):
        return None if x is None else float(x)
    return _tile(x, "operand").hw_view(ranges)


# stands for "rows lo..hi of the partition axis" in a ranges dict (see _ranges)
_PARTITION_ROWS = indexing.Iterator(size=0, axis=0, ndim=0)


def _ranges(mask, *operands) -> dict:
    """The ranges an instruction runs on: its mask, or else the valid rows of its operands.

    A functional result of a masked instruction (e.g. `nl.load(x[...], mask=rows < n)` for the last,
    partial tile) is only written on the rows the mask kept. Later unmasked element-wise calls on it
    run on those rows too, as if the mask had been repeated: the other partitions hold garbage on the
    hardware and are never stored, and the engines cost the same either way (they process all
    partitions in parallel).
    """
    if mask is not None:
        return indexing.restrict(mask)
    valid = None
    for x in operands:
        if isinstance(x, NkiTensor):
            if x._ap is not None:
                return {}
            rows = x._valid
            if rows is not None:
                valid = rows if valid is None else (max(valid[0], rows[0]), min(valid[1], rows[1]))
    return {} if valid is None else {_PARTITION_ROWS: valid}


def _produce(shape, dtype, buffer, emit, accumulates=False, ranges=None) -> NkiTensor:
    """A pending tile: `emit(dst, accumulate)` issues its instruction once the program says where."""
    launch = runtime.current()
    core, note, site = launch.core, launch.core.note, launch.site

    def emit_at_call_site(out, accumulate):
        core.note = note              # the instruction belongs to the line that asked for it
        try:
            emit(out, accumulate)
        except Exception as error:
            raise locate(error, site)

    emit_at_call_site.site = site
    emit_at_call_site.accumulates = accumulates
    result = NkiTensor.pending(shape, hw_dtypes.as_dtype(dtype), buffer, emit_at_call_site, launch)
    if ranges:
        rows = [bounds for it, bounds in ranges.items() if it.axis == 0]
        if rows:
            result._valid = rows[0]
    return result


def _refills(args: tuple, kwargs: dict, functional_names: tuple) -> bool:
    """True if a keyword repeats a slot the positional arguments already filled in the functional
    signature: then the first positional argument is `dst` (``nisa.tensor_copy(out, src=x)``)."""
    return bool(args) and any(name in kwargs for name in functional_names[:len(args)])


def _bind(args: tuple, kwargs: dict, names: tuple) -> list:
    """The values of `names`, given positionally first and by keyword after."""
    return list(args[:len(names)]) + [kwargs.get(n) for n in names[len(args):]]


def _is_tile(x) -> bool:
    return isinstance(x, NkiTensor)


# -- Tensor engine ---------------------------------------------------------------------------
def nc_matmul(*args, **kwargs):
    """dst[M, N] (+)= stationary[K, M].T @ moving[K, N] on the Tensor engine (fp32 in PSUM).

    Destination style: ``nc_matmul(dst, stationary, moving, ..., accumulate=None)``; with
    accumulate=None the result is added to what the PSUM region already holds (the first matmul into
    a fresh region overwrites it). Functional style: ``nc_matmul(stationary, moving)`` returns the
    PSUM tile, and ``psum_tile += nisa.nc_matmul(a, b)`` accumulates in place.
    """
    destination = (_refills(args, kwargs, ('stationary', 'moving')) or
                   "dst" in kwargs or (len(args) >= 3 and _is_tile(args[2])))
    if destination:
        dst, stationary, moving = _bind(args, kwargs, ("dst", "stationary", "moving"))
        accumulate = kwargs.get("accumulate")
    else:
        stationary, moving = _bind(args, kwargs, ("stationary", "moving"))
    mask = kwargs.get("mask")
    if len(kwargs) > 3:
        for flag in ("is_stationary_onezero", "is_moving_onezero", "is_transpose"):
            if kwargs.get(flag):
                raise NKIError(f"nc_matmul({flag}=True) is not simulated")
    launch = _launch()
    ranges = indexing.restrict(mask)
    stationary, moving = _tile(stationary, "stationary"), _tile(moving, "moving")

    def emit(out: NkiTensor, accumulate_flag):
        # accumulate=None: the core adds onto a PSUM region already written, overwrites a fresh one
        launch.core.nc_matmul(dst=out.hw_view(ranges), stationary=stationary.hw_view(ranges),
                              moving=moving.hw_view(ranges), accumulate=accumulate_flag)

    if destination:
        emit(_tile(dst, "dst"), accumulate)
        return None
    # the result tile is allocated before the instruction runs: check the tile limits first, so a too
    # wide moving tile is reported as the matmul rule it breaks rather than as a PSUM bank overflow
    spec = launch.core.spec
    M, N = math.prod(stationary.shape[1:]), math.prod(moving.shape[1:])
    if M > spec.stationary_fmax or N > spec.moving_fmax:
        raise MatmulShapeError(
            f"matmul tile shape: stationary {stationary.shape} x moving {moving.shape} gives M={M}, N={N}; "
            f"the limits are M <= {spec.stationary_fmax} (gemm_stationary_fmax), N <= {spec.moving_fmax} "
            f"(gemm_moving_fmax)", value=(M, N), limit=(spec.stationary_fmax, spec.moving_fmax))
    return _produce((M, N), hw_dtypes.float32, "psum", emit, accumulates=True)


def nc_transpose(*args, **kwargs):
    """Swap a tile's partition and free axes: dst[F, P] = data[P, F] (Tensor engine, into PSUM)."""
    destination = (_refills(args, kwargs, ('data',)) or
                   "dst" in kwargs or (len(args) >= 2 and _is_tile(args[1])))
    bound = dict(zip(("dst", "data") if destination else ("data",), args)) | kwargs
    data = _tile(bound["data"], "data")
    ranges = indexing.restrict(bound.get("mask"))
    launch = _launch()

    def emit(out, _accumulate):
        launch.core.nc_transpose(dst=out.hw_view(ranges), src=data.hw_view(ranges))

    if destination:
        emit(_tile(bound["dst"], "dst"), None)
        return None
    dtype = bound.get("dtype") or data.dtype
    return _produce((data.shape[-1], data.shape[0]), dtype, "psum", emit)


# -- data movement -----------------------------------------------------------------------------
def dma_copy(*args, dst=None, src=None, mask=None, dge_mode=None, oob_mode=None, name=None, **kwargs):
    """Copy src to dst with a DMA engine (HBM <-> SBUF, SBUF <-> SBUF); PSUM -> HBM is refused."""
    if args:
        dst, src = (args + (None, None))[:2] if dst is None else (dst, args[0])
    dst, src = _tile(dst, "dst"), _tile(src, "src")
    if dst._gather is not None:
        raise NKIError("indirect DMA store (a scatter: dst indexed by a tile of indices) is not simulated; "
                       "trnlab simulates the indirect load (gather) only")
    launch = _launch()
    if src._gather is not None:
        if mask is not None:
            raise NKIError("an indirect DMA (src indexed by a tile of indices) with mask= is not simulated")
        launch.core.dma_gather(dst=dst.hw_view(), src=src.hw_view(), indices=src._gather.hw_view())
        return
    ranges = _ranges(mask, src) if mask is not None or src._valid is not None else None
    launch.core.dma_copy(dst=dst.hw_view(ranges), src=src.hw_view(ranges))


def dma_transpose(*args, **kwargs):
    """Transpose a 2-D tile while moving it with a DMA: [A, B] -> [B, A] (HBM or SBUF source)."""
    destination = (_refills(args, kwargs, ('src',)) or
                   "dst" in kwargs or (len(args) >= 2 and _is_tile(args[1])))
    bound = dict(zip(("dst", "src") if destination else ("src",), args)) | kwargs
    src = _tile(bound["src"], "src")
    if src.ndim != 2 or src._ap is not None:
        raise NKIError("dma_transpose: trnlab supports 2-D sources indexed with ints and slices")
    launch = _launch()

    # element indices of the source on its owner tensor, read column-major: [B, A]
    owner = src._base()
    base = src._index if src._index is not None else tuple(slice(0, n, 1) for n in owner.shape)
    ranges = [np.arange(e.start, e.stop, e.step) for e in base if isinstance(e, slice)]
    shaped = iter((ranges[0][None, :], ranges[1][:, None]))
    transposed_index = tuple(next(shaped) if isinstance(e, slice) else e for e in base)

    def emit(out, _accumulate):
        launch.core.dma_copy(dst=out.hw_view(), src=src._hw[transposed_index])

    if destination:
        emit(_tile(bound["dst"], "dst"), None)
        return None
    return _produce((src.shape[1], src.shape[0]), src.dtype, "sbuf", emit)


def tensor_copy(*args, **kwargs):
    """Copy (and cast to dst's dtype) a tile on an on-chip engine; the way out of PSUM."""
    destination = (_refills(args, kwargs, ('src',)) or
                   "dst" in kwargs or (len(args) >= 2 and _is_tile(args[1])))
    bound = dict(zip(("dst", "src") if destination else ("src",), args)) | kwargs
    src = _tile(bound["src"], "src")
    ranges = _ranges(bound.get("mask"), src)
    engine_name = _engine(bound.get("engine"), "dve")
    launch = _launch()

    def emit(out, _accumulate):
        if out.buffer not in ("sbuf", "psum") or src.buffer not in ("sbuf", "psum"):
            raise MemoryPlacementError(
                f"operand memory: tensor_copy runs on an on-chip engine and needs SBUF/PSUM operands, got "
                f"{src.buffer} -> {out.buffer}; use nisa.dma_copy / nl.load / nl.store for HBM",
                value=(src.buffer, out.buffer), limit=("sbuf", "psum"))
        launch.core.tensor_copy(dst=out.hw_view(ranges), src=src.hw_view(ranges), engine=engine_name)

    if destination:
        emit(_tile(bound["dst"], "dst"), None)
        return None
    return _produce(src.shape, bound.get("dtype") or src.dtype, "sbuf", emit, ranges=ranges)


# -- Vector / Scalar / GpSimd -------------------------------------------------------------
def tensor_tensor(*args, **kwargs):
    """dst = data1 <op> data2, element-wise (Vector engine by default)."""
    destination = (_refills(args, kwargs, ('data1', 'data2', 'op')) or
                   "dst" in kwargs or (len(args) >= 3 and _is_tile(args[2])) or len(args) >= 4)
    bound = dict(zip(("dst", "data1", "data2", "op") if destination else ("data1", "data2", "op"), args)) | kwargs
    data1, data2 = _tile(bound["data1"], "data1"), _tile(bound["data2"], "data2")
    op = op_name(bound["op"])
    ranges = _ranges(bound.get("mask"), data1, data2)
    engine_name = _engine(bound.get("engine"), "dve")
    launch = _launch()

    def emit(out, _accumulate):
        launch.core.tensor_tensor(dst=out.hw_view(ranges), data1=data1.hw_view(ranges),
                                  data2=data2.hw_view(ranges), op=op, **_engine_kw(engine_name))

    if destination:
        emit(_tile(bound["dst"], "dst"), None)
        return None
    dtype = bound.get("dtype") or _promote(data1.dtype, data2.dtype)
    return _produce(data1.shape, dtype, "sbuf", emit, ranges=ranges)


def tensor_scalar(*args, **kwargs):
    """dst = (data <op0> operand0) <op1> operand1; operands are numbers or [P, 1] tiles."""
    destination = (_refills(args, kwargs, ('data', 'op0', 'operand0')) or
                   "dst" in kwargs or (len(args) >= 2 and _is_tile(args[1])))
    names = ("data", "op0", "operand0", "reverse0", "op1", "operand1", "reverse1")
    bound = dict(zip((("dst",) + names) if destination else names, args)) | kwargs
    data = _tile(bound["data"], "data")
    op0, op1 = op_name(bound["op0"]), op_name(bound.get("op1"))
    operand0, operand1 = bound["operand0"], bound.get("operand1")
    reverse0, reverse1 = bool(bound.get("reverse0", False)), bool(bound.get("reverse1", False))
    ranges = _ranges(bound.get("mask"), data, operand0, operand1)
    engine_name = _engine(bound.get("engine"), "dve")
    launch = _launch()

    def emit(out, _accumulate):
        launch.core.tensor_scalar(dst=out.hw_view(ranges), data=data.hw_view(ranges), op0=op0,
                                  operand0=_scalar_operand(operand0, ranges), reverse0=reverse0, op1=op1,
                                  operand1=_scalar_operand(operand1, ranges), reverse1=reverse1,
                                  engine=engine_name)

    if destination:
        emit(_tile(bound["dst"], "dst"), None)
        return None
    return _produce(data.shape, bound.get("dtype") or data.dtype, "sbuf", emit, ranges=ranges)


def tensor_reduce(*args, **kwargs):
    """Reduce `data` along free axes with `op` (add, maximum, minimum, ...) on the Vector engine."""
    destination = "dst" in kwargs or (len(args) >= 1 and _is_tile(args[0]))
    names = ("op", "data", "axis", "negate", "keepdims")
    bound = dict(zip((("dst",) + names) if destination else names, args)) | kwargs
    data = _tile(bound["data"], "data")
    op = op_name(bound["op"])
    axis = bound["axis"]
    axis = tuple(axis) if isinstance(axis, (list, tuple)) else (int(axis),)
    if 0 in axis:
        raise NKIError("tensor_reduce: axis 0 is the partition axis; reductions run along free axes only "
                       "(use nl.transpose or nisa.nc_matmul with a ones vector to reduce across partitions)")
    keepdims, negate = bool(bound.get("keepdims", False)), bool(bound.get("negate", False))
    ranges = _ranges(bound.get("mask"), data)
    launch = _launch()

    def emit(out, _accumulate):
        # trnlab keeps reduced axes as size-1 dims in memory, so [P] and [P, 1] results look alike
        view = out.hw_view(ranges)
        launch.core.tensor_reduce(dst=view, data=data.hw_view(ranges), op=op, axis=axis, negate=negate,
                                  keepdims=len(view.shape) == data.ndim)

    if destination:
        emit(_tile(bound["dst"], "dst"), None)
        return None
    kept = tuple(1 if a in axis else n for a, n in enumerate(data.shape))
    shape = kept if keepdims else tuple(n for a, n in enumerate(data.shape) if a not in axis)
    return _produce_with_storage(shape, kept, bound.get("dtype") or data.dtype, emit, ranges=ranges)


def activation(*args, **kwargs):
    """dst = op(data * scale + bias) on the Scalar engine, optionally summing the result along the free
    axes in the engine's reduce registers (reduce_op must be nl.add): reduce_cmd = nisa.reduce_cmd.reset,
    reduce (accumulate over several instructions), reset_reduce or idle; a reduce_res [P, 1] tile
    receives the registers. With reduce_res and no reduce_cmd, reduce_res gets this instruction's own
    sums (as nisa.activation_reduce); AWS's default is idle, so pass reduce_cmd explicitly in code meant
    for the device."""
    return _activation(args, kwargs, ("op", "data", "bias", "scale", "reduce_op", "reduce_res", "reduce_cmd"))


def activation_reduce(*args, **kwargs):
    """nisa.activation with reduce_cmd=reset_reduce: one Scalar-engine instruction that also sums
    the result along the free axes into reduce_res (AWS keeps it for older kernels)."""
    return _activation(args, kwargs, ("op", "data", "reduce_op", "reduce_res", "bias", "scale"))


def _activation(args, kwargs, names):
    destination = "dst" in kwargs or (len(args) >= 1 and _is_tile(args[0]))
    bound = dict(zip((("dst",) + names) if destination else names, args)) | kwargs
    data = _tile(bound["data"], "data")
    op = op_name(bound["op"])
    bias, scale = bound.get("bias"), bound.get("scale", 1.0)
    reduce_res, reduce_op = bound.get("reduce_res"), bound.get("reduce_op")
    command = bound.get("reduce_cmd")
    if isinstance(command, reduce_cmd):
        command = command.name
    if names[2] == "reduce_op":          # activation_reduce: reset_reduce by definition
        command = "reset_reduce"
    if reduce_res is not None:
        reduce_res = _tile(reduce_res, "reduce_res")
    ranges = _ranges(bound.get("mask"), data, bias, scale)
    launch = _launch()

    def emit(out, _accumulate):
        launch.core.activation(dst=out.hw_view(ranges), data=data.hw_view(ranges), op=op,
                               scale=_scalar_operand(scale, ranges), bias=_operand(bias, ranges),
                               reduce_op=op_name(reduce_op) if reduce_op is not None else None,
                               reduce_res=reduce_res.hw_view(ranges) if reduce_res is not None else None,
                               reduce_cmd=command)

    if destination:
        emit(_tile(bound["dst"], "dst"), None)
        return None
    return _produce(data.shape, bound.get("dtype") or data.dtype, "sbuf", emit, ranges=ranges)


def reciprocal(*args, **kwargs):
    """dst = 1 / data (Vector engine)."""
    destination = _refills(args, kwargs, ('data',)) or "dst" in kwargs or len(args) >= 2
    bound = dict(zip(("dst", "data") if destination else ("data",), args)) | kwargs
    call = dict(op0="divide", operand0=1.0, reverse0=True, mask=bound.get("mask"))
    if destination:
        return tensor_scalar(dst=bound["dst"], data=bound["data"], **call)
    return tensor_scalar(bound["data"], dtype=bound.get("dtype"), **call)


def memset(*args, **kwargs):
    """Fill a tile with one value. Functional style: memset(shape, value, dtype) returns the tile."""
    destination = "dst" in kwargs or (len(args) >= 1 and _is_tile(args[0]))
    names = ("dst", "value") if destination else ("shape", "value", "dtype")
    bound = dict(zip(names, args)) | kwargs
    value = bound["value"]
    ranges = indexing.restrict(bound.get("mask"))
    engine_name = _engine(bound.get("engine"), "dve")
    launch = _launch()

    def emit(out, _accumulate):
        launch.core.memset(dst=out.hw_view(ranges), value=float(value) if not isinstance(value, bool) else value,
                           engine=engine_name)

    if destination:
        emit(_tile(bound["dst"], "dst"), None)
        return None
    buffer = bound.get("buffer", "sbuf")
    return _produce(tuple(bound["shape"]), bound["dtype"], getattr(buffer, "name", buffer), emit)


def iota(*args, **kwargs):
    """Write constant index values into SBUF with one GpSimd instruction. Both of AWS's signatures:

    - ``iota(expr, dtype, mask=None)`` (NKI 0.x): the values of an affine expression of nl.arange /
      nl.mgrid iterators, e.g. ``nisa.iota(i_p * 512 + i_f, dtype=nl.int32)``, returned as a new tile
      spanning every iterator's axis (``0 * i_p + i_f`` is [P, F], the same row on every partition);
    - ``iota(dst, pattern, offset, channel_multiplier=0)`` (current NKI): dst[p, ...] = offset +
      p * channel_multiplier + sum(index_k * step_k) over ``pattern = [[step, num], ...]`` (outermost
      first; the nums multiply to dst's elements per partition).

    Values are computed in int32 and cast to the destination dtype.
    """
    destination = "dst" in kwargs or (len(args) >= 1 and _is_tile(args[0]))
    names = ("dst", "pattern", "offset", "channel_multiplier") if destination else ("expr", "dtype")
    bound = dict(zip(names, args)) | kwargs
    if destination and "expr" in bound:
        raise NKIError("iota(dst=..., expr=...) is not an NKI signature: write iota(dst, pattern=[[step, num]], "
                       "offset=..., channel_multiplier=...) or tile = iota(expr, dtype)")
    if destination:
        dst = _tile(bound["dst"], "dst")
        values = _pattern_values(dst.shape, bound.get("pattern"), bound.get("offset", 0),
                                 bound.get("channel_multiplier", 0))
        ranges = {}
    else:
        expr = bound["expr"]
        ranges = indexing.restrict(bound.get("mask"))
        if not isinstance(expr, IndexExpr):
            raise NKIError(f"iota: expr must be an affine expression of nl.arange / nl.mgrid iterators, "
                           f"got {type(expr).__name__}")
        iterators = indexing.expr_iterators((expr,))
        sizes = [hi - lo for lo, hi in (ranges.get(it, (0, it.size)) for it in iterators)]
        values = np.broadcast_to(expr.values(iterators, ranges), sizes)
        if values.ndim == 1:
            values = values[None, :] if iterators and iterators[0].axis > 0 else values[:, None]
    launch = _launch()

    def emit(out, _accumulate):
        view = out.hw_view(ranges)
        launch.core.iota(dst=view, expr=np.asarray(values).reshape(view.shape))

    if destination:
        emit(dst, None)
        return None
    return _produce(values.shape, bound.get("dtype") or hw_dtypes.int32, "sbuf", emit)


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


def _write_constant(dst: NkiTensor, values: np.ndarray) -> None:
    """Write a compile-time constant pattern into an SBUF tile with one GpSimd iota (trnlab-internal:
    nl.shared_identity_matrix; AWS's compiler materialises such constants itself)."""
    launch = _launch()
    launch.core.iota(dst=dst.hw_view(), expr=values)


def affine_select(*args, **kwargs):
    """on_true_tile where an affine predicate over the tile's indices holds, else on_false_value: one
    GpSimd instruction that evaluates the predicate as it goes (exact for inf/NaN). Both of AWS's forms:

    - ``affine_select(pred, on_true_tile, on_false_value, mask=None, dtype=None)`` (NKI 0.x), e.g.
      ``nisa.affine_select(i_q >= i_k, scores[i_q, i_k], -9984.0)`` for a causal mask;
    - ``affine_select(dst, pattern, offset, channel_multiplier, on_true_tile, on_false_value,
      cmp_op=nl.equal)`` (current NKI): the predicate is cmp_op(iota value, 0), with the iota value of
      `nisa.iota`'s pattern form.
    """
    if "pattern" in kwargs or (args and _is_tile(args[0])):
        names = ("dst", "pattern", "offset", "channel_multiplier", "on_true_tile", "on_false_value", "cmp_op")
        bound = dict(zip(names, args)) | kwargs
        dst, on_true = _tile(bound["dst"], "dst"), _tile(bound["on_true_tile"], "on_true_tile")
        affine = _pattern_values(dst.shape, bound["pattern"], bound.get("offset", 0),
                                 bound.get("channel_multiplier", 0))
        _, compare = _hw_ops.binary(op_name(bound.get("cmp_op") or "equal"))
        holds = np.asarray(compare(affine, 0), dtype=bool)
        ranges = {}
    else:
        bound = dict(zip(("pred", "on_true_tile", "on_false_value"), args)) | kwargs
        pred, on_true = bound["pred"], _tile(bound["on_true_tile"], "on_true_tile")
        dst = bound.get("dst")
        if not isinstance(pred, indexing.Predicate):
            raise NKIError("affine_select: pred must be an affine comparison of nl.arange/nl.mgrid iterators")
        ranges = indexing.restrict(bound.get("mask"))
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
    on_false = float(bound["on_false_value"])
    launch = _launch()

    def emit(out, _accumulate):
        view = out.hw_view(ranges)
        launch.core.affine_select(dst=view, predicate=holds.reshape(view.shape), on_true=on_true.hw_view(ranges),
                                  on_false_value=on_false)

    if dst is not None:
        emit(_tile(dst, "dst"), None)
        return None
    return _produce(on_true.shape, bound.get("dtype") or on_true.dtype, "sbuf", emit, ranges=ranges)


def select_reduce(*args, **kwargs):
    """dst = on_true where predicate is nonzero (zero with reverse_pred), else on_false (a number or a
    [P, 1] tile): one Vector-engine instruction that copies values, exact for inf/NaN. The optional fused
    max-reduction into reduce_res is not simulated."""
    on_false = kwargs.get("on_false", args[3] if len(args) >= 4 else None)
    if _is_tile(on_false) and math.prod(on_false.shape[1:]) != 1:
        raise ShapeMismatchError(f"shape mismatch: select_reduce on_false must be a number or a [P, 1] tile, "
                                 f"got {on_false.shape}", value=on_false.shape, limit="[P, 1]")
    return _select(*args, **kwargs)


def _select(*args, **kwargs):
    """select_reduce's select, also with an on_false tile of on_true's shape (how nl.where is lowered)."""
    names = ("predicate", "on_true", "on_false")
    destination = "dst" in kwargs or (len(args) >= 4 and _is_tile(args[0]))
    bound = dict(zip((("dst",) + names) if destination else names, args)) | kwargs
    if bound.get("reduce_res") is not None:
        raise NKIError("select_reduce(reduce_res=...): the fused max-reduction is not simulated; "
                       "reduce the result with nisa.tensor_reduce")
    predicate, on_true, on_false = (_tile(bound["predicate"], "predicate"), _tile(bound["on_true"], "on_true"),
                                    bound["on_false"])
    reverse = bool(bound.get("reverse_pred", False))
    ranges = _ranges(bound.get("mask"), predicate, on_true, on_false)
    launch = _launch()

    def emit(out, _accumulate):
        false = on_false.hw_view(ranges) if _is_tile(on_false) else float(on_false)
        launch.core.select(dst=out.hw_view(ranges), predicate=predicate.hw_view(ranges),
                           on_true=on_true.hw_view(ranges), on_false=false, reverse_pred=reverse)

    if destination:
        emit(_tile(bound["dst"], "dst"), None)
        return None
    return _produce(on_true.shape, bound.get("dtype") or on_true.dtype, "sbuf", emit, ranges=ranges)


def scalar_tensor_tensor(*args, **kwargs):
    """dst = (data <op0> operand0) <op1> operand1: one Vector-engine instruction; operand0 is a number
    or a [P, 1] tile, operand1 a tile of data's shape."""
    destination = (_refills(args, kwargs, ('data', 'op0', 'operand0')) or
                   "dst" in kwargs or (len(args) >= 2 and _is_tile(args[1])))
    names = ("data", "op0", "operand0", "op1", "operand1", "reverse0", "reverse1")
    bound = dict(zip((("dst",) + names) if destination else names, args)) | kwargs
    data, other = _tile(bound["data"], "data"), _tile(bound["operand1"], "operand1")
    op0, op1 = op_name(bound["op0"]), op_name(bound["op1"])
    operand0 = bound["operand0"]
    reverse0, reverse1 = bool(bound.get("reverse0", False)), bool(bound.get("reverse1", False))
    ranges = _ranges(bound.get("mask"), data, operand0, other)
    engine_name = _engine(bound.get("engine"), "dve")
    launch = _launch()

    def emit(out, _accumulate):
        launch.core.scalar_tensor_tensor(dst=out.hw_view(ranges), data=data.hw_view(ranges), op0=op0,
                                         operand0=_scalar_operand(operand0, ranges), op1=op1,
                                         operand1=other.hw_view(ranges), reverse0=reverse0,
                                         reverse1=reverse1, engine=engine_name)

    if destination:
        emit(_tile(bound["dst"], "dst"), None)
        return None
    dtype = bound.get("dtype") or _promote(data.dtype, other.dtype)
    return _produce(data.shape, dtype, "sbuf", emit, ranges=ranges)


def bn_stats(*args, **kwargs):
    """Per partition, the (count, mean, variance * count) of the even and the odd elements of data: a
    [P, 6] fp32 tile (Vector engine; at most nl.tile_size.bn_stats_fmax = 512 elements per partition).
    ``bn_stats(dst, data)`` or functional ``stats = bn_stats(data, dtype=...)``."""
    return _statistics("bn_stats", 6, args, kwargs)


def bn_aggr(*args, **kwargs):
    """(mean, variance) per partition, a [P, 2] tile, from one or more bn_stats results side by side
    (Vector engine). ``bn_aggr(dst, data)`` or functional ``mean_var = bn_aggr(data, dtype=...)``."""
    return _statistics("bn_aggr", 2, args, kwargs)


def _statistics(opcode: str, width: int, args, kwargs):
    destination = "dst" in kwargs or len(args) >= 2
    bound = dict(zip(("dst", "data") if destination else ("data",), args)) | kwargs
    data = _tile(bound["data"], "data")
    ranges = _ranges(bound.get("mask"), data)
    launch = _launch()

    def emit(out, _accumulate):
        getattr(launch.core, opcode)(dst=out.hw_view(ranges), data=data.hw_view(ranges))

    if destination:
        emit(_tile(bound["dst"], "dst"), None)
        return None
    return _produce((data.shape[0], width), bound.get("dtype") or hw_dtypes.float32, "sbuf", emit, ranges=ranges)


# -- helpers -------------------------------------------------------------------------------------
def _engine_kw(engine_name):
    return {} if engine_name in (None, "dve") else {"engine": engine_name}


def _scalar_operand(x, ranges):
    if x is None or isinstance(x, (int, float, np.integer, np.floating)):
        return x if x is None else float(x)
    tile = _tile(x, "operand")
    view = tile.hw_view(ranges)
    if len(view.shape) < 1:
        raise ShapeMismatchError("a per-partition operand must be a [P, 1] tile", value=view.shape, limit="[P, 1]")
    return view


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


def _produce_with_storage(shape, storage_shape, dtype, emit, ranges=None) -> NkiTensor:
    """A pending tile whose memory keeps reduced axes (storage_shape) while it reports `shape`."""
    t = _produce(tuple(storage_shape), dtype, "sbuf", emit, ranges=ranges)
    t._storage = tuple(storage_shape)
    t.shape = tuple(shape)
    return t

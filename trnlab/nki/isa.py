"""`nki.isa`: one function per NeuronCore instruction, issued to the simulated core.

Both of AWS's call styles work, through ONE binder and ONE signature table (`SIGNATURES`):

- destination style (NKI "beta 2", 0.3 and later): ``nisa.nc_matmul(dst=psum, stationary=a, moving=b)``,
  ``nisa.tensor_copy(dst=sb, src=psum)``, or positional ``nisa.tensor_copy(sb, psum)``;
- functional style (``neuronxcc.nki``, "beta 1"): ``res = nisa.nc_matmul(a, b)``, ``t = nisa.tensor_copy(x)``,
  which return a new tile (pending until the program shows where it goes, see tensor.py).

Each instruction is written once, as a typed Python function in AWS's destination-style signature
(``dst`` first; parameters that only the functional style has, such as ``dtype``, ``mask`` or
memset's ``shape``, are keyword-only). The `instruction` decorator records its signature together
with the positional order of the functional style, and `Signature.bind` decides the style of a call:

1. ``dst=`` given, or more positional arguments than the functional order has -> destination;
2. a keyword repeats a slot the positional arguments already filled in the functional order
   (``nisa.tensor_copy(out, src=x)``) -> destination;
3. a positional argument does not fit the functional slot it would fill (a tile where the functional
   signature has an operator, a flag or a shape; a number where it has an operator or a tile) ->
   destination; otherwise functional.

Unknown parameters are refused with the list of the instruction's parameters. Argument names and
defaults follow the NKI API reference (nki.isa.*); each function maps onto the `trnlab.hardware.NeuronCore`
method of the same name.
"""
from __future__ import annotations

import enum
import functools
import inspect
import math
from dataclasses import dataclass
from typing import Callable, Union

import numpy as np

from trnlab.hardware import dtypes as hw_dtypes
from trnlab.hardware import ops as hw_ops
from trnlab.hardware.errors import MatmulShapeError, MemoryPlacementError, ShapeMismatchError
from trnlab.nki import indexing, issue, runtime
from trnlab.nki import mask_split as _mask_split
from trnlab.nki import perf_mode as _perf_mode
from trnlab.nki.perf_mode import matmul_perf_mode  # noqa: F401  (nisa.matmul_perf_mode)
from trnlab.nki.errors import NKIError
from trnlab.nki.indexing import IndexExpr, Predicate
from trnlab.nki.tensor import NkiTensor

# -- the types of instruction parameters (annotations; the binder reads their names) -----------------
Tile = NkiTensor                          # a tile (or tensor) operand
Operand = Union[NkiTensor, float]         # a [P, 1] tile broadcast along the free axis, or a number
Op = Union[Callable, str]                 # an operator: nl.add, np.add, or its name "add"
Dtype = object                            # a NumPy dtype or an nl dtype (nl.bfloat16, ...)
Mask = Predicate                          # an affine predicate of nl.arange / nl.mgrid iterators
Shape = tuple


class engine(enum.Enum):
    """nki.isa.engine: which engine runs an instruction that several engines can run."""
    unknown = None
    tensor = "pe"
    vector = "dve"
    scalar = "act"
    gpsimd = "pool"
    sync = "sp"


# beta-1 names of the engines (``engine=nisa.vector_engine``)
unknown_engine, tensor_engine, vector_engine = engine.unknown, engine.tensor, engine.vector
scalar_engine, gpsimd_engine = engine.scalar, engine.gpsimd


class reduce_cmd(enum.Enum):
    """nki.isa.reduce_cmd: what an instruction does with its engine's reduce registers."""
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


class oob_mode(enum.Enum):
    """nki.isa.oob_mode: what a dynamic DMA does out of bounds (accepted; trnlab always raises)."""
    error = 0
    skip = 1


class nc_version(enum.IntEnum):
    """nki.isa.nc_version, ordered: ``nisa.get_nc_version() >= nisa.nc_version.gen3``."""
    gen2 = 2
    gen3 = 3
    gen4 = 4


def get_nc_version() -> nc_version:
    """The NeuronCore generation of the running kernel's target (v2 = Trn1, v3 = Trn2, v4 = Trn3)."""
    gen = str(getattr(runtime.current().core.spec, "generation", "v3")).lower().lstrip("v")
    return {"2": nc_version.gen2, "3": nc_version.gen3, "4": nc_version.gen4}.get(gen, nc_version.gen3)


# -- operators ----------------------------------------------------------------------------------------
def op_name(op: Op | None) -> str | Callable | None:
    """The hardware's name of an operator: nl.add (which carries `nki_op`), np.add or "add"."""
    if op is None or isinstance(op, str):
        return op
    name = getattr(op, "nki_op", None)
    if name is not None:
        return name
    if callable(op):
        return op            # NumPy functions: the hardware knows them by their NKI names (np.add -> add)
    raise NKIError(f"unknown operator {op!r}: use nl.add, nl.exp, np.add, ... or an op name")


def _engine(value, default: str | None = None) -> str | None:
    if value is None or value is engine.unknown:
        return default
    if isinstance(value, engine):
        return value.value
    return value


# -- the signature table and the binder ------------------------------------------------------------------
_KINDS = {"Tile": "tile", "Operand": "operand", "Op": "op", "Mask": "mask"}


def _kind(annotation) -> str:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    head = text.split("|")[0].strip()
    return _KINDS.get(head, "other")


def _fits(kind: str, value) -> bool:
    """Can `value` fill a functional-style slot of this kind? (a None always fits)"""
    if value is None:
        return True
    is_tile, is_number = isinstance(value, NkiTensor), issue.is_number(value)
    if kind == "tile":
        return not is_number
    if kind == "op":
        return not is_tile and not is_number
    if kind == "operand":
        return True
    return not is_tile


@dataclass(frozen=True)
class Signature:
    """One instruction's parameters in both call styles (a row of `SIGNATURES`)."""
    name: str
    destination: tuple[str, ...]          # positional order, destination style: dst first
    functional: tuple[str, ...] | None    # positional order, functional style (None: no functional style)
    kinds: dict                           # parameter -> "tile" | "operand" | "op" | "mask" | "other"
    required: tuple[str, ...]             # parameters without a default (besides dst)
    parameters: tuple[str, ...]           # every parameter name

    @classmethod
    def of(cls, impl, functional) -> "Signature":
        params = inspect.signature(impl).parameters.values()
        positional = tuple(p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD)
        if positional[:1] != ("dst",):
            raise TypeError(f"nki.isa.{impl.__name__}: an instruction's first parameter is dst")
        return cls(name=impl.__name__, destination=positional,
                   functional=None if functional is None else tuple(functional),
                   kinds={p.name: _kind(p.annotation) for p in params},
                   required=tuple(p.name for p in params if p.default is p.empty and p.name != "dst"),
                   parameters=tuple(p.name for p in params))

    def is_destination(self, args: tuple, kwargs: dict) -> bool:
        functional = self.functional
        if functional is None or "dst" in kwargs or len(args) > len(functional):
            return True
        if any(name in kwargs for name in functional[:len(args)]):
            return True
        return not all(_fits(self.kinds[name], a) for name, a in zip(functional, args))

    def bind(self, args: tuple, kwargs: dict) -> dict:
        """Keyword arguments for the implementation: every parameter by name, dst=None in functional style."""
        destination = self.is_destination(args, kwargs)
        order = self.destination if destination else self.functional
        if len(args) > len(order):
            raise NKIError(f"nisa.{self.name} takes at most {len(order)} positional arguments "
                           f"({', '.join(order)}), got {len(args)}")
        bound = dict(zip(order, args))
        for name, value in kwargs.items():
            if name not in self.parameters:
                raise NKIError(f"nisa.{self.name} has no parameter {name!r}; its parameters: "
                               f"{', '.join(self.parameters)}")
            if name in bound:
                raise NKIError(f"nisa.{self.name} got two values for {name!r} (positional and keyword)")
            bound[name] = value
        bound.setdefault("dst", None)
        missing = [name for name in self.required if name not in bound]
        if missing:
            style = "destination" if destination else "functional"
            raise NKIError(f"nisa.{self.name} ({style} style): missing required parameter(s) "
                           f"{', '.join(missing)}; signature: {self.name}({', '.join(order)}, ...)")
        return bound


SIGNATURES: dict[str, Signature] = {}   # instruction name -> its signature in both call styles


def instruction(functional: tuple[str, ...] | None):
    """Register an instruction (written in destination style) with its functional positional order."""
    def wrap(impl):
        signature = Signature.of(impl, functional)
        SIGNATURES[impl.__name__] = signature

        @functools.wraps(impl)
        def call(*args, **kwargs):
            bound = signature.bind(args, kwargs)
            if _mask_split.has_multi_iterator_clause(bound.get("mask")):   # e.g. mask=(i_p >= i_f)
                return _mask_split.call_split(impl, bound, impl.__name__)
            return impl(**bound)

        call.signature = signature
        return call
    return wrap


def _block_index(view: NkiTensor) -> tuple:
    """The block indices (the axes before the partition axis) a view of an on-chip tensor selects."""
    axis = view._hw.partition_axis or 0
    if view._index is not None:
        return tuple(e if isinstance(e, int) else repr(e) for e in view._index[:axis])
    if view._ap is not None:
        return tuple(repr(e[0]) for e in view._ap[:axis])
    return ()


def _finish(dst: NkiTensor | None, emit, shape, dtype, buffer: str = "sbuf", ranges: dict | None = None,
            accumulates: bool = False, storage: tuple | None = None) -> NkiTensor | None:
    """Destination style: issue into dst now (returns None). Functional: a pending tile."""
    if dst is not None:
        if not issue.skipped(ranges):
            emit(issue.tile(dst, "dst"), None)
        return None
    if buffer == "psum":
        emit = _through_psum(emit, dtype)
    return issue.produce(shape, dtype, buffer, emit, accumulates=accumulates, ranges=ranges, storage=storage)


def _through_psum(emit, dtype):
    """A Tensor-engine result (nc_matmul, nc_transpose) assigned into an SBUF tile,
    ``sbuf_tile[...] = nisa.nc_transpose(x)``: the engine writes PSUM, so, as AWS's compiler does, the
    instruction goes into a PSUM tile and a tensor_copy (Vector engine) moves it to the SBUF tile."""
    def emit_into(out: NkiTensor, accumulate):
        if out.buffer != "sbuf":
            return emit(out, accumulate)
        launch = runtime.current()
        staged = launch.core.psum.allocate(tuple(out.shape), hw_dtypes.float32 if dtype is None else dtype,
                                           name=launch.fresh_name("psum_stage"))
        tile = NkiTensor.allocation(staged, "psum", launch)
        emit(tile, None)
        launch.core.tensor_copy(dst=out.hw_view(), src=staged.full)
        launch.core.psum.free(staged)
    emit_into.site = getattr(emit, "site", None)
    return emit_into


def _in_sbuf(x: NkiTensor, what: str) -> NkiTensor:
    """x, or (for an engine that reads SBUF only, such as GpSimd) a tensor_copy of it out of PSUM, the
    copy AWS's compiler inserts."""
    x = issue.tile(x, what)
    return tensor_copy(x) if x.buffer == "psum" else x


# -- Tensor engine ---------------------------------------------------------------------------------------
@instruction(functional=("stationary", "moving", "is_stationary_onezero", "is_moving_onezero", "is_transpose",
                         "tile_position", "tile_size"))
def nc_matmul(dst: Tile | None, stationary: Tile, moving: Tile, is_stationary_onezero: bool = False,
              is_moving_onezero: bool = False, is_transpose: bool = False, tile_position: tuple = (),
              tile_size: tuple = (), perf_mode: object = None, name: str = "", *, accumulate: bool | None = None,
              mask: Mask | None = None, dtype: Dtype | None = None, psum_acc: bool | None = None) -> Tile | None:
    """dst[M, N...] (+)= stationary[K, M].T @ moving[K, N...] on the Tensor engine (fp32 in PSUM).

    The moving tile may have several free axes: the result keeps them (moving [K, 2, 8] gives
    [M, 2, 8]). is_transpose=True (moving an identity) passes stationary through: dst = stationary.T,
    in stationary's dtype. accumulate=None adds to what the PSUM region already holds (the first matmul into a
    fresh region overwrites it). Functional style returns the PSUM tile; ``psum += nisa.nc_matmul(a, b)``
    accumulates in place.
    """
    for flag, value in (("is_stationary_onezero", is_stationary_onezero), ("is_moving_onezero", is_moving_onezero)):
        if value:
            raise NKIError(f"nc_matmul({flag}=True) is not simulated")
    if tile_position or tile_size:
        raise NKIError("nc_matmul(tile_position=, tile_size=): row/column tiling of the PE array is not simulated")
    double_row = _perf_mode.is_double_row(perf_mode)      # FP8 [K, 2, M] x [K, 2, N] (perf_mode.py)
    stationary, moving = issue.tile(stationary, "stationary"), issue.tile(moving, "moving")
    if dst is None:
        # functional style (beta 1): AWS's compiler moves a PSUM operand (e.g. an nc_transpose result)
        # to SBUF for the Tensor engine; in destination style the operands are the kernel's to place
        stationary, moving = _in_sbuf(stationary, "stationary"), _in_sbuf(moving, "moving")
    launch = issue.begin()
    ranges = indexing.restrict(mask)
    if accumulate is None and psum_acc is not None:
        accumulate = psum_acc

    def emit(out: NkiTensor, accumulate_flag):
        if is_transpose:   # the PE array passes stationary through (moving is the identity): dst = stationary.T
            launch.core.nc_transpose(dst=out.hw_view(ranges), src=stationary.hw_view(ranges))
            return
        # `psum[...] += nisa.nc_matmul(...)` (accumulate_flag True) starts an accumulation group on a PSUM
        # region never written (the first matmul of a group overwrites, as AWS's compiler sets the flag):
        # the core's accumulate=None adds to written regions and overwrites fresh ones. Destination
        # style (`nc_matmul(dst=psum, ...)` in a loop over K, NKI beta 2) accumulates the same way.
        # `psum[...] = nisa.nc_matmul(...)` is an assignment: it overwrites (the bytes may hold an
        # earlier logical tile of a rotating direct allocation)
        if accumulate is not None:
            flag = accumulate
        elif accumulate_flag is True or accumulate_flag == "destination":
            flag = None
        elif accumulate_flag is None:
            flag = False
        else:
            flag = accumulate_flag
        declared = launch.__dict__.get("declared", {}).get(id(out._hw))
        if declared is not None:
            # a direct allocation: each logical tile — of a rotating block tensor (mod_alloc), or of
            # the same nl.ndarray declared again in a loop — is a tile of its own, so the first matmul
            # into it starts its accumulation group, whatever the earlier tile on those bytes left
            # there (AWS's attention v9: attn_out_psum[i_tile_q] += ...)
            owners = launch.__dict__.setdefault("block_owner", {})
            block = out._block
            key = (id(out._hw), block[0] if block is not None else _block_index(out))
            logical = (declared, block[1] if block is not None else key[1])
            if flag is None and owners.get(key) != logical:
                flag = False
            owners[key] = logical
        matmul = launch.core.nc_matmul_double_row if double_row else launch.core.nc_matmul
        matmul(dst=out.hw_view(ranges), stationary=stationary.hw_view(ranges),
               moving=moving.hw_view(ranges), accumulate=flag)

    if dst is not None:
        return _finish(dst, lambda out, _flag: emit(out, "destination"), None, None, ranges=ranges)
    # the result tile is allocated before the instruction runs: check the tile limits first, so a too
    # wide moving tile is reported as the matmul rule it breaks rather than as a PSUM bank overflow
    spec = launch.core.spec
    M, N = math.prod(stationary.shape[1:]), math.prod(moving.shape[1:])
    if double_row:       # the pair axis is contracted: [K, 2, M] x [K, 2, N] -> [M, N]
        M, N = stationary.shape[-1], moving.shape[-1]
        return _finish(None, emit, (M, N), dtype or hw_dtypes.float32, "psum", ranges=ranges, accumulates=True)
    if M > spec.stationary_fmax or N > spec.moving_fmax:
        raise MatmulShapeError(
            f"matmul tile shape: stationary {stationary.shape} x moving {moving.shape} gives M={M}, N={N}; "
            f"the limits are M <= {spec.stationary_fmax} (gemm_stationary_fmax), N <= {spec.moving_fmax} "
            f"(gemm_moving_fmax)", value=(M, N), limit=(spec.stationary_fmax, spec.moving_fmax))
    shape = (M,) + tuple(moving.shape[1:])
    if is_transpose:
        return _finish(None, emit, shape, dtype or stationary.dtype, "psum", ranges=ranges)
    return _finish(None, emit, shape, dtype or hw_dtypes.float32, "psum", ranges=ranges, accumulates=True)


@instruction(functional=("data",))
def nc_transpose(dst: Tile | None, data: Tile, engine: engine = engine.unknown, name: str = "", *,
                 mask: Mask | None = None, dtype: Dtype | None = None) -> Tile | None:
    """dst[F, P] = data[P, F]: on the Tensor engine (SBUF -> PSUM, up to 128 x 128) by default, or on
    the Vector engine with ``engine=nisa.vector_engine`` (SBUF/PSUM, at most 32 x 32)."""
    data = issue.tile(data, "data")
    ranges = indexing.restrict(mask)
    on_vector = _engine(engine) == "dve"
    launch = issue.begin()

    def emit(out, _accumulate):
        if on_vector:
            launch.core.vector_transpose(dst=out.hw_view(ranges), src=data.hw_view(ranges))
        else:
            launch.core.nc_transpose(dst=out.hw_view(ranges), src=data.hw_view(ranges))

    shape = (math.prod(data.shape[1:]), data.shape[0])
    return _finish(dst, emit, shape, dtype or data.dtype, "sbuf" if on_vector else "psum")


# -- data movement ---------------------------------------------------------------------------------------
@instruction(functional=None)
def dma_copy(dst: Tile, src: Tile, dst_rmw_op: Op | None = None, oob_mode: oob_mode = oob_mode.error,
             dge_mode: dge_mode = dge_mode.unknown, name: str = "", *, mask: Mask | None = None,
             engine: engine = engine.unknown, unique_indices: bool = True) -> None:
    """Copy src to dst with a DMA engine (HBM <-> SBUF, SBUF <-> SBUF); PSUM -> HBM is refused.

    dst and src of different dtypes: the copy casts (nki.isa.dma_copy, beta-1 page: "A cast will happen if
    the src and dst have different dtype"); the DMA engines convert on NeuronCore-v3/-v4 (Trn2/Trn3), an
    engine casts on the SBUF side on Trn1."""
    dst, src = issue.tile(dst, "dst"), issue.tile(src, "src")
    if dst_rmw_op is not None:
        raise NKIError("dma_copy(dst_rmw_op=...): read-modify-write DMAs are not simulated")
    if dst._gather is not None:
        raise NKIError("indirect DMA store (a scatter: dst indexed by a tile of indices) is not simulated; "
                       "trnlab simulates the indirect load (gather) only")
    launch = issue.begin()
    if src._gather is not None:
        if mask is not None:
            raise NKIError("an indirect DMA (src indexed by a tile of indices) with mask= is not simulated")
        launch.core.dma_gather(dst=dst.hw_view(), src=src.hw_view(), indices=src._gather.hw_view())
        return None
    ranges = issue.ranges(mask, src) if mask is not None or src._valid is not None else None
    if issue.skipped(ranges):
        return None
    if np.dtype(dst.dtype) == np.dtype(src.dtype):
        launch.core.dma_copy(dst=dst.hw_view(ranges), src=src.hw_view(ranges))
    elif issue.dma_casts(launch.core):
        launch.core.dma_copy_cast(dst=dst.hw_view(ranges), src=src.hw_view(ranges))
    else:
        _dma_cast_through_engine(launch, dst.hw_view(ranges), src.hw_view(ranges))
    return None


def _dma_cast_through_engine(launch, dst, src) -> None:
    """dma_copy between dtypes on NeuronCore-v2 (Trn1). The beta-1 dma_copy page (relevant for Inf2,
    Trn1, Trn2) says the copy casts; NeuronCore-v2's DMA engines move bytes, so (ASSUMED, as the
    compiler must) the cast runs on the Vector engine on the SBUF side: cast then store, or load
    then cast. HBM -> HBM has no SBUF side and is refused."""
    core = launch.core
    if src.tensor.kind == "sbuf":             # cast in SBUF to dst's dtype, then move the bytes
        staged = core.sbuf.allocate(tuple(src.shape), dst.tensor.dtype, name=launch.fresh_name("cast_stage"))
        core.tensor_copy(dst=staged.full, src=src)
        core.dma_copy(dst=dst, src=staged.full)
    elif dst.tensor.kind == "sbuf":           # move the bytes into SBUF, then cast there
        staged = core.sbuf.allocate(tuple(dst.shape), src.tensor.dtype, name=launch.fresh_name("cast_stage"))
        core.dma_copy(dst=staged.full, src=src)
        core.tensor_copy(dst=dst, src=staged.full)
    else:
        core.dma_copy_cast(dst=dst, src=src)  # refused on NeuronCore-v2, with the rule's message
        return
    core.sbuf.free(staged)


@instruction(functional=("src",))
def dma_transpose(dst: Tile | None, src: Tile, axes: tuple | None = None, dge_mode: dge_mode = dge_mode.unknown,
                  name: str = "", *, mask: Mask | None = None, dtype: Dtype | None = None) -> Tile | None:
    """Transpose a 2-D tile while moving it with a DMA: [A, B] -> [B, A] (HBM or SBUF source). The
    source may be indexed with ints, slices or nl.arange / nl.mgrid iterators (a plain box)."""
    src = issue.tile(src, "src")
    if src.ndim != 2 or (axes is not None and tuple(axes) != (1, 0)):
        raise NKIError(f"dma_transpose: trnlab transposes 2-D sources (axes=(1, 0)); got {src.shape}, axes={axes}")
    launch = issue.begin()
    extents = src._hw.shape
    box = src.hw_view().index
    box = tuple(slice(0, n, 1) for n in extents) if box is None else (box if isinstance(box, tuple) else (box,))
    if not all(isinstance(e, (slice, int, np.integer)) for e in box):
        raise NKIError("dma_transpose: the source must be a plain box of its tensor (ints and slices, or "
                       "nl.arange iterators with a positive step)")
    source = src._hw[box]

    def emit(out, _accumulate):
        # the DMA engines transpose (in hardware from NeuronCore-v3 on; cost.dma_transpose_cost)
        if np.dtype(out.dtype) == np.dtype(src.dtype) or issue.dma_casts(launch.core):
            launch.core.dma_transpose(dst=out.hw_view(), src=source)
        else:                                     # Trn1: stage in the source dtype, cast on an engine
            staged = launch.core.sbuf.allocate(tuple(out.shape), src.dtype, name="transpose_stage")
            launch.core.dma_transpose(dst=staged.full, src=source)
            launch.core.tensor_copy(dst=out.hw_view(), src=staged.full)
            launch.core.sbuf.free(staged)

    return _finish(dst, emit, (src.shape[1], src.shape[0]), dtype or src.dtype, "sbuf")


@instruction(functional=("src",))
def tensor_copy(dst: Tile | None, src: Tile, engine: engine = engine.unknown, name: str = "", *,
                mask: Mask | None = None, dtype: Dtype | None = None) -> Tile | None:
    """Copy (and cast to dst's dtype) a tile on an on-chip engine; the way out of PSUM."""
    src = issue.tile(src, "src")
    ranges = issue.ranges(mask, src)
    engine_name = _engine(engine, "dve")
    launch = issue.begin()

    def emit(out, _accumulate):
        if out.buffer not in ("sbuf", "psum") or src.buffer not in ("sbuf", "psum"):
            raise MemoryPlacementError(
                f"operand memory: tensor_copy runs on an on-chip engine and needs SBUF/PSUM operands, got "
                f"{src.buffer} -> {out.buffer}; use nisa.dma_copy / nl.load / nl.store for HBM",
                value=(src.buffer, out.buffer), limit=("sbuf", "psum"))
        launch.core.tensor_copy(dst=out.hw_view(ranges), src=src.hw_view(ranges), engine=engine_name)

    return _finish(dst, emit, src.shape, dtype or src.dtype, "sbuf", ranges)


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
        launch.core.tensor_tensor(dst=out.hw_view(ranges), data1=data1.hw_view(ranges),
                                  data2=data2.hw_view(ranges), op=opcode, engine=engine_name)

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
        launch.core.tensor_scalar(dst=out.hw_view(ranges), data=data.hw_view(ranges), op0=first,
                                  operand0=_scalar_operand(operand0, ranges), reverse0=bool(reverse0), op1=second,
                                  operand1=_scalar_operand(operand1, ranges), reverse1=bool(reverse1),
                                  engine=engine_name)

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
        launch.core.activation(dst=out.hw_view(ranges), data=data.hw_view(ranges), op=opcode,
                               scale=_scalar_operand(scale, ranges),
                               bias=None if bias is None else _scalar_operand(bias, ranges),
                               reduce_op=op_name(reduce_op) if reduce_op is not None else None,
                               reduce_res=reduce_res.hw_view(ranges) if reduce_res is not None else None,
                               reduce_cmd=command)

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


import sys as _sys  # noqa: E402  (tiles get their copies and fills from this module, see tensor.install)

from trnlab.nki.tensor import install as _install_tile_operations  # noqa: E402

_install_tile_operations(isa=_sys.modules[__name__])


# MX on NeuronCore-v4 (mx.py registers them in SIGNATURES)
from trnlab.nki.mx import nc_matmul_mx, quantize_mx  # noqa: E402,F401

"""`nki.isa`'s parameter types, its enums, and the ONE binder and signature table (`SIGNATURES`) every
instruction goes through (the call styles are described in `isa.py`). The instructions themselves
are in `isa_matmul.py` (Tensor engine), `isa_dma.py` (data movement) and `isa_vector.py` (Vector,
Scalar, GpSimd).
"""
from __future__ import annotations

import enum
import functools
import inspect
from dataclasses import dataclass
from typing import Callable, Union

from trnlab.hardware import dtypes as hw_dtypes
from trnlab.nki import issue, launches
from trnlab.nki import mask_split as _mask_split
from trnlab.nki import instruction_handles as _handles
from trnlab.nki import schedule as _schedule
from trnlab.nki.errors import NKIError
from trnlab.nki.indexing import Predicate
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
    load_reduce = 4      # the Vector engine's registers start from a given value (NKI 0.7)


class dge_mode(enum.Enum):
    """nki.isa.dge_mode: descriptor generation for DMAs (accepted, no effect on the simulation)."""
    unknown = 0
    none = 1
    swdge = 2
    hwdge = 3


class oob_mode(enum.Enum):
    """nki.isa.oob_mode: what a dynamic DMA does out of bounds (error: raise; skip: an indirect access
    pattern's rows past the tensor are not moved, `hardware.dma.dma_copy_indirect`)."""
    error = 0
    skip = 1


class nc_version(enum.IntEnum):
    """nki.isa.nc_version, ordered: ``nisa.get_nc_version() >= nisa.nc_version.gen3``."""
    gen2 = 2
    gen3 = 3
    gen4 = 4


def get_nc_version() -> nc_version:
    """The NeuronCore generation of the running kernel's target (v2 = Trn1, v3 = Trn2, v4 = Trn3)."""
    gen = str(getattr(launches.current().core.spec, "generation", "v3")).lower().lstrip("v")
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
        if not positional or not positional[0].endswith("dst"):     # dst (topk: val_dst)
            raise TypeError(f"nki.isa.{impl.__name__}: an instruction's first parameter is dst")
        return cls(name=impl.__name__, destination=positional,
                   functional=None if functional is None else tuple(functional),
                   kinds={p.name: _kind(p.annotation) for p in params},
                   required=tuple(p.name for p in params if p.default is p.empty and p.name != positional[0]),
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
        bound.setdefault(self.destination[0], None)
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

        def issue_call(bound):
            for value in bound.values():        # an .ap() past its tensor fails where an instruction uses it
                if type(value) is NkiTensor and value._invalid is not None:
                    raise value._invalid
            if _mask_split.has_multi_iterator_clause(bound.get("mask")):   # e.g. mask=(i_p >= i_f)
                return _mask_split.call_split(impl, bound, impl.__name__)
            if bound.get("name"):               # a named instruction (kernel.with_schedule: schedule.py)
                return _schedule.named(bound["name"], lambda: impl(**bound))
            return impl(**bound)

        @functools.wraps(impl)
        def call(*args, **kwargs):
            bound = signature.bind(args, kwargs)
            if bound[signature.destination[0]] is None:      # functional style: the result tile
                return issue_call(bound)
            # destination style: NKI 0.7's instruction handle (nki.isa.NkiInstruction, instruction_handles.py)
            return _handles.issued(lambda: issue_call(bound), bound.get("name"))

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
    """Destination style: issue into dst now (returns None; the binder makes it an instruction handle).
    Functional: a pending tile."""
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
        launch = launches.current()
        staged = launch.core.psum.allocate(tuple(out.shape), hw_dtypes.float32 if dtype is None else dtype,
                                           name=launch.fresh_name("psum_stage"))
        tile = NkiTensor.allocation(staged, "psum", launch)
        emit(tile, None)
        launch.core.tensor_copy(dst=out.hw_view(), src=staged.full)
        launch.core.psum.free(staged)
    emit_into.site = getattr(emit, "site", None)
    return emit_into

"""`nki.isa`'s data movement: `dma_copy`, `dma_transpose` (the DMA queues) and `tensor_copy` (an
engine copying a tile, e.g. PSUM -> SBUF).
"""
from __future__ import annotations

import numpy as np

from trnlab.hardware import dtypes as _dtypes
from trnlab.hardware.errors import MemoryPlacementError, ShapeMismatchError
from trnlab.nki import issue
from trnlab.nki import tensor_indirection as _ti
from trnlab.nki.errors import NKIError, ViewError
from trnlab.nki.isa_binder import Dtype, Mask, Op, Tile, _engine, _finish, dge_mode, engine, instruction, oob_mode
from trnlab.nki.isa_registers import VirtualRegister
from trnlab.nki.tensor import _OPERATIONS, NkiTensor


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
    if src._dynamic is not None or dst._dynamic is not None:
        return _dma_copy_indirect(dst, src, mask, oob_mode)
    if src._bitcast is not None or dst._bitcast is not None:
        return _dma_copy_bytes(dst, src, mask)
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


def _dma_copy_indirect(dst: NkiTensor, src: NkiTensor, mask, oob) -> None:
    """dma_copy of an indirect view (`.ap(scalar_offset= / vector_offset=)`, `select` / `vector_select`
    by a tile): the DMA reads the offsets from SBUF at run time (hardware `dma_copy_indirect`); between
    dtypes it casts on the way as a direct dma_copy does on NeuronCore-v3/-v4 (refused on NeuronCore-v2)."""
    if src._dynamic is not None and dst._dynamic is not None:
        raise NKIError("dma_copy with indirect views on both src and dst is not simulated")
    if mask is not None:
        raise NKIError("an indirect dma_copy (scalar_offset / vector_offset) with mask= is not simulated")
    side = "src" if src._dynamic is not None else "dst"
    moving = src if side == "src" else dst
    if _ti.of(moving) is not None:
        raise ViewError(_ti.of(moving).refusal + "; a DMA moves the tile itself")
    offsets, stride, per_row = moving._dynamic
    static = moving._hw[moving._index] if moving._index is not None else moving._hw.full
    launch = issue.begin()
    skip = str(getattr(oob, "name", oob)).endswith("skip")
    if isinstance(offsets, VirtualRegister):  # .ap(scalar_offset=register): the register's value at run time
        launch.core.dma_copy_register_offset(dst=static if side == "dst" else dst.hw_view(),
                                             src=static if side == "src" else src.hw_view(), register=offsets.id,
                                             stride=int(stride), side=side, skip_out_of_bounds=skip)
        return None
    launch.core.dma_copy_indirect(dst=static if side == "dst" else dst.hw_view(),
                                  src=static if side == "src" else src.hw_view(),
                                  offsets=offsets.hw_view(), stride=int(stride), per_row=bool(per_row), side=side,
                                  skip_out_of_bounds=skip)
    return None


def _dma_copy_bytes(dst: NkiTensor, src: NkiTensor, mask) -> None:
    """dma_copy of an on-chip tile's bytes read as another element size (``sbuf_tile.ap(pattern,
    dtype=...)``, `tensor_views.bytes_view`) on either end: the DMA moves the bytes unchanged, so the two
    ends hold the same number of bytes and the type of the end that is not a byte view (hardware
    `dma_copy_bytes`)."""
    if mask is not None:
        raise NKIError("a dma_copy of a tile read as another element size (.ap(dtype=)) with mask= is not simulated")
    dst_bytes = dst._bitcast if dst._bitcast is not None else dst
    src_bytes = src._bitcast if src._bitcast is not None else src
    if np.dtype(dst.dtype) != np.dtype(src.dtype):
        raise NKIError(f"dma_copy of a tile read as another element size (.ap(dtype=)): src is read as "
                       f"{np.dtype(src.dtype).name}, dst as {np.dtype(dst.dtype).name}; the bytes move unchanged, "
                       f"so both ends are read as one type")
    launch = issue.begin()
    launch.core.dma_copy_bytes(dst=dst_bytes.hw_view(), src=src_bytes.hw_view())
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
    """Transpose a tile while moving it with a DMA (HBM or SBUF source): 2-D [A, B] -> [B, A], and the
    permutations AWS's dma_transpose page lists for 3-D, axes (2, 1, 0), and 4-D sources, axes
    (3, 1, 2, 0): dst axis i is src axis axes[i]. The source may be indexed with ints, slices or
    nl.arange / nl.mgrid iterators (a plain box), or be an access pattern (`.ap`, a view)."""
    src = issue.tile(src, "src")
    default = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}.get(src.ndim)
    perm = default if axes is None else tuple(int(a) for a in axes)
    if default is None or perm != default:
        raise ShapeMismatchError(f"shape mismatch: dma_transpose of a {src.ndim}-d source {src.shape} with axes "
                                 f"{axes}; AWS's dma_transpose takes (1, 0) for 2-d, (2, 1, 0) for 3-d and "
                                 f"(3, 1, 2, 0) for 4-d sources", value=(src.shape, axes),
                                 limit=((1, 0), (2, 1, 0), (3, 1, 2, 0)))
    if src._gather is not None:
        raise NKIError("dma_transpose of a source indexed by a tile of indices is not simulated; use "
                       ".ap(vector_offset=) (AWS's indirect transpose)")
    if src._dynamic is not None:
        return _indirect_transpose(dst, src, perm, dtype)
    launch = issue.begin()
    source = src.hw_view()
    if source.basic:
        extents = src._hw.shape
        box = source.index
        box = tuple(slice(0, n, 1) for n in extents) if box is None else (box if isinstance(box, tuple) else (box,))
        source = src._hw[box]
    extra = {} if src.ndim == 2 else {"axes": perm}

    def emit(out, _accumulate):
        # the DMA engines transpose (in hardware from NeuronCore-v3 on; cost.dma_transpose_cost)
        if np.dtype(out.dtype) == np.dtype(src.dtype) or issue.dma_casts(launch.core):
            launch.core.dma_transpose(dst=out.hw_view(), src=source, **extra)
        else:                                     # Trn1: stage in the source dtype, cast on an engine
            staged = launch.core.sbuf.allocate(tuple(out.shape), src.dtype, name="transpose_stage")
            launch.core.dma_transpose(dst=staged.full, src=source, **extra)
            launch.core.tensor_copy(dst=out.hw_view(), src=staged.full)
            launch.core.sbuf.free(staged)

    return _finish(dst, emit, tuple(src.shape[a] for a in perm), dtype or src.dtype, "sbuf")


def _indirect_transpose(dst, src: NkiTensor, perm: tuple, dtype):
    """dma_transpose of an indirect source (`.ap(vector_offset=)`: AWS's dma_gather_transpose, which
    "effectively performs gathered = src[flat_indices, :]; dst = gathered.T"; `.ap(scalar_offset=)` a tile,
    a register or an NkiScalar: the view moved by the offset when it runs): the rows gathered by an
    indirect DMA into an HBM scratch tensor, then transposed by the DMA engines into SBUF. ASSUMED:
    the chip does it in one software-DGE transfer; here it costs the two."""
    from trnlab.nki import launches
    if src.buffer not in ("hbm", "shared_hbm", "private_hbm"):
        raise NKIError("an indirect dma_transpose reads HBM (\"src tensor must be on HBM\", nki.isa.dma_transpose)")
    scratch = _OPERATIONS.allocate(   # (the allocator nki.language installs on tiles)
        tuple(src.shape), src.dtype, "hbm", "gather_transpose", launches.current())
    dma_copy(dst=scratch, src=src)
    if dst is None:
        return dma_transpose(scratch, axes=perm, dtype=dtype)
    return dma_transpose(dst=dst, src=scratch, axes=perm)


@instruction(functional=("src",))
def tensor_copy(dst: Tile | None, src: Tile, engine: engine = engine.unknown, name: str = "", *,
                mask: Mask | None = None, dtype: Dtype | None = None) -> Tile | None:
    """Copy (and cast to dst's dtype) a tile on an on-chip engine; the way out of PSUM."""
    src = issue.tile(src, "src")
    ranges = issue.ranges(mask, src)
    engine_name = _engine(engine, "dve")
    launch = issue.begin()

    def emit(out, _accumulate):
        if _ti.uses(out, src):                   # Tensor Indirection: the offsets are read when it runs
            return _ti.emit(launch, "tensor_copy", out, src, ranges, {"engine": engine_name})
        if out.buffer not in ("sbuf", "psum") or src.buffer not in ("sbuf", "psum"):
            raise MemoryPlacementError(
                f"operand memory: tensor_copy runs on an on-chip engine and needs SBUF/PSUM operands, got "
                f"{src.buffer} -> {out.buffer}; use nisa.dma_copy / nl.load / nl.store for HBM",
                value=(src.buffer, out.buffer), limit=("sbuf", "psum"))
        retyped = {f"{what}_dtype": _dtypes.name(t.dtype) for what, t in (("src", src), ("dst", out))
                   if t._bitcast is not None}    # a tile retyped by .view(dtype): its bytes read as its type
        dst_bytes = out if out._bitcast is None else out._bitcast
        src_bytes = src if src._bitcast is None else src._bitcast
        launch.core.tensor_copy(dst=dst_bytes.hw_view(ranges), src=src_bytes.hw_view(ranges), engine=engine_name,
                                **retyped)

    return _finish(dst, emit, src.shape, dtype or src.dtype, "sbuf", ranges)




def _in_sbuf(x: NkiTensor, what: str) -> NkiTensor:
    """x, or (for an engine that reads SBUF only, such as GpSimd) a tensor_copy of it out of PSUM, the
    copy AWS's compiler inserts."""
    x = issue.tile(x, what)
    return tensor_copy(x) if x.buffer == "psum" else x

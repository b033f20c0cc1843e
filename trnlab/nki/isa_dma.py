"""`nki.isa`'s data movement: `dma_copy`, `dma_transpose` (the DMA queues) and `tensor_copy` (an
engine copying a tile, e.g. PSUM -> SBUF).
"""
from __future__ import annotations

import numpy as np

from trnlab.hardware.errors import MemoryPlacementError
from trnlab.nki import issue
from trnlab.nki.errors import NKIError
from trnlab.nki.isa_binder import Dtype, Mask, Op, Tile, _engine, _finish, dge_mode, engine, instruction, oob_mode
from trnlab.nki.tensor import NkiTensor


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




def _in_sbuf(x: NkiTensor, what: str) -> NkiTensor:
    """x, or (for an engine that reads SBUF only, such as GpSimd) a tensor_copy of it out of PSUM, the
    copy AWS's compiler inserts."""
    x = issue.tile(x, what)
    return tensor_copy(x) if x.buffer == "psum" else x

"""`nki.language`: tensors, buffers, loops, index helpers and tile-level math of NKI.

Names, arguments and semantics follow the NKI API reference (nki.language.*). The functions lower to
the instructions of `nki.isa` (see isa.py) on the running kernel's simulated NeuronCore:

- element-wise binary math -> `tensor_tensor` (two tiles) or `tensor_scalar` (a number, or a [P, 1]
  tile broadcast along the free axis) on the Vector engine;
- unary math (exp, tanh, rsqrt, ...) -> `activation` on the Scalar engine;
- reductions along free axes -> `tensor_reduce`; `matmul` -> `nc_matmul` (plus a Tensor-engine
  transpose of x unless transpose_x=True); `transpose` -> `nc_transpose`;
- `load` / `store` -> `dma_copy`.

Loops are Python loops: `affine_range`, `sequential_range` and `static_range` are ranges that remember
which kind they are (iterations are issued in program order either way; the engines overlap
independent work through the scheduler's dependency tracking). While a kernel is traced, the
iterator of a `for` statement over an affine or sequential range of 4 or more iterations is a
`loops.LoopIndex`: iterations 0, 1 and n-1 run, the others are stamped out of them (loops.py; any
non-affine use of the iterator runs the loop concretely, as `static_range` and `range` always do).
"""
from __future__ import annotations

import builtins
import dis as _dis
import math
import sys as _sys_module

import ml_dtypes
import numpy as np

from trnlab.hardware import dtypes as _dt
from trnlab.hardware import presets as _presets
from trnlab.hardware.errors import MemoryPlacementError, ShapeMismatchError
from trnlab.nki import compiler as _compiler
from trnlab.nki import indexing as _indexing
from trnlab.nki.errors import user_site as _user_site
from trnlab.nki import isa as _isa
from trnlab.nki import loops as _loops
from trnlab.nki import issue as _issue
from trnlab.nki import runtime as _runtime
from trnlab.nki.errors import NKIError
from trnlab.nki.indexing import arange, mgrid  # noqa: F401  (public: nl.arange, nl.mgrid)
from trnlab.nki.tensor import NkiTensor

# -- data types (nl.bfloat16 is the same NumPy dtype as trnlab.hardware.dtypes.bfloat16) ------------
float32, bfloat16, float16 = _dt.float32, _dt.bfloat16, _dt.float16
float8_e4m3, float8_e4m3fn, float8_e5m2 = _dt.float8_e4m3, _dt.float8_e4m3fn, _dt.float8_e5m2
float8_e8m0fnu, float8_e5m2_x4, float8_e4m3fn_x4 = _dt.float8_e8m0fnu, _dt.float8_e5m2_x4, _dt.float8_e4m3fn_x4
float4_e2m1fn_x4 = _dt.float4_e2m1fn_x4
int8, uint8, int16, uint16, int32, uint32, bool_ = _dt.int8, _dt.uint8, _dt.int16, _dt.uint16, _dt.int32, \
    _dt.uint32, _dt.bool_
tfloat32 = _dt.float32  # tf32 inputs are fp32 in memory; the Tensor engine's reduced precision is not modelled


# -- buffers ----------------------------------------------------------------------------------
class _Buffer:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"nl.{self.name}"


sbuf, psum = _Buffer("sbuf"), _Buffer("psum")
hbm, shared_hbm, private_hbm = _Buffer("hbm"), _Buffer("shared_hbm"), _Buffer("private_hbm")


class par_dim(int):
    """Marks the partition dimension in a shape: nl.ndarray((4, nl.par_dim(128), 512), buffer=nl.sbuf)."""

    def __repr__(self) -> str:
        return f"par_dim({int(self)})"


# -- tile sizes (read from the running kernel's core spec, Trn2 outside a kernel) -----------------
def _spec():
    launch = _runtime.active()
    return launch.core.spec if launch is not None else _presets.TRN2.core


class _TileSizeMeta(type):
    pmax = property(lambda cls: _spec().partitions)
    gemm_stationary_fmax = property(lambda cls: _spec().stationary_fmax)
    gemm_moving_fmax = property(lambda cls: _spec().moving_fmax)
    psum_fmax = property(lambda cls: _spec().psum_bank_bytes // 4)
    psum_bank_fmax = property(lambda cls: _spec().psum_bank_bytes // 4)
    psum_fmax_bytes = property(lambda cls: _spec().psum_bank_bytes)
    psum_num_banks = property(lambda cls: _spec().psum_banks)
    sbuf_fmax_bytes = property(lambda cls: _spec().sbuf_partition_bytes)
    total_available_sbuf_size = property(lambda cls: _spec().sbuf_partition_bytes)
    sbuf_size_bytes = property(lambda cls: _spec().sbuf_bytes)
    bn_stats_fmax = property(lambda cls: _spec().bn_stats_fmax)
    psum_min_align = property(lambda cls: 4)
    sbuf_min_align = property(lambda cls: 1)


class tile_size(metaclass=_TileSizeMeta):
    """Hardware tile-size limits: pmax, gemm_stationary_fmax, gemm_moving_fmax, psum_fmax, ..."""


# -- loops and SPMD ---------------------------------------------------------------------------
_GET_ITER, _FOR_ITER, _EXTENDED_ARG = _dis.opmap["GET_ITER"], _dis.opmap["FOR_ITER"], _dis.opmap["EXTENDED_ARG"]


class _Range:
    kind = "affine"
    stamps = False           # affine/sequential loops of a trace may stamp their iterations (loops.py)

    def __init__(self, *args, **kwargs):
        self._range = range(*(int(a) for a in args))
        directives = kwargs.get("directives") or ()
        directives = directives if isinstance(directives, (list, tuple)) else (directives,)
        self._no_reorder = any(getattr(d, "kind", None) == "no_reorder" for d in directives)

    def __iter__(self):
        launch = _runtime.active()
        if launch is not None and self._no_reorder:
            launch.no_reorder = True          # the schedule keeps this program's order (nki.schedule_of)
        if launch is None or self.kind == "static":
            return iter(self._range)
        values = self._range
        if self.stamps:
            frame = _sys_module._getframe(1)
            code, at = frame.f_code.co_code, frame.f_lasti
            # only the iterator of a `for` statement (not list(...), zip(...) or a comprehension)
            after = at + 2
            while code[after] == _EXTENDED_ARG:     # a long loop body: FOR_ITER's jump needs more bytes
                after += 2
            if code[at] == _GET_ITER and code[after] == _FOR_ITER:
                values = _loops.iterate(self._range, frame)   # iterations stamped (loops.py)
        return self._iterations(launch, values)

    def _iterations(self, launch, values):
        """The iterations, noting on the launch which iteration of each enclosing affine/sequential
        loop runs (NKI traces such a loop body once: see _declared_once)."""
        loops = launch.__dict__.setdefault("loops", [])
        loops.append(0)
        start, step = self._range.start, self._range.step
        try:
            for i in values:
                loops[-1] = (_loops.plain(i) - start) // step
                yield i
        finally:
            loops.pop()

    def __len__(self):
        return len(self._range)

    def __repr__(self) -> str:
        return f"nl.{self.kind}_range({self._range.start}, {self._range.stop}, {self._range.step})"


class affine_range(_Range):
    """Iterations without a loop-carried dependency (the compiler may reorder and pipeline them)."""
    kind = "affine"
    stamps = True


class sequential_range(_Range):
    """Iterations that depend on each other (kept in order)."""
    kind = "sequential"
    stamps = True


class static_range(_Range):
    """A loop fully unrolled at trace time."""
    kind = "static"


def program_id(axis: int) -> int:
    """Index of this SPMD program along `axis` of the launch grid `kernel[g0, g1, ...]`."""
    launch = _runtime.current()
    if not launch.grid:
        return 0
    if not 0 <= axis < len(launch.grid):
        raise NKIError(f"program_id({axis}): the launch grid {launch.grid} has {len(launch.grid)} axes")
    return launch.program_id[axis]


def num_programs(axes=None):
    """Programs along `axes` of the launch grid (all of them if axes is None)."""
    grid = _runtime.current().grid or (1,)
    if axes is None:
        return math.prod(grid)
    if isinstance(axes, (tuple, list)):
        return tuple(grid[a] for a in axes)
    return grid[axes]


def program_ndim() -> int:
    return len(_runtime.current().grid)


# -- allocation ----------------------------------------------------------------------------------
def _buffer_name(buffer) -> str:
    name = getattr(buffer, "name", None) or getattr(buffer, "memory", None) or buffer or "sbuf"
    if name not in ("sbuf", "psum", "hbm", "shared_hbm", "private_hbm"):
        raise NKIError(f"unknown buffer {buffer!r}: use nl.sbuf, nl.psum, nl.hbm, nl.shared_hbm or nl.private_hbm")
    return name


def _allocate(shape, dtype, buffer, name, launch, placement=None) -> NkiTensor:
    buffer = buffer.name if type(buffer) is _Buffer else _buffer_name(buffer)
    core = launch.core
    if buffer == "sbuf" or buffer == "psum":
        partition_axis = 0
        for k, n in enumerate(shape):
            if type(n) is par_dim:
                partition_axis = k
                break
        # the core checks the tile's shape; its address comes from liveness after tracing, or
        # from the kernel's own direct allocation (nki.compiler mod_alloc / alloc)
        memory = core.sbuf if buffer == "sbuf" else core.psum
        name = launch.fresh_name(name or buffer)
        if placement is None:
            hw = memory.allocate(shape, dtype, name=name, partition_axis=partition_axis)
            return NkiTensor.allocation(hw, buffer, launch)
        rotate = _rotation(placement, shape, partition_axis)
        physical = shape if rotate is None else tuple(rotate) + tuple(shape[partition_axis:])
        if rotate is not None and _one_tile_per_bank(placement, physical, dtype, partition_axis):
            # psum.mod_alloc(num_bank_tiles=...): each physical tile starts a bank of its own; the
            # tile's last free axis is padded to the bank (views index only the logical part)
            per_row = math.prod(int(n) for n in physical[partition_axis + 1:-1]) * _dt.as_dtype(dtype).itemsize
            physical = physical[:-1] + (_spec().psum_bank_bytes // per_row,)
        where = _placement(placement, shape, dtype, partition_axis, buffer)
        # the same direct allocation again (an nl.ndarray at a fixed address inside a loop) is the
        # same bytes on the chip: one tile, whose writes and reads order the iterations
        key = (buffer, where["offset"], tuple(int(n) for n in physical), str(_dt.as_dtype(dtype)), partition_axis)
        hw = launch.placed.get(key)
        declared = launch.__dict__.setdefault("declared", {})
        if hw is None:
            if partition_axis:
                where["tiles"] = _tile_offsets(placement, shape, physical, dtype, partition_axis, buffer)
            hw = memory.allocate(physical, dtype, name=name, partition_axis=partition_axis, placement=where)
            launch.placed[key] = hw
            declared[id(hw)] = 0
        else:
            declared[id(hw)] += 1     # a new tensor on the same bytes: its tiles start fresh (isa.nc_matmul)
        if rotate is None:
            return NkiTensor.allocation(hw, buffer, launch)
        tensor = NkiTensor.allocation(hw, buffer, launch, shape=tuple(shape))
        tensor._rotate = tuple(rotate)
        return tensor
    dtype = _dt.as_dtype(dtype)
    if buffer == "shared_hbm" and launch.grid:
        # one output shared by every SPMD program: the n-th shared_hbm allocation of each program
        cursor = launch.shared_cursor
        launch.shared_cursor += 1
        if cursor < len(launch.shared_hbm):
            return launch.shared_hbm[cursor]
    hw = core.hbm.allocate(tuple(int(n) for n in shape), dtype, name=launch.fresh_name(name or buffer))
    tensor = NkiTensor.allocation(hw, buffer, launch)
    if buffer == "shared_hbm" and launch.grid:
        launch.shared_hbm.append(tensor)
    return tensor


def _rotation(placement, shape, partition_axis: int):
    """Per block axis, how many physical tiles a modulo allocation gives its logical tiles, or None
    if every logical tile has its own. nki.compiler.sbuf/psum.mod_alloc: logical block idx sits at
    linearize(idx % num_*_tiles) (an absent shape is all ones), so blocks whose indices agree modulo
    every num_*_tiles share memory: k and k + n overwrite each other, as on the chip (the kernel
    rotates buffers on purpose, e.g. num_free_tiles=(2,) double-buffers a loop's tiles)."""
    if partition_axis == 0 or not isinstance(placement, (_compiler.ModAlloc, _compiler.PsumModAlloc)):
        return None
    grids = [placement.num_par_tiles, placement.num_free_tiles]
    if isinstance(placement, _compiler.PsumModAlloc):
        grids.append(placement.num_bank_tiles)
    rotate = []
    for axis in range(partition_axis):
        modulus = 1
        for grid in grids:
            if axis < len(grid):
                modulus = math.lcm(modulus, int(grid[axis]))
        rotate.append(builtins.min(modulus, int(shape[axis])))
    return None if all(m == int(n) for m, n in zip(rotate, shape)) else rotate


def _one_tile_per_bank(placement, physical, dtype, partition_axis: int) -> bool:
    """A PSUM modulo allocation over banks only (num_bank_tiles, no num_free/num_par tiles) whose
    tiles are smaller than a bank and divide it evenly by rows."""
    if not isinstance(placement, _compiler.PsumModAlloc) or placement.num_free_tiles or placement.num_par_tiles:
        return False
    if not placement.num_bank_tiles or len(physical) < partition_axis + 2:
        return False
    bank = _spec().psum_bank_bytes
    per_row = math.prod(int(n) for n in physical[partition_axis + 1:-1]) * _dt.as_dtype(dtype).itemsize
    tile = per_row * int(physical[-1])
    return tile < bank and bank % per_row == 0


def _placement(placement, shape, dtype, partition_axis: int, buffer: str) -> dict:
    """The byte offset per partition a direct allocation gives the tensor's first logical tile.

    trnlab lays a block tensor's physical tiles side by side from that address; logical tiles that
    share a physical one (see _rotation) share its bytes."""
    partitions = int(shape[partition_axis])
    bytes_per_partition = math.prod(int(n) for n in shape[partition_axis + 1:]) * _dt.as_dtype(dtype).itemsize
    where = placement.address((0,) * partition_axis, partitions, bytes_per_partition)
    if buffer == "psum":
        bank, partition, offset = where
        offset += bank * _spec().psum_bank_bytes
    else:
        partition, offset = where
    if partition:
        raise NKIError(f"direct allocation at start partition {partition}: trnlab places tiles from "
                       f"partition 0 only")
    return {"offset": int(offset), "kind": type(placement).__name__}


def _tile_offsets(placement, shape, physical, dtype, partition_axis: int, buffer: str) -> list:
    """The byte offset (per partition) of each physical tile, row-major over the physical block axes,
    where the direct allocation puts it (ncc.psum.alloc may scatter the blocks over banks)."""
    partitions = int(shape[partition_axis])
    bytes_per_partition = math.prod(int(n) for n in shape[partition_axis + 1:]) * _dt.as_dtype(dtype).itemsize
    offsets = []
    for block in np.ndindex(*(int(n) for n in physical[:partition_axis])):
        where = placement.address(tuple(int(i) for i in block), partitions, bytes_per_partition)
        partition = where[1] if buffer == "psum" else where[0]
        if partition:
            raise NKIError(f"direct allocation of block {block} at start partition {partition}: trnlab "
                           f"places tiles from partition 0 only")
        offset = where[2] + where[0] * _spec().psum_bank_bytes if buffer == "psum" else where[1]
        offsets.append(int(offset))
    return offsets


def ndarray(shape, dtype, *, buffer=None, name: str = "", **kwargs) -> NkiTensor:
    """A new tensor (uninitialised) in `buffer` (default SBUF).

    `buffer` may also be a direct allocation of nki.compiler (``ncc.sbuf.mod_alloc(base_addr=...)``,
    ``ncc.psum.mod_alloc(base_bank=...)``, ``ncc.sbuf.alloc(func)``): the allocator receives it as
    ``placement=`` and puts each logical tile where it says."""
    launch = _runtime.current()
    launch.flush()
    placement = None
    if isinstance(buffer, (_compiler.ModAlloc, _compiler.PsumModAlloc, _compiler.CustomAlloc, _compiler.AutoAlloc)):
        placement, buffer = (None if isinstance(buffer, _compiler.AutoAlloc) else buffer), buffer.memory
    if placement is None:
        return _allocate(shape, dtype, buffer or sbuf, name, launch)
    _loops.run_concretely(launch, "a direct allocation")
    return _allocate(shape, dtype, buffer, name, launch, placement=_declared_once(launch, placement, shape, dtype))


def _declared_once(launch, placement, shape, dtype):
    """The placement of a direct allocation declared inside nl.affine_range / sequential_range loops.

    NKI traces such a loop body once, so the declaration is one tensor at the address computed on
    that one pass; trnlab runs the body once per iteration. A kernel that advances its own address
    counter in the body (AWS's allocated attention: ``cur_addr += ...`` in the loop over q tiles)
    would ask for new bytes each iteration: later iterations take the first iteration's placement."""
    loops = launch.__dict__.get("loops")
    if not loops:
        return placement
    site = _user_site(2)
    key = (site, len(loops), tuple(int(n) for n in shape), str(_dt.as_dtype(dtype)))
    first = launch.__dict__.setdefault("declared_in_loop", {})    # key -> placements, in order
    counts = launch.__dict__.setdefault("declared_count", {})     # key -> (iteration, how many)
    iteration = tuple(loops)
    seen, n = counts.get(key, (None, 0))
    n = n if seen == iteration else 0          # the n-th such declaration in this iteration
    counts[key] = (iteration, n + 1)
    if not any(loops):
        first.setdefault(key, []).append(placement)
        return placement
    earlier = first.get(key, ())
    return earlier[n] if n < len(earlier) else placement


def empty(shape, dtype, *, buffer=None, name: str = "", **kwargs) -> NkiTensor:
    return ndarray(shape, dtype, buffer=buffer, name=name)


def full(shape, fill_value, dtype, *, buffer=None, name: str = "", **kwargs) -> NkiTensor:
    """A new tensor filled with `fill_value` (one memset)."""
    tensor = ndarray(shape, dtype, buffer=buffer, name=name)
    _isa.memset(dst=tensor, value=fill_value)
    return tensor


def zeros(shape, dtype, *, buffer=None, name: str = "", **kwargs) -> NkiTensor:
    return full(shape, 0.0, dtype, buffer=buffer, name=name)


def ones(shape, dtype, *, buffer=None, name: str = "", **kwargs) -> NkiTensor:
    return full(shape, 1.0, dtype, buffer=buffer, name=name)


def zeros_like(a, dtype=None, *, buffer=None, name: str = "", **kwargs) -> NkiTensor:
    return zeros(a.shape, dtype or a.dtype, buffer=buffer or a.buffer, name=name)


def ones_like(a, dtype=None, *, buffer=None, name: str = "", **kwargs) -> NkiTensor:
    return ones(a.shape, dtype or a.dtype, buffer=buffer or a.buffer, name=name)


def full_like(a, fill_value, dtype=None, *, buffer=None, name: str = "", **kwargs) -> NkiTensor:
    return full(a.shape, fill_value, dtype or a.dtype, buffer=buffer or a.buffer, name=name)


def empty_like(a, dtype=None, *, buffer=None, name: str = "", **kwargs) -> NkiTensor:
    return ndarray(a.shape, dtype or a.dtype, buffer=buffer or a.buffer, name=name)


# -- data movement -------------------------------------------------------------------------------
def load(src, *, mask=None, dtype=None, **kwargs) -> NkiTensor:
    """Load a tile from HBM into a new SBUF tile (one DMA)."""
    if not isinstance(src, NkiTensor):
        raise NKIError(f"nl.load expects an HBM tensor or a slice of one, got {type(src).__name__}")
    if src.buffer not in ("hbm", "shared_hbm", "private_hbm"):
        raise MemoryPlacementError(f"operand memory: nl.load reads HBM, but the source is in {src.buffer.upper()}"
                                   "; use nl.copy for on-chip copies", value=src.buffer, limit="hbm")
    if _mask_split.has_multi_iterator_clause(mask):     # e.g. mask=(512 * i_p + i_f < n): one DMA per box
        tile = ndarray(tuple(src.shape), dtype or src.dtype, buffer=sbuf, name="load")
        _isa.dma_copy(dst=tile, src=src, mask=mask)
        return tile
    launch = _issue.begin()
    ranges = _indexing.restrict(mask)
    target = _dt.as_dtype(dtype) if dtype is not None else src.dtype
    if src._gather is not None:
        return _load_rows(src, mask, target, launch)

    def emit(out, _accumulate):
        if out.dtype == src.dtype:
            launch.core.dma_copy(dst=out.hw_view(ranges), src=src.hw_view(ranges))
        elif _issue.dma_casts(launch.core):   # Trn2/Trn3 DMA engines convert dtypes on the way
            launch.core.dma_copy_cast(dst=out.hw_view(ranges), src=src.hw_view(ranges))
        else:  # Trn1: DMA moves bytes; a cast needs an engine: load then tensor_copy
            staged = _allocate(out.shape, src.dtype, sbuf, "load", launch)
            launch.core.dma_copy(dst=staged.hw_view(ranges), src=src.hw_view(ranges))
            launch.core.tensor_copy(dst=out.hw_view(ranges), src=staged.hw_view(ranges))

    return _issue.produce(src.shape, target, "sbuf", emit, ranges=ranges)


def _load_rows(src, mask, target, launch) -> NkiTensor:
    """nl.load(table[ids_tile, i_f]): one indirect DMA gathering the rows the SBUF tile `ids_tile` names."""
    ids = src._gather
    ranges = _indexing.restrict(mask)
    if any(it.axis != 0 for it in ranges):
        raise NKIError("nl.load of an indirect access (a tile of row indices): a mask may bound the rows "
                       "(the partition iterator) only")
    rows = next(iter(ranges.values()), None)   # the last, partial tile of indices: only its first rows
    if rows is not None:
        ids = ids[rows[0]:rows[1]]

    def emit(out, _accumulate):
        if out.dtype == src.dtype:
            launch.core.dma_gather(dst=out.hw_view(ranges), src=src.hw_view(), indices=ids.hw_view())
        else:  # DMA moves bytes; a cast needs an engine
            staged = _allocate(out.shape, src.dtype, sbuf, "load", launch)
            launch.core.dma_gather(dst=staged.hw_view(ranges), src=src.hw_view(), indices=ids.hw_view())
            launch.core.tensor_copy(dst=out.hw_view(ranges), src=staged.hw_view(ranges))

    return _issue.produce(src.shape, target, "sbuf", emit, ranges=ranges)


def load_transpose2d(src, *, mask=None, dtype=None, **kwargs) -> NkiTensor:
    """Load a 2-D HBM tensor [A, B] transposed into SBUF [B, A] (DMA with a transposing access pattern)."""
    return _isa.dma_transpose(src, mask=mask, dtype=dtype)


def store(dst, value, *, mask=None, **kwargs) -> None:
    """Store an SBUF tile into HBM (one DMA). PSUM tiles must be copied to SBUF first."""
    if not isinstance(dst, NkiTensor) or dst.buffer not in ("hbm", "shared_hbm", "private_hbm"):
        where = getattr(dst, "buffer", type(dst).__name__)
        raise MemoryPlacementError(f"operand memory: nl.store writes to HBM; the destination is {where}",
                                   value=where, limit="hbm")
    if isinstance(value, (int, float)):
        value = full(dst.shape, value, dst.dtype)
    if isinstance(value, NkiTensor) and value.buffer == "psum":
        # DMA does not reach PSUM; AWS's compiler copies PSUM -> SBUF first (its attention tutorial,
        # attn_fwd_v1, stores a matmul result straight from PSUM), casting to dst's dtype on the way
        value = _isa.tensor_copy(value, dtype=dst.dtype, mask=mask)
    _isa.dma_copy(dst=dst, src=value, mask=mask)


def copy(x, *, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """A copy of a tile in SBUF (e.g. PSUM -> SBUF), cast to `dtype`, on the Scalar engine
    ("Uses the Scalar Engine via activation(op=copy)", nki.language.copy)."""
    return _isa.tensor_copy(x, dtype=dtype, mask=mask, engine=_isa.engine.scalar)


# -- element-wise math ------------------------------------------------------------------------------
def _is_scalar(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating))


def _per_partition(x: NkiTensor, other: NkiTensor) -> bool:
    """x is a [P, 1] (or [P]) tile that broadcasts along other's free axes."""
    return (x.shape[0] == other.shape[0] and math.prod(x.shape[1:]) == 1 and math.prod(other.shape[1:]) > 1)


_REVERSIBLE = {"subtract", "divide", "power"}


def _binary(op: str, x, y, dtype=None, mask=None):
    if _is_scalar(x) and _is_scalar(y):
        raise NKIError(f"nl.{op} needs at least one tile operand")
    if _is_scalar(y) or (isinstance(x, NkiTensor) and isinstance(y, NkiTensor) and _per_partition(y, x)):
        return _isa.tensor_scalar(x, op, y, dtype=dtype, mask=mask)
    if _is_scalar(x) or (isinstance(x, NkiTensor) and isinstance(y, NkiTensor) and _per_partition(x, y)):
        return _isa.tensor_scalar(y, op, x, reverse0=op in _REVERSIBLE, dtype=dtype, mask=mask)
    if not isinstance(x, NkiTensor) or not isinstance(y, NkiTensor):
        raise NKIError(f"nl.{op} operands must be tiles or numbers, got {type(x).__name__}, {type(y).__name__}")
    if tuple(x.shape) != tuple(y.shape) and not _same_up_to_unit_axes(x.shape, y.shape):
        shape = _free_broadcast_shape(x.shape, y.shape)
        if shape is None:
            raise ShapeMismatchError(
                f"shape mismatch in nl.{op}: {x.shape} vs {y.shape}; tiles must match, or broadcast along "
                "free axes of size 1 (same partitions); broadcast across partitions with .broadcast_to",
                value=(x.shape, y.shape), limit="same shape")
        x, y = _spread(x, shape), _spread(y, shape)
    return _isa.tensor_tensor(x, y, op, dtype=dtype, mask=mask)


def _same_up_to_unit_axes(a: tuple, b: tuple) -> bool:
    """(P, 1) and (P,), or (P, 1, F) and (P, F): the same elements per partition, as AWS's compiler
    reads them (a reduction without keepdims gives (P,), the tile it meets is (P, 1))."""
    squeeze = lambda shape: tuple(n for n in shape[1:] if n != 1)  # noqa: E731
    return bool(a) and bool(b) and a[0] == b[0] and squeeze(a) == squeeze(b)


def _free_broadcast_shape(a: tuple, b: tuple):
    """NumPy broadcasting of two tile shapes along free axes only (the partition sizes must match)."""
    if len(a) != len(b) or not a or a[0] != b[0]:
        return None
    out = [a[0]]
    for m, n in zip(a[1:], b[1:]):
        if m != n and 1 not in (m, n):
            return None
        out.append(builtins.max(m, n))
    return tuple(out)


def _spread(x: NkiTensor, shape: tuple) -> NkiTensor:
    """x read with stride 0 along its size-1 free axes, as an access pattern of `shape` (the operand
    stream repeats those elements; no copy)."""
    if tuple(x.shape) == tuple(shape):
        return x
    if x._index is not None or x._ap is not None:
        x = copy(x)                                   # an access pattern needs a whole tile
    storage = x._storage or x.shape
    if math.prod(storage) != math.prod(x.shape):
        raise ShapeMismatchError(f"shape mismatch: cannot broadcast {x.shape} to {shape}", value=x.shape, limit=shape)
    strides, step = [], 1
    for n in reversed(x.shape):
        strides.append(step)
        step *= n
    strides = strides[::-1]
    pattern = [[0 if (n == 1 and m != 1) else stride, m] for stride, n, m in zip(strides, x.shape, shape)]
    return x.ap(pattern)


def _make_binary(op: str):
    def fn(x, y, *, dtype=None, mask=None, **kwargs):
        return _binary(op, x, y, dtype, mask)
    fn.__name__ = fn.__qualname__ = op
    fn.__doc__ = f"Element-wise {op} of two tiles, or of a tile and a number / [P, 1] tile (Vector engine)."
    fn.nki_op = op
    return fn


add, subtract, multiply, divide = (_make_binary(n) for n in ("add", "subtract", "multiply", "divide"))
maximum, minimum, power = (_make_binary(n) for n in ("maximum", "minimum", "power"))
equal, not_equal, greater, greater_equal, less, less_equal = (
    _make_binary(n) for n in ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal"))
logical_and, logical_or = _make_binary("logical_and"), _make_binary("logical_or")
bitwise_and, bitwise_or, bitwise_xor = (_make_binary(n) for n in ("bitwise_and", "bitwise_or", "bitwise_xor"))
mod = _make_binary("mod")


def _make_unary(op: str):
    def fn(x, *, dtype=None, mask=None, **kwargs):
        return _isa.activation(op, x, dtype=dtype, mask=mask)
    fn.__name__ = fn.__qualname__ = op
    fn.__doc__ = f"Element-wise {op} of a tile (Scalar engine activation)."
    fn.nki_op = op
    return fn


exp, log, tanh, sigmoid, relu = (_make_unary(n) for n in ("exp", "log", "tanh", "sigmoid", "relu"))
gelu, gelu_apprx_tanh, silu = (_make_unary(n) for n in ("gelu", "gelu_apprx_tanh", "silu"))
sqrt, rsqrt, square, abs, sign = (_make_unary(n) for n in ("sqrt", "rsqrt", "square", "abs", "sign"))
sin, cos, erf, softplus = (_make_unary(n) for n in ("sin", "cos", "erf", "softplus"))
identity = _make_unary("identity")
copy.nki_op = "copy"


def negative(x, *, dtype=None, mask=None, **kwargs):
    """-x (Vector engine)."""
    return _isa.tensor_scalar(x, "multiply", -1.0, dtype=dtype, mask=mask)


def reciprocal(x, *, dtype=None, mask=None, **kwargs):
    """1 / x (Vector engine)."""
    return _isa.reciprocal(x, dtype=dtype, mask=mask)


negative.nki_op = "negative"
reciprocal.nki_op = "reciprocal"


def where(condition, x, y, *, dtype=None, mask=None, **kwargs):
    """condition ? x : y element-wise, for a 0/1 condition tile (x or y may be a number; y may also be a
    [P, 1] tile): one Vector-engine select that copies values, so inf and NaN pass through exactly."""
    if not isinstance(condition, NkiTensor):
        raise NKIError("nl.where: condition must be a tile of 0/1 values (e.g. from nl.greater)")
    if not isinstance(x, NkiTensor):
        if not isinstance(y, NkiTensor):
            raise NKIError("nl.where: x and y are both numbers; at least one must be a tile")
        # select picks its tile where the predicate holds: swap the roles and reverse the predicate
        return _select(condition, y, x, True, mask, dtype or float32)
    return _select(condition, x, y, False, mask, dtype or x.dtype)


def _select(predicate: NkiTensor, on_true: NkiTensor, on_false, reverse: bool, mask, dtype) -> NkiTensor:
    """One Vector-engine select; on_false may be a number, a [P, 1] tile or a tile of on_true's shape."""
    ranges = _issue.ranges(mask, predicate, on_true, on_false)
    launch = _issue.begin()

    def emit(out, _accumulate):
        false = on_false.hw_view(ranges) if isinstance(on_false, NkiTensor) else float(on_false)
        launch.core.select(dst=out.hw_view(ranges), predicate=predicate.hw_view(ranges),
                           on_true=on_true.hw_view(ranges), on_false=false, reverse_pred=reverse)

    return _issue.produce(on_true.shape, dtype, "sbuf", emit, ranges=ranges)


# -- reductions along free axes ----------------------------------------------------------------
def _reduce(op: str, x, axis, dtype, mask, keepdims, negate=False):
    return _isa.tensor_reduce(op, x, axis, negate=negate, keepdims=keepdims, dtype=dtype, mask=mask)


def sum(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):  # noqa: A001  (NKI's name)
    """Sum along free axes (Vector engine)."""
    return _reduce("add", x, axis, dtype, mask, keepdims)


def max(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):  # noqa: A001
    """Maximum along free axes (Vector engine)."""
    return _reduce("maximum", x, axis, dtype, mask, keepdims)


def min(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):  # noqa: A001
    """Minimum along free axes (Vector engine)."""
    return _reduce("minimum", x, axis, dtype, mask, keepdims)


def prod(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
    return _reduce("multiply", x, axis, dtype, mask, keepdims)


def mean(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
    """Mean along free axes: a sum, then a multiply by 1/n (float32 for integer inputs)."""
    axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
    count = math.prod(x.shape[a] for a in axes)
    total = _reduce("add", x, axes, float32 if not _dt.is_float(x.dtype) else dtype, mask, keepdims)
    return _isa.tensor_scalar(total, "multiply", 1.0 / count, dtype=dtype, mask=mask)


sum.nki_op, max.nki_op, min.nki_op, prod.nki_op = "add", "maximum", "minimum", "multiply"


# -- Tensor-engine operations -------------------------------------------------------------------------
def transpose(x, *, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """x[P, F] -> [F, P] through the Tensor engine; the result is a PSUM tile."""
    return _isa.nc_transpose(_in_sbuf(x, mask), dtype=dtype, mask=mask)


def matmul(x, y, *, transpose_x: bool = False, mask=None, **kwargs) -> NkiTensor:
    """x @ y into a new PSUM tile (fp32); `psum_tile += nl.matmul(...)` accumulates.

    With transpose_x=True, x is given as [K, M] (already transposed, the layout the Tensor engine
    wants) and the result is x.T @ y; otherwise x is [M, K] and is first transposed on the Tensor
    engine (nc_transpose into PSUM, then a copy back to SBUF), as NKI does.
    """
    x, y = _in_sbuf(x, mask), _in_sbuf(y, mask)
    if not transpose_x:
        xt_psum = _isa.nc_transpose(x, mask=mask)
        x = _isa.tensor_copy(xt_psum, dtype=x.dtype)
    return _isa.nc_matmul(x, y, mask=mask)


def _in_sbuf(x: NkiTensor, mask=None) -> NkiTensor:
    """x, or a copy of it in SBUF when it is in PSUM (AWS's compiler inserts this copy)."""
    if isinstance(x, NkiTensor) and x.buffer == "psum":
        return _isa.tensor_copy(x, mask=mask)
    return x


def broadcast_to(x: NkiTensor, shape) -> NkiTensor:
    """Broadcast a [1, F] tile across partitions ([P, F], via a ones-vector matmul on the Tensor engine)
    or a [P, 1] tile along the free axis ([P, F], via the Vector engine)."""
    shape = tuple(shape)
    if tuple(x.shape) == shape:
        return x
    if len(shape) == 2 and x.shape[0] == 1 and x.shape[1] == shape[1]:
        ones_row = full((1, shape[0]), 1.0, x.dtype)                # [K=1, M=P]
        row = _in_sbuf(x)
        width = tile_size.gemm_moving_fmax                          # 512 columns per matmul
        if shape[1] <= width:
            spread = _isa.nc_matmul(ones_row, row)                  # [P, F] = ones.T @ x
            return _isa.tensor_copy(spread, dtype=x.dtype)
        out = ndarray(shape, x.dtype, buffer=sbuf, name="broadcast")
        for start in range(0, shape[1], width):                     # wider rows: one matmul per chunk
            stop = builtins.min(start + width, shape[1])
            out[:, start:stop] = _isa.tensor_copy(_isa.nc_matmul(ones_row, row[:, start:stop]), dtype=x.dtype)
        return out
    if len(shape) == 2 and x.shape[0] == shape[0] and math.prod(x.shape[1:]) == 1:
        out = zeros(shape, x.dtype)
        _isa.tensor_scalar(dst=out, data=out, op0="add", operand0=x)
        return out
    raise ShapeMismatchError(f"shape mismatch: cannot broadcast {x.shape} to {shape}", value=x.shape, limit=shape)


def shared_identity_matrix(n: int, dtype=float32, **kwargs) -> NkiTensor:
    """An [n, n] identity matrix in SBUF (written by one GpSimd iota instruction)."""
    eye = ndarray((n, n), dtype, buffer=sbuf, name="identity")
    launch = _issue.begin()
    launch.core.iota(dst=eye.hw_view(), expr=np.eye(n, dtype=np.int32))
    return eye


def device_print(prefix: str, x) -> None:
    """Print a tile's values when the program runs (full mode; in timing mode the shape only): an
    instruction of the program, like every other, so each replay prints again."""
    launch = _runtime.current()
    launch.flush()
    if isinstance(x, NkiTensor):
        launch.core.device_print(prefix=prefix, src=x.hw_view())
    else:
        print(prefix, x)


def softmax(x, axis, *, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """exp(x - max) / sum along a free axis (numerically stable)."""
    peak = max(x, axis=axis, keepdims=True, mask=mask)
    shifted = subtract(x, peak, mask=mask)
    e = exp(shifted, mask=mask)
    total = sum(e, axis=axis, keepdims=True, mask=mask)
    return divide(e, total, mask=mask, dtype=dtype)


# -- more of NKI's language: slices, SPMD over cores, limits, constants, loops, randomness ------------------
def ds(start: int, size: int) -> slice:
    """nl.ds(start, size): the slice start:start+size (a "dynamic slice" in NKI, for tensor indexing)."""
    start = int(_loops.plain(start))           # a loop index: the slice's box is affine in it
    return slice(start, start + int(size))


class nc:
    """nl.nc(n): n physical NeuronCores, as a launch-grid axis (``kernel[nl.nc(2), 2]``: program i of
    that axis on core i) or inside nl.spmd_dim; ``nl.nc(2) * 2`` is ``nl.spmd_dim(nl.nc(2), 2)`` and
    ``2 * nl.nc(2)`` is ``nl.spmd_dim(2, nl.nc(2))`` (nki.language.nc / spmd_dim pages)."""

    def __init__(self, count: int):
        self.count = int(count)

    def __mul__(self, size):
        return spmd_dim(self, size)

    def __rmul__(self, size):
        return spmd_dim(size, self)

    def __repr__(self) -> str:
        return f"nl.nc({self.count})"


class spmd_dim(int):
    """nl.spmd_dim: a launch-grid axis of `size` x k programs spread over k physical NeuronCores.

    It is an int (the axis size), with `cores` = k and `core_of(i)` the core of program i on this axis,
    as AWS's nki.language.spmd_dim page lays them out for a (4, 2) grid on 2 cores:
    ``nl.spmd_dim(nl.nc(2), 2)`` (cores first) puts programs 0, 1 on core 0 and 2, 3 on core 1;
    ``nl.spmd_dim(2, nl.nc(2))`` (cores last) puts 0, 2 on core 0 and 1, 3 on core 1."""

    def __new__(cls, size, cores: "nc | int" = 1):
        cores_first = isinstance(size, nc)
        if cores_first:                              # nl.spmd_dim(nl.nc(2), 4)
            size, cores = cores, size
        k = cores.count if isinstance(cores, nc) else int(cores)
        value = super().__new__(cls, int(size) * k)
        value.cores = k
        value.per_core = int(size)
        value.cores_first = cores_first
        return value

    def core_of(self, i: int) -> int:
        """The physical core (0..cores-1) that runs program `i` of this axis."""
        return i // self.per_core if self.cores_first else i % self.cores

    def __repr__(self) -> str:
        if self.cores_first:
            return f"nl.spmd_dim(nl.nc({self.cores}), {self.per_core})"
        return f"nl.spmd_dim({self.per_core}, nl.nc({self.cores}))"


class _Limits:
    """The numeric limits of a float type, as `nl.fp32.min` etc. (np.dtype(nl.fp32) is float32)."""

    def __init__(self, dtype, name: str):
        self.dtype = np.dtype(dtype)
        self.name = name
        info = ml_dtypes.finfo(self.dtype)
        self.min, self.max = float(info.min), float(info.max)
        self.eps, self.tiny, self.bits = float(info.eps), float(info.tiny), int(info.bits)

    def __repr__(self) -> str:
        return f"nl.{self.name}"


fp32, fp16, bf16 = _Limits(float32, "fp32"), _Limits(float16, "fp16"), _Limits(bfloat16, "bf16")
fp8_e4m3, fp8_e5m2 = _Limits(float8_e4m3, "fp8_e4m3"), _Limits(float8_e5m2, "fp8_e5m2")


def finfo(dtype):
    """nl.finfo(dtype): machine limits of a float dtype (.min, .max, .eps, .tiny, .bits), bf16/fp8 too."""
    return ml_dtypes.finfo(_dt.as_dtype(getattr(dtype, "dtype", dtype)))


def iinfo(dtype):
    """nl.iinfo(dtype): limits of an integer dtype."""
    return np.iinfo(_dt.as_dtype(dtype))


def floor(x: NkiTensor, *, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """Largest integer <= x, element-wise: one Vector instruction computing x - (x mod 1) (NumPy's mod
    is a floor-mod, so this is exact for negative x too)."""
    return _isa.scalar_tensor_tensor(data=x, op0="mod", operand0=1.0, op1="subtract", operand1=x,
                                     reverse1=True, dtype=dtype, mask=mask)


floor.nki_op = "floor"


def static_cast(x, dtype):
    """Cast to `dtype`: a tile through an engine copy (tensor_copy), a NumPy array / number on the host."""
    if isinstance(x, NkiTensor):
        return _isa.tensor_copy(x, dtype=dtype)
    return np.asarray(x).astype(_dt.as_dtype(dtype))


def shared_constant(constant, dtype=None, **kwargs) -> NkiTensor:
    """An HBM tensor holding a compile-time constant (a NumPy array), shared by every program of the
    launch; load it with nl.load. Like a kernel input it is in HBM before the kernel starts."""
    launch = _runtime.current()
    launch.flush()
    values = np.asarray(constant)
    values = values.astype(_dt.as_dtype(dtype) if dtype is not None else _dt.as_dtype(values.dtype))
    hw = launch.core.hbm.tensor(values, name=launch.fresh_name("constant"))
    return NkiTensor.allocation(hw, "shared_hbm", launch)


def loop_reduce(x: NkiTensor, op, loop_indices, *, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """Reduce over loop iterations: ``acc[...] = nl.loop_reduce(tile, np.add, loop_indices=[i])`` is
    ``acc = op(acc, tile)``, one Vector-engine tensor_tensor whose second input is its own destination.
    Assign it into the accumulator tile (initialised before the loop, e.g. with nl.zeros): the
    destination is an input, so a bare value would read an uninitialised tile."""
    opcode = _isa.op_name(op)
    x = _issue.tile(x, "x")
    target = _dt.as_dtype(dtype) if dtype is not None else x.dtype
    ranges = _issue.ranges(mask, x)
    launch = _issue.begin()

    def emit(out, _accumulate):
        view = out.hw_view(ranges)
        launch.core.tensor_tensor(dst=view, data1=x.hw_view(ranges), data2=view, op=opcode)

    return _issue.produce(x.shape, target, "sbuf", emit, ranges=ranges)


def random_seed(seed, *, mask=None, **kwargs) -> None:
    """Seed the random number generator of nl.dropout (an int, or a [1, 1] tile holding one)."""
    launch = _issue.begin()
    launch.core.set_rng_seed(seed.hw_view() if isinstance(seed, NkiTensor) else int(seed))


def dropout(x: NkiTensor, rate, *, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """Zero each element of x with probability `rate` (a number or a [P, 1] tile): nisa.dropout."""
    return _isa.dropout(x, rate, dtype=dtype, mask=mask)


import sys as _sys  # noqa: E402  (tiles get their math and allocation from this module, see tensor.install)

from trnlab.nki.tensor import install as _install_tile_operations  # noqa: E402

_install_tile_operations(language=_sys.modules[__name__], allocate=_allocate)


from trnlab.nki import mask_split as _mask_split  # noqa: E402  (masks relating several iterators)

# NKI 0.7's compiled loops and beta 1's dynamic_range (loops_compiled.py)
from trnlab.nki.loops_compiled import dynamic_range, fori_loop, while_loop  # noqa: E402,F401

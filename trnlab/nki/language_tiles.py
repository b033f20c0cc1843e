"""`nki.language`'s tiles and their places: the data types, buffers (`nl.sbuf`, `nl.psum`,
`nl.shared_hbm`, ...), tile sizes, the loop ranges and SPMD ids, allocation (`nl.ndarray`, `nl.zeros`,
...) and data movement (`nl.load`, `nl.store`, `nl.copy`). The namespace is `language.py`.
"""
from __future__ import annotations

import builtins
import dis as _dis
import itertools
import math
import sys as _sys_module

import numpy as np

from trnlab.hardware import dtypes as _dt
from trnlab.hardware import presets as _presets
from trnlab.hardware.errors import MemoryPlacementError
from trnlab.nki import compiler as _compiler
from trnlab.nki import indexing as _indexing
from trnlab.nki.errors import user_site as _user_site
from trnlab.nki import isa as _isa
from trnlab.nki import loops as _loops
from trnlab.nki.loop_index import plain as _plain
from trnlab.nki import issue as _issue
from trnlab.nki import launches as _launches
from trnlab.nki import mask_split as _mask_split
from trnlab.nki.errors import NKIError
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
    """nl.sbuf, nl.psum, nl.hbm, ...: a memory. A tensor's `.buffer` is the memory's name, and the two
    compare equal (``t.buffer == nl.sbuf``), as AWS's kernels test where a tensor lives (the NKI
    Library's router_topk takes SBUF or HBM inputs that way)."""

    def __init__(self, name: str):
        self.name = name

    def __eq__(self, other) -> bool:
        if isinstance(other, _Buffer):
            return self.name == other.name
        if isinstance(other, str):
            return self.name == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.name)

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
    launch = _launches.active()
    return launch.core.spec if launch is not None else _presets.TRN2.core


class _TileSizeMeta(type):
    pmax = property(lambda cls: _spec().partitions)
    gemm_stationary_fmax = property(lambda cls: _spec().stationary_fmax)
    # 512 on every generation: AWS's tile_size page gives no number, AWS's kernels use it as 512 (one bank
    # of fp32), and a NeuronCore-v4 nc_matmul's wider limit depends on dst's type (`memory.moving_fmax`)
    gemm_moving_fmax = property(lambda cls: _spec().moving_fmax)
    # the PSUM constants are per bank ("Maximum free dimension per PSUM bank per partition, in FP32
    # elements", nki.language.tile_size v2.33; psum_fmax deprecated for psum_bank_fmax): 2 KiB everywhere
    psum_fmax = property(lambda cls: _spec().psum_bank_bytes // 4)
    psum_bank_fmax = property(lambda cls: _spec().psum_bank_bytes // 4)
    psum_bank_fmax_bytes = property(lambda cls: _spec().psum_bank_bytes)
    psum_fmax_bytes = property(lambda cls: _spec().psum_bank_bytes)
    psum_num_banks = property(lambda cls: _spec().psum_banks)
    sbuf_fmax_bytes = property(lambda cls: _spec().sbuf_partition_bytes)
    # "Maximum free dimension of a tile on SBUF buffer, in FP32 elements" (v2.33): the same bytes, counted in fp32
    sbuf_fmax = property(lambda cls: _spec().sbuf_partition_bytes // 4)
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
        launch = _launches.active()
        if launch is not None and self._no_reorder:
            launch.no_reorder = True          # the schedule keeps this program's order (nki.schedule_of)
        if launch is None or self.kind == "static":
            return iter(self._range)
        values = self._range
        if self.stamps and getattr(launch, "loop_tracer", None) is not None:   # stamping (CPython 3.11 only)
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
                loops[-1] = (_plain(i) - start) // step
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
    launch = _launches.current()
    if not launch.grid:
        return 0
    if not 0 <= axis < len(launch.grid):
        raise NKIError(f"program_id({axis}): the launch grid {launch.grid} has {len(launch.grid)} axes")
    return launch.program_id[axis]


def num_programs(axes=None):
    """Programs along `axes` of the launch grid (all of them if axes is None)."""
    grid = _launches.current().grid or (1,)
    if axes is None:
        return math.prod(grid)
    if isinstance(axes, (tuple, list)):
        return tuple(grid[a] for a in axes)
    return grid[axes]


def program_ndim() -> int:
    return len(_launches.current().grid)


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
        tiles = _tile_offsets(placement, shape, physical, dtype, partition_axis, buffer) if partition_axis else None
        # the same direct allocation again (an nl.ndarray at a fixed address inside a loop) is the
        # same bytes on the chip: one tile, whose writes and reads order the iterations. Only the
        # same bytes for every block: two `psum.alloc(func)` tensors that agree on block 0 but not on
        # the others are two tensors (each allocation's tiles are its own)
        key = (buffer, where["offset"], tuple(int(n) for n in physical), str(_dt.as_dtype(dtype)), partition_axis,
               None if tiles is None else tuple(tiles))
        hw = launch.placed.get(key)
        declared = launch.__dict__.setdefault("declared", {})
        if hw is None:
            if tiles is not None:
                where["tiles"] = tiles
            hw = memory.allocate(physical, dtype, name=name, partition_axis=partition_axis, placement=where)
            launch.placed[key] = hw
            declared[id(hw)] = 0
        else:
            declared[id(hw)] += 1     # a new tensor on the same bytes: its tiles start fresh (isa.nc_matmul)
        if rotate is None:
            tensor = NkiTensor.allocation(hw, buffer, launch)
        else:
            tensor = NkiTensor.allocation(hw, buffer, launch, shape=tuple(shape))
            tensor._rotate = tuple(rotate)
        # which declaration of these bytes this tensor is (isa_matmul: its own accumulation groups)
        launch.__dict__.setdefault("declaration", {})[id(tensor)] = (hw, declared[id(hw)])
        return tensor
    dtype = _dt.as_dtype(dtype)
    if buffer == "shared_hbm" and launch.grid:
        # one output shared by every SPMD program: the n-th shared_hbm allocation of each program
        cursor = launch.shared_cursor
        launch.shared_cursor += 1
        if cursor < len(launch.shared_hbm):
            return launch.shared_hbm[cursor]
    hw = core.hbm.allocate(tuple(int(n) for n in shape), dtype, name=launch.fresh_name(name or buffer))
    if buffer == "shared_hbm" and hasattr(core, "mark_shared"):
        core.mark_shared(hw)       # the cores of an nl.nc(2) launch share it (hardware/shared_hbm.py)
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


def ndarray(shape, dtype, buffer=None, name: str = "", **kwargs) -> NkiTensor:
    """A new tensor (uninitialised) in `buffer` (default SBUF); `buffer` and `name` may be given in
    order, ``nl.ndarray(shape, dtype, nl.sbuf)``, as AWS's signature ``ndarray(shape, dtype, buffer=None,
    name='')`` and its language guide allow.

    `buffer` may also be a direct allocation of nki.compiler (``ncc.sbuf.mod_alloc(base_addr=...)``,
    ``ncc.psum.mod_alloc(base_bank=...)``, ``ncc.sbuf.alloc(func)``): the allocator receives it as
    ``placement=`` and puts each logical tile where it says."""
    launch = _launches.current()
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


def empty(shape, dtype, buffer=None, name: str = "", **kwargs) -> NkiTensor:
    return ndarray(shape, dtype, buffer=buffer, name=name)


def full(shape, fill_value, dtype, buffer=None, name: str = "", **kwargs) -> NkiTensor:
    """A new tensor filled with `fill_value` (one memset)."""
    tensor = ndarray(shape, dtype, buffer=buffer, name=name)
    _isa.memset(dst=tensor, value=fill_value)
    return tensor


def zeros(shape, dtype, buffer=None, name: str = "", lazy_initialization: bool = False, **kwargs) -> NkiTensor:
    """Zeros; with `lazy_initialization=True` (beta 1, as neuronx-cc's dumped kernels declare PSUM
    accumulators) each block is zeroed at its first access instead of all at once here, so a block tensor
    larger than PSUM can hold one block per iteration. ASSUMED: the zeroing is a memset just before that
    access (AWS's compiler may fold it into the first matmul of the accumulation)."""
    if not lazy_initialization:
        return full(shape, 0.0, dtype, buffer=buffer, name=name)
    tensor = ndarray(shape, dtype, buffer=buffer, name=name)
    filled: set = set()
    tensor._lazy = lambda view: _fill_lazily(tensor, view, 0.0, filled)
    # which blocks a loop's stamped iterations reach is not known without running them: trace concretely
    _loops.run_concretely(_issue.begin(), "nl.zeros(lazy_initialization=True): each block is zeroed at "
                                          "its first access")
    return tensor


def _fill_lazily(owner: NkiTensor, view: NkiTensor, value: float, filled: set) -> None:
    """Fill the blocks of a lazily initialized tensor that `view` reaches and that are not filled yet (each
    its own memset, just before this first access). The blocks are those of the axes before the
    partition axis; a view whose block index is not a plain integer or slice fills every block it may reach."""
    axes = owner._hw.partition_axis or 0
    if view is owner or (view._index is None and view._ap is None):
        entries = [slice(0, n, 1) for n in owner.shape[:axes]]
    elif view._index is not None:
        entries = list(view._index[:axes])
    else:
        entries = [k if extent is None or isinstance(k, (int, np.integer)) and (start, step) == (0, 1) else None
                   for k, start, step, extent in view._ap[:axes]]
    choices = []
    for axis, entry in enumerate(entries):
        if isinstance(entry, (int, np.integer)):
            choices.append((int(entry),))
        elif isinstance(entry, slice):
            choices.append(range(*entry.indices(owner.shape[axis])))
        else:
            choices.append(range(owner.shape[axis]))
    for block in itertools.product(*choices):
        if block not in filled:
            filled.add(block)
            _isa.memset(dst=owner._view_of(block + (slice(None),) * (owner.ndim - axes)), value=value)


def ones(shape, dtype, buffer=None, name: str = "", **kwargs) -> NkiTensor:
    return full(shape, 1.0, dtype, buffer=buffer, name=name)


def _not_a_grid(a, call: str) -> None:
    """AWS documents tile-grid inputs for nl.empty_like only; a grid's `shape` counts tiles, so treating it as
    a tensor here would silently allocate the wrong shape."""
    from trnlab.nki.tile_grids import NkiGrid
    if isinstance(a, NkiGrid):
        raise TypeError(f"nl.{call} takes an NkiTensor, got an {type(a).__name__} (its shape {tuple(a.shape)} counts "
                        f"tiles); allocate with nl.empty_like(grid) and fill its .data (nisa.memset)")


def zeros_like(a, dtype=None, buffer=None, name: str = "", **kwargs) -> NkiTensor:
    _not_a_grid(a, "zeros_like")
    return zeros(a.shape, dtype or a.dtype, buffer=buffer or a.buffer, name=name)


def ones_like(a, dtype=None, buffer=None, name: str = "", **kwargs) -> NkiTensor:
    _not_a_grid(a, "ones_like")
    return ones(a.shape, dtype or a.dtype, buffer=buffer or a.buffer, name=name)


def full_like(a, fill_value, dtype=None, *, buffer=None, name: str = "", **kwargs) -> NkiTensor:
    _not_a_grid(a, "full_like")
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
    if _mask_split.has_multi_iterator_clause(mask) or src._dynamic is not None:
        # e.g. mask=(512 * i_p + i_f < n): one DMA per box; an indirect view: one indirect DMA
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

"""Tile grids: a tensor navigated in tile or block coordinates, and the storage allocated as one.

AWS's latest NKI pages (awsdocs-neuron, `/en/latest/`, 2026-10 / 2026-11) add `nl.tiles`, `nl.blocks`,
`nl.alloc_tiles`, `nl.alloc_blocks`, `nl.alloc_stream_buffers` and the classes `NkiGrid`, `NkiTileGrid`,
`NkiBlockGrid`, `NkiStreamBuffers`, taught by the tutorials "Tile-grid fundamentals" (2026-10-09) and
"Software pipelining" (2026-10-12). A grid is bookkeeping only: "Creating and indexing the view allocates
no storage and moves no data" (nki.language.NkiTileGrid). What an instruction consumes is `grid.data`, an
ordinary `NkiTensor` view of the grid's storage, so every DMA and instruction a grid kernel issues is
traced like any other NKI code (values, timing, capacity and the other rules alike).

A grid is a *store* (the NkiTensor holding the elements, and how logical element coordinates map to it)
plus a *region* (per logical dim, where its elements start and how many there are), cut into *cells*
(a prefix dim's cell is one element, a tiled dim's cell a tile, or a block of tiles) of which each dim
selects a `range`; an integer index *consumes* a dim (it leaves `shape`, not the tile's elements).

Two layouts:

- *direct*: the elements are the tensor's own (`nl.tiles(x)` of any tensor, and HBM allocations: "HBM uses
  the compact logical extent as backing storage", nki.language.alloc_blocks);
- *dense*: the on-chip allocations, "the same dense rank-two capacity layout" (nki.language.alloc_blocks)
  for SBUF and PSUM. ASSUMED reading: one (P, F) tensor, P the tile's first dim (the partitions), each
  tile a full-capacity slot of prod(tile[1:]) elements per partition, the tiles side by side along the free
  axis in row-major tile order (prefix slabs first); a dim with one tile holds its exact extent.

Not modelled here: run-time (register / SBUF tensor) grid indices, sharding slices and indirect
selections of AWS's "Tile-grid indexing and transformations" tutorial (refused with TypeError).
"""
from __future__ import annotations

import math

import numpy as np

from trnlab.nki import launches as _launches
from trnlab.nki import loops as _loops
from trnlab.nki.errors import NKIError
from trnlab.nki.loop_index import LoopIndex, plain, plain_slice
from trnlab.nki.tensor import HBM_KINDS, ON_CHIP, NkiTensor, _is_register

TRANSPOSES = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}   # AWS's dma_transpose orders, ranks two to four
PARTITIONS = 128


class TileGridError(NKIError):
    """A tile-grid call that breaks one of the rules of AWS's tile-grid pages (a ValueError)."""


# -- argument checks ----------------------------------------------------------------------------------------------
def _int_tuple(value, what: str, call: str, *, min_rank: int = 1) -> tuple:
    """`value` as a tuple of positive exact Python ints: "TypeError – if a shape is not a tuple of exact Python
    integers"; "ValueError – if a shape entry is nonpositive" (AWS, nki.language.alloc_tiles, latest)."""
    if not isinstance(value, tuple) or not all(type(v) is int for v in value):
        raise TypeError(f"{call}: {what} must be a tuple of exact Python ints, got {value!r}")
    if any(v <= 0 for v in value):
        raise TileGridError(f"{call}: every entry of {what} must be positive, got {value}")
    if len(value) < min_rank:
        raise TileGridError(f"{call}: {what} needs at least {min_rank} dims, got {len(value)} ({value})")
    return value


def _memory(buffer, call: str) -> str:
    """The memory name of an NKI MemoryRegion (nl.sbuf, nl.psum, nl.hbm, nl.shared_hbm, nl.private_hbm)."""
    from trnlab.nki.language_tiles import _Buffer
    if type(buffer) is not _Buffer:
        raise TypeError(f"{call}: buffer must be an NKI MemoryRegion (nl.sbuf, nl.psum, nl.shared_hbm, ...), "
                        f"got {buffer!r}")
    return buffer.name


def _region_object(name: str):
    """The nl.* MemoryRegion named `name` (what `grid.buffer` returns)."""
    from trnlab.nki import language_tiles
    return getattr(language_tiles, name)


def _check_address(address, memory: str) -> None:
    if address is not None and (memory != "sbuf" or not isinstance(address, tuple) or len(address) != 2
                                or not all(type(a) is int and a >= 0 for a in address)):
        raise TileGridError(f"address={address!r} in {memory}: trnlab places a tile grid at a kernel-chosen "
                            f"address only in SBUF, given as (partition_offset, free_offset) of ints >= 0")


def _new_tensor(shape: tuple, dtype, memory: str, name: str, address) -> NkiTensor:
    """An uninitialised tensor; `address` = (partition_offset, free_offset) is a direct SBUF allocation (the
    contract of nl.ndarray's address: ASSUMED a byte offset in each partition, as ncc.sbuf.mod_alloc's)."""
    from trnlab.nki import compiler, language_tiles
    buffer = _region_object(memory)
    if address is not None:
        _check_address(address, memory)
        buffer = compiler.sbuf.mod_alloc(base_addr=address[1], base_partition=address[0])
    return language_tiles.ndarray(tuple(int(n) for n in shape), dtype, buffer=buffer, name=name)


# -- the storage a grid navigates -----------------------------------------------------------------------------------
class _Store:
    """The tensor holding a grid's elements and how logical element coordinates map onto it (module docstring)."""

    __slots__ = ("tensor", "dense", "extent", "prefix", "layout", "cells", "free")

    def __init__(self, tensor: NkiTensor, dense: bool = False, extent=(), prefix: int = 0, tile=()):
        self.tensor, self.dense = tensor, dense
        if not dense:
            return
        self.extent, self.prefix = tuple(extent), prefix
        counts = tuple(extent[:prefix]) + tuple(-(-e // t) for e, t in zip(extent[prefix:], tile))
        # a dim with one tile holds its exact extent; several tiles: full-capacity slots of the nominal tile
        self.layout = tuple(t if n > 1 else e for e, t, n in zip(extent[prefix:], tile, counts[prefix:]))
        strides, acc = [], 1
        for n in reversed(counts):
            strides.append(acc)
            acc *= n
        self.cells = tuple(reversed(strides))        # row-major cell strides, in tiles
        self.free = math.prod(self.layout[1:])       # elements per partition of one tile

    @classmethod
    def allocate(cls, extent: tuple, prefix: int, tile: tuple, dtype, memory: str, name: str, address) -> "_Store":
        if memory in HBM_KINDS:                       # the compact logical extent
            return cls(_new_tensor(extent, dtype, memory, name, address))
        store = cls(None, True, extent, prefix, tile)
        if store.layout[0] > PARTITIONS:
            raise TileGridError(f"{memory} tile grid: tile_shape[0] = {tile[0]} partitions, the limit is "
                                f"{PARTITIONS} (the tile's first dim maps to the partitions)")
        total = math.prod(extent[:prefix]) * math.prod(-(-e // t) for e, t in zip(extent[prefix:], tile))
        # [P = the tile's first dim, F = every tile's slot side by side]
        store.tensor = _new_tensor((store.layout[0], total * store.free), dtype, memory, name, address)
        return store

    def placed(self, dim: int, xs: np.ndarray):
        """Dense layout: (partition of each element or None, free offset of each) along logical `dim`."""
        stride = self.cells[dim] * self.free
        if dim < self.prefix:
            return None, xs * stride
        j = dim - self.prefix
        t = self.layout[j]
        inner = math.prod(self.layout[j + 1:]) if j else 0
        if j == 0:
            return xs % t, (xs // t) * stride
        return None, (xs // t) * stride + (xs % t) * inner


def _step(values: np.ndarray):
    """The common difference of an arithmetic progression (0 for one value), or None if it is not one."""
    if len(values) < 2:
        return 0
    d = np.diff(values)
    return int(d[0]) if np.all(d == d[0]) and d[0] > 0 else None


# -- grids ------------------------------------------------------------------------------------------------------------
class NkiGrid:
    """nki.language.NkiGrid: "Base class for tensor views organized into tiles or blocks" — "A grid describes an
    existing tensor region through logical tile or block coordinates while retaining its dtype, buffer, and
    underlying storage" (AWS, nki.language.NkiGrid, latest). Made by nl.tiles / nl.blocks / nl.alloc_tiles /
    nl.alloc_blocks / nl.empty_like / a stream pool, never directly."""

    __slots__ = ("_store", "_origin", "_extent", "_prefix", "_tile", "_block", "_cells", "_consumed")

    def __init__(self, **kwargs):
        raise TypeError(f"{type(self).__name__} is not constructed directly: use nl.tiles(), nl.blocks(), "
                        f"nl.alloc_tiles() or nl.alloc_blocks()")

    @classmethod
    def _make(cls, store: _Store, origin, extent, prefix: int, tile, block, cells=None, consumed=None):
        grid = object.__new__(cls)
        grid._store, grid._origin, grid._extent = store, tuple(origin), tuple(extent)
        grid._prefix, grid._tile, grid._block = prefix, tuple(tile), None if block is None else tuple(block)
        if cells is None:
            cells = tuple(range(-(-e // grid._cell(d))) for d, e in enumerate(grid._extent))
        grid._cells = tuple(cells)
        grid._consumed = tuple(consumed) if consumed is not None else (False,) * len(grid._extent)
        return grid

    # -- geometry -----------------------------------------------------------------------------------------
    def _cell(self, d: int) -> int:
        """Elements per cell along logical dim d: 1 on a prefix dim, a tile (times the block) on a tiled one."""
        if d < self._prefix:
            return 1
        j = d - self._prefix
        return self._tile[j] * (self._block[j] if self._block is not None else 1)

    def _runs(self, d: int) -> list:
        """The selected elements along dim d, region-relative: one (start, stop) per selected cell."""
        size, extent = self._cell(d), self._extent[d]
        return [(c * size, min((c + 1) * size, extent)) for c in self._cells[d]]

    def _elements(self, d: int) -> np.ndarray:
        """The selected elements along dim d as store coordinates (cells packed in order)."""
        return np.concatenate([np.arange(a, b) for a, b in self._runs(d)]) + self._origin[d]

    @property
    def shape(self) -> tuple:
        """The grid coordinates still navigable: "NkiGrid.shape counts" tiles (blocks for a block grid), and an
        untiled prefix dim its slabs; an integer index consumes a coordinate (AWS, NkiTileGrid / NkiBlockGrid)."""
        return tuple(len(r) for r, used in zip(self._cells, self._consumed) if not used)

    @property
    def tile_shape(self) -> tuple:
        """The nominal source-element shape of one tile (boundary tiles are clamped: see element_shape)."""
        return self._tile

    @property
    def element_shape(self) -> tuple:
        """"The number of selected elements along each source dimension" (NkiGrid). A prefix dim consumed by an
        integer index ("indexed one slab at a time") is dropped, as NumPy's integer indexing does (ASSUMED); a
        consumed tiled dim keeps its tile's (clamped) elements."""
        return tuple(sum(b - a for a, b in self._runs(d)) for d in range(len(self._extent))
                     if not (self._consumed[d] and d < self._prefix))

    @property
    def index_step_elements(self) -> tuple:
        """"Each grid-coordinate step in source-element units" (NkiGrid): per navigable coordinate, the cell
        size times the slice step (ASSUMED for a stepped slice)."""
        return tuple(self._cell(d) * self._cells[d].step for d in range(len(self._extent)) if not self._consumed[d])

    @property
    def is_remainder(self) -> bool:
        """Whether the selection holds a clamped boundary cell: a partial tile, or a partial block (ASSUMED
        reading of the truncated attribute text; "Partial final blocks and tiles are retained and clamped to
        the exact source extent", NkiBlockGrid)."""
        return any(b - a < self._cell(d) for d in range(len(self._extent)) for a, b in self._runs(d))

    @property
    def dtype(self):
        """The element dtype of the backing tensor."""
        return self._store.tensor.dtype

    @property
    def buffer(self):
        """The memory region of the backing tensor (nl.sbuf, nl.psum, nl.shared_hbm, ...)."""
        return _region_object(self._store.tensor.buffer)

    # -- the selection as one tensor --------------------------------------------------------------------------
    def _plan(self):
        """How `.data` reads this selection: ("key", index) on a direct store, ("ap", pattern, offset) on a dense
        one, or ("no", reason)."""
        store, ndim = self._store, len(self._extent)
        xs = [self._elements(d) for d in range(ndim)]
        if not store.dense:
            key = []
            for d in range(ndim):
                step = _step(xs[d])
                if step is None:
                    return ("no", f"the elements selected along dim {d} are not evenly spaced (a stepped slice of "
                                  f"cells wider than one element)")
                if self._consumed[d] and d < self._prefix:
                    key.append(int(xs[d][0]))
                else:
                    key.append(slice(int(xs[d][0]), int(xs[d][-1]) + 1, step or 1))
            return ("key", tuple(key))
        offset, pattern = 0, []
        for d in range(ndim):
            if d < self._prefix and not self._consumed[d]:
                return ("no", f"prefix dim {d} is kept, but on chip the partition dim must come first (index the "
                              f"prefix one slab at a time)")
            partition, free = store.placed(d, xs[d])
            if partition is not None:
                if len(np.unique(free)) > 1 or _step(partition) not in (0, 1):
                    return ("no", f"the selection spans {len(self._runs(d))} tile rows of the partition dim "
                                  f"({len(xs[d])} rows > one tile of {store.layout[0]} partitions): one access "
                                  f"pattern walks one tile's partitions")
                offset += int(partition[0]) * store.tensor.shape[1] + int(free[0])
                pattern.append([store.tensor.shape[1], len(xs[d])])
                continue
            step = _step(free)
            if step is None:
                return ("no", f"dim {d}'s selected elements are not evenly spaced in the {store.tensor.buffer} "
                              f"capacity layout (their tiles are not adjacent slots)")
            offset += int(free[0])
            if not (self._consumed[d] and d < self._prefix):
                pattern.append([step or 1, len(xs[d])])
        return ("ap", pattern, offset)

    @property
    def is_data_representable(self) -> bool:
        """"Whether data can represent this selection exactly" (NkiGrid): the selected elements, in their logical
        order, are one access pattern of the storage — every dim's elements evenly spaced (a stepped slice of
        cells wider than one element is not: "A positive-step grid slice can select cells separated by physical
        gaps", nki.language.empty_like) and, on chip, the partition dim within one tile (ASSUMED)."""
        return self._plan()[0] != "no"

    @property
    def data(self) -> NkiTensor:
        """"The exact NkiTensor operand for the selected view" (NkiTileGrid): a view of the storage with shape
        `element_shape`, no copy. A selection that is not one access pattern raises TileGridError (ASSUMED: the
        page text is cut short; index it cell by cell)."""
        plan = self._plan()
        if plan[0] == "no":
            raise TileGridError(f"{type(self).__name__}.data: this selection (element_shape {self.element_shape}, "
                                f"{self._store.tensor.buffer}) is not one access pattern of its storage "
                                f"(is_data_representable is False): {plan[1]}")
        tensor = self._store.tensor
        if plan[0] == "key":
            return tensor[plan[1]]
        return tensor.ap(plan[1], offset=plan[2])

    # -- navigation ---------------------------------------------------------------------------------------------
    def __getitem__(self, key) -> "NkiGrid":
        """Select cells: ints consume a coordinate ("Integer indexing consumes coordinates but retains
        NkiTileGrid"), slices with a positive step keep it; nothing is allocated or moved."""
        key = key if isinstance(key, tuple) else (key,)
        nav = [d for d in range(len(self._extent)) if not self._consumed[d]]
        if sum(k is Ellipsis for k in key) > 1:
            raise IndexError("a grid index can have only one Ellipsis")
        if Ellipsis in key:
            at = key.index(Ellipsis)
            key = key[:at] + (slice(None),) * (len(nav) - len(key) + 1) + key[at + 1:]
        if len(key) > len(nav):
            raise IndexError(f"too many indices for a grid of shape {self.shape}: {len(key)} given, {len(nav)} "
                             f"coordinates")
        cells, consumed = list(self._cells), list(self._consumed)
        for d, k in zip(nav, key):
            k = plain_slice(k) if type(k) is slice else plain(k)
            if isinstance(k, NkiTensor) or _is_register(k):
                raise TypeError(f"grid index {k!r}: trnlab's tile grids take compile-time ints and slices; run-time "
                                f"indices (an NkiScalar or an SBUF index tensor, AWS's 'Tile-grid indexing and "
                                f"transformations' tutorial) are not supported")
            if isinstance(k, slice):
                if k.step is not None and int(k.step) <= 0:
                    raise TileGridError(f"grid slice {k} on coordinate {nav.index(d)}: \"A positive-step grid "
                                        f"slice\" (nl.empty_like) — the step must be positive, got {k.step}")
                picked = cells[d][k]
                if len(picked) == 0:
                    raise TileGridError(f"grid slice {k} on coordinate {nav.index(d)} of {len(cells[d])} selects "
                                        f"no cell")
                cells[d] = picked
            elif isinstance(k, (int, np.integer)) and not isinstance(k, bool):
                n = len(cells[d])
                if not -n <= int(k) < n:
                    raise IndexError(f"grid index {int(k)} on coordinate {nav.index(d)}: the coordinate has {n} "
                                     f"cells (0 .. {n - 1})")
                c = cells[d][int(k)]
                cells[d], consumed[d] = range(c, c + 1), True
            else:
                raise TypeError(f"grid index {k!r} ({type(k).__name__}): use ints and slices")
        return type(self)._make(self._store, self._origin, self._extent, self._prefix, self._tile, self._block,
                                cells, consumed)

    def __iter__(self):
        raise TypeError(f"a {type(self).__name__} is not iterable: loop over range(grid.shape[d]) and index it")

    def _region(self, call: str):
        """(origin, extent) of the selected elements, for a new grid over them (each dim one contiguous run)."""
        origin, extent = [], []
        for d in range(len(self._extent)):
            runs = self._runs(d)
            if any(runs[i][1] != runs[i + 1][0] for i in range(len(runs) - 1)):
                raise TileGridError(f"{call} of a grid selection with gaps along dim {d} (a stepped slice): the "
                                    f"region must be one contiguous run of cells")
            origin.append(self._origin[d] + runs[0][0])
            extent.append(runs[-1][1] - runs[0][0])
        return tuple(origin), tuple(extent)

    def _geometry(self) -> tuple:
        """(extent, prefix, consumed) of storage packing this selection densely — consumed prefix slabs dropped,
        "The destination packs those cells densely while preserving their logical hierarchy and boundary
        extents" (nki.language.empty_like)."""
        keep = [d for d in range(len(self._extent)) if not (self._consumed[d] and d < self._prefix)]
        extent = tuple(sum(b - a for a, b in self._runs(d)) for d in keep)
        prefix = sum(1 for d in keep if d < self._prefix)
        return extent, prefix, tuple(self._consumed[d] for d in keep)

    def __repr__(self) -> str:
        block = f", block_shape={self._block}" if self._block is not None else ""
        return (f"{type(self).__name__}(shape={self.shape}, tile_shape={self._tile}{block}, "
                f"element_shape={self.element_shape}, {self._store.tensor.buffer}, {np.dtype(self.dtype).name})")


class NkiTileGrid(NkiGrid):
    """nki.language.NkiTileGrid: "A tensor view navigated in tile coordinates" — "Each tiled entry in
    NkiGrid.shape counts tiles, while NkiGrid.tile_shape gives the nominal source-element shape of one tile.
    Untiled HBM dimensions form a leading prefix and are indexed one slab at a time" (AWS, latest)."""

    __slots__ = ()


class NkiBlockGrid(NkiGrid):
    """nki.language.NkiBlockGrid: "A tensor view navigated in block coordinates" — "NkiGrid.shape counts blocks,
    block_shape gives tiles per block"; "Partial final blocks and tiles are retained and clamped to the exact
    source extent" (AWS, latest)."""

    __slots__ = ()

    @property
    def block_shape(self) -> tuple:
        """Tiles per block along each tiled dim."""
        return self._block


def _grid_of(kind: type, geometry: tuple, tile: tuple, block, dtype, memory: str, name: str, address,
             transpose_axes=None) -> NkiGrid:
    """A new grid of `kind` over fresh storage of `geometry` (extent, prefix, consumed): every cell selected, the
    dims consumed in `geometry` consumed again (their one cell)."""
    extent, prefix, consumed = geometry
    if transpose_axes is not None:
        extent, tile, block, consumed = _transposed(extent, prefix, tile, block, consumed, transpose_axes, memory)
    store = _Store.allocate(extent, prefix, tile, dtype, memory, name, address)
    return kind._make(store, (0,) * len(extent), extent, prefix, tile, block, consumed=consumed)


def _transposed(extent, prefix, tile, block, consumed, axes, memory):
    """The geometry with its tiled dims in `axes` order: "transpose_axes prepares an SBUF destination for a later
    nki.isa.dma_transpose()"; "Supported tiled-dimension orders are (1, 0), (2, 1, 0), and (3, 1, 2, 0)"; "The
    source free extent that becomes the destination partition extent must not exceed 128" (nki.language.empty_like)."""
    axes = tuple(axes) if isinstance(axes, (tuple, list)) else axes
    rank = len(tile)
    if memory != "sbuf":
        raise TileGridError(f"transpose_axes prepares an SBUF destination, got buffer {memory}")
    if prefix or TRANSPOSES.get(rank) != axes:
        raise TileGridError(f"transpose_axes={axes} for {prefix} untiled and {rank} tiled dims: supported orders "
                            f"are (1, 0), (2, 1, 0) and (3, 1, 2, 0), over the tiled dims only")
    permute = lambda values: tuple(values[a] for a in axes)  # noqa: E731
    tile = permute(tile)
    if min(tile[0], extent[axes[0]]) > PARTITIONS:
        raise TileGridError(f"transpose_axes={axes}: the destination partition extent {tile[0]} exceeds "
                            f"{PARTITIONS}")
    return permute(extent), tile, None if block is None else permute(block), permute(consumed)


# -- nl.tiles / nl.blocks -------------------------------------------------------------------------------------------
def _regrid(kind: type, source, tile_shape, block_shape, call: str) -> NkiGrid:
    if isinstance(source, NkiGrid):
        tile = source._tile if tile_shape is None else _int_tuple(tile_shape, "tile_shape", call, min_rank=2)
        if len(tile) != len(source._tile):
            raise TileGridError(f"{call}: tile_shape {tile} has {len(tile)} dims, the grid tiles {len(source._tile)}")
        if block_shape is None and kind is NkiBlockGrid:
            block_shape = source._block
        origin, extent = source._region(call)
        prefix = source._prefix
        consumed = tuple(source._consumed[d] if d < prefix else False for d in range(len(extent)))
        store = source._store
    elif isinstance(source, NkiTensor):
        source._ready()
        if tile_shape is None:
            raise TileGridError(f"{call} of a tensor needs tile_shape= (the source-element shape of one tile)")
        tile = _int_tuple(tile_shape, "tile_shape", call, min_rank=2)
        if len(tile) > source.ndim:
            raise TileGridError(f"{call}: tile_shape {tile} has more dims than the tensor {tuple(source.shape)}")
        prefix = source.ndim - len(tile)
        if prefix and source.buffer in ON_CHIP:
            raise TileGridError(f"{call}: on an {source.buffer} tensor {tuple(source.shape)} tile_shape must cover "
                                f"every dim (untiled prefix dims are HBM's); got {tile}")
        origin, extent, consumed = (0,) * source.ndim, tuple(int(n) for n in source.shape), None
        store = _Store(source)
    else:
        raise TypeError(f"{call}: source must be an NkiTensor, NkiTileGrid or NkiBlockGrid, got "
                        f"{type(source).__name__}")
    block = None
    if kind is NkiBlockGrid:
        block = _int_tuple(block_shape, "block_shape", call)
        if len(block) != len(tile):
            raise TileGridError(f"{call}: block_shape {block} must have the rank of tile_shape {tile}")
    grid = kind._make(store, origin, extent, prefix, tile, block)
    if consumed is not None and any(consumed):      # prefix slabs the source consumed stay consumed
        grid._consumed = consumed
    return grid


def tiles(source, *, tile_shape: tuple | None = None) -> NkiTileGrid:
    """nl.tiles(source, *, tile_shape=None): "Decompose a tensor into a logical grid of fixed-size tiles"; the
    grid "is a view over source, indexed by tile coordinate"; `tile_shape` applies to the trailing dims, the
    leading (HBM) dims stay an untiled prefix (AWS, nki.language.tiles, latest). Of a grid or a selection (a
    block, "a block-to-tile transition"), a tile grid over its region: with no tile_shape the source's tiles,
    every tiled coordinate navigable again (ASSUMED)."""
    return _regrid(NkiTileGrid, source, tile_shape, None, "nl.tiles")


def blocks(source, *, tile_shape: tuple | None = None, block_shape: tuple) -> NkiBlockGrid:
    """nl.blocks(source, *, tile_shape=None, block_shape): "Create a block view over a tensor where each block
    contains multiple tiles"; "block_shape is expressed in tile counts"; "Creating, regrouping, slicing, or
    indexing a block grid allocates no storage, copies no data, and emits no instruction" (AWS, latest)."""
    return _regrid(NkiBlockGrid, source, tile_shape, block_shape, "nl.blocks")


# -- allocation -------------------------------------------------------------------------------------------------------
def _alloc(kind: type, call: str, tile_shape, block_shape, element_shape, buffer, dtype, address, name) -> NkiGrid:
    tile = _int_tuple(tile_shape, "tile_shape", call, min_rank=2)
    extent = _int_tuple(element_shape, "element_shape", call)
    memory = _memory(buffer, call)
    if len(tile) > len(extent):
        raise TileGridError(f"{call}: tile_shape {tile} has greater rank than element_shape {extent}")
    prefix = len(extent) - len(tile)       # on chip, prefix slabs are more tiles of the capacity layout
    block = None
    if kind is NkiBlockGrid:
        block = _int_tuple(block_shape, "block_shape", call)
        if len(block) != len(tile):
            raise TileGridError(f"{call}: block_shape {block} must have the rank of tile_shape {tile}")
    return _grid_of(kind, (extent, prefix, (False,) * len(extent)), tile, block, dtype, memory, name, address)


def alloc_tiles(*, tile_shape: tuple, element_shape: tuple, buffer, dtype, address: tuple | None = None,
                name: str = "") -> NkiTileGrid:
    """nl.alloc_tiles: "Allocate independent, uninitialized storage organized as a grid of tiles"; "owns one
    backing allocation and provides both tile navigation and an aggregate NkiGrid.data operand"; tile_shape
    "must be a tuple containing at least two exact Python integers and applies to the trailing dimensions of
    element_shape" (AWS, nki.language.alloc_tiles, latest). HBM: a tensor of element_shape; SBUF / PSUM: the
    dense capacity layout (module docstring), an untiled prefix slab's tiles after the previous slab's."""
    return _alloc(NkiTileGrid, "nl.alloc_tiles", tile_shape, None, element_shape, buffer, dtype, address, name)


def alloc_blocks(*, tile_shape: tuple, block_shape: tuple, element_shape: tuple, buffer, dtype,
                 address: tuple | None = None, name: str = "") -> NkiBlockGrid:
    """nl.alloc_blocks: "the same tile geometry as nki.language.alloc_tiles(), then adds a block-coordinate level
    above it"; "Block grouping does not change physical tile order or add per-block allocations" (AWS, latest)."""
    return _alloc(NkiBlockGrid, "nl.alloc_blocks", tile_shape, block_shape, element_shape, buffer, dtype, address,
                  name)


def empty_like(x, dtype=None, buffer=None, name: str = "", *, transpose_axes: tuple | None = None,
               address: tuple | None = None, **kwargs):
    """nl.empty_like(x, dtype=None, buffer=None, name='', *, transpose_axes=None, address=None): "Allocate
    independent, uninitialized storage with matching geometry"; "Grid inputs preserve the concrete grid type,
    navigation shape, tile shape, block grouping, and exact remainder extents" (AWS, nki.language.empty_like,
    v2.33.0 / latest). A tensor goes to trnlab's nl.empty_like as before (transpose_axes permutes its shape)."""
    from trnlab.nki import language_tiles
    if not isinstance(x, (NkiTensor, NkiGrid)):
        raise TypeError(f"nl.empty_like: x must be an NkiTensor, NkiTileGrid or NkiBlockGrid, got {type(x).__name__}")
    if isinstance(x, NkiTensor) and transpose_axes is None and address is None:
        return language_tiles.empty_like(x, dtype, buffer=buffer, name=name, **kwargs)
    memory = (x._store.tensor.buffer if isinstance(x, NkiGrid) else x.buffer) if buffer is None else \
        language_tiles._buffer_name(buffer)
    dtype = x.dtype if dtype is None else dtype
    if isinstance(x, NkiGrid):
        return _grid_of(type(x), x._geometry(), x._tile, x._block, dtype, memory, name, address, transpose_axes)
    shape = tuple(int(n) for n in x.shape)
    if transpose_axes is not None:
        shape = _transposed_shape(shape, transpose_axes, memory, "nl.empty_like")
    return _new_tensor(shape, dtype, memory, name, address)


def _transposed_shape(shape: tuple, axes, memory: str, call: str) -> tuple:
    """A tensor's shape for a dma_transpose destination (the orders and limit of `_transposed`)."""
    axes = tuple(axes)
    if memory != "sbuf" or TRANSPOSES.get(len(shape)) != axes:
        raise TileGridError(f"{call}(transpose_axes={axes}) of a {len(shape)}-d shape into {memory}: an SBUF "
                            f"destination, orders (1, 0), (2, 1, 0) and (3, 1, 2, 0)")
    shape = tuple(shape[a] for a in axes)
    if shape[0] > PARTITIONS:
        raise TileGridError(f"{call}(transpose_axes={axes}): the destination partition extent {shape[0]} exceeds "
                            f"{PARTITIONS}")
    return shape


# -- stream pools ------------------------------------------------------------------------------------------------------
def _mark_kernel_slot(tensor: NkiTensor) -> None:
    """Mark the slot's program buffer as storage the kernel controls, which address rotation leaves as written
    (`hardware/versions.py`): "What the kernel controls is the storage itself" (Software pipelining tutorial)."""
    core = tensor._launch.core
    program = getattr(core, "program", None)
    if program is not None and hasattr(core, "buffer_of"):
        program.buffers[core.buffer_of(tensor._hw)].kernel_slot = True


class NkiStreamBuffers:
    """nki.language.NkiStreamBuffers: "A reusable pool of on-chip slots addressed by logical stream iteration";
    "buffers[k] maps logical iteration k to physical slot k % buffers.num_slots" and returns "an NkiTensor,
    NkiTileGrid, or NkiBlockGrid matching the source abstraction"; the last partial step "a clamped zero-copy view
    over its full-capacity physical slot"; "Selecting a slot allocates no storage, moves no data, and emits no
    instruction"; "The compiler enforces memory dependencies, including waits before a slot is overwritten"
    (AWS, latest). Here each slot is one buffer the kernel reuses: a reload waits for the slot's last readers
    (the normal dependency tracking), so one slot serialises load and compute and two overlap them."""

    __slots__ = ("_view", "_slots", "_transpose", "num_slots", "dim", "buffer", "dtype")

    def __init__(self, **kwargs):
        raise TypeError("NkiStreamBuffers is not constructed directly: use nl.alloc_stream_buffers()")

    def _step(self, k: int):
        key = (slice(None),) * self.dim + (k,)
        return self._view[key]

    def __getitem__(self, k):
        if type(k) is LoopIndex:
            k = int(k)             # slot k % num_slots is not affine in k: the loop is traced concretely
        if _is_register(k):
            raise TypeError("NkiStreamBuffers index from nl.fori_loop: \"Indices from nl.fori_loop are compiled "
                            "variables and are unsupported\" (nki.language.NkiStreamBuffers); iterate with "
                            "range(source.shape[dim])")
        if type(k) is not int and not isinstance(k, np.integer):
            raise TypeError(f"NkiStreamBuffers index {k!r} ({type(k).__name__}): indices must be nonnegative "
                            f"compile-time Python ints")
        k = int(k)
        steps = self._view.shape[self.dim]
        if k < 0:
            raise TileGridError(f"NkiStreamBuffers index {k}: negative indexing is not supported (indices are "
                                f"logical stream steps 0 .. {steps - 1})")
        if k >= steps:
            raise IndexError(f"NkiStreamBuffers index {k}: the stream has {steps} steps along dim {self.dim} "
                             f"(0 .. {steps - 1})")
        slot = self._slots[k % self.num_slots]
        if isinstance(slot, NkiTensor):
            return slot
        extent, prefix, consumed = self._step(k)._geometry()
        tile, block = slot._tile, slot._block
        if self._transpose is not None:
            extent, tile, block, consumed = _transposed(extent, prefix, self._view._tile, self._view._block,
                                                        consumed, self._transpose, "sbuf")
        return type(slot)._make(slot._store, slot._origin, extent, prefix, tile, block, consumed=consumed)

    def __iter__(self):
        raise TypeError("NkiStreamBuffers is not iterable (\"implicit iteration ... not supported\"): index it with "
                        "range(source.shape[dim])")

    def __len__(self):
        raise TypeError("NkiStreamBuffers has no length (\"sequence length ... not supported\"): the stream has "
                        "source.shape[dim] steps")

    def __repr__(self) -> str:
        return f"NkiStreamBuffers(num_slots={self.num_slots}, dim={self.dim}, {self.buffer!r}, slot={self._slots[0]!r})"


def alloc_stream_buffers(view, *, buffer, dim: int, num_slots: int = 2, dtype=None,
                         transpose_axes: tuple | None = None, address: tuple | None = None,
                         name: str = "") -> NkiStreamBuffers:
    """nl.alloc_stream_buffers: "Allocate reusable on-chip slots while advancing through one view dimension";
    "dim identifies the coordinate in view.shape that advances between stream iterations. Integer-indexing that
    coordinate while retaining every other coordinate defines one step"; "allocates num_slots independent SBUF or
    PSUM destinations of that capacity" (AWS, nki.language.alloc_stream_buffers, latest). Each slot has step 0's
    (the full step's) capacity and is marked as storage the kernel controls (`_mark_kernel_slot`)."""
    call = "nl.alloc_stream_buffers"
    memory = _memory(buffer, call)
    if memory not in ON_CHIP:
        raise TileGridError(f"{call}: slots are SBUF or PSUM work areas, got buffer {memory}")
    if not isinstance(view, (NkiTensor, NkiGrid)):
        raise TypeError(f"{call}: view must be an NkiTensor, NkiTileGrid or NkiBlockGrid, got {type(view).__name__}")
    for what, value in (("dim", dim), ("num_slots", num_slots)):
        if type(value) is not int:
            raise TypeError(f"{call}: {what} must be a Python int, got {value!r}")
    shape = tuple(view.shape)
    if not 0 <= dim < len(shape):
        raise TileGridError(f"{call}: dim={dim} is not a coordinate of view.shape {shape}")
    if num_slots < 1:
        raise TileGridError(f"{call}: num_slots={num_slots}, at least one slot is needed")
    tracer = getattr(_launches.current(), "loop_tracer", None)
    if tracer is not None and tracer.running:       # a pool declared in a loop body: every iteration runs
        _loops.run_concretely(_launches.current(), "a stream-buffer allocation")
    pool = object.__new__(NkiStreamBuffers)
    pool._view, pool.dim, pool.num_slots, pool._transpose = view, dim, num_slots, transpose_axes
    pool.buffer, pool.dtype = _region_object(memory), view.dtype if dtype is None else dtype
    first = pool._step(0)
    _check_address(address, memory)
    slots, width = [], 0
    for s in range(num_slots):
        # ASSUMED: with an address, slot s starts s slot-widths (bytes per partition) after it
        where = None if address is None else (address[0], address[1] + s * width)
        if isinstance(view, NkiGrid):
            slot = _grid_of(type(first), first._geometry(), first._tile, first._block, pool.dtype, memory,
                            name or "stream", where, transpose_axes)
            tensor = slot._store.tensor
        else:
            step_shape = tuple(int(n) for n in first.shape)
            if transpose_axes is not None:
                step_shape = _transposed_shape(step_shape, transpose_axes, memory, call)
            slot = tensor = _new_tensor(step_shape, pool.dtype, memory, name or "stream", where)
        width = math.prod(tensor.shape[1:]) * np.dtype(tensor.dtype).itemsize
        _mark_kernel_slot(tensor)
        slots.append(slot)
    pool._slots = tuple(slots)
    return pool


__all__ = ["NkiGrid", "NkiTileGrid", "NkiBlockGrid", "NkiStreamBuffers", "tiles", "blocks", "alloc_tiles",
           "alloc_blocks", "alloc_stream_buffers", "empty_like", "TileGridError"]


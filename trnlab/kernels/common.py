"""Tile helpers shared by the kernels of trnlab.kernels (plain functions that issue nl/nisa calls).

They run inside an @nki.jit kernel like any other NKI code. Conventions of the whole library:

- HBM tensors arrive in PyTorch's layout (row-major, the last axis contiguous); a kernel puts the rows
  it works on across the 128 partitions and the last axis along the free dimension.
- Tile extents are Python ints at trace time (trnlab traces kernels in Python), so an edge tile is just
  a smaller tile: `rows = min(128, R - r0)` and the slice `x[r0:r0 + rows]`. AWS's compiler, where
  `nl.affine_range` iterators are symbolic, expresses the same with `mask=(r0 + i_p < R)`; softmax.py
  shows that form.
- Sums across partitions (over rows) go through the Tensor engine: a matmul with a ones vector, which
  also accumulates over row tiles in PSUM for free.
- Loads are issued one tile ahead (`double_buffered`). trnlab issues instructions in program order,
  and each engine (and the DMA engines as a whole) works through its queue in that order, so a kernel
  that loads tile i+1 only after storing tile i waits for that store. AWS's compiler overlaps affine_range
  iterations by itself; here the kernel writes the overlap out, which is also what hand-tuned NKI
  kernels do. Loads keep the input dtype (a cast would sit in the Vector engine's queue ahead of the
  current tile's work); the first instruction that reads a tile writes fp32.
"""
from __future__ import annotations

import math

import trnlab.nki.isa as nisa
import trnlab.nki.language as nl


def num_tiles(extent: int, tile: int) -> int:
    """How many tiles of `tile` cover `extent` (the last one possibly short)."""
    return math.ceil(extent / tile)


def tile_extent(index: int, tile: int, extent: int) -> tuple[int, int]:
    """(start, size) of tile `index` of `tile` elements along an axis of `extent` elements."""
    start = index * tile
    return start, min(tile, extent - start)


def row_tiles(extent: int, tile: int | None = None) -> list[tuple[int, int]]:
    """(start, size) of each tile of `tile` (default 128, the partitions) covering `extent` rows."""
    tile = tile or nl.tile_size.pmax
    return [tile_extent(t, tile, extent) for t in range(num_tiles(extent, tile))]


def double_buffered(tiles, load):
    """Yield (tile, load(tile)) for each tile, issuing the loads of the next tile before the caller
    works on (and stores) the current one: the next tile's DMA overlaps this tile's compute."""
    tiles = list(tiles)
    upcoming = load(tiles[0]) if tiles else None
    for i, tile in enumerate(tiles):
        current = upcoming
        if i + 1 < len(tiles):
            upcoming = load(tiles[i + 1])
        yield tile, current


def transpose_to_sbuf(tile, dtype=None):
    """[P, F] SBUF tile -> [F, P] SBUF tile: nc_transpose on the Tensor engine (into PSUM), then a copy out.

    P, F <= 128. This is how NKI moves an axis onto the partitions when the data arrives row-major
    (a transposing DMA would read one element per descriptor and is far slower on the device). The copy
    out of PSUM runs on the Scalar engine, leaving the Vector engine to the kernel's element-wise work.
    """
    transposed = nl.transpose(tile)                                                  # [F, P] in PSUM
    # PSUM -> SBUF on the Scalar engine: the Vector engine has the element-wise work of most kernels
    return nisa.tensor_copy(transposed, dtype=dtype or tile.dtype, engine=nisa.engine.scalar)


def load_row(vector, dtype=None):
    """A 1-D HBM vector [n] as a [1, n] SBUF tile (one partition)."""
    (n,) = vector.shape
    row = nl.ndarray((1, n), dtype=vector.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=row, src=vector)
    if dtype is not None and dtype != vector.dtype:
        return nl.copy(row, dtype=dtype)
    return row


def broadcast_rows(row, partitions: int, dtype=nl.float32):
    """A [1, n] SBUF tile repeated on `partitions` partitions: [partitions, n] (ones-vector matmul per 512)."""
    n = row.shape[1]
    spread = nl.ndarray((partitions, n), dtype=dtype, buffer=nl.sbuf)
    ones = nl.ones((1, partitions), dtype=row.dtype)                    # [K=1, M=partitions]
    width = nl.tile_size.gemm_moving_fmax
    for c in nl.affine_range(num_tiles(n, width)):
        c0, cols = tile_extent(c, width, n)
        product = nl.ndarray((partitions, cols), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=product, stationary=ones, moving=row[:, c0:c0 + cols])
        nisa.tensor_copy(dst=spread[:, c0:c0 + cols], src=product)
    return spread


def load_per_partition(vector, start: int, size: int, dtype=nl.float32):
    """Elements start:start+size of a 1-D HBM vector as a [size, 1] tile (one value per partition)."""
    column = nl.ndarray((size, 1), dtype=vector.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=column, src=vector[start:start + size])
    if dtype != vector.dtype:
        return nl.copy(column, dtype=dtype)
    return column

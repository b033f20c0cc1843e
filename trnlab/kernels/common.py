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


def transpose_to_sbuf(tile, dtype=None):
    """[P, F] SBUF tile -> [F, P] SBUF tile: nc_transpose on the Tensor engine (into PSUM), then a copy out.

    P, F <= 128. This is how NKI moves an axis onto the partitions when the data arrives row-major
    (a transposing DMA would read one element per descriptor and is far slower on the device).
    """
    transposed = nl.transpose(tile)                          # [F, P] in PSUM
    return nl.copy(transposed, dtype=dtype or tile.dtype)    # PSUM -> SBUF


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

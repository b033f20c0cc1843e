"""Cast: a tensor to another dtype (the `convert` ops that auto-cast inserts before a bf16 matmul).

Layout: x [R, C] (flatten leading axes first) -> [R, C] in `dtype`. 128 rows per tile on the
partitions, C in pieces of at most 2048 elements; one Vector-engine tensor_copy per tile converts
(DMA does not convert [nki.isa.dma_copy]), the next tile's load issued first.
"""
from __future__ import annotations

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.kernels.common import double_buffered, row_tiles

FREE_TILE = 2048                       # elements per partition per instruction


@nki.jit
def cast(x, dtype="bfloat16"):
    """x [R, C] -> [R, C] in `dtype` (round to nearest even, as the engines round)."""
    R, C = x.shape
    target = getattr(nl, dtype) if isinstance(dtype, str) else dtype
    out = nl.ndarray((R, C), dtype=target, buffer=nl.shared_hbm)
    tiles = [(rows, cols) for rows in row_tiles(R) for cols in row_tiles(C, FREE_TILE)]

    def load(tile):
        (r0, rows), (c0, cols) = tile
        return nl.load(x[r0:r0 + rows, c0:c0 + cols])

    for ((r0, rows), (c0, cols)), x_tile in double_buffered(tiles, load):
        y = nl.ndarray((rows, cols), dtype=target, buffer=nl.sbuf)
        nisa.tensor_copy(dst=y, src=x_tile)
        nl.store(out[r0:r0 + rows, c0:c0 + cols], value=y)
    return out

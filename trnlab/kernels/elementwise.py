"""Element-wise addition: residual connections, and summing gradients that reach one tensor twice.

Layout: a, b [R, C] (flatten leading axes first) -> a + b [R, C] in a's dtype. 128 rows per tile on
the partitions, C along the free axis in pieces of at most 2048; one Vector-engine tensor_tensor per
tile, the next tile's loads issued first (common.double_buffered). In a GPT: x + attn(ln_1(x)),
x + mlp(ln_2(x)), wte(idx) + wpe(pos); in the backward, the two gradients of each residual stream and
the two gradients of the token table that the lm_head shares.
"""
from __future__ import annotations

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.kernels.common import double_buffered, row_tiles

FREE_TILE = 2048                       # elements per partition per instruction


@nki.jit
def add(a, b):
    """a + b for a, b [R, C] -> [R, C] (fp32 inside the engine, rounded once to a's dtype)."""
    if tuple(a.shape) != tuple(b.shape):
        raise ValueError(f"add: shapes differ: a {tuple(a.shape)}, b {tuple(b.shape)}")
    R, C = a.shape
    out = nl.ndarray((R, C), dtype=a.dtype, buffer=nl.shared_hbm)
    tiles = [(rows, cols) for rows in row_tiles(R) for cols in row_tiles(C, FREE_TILE)]

    def load(tile):
        (r0, rows), (c0, cols) = tile
        return nl.load(a[r0:r0 + rows, c0:c0 + cols]), nl.load(b[r0:r0 + rows, c0:c0 + cols])

    for ((r0, rows), (c0, cols)), (a_tile, b_tile) in double_buffered(tiles, load):
        total = nl.ndarray((rows, cols), dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=total, data1=a_tile, data2=b_tile, op=nl.add)
        nl.store(out[r0:r0 + rows, c0:c0 + cols], value=total)
    return out
